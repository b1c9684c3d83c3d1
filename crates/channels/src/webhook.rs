//! Generic webhooks: the notification as JSON, exactly as docs/webhook.md's schema shows it, signed per the
//! [Standard Webhooks](https://www.standardwebhooks.com/) spec when a master key is configured. Two optional
//! fields are added when known: `projectName` (Hawk's project name) and, per event, `url` (from
//! `--event-url-template`).
//!
//! ```text
//! KLAXON_WEBHOOK_SECRET (master, ≥ 32 bytes) ──HMAC(master, "klaxon webhook v1" ‖ 0 ‖ len ‖ project ‖ len ‖ endpoint)
//!   ──▶ the endpoint's secret
//!   (whsec_<base64 of 32 bytes>; what the tenant is given: API, CLI, console)
//! each attempt: webhook-id = notificationId (the same on every retry), webhook-timestamp = now (Unix s),
//!               webhook-signature = "v1,<base64 HMAC-SHA256(secret, id.timestamp.body)>"
//!               [+ " v1,<…>" under the secret derived from KLAXON_WEBHOOK_SECRET_PREVIOUS during a rotation]
//!               [X-Klaxon-Signature = "sha256=<hex HMAC-SHA256(KLAXON_WEBHOOK_LEGACY_SECRET, body)>", deprecated:
//!                only when that key is set; never made with a master key, which every tenant could then attack]
//! ```
//!
//! Why derived and bound to the project: a secret shared by every tenant lets any tenant forge notifications
//! that every other tenant's receiver accepts. The endpoint's secret depends on the project too, so a tenant
//! who points one of its own rules at another tenant's URL and reads "its" secret for that URL gets a key
//! that verifies only its own deliveries. Deriving (instead of storing a random key per channel) keeps Hawk's
//! rule documents untouched and every process able to sign without a lookup; the cost is that rotating means
//! rotating the master key (every endpoint's secret changes at once), which the previous key makes
//! zero-downtime. Notifications that belong to no project (direct notifications without `projectId`,
//! `klaxon test-notify`) use the secret derived with an empty project.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use klaxon_core::{NotificationEvent, NotificationTask, Reason};
use serde::Serialize;
use sha2::Sha256;

use crate::http_client::{label, parse_http_endpoint};
use crate::render::MessageContext;
use crate::{Channels, Delivered, DeliveryError, Secret};

/// Deprecated header carrying `sha256=<hex HMAC-SHA256 of the body>` under `KLAXON_WEBHOOK_LEGACY_SECRET`; sent
/// beside the Standard Webhooks headers only when that key is set (never made with a master key).
pub const SIGNATURE_HEADER: &str = "X-Klaxon-Signature";
/// Header carrying the notification id (the same on every retry: receivers deduplicate on it).
pub const NOTIFICATION_ID_HEADER: &str = "X-Klaxon-Notification-Id";
/// Standard Webhooks: the message id (our notification id, the same on every retry).
pub const ID_HEADER: &str = "webhook-id";
/// Standard Webhooks: the Unix time (seconds) of this attempt.
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// Standard Webhooks: space-separated `v1,<base64>` signatures.
pub const STANDARD_SIGNATURE_HEADER: &str = "webhook-signature";
/// How far a `webhook-timestamp` may be from the receiver's clock, either way (the spec's 5 minutes).
pub const TOLERANCE_SECS: i64 = 5 * 60;
/// The prefix of a serialized secret (Standard Webhooks, symmetric).
pub const SECRET_PREFIX: &str = "whsec_";
/// Domain separation of the derivation: a master key used for something else never yields these secrets.
const DERIVATION_LABEL: &[u8] = b"klaxon webhook v1";

/// Shortest master key (`KLAXON_WEBHOOK_SECRET`), in bytes: every tenant holds offline oracles of it (its own
/// `whsec_` secrets), so it must be too long to guess, like `KLAXON_ACTION_KEY`.
pub const MIN_MASTER_KEY_LEN: usize = 32;

/// What is wrong with the webhook keys' settings. None of them shows a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeysError {
    /// `KLAXON_WEBHOOK_SECRET` is shorter than [`MIN_MASTER_KEY_LEN`] bytes.
    #[error(
        "KLAXON_WEBHOOK_SECRET must be at least {MIN_MASTER_KEY_LEN} bytes (got {0}): every endpoint's secret is \
         derived from it and each tenant can test guesses of it offline; make one with `openssl rand -base64 32` \
         (to keep old receivers of X-Klaxon-Signature working meanwhile, put the old value in \
         KLAXON_WEBHOOK_LEGACY_SECRET)"
    )]
    MasterTooShort(usize),
    /// A previous key without a current one (what would it rotate to?).
    #[error(
        "KLAXON_WEBHOOK_SECRET_PREVIOUS is set but KLAXON_WEBHOOK_SECRET is not: set the new master key in \
         KLAXON_WEBHOOK_SECRET and keep the old one in KLAXON_WEBHOOK_SECRET_PREVIOUS"
    )]
    PreviousAlone,
    /// A legacy key without a master key.
    #[error(
        "KLAXON_WEBHOOK_LEGACY_SECRET is set but KLAXON_WEBHOOK_SECRET is not: set a master key \
         (`openssl rand -base64 32`) — the legacy key only adds the deprecated X-Klaxon-Signature to signed webhooks"
    )]
    LegacyAlone,
    /// The legacy key is a master key: the deprecated header would hand every tenant an oracle of it.
    #[error(
        "KLAXON_WEBHOOK_LEGACY_SECRET must not be a master key (KLAXON_WEBHOOK_SECRET or \
         KLAXON_WEBHOOK_SECRET_PREVIOUS): the X-Klaxon-Signature of every delivery would let each tenant test \
         guesses of it; give KLAXON_WEBHOOK_SECRET a new key (`openssl rand -base64 32`)"
    )]
    LegacyIsMaster,
}

/// The master keys every endpoint's secret is derived from: `KLAXON_WEBHOOK_SECRET` and, while tenants move
/// to the new secrets after a rotation, `KLAXON_WEBHOOK_SECRET_PREVIOUS`; and `KLAXON_WEBHOOK_LEGACY_SECRET`,
/// the key of the deprecated `X-Klaxon-Signature` (sent only when it is set). `Debug` shows no key.
#[derive(Clone)]
pub struct SigningKeys {
    current: Secret,
    previous: Option<Secret>,
    legacy: Option<Secret>,
}

impl std::fmt::Debug for SigningKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKeys")
            .field("current", &"<redacted>")
            .field("previous", &self.previous.as_ref().map(|_| "<redacted>"))
            .field("legacy", &self.legacy.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl SigningKeys {
    /// The keys from their settings (`KLAXON_WEBHOOK_SECRET`, `…_PREVIOUS`, `KLAXON_WEBHOOK_LEGACY_SECRET`;
    /// empty is unset); `None` when no current key is set (webhooks then go out unsigned). The current key must
    /// be at least [`MIN_MASTER_KEY_LEN`] bytes; the previous one may be shorter (rotating is how a short key
    /// is retired); the legacy key may be anything but a master key.
    pub fn from_settings(
        current: Option<Secret>,
        previous: Option<Secret>,
        legacy: Option<Secret>,
    ) -> Result<Option<Self>, KeysError> {
        let present = |s: Option<Secret>| s.filter(|s| !s.expose().is_empty());
        let (current, previous, legacy) = (present(current), present(previous), present(legacy));
        let Some(current) = current else {
            return match (previous, legacy) {
                (Some(_), _) => Err(KeysError::PreviousAlone),
                (None, Some(_)) => Err(KeysError::LegacyAlone),
                (None, None) => Ok(None),
            };
        };
        let len = current.expose().trim().len();
        if len < MIN_MASTER_KEY_LEN {
            return Err(KeysError::MasterTooShort(len));
        }
        if legacy
            .as_ref()
            .is_some_and(|l| *l == current || previous.as_ref() == Some(l))
        {
            return Err(KeysError::LegacyIsMaster);
        }
        Ok(Some(SigningKeys {
            current,
            previous,
            legacy,
        }))
    }

    /// True when `KLAXON_WEBHOOK_LEGACY_SECRET` is set: deliveries carry the deprecated `X-Klaxon-Signature`.
    pub fn legacy(&self) -> bool {
        self.legacy.is_some()
    }

    /// The previous master key's length in bytes, during a rotation (`klaxon doctor` warns when it is short).
    pub fn previous_len(&self) -> Option<usize> {
        self.previous.as_ref().map(|p| p.expose().trim().len())
    }

    /// True while a previous master key is configured (deliveries carry two signatures).
    pub fn rotating(&self) -> bool {
        self.previous.is_some()
    }

    /// The secret of `endpoint` in `project_id` under the current master key.
    pub fn endpoint_secret(&self, project_id: &str, endpoint: &str) -> EndpointSecret {
        EndpointSecret::derive(&self.current, project_id, endpoint)
    }

    /// The secret of `endpoint` in `project_id` under the previous master key, during a rotation.
    pub fn previous_endpoint_secret(&self, project_id: &str, endpoint: &str) -> Option<EndpointSecret> {
        self.previous
            .as_ref()
            .map(|p| EndpointSecret::derive(p, project_id, endpoint))
    }

    /// Every secret a delivery to (`project_id`, `endpoint`) is signed with: the current one first.
    pub fn secrets_for(&self, project_id: &str, endpoint: &str) -> Vec<EndpointSecret> {
        let mut out = vec![self.endpoint_secret(project_id, endpoint)];
        out.extend(self.previous_endpoint_secret(project_id, endpoint));
        out
    }
}

/// The project part of the derivation: a project id (24 hex digits, any case) stands for itself in lower
/// case; anything else (no project: direct notifications without `projectId`), and the all-zero
/// [`crate::TEST_PROJECT_ID`] that `klaxon test-notify` names when given no `--project`, is the empty project.
pub fn project_key(project_id: &str) -> String {
    let p = project_id.trim();
    if klaxon_core::event::is_object_id(p) && p != crate::TEST_PROJECT_ID {
        p.to_ascii_lowercase()
    } else {
        String::new()
    }
}

/// The endpoint part of the derivation: the URL as the WHATWG parser normalizes it (scheme and host in lower
/// case, default port dropped, an empty path as `/`), so `HTTPS://Hooks.Example.com:443` and
/// `https://hooks.example.com/` have one secret; anything that does not parse, trimmed.
pub fn endpoint_key(endpoint: &str) -> String {
    let e = endpoint.trim();
    url::Url::parse(e).map_or_else(|_| e.to_owned(), |u| u.as_str().to_owned())
}

/// One endpoint's signing secret: 32 bytes, shown to its tenant as `whsec_<base64>` (the Standard Webhooks
/// serialization; the HMAC key is the decoded bytes). `Debug` shows nothing of it and there is no `Display`:
/// only [`EndpointSecret::expose_whsec`] gives it out, at the places that must (API, CLI, console).
#[derive(Clone, PartialEq, Eq)]
pub struct EndpointSecret(Vec<u8>);

impl std::fmt::Debug for EndpointSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EndpointSecret(<redacted>)")
    }
}

fn mac(key: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length, so this cannot fail; the fallback (an all-zero key, infallible) keeps
    // runtime paths free of panics and could only make signatures wrong, never leak anything.
    Hmac::<Sha256>::new_from_slice(key)
        .unwrap_or_else(|_| <Hmac<Sha256> as hmac::digest::KeyInit>::new(&Default::default()))
}

impl EndpointSecret {
    /// HMAC-SHA256(master, "klaxon webhook v1" ‖ 0 ‖ len ‖ project ‖ len ‖ endpoint), lengths as u64 big-endian
    /// so that no two (project, endpoint) pairs give the same input.
    fn derive(master: &Secret, project_id: &str, endpoint: &str) -> Self {
        let project = project_key(project_id);
        let endpoint = endpoint_key(endpoint);
        let mut m = mac(master.expose().as_bytes());
        m.update(DERIVATION_LABEL);
        m.update(&[0]);
        for part in [project.as_bytes(), endpoint.as_bytes()] {
            m.update(&(part.len() as u64).to_be_bytes());
            m.update(part);
        }
        EndpointSecret(m.finalize().into_bytes().to_vec())
    }

    /// A secret from its `whsec_<base64>` form (the prefix is optional): 24 to 64 bytes, as the spec allows.
    pub fn from_whsec(s: &str) -> Option<Self> {
        let s = s.trim();
        let bytes = BASE64.decode(s.strip_prefix(SECRET_PREFIX).unwrap_or(s)).ok()?;
        (24..=64).contains(&bytes.len()).then_some(EndpointSecret(bytes))
    }

    /// `whsec_<base64>`: what the tenant configures in its receiver. Never log it.
    pub fn expose_whsec(&self) -> String {
        format!("{SECRET_PREFIX}{}", BASE64.encode(&self.0))
    }

    fn mac_of(&self, id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
        let mut m = mac(&self.0);
        m.update(format!("{id}.{timestamp}.").as_bytes());
        m.update(body);
        m
    }

    /// `v1,<base64 HMAC-SHA256(secret, "<id>.<timestamp>.<body>")>`.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        format!(
            "v1,{}",
            BASE64.encode(self.mac_of(id, timestamp, body).finalize().into_bytes())
        )
    }

    /// Verifies a request as a Standard Webhooks receiver does: the three headers present, the timestamp an
    /// integer within [`TOLERANCE_SECS`] of `now_s` (either way), and one `v1` entry of the space-separated
    /// `signatures` equal to ours (compared in constant time). Never panics, whatever the input.
    pub fn verify(&self, id: &str, timestamp: &str, signatures: &str, body: &[u8], now_s: i64) -> bool {
        if id.is_empty() || signatures.is_empty() {
            return false;
        }
        let ts = timestamp.trim();
        let Some(at) = (!ts.is_empty() && ts.len() <= 19 && ts.bytes().all(|b| b.is_ascii_digit()))
            .then(|| ts.parse::<i64>().ok())
            .flatten()
        else {
            return false;
        };
        if (now_s - at).abs() > TOLERANCE_SECS {
            return false;
        }
        signatures.split(' ').any(|entry| {
            let Some(("v1", sig)) = entry.split_once(',') else {
                return false;
            };
            let Ok(given) = BASE64.decode(sig) else {
                return false;
            };
            self.mac_of(id, at, body).verify_slice(&given).is_ok()
        })
    }
}

/// The `webhook-signature` value: one `v1,…` per secret, space-separated, in the order given.
pub fn signature_header(secrets: &[EndpointSecret], id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets
        .iter()
        .map(|s| s.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WebhookBody<'a> {
    notification_id: &'a str,
    project_id: &'a str,
    rule_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    project_name: Option<&'a str>,
    channel: &'static str,
    fired_at: String,
    /// The alert the notification opened, repeats or is about, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    alert_id: Option<&'a str>,
    /// `spike`, `reappeared` or `no_events` for those rule kinds, `resolved`, `acknowledged`, `reminder` or `escalation`
    /// for a message of an alert's life (docs/webhook.md); absent for the others.
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    /// A message of an alert's life: the alert as it was then.
    #[serde(skip_serializing_if = "Option::is_none")]
    alert: Option<AlertNumbers<'a>>,
    /// A reminder: which one, of how many.
    #[serde(skip_serializing_if = "Option::is_none")]
    reminder: Option<ReminderNumbers>,
    /// An escalation: which step, of how many.
    #[serde(skip_serializing_if = "Option::is_none")]
    escalation: Option<EscalationNumbers>,
    /// A firing of a counting rule (SEEN_MORE, SPIKE): what the rule asked, as the chat text says it.
    #[serde(skip_serializing_if = "Option::is_none")]
    rule: Option<RuleNumbers>,
    /// SPIKE: the numbers that made it fire.
    #[serde(skip_serializing_if = "Option::is_none")]
    spike: Option<SpikeNumbers>,
    /// REAPPEARED: the quiet that made it fire.
    #[serde(skip_serializing_if = "Option::is_none")]
    reappeared: Option<ReappearedNumbers>,
    /// NO_EVENTS: the silence that made it fire.
    #[serde(skip_serializing_if = "Option::is_none")]
    no_events: Option<ReappearedNumbers>,
    /// A quiet window's release (`kind: "quiet"`): when the window ended and how many of `events` fired and
    /// resolved in it (the resolved ones carry `"resolved": true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    quiet: Option<QuietNumbers>,
    events: Vec<WebhookEvent<'a>>,
    /// A digest or a quiet window's release past its list's bound: how many more fired and resolved than
    /// `events` lists (`{"fired": X, "resolved": Y}`); absent when it lists everything.
    #[serde(skip_serializing_if = "Option::is_none")]
    more: Option<klaxon_core::notification::Unlisted>,
    /// The body of a direct notification (`POST /api/v1/notifications`).
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    /// Signed action links (`--public-url` + `KLAXON_ACTION_KEY`): `[{"action", "label", "url", "expiresAt"}]`.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    actions: &'a [crate::ActionLink],
}

/// `"rule"`: `threshold` and `thresholdPeriod` (ms) of a SEEN_MORE or SPIKE firing; SPIKE also
/// `baselineWindows` and `factor`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RuleNumbers {
    threshold: u64,
    threshold_period: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline_windows: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    factor: Option<f64>,
}

impl RuleNumbers {
    fn of(reason: &Reason) -> Option<RuleNumbers> {
        match *reason {
            Reason::Threshold {
                threshold, period_ms, ..
            }
            | Reason::UniqueUsers {
                threshold, period_ms, ..
            } => Some(RuleNumbers {
                threshold,
                threshold_period: period_ms,
                baseline_windows: None,
                factor: None,
            }),
            Reason::Spike { spike, .. } => Some(RuleNumbers {
                threshold: spike.threshold,
                threshold_period: spike.period_ms,
                baseline_windows: Some(spike.baseline_windows),
                factor: Some(spike.factor()),
            }),
            _ => None,
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SpikeNumbers {
    bucket_ms: u64,
    baseline_windows: u32,
    factor: f64,
    threshold: u64,
    baseline: f64,
    baseline_buckets: u64,
    needed: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReappearedNumbers {
    quiet_period_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_seen_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    quiet_for_ms: Option<u64>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AlertNumbers<'a> {
    state: klaxon_core::alert::AlertState,
    opened_at: String,
    open_for_ms: u64,
    events: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    by: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct QuietNumbers {
    ended_at: String,
    fired: u32,
    resolved: u32,
}

#[derive(Serialize)]
struct ReminderNumbers {
    number: u32,
    max: u32,
}

#[derive(Serialize)]
struct EscalationNumbers {
    step: u32,
    steps: u32,
}

#[derive(Serialize)]
struct WebhookEvent<'a> {
    #[serde(flatten)]
    event: EventFields<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    /// In a quiet window's release: this group's alert resolved in the window.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    resolved: bool,
}

/// A task's entry as a webhook body shows it: the fields of [`NotificationEvent`] that the body has always carried
/// (the task's own markers, such as a silence's quiet period, stay inside Klaxon).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EventFields<'a> {
    group_hash: &'a str,
    title: &'a str,
    count: u64,
    repetition_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    open_for_ms: Option<u64>,
    #[serde(rename = "alertId", skip_serializing_if = "Option::is_none")]
    alert_id: Option<&'a str>,
}

impl<'a> From<&'a NotificationEvent> for EventFields<'a> {
    fn from(e: &'a NotificationEvent) -> Self {
        EventFields {
            group_hash: &e.group_hash,
            title: &e.title,
            count: e.count,
            repetition_id: e.repetition_id.as_deref(),
            open_for_ms: e.open_for_ms,
            alert_id: e.alert_id.as_deref(),
        }
    }
}

/// The exact body POSTed for a task (no project name, no links).
pub fn webhook_body(task: &NotificationTask) -> Vec<u8> {
    webhook_body_with(task, MessageContext::default())
}

/// The exact body POSTed for a task, with `projectName`, event `url`s and `actions` when the context has them.
pub fn webhook_body_with(task: &NotificationTask, ctx: MessageContext<'_>) -> Vec<u8> {
    let (kind, spike, reappeared) = match task.reason {
        Reason::Spike { spike, baseline } => (
            Some("spike"),
            Some(SpikeNumbers {
                bucket_ms: spike.period_ms,
                baseline_windows: spike.baseline_windows,
                factor: spike.factor(),
                threshold: spike.threshold,
                baseline: baseline.sum as f64 / baseline.buckets.max(1) as f64,
                baseline_buckets: baseline.buckets,
                needed: baseline.needed,
            }),
            None,
        ),
        Reason::Reappeared {
            quiet_period_ms,
            last_seen_ms,
        } => (
            Some("reappeared"),
            None,
            Some(ReappearedNumbers {
                quiet_period_ms,
                last_seen_at: last_seen_ms.map(klaxon_core::notification::rfc3339_ms),
                quiet_for_ms: last_seen_ms.and_then(|s| u64::try_from(task.fired_at_ms - s).ok()),
            }),
        ),
        Reason::NoEvents { .. } => (Some("no_events"), None, None),
        Reason::Resolved => (Some("resolved"), None, None),
        Reason::Acknowledged => (Some("acknowledged"), None, None),
        Reason::Reminder { .. } => (Some("reminder"), None, None),
        Reason::Escalation { .. } => (Some("escalation"), None, None),
        Reason::QuietHours { .. } => (Some("quiet"), None, None),
        _ => (None, None, None),
    };
    let quiet = match task.reason {
        Reason::QuietHours {
            until_ms,
            fired,
            resolved,
            ..
        } => Some(QuietNumbers {
            ended_at: klaxon_core::notification::rfc3339_ms(until_ms),
            fired,
            resolved,
        }),
        _ => None,
    };
    let fired_n = task.held_parts().map_or(task.events.len(), |(f, _)| f.len());
    let alert = task
        .alert
        .as_ref()
        .filter(|_| task.reason.is_lifecycle())
        .map(|a| AlertNumbers {
            state: a.state,
            opened_at: klaxon_core::notification::rfc3339_ms(a.opened_at_ms),
            open_for_ms: u64::try_from(task.fired_at_ms.saturating_sub(a.opened_at_ms)).unwrap_or(0),
            events: a.events,
            by: a.by.as_deref(),
        });
    let body = WebhookBody {
        notification_id: &task.notification_id,
        project_id: &task.project_id,
        rule_id: &task.rule_id,
        project_name: ctx.project_name,
        channel: "webhook",
        fired_at: task.fired_at_rfc3339(),
        alert_id: task.alert.as_ref().map(|a| a.id.as_str()),
        kind,
        alert,
        reminder: match task.reason {
            Reason::Reminder { number, max } => Some(ReminderNumbers { number, max }),
            _ => None,
        },
        escalation: match task.reason {
            Reason::Escalation { step, steps } => Some(EscalationNumbers { step, steps }),
            _ => None,
        },
        rule: RuleNumbers::of(&task.reason),
        spike,
        reappeared,
        // the same numbers as a reappearance's: the quiet asked for, the last event, how long it has been
        no_events: match task.reason {
            Reason::NoEvents {
                quiet_period_ms,
                last_event_ms,
            } => Some(ReappearedNumbers {
                quiet_period_ms,
                last_seen_at: last_event_ms.map(klaxon_core::notification::rfc3339_ms),
                quiet_for_ms: last_event_ms.and_then(|s| u64::try_from(task.fired_at_ms - s).ok()),
            }),
            _ => None,
        },
        quiet,
        more: Some(task.unlisted()).filter(|m| !m.is_none()),
        events: task
            .events
            .iter()
            .enumerate()
            .map(|(i, e)| WebhookEvent {
                event: EventFields::from(e),
                url: ctx
                    .links
                    .and_then(|t| t.link(&task.project_id, &e.group_hash, e.repetition_id.as_deref())),
                resolved: i >= fired_n,
            })
            .collect(),
        text: task.text.as_deref(),
        actions: ctx.actions,
    };
    // Serializing plain strings and integers cannot fail; an empty body would be caught by the receiver.
    serde_json::to_vec(&body).unwrap_or_default()
}

/// `sha256=<hex>` for a body and secret (the deprecated `X-Klaxon-Signature`).
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut m = mac(secret);
    m.update(body);
    format!("sha256={}", hex::encode(m.finalize().into_bytes()))
}

/// The headers of one attempt: the id always; with keys, the timestamp and the signature(s), and the deprecated
/// `X-Klaxon-Signature` (made with `KLAXON_WEBHOOK_LEGACY_SECRET`, never a master key) only when that is set.
pub fn request_headers(
    keys: Option<&SigningKeys>,
    task: &NotificationTask,
    body: &[u8],
    now_s: i64,
) -> Vec<(&'static str, String)> {
    let mut headers = vec![
        (ID_HEADER, task.notification_id.clone()),
        (NOTIFICATION_ID_HEADER, task.notification_id.clone()),
    ];
    if let Some(keys) = keys {
        let secrets = keys.secrets_for(&task.project_id, &task.endpoint);
        headers.push((TIMESTAMP_HEADER, now_s.to_string()));
        headers.push((
            STANDARD_SIGNATURE_HEADER,
            signature_header(&secrets, &task.notification_id, now_s, body),
        ));
        if let Some(legacy) = &keys.legacy {
            headers.push((SIGNATURE_HEADER, sign(legacy.expose().as_bytes(), body)));
        }
    }
    headers
}

impl Channels {
    pub(crate) async fn deliver_webhook(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<Delivered, DeliveryError> {
        let url = parse_http_endpoint(&task.endpoint, "webhook")?;
        let what = label("webhook", &url);
        let body = webhook_body_with(task, ctx);
        // The time of this attempt: a retry is signed anew, so a receiver's tolerance window never rejects it.
        let now_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let keys = self.inner.cfg.webhook_keys.as_ref();
        let headers = request_headers(keys, task, &body, now_s);
        let mut secrets = vec![task.endpoint.as_str()];
        if let Some(keys) = keys {
            secrets.push(keys.current.expose());
            secrets.extend(keys.previous.as_ref().map(Secret::expose));
            secrets.extend(keys.legacy.as_ref().map(Secret::expose));
        }
        self.inner
            .http
            .post_json(&url, &headers, body, &what, &secrets)
            .await?;
        Ok(Delivered::messages(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P1: &str = "5e3eef0679fa3700a0198a49";
    const P2: &str = "65a000000000000000000001";
    const NOW: i64 = 1_800_000_000;

    /// 32 bytes after the name: long enough for a master key.
    const PAD: &str = "::0123456789abcdef0123456789abcdef";

    /// Keys whose current master is `current` + [`PAD`].
    fn keys(current: &str, previous: Option<&str>) -> SigningKeys {
        SigningKeys::from_settings(
            Some(Secret::new(format!("{current}{PAD}"))),
            previous.map(Secret::new),
            None,
        )
        .expect("valid")
        .expect("some")
    }

    /// SPIKE and REAPPEARED notifications carry their kind and the numbers that made them fire; the others
    /// neither (their bodies are unchanged).
    #[test]
    fn signal_kinds_carry_their_numbers() {
        let task = |reason| NotificationTask {
            notification_id: "n".into(),
            project_id: P1.into(),
            project_name: None,
            rule_id: P2.into(),
            channel: klaxon_core::ChannelKind::Webhook,
            endpoint: "https://h.example/x".into(),
            min_period_s: 0,
            severity: None,
            fired_at_ms: 1_000_000,
            reason,
            events: vec![NotificationEvent {
                group_hash: "g".into(),
                title: "t".into(),
                count: 312,
                repetition_id: None,
                open_for_ms: None,
                silence_period_ms: None,
                alert_id: None,
            }],
            text: None,
            send_at_ms: None,
            alert: None,
        };
        let body = |reason| -> serde_json::Value {
            serde_json::from_slice(&webhook_body(&task(reason))).expect("json")
        };
        let spike = body(Reason::Spike {
            spike: klaxon_core::Spike {
                period_ms: 3_600_000,
                baseline_windows: 24,
                factor_milli: 5000,
                threshold: 10,
            },
            baseline: klaxon_core::Baseline {
                sum: 480,
                buckets: 24,
                needed: 100,
            },
        });
        assert_eq!(spike["kind"], "spike");
        assert_eq!(
            spike["spike"],
            serde_json::json!({"bucketMs": 3_600_000, "baselineWindows": 24, "factor": 5.0, "threshold": 10,
                "baseline": 20.0, "baselineBuckets": 24, "needed": 100})
        );
        assert_eq!(spike["events"][0]["count"], 312);
        assert_eq!(
            spike["rule"],
            serde_json::json!({"threshold": 10, "thresholdPeriod": 3_600_000, "baselineWindows": 24, "factor": 5.0})
        );
        let seen_more = body(Reason::Threshold {
            threshold: 100,
            period_ms: 60_000,
            window: klaxon_core::rule::Window::Sliding,
        });
        assert_eq!(
            seen_more["rule"],
            serde_json::json!({"threshold": 100, "thresholdPeriod": 60_000})
        );
        let back = body(Reason::Reappeared {
            quiet_period_ms: 604_800_000,
            last_seen_ms: Some(400_000),
        });
        assert_eq!(back["kind"], "reappeared");
        assert_eq!(
            back["reappeared"],
            serde_json::json!({"quietPeriodMs": 604_800_000, "lastSeenAt": "1970-01-01T00:06:40Z",
                "quietForMs": 600_000})
        );
        let unknown = body(Reason::Reappeared {
            quiet_period_ms: 1000,
            last_seen_ms: None,
        });
        assert_eq!(unknown["reappeared"], serde_json::json!({"quietPeriodMs": 1000}));
        assert!(back.get("rule").is_none(), "{back}");
        let new = body(Reason::New);
        assert!(new.get("kind").is_none() && new.get("spike").is_none(), "{new}");
        assert!(
            new.get("rule").is_none() && body(Reason::Resolved).get("rule").is_none(),
            "{new}"
        );
    }

    #[test]
    fn settings_validate_and_debug_hides_keys() {
        let s = |v: &str| Some(Secret::new(v));
        let long = format!("MASTERKEY{PAD}");
        assert!(SigningKeys::from_settings(None, None, None)
            .expect("ok")
            .is_none());
        assert!(SigningKeys::from_settings(s(""), s(""), s(""))
            .expect("ok")
            .is_none());
        // (current, previous, legacy) → the error
        type Settings = (Option<Secret>, Option<Secret>, Option<Secret>, KeysError);
        let refused: [Settings; 7] = [
            (None, s("OLDKEY"), None, KeysError::PreviousAlone),
            (None, None, s("LEGACYKEY"), KeysError::LegacyAlone),
            (s("changeme"), None, None, KeysError::MasterTooShort(8)),
            (s(&"k".repeat(31)), None, None, KeysError::MasterTooShort(31)),
            (
                s(&format!("  {}  ", "k".repeat(31))),
                None,
                None,
                KeysError::MasterTooShort(31),
            ),
            (s(&long), None, s(&long), KeysError::LegacyIsMaster),
            (s(&long), s("OLDKEY"), s("OLDKEY"), KeysError::LegacyIsMaster),
        ];
        for (current, previous, legacy, want) in refused {
            let err = SigningKeys::from_settings(current, previous, legacy).expect_err("refused");
            assert_eq!(err, want);
            let msg = err.to_string();
            for secret in ["OLDKEY", "LEGACYKEY", "MASTERKEY", "changeme", "kkkk"] {
                assert!(!msg.contains(secret), "{msg}");
            }
        }
        let short = SigningKeys::from_settings(s("changeme"), None, None).expect_err("short");
        assert!(short.to_string().contains("`openssl rand -base64 32`"), "{short}");
        // 32 bytes are enough; a short previous key is what a rotation away from it looks like.
        let ok = SigningKeys::from_settings(s(&"k".repeat(32)), s("old"), s("LEGACYKEY"))
            .expect("valid")
            .expect("some");
        assert!(ok.legacy() && ok.rotating());
        assert_eq!(ok.previous_len(), Some(3));
        let k = SigningKeys::from_settings(s(&long), s("OLDKEY"), s("LEGACYKEY"))
            .expect("valid")
            .expect("some");
        let s = k.endpoint_secret(P1, "https://h.test/x");
        let shown = format!("{k:?} {s:?}");
        for secret in [
            "MASTERKEY",
            "OLDKEY",
            "LEGACYKEY",
            &s.expose_whsec(),
            &s.expose_whsec()[6..],
        ] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }

    #[test]
    fn secrets_are_bound_to_project_endpoint_and_master() {
        let k = keys("master-1", None);
        let a = k.endpoint_secret(P1, "https://h.test/x");
        let table = [
            (k.endpoint_secret(P2, "https://h.test/x"), "another project"),
            (k.endpoint_secret(P1, "https://h.test/y"), "another endpoint"),
            (k.endpoint_secret("", "https://h.test/x"), "no project"),
            (
                keys("master-2", None).endpoint_secret(P1, "https://h.test/x"),
                "another master",
            ),
        ];
        for (other, what) in table {
            assert_ne!(a, other, "{what}");
            let sig = other.sign("n1", NOW, b"{}");
            assert!(!a.verify("n1", &NOW.to_string(), &sig, b"{}", NOW), "{what}");
        }
        // Stable, and the same for the spellings of one URL and one project id.
        assert_eq!(a, keys("master-1", None).endpoint_secret(P1, "https://h.test/x"));
        assert_eq!(a, k.endpoint_secret(&P1.to_uppercase(), " HTTPS://H.test:443/x "));
        // Everything that is not a project id is "no project".
        assert_eq!(
            k.endpoint_secret("klaxon-test", "https://h.test/x"),
            k.endpoint_secret("", "https://h.test/x")
        );
        // Length-prefixed parts: moving bytes between project and endpoint changes the secret.
        assert_ne!(
            EndpointSecret::derive(&Secret::new("m"), "", "ab"),
            EndpointSecret::derive(&Secret::new("m"), "a", "b")
        );
    }

    #[test]
    fn whsec_round_trips_and_rejects_garbage() {
        let s = keys("m", None).endpoint_secret(P1, "https://h.test/x");
        let w = s.expose_whsec();
        assert!(w.starts_with("whsec_") && w.len() == 6 + 44, "32 bytes: {w}");
        assert_eq!(EndpointSecret::from_whsec(&w), Some(s.clone()));
        assert_eq!(EndpointSecret::from_whsec(&w[6..]), Some(s));
        for bad in ["", "whsec_", "whsec_!!!", "whsec_AAAA", "whsec_ä"] {
            assert_eq!(EndpointSecret::from_whsec(bad), None, "{bad}");
        }
    }

    /// The spec's own example (standard-webhooks' test suite): secret `whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw`,
    /// id `msg_p5jXN8AQM9LWM0D4loKWxJek`, timestamp 1614265330, body `{"test": 2432232314}`.
    #[test]
    fn signs_like_the_reference_implementation() {
        let s = EndpointSecret::from_whsec("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("secret");
        let (id, body) = ("msg_p5jXN8AQM9LWM0D4loKWxJek", br#"{"test": 2432232314}"#);
        let sig = s.sign(id, 1_614_265_330, body);
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        assert!(s.verify(id, "1614265330", &sig, body, 1_614_265_330 + 10));
    }

    #[test]
    fn verification_checks_tolerance_both_ways_and_every_listed_signature() {
        let k = keys("new", Some("old"));
        let secrets = k.secrets_for(P1, "https://h.test/x");
        assert_eq!(secrets.len(), 2);
        let body = br#"{"notificationId":"n1"}"#;
        let header = signature_header(&secrets, "n1", NOW, body);
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2, "{header}");
        assert!(parts.iter().all(|p| p.starts_with("v1,")));
        // Each tenant secret verifies (its own entry of the list).
        for s in &secrets {
            assert!(s.verify("n1", &NOW.to_string(), &header, body, NOW));
        }
        let s = &secrets[0];
        let ts = NOW.to_string();
        let ok = |id: &str, ts: &str, sig: &str, body: &[u8], now: i64| s.verify(id, ts, sig, body, now);
        assert!(ok("n1", &ts, &header, body, NOW + TOLERANCE_SECS));
        assert!(ok("n1", &ts, &header, body, NOW - TOLERANCE_SECS));
        let rejected: [(&str, &str, &str, &[u8], i64); 13] = [
            ("n1", &ts, &header, body, NOW + TOLERANCE_SECS + 1), // replayed later
            ("n1", &ts, &header, body, NOW - TOLERANCE_SECS - 1), // from the future
            ("n2", &ts, &header, body, NOW),                      // another id
            ("n1", "1800000001", &header, body, NOW),             // a fresh timestamp on an old signature
            ("n1", &ts, &header, b"{}", NOW),                     // tampered body
            ("", &ts, &header, body, NOW),                        // missing id
            ("n1", "", &header, body, NOW),                       // missing timestamp
            ("n1", &ts, "", body, NOW),                           // missing signature
            ("n1", "18e8", &header, body, NOW),                   // not an integer
            ("n1", "-1800000000", &header, body, NOW),            // not an integer of ours
            ("n1", &ts, "v1,!!!", body, NOW),                     // bad base64
            ("n1", &ts, &header.replace("v1,", "v2,"), body, NOW), // unknown version
            ("n1", "99999999999999999999999", &header, body, NOW), // overflow
        ];
        for (i, (id, ts, sig, body, now)) in rejected.into_iter().enumerate() {
            assert!(!s.verify(id, ts, sig, body, now), "case {i}");
        }
    }

    #[test]
    fn headers_of_an_attempt() {
        let task = crate::test_task(klaxon_core::ChannelKind::Webhook, "https://h.test/x");
        let body = webhook_body(&task);
        let names = |h: &[(&'static str, String)]| h.iter().map(|(n, _)| *n).collect::<Vec<_>>();
        let unsigned = request_headers(None, &task, &body, NOW);
        assert_eq!(names(&unsigned), [ID_HEADER, NOTIFICATION_ID_HEADER]);
        assert_eq!(unsigned[0].1, task.notification_id);
        let k = keys("m", None);
        let signed = request_headers(Some(&k), &task, &body, NOW);
        // No legacy key: no X-Klaxon-Signature (it used to be made with the master key itself).
        assert_eq!(
            names(&signed),
            [
                ID_HEADER,
                NOTIFICATION_ID_HEADER,
                TIMESTAMP_HEADER,
                STANDARD_SIGNATURE_HEADER
            ]
        );
        assert_eq!(signed[2].1, NOW.to_string());
        let master = format!("m{PAD}");
        let with_legacy = SigningKeys::from_settings(
            Some(Secret::new(master.as_str())),
            None,
            Some(Secret::new("old-short-key")),
        )
        .expect("valid")
        .expect("some");
        let legacy = request_headers(Some(&with_legacy), &task, &body, NOW);
        assert_eq!(legacy[4].0, SIGNATURE_HEADER);
        assert_eq!(legacy[4].1, sign(b"old-short-key", &body));
        assert_ne!(
            legacy[4].1,
            sign(master.as_bytes(), &body),
            "never the master key"
        );
        assert_eq!(legacy[3], signed[3], "the standard signature is the same");
        // test-notify has no project: signed with the no-project secret of the endpoint.
        assert!(k.endpoint_secret("", "https://h.test/x").verify(
            &task.notification_id,
            &signed[2].1,
            &signed[3].1,
            &body,
            NOW
        ));
    }
}
