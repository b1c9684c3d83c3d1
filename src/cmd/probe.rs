//! `klaxon probe`: asks a running Klaxon's `/readyz` (or `/healthz`) over plain HTTP, so that a container
//! healthcheck needs no curl in the image. Exit 0 on a 2xx answer, 1 on any other status, 3 when nothing
//! answers.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Exit code when nothing answers (a backing service unreachable).
const UNREACHABLE: u8 = 3;
/// Exit code when Klaxon answers but is not ready.
const NOT_READY: u8 = 1;

/// `klaxon probe`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  klaxon probe                          # GET http://127.0.0.1:9464/readyz
  klaxon probe --path /healthz --timeout 2s
  HEALTHCHECK CMD [\"klaxon\", \"probe\"]     # in a Dockerfile")]
pub struct ProbeArgs {
    /// The address Klaxon serves on (0.0.0.0 / [::] are asked on loopback).
    #[arg(long, env = "KLAXON_HTTP_ADDR", default_value = "127.0.0.1:9464")]
    pub http_addr: SocketAddr,
    /// /readyz (connected and consuming) or /healthz (alive).
    #[arg(long, default_value = "/readyz", value_parser = ["/readyz", "/healthz"])]
    pub path: String,
    /// Give up after this long (a plain number is seconds).
    #[arg(long, default_value = "3s", value_parser = crate::cli::duration_secs, value_name = "DURATION")]
    pub timeout: Duration,
}

/// Runs one probe.
pub async fn run(args: ProbeArgs) -> anyhow::Result<ExitCode> {
    let mut addr = args.http_addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let status = match tokio::time::timeout(args.timeout, get_status(addr, &args.path)).await {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => {
            eprintln!("klaxon: {addr}{}: {e:#}", args.path);
            return Ok(ExitCode::from(UNREACHABLE));
        }
        Err(_) => {
            eprintln!(
                "klaxon: {addr}{}: no answer within {}",
                args.path,
                humantime::format_duration(args.timeout)
            );
            return Ok(ExitCode::from(UNREACHABLE));
        }
    };
    println!("{}{}: {status}", addr, args.path);
    Ok(if (200..300).contains(&status) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(NOT_READY)
    })
}

async fn get_status(addr: SocketAddr, path: &str) -> anyhow::Result<u16> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .context("nothing answers")?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    // The status line is all we need; read at most 1 KiB.
    let mut buf = vec![0u8; 1024];
    let mut len = 0;
    while len < buf.len() {
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 || buf[..len + n].windows(2).any(|w| w == b"\r\n") {
            len += n;
            break;
        }
        len += n;
    }
    let head = String::from_utf8_lossy(&buf[..len]);
    head.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .with_context(|| "not an HTTP answer".to_string())
}
