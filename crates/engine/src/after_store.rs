//! The one step after rules are stored through Klaxon (`PUT /api/v1/projects/{projectId}/rules`, the console's
//! edit page, `klaxon rules add|import`): a project's watched NO_EVENTS rules start their clock at their storing
//! when the project has sent no event yet (the contract). The callers hand over the typed rules they just
//! stored ([`Stored`]); this decides whether anything is to arm ([`Stored::arms`]) and makes the timers
//! ([`arm`]), which the caller publishes through the delay engine with the handles it has.

use std::time::Duration;

use klaxon_broker::{Outgoing, Topology};
use klaxon_core::ProjectRules;
use klaxon_counter::NoEvents;

use crate::no_events::watched_of;
use crate::EngineError;

/// One project's rules just stored, as the engine reads them.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The project (24-hex).
    pub project_id: String,
    /// Its rules, validated and compiled (for a stored project document:
    /// `klaxon_store::ProjectNotifications::rules`).
    pub rules: ProjectRules,
}

impl Stored {
    /// Whether the project has a watched NO_EVENTS rule: only then is Redis or RabbitMQ needed.
    pub fn arms(&self) -> bool {
        !watched_of(&self.rules).is_empty()
    }
}

/// The timers that start the clock of the watched NO_EVENTS rules of each stored project that has sent no
/// event yet (a second storing does not restart a clock; a pending timer is kept, moved earlier when the
/// `quietPeriod` shrank: `crate::no_events::arm`). None when no project [`Stored::arms`].
pub async fn arm(
    no_events: &NoEvents,
    topology: &Topology,
    stored: &[Stored],
) -> Result<Vec<(Outgoing, Duration)>, EngineError> {
    let mut timers = Vec::new();
    for s in stored.iter().filter(|s| s.arms()) {
        timers.extend(crate::no_events::arm(no_events, topology, &s.project_id, &s.rules).await?);
    }
    Ok(timers)
}
