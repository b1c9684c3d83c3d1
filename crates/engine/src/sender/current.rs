//! Decided at send time: a reminder or an escalation step is about an alert still firing when it was published,
//! but it may wait a long time behind a paced channel (a rate limit, a throttled endpoint, retries) and the alert
//! may be acknowledged or resolved meanwhile, its rule deleted, switched off or its channel removed. So the sender
//! reads the alert again ([`klaxon_counter::Alerts::get`], one Redis call) and the rule as it is now (the
//! process's rule cache, [`RulesNow`]) before it takes anything for such a task — a dedup lease, a rate-limit
//! slot — and reads the alert once more after waiting for a reserved rate-limit slot. An alert acknowledged,
//! resolved or gone, a rule deleted or disabled, a channel no longer the rule's (or the step's) means the task is
//! dropped: acked, not delivered, counted and recorded in the delivery trail (`dropped`).
//!
//! Only reminders and escalation steps are checked: a firing is what opened the alert, and the resolved and
//! acknowledged messages are *about* the alert being resolved or acknowledged (they reach its channels also
//! after its rule is gone).

use std::sync::{Arc, OnceLock};

use klaxon_core::rule::ProjectRules;
use klaxon_core::{NotificationTask, Reason};
use klaxon_store::RuleCache;

use super::SenderDeps;

/// The rules as they are now, for the senders: the process's rule cache once its rule store is connected (the
/// worker's cache in `klaxon run`; the trail's store in `klaxon sender`: never a second MongoDB client). Until it
/// is set, tasks are decided by their alert alone. Cheap to clone: clones share the cache.
#[derive(Clone, Default)]
pub struct RulesNow(Arc<OnceLock<RuleCache>>);

impl RulesNow {
    /// None yet: [`RulesNow::set`] gives the cache.
    pub fn new() -> Self {
        RulesNow::default()
    }

    /// The cache to read rules from, from now on (a second call changes nothing).
    pub fn set(&self, cache: RuleCache) {
        let _ = self.0.set(cache);
    }

    fn get(&self) -> Option<&RuleCache> {
        self.0.get()
    }
}

impl std::fmt::Debug for RulesNow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RulesNow")
            .field("set", &self.0.get().is_some())
            .finish()
    }
}

/// Why a task is not sent at all: one list with the route's ([`klaxon_core::route::DropReason`]).
pub(crate) use klaxon_core::route::DropReason as Dropped;

/// Whether `task` is decided at send time: a reminder or an escalation step of an alert.
pub(super) fn checked(task: &NotificationTask) -> bool {
    task.alert.is_some() && matches!(task.reason, Reason::Reminder { .. } | Reason::Escalation { .. })
}

/// What the project's rules as they are now say of a [`checked`] task: `Some(why)` when it is not to be sent (the
/// route's own question, [`klaxon_core::route::still_sent_by`]).
pub(super) fn rule_verdict(task: &NotificationTask, rules: &ProjectRules) -> Option<Dropped> {
    let rule = rules.rules.iter().find(|r| r.id == task.rule_id);
    klaxon_core::route::still_sent_by(task, rule).err()
}

/// Reads `task`'s alert (and, with `rules`, its rule) when the task is [`checked`]: `Ok(Some(why))` drops it,
/// `Ok(None)` lets it go on (also a task that is not checked), `Err` when Redis cannot say (the caller waits and
/// asks again rather than send a reminder nobody may want, or drop one somebody needs). Rules that cannot be read
/// now (MongoDB down, nothing cached) decide nothing: the alert alone does.
pub(super) async fn dropped(
    deps: &SenderDeps,
    task: &NotificationTask,
    rules: bool,
) -> Result<Option<Dropped>, klaxon_counter::CounterError> {
    let Some(alert) = task.alert.as_ref().filter(|_| checked(task)) else {
        return Ok(None);
    };
    let now = deps.alerts.get(&task.project_id, &alert.id).await?;
    if let Some(why) = Dropped::of_alert(now.map(|a| a.state)) {
        return Ok(Some(why));
    }
    let Some(cache) = deps.rules.get().filter(|_| rules) else {
        return Ok(None);
    };
    match cache.get(&task.project_id).await {
        Ok(project) => Ok(rule_verdict(task, &project)),
        Err(e) => {
            tracing::debug!(notification_id = %crate::internal_events::text(&task.notification_id), error = %e,
                "rules unavailable: the reminder is decided by its alert alone");
            Ok(None)
        }
    }
}

/// Whether a reminder is over its project's budget of reminders this hour ([`SenderDeps::reminder_budget`], 0
/// = none): `Some(ReminderBudget)` drops it. The unit is taken once per notification id (a reminder that waits
/// and asks again takes nothing more). Redis failing decides nothing: the dedup claim right after waits for it.
pub(super) async fn over_budget(deps: &SenderDeps, task: &NotificationTask) -> Option<Dropped> {
    if deps.reminder_budget == 0 || !matches!(task.reason, Reason::Reminder { .. }) {
        return None;
    }
    let now = klaxon_store::trail::now_ms();
    match deps
        .budgets
        .take_reminder(&task.project_id, &task.notification_id, deps.reminder_budget, now)
        .await
    {
        Ok(true) => None,
        Ok(false) => Some(Dropped::ReminderBudget),
        Err(e) => {
            tracing::debug!(notification_id = %crate::internal_events::text(&task.notification_id), error = %e,
                "reminder budget unavailable: the reminder goes on");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaxon_core::alert::{AlertRef, AlertState};
    use klaxon_core::ChannelKind;
    use serde_json::{json, Value};

    fn task(reason: Reason, alert: bool) -> NotificationTask {
        NotificationTask {
            notification_id: "n".into(),
            project_id: "p".into(),
            project_name: None,
            rule_id: "r".into(),
            channel: ChannelKind::Webhook,
            endpoint: "https://x.test/".into(),
            min_period_s: 0,
            fired_at_ms: 1,
            reason,
            events: Vec::new(),
            text: None,
            send_at_ms: None,
            severity: None,
            alert: alert.then(|| AlertRef {
                id: "a".into(),
                state: AlertState::Firing,
                opened_at_ms: 1,
                events: 1,
                by: None,
                firing_notification_id: "f".into(),
            }),
        }
    }

    #[test]
    fn which_tasks_are_decided_at_send_time() {
        let reminder = Reason::Reminder { number: 1, max: 3 };
        let step = Reason::Escalation { step: 1, steps: 2 };
        // (reason, has an alert, checked)
        let table = [
            (reminder, true, true),
            (step, true, true),
            (reminder, false, false),
            (step, false, false),
            (Reason::New, true, false),
            (Reason::Resolved, true, false),
            (Reason::Acknowledged, true, false),
            (Reason::Direct, false, false),
        ];
        for (reason, alert, want) in table {
            assert_eq!(checked(&task(reason, alert)), want, "{reason:?} alert={alert}");
        }
    }

    #[test]
    fn what_the_rule_says_now() {
        let endpoint = "https://x.test/";
        let hook = |url: &str| json!({"webhook": {"isEnabled": true, "endpoint": url, "minPeriod": 0}});
        let rules = |enabled: bool, channels: Value, steps: Value| {
            let rule = json!({
                "_id": "r", "isEnabled": enabled, "whatToReceive": "SEEN_MORE", "including": [], "excluding": [],
                "threshold": 2, "thresholdPeriod": 60_000, "channels": channels, "escalation": steps,
            });
            let project = ProjectRules::from_notifications(Some(&json!([rule])));
            assert_eq!(project.rules.len(), 1, "{:?}", project.problems);
            project
        };
        let step = |url: &str| json!([{"after": 60_000, "channels": hook(url)}]);
        let reminder = Reason::Reminder { number: 1, max: 3 };
        let first_step = Reason::Escalation { step: 1, steps: 1 };
        let second_step = Reason::Escalation { step: 2, steps: 2 };
        let no_rules = ProjectRules::from_notifications(Some(&json!([])));
        // (task's reason, the project's rules now, verdict)
        let table = [
            (reminder, rules(true, hook(endpoint), step(endpoint)), None),
            (
                first_step,
                rules(true, hook("https://other.test/"), step(endpoint)),
                None,
            ),
            (reminder, no_rules.clone(), Some(Dropped::RuleGone)),
            (first_step, no_rules, Some(Dropped::RuleGone)),
            (
                reminder,
                rules(false, hook(endpoint), step(endpoint)),
                Some(Dropped::RuleDisabled),
            ),
            (
                reminder,
                rules(true, hook("https://other.test/"), step(endpoint)),
                Some(Dropped::ChannelRemoved),
            ),
            (
                first_step,
                rules(true, hook(endpoint), step("https://other.test/")),
                Some(Dropped::ChannelRemoved),
            ),
            (
                second_step,
                rules(true, hook(endpoint), step(endpoint)),
                Some(Dropped::ChannelRemoved),
            ),
        ];
        for (reason, project, want) in table {
            assert_eq!(rule_verdict(&task(reason, true), &project), want, "{reason:?}");
        }
    }

    #[test]
    fn what_the_alert_says_now() {
        // (the alert's state now, verdict)
        let table = [
            (None, Some(Dropped::AlertGone)),
            (Some(AlertState::Firing), None),
            (Some(AlertState::Acknowledged), Some(Dropped::Acknowledged)),
            (Some(AlertState::Resolved), Some(Dropped::Resolved)),
        ];
        for (now, want) in table {
            assert_eq!(Dropped::of_alert(now), want, "{now:?}");
        }
        let all = [
            Dropped::Acknowledged,
            Dropped::Resolved,
            Dropped::AlertGone,
            Dropped::RuleGone,
            Dropped::RuleDisabled,
            Dropped::ChannelRemoved,
            Dropped::ReminderBudget,
        ];
        let labels: Vec<&str> = all.iter().map(|d| d.as_str()).collect();
        assert_eq!(
            labels,
            [
                "acknowledged",
                "resolved",
                "alert_gone",
                "rule_gone",
                "rule_disabled",
                "channel_removed",
                "reminder_budget"
            ]
        );
    }
}
