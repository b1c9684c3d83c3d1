//! Microsoft Teams through a Workflows (Power Automate) webhook: `POST <endpoint>` with a message whose one
//! attachment is an Adaptive Card (`contentType` `application/vnd.microsoft.card.adaptive`), which the
//! "Post to a channel when a webhook request is received" flow posts as is. The Office 365 connector webhooks
//! (`…webhook.office.com…`, MessageCard) are retired by Microsoft; Klaxon does not speak them.
//!
//! The card is one `RichTextBlock` per line of the message, built from the same pieces as Slack's blocks:
//! our words carry the styles (`weight: Bolder`, `italic`), our links are `TextRun`s with an `Action.OpenUrl`,
//! and tenant text goes in plain `TextRun`s, which take no Markdown ([`crate::render::teams_literal`]). The
//! workflow answers 202 Accepted (200 from some flows); other statuses are classified like Slack's.

use klaxon_core::NotificationTask;
use serde_json::{json, Value};

use crate::render::{fit, teams_literal, MessageContext, View};
use crate::slack::{lines, Piece};
use crate::{Channels, DeliveryError};

/// The Adaptive Card schema version the card uses: 1.4 has `RichTextBlock` and `TextRun.selectAction` and is
/// what Teams renders on every client.
const CARD_VERSION: &str = "1.4";
/// The largest body posted, in bytes: Teams refuses a message over about 28 KB (Microsoft documents "28 KB" for
/// a bot's or a webhook's message); this stays under both readings of it (28,000 and 28,672 bytes).
pub const TEAMS_BODY_MAX: usize = 28_000;
/// `attachments[0].contentType` of an Adaptive Card.
pub const ADAPTIVE_CARD: &str = "application/vnd.microsoft.card.adaptive";

/// One piece as a `TextRun`.
fn run(piece: &Piece) -> Value {
    let text = |t: &str| json!({"type": "TextRun", "text": t});
    match piece {
        Piece::Ours(t) => text(t),
        Piece::Bold(t) => json!({"type": "TextRun", "text": t, "weight": "Bolder"}),
        Piece::Italic(t) => json!({"type": "TextRun", "text": t, "italic": true, "isSubtle": true}),
        Piece::Tenant { text: t, bold: false } => text(&teams_literal(t)),
        Piece::Tenant { text: t, bold: true } => {
            json!({"type": "TextRun", "text": teams_literal(t), "weight": "Bolder"})
        }
        Piece::Link {
            url,
            label,
            tenant_label,
        } => {
            let label = if *tenant_label {
                teams_literal(label)
            } else {
                label.clone()
            };
            json!({
                "type": "TextRun",
                "text": label,
                "color": "Accent",
                "selectAction": {"type": "Action.OpenUrl", "url": url},
            })
        }
    }
}

/// The card's body: one `RichTextBlock` per line.
pub(crate) fn card_body(v: &View) -> Vec<Value> {
    lines(v)
        .iter()
        .map(|line| {
            let inlines: Vec<Value> = line.iter().filter(|p| !p.is_empty()).map(run).collect();
            json!({"type": "RichTextBlock", "inlines": inlines})
        })
        .filter(|b| b["inlines"].as_array().is_some_and(|i| !i.is_empty()))
        .collect()
}

impl Channels {
    /// The JSON body POSTed to the workflow.
    pub(crate) fn teams_body(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<String, DeliveryError> {
        let renderer = &self.inner.renderer;
        fit(
            |room| Ok(card(&renderer.view_in(task, ctx, room)).to_string()),
            |body: &String| body.len() <= TEAMS_BODY_MAX,
        )
    }
}

/// The message for a view: an Adaptive Card with the body's lines and the action links as buttons.
fn card(view: &View) -> Value {
    // the action links (`--public-url`) as the card's buttons: each opens the console's confirmation page
    let actions: Vec<Value> = view
        .actions
        .iter()
        .map(|a| json!({"type": "Action.OpenUrl", "title": a.label, "url": a.url}))
        .collect();
    let mut card = json!({
        "type": "message",
        "attachments": [{
            "contentType": ADAPTIVE_CARD,
            "contentUrl": null,
            "content": {
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard",
                "version": CARD_VERSION,
                "body": card_body(view),
                "msteams": {"width": "Full"},
            },
        }],
    });
    if !actions.is_empty() {
        card["attachments"][0]["content"]["actions"] = Value::from(actions);
    }
    card
}
