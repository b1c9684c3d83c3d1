//! Hawk's `loop` channel: Loop is a Mattermost-compatible messenger, so its incoming webhook takes
//! `POST <endpoint>` with JSON `{"text": …}` in Markdown, sent and classified as Slack's is (`http_client.rs`). Tenant text is
//! neutralised by [`crate::render::escape_loop`] (no mentions, links, formatting).

use klaxon_core::NotificationTask;

use crate::render::{MessageContext, LOOP};
use crate::{Channels, DeliveryError};

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
}
