//! Internal events (vector's `src/internal_events/`, like `klaxon-engine`'s): one struct per occurrence that
//! both logs and counts, so the log line and its metric cannot drift apart. The store, the cache and the trail
//! count nothing inline.

use klaxon_core::RuleProblem;

/// A project's rules were queried from MongoDB.
pub(crate) struct RulesQueried;

impl RulesQueried {
    pub(crate) fn emit(self) {
        metrics::counter!("klaxon_rules_queries_total").increment(1);
    }
}

/// A project holds more rules than `--max-rules`: the ones past the bound were not read.
pub(crate) struct RulesSkipped {
    pub(crate) rules: usize,
}

impl RulesSkipped {
    pub(crate) fn emit(self) {
        if self.rules > 0 {
            metrics::counter!("klaxon_rules_skipped_total").increment(self.rules as u64);
        }
    }
}

/// A rule (or a part of it) cannot be used, reported once per version of the rule.
pub(crate) struct RuleProblemReported<'a> {
    pub(crate) project_id: &'a str,
    pub(crate) problem: &'a RuleProblem,
}

impl RuleProblemReported<'_> {
    pub(crate) fn emit(self) {
        let p = self.problem;
        metrics::counter!("klaxon_rules_problems_total").increment(1);
        tracing::warn!(
            project_id = self.project_id,
            rule_id = p.rule_id.as_deref().unwrap_or("<none>"),
            skipped = match (p.fatal, p.rule_id.is_some()) {
                (true, _) => "rule",
                (false, true) => "part",
                // a bound of the whole project: the rules past it
                (false, false) => "rules",
            },
            // the message quotes the rule's own text (an endpoint, a pattern): tenant text, on one line
            problem = %klaxon_core::text::reason(&p.message),
            fix = %klaxon_core::text::reason(&p.fix),
            "unusable rule configuration"
        );
    }
}

/// The cache served a project's rules past their freshness (a reload is due or failed).
pub(crate) struct RulesStaleServed;

impl RulesStaleServed {
    pub(crate) fn emit(self) {
        metrics::counter!("klaxon_rules_stale_served_total").increment(1);
    }
}

/// Loading a project's rules from MongoDB failed (the cache's callers log what they do about it).
pub(crate) struct RulesLoadFailed;

impl RulesLoadFailed {
    pub(crate) fn emit(self) {
        metrics::counter!("klaxon_rules_load_errors_total").increment(1);
    }
}

/// The delivery trail's queue was full: a record was dropped.
pub(crate) struct TrailRecordDropped;

impl TrailRecordDropped {
    pub(crate) fn emit(self) {
        metrics::counter!("klaxon_trail_dropped_total").increment(1);
    }
}

/// Writing a delivery trail record failed; only the first failure of a run of them is logged.
pub(crate) struct TrailInsertFailed<'a> {
    pub(crate) error: &'a str,
    pub(crate) log: bool,
}

impl TrailInsertFailed<'_> {
    pub(crate) fn emit(self) {
        metrics::counter!("klaxon_trail_errors_total").increment(1);
        if self.log {
            tracing::warn!(
                error = %self.error,
                "delivery trail: insert failed (further failures are only counted)"
            );
        }
    }
}
