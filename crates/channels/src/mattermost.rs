//! Hawk's `loop` channel: Loop is a Mattermost-compatible messenger, so its incoming webhook takes
//! `POST <endpoint>` with JSON `{"text": …}` in Markdown. Failures are classified like Slack's.

use klaxon_core::NotificationTask;

use crate::http_client::{body_detail, label, parse_http_endpoint};
use crate::render::{MessageContext, LOOP};
use crate::{Channels, Delivered, DeliveryError};

impl Channels {
    pub(crate) async fn deliver_loop(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<Delivered, DeliveryError> {
        let url = parse_http_endpoint(&task.endpoint, "loop")?;
        let what = label("loop", &url);
        let text = self.inner.renderer.render_with(LOOP, task, ctx)?;
        let body = serde_json::json!({ "text": text });
        let secrets = [task.endpoint.as_str()];
        let answer = self
            .inner
            .http
            .post(
                &url,
                "application/json",
                &[],
                body.to_string().into_bytes(),
                &what,
                &secrets,
            )
            .await?;
        // Mattermost explains failures in a JSON or plain-text body.
        answer.check(&what, &body_detail(&answer.body, &secrets))?;
        Ok(Delivered { messages: 1 })
    }
}
