//! `klaxon-bench`: measured, side-by-side numbers on this machine (docs/benchmarks.md). `klaxon bench ARGS…` runs
//! it too: the operator's `klaxon` binary carries no benchmark harness, it executes this one, installed next to it.
//!
//! - `klaxon-bench pipeline` ([`pipeline`]): a real `klaxon worker` child's events/s next to the raw broker rate.
//! - `klaxon-bench latency` ([`latency`]): crossing → delivered under a steady load through a real `klaxon run`
//!   child, and that child's peak memory.
//! - `klaxon-bench steady` ([`steady`]): CPU and context switches per event, threads and crossing → delivered
//!   latency of a real `klaxon run` child at paced rates, next to idle and a drained backlog.
//!
//! The children are the `klaxon` binary next to this one ([`klaxon_exe`]).

mod latency;
mod pipeline;
mod steady;

// `klaxon`'s own global options, the same file (`klaxon bench` passes its values on as the variables); the benches
// use the services' URLs and the log format, not the namespace options.
#[allow(dead_code)]
#[path = "../../global.rs"]
mod global;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser};

pub use global::GlobalOpts;

const EXAMPLES: &str = "\
Examples:
  klaxon bench pipeline --events 20000 --queue-type both     # or klaxon-bench pipeline …
  klaxon bench latency --rate 5000
  klaxon bench steady --rates 50,200,1000,5000 --seconds 20
  klaxon-bench steady --klaxon /path/to/an/older/klaxon   # the same rows for another build
  klaxon-bench pipeline --workers 2 --json
  klaxon bench pipeline --shards 1,3 --workers 1,3 --queue-type classic   # sharded input, side by side";

/// Measure throughput and cost side by side on this machine (also `klaxon bench`).
#[derive(Debug, Parser)]
#[command(
    name = "klaxon-bench",
    version,
    about = "Measure Klaxon's throughput and cost side by side on this machine (also run as `klaxon bench`)",
    after_help = EXAMPLES
)]
struct Cli {
    #[command(flatten)]
    global: GlobalOpts,
    #[command(subcommand)]
    what: pipeline::BenchWhat,
}

/// The `klaxon` binary the benches start as children: the one next to this binary.
pub(crate) fn klaxon_exe() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    let exe = me.with_file_name(format!("klaxon{}", std::env::consts::EXE_SUFFIX));
    anyhow::ensure!(
        exe.is_file(),
        "the benches run the `klaxon` binary next to this one, and {} does not exist: install klaxon and \
         klaxon-bench in the same directory",
        exe.display()
    );
    Ok(exe)
}

/// `klaxon <role> --http-addr <addr> --queue-type <qt>` as a child of the bench: in namespace `ns`, on the
/// bench's services, logging warnings only, its stdout discarded (the bench's stdout is the measurement), killed
/// when dropped. The caller adds the role's own flags.
pub(crate) fn klaxon_child(
    exe: &std::path::Path,
    role: &str,
    addr: &str,
    qt: klaxon_broker::QueueType,
    ns: &str,
    global: &GlobalOpts,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args([role, "--http-addr", addr, "--queue-type", pipeline::label(qt)])
        .env("KLAXON_NAMESPACE", ns)
        .env("KLAXON_AMQP_URL", &global.amqp_url)
        .env("KLAXON_REDIS_URL", &global.redis_url)
        .env("KLAXON_MONGO_URL", &global.mongo_url)
        .env("KLAXON_LOG", "warn")
        // the single events queue unless the bench says otherwise (`pipeline --shards`)
        .env("KLAXON_EVENTS_SHARDS", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    cmd
}

/// Logs at `warn` unless `KLAXON_LOG`/`RUST_LOG` say otherwise: stdout is the measurement.
fn init_tracing(format: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("KLAXON_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        // lapin logs a passive declare of a missing queue as an ERROR
        .unwrap_or_else(|_| EnvFilter::new("warn,lapin=off"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .log_internal_errors(false);
    if format == "json" {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    // The benches make a namespace per run: klaxon's namespace options are accepted (scripts that pass them
    // everywhere keep working) but not shown.
    let command = ["namespace", "mongo_db", "events_queue", "events_shards"]
        .into_iter()
        .fold(Cli::command(), |c, id| c.mut_arg(id, |a| a.hide(true)));
    let cli = Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit());
    init_tracing(&cli.global.log_format);
    match pipeline::run(cli.what, &cli.global).await {
        Ok(code) => code,
        Err(err) => {
            // not eprintln!: it panics when stderr is closed
            let _ = writeln!(std::io::stderr(), "klaxon-bench: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
