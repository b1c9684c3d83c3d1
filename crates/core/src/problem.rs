//! [`RuleProblem`]: why a rule (or a part of it) cannot be used, with the fix. Below the rule kinds
//! ([`crate::kind`]), the raw model ([`crate::rule::RawRule`]) and the limits ([`crate::limits`]), which all
//! report problems: none of them imports another to say what is wrong.

use std::fmt;

use serde::Serialize;

/// Why a rule (or one of its parts) cannot be used, with a suggested fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleProblem {
    /// The rule id when it could be read (none for a problem of the whole project, see `limit`).
    pub rule_id: Option<String>,
    /// True when the whole rule is skipped; false when only a part (a channel) is.
    pub fatal: bool,
    /// True when a per-project bound is crossed ([`crate::limits`]): too many rules in the project, too many
    /// email recipients, keys MongoDB would read as operators or paths. Readers skip the excess; writes are
    /// refused, even forced ones ([`RuleProblem::refuses_write`]).
    #[serde(skip_serializing_if = "is_false")]
    pub limit: bool,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub fix: String,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl RuleProblem {
    /// Whether a write (`klaxon rules import|add`, `PUT …/rules`, the console's editor) must refuse rules with
    /// this problem: always when a bound is crossed, and for a rule the engine cannot use unless `force`.
    pub fn refuses_write(&self, force: bool) -> bool {
        self.limit || (self.fatal && !force)
    }
}

impl fmt::Display for RuleProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rule_id.as_deref() {
            Some(id) => write!(f, "rule {id}: ")?,
            // A bound of the whole project (too many rules) belongs to no rule.
            None if self.limit => {}
            None => f.write_str("rule <no id>: ")?,
        }
        write!(f, "{} (fix: {})", self.message, self.fix)
    }
}

/// The longest [`RuleProblem`] message or fix, in bytes.
pub const MAX_PROBLEM_BYTES: usize = crate::text::MAX_REASON_BYTES;

impl RuleProblem {
    pub(crate) fn bounded(mut self) -> Self {
        if self.message.len() > MAX_PROBLEM_BYTES || self.message.contains(char::is_control) {
            self.message = crate::text::one_line(&self.message, MAX_PROBLEM_BYTES);
        }
        if self.fix.len() > MAX_PROBLEM_BYTES || self.fix.contains(char::is_control) {
            self.fix = crate::text::one_line(&self.fix, MAX_PROBLEM_BYTES);
        }
        self
    }
}
