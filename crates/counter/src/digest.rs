//! [`Digests`]: the Redis half of digests (`minPeriod`): buffers of firings per (project, rule, channel) and
//! the atomic take-and-mark of a due window. The timing half (when a window is flushed) lives in RabbitMQ's
//! delay engine; see `klaxon_engine::digest`.
//!
//! Keys share the hash tag `{dg:<project>:<rule>:<channel>}`, so every script call stays in one cluster slot:
//! `…:win` (window start and opener), `…:buf` (groups), `…:ids` (appended notification ids),
//! `…:claim:<start>` and `…:lease:<start>` (a claimed window until its digest is published).
//!
//! A window's entries are what fired and what resolved inside it ([`HeldEntry`]): each buffered field is the
//! group after its kind (`f:<group>`, `r:<group>`), so one group can be listed as fired and as resolved in the
//! same window, and a tenant's group that happens to start with `r:` is still a firing (`f:r:…`).
//! [`HeldClaim::of`] splits a claim's entries again.
//!
//! Quiet hours (`quietHours`) hold firings with the same scripts on sibling keys under `…:quiet` (same hash
//! tag): [`Digests::hold_all`] appends with an explicit due time (the window's end) instead of a leading edge
//! and `start + minPeriod`, [`Digests::claim_held`] takes the hold when it is due, [`Digests::done_held`]
//! completes it. An index lists the open holds for `klaxon deliveries list` ([`crate::held`]).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use klaxon_core::notification::Unlisted;
use klaxon_core::{ChannelKind, NotificationEvent};
use redis::cluster_routing::Slot;
use redis::{Script, Value};

use crate::pipeline::{self, ScriptCall};
use crate::script_io::{bad, int, ms, now_arg, text};
use crate::{CounterError, RedisHandle};

static APPEND: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/digest_append.lua")));
static CLAIM: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/digest_claim.lua")));
static DONE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/digest_done.lua")));

/// Most groups one digest window (or quiet window) lists of each kind, fired and resolved (so resolves are never
/// crowded out by firings); later new groups are counted, not listed ([`HeldClaim::more`]; known ones still
/// merge).
pub const DIGEST_MAX_GROUPS: usize = 1000;
/// Titles are cut to this many bytes when buffered (1,000 groups × 1 KiB: a digest task stays near 1 MiB at most).
pub const MAX_BUFFERED_TITLE_BYTES: usize = 1024;
/// How long digest keys outlive their window when nobody flushes them (a safety net against leaks).
pub(crate) const KEEP: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long a flusher may hold a claimed window before another one may recover it.
pub const DEFAULT_CLAIM_LEASE: Duration = Duration::from_secs(10);

/// Which digest: one per (project, rule, channel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DigestKey<'a> {
    /// The project.
    pub project_id: &'a str,
    /// The rule.
    pub rule_id: &'a str,
    /// The channel.
    pub channel: ChannelKind,
}

/// One firing (or resolve) to add to its digest ([`Digests::append_all`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Append<'a> {
    /// Which digest.
    pub key: DigestKey<'a>,
    /// The message's notification id: appending it again changes nothing.
    pub notification_id: &'a str,
    /// Its group (title, count: the largest count of a (kind, group) is kept).
    pub event: &'a NotificationEvent,
    /// The channel's digest period, seconds.
    pub min_period_s: u64,
    /// A firing, or an alert's resolve ("digests carry resolves like firings"): the same leading edge and
    /// window, listed apart in the digest.
    pub entry: HeldEntry,
}

/// What a digest window or a quiet window holds of an alert ([`Append`], [`Hold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldEntry {
    /// It fired (or was still firing: a reminder held) inside the window.
    Fired,
    /// It resolved inside the window.
    Resolved,
}

impl HeldEntry {
    /// The prefix of the entry's field in the hold's buffer: one entry per (kind, group).
    fn prefix(self) -> &'static str {
        match self {
            HeldEntry::Fired => "f:",
            HeldEntry::Resolved => "r:",
        }
    }
}

/// One message a quiet window holds ([`Digests::hold_all`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold<'a> {
    /// Which channel's hold: one per (project, rule, channel).
    pub key: DigestKey<'a>,
    /// The held message's notification id: holding it again changes nothing.
    pub notification_id: &'a str,
    /// Its group (title, count: the largest count of a (kind, group) is kept).
    pub event: &'a NotificationEvent,
    /// Fired or resolved.
    pub entry: HeldEntry,
    /// When the quiet ends (unix ms): the hold is due then.
    pub until_ms: i64,
    /// The message's destination as the delivery trail shows it (redacted: `klaxon_channels::redact_endpoint`),
    /// kept when this message opens the hold, for the listing of held messages ([`Digests::held`]).
    pub destination: &'a str,
    /// The alert the message is about, if any: kept with its entry for the listing of held messages.
    pub alert_id: Option<&'a str>,
}

/// What [`Digests::claim`] or [`Digests::claim_held`] took: the window's entries, split by kind.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeldClaim {
    /// What fired (or was still firing) inside the window.
    pub fired: Vec<NotificationEvent>,
    /// What resolved inside the window.
    pub resolved: Vec<NotificationEvent>,
    /// The firings and resolves past the list's bound ([`DIGEST_MAX_GROUPS`] of each kind): counted, not
    /// listed.
    pub more: Unlisted,
}

impl HeldClaim {
    /// Splits a claimed window's entries by their kind prefix. An entry without one is a firing buffered by an
    /// earlier version, whose digests held firings only under their bare group.
    pub fn of(events: Vec<NotificationEvent>) -> HeldClaim {
        let mut out = HeldClaim::default();
        for mut e in events {
            if let Some(g) = e.group_hash.strip_prefix(HeldEntry::Resolved.prefix()) {
                e.group_hash = g.to_owned();
                out.resolved.push(e);
            } else {
                if let Some(g) = e.group_hash.strip_prefix(HeldEntry::Fired.prefix()) {
                    e.group_hash = g.to_owned();
                }
                out.fired.push(e);
            }
        }
        out
    }

    /// With what the window counted past its list's bound.
    pub fn with_more(mut self, more: Unlisted) -> HeldClaim {
        self.more = more;
        self
    }

    /// True when the window held nothing, listed or counted.
    pub fn is_empty(&self) -> bool {
        self.fired.is_empty() && self.resolved.is_empty() && self.more.is_none()
    }
}

/// What [`Digests::append`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// True when the firing goes out at once, alone (leading edge): the channel sent nothing in the last
    /// `minPeriod` and no window is open. Nothing was buffered; the quiet period starts now.
    pub send_now: bool,
    /// True when the caller must schedule the window's flush at `window_start_ms + minPeriod` (this append
    /// opened the window, is a redelivery of the one that did, or the window is overdue).
    pub schedule_flush: bool,
    /// Start of the window, unix ms on the Redis clock.
    pub window_start_ms: i64,
    /// Now, on the Redis clock.
    pub now_ms: i64,
}

impl Appended {
    /// How long from now until the window is due (zero when already due).
    pub fn flush_in(&self, min_period_s: u64) -> Duration {
        let due = self
            .window_start_ms
            .saturating_add((min_period_s as i64).saturating_mul(1000));
        Duration::from_millis(u64::try_from(due.saturating_sub(self.now_ms)).unwrap_or(0))
    }
}

/// What [`Digests::claim`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This caller owns the window: publish one digest of `events` (possibly empty; each group after its kind,
    /// [`HeldClaim::of`] splits them), then call [`Digests::done`]. Also returned when a crashed flusher's claim
    /// is recovered.
    Claimed {
        /// Now, on the Redis clock.
        now_ms: i64,
        /// The groups, in no particular order.
        events: Vec<NotificationEvent>,
        /// The firings and resolves past the list's bound, counted ([`HeldClaim::with_more`]).
        more: Unlisted,
    },
    /// Another flusher holds the claim: look again after this long.
    Busy(Duration),
    /// The window is not due yet: look again after this long.
    Early(Duration),
    /// Nothing to do: the window was already flushed and completed.
    Gone,
}

/// The digest scripts, typed. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Digests {
    redis: RedisHandle,
    namespace: Arc<str>,
    lease: Duration,
}

/// One `digest_append.lua` call: a digest's append, or a hold's (with `until_ms`).
struct AppendCall<'a> {
    base: String,
    notification_id: &'a str,
    group: String,
    event: &'a NotificationEvent,
    period_ms: u64,
    until_ms: Option<i64>,
    /// A hold's redacted destination ('' for a digest).
    destination: &'a str,
    /// A hold's alert id ('' for none, and for a digest).
    alert_id: &'a str,
}

/// The buffer's field of a group: its kind's prefix and the group, bounded as alerts and counting keys hold it
/// (`klaxon_core::alert::bounded_group`): a window lists up to [`DIGEST_MAX_GROUPS`] groups of each kind, and
/// 200 KB group hashes must not make a 200 MB buffer. The digest then names such a group by its digest, as its
/// alert does (the flush finds the alert from it: `Alerts::current` bounds the group the same way).
fn buffered_group(entry: HeldEntry, group: &str) -> String {
    format!("{}{}", entry.prefix(), klaxon_core::alert::bounded_group(group))
}

/// The scripts' min period argument: at least one second, in ms.
fn period_ms(min_period_s: u64) -> u64 {
    min_period_s.max(1).saturating_mul(1000)
}

impl Digests {
    /// Digest state under `<namespace>:`.
    pub fn new(redis: RedisHandle, namespace: &str) -> Self {
        Digests {
            redis,
            namespace: namespace.into(),
            lease: DEFAULT_CLAIM_LEASE,
        }
    }

    /// The namespace.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The Redis handle.
    pub(crate) fn redis(&self) -> &RedisHandle {
        &self.redis
    }

    /// Changes how long a claim is protected before another flusher may recover it (at least 1 ms).
    pub fn with_claim_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The key prefix of one digest: `<ns>:{dg:<project>:<rule>:<channel>}`.
    pub fn key_base(&self, key: &DigestKey<'_>) -> String {
        format!(
            "{}:{{dg:{}:{}:{}}}",
            self.namespace,
            key.project_id,
            key.rule_id,
            key.channel.as_str()
        )
    }

    /// Adds one firing (its notification id and its group) to the digest. Idempotent per notification id.
    /// `now_ms` replaces the Redis clock (tests). [`Digests::append_all`] with one firing.
    pub async fn append(
        &self,
        key: &DigestKey<'_>,
        notification_id: &str,
        event: &NotificationEvent,
        min_period_s: u64,
        now_ms: Option<i64>,
    ) -> Result<Appended, CounterError> {
        let firing = Append {
            key: *key,
            notification_id,
            event,
            min_period_s,
            entry: HeldEntry::Fired,
        };
        let mut answers = self.append_all(&[firing], now_ms).await?;
        answers
            .pop()
            .ok_or_else(|| bad("digest_append.lua", "no answer for the firing"))
    }

    /// Adds firings to their digests in one Redis round trip (one pipeline; in a cluster one per slot, sent at
    /// once) and answers for each, in order. Each firing is its own `digest_append.lua` call, and the calls run
    /// in the given order, so a batch decides exactly as the same appends one after the other would: the first
    /// firing of a quiet channel is sent at once, the next one opens the window. Idempotent per notification
    /// id. `now_ms` replaces the Redis clock (tests).
    pub async fn append_all(
        &self,
        firings: &[Append<'_>],
        now_ms: Option<i64>,
    ) -> Result<Vec<Appended>, CounterError> {
        let calls: Vec<AppendCall<'_>> = firings
            .iter()
            .map(|f| AppendCall {
                base: self.key_base(&f.key),
                notification_id: f.notification_id,
                group: buffered_group(f.entry, &f.event.group_hash),
                event: f.event,
                period_ms: period_ms(f.min_period_s),
                until_ms: None,
                destination: "",
                alert_id: "",
            })
            .collect();
        self.append_calls(&calls, now_ms).await
    }

    /// The key prefix of one channel's quiet-hours hold: `<ns>:{dg:<project>:<rule>:<channel>}:quiet` (the
    /// digest's hash tag: one slot).
    pub fn hold_base(&self, key: &DigestKey<'_>) -> String {
        format!("{}:quiet", self.key_base(key))
    }

    /// Holds messages until their quiet window ends, in one Redis round trip (one pipeline; in a cluster one per
    /// slot), answering for each in order: `schedule_flush` when the caller must schedule the hold's release at
    /// `window_start_ms` (the due time: this append opened the hold, moved its due time, or is the redelivery
    /// of the one that did), `send_now` when the window already ended (on the Redis clock): send it as usual.
    /// Idempotent per notification id. `now_ms` replaces the Redis clock (tests).
    pub async fn hold_all(
        &self,
        holds: &[Hold<'_>],
        now_ms: Option<i64>,
    ) -> Result<Vec<Appended>, CounterError> {
        let calls: Vec<AppendCall<'_>> = holds
            .iter()
            .map(|h| AppendCall {
                base: self.hold_base(&h.key),
                notification_id: h.notification_id,
                group: buffered_group(h.entry, &h.event.group_hash),
                event: h.event,
                period_ms: 1000,
                until_ms: Some(h.until_ms),
                destination: h.destination,
                alert_id: h.alert_id.unwrap_or_default(),
            })
            .collect();
        let answers = self.append_calls(&calls, now_ms).await?;
        // the holds this call opened or moved (or the redelivery of the one that did) join the listing's index
        let opened: Vec<(DigestKey<'_>, i64, i64)> = holds
            .iter()
            .zip(&answers)
            .filter(|(_, a)| a.schedule_flush)
            .map(|(h, a)| (h.key, a.window_start_ms, a.now_ms))
            .collect();
        self.index_holds(&opened).await?;
        Ok(answers)
    }

    async fn append_calls(
        &self,
        appends: &[AppendCall<'_>],
        now_ms: Option<i64>,
    ) -> Result<Vec<Appended>, CounterError> {
        const S: &str = "digest_append.lua";
        let cluster = self.redis.is_cluster();
        let calls: Vec<ScriptCall> = appends
            .iter()
            .map(|f| {
                let base = &f.base;
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(APPEND.get_hash()).arg(4);
                for suffix in ["win", "buf", "idz", "last"] {
                    cmd.arg(format!("{base}:{suffix}"));
                }
                cmd.arg(now_arg(now_ms))
                    .arg(f.notification_id)
                    .arg(&f.group)
                    .arg(f.event.count)
                    // shortened when buffered: the renderers show at most ~1,000 characters of a title, and a
                    // digest of up to DIGEST_MAX_GROUPS groups must stay a small message
                    .arg(klaxon_core::text::one_line(
                        &f.event.title,
                        MAX_BUFFERED_TITLE_BYTES,
                    ))
                    .arg(f.event.repetition_id.as_deref().unwrap_or(""))
                    .arg(f.period_ms)
                    .arg(DIGEST_MAX_GROUPS)
                    .arg(ms(KEEP))
                    .arg(f.until_ms.map_or(String::new(), |u| u.to_string()))
                    .arg(f.event.open_for_ms.map_or(String::new(), |o| o.to_string()))
                    .arg(f.event.silence_period_ms.map_or(String::new(), |p| p.to_string()))
                    .arg(f.destination)
                    .arg(f.alert_id);
                ScriptCall {
                    script: &APPEND,
                    name: S,
                    slot: cluster.then(|| Slot::for_key(base.as_bytes())),
                    cmd,
                }
            })
            .collect();
        let sent: Vec<&ScriptCall> = calls.iter().collect();
        let replies = pipeline::eval_all(&self.redis, &sent).await?;
        replies
            .into_iter()
            .map(|reply| match reply {
                Value::Array(items) => match items.as_slice() {
                    [action, start, now] => Ok(Appended {
                        send_now: int(action, S)? == 2,
                        schedule_flush: int(action, S)? == 1,
                        window_start_ms: int(start, S)?,
                        now_ms: int(now, S)?,
                    }),
                    other => Err(bad(S, format!("{} values", other.len()))),
                },
                other => Err(bad(S, format!("expected an array, got {other:?}"))),
            })
            .collect()
    }

    /// Take-and-mark: closes the window that started at `window_start_ms` if it is due and hands its buffer
    /// to this caller only. `now_ms` replaces the Redis clock (tests).
    pub async fn claim(
        &self,
        key: &DigestKey<'_>,
        window_start_ms: i64,
        min_period_s: u64,
        now_ms: Option<i64>,
    ) -> Result<Claim, CounterError> {
        self.claim_at(
            &self.key_base(key),
            window_start_ms,
            period_ms(min_period_s),
            now_ms,
        )
        .await
    }

    /// Take-and-mark of a quiet-hours hold due at `until_ms` ([`Digests::hold_all`]): like [`Digests::claim`],
    /// its events' groups carry their kind prefix ([`HeldClaim::of`] splits them).
    pub async fn claim_held(
        &self,
        key: &DigestKey<'_>,
        until_ms: i64,
        now_ms: Option<i64>,
    ) -> Result<Claim, CounterError> {
        self.claim_at(&self.hold_base(key), until_ms, 0, now_ms).await
    }

    /// Completes a claimed hold once its message is published (idempotent), and takes it out of the listing's
    /// index.
    pub async fn done_held(&self, key: &DigestKey<'_>, until_ms: i64) -> Result<(), CounterError> {
        self.done_at(&self.hold_base(key), until_ms).await?;
        self.unindex_hold(key, until_ms).await
    }

    async fn claim_at(
        &self,
        base: &str,
        window_start_ms: i64,
        period_ms: u64,
        now_ms: Option<i64>,
    ) -> Result<Claim, CounterError> {
        const S: &str = "digest_claim.lua";
        let reply: Vec<Value> = CLAIM
            .key(format!("{base}:win"))
            .key(format!("{base}:buf"))
            .key(format!("{base}:claim:{window_start_ms}"))
            .key(format!("{base}:lease:{window_start_ms}"))
            .key(format!("{base}:last"))
            .arg(now_arg(now_ms))
            .arg(window_start_ms)
            .arg(period_ms)
            .arg(ms(self.lease))
            .arg(ms(KEEP))
            .invoke_async(&mut self.redis.clone())
            .await?;
        let Some(tag) = reply.first() else {
            return Err(bad(S, "empty reply"));
        };
        let wait = |i: usize| -> Result<Duration, CounterError> {
            let v = reply.get(i).ok_or_else(|| bad(S, "missing wait"))?;
            Ok(Duration::from_millis(u64::try_from(int(v, S)?).unwrap_or(0)))
        };
        match text(tag, S)?.as_str() {
            "gone" => Ok(Claim::Gone),
            "busy" => Ok(Claim::Busy(wait(1)?)),
            "early" => Ok(Claim::Early(wait(1)?)),
            "claimed" => {
                let now_ms = int(reply.get(1).ok_or_else(|| bad(S, "missing now"))?, S)?;
                let count = |i: usize| -> Result<u64, CounterError> {
                    let v = reply
                        .get(i)
                        .ok_or_else(|| bad(S, "missing a count past the bound"))?;
                    Ok(u64::try_from(int(v, S)?).unwrap_or(0))
                };
                let more = Unlisted {
                    fired: count(2)?,
                    resolved: count(3)?,
                };
                let rest = reply.get(4..).unwrap_or_default();
                if rest.len() % 6 != 0 {
                    return Err(bad(S, "entries are not groups of six"));
                }
                let mut events = Vec::with_capacity(rest.len() / 6);
                for e in rest.chunks_exact(6) {
                    let rep = text(&e[3], S)?;
                    let open = int(&e[4], S)?;
                    let silence = int(&e[5], S)?;
                    events.push(NotificationEvent {
                        group_hash: text(&e[0], S)?,
                        count: u64::try_from(int(&e[1], S)?).unwrap_or(0),
                        title: text(&e[2], S)?,
                        repetition_id: (!rep.is_empty()).then_some(rep),
                        // -1: none kept (a firing, or an entry of an earlier version)
                        open_for_ms: u64::try_from(open).ok(),
                        // -1: not a silence (or an entry of an earlier version)
                        silence_period_ms: u64::try_from(silence).ok(),
                        alert_id: None,
                    });
                }
                Ok(Claim::Claimed { now_ms, events, more })
            }
            other => Err(bad(S, format!("unknown reply `{other}`"))),
        }
    }

    /// Completes a claimed window once its digest is published (idempotent).
    pub async fn done(&self, key: &DigestKey<'_>, window_start_ms: i64) -> Result<(), CounterError> {
        self.done_at(&self.key_base(key), window_start_ms).await
    }

    async fn done_at(&self, base: &str, window_start_ms: i64) -> Result<(), CounterError> {
        let _: i64 = DONE
            .key(format!("{base}:claim:{window_start_ms}"))
            .key(format!("{base}:lease:{window_start_ms}"))
            .invoke_async(&mut self.redis.clone())
            .await?;
        Ok(())
    }
}
