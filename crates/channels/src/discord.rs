//! Discord incoming webhooks: `POST <endpoint>` (Discord's "Execute Webhook") with JSON `{"embeds": […],
//! "allowed_mentions": {"parse": []}}`. Discord answers 204 (or 200 with `?wait=true`).
//!
//! The message is a list of embeds within Discord's documented limits: a title of at most
//! [`DISCORD_TITLE_MAX`] characters, a description of at most [`DISCORD_DESCRIPTION_MAX`], at most
//! [`DISCORD_EMBEDS_MAX`] embeds, and at most [`DISCORD_TOTAL_MAX`] characters across every title, description
//! and footer of the message. A single notification is one embed; a digest is a header embed, one embed per
//! group (at most 8) and, when there are more groups, a last embed "and K more".
//!
//! Tenant text is neutralised by [`crate::render::escape_discord`]; `allowed_mentions: {"parse": []}` makes
//! sure that nothing in a message can ping anyone, whatever it contains. A 429 is transient, and the wait
//! Discord asks for is honoured: the JSON body's `retry_after` (seconds, with a fraction), else the
//! `Retry-After` header.

use std::time::Duration;

use klaxon_core::NotificationTask;
use serde_json::{json, Value};

use url::Url;

use crate::http_client::{label, parse_http_endpoint, Answer, Request};
use crate::render::{
    cut, cut_escaped, escape_discord, escape_discord_bounded, fit, MessageContext, View, ViewKind, ROOMS,
};
use crate::slack::{lines, Piece};
use crate::{Channels, Delivered, DeliveryError, Edit, MessageRef};

/// Longest embed title Discord accepts, in characters.
pub const DISCORD_TITLE_MAX: usize = 256;
/// Longest embed description Discord accepts, in characters.
pub const DISCORD_DESCRIPTION_MAX: usize = 4096;
/// Most embeds in one message.
pub const DISCORD_EMBEDS_MAX: usize = 10;
/// Most characters across all embeds of a message (titles, descriptions, footers, field names and values).
pub const DISCORD_TOTAL_MAX: usize = 6000;
/// Most characters of the "Actions" embed's description: the links that fit, in order.
const ACTIONS_MAX: usize = 2000;
/// Groups shown as their own embed in a digest: the header, 8 groups and "and K more" make 10.
const DIGEST_GROUP_EMBEDS: usize = DISCORD_EMBEDS_MAX - 2;

/// Embed colours (the left bar): red for a new error and an escalation, orange for a threshold and a reminder,
/// blue for a digest, green for a resolve, yellow for an acknowledgement, grey otherwise.
fn colour(kind: ViewKind) -> u32 {
    match kind {
        ViewKind::New | ViewKind::Reappeared | ViewKind::NoEvents | ViewKind::Escalation => 0x00ED_4245,
        ViewKind::Threshold | ViewKind::Users | ViewKind::Spike | ViewKind::Reminder => 0x00F2_8C28,
        ViewKind::Digest => 0x0058_65F2,
        ViewKind::Direct => 0x0099_AAB5,
        ViewKind::Resolved => 0x0057_F287,
        ViewKind::Acknowledged => 0x00FE_E75C,
    }
}

/// A line of pieces as Discord Markdown: our words as they are, styles as `**`/`*`, tenant text escaped, our
/// links as `[label](url)`.
fn markdown(line: &[Piece]) -> String {
    let mut out = String::new();
    for piece in line.iter().filter(|p| !p.is_empty()) {
        match piece {
            Piece::Ours(t) => out.push_str(t),
            Piece::Bold(t) => out.push_str(&format!("**{t}**")),
            Piece::Italic(t) => out.push_str(&format!("*{t}*")),
            Piece::Tenant { text, bold: false } => out.push_str(&escape_discord(text)),
            Piece::Tenant { text, bold: true } => out.push_str(&format!("**{}**", escape_discord(text))),
            Piece::Link {
                url,
                label,
                tenant_label,
            } => {
                let label = if *tenant_label {
                    escape_discord(label)
                } else {
                    label.clone()
                };
                out.push_str(&format!("[{label}]({})", discord_url(url)));
            }
        }
    }
    out
}

/// A URL we built, as a Markdown link destination (`(`, `)`, spaces and `<>` percent-encoded).
fn discord_url(url: &str) -> String {
    url.replace('(', "%28")
        .replace(')', "%29")
        .replace(' ', "%20")
        .replace('<', "%3C")
        .replace('>', "%3E")
}

/// The characters Discord counts towards [`DISCORD_TOTAL_MAX`] in one embed.
fn embed_chars(embed: &Value) -> usize {
    ["/title", "/description", "/footer/text", "/author/name"]
        .iter()
        .filter_map(|p| embed.pointer(p).and_then(Value::as_str))
        .map(|s| s.chars().count())
        .sum()
}

/// One embed: a title, a description (omitted when empty), a colour, and optionally a link, footer and time.
fn embed(title: String, description: String, kind: ViewKind) -> Value {
    let mut e = json!({ "title": title, "color": colour(kind) });
    if !description.is_empty() {
        e["description"] = Value::from(description);
    }
    e
}

/// The embeds of a message, from the view model every channel shares.
pub(crate) fn embeds(v: &View) -> Vec<Value> {
    let title = v.events.first().map(|e| e.title.as_str()).unwrap_or_default();
    let footer = v.footer();
    let all = lines(v);
    let body = |from: usize, to: usize| -> String {
        let text = all[from.min(all.len())..to.min(all.len())]
            .iter()
            .map(|l| markdown(l))
            .collect::<Vec<_>>()
            .join("\n");
        cut_escaped(&text, DISCORD_DESCRIPTION_MAX)
    };
    let mut out = match v.kind {
        ViewKind::Direct => {
            let text = v.text.as_deref().unwrap_or_default();
            vec![embed(
                escape_discord_bounded(title, DISCORD_TITLE_MAX),
                escape_discord_bounded(text, DISCORD_DESCRIPTION_MAX),
                v.kind,
            )]
        }
        ViewKind::New => {
            // lines: header, title, "First seen · link", footer
            let header = format!("New error in project {}", escape_discord(&v.project));
            let mut e = embed(cut_escaped(&header, DISCORD_TITLE_MAX), body(1, 3), v.kind);
            if let Some(url) = &v.url {
                e["url"] = Value::from(url.as_str());
            }
            vec![e]
        }
        ViewKind::Threshold
        | ViewKind::Users
        | ViewKind::Spike
        | ViewKind::Reappeared
        | ViewKind::NoEvents => {
            // lines: title, "Seen … in project P" (or "Spike …", "Reappeared …", "No events …"), link, footer
            let mut e = embed(
                escape_discord_bounded(title, DISCORD_TITLE_MAX),
                body(1, all.len().saturating_sub(1)),
                v.kind,
            );
            if let Some(url) = &v.url {
                e["url"] = Value::from(url.as_str());
            }
            vec![e]
        }
        ViewKind::Resolved | ViewKind::Acknowledged | ViewKind::Reminder | ViewKind::Escalation => {
            // lines: "Resolved: title", the status, "Alert … in project P · Open event", footer
            let prefix = format!("{}: ", v.headline);
            let room = DISCORD_TITLE_MAX - prefix.chars().count();
            let mut e = embed(
                format!("{prefix}{}", escape_discord_bounded(title, room)),
                body(1, all.len().saturating_sub(1)),
                v.kind,
            );
            if let Some(url) = &v.url {
                e["url"] = Value::from(url.as_str());
            }
            vec![e]
        }
        ViewKind::Digest => {
            let header = format!("{}{}{}", v.head_pre, escape_discord(&v.project), v.head_post);
            let mut out = vec![embed(
                cut_escaped(&header, DISCORD_TITLE_MAX),
                String::new(),
                v.kind,
            )];
            let groups = v.events.len() + v.more;
            // header + 9 groups fit in 10 embeds; with more, 8 groups and "and K more" (one fewer of each when
            // the action links take the last embed)
            let room = DIGEST_GROUP_EMBEDS + 1 - usize::from(!v.actions.is_empty());
            let shown = if groups > room { room - 1 } else { groups };
            for e in v.events.iter().take(shown) {
                let prefix = if e.counted {
                    format!("{} × ", e.count)
                } else {
                    String::new()
                };
                let room = DISCORD_TITLE_MAX - prefix.chars().count();
                let mut group = embed(
                    format!("{prefix}{}", escape_discord_bounded(&e.title, room)),
                    String::new(),
                    v.kind,
                );
                if let Some(url) = &e.url {
                    group["url"] = Value::from(url.as_str());
                }
                out.push(group);
            }
            if let Some(line) = v.more_after(shown) {
                out.push(embed(line, String::new(), v.kind));
            }
            out
        }
    };
    if v.kind != ViewKind::Direct {
        if let Some(last) = out.last_mut() {
            last["footer"] = json!({ "text": cut(&footer, 2048) });
            last["timestamp"] = Value::from(v.fired_at.as_str());
        }
    }
    if let Some(actions) = actions_embed(v) {
        out.push(actions);
    }
    out
}

/// The action links (`--public-url`) as a last embed of Markdown links, one a line: a webhook that no
/// application owns cannot post buttons. Labels and URLs are ours (a token is base64url, so a link needs no
/// escaping beyond [`discord_url`]).
fn actions_embed(v: &View) -> Option<Value> {
    if v.actions.is_empty() {
        return None;
    }
    // links in order while they fit (a link is ~300 characters; one with a very long public URL and group
    // hash can be ten times that): the rest of the message keeps its room
    let mut description = String::new();
    for a in &v.actions {
        let link = format!("[{}]({})", a.label, discord_url(&a.url));
        let len = description.chars().count() + usize::from(!description.is_empty()) + link.chars().count();
        if len > ACTIONS_MAX {
            break;
        }
        if !description.is_empty() {
            description.push('\n');
        }
        description.push_str(&link);
    }
    (!description.is_empty())
        .then(|| json!({ "title": "Actions", "description": description, "color": colour(v.kind) }))
}

/// Keeps the message within [`DISCORD_TOTAL_MAX`] and [`DISCORD_EMBEDS_MAX`]: the bounds of titles and
/// descriptions and the smallest room already keep it there, this is the guard that makes it a guarantee (the
/// first embed's description is shortened, then trailing embeds dropped).
fn fit_total(embeds: &mut Vec<Value>) {
    embeds.truncate(DISCORD_EMBEDS_MAX);
    let total = |es: &[Value]| es.iter().map(embed_chars).sum::<usize>();
    let over = total(embeds).saturating_sub(DISCORD_TOTAL_MAX);
    if over > 0 {
        if let Some(d) = embeds[0].get("description").and_then(Value::as_str) {
            let keep = d.chars().count().saturating_sub(over);
            embeds[0]["description"] = Value::from(cut_escaped(d, keep.max(1)));
        }
    }
    while total(embeds) > DISCORD_TOTAL_MAX && embeds.len() > 1 {
        embeds.remove(embeds.len() - 2);
    }
}

/// Discord's documented limits: at most 10 embeds, titles ≤ 256 characters, descriptions ≤ 4,096, footers
/// ≤ 2,048, and ≤ 6,000 across them all.
fn within_limits(embeds: &[Value]) -> bool {
    let chars = |e: &Value, p: &str| {
        e.pointer(p)
            .and_then(Value::as_str)
            .map_or(0, |s| s.chars().count())
    };
    embeds.len() <= DISCORD_EMBEDS_MAX
        && embeds.iter().map(embed_chars).sum::<usize>() <= DISCORD_TOTAL_MAX
        && embeds.iter().all(|e| {
            chars(e, "/title") <= DISCORD_TITLE_MAX
                && chars(e, "/description") <= DISCORD_DESCRIPTION_MAX
                && chars(e, "/footer/text") <= 2048
        })
}

/// Discord's own wait on 429: `{"retry_after": 1.5, …}` in seconds (a float), bounded to a day.
fn body_retry_after(body: &str) -> Option<Duration> {
    let v: Value = serde_json::from_str(body).ok()?;
    let secs = v.get("retry_after")?.as_f64()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
}

impl Channels {
    /// The JSON body POSTed to the webhook.
    pub(crate) fn discord_body(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<String, DeliveryError> {
        let renderer = &self.inner.renderer;
        let mut list = fit(
            |room| Ok(embeds(&renderer.view_in(task, ctx, room))),
            |list: &Vec<Value>| within_limits(list),
        )?;
        // the smallest room fits by construction; this guard makes it a guarantee
        fit_total(&mut list);
        Ok(json!({
            "embeds": list,
            "allowed_mentions": {"parse": []},
        })
        .to_string())
    }

    pub(crate) async fn deliver_discord(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
        firing: Option<&MessageRef>,
    ) -> Result<Delivered, DeliveryError> {
        let endpoint = task.endpoint.as_str();
        let url = parse_http_endpoint(endpoint, "discord")?;
        let what = label("discord", &url);
        let body = self.discord_body(task, ctx)?;
        let secrets = [endpoint.trim()];
        let edit = match firing {
            Some(firing) => Some(self.edit_discord(task, ctx, &url, firing, &what, &secrets).await),
            None => None,
        };
        if !Channels::opens_conversation(task) {
            let answer = self
                .inner
                .http
                .post(&url, "application/json", &[], body.into_bytes(), &what, &secrets)
                .await?;
            discord_check(&answer, &what, &secrets)?;
            return Ok(Delivered {
                edit,
                ..Delivered::messages(1)
            });
        }
        // an alert's first firing: `?wait=true` makes Discord answer with the message, whose id later edits use
        let mut wait = url.clone();
        wait.query_pairs_mut().append_pair("wait", "true");
        let answer = self
            .inner
            .http
            .send(
                &wait,
                Request::json(reqwest::Method::POST),
                body.clone().into_bytes(),
                &what,
                &secrets,
            )
            .await?;
        discord_check(&answer, &what, &secrets)?;
        let sent = message_id(&answer.body).map(|message_id| MessageRef {
            message_id,
            destination: Channels::destination_key(task),
            body: Some(body),
        });
        Ok(Delivered {
            sent,
            ..Delivered::messages(1)
        })
    }

    /// Edits the alert's firing message (`PATCH <webhook>/messages/<id>`, the webhook's query such as
    /// `thread_id` kept) to show the state `task` reports; the outcome is only reported, never an error.
    async fn edit_discord(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
        url: &Url,
        firing: &MessageRef,
        what: &str,
        secrets: &[&str],
    ) -> Edit {
        let view = self.inner.renderer.view_in(task, ctx, ROOMS[0]);
        let Some(body) = firing.body.as_deref().and_then(|b| edited_body(b, &view)) else {
            tracing::debug!(notification_id = %klaxon_core::text::one_line(&task.notification_id, 256), "discord: nothing to edit the firing message from");
            return Edit::Failed;
        };
        let Some(target) = message_url(url, &firing.message_id) else {
            return Edit::Failed;
        };
        let result = async {
            let answer = self
                .inner
                .http
                .send(
                    &target,
                    Request::json(reqwest::Method::PATCH),
                    body.into_bytes(),
                    what,
                    secrets,
                )
                .await?;
            discord_check(&answer, what, secrets)
        }
        .await;
        match result {
            Ok(()) => Edit::Edited,
            Err(e) => {
                tracing::info!(
                    channel = "discord",
                    notification_id = %klaxon_core::text::one_line(&task.notification_id, 256),
                    reason = e.reason(),
                    "editing the alert's firing message failed; the message is sent all the same"
                );
                Edit::Failed
            }
        }
    }
}

/// The webhook's `…/messages/<id>` URL (its query, e.g. `thread_id`, kept); None for an id that is not a
/// Discord snowflake (digits), so nothing read back from Redis can change the path.
fn message_url(webhook: &Url, message_id: &str) -> Option<Url> {
    if message_id.is_empty() || message_id.len() > 20 || !message_id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut url = webhook.clone();
    url.path_segments_mut()
        .ok()?
        .pop_if_empty()
        .push("messages")
        .push(message_id);
    Some(url)
}

/// The message id in Discord's `?wait=true` answer (`{"id": "1234…", …}`).
fn message_id(body: &str) -> Option<String> {
    let v: Value = serde_json::from_str(body).ok()?;
    let id = v.get("id")?.as_str()?;
    (!id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit())).then(|| id.to_owned())
}

/// The firing message's request `firing` again, its first embed showing the state `view` (a lifecycle message)
/// reports: the status line in bold above the description, in the state's colour, within Discord's limits.
fn edited_body(firing: &str, view: &View) -> Option<String> {
    let v: Value = serde_json::from_str(firing).ok()?;
    let mut list: Vec<Value> = v.get("embeds")?.as_array()?.clone();
    let first = list.first_mut()?;
    let by = view.by.as_deref().map(escape_discord).unwrap_or_default();
    let state = format!("**{}{by}{}**", view.status, view.status_end);
    let state = cut_escaped(&state, DISCORD_DESCRIPTION_MAX / 2);
    let old = first
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let description = if old.is_empty() {
        state
    } else {
        let room = DISCORD_DESCRIPTION_MAX - state.chars().count() - 1;
        format!("{state}\n{}", cut_escaped(old, room))
    };
    first["description"] = Value::from(description);
    first["color"] = Value::from(colour(view.kind));
    fit_total(&mut list);
    within_limits(&list).then(|| json!({ "embeds": list, "allowed_mentions": {"parse": []} }).to_string())
}

/// Classifies Discord's answer: 2xx delivered; 429 transient after the wait Discord asks for (the body's
/// `retry_after`, more precise than the header's whole seconds); 5xx transient; other 4xx permanent.
fn discord_check(answer: &Answer, what: &str, secrets: &[&str]) -> Result<(), DeliveryError> {
    answer.check_body(what, secrets).map_err(|e| match e {
        DeliveryError::Transient {
            reason,
            retry_after,
            rate_limited,
        } => DeliveryError::Transient {
            rate_limited,
            reason,
            retry_after: body_retry_after(&answer.body).or(retry_after),
        },
        permanent => permanent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discord_retry_after_bodies() {
        let body = r#"{"message": "You are being rate limited.", "retry_after": 0.75, "global": false}"#;
        assert_eq!(body_retry_after(body), Some(Duration::from_millis(750)));
        assert_eq!(body_retry_after(r#"{"retry_after": -1}"#), None);
        assert_eq!(body_retry_after("nope"), None);
        assert_eq!(
            body_retry_after(r#"{"retry_after": 1e12}"#),
            Some(Duration::from_secs(86_400))
        );
    }

    #[test]
    fn cuts_never_leave_half_an_escape() {
        assert_eq!(cut_escaped("ab\\*cd", 4), "ab…");
        assert_eq!(cut_escaped("a\\\\*", 4), "a\\\\*");
        assert_eq!(cut_escaped("abc\\\\def", 6), "abc\\\\…");
    }
}
