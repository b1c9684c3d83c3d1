//! The `klaxon` binary: CLI parsing, logging, and dispatch to one module per subcommand.

mod cli;
mod cmd;
mod exit;
mod global;
mod log_fields;
mod log_filter;
mod output;

use std::io::Write as _;
use std::process::ExitCode;

/// The log filter when neither `KLAXON_LOG` nor `RUST_LOG` is set: `info` for the long-running processes,
/// `warn` for every CLI command, whose stdout is its result and whose stderr should only say what went wrong.
fn default_filter(command: &cli::Command) -> &'static str {
    match command {
        cli::Command::Run(_) | cli::Command::Worker(_) | cli::Command::Sender(_) => {
            "info,lapin=warn,mongodb=warn,hyper=warn,reqwest=warn"
        }
        // lapin logs a passive declare of a missing queue as an ERROR; our commands report it in words
        _ => "warn,lapin=off",
    }
}

/// Colours in log lines only where a person reads them: stderr is a terminal and `NO_COLOR` is unset or empty
/// (https://no-color.org). Logs piped to a file, journald or a container runtime stay plain text.
fn log_colours(stderr_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

fn init_tracing(format: &str, default: &str) {
    use std::io::IsTerminal as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("KLAXON_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(default));
    // No "cannot write the log" messages of its own: with stderr closed (`klaxon … 2>&1 | head`) they would
    // panic in whichever thread logged, e.g. lapin's I/O thread, and hang the command.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(log_colours(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ))
        .log_internal_errors(false);
    // lapin's own ERROR line for a refused queue declare repeats an error Klaxon handles (see log_filter)
    if format == "json" {
        builder
            .json()
            .flatten_event(true)
            .finish()
            .with(log_filter::QuietDeclareRefusals)
            .init();
    } else {
        // every field one token (tenant text quoted and escaped): no value can forge a line (log_fields)
        builder
            .fmt_fields(log_fields::OneTokenFields)
            .finish()
            .with(log_filter::QuietDeclareRefusals)
            .init();
    }
}

/// Tokio worker threads of the long-running processes (`run`, `worker`, `sender`) unless `TOKIO_WORKER_THREADS`
/// says otherwise. Their work is a chain of hand-offs, not parallel CPU: each event wakes lapin's I/O thread, then
/// a worker thread, then waits on Redis and the broker. With more than one worker an idle worker is woken to steal
/// at almost every hand-off, which is most of the process's context switches and CPU migrations at the rates
/// people run (docs/benchmarks.md, `klaxon bench steady`): one worker, measured side by side with two at
/// 200 events/s, takes a fifth of the switches off at the same CPU. Parallel CPU is had by running more
/// processes (the workers are stateless), not more threads in one.
const SERVICE_WORKER_THREADS: usize = 1;

/// The runtime of `command`: [`SERVICE_WORKER_THREADS`] workers for the long-running processes (or
/// `TOKIO_WORKER_THREADS`, which tokio reads), tokio's default for the CLI commands.
fn runtime(command: &cli::Command) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    let service = matches!(
        command,
        cli::Command::Run(_) | cli::Command::Worker(_) | cli::Command::Sender(_)
    );
    if service && std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        builder.worker_threads(SERVICE_WORKER_THREADS);
    }
    builder.build()
}

fn main() -> ExitCode {
    let cli = cli::parse();
    match runtime(&cli.command) {
        Ok(rt) => rt.block_on(run(cli)),
        Err(err) => {
            let _ = writeln!(
                std::io::stderr(),
                "klaxon: error: cannot start the async runtime: {err}"
            );
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: cli::Cli) -> ExitCode {
    init_tracing(&cli.global.log_format, default_filter(&cli.command));
    let global = cli.global;
    if let Err(err) = global.validate() {
        let _ = writeln!(std::io::stderr(), "klaxon: error: {}", exit::describe(&err));
        return ExitCode::from(exit::code(&err));
    }
    let result = match cli.command {
        cli::Command::Run(args) => cmd::run::run(args, &global).await,
        cli::Command::Worker(args) => cmd::run::run(args, &global).await,
        cli::Command::Sender(args) => cmd::run::run(args, &global).await,
        cli::Command::Rules(args) => cmd::rules::run(args, &global).await,
        cli::Command::Publish(args) => cmd::publish::run(args, &global).await,
        cli::Command::Deliveries(args) => cmd::deliveries::run(args, &global).await,
        cli::Command::Dead(args) => cmd::dead::run(args, &global).await,
        cli::Command::Invalid(args) => cmd::invalid::run(args, &global).await,
        cli::Command::Explain(args) => cmd::explain::run(args, &global).await,
        cli::Command::Mute(args) => cmd::mute::run(args, &global).await,
        cli::Command::Alerts(args) => cmd::alerts::run(args, &global).await,
        cli::Command::Projects(args) => cmd::projects::run(args, &global).await,
        cli::Command::TestNotify(args) => cmd::test_notify::run(args, &global).await,
        cli::Command::Webhook(args) => cmd::webhook::run(args).await,
        cli::Command::Probe(args) => cmd::probe::run(args).await,
        cli::Command::Bench(args) => cmd::bench::run(args, &global).await,
        cli::Command::Doctor(args) => cmd::doctor::run(args, &global).await,
        cli::Command::Completions(args) => cmd::completions::run(args),
        cli::Command::Namespace(args) => cmd::namespace::run(args, &global).await,
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            // not eprintln!: it panics when stderr is closed
            let _ = writeln!(std::io::stderr(), "klaxon: error: {}", exit::describe(&err));
            ExitCode::from(exit::code(&err))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(log_colours(true, None));
        assert!(log_colours(true, Some("".into())));
        assert!(!log_colours(true, Some("1".into())));
        assert!(!log_colours(false, None));
        assert!(!log_colours(false, Some("".into())));
    }
}
