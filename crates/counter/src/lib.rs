//! Klaxon's counting engine: deciding, atomically and cheaply, that *this* event is the one that crosses a
//! rule's threshold.
//!
//! ```text
//!   [Hit] ──coalesce by key──▶ calls ──pack by (script, slot)──▶ EVALSHA… ──one pipeline──▶ Redis / Cluster
//!        ◀── Outcome per hit (Counted{count} | Fired{count, firing, at_ms}) ◀── per key {fired_at, count, token, r_i…}
//! ```
//!
//! * **The scripts decide.** `lua/fixed_window.lua`, `lua/sliding_window.lua`, `lua/first_seen.lua` and
//!   `lua/unique_users.lua` (distinct users, fixed or sliding, memory O(threshold)), `lua/spike.lua` (a bucket
//!   against the group's own baseline, O(1) per hit with a running baseline sum, memory O(baselineWindows)) and `lua/reappeared.lua` (a group back after a
//!   quiet, memory O(1)) hold the whole decision; this crate only builds keys, batches calls and decodes replies. Each script opens
//!   with a comment giving its keys, arguments, reply and complexity.
//! * **One clock.** Windows run on Redis `TIME` unless the caller injects `now` (tests, replay).
//! * **Batching.** [`WindowCounter::hit_batch`] sends a whole batch in one pipeline (per slot in a cluster, all at
//!   once). Hits of the same key in a batch are coalesced and the script reports which hit crossed: a hot
//!   key (one error flooding) costs a few Lua steps per batch, not a script call per event. The keys of one
//!   script are packed into one call (up to 128 keys; per slot in a cluster, since a script may only touch
//!   one slot there), because Lua's per-call overhead, not the counting, dominates the server's time.
//! * **Crash-safe firing.** Each script stores the event id of the hit that fired. When a worker crashes
//!   after the firing but before publishing, the redelivered event fires again with the same `firing`
//!   token, so the engine republishes the same deterministic notification id and delivery drops the
//!   duplicate. Without event ids, fixed windows count at least once (a redelivered event counts twice)
//!   and a redelivered firing is not recognised.
//! * **Keys.** `<ns>:{<project>:<rule>:<group>}:fx|sl|slc|new|uf|ufm|us|usm|sp|spi|rp`; the hash tag puts the keys of one call in one cluster
//!   slot. Every key expires: fixed windows at their end, sliding sets a period after their last event,
//!   cooldowns at their end, first-seen marks after [`DEFAULT_FIRST_SEEN_TTL`], spike buckets
//!   when the group's newest bucket leaves the last baseline (the end of the `baselineWindows`-th bucket after it) and
//!   their event ids when their bucket ends, reappearance marks after
//!   [`reappeared_ttl_ms`].
//! * **Scripts on the server.** Calls use `EVALSHA`; a NOSCRIPT reply (server restart, failover) loads the
//!   script on every node and resends only the calls that did not run.
//! * **Explain.** [`WindowCounter::peek`] reads what the scripts hold for a (rule, group) without counting, and
//!   [`WindowCounter::explain`] turns it into the core's verdicts (`klaxon_core::explain`). The core's reading
//!   is a Rust copy of the scripts' decisions: `tests/explain.rs` drives the real scripts through sequences of
//!   hits and checks, before each, that it predicts exactly what the script answers.
//! * **Digests.** [`Digests`] holds the Redis half of `minPeriod` digests (`lua/digest_*.lua`): an atomic,
//!   idempotent append that says when a window opens (a batch's firings in one round trip,
//!   [`Digests::append_all`]), and an atomic take-and-mark claim of a due window.
//! * **Delivery.** [`Dedup`] (`lua/dedup_*.lua`: a notification id is delivered once) and [`Gcra`]
//!   (`lua/gcra_reserve.lua`: fleet-wide rate limits, shared fairly per project) and [`Budgets`]
//!   (`lua/budget_take.lua`: reminders per project per hour) are the Redis half of the senders' pipeline; the
//!   policy around them (which limits apply, what a busy claim or a far slot means) is the engine's.
//!   [`DirectKeys`] (`direct.rs`) are the idempotency keys of the API's direct notifications.
//! * **Alerts.** [`Alerts`] (`lua/alert_*.lua`, `lua/alerts_read.lua`) holds each (rule, group)'s alert: opened
//!   once per firing across a fleet, counted while open, acknowledged and resolved in one atomic step each.
//!   [`Conversations`] keeps each alert's firing message on Discord and Telegram, which its lifecycle messages
//!   edit and reply to.
//! * **NO_EVENTS.** [`NoEvents`] (`lua/no_events_*.lua`) keeps one small hash per project with NO_EVENTS rules:
//!   its last event and each rule's one pending timer; a due timer fires once across a fleet.
//! * **Deployment checks.** [`eviction_policies`] reads `maxmemory-policy` from every primary (anything but
//!   `noeviction` can delete Klaxon's keys), [`persistence`] whether they survive a restart; [`Consumers`]
//!   (`lua/consumers_*.lua`) registers Klaxon's consumers of the events queue, so a consumer that is not Klaxon
//!   can be told apart by its count.
#![deny(missing_docs)]

pub mod alert_projects;
pub mod alerts;
pub mod budget;
pub mod consumers;
pub mod conversation;
pub mod dedup;
pub mod digest;
pub mod direct;
mod error;
pub mod eviction;
pub mod gcra;
pub mod held;
mod hit;
pub mod inbound;
pub mod mutes;
pub mod namespace;
pub mod no_events;
mod peek;
mod pipeline;
mod redis_handle;
mod script_io;
mod window_counter;

pub use alert_projects::Backfilled;
pub use alerts::{Alerts, Change, Heard, Hearing, NotOpened, Opened, Touch, Usage};
pub use budget::Budgets;
pub use consumers::{Consumers, Registered};
pub use conversation::{Conversation, Conversations};
pub use dedup::Dedup;
pub use digest::{Append, Appended, Claim, DigestKey, Digests, HeldClaim, HeldEntry, Hold};
pub use direct::DirectKeys;
pub use error::CounterError;
pub use eviction::{
    eviction_policies, persistence, EvictionPolicies, NodePersistence, NodePolicy, PolicySource, NO_EVICTION,
};
pub use gcra::{Gcra, Slot};
pub use held::{HeldGroup, HeldMessage};
pub use hit::{Hit, Outcome};
pub use inbound::{Inbound, Incident};
pub use mutes::Mutes;
pub use no_events::{NoEvents, Seen, SeenBy, Watched};
pub use redis_handle::RedisHandle;
pub use window_counter::{reappeared_ttl_ms, WindowCounter, DEFAULT_FIRST_SEEN_TTL};
