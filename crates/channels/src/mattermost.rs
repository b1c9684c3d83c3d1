//! Hawk's `loop` channel: Loop is a Mattermost-compatible messenger, so its incoming webhook takes
//! `POST <endpoint>` with JSON `{"text": …}` in Markdown. Failures are classified like Slack's. Tenant text is
//! neutralised by [`crate::render::escape_loop`] (no mentions, links, formatting).

use klaxon_core::NotificationTask;

use crate::render::{MessageContext, LOOP};
use crate::{Channels, Delivered, DeliveryError};

impl Channels {
    /// The JSON body POSTed to the webhook.
    pub(crate) fn loop_body(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<String, DeliveryError> {
        let text = self.inner.renderer.render_with(LOOP, task, ctx)?;
        Ok(serde_json::json!({ "text": text }).to_string())
    }

    pub(crate) async fn deliver_loop(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<Delivered, DeliveryError> {
        // Mattermost explains failures in a JSON or plain-text body.
        let body = || self.loop_body(task, ctx);
        self.inner
            .http
            .post_json_to_endpoint(&task.endpoint, "loop", body)
            .await
    }
}
