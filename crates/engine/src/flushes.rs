//! The flush loop: claims the digest windows (`minPeriod > 0`, [`crate::digest`]) and the quiet-hours holds
//! ([`crate::quiet`]) when they are due, and sends each one's message through the [`crate::outbox`].
//!
//! ```text
//! <ns>.digest.flush ──▶ claim (digest_claim.lua, atomic across a fleet) ──▶ one NotificationTask
//!   (NotificationTask::for_digest / for_held: what fired, then what resolved) ──outbox, confirmed──▶ done ──▶ ack
//! ```
//! A flush that finds the window not due yet, or busy, is rescheduled through the delay engine; one that finds
//! it flushed already is acked. With `--output hawk` the resolves are tracked, not sent (Hawk's senders know
//! firings only).
//!
//! Fault injection (cargo feature `fault-injection`, tests only): [`Faults::crash_after_claim`] makes the loop
//! abort the process right after a successful claim, before publishing (the kill-between-claim-and-publish
//! test). Without the feature the field and the check do not exist.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use klaxon_broker::{Delivery, Publisher, Topology};
use klaxon_core::alert::AlertChannel;
use klaxon_core::notification::NotificationTask;
use klaxon_core::route::Route;
use klaxon_core::ChannelKind;
use klaxon_counter::{Claim, Digests, HeldClaim};
use tokio_util::sync::CancellationToken;

use crate::digest::Flush;
use crate::internal_events::{DigestPublished, QuietReleased, RedisFailed};
use crate::outbox::Outbox;
use crate::{sink, EngineError};

/// The environment variable the binary reads into [`Faults::crash_after_claim`] when built with the
/// `fault-injection` feature (see the module docs).
#[cfg(feature = "fault-injection")]
pub const CRASH_AFTER_CLAIM_ENV: &str = "KLAXON_TEST_CRASH_AFTER_CLAIM";

/// Faults a test can inject into the flush loop (feature `fault-injection`; never in production builds).
#[cfg(feature = "fault-injection")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Abort the process right after a successful claim, before publishing.
    pub crash_after_claim: bool,
}

/// What the digest flush loop needs.
#[derive(Clone)]
pub struct DigestDeps {
    /// RabbitMQ URL.
    pub amqp_url: String,
    /// Queue names.
    pub topology: Topology,
    /// Digest state in Redis.
    pub digests: Digests,
    /// Alerts: a digest or release on PagerDuty is recorded in the audience of every alert it lists.
    pub alerts: klaxon_counter::Alerts,
    /// Unacked flush messages.
    pub prefetch: u16,
    /// Where digests go (`--output`).
    pub output: sink::Output,
    /// Where shadow mode records the digests it would have sent ([`klaxon_store::Trail::disabled`] otherwise).
    pub trail: klaxon_store::Trail,
    /// Injected faults (tests only).
    #[cfg(feature = "fault-injection")]
    pub faults: Faults,
}

impl DigestDeps {
    /// Where the flush loop's messages leave.
    fn outbox(&self) -> Outbox<'_> {
        Outbox {
            topology: &self.topology,
            output: self.output,
            trail: &self.trail,
            digests: &self.digests,
            alerts: &self.alerts,
        }
    }
}

/// Runs the digest flush loop until `shutdown`, reconnecting after failures.
pub async fn run(deps: DigestDeps, ready: Arc<AtomicBool>, shutdown: CancellationToken) {
    #[cfg(feature = "fault-injection")]
    if deps.faults.crash_after_claim {
        tracing::warn!(
            env = CRASH_AFTER_CLAIM_ENV,
            "test hook on: the process aborts after its first claim"
        );
    }
    crate::supervise("digest", ready, shutdown, |ready, shutdown| {
        let deps = deps.clone();
        async move { session(&deps, ready, shutdown).await }
    })
    .await;
}

async fn session(
    deps: &DigestDeps,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
) -> Result<(), EngineError> {
    let queue = crate::EachQueue {
        role: "digest",
        amqp_url: &deps.amqp_url,
        topology: &deps.topology,
        queue: deps.topology.digest_flush_queue(),
        prefetch: deps.prefetch,
        output: deps.output,
    };
    crate::consume_each(queue, ready, shutdown, deps).await
}

impl crate::HandleEach for DigestDeps {
    fn handle<'a>(
        &'a self,
        publisher: &'a Publisher,
        delivery: &'a Delivery,
    ) -> impl std::future::Future<Output = Result<(), EngineError>> + Send + 'a {
        flush(self, publisher, delivery)
    }
}

/// Handles one flush message; returns once its outcome is durable (then the caller acks it).
async fn flush(deps: &DigestDeps, publisher: &Publisher, delivery: &Delivery) -> Result<(), EngineError> {
    let f = match Flush::parse(&delivery.data) {
        Ok(f) => f,
        Err(reason) => {
            let reason = format!("not a digest flush message: {reason}");
            tracing::warn!(reason = %reason, "digest flush message set aside");
            return deps.outbox().set_aside(publisher, delivery, &reason).await;
        }
    };
    let claim = if f.held {
        deps.digests.claim_held(&f.key(), f.window_start_ms, None).await
    } else {
        deps.digests
            .claim(&f.key(), f.window_start_ms, f.min_period_s, None)
            .await
    };
    let claim = claim.inspect_err(|_| RedisFailed.emit())?;
    match claim {
        Claim::Gone => {
            tracing::debug!(project = %crate::internal_events::text(&f.project_id), rule = %crate::internal_events::text(&f.rule_id), channel = %f.channel,
                window_start_ms = f.window_start_ms, "digest window already flushed");
            Ok(())
        }
        Claim::Busy(wait) | Claim::Early(wait) => {
            tracing::info!(project = %crate::internal_events::text(&f.project_id), rule = %crate::internal_events::text(&f.rule_id), channel = %f.channel,
                window_start_ms = f.window_start_ms, retry_in_ms = wait.as_millis() as u64,
                "digest window not ready to flush; rescheduled");
            let again = (f.message(&deps.topology), wait);
            deps.outbox().schedule(publisher, again).await
        }
        Claim::Claimed { now_ms, events, more } => {
            #[cfg(feature = "fault-injection")]
            if deps.faults.crash_after_claim {
                tracing::error!(
                    env = CRASH_AFTER_CLAIM_ENV,
                    "test hook: aborting between claim and publish"
                );
                std::process::abort();
            }
            send(deps, publisher, &f, now_ms, HeldClaim::of(events).with_more(more)).await?;
            let done = if f.held {
                deps.digests.done_held(&f.key(), f.window_start_ms).await
            } else {
                deps.digests.done(&f.key(), f.window_start_ms).await
            };
            done.inspect_err(|_| RedisFailed.emit())?;
            Ok(())
        }
    }
}

/// Sends the one message of a claimed window or hold (nothing when it held nothing) through the outbox: a
/// digest ([`Flush::task`]) or a quiet window's release ([`NotificationTask::for_held`]): what fired, then what
/// resolved. Returns once it is durable.
async fn send(
    deps: &DigestDeps,
    publisher: &Publisher,
    f: &Flush,
    now_ms: i64,
    mut claim: HeldClaim,
) -> Result<(), EngineError> {
    if deps.output == sink::Output::Hawk {
        // Hawk's senders know firings only (docs/rules.md): the resolves are tracked, not sent
        claim.resolved.clear();
        claim.more.resolved = 0;
    }
    if claim.is_empty() {
        return Ok(());
    }
    let (fired, resolved) = (claim.fired.len(), claim.resolved.len());
    let more = claim.more;
    let task = if f.held {
        NotificationTask::for_held(&f.window(), now_ms, claim.fired, claim.resolved).with_unlisted(more)
    } else {
        f.task(now_ms, claim)
    };
    let listed = shared_members(deps, &task, fired).await?;
    let outbox = deps.outbox();
    let mut post = outbox.post();
    // a release is decided already: now (or, with `--output hawk`, not Hawk's when it lists a silence)
    if post.route(task.clone(), None, now_ms) == Route::Now {
        if listed.is_empty() && opens_incident(deps, &task) {
            // every alert it lists resolved before it went out: nothing would ever resolve its incident, so its
            // resolve follows it through the delay engine (after the trigger's own delivery, barring retries)
            let resolve = NotificationTask::for_closed_incident(&task, now_ms);
            if let Some(msg) = sink::dispatch(&deps.topology, deps.output, &deps.trail, &resolve)? {
                post.timer((msg, CLOSED_INCIDENT_RESOLVE_AFTER));
            }
        }
        for (alert_id, member) in listed {
            post.hear(&task.project_id, &alert_id, member);
        }
    }
    let sent = outbox.send(publisher, post).await?;
    if sent.messages == 0 {
        // shadow mode: recorded (and counted) by dispatch instead of published
        return Ok(());
    }
    if f.held {
        QuietReleased {
            task: &task,
            fired,
            resolved,
        }
        .emit();
    } else {
        DigestPublished {
            task: &task,
            window_start_ms: f.window_start_ms,
        }
        .emit();
    }
    Ok(())
}

/// How long after a digest's or release's PagerDuty trigger the resolve of an incident that lists no open alert
/// follows it.
pub const CLOSED_INCIDENT_RESOLVE_AFTER: Duration = Duration::from_secs(15);

/// Whether `task` (a digest or a release) opens an incident of its own: on PagerDuty, unless `--output hawk`.
fn opens_incident(deps: &DigestDeps, task: &NotificationTask) -> bool {
    task.channel == ChannelKind::Pagerduty && deps.output != sink::Output::Hawk
}

/// On PagerDuty a digest or a quiet release opens an incident of its own (its `dedup_key` is the message's id)
/// that lists several alerts: each listed alert that is still open gets it as a shared member of its audience,
/// so acknowledging any of them acknowledges the incident and the resolve of the last one resolves it
/// (`klaxon_core::alert::Alert::closes`). The alerts are found by the groups the message lists as firing (its
/// first `fired` events), one look-up each, all at once. None on another channel, nor with `--output hawk`
/// (Hawk's senders open no incident of Klaxon's).
async fn shared_members(
    deps: &DigestDeps,
    task: &NotificationTask,
    fired: usize,
) -> Result<Vec<(String, AlertChannel)>, EngineError> {
    if !opens_incident(deps, task) {
        return Ok(Vec::new());
    }
    let mut groups: Vec<&str> = task
        .events
        .iter()
        .take(fired)
        .map(|e| e.group_hash.as_str())
        .collect();
    groups.sort_unstable();
    groups.dedup();
    let current = groups
        .iter()
        .map(|g| deps.alerts.current(&task.project_id, &task.rule_id, g));
    let open = futures_util::future::try_join_all(current)
        .await
        .inspect_err(|_| RedisFailed.emit())?;
    let member = AlertChannel {
        shared: true,
        first_id: Some(task.notification_id.clone()),
        ..AlertChannel::of_rule(task.channel, &task.endpoint, task.severity)
    };
    Ok(open
        .into_iter()
        .flatten()
        .map(|a| (a.id, member.clone()))
        .collect())
}
