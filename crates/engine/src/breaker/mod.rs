//! Circuit breakers and bulkheads per destination *endpoint*, with a host breaker and host bulkhead above them.
//!
//! Keys: the **endpoint** is [`klaxon_channels::Channels::destination_key`] (one PagerDuty routing key, one
//! Slack/Discord/Teams/Loop/webhook URL, one Telegram chat, one set of email recipient domains); the **host** is
//! [`klaxon_channels::Channels::host_key`] (`pagerduty-api` for every routing key, `host:discord.com` for every
//! Discord webhook, `telegram-api` for every chat of the bot, `smtp`, …). SaaS hosts serve thousands of tenants'
//! endpoints, so what one endpoint does must only ever slow that endpoint:
//!
//! * **Endpoint breaker** (per process): outcomes of the last `window` per endpoint; when at least
//!   `min_requests` were seen and the failure ratio reaches `failure_ratio`, it opens for `open_for`, and the
//!   sender parks that endpoint's tasks in the delay queue (parking does not count as an attempt). Then one of
//!   the endpoint's own tasks probes it (half-open): success closes it, failure opens it again. Transient
//!   failures count (connect errors, timeouts, 5xx, 429); a 4xx means the request is bad, not the endpoint.
//! * **Throttle**: a wait the destination asked for (`Retry-After` of a 429 or 503, Discord's or Telegram's
//!   `retry_after`) parks that endpoint's tasks until then (at most [`MAX_THROTTLE`]), nobody else's.
//! * **Host breaker**: the latest outcome of each endpoint of the host within `window`; it opens only when at
//!   least `host_min_endpoints` *distinct* endpoints last failed with a transient error that is not a rate limit
//!   (a 429 says the host is up: for the host it is a success) and they are at least `failure_ratio` of the
//!   endpoints seen. Half-open, each endpoint gets one probe per round (so no endpoint's tasks can keep winning
//!   it): any success closes it; failures of `host_min_endpoints` distinct endpoints open it again.
//! * **Bulkheads**: an endpoint may hold at most half of its host's `per_host` concurrent deliveries (at least
//!   one), taken with a try that parks the task at once when the endpoint is busy; the host's semaphore then
//!   bounds what a slow host holds of the sender's in-flight slots. So one slow endpoint never fills its host.
//!   A project may likewise hold at most half of a host's slots, all its endpoints there together
//!   ([`Bulkheads::try_project`]): two slow endpoints of one tenant on one host leave the other half to others.
//!
//! Memory is bounded: at most [`MAX_ENDPOINTS`] endpoints and [`MAX_HOSTS`] hosts are tracked, idle ones are
//! forgotten first, and each keeps a bounded window. Time is a parameter (`now: Instant`), so the state
//! machines are tested without sleeping.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

mod bulkhead;

pub use bulkhead::Bulkheads;

/// Breaker settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    /// Sliding window of outcomes.
    pub window: Duration,
    /// Outcomes of an endpoint needed in the window before its breaker may open.
    pub min_requests: u32,
    /// Failure ratio (0..=1] that opens a breaker (an endpoint's outcomes; a host's endpoints).
    pub failure_ratio: f64,
    /// How long a breaker stays open before a probe.
    pub open_for: Duration,
    /// Distinct failing endpoints needed in the window before a host's breaker may open.
    pub host_min_endpoints: u32,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            window: Duration::from_secs(30),
            min_requests: 5,
            failure_ratio: 0.5,
            open_for: Duration::from_secs(30),
            host_min_endpoints: HOST_MIN_ENDPOINTS,
        }
    }
}

/// Default of [`BreakerConfig::host_min_endpoints`].
pub const HOST_MIN_ENDPOINTS: u32 = 3;
/// Longest a destination's requested wait (`Retry-After`) parks its endpoint's tasks.
pub const MAX_THROTTLE: Duration = Duration::from_secs(3600);
/// Most outcomes remembered per endpoint (the window is also bounded by time).
const MAX_OUTCOMES: usize = 64;
/// Most endpoints tracked (breakers, bulkheads); idle ones are forgotten past this, then the least recent.
pub const MAX_ENDPOINTS: usize = 10_000;
/// Most hosts tracked; idle ones are forgotten past this, then the least recent.
pub const MAX_HOSTS: usize = 1_000;
/// Most endpoints a host remembers outcomes of, and most probes of one half-open round.
const MAX_HOST_ENDPOINTS: usize = 256;

/// What a delivery attempt says about its endpoint and host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Delivered, or refused for a reason of the request itself (a permanent error): the destination is up.
    Ok,
    /// Rate limited (HTTP 429): a failure of the endpoint, and proof that the host is up.
    Throttled {
        /// The wait the destination asked for.
        retry_after: Option<Duration>,
    },
    /// Any other transient failure: connect error, timeout, 5xx.
    Failed {
        /// The wait the destination asked for (a 503's `Retry-After`).
        retry_after: Option<Duration>,
    },
}

impl Outcome {
    fn endpoint_ok(self) -> bool {
        matches!(self, Outcome::Ok)
    }

    fn host_ok(self) -> bool {
        !matches!(self, Outcome::Failed { .. })
    }

    fn retry_after(self) -> Option<Duration> {
        match self {
            Outcome::Ok => None,
            Outcome::Throttled { retry_after } | Outcome::Failed { retry_after } => retry_after,
        }
    }
}

/// Why a delivery may not go ahead now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocked {
    /// The endpoint asked us to wait (`Retry-After`).
    Throttled,
    /// The endpoint's breaker is open, or its probe is in flight.
    Endpoint,
    /// The host's breaker is open, or this endpoint already probed it this round.
    Host,
}

impl Blocked {
    /// A short reason for logs (the task's park reason).
    pub fn reason(self) -> &'static str {
        match self {
            Blocked::Throttled => "destination asked to wait (Retry-After)",
            Blocked::Endpoint => "circuit breaker open",
            Blocked::Host => "host circuit breaker open",
        }
    }
}

/// Whether a delivery may go ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Closed: go ahead.
    Allow,
    /// Half-open: this delivery probes its endpoint or its host; its outcome decides.
    Probe,
    /// Not now: park the task this long.
    Reject(Duration, Blocked),
}

/// A breaker state change, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// The breaker opened.
    Opened,
    /// A probe succeeded; the breaker closed.
    Closed,
}

/// The state changes one outcome caused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changes {
    /// Of the endpoint's breaker.
    pub endpoint: Option<Transition>,
    /// Of the host's breaker.
    pub host: Option<Transition>,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Closed,
    Open { until: Instant },
    HalfOpen { probe_since: Instant },
}

#[derive(Debug)]
struct Endpoint {
    state: State,
    outcomes: VecDeque<(Instant, bool)>,
    throttled_until: Option<Instant>,
    seen: Instant,
}

#[derive(Debug)]
enum HostState {
    Closed,
    Open {
        until: Instant,
    },
    /// One probe per endpoint in a round; `failed`: the distinct endpoints whose probe failed.
    HalfOpen {
        since: Instant,
        probed: HashSet<String>,
        failed: HashSet<String>,
    },
}

#[derive(Debug)]
struct Host {
    state: HostState,
    /// The latest outcome (for the host) of each endpoint, within the window.
    latest: HashMap<String, (Instant, bool)>,
    seen: Instant,
}

#[derive(Debug, Default)]
struct Inner {
    endpoints: HashMap<String, Endpoint>,
    hosts: HashMap<String, Host>,
}

/// Locks a map, recovering it from a poisoned lock.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Before tracking a new `key` in a map holding `max`: forgets what `idle` says, then (all busy) the least
/// recently `seen`. O(n), only when the map is full.
fn make_room<V>(
    map: &mut HashMap<String, V>,
    key: &str,
    max: usize,
    mut idle: impl FnMut(&V) -> bool,
    seen: impl Fn(&V) -> Instant,
) {
    if map.len() < max || map.contains_key(key) {
        return;
    }
    map.retain(|_, v| !idle(v));
    while map.len() >= max {
        let Some(oldest) = map.iter().min_by_key(|(_, v)| seen(v)).map(|(k, _)| k.clone()) else {
            break;
        };
        map.remove(&oldest);
    }
}

/// Every endpoint's and host's breaker. Cheap to share behind an `Arc`; never holds its lock across an await.
#[derive(Debug)]
pub struct Breakers {
    cfg: BreakerConfig,
    inner: Mutex<Inner>,
}

impl Breakers {
    /// Breakers with these settings.
    pub fn new(cfg: BreakerConfig) -> Self {
        Breakers {
            cfg,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Why a delivery to `endpoint` on `host` may not go ahead at `now`, and for how long; None when it may
    /// (possibly as a probe). Changes nothing: the sender asks before it takes anything (a dedup lease, a
    /// rate-limit slot), so that parking an endpoint's tasks costs no one else a Redis round trip.
    pub fn blocked(&self, endpoint: &str, host: &str, now: Instant) -> Option<(Duration, Blocked)> {
        let inner = lock(&self.inner);
        self.rejection(&inner, endpoint, host, now)
    }

    fn rejection(
        &self,
        inner: &Inner,
        endpoint: &str,
        host: &str,
        now: Instant,
    ) -> Option<(Duration, Blocked)> {
        let open_for = self.cfg.open_for;
        if let Some(e) = inner.endpoints.get(endpoint) {
            if let Some(until) = e.throttled_until.filter(|u| now < *u) {
                return Some((until - now, Blocked::Throttled));
            }
            match e.state {
                State::Open { until } if now < until => return Some((until - now, Blocked::Endpoint)),
                State::HalfOpen { probe_since } if now.duration_since(probe_since) < open_for => {
                    let left = (probe_since + open_for).saturating_duration_since(now);
                    return Some((left, Blocked::Endpoint));
                }
                _ => {}
            }
        }
        if let Some(h) = inner.hosts.get(host) {
            match &h.state {
                HostState::Open { until } if now < *until => return Some((*until - now, Blocked::Host)),
                HostState::HalfOpen { since, probed, .. }
                    if now.duration_since(*since) < open_for
                        && (probed.contains(endpoint) || probed.len() >= MAX_HOST_ENDPOINTS) =>
                {
                    let left = (*since + open_for).saturating_duration_since(now);
                    return Some((left, Blocked::Host));
                }
                _ => {}
            }
        }
        None
    }

    /// May a delivery to `endpoint` on `host` go ahead at `now`? A probe taken here that is then not sent
    /// (parked for another reason) is handed back with [`Breakers::release_probe`].
    pub fn admit(&self, endpoint: &str, host: &str, now: Instant) -> Admission {
        let mut inner = lock(&self.inner);
        if let Some((wait, why)) = self.rejection(&inner, endpoint, host, now) {
            return Admission::Reject(wait, why);
        }
        let mut probe = false;
        if let Some(e) = inner.endpoints.get_mut(endpoint) {
            // not rejected: an open breaker's time is up, or a probe that never reported is replaced
            if !matches!(e.state, State::Closed) {
                e.state = State::HalfOpen { probe_since: now };
                probe = true;
            }
        }
        if let Some(h) = inner.hosts.get_mut(host) {
            match &mut h.state {
                HostState::Closed => {}
                HostState::Open { .. } => {
                    h.state = HostState::HalfOpen {
                        since: now,
                        probed: HashSet::from([endpoint.to_owned()]),
                        failed: HashSet::new(),
                    };
                    probe = true;
                }
                HostState::HalfOpen {
                    since,
                    probed,
                    failed,
                } => {
                    if now.duration_since(*since) >= self.cfg.open_for {
                        // a round whose probes never decided: a new one
                        *since = now;
                        probed.clear();
                        failed.clear();
                    }
                    probed.insert(endpoint.to_owned());
                    probe = true;
                }
            }
        }
        if probe {
            Admission::Probe
        } else {
            Admission::Allow
        }
    }

    /// Hands back a probe taken by [`Breakers::admit`] whose delivery was not attempted, so that the next
    /// task of the endpoint may probe at once.
    pub fn release_probe(&self, endpoint: &str, host: &str, now: Instant) {
        let mut inner = lock(&self.inner);
        if let Some(e) = inner.endpoints.get_mut(endpoint) {
            if matches!(e.state, State::HalfOpen { .. }) {
                e.state = State::Open { until: now };
            }
        }
        if let Some(h) = inner.hosts.get_mut(host) {
            if let HostState::HalfOpen { probed, failed, .. } = &mut h.state {
                if !failed.contains(endpoint) {
                    probed.remove(endpoint);
                }
            }
        }
    }

    /// Records the outcome of a delivery to `endpoint` on `host`.
    pub fn record(&self, endpoint: &str, host: &str, outcome: Outcome, now: Instant) -> Changes {
        let mut inner = lock(&self.inner);
        let cfg = self.cfg;
        Changes {
            endpoint: record_endpoint(&mut inner.endpoints, &cfg, endpoint, outcome, now),
            host: record_host(&mut inner.hosts, &cfg, host, endpoint, outcome.host_ok(), now),
        }
    }

    /// How many endpoints and hosts are tracked (for tests of the bounds).
    pub fn tracked(&self) -> (usize, usize) {
        let inner = lock(&self.inner);
        (inner.endpoints.len(), inner.hosts.len())
    }
}

fn record_endpoint(
    endpoints: &mut HashMap<String, Endpoint>,
    cfg: &BreakerConfig,
    key: &str,
    outcome: Outcome,
    now: Instant,
) -> Option<Transition> {
    let ok = outcome.endpoint_ok();
    if ok && !endpoints.contains_key(key) {
        // a healthy endpoint that never failed needs no state
        return None;
    }
    let window = cfg.window;
    make_room(
        endpoints,
        key,
        MAX_ENDPOINTS,
        |e| {
            matches!(e.state, State::Closed)
                && e.throttled_until.is_none_or(|u| u <= now)
                && !e
                    .outcomes
                    .iter()
                    .any(|(t, ok)| !ok && now.duration_since(*t) <= window)
        },
        |e| e.seen,
    );
    let e = endpoints.entry(key.to_owned()).or_insert_with(|| Endpoint {
        state: State::Closed,
        outcomes: VecDeque::new(),
        throttled_until: None,
        seen: now,
    });
    e.seen = now;
    if let Some(wait) = outcome.retry_after() {
        let until = now + wait.min(MAX_THROTTLE);
        e.throttled_until = Some(e.throttled_until.map_or(until, |u| u.max(until)));
    } else if ok {
        e.throttled_until = None;
    }
    match e.state {
        State::HalfOpen { .. } | State::Open { .. } => {
            if ok {
                e.state = State::Closed;
                e.outcomes.clear();
                Some(Transition::Closed)
            } else {
                let was_open = matches!(e.state, State::Open { .. });
                e.state = State::Open {
                    until: now + cfg.open_for,
                };
                // Late failures of tasks started before the breaker opened do not re-announce it.
                (!was_open).then_some(Transition::Opened)
            }
        }
        State::Closed => {
            e.outcomes.push_back((now, ok));
            while e.outcomes.len() > MAX_OUTCOMES
                || e.outcomes
                    .front()
                    .is_some_and(|(t, _)| now.duration_since(*t) > window)
            {
                e.outcomes.pop_front();
            }
            let total = e.outcomes.len();
            let failed = e.outcomes.iter().filter(|(_, ok)| !ok).count();
            if total >= cfg.min_requests.max(1) as usize
                && failed as f64 >= cfg.failure_ratio * total as f64
                && failed > 0
            {
                e.state = State::Open {
                    until: now + cfg.open_for,
                };
                e.outcomes.clear();
                Some(Transition::Opened)
            } else {
                None
            }
        }
    }
}

fn record_host(
    hosts: &mut HashMap<String, Host>,
    cfg: &BreakerConfig,
    key: &str,
    endpoint: &str,
    ok: bool,
    now: Instant,
) -> Option<Transition> {
    let window = cfg.window;
    make_room(
        hosts,
        key,
        MAX_HOSTS,
        |h| {
            matches!(h.state, HostState::Closed)
                && !h
                    .latest
                    .values()
                    .any(|(t, ok)| !ok && now.duration_since(*t) <= window)
        },
        |h| h.seen,
    );
    let h = hosts.entry(key.to_owned()).or_insert_with(|| Host {
        state: HostState::Closed,
        latest: HashMap::new(),
        seen: now,
    });
    h.seen = now;
    let min_endpoints = cfg.host_min_endpoints.max(1) as usize;
    match &mut h.state {
        HostState::Open { until } => {
            if ok {
                h.state = HostState::Closed;
                h.latest.clear();
                Some(Transition::Closed)
            } else {
                // a late failure of a task started before the breaker opened
                *until = (*until).max(now + cfg.open_for);
                None
            }
        }
        HostState::HalfOpen { failed, .. } => {
            if ok {
                h.state = HostState::Closed;
                h.latest.clear();
                Some(Transition::Closed)
            } else {
                failed.insert(endpoint.to_owned());
                if failed.len() >= min_endpoints {
                    h.state = HostState::Open {
                        until: now + cfg.open_for,
                    };
                    Some(Transition::Opened)
                } else {
                    None
                }
            }
        }
        HostState::Closed => {
            h.latest.retain(|_, (t, _)| now.duration_since(*t) <= window);
            if h.latest.len() >= MAX_HOST_ENDPOINTS && !h.latest.contains_key(endpoint) {
                if let Some(oldest) = h
                    .latest
                    .iter()
                    .min_by_key(|(_, (t, _))| *t)
                    .map(|(k, _)| k.clone())
                {
                    h.latest.remove(&oldest);
                }
            }
            h.latest.insert(endpoint.to_owned(), (now, ok));
            let total = h.latest.len();
            let failing = h.latest.values().filter(|(_, ok)| !ok).count();
            if failing >= min_endpoints && failing as f64 >= cfg.failure_ratio * total as f64 {
                h.state = HostState::Open {
                    until: now + cfg.open_for,
                };
                h.latest.clear();
                Some(Transition::Opened)
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
