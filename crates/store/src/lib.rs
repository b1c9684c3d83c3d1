//! Klaxon's MongoDB adapter: the rule store, the per-process rule cache and its invalidation, and the delivery
//! trail — every document Klaxon reads or writes.
//!
//! ```text
//!  engine ──get(project)──▶ RuleCache ──(miss / TTL expired, single flight)──▶ RuleStore::load
//!                              ▲   │ stale-while-error: last good rules if MongoDB fails   │ find_one({_id}, {notifications})
//!      change stream ──────────┤   ▼                                                        ▼
//!      (where supported)       │  Arc<ProjectRules> (compiled once per load)            projects (Hawk's shape)
//!      Redis pub/sub ──────────┘
//!      <ns>:rules:invalidate (`invalidation`: a write through the API or the console, within a second)
//! ```
//!
//! * [`RuleStore`] talks to MongoDB through the subset of operations every targeted server supports (see
//!   [`store`]); it also serves the `klaxon rules` CLI (add, remove, enable, import, export).
//! * [`RuleCache`] keeps validated [`klaxon_core::ProjectRules`] per project with a TTL, negative caching of
//!   unknown projects, single flight per project, stale-while-error and change-stream invalidation where the
//!   server offers it.
//! * [`invalidation`] tells every process that a project's rules changed (Redis pub/sub), so an edit made
//!   through the API or the console is used within a second on every server, change streams or not.
//! * [`format`] is the JSON import/export format (README, "Rules").
//! * [`trail`] is the delivery trail (collection `deliveries`): the senders' background writer and the reader
//!   behind `klaxon deliveries list` and the API. It shares the store's client wherever a process has both.
//! * [`mongo`] opens, checks and closes the MongoDB client the store and the trail share; the trail builds on
//!   the store, never the other way round.
//!
//! Parsing and validation of rules live in the pure core (`klaxon_core::rule`); this crate only moves
//! documents and decides when to reload them.
#![deny(missing_docs)]

pub mod cache;
mod error;
pub mod format;
mod internal_events;
pub mod invalidation;
pub mod mongo;
pub mod store;
pub mod trail;

pub use cache::{InvalidationMode, RuleCache, DEFAULT_TTL};
pub use error::RulesError;
pub use format::{export_json, import_from_json, parse_import, ProjectNotifications};
pub use mongo::check_url;
pub use store::{ProjectName, RuleStore, StoredProject};
pub use trail::{Trail, TrailReader};
