//! Error classes.
//!
//! The sender loop decides with these alone: a [`DeliveryError::Transient`] is retried with backoff (after at
//! least `retry_after` when the destination said so), a [`DeliveryError::Permanent`] goes straight to the dead
//! letter queue. Reasons are short, human-readable and secret-free: they never contain an endpoint URL, a bot
//! token, a password or a webhook secret, so they can be logged, stored in the delivery trail and put in an AMQP
//! header as they are.

use std::time::{Duration, SystemTime};

/// Why a delivery failed, and whether trying again can help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    /// Worth retrying: connect error, timeout, HTTP 5xx/408/429, SMTP 4xx or a lost SMTP connection.
    #[error("transient delivery failure: {reason}")]
    Transient {
        /// Short, secret-free description.
        reason: String,
        /// How long the destination asked us to wait (`Retry-After`, Telegram's `retry_after`), if it did.
        retry_after: Option<Duration>,
        /// The destination said this endpoint is over its rate limit (HTTP 429): the endpoint is throttled, its
        /// host is up.
        rate_limited: bool,
    },
    /// Retrying cannot help: other HTTP 4xx, invalid or refused endpoint, SMTP 5xx, missing configuration.
    #[error("permanent delivery failure: {reason}")]
    Permanent {
        /// Short, secret-free description.
        reason: String,
    },
}

impl DeliveryError {
    // Reasons are bounded where they are made (one line, ≤ 512 bytes): they carry hosts and response snippets
    // into logs, the trail and AMQP headers.
    pub(crate) fn transient(reason: impl Into<String>) -> Self {
        DeliveryError::Transient {
            reason: klaxon_core::text::reason(&reason.into()),
            retry_after: None,
            rate_limited: false,
        }
    }

    pub(crate) fn permanent(reason: impl Into<String>) -> Self {
        DeliveryError::Permanent {
            reason: klaxon_core::text::reason(&reason.into()),
        }
    }

    /// True for [`DeliveryError::Transient`].
    pub fn is_transient(&self) -> bool {
        matches!(self, DeliveryError::Transient { .. })
    }

    /// The secret-free reason.
    pub fn reason(&self) -> &str {
        match self {
            DeliveryError::Transient { reason, .. } | DeliveryError::Permanent { reason } => reason,
        }
    }

    /// The wait the destination asked for, if any (transient errors only).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            DeliveryError::Transient { retry_after, .. } => *retry_after,
            DeliveryError::Permanent { .. } => None,
        }
    }

    /// True for a rate limit (HTTP 429) of the endpoint.
    pub fn is_rate_limited(&self) -> bool {
        matches!(
            self,
            DeliveryError::Transient {
                rate_limited: true,
                ..
            }
        )
    }

    /// `"transient"` or `"permanent"`: a low-cardinality label for metrics and logs.
    pub fn class(&self) -> &'static str {
        if self.is_transient() {
            "transient"
        } else {
            "permanent"
        }
    }
}

/// A configuration that cannot work. Only [`crate::Channels::new`] returns it, once, at startup; it is
/// permanent (fix the configuration and restart).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChannelError {
    /// A setting is invalid. The message names the setting and never repeats a secret value.
    #[error("invalid channel configuration `{setting}`: {reason}")]
    InvalidConfig {
        /// Which setting (`telegram_api`, `smtp_url`, `smtp_from`, …).
        setting: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// Classifies an HTTP answer. `None` means success (2xx).
///
/// 408, 429 and 5xx are transient; every other status (3xx included: redirects are never followed, since a
/// redirect could lead to an address we have not vetted) is permanent.
pub fn classify_status(
    status: u16,
    retry_after: Option<Duration>,
    what: &str,
    detail: &str,
) -> Option<DeliveryError> {
    if (200..300).contains(&status) {
        return None;
    }
    let reason = if detail.is_empty() {
        format!("{what} answered HTTP {status}")
    } else {
        format!("{what} answered HTTP {status}: {detail}")
    };
    let reason = klaxon_core::text::reason(&reason);
    Some(
        if status == 408 || status == 429 || (500..600).contains(&status) {
            DeliveryError::Transient {
                reason,
                retry_after,
                rate_limited: status == 429,
            }
        } else {
            DeliveryError::Permanent { reason }
        },
    )
}

/// Longest wait we accept from a `Retry-After`: anything longer is capped, the sender's backoff takes over.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Parses a `Retry-After` value: delay-seconds or an HTTP-date (relative to `now`; a date in the past gives
/// zero). Garbage gives `None`.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(MAX_RETRY_AFTER),
    )
}

/// Keeps an error detail short, on one line, and free of the given secrets.
pub(crate) fn tidy(detail: &str, secrets: &[&str]) -> String {
    one_line(detail, secrets, 160)
}

/// `text` on one line (control characters become spaces), trimmed, free of the given secrets and cut after
/// `max` characters (marked with `…`).
pub(crate) fn one_line(text: &str, secrets: &[&str], max: usize) -> String {
    let mut s: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    for secret in secrets.iter().filter(|s| s.len() >= 3) {
        s = s.replace(secret, "<redacted>");
    }
    let s = s.trim();
    if s.chars().count() > max {
        let cut: String = s.chars().take(max).collect();
        format!("{cut}…")
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        let table: &[(u16, Option<bool>)] = &[
            (200, None),
            (204, None),
            (301, Some(false)),
            (400, Some(false)),
            (401, Some(false)),
            (403, Some(false)),
            (404, Some(false)),
            (408, Some(true)),
            (410, Some(false)),
            (429, Some(true)),
            (500, Some(true)),
            (502, Some(true)),
            (503, Some(true)),
        ];
        for &(status, transient) in table {
            let got = classify_status(status, None, "x", "").map(|e| e.is_transient());
            assert_eq!(got, transient, "status {status}");
            // only a 429 is the endpoint's rate limit
            let limited = classify_status(status, None, "x", "").is_some_and(|e| e.is_rate_limited());
            assert_eq!(limited, status == 429, "status {status}");
        }
    }

    #[test]
    fn retry_after_forms() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").expect("date");
        assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
        assert_eq!(parse_retry_after("99999999999", now), Some(MAX_RETRY_AFTER));
    }

    #[test]
    fn tidy_scrubs_and_bounds() {
        assert_eq!(
            tidy("bad token 123:ABC\nmore", &["123:ABC"]),
            "bad token <redacted> more"
        );
        assert_eq!(tidy(&"x".repeat(500), &[]).chars().count(), 161);
    }
}
