//! What is counted ([`Hit`], [`HitSpec`]) and what the scripts decided ([`Outcome`], defined in `klaxon-core`
//! beside the pure decisions that read it).

use std::sync::Arc;

use klaxon_core::evaluate::Match;
pub use klaxon_core::Outcome;
use klaxon_core::{Spike, Want, Window};

/// How one hit is counted: which script, with which parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HitSpec {
    /// `ONLY_NEW`: fire once per (rule, group) (`lua/first_seen.lua`).
    FirstSeen,
    /// `SEEN_MORE` with Hawk's fixed window (`lua/fixed_window.lua`).
    Fixed {
        /// The count that fires (≥ 1).
        threshold: u64,
        /// Window length in ms (≥ 1).
        period_ms: u64,
    },
    /// `SEEN_MORE` with a trailing window and a cooldown (`lua/sliding_window.lua`).
    Sliding {
        /// The count in the trailing window that fires (≥ 1).
        threshold: u64,
        /// Window length and cooldown in ms (≥ 1).
        period_ms: u64,
    },
    /// `SEEN_MORE` with `uniqueUsers`: distinct users in a fixed or sliding window (`lua/unique_users.lua`).
    /// The hit's [`Hit::user`] is what is counted; a hit without one is not counted.
    UniqueUsers {
        /// Distinct users that fire (≥ 1).
        threshold: u64,
        /// Window length (and, sliding, cooldown) in ms (≥ 1).
        period_ms: u64,
        /// Fixed or sliding, with the semantics of the event-count windows.
        window: Window,
    },
    /// `SPIKE`: the current bucket's count against its own baseline (`lua/spike.lua`).
    Spike(Spike),
    /// `REAPPEARED`: a group seen again after a quiet (`lua/reappeared.lua`). The hit's [`Hit::is_new`] says
    /// whether its event is a first occurrence.
    Reappeared {
        /// The quiet that makes a sighting a reappearance, ms (≥ 1).
        quiet_period_ms: u64,
        /// Since when the rule watches groups, unix ms.
        armed_at_ms: i64,
    },
}

impl From<Want> for HitSpec {
    fn from(want: Want) -> Self {
        match want {
            Want::FirstSeen => HitSpec::FirstSeen,
            Want::Count {
                threshold,
                period_ms,
                window: Window::Fixed,
            } => HitSpec::Fixed { threshold, period_ms },
            Want::Count {
                threshold,
                period_ms,
                window: Window::Sliding,
            } => HitSpec::Sliding { threshold, period_ms },
            Want::UniqueUsers {
                threshold,
                period_ms,
                window,
            } => HitSpec::UniqueUsers {
                threshold,
                period_ms,
                window,
            },
            Want::Spike(spike) => HitSpec::Spike(spike),
            Want::Reappeared {
                quiet_period_ms,
                armed_at_ms,
                ..
            } => HitSpec::Reappeared {
                quiet_period_ms,
                armed_at_ms,
            },
        }
    }
}

/// One (rule, group, event) to count. Cheap to build and clone: the strings are shared, so the hits a worker
/// builds for the rules of one event share the event's group hash and id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// The rule's id.
    pub rule_id: Arc<str>,
    /// The event's `groupHash`.
    pub group_hash: Arc<str>,
    /// How to count.
    pub spec: HitSpec,
    /// The event's idempotency key (AMQP `message_id`), when it has one. With it, a redelivered event that
    /// fired fires again with the same token, and a sliding window does not count it twice. An empty id
    /// counts as none.
    pub event_id: Option<Arc<str>>,
    /// The event's user id, counted by [`HitSpec::UniqueUsers`] (ignored by the other specs). An empty id
    /// counts as none.
    pub user: Option<Arc<str>>,
    /// The project of the rule. Part of the keys, so that a rule id that two projects share (a copied
    /// document) never shares their windows or first-seen marks. `None` keeps the keys of the rule alone.
    pub project_id: Option<Arc<str>>,
    /// The event is a group's first occurrence (`isNew`); read by [`HitSpec::Reappeared`] only.
    pub is_new: bool,
}

impl Hit {
    /// A hit without an event id.
    pub fn new(rule_id: impl Into<Arc<str>>, group_hash: impl Into<Arc<str>>, spec: HitSpec) -> Self {
        Hit {
            rule_id: rule_id.into(),
            group_hash: group_hash.into(),
            spec,
            event_id: None,
            user: None,
            project_id: None,
            is_new: false,
        }
    }

    /// Marks the event as a group's first occurrence (`isNew`).
    pub fn with_new(mut self, is_new: bool) -> Self {
        self.is_new = is_new;
        self
    }

    /// Sets the rule's project (the worker always does).
    pub fn with_project(mut self, project_id: impl Into<Arc<str>>) -> Self {
        self.project_id = Some(project_id.into());
        self
    }

    /// Sets the event's user id (what a [`HitSpec::UniqueUsers`] hit counts).
    pub fn with_user(mut self, user: impl Into<Arc<str>>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Sets the event's idempotency key.
    pub fn with_event_id(mut self, event_id: impl Into<Arc<str>>) -> Self {
        self.event_id = Some(event_id.into());
        self
    }
}

/// The hit of one (event, rule) pair the worker matched ([`klaxon_core::evaluate::plan`]): the rule's id, the
/// event's group, project and idempotency key, and its user when the rule counts users.
impl From<&Match<'_>> for Hit {
    fn from(m: &Match<'_>) -> Self {
        let (task, id) = (&m.event.task, &m.event.id);
        let mut hit = Hit::new(
            m.rule.id.as_str(),
            task.event.group_hash.as_str(),
            HitSpec::from(m.want),
        )
        .with_project(task.project_id.as_str());
        if let Some(id) = id {
            hit = hit.with_event_id(id.as_str());
        }
        if let (Want::UniqueUsers { .. }, Some(user)) = (m.want, &task.event.user) {
            hit = hit.with_user(user.as_str());
        }
        hit.with_new(task.event.is_new)
    }
}
