//! Exit codes, the way scripts and CI read them:
//!
//! | code | meaning |
//! |---|---|
//! | 0 | ok |
//! | 1 | problems found (`rules check`, `doctor`, `test-notify` not delivered, nothing to replay, …) or any other error |
//! | 2 | usage error: a flag or argument is wrong (clap's own errors, and our validation of flag values, service URLs included), or a confirmation flag is missing (`namespace delete` without `--yes`) |
//! | 3 | a backing service (Redis, RabbitMQ, MongoDB) is unreachable |
//!
//! Commands return `anyhow::Error`; [`code`] reads the cause chain: a [`Usage`] anywhere → 2, a connection
//! failure of one of the services' clients (their error types say so: `Unavailable`, `connect`) → 3.

/// Problems found.
pub const PROBLEMS: u8 = 1;
/// A flag or argument is wrong.
pub const USAGE: u8 = 2;
/// A backing service is unreachable.
pub const UNREACHABLE: u8 = 3;

/// A flag or argument the user must change (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

/// A usage error (exit code 2) with this message.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    Usage(message.into()).into()
}

/// `anyhow::ensure!` for flag values: fails with a [`Usage`] error.
macro_rules! ensure_usage {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::exit::usage(format!($($arg)+)));
        }
    };
}
pub(crate) use ensure_usage;

/// A backing service could not be reached (exit code 3). For failures the services' own error types
/// cannot express (e.g. a stringly error from a reader).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unreachable(pub String);

fn broker_unreachable(e: &klaxon_broker::BrokerError) -> bool {
    matches!(e, klaxon_broker::BrokerError::Amqp { op: "connect", .. })
}

fn counter_unreachable(e: &klaxon_counter::CounterError) -> bool {
    matches!(e, klaxon_counter::CounterError::Unavailable(_))
}

fn rules_unreachable(e: &klaxon_store::RulesError) -> bool {
    matches!(e, klaxon_store::RulesError::Unavailable(_))
}

/// An error and its causes in one line, each cause said once: `{:#}` prints every cause of the chain, and
/// clients whose error displays its own source (lapin, redis) would repeat it (`connect failed: IO error:
/// Connection refused: Connection refused`). A cause whose text the previous one already contains is left out.
pub fn describe(err: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut previous = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if !previous.is_empty() && previous.contains(text.trim()) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
        previous = text;
    }
    out
}

/// The exit code of a failed command.
pub fn code(err: &anyhow::Error) -> u8 {
    use klaxon_engine::EngineError;
    for cause in err.chain() {
        if cause.is::<Usage>() {
            return USAGE;
        }
        let unreachable = cause.is::<Unreachable>()
            || cause
                .downcast_ref::<klaxon_counter::CounterError>()
                .is_some_and(counter_unreachable)
            || cause
                .downcast_ref::<klaxon_store::RulesError>()
                .is_some_and(rules_unreachable)
            || cause
                .downcast_ref::<klaxon_broker::BrokerError>()
                .is_some_and(broker_unreachable)
            // `#[error(transparent)]` hides the wrapped error from the chain: look inside.
            || cause.downcast_ref::<EngineError>().is_some_and(|e| match e {
                EngineError::Broker(b) => broker_unreachable(b),
                EngineError::Counter(c) => counter_unreachable(c),
                EngineError::Rules(r) => rules_unreachable(r),
                _ => false,
            })
            || cause
                .downcast_ref::<redis::RedisError>()
                .is_some_and(|e| e.is_connection_refusal() || e.is_connection_dropped() || e.is_timeout());
        if unreachable {
            return UNREACHABLE;
        }
    }
    PROBLEMS
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use super::*;

    #[test]
    fn codes_follow_the_cause_chain() {
        let e = usage("--project must be 24 hex digits").context("rules add");
        assert_eq!(code(&e), USAGE);
        let e = anyhow::Error::new(klaxon_store::RulesError::Unavailable("ping".into()))
            .context("cannot use MongoDB");
        assert_eq!(code(&e), UNREACHABLE);
        let e = anyhow::Error::new(klaxon_store::RulesError::RuleNotFound("x".into()));
        assert_eq!(code(&e), PROBLEMS);
        let e = anyhow::Error::new(klaxon_engine::EngineError::Rules(
            klaxon_store::RulesError::Unavailable("ping".into()),
        ));
        assert_eq!(code(&e), UNREACHABLE);
        let e = anyhow::Error::new(Unreachable("trail".into())).context("deliveries");
        assert_eq!(code(&e), UNREACHABLE);
        assert_eq!(code(&anyhow::anyhow!("anything else")), PROBLEMS);
    }

    #[derive(Debug)]
    struct Wraps(&'static str, Option<Box<Wraps>>);
    impl fmt::Display for Wraps {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Wraps {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|w| w as _)
        }
    }

    #[test]
    fn each_cause_is_said_once() {
        // lapin's shape: the client error displays its source too
        let io = Wraps("Connection refused (os error 111)", None);
        let lapin = Wraps("IO error: Connection refused (os error 111)", Some(Box::new(io)));
        let ours = Wraps(
            "RabbitMQ connect failed: IO error: Connection refused (os error 111)",
            Some(Box::new(lapin)),
        );
        let e = anyhow::Error::new(ours).context("cannot connect to RabbitMQ");
        assert_eq!(
            describe(&e),
            "cannot connect to RabbitMQ: RabbitMQ connect failed: IO error: Connection refused (os error 111)"
        );
        // distinct causes are all kept
        let e = anyhow::Error::new(Wraps("b", Some(Box::new(Wraps("c", None))))).context("a");
        assert_eq!(describe(&e), "a: b: c");
    }
}
