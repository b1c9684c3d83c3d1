//! [`RuleCache`]: per-process cache of validated project rules in front of [`RuleStore`].
//!
//! * **TTL**: a project's rules are reloaded at most once per TTL (default 60 s); unknown projects are cached
//!   (as "no rules") for a shorter negative TTL, so a stream of events for a deleted project is not a query
//!   storm.
//! * **Single flight**: one reload per project at a time; concurrent callers wait for it (first load) or get
//!   the previous value at once (reload).
//! * **Stale while error**: when a reload fails, the last good rules keep being served (counted in
//!   [`RuleCache::stale_served`], logged once per outage) and MongoDB is retried after a short back-off. Only a
//!   project that was never loaded can fail, and then at most once per back-off.
//! * **Invalidation**: [`RuleCache::start_invalidation`] watches `projects` through a change stream where the
//!   server supports one (replica sets) and marks changed projects for reload; elsewhere the TTL alone applies.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use klaxon_core::{Limits, ProjectRules};
use mongodb::bson::Bson;
use mongodb::change_stream::event::OperationType;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::internal_events::{RulesLoadFailed, RulesStaleServed};
use crate::{RuleStore, RulesError};

/// Default time a project's rules are trusted before a reload.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);
/// Longest time an unknown project is remembered as unknown.
pub const DEFAULT_NEGATIVE_TTL: Duration = Duration::from_secs(10);
/// After a failed load, how long to serve the previous value (or the error) before asking MongoDB again.
pub const DEFAULT_ERROR_RETRY: Duration = Duration::from_secs(5);
/// Bound on cached projects; past it, entries that are expired or negative are evicted first.
const MAX_ENTRIES: usize = 100_000;
/// Consecutive failures to (re)open the change stream before falling back to TTL-only refresh.
const MAX_WATCH_FAILURES: u32 = 5;

/// How cached rules learn about changes, as detected by [`RuleCache::start_invalidation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidationMode {
    /// Not started yet.
    NotStarted,
    /// A change stream on `projects` marks changed projects for reload right away.
    ChangeStream,
    /// The server has no change streams (standalone MongoDB, PoloDB): rules refresh every TTL.
    TtlOnly,
}

impl InvalidationMode {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => InvalidationMode::ChangeStream,
            2 => InvalidationMode::TtlOnly,
            _ => InvalidationMode::NotStarted,
        }
    }

    fn as_u8(self) -> u8 {
        match self {
            InvalidationMode::NotStarted => 0,
            InvalidationMode::ChangeStream => 1,
            InvalidationMode::TtlOnly => 2,
        }
    }
}

/// Per-process rule cache. Cheap to clone (an `Arc` inside).
#[derive(Clone)]
pub struct RuleCache {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RuleCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleCache")
            .field("ttl", &self.inner.ttl)
            .field("projects", &self.len())
            .finish_non_exhaustive()
    }
}

struct Inner {
    store: RuleStore,
    limits: Limits,
    ttl: Duration,
    negative_ttl: Duration,
    error_retry: Duration,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    stale_served: AtomicU64,
    load_errors: AtomicU64,
    invalidations: AtomicU64,
    degraded: AtomicBool,
    mode: AtomicU8,
}

#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
    /// Held while loading: the single flight.
    refresh: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct SlotState {
    value: Option<Arc<ProjectRules>>,
    /// The value is trusted until then; `None` = load on next use.
    fresh_until: Option<Instant>,
    /// The value is being served because the last load failed.
    stale: bool,
    /// Bumped by invalidation, so a load that raced with a change is not trusted.
    generation: u64,
    last_error: Option<(Instant, RulesError)>,
}

enum Lookup {
    Fresh(Arc<ProjectRules>),
    Stale(Arc<ProjectRules>),
    /// Must be loaded; carries the previous value, if any.
    Miss(Option<Arc<ProjectRules>>),
}

impl Slot {
    fn lookup(&self, now: Instant) -> Lookup {
        let Ok(st) = self.state.lock() else {
            return Lookup::Miss(None);
        };
        let fresh = st.fresh_until.is_some_and(|t| now < t);
        match (&st.value, fresh) {
            (Some(v), true) if st.stale => Lookup::Stale(v.clone()),
            (Some(v), true) => Lookup::Fresh(v.clone()),
            (v, _) => Lookup::Miss(v.clone()),
        }
    }

    /// Marks the value for reload on next use; a load already under way is not trusted.
    fn expire(&self) {
        if let Ok(mut st) = self.state.lock() {
            st.fresh_until = None;
            st.last_error = None;
            st.generation += 1;
        }
    }

    fn recent_error(&self, since: Instant) -> Option<RulesError> {
        let st = self.state.lock().ok()?;
        match &st.last_error {
            Some((at, e)) if *at >= since => Some(e.clone()),
            _ => None,
        }
    }

    fn is_evictable(&self, now: Instant) -> bool {
        self.state.lock().map_or(true, |st| {
            st.fresh_until.is_none_or(|t| now >= t) || st.value.as_ref().is_some_and(|v| v.rules.is_empty())
        })
    }
}

impl RuleCache {
    /// A cache in front of `store`, trusting loaded rules for `ttl` (unknown projects for `min(ttl, 10 s)`).
    pub fn new(store: RuleStore, ttl: Duration) -> Self {
        RuleCache {
            inner: Arc::new(Inner {
                store,
                limits: Limits::default(),
                ttl,
                negative_ttl: ttl.min(DEFAULT_NEGATIVE_TTL),
                error_retry: ttl.min(DEFAULT_ERROR_RETRY),
                slots: Mutex::new(HashMap::new()),
                stale_served: AtomicU64::new(0),
                load_errors: AtomicU64::new(0),
                invalidations: AtomicU64::new(0),
                degraded: AtomicBool::new(false),
                mode: AtomicU8::new(InvalidationMode::NotStarted.as_u8()),
            }),
        }
    }

    /// Changes the back-off after a failed load (default [`DEFAULT_ERROR_RETRY`], capped by the TTL). Must be
    /// called before the cache is shared.
    pub fn with_error_retry(mut self, retry: Duration) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.error_retry = retry;
        }
        self
    }

    /// Reads projects under `limits` (default [`Limits::default`]): a project over `max_rules` is evaluated
    /// for its first `max_rules` rules. Must be called before the cache is shared.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.limits = limits;
        }
        self
    }

    /// The store behind the cache.
    pub fn store(&self) -> &RuleStore {
        &self.inner.store
    }

    fn key(project_id: &str) -> String {
        // ObjectIds are case-insensitive hex; the store writes them lowercase.
        if project_id.len() == 24 && project_id.bytes().all(|b| b.is_ascii_hexdigit()) {
            project_id.to_ascii_lowercase()
        } else {
            project_id.to_owned()
        }
    }

    fn slot(&self, key: String) -> Arc<Slot> {
        let Ok(mut slots) = self.inner.slots.lock() else {
            return Arc::new(Slot::default());
        };
        if !slots.contains_key(&key) && slots.len() >= MAX_ENTRIES {
            let now = Instant::now();
            slots.retain(|_, s| !s.is_evictable(now));
        }
        slots.entry(key).or_default().clone()
    }

    /// The value a lookup found (counting a stale one as served), or on a miss `Err` with the previous value.
    fn serve(&self, lookup: Lookup) -> Result<Arc<ProjectRules>, Option<Arc<ProjectRules>>> {
        match lookup {
            Lookup::Fresh(v) => Ok(v),
            Lookup::Stale(v) => {
                self.inner.stale_served.fetch_add(1, Ordering::Relaxed);
                RulesStaleServed.emit();
                Ok(v)
            }
            Lookup::Miss(previous) => Err(previous),
        }
    }

    /// The validated rules of a project; an unknown project has no rules.
    ///
    /// Never fails while a previous good value exists (stale-while-error); errors only when there is nothing
    /// cached for the project and MongoDB cannot answer.
    pub async fn get(&self, project_id: &str) -> Result<Arc<ProjectRules>, RulesError> {
        let key = Self::key(project_id);
        let slot = self.slot(key.clone());
        let asked = Instant::now();
        let previous = match self.serve(slot.lookup(asked)) {
            Ok(v) => return Ok(v),
            Err(previous) => previous,
        };
        let _flight = match slot.refresh.try_lock() {
            Ok(guard) => guard,
            // Someone is reloading: the value from a moment ago is as good as it was then.
            Err(_) if previous.is_some() => return Ok(previous.unwrap_or_default()),
            Err(_) => slot.refresh.lock().await,
        };
        // Whoever held the flight may have done the work.
        if let Ok(v) = self.serve(slot.lookup(Instant::now())) {
            return Ok(v);
        }
        if let Some(e) = slot.recent_error(asked) {
            return Err(e);
        }
        let generation = slot.state.lock().map(|s| s.generation).unwrap_or_default();
        let loaded = self.inner.store.load_with(&key, &self.inner.limits).await;
        let now = Instant::now();
        let Ok(mut st) = slot.state.lock() else {
            return loaded.map(|r| Arc::new(r.unwrap_or_default()));
        };
        let raced = st.generation != generation;
        match loaded {
            Ok(rules) => {
                let ttl = if rules.is_some() {
                    self.inner.ttl
                } else {
                    self.inner.negative_ttl
                };
                let value = Arc::new(rules.unwrap_or_default());
                st.value = Some(value.clone());
                st.fresh_until = (!raced).then(|| now + ttl);
                st.stale = false;
                st.last_error = None;
                drop(st);
                if self.inner.degraded.swap(false, Ordering::Relaxed) {
                    tracing::info!(project_id = %key, "MongoDB answers again; rules are fresh");
                }
                Ok(value)
            }
            Err(e) => {
                self.inner.load_errors.fetch_add(1, Ordering::Relaxed);
                RulesLoadFailed.emit();
                st.last_error = Some((now, e.clone()));
                st.fresh_until = Some(now + self.inner.error_retry);
                match st.value.clone() {
                    Some(v) => {
                        st.stale = true;
                        drop(st);
                        self.inner.stale_served.fetch_add(1, Ordering::Relaxed);
                        RulesStaleServed.emit();
                        if !self.inner.degraded.swap(true, Ordering::Relaxed) {
                            tracing::warn!(
                                project_id = %key,
                                error = %e,
                                "cannot reload rules; serving the last known rules until MongoDB answers"
                            );
                        }
                        Ok(v)
                    }
                    None => {
                        drop(st);
                        tracing::warn!(project_id = %key, error = %e, "cannot load rules and none are cached");
                        Err(e)
                    }
                }
            }
        }
    }

    /// Marks a project for reload on next use (its current rules stay as the stale-while-error fallback).
    pub fn invalidate(&self, project_id: &str) {
        let key = Self::key(project_id);
        let slot = self.inner.slots.lock().ok().and_then(|s| s.get(&key).cloned());
        if let Some(slot) = slot {
            slot.expire();
            self.inner.invalidations.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Marks every project for reload.
    pub fn invalidate_all(&self) {
        let slots: Vec<Arc<Slot>> = self
            .inner
            .slots
            .lock()
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default();
        for slot in slots {
            slot.expire();
        }
        self.inner.invalidations.fetch_add(1, Ordering::Relaxed);
    }

    /// Number of cached projects.
    pub fn len(&self) -> usize {
        self.inner.slots.lock().map(|s| s.len()).unwrap_or_default()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Project reads that went to MongoDB (the store's counter).
    pub fn queries(&self) -> u64 {
        self.inner.store.queries()
    }

    /// Times rules were served from a value kept only because reloading failed.
    pub fn stale_served(&self) -> u64 {
        self.inner.stale_served.load(Ordering::Relaxed)
    }

    /// Failed loads (MongoDB unreachable or erroring).
    pub fn load_errors(&self) -> u64 {
        self.inner.load_errors.load(Ordering::Relaxed)
    }

    /// Invalidations received (change-stream events, or explicit calls).
    pub fn invalidations(&self) -> u64 {
        self.inner.invalidations.load(Ordering::Relaxed)
    }

    /// True while the last load failed and stale rules are being served.
    pub fn is_degraded(&self) -> bool {
        self.inner.degraded.load(Ordering::Relaxed)
    }

    /// How invalidation works in this process.
    pub fn invalidation_mode(&self) -> InvalidationMode {
        InvalidationMode::from_u8(self.inner.mode.load(Ordering::Relaxed))
    }

    /// Opens a change stream on `projects` and, in a background task that ends with `shutdown`, marks every
    /// changed project for reload. Where the server has no change streams the TTL alone applies; that is
    /// detected here (not configured) and logged once.
    pub async fn start_invalidation(&self, shutdown: CancellationToken) -> InvalidationMode {
        let mode = match self.open_watch().await {
            Ok(stream) => {
                tracing::info!("watching `projects` for rule changes (change stream)");
                let cache = self.clone();
                tokio::spawn(async move { cache.watch_loop(stream, shutdown).await });
                InvalidationMode::ChangeStream
            }
            Err(e) => {
                tracing::info!(
                    error = %e,
                    ttl_s = self.inner.ttl.as_secs_f64(),
                    "the server has no change streams; rules refresh every TTL"
                );
                InvalidationMode::TtlOnly
            }
        };
        self.inner.mode.store(mode.as_u8(), Ordering::Relaxed);
        mode
    }

    async fn open_watch(
        &self,
    ) -> Result<
        mongodb::change_stream::ChangeStream<
            mongodb::change_stream::event::ChangeStreamEvent<mongodb::bson::Document>,
        >,
        RulesError,
    > {
        match tokio::time::timeout(
            crate::mongo::SERVER_SELECTION_TIMEOUT,
            self.inner.store.collection().watch(),
        )
        .await
        {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(e)) => Err(RulesError::from_driver("watch projects", e)),
            Err(_) => Err(RulesError::Unavailable(
                "opening the change stream timed out".into(),
            )),
        }
    }

    async fn watch_loop(
        &self,
        mut stream: mongodb::change_stream::ChangeStream<
            mongodb::change_stream::event::ChangeStreamEvent<mongodb::bson::Document>,
        >,
        shutdown: CancellationToken,
    ) {
        let mut failures = 0u32;
        loop {
            let next = tokio::select! {
                _ = shutdown.cancelled() => return,
                next = stream.next() => next,
            };
            match next {
                Some(Ok(event)) => {
                    failures = 0;
                    match event.operation_type {
                        OperationType::Insert
                        | OperationType::Update
                        | OperationType::Replace
                        | OperationType::Delete => {
                            match event.document_key.as_ref().and_then(|k| k.get("_id")) {
                                Some(Bson::ObjectId(oid)) => self.invalidate(&oid.to_hex()),
                                Some(Bson::String(s)) => self.invalidate(s),
                                _ => self.invalidate_all(),
                            }
                        }
                        _ => self.invalidate_all(),
                    }
                }
                other => {
                    // The driver resumes by itself on resumable errors; this is anything else. Changes may have
                    // been missed: reload everything, then try to watch again.
                    let error = match other {
                        Some(Err(e)) => e.to_string(),
                        _ => "change stream ended".to_owned(),
                    };
                    self.invalidate_all();
                    failures += 1;
                    if failures > MAX_WATCH_FAILURES {
                        tracing::warn!(%error, "change stream keeps failing; rules now refresh every TTL only");
                        self.inner
                            .mode
                            .store(InvalidationMode::TtlOnly.as_u8(), Ordering::Relaxed);
                        return;
                    }
                    tracing::warn!(%error, attempt = failures, "change stream failed; reopening");
                    let backoff = Duration::from_secs(1u64 << failures.min(5));
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    match self.open_watch().await {
                        Ok(s) => stream = s,
                        Err(e) => tracing::warn!(error = %e, "cannot reopen the change stream"),
                    }
                }
            }
        }
    }
}
