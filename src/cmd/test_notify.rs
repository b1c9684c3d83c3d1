//! `klaxon test-notify`: send one real test notification through a channel, like Sentry's "send test
//! notification". It goes straight through the adapter (no queue, no dedup, no rate limit) and reports the
//! outcome; the exit code is 0 only when it was delivered.

use std::process::ExitCode;

use clap::Args;
use klaxon_channels::{redact_endpoint, test_task};
use klaxon_core::ChannelKind;

use crate::cli::{DeliveryOpts, GlobalOpts};

/// Options of `klaxon test-notify` (the delivery settings of `klaxon run`).
#[derive(Debug, Args)]
pub struct TestNotifyArgs {
    /// slack, telegram, email or webhook.
    #[arg(long, value_parser = parse_channel)]
    pub channel: ChannelKind,
    /// The endpoint: webhook URL, Telegram chat id, email address(es).
    #[arg(long)]
    pub endpoint: String,
    #[command(flatten)]
    pub delivery: DeliveryOpts,
}

fn parse_channel(s: &str) -> Result<ChannelKind, String> {
    ChannelKind::parse(s)
        .ok_or_else(|| format!("unknown channel `{s}`: use slack, telegram, email or webhook"))
}

pub async fn run(args: TestNotifyArgs, _global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let channels = args.delivery.channels()?;
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
