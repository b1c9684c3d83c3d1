//! What a NO_EVENTS rule's firing makes ([`crate::kind::no_events`] has the rule's decision and words): a
//! [`Silence`] (the project sent nothing for `quietPeriod`) becomes one task per channel of the rule and the
//! (rule, project)'s alert. Everything derives from (project, rule, the silence's start), so every worker and
//! every redelivered timer makes the same alert and the same notification ids, and the senders deliver each
//! once.

use crate::alert::{alert_id, Alert, AlertChannel, AlertState};
use crate::kind::no_events::title;
use crate::kind::WhatToReceive;
use crate::notification::{notification_id, NotificationEvent, NotificationTask, Reason};
use crate::rule::CompiledRule;

/// The rule's `quietPeriod` when it is an enabled NO_EVENTS rule with a channel: one the engine watches.
pub fn watched(rule: &CompiledRule) -> Option<u64> {
    match rule.what {
        WhatToReceive::NoEvents { quiet_period_ms } if rule.enabled && !rule.channels.is_empty() => {
            Some(quiet_period_ms)
        }
        _ => None,
    }
}

/// One silence that fired: a NO_EVENTS rule's project sent nothing from `since_ms` until `at_ms`. Everything
/// a firing of it makes derives from (project, rule, `since_ms`), so every worker and every redelivered timer
/// makes the same alert and the same notification ids.
#[derive(Debug, Clone, Copy)]
pub struct Silence<'a> {
    /// The project.
    pub project_id: &'a str,
    /// The project's display name, when its document has one.
    pub project_name: Option<&'a str>,
    /// The NO_EVENTS rule.
    pub rule: &'a CompiledRule,
    /// Its `quietPeriod`, ms.
    pub quiet_period_ms: u64,
    /// Since when the project has been silent: its last event, or the rule's storing ([`silent_since`]).
    pub since_ms: i64,
    /// The project's last event, when one was seen (`None`: the clock started at the rule's storing).
    pub last_event_ms: Option<i64>,
    /// When it fired, unix ms (Redis clock).
    pub at_ms: i64,
}

impl Silence<'_> {
    /// The firing token: the silence's start. Its alert id and notification ids derive from it.
    pub fn firing(&self) -> String {
        firing_token(self.since_ms)
    }

    /// What the messages show as the title (no tenant text): "No events for 1 hour".
    pub fn title(&self) -> String {
        title(self.quiet_period_ms)
    }

    /// The tasks of the firing: one per channel of the rule, about the project (group `""`, count 0), with a
    /// deterministic id per (silence, channel). Routed like any firing's (mutes, digests).
    pub fn tasks(&self) -> Vec<NotificationTask> {
        let firing = self.firing();
        let reason = Reason::NoEvents {
            quiet_period_ms: self.quiet_period_ms,
            last_event_ms: self.last_event_ms,
        };
        self.rule
            .channels
            .iter()
            .map(|ch| NotificationTask {
                notification_id: notification_id(self.project_id, &self.rule.id, "", &firing, ch.kind),
                project_id: self.project_id.to_owned(),
                project_name: self.project_name.map(str::to_owned),
                rule_id: self.rule.id.clone(),
                channel: ch.kind,
                endpoint: ch.endpoint.clone(),
                min_period_s: ch.min_period_s,
                fired_at_ms: self.at_ms,
                reason,
                events: vec![NotificationEvent::silence(self.quiet_period_ms)],
                text: None,
                send_at_ms: None,
                severity: ch.severity,
                alert: None,
            })
            .collect()
    }

    /// The alert the firing opens, as it would open: the (rule, project)'s (group `""`), never resolving by
    /// itself (`resolveAfter` 0: the project's next event resolves it).
    pub fn alert(&self) -> Alert {
        let firing = self.firing();
        Alert {
            id: alert_id(self.project_id, &self.rule.id, "", &firing),
            project_id: self.project_id.to_owned(),
            project_name: self.project_name.map(str::to_owned),
            rule_id: self.rule.id.clone(),
            group: String::new(),
            title: self.title(),
            state: AlertState::Firing,
            firing,
            fired_at_ms: self.at_ms,
            acknowledged_at_ms: None,
            acknowledged_by: None,
            resolved_at_ms: None,
            resolved_by: None,
            events: 0,
            last_event_at_ms: self.at_ms,
            resolve_after_ms: 0,
            channels: self
                .rule
                .channels
                .iter()
                .map(|ch| AlertChannel::of_rule(ch.kind, &ch.endpoint, ch.severity))
                .collect(),
            heard: Vec::new(),
            closes: Vec::new(),
        }
    }
}

/// The resolved tasks of a silence's alert (the project's next event ended it): its lifecycle tasks
/// ([`crate::alert::lifecycle_tasks`]), marked by [`mark`].
pub fn resolved_tasks(alert: &Alert, rule: Option<&CompiledRule>, at_ms: i64) -> Vec<NotificationTask> {
    let mut tasks = crate::alert::lifecycle_tasks(alert, Reason::Resolved, at_ms);
    mark(tasks.iter_mut(), rule);
    tasks
}

/// Marks the entries of a NO_EVENTS alert's lifecycle tasks (a resolve, a reminder) as the silence of `rule`'s
/// `quietPeriod`, when the rule is a NO_EVENTS rule still there to say it, so that a digest or a quiet window's
/// release lists them as a silence, as it lists the firing. Tasks of any other rule are left as they are.
pub fn mark<'t>(tasks: impl IntoIterator<Item = &'t mut NotificationTask>, rule: Option<&CompiledRule>) {
    let Some(period) = rule.and_then(|r| match r.what {
        WhatToReceive::NoEvents { quiet_period_ms } => Some(quiet_period_ms),
        _ => None,
    }) else {
        return;
    };
    for e in tasks.into_iter().flat_map(|t| t.events.iter_mut()) {
        e.silence_period_ms = Some(period);
    }
}

/// The firing token of a silence that started at `since_ms` (see [`Silence::firing`]).
pub fn firing_token(since_ms: i64) -> String {
    format!("silent:{since_ms}")
}

/// The id of the alert a silence that started at `since_ms` opened: what the project's next event resolves.
pub fn silence_alert_id(project_id: &str, rule_id: &str, since_ms: i64) -> String {
    alert_id(project_id, rule_id, "", &firing_token(since_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;

    #[test]
    fn a_no_events_alerts_reminders_and_resolves_are_marked_as_its_silence_and_no_other_rules_are() {
        let rule = |doc: serde_json::Value| crate::parse_rule_value(&doc).expect("a rule").0;
        let hook = serde_json::json!({"webhook": {"isEnabled": true, "endpoint": "https://h.test/x", "minPeriod": 0}});
        let silent = rule(
            serde_json::json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true,
            "whatToReceive": "NO_EVENTS", "quietPeriod": 3_600_000, "channels": hook}),
        );
        let counting = rule(
            serde_json::json!({"_id": "5e3eef0679fa3700a0198a4b", "isEnabled": true,
            "whatToReceive": "SEEN_MORE", "threshold": 5, "thresholdPeriod": 60_000, "channels": hook}),
        );
        let alert = Silence {
            project_id: "p",
            project_name: None,
            rule: &silent,
            quiet_period_ms: 3_600_000,
            since_ms: 0,
            last_event_ms: None,
            at_ms: H,
        }
        .alert();
        let periods = |tasks: &[NotificationTask]| {
            tasks
                .iter()
                .flat_map(|t| t.events.iter().map(|e| e.silence_period_ms))
                .collect::<Vec<_>>()
        };
        // (rule now, reason, period on every entry)
        let reminder = Reason::Reminder { number: 1, max: 3 };
        let table = [
            (Some(&silent), reminder, Some(3_600_000)),
            (Some(&silent), Reason::Resolved, Some(3_600_000)),
            (Some(&counting), reminder, None),
            (None, reminder, None),
        ];
        for (rule_now, reason, want) in table {
            let mut tasks = crate::alert::lifecycle_tasks(&alert, reason, 2 * H);
            assert!(!tasks.is_empty());
            mark(tasks.iter_mut(), rule_now);
            assert!(
                periods(&tasks).iter().all(|p| *p == want),
                "{reason:?}: {:?}",
                periods(&tasks)
            );
        }
        assert_eq!(
            periods(&resolved_tasks(&alert, Some(&silent), 2 * H)),
            vec![Some(3_600_000)]
        );
    }

    #[test]
    fn a_silence_names_the_same_alert_and_ids_every_time() {
        let doc = serde_json::json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true,
            "whatToReceive": "NO_EVENTS", "quietPeriod": 3_600_000,
            "channels": {"webhook": {"isEnabled": true, "endpoint": "https://h.test/x", "minPeriod": 0},
                         "email": {"isEnabled": true, "endpoint": "a@b.test", "minPeriod": 60}}});
        let (rule, _) = crate::parse_rule_value(&doc).expect("a rule");
        assert_eq!(watched(&rule), Some(3_600_000));
        let s = |since_ms, at_ms| Silence {
            project_id: "p",
            project_name: Some("Shop"),
            rule: &rule,
            quiet_period_ms: 3_600_000,
            since_ms,
            last_event_ms: Some(since_ms),
            at_ms,
        };
        let (a, b) = (s(0, H), s(0, H + 5_000));
        let ids = |s: &Silence<'_>| {
            s.tasks()
                .iter()
                .map(|t| t.notification_id.clone())
                .collect::<Vec<_>>()
        };
        // a redelivered timer fires later, with the same ids and the same alert
        assert_eq!(ids(&a), ids(&b));
        assert_eq!(a.alert().id, b.alert().id);
        assert_eq!(a.alert().id, silence_alert_id("p", &rule.id, 0));
        // the next silence is another alert
        assert_ne!(a.alert().id, s(2 * H, 3 * H).alert().id);
        let tasks = a.tasks();
        assert_eq!(tasks.len(), 2);
        let email = tasks
            .iter()
            .find(|t| t.channel == crate::ChannelKind::Email)
            .expect("email");
        assert_eq!(email.min_period_s, 60);
        assert_eq!(tasks[0].events[0].title, "No events for 1 hour");
        assert_eq!(tasks[0].events[0].group_hash, "");
        assert!(!tasks[0].reason.hawk_can_send() && !tasks[0].hawk_can_send());
        let json = serde_json::to_value(&tasks[0]).expect("json");
        assert_eq!(json["reason"]["type"], "noEvents");
        assert_eq!(json["reason"]["quietPeriodMs"], 3_600_000);
        let back: NotificationTask = serde_json::from_value(json).expect("a task");
        assert_eq!(back, tasks[0]);
        assert_eq!(a.alert().resolve_after_ms, 0);
        let off = crate::parse_rule_value(&serde_json::json!({"_id": "5e3eef0679fa3700a0198a4a",
            "isEnabled": false, "whatToReceive": "NO_EVENTS", "quietPeriod": 3_600_000,
            "channels": {"webhook": {"isEnabled": true, "endpoint": "https://h.test/x", "minPeriod": 0}}}))
        .expect("a rule")
        .0;
        assert_eq!(watched(&off), None);
    }
}
