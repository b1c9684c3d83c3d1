//! Slack messages, and Slack incoming webhooks: `POST <endpoint>` with `text` (the notification in mrkdwn: the text of push
//! notifications, and the fallback for clients that cannot show blocks) and `blocks` (the message as Slack
//! shows it).
//!
//! Tenant text never goes through mrkdwn. mrkdwn has no escape for `*`, `_`, `~` or `` ` ``, so a title like
//! `*boom*` would be bold; Slack's answer for user-defined text is the `rich_text` block ("While it is possible
//! to format text with mrkdwn, rich_text is strongly preferred"), whose `text` elements are shown literally and
//! whose styles (bold, italic) and links are separate fields. So the blocks are built here, element by element,
//! from the view model: our words carry the styles, tenant strings go in plain `text` elements
//! ([`slack_literal`]). In the top-level `text` tenant values are escaped for Slack's control characters and
//! their URLs broken ([`crate::render::escape_slack_text`]); `unfurl_links`/`unfurl_media` are off so a URL in a
//! title never becomes a preview. Signed action links (`--public-url`) end the message as an `actions` block of
//! link buttons ([`actions_block`]), and as `<url|label>` links in `text`.
//!
//! An endpoint that is a channel id goes through the Web API with the operator's bot token instead
//! (`slack_api.rs`), with the same message.

use klaxon_core::NotificationTask;
use serde_json::{json, Value};

use crate::render::{fit, slack_literal, MessageContext, View, ViewKind, SLACK, SLACK_SECTION_MAX};

/// Slack's limit for a message's top-level `text`, in characters.
pub const SLACK_TEXT_MAX: usize = 40_000;
/// Slack's limit for the blocks of a message.
pub const SLACK_BLOCKS_MAX: usize = 50;
use crate::{Channels, DeliveryError};

/// One piece of a line of a Slack message.
pub(crate) enum Piece {
    /// Our words.
    Ours(String),
    /// Our words, bold.
    Bold(String),
    /// Our words, italic.
    Italic(String),
    /// Tenant text: shown literally.
    Tenant { text: String, bold: bool },
    /// A link we built (`--event-url-template`) with a label.
    Link {
        url: String,
        label: String,
        tenant_label: bool,
    },
}

impl Piece {
    fn element(&self) -> Value {
        match self {
            Piece::Ours(t) => json!({"type": "text", "text": t}),
            Piece::Bold(t) => json!({"type": "text", "text": t, "style": {"bold": true}}),
            Piece::Italic(t) => json!({"type": "text", "text": t, "style": {"italic": true}}),
            Piece::Tenant { text, bold: false } => json!({"type": "text", "text": slack_literal(text)}),
            Piece::Tenant { text, bold: true } => {
                json!({"type": "text", "text": slack_literal(text), "style": {"bold": true}})
            }
            Piece::Link {
                url,
                label,
                tenant_label,
            } => {
                let text = if *tenant_label {
                    slack_literal(label)
                } else {
                    label.clone()
                };
                json!({"type": "link", "url": url, "text": text})
            }
        }
    }

    /// Slack refuses empty `text` elements.
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            Piece::Ours(t) | Piece::Bold(t) | Piece::Italic(t) | Piece::Tenant { text: t, .. } => {
                t.is_empty()
            }
            Piece::Link { label, .. } => label.is_empty(),
        }
    }
}

/// The lines of the message, as the other channels' templates say it.
pub(crate) fn lines(v: &View) -> Vec<Vec<Piece>> {
    let tenant = |text: &str| Piece::Tenant {
        text: text.to_owned(),
        bold: false,
    };
    let tenant_bold = |text: &str| Piece::Tenant {
        text: text.to_owned(),
        bold: true,
    };
    let title = v.events.first().map(|e| e.title.as_str()).unwrap_or_default();
    let open_event = |url: &str| Piece::Link {
        url: url.to_owned(),
        label: "Open event".into(),
        tenant_label: false,
    };
    let footer = || vec![Piece::Italic(v.footer())];
    let mut out: Vec<Vec<Piece>> = Vec::new();
    match v.kind {
        ViewKind::Direct => {
            out.push(vec![tenant_bold(title)]);
            // one line each: blocks split between lines, so a long body stays within the blocks' bound
            for line in v.text.iter().flat_map(|t| t.split('\n')) {
                out.push(vec![tenant(line)]);
            }
            return out;
        }
        ViewKind::New => {
            out.push(vec![
                Piece::Bold("New error in project ".into()),
                tenant_bold(&v.project),
            ]);
            out.push(vec![tenant(title)]);
            let mut seen = vec![Piece::Ours("First seen".into())];
            if let Some(url) = &v.url {
                seen.push(Piece::Ours(" · ".into()));
                seen.push(open_event(url));
            }
            out.push(seen);
        }
        ViewKind::Threshold | ViewKind::Users => {
            out.push(vec![tenant_bold(title)]);
            let by = if v.kind == ViewKind::Users { "by " } else { "" };
            out.push(vec![
                Piece::Ours(format!(
                    "Seen {by}{} ({} window, threshold {}) in project ",
                    v.seen, v.window_kind, v.threshold
                )),
                tenant(&v.project),
            ]);
            if let Some(url) = &v.url {
                out.push(vec![open_event(url)]);
            }
        }
        ViewKind::Spike | ViewKind::Reappeared | ViewKind::NoEvents => {
            out.push(vec![tenant_bold(title)]);
            out.push(vec![
                Piece::Ours(format!("{} in project ", v.signal_word)),
                tenant(&v.project),
                Piece::Ours(format!(": {}", v.seen)),
            ]);
            if let Some(url) = &v.url {
                out.push(vec![open_event(url)]);
            }
        }
        ViewKind::Resolved | ViewKind::Acknowledged | ViewKind::Reminder | ViewKind::Escalation => {
            out.push(vec![Piece::Bold(format!("{}: ", v.headline)), tenant_bold(title)]);
            let mut status = vec![Piece::Ours(v.status.clone())];
            if let Some(by) = &v.by {
                status.push(tenant(by));
            }
            status.push(Piece::Ours(v.status_end.clone()));
            out.push(status);
            let mut alert = vec![
                Piece::Ours(match &v.alert_id {
                    Some(id) => format!("Alert {id} in project "),
                    None => "In project ".into(),
                }),
                tenant(&v.project),
            ];
            if let Some(url) = &v.url {
                alert.push(Piece::Ours(" · ".into()));
                alert.push(open_event(url));
            }
            out.push(alert);
        }
        ViewKind::Digest => {
            // a header that names no count starts with the project (no empty text element: Slack refuses one)
            let header = [
                Piece::Bold(v.head_pre.clone()),
                tenant_bold(&v.project),
                Piece::Bold(v.head_post.clone()),
            ];
            out.push(
                header
                    .into_iter()
                    .filter(|p| !matches!(p, Piece::Bold(t) if t.is_empty()))
                    .collect(),
            );
            for e in &v.events {
                let label = match &e.url {
                    Some(url) => Piece::Link {
                        url: url.clone(),
                        label: e.title.clone(),
                        tenant_label: true,
                    },
                    None => tenant(&e.title),
                };
                out.push(if e.counted {
                    vec![Piece::Ours(format!("{} × ", e.count)), label]
                } else {
                    vec![label]
                });
            }
            if v.more > 0 {
                out.push(vec![Piece::Ours(format!("and {} more{}", v.more, v.more_parts))]);
            }
        }
    }
    out.push(footer());
    out
}

/// `rich_text` blocks of at most [`SLACK_SECTION_MAX`] characters of text each (the limit of the section blocks
/// they replace; Slack documents none for `rich_text`), split between lines. A line is at most one title of
/// 1,000 characters (each `<` and `:` followed by a word joiner: 2,000) and our words, so it always fits.
pub(crate) fn rich_text_blocks(v: &View) -> Vec<Value> {
    let mut blocks = Vec::new();
    let mut elements: Vec<Value> = Vec::new();
    let mut size = 0;
    for line in lines(v) {
        let line: Vec<Value> = line
            .iter()
            .filter(|p| !p.is_empty())
            .map(Piece::element)
            .collect();
        // what Slack shows: the element texts as sent, plus the line break
        let len = line
            .iter()
            .map(|e| e["text"].as_str().map_or(0, |t| t.chars().count()))
            .sum::<usize>()
            + 1;
        if !elements.is_empty() && size + len > SLACK_SECTION_MAX {
            blocks.push(rich_text(std::mem::take(&mut elements)));
            size = 0;
        }
        if !elements.is_empty() {
            elements.push(json!({"type": "text", "text": "\n"}));
        }
        elements.extend(line);
        size += len;
    }
    if !elements.is_empty() {
        blocks.push(rich_text(elements));
    }
    blocks
}

/// The action links (`--public-url`) as an `actions` block of link buttons: a button with a `url` opens it in
/// the browser (the console's confirmation page), nothing is posted back to an app. Labels are ours, URLs are
/// ours and at most 2,000 characters (Slack's limit for a button's `url` is 3,000).
pub(crate) fn actions_block(v: &View) -> Option<Value> {
    if v.actions.is_empty() {
        return None;
    }
    let buttons: Vec<Value> = v
        .actions
        .iter()
        .map(|a| {
            json!({
                "type": "button",
                "action_id": format!("klaxon-{}", a.action),
                "text": {"type": "plain_text", "text": a.label},
                "url": a.url,
            })
        })
        .collect();
    Some(json!({"type": "actions", "elements": buttons}))
}

/// The `ack` and `resolve` links of a message with interactive buttons ([`View::open_actions`]) as a small
/// `rich_text` footer, "or open: ack · resolve" (block [`crate::buttons::SLACK_OPEN_LINKS_ID`]: the buttons go
/// before it). None without such links.
pub(crate) fn open_links_block(v: &View) -> Option<Value> {
    if v.open_actions.is_empty() {
        return None;
    }
    let mut elements = vec![json!({"type": "text", "text": "or open: "})];
    for (i, a) in v.open_actions.iter().enumerate() {
        if i > 0 {
            elements.push(json!({"type": "text", "text": " · "}));
        }
        elements.push(json!({"type": "link", "url": a.url, "text": a.label}));
    }
    let mut block = rich_text(elements);
    block["block_id"] = Value::from(crate::buttons::SLACK_OPEN_LINKS_ID);
    Some(block)
}

/// Slack's documented limits (`text` ≤ 40,000 characters, ≤ 50 blocks) and ours (a `rich_text` block shows at
/// most [`SLACK_SECTION_MAX`] characters).
pub(crate) fn within_limits(body: &Value) -> bool {
    let chars = |v: &Value| v.as_str().map_or(0, |t| t.chars().count());
    let blocks = body["blocks"].as_array().map_or(&[][..], Vec::as_slice);
    chars(&body["text"]) <= SLACK_TEXT_MAX
        && blocks.len() <= SLACK_BLOCKS_MAX
        && blocks.iter().filter(|b| b["type"] == "rich_text").all(|b| {
            b.pointer("/elements/0/elements")
                .and_then(Value::as_array)
                .is_some_and(|es| es.iter().map(|e| chars(&e["text"])).sum::<usize>() <= SLACK_SECTION_MAX)
        })
}

pub(crate) fn rich_text(elements: Vec<Value>) -> Value {
    json!({
        "type": "rich_text",
        "elements": [{"type": "rich_text_section", "elements": elements}],
    })
}

impl Channels {
    /// The JSON body POSTed to the webhook.
    pub(crate) fn slack_body(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<String, DeliveryError> {
        Ok(self.slack_message(task, ctx)?.to_string())
    }

    /// The message as JSON (`text`, `blocks`, unfurling off): the incoming webhook's whole body, and what the
    /// Web API's `chat.postMessage` sends with a `channel`.
    pub(crate) fn slack_message(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<Value, DeliveryError> {
        let renderer = &self.inner.renderer;
        fit(
            |room| {
                let view = renderer.view_in(task, ctx, room);
                let text = renderer.render_view(SLACK, &view)?;
                let mut blocks = rich_text_blocks(&view);
                if let Some(actions) = actions_block(&view) {
                    blocks.push(actions);
                }
                if let Some(open) = open_links_block(&view) {
                    blocks.push(open);
                }
                Ok(json!({
                    "text": text,
                    "blocks": blocks,
                    "unfurl_links": false,
                    "unfurl_media": false,
                }))
            },
            within_limits,
        )
    }
}
