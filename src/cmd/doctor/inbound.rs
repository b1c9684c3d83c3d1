//! The **inbound pagerduty**, **inbound slack** and **inbound telegram** lines: whether each inbound integration is
//! on (its secret set; the value is never read out), and what the running process at `--http-addr` counted of its
//! requests (`klaxon_inbound_requests_total`, from its `/metrics`): accepted, refused (by why), ignored. A process
//! that answers nothing leaves the counts out, and says so.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use klaxon_api::inbound::status::{statuses, InboundStatus};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{check, Check, Status};

/// The most of a `/metrics` answer read (it is tens of KiB).
const MAX_METRICS_BYTES: u64 = 8 * 1024 * 1024;

/// The three lines, with the counts of the process at `http_addr` when it answers within `t`.
pub(super) async fn inbound_checks(http_addr: SocketAddr, t: Duration) -> Vec<Check> {
    let addr = loopback_if_unspecified(http_addr);
    let metrics = match tokio::time::timeout(t, get_metrics(addr)).await {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(_) => Err(format!("no answer within {}", humantime::format_duration(t))),
    };
    let set = |var: &str| std::env::var(var).is_ok_and(|v| !v.trim().is_empty());
    statuses(set, metrics.as_deref().ok())
        .iter()
        .map(|s| line(s, addr, metrics.as_ref().err()))
        .collect()
}

/// One integration's line.
fn line(s: &InboundStatus, addr: SocketAddr, unread: Option<&String>) -> Check {
    let name = format!("inbound {}", s.integration);
    if !s.enabled {
        return check(
            Status::Ok,
            name,
            format!(
                "off: {} is not set (POST {} answers 404)",
                s.secret_variable, s.path
            ),
        );
    }
    let counted = match (&s.counts, unread) {
        (Some(c), _) => format!("the process at {addr} counted {}", c.summary()),
        (None, Some(why)) => format!("no counts: http://{addr}/metrics: {why}"),
        (None, None) => "no counts".to_owned(),
    };
    // every verified-looking request refused for its signature or its age: the secrets differ, or a clock is off
    let misconfigured = s.counts.as_ref().is_some_and(|c| {
        c.accepted == 0
            && c.refused_by
                .iter()
                .any(|(o, n)| *n > 0 && matches!(o.as_str(), "bad_signature" | "stale"))
    });
    let detail = format!(
        "on ({} set, not shown): POST {}; {counted}",
        s.secret_variable, s.path
    );
    if misconfigured {
        check(
            Status::Warn,
            name,
            format!(
                "{detail}: nothing accepted and requests refused for their signature or age — check that {} holds \
                 the secret the service signs with, and the clocks",
                s.secret_variable
            ),
        )
    } else {
        check(Status::Ok, name, detail)
    }
}

fn loopback_if_unspecified(mut addr: SocketAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    addr
}

/// `GET /metrics` over plain HTTP/1.1 (`Connection: close`), at most [`MAX_METRICS_BYTES`]; the body of a 200.
async fn get_metrics(addr: SocketAddr) -> anyhow::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .context("nothing answers")?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.take(MAX_METRICS_BYTES).read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").context("not an HTTP answer")?;
    let status = head.split_whitespace().nth(1).unwrap_or_default();
    anyhow::ensure!(status == "200", "answered {status}");
    anyhow::ensure!(
        !head.to_ascii_lowercase().contains("transfer-encoding: chunked"),
        "a chunked answer"
    );
    Ok(body.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaxon_api::inbound::status::InboundCounts;

    fn status(enabled: bool, counts: Option<InboundCounts>) -> InboundStatus {
        InboundStatus {
            integration: "slack",
            path: "/api/v1/integrations/slack".into(),
            secret_variable: "KLAXON_SLACK_SIGNING_SECRET",
            enabled,
            counts,
        }
    }

    #[test]
    fn lines_say_on_off_counts_and_warn_on_a_wrong_secret() {
        let addr: SocketAddr = "127.0.0.1:9464".parse().expect("addr");
        let off = line(&status(false, None), addr, None);
        assert_eq!((off.status, off.name.as_str()), (Status::Ok, "inbound slack"));
        assert!(
            off.detail
                .starts_with("off: KLAXON_SLACK_SIGNING_SECRET is not set"),
            "{}",
            off.detail
        );
        let ok = InboundCounts {
            accepted: 2,
            refused: 1,
            refused_by: vec![("replayed".into(), 1)],
            ..Default::default()
        };
        let on = line(&status(true, Some(ok)), addr, None);
        assert_eq!(on.status, Status::Ok);
        assert_eq!(
            on.detail,
            "on (KLAXON_SLACK_SIGNING_SECRET set, not shown): POST /api/v1/integrations/slack; the process at \
             127.0.0.1:9464 counted 2 accepted, 1 refused (replayed 1), 0 ignored"
        );
        let wrong = InboundCounts {
            refused: 3,
            refused_by: vec![("bad_signature".into(), 3)],
            ..Default::default()
        };
        assert_eq!(line(&status(true, Some(wrong)), addr, None).status, Status::Warn);
        let why = "nothing answers".to_owned();
        let unread = line(&status(true, None), addr, Some(&why));
        assert!(
            unread
                .detail
                .ends_with("no counts: http://127.0.0.1:9464/metrics: nothing answers"),
            "{}",
            unread.detail
        );
    }
}
