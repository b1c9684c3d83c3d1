//! `klaxon test-notify`: send one real test notification through a channel, like Sentry's "send test
//! notification". It goes straight through the adapter (no queue, no dedup, no rate limit) and reports the
//! outcome; the exit code is 0 only when it was delivered.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use klaxon_channels::{redact_endpoint, test_task, Channels, ChannelsConfig, Secret};
use klaxon_core::ChannelKind;

use crate::cli::GlobalOpts;

/// Options of `klaxon test-notify` (the delivery settings of `klaxon run`).
#[derive(Debug, Args)]
pub struct TestNotifyArgs {
    /// slack, telegram, email or webhook.
    #[arg(long, value_parser = parse_channel)]
    pub channel: ChannelKind,
    /// The endpoint: webhook URL, Telegram chat id, email address(es).
    #[arg(long)]
    pub endpoint: String,
    /// Telegram Bot API base URL.
    #[arg(long, env = "KLAXON_TELEGRAM_API", default_value = "https://api.telegram.org")]
    pub telegram_api: String,
    /// SMTP server: smtp://host:port, smtp://host:port?tls=starttls, smtps://user:pass@host:port.
    #[arg(
        long,
        env = "KLAXON_SMTP_URL",
        default_value = "smtp://127.0.0.1:25",
        hide_env_values = true
    )]
    pub smtp_url: String,
    /// The From address of emails.
    #[arg(long, env = "KLAXON_SMTP_FROM", default_value = "klaxon@localhost")]
    pub smtp_from: String,
    /// Allow deliveries to loopback/private/link-local addresses.
    #[arg(long, env = "KLAXON_ALLOW_PRIVATE_ENDPOINTS", default_value_t = false)]
    pub allow_private_endpoints: bool,
    /// Connect timeout, in seconds.
    #[arg(long, env = "KLAXON_CONNECT_TIMEOUT", default_value_t = 5)]
    pub connect_timeout: u64,
    /// Whole-request timeout, in seconds.
    #[arg(long, env = "KLAXON_REQUEST_TIMEOUT", default_value_t = 10)]
    pub request_timeout: u64,
}

fn parse_channel(s: &str) -> Result<ChannelKind, String> {
    ChannelKind::parse(s)
        .ok_or_else(|| format!("unknown channel `{s}`: use slack, telegram, email or webhook"))
}

fn env_secret(name: &str) -> Option<Secret> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .map(Secret::new)
}

pub async fn run(args: TestNotifyArgs, _global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let channels = Channels::new(ChannelsConfig {
        telegram_api: args.telegram_api.clone(),
        telegram_bot_token: env_secret("KLAXON_TELEGRAM_BOT_TOKEN"),
        smtp_url: Secret::new(args.smtp_url.clone()),
        smtp_from: args.smtp_from.clone(),
        webhook_secret: env_secret("KLAXON_WEBHOOK_SECRET"),
        allow_private_endpoints: args.allow_private_endpoints,
        connect_timeout: Duration::from_secs(args.connect_timeout),
        request_timeout: Duration::from_secs(args.request_timeout),
    })
    .context("invalid delivery settings")?;
    let task = test_task(args.channel, &args.endpoint);
    let dest = redact_endpoint(args.channel, &args.endpoint);
    match channels.deliver(&task).await {
        Ok(d) => {
            println!(
                "sent: test notification {} to {} {dest} ({} message(s))",
                task.notification_id, args.channel, d.messages
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            println!("failed ({}): {} {dest}: {}", e.class(), args.channel, e.reason());
            Ok(ExitCode::FAILURE)
        }
    }
}
