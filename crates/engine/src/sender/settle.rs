//! The one exit of a task ([`settle`]): the dedup lease, the log line and metric, the delivery trail and the
//! re-publish its [`Next`] calls for, before the caller acks it.

use std::time::Duration;

use klaxon_broker::{Delivery, Outgoing, ATTEMPTS_HEADER, ERROR_HEADER};
use klaxon_channels::redact_endpoint;
use klaxon_core::priority::{Lane, Priority};
use klaxon_core::{ChannelKind, NotificationTask};
use klaxon_store::trail::{now_ms, Record, Status};

use super::next::Next;
use super::{Ctx, SenderDeps};
use crate::internal_events::{
    DeadLettered, Delivered, DeliveryParked, DeliveryRetried, DuplicateDropped, NotificationDropped,
};
use crate::EngineError;

/// Carries out `next` for the delivery (its `task`, None when the body is not one; `lease`, the dedup token
/// the task holds, if any): gives the lease back unless the task was delivered, then logs, counts, records
/// the trail and re-publishes as `next` says. Ok means the outcome is durable and the delivery may be acked.
pub(super) async fn settle(
    ctx: &Ctx,
    delivery: &Delivery,
    task: Option<&NotificationTask>,
    lease: Option<&str>,
    next: Next,
) -> Result<(), EngineError> {
    let deps = &ctx.deps;
    let channel = ctx.channel;
    // A body that is not a task only ever becomes `Dead`, whose log then names no id: "" is never logged.
    let id = task.map_or("", |t| t.notification_id.as_str());
    if let (Some(token), false) = (lease, matches!(next, Next::Delivered { .. })) {
        release(deps, id, token).await;
    }
    match next {
        Next::Delivered { attempts } => {
            if let Err(e) = deps.dedup.mark_sent(id).await {
                // Delivered all the same; only a redelivery in the lease's lifetime is still caught.
                tracing::warn!(notification_id = %crate::internal_events::text(id), error = %e, "cannot mark notification delivered");
            }
            Delivered {
                id,
                channel,
                attempts,
            }
            .emit();
            trail(deps, task, attempts, Status::Sent, None);
            Ok(())
        }
        Next::Duplicate => {
            DuplicateDropped { id, channel }.emit();
            Ok(())
        }
        Next::Park { wait, why, held } => {
            DeliveryParked {
                id,
                channel,
                why,
                wait,
            }
            .emit();
            let msg = requeue(delivery, lane_queue(deps, channel, task, held), Vec::new());
            publish_later(ctx, msg, wait).await
        }
        Next::Retry { attempts, wait, why } => {
            DeliveryRetried {
                id,
                channel,
                attempts,
                wait,
                reason: &why,
            }
            .emit();
            trail(deps, task, attempts, Status::Retrying, Some(why.clone()));
            let msg = requeue(
                delivery,
                // its endpoint failed it: back in the later lane, out of other endpoints' way
                lane_queue(deps, channel, task, true),
                failure_headers(attempts, why),
            );
            publish_later(ctx, msg, wait).await
        }
        Next::Dropped { attempts, why } => {
            if let Some(task) = task {
                NotificationDropped { task, reason: why }.emit();
            }
            trail(
                deps,
                task,
                attempts,
                Status::Dropped,
                Some(why.words().to_owned()),
            );
            Ok(())
        }
        Next::Dead { attempts, why } => {
            DeadLettered {
                id: task.map(|t| t.notification_id.as_str()),
                channel,
                attempts,
                reason: &why,
            }
            .emit();
            trail(deps, task, attempts, Status::Dead, Some(why.clone()));
            let msg = requeue(
                delivery,
                deps.topology.dead_queue(),
                failure_headers(attempts, why),
            );
            ctx.publisher.publish_all(&[msg]).await?;
            Ok(())
        }
    }
}

/// The queue a parked or retried task comes back to: its priority's lane of the channel, or the later lane when
/// its own endpoint `held` it (a reminder queued in the main lane by an earlier version moves to its lane here).
fn lane_queue(
    deps: &SenderDeps,
    channel: ChannelKind,
    task: Option<&NotificationTask>,
    held: bool,
) -> String {
    let priority = task.map_or(Priority::First, |t| Priority::of(&t.reason));
    deps.topology.lane_queue(channel, Lane::back(priority, held))
}

/// The delivery's body and properties again, for `queue`, with `headers` set.
fn requeue(delivery: &Delivery, queue: String, headers: Vec<(String, String)>) -> Outgoing {
    let mut msg = Outgoing::json(queue, delivery.data.clone());
    msg.base = Some(delivery.properties.clone());
    msg.headers = headers;
    msg
}

/// The attempts made so far and the last failure, on a retried or dead-lettered task.
fn failure_headers(attempts: u32, why: String) -> Vec<(String, String)> {
    vec![
        (ATTEMPTS_HEADER.to_owned(), attempts.to_string()),
        (ERROR_HEADER.to_owned(), why),
    ]
}

/// Through the delay engine: `msg` comes back to its queue after `wait`.
async fn publish_later(ctx: &Ctx, msg: Outgoing, wait: Duration) -> Result<(), EngineError> {
    ctx.publisher
        .publish_delayed(&ctx.deps.topology.delay(), &[(msg, wait)])
        .await?;
    Ok(())
}

async fn release(deps: &SenderDeps, id: &str, token: &str) {
    if let Err(e) = deps.dedup.release(id, token).await {
        // The lease runs out by itself; the retry waits for it at worst.
        tracing::debug!(notification_id = %crate::internal_events::text(id), error = %e, "cannot release dedup lease");
    }
}

/// Records the outcome in the trail (nothing for a body that is not a task).
fn trail(
    deps: &SenderDeps,
    task: Option<&NotificationTask>,
    attempts: u32,
    status: Status,
    last_error: Option<String>,
) {
    let Some(task) = task else {
        return;
    };
    deps.trail.record(Record {
        notification_id: task.notification_id.clone(),
        project_id: task.project_id.clone(),
        rule_id: task.rule_id.clone(),
        channel: task.channel.as_str().to_owned(),
        destination: redact_endpoint(task.channel, &task.endpoint),
        attempts,
        status,
        last_error,
        fired_at_ms: task.fired_at_ms,
        at_ms: now_ms(),
    });
}
