//! The worker's decisions for one batch of events, pure: which (event, rule) pairs to count, and what the
//! counter's answers become. The engine's worker (`klaxon_engine::worker`) does the I/O between the steps:
//!
//! ```text
//! events + each project's rules ──plan──▶ Plan { matches: (event, rule, want) to count,
//!                                                unmatched: events no rule could evaluate, by (project, reason) }
//! matches + the counter's outcomes (in the same order) ──firings──▶ one Firing per (event, rule) that fired
//! firings + the mutes of their projects ──route──▶ Routed { muted, crossed,
//!                                                          now: tasks to publish at once,
//!                                                          digest: tasks for their channel's digest }
//! ```
//!
//! What happens to a task next depends on the process's output (`--output`: Klaxon's queues, Hawk's queues, or
//! the trail in shadow mode), not on anything decided here: all three evaluate, count, mute and digest alike.

use std::collections::BTreeMap;

use crate::event::EventTask;
use crate::filter::Title;
use crate::kind::Signal;
use crate::mute::{is_muted, Mute};
use crate::notification::{Firing, NotificationTask};
use crate::rule::{CompiledRule, ProjectRules, Unevaluated, Want};

/// One event of a batch: the parsed task and its idempotency key (the AMQP `message_id`), when it has one.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchEvent {
    /// The notifier task.
    pub task: EventTask,
    /// The event's idempotency key; with it the counter recognises a redelivered event.
    pub id: Option<String>,
}

/// One (event, rule) pair the counter decides: the rule wants the event ([`CompiledRule::wants`]). It keeps
/// the event, its project's rules and the rule together, so the counter's answer for it needs no look-up.
#[derive(Debug, Clone, Copy)]
pub struct Match<'a> {
    /// The event.
    pub event: &'a BatchEvent,
    /// The rules of the event's project (its name is what messages show).
    pub project: &'a ProjectRules,
    /// The rule that wants the event.
    pub rule: &'a CompiledRule,
    /// What the rule asks the counter for.
    pub want: Want,
}

/// Events of one project that led to no evaluation, and why ([`ProjectRules::unevaluated`]): the
/// `klaxon_events_unmatched_total{reason}` metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unmatched<'a> {
    /// The project id, as the events gave it.
    pub project: &'a str,
    /// Why nothing could be evaluated.
    pub reason: Unevaluated,
    /// How many events of the batch.
    pub events: u64,
}

/// What [`plan`] found in a batch.
#[derive(Debug, Clone, Default)]
pub struct Plan<'a> {
    /// The pairs to count, in batch order (event by event, each event's rules in document order). The counter
    /// answers in this order.
    pub matches: Vec<Match<'a>>,
    /// The events no rule could evaluate, per (project, reason), sorted by project then reason.
    pub unmatched: Vec<Unmatched<'a>>,
}

/// Which (event, rule) pairs of a batch the counter must decide. `rules` gives a project's rules (`None`: the
/// rule database has none, an unknown project). An event of a project where no rule can fire
/// ([`ProjectRules::unevaluated`]) is not matched but counted in [`Plan::unmatched`]; an event that every rule
/// filters out is neither (the rules are working).
pub fn plan<'a>(events: &'a [BatchEvent], rules: impl Fn(&str) -> Option<&'a ProjectRules>) -> Plan<'a> {
    let mut matches = Vec::new();
    let mut unmatched: BTreeMap<(&str, Unevaluated), u64> = BTreeMap::new();
    for event in events {
        let task = &event.task;
        let project = rules(&task.project_id);
        let reason = match project {
            Some(p) => p.unevaluated(),
            None => Some(Unevaluated::ProjectUnknown),
        };
        let (Some(project), None) = (project, reason) else {
            if let Some(reason) = reason {
                *unmatched.entry((task.project_id.as_str(), reason)).or_default() += 1;
            }
            continue;
        };
        let title = Title::new(&task.event.title);
        for rule in &project.rules {
            if let Some(want) = rule.wants(&task.event, &title) {
                matches.push(Match {
                    event,
                    project,
                    rule,
                    want,
                });
            }
        }
    }
    Plan {
        matches,
        unmatched: unmatched
            .into_iter()
            .map(|((project, reason), events)| Unmatched {
                project,
                reason,
                events,
            })
            .collect(),
    }
}

/// What the counter decided for one hit: counted, or fired. The counter (`klaxon_counter::WindowCounter`)
/// answers one per hit, in the order of the hits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Counted, did not fire.
    Counted {
        /// Fixed: the count in the window. Sliding: the count in the trailing window, saturating at the
        /// threshold (no more members are kept). First-seen: 0 (nothing is counted). Unique users: the
        /// distinct users counted (sliding: saturating at the threshold).
        count: u64,
    },
    /// This hit is the firing: the one that crossed the threshold, or the redelivery of that same event
    /// (same event id), which gets the same `firing` token and `at_ms`.
    Fired {
        /// The count at the firing.
        count: u64,
        /// Identifies the firing inside its (rule, group): fixed = window start ms, sliding = firing time
        /// ms (unique users alike), first-seen = `"new"`. Feed it to [`crate::notification_id`] for a
        /// deterministic id.
        firing: String,
        /// When it fired, ms since the epoch (Redis clock, or the injected `now`).
        at_ms: i64,
        /// SPIKE and REAPPEARED: the numbers that made it fire (the baseline, the previous sighting).
        signal: Option<Signal>,
    },
}

impl Outcome {
    /// True for [`Outcome::Fired`].
    pub fn is_fired(&self) -> bool {
        matches!(self, Outcome::Fired { .. })
    }

    /// The firing token when fired.
    pub fn firing(&self) -> Option<&str> {
        match self {
            Outcome::Fired { firing, .. } => Some(firing),
            Outcome::Counted { .. } => None,
        }
    }

    /// The count reported with the outcome.
    pub fn count(&self) -> u64 {
        match self {
            Outcome::Counted { count } | Outcome::Fired { count, .. } => *count,
        }
    }
}

/// The firings among the counter's `outcomes` for `matches` (one outcome per match, in the same order, as the
/// counter answers), each with its event, rule and project name.
pub fn firings<'a>(matches: &[Match<'a>], outcomes: &'a [Outcome]) -> Vec<Firing<'a>> {
    matches
        .iter()
        .zip(outcomes)
        .filter_map(|(m, outcome)| match outcome {
            Outcome::Fired {
                count,
                firing,
                at_ms,
                signal,
            } => Some(Firing {
                task: &m.event.task,
                project_name: m.project.name.as_deref(),
                rule: m.rule,
                want: m.want,
                count: *count,
                firing,
                at_ms: *at_ms,
                signal: *signal,
            }),
            Outcome::Counted { .. } => None,
        })
        .collect()
}

/// The projects that fired, sorted, each once: whose mutes [`route`] needs.
pub fn firing_projects<'a>(firings: &[Firing<'a>]) -> Vec<&'a str> {
    let mut projects: Vec<&str> = firings.iter().map(|f| f.task.project_id.as_str()).collect();
    projects.sort_unstable();
    projects.dedup();
    projects
}

/// Where the firings of a batch go ([`route`]).
#[derive(Debug, Clone, Default)]
pub struct Routed<'a> {
    /// Firings a mute matched: counted (the window stays true), never delivered, not later either.
    pub muted: Vec<Firing<'a>>,
    /// Firings that are delivered: the thresholds crossed.
    pub crossed: Vec<Firing<'a>>,
    /// Their tasks on channels without a digest period: published at once.
    pub now: Vec<NotificationTask>,
    /// Their tasks on digest channels (`minPeriod > 0`): through the channel's digest, which sends the first
    /// firing of a quiet channel at once and coalesces the rest.
    pub digest: Vec<NotificationTask>,
    /// Their tasks on channels inside one of the rule's quiet windows (`quietHours`, not bypassed): held until
    /// the window ends, then released in one message per channel.
    pub held: Vec<Held>,
}

/// A firing's task that a quiet window holds ([`route`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The task, as it would have been sent.
    pub task: NotificationTask,
    /// When the quiet ends (unix ms): the release is due then.
    pub until_ms: i64,
}

/// Turns firings into notification tasks ([`NotificationTask::for_firing`]), one per channel of the rule, in
/// firing order and each rule's channel order, and sets aside the firings a mute of `mutes(project)` matches at
/// the firing's time. Each task goes where [`crate::route::route`] says: held when the rule's quiet hours hold
/// its channel at the firing's time (whatever its `minPeriod`), else through its digest or now.
pub fn route<'a, 'm>(firings: &[Firing<'a>], mutes: impl Fn(&str) -> &'m [Mute]) -> Routed<'a> {
    let mut routed = Routed::default();
    for f in firings {
        let muted = is_muted(
            mutes(&f.task.project_id),
            &f.rule.id,
            &f.task.event.group_hash,
            f.at_ms,
        );
        if muted {
            routed.muted.push(*f);
            continue;
        }
        routed.crossed.push(*f);
        for task in NotificationTask::for_firing(f).tasks {
            // a firing's route does not depend on the output (Hawk's senders take firings)
            match crate::route::route(&task, Some(f.rule), crate::route::Output::Klaxon, f.at_ms) {
                crate::route::Route::Held { until_ms } => routed.held.push(Held { task, until_ms }),
                crate::route::Route::Digest { .. } => routed.digest.push(task),
                _ => routed.now.push(task),
            }
        }
    }
    routed
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::event::Event;
    use crate::notification::notification_id;
    use crate::rule::ChannelKind;

    const P1: &str = "5e3eef0679fa3700a0198a49";
    const P2: &str = "5e3eef0679fa3700a0198a50";

    fn event(project: &str, title: &str, group: &str, is_new: bool, user: Option<&str>) -> BatchEvent {
        BatchEvent {
            task: EventTask {
                project_id: project.into(),
                event: Event {
                    title: title.into(),
                    group_hash: group.into(),
                    is_new,
                    repetition_id: None,
                    timestamp: None,
                    user: user.map(str::to_owned),
                },
            },
            id: Some(format!("{project}-{group}-{title}")),
        }
    }

    fn channel(key: &str, min_period: u64) -> Value {
        json!({key: {"isEnabled": true, "endpoint": format!("https://hooks.test/{key}"), "minPeriod": min_period}})
    }

    fn rule(id: &str, extra: Value) -> Value {
        let mut r = json!({"_id": id, "isEnabled": true, "whatToReceive": "ONLY_NEW", "including": [],
            "excluding": [], "channels": channel("slack", 0)});
        for (k, v) in extra.as_object().into_iter().flatten() {
            r[k] = v.clone();
        }
        r
    }

    fn project(rules: Vec<Value>, name: Option<&str>) -> ProjectRules {
        ProjectRules::from_notifications(Some(&Value::Array(rules))).with_name(name.map(Value::from).as_ref())
    }

    /// The rules of every project the tests use: P1 with three rules and a name, P2 with only a disabled one.
    fn projects() -> Vec<(&'static str, ProjectRules)> {
        vec![
            (
                P1,
                project(
                    vec![
                        rule("a0000000000000000000000a", json!({})),
                        rule(
                            "b0000000000000000000000b",
                            json!({"whatToReceive": "SEEN_MORE", "threshold": 3, "thresholdPeriod": 60000,
                                "including": ["db"], "window": "sliding",
                                "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.test/s", "minPeriod": 0},
                                             "email": {"isEnabled": true, "endpoint": "a@b.test", "minPeriod": 60}}}),
                        ),
                        rule(
                            "c0000000000000000000000c",
                            json!({"whatToReceive": "SEEN_MORE", "threshold": 2, "thresholdPeriod": 60000,
                                "uniqueUsers": true}),
                        ),
                    ],
                    Some("  Acme\nshop "),
                ),
            ),
            (
                P2,
                project(
                    vec![rule("d0000000000000000000000d", json!({"isEnabled": false}))],
                    None,
                ),
            ),
        ]
    }

    fn lookup<'a>(projects: &'a [(&'static str, ProjectRules)]) -> impl Fn(&str) -> Option<&'a ProjectRules> {
        |p| projects.iter().find(|(id, _)| *id == p).map(|(_, r)| r)
    }

    /// Which (event, rule) pairs a batch counts, and which events no rule could evaluate.
    #[test]
    fn plan_table() {
        let projects = projects();
        let unknown = "5e3eef0679fa3700a0198a51";
        let (a, b, c) = (
            "a0000000000000000000000a",
            "b0000000000000000000000b",
            "c0000000000000000000000c",
        );
        let unmatched = |project, reason, events| Unmatched {
            project,
            reason,
            events,
        };
        // (batch, matches as (event index, rule id, want), unmatched)
        type Case = (
            Vec<BatchEvent>,
            Vec<(usize, &'static str, Want)>,
            Vec<Unmatched<'static>>,
        );
        let sliding = Want::Count {
            threshold: 3,
            period_ms: 60_000,
            window: crate::rule::Window::Sliding,
        };
        let users = Want::UniqueUsers {
            threshold: 2,
            period_ms: 60_000,
            window: crate::rule::Window::Fixed,
        };
        let cases: Vec<Case> = vec![
            (vec![], vec![], vec![]),
            // a new event with "db" in its title and a user: every rule of P1 wants it
            (
                vec![event(P1, "DB down", "g1", true, Some("u1"))],
                vec![(0, a, Want::FirstSeen), (0, b, sliding), (0, c, users)],
                vec![],
            ),
            // not new, no "db", no user: no rule wants it, and it is not "unmatched" either (filtered)
            (vec![event(P1, "Timeout", "g2", false, None)], vec![], vec![]),
            // pairs keep batch order; unknown and disabled projects are counted per (project, reason)
            (
                vec![
                    event(unknown, "DB down", "g1", true, None),
                    event(P1, "db slow", "g3", false, None),
                    event(P2, "DB down", "g1", true, None),
                    event(unknown, "x", "g4", true, None),
                    event(P1, "Crash", "g5", true, Some("u2")),
                ],
                vec![(1, b, sliding), (4, a, Want::FirstSeen), (4, c, users)],
                vec![
                    unmatched(P2, Unevaluated::RulesDisabled, 1),
                    unmatched(unknown, Unevaluated::ProjectUnknown, 2),
                ],
            ),
        ];
        for (events, want_matches, want_unmatched) in cases {
            let plan = plan(&events, lookup(&projects));
            let got: Vec<(usize, &str, Want)> = plan
                .matches
                .iter()
                .map(|m| {
                    let i = events
                        .iter()
                        .position(|e| std::ptr::eq(e, m.event))
                        .expect("a match points into the batch");
                    (i, m.rule.id.as_str(), m.want)
                })
                .collect();
            assert_eq!(got, want_matches, "{events:?}");
            assert_eq!(plan.unmatched, want_unmatched, "{events:?}");
            for m in &plan.matches {
                assert!(std::ptr::eq(
                    m.project,
                    lookup(&projects)(&m.event.task.project_id).expect("known")
                ));
            }
        }
    }

    /// What the counter's answers and the mutes make of a batch's matches.
    #[test]
    fn route_table() {
        let projects = projects();
        let events = vec![
            event(P1, "DB down", "g1", true, Some("u1")),
            event(P1, "db slow", "g2", false, None),
        ];
        let plan = plan(&events, lookup(&projects));
        // matches: (g1, a), (g1, b), (g1, c), (g2, b)
        assert_eq!(plan.matches.len(), 4);
        let fired = |count, firing: &str| Outcome::Fired {
            count,
            firing: firing.into(),
            at_ms: 1_000,
            signal: None,
        };
        let counted = Outcome::Counted { count: 1 };
        let mute = |rule: Option<&str>, group: Option<&str>, until_ms| Mute {
            mute_id: "m".into(),
            rule_id: rule.map(str::to_owned),
            group_hash: group.map(str::to_owned),
            until_ms,
        };
        let (a, b) = ("a0000000000000000000000a", "b0000000000000000000000b");
        let id = |rule, group, firing, channel| notification_id(P1, rule, group, firing, channel);
        // (outcomes, mutes of P1, muted (rule, group), tasks sent now, tasks for digests)
        type Case = (
            Vec<Outcome>,
            Vec<Mute>,
            Vec<(&'static str, &'static str)>,
            Vec<String>,
            Vec<String>,
        );
        let cases: Vec<Case> = vec![
            // nothing fired
            (vec![counted.clone(); 4], vec![], vec![], vec![], vec![]),
            // ONLY_NEW on g1 (slack) and the sliding rule on g2 (slack at once, email through its digest)
            (
                vec![fired(1, "new"), counted.clone(), counted.clone(), fired(3, "900")],
                vec![],
                vec![],
                vec![
                    id(a, "g1", "new", ChannelKind::Slack),
                    id(b, "g2", "900", ChannelKind::Slack),
                ],
                vec![id(b, "g2", "900", ChannelKind::Email)],
            ),
            // a mute of rule b: b's firing is counted but muted; a mute that ended at the firing does nothing
            (
                vec![fired(1, "new"), counted.clone(), counted.clone(), fired(3, "900")],
                vec![mute(Some(b), None, 5_000), mute(None, None, 1_000)],
                vec![(b, "g2")],
                vec![id(a, "g1", "new", ChannelKind::Slack)],
                vec![],
            ),
            // a mute of group g1 (any rule)
            (
                vec![fired(1, "new"), counted.clone(), counted.clone(), fired(3, "900")],
                vec![mute(None, Some("g1"), 5_000)],
                vec![(a, "g1")],
                vec![id(b, "g2", "900", ChannelKind::Slack)],
                vec![id(b, "g2", "900", ChannelKind::Email)],
            ),
        ];
        for (outcomes, mutes, want_muted, want_now, want_digest) in cases {
            let firings = firings(&plan.matches, &outcomes);
            assert_eq!(firings.len(), outcomes.iter().filter(|o| o.is_fired()).count());
            if !firings.is_empty() {
                assert_eq!(firing_projects(&firings), vec![P1]);
            }
            let routed = route(&firings, |p| if p == P1 { &mutes[..] } else { &[] });
            let muted: Vec<(&str, &str)> = routed
                .muted
                .iter()
                .map(|f| (f.rule.id.as_str(), f.task.event.group_hash.as_str()))
                .collect();
            assert_eq!(muted, want_muted, "{outcomes:?} {mutes:?}");
            assert_eq!(routed.crossed.len() + routed.muted.len(), firings.len());
            let ids = |tasks: &[NotificationTask]| -> Vec<String> {
                tasks.iter().map(|t| t.notification_id.clone()).collect()
            };
            assert_eq!(ids(&routed.now), want_now, "{outcomes:?} {mutes:?}");
            assert_eq!(ids(&routed.digest), want_digest, "{outcomes:?} {mutes:?}");
            for t in routed.now.iter().chain(&routed.digest) {
                // the project's name travels with the task, cleaned once when the rules were read
                assert_eq!(t.project_name.as_deref(), Some("Acme shop"));
                assert_eq!((t.min_period_s > 0), t.channel == ChannelKind::Email);
                assert_eq!(t.fired_at_ms, 1_000);
            }
        }
    }

    #[test]
    fn a_project_without_a_name_gives_tasks_without_one() {
        let rules = project(vec![rule("a0000000000000000000000a", json!({}))], None);
        let events = vec![event(P1, "x", "g", true, None)];
        let plan = plan(&events, |_| Some(&rules));
        let outcomes = [Outcome::Fired {
            count: 1,
            firing: "new".into(),
            at_ms: 5,
            signal: None,
        }];
        let routed = route(&firings(&plan.matches, &outcomes), |_| &[]);
        assert_eq!(routed.now.len(), 1);
        assert_eq!(routed.now[0].project_name, None);
    }

    /// A quiet window holds the tasks of its rule's channels (digest ones too) until it ends, except on the
    /// bypassing channels; outside the window nothing is held.
    #[test]
    fn quiet_hours_hold_all_but_the_bypassed_channels() {
        let rules = project(
            vec![rule(
                "a0000000000000000000000a",
                json!({"channels": {
                    "webhook": {"isEnabled": true, "endpoint": "https://hooks.test/w", "minPeriod": 0},
                    "email": {"isEnabled": true, "endpoint": "a@b.test", "minPeriod": 60},
                    "pagerduty": {"isEnabled": true, "endpoint": "0123456789abcdef0123456789abcdef", "minPeriod": 0}},
                    // 2023-11-14 (a Tuesday) 22:00-23:00 UTC
                    "quietHours": [{"days": ["tue"], "from": "22:00", "to": "23:00", "timezone": "UTC"}],
                    "quietHoursBypass": ["pagerduty"]}),
            )],
            None,
        );
        let events = vec![event(P1, "x", "g", true, None)];
        let plan = plan(&events, |_| Some(&rules));
        let end = 1_700_002_800_000; // 2023-11-14T23:00:00Z
        let channels =
            |tasks: &[NotificationTask]| -> Vec<ChannelKind> { tasks.iter().map(|t| t.channel).collect() };
        // (firing time, sent now, digest, held until)
        let cases = [
            (end - 60_000, vec![ChannelKind::Pagerduty], vec![], vec![end, end]),
            (
                end,
                vec![ChannelKind::Webhook, ChannelKind::Pagerduty],
                vec![ChannelKind::Email],
                vec![],
            ),
            (
                end - 3_600_000 - 1,
                vec![ChannelKind::Webhook, ChannelKind::Pagerduty],
                vec![ChannelKind::Email],
                vec![],
            ),
        ];
        for (at_ms, now, digest, held) in cases {
            let outcomes = [Outcome::Fired {
                count: 1,
                firing: "new".into(),
                at_ms,
                signal: None,
            }];
            let routed = route(&firings(&plan.matches, &outcomes), |_| &[]);
            let mut got_now = channels(&routed.now);
            got_now.sort();
            let mut want_now = now.clone();
            want_now.sort();
            assert_eq!(got_now, want_now, "at {at_ms}");
            assert_eq!(channels(&routed.digest), digest, "at {at_ms}");
            let until: Vec<i64> = routed.held.iter().map(|h| h.until_ms).collect();
            assert_eq!(until, held, "at {at_ms}");
            assert!(routed
                .held
                .iter()
                .all(|h| h.task.channel != ChannelKind::Pagerduty));
            assert_eq!(
                routed.crossed.len(),
                1,
                "a held firing is crossed: its alert opens"
            );
        }
    }
}
