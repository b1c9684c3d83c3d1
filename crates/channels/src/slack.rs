//! Slack incoming webhooks: `POST <endpoint>` with `text` (the notification in mrkdwn, also the fallback
//! shown in push notifications) and `blocks` (the same text in section blocks).

use klaxon_core::NotificationTask;

use crate::http_client::{body_detail, label, parse_http_endpoint};
use crate::render::{slack_blocks, MessageContext, SLACK};
use crate::{Channels, Delivered, DeliveryError};

impl Channels {
    /// The JSON body POSTed to the webhook.
    pub(crate) fn slack_body(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<String, DeliveryError> {
        let text = self.inner.renderer.render_with(SLACK, task, ctx)?;
        Ok(serde_json::json!({ "text": text, "blocks": slack_blocks(&text) }).to_string())
    }

    pub(crate) async fn deliver_slack(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<Delivered, DeliveryError> {
        let url = parse_http_endpoint(&task.endpoint, "slack")?;
        let what = label("slack", &url);
        let body = self.slack_body(task, ctx)?;
        let secrets = [task.endpoint.as_str()];
        let answer = self
            .inner
            .http
            .post(&url, "application/json", &[], body.into_bytes(), &what, &secrets)
            .await?;
        // Slack explains failures in a short plain-text body (`invalid_payload`, `no_service`, …).
        answer.check(&what, &body_detail(&answer.body, &secrets))?;
        Ok(Delivered { messages: 1 })
    }
}
