//! What is counted ([`Hit`], [`HitSpec`]) and what the scripts decided ([`Outcome`]).

use std::sync::Arc;

use klaxon_core::{Want, Window};

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
        }
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

/// What the script decided for one hit.
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
        /// ms (unique users alike), first-seen = `"new"`. Feed it to `klaxon_core::notification_id` for a deterministic id.
        firing: String,
        /// When it fired, ms since the epoch (Redis clock, or the injected `now`).
        at_ms: i64,
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
