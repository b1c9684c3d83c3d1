//! Keeping secrets out of logs: the [`Secret`] newtype and [`redact_endpoint`].

use std::fmt;

use klaxon_core::ChannelKind;
use sha2::{Digest, Sha256};

/// A secret string (bot token, SMTP URL with its password, webhook secret). `Debug` and `Display` print
/// `<redacted>`; only [`Secret::expose`] gives the value, at the one place that must send it.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Secret(value.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A short hex digest used to tell endpoints apart without showing them.
pub(crate) fn short_hash(s: &str) -> String {
    hex::encode(&Sha256::digest(s.as_bytes())[..6])
}

/// A display form of an endpoint that is safe to log and store in the delivery trail.
///
/// URLs keep only scheme and host (`https://hooks.slack.com/…`): paths and queries of webhook URLs are bearer
/// secrets. Telegram chat ids keep their first and last two characters, email addresses the first character of
/// the local part and the domain (`j…@example.com`).
pub fn redact_endpoint(channel: ChannelKind, endpoint: &str) -> String {
    // bounded: an endpoint is a tenant's input (a 60,000-character hostname must not make a log line that long)
    klaxon_core::text::one_line(&redact_endpoint_unbounded(channel, endpoint), 200)
}

fn redact_endpoint_unbounded(channel: ChannelKind, endpoint: &str) -> String {
    let endpoint = endpoint.trim();
    if let Ok(url) = url::Url::parse(endpoint) {
        if let Some(host) = url.host_str() {
            return format!("{}://{}/…", url.scheme(), host);
        }
    }
    match channel {
        ChannelKind::Email => endpoint
            .split(',')
            .map(|addr| mask_address(addr.trim()))
            .collect::<Vec<_>>()
            .join(", "),
        ChannelKind::Telegram => mask_middle(endpoint),
        ChannelKind::Slack | ChannelKind::Webhook | ChannelKind::Loop => "<invalid url>".to_owned(),
    }
}

fn mask_address(addr: &str) -> String {
    match addr.rsplit_once('@') {
        Some((local, domain)) => {
            let first: String = local.chars().take(1).collect();
            format!("{first}…@{domain}")
        }
        None => mask_middle(addr),
    }
}

fn mask_middle(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() <= 4 {
        return "…".to_owned();
    }
    let head: String = chars[..2].iter().collect();
    let tail: String = chars[chars.len() - 2..].iter().collect();
    format!("{head}…{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_is_redacted() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?} {s}"), "Secret(<redacted>) <redacted>");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn endpoints_are_redacted() {
        let table = [
            (
                ChannelKind::Slack,
                "https://hooks.slack.com/services/T0/B0/SECRET",
                "https://hooks.slack.com/…",
            ),
            (
                ChannelKind::Webhook,
                "http://user:pw@example.com:8080/x?token=SECRET",
                "http://example.com/…",
            ),
            (ChannelKind::Webhook, "not a url SECRET", "<invalid url>"),
            (ChannelKind::Telegram, "-1001234567890", "-1…90"),
            (ChannelKind::Telegram, "123", "…"),
            (
                ChannelKind::Telegram,
                "https://notify.bot.codex.so/u/SECRET",
                "https://notify.bot.codex.so/…",
            ),
            (
                ChannelKind::Email,
                "john@example.com, ann@corp.test",
                "j…@example.com, a…@corp.test",
            ),
        ];
        for (channel, endpoint, want) in table {
            let got = redact_endpoint(channel, endpoint);
            assert_eq!(got, want, "{endpoint}");
            assert!(!got.contains("SECRET"));
        }
    }
}
