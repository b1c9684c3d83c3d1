//! Slack incoming webhooks: `POST <endpoint>` with `text` (the notification in mrkdwn, also the fallback
//! shown in push notifications) and `blocks` (the same text in section blocks).

use klaxon_core::NotificationTask;

use crate::http::{body_detail, label, parse_http_endpoint};
use crate::render::{slack_blocks, SLACK};
use crate::{Channels, Delivered, DeliveryError};

impl Channels {
    pub(crate) async fn deliver_slack(&self, task: &NotificationTask) -> Result<Delivered, DeliveryError> {
        let url = parse_http_endpoint(&task.endpoint, "slack")?;
        let what = label("slack", &url);
        let text = self.inner.renderer.render(SLACK, task)?;
        let body = serde_json::json!({ "text": text, "blocks": slack_blocks(&text) });
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
        // Slack explains failures in a short plain-text body (`invalid_payload`, `no_service`, …).
        answer.check(&what, &body_detail(&answer.body, &secrets))?;
        Ok(Delivered { messages: 1 })
    }
}
