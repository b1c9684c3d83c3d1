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
/// URLs keep only scheme and host, plus a fingerprint of the whole endpoint (`https://hooks.slack.com/…#a1b2c3`):
/// paths and queries of webhook URLs are bearer secrets, and without the fingerprint every Slack webhook would
/// look the same. Telegram chat ids and Slack channel ids keep their first and last two characters, email addresses the first character
/// of the local part and the domain (`j…@example.com`). A PagerDuty routing key is only its fingerprint
/// (`routing key …#a1b2c3`).
///
/// The fingerprint is the first 6 hex digits (24 bits) of the SHA-256 of the whole endpoint, unkeyed, so every
/// process of a fleet and every later run shows the same one for the same endpoint (the trail, logs, `dead list`
/// and the console agree without a shared key). Unkeyed is safe for URLs because what it hides is a long random
/// token (a Slack webhook's path carries ~130 bits): 24 bits of a hash cannot give it back, and over that many
/// candidates every fingerprint has astronomically many preimages. It is not used for chat ids and email
/// addresses, which are guessable: a hash of those could be confirmed by trying candidates.
pub fn redact_endpoint(channel: ChannelKind, endpoint: &str) -> String {
    let endpoint = endpoint.trim();
    if channel == ChannelKind::Pagerduty {
        // a routing key is a bearer secret of 32 random characters: shown as its fingerprint only, like a URL's
        // secret path (and never as a URL, whatever it looks like)
        return format!("routing key …#{}", fingerprint(endpoint));
    }
    if let Ok(url) = url::Url::parse(endpoint) {
        if let Some(host) = url.host_str() {
            // bounded: an endpoint is a tenant's input (a 60,000-character hostname must not make a log line that
            // long); the fingerprint stays whole
            let shown = klaxon_core::text::one_line(&format!("{}://{}/…", url.scheme(), host), 190);
            return format!("{shown}#{}", fingerprint(endpoint));
        }
    }
    klaxon_core::text::one_line(&redact_other(channel, endpoint), 200)
}

/// The 6-hex-digit fingerprint [`redact_endpoint`] appends to a redacted URL.
pub fn fingerprint(endpoint: &str) -> String {
    hex::encode(&Sha256::digest(endpoint.trim().as_bytes())[..3])
}

fn redact_other(channel: ChannelKind, endpoint: &str) -> String {
    match channel {
        ChannelKind::Email => endpoint
            .split(',')
            .map(|addr| mask_address(addr.trim()))
            .collect::<Vec<_>>()
            .join(", "),
        ChannelKind::Telegram => mask_middle(endpoint),
        ChannelKind::Slack if klaxon_core::rule::is_slack_channel_id(endpoint) => mask_middle(endpoint),
        ChannelKind::Slack
        | ChannelKind::Webhook
        | ChannelKind::Loop
        | ChannelKind::Discord
        | ChannelKind::Teams => "<invalid url>".to_owned(),
        ChannelKind::Pagerduty => format!("routing key …#{}", fingerprint(endpoint)),
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
                "https://hooks.slack.com/…#899d9e",
            ),
            (
                ChannelKind::Webhook,
                "http://user:pw@example.com:8080/x?token=SECRET",
                "http://example.com/…#7b912c",
            ),
            (ChannelKind::Webhook, "not a url SECRET", "<invalid url>"),
            (ChannelKind::Telegram, "-1001234567890", "-1…90"),
            (ChannelKind::Telegram, "123", "…"),
            (ChannelKind::Slack, "C0123ABCD", "C0…CD"),
            (ChannelKind::Slack, "#alerts", "<invalid url>"),
            (
                ChannelKind::Telegram,
                "https://notify.bot.codex.so/u/SECRET",
                "https://notify.bot.codex.so/…#223c37",
            ),
            (
                ChannelKind::Email,
                "john@example.com, ann@corp.test",
                "j…@example.com, a…@corp.test",
            ),
            (
                ChannelKind::Pagerduty,
                "SECRETr3FPuDvNOTEDyQYCc7trBkym",
                "routing key …#cf55f8",
            ),
            (
                ChannelKind::Pagerduty,
                "https://SECRET.example/x",
                "routing key …#798739",
            ),
            (
                ChannelKind::Discord,
                "https://discord.com/api/webhooks/123/SECRET",
                "https://discord.com/…#b0abbc",
            ),
        ];
        for (channel, endpoint, want) in table {
            let got = redact_endpoint(channel, endpoint);
            assert_eq!(got, want, "{endpoint}");
            assert!(!got.contains("SECRET"));
        }
    }

    /// Two webhooks on one host are told apart; the same endpoint always shows the same fingerprint, whatever
    /// surrounds it; a huge host is cut but keeps its fingerprint.
    #[test]
    fn endpoints_on_one_host_are_told_apart() {
        let a = redact_endpoint(ChannelKind::Slack, "https://hooks.slack.com/services/T0/B0/AAA");
        let b = redact_endpoint(ChannelKind::Slack, "https://hooks.slack.com/services/T0/B1/BBB");
        assert_ne!(a, b);
        assert!(
            a.starts_with("https://hooks.slack.com/…#") && a.len() == "https://hooks.slack.com/…#".len() + 6
        );
        assert_eq!(
            a,
            redact_endpoint(
                ChannelKind::Webhook,
                " https://hooks.slack.com/services/T0/B0/AAA\n"
            )
        );
        let long = format!("https://{}.example.com/x", "h".repeat(60_000));
        let shown = redact_endpoint(ChannelKind::Webhook, &long);
        assert!(
            shown.len() < 220 && shown.ends_with(&format!("#{}", fingerprint(&long))),
            "{shown}"
        );
    }
}
