//! The one error type of this crate.

/// Why a rule-store operation failed. Each variant says whether retrying can help ([`RulesError::is_transient`]).
///
/// Messages never contain the MongoDB URL (it may carry credentials).
#[derive(Debug, Clone, thiserror::Error)]
pub enum RulesError {
    /// Transient: the server could not be reached or selected in time.
    #[error("MongoDB is unreachable: {0}")]
    Unavailable(String),
    /// Transient: a query or write failed on the server or on the way.
    #[error("MongoDB {op} failed: {message}")]
    Query {
        /// What was being done (`find project`, `update project`, …).
        op: &'static str,
        /// The driver's message.
        message: String,
    },
    /// Permanent: the MongoDB URL or options cannot be used.
    #[error("invalid MongoDB configuration: {0}")]
    Config(String),
    /// Permanent: an id is not a 24-hex ObjectId.
    #[error("invalid {what} {value:?}: expected 24 hexadecimal characters")]
    InvalidId {
        /// `project id` or `rule id`.
        what: &'static str,
        /// The offending value.
        value: String,
    },
    /// Permanent: import input or a rule to store is malformed.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// Permanent: no stored rule has this id (in the given project, if any).
    #[error("no rule with id {0}")]
    RuleNotFound(String),
    /// Permanent: the write would put a project over a per-project limit (`klaxon_core::Limits`).
    #[error("over a limit: {0}")]
    OverLimit(String),
    /// Permanent: the rule id exists in several projects; the caller must name the project.
    #[error("rule id {0} exists in several projects; pass the project id")]
    AmbiguousRule(String),
}

impl RulesError {
    /// True when the same call may succeed later (MongoDB down or slow); false when only a change of input or
    /// configuration helps.
    pub fn is_transient(&self) -> bool {
        matches!(self, RulesError::Unavailable(_) | RulesError::Query { .. })
    }

    /// Classifies a driver error: server selection and I/O problems mean "unavailable".
    pub(crate) fn from_driver(op: &'static str, e: mongodb::error::Error) -> Self {
        use mongodb::error::ErrorKind;
        // The kind only: the error's own Display adds the labels, source and server response as Rust debug
        // output (`RawDocumentBuf { data: "4f00…" }`), which no operator can read.
        let text = short(&e.kind.to_string());
        match *e.kind {
            ErrorKind::ServerSelection { ref message, .. } => {
                RulesError::Unavailable(format!("{op}: {}", server_selection(message)))
            }
            ErrorKind::Io(_) | ErrorKind::ConnectionPoolCleared { .. } => {
                RulesError::Unavailable(format!("{op}: {text}"))
            }
            ErrorKind::InvalidArgument { .. } => RulesError::Config(format!("{op}: {text}")),
            _ => RulesError::Query { op, message: text },
        }
    }
}

/// A server-selection failure in one line, each server's error said once: the driver's message is its topology's
/// debug-like description (`Servers: [ { Address: 127.0.0.1:1, Type: Unknown, Error: Kind: I/O error: Connection
/// refused (os error 111), labels: {…}, source: None, server response: None } ]`).
fn server_selection(message: &str) -> String {
    let servers: Vec<String> = message
        .split("Address: ")
        .skip(1)
        .map(|server| {
            let address = server.split(',').next().unwrap_or_default().trim();
            let error = server
                .split_once("Error: ")
                .map(|(_, e)| e.trim_start_matches("Kind: "))
                .map(|e| e.split(", labels:").next().unwrap_or(e).trim());
            match error {
                Some(e) => format!("{address}: {e}"),
                None => format!("{address}: no answer"),
            }
        })
        .collect();
    if servers.is_empty() {
        return short(message);
    }
    short(&format!("no server could be selected ({})", servers.join("; ")))
}

/// Some servers (PoloDB) put a backtrace in error messages: keep log lines readable.
pub(crate) fn short(message: &str) -> String {
    const MAX: usize = 300;
    match message.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &message[..i]),
        None => message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_selection_failures_name_each_server_once() {
        let message = "Server selection timeout: No available servers. Topology: { Type: Unknown, Servers: [ { \
            Address: 127.0.0.1:1, Type: Unknown, Error: Kind: I/O error: Connection refused (os error 111), labels: \
            {\"RetryableError\", \"SystemOverloadedError\"}, source: None, server response: None }, { Address: \
            db2:27017, Type: Unknown } ] }";
        assert_eq!(
            server_selection(message),
            "no server could be selected (127.0.0.1:1: I/O error: Connection refused (os error 111); db2:27017: no answer)"
        );
        assert_eq!(server_selection("something else"), "something else");
    }
}
