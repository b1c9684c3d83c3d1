//! The evaluate loop: events in, notification tasks out.
//!
//! Per batch (a lone delivery at once; deliveries that come together gathered for `batch_wait`, up to
//! `batch_max`), `Batches::process`:
//! 1. **parse** every body; invalid ones are set aside to `<ns>.events.invalid` untouched, with the reason;
//! 2. **load** the rules of every project in the batch (cached, one query per project at most);
//! 3. **plan** ([`evaluate::plan`], pure): the (event, rule) pairs to count; an event of a project where no rule
//!    can fire (unknown project, no rules, all disabled, …: [`ProjectRules::unevaluated`]) is counted in
//!    `klaxon_events_unmatched_total{reason}` and logged once per project per 10 minutes;
//! 4. **count** every pair in **one** Redis round trip; beside it, the projects with NO_EVENTS rules are noted
//!    as seen ([`crate::no_events`]: their timers, and the silences their events end);
//! 5. read the **mutes** of the projects that fired (one round trip, none without firings);
//! 6. **route** ([`evaluate::route`], pure): muted firings aside, a notification task per channel of each other
//!    firing, sent now or through the channel's digest (`minPeriod > 0`);
//! 7. **alerts** ([`crate::alerts`]): open the alert of each crossed firing and count every matched pair into the
//!    open alert of its (rule, group) (one pipeline for the opens; the touches go in the counting's pipeline);
//!    each firing task then carries its alert, and a newly opened alert with `resolveAfter` gets a resolve timer;
//!    the silences the batch's events ended resolve, their resolved tasks go out with the batch;
//! 8. append the digest firings in **one** round trip ([`crate::digest`]): the first of a quiet channel is sent
//!    now, the one that opens a window schedules its flush; hold the firings of channels inside a quiet window
//!    (`quietHours`) in one more round trip (none without them, [`crate::quiet`]): the one that opens a hold
//!    schedules its release at the window's end;
//! 9. **publish** the digest flushes and alert timers (delay engine), then the tasks (persistent, publisher
//!    confirms) in `--output`'s shape — or in shadow mode record them in the trail instead
//!    ([`crate::sink::dispatch`]);
//! 10. **ack** the whole batch with one multiple-ack — only now, when it and every batch before it are durable.
//!     The ack is queued on the channel, not awaited; it is checked as written before the next ack and at the
//!     drain.
//!
//! Up to `--batches-in-flight` batches go at once ([`flight`]): batch n+1 is taken, parsed and counted while
//! batch n opens its alerts and waits for its confirms; counting stays in delivery order (step 4 waits for the
//! batch before to be done with Redis) and acks stay in order.
//!
//! Any failure in 2–9 ends the session without acking: the connection closes, RabbitMQ hands the batch back
//! (and every batch in flight with it), and the loop reconnects with a jittered, capped backoff.
//!
//! Each session registers the worker in Redis before it consumes and unregisters after it stopped, and beats
//! meanwhile ([`crate::consumers`]): that is how consumers of the events queue that are not Klaxon are found.
//!
//! With `--events-shards N` (N > 1) a session consumes the events queue and every shard queue
//! `<events-queue>.shard.i`, each on a channel of its own (each with `prefetch`), one consume loop per queue, run
//! concurrently in the session's task: every worker consumes every shard, so adding a worker adds throughput
//! without any assignment to keep; a shard's batches are processed and acked in order, the shards' overlap.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use klaxon_broker::{set_aside, Delivery, Outgoing, Publisher, Session, Topology};
use klaxon_core::evaluate::{self, Match, Routed, Unmatched};
use klaxon_core::{BatchEvent, EventTask, Outcome, ProjectRules};
use klaxon_counter::mutes::ReadMutes;
use klaxon_counter::{Digests, Hit, NoEvents, WindowCounter};
use klaxon_store::{RuleCache, Trail};
use tokio_util::sync::CancellationToken;

use crate::consumers::Presence;
use crate::internal_events::{
    EventInvalid, EventsConsumed, EventsUnmatched, FiringMuted, LogOnce, MutesSkipped, RedisFailed,
    RuleFired, RulesMatched, RulesUnavailable, ThresholdCrossed, UNMATCHED_LOG_INTERVAL, UNMATCHED_LOG_KEYS,
};
use crate::outbox::{Outbox, Post};
use crate::{alerts, no_events, sink, EngineError};

mod flight;
use flight::{Finished, Turn};

/// Batches in flight per consume loop by default: one, a batch at a time. Measured side by side on one machine
/// (docs/benchmarks.md, "Batches in flight"), two in flight took no more events per second from the queue and
/// made batches smaller (more Redis round trips and CPU per event); they pay where Redis or the broker is far
/// (a round trip of milliseconds), so they are the operator's choice (`--batches-in-flight`).
pub const DEFAULT_BATCHES_IN_FLIGHT: usize = 1;

/// Tuning of the evaluate loop.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Unacked deliveries RabbitMQ may hand this worker.
    pub prefetch: u16,
    /// Most deliveries per batch.
    pub batch_max: usize,
    /// How long a batch fills when other deliveries came with its first one (then whatever has arrived is taken);
    /// a lone delivery is processed at once.
    pub batch_wait: Duration,
    /// Batches one consume loop processes at once (`--batches-in-flight`, at least 1): batch n+1 is taken,
    /// parsed and counted while batch n finishes; counting stays in delivery order and acks in order
    /// ([`flight`]). 1 = one batch at a time.
    pub in_flight: usize,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            prefetch: 512,
            batch_max: 256,
            batch_wait: Duration::from_millis(2),
            in_flight: DEFAULT_BATCHES_IN_FLIGHT,
        }
    }
}

/// What the evaluate loop needs.
#[derive(Clone)]
pub struct WorkerDeps {
    /// RabbitMQ URL.
    pub amqp_url: String,
    /// Queue names.
    pub topology: Topology,
    /// Redis counting.
    pub counter: WindowCounter,
    /// Rules, cached (read under the process's limits: `RuleCache::with_limits`).
    pub rules: RuleCache,
    /// Mutes, read for the projects that fired, at most `--max-mutes-per-project` of each
    /// (`Mutes::with_limit`).
    pub mutes: klaxon_counter::Mutes,
    /// Tuning.
    pub config: WorkerConfig,
    /// Where notifications go (`--output`).
    pub output: sink::Output,
    /// Where shadow mode records what it would have sent ([`Trail::disabled`] for the other outputs).
    pub trail: Trail,
    /// Alerts in Redis: the firings open them, the matched events keep them open.
    pub alerts: klaxon_counter::Alerts,
    /// Injected faults (tests only).
    #[cfg(feature = "fault-injection")]
    pub faults: Faults,
}

/// The environment variable the binary reads into [`Faults::hold_after_publish`] when built with the
/// `fault-injection` feature.
#[cfg(feature = "fault-injection")]
pub const HOLD_AFTER_PUBLISH_ENV: &str = "KLAXON_TEST_WORKER_HOLD_AFTER_PUBLISH";

/// Faults a test can inject into the worker (feature `fault-injection`; never in production builds).
#[cfg(feature = "fault-injection")]
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// The first batch that published a notification then waits, unacked, until this file exists (at most 60 s)
    /// and fails its session: the batches-in-flight test (later batches go on meanwhile; all are handed back).
    pub hold_after_publish: Option<std::path::PathBuf>,
    /// Whether a batch held already (once per process).
    pub held: Arc<AtomicBool>,
}

#[cfg(feature = "fault-injection")]
impl Faults {
    /// The hold of [`Faults::hold_after_publish`], for a batch that published `messages` notifications.
    async fn after_publish(&self, messages: usize) -> Result<(), EngineError> {
        let Some(path) = &self.hold_after_publish else {
            return Ok(());
        };
        if messages == 0 || self.held.swap(true, Ordering::Relaxed) {
            return Ok(());
        }
        tracing::warn!("fault injection: holding a published batch unacked");
        for _ in 0..3000 {
            if path.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(EngineError::Injected("a batch held after its publish fails"))
    }
}

/// Runs the evaluate loop until `shutdown`, reconnecting after failures.
pub async fn run(deps: WorkerDeps, ready: Arc<AtomicBool>, shutdown: CancellationToken) {
    // which projects' unmatched events were logged lately: kept across sessions
    let unmatched = Arc::new(LogOnce::new(UNMATCHED_LOG_INTERVAL, UNMATCHED_LOG_KEYS));
    // which projects' "too many open alerts" were logged lately: kept across sessions
    let alerts_full = Arc::new(LogOnce::new(UNMATCHED_LOG_INTERVAL, UNMATCHED_LOG_KEYS));
    crate::supervise("worker", ready, shutdown, |ready, shutdown| {
        let deps = deps.clone();
        let logs = Logs {
            unmatched: unmatched.clone(),
            alerts_full: alerts_full.clone(),
        };
        async move { session(&deps, &logs, ready, shutdown).await }
    })
    .await;
}

/// What the worker logs at most once per project per interval, kept across sessions.
struct Logs {
    unmatched: Arc<LogOnce>,
    alerts_full: Arc<LogOnce>,
}

async fn session(
    deps: &WorkerDeps,
    logs: &Logs,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
) -> Result<(), EngineError> {
    let Session { broker, publisher } =
        Session::open(&deps.amqp_url, crate::CONNECT_TIMEOUT, "worker", &deps.topology).await?;
    sink::declare(&publisher, deps.output).await?;
    // The events queue, and with --events-shards every shard queue: each consumed on a channel of its own, each
    // with a consume loop of its own (below), all in this task.
    let queues = deps.topology.event_queues();
    // Registered before consuming and unregistered after, so the registry never counts fewer Klaxon workers than
    // the queue has (crate::consumers).
    let label = klaxon_broker::process_label("worker");
    let presences: Vec<Presence> = queues
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let presence = Presence::new(
                deps.counter.redis().clone(),
                deps.topology.namespace(),
                q,
                label.clone(),
            );
            // event_queues(): the events queue first, then shard 0, 1, …
            match u16::try_from(i) {
                Ok(i) if i > 0 => presence.for_shard(i - 1),
                _ => presence,
            }
        })
        .collect();
    futures_util::future::join_all(presences.iter().map(Presence::join)).await;
    let mut consumers = Vec::with_capacity(queues.len());
    for q in &queues {
        match broker.consume(q, deps.config.prefetch, &label).await {
            Ok(c) => consumers.push(c),
            Err(e) => {
                for c in &consumers {
                    c.close().await;
                }
                leave_all(&presences).await;
                return Err(e.into());
            }
        }
    }
    let watching = CancellationToken::new();
    let watches: Vec<_> = presences
        .iter()
        .map(|p| tokio::spawn(p.clone().watch(broker.clone(), watching.clone())))
        .collect();
    ready.store(true, Ordering::Relaxed);
    tracing::info!(
        queue = deps.topology.events_queue(),
        shards = deps.topology.shards(),
        prefetch = deps.config.prefetch,
        output = deps.output.as_str(),
        rules_database = deps.rules.store().database(),
        "worker consuming"
    );
    let batches = Batches {
        deps,
        unmatched: &logs.unmatched,
        alerts_full: &logs.alerts_full,
        publisher: &publisher,
        digests: Digests::new(deps.counter.redis().clone(), deps.topology.namespace()),
        no_events: NoEvents::new(deps.counter.redis().clone(), deps.topology.namespace()),
    };
    // One loop per consumed queue, concurrently: a shard's batches stay in order, the shards' overlap. The first
    // failure ends the session (the others are dropped unacked: RabbitMQ hands their batches back, as after a
    // crash); on shutdown each drains its own.
    let loops = consumers
        .iter_mut()
        .zip(&presences)
        .map(|(consumer, presence)| flight::consume_loop(&batches, consumer, &shutdown, presence));
    let result = futures_util::future::try_join_all(loops).await.map(|_| ());
    ready.store(false, Ordering::Relaxed);
    // a beat in flight is simply dropped: shutdown must not wait for a slow Redis
    watching.cancel();
    for w in watches {
        w.abort();
    }
    for c in &consumers {
        c.close().await;
    }
    publisher.close().await;
    leave_all(&presences).await;
    broker.close().await;
    result
}

/// Unregisters every registration of the session (best effort, at once).
async fn leave_all(presences: &[Presence]) {
    futures_util::future::join_all(presences.iter().map(Presence::leave)).await;
}

/// What every batch of one session works with: built once per session.
struct Batches<'a> {
    deps: &'a WorkerDeps,
    /// Which projects' unmatched events were logged lately (kept across sessions).
    unmatched: &'a LogOnce,
    /// Which projects' "no alert opened: too many open" were logged lately (kept across sessions).
    alerts_full: &'a LogOnce,
    publisher: &'a Publisher,
    digests: Digests,
    /// NO_EVENTS state, on the counter's connection.
    no_events: NoEvents,
}

impl Batches<'_> {
    /// One batch, from deliveries to durable outcomes (the caller then acks it, in order). The decisions are
    /// [`evaluate::plan`] and [`evaluate::route`]; what leaves goes through one [`Outbox`] send. The batch
    /// counts when `turn` comes (the batch before it is done with Redis) and passes it on as soon as its own
    /// Redis work is done (see [`flight`]).
    async fn process(
        &self,
        batch: Vec<Delivery>,
        mut turn: Turn,
        started: Instant,
    ) -> Result<Finished, EngineError> {
        EventsConsumed { events: batch.len() }.emit();
        let (events, set_aside) = parse(&batch, &self.deps.topology);
        let rules = self.load_rules(&events).await?;
        let plan = evaluate::plan(&events, |p| rules.get(p).map(Arc::as_ref));
        self.report_unmatched(&plan.unmatched);
        // NO_EVENTS: the projects with such rules were seen, noted beside the counting (same connection, at once)
        let watched = no_events::watched_rules(&rules);
        let redelivered = batch.iter().any(|d| d.redelivered);
        turn.take().await?;
        // The counting with the open alerts' touches (one pipeline) and the NO_EVENTS notes in one round trip
        // (concurrent calls on the multiplexed connection): none depends on another's answer.
        let (outcomes, seen) = tokio::try_join!(
            self.count(&plan.matches),
            no_events::seen(&self.no_events, &watched, redelivered),
        )?;
        // Nothing fired and no silence ended: this batch writes nothing more to Redis, the next one may count.
        let fires = outcomes.iter().any(Outcome::is_fired);
        let resolves = seen.iter().any(|s| !s.resolve.is_empty());
        if !fires && !resolves {
            turn.pass();
        }
        let mut post = self.outbox().post();
        post.messages(set_aside);
        self.fire(&plan.matches, &outcomes, &mut post).await?;
        let now_ms = klaxon_store::trail::now_ms();
        let (alerts, topology) = (&self.deps.alerts, &self.deps.topology);
        let settle =
            no_events::after_seen(alerts, topology, &rules, &watched, seen, &mut post, now_ms).await?;
        // With firings, the next batch counts once this one's alerts, digests and holds are written (its
        // touches then find the alerts opened here), while this one's publish waits for its confirms; with
        // silences to settle, only after they are settled.
        let pass_before_publish = settle.is_empty();
        let _sent = self
            .outbox()
            .send_with(
                self.publisher,
                post,
                || {
                    if pass_before_publish {
                        turn.pass();
                    }
                },
                || {},
            )
            .await?;
        #[cfg(feature = "fault-injection")]
        self.deps.faults.after_publish(_sent.messages).await?;
        no_events::settle(&self.no_events, &settle).await;
        turn.pass();
        Ok(Finished {
            last_tag: batch.iter().map(|d| d.delivery_tag).max().unwrap_or(0),
            events: batch.len(),
            started,
        })
    }

    /// Where the batch's notifications leave.
    fn outbox(&self) -> Outbox<'_> {
        Outbox {
            topology: &self.deps.topology,
            output: self.deps.output,
            trail: &self.deps.trail,
            digests: &self.digests,
            alerts: &self.deps.alerts,
        }
    }

    /// The batch's firings: the mutes of the projects that fired, the route of every firing's tasks (muted ones
    /// aside), the alerts they open (each task then carries its alert; their timers), all posted.
    async fn fire(
        &self,
        matches: &[Match<'_>],
        outcomes: &[Outcome],
        post: &mut Post,
    ) -> Result<(), EngineError> {
        let firings = evaluate::firings(matches, outcomes);
        let mutes = self.mutes(&evaluate::firing_projects(&firings)).await?;
        let mut routed = evaluate::route(&firings, |p| mutes.get(p).map_or(&[][..], |m| &m.mutes[..]));
        report_routed(&routed);
        post.timers(self.open_alerts(matches, outcomes, &mut routed).await?);
        post.now(routed.now);
        post.digest(routed.digest);
        post.held(routed.held);
        Ok(())
    }

    /// Opens the alerts of the crossed (not muted) firings and counts their firing pairs into the ones that
    /// opened now; sets `alert` on every firing task (digest ones too). Returns the resolve timers of the alerts
    /// opened now (or again, for a redelivered batch).
    async fn open_alerts(
        &self,
        matches: &[Match<'_>],
        outcomes: &[Outcome],
        routed: &mut Routed<'_>,
    ) -> Result<Vec<(Outgoing, Duration)>, EngineError> {
        let now_ms = klaxon_store::trail::now_ms();
        let fired = alerts::fired_touches(matches, outcomes);
        alerts::open::open_for_batch(
            &self.deps.alerts,
            &self.deps.topology,
            self.alerts_full,
            &routed.crossed,
            &fired,
            routed
                .now
                .iter_mut()
                .chain(routed.digest.iter_mut())
                .chain(routed.held.iter_mut().map(|h| &mut h.task)),
            now_ms,
        )
        .await
    }

    /// The rules of every project of the batch: cached, one query per project at most, all at once.
    async fn load_rules<'e>(
        &self,
        events: &'e [BatchEvent],
    ) -> Result<HashMap<&'e str, Arc<ProjectRules>>, EngineError> {
        let mut projects: Vec<&str> = events.iter().map(|e| e.task.project_id.as_str()).collect();
        projects.sort_unstable();
        projects.dedup();
        let loaded = futures_util::future::join_all(projects.iter().map(|p| self.deps.rules.get(p))).await;
        let mut out = HashMap::with_capacity(projects.len());
        for (p, r) in projects.into_iter().zip(loaded) {
            let rules = r.inspect_err(|_| RulesUnavailable.emit())?;
            out.insert(p, rules);
        }
        Ok(out)
    }

    fn report_unmatched(&self, unmatched: &[Unmatched<'_>]) {
        let now = Instant::now();
        for u in unmatched {
            EventsUnmatched {
                project: u.project,
                reason: u.reason,
                events: u.events,
                database: self.deps.rules.store().database(),
                log: self.unmatched.should_log(u.project, now),
            }
            .emit();
        }
    }

    /// Counts every matched (event, rule) pair, and each pair into the open alert of its (rule, group) if any
    /// (alerts that open in this batch count their firing pair in [`Batches::open_alerts`]), in one Redis
    /// request; the outcomes come in the order of `matches`.
    async fn count(&self, matches: &[Match<'_>]) -> Result<Vec<Outcome>, EngineError> {
        RulesMatched { pairs: matches.len() }.emit();
        if matches.is_empty() {
            return Ok(Vec::new());
        }
        let hits: Vec<Hit> = matches.iter().map(Hit::from).collect();
        let touches = alerts::touches(matches, klaxon_store::trail::now_ms());
        let touch = Some((&self.deps.alerts, &touches[..]));
        let counted = self.deps.counter.hit_batch_and_touch(&hits, None, touch).await;
        let (outcomes, _touched) = counted.inspect_err(redis_failed)?;
        Ok(outcomes)
    }

    /// The mutes of the projects that fired: one Redis round trip per batch with firings, none otherwise.
    async fn mutes(&self, projects: &[&str]) -> Result<HashMap<String, ReadMutes>, EngineError> {
        let mutes = &self.deps.mutes;
        let read = mutes.of_projects(projects).await.inspect_err(redis_failed)?;
        for (project, r) in &read {
            if r.unread > 0 {
                MutesSkipped {
                    project,
                    unread: r.unread,
                    limit: mutes.limit(),
                    first: mutes.first_report(project, r.unread),
                }
                .emit();
            }
        }
        Ok(read)
    }
}

/// Parses every body of the batch: the events, and the messages that set aside the bodies that are not events
/// (to `<ns>.events.invalid`, untouched, with the reason).
fn parse(batch: &[Delivery], topology: &Topology) -> (Vec<BatchEvent>, Vec<Outgoing>) {
    let mut events = Vec::with_capacity(batch.len());
    let mut invalid = Vec::new();
    for d in batch {
        match EventTask::parse(&d.data) {
            Ok(task) => events.push(BatchEvent {
                task,
                id: d.properties.message_id().map(str::to_owned),
            }),
            Err(reason) => {
                EventInvalid {
                    reason: &reason,
                    bytes: d.data.len(),
                }
                .emit();
                invalid.push(set_aside(d, topology.invalid_queue(), &reason.0));
            }
        }
    }
    (events, invalid)
}

/// Logs and counts where the batch's firings went.
fn report_routed(routed: &Routed<'_>) {
    for f in &routed.muted {
        FiringMuted {
            project: &f.task.project_id,
            rule: &f.rule.id,
        }
        .emit();
    }
    for firing in &routed.crossed {
        ThresholdCrossed { firing }.emit();
    }
    for task in routed
        .now
        .iter()
        .chain(&routed.digest)
        .chain(routed.held.iter().map(|h| &h.task))
    {
        RuleFired { task }.emit();
    }
}

fn redis_failed<E>(_: &E) {
    RedisFailed.emit();
}
