//! Circuit breakers and bulkheads per destination host ([`klaxon_channels::Channels::host_key`]).
//!
//! * **Breaker** (per process): outcomes of the last `window` per host; when at least `min_requests` were
//!   seen and the failure ratio reaches `failure_ratio`, the breaker opens for `open_for`. While open, the
//!   sender parks the host's tasks in the delay queue instead of hammering it (parking does not count as an
//!   attempt). Once `open_for` has passed, one probe is let through (half-open): success closes the
//!   breaker, failure opens it again. Only transient failures (connect errors, timeouts, 5xx, 429) count: a
//!   4xx means the host is up and the request is bad.
//! * **Bulkhead**: each host gets its own semaphore of `per_host` concurrent deliveries, so a slow host
//!   holds at most that many of the sender's in-flight slots and never starves the others.
//!
//! Time is a parameter (`now: Instant`), so the state machine is tested without sleeping.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Breaker settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    /// Sliding window of outcomes.
    pub window: Duration,
    /// Outcomes needed in the window before the breaker may open.
    pub min_requests: u32,
    /// Failure ratio (0..=1] that opens the breaker.
    pub failure_ratio: f64,
    /// How long the breaker stays open before a probe.
    pub open_for: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            window: Duration::from_secs(30),
            min_requests: 5,
            failure_ratio: 0.5,
            open_for: Duration::from_secs(30),
        }
    }
}

/// Whether a delivery to a host may go ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Closed: go ahead.
    Allow,
    /// Half-open: this delivery is the probe; its outcome decides.
    Probe,
    /// Open (or a probe is in flight): park the task this long.
    Reject(Duration),
}

/// A breaker state change, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// The breaker opened.
    Opened,
    /// A probe succeeded; the breaker closed.
    Closed,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Closed,
    Open { until: Instant },
    HalfOpen { probe_since: Instant },
}

#[derive(Debug)]
struct Host {
    state: State,
    outcomes: VecDeque<(Instant, bool)>,
}

/// Most outcomes remembered per host (the window is also bounded by time).
const MAX_OUTCOMES: usize = 1024;
/// Most hosts tracked; idle hosts are forgotten past this.
const MAX_HOSTS: usize = 10_000;

/// Locks a per-host map, recovering it from a poisoned lock.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Before tracking a new `host` in a full map, forgets the hosts that `keep` says are idle.
fn make_room<V>(hosts: &mut HashMap<String, V>, host: &str, keep: impl FnMut(&String, &mut V) -> bool) {
    if hosts.len() >= MAX_HOSTS && !hosts.contains_key(host) {
        hosts.retain(keep);
    }
}

/// Every host's breaker. Cheap to share behind an `Arc`; never holds its lock across an await.
#[derive(Debug)]
pub struct Breakers {
    cfg: BreakerConfig,
    hosts: Mutex<HashMap<String, Host>>,
}

impl Breakers {
    /// Breakers with these settings.
    pub fn new(cfg: BreakerConfig) -> Self {
        Breakers {
            cfg,
            hosts: Mutex::new(HashMap::new()),
        }
    }

    /// May a delivery to `host` go ahead at `now`?
    pub fn admit(&self, host: &str, now: Instant) -> Admission {
        let mut hosts = lock(&self.hosts);
        let Some(h) = hosts.get_mut(host) else {
            return Admission::Allow;
        };
        match h.state {
            State::Closed => Admission::Allow,
            State::Open { until } if now < until => Admission::Reject(until - now),
            State::Open { .. } => {
                h.state = State::HalfOpen { probe_since: now };
                Admission::Probe
            }
            // A probe that never reported (parked, lost) is replaced after `open_for`.
            State::HalfOpen { probe_since } if now.duration_since(probe_since) >= self.cfg.open_for => {
                h.state = State::HalfOpen { probe_since: now };
                Admission::Probe
            }
            State::HalfOpen { probe_since } => {
                Admission::Reject((probe_since + self.cfg.open_for).saturating_duration_since(now))
            }
        }
    }

    /// Records the outcome of a delivery to `host` (`ok` = delivered or refused for a non-host reason).
    pub fn record(&self, host: &str, ok: bool, now: Instant) -> Option<Transition> {
        let mut hosts = lock(&self.hosts);
        make_room(&mut hosts, host, |_, h| {
            !matches!(h.state, State::Closed) || h.outcomes.iter().any(|(_, ok)| !ok)
        });
        let h = hosts.entry(host.to_owned()).or_insert_with(|| Host {
            state: State::Closed,
            outcomes: VecDeque::new(),
        });
        match h.state {
            State::HalfOpen { .. } | State::Open { .. } => {
                if ok {
                    h.state = State::Closed;
                    h.outcomes.clear();
                    Some(Transition::Closed)
                } else {
                    let was_open = matches!(h.state, State::Open { .. });
                    h.state = State::Open {
                        until: now + self.cfg.open_for,
                    };
                    // Late failures of tasks started before the breaker opened do not re-announce it.
                    (!was_open).then_some(Transition::Opened)
                }
            }
            State::Closed => {
                h.outcomes.push_back((now, ok));
                while h.outcomes.len() > MAX_OUTCOMES
                    || h.outcomes
                        .front()
                        .is_some_and(|(t, _)| now.duration_since(*t) > self.cfg.window)
                {
                    h.outcomes.pop_front();
                }
                let total = h.outcomes.len();
                let failed = h.outcomes.iter().filter(|(_, ok)| !ok).count();
                if total >= self.cfg.min_requests.max(1) as usize
                    && failed as f64 >= self.cfg.failure_ratio * total as f64
                    && failed > 0
                {
                    h.state = State::Open {
                        until: now + self.cfg.open_for,
                    };
                    h.outcomes.clear();
                    Some(Transition::Opened)
                } else {
                    None
                }
            }
        }
    }
}

/// A concurrency budget per host.
#[derive(Debug)]
pub struct Bulkheads {
    per_host: usize,
    hosts: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Bulkheads {
    /// `per_host` concurrent deliveries per host (at least 1).
    pub fn new(per_host: usize) -> Self {
        Bulkheads {
            per_host: per_host.max(1),
            hosts: Mutex::new(HashMap::new()),
        }
    }

    /// Waits for a slot on `host`; the slot is held until the permit is dropped.
    pub async fn acquire(&self, host: &str) -> OwnedSemaphorePermit {
        let sem = {
            let mut hosts = lock(&self.hosts);
            // Idle: nobody holds or waits for their semaphore.
            make_room(&mut hosts, host, |_, s| Arc::strong_count(s) > 1);
            hosts
                .entry(host.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_host)))
                .clone()
        };
        loop {
            // The semaphore is never closed, so this only loops in theory; bounded by that.
            if let Ok(p) = sem.clone().acquire_owned().await {
                return p;
            }
            tokio::task::yield_now().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> BreakerConfig {
        BreakerConfig {
            window: Duration::from_secs(10),
            min_requests: 4,
            failure_ratio: 0.5,
            open_for: Duration::from_secs(5),
        }
    }

    #[test]
    fn opens_on_failure_ratio_and_recovers_through_a_probe() {
        let b = Breakers::new(cfg());
        let t0 = Instant::now();
        let s = Duration::from_secs;
        // (offset s, outcome, expected transition, expected admission afterwards)
        let steps: &[(u64, bool, Option<Transition>)] = &[
            (0, true, None),
            (1, false, None),
            (2, true, None),
            (3, false, Some(Transition::Opened)), // 2 of 4 failed = 0.5
        ];
        for &(at, ok, want) in steps {
            assert_eq!(b.record("h", ok, t0 + s(at)), want, "at {at}");
        }
        assert_eq!(b.admit("h", t0 + s(4)), Admission::Reject(s(4)));
        assert_eq!(b.admit("other", t0 + s(4)), Admission::Allow);
        // open_for passed: one probe, the others wait
        assert_eq!(b.admit("h", t0 + s(8)), Admission::Probe);
        assert!(matches!(b.admit("h", t0 + s(8)), Admission::Reject(_)));
        // probe fails: open again
        assert_eq!(b.record("h", false, t0 + s(9)), Some(Transition::Opened));
        assert!(matches!(b.admit("h", t0 + s(10)), Admission::Reject(_)));
        // a late failure while open does not re-announce
        assert_eq!(b.record("h", false, t0 + s(10)), None);
        assert_eq!(b.admit("h", t0 + s(16)), Admission::Probe);
        assert_eq!(b.record("h", true, t0 + s(16)), Some(Transition::Closed));
        assert_eq!(b.admit("h", t0 + s(16)), Admission::Allow);
    }

    #[test]
    fn old_outcomes_leave_the_window_and_few_requests_never_open() {
        let b = Breakers::new(cfg());
        let t0 = Instant::now();
        let s = Duration::from_secs;
        for i in 0..3 {
            assert_eq!(b.record("h", false, t0 + s(i)), None, "below min_requests");
        }
        // 20 s later the old failures are gone: 1 failure + 3 successes = 0.25
        assert_eq!(b.record("h", false, t0 + s(30)), None);
        for i in 0..3 {
            assert_eq!(b.record("h", true, t0 + s(31 + i)), None);
        }
        assert_eq!(b.admit("h", t0 + s(35)), Admission::Allow);
    }

    #[test]
    fn a_lost_probe_is_replaced() {
        let b = Breakers::new(BreakerConfig {
            min_requests: 1,
            ..cfg()
        });
        let t0 = Instant::now();
        assert_eq!(b.record("h", false, t0), Some(Transition::Opened));
        assert_eq!(b.admit("h", t0 + Duration::from_secs(5)), Admission::Probe);
        assert!(matches!(
            b.admit("h", t0 + Duration::from_secs(6)),
            Admission::Reject(_)
        ));
        assert_eq!(b.admit("h", t0 + Duration::from_secs(10)), Admission::Probe);
    }

    #[tokio::test]
    async fn bulkhead_bounds_each_host_separately() {
        let b = Bulkheads::new(2);
        let _a1 = b.acquire("a").await;
        let _a2 = b.acquire("a").await;
        // "a" is full, "b" is not
        let third = tokio::time::timeout(Duration::from_millis(100), b.acquire("a")).await;
        assert!(third.is_err(), "a third slot on host a must wait");
        let other = tokio::time::timeout(Duration::from_millis(100), b.acquire("b")).await;
        assert!(other.is_ok(), "host b has its own budget");
    }
}
