//! Notification tasks: what a worker hands to a sender, one per enabled channel of a firing rule.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::rule::{ChannelKind, Window};

/// Why a notification was produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase", tag = "type")]
pub enum Reason {
    /// ONLY_NEW: a first occurrence.
    New,
    /// SEEN_MORE: a window's count reached the threshold.
    Threshold {
        /// The rule's threshold.
        threshold: u64,
        /// The rule's window length, ms.
        period_ms: u64,
        /// Fixed or sliding.
        window: Window,
    },
    /// SEEN_MORE with `uniqueUsers`: the number of distinct users in a window reached the threshold. The
    /// events' `count` is that number of users.
    UniqueUsers {
        /// The rule's threshold (distinct users).
        threshold: u64,
        /// The rule's window length, ms.
        period_ms: u64,
        /// Fixed or sliding.
        window: Window,
    },
    /// Several firings coalesced over the channel's `minPeriod`.
    Digest {
        /// The digest period, seconds.
        min_period_s: u64,
    },
    /// A direct notification from `POST /api/v1/notifications`: the event's title is the message's title and
    /// [`NotificationTask::text`] its body.
    Direct,
}

/// One group inside a notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotificationEvent {
    /// The group.
    pub group_hash: String,
    /// Its title.
    pub title: String,
    /// Occurrences counted when the rule fired (1 for a new error).
    pub count: u64,
    /// Hawk's repetition id of the firing event, if any.
    pub repetition_id: Option<String>,
}

/// Everything a sender needs to deliver one notification on one channel.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotificationTask {
    /// Deterministic id: the same firing gives the same id on every worker and every redelivery.
    pub notification_id: String,
    /// The project.
    pub project_id: String,
    /// The rule that fired.
    pub rule_id: String,
    /// The channel to deliver on.
    pub channel: ChannelKind,
    /// The channel's endpoint (URL, chat id, addresses). Treated as a secret in logs.
    pub endpoint: String,
    /// The channel's digest period in seconds (0 = none).
    #[serde(default)]
    pub min_period_s: u64,
    /// When the rule fired, unix milliseconds on the Redis clock.
    pub fired_at_ms: i64,
    /// Why.
    pub reason: Reason,
    /// The groups this notification is about.
    pub events: Vec<NotificationEvent>,
    /// The body of a direct notification ([`Reason::Direct`]), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Not to be delivered before this instant (unix ms, wall clock): a sender that receives the task earlier
    /// parks it again until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_at_ms: Option<i64>,
}

impl std::fmt::Debug for NotificationTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotificationTask")
            .field("notification_id", &self.notification_id)
            .field("project_id", &self.project_id)
            .field("rule_id", &self.rule_id)
            .field("channel", &self.channel)
            .field("endpoint", &"<redacted>")
            .field("fired_at_ms", &self.fired_at_ms)
            .field("reason", &self.reason)
            .field("events", &self.events.len())
            .field("send_at_ms", &self.send_at_ms)
            .finish()
    }
}

impl NotificationTask {
    /// `firedAt` as RFC 3339 (UTC, millisecond precision).
    pub fn fired_at_rfc3339(&self) -> String {
        rfc3339_ms(self.fired_at_ms)
    }
}

/// Formats unix milliseconds as RFC 3339 UTC.
pub fn rfc3339_ms(ms: i64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned())
}

/// The deterministic id of one firing on one channel.
///
/// `firing` identifies the firing inside its (rule, group): the window start for a fixed window, the firing
/// time for a sliding window, `"new"` for ONLY_NEW. Every worker computes the same id for the same firing, so
/// senders can drop duplicates.
pub fn notification_id(
    project_id: &str,
    rule_id: &str,
    group_hash: &str,
    firing: &str,
    channel: ChannelKind,
) -> String {
    let mut h = Sha256::new();
    for part in [
        "klaxon/v1",
        project_id,
        rule_id,
        group_hash,
        firing,
        channel.as_str(),
    ] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    hex::encode(&h.finalize()[..16])
}

/// The id of a direct notification with an idempotency key: the same key always gives the same id, so the
/// senders' deduplication delivers it once however often it is submitted.
pub fn direct_notification_id(idempotency_key: &str) -> String {
    let mut h = Sha256::new();
    for part in ["klaxon/direct/v1", idempotency_key] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    hex::encode(&h.finalize()[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_deterministic_and_distinct() {
        let a = notification_id("p", "r", "g", "1000", ChannelKind::Slack);
        assert_eq!(a, notification_id("p", "r", "g", "1000", ChannelKind::Slack));
        assert_eq!(a.len(), 32);
        for other in [
            notification_id("p", "r", "g", "1001", ChannelKind::Slack),
            notification_id("p", "r", "g", "1000", ChannelKind::Email),
            notification_id("p", "r", "h", "1000", ChannelKind::Slack),
            notification_id("p", "r2", "g", "1000", ChannelKind::Slack),
            // the separator keeps ("ab","c") apart from ("a","bc")
            notification_id("p", "r", "g1", "000", ChannelKind::Slack),
        ] {
            assert_ne!(a, other);
        }
    }

    #[test]
    fn direct_ids_follow_the_key() {
        let a = direct_notification_id("order-42");
        assert_eq!(a, direct_notification_id("order-42"));
        assert_ne!(a, direct_notification_id("order-43"));
        assert_eq!(a.len(), 32);
        // a direct id never equals a firing's id built from the same text
        assert_ne!(a, notification_id("order-42", "", "", "", ChannelKind::Slack));
    }

    #[test]
    fn direct_task_round_trips() {
        let json = r#"{"notificationId":"n","projectId":"","ruleId":"api","channel":"slack","endpoint":"https://x.test/h",
            "firedAtMs":1,"reason":{"type":"direct"},"events":[{"groupHash":"","title":"Deploy","count":1,"repetitionId":null}],
            "text":"v2 is out","sendAtMs":1700000000000}"#;
        let t: NotificationTask = serde_json::from_str(json).expect("parse");
        assert_eq!(t.reason, Reason::Direct);
        assert_eq!(t.text.as_deref(), Some("v2 is out"));
        assert_eq!(t.send_at_ms, Some(1_700_000_000_000));
        let back: NotificationTask =
            serde_json::from_str(&serde_json::to_string(&t).expect("ser")).expect("parse");
        assert_eq!(back, t);
    }

    #[test]
    fn rfc3339() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }

    #[test]
    fn task_round_trips_and_debug_hides_endpoint() {
        let t = NotificationTask {
            notification_id: "id".into(),
            project_id: "p".into(),
            rule_id: "r".into(),
            channel: ChannelKind::Webhook,
            endpoint: "https://secret.test/hook?token=SECRET".into(),
            min_period_s: 0,
            fired_at_ms: 5,
            reason: Reason::Threshold {
                threshold: 100,
                period_ms: 60_000,
                window: Window::Sliding,
            },
            events: vec![NotificationEvent {
                group_hash: "g".into(),
                title: "t".into(),
                count: 100,
                repetition_id: None,
            }],
            text: None,
            send_at_ms: None,
        };
        let json = serde_json::to_string(&t).expect("serialize");
        assert!(!json.contains("sendAtMs") && !json.contains("\"text\""), "{json}");
        assert!(
            json.contains(
                r#""reason":{"type":"threshold","threshold":100,"periodMs":60000,"window":"sliding"}"#
            ),
            "{json}"
        );
        assert!(
            json.contains(r#""notificationId":"id""#) && json.contains(r#""firedAtMs":5"#),
            "{json}"
        );
        let back: NotificationTask = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, t);
        assert!(!format!("{t:?}").contains("SECRET"));
    }
}
