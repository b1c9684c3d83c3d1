//! Email over SMTP with lettre: one pooled async transport, a multipart/alternative (text + HTML) message to
//! every address of the endpoint.
//!
//! `--smtp-url` forms: `smtp://host[:port]` (plain, port 25), `smtp://host[:port]?tls=starttls` (or
//! `?tls=required`: STARTTLS, mandatory, port 587), `smtp://…?tls=opportunistic` (STARTTLS when offered),
//! `smtps://host[:port]` (implicit TLS, port 465). `user:password@` in the URL (percent-encoded) enables AUTH.
//! A path segment sets the EHLO name.

use std::time::Duration;

use klaxon_core::NotificationTask;
use lettre::message::{Mailbox, MultiPart};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::error::{one_line, tidy};
use crate::render::{MessageContext, EMAIL_HTML, EMAIL_SUBJECT, EMAIL_TEXT};
use crate::secret::redact_endpoint;
use crate::{ChannelError, Channels, Delivered, DeliveryError, Secret};

/// Longest subject line, in characters, counting the `…` that marks a cut (RFC 5322 recommends lines of at
/// most 78 characters and mail clients show far fewer; the key facts come first, the title last).
pub const MAX_SUBJECT_CHARS: usize = 200;

/// Builds the pooled transport from `--smtp-url`. Errors never repeat the URL (it may hold a password).
pub(crate) fn transport(
    smtp_url: &Secret,
    timeout: Duration,
) -> Result<AsyncSmtpTransport<Tokio1Executor>, ChannelError> {
    let invalid = |reason: String| ChannelError::InvalidConfig {
        setting: "smtp_url",
        reason,
    };
    let mut url =
        url::Url::parse(smtp_url.expose().trim()).map_err(|e| invalid(format!("not a URL ({e})")))?;
    if !matches!(url.scheme(), "smtp" | "smtps") {
        return Err(invalid("scheme must be smtp or smtps".into()));
    }
    // `tls=starttls` is our documented spelling; lettre calls it `required`.
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| {
            let v = if k == "tls" && v == "starttls" {
                "required".into()
            } else {
                v.into_owned()
            };
            (k.into_owned(), v)
        })
        .collect();
    if let Some((_, tls)) = pairs.iter().find(|(k, _)| k == "tls") {
        if !matches!(tls.as_str(), "required" | "opportunistic") {
            return Err(invalid("tls must be starttls, required or opportunistic".into()));
        }
    }
    // Credentials never cross a network in clear text: a plain smtp:// URL (or opportunistic STARTTLS, which
    // an attacker on the path can strip) with a user or password is refused, except to this machine.
    let encrypted = url.scheme() == "smtps" || pairs.iter().any(|(k, v)| k == "tls" && v == "required");
    let has_credentials = !url.username().is_empty() || url.password().is_some();
    // (smtp: is not a "special" scheme to the URL parser, so an IP address comes back as a domain string)
    let local = url.host_str().is_some_and(|h| {
        h.eq_ignore_ascii_case("localhost")
            || h.trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    });
    if has_credentials && !encrypted && !local {
        return Err(invalid(
            "the URL has credentials but no TLS: they would cross the network in clear text; use smtps://… or add ?tls=starttls".into(),
        ));
    }
    if pairs.is_empty() {
        url.set_query(None);
    } else {
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    // The pooled transport spawns its pool task when built: without a runtime lettre would panic.
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(invalid("no Tokio runtime: build Channels inside one".into()));
    }
    let builder = AsyncSmtpTransport::<Tokio1Executor>::from_url(url.as_str())
        .map_err(|e| invalid(tidy(&e.to_string(), &[smtp_url.expose()])))?;
    Ok(builder.timeout(Some(timeout)).build())
}

pub(crate) fn parse_from(from: &str) -> Result<Mailbox, ChannelError> {
    from.trim().parse().map_err(|_| ChannelError::InvalidConfig {
        setting: "smtp_from",
        reason: "not an email address".into(),
    })
}

fn recipients(endpoint: &str) -> Result<Vec<Mailbox>, DeliveryError> {
    let mut out = Vec::new();
    for addr in endpoint.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let mailbox = addr.parse::<Mailbox>().map_err(|_| {
            DeliveryError::permanent(format!(
                "email: invalid address {}",
                redact_endpoint(klaxon_core::ChannelKind::Email, addr)
            ))
        })?;
        out.push(mailbox);
    }
    if out.is_empty() {
        return Err(DeliveryError::permanent("email: endpoint has no address"));
    }
    Ok(out)
}

/// Classifies an SMTP failure: 4xx replies, timeouts and connection trouble are transient; 5xx replies and
/// client-side problems (an AUTH mechanism or TLS requirement the server cannot meet) are permanent.
fn classify_smtp(e: &lettre::transport::smtp::Error, secrets: &[&str]) -> DeliveryError {
    let detail = tidy(&e.to_string(), secrets);
    if e.is_permanent() {
        DeliveryError::permanent(format!("email: SMTP server refused: {detail}"))
    } else if e.is_transient() {
        DeliveryError::transient(format!("email: SMTP server deferred: {detail}"))
    } else if e.is_timeout() {
        DeliveryError::transient(format!("email: SMTP timed out: {detail}"))
    } else if e.is_client() {
        DeliveryError::permanent(format!("email: SMTP client error: {detail}"))
    } else {
        DeliveryError::transient(format!("email: SMTP connection failed: {detail}"))
    }
}

impl Channels {
    /// Subject (one line, at most [`MAX_SUBJECT_CHARS`]), text part and HTML part.
    pub(crate) fn email_parts(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<(String, String, String), DeliveryError> {
        let r = &self.inner.renderer;
        let subject = one_line(
            &r.render_with(EMAIL_SUBJECT, task, ctx)?,
            &[],
            MAX_SUBJECT_CHARS - 1,
        );
        let text = r.render_with(EMAIL_TEXT, task, ctx)?;
        let html = r.render_with(EMAIL_HTML, task, ctx)?;
        Ok((subject, text, html))
    }

    pub(crate) async fn deliver_email(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<Delivered, DeliveryError> {
        let to = recipients(&task.endpoint)?;
        let (subject, text, html) = self.email_parts(task, ctx)?;
        let mut builder = Message::builder()
            .from(self.inner.from.clone())
            .subject(subject)
            .message_id(Some(format!("<{}@klaxon>", task.notification_id)));
        for mailbox in to {
            builder = builder.to(mailbox);
        }
        let message = builder
            .multipart(MultiPart::alternative_plain_html(text, html))
            .map_err(|e| {
                DeliveryError::permanent(format!(
                    "email: cannot build message: {}",
                    tidy(&e.to_string(), &[])
                ))
            })?;
        let secrets = [self.inner.cfg.smtp_url.expose(), task.endpoint.as_str()];
        // lettre's timeout bounds each command; this bounds the whole conversation.
        let overall = self.inner.cfg.connect_timeout + self.inner.cfg.request_timeout * 2;
        match tokio::time::timeout(overall, self.inner.smtp.send(message)).await {
            Ok(Ok(_)) => Ok(Delivered { messages: 1 }),
            Ok(Err(e)) => Err(classify_smtp(&e, &secrets)),
            Err(_) => Err(DeliveryError::transient("email: SMTP conversation timed out")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn smtp_urls() {
        let t = Duration::from_secs(1);
        for ok in [
            "smtp://127.0.0.1:2525",
            "smtp://mail.example.com?tls=starttls",
            "smtp://u:p%40ss@mail.example.com:587?tls=required",
            "smtp://mail.example.com?tls=opportunistic",
            "smtps://u:p@mail.example.com",
            "smtp://u:p@127.0.0.1:2525",
            "smtp://u:p@localhost:25",
        ] {
            let r = transport(&Secret::new(ok), t);
            assert!(r.is_ok(), "{ok}: {:?}", r.err());
        }
        for bad in ["http://x", "smtp://x?tls=maybe", "nonsense", "smtp://"] {
            let err = transport(&Secret::new(format!("{bad}#topsecret")), t).expect_err(bad);
            assert!(!err.to_string().contains("topsecret"), "{err}");
        }
        for clear in [
            "smtp://user:topsecret@mail.example.com:25",
            "smtp://user@mail.example.com:25",
            "smtp://user:topsecret@mail.example.com?tls=opportunistic",
        ] {
            let err = transport(&Secret::new(clear), t).expect_err(clear).to_string();
            assert!(err.contains("clear text") && !err.contains("topsecret"), "{err}");
        }
    }

    #[test]
    fn addresses() {
        assert_eq!(recipients("a@x.test, b@y.test").map(|v| v.len()), Ok(2));
        assert!(recipients(" , ").is_err());
        let err = recipients("a@x.test, not an address").expect_err("bad");
        assert!(!err.reason().contains("not an address"), "{err}");
    }

    #[test]
    fn subjects_are_one_bounded_line() {
        assert_eq!(one_line(" a\nb ", &[], 10), "a b");
        assert_eq!(
            one_line(&"x".repeat(300), &[], MAX_SUBJECT_CHARS - 1)
                .chars()
                .count(),
            MAX_SUBJECT_CHARS
        );
    }
}
