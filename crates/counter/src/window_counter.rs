//! [`WindowCounter`]: the typed front of the counting Lua scripts, batched and cluster-aware.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::cluster_routing::Slot;
use redis::{Cmd, Script, Value};
use sha2::{Digest, Sha256};

use klaxon_core::{Baseline, Signal, Want, Window};

use crate::pipeline::{self, ScriptCall};
use crate::script_io::{self, ms, now_arg};
use crate::{Alerts, CounterError, Hit, Outcome, RedisHandle, Touch};

static FIXED_WINDOW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/fixed_window.lua")));
static SLIDING_WINDOW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/sliding_window.lua")));
static FIRST_SEEN: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/first_seen.lua")));
static UNIQUE_USERS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/unique_users.lua")));
static SPIKE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/spike.lua")));
static REAPPEARED: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/reappeared.lua")));

/// The longest margin a REAPPEARED mark outlives its rule's `quietPeriod` by: one day (see [`reappeared_ttl_ms`]).
const REAPPEARED_MARGIN_MS: u64 = 24 * 3600 * 1000;

/// How long a REAPPEARED mark lives after the group's last event: `quietPeriod + min(quietPeriod, 1 day)`. It must
/// outlive the quiet, so that a group seen again after exactly `quietPeriod` still has its mark; the margin lets
/// the message say how long the quiet was for quiets up to twice (or a day past) the period. A group quiet for
/// longer has no mark any more and is recognised by Hawk's `isNew: false` instead (`lua/reappeared.lua`).
pub fn reappeared_ttl_ms(quiet_period_ms: u64) -> u64 {
    quiet_period_ms.saturating_add(quiet_period_ms.min(REAPPEARED_MARGIN_MS))
}

/// How long the ONLY_NEW "already fired" mark lives by default: 7 days. It must outlast every redelivery of
/// an `isNew` event (a consumer down over a weekend, messages parked in retry queues). `isNew` is true only
/// for a group's first occurrence, so expiring the mark later costs nothing but memory.
pub const DEFAULT_FIRST_SEEN_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Event ids longer than this are replaced by a 32-hex digest, so that sliding-window members stay within
/// Redis's compact listpack encoding (entries up to 64 bytes).
const MAX_MEMBER_LEN: usize = 48;

/// A fixed window remembers at most this many of its most recent event ids, so that a redelivered batch (at most
/// a prefetch's worth of one key's events) is not counted twice; memory stays bounded per window.
const FIXED_WINDOW_IDS: usize = 1024;

/// At most this many (rule, group) pairs go into one script call, so a call stays short (well under a
/// millisecond of server time for typical batches).
const MAX_KEYS_PER_CALL: usize = 128;

/// Which script a hit runs: a view of the kind's [`Want`] ([`parts`]), the grouping key of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    FirstSeen,
    Fixed,
    Sliding,
    /// `unique_users.lua` in fixed mode.
    UsersFixed,
    /// `unique_users.lua` in sliding mode.
    UsersSliding,
    Spike,
    Reappeared,
}

impl Kind {
    fn script(self) -> &'static Script {
        match self {
            Kind::FirstSeen => &FIRST_SEEN,
            Kind::Fixed => &FIXED_WINDOW,
            Kind::Sliding => &SLIDING_WINDOW,
            Kind::UsersFixed | Kind::UsersSliding => &UNIQUE_USERS,
            Kind::Spike => &SPIKE,
            Kind::Reappeared => &REAPPEARED,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::FirstSeen => "first_seen.lua",
            Kind::Fixed => "fixed_window.lua",
            Kind::Sliding => "sliding_window.lua",
            Kind::UsersFixed | Kind::UsersSliding => "unique_users.lua",
            Kind::Spike => "spike.lua",
            Kind::Reappeared => "reappeared.lua",
        }
    }

    /// True for the unique-users script, whose hits carry a user next to their event id.
    fn counts_users(self) -> bool {
        matches!(self, Kind::UsersFixed | Kind::UsersSliding)
    }

    /// The suffixes of the keys the script takes per (rule, group), in the order of its KEYS.
    fn key_suffixes(self) -> &'static [&'static str] {
        match self {
            Kind::FirstSeen => &["new"],
            Kind::Fixed => &["fx"],
            Kind::Sliding => &["sl", "slc"],
            Kind::UsersFixed => &["uf", "ufm"],
            Kind::UsersSliding => &["us", "usm"],
            Kind::Spike => &["sp", "spi"],
            Kind::Reappeared => &["rp"],
        }
    }
}

/// Splits a want into (script, threshold, period); first-seen has neither.
fn parts(spec: Want) -> (Kind, u64, u64) {
    match spec {
        Want::FirstSeen => (Kind::FirstSeen, 0, 0),
        Want::Count {
            threshold,
            period_ms,
            window: Window::Fixed,
        } => (Kind::Fixed, threshold, period_ms),
        Want::Count {
            threshold,
            period_ms,
            window: Window::Sliding,
        } => (Kind::Sliding, threshold, period_ms),
        Want::UniqueUsers {
            threshold,
            period_ms,
            window: Window::Fixed,
        } => (Kind::UsersFixed, threshold, period_ms),
        Want::UniqueUsers {
            threshold,
            period_ms,
            window: Window::Sliding,
        } => (Kind::UsersSliding, threshold, period_ms),
        Want::Spike(s) => (Kind::Spike, s.threshold, s.period_ms),
        Want::Reappeared { quiet_period_ms, .. } => (Kind::Reappeared, 1, quiet_period_ms),
    }
}

/// The want that hits of one call share: the event's own `isNew` (REAPPEARED's) is per hit ([`Call::news`]),
/// not part of how the key is counted.
fn shared(spec: Want) -> Want {
    match spec {
        Want::Reappeared {
            quiet_period_ms,
            armed_at_ms,
            ..
        } => Want::Reappeared {
            quiet_period_ms,
            armed_at_ms,
            is_new: false,
        },
        other => other,
    }
}

/// One script call: the hits of one key in one batch, coalesced.
struct Call<'h> {
    kind: Kind,
    project_id: &'h str,
    rule_id: &'h str,
    group_hash: &'h str,
    threshold: u64,
    period_ms: u64,
    /// The hits' want (all the same but for `isNew`, [`shared`]): SPIKE and REAPPEARED read their other
    /// parameters from it.
    spec: Want,
    /// Per hit, its event's `isNew` (REAPPEARED calls only, empty for the others).
    news: Vec<bool>,
    /// Per hit, its event id (fixed, first-seen) or sliding-window member.
    members: Vec<Cow<'h, str>>,
    /// Per hit, its user ('' = none); unique-users calls only, empty for the others.
    users: Vec<Cow<'h, str>>,
    /// Per hit, its index in the batch.
    hits: Vec<usize>,
}

/// One EVALSHA: the calls of one script that share a slot.
struct Invocation {
    kind: Kind,
    /// Indices into the batch's calls, in the order of the script's keys.
    calls: Vec<usize>,
    /// The script reads the server's clock (no `now` injected): fixed_window.lua then answers a call whose hits
    /// carry no event id with the short reply.
    server_clock: bool,
    call: ScriptCall,
}

/// Counts hits in Redis and says which one fires. Cheap to clone; clones share the connection.
///
/// Keys are `<ns>:{<project>:<rule>:<group>}:<kind>` (`<ns>:{<rule>:<group>}:<kind>` for a hit without a
/// project): the `{hash tag}` keeps the keys of one script call in one
/// Redis Cluster slot while spreading (rule, group) pairs over the cluster.
#[derive(Debug, Clone)]
pub struct WindowCounter {
    redis: RedisHandle,
    namespace: Arc<str>,
    first_seen_ttl_ms: u64,
}

impl WindowCounter {
    /// A counter whose keys live under `<namespace>:`.
    pub fn new(redis: RedisHandle, namespace: &str) -> Self {
        WindowCounter {
            redis,
            namespace: namespace.into(),
            first_seen_ttl_ms: ms(DEFAULT_FIRST_SEEN_TTL),
        }
    }

    /// Changes how long ONLY_NEW remembers a firing (default [`DEFAULT_FIRST_SEEN_TTL`]; at least 1 ms).
    pub fn with_first_seen_ttl(mut self, ttl: Duration) -> Self {
        self.first_seen_ttl_ms = ms(ttl);
        self
    }

    /// The connection, for callers that run their own commands next to the counter's.
    pub fn redis(&self) -> &RedisHandle {
        &self.redis
    }

    /// The namespace its keys live under.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The Redis keys a hit touches (for tests, tooling and `MEMORY USAGE`).
    pub fn keys_of(&self, hit: &Hit) -> Vec<String> {
        let (kind, _, _) = parts(hit.spec);
        let base = self.key_base(
            hit.project_id.as_deref().unwrap_or(""),
            &hit.rule_id,
            &hit.group_hash,
        );
        kind.key_suffixes()
            .iter()
            .map(|s| format!("{base}:{s}"))
            .collect()
    }

    fn key_base(&self, project_id: &str, rule_id: &str, group_hash: &str) -> String {
        // a 200 KB group must not make 200 KB keys: past MAX_GROUP_KEY_BYTES its digest, as alerts keep it
        let group_hash = klaxon_core::alert::bounded_group(group_hash);
        if project_id.is_empty() {
            format!("{}:{{{rule_id}:{group_hash}}}", self.namespace)
        } else if project_id.bytes().any(|b| b.is_ascii_uppercase()) {
            // one project, one key, however the producer spelled its ObjectId
            let project_id = project_id.to_ascii_lowercase();
            format!("{}:{{{project_id}:{rule_id}:{group_hash}}}", self.namespace)
        } else {
            format!("{}:{{{project_id}:{rule_id}:{group_hash}}}", self.namespace)
        }
    }

    /// Loads the counting scripts into every node (`SCRIPT LOAD`), so that the first batches do not pay for
    /// NOSCRIPT round trips. Optional: calls reload scripts by themselves when a server lost them.
    pub async fn load_scripts(&self) -> Result<(), CounterError> {
        for kind in [
            Kind::FirstSeen,
            Kind::Fixed,
            Kind::Sliding,
            Kind::UsersFixed,
            Kind::Spike,
            Kind::Reappeared,
        ] {
            kind.script().load_async(&mut self.redis.clone()).await?;
        }
        Ok(())
    }

    /// Redis `TIME` in ms: the one clock the whole fleet uses for windows.
    pub async fn server_time_ms(&self) -> Result<i64, CounterError> {
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut self.redis.clone()).await?;
        Ok(secs * 1000 + micros / 1000)
    }

    /// Counts one hit. `now_ms` replaces the Redis clock (tests, replay); `None` uses Redis `TIME`.
    pub async fn hit(&self, hit: &Hit, now_ms: Option<i64>) -> Result<Outcome, CounterError> {
        let mut out = self.hit_batch(std::slice::from_ref(hit), now_ms).await?;
        out.pop().ok_or(CounterError::BadReply {
            script: "batch",
            detail: "no outcome for the hit".into(),
        })
    }

    /// Counts a batch of hits in one Redis round trip (one pipeline; in a cluster one per slot, sent at
    /// once over each node's connection). Hits of the same (rule, group, spec) are coalesced and processed
    /// in input order, and the keys of one script that share a node (single Redis) or a slot (cluster) go
    /// into one script call, so that a batch costs a few script calls rather than one per event.
    /// Outcomes come back in input order.
    ///
    /// In a cluster, a slot whose pipeline fails is sent again (up to 3 attempts within ~1 s) while the
    /// replies of the slots that succeeded are kept. On error, some script calls of the batch may have run:
    /// hits with an event id are recognised when the batch is retried (a firing fires again with the same
    /// token); hits without one may be counted twice (at-least-once).
    pub async fn hit_batch(&self, hits: &[Hit], now_ms: Option<i64>) -> Result<Vec<Outcome>, CounterError> {
        Ok(self.hit_batch_and_touch(hits, now_ms, None).await?.0)
    }

    /// [`WindowCounter::hit_batch`] and [`Alerts::touch`] of the same batch in one pipeline: a batch's counting
    /// and its open alerts' touches are one request to a single Redis (one per slot in a cluster). Neither reads
    /// the other's keys. Returns the outcomes and how many open alerts were touched.
    pub async fn hit_batch_and_touch(
        &self,
        hits: &[Hit],
        now_ms: Option<i64>,
        touch: Option<(&Alerts, &[Touch<'_>])>,
    ) -> Result<(Vec<Outcome>, u64), CounterError> {
        let touch_calls = touch.map_or_else(Vec::new, |(alerts, touches)| alerts.touch_calls(touches));
        if hits.is_empty() && touch_calls.is_empty() {
            return Ok((Vec::new(), 0));
        }
        let calls = coalesce(hits)?;
        let invocations = self.pack(&calls, now_ms);
        let sent: Vec<&ScriptCall> = invocations
            .iter()
            .map(|i| &i.call)
            .chain(touch_calls.iter())
            .collect();
        let mut replies = pipeline::eval_all(&self.redis, &sent).await?;
        let touched = crate::alerts::touched(&replies.split_off(invocations.len()))?;

        let mut outcomes: Vec<Option<Outcome>> = vec![None; hits.len()];
        for (inv, value) in invocations.iter().zip(replies) {
            decode(inv, &calls, value, &mut outcomes)?;
        }
        let outcomes = outcomes
            .into_iter()
            .map(|o| {
                o.ok_or(CounterError::BadReply {
                    script: "batch",
                    detail: "a hit got no outcome".into(),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok((outcomes, touched))
    }

    /// Packs calls into script invocations: one per (script, slot) — in single-node Redis one per script —
    /// with at most [`MAX_KEYS_PER_CALL`] (rule, group) pairs each, so that one call never holds the server
    /// for long.
    fn pack(&self, calls: &[Call<'_>], now_ms: Option<i64>) -> Vec<Invocation> {
        let cluster = self.redis.is_cluster();
        let mut open: HashMap<(Kind, Option<Slot>), usize> = HashMap::new();
        let mut groups: Vec<(Kind, Option<Slot>, Vec<usize>)> = Vec::new();
        let mut bases: Vec<String> = Vec::with_capacity(calls.len());
        for (i, call) in calls.iter().enumerate() {
            let base = self.key_base(call.project_id, call.rule_id, call.group_hash);
            let slot = cluster.then(|| Slot::for_key(&base));
            bases.push(base);
            let g = match open.get(&(call.kind, slot)) {
                Some(&g) if groups[g].2.len() < MAX_KEYS_PER_CALL => g,
                _ => {
                    groups.push((call.kind, slot, Vec::new()));
                    open.insert((call.kind, slot), groups.len() - 1);
                    groups.len() - 1
                }
            };
            groups[g].2.push(i);
        }
        groups
            .into_iter()
            .map(|(kind, slot, mut members)| {
                if kind == Kind::Fixed {
                    // fixed_window.lua takes its keys in groups that share a (threshold, period): in a batch
                    // most keys do (one rule, many groups), so the two numbers travel once per group
                    members.sort_by_key(|&i| (calls[i].threshold, calls[i].period_ms));
                }
                let cmd = self.command(kind, &members, calls, &bases, now_ms);
                Invocation {
                    kind,
                    calls: members,
                    server_clock: now_ms.is_none(),
                    call: ScriptCall {
                        script: kind.script(),
                        name: kind.name(),
                        slot,
                        cmd,
                    },
                }
            })
            .collect()
    }

    fn command(
        &self,
        kind: Kind,
        members: &[usize],
        calls: &[Call<'_>],
        bases: &[String],
        now_ms: Option<i64>,
    ) -> Cmd {
        let suffixes = kind.key_suffixes();
        // about: the keys, then per member its numbers and its hits' ids (an event id is ~24–40 bytes)
        let hits: usize = members.iter().map(|&i| calls[i].members.len()).sum();
        let key_bytes: usize = members.iter().map(|&i| bases[i].len() + 4).sum::<usize>() * suffixes.len();
        let mut cmd = crate::pipeline::evalsha(
            kind.script(),
            suffixes.len() * members.len() + 6 * members.len() + 2 * hits + 4,
            key_bytes + 24 * members.len() + 48 * hits + 32,
        );
        cmd.arg(suffixes.len() * members.len());
        for &i in members {
            let base = &bases[i];
            for s in suffixes {
                cmd.arg(format!("{base}:{s}"));
            }
        }
        cmd.arg(now_arg(now_ms));
        match kind {
            Kind::FirstSeen => {
                cmd.arg(self.first_seen_ttl_ms);
            }
            Kind::UsersFixed => {
                cmd.arg("fixed");
            }
            Kind::UsersSliding => {
                cmd.arg("sliding");
            }
            Kind::Fixed | Kind::Spike => {
                cmd.arg(FIXED_WINDOW_IDS);
            }
            Kind::Sliding | Kind::Reappeared => {}
        }
        let mut previous: Option<(u64, u64)> = None;
        for (at, &i) in members.iter().enumerate() {
            let call = &calls[i];
            if kind == Kind::Fixed {
                // a group: threshold, period, and how many of the following keys share them
                if previous != Some((call.threshold, call.period_ms)) {
                    previous = Some((call.threshold, call.period_ms));
                    let shared = members[at..]
                        .iter()
                        .take_while(|&&j| {
                            (calls[j].threshold, calls[j].period_ms) == (call.threshold, call.period_ms)
                        })
                        .count();
                    cmd.arg(call.threshold).arg(call.period_ms).arg(shared);
                }
            } else if let Want::Spike(sp) = call.spec {
                cmd.arg(sp.period_ms)
                    .arg(sp.baseline_windows)
                    .arg(sp.factor_milli)
                    .arg(sp.threshold);
            } else if let Want::Reappeared {
                quiet_period_ms,
                armed_at_ms,
                ..
            } = call.spec
            {
                cmd.arg(quiet_period_ms)
                    .arg(reappeared_ttl_ms(quiet_period_ms))
                    .arg(armed_at_ms)
                    .arg(call.members.len());
                for (new, m) in call.news.iter().zip(&call.members) {
                    cmd.arg(if *new { "1" } else { "0" }).arg(m.as_ref());
                }
                continue;
            } else if kind != Kind::FirstSeen {
                cmd.arg(call.threshold).arg(call.period_ms);
            }
            if kind == Kind::Fixed && call.members.iter().all(|m| m.is_empty()) {
                // n hits without event ids travel as -n, with no ids after it
                cmd.arg(-(call.members.len() as i64));
                continue;
            }
            cmd.arg(call.members.len());
            if kind.counts_users() {
                for (user, m) in call.users.iter().zip(&call.members) {
                    cmd.arg(user.as_ref()).arg(m.as_ref());
                }
            } else {
                for m in &call.members {
                    cmd.arg(m.as_ref());
                }
            }
        }
        cmd
    }
}

/// The member that stands for a hit: its event id (digested when long), or for a sliding window without an
/// id a random one (so the event is counted; 64 random bits make collisions negligible).
fn member_of(kind: Kind, event_id: Option<&str>) -> Cow<'_, str> {
    match event_id.filter(|id| !id.is_empty()) {
        Some(id) => compact(id),
        None if kind == Kind::Sliding => Cow::Owned(format!("~{:016x}", rand::random::<u64>())),
        None => Cow::Borrowed(""),
    }
}

/// An id as a set member: as is when short, else a 32-hex digest (`#…`), so members stay within Redis's
/// compact encodings. An id starting with `~` is digested too: that prefix marks the members made up for
/// hits without an id, which `sliding_window.lua` does not look up. Also used for user ids: two users collide
/// only if their SHA-256 prefixes do.
fn compact(id: &str) -> Cow<'_, str> {
    if id.len() <= MAX_MEMBER_LEN && !id.starts_with('~') {
        Cow::Borrowed(id)
    } else {
        Cow::Owned(format!("#{}", hex::encode(&Sha256::digest(id.as_bytes())[..16])))
    }
}

/// Groups the hits of one key (and the same spec) into one call each, keeping input order within a call.
fn coalesce(hits: &[Hit]) -> Result<Vec<Call<'_>>, CounterError> {
    let mut index: HashMap<(&str, &str, &str, Want), usize> = HashMap::with_capacity(hits.len());
    let mut calls: Vec<Call<'_>> = Vec::new();
    for (i, hit) in hits.iter().enumerate() {
        let (kind, threshold, period_ms) = parts(hit.spec);
        if kind != Kind::FirstSeen && (threshold == 0 || period_ms == 0) {
            return Err(CounterError::InvalidHit {
                rule_id: hit.rule_id.to_string(),
                reason: "threshold and period must be at least 1",
            });
        }
        let member = member_of(kind, hit.event_id.as_deref());
        let slot = *index
            .entry((
                hit.project_id.as_deref().unwrap_or(""),
                &hit.rule_id,
                &hit.group_hash,
                shared(hit.spec),
            ))
            .or_insert_with(|| {
                calls.push(Call {
                    kind,
                    project_id: hit.project_id.as_deref().unwrap_or(""),
                    rule_id: &hit.rule_id,
                    group_hash: &hit.group_hash,
                    threshold,
                    period_ms,
                    spec: shared(hit.spec),
                    news: Vec::new(),
                    members: Vec::new(),
                    users: Vec::new(),
                    hits: Vec::new(),
                });
                calls.len() - 1
            });
        if kind.counts_users() {
            let user = hit.user.as_deref().map_or(Cow::Borrowed(""), compact);
            calls[slot].users.push(user);
        }
        if kind == Kind::Reappeared {
            calls[slot].news.push(hit.is_new());
        }
        calls[slot].members.push(member);
        calls[slot].hits.push(i);
    }
    Ok(calls)
}

/// Reads an invocation's reply — per call, `fired_at, fired_count, token, r_1..r_n`, or fixed_window.lua's short
/// reply for a call without event ids on the server's clock (`count`, or `-count, fired_at, token` when the hit
/// that reached the threshold fired) — into the outcomes of the calls' hits.
fn decode(
    inv: &Invocation,
    calls: &[Call<'_>],
    value: Value,
    outcomes: &mut [Option<Outcome>],
) -> Result<(), CounterError> {
    let script = inv.kind.name();
    let bad = |detail: String| script_io::bad(script, detail);
    let Value::Array(items) = value else {
        return Err(bad(format!("expected an array, got {value:?}")));
    };
    let mut rest = items.as_slice();
    let mut take = |n: usize| -> Result<&[Value], CounterError> {
        if rest.len() < n {
            return Err(bad(format!("the reply ends early ({} items)", items.len())));
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let int_at = |v: &[Value], i: usize| script_io::int(&v[i], script);
    for &c in &inv.calls {
        let call = &calls[c];
        let n = call.hits.len() as i64;
        if inv.kind == Kind::Fixed && inv.server_clock && call.members.iter().all(|m| m.is_empty()) {
            let first = int_at(take(1)?, 0)?;
            let (count, fired) = if first < 0 {
                let tail = take(2)?;
                (-first, Some((int_at(tail, 0)?, int_at(tail, 1)?)))
            } else {
                (first, None)
            };
            let before = count - n;
            if before < 0 {
                return Err(bad(format!("count {count} below the call's {n} hits")));
            }
            let fired_hit = i64::try_from(call.threshold).unwrap_or(i64::MAX) - before;
            for (&hit, i) in call.hits.iter().zip(1..) {
                outcomes[hit] = Some(match fired {
                    Some((at_ms, token)) if i == fired_hit => Outcome::Fired {
                        count: call.threshold,
                        firing: token.to_string(),
                        at_ms,
                        signal: None,
                    },
                    _ => Outcome::Counted {
                        count: u64::try_from(before + i).unwrap_or(0),
                    },
                });
            }
            continue;
        }
        let head = take(3)?;
        let (fired_at, fired_count, token) = (int_at(head, 0)?, int_at(head, 1)?, int_at(head, 2)?);
        // what spike.lua and reappeared.lua say of the firing beyond its count
        let signal = match call.spec {
            Want::Spike(sp) => {
                let tail = take(2)?;
                let (sum, buckets) = (int_at(tail, 0)?.max(0) as u64, int_at(tail, 1)?.max(0) as u64);
                Some(Signal::Spike(Baseline {
                    sum,
                    buckets,
                    needed: sp.needed(sum, buckets).unwrap_or(u64::MAX),
                }))
            }
            Want::Reappeared { .. } => Some(Signal::Reappeared {
                last_seen_ms: (fired_count >= 0).then_some(fired_count),
            }),
            _ => None,
        };
        // reappeared.lua's second number is the previous sighting, not a count
        let fired_count = if call.kind == Kind::Reappeared {
            1
        } else {
            fired_count
        };
        for (&hit, item) in call.hits.iter().zip(take(call.hits.len())?) {
            let r = script_io::int(item, script)?;
            outcomes[hit] = Some(if r == -1 {
                if fired_at < 0 {
                    return Err(bad("a hit fired but the reply has no firing time".into()));
                }
                Outcome::Fired {
                    count: u64::try_from(fired_count).unwrap_or(0),
                    firing: match call.kind {
                        Kind::FirstSeen => "new".to_owned(),
                        Kind::Fixed
                        | Kind::Sliding
                        | Kind::UsersFixed
                        | Kind::UsersSliding
                        | Kind::Spike
                        | Kind::Reappeared => token.to_string(),
                    },
                    at_ms: fired_at,
                    signal,
                }
            } else {
                Outcome::Counted {
                    count: u64::try_from(r).map_err(|_| bad(format!("negative count {r}")))?,
                }
            });
        }
    }
    if !rest.is_empty() {
        return Err(bad(format!("{} items left over", rest.len())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_ids_are_digested_short_ones_kept() {
        assert_eq!(member_of(Kind::Sliding, Some("abc")), "abc");
        let long = "x".repeat(100);
        let m = member_of(Kind::Sliding, Some(&long));
        assert_eq!(m.len(), 33);
        assert_eq!(m, member_of(Kind::Fixed, Some(&long)), "deterministic");
        assert_eq!(member_of(Kind::Fixed, None), "");
        let tilde = member_of(Kind::Sliding, Some("~looks-made-up"));
        assert!(
            tilde.starts_with('#') && tilde.len() == 33,
            "{tilde}: an id never passes for a made-up member"
        );
        assert_eq!(member_of(Kind::Fixed, Some("")), "");
        let a = member_of(Kind::Sliding, None);
        let b = member_of(Kind::Sliding, None);
        assert!(a.starts_with('~') && a != b);
    }

    #[test]
    fn coalesces_hits_of_one_key_in_order() {
        let fixed = Want::Count {
            threshold: 3,
            period_ms: 1000,
            window: Window::Fixed,
        };
        let hits = vec![
            Hit::new("r", "g1", fixed),
            Hit::new("r", "g2", fixed),
            Hit::new("r", "g1", fixed).with_event_id("e3"),
            Hit::new("r", "g1", Want::FirstSeen),
        ];
        let calls = coalesce(&hits).expect("valid");
        assert_eq!(calls.len(), 3);
        assert_eq!(calls[0].hits, vec![0, 2]);
        assert_eq!(calls[0].members, vec!["", "e3"]);
        assert_eq!(calls[1].hits, vec![1]);
        assert_eq!(calls[2].kind, Kind::FirstSeen);
    }

    #[test]
    fn rejects_zero_threshold() {
        let hits = [Hit::new(
            "r",
            "g",
            Want::Count {
                threshold: 0,
                period_ms: 1000,
                window: Window::Sliding,
            },
        )];
        assert!(matches!(coalesce(&hits), Err(CounterError::InvalidHit { .. })));
    }
}
