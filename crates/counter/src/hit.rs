//! What is counted ([`Hit`]: the rule kind's [`Want`] for one event) and what the scripts decided ([`Outcome`],
//! defined in `klaxon-core` beside the pure decisions that read it).
//!
//! The counter takes the kind's [`Want`] as it is: which script runs follows from it (`ONLY_NEW` →
//! `lua/first_seen.lua`; `SEEN_MORE` → `lua/fixed_window.lua` or `lua/sliding_window.lua` by its window, or
//! `lua/unique_users.lua` with `uniqueUsers`; `SPIKE` → `lua/spike.lua`; `REAPPEARED` → `lua/reappeared.lua`).

use std::sync::Arc;

use klaxon_core::evaluate::Match;
pub use klaxon_core::Outcome;
use klaxon_core::Want;

/// One (rule, group, event) to count. Cheap to build and clone: the strings are shared, so the hits a worker
/// builds for the rules of one event share the event's group hash and id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// The rule's id.
    pub rule_id: Arc<str>,
    /// The event's `groupHash`.
    pub group_hash: Arc<str>,
    /// How to count: what the rule's kind asked for the event.
    pub spec: Want,
    /// The event's idempotency key (AMQP `message_id`), when it has one. With it, a redelivered event that
    /// fired fires again with the same token, and a sliding window does not count it twice. An empty id
    /// counts as none.
    pub event_id: Option<Arc<str>>,
    /// The event's user id, counted by [`Want::UniqueUsers`] (ignored by the other wants). An empty id counts
    /// as none.
    pub user: Option<Arc<str>>,
    /// The project of the rule. Part of the keys, so that a rule id that two projects share (a copied
    /// document) never shares their windows or first-seen marks. `None` keeps the keys of the rule alone.
    pub project_id: Option<Arc<str>>,
}

impl Hit {
    /// A hit without an event id.
    pub fn new(rule_id: impl Into<Arc<str>>, group_hash: impl Into<Arc<str>>, spec: Want) -> Self {
        Hit {
            rule_id: rule_id.into(),
            group_hash: group_hash.into(),
            spec,
            event_id: None,
            user: None,
            project_id: None,
        }
    }

    /// Marks the event as a group's first occurrence (`isNew`), which only a REAPPEARED want reads (its
    /// [`Want::Reappeared`]`::is_new`); other wants are left as they are.
    pub fn with_new(mut self, is_new: bool) -> Self {
        if let Want::Reappeared { is_new: new, .. } = &mut self.spec {
            *new = is_new;
        }
        self
    }

    /// Whether the event is a group's first occurrence, as far as the want says (REAPPEARED's alone).
    pub fn is_new(&self) -> bool {
        matches!(self.spec, Want::Reappeared { is_new: true, .. })
    }

    /// Sets the rule's project (the worker always does).
    pub fn with_project(mut self, project_id: impl Into<Arc<str>>) -> Self {
        self.project_id = Some(project_id.into());
        self
    }

    /// Sets the event's user id (what a [`Want::UniqueUsers`] hit counts).
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
/// event's group, project and idempotency key, and its user when the rule counts users (the want carries
/// `isNew` already, for REAPPEARED).
impl From<&Match<'_>> for Hit {
    fn from(m: &Match<'_>) -> Self {
        let (task, id) = (&m.event.task, &m.event.id);
        let mut hit = Hit::new(m.rule.id.as_str(), task.event.group_hash.as_str(), m.want)
            .with_project(task.project_id.as_str());
        if let Some(id) = id {
            hit = hit.with_event_id(id.as_str());
        }
        if let (Want::UniqueUsers { .. }, Some(user)) = (m.want, &task.event.user) {
            hit = hit.with_user(user.as_str());
        }
        hit
    }
}
