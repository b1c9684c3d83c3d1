//! `klaxon invalid list | show | replay`: the queue of invalid events `<ns>.events.invalid` (messages of the
//! events queue the worker could not read, untouched, the reason in `x-klaxon-error`).
//!
//! Like `klaxon dead`, each reads at most the messages that were in the queue when it started (so it always
//! ends), holding them unacked: `list` and `show` hand every message back untouched; `replay` publishes the chosen
//! ones, body unchanged, to the events queue, acks them once RabbitMQ confirmed the publish, and hands the others
//! back. A message is named by the first 16 hex digits of its body's SHA-256 (the `ID` column).

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use klaxon_api::rest::invalid::{InvalidItem, Pass};
use klaxon_broker::{Broker, Topology};

use crate::cli::GlobalOpts;
use crate::output::{self, Format, OutputArgs};

/// Inspect and replay invalid events.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  klaxon invalid list
  klaxon invalid show 4f1c09a2b7d3e865 > event.json   # the body as it arrived (control characters shown)
  klaxon invalid replay --id 4f1c09a2b7d3e865          # back to the events queue, body unchanged
  klaxon invalid replay --all                          # exit 1 when nothing was replayed")]
pub struct InvalidArgs {
    #[command(subcommand)]
    pub command: InvalidCommand,
    /// Queue type used if the namespace's queues must be declared.
    #[arg(long, env = "KLAXON_QUEUE_TYPE", default_value = "classic", global = true)]
    pub queue_type: klaxon_broker::QueueType,
}

#[derive(Debug, Subcommand)]
pub enum InvalidCommand {
    /// List invalid events with the reason each was set aside (they stay in the queue).
    #[command(after_help = "\
Examples:
  klaxon invalid list --limit 20
  klaxon invalid list --offset 1000 --limit 1000   # the next page of a longer queue
  klaxon invalid list -o json > invalid.json   # bodies cut to 2 KiB; `show` gives the whole body")]
    List {
        /// At most this many.
        #[arg(long, default_value_t = 1000)]
        limit: u32,
        /// Skip this many from the head of the queue first (the next page: `--offset 1000`).
        #[arg(long, default_value_t = 0)]
        offset: u32,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Print the body of an invalid event as it arrived (it stays in the queue). Control characters other than
    /// line breaks and tabs (terminal escape sequences, a lone carriage return) and hidden characters are shown
    /// as `<U+XXXX>`; `-o json` gives the exact body.
    #[command(after_help = "\
Examples:
  klaxon invalid show 4f1c09a2b7d3e865
  klaxon invalid show 4f1c09a2b7d3e865 -o json   # id, messageId, reason, bytes and the exact body")]
    Show {
        /// The event's id (the ID column of `klaxon invalid list`).
        id: String,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Publish invalid events again to the events queue, body unchanged (once the producer or Klaxon is fixed).
    #[command(after_help = "\
Examples:
  klaxon invalid replay --id 4f1c09a2b7d3e865
  klaxon invalid replay --all")]
    Replay {
        /// The id to replay (the ID column of `klaxon invalid list`).
        #[arg(long, required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Replay every invalid event.
        #[arg(long)]
        all: bool,
    },
}

pub async fn run(args: InvalidArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let topology = Topology::new(&global.namespace, &global.events_queue(), args.queue_type);
    let broker = Broker::connect(&global.amqp_url, Duration::from_secs(10))
        .await
        .context("cannot connect to RabbitMQ")?;
    let publisher = broker.publisher().await?;
    publisher
        .declare(&topology)
        .await
        .context("cannot declare queues")?;
    let ids: Vec<String>;
    let what = match &args.command {
        InvalidCommand::List { limit, offset, .. } => Pass::Page {
            offset: *offset,
            limit: *limit,
        },
        InvalidCommand::Show { id, .. } => {
            ids = vec![id.trim().to_owned()];
            Pass::Show(&ids)
        }
        InvalidCommand::Replay { id, all } => {
            ids = id.iter().map(|i| i.trim().to_owned()).collect();
            Pass::Replay(if *all { None } else { Some(&ids) })
        }
    };
    let items = klaxon_api::rest::invalid::pass(&broker, &publisher, &topology, what)
        .await
        .with_context(|| format!("cannot read {}", topology.invalid_queue()))?;
    publisher.close().await;
    broker.close().await;
    match args.command {
        InvalidCommand::List { output, .. } => {
            output::emit(&output::list(
                output.format(Format::Ndjson),
                &items,
                &["ID", "BYTES", "REASON", "BODY"],
                |i| {
                    vec![
                        i.id.clone(),
                        i.bytes.to_string(),
                        klaxon_core::text::one_line(&i.reason, 200),
                        i.preview(60),
                    ]
                },
                InvalidItem::to_json,
                "no invalid events",
            ))?;
        }
        InvalidCommand::Show { id, output } => {
            let Some(item) = items.first() else {
                anyhow::bail!(
                    "no invalid event {} in {} (the IDs are in `klaxon invalid list`)",
                    klaxon_core::text::one_line(&id, 64),
                    topology.invalid_queue()
                );
            };
            match output.format(Format::Json) {
                Format::Table => {
                    let mut out = std::io::stdout().lock();
                    match out
                        .write_all(shown(&item.body).as_bytes())
                        .and_then(|()| out.flush())
                    {
                        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                        r => r.context("cannot write to stdout")?,
                    }
                }
                _ => output::emit(&format!("{}\n", serde_json::to_string_pretty(&item.to_json())?))?,
            }
        }
        InvalidCommand::Replay { .. } => {
            let mut text = String::new();
            for item in &items {
                text.push_str(&format!("replayed {} to {}\n", item.id, topology.events_queue()));
            }
            text.push_str(&format!("{} replayed\n", items.len()));
            output::emit(&text)?;
            if items.is_empty() {
                return Ok(ExitCode::from(1));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A body as `show` writes it: line breaks and tabs kept (a body may be pretty JSON; one with CRLF line ends
/// stays byte for byte), every other control character (ESC, BEL, DEL, C1, a carriage return not before a line
/// feed) and every hidden character ([`klaxon_core::text::is_hidden`]) shown as `<U+XXXX>`: a body's escape
/// sequences never reach the operator's terminal, as on every other surface.
fn shown(body: &str) -> std::borrow::Cow<'_, str> {
    let mut chars = body.chars().peekable();
    let mut out = String::new();
    let mut changed = false;
    while let Some(c) = chars.next() {
        let keep = match c {
            '\n' | '\t' => true,
            '\r' => chars.peek() == Some(&'\n'),
            c => !c.is_control() && !klaxon_core::text::is_hidden(c),
        };
        if keep {
            out.push(c);
        } else {
            changed = true;
            out.push_str(&klaxon_core::text::marker(c));
        }
    }
    if changed {
        std::borrow::Cow::Owned(out)
    } else {
        std::borrow::Cow::Borrowed(body)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_shown_body_keeps_lines_and_shows_every_other_control_character() {
        let json = "{\r\n\t\"a\": 1\n}";
        assert!(matches!(super::shown(json), std::borrow::Cow::Borrowed(_)));
        assert_eq!(
            super::shown("a\u{1b}[2Jb\rc\u{7}\u{9b}d\u{202e}e\u{7f}"),
            "a<U+001B>[2Jb<U+000D>c<U+0007><U+009B>d<U+202E>e<U+007F>"
        );
    }
}
