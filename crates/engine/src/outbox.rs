//! One way out: every loop (the worker's batch, the timer loop's resolves, reminders, escalation steps and
//! NO_EVENTS firings, the flush loop's digests and quiet releases) hands what it has to send to an [`Outbox`],
//! and nothing else publishes a notification.
//!
//! ```text
//! loop ──Post::route(task, rule now, at)──▶ klaxon_core::route::route ──▶ Now │ Digest │ Held │ Deferred │ Dropped
//!      ──Post::timer(msg, delay)                                             (Dropped: counted with its reason)
//!      ──Post::hear(alert, member)      (who is told of an alert after it opened: its audience)
//! Outbox::send(post):
//!   1. one Redis round trip: the digest entries (digest_append.lua), the quiet-hours holds and the audience
//!      records (alert_hear.lua), concurrently on the multiplexed connection (none without them): a member is
//!      recorded before its first message is published, so an acknowledgement right after it reaches it
//!   2. dispatch (crate::sink): what goes out now, and what the digests and holds answered "send now"
//!   3. one confirmed publish: the flushes, releases and timers through the delay engine beside the messages;
//!      then what must follow them (`Post::after`: a chain's next timer)
//! ```
//! The loops' other messages leave here too: a timer or flush due again ([`Outbox::schedule`]), a message set
//! aside ([`Outbox::set_aside`]).
//!
//! Once: every entry is idempotent per notification id, every message keeps its id, so a loop whose handling
//! is redelivered posts the same again and the senders deliver each once.

use std::time::Duration;

use klaxon_broker::{Outgoing, Publisher, Topology};
use klaxon_core::alert::AlertChannel;
use klaxon_core::evaluate::Held;
use klaxon_core::notification::NotificationTask;
use klaxon_core::route::{route, Route, TaskKind};
use klaxon_core::CompiledRule;
use klaxon_counter::{Alerts, Digests, Heard, Hearing, HeldEntry};
use klaxon_store::Trail;

use crate::internal_events::{AlertMessageNotSent, NotificationPublished, RedisFailed};
use crate::sink::{self, Output};
use crate::{digest, quiet, EngineError};

/// Where a loop's notifications leave: built once per session (or handling) from the loop's deps.
#[derive(Clone, Copy)]
pub(crate) struct Outbox<'a> {
    /// Queue names.
    pub topology: &'a Topology,
    /// `--output`.
    pub output: Output,
    /// Where shadow mode records what it would have sent.
    pub trail: &'a Trail,
    /// Digest windows and quiet-hours holds.
    pub digests: &'a Digests,
    /// Alerts: who heard of them ([`Post::hear`]).
    pub alerts: &'a Alerts,
}

/// A member to record in an alert's audience ([`klaxon_counter::Alerts::hear`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    /// The project.
    pub project_id: String,
    /// The alert.
    pub alert_id: String,
    /// Who heard of it.
    pub member: AlertChannel,
}

/// What one handling sends (a batch, a timer, a flush): filled by the loop, sent by [`Outbox::send`].
pub(crate) struct Post {
    output: Output,
    now: Vec<NotificationTask>,
    digest: Vec<(NotificationTask, HeldEntry)>,
    held: Vec<(Held, HeldEntry)>,
    timers: Vec<(Outgoing, Duration)>,
    messages: Vec<Outgoing>,
    after: Vec<(Outgoing, Duration)>,
    deferred_until: Option<i64>,
    hear: Vec<Member>,
}

/// What [`Post::route_all`] did with a handling's tasks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Filed {
    /// Sent now, through a digest or held (the channels told, now or later).
    pub sent: usize,
    /// Deferred to the quiet window's end (an escalation step).
    pub deferred: usize,
    /// Dropped because the rule is gone, switched off or lost the channel (not counted: `--output hawk`).
    pub rule_dropped: usize,
    /// The first reason a task was dropped for its rule.
    pub rule_reason: Option<&'static str>,
}

/// What [`Outbox::send`] published.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sent {
    /// Notification messages published (none in shadow mode: recorded in the trail instead).
    pub messages: usize,
}

impl Outbox<'_> {
    /// An empty post for this outbox's output.
    pub fn post(&self) -> Post {
        Post::new(self.output)
    }

    /// Sends `post`: one Redis round trip for its digest entries and holds, dispatch, one confirmed publish of
    /// the messages beside the delayed ones; `between` runs after the Redis trip, before anything is published
    /// (a test's fault hook), `then` after the publish and before [`Post::after`] (idem). Returns once all is
    /// durable.
    pub async fn send_with(
        &self,
        publisher: &Publisher,
        post: Post,
        between: impl FnOnce(),
        then: impl FnOnce(),
    ) -> Result<Sent, EngineError> {
        let (firings, resolves): (Vec<_>, Vec<_>) =
            post.digest.into_iter().partition(|(_, e)| *e == HeldEntry::Fired);
        let firings: Vec<NotificationTask> = firings.into_iter().map(|(t, _)| t).collect();
        let resolves: Vec<NotificationTask> = resolves.into_iter().map(|(t, _)| t).collect();
        let (appended, held, ()) = tokio::try_join!(
            async {
                digest::append(self.digests, self.topology, &firings, &resolves)
                    .await
                    .inspect_err(|_| RedisFailed.emit())
            },
            quiet::hold(self.digests, self.topology, &post.held),
            self.hear(&post.hear)
        )?;
        let mut messages = post.messages;
        let mut sent = Sent::default();
        for task in post.now.iter().chain(&appended.send_now).chain(&held.send_now) {
            // shadow mode: recorded (and counted) by dispatch instead of published
            if let Some(msg) = sink::dispatch(self.topology, self.output, self.trail, task)? {
                NotificationPublished { task }.emit();
                messages.push(msg);
                sent.messages += 1;
            }
        }
        let mut timers = appended.flushes;
        timers.extend(held.flushes);
        timers.extend(post.timers);
        between();
        publish(publisher, self.topology, &timers, &messages).await?;
        then();
        if !post.after.is_empty() {
            publisher
                .publish_delayed(&self.topology.delay(), &post.after)
                .await?;
        }
        Ok(sent)
    }

    /// Records `members` in their alerts' audiences (one round trip; none without them). A member an alert has no
    /// room for (more than `klaxon_core::alert::MAX_HEARD_MEMBERS`) is logged: that alert's acknowledge and resolve
    /// will not reach it.
    async fn hear(&self, members: &[Member]) -> Result<(), EngineError> {
        if members.is_empty() {
            return Ok(());
        }
        let records: Vec<Heard<'_>> = members
            .iter()
            .map(|m| Heard {
                project_id: &m.project_id,
                alert_id: &m.alert_id,
                member: &m.member,
            })
            .collect();
        let answers = self
            .alerts
            .hear(&records)
            .await
            .inspect_err(|_| RedisFailed.emit())?;
        for (m, answer) in members.iter().zip(answers) {
            if answer == Hearing::Full {
                tracing::warn!(
                    project = %crate::internal_events::text(&m.project_id), alert_id = %crate::internal_events::text(&m.alert_id), channel = %m.member.channel,
                    "the alert's audience is full: this member will not hear of its acknowledge and resolve"
                );
            }
        }
        Ok(())
    }

    /// Schedules `msg` through the delay engine alone (a timer due again, a flush rescheduled), confirmed.
    pub async fn schedule(
        &self,
        publisher: &Publisher,
        msg: (Outgoing, Duration),
    ) -> Result<(), EngineError> {
        publish(publisher, self.topology, &[msg], &[]).await
    }

    /// Sets `delivery` aside to `<ns>.dead` with `reason` (a message of a loop's queue that is not one),
    /// confirmed.
    pub async fn set_aside(
        &self,
        publisher: &Publisher,
        delivery: &klaxon_broker::Delivery,
        reason: &str,
    ) -> Result<(), EngineError> {
        let aside = klaxon_broker::set_aside(delivery, self.topology.dead_queue(), reason);
        publish(publisher, self.topology, &[], &[aside]).await
    }

    /// [`Outbox::send_with`] without fault hooks.
    pub async fn send(&self, publisher: &Publisher, post: Post) -> Result<Sent, EngineError> {
        self.send_with(publisher, post, || {}, || {}).await
    }
}

/// The delayed messages and the messages at once, on the one channel: their publishes are queued together and
/// their confirms come back together. Neither needs the other first: the caller acks only once both are
/// confirmed, and a redelivered handling publishes both again (same ids).
async fn publish(
    publisher: &Publisher,
    topology: &Topology,
    delayed: &[(Outgoing, Duration)],
    messages: &[Outgoing],
) -> Result<(), EngineError> {
    let delay = topology.delay();
    let timers = async {
        if delayed.is_empty() {
            return Ok(());
        }
        publisher.publish_delayed(&delay, delayed).await
    };
    let now = async {
        if messages.is_empty() {
            return Ok(());
        }
        publisher.publish_all(messages).await
    };
    tokio::try_join!(timers, now).inspect_err(|_| crate::internal_events::BrokerFailed.emit())?;
    Ok(())
}

impl Post {
    /// An empty post for `output`.
    fn new(output: Output) -> Post {
        Post {
            output,
            now: Vec::new(),
            digest: Vec::new(),
            held: Vec::new(),
            timers: Vec::new(),
            messages: Vec::new(),
            after: Vec::new(),
            deferred_until: None,
            hear: Vec::new(),
        }
    }

    /// Routes `task` at `at_ms` under `rule` as it is now ([`klaxon_core::route::route`]) and files it.
    pub fn route(&mut self, task: NotificationTask, rule: Option<&CompiledRule>, at_ms: i64) -> Route {
        let r = route(&task, rule, self.output, at_ms);
        self.file(task, r);
        r
    }

    /// Routes and files every task of one handling (see [`Post::route`]), and says what became of them.
    pub fn route_all(
        &mut self,
        tasks: Vec<NotificationTask>,
        rule: Option<&CompiledRule>,
        at_ms: i64,
    ) -> Filed {
        self.route_members(tasks.into_iter().map(|t| (t, None)), rule, at_ms)
    }

    /// [`Post::route_all`] of tasks each with the member its message makes of its channel, if it is new to the
    /// alert's audience (an escalation step's: `NotificationTask::for_alert_member`): recorded when the task is
    /// sent, now or later, not when it is deferred or dropped.
    pub fn route_members(
        &mut self,
        tasks: impl IntoIterator<Item = (NotificationTask, Option<AlertChannel>)>,
        rule: Option<&CompiledRule>,
        at_ms: i64,
    ) -> Filed {
        let mut filed = Filed::default();
        for (task, member) in tasks {
            let heard = member.and_then(|member| {
                let alert_id = task.alert.as_ref()?.id.clone();
                Some(Member {
                    project_id: task.project_id.clone(),
                    alert_id,
                    member,
                })
            });
            match self.route(task, rule, at_ms) {
                Route::Deferred { .. } => filed.deferred += 1,
                Route::Dropped { reason } if reason != klaxon_core::route::DropReason::HawkOutput => {
                    filed.rule_dropped += 1;
                    filed.rule_reason.get_or_insert(reason.as_str());
                }
                Route::Dropped { .. } => filed.sent += 1,
                Route::Now | Route::Digest { .. } | Route::Held { .. } => {
                    filed.sent += 1;
                    self.hear.extend(heard);
                }
            }
        }
        filed
    }

    /// Records `member` in the audience of alert `alert_id` of `project_id` with the post's Redis round trip.
    pub fn hear(&mut self, project_id: &str, alert_id: &str, member: AlertChannel) {
        self.hear.push(Member {
            project_id: project_id.to_owned(),
            alert_id: alert_id.to_owned(),
            member,
        });
    }

    /// Files `task` where `route` says: a resolve through a digest or a hold is a resolved entry, anything else
    /// a fired one; a deferred task moves the handling's [`Post::deferred_until`]; a dropped one is counted.
    pub fn file(&mut self, mut task: NotificationTask, route: Route) {
        let entry = match TaskKind::of(&task) {
            TaskKind::Resolve => HeldEntry::Resolved,
            _ => HeldEntry::Fired,
        };
        match route {
            Route::Now => self.now.push(task),
            Route::Digest { min_period_s } => {
                task.min_period_s = min_period_s;
                if entry == HeldEntry::Resolved {
                    digest::as_resolved_entry(&mut task);
                }
                self.digest.push((task, entry));
            }
            Route::Held { until_ms } => self.held.push((Held { task, until_ms }, entry)),
            Route::Deferred { until_ms } => {
                self.deferred_until = Some(self.deferred_until.map_or(until_ms, |u| u.max(until_ms)));
            }
            Route::Dropped { reason } => AlertMessageNotSent { task: &task, reason }.emit(),
        }
    }

    /// Adds tasks already routed now.
    pub fn now(&mut self, tasks: impl IntoIterator<Item = NotificationTask>) {
        self.now.extend(tasks);
    }

    /// Adds firing tasks already routed through their digests.
    pub fn digest(&mut self, tasks: impl IntoIterator<Item = NotificationTask>) {
        self.digest
            .extend(tasks.into_iter().map(|t| (t, HeldEntry::Fired)));
    }

    /// Adds firing tasks already held by a quiet window.
    pub fn held(&mut self, held: impl IntoIterator<Item = Held>) {
        self.held.extend(held.into_iter().map(|h| (h, HeldEntry::Fired)));
    }

    /// Adds a message through the delay engine (a timer, a flush), published with the rest.
    pub fn timer(&mut self, msg: (Outgoing, Duration)) {
        self.timers.push(msg);
    }

    /// Adds messages through the delay engine, published with the rest.
    pub fn timers(&mut self, msgs: impl IntoIterator<Item = (Outgoing, Duration)>) {
        self.timers.extend(msgs);
    }

    /// Adds a message through the delay engine that is published only once the rest is confirmed (a chain's
    /// next timer: a handling that dies before it is redelivered and makes it then).
    pub fn after(&mut self, msg: (Outgoing, Duration)) {
        self.after.push(msg);
    }

    /// Adds ready messages published at once with the rest (a batch's set-aside bodies).
    pub fn messages(&mut self, msgs: impl IntoIterator<Item = Outgoing>) {
        self.messages.extend(msgs);
    }

    /// When the latest deferred task is due again (an escalation step in a quiet window), if any was deferred.
    pub fn deferred_until(&self) -> Option<i64> {
        self.deferred_until
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaxon_core::alert::{AlertRef, AlertState};
    use klaxon_core::route::DropReason;
    use klaxon_core::{ChannelKind, Reason};

    fn task(channel: ChannelKind, reason: Reason) -> NotificationTask {
        let mut t = crate::quiet::tests::task(channel.as_str(), channel);
        t.reason = reason;
        t.fired_at_ms = 61_000;
        t.alert = Some(AlertRef {
            id: "a".repeat(24),
            state: AlertState::Resolved,
            opened_at_ms: 1_000,
            events: 3,
            by: Some("timeout".into()),
            firing_notification_id: "f".into(),
        });
        t
    }

    /// Where each route files a task: a digested resolve carries the channel's period and keeps how long its
    /// alert was open (undone when the digest sends it now after all); a held resolve is a resolved entry; a
    /// deferred step moves the handling's due time to the latest; a drop is counted, never sent.
    #[test]
    fn routes_are_filed() {
        let mut post = Post::new(Output::Klaxon);
        post.file(
            task(ChannelKind::Slack, Reason::Resolved),
            Route::Digest { min_period_s: 60 },
        );
        post.file(
            task(ChannelKind::Webhook, Reason::Reminder { number: 1, max: 2 }),
            Route::Held { until_ms: 9 },
        );
        post.file(
            task(ChannelKind::Email, Reason::Resolved),
            Route::Held { until_ms: 9 },
        );
        post.file(task(ChannelKind::Pagerduty, Reason::Resolved), Route::Now);
        for until_ms in [5, 7, 6] {
            post.file(
                task(ChannelKind::Webhook, Reason::Escalation { step: 1, steps: 1 }),
                Route::Deferred { until_ms },
            );
        }
        post.file(
            task(ChannelKind::Slack, Reason::Acknowledged),
            Route::Dropped {
                reason: DropReason::HawkOutput,
            },
        );
        assert_eq!(post.digest.len(), 1);
        let (d, entry) = &post.digest[0];
        assert_eq!((d.min_period_s, *entry), (60, HeldEntry::Resolved));
        assert_eq!(d.events[0].open_for_ms, Some(60_000));
        let mut sent = digest::Appended::default();
        sent.send_once(d);
        assert_eq!(sent.send_now[0].events[0].open_for_ms, None);
        let entries: Vec<HeldEntry> = post.held.iter().map(|(_, e)| *e).collect();
        assert_eq!(entries, [HeldEntry::Fired, HeldEntry::Resolved]);
        assert_eq!(post.now.len(), 1);
        assert_eq!(post.deferred_until(), Some(7));
    }

    /// A member new to the alert's audience is recorded with the post when its task is sent (now, held or
    /// digested), not when it is deferred or dropped; a task without a member records nobody.
    #[test]
    fn members_are_recorded_when_their_task_is_sent() {
        use klaxon_core::alert::AlertChannel;
        let rule_of = |raw: serde_json::Value| klaxon_core::parse_rule_value(&raw).expect("a rule").0;
        let hook = "https://h.test/step";
        let step = |quiet: bool| {
            let mut raw = serde_json::json!({"_id": "a0000000000000000000000a", "isEnabled": true,
                "whatToReceive": "ONLY_NEW", "including": [], "excluding": [],
                "channels": {"slack": {"isEnabled": true, "endpoint": "https://h.test/s"}},
                "escalation": [{"after": 60_000, "channels": {"webhook": {"isEnabled": true, "endpoint": hook}}}]});
            if quiet {
                raw["quietHours"] = serde_json::json!([{"days": ["tue"], "from": "22:00", "to": "23:00",
                    "timezone": "UTC"}]);
            }
            rule_of(raw)
        };
        let task = || {
            let mut t = task(ChannelKind::Webhook, Reason::Escalation { step: 1, steps: 1 });
            t.endpoint = hook.into();
            t
        };
        let member = AlertChannel {
            first_id: Some("webhook".into()),
            ..AlertChannel::of_rule(ChannelKind::Webhook, hook, None)
        };
        // 2023-11-14 22:30 UTC (quiet) and 21:00 UTC (not)
        let (quiet_at, day_at) = (1_700_001_000_000, 1_699_995_600_000);
        // (rule, output, at, members recorded, filed)
        let cases = [
            (Some(step(false)), Output::Klaxon, day_at, 1, (1, 0, 0)),
            (Some(step(false)), Output::Shadow, day_at, 1, (1, 0, 0)),
            (Some(step(true)), Output::Klaxon, quiet_at, 0, (0, 1, 0)),
            (None, Output::Klaxon, day_at, 0, (0, 0, 1)),
            (Some(step(false)), Output::Hawk, day_at, 0, (1, 0, 0)),
        ];
        for (rule, output, at, recorded, (sent, deferred, dropped)) in cases {
            let mut post = Post::new(output);
            let filed = post.route_members(
                [(task(), Some(member.clone())), (task(), None)],
                rule.as_ref(),
                at,
            );
            assert_eq!(post.hear.len(), recorded, "{output:?} at {at}");
            assert_eq!(
                (filed.sent, filed.deferred, filed.rule_dropped),
                (2 * sent, 2 * deferred, 2 * dropped),
                "{output:?} at {at}"
            );
            if let Some(m) = post.hear.first() {
                assert_eq!(
                    (m.project_id.as_str(), m.alert_id.as_str()),
                    ("p", &"a".repeat(24)[..])
                );
                assert_eq!(m.member, member);
            }
        }
    }
}
