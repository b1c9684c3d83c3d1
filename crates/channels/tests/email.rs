//! Email against the real SMTP sink (`scripts/smtp-sink.py`, aiosmtpd on 127.0.0.1:2525) and, for the error
//! classes, against a scripted SMTP server on loopback that answers `MAIL FROM` with a chosen reply.

mod common;

use std::time::Duration;

use common::*;
use klaxon_channels::{ChannelsConfig, DeliveryError, Secret};
use klaxon_core::{ChannelKind, Reason};
use mailparse::MailHeaderMap;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

async fn wait_for_mail(needle: &str) -> String {
    let found = klaxon_testkit::wait_for(Duration::from_secs(10), || {
        let needle = needle.to_owned();
        async move {
            klaxon_testkit::smtp::messages_containing(&needle)
                .into_iter()
                .next()
        }
    })
    .await;
    found.unwrap_or_else(|| {
        panic!(
            "no message with {needle} in {} (is the SMTP sink on {} running?)",
            klaxon_testkit::smtp::smtp_dir().display(),
            klaxon_testkit::smtp_url()
        )
    })
}

fn part_body(mail: &mailparse::ParsedMail<'_>, mime: &str) -> String {
    mail.subparts
        .iter()
        .find(|p| p.ctype.mimetype == mime)
        .unwrap_or_else(|| panic!("no {mime} part"))
        .get_body()
        .expect("decodable body")
}

#[tokio::test]
async fn email_is_multipart_to_every_recipient_with_escaped_html() {
    let ch = channels(config("http://127.0.0.1:1"));
    let ns = klaxon_testkit::unique_namespace();
    let title = format!("<script>&\"boom {ns}");
    let t = task(
        ChannelKind::Email,
        "dev@example.test, ops@example.org",
        threshold(),
        &[(&title, 100)],
    );
    assert_eq!(ch.deliver(&t).await.expect("delivered").messages, 1);

    let raw = wait_for_mail(&t.notification_id).await;
    let mail = mailparse::parse_mail(raw.as_bytes()).expect("parse");
    let subject = mail.headers.get_first_value("Subject").expect("subject");
    assert!(subject.contains(&title), "{subject}");
    assert_eq!(
        mail.headers.get_first_value("From").as_deref(),
        Some("klaxon-test@localhost")
    );
    let to = mail.headers.get_first_value("To").expect("to");
    assert!(
        to.contains("dev@example.test") && to.contains("ops@example.org"),
        "{to}"
    );
    let envelope = mail.headers.get_first_value("X-Envelope-To").expect("envelope");
    assert!(
        envelope.contains("dev@example.test") && envelope.contains("ops@example.org"),
        "{envelope}"
    );
    assert_eq!(mail.ctype.mimetype, "multipart/alternative");

    let text = part_body(&mail, "text/plain");
    assert!(text.contains(&title), "{text}");
    assert!(
        text.contains("Seen 100 times in the last minute (fixed window, threshold 100)"),
        "{text}"
    );
    assert!(
        text.contains(&t.project_id) && text.contains(&t.rule_id),
        "{text}"
    );
    assert!(text.contains("2023-11-14T22:13:20.123Z"), "{text}");

    let html = part_body(&mail, "text/html");
    assert!(
        html.contains(&format!("&lt;script&gt;&amp;&quot;boom {ns}")),
        "{html}"
    );
    assert!(!html.contains("<script>"), "{html}");
}

/// The header section of a raw message as its lines (folded lines stay separate: a fold starts with white space).
fn header_lines(raw: &str) -> Vec<&str> {
    raw.split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .split("\r\n")
        .collect()
}

/// 60 recipients (issue #22): lettre writes the `To:` address list on one line (over 1,300 octets here), which
/// RFC 5322 forbids (998 at most, 78 recommended) and the sink refuses (`500 Line too long`). Folded after commas,
/// every line stays short and every recipient gets the message.
#[tokio::test]
async fn sixty_recipients_get_a_folded_to_header_and_the_message() {
    let ch = channels(config("http://127.0.0.1:1"));
    let ns = klaxon_testkit::unique_namespace();
    let recipients: Vec<String> = (0..60)
        .map(|i| format!("recipient-{i:02}-{ns}@example.test"))
        .collect();
    let endpoint = recipients.join(", ");
    let t = task(
        ChannelKind::Email,
        &endpoint,
        threshold(),
        &[("Boom for sixty", 100)],
    );
    ch.deliver(&t).await.expect("delivered to 60 recipients");

    let raw = wait_for_mail(&t.notification_id).await;
    // (the sink writes its own X-Envelope-* lines first: the RCPT TO list, one line)
    for line in header_lines(&raw)
        .iter()
        .filter(|l| !l.starts_with("X-Envelope-"))
    {
        assert!(line.len() <= 78, "header line of {} octets: {line}", line.len());
    }
    let mail = mailparse::parse_mail(raw.as_bytes()).expect("parse");
    let to = mail.headers.get_first_value("To").expect("to");
    let envelope = mail.headers.get_first_value("X-Envelope-To").expect("envelope");
    for r in &recipients {
        assert!(to.contains(r.as_str()), "{r} missing from To: {to}");
        assert!(
            envelope.contains(r.as_str()),
            "{r} missing from RCPT TO: {envelope}"
        );
    }
    assert_eq!(envelope.split(", ").count(), 60, "{envelope}");
    let parsed = mailparse::addrparse(&to).expect("To parses as an address list");
    assert_eq!(parsed.len(), 60);
}

/// A title is text for the subject, never a header: CR/LF and header-looking text stay inside the one-line
/// `Subject:` (lettre encodes it; Klaxon folds control characters to spaces first).
#[tokio::test]
async fn hostile_titles_cannot_inject_headers() {
    let ch = channels(config("http://127.0.0.1:1"));
    let ns = klaxon_testkit::unique_namespace();
    let title = format!("boom {ns}\r\nBcc: victim@example.test\r\n\r\n<b>body</b>\nX-Evil: 1");
    let t = task(
        ChannelKind::Email,
        "dev@example.test",
        Reason::New,
        &[(&title, 1)],
    );
    ch.deliver(&t).await.expect("delivered");
    let raw = wait_for_mail(&t.notification_id).await;
    let headers = header_lines(&raw);
    assert!(
        !headers
            .iter()
            .any(|l| l.starts_with("Bcc:") || l.starts_with("X-Evil:")),
        "{headers:#?}"
    );
    let mail = mailparse::parse_mail(raw.as_bytes()).expect("parse");
    assert!(mail.headers.get_first_value("Bcc").is_none());
    assert!(mail.headers.get_first_value("X-Evil").is_none());
    let envelope = mail.headers.get_first_value("X-Envelope-To").expect("envelope");
    assert_eq!(envelope, "dev@example.test");
    let subject = mail.headers.get_first_value("Subject").expect("subject");
    assert!(
        subject.contains(&format!("boom {ns}  Bcc: victim@example.test")) && !subject.contains('\n'),
        "{subject:?}"
    );
    // the text part shows the title on one line too
    let text = part_body(&mail, "text/plain");
    assert!(!text.contains("\nBcc:"), "{text}");
}

#[tokio::test]
async fn email_digest_lists_groups() {
    let ch = channels(config("http://127.0.0.1:1"));
    let titles: Vec<String> = (0..22).map(|i| format!("Digest error {i:02}")).collect();
    let events: Vec<(&str, u64)> = titles
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), i as u64 + 1))
        .collect();
    let t = task(
        ChannelKind::Email,
        "dev@example.test",
        Reason::Digest {
            min_period_s: 3600,
            resolved: 0,
            more: Default::default(),
        },
        &events,
    );
    ch.deliver(&t).await.expect("delivered");
    let raw = wait_for_mail(&t.notification_id).await;
    let mail = mailparse::parse_mail(raw.as_bytes()).expect("parse");
    let subject = mail.headers.get_first_value("Subject").expect("subject");
    assert!(
        subject.contains("253 errors in") && subject.contains("in the last hour"),
        "{subject}"
    );
    assert!(
        subject.contains("Digest error 21"),
        "top group's title: {subject}"
    );
    let text = part_body(&mail, "text/plain");
    let first = text.find("22 × Digest error 21").expect("top group");
    let second = text.find("21 × Digest error 20").expect("second group");
    assert!(first < second, "{text}");
    assert!(text.contains("and 2 more"), "{text}");
    assert!(!text.contains("Digest error 01"), "{text}");
}

/// A minimal SMTP server that answers `MAIL FROM` with `mail_reply` and everything else politely.
async fn scripted_smtp(mail_reply: &'static str) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        // bounded: a handful of connections, a handful of commands each
        for _ in 0..4 {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (read, mut write) = stream.into_split();
            let mut lines = BufReader::new(read).lines();
            if write.write_all(b"220 scripted ESMTP\r\n").await.is_err() {
                continue;
            }
            for _ in 0..16 {
                let Ok(Ok(Some(line))) =
                    tokio::time::timeout(Duration::from_secs(5), lines.next_line()).await
                else {
                    break;
                };
                let verb = line.split_whitespace().next().unwrap_or("").to_ascii_uppercase();
                let reply: &[u8] = match verb.as_str() {
                    "EHLO" | "HELO" => b"250 scripted\r\n",
                    "MAIL" => mail_reply.as_bytes(),
                    "QUIT" => b"221 bye\r\n",
                    _ => b"250 ok\r\n",
                };
                if write.write_all(reply).await.is_err() || verb == "QUIT" {
                    break;
                }
            }
        }
    });
    port
}

fn smtp_config(url: String) -> ChannelsConfig {
    ChannelsConfig {
        smtp_url: Secret::new(url),
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(2),
        ..config("http://127.0.0.1:1")
    }
}

#[tokio::test]
async fn smtp_4xx_is_transient_and_5xx_permanent() {
    for (reply, transient) in [
        ("451 4.3.0 try again later\r\n", true),
        ("421 4.7.0 too busy\r\n", true),
        ("550 5.7.1 relaying denied\r\n", false),
        ("554 5.7.1 rejected\r\n", false),
    ] {
        let port = scripted_smtp(reply).await;
        let ch = channels(smtp_config(format!("smtp://127.0.0.1:{port}")));
        let err = ch
            .deliver(&task(
                ChannelKind::Email,
                "dev@example.test",
                Reason::New,
                &[("x", 1)],
            ))
            .await
            .expect_err(reply);
        eprintln!("{err:?}");
        assert_eq!(err.is_transient(), transient, "{reply}: {err:?}");
        assert!(err.reason().contains(&reply[..3]), "{err}");
        assert_secret_free(&err);
    }
}

#[tokio::test]
async fn smtp_errors_never_show_the_password() {
    // credentials in the URL, but the server offers no AUTH: a configuration problem, permanent
    let port = scripted_smtp("250 ok\r\n").await;
    let ch = channels(smtp_config(format!(
        "smtp://klaxon:{SMTP_PASSWORD}@127.0.0.1:{port}"
    )));
    let err = ch
        .deliver(&task(
            ChannelKind::Email,
            "dev@example.test",
            Reason::New,
            &[("x", 1)],
        ))
        .await
        .expect_err("no auth offered");
    eprintln!("{err:?}");
    assert!(!err.is_transient(), "{err:?}");
    assert_secret_free(&err);
    assert!(!format!("{ch:?}").contains(SMTP_PASSWORD));
}

#[tokio::test]
async fn smtp_connection_refused_is_transient_and_bad_address_permanent() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let ch = channels(smtp_config(format!(
        "smtp://klaxon:{SMTP_PASSWORD}@127.0.0.1:{port}"
    )));
    let err = ch
        .deliver(&task(
            ChannelKind::Email,
            "dev@example.test",
            Reason::New,
            &[("x", 1)],
        ))
        .await
        .expect_err("refused");
    assert!(matches!(err, DeliveryError::Transient { .. }), "{err:?}");
    assert_secret_free(&err);

    let err = ch
        .deliver(&task(
            ChannelKind::Email,
            "dev@example.test, not-an-address",
            Reason::New,
            &[("x", 1)],
        ))
        .await
        .expect_err("bad address");
    assert!(!err.is_transient(), "{err:?}");
}

/// An alert's life is one email thread: the resolve (and the acknowledgement, reminders, escalations) reply to
/// the firing email — `In-Reply-To` and `References` carry the firing's `Message-ID` — each with its own
/// `Message-ID`, and a subject that starts with what happened.
#[tokio::test]
async fn lifecycle_emails_reply_to_the_firing_email() {
    use klaxon_core::alert::{AlertRef, AlertState};
    let ch = channels(config("http://127.0.0.1:1"));
    let to = "oncall@example.test";
    let resolved = alert(ChannelKind::Email, to, AlertState::Resolved, Some("timeout"));
    // the firing, as the engine sends it: its notification id is the one the alert's messages reply to
    let mut firing = task(ChannelKind::Email, to, threshold(), &[(&resolved.title, 100)]);
    firing.notification_id = resolved.firing_notification_id(ChannelKind::Email);
    firing.alert = Some(AlertRef::of_firing(&resolved, ChannelKind::Email));
    ch.deliver(&firing).await.expect("firing delivered");
    let raw = wait_for_mail(&firing.notification_id).await;
    let first = mailparse::parse_mail(raw.as_bytes()).expect("parse");
    let firing_id = first.headers.get_first_value("Message-ID").expect("message id");
    assert_eq!(firing_id, format!("<{}@klaxon>", firing.notification_id));
    assert!(first.headers.get_first_value("In-Reply-To").is_none());
    assert!(part_body(&first, "text/plain").contains(&format!("alert {}", resolved.id)));

    for (reason, head) in [
        (Reason::Resolved, "Resolved: "),
        (Reason::Acknowledged, "Acknowledged: "),
        (Reason::Reminder { number: 1, max: 3 }, "Reminder: "),
        (Reason::Escalation { step: 1, steps: 1 }, "Escalated: "),
    ] {
        let t = lifecycle_task(&resolved, reason);
        ch.deliver(&t).await.expect("delivered");
        let raw = wait_for_mail(&t.notification_id).await;
        let mail = mailparse::parse_mail(raw.as_bytes()).expect("parse");
        let header = |name: &str| mail.headers.get_first_value(name).unwrap_or_default();
        assert_eq!(header("In-Reply-To"), firing_id, "{head}");
        assert_eq!(header("References"), firing_id, "{head}");
        assert_eq!(header("Message-ID"), format!("<{}@klaxon>", t.notification_id));
        assert_ne!(header("Message-ID"), firing_id);
        let subject = header("Subject");
        assert!(
            subject.starts_with(head) && subject.contains(&resolved.title),
            "{subject}"
        );
        let text = part_body(&mail, "text/plain");
        assert!(
            text.contains(&format!("Alert {} in project Acme", resolved.id)),
            "{text}"
        );
        if reason == Reason::Resolved {
            assert!(
                text.contains("Resolved after 2 h 14 min, 1,240 events · resolved automatically."),
                "{text}"
            );
        }
    }
}

/// An escalation email to someone who never got the firing starts its own thread (no `In-Reply-To`), and once
/// that address is in the alert's audience its acknowledge and resolve reply to that first email, not to the
/// firing it never received.
#[tokio::test]
async fn an_escalation_email_to_a_new_address_starts_its_own_thread() {
    use klaxon_core::alert::{lifecycle_tasks, AlertChannel, AlertState};
    use klaxon_core::NotificationTask;
    let ch = channels(config("http://127.0.0.1:1"));
    // the rule's channel is Slack: the on-call address hears of the alert first from escalation step 1
    let mut alert = alert(
        ChannelKind::Slack,
        "https://hooks.slack.test/x",
        AlertState::Firing,
        None,
    );
    let to = "second-line@example.test";
    let step = AlertChannel::of_rule(ChannelKind::Email, to, None);
    let (task, member) = NotificationTask::for_alert_member(
        &alert,
        &step,
        Reason::Escalation { step: 1, steps: 1 },
        1_700_000_000_123,
    );
    let member = member.expect("a new member of the audience");
    ch.deliver(&task).await.expect("step delivered");
    let raw = wait_for_mail(&task.notification_id).await;
    let first = mailparse::parse_mail(raw.as_bytes()).expect("parse");
    assert_eq!(
        first.headers.get_first_value("Message-ID").as_deref(),
        Some(format!("<{}@klaxon>", task.notification_id).as_str())
    );
    assert!(first.headers.get_first_value("In-Reply-To").is_none(), "{raw}");
    assert!(first.headers.get_first_value("References").is_none(), "{raw}");
    assert!(klaxon_channels::email_replies_to(&task).is_none());
    // recorded with the alert: its acknowledge reaches the address, in the step's thread
    alert.heard.push(member);
    alert.state = AlertState::Acknowledged;
    alert.acknowledged_by = Some("ana".into());
    let acks = lifecycle_tasks(&alert, Reason::Acknowledged, 1_700_000_000_456);
    let ack = acks
        .iter()
        .find(|t| t.channel == ChannelKind::Email)
        .expect("the ack reaches the escalation's address");
    assert_eq!(ack.endpoint, to);
    ch.deliver(ack).await.expect("ack delivered");
    let raw = wait_for_mail(&ack.notification_id).await;
    let mail = mailparse::parse_mail(raw.as_bytes()).expect("parse");
    let firing_thread = format!("<{}@klaxon>", alert.firing_notification_id(ChannelKind::Email));
    for h in ["In-Reply-To", "References"] {
        let v = mail.headers.get_first_value(h).unwrap_or_default();
        assert_eq!(v, format!("<{}@klaxon>", task.notification_id), "{h}");
        assert_ne!(v, firing_thread, "{h}: not the firing it never received");
    }
}
