//! Drops lapin's own ERROR line for a refused `queue.declare`: the declare's caller always gets the same error and
//! handles it — a passive declare of a missing queue (404) is how Klaxon asks whether a queue exists before it
//! uses the queue as it is (`klaxon_broker`'s "queues used as they are"), and a refused declare (406) is either the
//! answer to a race Klaxon resolves or a [`klaxon_broker::BrokerError::Incompatible`] it reports in words. Without
//! this, every start in a fresh namespace logged one "Channel closed … NOT_FOUND" ERROR per queue (and, with
//! `--events-shards`, one for the shard exchange's passive look). lapin's other
//! channel-close lines (a consumer's channel closed by the broker, …) are kept.

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// The layer: see the module docs.
pub struct QuietDeclareRefusals;

/// What the filter reads of a lapin "Channel closed" event.
#[derive(Default)]
struct CloseFields {
    message: bool,
    method: String,
}

impl Visit for CloseFields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}") == "Channel closed",
            "method" => self.method = format!("{value:?}"),
            _ => {}
        }
    }
}

/// True for the Close method of a refused `queue.declare` (class 50, method 10) with 404 or 406, or of a passive
/// `exchange.declare` (class 40, method 10) of a missing exchange (404: `--events-shards` looks for its exchange
/// first, as for every queue).
fn is_declare_refusal(method: &str) -> bool {
    (method.contains("class_id: 50, method_id: 10")
        && (method.contains("reply_code: 404,") || method.contains("reply_code: 406,")))
        || (method.contains("class_id: 40, method_id: 10") && method.contains("reply_code: 404,"))
}

impl<S: Subscriber> Layer<S> for QuietDeclareRefusals {
    fn event_enabled(&self, event: &Event<'_>, _ctx: Context<'_, S>) -> bool {
        let meta = event.metadata();
        if !meta.target().starts_with("lapin::channel") || *meta.level() != tracing::Level::ERROR {
            return true;
        }
        let mut fields = CloseFields::default();
        event.record(&mut fields);
        !(fields.message && is_declare_refusal(&fields.method))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;

    /// A log writer that keeps what it is given (the log tests of this binary read it back).
    #[derive(Clone, Default)]
    pub(crate) struct Captured(pub(crate) Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if let Ok(mut v) = self.0.lock() {
                v.extend_from_slice(buf);
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn only_lapins_lines_for_refused_queue_declares_are_dropped() {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish()
            .with(QuietDeclareRefusals);
        let close = |code: u16, class: u16, method: u16| {
            format!(
                "Close {{ reply_code: {code}, reply_text: ShortString(\"x\"), class_id: {class}, method_id: {method} }}"
            )
        };
        // (target, message, method field, kept?)
        let cases = [
            ("lapin::channel", "Channel closed", close(404, 50, 10), false),
            ("lapin::channel", "Channel closed", close(406, 50, 10), false),
            // a consumer's channel closed by the broker, a refused publish, a refused exchange declare: kept
            ("lapin::channel", "Channel closed", close(404, 60, 20), true),
            ("lapin::channel", "Channel closed", close(406, 60, 80), true),
            ("lapin::channel", "Channel closed", close(406, 40, 10), true),
            ("lapin::channel", "Channel closed", close(404, 40, 10), false),
            ("lapin::channel", "Channel closed", close(320, 0, 0), true),
            ("lapin::channel", "something else", close(404, 50, 10), true),
            ("klaxon", "Channel closed", close(404, 50, 10), true),
        ];
        tracing::subscriber::with_default(subscriber, || {
            for (i, (target, message, method, _)) in cases.iter().enumerate() {
                // tracing needs a static target: one call per target of the table
                if *target == "lapin::channel" {
                    tracing::error!(target: "lapin::channel", case = i, method = %method, "{message}");
                } else {
                    tracing::error!(target: "klaxon", case = i, method = %method, "{message}");
                }
            }
        });
        let text = String::from_utf8(out.0.lock().map(|v| v.clone()).unwrap_or_default()).unwrap_or_default();
        for (i, (_, _, _, kept)) in cases.iter().enumerate() {
            assert_eq!(text.contains(&format!("case={i} ")), *kept, "case {i}:\n{text}");
        }
    }
}
