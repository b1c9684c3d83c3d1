//! `klaxon completions <shell>`: a completion script for the shell, generated from the CLI definition.

use std::process::ExitCode;

use clap::Args;
use clap_complete::Shell;

/// Options of `klaxon completions`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  klaxon completions bash > ~/.local/share/bash-completion/completions/klaxon
  klaxon completions zsh > \"${fpath[1]}/_klaxon\"
  klaxon completions fish > ~/.config/fish/completions/klaxon.fish
  klaxon completions powershell >> $PROFILE")]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, powershell or elvish.
    pub shell: Shell,
}

/// Prints the script on stdout.
pub fn run(args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut cmd = crate::cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "klaxon", &mut out);
    crate::output::emit(&String::from_utf8_lossy(&out))?;
    Ok(ExitCode::SUCCESS)
}
