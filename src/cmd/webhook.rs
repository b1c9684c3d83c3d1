//! `klaxon webhook secret`: the Standard Webhooks signing secret of one webhook endpoint of one project, as the
//! API's `GET /api/v1/projects/{id}/webhook-secret?endpoint=` answers it. Derived from the master key in
//! `KLAXON_WEBHOOK_SECRET` (and `…_PREVIOUS` during a rotation) of this command's environment: nothing connects.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use klaxon_api::rest::webhook_secret::{secret_json, SecretError};
use klaxon_channels::redact_endpoint;
use klaxon_core::ChannelKind;

use crate::exit::{ensure_usage, usage};
use crate::output::{self, Format, OutputArgs};

/// Options of `klaxon webhook`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  klaxon webhook secret --project 5e3eef0679fa3700a0198a49 --endpoint https://alerts.example.com/klaxon
  klaxon webhook secret --project 5e3eef0679fa3700a0198a49 --endpoint https://alerts.example.com/klaxon -o json")]
pub struct WebhookArgs {
    #[command(subcommand)]
    pub command: WebhookCommand,
}

#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Print the signing secret (whsec_…) a project's webhook receiver verifies deliveries with.
    #[command(after_help = "\
The secret is bound to the project and the endpoint: give each tenant the secrets of its own project only.
During a rotation (KLAXON_WEBHOOK_SECRET_PREVIOUS set) deliveries carry a signature under the previous
secret too, shown as `previous`.

Examples:
  klaxon webhook secret --project 5e3eef0679fa3700a0198a49 --endpoint https://alerts.example.com/klaxon
  klaxon webhook secret --endpoint https://alerts.example.com/klaxon    # notifications without a project
  klaxon webhook secret --project 5e3eef0679fa3700a0198a49 --endpoint https://alerts.example.com/klaxon -o json | jq -r .secret")]
    Secret(SecretArgs),
}

#[derive(Debug, Args)]
pub struct SecretArgs {
    /// The project (24-hex id) whose rule has the webhook channel [default: none — the secret of direct
    /// notifications without `projectId` and of `klaxon test-notify`].
    #[arg(long)]
    pub project: Option<String>,
    /// The webhook channel's URL, as in the rule.
    #[arg(long)]
    pub endpoint: String,
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn run(args: WebhookArgs) -> anyhow::Result<ExitCode> {
    let WebhookCommand::Secret(a) = args.command;
    if let Some(p) = &a.project {
        ensure_usage!(
            klaxon_core::event::is_object_id(p),
            "--project must be a 24-hex-digit ObjectId"
        );
    }
    let keys = crate::cli::webhook_keys()?;
    let v = secret_json(keys.as_ref(), a.project.as_deref(), &a.endpoint).map_err(|e| match e {
        SecretError::BadEndpoint(why) => usage(why.replace("`endpoint`", "--endpoint")),
        SecretError::NotConfigured => anyhow::anyhow!("{e}"),
    })?;
    let format = a.output.format(Format::Json);
    if format != Format::Table {
        // One object: `jq -r .secret` works on both forms.
        return emit(&format!("{v}\n"));
    }
    let project = v["projectId"].as_str().unwrap_or("(none)").to_owned();
    let destination = redact_endpoint(ChannelKind::Webhook, &a.endpoint);
    let mut rows = vec![vec![
        project.clone(),
        destination.clone(),
        "current".to_owned(),
        v["secret"].as_str().unwrap_or_default().to_owned(),
    ]];
    if let Some(previous) = v["previousSecret"].as_str() {
        rows.push(vec![
            project,
            destination,
            "previous".to_owned(),
            previous.to_owned(),
        ]);
    }
    emit(&output::table(
        Some(&["PROJECT", "DESTINATION", "KEY", "SECRET"]),
        &rows,
    ))
}

fn emit(text: &str) -> anyhow::Result<ExitCode> {
    output::emit(text)?;
    Ok(ExitCode::SUCCESS)
}
