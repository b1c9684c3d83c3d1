//! NO_EVENTS in Redis: one small hash per project with NO_EVENTS rules, `<ns>:ne:{<project>}` (the same cluster
//! slot as the project's alerts), holding the project's last event time and, per rule, its one pending timer, the
//! start of its open silence and what its last timer did (`lua/no_events_*.lua` describe the fields).
//!
//! * **Lean.** Only projects with a watched NO_EVENTS rule ever call [`NoEvents::seen`], at most once per batch
//!   (all of a batch's projects at once, on the multiplexed connection beside the batch's counting); a project
//!   without such rules costs nothing.
//! * **One timer per rule, not per event.** `seen` asks for a timer only when none is pending (or the pending one
//!   is now too late, or was lost); the timer, when due, decides atomically ([`NoEvents::due`]): fire once,
//!   reschedule to the last event + `quietPeriod`, or nothing.
//! * **Exactly once across a fleet.** Only the timer the hash names as pending acts, and acting moves it: a
//!   duplicate or a second worker finds it stale. A redelivered timer or batch gets its first answer again, and
//!   everything a firing publishes has ids derived from (project, rule, silence start), so the senders drop a
//!   re-publish.
//! * **Bounded.** The hash lives a little longer than the longest `quietPeriod` after its last write
//!   ([`KEEP_AFTER_MS`]), and while a silence is open as long as its alert ([`OPEN_RETENTION_MS`]).

use std::sync::LazyLock;

use klaxon_core::alert::OPEN_RETENTION_MS;
use redis::{Script, Value};

use crate::script_io::{bad, int, now_arg, stored_number, text};
use crate::{CounterError, RedisHandle};

static SEEN: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/no_events_seen.lua")));
static DUE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/no_events_due.lua")));
static SETTLE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/no_events_settle.lua")));

/// How much longer than its longest `quietPeriod` a project's hash outlives its last write, ms (1 day).
pub const KEEP_AFTER_MS: u64 = 24 * 3_600_000;

/// The NO_EVENTS state of every project of a namespace. Cheap to clone.
#[derive(Debug, Clone)]
pub struct NoEvents {
    redis: RedisHandle,
    namespace: String,
}

/// One watched NO_EVENTS rule of a project: its id and `quietPeriod`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watched<'a> {
    /// The rule.
    pub rule_id: &'a str,
    /// Its `quietPeriod`, ms.
    pub quiet_period_ms: u64,
}

/// Why [`NoEvents::seen`] is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeenBy {
    /// The project sent events (a batch): its last event moves to now, its open silences end.
    Events {
        /// The batch was delivered before: pending timers are asked for again (a lost publish).
        redelivered: bool,
    },
    /// Its NO_EVENTS rules were stored through Klaxon: a rule without any event yet starts its clock now.
    Armed,
}

/// What [`NoEvents::seen`] asks of the caller for one project.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// Schedule the rule's timer, due at (unix ms).
    pub schedule: Vec<(String, i64)>,
    /// The rule's silence that started at (unix ms) fired and is still open: resolve its alert, then
    /// [`NoEvents::settle`].
    pub resolve: Vec<(String, i64)>,
}

/// What a due timer decided ([`NoEvents::due`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Not the pending timer (a duplicate, or handled already): nothing to do.
    Stale,
    /// Events came: the timer again, due at `at_ms`.
    Reschedule {
        /// When the rule fires if no event comes, unix ms.
        at_ms: i64,
    },
    /// The project was silent for `quietPeriod`: fire (also the answer to a redelivered timer that fired).
    Fire {
        /// When the silence started: the last event, or the rule's storing.
        since_ms: i64,
        /// The project's last event, when one was seen.
        last_event_ms: Option<i64>,
        /// Now, unix ms (Redis clock): the firing's time.
        at_ms: i64,
    },
    /// The rule is gone (or no longer watched): its state was forgotten.
    Forgotten,
}

impl NoEvents {
    /// NO_EVENTS state under `<namespace>:ne:`.
    pub fn new(redis: RedisHandle, namespace: &str) -> Self {
        NoEvents {
            redis,
            namespace: namespace.to_owned(),
        }
    }

    /// `<ns>:ne:{<project>}`.
    fn key(&self, project_id: &str) -> String {
        format!("{}:ne:{{{}}}", self.namespace, project_id.to_ascii_lowercase())
    }

    /// Notes that each project of `projects` was seen (or armed) for its watched rules; one answer per project,
    /// in order. All calls at once on the multiplexed connection: one round trip for the batch. `now_ms`: the
    /// clock (`None`: Redis `TIME`).
    pub async fn seen(
        &self,
        projects: &[(&str, Vec<Watched<'_>>)],
        by: SeenBy,
        now_ms: Option<i64>,
    ) -> Result<Vec<Seen>, CounterError> {
        const SCRIPT: &str = "no_events_seen.lua";
        let (mode, replay) = match by {
            SeenBy::Events { redelivered } => ("event", redelivered),
            SeenBy::Armed => ("arm", false),
        };
        let calls = projects.iter().map(|(project, rules)| async move {
            if rules.is_empty() {
                return Ok(Seen::default());
            }
            let longest = rules.iter().map(|r| r.quiet_period_ms).max().unwrap_or(0);
            let mut call = SEEN.prepare_invoke();
            call.key(self.key(project))
                .arg(now_arg(now_ms))
                .arg(mode)
                .arg(if replay { "1" } else { "0" })
                .arg(longest.saturating_add(KEEP_AFTER_MS));
            for r in rules {
                call.arg(r.rule_id).arg(r.quiet_period_ms);
            }
            let reply: Value = call.invoke_async(&mut self.redis.clone()).await?;
            let Value::Array(items) = &reply else {
                return Err(bad(SCRIPT, format!("expected an array, got {reply:?}")));
            };
            let mut seen = Seen::default();
            for triple in items.chunks(3) {
                let [code, rule, ms] = triple else {
                    return Err(bad(SCRIPT, "a reply that is not triples"));
                };
                let entry = (text(rule, SCRIPT)?, int(ms, SCRIPT)?);
                match int(code, SCRIPT)? {
                    1 => seen.schedule.push(entry),
                    2 => seen.resolve.push(entry),
                    other => return Err(bad(SCRIPT, format!("unknown code {other}"))),
                }
            }
            Ok::<_, CounterError>(seen)
        });
        futures_util::future::try_join_all(calls).await
    }

    /// One rule's timer came due (scheduled for `due_ms`): what to do. `quiet_period_ms` is the rule's now,
    /// `None` when it is gone, disabled, without channels or no longer NO_EVENTS (its state is forgotten).
    pub async fn due(
        &self,
        project_id: &str,
        rule_id: &str,
        due_ms: i64,
        quiet_period_ms: Option<u64>,
        redelivered: bool,
        now_ms: Option<i64>,
    ) -> Result<Due, CounterError> {
        const SCRIPT: &str = "no_events_due.lua";
        let quiet = quiet_period_ms.unwrap_or(0);
        let reply: Value = DUE
            .key(self.key(project_id))
            .arg(now_arg(now_ms))
            .arg(rule_id)
            .arg(due_ms)
            .arg(quiet)
            .arg(if redelivered { "1" } else { "0" })
            .arg(quiet.saturating_add(KEEP_AFTER_MS))
            .arg(quiet.saturating_add(OPEN_RETENTION_MS as u64))
            .invoke_async(&mut self.redis.clone())
            .await?;
        let Value::Array(items) = &reply else {
            return Err(bad(SCRIPT, format!("expected an array, got {reply:?}")));
        };
        let n = |i: usize| match items.get(i) {
            Some(v) => int(v, SCRIPT),
            None => Err(bad(SCRIPT, format!("no item {i}"))),
        };
        Ok(match n(0)? {
            0 => Due::Stale,
            1 => Due::Reschedule { at_ms: n(1)? },
            2 => Due::Fire {
                since_ms: n(1)?,
                last_event_ms: Some(n(2)?).filter(|&l| l >= 0),
                at_ms: n(3)?,
            },
            3 => Due::Forgotten,
            other => return Err(bad(SCRIPT, format!("unknown code {other}"))),
        })
    }

    /// Forgets the rule's open silence that started at `since_ms`, once its alert was resolved and the resolved
    /// messages published (a later silence stays). True when forgotten now.
    pub async fn settle(&self, project_id: &str, rule_id: &str, since_ms: i64) -> Result<bool, CounterError> {
        let reply: Value = SETTLE
            .key(self.key(project_id))
            .arg(rule_id)
            .arg(since_ms)
            .invoke_async(&mut self.redis.clone())
            .await?;
        Ok(int(&reply, "no_events_settle.lua")? == 1)
    }

    /// The project's last event as NO_EVENTS saw it, unix ms (only projects with a watched rule are noted; the
    /// note lives [`KEEP_AFTER_MS`] past the longest `quietPeriod`).
    pub async fn last_event(&self, project_id: &str) -> Result<Option<i64>, CounterError> {
        let v: Value = redis::cmd("HGET")
            .arg(self.key(project_id))
            .arg("last")
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(stored_number(&v))
    }
}
