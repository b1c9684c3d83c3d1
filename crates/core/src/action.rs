//! Signed action links: "Mute this error for 1 h", "… for 24 h", "Mute this rule for 1 h", "Why did this fire?"
//! in every message, and the "Undo" of a mute made through one (README, "Action links").
//!
//! A link is `<public URL>/a/<token>`; the token is the authority for that one action, so no console login is
//! needed to use it. It is
//!
//! ```text
//! v1.<base64url(claim as compact JSON)>.<base64url(HMAC-SHA256(key, "klaxon-action.v1." + payload part))>
//! ```
//!
//! The claim says which project, rule and group (absent for a rule mute), which action, and until when (unix
//! seconds) it may be used. Verification checks, in this order: the length bound ([`MAX_TOKEN_LEN`]) and the
//! shape (else [`ActionError::Malformed`]), the signature in constant time (else [`ActionError::BadSignature`]),
//! then the claim and its expiry ([`ActionError::Expired`]): nobody learns anything about a claim whose
//! signature is wrong. Pure: the key and the time are parameters.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// How long a link in a message may be used after the firing it belongs to.
pub const LINK_TTL_S: i64 = 7 * 24 * 3600;
/// Longest token accepted (and produced: a claim that would be longer is not signed).
pub const MAX_TOKEN_LEN: usize = 2048;
/// Shortest signing key (`KLAXON_ACTION_KEY`), in bytes.
pub const MIN_KEY_LEN: usize = 32;
/// Longest title an "explain" link carries (characters); a longer one is cut and the page says so.
pub const MAX_TITLE_CHARS: usize = 200;
/// Longest group hash a link carries (bytes): the mute API's bound; a group with a longer hash gets no links.
pub const MAX_GROUP_LEN: usize = 256;

const VERSION: &str = "v1";
const DOMAIN: &[u8] = b"klaxon-action.v1.";
const CSRF_DOMAIN: &[u8] = b"klaxon-action-form.v1.";

/// What a link does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Mute the rule for the group for one hour.
    #[serde(rename = "mute-group-1h")]
    MuteGroup1h,
    /// Mute the rule for the group for 24 hours.
    #[serde(rename = "mute-group-24h")]
    MuteGroup24h,
    /// Mute the rule (every group) for one hour.
    #[serde(rename = "mute-rule-1h")]
    MuteRule1h,
    /// Show why the rule fired for the group (read-only).
    #[serde(rename = "explain")]
    Explain,
    /// Remove the mute a link made (the claim's `mute_id`).
    #[serde(rename = "undo")]
    Undo,
    /// Acknowledge the alert the claim names (`alert_id`): "I'm on it".
    #[serde(rename = "ack")]
    Ack,
    /// Resolve the alert the claim names (`alert_id`) by hand.
    #[serde(rename = "resolve")]
    Resolve,
}

impl Action {
    /// The links every single-group message carries, in the order they are shown.
    pub const MESSAGE: [Action; 4] = [
        Action::MuteGroup1h,
        Action::MuteGroup24h,
        Action::MuteRule1h,
        Action::Explain,
    ];

    /// The links a firing that opened (or repeats) an alert carries after [`Action::MESSAGE`]'s, in order.
    pub const ALERT: [Action; 2] = [Action::Ack, Action::Resolve];

    /// The name used in webhook payloads and the docs (`mute-group-1h`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::MuteGroup1h => "mute-group-1h",
            Action::MuteGroup24h => "mute-group-24h",
            Action::MuteRule1h => "mute-rule-1h",
            Action::Explain => "explain",
            Action::Undo => "undo",
            Action::Ack => "ack",
            Action::Resolve => "resolve",
        }
    }

    /// The words a message shows for the link.
    pub fn label(self) -> &'static str {
        match self {
            Action::MuteGroup1h => "Mute this error for 1 h",
            Action::MuteGroup24h => "Mute this error for 24 h",
            Action::MuteRule1h => "Mute this rule for 1 h",
            Action::Explain => "Why did this fire?",
            Action::Undo => "Undo",
            Action::Ack => "Acknowledge this alert",
            Action::Resolve => "Resolve this alert",
        }
    }

    /// How long the mute it makes lasts, in seconds (`None`: it makes no mute).
    pub fn mute_secs(self) -> Option<u64> {
        match self {
            Action::MuteGroup1h | Action::MuteRule1h => Some(3600),
            Action::MuteGroup24h => Some(24 * 3600),
            Action::Explain | Action::Undo | Action::Ack | Action::Resolve => None,
        }
    }

    /// True when the action needs a group (a group mute, explain).
    pub fn needs_group(self) -> bool {
        matches!(self, Action::MuteGroup1h | Action::MuteGroup24h | Action::Explain)
    }

    /// True for the actions on an alert (the claim's `alert_id`): [`Action::Ack`], [`Action::Resolve`].
    pub fn on_alert(self) -> bool {
        matches!(self, Action::Ack | Action::Resolve)
    }
}

/// What a token grants: one action on one project's rule (and group), until `expires_s`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// The project (24-hex ObjectId, lowercase).
    #[serde(rename = "p")]
    pub project_id: String,
    /// The rule (24-hex ObjectId, lowercase).
    #[serde(rename = "r")]
    pub rule_id: String,
    /// The group; absent for a rule mute.
    #[serde(rename = "g", default, skip_serializing_if = "Option::is_none")]
    pub group_hash: Option<String>,
    /// What to do.
    #[serde(rename = "a")]
    pub action: Action,
    /// Usable before this time, unix seconds.
    #[serde(rename = "e")]
    pub expires_s: i64,
    /// The mute an [`Action::Undo`] removes.
    #[serde(rename = "m", default, skip_serializing_if = "Option::is_none")]
    pub mute_id: Option<String>,
    /// The event's title, for the actions on a group (explain: the rule's filters read it; a group mute's page
    /// shows it), at most [`MAX_TITLE_CHARS`].
    #[serde(rename = "t", default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The firing a "why did this fire?" link belongs to, with its numbers, so that its page shows that firing
    /// and not only the present (signed with the rest: they cannot be altered).
    #[serde(rename = "f", default, skip_serializing_if = "Option::is_none")]
    pub fired: Option<Fired>,
    /// The alert an [`Action::Ack`] or [`Action::Resolve`] acts on (`klaxon_core::alert::alert_id`).
    #[serde(rename = "al", default, skip_serializing_if = "Option::is_none")]
    pub alert_id: Option<String>,
}

/// A firing as its message saw it: when, the count it fired on and why (threshold, window, a spike's baseline, a
/// reappearance's quiet).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fired {
    /// When it fired, unix ms.
    #[serde(rename = "at")]
    pub at_ms: i64,
    /// The group's count at the firing (events, or distinct users).
    #[serde(rename = "n")]
    pub count: u64,
    /// Why it fired, with the rule's numbers at the time.
    #[serde(rename = "why")]
    pub reason: crate::notification::Reason,
}

impl Fired {
    /// The firing in words, numbers only (no tenant text): "3 events in a fixed window of 1 minute reached the
    /// threshold of 3".
    pub fn words(&self) -> String {
        use crate::notification::Reason;
        use crate::text::duration_words;
        let n = self.count;
        let (events, users) = if n == 1 {
            ("event", "distinct user")
        } else {
            ("events", "distinct users")
        };
        let window = |w: crate::rule::Window| match w {
            crate::rule::Window::Fixed => "fixed",
            crate::rule::Window::Sliding => "sliding",
        };
        match self.reason {
            Reason::New => "a first occurrence (ONLY_NEW)".into(),
            Reason::Threshold {
                threshold,
                period_ms,
                window: w,
            } => format!(
                "{n} {events} in a {} window of {} reached the threshold of {threshold}",
                window(w),
                duration_words(period_ms)
            ),
            Reason::UniqueUsers {
                threshold,
                period_ms,
                window: w,
            } => format!(
                "{n} {users} in a {} window of {} reached the threshold of {threshold}",
                window(w),
                duration_words(period_ms)
            ),
            Reason::Spike { spike, baseline } => {
                let (buckets, needed, threshold) = (baseline.buckets, baseline.needed, spike.threshold);
                let baseline = if buckets == 0 {
                    "no baseline yet".to_owned()
                } else {
                    let mean = baseline.sum as f64 / buckets as f64;
                    format!(
                        "a baseline of {:.1} per bucket over {buckets} bucket(s)",
                        (mean * 10.0).round() / 10.0
                    )
                };
                format!(
                    "{n} {events} in a bucket of {}, {baseline}: {needed} needed (the larger of threshold {threshold} \
                     and {}× the baseline)",
                    duration_words(spike.period_ms),
                    spike.factor()
                )
            }
            Reason::Reappeared {
                quiet_period_ms,
                last_seen_ms,
            } => match last_seen_ms {
                Some(seen) => format!(
                    "seen again after {} without events (last seen at {}; quietPeriod {})",
                    duration_words(u64::try_from(self.at_ms - seen).unwrap_or(0)),
                    crate::notification::rfc3339_ms(seen),
                    duration_words(quiet_period_ms)
                ),
                None => format!(
                    "seen again after more than {} without events",
                    duration_words(quiet_period_ms)
                ),
            },
            Reason::NoEvents {
                quiet_period_ms,
                last_event_ms,
            } => crate::kind::no_events::words(quiet_period_ms, last_event_ms, self.at_ms),
            Reason::Digest { min_period_s, .. } => format!(
                "{n} {events} gathered over {}",
                duration_words(min_period_s.saturating_mul(1000))
            ),
            Reason::Direct => "a direct notification".into(),
            Reason::Resolved => "the alert resolved".into(),
            Reason::Acknowledged => "the alert was acknowledged".into(),
            Reason::Reminder { number, max } => {
                format!("reminder {number} of {max} of an alert still firing")
            }
            Reason::Escalation { step, steps } => {
                format!("escalation step {step} of {steps} of an alert still firing")
            }
            Reason::QuietHours { fired, resolved, .. } => {
                format!("{fired} fired and {resolved} resolved during quiet hours")
            }
        }
    }
}

impl Claim {
    /// The claim of a message link: `action` on `rule_id` (and `group_hash` when the action needs one), valid
    /// for [`LINK_TTL_S`] after `fired_at_s`. `None` when the ids are not ObjectIds or the group is missing or
    /// over [`MAX_GROUP_LEN`]: such a message gets no such link.
    pub fn for_message(
        action: Action,
        project_id: &str,
        rule_id: &str,
        group_hash: Option<&str>,
        title: Option<&str>,
        fired_at_s: i64,
    ) -> Option<Claim> {
        if !crate::event::is_object_id(project_id) || !crate::event::is_object_id(rule_id) {
            return None;
        }
        let group_hash = if action.needs_group() {
            let g = group_hash?;
            if g.is_empty() || g.len() > MAX_GROUP_LEN || g.trim() != g {
                return None;
            }
            Some(g.to_owned())
        } else {
            None
        };
        // The group's title: explain reads it, a mute's confirmation page shows which error it silences.
        let title = action.needs_group().then(|| {
            let t = title.unwrap_or_default();
            t.chars().take(MAX_TITLE_CHARS).collect::<String>()
        });
        Some(Claim {
            project_id: project_id.to_ascii_lowercase(),
            rule_id: rule_id.to_ascii_lowercase(),
            group_hash,
            action,
            expires_s: fired_at_s.saturating_add(LINK_TTL_S),
            mute_id: None,
            title,
            fired: None,
            alert_id: None,
        })
    }

    /// The claim of an alert link ([`Action::Ack`], [`Action::Resolve`]) of a firing's message: the alert
    /// `alert_id` of `rule_id`, with the group's title for the confirmation page, valid for [`LINK_TTL_S`]
    /// after `fired_at_s`. `None` for another action, ids that are not ObjectIds or a malformed alert id.
    pub fn for_alert(
        action: Action,
        project_id: &str,
        rule_id: &str,
        alert_id: &str,
        title: Option<&str>,
        fired_at_s: i64,
    ) -> Option<Claim> {
        if !action.on_alert()
            || !crate::event::is_object_id(project_id)
            || !crate::event::is_object_id(rule_id)
            || !crate::alert::is_alert_id(alert_id)
        {
            return None;
        }
        Some(Claim {
            project_id: project_id.to_ascii_lowercase(),
            rule_id: rule_id.to_ascii_lowercase(),
            group_hash: None,
            action,
            expires_s: fired_at_s.saturating_add(LINK_TTL_S),
            mute_id: None,
            title: title.map(|t| t.chars().take(MAX_TITLE_CHARS).collect()),
            fired: None,
            alert_id: Some(alert_id.to_owned()),
        })
    }

    /// The claim with the firing it belongs to, for [`Action::Explain`] (other actions ignore it).
    pub fn with_fired(mut self, fired: Fired) -> Claim {
        if self.action == Action::Explain {
            self.fired = Some(fired);
        }
        self
    }
}

/// Why a token is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    /// Not a token at all (wrong shape, too long, not base64url, an unknown claim): 400.
    #[error("this link is malformed")]
    Malformed,
    /// Its signature does not match: altered, or signed with another key: 403.
    #[error("this link's signature is not valid")]
    BadSignature,
    /// Valid, but past its expiry: 410.
    #[error("this link has expired")]
    Expired,
    /// A claim too long to sign within [`MAX_TOKEN_LEN`].
    #[error("the link would be longer than {MAX_TOKEN_LEN} characters")]
    TooLong,
}

/// The signing key (`KLAXON_ACTION_KEY`): at least [`MIN_KEY_LEN`] bytes. `Debug` never shows it.
#[derive(Clone)]
pub struct ActionKey(Vec<u8>);

impl std::fmt::Debug for ActionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ActionKey(<redacted>)")
    }
}

/// The key is shorter than [`MIN_KEY_LEN`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("KLAXON_ACTION_KEY must be at least {MIN_KEY_LEN} bytes (got {0}); e.g. `openssl rand -hex 32`")]
pub struct KeyTooShort(pub usize);

impl ActionKey {
    /// A key from its bytes (the variable's value as UTF-8 bytes; surrounding white space is ignored).
    pub fn new(key: &str) -> Result<Self, KeyTooShort> {
        let key = key.trim();
        if key.len() < MIN_KEY_LEN {
            return Err(KeyTooShort(key.len()));
        }
        Ok(ActionKey(key.as_bytes().to_vec()))
    }

    fn mac(&self, domain: &[u8], data: &[u8]) -> Hmac<Sha256> {
        // HMAC takes keys of any length: `new_from_slice` cannot fail for it.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
        m.update(domain);
        m.update(data);
        m
    }

    /// The token of `claim`.
    pub fn sign(&self, claim: &Claim) -> Result<String, ActionError> {
        let json = serde_json::to_vec(claim).map_err(|_| ActionError::Malformed)?;
        let payload = URL_SAFE_NO_PAD.encode(json);
        let head = format!("{VERSION}.{payload}");
        let sig = self.mac(DOMAIN, head.as_bytes()).finalize().into_bytes();
        let token = format!("{head}.{}", URL_SAFE_NO_PAD.encode(sig));
        if token.len() > MAX_TOKEN_LEN {
            return Err(ActionError::TooLong);
        }
        Ok(token)
    }

    /// The claim of `token` when it is well formed, signed with this key and not expired at `now_s`.
    pub fn verify(&self, token: &str, now_s: i64) -> Result<Claim, ActionError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(ActionError::Malformed);
        }
        let mut parts = token.split('.');
        let (Some(VERSION), Some(payload), Some(sig), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(ActionError::Malformed);
        };
        let sig = URL_SAFE_NO_PAD.decode(sig).map_err(|_| ActionError::Malformed)?;
        if sig.len() != 32 || payload.is_empty() {
            return Err(ActionError::Malformed);
        }
        let head = &token[..VERSION.len() + 1 + payload.len()];
        // `verify_slice` compares in constant time.
        self.mac(DOMAIN, head.as_bytes())
            .verify_slice(&sig)
            .map_err(|_| ActionError::BadSignature)?;
        let json = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| ActionError::Malformed)?;
        let claim: Claim = serde_json::from_slice(&json).map_err(|_| ActionError::Malformed)?;
        if now_s >= claim.expires_s {
            return Err(ActionError::Expired);
        }
        Ok(claim)
    }

    /// The confirmation form's CSRF value for `token`: bound to that link and unforgeable without the key (the
    /// visitor of a link has no console session to bind it to).
    pub fn form_token(&self, token: &str) -> String {
        hex_encode(&self.mac(CSRF_DOMAIN, token.as_bytes()).finalize().into_bytes())
    }

    /// True when `given` is [`ActionKey::form_token`] of `token` (constant-time compare).
    pub fn form_token_ok(&self, token: &str, given: &str) -> bool {
        let Ok(given) = hex::decode(given.trim()) else {
            return false;
        };
        self.mac(CSRF_DOMAIN, token.as_bytes())
            .verify_slice(&given)
            .is_ok()
    }

    /// A mute id derived from `token`: confirming the same link twice makes (replaces) one mute, not two.
    pub fn mute_id_for(&self, token: &str) -> String {
        let mac = self.mac(b"klaxon-action-mute.v1.", token.as_bytes()).finalize();
        hex_encode(&mac.into_bytes()[..8])
    }
}

fn hex_encode(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "5e3eef0679fa3700a0198a49";
    const R: &str = "5e3eef0679fa3700a0198a4a";

    fn key() -> ActionKey {
        ActionKey::new("0123456789abcdef0123456789abcdef").expect("32 bytes")
    }

    fn claim(action: Action) -> Claim {
        Claim::for_message(action, P, R, Some("11da"), Some("TypeError: x"), 1_000).expect("claim")
    }

    #[test]
    fn keys_are_long_enough_and_never_shown() {
        assert_eq!(ActionKey::new("short").err(), Some(KeyTooShort(5)));
        assert!(
            ActionKey::new(&format!("{}short{}", " ".repeat(30), " ".repeat(30))).is_err(),
            "trimmed first"
        );
        let k = ActionKey::new("0123456789abcdef0123456789abcdef-secret").expect("long");
        assert!(!format!("{k:?}").contains("secret"));
    }

    #[test]
    fn claims_of_messages() {
        let mute = claim(Action::MuteGroup1h);
        assert_eq!(mute.group_hash.as_deref(), Some("11da"));
        assert_eq!(mute.expires_s, 1_000 + LINK_TTL_S);
        assert_eq!(
            mute.title.as_deref(),
            Some("TypeError: x"),
            "the page shows the error"
        );
        let rule = claim(Action::MuteRule1h);
        assert_eq!(rule.group_hash, None, "a rule mute has no group");
        assert_eq!(rule.title, None, "nor a title");
        assert_eq!(claim(Action::Explain).title.as_deref(), Some("TypeError: x"));
        let long = "é".repeat(500);
        let c = Claim::for_message(Action::Explain, P, R, Some("g"), Some(&long), 0).expect("claim");
        assert_eq!(c.title.map(|t| t.chars().count()), Some(MAX_TITLE_CHARS));
        // table: what gets no link
        let none: &[(Action, &str, &str, Option<&str>)] = &[
            (Action::MuteGroup1h, "nope", R, Some("g")),
            (Action::MuteGroup1h, P, "000", Some("g")),
            (Action::MuteGroup1h, P, R, None),
            (Action::Explain, P, R, Some("")),
            (Action::MuteGroup24h, P, R, Some(" g")),
        ];
        for (a, p, r, g) in none {
            assert!(
                Claim::for_message(*a, p, r, *g, None, 0).is_none(),
                "{a:?} {p} {r} {g:?}"
            );
        }
        let big = "g".repeat(MAX_GROUP_LEN + 1);
        assert!(Claim::for_message(Action::MuteGroup1h, P, R, Some(&big), None, 0).is_none());
        // a rule mute needs no group at all
        assert!(Claim::for_message(Action::MuteRule1h, P, R, None, None, 0).is_some());
        // ids are lowercased
        let up = Claim::for_message(Action::MuteRule1h, &P.to_uppercase(), R, None, None, 0).expect("claim");
        assert_eq!(up.project_id, P);
    }

    /// An explain link carries its firing's numbers, signed; other links do not.
    #[test]
    fn explain_links_carry_their_firing() {
        use crate::notification::Reason;
        let k = key();
        let spike = Fired {
            at_ms: 1_000_000,
            count: 100,
            reason: Reason::Spike {
                spike: crate::kind::Spike {
                    period_ms: 3_600_000,
                    baseline_windows: 24,
                    factor_milli: 5000,
                    threshold: 10,
                },
                baseline: crate::kind::Baseline {
                    sum: 480,
                    buckets: 24,
                    needed: 100,
                },
            },
        };
        let c = claim(Action::Explain).with_fired(spike.clone());
        let token = k.sign(&c).expect("sign");
        assert!(token.len() <= MAX_TOKEN_LEN);
        let back = k.verify(&token, 1_000).expect("valid");
        assert_eq!(back.fired.as_ref(), Some(&spike));
        assert_eq!(
            spike.words(),
            "100 events in a bucket of 1 hour, a baseline of 20.0 per bucket over 24 bucket(s): 100 needed (the \
             larger of threshold 10 and 5× the baseline)"
        );
        assert_eq!(claim(Action::MuteGroup1h).with_fired(spike).fired, None);
        let cases = [
            (Reason::New, 1, "a first occurrence (ONLY_NEW)"),
            (
                Reason::Threshold {
                    threshold: 3,
                    period_ms: 60_000,
                    window: crate::rule::Window::Fixed,
                },
                3,
                "3 events in a fixed window of 1 minute reached the threshold of 3",
            ),
            (
                Reason::UniqueUsers {
                    threshold: 50,
                    period_ms: 3_600_000,
                    window: crate::rule::Window::Sliding,
                },
                50,
                "50 distinct users in a sliding window of 1 hour reached the threshold of 50",
            ),
        ];
        for (reason, count, want) in cases {
            let f = Fired {
                at_ms: 0,
                count,
                reason,
            };
            assert_eq!(f.words(), want);
        }
    }

    #[test]
    fn round_trips_and_is_url_safe() {
        let k = key();
        for a in Action::MESSAGE {
            let c = claim(a);
            let t = k.sign(&c).expect("sign");
            assert!(t.starts_with("v1."), "{t}");
            assert!(
                t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')),
                "{t}"
            );
            assert!(t.len() <= MAX_TOKEN_LEN);
            assert_eq!(k.verify(&t, 1_000), Ok(c));
        }
        let undo = Claim {
            mute_id: Some("0123456789abcdef".into()),
            action: Action::Undo,
            ..claim(Action::MuteGroup1h)
        };
        let t = k.sign(&undo).expect("sign");
        assert_eq!(
            k.verify(&t, 0).map(|c| c.mute_id),
            Ok(Some("0123456789abcdef".into()))
        );
    }

    #[test]
    fn refusals_table() {
        let k = key();
        let good = k.sign(&claim(Action::MuteGroup1h)).expect("sign");
        let (head, sig) = good.rsplit_once('.').expect("dot");
        let other = ActionKey::new("another key, also at least 32 bytes").expect("key");
        let by_other = other.sign(&claim(Action::MuteGroup1h)).expect("sign");
        // a different claim with the original signature: the classic alteration
        let mut altered_claim = claim(Action::MuteGroup1h);
        altered_claim.group_hash = Some("other".into());
        let altered_payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&altered_claim).expect("json"));
        let swapped = format!("v1.{altered_payload}.{sig}");
        // one flipped character in the payload
        let mut flipped: Vec<char> = good.chars().collect();
        flipped[5] = if flipped[5] == 'A' { 'B' } else { 'A' };
        let flipped: String = flipped.into_iter().collect();
        // a valid signature over something that is not a claim
        let junk_payload = URL_SAFE_NO_PAD.encode(b"{\"x\":1}");
        let junk_head = format!("v1.{junk_payload}");
        let junk_sig = URL_SAFE_NO_PAD.encode(k.mac(DOMAIN, junk_head.as_bytes()).finalize().into_bytes());
        let junk = format!("{junk_head}.{junk_sig}");
        let expiry = 1_000 + LINK_TTL_S;
        let table: Vec<(&str, String, i64, ActionError)> = vec![
            ("empty", String::new(), 0, ActionError::Malformed),
            ("no dots", "v1abc".into(), 0, ActionError::Malformed),
            (
                "other version",
                good.replacen("v1.", "v2.", 1),
                0,
                ActionError::Malformed,
            ),
            ("extra part", format!("{good}.x"), 0, ActionError::Malformed),
            ("sig not base64", format!("{head}.!!!"), 0, ActionError::Malformed),
            ("short sig", format!("{head}.AAAA"), 0, ActionError::Malformed),
            (
                "too long",
                format!("v1.{}.{sig}", "A".repeat(MAX_TOKEN_LEN)),
                0,
                ActionError::Malformed,
            ),
            ("other key", by_other, 0, ActionError::BadSignature),
            ("swapped payload", swapped, 0, ActionError::BadSignature),
            ("flipped char", flipped, 0, ActionError::BadSignature),
            ("signed junk", junk, 0, ActionError::Malformed),
            ("at expiry", good.clone(), expiry, ActionError::Expired),
            ("long past", good.clone(), expiry + 86_400, ActionError::Expired),
        ];
        for (name, token, now, want) in table {
            assert_eq!(k.verify(&token, now), Err(want), "{name}");
        }
        assert!(k.verify(&good, expiry - 1).is_ok(), "a second before expiry");
    }

    #[test]
    fn form_tokens_and_mute_ids_are_bound_to_the_link() {
        let k = key();
        let a = k.sign(&claim(Action::MuteGroup1h)).expect("sign");
        let b = k.sign(&claim(Action::MuteGroup24h)).expect("sign");
        let fa = k.form_token(&a);
        assert_eq!(fa.len(), 64);
        assert!(k.form_token_ok(&a, &fa));
        assert!(!k.form_token_ok(&b, &fa), "another link's form token");
        assert!(!k.form_token_ok(&a, ""), "empty");
        assert!(!k.form_token_ok(&a, "zz"), "not hex");
        assert!(!k.form_token_ok(&a, &fa[..62]), "shorter");
        let other = ActionKey::new("another key, also at least 32 bytes").expect("key");
        assert!(!other.form_token_ok(&a, &fa), "another key");
        assert_eq!(k.mute_id_for(&a), k.mute_id_for(&a), "one link, one mute");
        assert_ne!(k.mute_id_for(&a), k.mute_id_for(&b));
        assert_eq!(k.mute_id_for(&a).len(), 16);
    }

    #[test]
    fn alert_links_name_their_alert() {
        let k = key();
        let id = crate::alert::alert_id(P, R, "11da", "1000");
        for a in Action::ALERT {
            let c = Claim::for_alert(a, P, R, &id, Some("TypeError: x"), 1_000).expect("claim");
            assert_eq!(c.alert_id.as_deref(), Some(id.as_str()));
            assert_eq!(c.expires_s, 1_000 + LINK_TTL_S);
            let t = k.sign(&c).expect("sign");
            assert_eq!(k.verify(&t, 1_000), Ok(c));
            assert!(a.on_alert() && a.mute_secs().is_none() && !a.needs_group());
        }
        assert_eq!(Action::Ack.as_str(), "ack");
        assert_eq!(Action::Resolve.as_str(), "resolve");
        assert!(Claim::for_alert(Action::MuteGroup1h, P, R, &id, None, 0).is_none());
        assert!(Claim::for_alert(Action::Ack, P, R, "../x", None, 0).is_none());
        assert!(Claim::for_alert(Action::Ack, "p", R, &id, None, 0).is_none());
        // a claim of before the alert links reads as before (no `al`)
        let old = claim(Action::MuteGroup1h);
        assert_eq!(old.alert_id, None);
        assert!(!serde_json::to_string(&old).expect("json").contains("\"al\""));
    }

    #[test]
    fn too_long_claims_are_not_signed() {
        let mut c = claim(Action::Explain);
        c.title = Some("x".repeat(MAX_TOKEN_LEN));
        assert_eq!(key().sign(&c), Err(ActionError::TooLong));
    }
}
