//! One task through the pipeline (see the [module docs](super)): at most one delivery attempt, ending in one
//! [`Next`].

use std::time::{Duration, Instant};

use klaxon_broker::{header, Delivery, ATTEMPTS_HEADER};
use klaxon_channels::{redact_endpoint, Channels, DeliveryError, MessageRef};
use klaxon_core::priority::Priority;
use klaxon_core::NotificationTask;
use klaxon_counter::dedup::Claim;
use klaxon_counter::Conversation;
use klaxon_store::trail::now_ms;
use rand::Rng;
use tokio::sync::OwnedSemaphorePermit;

use super::next::{after_attempt, jitter, not_before, Next};
use super::settle::settle;
use super::{current, Ctx, SenderDeps, BULKHEAD_WAIT};
use crate::breaker::{Admission, Outcome, Transition};
use crate::internal_events::{BreakerClosed, BreakerOpened, ConversationEdited, ConversationNotKept};
use crate::ratelimit::{Paced, Slot};
use crate::EngineError;

fn token() -> String {
    format!("{:016x}", rand::rng().random::<u64>())
}

/// What a delivery's result says to the breakers: a 429 is the endpoint's rate limit (its host is up), other
/// transient failures count against endpoint and host, a permanent one is the request's fault.
fn outcome<T>(result: &Result<T, DeliveryError>) -> Outcome {
    match result {
        Ok(_) | Err(DeliveryError::Permanent { .. }) => Outcome::Ok,
        Err(e @ DeliveryError::Transient { retry_after, .. }) if e.is_rate_limited() => Outcome::Throttled {
            retry_after: *retry_after,
        },
        Err(DeliveryError::Transient { retry_after, .. }) => Outcome::Failed {
            retry_after: *retry_after,
        },
    }
}

pub(super) async fn handle(ctx: &Ctx, delivery: &Delivery) -> Result<(), EngineError> {
    let before: u32 = header(&delivery.properties, ATTEMPTS_HEADER)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let task: NotificationTask = match serde_json::from_slice(&delivery.data) {
        Ok(t) => t,
        Err(e) => {
            let why = klaxon_core::text::reason(&format!("not a notification task: {e}"));
            let next = Next::Dead {
                attempts: before,
                why,
            };
            return settle(ctx, delivery, None, None, next).await;
        }
    };
    let token = token();
    let (next, leased) = attempt_delivery(ctx, &task, before, &token).await;
    settle(ctx, delivery, Some(&task), leased.then_some(&token), next).await
}

/// One delivery attempt of `task`: walks it through the pipeline (see the module docs) and delivers it when no
/// step before stops it (scheduled for later, a breaker, dedup, the endpoint's share, the rate limit, the host's
/// bulkhead). Returns what becomes of the task, and true when it still holds the dedup lease `token`.
async fn attempt_delivery(ctx: &Ctx, task: &NotificationTask, before: u32, token: &str) -> (Next, bool) {
    let deps = &ctx.deps;
    let channel = ctx.channel;
    let id = task.notification_id.as_str();

    // 0. A scheduled notification (`sendAt`) never leaves before its time: one that arrives early (the delay
    //    engine's range is ~12 days, so a later one comes back in steps) waits again.
    if let Some(wait) = not_before(task.send_at_ms, now_ms()) {
        let why = "scheduled for later";
        return (Next::park(wait, why, false), false);
    }

    // 1. The breakers and throttles of the endpoint and its host, before anything is taken: parking a throttled
    //    endpoint's tasks costs no Redis round trip, so thousands of them cannot hold up other tenants' tasks.
    let endpoint = Channels::destination_key(task);
    let host = Channels::host_key(task);
    if let Some((left, why)) = deps.breakers.blocked(&endpoint, &host, Instant::now()) {
        let wait = left.max(Duration::from_secs(1));
        let why = why.reason();
        return (Next::park(wait, why, true), false);
    }

    // 2. Decided at send time: a reminder or an escalation step of an alert acknowledged, resolved or gone since
    //    it was published, or of a rule deleted, disabled or without this channel now, is dropped before anything
    //    is taken for it (one Redis read and the cached rules, only for those tasks).
    match current::dropped(deps, task, true).await {
        Ok(None) => {}
        Ok(Some(why)) => {
            let attempts = before;
            return (Next::Dropped { attempts, why }, false);
        }
        Err(e) => {
            // Without the alert we cannot tell: wait and ask again rather than guess either way.
            tracing::warn!(notification_id = %crate::internal_events::text(id), channel = %channel, error = %e, "cannot read the alert");
            let (wait, why) = (Duration::from_secs(5), "alert unavailable");
            return (Next::park(wait, why, false), false);
        }
    }

    //    A reminder past its project's budget of reminders this hour is dropped too (counted with its reason).
    if let Some(why) = current::over_budget(deps, task).await {
        let attempts = before;
        return (Next::Dropped { attempts, why }, false);
    }

    // 3. Dedup: never a second message for one notification id.
    match deps.dedup.claim(id, token).await {
        Ok(Claim::Claimed) => {}
        Ok(Claim::AlreadySent) => return (Next::Duplicate, false),
        Ok(Claim::Busy(left)) => {
            // Usually the holder finishes within a second; the lease only matters after a crash.
            let wait = left.clamp(Duration::from_secs(1), Duration::from_secs(5));
            let why = "being delivered elsewhere";
            return (Next::park(wait, why, false), false);
        }
        Err(e) => {
            // Without the dedup store we cannot promise "once": wait rather than risk a second message.
            tracing::warn!(notification_id = %crate::internal_events::text(id), channel = %channel, error = %e, "dedup store unavailable");
            let (wait, why) = (Duration::from_secs(5), "dedup store unavailable");
            return (Next::park(wait, why, false), false);
        }
    }

    // From here on the task holds the lease: `settle` marks the id sent or releases it. A probe taken here
    // and then not sent is handed back, so that the endpoint's next task may probe at once.
    let probe = match deps.breakers.admit(&endpoint, &host, Instant::now()) {
        Admission::Allow => false,
        Admission::Probe => true,
        Admission::Reject(left, why) => {
            let wait = left.max(Duration::from_secs(1));
            let why = why.reason();
            return (Next::park(wait, why, true), true);
        }
    };
    let park = |wait: Duration, why: &'static str, held: bool| {
        if probe {
            deps.breakers.release_probe(&endpoint, &host, Instant::now());
        }
        (Next::Park { wait, why, held }, true)
    };

    // 4. The endpoint's share of its host (bulkhead): never waited for. A busy endpoint's task is parked at once
    //    instead of holding a prefetch slot, so a slow endpoint delays only its own tasks. And the project's
    //    share of the host: its endpoints together hold at most half of the host's slots, so another project's
    //    delivery to the same host never waits behind one tenant's slow endpoints.
    let busy = |why| {
        park(
            Duration::from_millis(rand::rng().random_range(1_000..3_000)),
            why,
            true,
        )
    };
    let mut permits = match shares(deps, &endpoint, &host, task) {
        Ok(p) => Some(p),
        Err(why) => return busy(why),
    };

    // The alert's firing message, for a lifecycle message on a channel that keeps conversations: read before the
    // rate limit (an edit of it is one more request under the destination's pace) and before the host's slot is
    // taken, so the round trip holds no slot; no message (or Redis failing) means a new message.
    let firing = recall(deps, task).await;
    let calls = Channels::calls(task, firing.as_ref());

    // 5. Rate limit of the destination (fleet-wide): one slot per request the delivery sends.
    let gap = match deps.limiter.acquire_calls(task, calls).await {
        Ok(Paced {
            slot: Slot::Reserved(wait),
            gap,
        }) => {
            if !wait.is_zero() {
                // A reminder or an escalation step gives its shares back while it sleeps and takes them again
                // after, so that a firing for the same endpoint never finds it busy with reminders waiting for
                // their slots (and is parked for seconds behind them). Their sleep is short (a tenth or a quarter
                // of a firing's horizon) and their lane holds at most half the sender's slots; a firing keeps its
                // shares while it sleeps, so an endpoint or a project never has more than its shares' worth of
                // firings asleep in the sender's slots.
                let yields = Priority::of(&task.reason) != Priority::First;
                if yields {
                    permits = None;
                }
                tokio::time::sleep(wait).await;
                // The alert may have been acknowledged while the task waited for its slot: asked again (a
                // failure to ask lets the task go on, as the first answer did).
                if let Ok(Some(why)) = current::dropped(deps, task, false).await {
                    if probe {
                        deps.breakers.release_probe(&endpoint, &host, Instant::now());
                    }
                    let attempts = before;
                    return (Next::Dropped { attempts, why }, true);
                }
                if yields {
                    permits = match shares(deps, &endpoint, &host, task) {
                        Ok(p) => Some(p),
                        // taken by another delivery meanwhile (a firing): this slot is lost, the task comes back
                        Err(why) => return busy(why),
                    };
                }
            }
            gap
        }
        Ok(Paced {
            slot: Slot::Later(wait),
            ..
        }) => {
            // Spread: the tasks refused together would otherwise all come back together and be refused again.
            let spread = wait.mul_f64(rand::rng().random_range(1.0..1.5));
            return park(spread.max(Duration::from_secs(1)), "rate limited", false);
        }
        Err(e) => {
            tracing::warn!(notification_id = %crate::internal_events::text(id), channel = %channel, error = %e, "rate limiter unavailable");
            return park(Duration::from_secs(5), "rate limiter unavailable", false);
        }
    };

    // 6. The host's bulkhead. The wait is bounded, so the dedup lease (longer than this wait plus one attempt)
    //    never runs out while the task still holds it; an endpoint holds at most half the host's slots.
    let Ok(host_permit) = tokio::time::timeout(BULKHEAD_WAIT, deps.bulkheads.acquire(&host)).await else {
        let wait = Duration::from_millis(rand::rng().random_range(1_000..3_000));
        return park(wait, "destination host busy", false);
    };
    let result = deps.channels.deliver_paced(task, firing.as_ref(), gap).await;
    // recorded before the slots are given back: the endpoint's next task already sees a Retry-After
    let changes = deps
        .breakers
        .record(&endpoint, &host, outcome(&result), Instant::now());
    drop(host_permit);
    drop(permits);
    if changes.endpoint.is_some() || changes.host.is_some() {
        let shown = redact_endpoint(task.channel, &task.endpoint);
        for (scope, change) in [("endpoint", changes.endpoint), ("host", changes.host)] {
            let target = if scope == "host" {
                host.as_str()
            } else {
                shown.as_str()
            };
            match change {
                Some(Transition::Opened) => BreakerOpened { scope, target, probe }.emit(),
                Some(Transition::Closed) => BreakerClosed { scope, target }.emit(),
                None => {}
            }
        }
    }
    if let Ok(delivered) = &result {
        if let Some(edit) = delivered.edit {
            ConversationEdited {
                channel,
                outcome: edit.as_str(),
            }
            .emit();
        }
        if let Some(sent) = &delivered.sent {
            remember(deps, task, sent).await;
        }
        remember_incident(deps, task).await;
    }
    let next = after_attempt(
        result.as_ref().err(),
        before + 1,
        deps.max_attempts,
        &deps.retry_schedule,
        jitter(),
    );
    (next, true)
}

/// A slot of the endpoint's share and one of the project's share of the host, if both are free now (held in
/// that order: endpoint, project); else why not.
fn shares(
    deps: &SenderDeps,
    endpoint: &str,
    host: &str,
    task: &NotificationTask,
) -> Result<(OwnedSemaphorePermit, OwnedSemaphorePermit), &'static str> {
    let endpoint = deps.bulkheads.try_endpoint(endpoint).ok_or("destination busy")?;
    let project = deps
        .bulkheads
        .try_project(host, &task.project_id)
        .ok_or("project's share of the host busy")?;
    Ok((endpoint, project))
}

/// The firing message of `task`'s alert, when `task` is a lifecycle message on a channel that keeps an alert as
/// one conversation and the firing's message was remembered. A Redis failure is logged and means none: the
/// lifecycle message is then a new message, never held back.
async fn recall(deps: &SenderDeps, task: &NotificationTask) -> Option<MessageRef> {
    let alert = task.alert.as_ref()?;
    if !task.reason.is_lifecycle() || !Channels::keeps_conversation(task) {
        return None;
    }
    match deps
        .conversations
        .recall(&task.project_id, &alert.id, task.channel)
        .await
    {
        Ok(c) => c.map(|c| MessageRef {
            message_id: c.message_id,
            destination: c.destination,
            body: c.body,
        }),
        Err(e) => {
            tracing::warn!(notification_id = %crate::internal_events::text(&task.notification_id), channel = %task.channel, error = %e,
                "cannot read the alert's firing message: sending a new message");
            None
        }
    }
}

/// Remembers the message an alert's first firing sent ([`Channels::opens_conversation`]); a failure is logged
/// and counted, never a failed delivery (the message went out).
async fn remember(deps: &SenderDeps, task: &NotificationTask, sent: &MessageRef) {
    let Some(alert) = task.alert.as_ref().filter(|_| Channels::opens_conversation(task)) else {
        return;
    };
    let conversation = Conversation {
        message_id: sent.message_id.clone(),
        destination: sent.destination.clone(),
        body: sent.body.clone(),
    };
    if let Err(error) = deps
        .conversations
        .remember(&task.project_id, &alert.id, task.channel, &conversation)
        .await
    {
        ConversationNotKept {
            id: &task.notification_id,
            channel: task.channel,
            error: &error,
        }
        .emit();
    }
}

/// Remembers the PagerDuty incident a trigger opened or joined (its `dedup_key` → the project and the alerts it
/// is about), so PagerDuty's webhooks can name the alert ([`klaxon_counter::Inbound`]); a failure is logged,
/// never a failed delivery (the trigger went out).
async fn remember_incident(deps: &SenderDeps, task: &NotificationTask) {
    let Some(key) = klaxon_channels::pagerduty_trigger_key(task) else {
        return;
    };
    let mut alerts: Vec<&str> = task.alert.iter().map(|a| a.id.as_str()).collect();
    alerts.extend(task.events.iter().filter_map(|e| e.alert_id.as_deref()));
    if let Err(error) = deps
        .inbound
        .remember_incident(key, &task.project_id, &alerts)
        .await
    {
        tracing::warn!(notification_id = %crate::internal_events::text(&task.notification_id), error = %error,
            "cannot remember the PagerDuty incident: its acknowledgement in PagerDuty will not reach Klaxon");
    }
}
