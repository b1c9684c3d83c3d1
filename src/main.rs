//! The `klaxon` binary: CLI parsing, logging, and dispatch to one module per subcommand.

mod cli;
mod cmd;

use std::process::ExitCode;

use clap::Parser;

/// The log filter when neither `KLAXON_LOG` nor `RUST_LOG` is set: `info` for the services, `warn` for
/// `klaxon bench`, whose stdout is the measurement and whose stderr should only say what went wrong.
fn default_filter(command: &cli::Command) -> &'static str {
    match command {
        cli::Command::Bench(_) => "warn",
        _ => "info,lapin=warn,mongodb=warn,hyper=warn,reqwest=warn",
    }
}

fn init_tracing(format: &str, default: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("KLAXON_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    init_tracing(&cli.global.log_format, default_filter(&cli.command));
    let global = cli.global;
    let result = match cli.command {
        cli::Command::Run(args) => cmd::run::run(args, &global, cmd::run::Roles::BOTH).await,
        cli::Command::Worker(args) => cmd::run::run(args, &global, cmd::run::Roles::WORKER).await,
        cli::Command::Sender(args) => cmd::run::run(args, &global, cmd::run::Roles::SENDER).await,
        cli::Command::Rules(args) => cmd::rules::run(args, &global).await,
        cli::Command::Publish(args) => cmd::publish::run(args, &global).await,
        cli::Command::Deliveries(args) => cmd::deliveries::run(args, &global).await,
        cli::Command::Dead(args) => cmd::dead::run(args, &global).await,
        cli::Command::Explain(args) => cmd::explain::run(args, &global).await,
        cli::Command::Mute(args) => cmd::mute::run(args, &global).await,
        cli::Command::TestNotify(args) => cmd::test_notify::run(args, &global).await,
        cli::Command::Probe(args) => cmd::probe::run(args).await,
        cli::Command::Bench(args) => cmd::bench::run(args, &global).await,
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("klaxon: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
