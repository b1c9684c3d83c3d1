//! Hawk's `loop` channel: Loop is a Mattermost-compatible messenger, so its incoming webhook takes
//! `POST <endpoint>` with JSON `{"text": …}` in Markdown, sent and classified as Slack's is (`http_client.rs`). Tenant text is
//! neutralised by [`crate::render::escape_loop`] (no mentions, links, formatting).

use klaxon_core::NotificationTask;

use crate::render::{fit, MessageContext, LOOP};

/// Mattermost's limit for a post, in characters (its server's `MaxPostSize`, 16,383 since 5.0; Loop is a
/// Mattermost fork): the webhook's `text` stays within it, escapes included.
pub const LOOP_TEXT_MAX: usize = 16_383;
use crate::{Channels, DeliveryError};

impl Channels {
    /// The JSON body POSTed to the webhook.
    pub(crate) fn loop_body(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<String, DeliveryError> {
        let renderer = &self.inner.renderer;
        let text = fit(
            |room| renderer.render_view(LOOP, &renderer.view_in(task, ctx, room)),
            |text: &String| text.chars().count() <= LOOP_TEXT_MAX,
        )?;
        Ok(serde_json::json!({ "text": text }).to_string())
    }
}
