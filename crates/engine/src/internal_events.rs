//! Internal events (vector's `src/internal_events/`): one struct per occurrence that both logs and counts, so the
//! log line and its metric cannot drift apart. Occurrences that are only counted (Redis and broker failures —
//! the session's end logs the error —, matches, publications) are structs too: the loops count nothing inline.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use klaxon_core::notification::{Firing, NotificationTask};
use klaxon_core::{ChannelKind, Unevaluated};

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The most bytes of one tenant-written field (an id, a group) in a log line.
const MAX_FIELD_BYTES: usize = 256;

/// Tenant text as a log field: on one line (newlines, carriage returns, escapes and other control characters
/// become spaces) and bounded, so a group, a title or an id read from a message cannot forge a log line.
pub(crate) fn text(s: &str) -> String {
    klaxon_core::text::one_line(s, MAX_FIELD_BYTES)
}

fn delivery(channel: ChannelKind, outcome: &'static str) {
    metrics::counter!("klaxon_deliveries_total", "channel" => channel.as_str(), "outcome" => outcome)
        .increment(1);
}

/// A batch taken from the events queue.
pub(crate) struct EventsConsumed {
    pub events: usize,
}

impl EventsConsumed {
    pub fn emit(self) {
        metrics::counter!("klaxon_events_consumed_total").increment(self.events as u64);
    }
}

/// A batch acked with one multiple-ack once every outcome of it was durable, `elapsed` after its first delivery
/// arrived.
pub(crate) struct BatchAcked {
    pub events: usize,
    pub elapsed: Duration,
}

impl BatchAcked {
    pub fn emit(self) {
        metrics::counter!("klaxon_events_acked_total").increment(self.events as u64);
        metrics::histogram!(crate::metrics::BATCH_SIZE).record(self.events as f64);
        metrics::histogram!(crate::metrics::BATCH_SECONDS).record(self.elapsed.as_secs_f64());
    }
}

/// The (event, rule) pairs of a batch that passed the rules' filters and go to the counter.
pub(crate) struct RulesMatched {
    pub pairs: usize,
}

impl RulesMatched {
    pub fn emit(self) {
        metrics::counter!("klaxon_rules_matched_total").increment(self.pairs as u64);
    }
}

/// The rules of a batch's projects could not be loaded (and none were cached): the batch goes back.
pub(crate) struct RulesUnavailable;

impl RulesUnavailable {
    pub fn emit(self) {
        metrics::counter!("klaxon_rules_errors_total").increment(1);
    }
}

/// A Redis call failed; the loop's session ends and logs the error.
pub(crate) struct RedisFailed;

impl RedisFailed {
    pub fn emit(self) {
        metrics::counter!("klaxon_redis_errors_total").increment(1);
    }
}

/// A RabbitMQ call failed; the loop's session ends and logs the error.
pub(crate) struct BrokerFailed;

impl BrokerFailed {
    pub fn emit(self) {
        metrics::counter!("klaxon_broker_errors_total").increment(1);
    }
}

/// A rule fired and no mute matched: a threshold crossed, delivered on every channel of the rule.
pub(crate) struct ThresholdCrossed<'a> {
    pub firing: &'a Firing<'a>,
}

impl ThresholdCrossed<'_> {
    pub fn emit(self) {
        metrics::counter!("klaxon_thresholds_crossed_total", "window" => self.firing.want.label())
            .increment(1);
    }
}

/// A firing's notification task for one channel; one of a digest channel (`minPeriod > 0`) goes through the
/// channel's digest and is counted as a digest firing.
pub(crate) struct RuleFired<'a> {
    pub task: &'a NotificationTask,
}

impl RuleFired<'_> {
    pub fn emit(self) {
        let t = self.task;
        tracing::info!(
            notification_id = %text(&t.notification_id), project = %text(&t.project_id), rule = %text(&t.rule_id),
            channel = %t.channel, count = t.events.first().map_or(0, |e| e.count), "rule fired"
        );
        if t.min_period_s > 0 {
            metrics::counter!("klaxon_digest_firings_total", "channel" => t.channel.as_str()).increment(1);
        }
    }
}

/// A notification task going to its sender queue (Klaxon's or Hawk's) with the batch's publish.
pub(crate) struct NotificationPublished<'a> {
    pub task: &'a NotificationTask,
}

impl NotificationPublished<'_> {
    pub fn emit(self) {
        metrics::counter!("klaxon_notifications_published_total", "channel" => self.task.channel.as_str())
            .increment(1);
    }
}

/// A digest window's one notification, published (confirmed) by the flush loop.
pub(crate) struct DigestPublished<'a> {
    pub task: &'a NotificationTask,
    pub window_start_ms: i64,
}

impl DigestPublished<'_> {
    pub fn emit(self) {
        let t = self.task;
        metrics::counter!("klaxon_digests_published_total", "channel" => t.channel.as_str()).increment(1);
        tracing::info!(
            notification_id = %text(&t.notification_id), project = %text(&t.project_id), rule = %text(&t.rule_id),
            channel = %t.channel, groups = t.events.len(),
            resolved = t.held_parts().map_or(0, |(_, r)| r.len()), window_start_ms = self.window_start_ms,
            "digest published"
        );
    }
}

/// A message held by a quiet window (`quietHours`): a firing, or a resolve or reminder of an alert.
pub(crate) struct QuietHeld<'a> {
    pub task: &'a NotificationTask,
    pub entry: klaxon_counter::HeldEntry,
}

impl QuietHeld<'_> {
    pub fn emit(self) {
        let t = self.task;
        let what = match self.entry {
            klaxon_counter::HeldEntry::Fired => "fired",
            klaxon_counter::HeldEntry::Resolved => "resolved",
        };
        metrics::counter!("klaxon_quiet_held_total", "channel" => t.channel.as_str(), "what" => what)
            .increment(1);
        tracing::info!(
            notification_id = %text(&t.notification_id), project = %text(&t.project_id), rule = %text(&t.rule_id),
            channel = %t.channel, what, "held by quiet hours"
        );
    }
}

/// A quiet window's one message on a channel, published (confirmed) when the window ended.
pub(crate) struct QuietReleased<'a> {
    pub task: &'a NotificationTask,
    pub fired: usize,
    pub resolved: usize,
}

impl QuietReleased<'_> {
    pub fn emit(self) {
        let t = self.task;
        metrics::counter!("klaxon_quiet_released_total", "channel" => t.channel.as_str()).increment(1);
        let more = t.unlisted();
        tracing::info!(
            notification_id = %text(&t.notification_id), project = %text(&t.project_id), rule = %text(&t.rule_id),
            channel = %t.channel, fired = self.fired, resolved = self.resolved, more_fired = more.fired,
            more_resolved = more.resolved, "quiet hours over: held messages released"
        );
    }
}

/// An event that is not a valid event task, set aside to `<ns>.events.invalid`.
pub(crate) struct EventInvalid<'a> {
    pub reason: &'a dyn std::fmt::Display,
    pub bytes: usize,
}

impl EventInvalid<'_> {
    pub fn emit(self) {
        tracing::warn!(reason = %klaxon_core::text::reason(&self.reason.to_string()), bytes = self.bytes, "invalid event set aside");
        metrics::counter!("klaxon_events_invalid_total").increment(1);
    }
}

/// Events of one project that led to no evaluation in a batch (see [`Unevaluated`]): counted by reason, and
/// logged at info when `log` says this project has not been logged within the interval (see [`LogOnce`]).
pub(crate) struct EventsUnmatched<'a> {
    pub project: &'a str,
    pub reason: Unevaluated,
    pub events: u64,
    /// The rule database that was read, named in the log line (the most common cause is the wrong one).
    pub database: &'a str,
    pub log: bool,
}

impl EventsUnmatched<'_> {
    pub fn emit(self) {
        metrics::counter!("klaxon_events_unmatched_total", "reason" => self.reason.as_str())
            .increment(self.events);
        if self.log {
            tracing::info!(
                project = %text(self.project), reason = self.reason.as_str(), events = self.events,
                database = %self.database, hint = self.reason.hint(),
                logged_every_min = UNMATCHED_LOG_INTERVAL.as_secs() / 60,
                "events not evaluated: no rule can fire for this project"
            );
        }
    }
}

/// How often a project's unmatched events are logged at most.
pub(crate) const UNMATCHED_LOG_INTERVAL: Duration = Duration::from_secs(600);
/// Most projects [`LogOnce`] remembers.
pub(crate) const UNMATCHED_LOG_KEYS: usize = 10_000;

/// Remembers which keys were logged in the last `interval`, so a log line is written once per key per interval.
/// Bounded: past `max` keys it forgets the ones whose interval has passed, and while it is still full, new keys
/// are not logged (their events are still counted by the metric) until room comes back.
pub(crate) struct LogOnce {
    interval: Duration,
    max: usize,
    seen: Mutex<HashMap<String, Instant>>,
}

impl LogOnce {
    pub fn new(interval: Duration, max: usize) -> Self {
        LogOnce {
            interval,
            max,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// True when `key` should be logged at `now` (and then remembered as logged at `now`).
    pub fn should_log(&self, key: &str, now: Instant) -> bool {
        let Ok(mut seen) = self.seen.lock() else {
            return false;
        };
        let due = |at: &Instant| now.saturating_duration_since(*at) >= self.interval;
        match seen.get_mut(key) {
            Some(at) if due(at) => {
                *at = now;
                true
            }
            Some(_) => false,
            None => {
                if seen.len() >= self.max {
                    seen.retain(|_, at| !due(at));
                }
                if seen.len() >= self.max {
                    return false;
                }
                seen.insert(key.to_owned(), now);
                true
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.seen.lock().map(|s| s.len()).unwrap_or(0)
    }
}

/// A notification shadow mode (`--output shadow`) did not send; its trail record is written by the caller.
pub(crate) struct NotificationShadowed<'a> {
    pub task: &'a NotificationTask,
}

impl NotificationShadowed<'_> {
    pub fn emit(self) {
        let t = self.task;
        metrics::counter!("klaxon_notifications_shadowed_total", "channel" => t.channel.as_str())
            .increment(1);
        tracing::info!(
            notification_id = %text(&t.notification_id), project = %text(&t.project_id), rule = %text(&t.rule_id),
            channel = %t.channel, events = t.events.len(), "shadow: would send (not sent)"
        );
    }
}

/// Why a message of an alert's life was not sent: [`klaxon_core::route::DropReason`].
pub(crate) use klaxon_core::route::DropReason as NotSent;

/// A message of an alert's life (resolved, acknowledged, a reminder, an escalation) that was not sent: the alert
/// is tracked as usual, its channels are not told.
pub(crate) struct AlertMessageNotSent<'a> {
    pub task: &'a NotificationTask,
    pub reason: NotSent,
}

impl AlertMessageNotSent<'_> {
    pub fn emit(self) {
        let t = self.task;
        metrics::counter!("klaxon_alert_messages_not_sent_total", "reason" => self.reason.as_str())
            .increment(1);
        let what = match t.reason {
            klaxon_core::Reason::Resolved => "resolved",
            klaxon_core::Reason::Acknowledged => "acknowledged",
            klaxon_core::Reason::Reminder { .. } => "reminder",
            klaxon_core::Reason::Escalation { .. } => "escalation",
            klaxon_core::Reason::NoEvents { .. } => "no_events",
            _ => "firing",
        };
        tracing::info!(
            notification_id = %text(&t.notification_id), project = %text(&t.project_id), rule = %text(&t.rule_id),
            channel = %t.channel, alert = %text(t.alert.as_ref().map_or("", |a| a.id.as_str())), what,
            reason = self.reason.as_str(),
            "alert message not sent: --output hawk publishes firings of event groups only (Hawk's senders know no \
             other task)"
        );
    }
}

/// A firing counted but not delivered because a mute matched.
pub(crate) struct FiringMuted<'a> {
    pub project: &'a str,
    pub rule: &'a str,
}

impl FiringMuted<'_> {
    pub fn emit(self) {
        metrics::counter!("klaxon_firings_muted_total").increment(1);
        tracing::info!(project = %text(self.project), rule = %text(self.rule), "firing muted");
    }
}

/// A project that fired has more mutes than `--max-mutes-per-project`: the ones past the limit were not read,
/// so they are not applied. Counted on every read, logged once per (project, unread count).
pub(crate) struct MutesSkipped<'a> {
    pub project: &'a str,
    pub unread: u64,
    pub limit: usize,
    /// The first time this process sees it.
    pub first: bool,
}

impl MutesSkipped<'_> {
    pub fn emit(self) {
        metrics::counter!("klaxon_mutes_skipped_total").increment(self.unread);
        if self.first {
            tracing::warn!(
                project = %text(self.project), limit = self.limit, unread = self.unread,
                "the project has more mutes than --max-mutes-per-project: only the first ones read are applied; \
                 delete mutes or let them expire"
            );
        } else {
            tracing::debug!(project = %text(self.project), unread = self.unread, "mutes over the limit not read");
        }
    }
}

/// A firing opened a new alert.
pub(crate) struct AlertOpened<'a> {
    pub alert: &'a klaxon_core::alert::Alert,
}

impl AlertOpened<'_> {
    pub fn emit(self) {
        let a = self.alert;
        metrics::counter!("klaxon_alerts_opened_total").increment(1);
        tracing::info!(
            alert_id = %text(&a.id), project = %text(&a.project_id), rule = %text(&a.rule_id), group = %text(&a.group),
            resolve_after_ms = a.resolve_after_ms, channels = a.channels.len(), "alert opened"
        );
    }
}

/// A firing delivered without an alert: its project keeps as many alerts as it may, all open, or the alert
/// resolves only by hand and such alerts hold their share (`limit`: the bound that was reached). Counted every
/// time, logged when `log` (once per project per interval).
pub(crate) struct AlertNotOpened<'a> {
    pub project: &'a str,
    pub rule: &'a str,
    pub why: klaxon_counter::NotOpened,
    pub limit: usize,
    pub log: bool,
}

impl AlertNotOpened<'_> {
    pub fn emit(self) {
        metrics::counter!("klaxon_alerts_not_opened_total", "reason" => self.why.as_str()).increment(1);
        if self.log {
            match self.why {
                klaxon_counter::NotOpened::ProjectFull => tracing::warn!(
                    project = %text(self.project), rule = %text(self.rule), limit = self.limit,
                    "the project has as many open alerts as it may keep: the firing is delivered without an \
                     alert (resolve some, or they resolve by themselves)"
                ),
                klaxon_counter::NotOpened::ByHandShare => tracing::warn!(
                    project = %text(self.project), rule = %text(self.rule), limit = self.limit,
                    "the project's alerts that resolve only by hand (resolveAfter 0) hold their share of its \
                     slots: the firing is delivered without an alert (resolve some by hand, or give the rule a \
                     resolveAfter)"
                ),
            }
        }
    }
}

/// An alert resolved (`by`: `timeout` for `resolveAfter`), its resolved messages published on `channels`
/// channels.
pub(crate) struct AlertResolved<'a> {
    pub alert: &'a klaxon_core::alert::Alert,
    pub by: &'static str,
    pub channels: usize,
}

impl AlertResolved<'_> {
    pub fn emit(self) {
        let a = self.alert;
        metrics::counter!("klaxon_alerts_resolved_total", "by" => self.by).increment(1);
        tracing::info!(
            alert_id = %text(&a.id), project = %text(&a.project_id), rule = %text(&a.rule_id), by = self.by, events = a.events,
            channels = self.channels, "alert resolved"
        );
    }
}

/// A due alert timer, handled: `outcome` is `resolved`, `already_resolved` (published again), `rescheduled`
/// (an event came since), `never` (`resolveAfter: 0`), `not_found` or `invalid` (set aside).
pub(crate) struct AlertTimer<'a> {
    pub outcome: &'static str,
    pub timer: Option<&'a crate::timer::Timer>,
}

impl AlertTimer<'_> {
    pub fn emit(self) {
        metrics::counter!("klaxon_alert_timers_total", "outcome" => self.outcome).increment(1);
        if let Some(t) = self.timer {
            tracing::debug!(
                alert_id = %text(&t.alert_id), project = %text(&t.project_id), what = t.what.as_str(), outcome = self.outcome,
                "alert timer due"
            );
        }
    }
}

/// A due reminder or escalation timer, handled: `outcome` is `sent` (its messages published, the next timer
/// scheduled), `deferred` (an escalation step in a quiet window), `muted`, `acknowledged`, `resolved`,
/// `not_found` (the chain ends), or `rule_gone`, `rule_disabled`, `channel_removed` (the rule was deleted or
/// switched off since, or no longer has the channels: the chain ends). No tenant labels.
pub(crate) struct OnCallTimer<'a> {
    pub timer: &'a crate::timer::Timer,
    pub outcome: &'static str,
    pub channels: usize,
}

impl OnCallTimer<'_> {
    pub fn emit(self) {
        match self.timer.what {
            crate::timer::TimerWhat::Escalate { .. } => {
                metrics::counter!("klaxon_alert_escalations_total", "outcome" => self.outcome).increment(1)
            }
            _ => metrics::counter!("klaxon_alert_reminders_total", "outcome" => self.outcome).increment(1),
        }
        let t = self.timer;
        let level_info = matches!(
            self.outcome,
            "sent" | "rule_gone" | "rule_disabled" | "channel_removed"
        );
        if level_info {
            tracing::info!(
                alert_id = %text(&t.alert_id), project = %text(&t.project_id), what = ?t.what, outcome = self.outcome,
                channels = self.channels, "alert on-call timer"
            );
        } else {
            tracing::debug!(
                alert_id = %text(&t.alert_id), project = %text(&t.project_id), what = ?t.what, outcome = self.outcome,
                "alert on-call timer"
            );
        }
    }
}

/// A notification sent after `attempts` attempts.
pub(crate) struct Delivered<'a> {
    pub id: &'a str,
    pub channel: ChannelKind,
    pub attempts: u32,
}

impl Delivered<'_> {
    pub fn emit(self) {
        delivery(self.channel, "sent");
        tracing::info!(notification_id = %text(self.id), channel = %self.channel, attempts = self.attempts, "delivered");
    }
}

/// A notification already delivered (its id is marked sent), dropped.
pub(crate) struct DuplicateDropped<'a> {
    pub id: &'a str,
    pub channel: ChannelKind,
}

impl DuplicateDropped<'_> {
    pub fn emit(self) {
        tracing::info!(notification_id = %text(self.id), channel = %self.channel, "already delivered; duplicate dropped");
        delivery(self.channel, "duplicate");
    }
}

/// A reminder or escalation step not sent, and never to be: its alert was acknowledged, resolved or gone when
/// its turn came (decided at send time, `sender::current`). Acked, recorded in the trail as `dropped`.
pub(crate) struct NotificationDropped<'a> {
    pub task: &'a NotificationTask,
    pub reason: klaxon_core::route::DropReason,
}

impl NotificationDropped<'_> {
    pub fn emit(self) {
        let t = self.task;
        metrics::counter!("klaxon_notifications_dropped_total", "channel" => t.channel.as_str(),
            "reason" => self.reason.as_str())
        .increment(1);
        let what = match t.reason {
            klaxon_core::Reason::Escalation { .. } => "escalation",
            _ => "reminder",
        };
        // ids come from the task (tenant input for a rule's id): shown on one line, invisible characters revealed
        let shown = |s: &str| klaxon_core::text::reveal(&klaxon_core::text::one_line(s, 64)).into_owned();
        tracing::info!(
            notification_id = %shown(&t.notification_id), channel = %t.channel, project = %shown(&t.project_id),
            rule = %shown(&t.rule_id), alert = %shown(t.alert.as_ref().map_or("", |a| a.id.as_str())), what,
            reason = self.reason.as_str(), "not sent: decided at send time"
        );
    }
}

/// A task parked in the delay engine for `wait` (rate limit, open breaker, busy dedup lease, `sendAt`).
pub(crate) struct DeliveryParked<'a> {
    pub id: &'a str,
    pub channel: ChannelKind,
    pub why: &'static str,
    pub wait: Duration,
}

impl DeliveryParked<'_> {
    pub fn emit(self) {
        tracing::info!(
            notification_id = %text(self.id), channel = %self.channel, why = self.why,
            wait_ms = millis(self.wait), "delivery parked"
        );
        metrics::counter!("klaxon_deliveries_parked_total", "channel" => self.channel.as_str()).increment(1);
    }
}

/// A transient delivery failure with attempts left, retried after `wait`.
pub(crate) struct DeliveryRetried<'a> {
    pub id: &'a str,
    pub channel: ChannelKind,
    pub attempts: u32,
    pub wait: Duration,
    pub reason: &'a str,
}

impl DeliveryRetried<'_> {
    pub fn emit(self) {
        tracing::warn!(
            notification_id = %text(self.id), channel = %self.channel, attempts = self.attempts,
            retry_in_ms = millis(self.wait), reason = %klaxon_core::text::reason(self.reason),
            "delivery failed, will retry"
        );
        delivery(self.channel, "retried");
    }
}

/// A notification (or a body that is not a task: `id` None) moved to `<ns>.dead`.
pub(crate) struct DeadLettered<'a> {
    pub id: Option<&'a str>,
    pub channel: ChannelKind,
    pub attempts: u32,
    pub reason: &'a str,
}

impl DeadLettered<'_> {
    pub fn emit(self) {
        match self.id {
            Some(id) => tracing::warn!(
                notification_id = %text(id), channel = %self.channel, attempts = self.attempts, reason = %klaxon_core::text::reason(self.reason),
                "notification dead-lettered"
            ),
            None => {
                tracing::warn!(channel = %self.channel, reason = %klaxon_core::text::reason(self.reason), "notification task dead-lettered")
            }
        }
        delivery(self.channel, "dead");
    }
}

/// A circuit breaker opened (`scope`: "endpoint" or "host"; `target`: the redacted endpoint or the host key;
/// `probe`: on a half-open probe's failure). The metric is labelled by state only (never the endpoint).
pub(crate) struct BreakerOpened<'a> {
    pub scope: &'static str,
    pub target: &'a str,
    pub probe: bool,
}

impl BreakerOpened<'_> {
    pub fn emit(self) {
        metrics::counter!("klaxon_breaker_transitions_total", "state" => "open").increment(1);
        tracing::warn!(scope = self.scope, target = %text(self.target), probe = self.probe, "circuit breaker opened");
    }
}

/// A circuit breaker closed again.
pub(crate) struct BreakerClosed<'a> {
    pub scope: &'static str,
    pub target: &'a str,
}

impl BreakerClosed<'_> {
    pub fn emit(self) {
        metrics::counter!("klaxon_breaker_transitions_total", "state" => "closed").increment(1);
        tracing::info!(scope = self.scope, target = %text(self.target), "circuit breaker closed");
    }
}

/// A lifecycle message of an alert tried to edit the alert's firing message on a channel that keeps
/// conversations (Discord, Telegram, Slack): `edited`, or `failed` (the message was sent all the same; the channel
/// logged why). Counted per channel, never per tenant.
pub(crate) struct ConversationEdited {
    pub channel: ChannelKind,
    pub outcome: &'static str,
}

impl ConversationEdited {
    pub fn emit(self) {
        metrics::counter!("klaxon_conversation_edits_total", "channel" => self.channel.as_str(), "outcome" => self.outcome)
            .increment(1);
    }
}

/// An alert's firing message could not be remembered (Redis failed): its lifecycle messages will be new
/// messages, not edits and replies.
pub(crate) struct ConversationNotKept<'a> {
    pub id: &'a str,
    pub channel: ChannelKind,
    pub error: &'a klaxon_counter::CounterError,
}

impl ConversationNotKept<'_> {
    pub fn emit(self) {
        metrics::counter!("klaxon_redis_errors_total").increment(1);
        tracing::warn!(
            notification_id = %text(self.id), channel = %self.channel, error = %klaxon_core::text::reason(&self.error.to_string()),
            "cannot remember the alert's firing message: its lifecycle messages will be new messages"
        );
    }
}

/// A due NO_EVENTS timer, handled: `outcome` is `fired` (the rule's silence fired, its tasks published),
/// `muted` (fired, a mute matched: nothing delivered, no alert), `rescheduled` (events came: the timer again at
/// the last event + `quietPeriod`), `stale` (a duplicate or an old timer: nothing to do), `rule_gone` (the rule
/// was deleted, disabled or changed kind: its state forgotten) or `invalid` (set aside). No tenant labels.
pub(crate) struct NoEventsTimer<'a> {
    pub outcome: &'static str,
    pub timer: Option<&'a crate::timer::SilenceTimer>,
}

impl NoEventsTimer<'_> {
    pub fn emit(self) {
        metrics::counter!("klaxon_no_events_timers_total", "outcome" => self.outcome).increment(1);
        if let Some(t) = self.timer {
            if self.outcome == "fired" || self.outcome == "muted" || self.outcome == "rule_gone" {
                tracing::info!(
                    project = %text(&t.project_id), rule = %text(&t.rule_id), outcome = self.outcome, "NO_EVENTS timer due"
                );
            } else {
                tracing::debug!(
                    project = %text(&t.project_id), rule = %text(&t.rule_id), outcome = self.outcome, "NO_EVENTS timer due"
                );
            }
        }
    }
}

/// A batch's projects with NO_EVENTS rules noted as seen (one script call each): `timers` scheduled (none was
/// pending), `silences` ended (their alerts resolve).
pub(crate) struct NoEventsSeen {
    pub projects: usize,
    pub timers: usize,
}

impl NoEventsSeen {
    pub fn emit(self) {
        metrics::counter!("klaxon_no_events_seen_total").increment(self.projects as u64);
        metrics::counter!("klaxon_no_events_timers_scheduled_total").increment(self.timers as u64);
    }
}

#[cfg(test)]
mod tests;
