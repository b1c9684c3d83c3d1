//! The **rules** line: the problems `klaxon rules check` would report, and a database without rules while events
//! flow.

use std::time::Duration;

use klaxon_broker::QueueDepth;
use klaxon_counter::Registered;

use super::{check, Check, Status};
use crate::cli::GlobalOpts;

/// Whether the events queue has traffic, as far as can be seen without RabbitMQ's management plugin.
#[derive(Debug, Clone, Copy)]
pub(super) struct Traffic {
    /// Messages ready on the queue.
    ready: u32,
    /// Consumers on it.
    consumers: u32,
    /// How long ago a registered Klaxon worker reported taking events (within 10 minutes).
    taken_ago: Option<Duration>,
}

impl Traffic {
    pub(super) fn of(events: Option<QueueDepth>, registered: Option<&Registered>) -> Option<Traffic> {
        let q = events?;
        Some(Traffic {
            ready: q.messages,
            consumers: q.consumers,
            taken_ago: registered.and_then(|r| r.events_ago),
        })
    }

    /// The evidence of events, in words; `None` when there is none.
    fn evidence(&self) -> Option<String> {
        let mut said = Vec::new();
        if self.ready > 0 {
            said.push(format!("{} messages ready", self.ready));
        }
        if let Some(ago) = self.taken_ago {
            said.push(format!(
                "a Klaxon worker took events {} ago",
                humantime::format_duration(Duration::from_secs(ago.as_secs()))
            ));
        }
        (!said.is_empty()).then(|| said.join(", "))
    }
}

/// The rules as read from MongoDB, or why they were not.
pub(super) enum RulesRead {
    Read(crate::cmd::rules::Survey),
    Failed(String),
    Slow,
}

/// The rules line: their problems, and a database without rules while events flow (see the module docs).
pub(super) fn rules_check(
    global: &GlobalOpts,
    read: RulesRead,
    traffic: Option<Traffic>,
    t: Duration,
) -> Check {
    let db = global.mongo_db();
    let queue = global.events_queue();
    let collection = klaxon_store::store::PROJECTS;
    let s = match read {
        // MongoDB answered; a slow read of many rules is not a failure
        RulesRead::Slow => {
            return check(
                Status::Warn,
                "rules",
                format!(
                    "not checked: reading the rules took longer than {}",
                    humantime::format_duration(t)
                ),
            )
        }
        RulesRead::Failed(e) => return check(Status::Fail, "rules", format!("cannot read the rules: {e}")),
        RulesRead::Read(s) => s,
    };
    if s.rules == 0 {
        let empty = format!(
            "database `{db}` (collection `{collection}`) holds no project with rules ({} project document(s))",
            s.projects
        );
        let fix = "point --mongo-db/KLAXON_MONGO_DB (and --mongo-url) at the database that holds the rules (Hawk: its \
                   accounts database), or store rules with `klaxon rules import`";
        return match traffic {
            Some(tr) if tr.evidence().is_some() => check(
                Status::Fail,
                "rules",
                format!(
                    "{empty}, but queue {queue} has traffic ({}): every event is dropped unevaluated; {fix}",
                    tr.evidence().unwrap_or_default()
                ),
            ),
            Some(tr) if tr.consumers > 0 => check(
                Status::Warn,
                "rules",
                format!(
                    "{empty}, and queue {queue} has {} consumer(s): no event can fire; {fix}",
                    tr.consumers
                ),
            ),
            _ => check(
                Status::Ok,
                "rules",
                format!("{empty} yet; no traffic on queue {queue}"),
            ),
        };
    }
    if s.found.is_empty() {
        return check(
            Status::Ok,
            "rules",
            format!(
                "{} rule(s) in {} project(s) in database `{db}`, no problems",
                s.rules, s.projects
            ),
        );
    }
    let skipped = s.found.iter().filter(|(_, p)| p.fatal).count();
    check(
        Status::Warn,
        "rules",
        format!(
            "{} problem(s) in {} rule(s) of {} project(s) in database `{db}`, {skipped} rule(s) skipped by the engine: see `klaxon rules check`",
            s.found.len(),
            s.rules,
            s.projects
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::super::tests::global;
    use super::*;

    #[test]
    fn an_empty_rule_database_fails_only_with_traffic_and_names_the_database() {
        let t = Duration::from_secs(3);
        let survey = |rules| crate::cmd::rules::Survey {
            projects: 2,
            rules,
            found: Vec::new(),
            ignored: Vec::new(),
            reminders: Vec::new(),
        };
        let traffic = |ready, consumers, ago: Option<u64>| Traffic {
            ready,
            consumers,
            taken_ago: ago.map(Duration::from_secs),
        };
        let cases = [
            (
                0,
                Some(traffic(7, 0, None)),
                Status::Fail,
                "has traffic (7 messages ready)",
            ),
            (
                0,
                Some(traffic(0, 1, Some(65))),
                Status::Fail,
                "(a Klaxon worker took events 1m 5s ago)",
            ),
            (
                0,
                Some(traffic(0, 2, None)),
                Status::Warn,
                "has 2 consumer(s): no event can fire",
            ),
            (0, Some(traffic(0, 0, None)), Status::Ok, "yet; no traffic"),
            (0, None, Status::Ok, "yet; no traffic"),
            (
                3,
                Some(traffic(7, 1, Some(1))),
                Status::Ok,
                "3 rule(s) in 2 project(s) in database `hawk`",
            ),
        ];
        for (rules, tr, want, said) in cases {
            let c = rules_check(&global(), RulesRead::Read(survey(rules)), tr, t);
            assert_eq!(c.status, want, "{rules} {tr:?}: {}", c.detail);
            assert!(c.detail.contains(said), "`{said}` in {}", c.detail);
            if rules == 0 {
                assert!(c
                    .detail
                    .contains("database `hawk` (collection `projects`) holds no project with rules"));
            }
            if want == Status::Fail {
                assert!(
                    c.detail.contains("--mongo-db") && c.detail.contains("queue notifier"),
                    "{}",
                    c.detail
                );
            }
        }
        let c = rules_check(&global(), RulesRead::Slow, Some(traffic(7, 0, None)), t);
        assert_eq!(
            c.status,
            Status::Warn,
            "unknown rules are not a failure: {}",
            c.detail
        );
    }
}
