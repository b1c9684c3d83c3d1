//! The **smtp** line: a TCP connect to the `--smtp-url` host and its `220` greeting (credentials never printed).

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::{check, endpoint, Check, Status};

/// Host and port of an SMTP URL (`smtp://` defaults to 25, `smtps://` to 465), and whether TLS starts at once.
fn smtp_target(url: &str) -> Option<(String, u16, bool)> {
    let (scheme, _) = url.split_once("://")?;
    let implicit_tls = scheme.eq_ignore_ascii_case("smtps");
    let at = endpoint(url);
    let (host, port) = match at.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h.to_owned(), p.parse().ok()?),
        _ => (at.clone(), if implicit_tls { 465 } else { 25 }),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    (!host.is_empty()).then_some((host, port, implicit_tls))
}

pub(super) async fn smtp_check(url: &str, t: Duration) -> Check {
    let Some((host, port, implicit_tls)) = smtp_target(url) else {
        return check(
            Status::Fail,
            "smtp",
            "--smtp-url is not smtp://host:port or smtps://host:port",
        );
    };
    let at = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let greeting = tokio::time::timeout(t, async {
        let stream = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
        if implicit_tls {
            return Ok::<_, std::io::Error>(None);
        }
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        // One greeting line (bounded: the server's first line, at most 512 bytes kept).
        reader.read_line(&mut line).await?;
        line.truncate(512);
        let _ = reader.get_mut().write_all(b"QUIT\r\n").await;
        Ok(Some(line.trim_end().to_owned()))
    })
    .await;
    match greeting {
        Err(_) => check(
            Status::Fail,
            "smtp",
            format!("{at}: no answer within {}", humantime::format_duration(t)),
        ),
        Ok(Err(e)) => check(Status::Fail, "smtp", format!("{at}: {e}")),
        Ok(Ok(None)) => check(
            Status::Ok,
            "smtp",
            format!("{at}: TCP connect ok (smtps: the greeting comes after TLS, not read)"),
        ),
        Ok(Ok(Some(line))) if line.starts_with("220") => check(Status::Ok, "smtp", format!("{at}: {line}")),
        Ok(Ok(Some(line))) => check(
            Status::Fail,
            "smtp",
            format!("{at}: greeted with `{line}` instead of 220"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smtp_targets_never_show_credentials() {
        assert_eq!(
            smtp_target("smtp://127.0.0.1:2525"),
            Some(("127.0.0.1".into(), 2525, false))
        );
        assert_eq!(
            smtp_target("smtp://mail?tls=starttls"),
            Some(("mail".into(), 25, false))
        );
        assert_eq!(smtp_target("smtps://u:p@mail"), Some(("mail".into(), 465, true)));
        assert_eq!(
            smtp_target("smtp://[::1]:2525"),
            Some(("::1".into(), 2525, false))
        );
        assert_eq!(smtp_target("nonsense"), None);
    }
}
