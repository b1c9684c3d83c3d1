//! Email over SMTP with lettre: one pooled async transport, a multipart/alternative (text + HTML) message to
//! every address of the endpoint.
//!
//! `--smtp-url` forms: `smtp://host[:port]` (plain, port 25), `smtp://host[:port]?tls=starttls` (or
//! `?tls=required`: STARTTLS, mandatory, port 587), `smtp://…?tls=opportunistic` (STARTTLS when offered),
//! `smtps://host[:port]` (implicit TLS, port 465). `user:password@` in the URL (percent-encoded) enables AUTH.
//! A path segment sets the EHLO name.

use std::time::Duration;

use klaxon_core::NotificationTask;
use lettre::address::Envelope;
use lettre::message::header::{HeaderName, HeaderValue, Headers, To};
use lettre::message::{Mailbox, Mailboxes, MultiPart};
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

/// The `Message-ID` of the email of a notification: `<{notification id}@klaxon>` (the firing's id is what an
/// alert's later messages reply to).
pub fn message_id(notification_id: &str) -> String {
    format!("<{notification_id}@klaxon>")
}

/// The `Message-ID` a lifecycle email (resolved, acknowledged, reminder, escalation) replies to: the first
/// email this address received about the alert (`alert.firingNotificationId`: the firing's on this channel, or
/// the first message of a member that heard of the alert later), in `In-Reply-To` and `References`, so mail
/// clients show the alert as one thread. `None` for a firing; for the first message itself (an escalation email
/// to someone who never got the firing: it starts its own thread); and for an id that is not a notification id
/// of ours (ids are hex; anything else is not put in a header).
pub fn replies_to(task: &NotificationTask) -> Option<String> {
    let firing = &task.alert.as_ref()?.firing_notification_id;
    let ours = !firing.is_empty()
        && firing.len() <= 128
        && firing.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let first = *firing == task.notification_id;
    (task.reason.is_lifecycle() && ours && !first).then(|| message_id(firing))
}

/// Header lines are folded to stay within this many octets (RFC 5322 section 2.1.1: "SHOULD be no more than 78
/// characters", "MUST be no more than 998").
const HEADER_LINE: usize = 78;

/// The `To:` header with the address list folded after commas, so that no line exceeds [`HEADER_LINE`] octets
/// (unless a single address is longer, which stays under 998: an address is at most 254 octets).
///
/// lettre encodes each mailbox (RFC 2047 for non-ASCII display names) but writes the whole list on one line: 60
/// recipients made a 1,300-octet line that SMTP servers refuse (`500 Line too long`, RFC 5321 section
/// 4.5.3.1.6). Each mailbox is encoded here by lettre's own `To` header, then the list is folded between them.
fn folded_to(to: &[Mailbox]) -> Result<HeaderValue, DeliveryError> {
    const NAME: &str = "To";
    let mut encoded = String::new();
    let mut line = NAME.len() + ": ".len();
    for (i, mailbox) in to.iter().enumerate() {
        let mut one = Headers::new();
        one.set(To::from(Mailboxes::from(mailbox.clone())));
        let rendered = one.to_string();
        let value = rendered
            .strip_prefix("To: ")
            .and_then(|v| v.strip_suffix("\r\n"))
            .ok_or_else(|| DeliveryError::permanent("email: cannot encode a recipient"))?;
        // the width of the value's first line (an encoded display name may be folded already)
        let first = value.split("\r\n").next().unwrap_or(value).len();
        if i > 0 {
            encoded.push(',');
            line += 1;
            if line + 1 + first > HEADER_LINE {
                encoded.push_str("\r\n");
                line = 0;
            }
            encoded.push(' ');
            line += 1;
        }
        encoded.push_str(value);
        line = match value.rsplit_once("\r\n") {
            Some((_, last)) => last.len(),
            None => line + value.len(),
        };
    }
    let raw = Mailboxes::from(to.to_vec()).to_string();
    Ok(HeaderValue::dangerous_new_pre_encoded(
        HeaderName::new_from_ascii_str(NAME),
        raw,
        encoded,
    ))
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
        // The envelope (RCPT TO) is set from the list itself: the folded header is written pre-encoded, so
        // lettre is not asked to read it back.
        let envelope = Envelope::new(
            Some(self.inner.from.email.clone()),
            to.iter().map(|m| m.email.clone()).collect(),
        )
        .map_err(|e| DeliveryError::permanent(format!("email: {e}")))?;
        let mut builder = Message::builder()
            .from(self.inner.from.clone())
            .raw_header(folded_to(&to)?)
            .subject(subject)
            .message_id(Some(message_id(&task.notification_id)));
        if let Some(firing) = replies_to(task) {
            // an alert's life is one thread: its messages reply to the firing email
            builder = builder.in_reply_to(firing.clone()).references(firing);
        }
        let message = builder
            .envelope(envelope)
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
            Ok(Ok(_)) => Ok(Delivered::messages(1)),
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
    fn to_headers_are_folded_whatever_the_count() {
        for n in [1usize, 2, 3, 10, 60, 500] {
            let to: Vec<Mailbox> = (0..n)
                .map(|i| format!("user{i}@example.test").parse().expect("mailbox"))
                .collect();
            let value = folded_to(&to).expect("encoded");
            let mut headers = Headers::new();
            headers.insert_raw(value);
            let text = headers.to_string();
            for line in text.trim_end_matches("\r\n").split("\r\n") {
                assert!(line.len() <= HEADER_LINE, "{n}: {} octets: {line}", line.len());
            }
            // unfolded, it is the plain comma-separated list
            let unfolded = text.replace("\r\n ", " ");
            let want = to.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
            assert_eq!(unfolded, format!("To: {want}\r\n"), "{n}");
        }
        // display names are encoded by lettre (RFC 2047), the list still folded
        let to: Vec<Mailbox> = (0..5)
            .map(|i| {
                format!("Ünïcode Person {i} <p{i}@example.test>")
                    .parse()
                    .expect("mailbox")
            })
            .collect();
        let mut headers = Headers::new();
        headers.insert_raw(folded_to(&to).expect("encoded"));
        let text = headers.to_string();
        assert!(text.is_ascii(), "{text}");
        for line in text.trim_end_matches("\r\n").split("\r\n") {
            assert!(line.len() <= HEADER_LINE, "{} octets: {line}", line.len());
        }
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
