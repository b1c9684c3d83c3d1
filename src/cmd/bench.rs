//! `klaxon bench ARGS…`: runs `klaxon-bench ARGS…`, the benchmark harness, which is a binary of its own
//! (docs/benchmarks.md) installed next to `klaxon`. The service URLs and the log format this command was given
//! reach it as their variables.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::cli::GlobalOpts;

/// Everything after `klaxon bench`, handed to `klaxon-bench` as it is (`--help` included).
#[derive(Debug, Args)]
#[command(
    disable_help_flag = true,
    after_help = "Examples:\n  klaxon bench pipeline --events 20000 --queue-type both\n  klaxon bench latency --rate 5000\n  klaxon bench steady --rates 50,200,1000,5000\n  klaxon bench --help                                  # klaxon-bench's own help"
)]
pub struct BenchArgs {
    /// The arguments of `klaxon-bench`: `pipeline …`, `latency …`, `steady …`, `--help`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0.., value_name = "ARGS")]
    pub args: Vec<OsString>,
}

/// `klaxon-bench` next to this binary.
fn bench_exe() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    let exe = me.with_file_name(format!("klaxon-bench{}", std::env::consts::EXE_SUFFIX));
    anyhow::ensure!(
        exe.is_file(),
        "klaxon bench runs the klaxon-bench binary next to klaxon, and {} does not exist: install klaxon-bench \
         beside klaxon (the release archive and the container image ship both; from source: \
         cargo build --release --bins)",
        exe.display()
    );
    Ok(exe)
}

/// Runs `klaxon-bench` with `args` (on Unix in place of this process, so its exit status and signals are its own).
pub async fn run(args: BenchArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let exe = bench_exe()?;
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(&args.args)
        .env("KLAXON_AMQP_URL", &global.amqp_url)
        .env("KLAXON_REDIS_URL", &global.redis_url)
        .env("KLAXON_MONGO_URL", &global.mongo_url)
        .env("KLAXON_LOG_FORMAT", &global.log_format);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt as _;
        let err = cmd.exec();
        Err(anyhow::Error::new(err).context(format!("cannot run {}", exe.display())))
    }
    #[cfg(not(unix))]
    {
        let status = cmd
            .status()
            .map_err(|e| anyhow::Error::new(e).context(format!("cannot run {}", exe.display())))?;
        Ok(ExitCode::from(status.code().map_or(1, |c| c.clamp(0, 255) as u8)))
    }
}
