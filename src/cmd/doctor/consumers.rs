//! The **consumers** line: the events queue's consumers against the Klaxon workers registered in Redis.

use klaxon_broker::QueueDepth;
use klaxon_counter::Registered;

use super::{check, Check, Status};
use crate::cli::GlobalOpts;

/// How many registered labels the consumers check reads (and at most names).
pub(super) const MAX_LABELS: usize = 20;
/// How many of them it prints.
const SHOWN_LABELS: usize = 3;

/// The events queue's consumers against the Klaxon workers registered in Redis.
pub(super) fn consumers_check(
    global: &GlobalOpts,
    events: QueueDepth,
    registered: Option<&Result<Registered, String>>,
) -> Check {
    const NAME: &str = "consumers";
    let queue = global.events_queue();
    let n = events.consumers;
    if n == 0 {
        return if events.messages > 0 {
            check(
                Status::Warn,
                NAME,
                format!(
                    "queue {queue}: {} messages wait and nothing consumes them: start `klaxon run` or `klaxon worker`",
                    events.messages
                ),
            )
        } else {
            check(
                Status::Ok,
                NAME,
                format!("queue {queue}: no consumers (no klaxon worker is running)"),
            )
        };
    }
    let r = match registered {
        None => {
            return check(
                Status::Warn,
                NAME,
                format!(
                    "queue {queue}: {n} consumer(s); Redis could not be used (see the redis checks), so Klaxon's \
                     cannot be told from others"
                ),
            )
        }
        Some(Err(e)) => {
            return check(
                Status::Warn,
                NAME,
                format!(
                    "queue {queue}: {n} consumer(s); the worker registry in Redis could not be read ({e}), so \
                     Klaxon's cannot be told from others"
                ),
            )
        }
        Some(Ok(r)) => r,
    };
    let mut names = r
        .labels
        .iter()
        .take(SHOWN_LABELS)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if r.live as usize > SHOWN_LABELS {
        names.push_str(&format!(" and {} more", r.live as usize - SHOWN_LABELS));
    }
    let foreign = u64::from(n).saturating_sub(r.live);
    if foreign == 0 {
        return check(
            Status::Ok,
            NAME,
            format!("queue {queue}: {n} consumer(s), all registered Klaxon workers ({names})"),
        );
    }
    let workers = if r.live == 0 {
        "no registered Klaxon worker".to_owned()
    } else {
        format!("{} registered Klaxon worker(s) ({names})", r.live)
    };
    check(
        Status::Warn,
        NAME,
        format!(
            "queue {queue}: {n} consumer(s), {workers}: {foreign} consumer(s) are not Klaxon processes of namespace \
             `{}` (Hawk's notifier still running?). Each consumer gets part of the stream, so thresholds are \
             under-counted: stop the other consumer(s) (`rabbitmqctl list_consumers` shows their tags; Klaxon's \
             connections are named `klaxon <role> <host> <pid>`)",
            global.namespace
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::super::tests::global;
    use super::*;
    use std::time::Duration;

    fn registered(live: u64, events_ago_s: Option<u64>) -> Registered {
        Registered {
            live,
            events_ago: events_ago_s.map(Duration::from_secs),
            labels: (0..live).map(|i| format!("klaxon worker h {i}")).collect(),
        }
    }

    #[test]
    fn consumers_beyond_the_registered_workers_are_warned_with_their_count() {
        let q = |messages, consumers| QueueDepth { messages, consumers };
        type Read = Option<Result<Registered, String>>;
        let cases: Vec<(QueueDepth, Read, Status, &str)> = vec![
            (q(0, 0), None, Status::Ok, "no consumers"),
            (
                q(5, 0),
                None,
                Status::Warn,
                "5 messages wait and nothing consumes them",
            ),
            (
                q(0, 1),
                Some(Ok(registered(1, None))),
                Status::Ok,
                "all registered Klaxon workers (klaxon worker h 0)",
            ),
            // a crashed worker still registered: never blamed on anyone
            (
                q(0, 1),
                Some(Ok(registered(2, None))),
                Status::Ok,
                "all registered",
            ),
            (
                q(0, 1),
                Some(Ok(registered(0, None))),
                Status::Warn,
                "no registered Klaxon worker: 1 consumer(s) are not",
            ),
            (
                q(0, 3),
                Some(Ok(registered(1, None))),
                Status::Warn,
                "1 registered Klaxon worker(s) (klaxon worker h 0): 2 consumer(s) are not",
            ),
            (
                q(0, 5),
                Some(Ok(registered(5, None))),
                Status::Ok,
                "h 2 and 2 more",
            ),
            (
                q(0, 2),
                Some(Err("boom".into())),
                Status::Warn,
                "could not be read (boom)",
            ),
            (q(0, 2), None, Status::Warn, "Redis could not be used"),
        ];
        for (depth, reg, want, said) in cases {
            let c = consumers_check(&global(), depth, reg.as_ref());
            assert_eq!(c.status, want, "{depth:?} {reg:?}: {}", c.detail);
            assert!(c.detail.contains(said), "`{said}` in {}", c.detail);
            assert!(c.detail.starts_with("queue notifier:"), "{}", c.detail);
        }
    }
}
