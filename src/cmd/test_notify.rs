//! `klaxon test-notify`: send one real test notification through a channel, like Sentry's "send test
//! notification". It goes straight through the adapter (no queue, no dedup, no rate limit) and reports the
//! outcome: on stdout when it was delivered (exit 0), on stderr when it was not (exit 1); `--json` prints the
//! outcome as one JSON object.

use std::process::ExitCode;

use clap::Args;
use klaxon_channels::{redact_endpoint, test_task_for, TEST_PROJECT_ID};
use klaxon_core::{ChannelKind, Severity};
use serde_json::json;

use crate::cli::{DeliveryOpts, GlobalOpts};

/// Options of `klaxon test-notify` (the delivery settings of `klaxon run`).
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  klaxon test-notify --channel slack --endpoint https://hooks.slack.com/services/T/B/X
  klaxon test-notify --channel email --endpoint ops@example.com --smtp-url smtp://127.0.0.1:2525
  KLAXON_TELEGRAM_BOT_TOKEN=… klaxon test-notify --channel telegram --endpoint -100123
  KLAXON_SLACK_BOT_TOKEN=xoxb-… klaxon test-notify --channel slack --endpoint C0123ABCD
  klaxon test-notify --channel webhook --endpoint https://alerts.example.com/klaxon --json
  klaxon test-notify --channel webhook --endpoint https://alerts.example.com/klaxon --project 5e3eef0679fa3700a0198a49
  klaxon test-notify --channel discord --endpoint https://discord.com/api/webhooks/123/abc
  klaxon test-notify --channel teams --endpoint https://prod-00.westeurope.logic.azure.com/workflows/…
  klaxon test-notify --channel pagerduty --endpoint $ROUTING_KEY --severity info")]
pub struct TestNotifyArgs {
    /// slack, telegram, email, webhook, loop, discord, teams or pagerduty.
    #[arg(long, value_parser = parse_channel)]
    pub channel: ChannelKind,
    /// The endpoint: webhook URL, Telegram chat id, Slack channel id, email address(es), PagerDuty routing key.
    #[arg(long, allow_hyphen_values = true)]
    pub endpoint: String,
    /// Severity of a PagerDuty test alert: critical, error, warning or info [default: error].
    #[arg(long, value_parser = parse_severity)]
    pub severity: Option<Severity>,
    /// Send it as this project's (24-hex ObjectId): the notification names it, for receivers that route by
    /// project, and a webhook is signed with the project's secret for the endpoint (`klaxon webhook secret
    /// --project …`) [default: 000000000000000000000000, no real project: signed with the endpoint's project-less
    /// secret].
    #[arg(long, value_name = "PROJECT_ID")]
    pub project: Option<String>,
    /// Print the outcome as one JSON object: {"ok": true, …} on stdout, or {"ok": false, "class", "reason", …}
    /// on stderr.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub delivery: DeliveryOpts,
}

fn parse_channel(s: &str) -> Result<ChannelKind, String> {
    ChannelKind::parse(s).ok_or_else(|| {
        format!(
            "unknown channel `{s}`: use slack, telegram, email, webhook, loop, discord, teams or pagerduty"
        )
    })
}

fn parse_severity(s: &str) -> Result<Severity, String> {
    Severity::parse(s).ok_or_else(|| format!("unknown severity `{s}`: use critical, error, warning or info"))
}

pub async fn run(args: TestNotifyArgs, _global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let project = args.project.as_deref().unwrap_or(TEST_PROJECT_ID);
    klaxon_store::format::parse_object_id("project id", project)
        .map_err(|e| crate::exit::usage(e.to_string()))?;
    let channels = args.delivery.channels()?;
    let mut task = test_task_for(args.channel, &args.endpoint, project);
    if args.channel == ChannelKind::Pagerduty {
        task.severity = Some(args.severity.unwrap_or_default());
    }
    let dest = redact_endpoint(args.channel, &args.endpoint);
    let channel = args.channel.to_string();
    match channels.deliver(&task).await {
        Ok(d) => {
            let text = if args.json {
                json!({"ok": true, "notificationId": task.notification_id, "channel": channel,
                       "destination": dest, "messages": d.messages})
                .to_string()
            } else {
                format!(
                    "sent: test notification {} to {channel} {dest} ({} message(s))",
                    task.notification_id, d.messages
                )
            };
            crate::output::emit(&format!("{text}\n"))?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            if args.json {
                eprintln!(
                    "{}",
                    json!({"ok": false, "notificationId": task.notification_id, "channel": channel,
                           "destination": dest, "class": e.class(), "reason": e.reason()})
                );
            } else {
                eprintln!("failed ({}): {channel} {dest}: {}", e.class(), e.reason());
            }
            Ok(ExitCode::from(crate::exit::PROBLEMS))
        }
    }
}
