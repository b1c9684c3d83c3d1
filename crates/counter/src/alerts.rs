//! Alerts in Redis: the state of every (rule, group)'s alert, opened by a firing, acknowledged, resolved
//! (`klaxon_core::alert`). One slot per project (`<ns>:al:{<project>}:…`), so every step is one atomic script:
//!
//! | key | what |
//! |---|---|
//! | `<ns>:al:{<project>}:idx` | zset alert id → when it opened: the project's alerts, at most [`Alerts::limit`] |
//! | `<ns>:al:{<project>}:open` | zset alert id → when its keys expire: the open alerts (firing or acknowledged) |
//! | `<ns>:al:{<project>}:hand` | zset: the open alerts that resolve only by hand (`resolveAfter: 0`), same scores |
//! | `<ns>:al:{<project>}:res` | zset alert id → when its keys expire: the resolved alerts |
//! | `<ns>:al:{<project>}:cur:<rule>:<group>` | the id of the (rule, group)'s open alert |
//! | `<ns>:al:{<project>}:a:<alertId>` | hash: the alert (its fixed part as JSON, then state, events, times, by whom; `m:<member key>` who heard of it after it opened, `c:<firstId>` the shared incidents its resolve closes) |
//! | `<ns>:al:{<project>}:inc:<firstId>` | set of alert ids: the open alerts a shared incident (a digest or release on PagerDuty) listed |
//! | `<ns>:al:full` | zset project → when an alert of it last did not open ([`Opened::Full`]), at most [`MAX_FULL_PROJECTS`] |
//! | `<ns>:al:projects` | set of project ids that opened an alert: the cross-project list ([`Alerts::list_all`]) reads their indexes |
//!
//! * **Once across a fleet.** An alert's id derives from the firing that opened it (`klaxon_core::alert::alert_id`),
//!   and `lua/alert_open.lua` opens it only when its (rule, group) has no open alert: the same firing on another
//!   worker or redelivered finds it ([`Opened::Again`]), another firing while it is open repeats it
//!   ([`Opened::Repeat`]). `lua/alert_change.lua` resolves or acknowledges in one step and answers a replay with
//!   what the first call did, so a redelivered timer or a retried request publishes the same lifecycle messages
//!   again (same notification ids: the senders deliver them once).
//! * **Bounded.** A project keeps at most [`Alerts::limit`] alerts, open and resolved: a resolved alert's slot
//!   is reusable at once (when the project is full, the resolved alert that expires first is forgotten, hash and
//!   all, in O(log n)), and when all are open no new one opens (the firing is still delivered:
//!   [`Opened::Full`]). Alerts that resolve only by hand (`resolveAfter: 0`: ONLY_NEW and REAPPEARED by default)
//!   hold at most [`Alerts::by_hand_limit`] (half) of the slots, so they cannot take every slot from the alerts
//!   that page. Titles are cut to [`MAX_ALERT_TITLE_BYTES`] when stored and when read; a group longer than
//!   `klaxon_core::alert::MAX_GROUP_KEY_BYTES` is held as its digest (`bounded_group`) in the `cur:` key and
//!   the stored alert, as the counting keys hold it. A resolved alert lives
//!   [`RESOLVED_RETENTION_MS`], an open one [`OPEN_RETENTION_MS`] past its last event (and its `resolveAfter`),
//!   so every key expires. [`Alerts::usage`] says how full a project is, [`Alerts::full_projects`] which
//!   projects lately could not open an alert (`klaxon doctor`, the console).
//! * **The audience.** [`Alerts::hear`] records who heard of an open alert after it opened (an escalation step's
//!   new endpoint, a digest or a quiet-hours release that listed it; `klaxon_core::alert::Alert::audience`), at
//!   most [`MAX_HEARD_MEMBERS`] per alert; a shared member also joins its incident's set. A resolve takes the alert
//!   out of those sets; the one that empties a set records that its resolve closes the incident
//!   (`Alert::closes`), and a replay answers the same. A set lives as long as the alert that joined it last did
//!   then: an incident whose set expired closes with the next listed alert's resolve.
//! * **Across projects.** Opening an alert adds its project to `<ns>:al:projects` (its own key, beside the
//!   project's slot: a second command after the script, skipped for a project this process registered within
//!   [`REGISTERED_TRUST`]); [`Alerts::list_all`] reads the index of each member and
//!   forgets a member whose index has expired (then looks again, so an alert that opened meanwhile keeps it).
//!   Alerts opened before the registry existed are registered once per namespace by a bounded backfill at a
//!   worker's start ([`crate::alert_projects`]).
//! * **Counting.** [`Alerts::touch`] counts a batch's matching events into the open alerts of their (rule,
//!   group)s (one call per project): `events` and the last event's time, which `resolveAfter` runs from.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use klaxon_core::alert::{
    bounded_group, Alert, AlertChannel, AlertState, DEFAULT_MAX_ALERTS_PER_PROJECT, MAX_ALERT_TITLE_BYTES,
    MAX_HEARD_MEMBERS, OPEN_RETENTION_MS, RESOLVED_RETENTION_MS,
};
use redis::cluster_routing::Slot;
use redis::{Script, Value};
use serde::{Deserialize, Serialize};

use crate::pipeline::{self, ScriptCall};
use crate::script_io::{bad, int, now_arg, text};
use crate::{CounterError, RedisHandle};

static OPEN: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/alert_open.lua")));
static TOUCH: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/alert_touch.lua")));
const TOUCH_SCRIPT: &str = "alert_touch.lua";
static CHANGE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/alert_change.lua")));
static READ: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/alerts_read.lua")));
static HEAR: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/alert_hear.lua")));

/// The most projects [`Alerts::list_all`] reads.
pub const MAX_LISTED_PROJECTS: usize = 10_000;

/// How long this process trusts its own `SADD` of a project to `<ns>:al:projects` ([`Alerts::open`]): within
/// it, the project's next opens send no `SADD`. Safe because the alert that registration came with keeps the
/// project's index alive for days (a resolved alert lives [`RESOLVED_RETENTION_MS`]), and the registry forgets
/// only a project whose index is gone ([`Alerts::list_all`]). What it leaves: after a Redis failover that lost
/// the `SADD` (asynchronous replication), the project is missing from the cross-project list until its next open
/// after this long, or the backfill at a worker's start.
pub const REGISTERED_TRUST: Duration = Duration::from_secs(60);

/// The most projects a process remembers as registered ([`REGISTERED_TRUST`]); past it the memory starts over
/// (the next opens register again).
const MAX_REGISTERED_REMEMBERED: usize = 10_000;

/// The alerts of every project of a namespace. Cheap to clone (clones share what they registered).
#[derive(Debug, Clone)]
pub struct Alerts {
    redis: RedisHandle,
    namespace: String,
    limit: usize,
    /// project → when this process last registered it in `<ns>:al:projects` ([`REGISTERED_TRUST`]).
    registered: Arc<Mutex<HashMap<String, Instant>>>,
}

/// What [`Alerts::open`] did with one firing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// A new alert opened.
    New(Alert),
    /// This firing's alert existed already (a redelivered event, another worker): publish as if new, the senders
    /// drop what was sent.
    Again(Alert),
    /// Another firing's alert of the (rule, group) is open: this firing repeats it.
    Repeat(Alert),
    /// Not opened (the firing is delivered without one): the project keeps [`Alerts::limit`] alerts, all
    /// open, or this alert resolves only by hand and [`Alerts::by_hand_limit`] such alerts are open.
    Full(NotOpened),
}

/// Why [`Opened::Full`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotOpened {
    /// The project keeps [`Alerts::limit`] alerts, all open.
    ProjectFull,
    /// The alert resolves only by hand (`resolveAfter: 0`) and [`Alerts::by_hand_limit`] such alerts are open.
    ByHandShare,
}

impl NotOpened {
    /// The metric label: `project_full`, `by_hand_share`.
    pub fn as_str(self) -> &'static str {
        match self {
            NotOpened::ProjectFull => "project_full",
            NotOpened::ByHandShare => "by_hand_share",
        }
    }

    /// Every reason, for zeroed metrics.
    pub const ALL: [NotOpened; 2] = [NotOpened::ProjectFull, NotOpened::ByHandShare];
}

/// How full a project's alert slots are ([`Alerts::usage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Alerts kept, open and resolved (at most `limit`).
    pub kept: u64,
    /// Open alerts (firing or acknowledged).
    pub open: u64,
    /// Open alerts that resolve only by hand (at most `by_hand_limit`).
    pub by_hand: u64,
    /// The most alerts the project keeps.
    pub limit: u64,
    /// The most open alerts that resolve only by hand.
    pub by_hand_limit: u64,
}

impl Usage {
    /// Why the next alert would not open, if it would not: every slot open, or (for an alert resolved by hand
    /// only) the by-hand share taken.
    pub fn full(&self, by_hand: bool) -> Option<NotOpened> {
        if self.open >= self.limit {
            Some(NotOpened::ProjectFull)
        } else if by_hand && self.by_hand >= self.by_hand_limit {
            Some(NotOpened::ByHandShare)
        } else {
            None
        }
    }
}

/// How many projects [`Alerts::full_projects`] remembers (the most recent).
pub const MAX_FULL_PROJECTS: usize = 1_000;

impl Opened {
    /// The alert the firing belongs to, if any.
    pub fn alert(&self) -> Option<&Alert> {
        match self {
            Opened::New(a) | Opened::Again(a) | Opened::Repeat(a) => Some(a),
            Opened::Full(_) => None,
        }
    }
}

/// Events of one batch matching one (rule, group), counted into its open alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Touch<'a> {
    /// The project.
    pub project_id: &'a str,
    /// The rule.
    pub rule_id: &'a str,
    /// The group.
    pub group: &'a str,
    /// How many events.
    pub events: u64,
    /// The last of them, unix ms.
    pub at_ms: i64,
}

/// One member that heard of an alert after it opened, to record with it ([`Alerts::hear`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heard<'a> {
    /// The project.
    pub project_id: &'a str,
    /// The alert.
    pub alert_id: &'a str,
    /// Who heard of it: a (channel, endpoint) with the id of its first message about the alert (`first_id`), or
    /// a shared incident (`shared`, `first_id` the id of the message that listed the alerts).
    pub member: &'a AlertChannel,
}

/// What [`Alerts::hear`] did with one [`Heard`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hearing {
    /// Recorded now.
    Added,
    /// Recorded already (a replay, or another message to the same member): kept as it was.
    Known,
    /// Not recorded: the alert has heard of [`MAX_HEARD_MEMBERS`] members already. Its acknowledge and resolve
    /// will not reach this one; the caller counts it.
    Full,
    /// Not recorded: the alert is resolved or gone.
    Gone,
}

/// What a resolve or an acknowledgement did ([`Alerts::resolve_due`], [`Alerts::resolve`],
/// [`Alerts::acknowledge`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Done now: the alert as it is after.
    Done(Alert),
    /// It was resolved already (by this step before, or by another).
    AlreadyResolved(Alert),
    /// It was acknowledged already (acknowledge only).
    AlreadyAcknowledged(Alert),
    /// Not due yet (the timer only): an event came since; due at `at_ms`.
    NotDue {
        /// When `resolveAfter` runs out now, unix ms.
        at_ms: i64,
    },
    /// It never resolves by itself (`resolveAfter: 0`; the timer only).
    Never(Alert),
    /// No such alert (never was, or expired).
    NotFound,
}

/// The fixed part of an alert, stored as JSON in its hash (`fixed`): what never changes after it opened.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Fixed {
    id: String,
    project_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    project_name: Option<String>,
    rule_id: String,
    group: String,
    title: String,
    channels: Vec<AlertChannel>,
}

/// [`Fixed`] as written by an open: borrowed from the alert, so opening one copies nothing before the JSON.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FixedRef<'a> {
    id: &'a str,
    project_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    project_name: Option<&'a str>,
    rule_id: &'a str,
    group: &'a str,
    title: &'a str,
    channels: &'a [AlertChannel],
}

impl Alerts {
    /// Alerts under `<namespace>:al:`, at most [`DEFAULT_MAX_ALERTS_PER_PROJECT`] per project.
    pub fn new(redis: RedisHandle, namespace: &str) -> Self {
        Alerts {
            redis,
            namespace: namespace.to_owned(),
            limit: DEFAULT_MAX_ALERTS_PER_PROJECT,
            registered: Arc::default(),
        }
    }

    /// At most `limit` (≥ 1) alerts per project.
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = limit.max(1);
        self
    }

    /// The most alerts a project keeps.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The most open alerts of a project that resolve only by hand (`resolveAfter: 0`): half of
    /// [`Alerts::limit`] (at least 1), so the alerts that page always have the other half.
    pub fn by_hand_limit(&self) -> usize {
        (self.limit / 2).max(1)
    }

    /// Whether this process registered `project` (lowercase) in `<ns>:al:projects` within [`REGISTERED_TRUST`]
    /// of `now`.
    fn registered_lately(&self, project: &str, now: Instant) -> bool {
        let seen = self.registered.lock().unwrap_or_else(|e| e.into_inner());
        seen.get(project)
            .is_some_and(|at| now.saturating_duration_since(*at) < REGISTERED_TRUST)
    }

    /// Remembers that `projects` were registered (their `SADD` answered), as of `at`: when it was asked, so the
    /// trust never outlasts the registration.
    fn remember_registered(&self, projects: &[String], at: Instant) {
        let mut seen = self.registered.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() + projects.len() > MAX_REGISTERED_REMEMBERED {
            seen.clear();
        }
        for p in projects {
            seen.insert(p.clone(), at);
        }
    }

    /// `<ns>:al:full`: projects that could not open an alert lately.
    fn full_key(&self) -> String {
        format!("{}:al:full", self.namespace)
    }

    /// `<ns>:al:{<project>}:`: every key of the project's alerts starts so (one cluster slot).
    fn prefix(&self, project_id: &str) -> String {
        let mut p = String::with_capacity(self.namespace.len() + project_id.len() + 7);
        p.push_str(&self.namespace);
        p.push_str(":al:{");
        p.extend(project_id.chars().map(|c| c.to_ascii_lowercase()));
        p.push_str("}:");
        p
    }

    fn alert_key(&self, project_id: &str, alert_id: &str) -> String {
        format!("{}a:{alert_id}", self.prefix(project_id))
    }

    /// `<rule>:<group>` of the (rule, group)'s `cur:` key, the group bounded
    /// (`klaxon_core::alert::bounded_group`): the event's group and the alert's stored one name the same key.
    fn cur_suffix(rule_id: &str, group: &str) -> String {
        key_in(rule_id, &[":", &bounded_group(group)])
    }

    /// The (rule, group)'s `cur:` key under the project's `prefix` ([`Alerts::prefix`]).
    fn cur_key(prefix: &str, rule_id: &str, group: &str) -> String {
        key_in(prefix, &["cur:", &Self::cur_suffix(rule_id, group)])
    }

    /// Opens the alerts of `opens` (each as it would open: state firing, its firing token, channels, …), all at
    /// once. One answer per open, in order. `now_ms`: the clock (`None`: Redis `TIME`). An alert that opens now
    /// starts with its `events` (the events of its firing); later ones are counted into it by [`Alerts::touch`].
    pub async fn open(&self, opens: &[Alert], now_ms: Option<i64>) -> Result<Vec<Opened>, CounterError> {
        const SCRIPT: &str = "alert_open.lua";
        // One script call per alert, all in one pipeline (per slot in a cluster): one request for the batch's
        // opens, whatever their number.
        let cluster = self.redis.is_cluster();
        let calls: Vec<ScriptCall> = opens
            .iter()
            .map(|a| {
                let group = bounded_group(&a.group);
                let title = cut_title_ref(&a.title);
                let fixed = FixedRef {
                    id: &a.id,
                    project_id: &a.project_id,
                    project_name: a.project_name.as_deref(),
                    rule_id: &a.rule_id,
                    group: &group,
                    title: &title,
                    channels: &a.channels,
                };
                let fixed = serde_json::to_string(&fixed).map_err(|e| bad(SCRIPT, e.to_string()))?;
                let prefix = self.prefix(&a.project_id);
                let bytes = 7 * prefix.len()
                    + fixed.len()
                    + a.rule_id.len()
                    + a.group.len().min(64)
                    + 2 * a.id.len()
                    + a.firing.len()
                    + 160;
                let mut cmd = pipeline::evalsha(&OPEN, 20, bytes);
                cmd.arg(6)
                    .arg(key_in(&prefix, &["idx"]))
                    .arg(Self::cur_key(&prefix, &a.rule_id, &group))
                    .arg(key_in(&prefix, &["a:", &a.id]))
                    .arg(key_in(&prefix, &["open"]))
                    .arg(key_in(&prefix, &["hand"]))
                    .arg(key_in(&prefix, &["res"]))
                    .arg(now_arg(now_ms))
                    .arg(&prefix)
                    .arg(&a.id)
                    .arg(&a.firing)
                    .arg(fixed)
                    .arg(self.limit)
                    .arg(a.fired_at_ms)
                    .arg(a.resolve_after_ms)
                    .arg(OPEN_RETENTION_MS)
                    .arg(self.by_hand_limit())
                    .arg(a.events);
                Ok(ScriptCall {
                    script: &OPEN,
                    name: SCRIPT,
                    slot: cluster.then(|| Slot::for_key(prefix.as_bytes())),
                    cmd,
                })
            })
            .collect::<Result<_, CounterError>>()?;
        // Registered for the cross-project list beside the opens (one round trip for the batch's firings, concurrent
        // calls on the multiplexed connection): every project that asks to open one, since a project that repeats
        // or is full has alerts too — unless this process registered it within REGISTERED_TRUST. Again for a
        // replay in a new process, so a crash between the two is mended by the redelivery.
        let mut projects: Vec<String> = opens.iter().map(|a| a.project_id.to_ascii_lowercase()).collect();
        projects.sort();
        projects.dedup();
        let asked = Instant::now();
        projects.retain(|p| !self.registered_lately(p, asked));
        let register = async {
            if projects.is_empty() {
                return Ok(());
            }
            let _: i64 = redis::cmd("SADD")
                .arg(self.projects_key())
                .arg(&projects)
                .query_async(&mut self.redis.clone())
                .await?;
            self.remember_registered(&projects, asked);
            Ok::<(), CounterError>(())
        };
        let sent: Vec<&ScriptCall> = calls.iter().collect();
        let (replies, ()) =
            futures_util::future::try_join(pipeline::eval_all(&self.redis, &sent), register).await?;
        let mut answers = Vec::with_capacity(opens.len());
        for (a, reply) in opens.iter().zip(replies) {
            let Value::Array(items) = &reply else {
                return Err(bad(SCRIPT, format!("expected an array, got {reply:?}")));
            };
            let code = items.first().map(|v| int(v, SCRIPT)).transpose()?;
            let alert = || match items.get(2) {
                Some(fields) => decode(&a.project_id, fields, SCRIPT),
                None => Err(bad(SCRIPT, "no alert in the reply")),
            };
            answers.push(match code {
                Some(0) => Opened::New(opened_now(a)),
                Some(1) => Opened::Again(alert()?),
                Some(2) => Opened::Repeat(alert()?),
                Some(3) => {
                    let why = match items.get(2).map(|v| text(v, SCRIPT)).transpose()?.as_deref() {
                        Some("by_hand") => NotOpened::ByHandShare,
                        _ => NotOpened::ProjectFull,
                    };
                    self.mark_full(&a.project_id, now_ms).await?;
                    Opened::Full(why)
                }
                other => return Err(bad(SCRIPT, format!("unknown code {other:?}"))),
            });
        }
        Ok(answers)
    }

    /// The namespace.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The Redis handle.
    pub(crate) fn redis(&self) -> &RedisHandle {
        &self.redis
    }

    /// `<ns>:al:projects`: the projects that opened an alert.
    pub(crate) fn projects_key(&self) -> String {
        format!("{}:al:projects", self.namespace)
    }

    /// The projects with alerts (registered when one opened), sorted, at most [`MAX_LISTED_PROJECTS`].
    pub async fn projects(&self) -> Result<Vec<String>, CounterError> {
        let mut out: Vec<String> = Vec::new();
        let mut cursor: u64 = 0;
        // SSCAN, bounded: a namespace with more projects than that lists the first ones met
        for _ in 0..(MAX_LISTED_PROJECTS / 100 + 1) {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SSCAN")
                .arg(self.projects_key())
                .arg(cursor)
                .arg("COUNT")
                .arg(500)
                .query_async(&mut self.redis.clone())
                .await?;
            out.extend(batch);
            cursor = next;
            if cursor == 0 || out.len() >= MAX_LISTED_PROJECTS {
                break;
            }
        }
        out.sort();
        out.dedup();
        out.truncate(MAX_LISTED_PROJECTS);
        Ok(out)
    }

    /// The alerts of every project (of one state or all), newest first, at most `limit` (and at most
    /// [`Alerts::limit`] per project). A registered project whose index has expired is forgotten.
    pub async fn list_all(
        &self,
        state: Option<AlertState>,
        limit: usize,
    ) -> Result<Vec<Alert>, CounterError> {
        use futures_util::{StreamExt, TryStreamExt};
        let projects = self.projects().await?;
        let lists: Vec<(String, Vec<Alert>)> = futures_util::stream::iter(projects)
            .map(|p| {
                // owned values in each future: the stream stays `Send` for any caller
                let alerts = self.clone();
                async move {
                    let list = alerts.list(&p, state, limit).await?;
                    Ok::<_, CounterError>((p, list))
                }
            })
            .buffer_unordered(16)
            .try_collect()
            .await?;
        let mut out: Vec<Alert> = Vec::new();
        for (project, list) in lists {
            if list.is_empty() {
                self.forget_if_gone(&project).await?;
            }
            out.extend(list);
        }
        out.sort_by(|a, b| {
            b.fired_at_ms
                .cmp(&a.fired_at_ms)
                .then_with(|| a.project_id.cmp(&b.project_id))
                .then_with(|| a.id.cmp(&b.id))
        });
        out.truncate(limit);
        Ok(out)
    }

    /// Takes `project` out of the registry when its index is gone; puts it back when an alert opened meanwhile
    /// (the open's script runs before its `SADD`, so one of the two checks sees it).
    async fn forget_if_gone(&self, project: &str) -> Result<(), CounterError> {
        let idx = format!("{}idx", self.prefix(project));
        let exists = |key: String| async move {
            redis::cmd("EXISTS")
                .arg(key)
                .query_async::<i64>(&mut self.redis.clone())
                .await
        };
        if exists(idx.clone()).await? == 1 {
            return Ok(());
        }
        let _: i64 = redis::cmd("SREM")
            .arg(self.projects_key())
            .arg(project)
            .query_async(&mut self.redis.clone())
            .await?;
        // this process's next open of it registers it again
        self.registered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(project);
        if exists(idx).await? == 1 {
            let _: i64 = redis::cmd("SADD")
                .arg(self.projects_key())
                .arg(project)
                .query_async(&mut self.redis.clone())
                .await?;
        }
        Ok(())
    }

    /// Remembers that `project_id` could not open an alert now ([`Alerts::full_projects`]), keeping the
    /// [`MAX_FULL_PROJECTS`] most recent.
    async fn mark_full(&self, project_id: &str, now_ms: Option<i64>) -> Result<(), CounterError> {
        let at = now_ms.unwrap_or_else(wall_ms);
        let key = self.full_key();
        let mut pipe = redis::pipe();
        pipe.cmd("ZADD")
            .arg(&key)
            .arg(at)
            .arg(project_id.to_ascii_lowercase())
            .ignore()
            .cmd("ZREMRANGEBYRANK")
            .arg(&key)
            .arg(0)
            .arg(-(MAX_FULL_PROJECTS as i64) - 1)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&key)
            .arg(OPEN_RETENTION_MS)
            .ignore();
        let () = pipe.query_async(&mut self.redis.clone()).await?;
        Ok(())
    }

    /// The projects that could not open an alert since `since_ms` (unix ms), most recent first, at most
    /// `limit`: (project, when it last happened).
    pub async fn full_projects(
        &self,
        since_ms: i64,
        limit: usize,
    ) -> Result<Vec<(String, i64)>, CounterError> {
        let flat: Vec<(String, f64)> = redis::cmd("ZREVRANGEBYSCORE")
            .arg(self.full_key())
            .arg("+inf")
            .arg(since_ms)
            .arg("WITHSCORES")
            .arg("LIMIT")
            .arg(0)
            .arg(limit.max(1))
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(flat.into_iter().map(|(p, at)| (p, at as i64)).collect())
    }

    /// How full a project's alert slots are now (entries whose keys expired may count until the next open
    /// forgets them).
    pub async fn usage(&self, project_id: &str) -> Result<Usage, CounterError> {
        let prefix = self.prefix(project_id);
        let mut pipe = redis::pipe();
        for z in ["idx", "open", "hand"] {
            pipe.cmd("ZCARD").arg(format!("{prefix}{z}"));
        }
        let (kept, open, by_hand): (u64, u64, u64) = pipe.query_async(&mut self.redis.clone()).await?;
        Ok(Usage {
            kept,
            open,
            by_hand,
            limit: self.limit as u64,
            by_hand_limit: self.by_hand_limit() as u64,
        })
    }

    /// Counts `touches` into open alerts: one script call per project, coalesced by (rule, group); a (rule,
    /// group) without an open alert is left alone. Returns how many open alerts were touched.
    pub async fn touch(&self, touches: &[Touch<'_>]) -> Result<u64, CounterError> {
        let calls = self.touch_calls(touches);
        let sent: Vec<&ScriptCall> = calls.iter().collect();
        let replies = pipeline::eval_all(&self.redis, &sent).await?;
        touched(&replies)
    }

    /// The script calls of [`Alerts::touch`] (one per project, its keys share one slot), to send in a pipeline;
    /// their replies add up with [`touched`].
    pub(crate) fn touch_calls(&self, touches: &[Touch<'_>]) -> Vec<ScriptCall> {
        // project → (rule, group) → (events, last at)
        type Groups<'t> = BTreeMap<(&'t str, &'t str), (u64, i64)>;
        let mut by_project: BTreeMap<&str, Groups<'_>> = BTreeMap::new();
        for t in touches {
            let e = by_project
                .entry(t.project_id)
                .or_default()
                .entry((t.rule_id, t.group))
                .or_insert((0, i64::MIN));
            e.0 += t.events;
            e.1 = e.1.max(t.at_ms);
        }
        // One script call per project (its keys share one slot), all in one pipeline: one request to Redis per
        // batch (per slot in a cluster), not one per project.
        let cluster = self.redis.is_cluster();
        by_project
            .into_iter()
            .map(|(project, keys)| {
                let prefix = self.prefix(project);
                let key_bytes: usize = keys
                    .keys()
                    .map(|(rule, group)| prefix.len() + 6 + rule.len() + group.len())
                    .sum();
                let mut cmd = pipeline::evalsha(
                    &TOUCH,
                    4 + 3 * keys.len(),
                    key_bytes + prefix.len() + 48 * keys.len(),
                );
                cmd.arg(keys.len());
                for (rule, group) in keys.keys() {
                    cmd.arg(Self::cur_key(&prefix, rule, group));
                }
                cmd.arg("").arg(&prefix).arg(OPEN_RETENTION_MS);
                for (n, at) in keys.values() {
                    cmd.arg(n).arg(at);
                }
                ScriptCall {
                    script: &TOUCH,
                    name: TOUCH_SCRIPT,
                    slot: cluster.then(|| Slot::for_key(prefix.as_bytes())),
                    cmd,
                }
            })
            .collect()
    }

    /// Records who heard of alerts after they opened (`klaxon_core::alert::Alert::heard`), idempotently: one
    /// script call per project, all at once (one round trip on the multiplexed connection). A member is one per
    /// (channel, endpoint), or per incident when shared (`AlertChannel::member_key`); the first record wins. An
    /// alert that is resolved or gone records nothing, and none records more than [`MAX_HEARD_MEMBERS`]. A shared
    /// member without its incident's id (`first_id`) is refused before Redis. One answer per record, in order.
    pub async fn hear(&self, records: &[Heard<'_>]) -> Result<Vec<Hearing>, CounterError> {
        const SCRIPT: &str = "alert_hear.lua";
        let mut by_project: BTreeMap<&str, Vec<(usize, &Heard<'_>)>> = BTreeMap::new();
        for (i, h) in records.iter().enumerate() {
            let m = h.member;
            let first = m.first_id.as_deref().unwrap_or_default();
            if m.shared
                && (first.is_empty() || !first.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
            {
                return Err(bad(
                    SCRIPT,
                    format!(
                        "a shared member needs its incident's id (first_id), got {:?}",
                        m.first_id
                    ),
                ));
            }
            by_project.entry(h.project_id).or_default().push((i, h));
        }
        let calls = by_project.into_iter().map(|(project, heard)| async move {
            let prefix = self.prefix(project);
            let mut call = HEAR.prepare_invoke();
            call.arg(&prefix).arg(MAX_HEARD_MEMBERS);
            for (_, h) in &heard {
                let json = serde_json::to_string(h.member).map_err(|e| bad(SCRIPT, e.to_string()))?;
                let shared = if h.member.shared {
                    h.member.first_id.as_deref().unwrap_or_default()
                } else {
                    ""
                };
                call.key(self.alert_key(project, h.alert_id))
                    .arg(h.member.member_key())
                    .arg(json)
                    .arg(shared);
            }
            let reply: Value = call.invoke_async(&mut self.redis.clone()).await?;
            let Value::Array(codes) = &reply else {
                return Err(bad(SCRIPT, format!("expected an array, got {reply:?}")));
            };
            if codes.len() != heard.len() {
                return Err(bad(
                    SCRIPT,
                    format!("{} answers to {} records", codes.len(), heard.len()),
                ));
            }
            heard
                .iter()
                .zip(codes)
                .map(|((i, _), code)| {
                    let hearing = match int(code, SCRIPT)? {
                        0 => Hearing::Added,
                        1 => Hearing::Known,
                        2 => Hearing::Full,
                        3 => Hearing::Gone,
                        other => return Err(bad(SCRIPT, format!("unknown code {other}"))),
                    };
                    Ok((*i, hearing))
                })
                .collect::<Result<Vec<_>, CounterError>>()
        });
        let answers = futures_util::future::try_join_all(calls).await?;
        let mut out = vec![Hearing::Gone; records.len()];
        for (i, hearing) in answers.into_iter().flatten() {
            out[i] = hearing;
        }
        Ok(out)
    }

    /// The `resolveAfter` timer of an alert: resolves it when its last matching event is `resolveAfter` ago,
    /// by `timeout`.
    pub async fn resolve_due(
        &self,
        project_id: &str,
        alert_id: &str,
        now_ms: Option<i64>,
    ) -> Result<Change, CounterError> {
        self.change(project_id, alert_id, "due", "timeout", now_ms).await
    }

    /// Resolves an alert now, by `by` (a person's or a token's name, `event` for NO_EVENTS).
    pub async fn resolve(
        &self,
        project_id: &str,
        alert_id: &str,
        by: &str,
        now_ms: Option<i64>,
    ) -> Result<Change, CounterError> {
        self.change(project_id, alert_id, "resolve", by, now_ms).await
    }

    /// Acknowledges an open alert, by `by`.
    pub async fn acknowledge(
        &self,
        project_id: &str,
        alert_id: &str,
        by: &str,
        now_ms: Option<i64>,
    ) -> Result<Change, CounterError> {
        self.change(project_id, alert_id, "ack", by, now_ms).await
    }

    async fn change(
        &self,
        project_id: &str,
        alert_id: &str,
        what: &str,
        by: &str,
        now_ms: Option<i64>,
    ) -> Result<Change, CounterError> {
        const SCRIPT: &str = "alert_change.lua";
        // The (rule, group) of the alert names its `cur:` key; read first (the script checks the id it holds).
        let Some(current) = self.get(project_id, alert_id).await? else {
            return Ok(Change::NotFound);
        };
        let reply: Value = CHANGE
            .key(self.alert_key(project_id, alert_id))
            .arg(now_arg(now_ms))
            .arg(self.prefix(project_id))
            .arg(what)
            .arg(by)
            .arg(RESOLVED_RETENTION_MS)
            .arg(Self::cur_suffix(&current.rule_id, &current.group))
            .invoke_async(&mut self.redis.clone())
            .await?;
        let Value::Array(items) = &reply else {
            return Err(bad(SCRIPT, format!("expected an array, got {reply:?}")));
        };
        let code = items.first().map(|v| int(v, SCRIPT)).transpose()?;
        let alert = || match items.get(1) {
            Some(fields) => decode(project_id, fields, SCRIPT),
            None => Err(bad(SCRIPT, "no alert in the reply")),
        };
        Ok(match code {
            Some(0) => Change::NotFound,
            Some(1) => Change::Done(alert()?),
            Some(2) => Change::AlreadyResolved(alert()?),
            Some(3) => Change::NotDue {
                at_ms: items.get(1).map(|v| int(v, SCRIPT)).transpose()?.unwrap_or(0),
            },
            Some(4) => Change::Never(alert()?),
            Some(5) => Change::AlreadyAcknowledged(alert()?),
            other => return Err(bad(SCRIPT, format!("unknown code {other:?}"))),
        })
    }

    /// One alert, if it exists (and has not expired).
    pub async fn get(&self, project_id: &str, alert_id: &str) -> Result<Option<Alert>, CounterError> {
        let fields: Value = redis::cmd("HGETALL")
            .arg(self.alert_key(project_id, alert_id))
            .query_async(&mut self.redis.clone())
            .await?;
        match &fields {
            Value::Array(items) if items.is_empty() => Ok(None),
            Value::Map(items) if items.is_empty() => Ok(None),
            _ => decode(project_id, &fields, "HGETALL").map(Some),
        }
    }

    /// The open alert of a (rule, group), if one is open.
    pub async fn current(
        &self,
        project_id: &str,
        rule_id: &str,
        group: &str,
    ) -> Result<Option<Alert>, CounterError> {
        let key = Self::cur_key(&self.prefix(project_id), rule_id, group);
        let id: Option<String> = redis::cmd("GET")
            .arg(key)
            .query_async(&mut self.redis.clone())
            .await?;
        match id {
            Some(id) => Ok(self.get(project_id, &id).await?.filter(|a| a.state.is_open())),
            None => Ok(None),
        }
    }

    /// A project's alerts, newest first, at most `limit` (and at most [`Alerts::limit`]), of one state or all.
    pub async fn list(
        &self,
        project_id: &str,
        state: Option<AlertState>,
        limit: usize,
    ) -> Result<Vec<Alert>, CounterError> {
        const SCRIPT: &str = "alerts_read.lua";
        let prefix = self.prefix(project_id);
        let reply: Value = READ
            .key(format!("{prefix}idx"))
            .arg(&prefix)
            .arg(limit.clamp(1, self.limit))
            .arg(state.map_or("", AlertState::as_str))
            .invoke_async(&mut self.redis.clone())
            .await?;
        let Value::Array(items) = &reply else {
            return Err(bad(SCRIPT, format!("expected an array, got {reply:?}")));
        };
        items
            .iter()
            .map(|fields| decode(project_id, fields, SCRIPT))
            .collect()
    }
}

/// `head` followed by `parts`, in one allocation of the right size (the keys and suffixes built for every
/// batch's script calls).
fn key_in(head: &str, parts: &[&str]) -> String {
    let mut k = String::with_capacity(head.len() + parts.iter().map(|p| p.len()).sum::<usize>());
    k.push_str(head);
    parts.iter().for_each(|p| k.push_str(p));
    k
}

/// The alert `alert_open.lua` just opened from `a`, as its hash now holds it (the script answers a new alert with
/// its id only: the fields are what was sent, written as they are by its `HSET`), as [`decode`] would read it.
fn opened_now(a: &Alert) -> Alert {
    Alert {
        group: bounded_group(&a.group).into_owned(),
        title: cut_title(&a.title),
        state: AlertState::Firing,
        acknowledged_at_ms: None,
        acknowledged_by: None,
        resolved_at_ms: None,
        resolved_by: None,
        last_event_at_ms: a.fired_at_ms,
        heard: Vec::new(),
        closes: Vec::new(),
        ..a.clone()
    }
}

/// How many open alerts the replies of [`Alerts::touch_calls`] touched.
pub(crate) fn touched(replies: &[Value]) -> Result<u64, CounterError> {
    let mut n = 0;
    for reply in replies {
        n += u64::try_from(int(reply, TOUCH_SCRIPT)?).unwrap_or(0);
    }
    Ok(n)
}

/// An alert from its hash's fields (`HGETALL`: a flat array of field, value, or a RESP3 map).
fn decode(project_id: &str, fields: &Value, script: &'static str) -> Result<Alert, CounterError> {
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    match fields {
        Value::Array(items) => {
            for pair in items.chunks(2) {
                if let [k, v] = pair {
                    map.insert(text(k, script)?, text(v, script)?);
                }
            }
        }
        Value::Map(items) => {
            for (k, v) in items {
                map.insert(text(k, script)?, text(v, script)?);
            }
        }
        other => return Err(bad(script, format!("expected an alert's fields, got {other:?}"))),
    }
    let fixed: Fixed = map
        .get("fixed")
        .and_then(|j| serde_json::from_str(j).ok())
        .ok_or_else(|| {
            bad(
                script,
                format!(
                    "an alert without its fixed part: {:?}",
                    map.keys().collect::<Vec<_>>()
                ),
            )
        })?;
    let num = |k: &str| map.get(k).and_then(|v| v.parse::<f64>().ok()).map(|f| f as i64);
    let state = map
        .get("state")
        .and_then(|s| AlertState::parse(s))
        .ok_or_else(|| bad(script, "an alert without a state"))?;
    Ok(Alert {
        id: fixed.id,
        project_id: if fixed.project_id.is_empty() {
            project_id.to_owned()
        } else {
            fixed.project_id
        },
        project_name: fixed.project_name,
        rule_id: fixed.rule_id,
        // an alert stored by an earlier version may keep a longer group
        group: bounded_group(&fixed.group).into_owned(),
        // an alert stored by an earlier version may keep a longer title
        title: if fixed.title.len() > MAX_ALERT_TITLE_BYTES {
            cut_title(&fixed.title)
        } else {
            fixed.title
        },
        state,
        firing: map.get("firing").cloned().unwrap_or_default(),
        fired_at_ms: num("firedAt").unwrap_or(0),
        acknowledged_at_ms: num("ackAt"),
        acknowledged_by: map.get("ackBy").cloned(),
        resolved_at_ms: num("resAt"),
        resolved_by: map.get("resBy").cloned(),
        events: num("events").map_or(0, |n| u64::try_from(n).unwrap_or(0)),
        last_event_at_ms: num("last").unwrap_or(0),
        resolve_after_ms: num("resolveAfter").map_or(0, |n| u64::try_from(n).unwrap_or(0)),
        channels: fixed.channels,
        heard: map
            .iter()
            .filter(|(k, _)| k.starts_with("m:"))
            .map(|(_, v)| serde_json::from_str(v).map_err(|e| bad(script, format!("a heard member: {e}"))))
            .collect::<Result<_, _>>()?,
        closes: map
            .keys()
            .filter_map(|k| k.strip_prefix("c:"))
            .map(str::to_owned)
            .collect(),
    })
}

/// A title as alerts keep it: cut to [`MAX_ALERT_TITLE_BYTES`] on a character boundary, as digests cut theirs
/// (`klaxon_core::text::one_line`). A shorter title is kept as it is.
fn cut_title(title: &str) -> String {
    cut_title_ref(title).into_owned()
}

/// [`cut_title`] without a copy of a title that is short enough.
fn cut_title_ref(title: &str) -> std::borrow::Cow<'_, str> {
    if title.len() > MAX_ALERT_TITLE_BYTES {
        std::borrow::Cow::Owned(klaxon_core::text::one_line(title, MAX_ALERT_TITLE_BYTES))
    } else {
        std::borrow::Cow::Borrowed(title)
    }
}

/// The wall clock, unix ms.
fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
