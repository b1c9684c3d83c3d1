//! PagerDuty Events API v2: `POST <--pagerduty-api>/v2/enqueue` with a `trigger` event. The channel's endpoint
//! is the integration's routing key (a secret: it is redacted like a bot token everywhere an endpoint is shown,
//! and scrubbed from every reason).
//!
//! The event's `dedup_key` is the notification id, so a delivery retried after a lost answer is one alert in
//! PagerDuty, not two. An alert's life follows it there: its resolve is a `resolve` event and its
//! acknowledgement an `acknowledge` event (routing key, action and `dedup_key` only, as the Events API v2 asks),
//! and its reminders and escalations (and a later firing while it is still open) are `trigger`s, all with the `dedup_key` of the alert's firing on this
//! channel (`alert.firingNotificationId`), so they land on the PagerDuty alert the firing opened (a trigger on an
//! open alert's key is added to it, not a new incident) and a later resolve closes it. `payload.severity` comes from the rule (`channels.pagerduty.severity`, default `error`),
//! `payload.source` is the project's name (its id when unknown), `payload.summary` says what happened in one
//! line of at most [`PAGERDUTY_SUMMARY_MAX`] characters, and `payload.custom_details` carries the events as data.
//! PagerDuty shows all of it as plain text: tenant text is revealed and kept on one line like everywhere, and
//! needs no escaping.
//!
//! Answers: 202 accepted; 400 (invalid event or routing key) permanent; 429 transient (PagerDuty's rate limit,
//! retried with backoff); 5xx transient.

use klaxon_core::{NotificationTask, Reason};
use serde_json::{json, Value};
use url::Url;

use crate::http_client::label;
use crate::render::{cut, fit, MessageContext, View, ViewKind};
use crate::{Channels, Delivered, DeliveryError};

/// Longest `payload.summary` PagerDuty accepts, in characters.
pub const PAGERDUTY_SUMMARY_MAX: usize = 1024;
/// The largest event PagerDuty accepts, in bytes (512 KB).
pub const PAGERDUTY_EVENT_MAX: usize = 512 * 1024;

/// The one-line summary of a notification.
fn summary(v: &View) -> String {
    let title = v.events.first().map(|e| e.title.as_str()).unwrap_or_default();
    let text = match v.kind {
        ViewKind::New => format!("New error in {}: {title}", v.project),
        ViewKind::Threshold => format!("{title} (seen {} in {})", v.seen, v.project),
        ViewKind::Users => format!("{title} (seen by {} in {})", v.seen, v.project),
        ViewKind::Spike => format!("Spike in {}: {title} ({})", v.project, v.seen),
        ViewKind::Reappeared => format!("Reappeared in {}: {title} ({})", v.project, v.seen),
        ViewKind::NoEvents => format!("No events in {}: {title} ({})", v.project, v.seen),
        ViewKind::Direct => title.to_owned(),
        ViewKind::Digest => format!("{}{}{}: {title}", v.head_pre, v.project, v.head_post),
        ViewKind::Resolved | ViewKind::Acknowledged | ViewKind::Reminder | ViewKind::Escalation => format!(
            "{}: {title} ({}{}{}, in {})",
            v.headline,
            v.status,
            v.by.as_deref().unwrap_or_default(),
            v.status_end,
            v.project
        ),
    };
    cut(&text, PAGERDUTY_SUMMARY_MAX)
}

/// Longest `dedup_key` the Events API accepts.
const DEDUP_KEY_MAX: usize = 255;

/// What an alert's lifecycle task is in PagerDuty: `resolve` or `acknowledge` (no payload), and the key of the
/// alert's firing on this channel, which reminders and escalations (triggers) use too. `None` for a firing.
fn lifecycle(task: &NotificationTask) -> Result<Option<(Option<&'static str>, &str)>, DeliveryError> {
    if !task.reason.is_lifecycle() {
        return Ok(None);
    }
    let key = task
        .alert
        .as_ref()
        .map(|a| a.firing_notification_id.trim())
        .filter(|k| !k.is_empty() && k.len() <= DEDUP_KEY_MAX)
        .ok_or_else(|| {
            DeliveryError::permanent(
                "pagerduty: an alert's message without the alert's firing (no dedup_key)",
            )
        })?;
    let action = match task.reason {
        Reason::Resolved => Some("resolve"),
        Reason::Acknowledged => Some("acknowledge"),
        _ => None,
    };
    Ok(Some((action, key)))
}

/// The `dedup_key` of a PagerDuty trigger of `task` (a firing, a reminder, an escalation step, a digest or a
/// release): the incident it opens or joins, which PagerDuty's webhooks name as `incident_key`. None for
/// another channel, and for an `acknowledge` or `resolve`.
pub fn trigger_key(task: &NotificationTask) -> Option<&str> {
    if task.channel != klaxon_core::ChannelKind::Pagerduty {
        return None;
    }
    match lifecycle(task).ok()? {
        Some((Some(_), _)) => None,
        Some((None, key)) => Some(key),
        None => Some(
            task.alert
                .as_ref()
                .map(|a| a.firing_notification_id.trim())
                .filter(|k| !k.is_empty() && k.len() <= DEDUP_KEY_MAX)
                .unwrap_or(task.notification_id.as_str()),
        ),
    }
}

/// The Events API v2 body for `task` (the routing key included).
pub(crate) fn event(task: &NotificationTask, v: &View) -> Result<Value, DeliveryError> {
    let life = lifecycle(task)?;
    if let Some((Some(action), key)) = life {
        // resolve and acknowledge: the Events API v2 takes no payload for them
        return Ok(json!({
            "routing_key": task.endpoint.trim(),
            "event_action": action,
            "dedup_key": key,
        }));
    }
    // A firing that repeats an open alert (a later window crossing while it is still open) joins the incident
    // the alert's first firing opened, so the alert's resolve closes both.
    let repeat_of = task
        .alert
        .as_ref()
        .map(|a| a.firing_notification_id.trim())
        .filter(|k| !k.is_empty() && k.len() <= DEDUP_KEY_MAX);
    let dedup_key = life.map_or(repeat_of.unwrap_or(task.notification_id.as_str()), |(_, key)| key);
    let events: Vec<Value> = v
        .events
        .iter()
        .map(|e| {
            let mut item = json!({"title": e.title, "count": e.count, "groupHash": e.group_hash});
            if let Some(url) = &e.url {
                item["url"] = Value::from(url.as_str());
            }
            item
        })
        .collect();
    let mut details = json!({
        "project": v.project,
        "projectId": v.project_id,
        "rule": v.rule,
        "notificationId": v.notification_id,
        "firedAt": v.fired_at,
        "what": v.kind.as_str(),
        "events": events,
    });
    if v.more > 0 {
        details["moreGroups"] = Value::from(v.more);
        if !v.more_parts.is_empty() {
            details["more"] = json!({"fired": v.more_fired, "resolved": v.more_resolved});
        }
    }
    if !v.seen.is_empty() {
        details["seen"] = Value::from(v.seen.as_str());
    }
    if let Some(text) = &v.text {
        details["text"] = Value::from(text.as_str());
    }
    if let Some(id) = &v.alert_id {
        details["alertId"] = Value::from(id.as_str());
    }
    let mut body = json!({
        "routing_key": task.endpoint.trim(),
        "event_action": "trigger",
        "dedup_key": dedup_key,
        "client": "Klaxon",
        "payload": {
            "summary": summary(v),
            "source": v.project,
            "severity": task.severity.unwrap_or_default().as_str(),
            "timestamp": v.fired_at,
            "custom_details": details,
        },
    });
    // the event's page, then the action links (`--public-url`): PagerDuty shows `links` on the alert
    let mut links: Vec<Value> = v
        .url
        .iter()
        .map(|url| json!({"href": url, "text": "Open event"}))
        .collect();
    links.extend(v.actions.iter().map(|a| json!({"href": a.url, "text": a.label})));
    if !links.is_empty() {
        body["links"] = Value::from(links);
    }
    Ok(body)
}

impl Channels {
    /// The JSON body POSTed to the Events API.
    pub(crate) fn pagerduty_body(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<String, DeliveryError> {
        let renderer = &self.inner.renderer;
        fit(
            |room| Ok(event(task, &renderer.view_in(task, ctx, room))?.to_string()),
            |body: &String| body.len() <= PAGERDUTY_EVENT_MAX,
        )
    }

    pub(crate) async fn deliver_pagerduty(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<Delivered, DeliveryError> {
        let key = task.endpoint.trim();
        if key.is_empty() {
            return Err(DeliveryError::permanent("pagerduty: no routing key"));
        }
        let url = Url::parse(&format!(
            "{}/v2/enqueue",
            self.inner.pagerduty_api.as_str().trim_end_matches('/')
        ))
        .map_err(|_| DeliveryError::permanent("pagerduty: --pagerduty-api does not make a URL"))?;
        let what = label("pagerduty", &url);
        let body = self.pagerduty_body(task, ctx)?;
        self.inner
            .http
            .post_json(&url, &[], body.into_bytes(), &what, &[key])
            .await?;
        Ok(Delivered::messages(1))
    }
}
