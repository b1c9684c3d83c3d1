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
        let text = crate::store::short(&e.to_string());
        match *e.kind {
            ErrorKind::ServerSelection { .. }
            | ErrorKind::Io(_)
            | ErrorKind::ConnectionPoolCleared { .. } => RulesError::Unavailable(format!("{op}: {text}")),
            ErrorKind::InvalidArgument { .. } => RulesError::Config(format!("{op}: {text}")),
            _ => RulesError::Query { op, message: text },
        }
    }
}
