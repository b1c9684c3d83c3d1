//! Klaxon's pure core.
//!
//! Everything here is free of I/O: no async runtime, no clients, and time is always a parameter. The
//! adapters (`klaxon-counter` for Redis, `klaxon-store` for MongoDB, `klaxon-broker` for RabbitMQ,
//! `klaxon-channels` for the delivery APIs) turn the outside world into these types, and `klaxon-engine`
//! wires them together:
//!
//! ```text
//! AMQP body ──parse──▶ EventTask ──rules(project)──▶ CompiledRule::wants(event)? ──▶ Hit
//!   Hit ──counter (Redis Lua)──▶ fired? ──▶ NotificationTask (one per enabled channel) ──▶ sender
//! ```
//!
//! The worker's decisions for a whole batch — which (event, rule) pairs to count, and what the counter's answers
//! and the mutes make of them — are [`evaluate::plan`] and [`evaluate::route`].
//! [`explain`] answers "what would this event do?" with the same decision (`CompiledRule::decide`) and a
//! reading of the counter's state ([`explain::Peek`]) into a [`Verdict`] per rule, counting nothing: the API,
//! the console and `klaxon explain` print it.
//!
//! Each rule kind (`whatToReceive`) is one module of [`kind`]: its fields, defaults, limits and problems, what it
//! asks the counter ([`rule::Want`]), its firing decision and its words. [`problem`] and [`field`] sit below the
//! kinds, [`rule`] above them. A rule's on-call fields (`renotify`, `escalation`, `quietHours`) and the schedule
//! decisions the engine takes with them (when a reminder or a step is due, until when a firing is held) are
//! [`oncall`]. The wall clock is read in one place, [`clock`], by the callers at the edge.
#![deny(missing_docs)]

pub mod action;
pub mod alert;
pub mod clock;
pub mod evaluate;
pub mod event;
pub mod explain;
pub mod field;
pub mod filter;
pub mod kind;
pub mod limits;
pub mod mute;
pub mod notification;
pub mod oncall;
pub mod priority;
pub mod problem;
pub mod route;
pub mod rule;
pub mod silence;
pub mod text;

pub use evaluate::{BatchEvent, Outcome};
pub use event::{Event, EventTask, InvalidEvent};
pub use explain::{Explanation, RuleVerdict, Verdict};
pub use filter::{Case, FilterMiss, Title, TitleFilter};
pub use kind::{Baseline, Kind, Signal};
pub use limits::Limits;
pub use notification::{
    notification_id, DigestWindow, Firing, FiringTasks, NotificationEvent, NotificationTask, Reason,
};
pub use oncall::{EscalationStep, QuietHours, QuietWindow, Renotify};
pub use rule::{
    parse_rule_value, parse_rule_value_with, rule_problems, ChannelConfig, ChannelKind, CompiledRule,
    ProjectRules, RawRule, RuleDefaults, RuleProblem, Severity, Skip, Spike, Unevaluated, Want,
    WhatToReceive, Window,
};
