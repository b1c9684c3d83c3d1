//! Failed authentication slowed per client: a GCRA budget of wrong tokens per client address, in this process.
//!
//! Every wrong `Authorization: Bearer` (API and console) and every wrong token on the console's `POST /login`
//! uses one unit of the client's budget: [`BURST`] at once, then one more every [`INTERVAL`]. A client over its
//! budget gets `429` with `Retry-After` for **every** request that presents credentials — the right token
//! included, and without comparing it: answering the right token while refusing wrong ones would tell a guesser
//! which guess was right at full speed, which is exactly what the budget is there to stop. A client that never
//! presents a wrong token is never slowed (successes cost nothing), and requests without credentials (a console
//! session cookie, no `Authorization` header) are not attempts.
//!
//! The client is the peer address of the TCP connection (an IPv6 client by its /64, which one host usually
//! owns whole). Behind a reverse proxy every client shares the proxy's address, and so its budget.
//!
//! Memory is bounded: at most [`MAX_CLIENTS`] addresses are tracked; a client whose budget is full again is
//! forgotten, and when the table is full of clients that are still throttled, new ones share one overflow budget
//! (so spreading guesses over many addresses cannot evict the throttled ones).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Wrong tokens a client may present at once.
pub const BURST: u32 = 10;
/// After the burst, one more wrong token per this interval (10 a minute).
pub const INTERVAL: Duration = Duration::from_secs(6);
/// Most client addresses tracked at once.
pub const MAX_CLIENTS: usize = 10_000;
/// How often at most a full table is swept of clients whose budget is full again.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The key of a client: its IPv4 address (an IPv4-mapped IPv6 one too), or the /64 of its IPv6 address.
pub(crate) fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
    }
}

/// The budgets, with time as a parameter (GCRA: each client's "theoretical arrival time" of its next failure).
#[derive(Debug)]
pub(crate) struct Budgets {
    tat: HashMap<IpAddr, Instant>,
    overflow: Option<Instant>,
    last_sweep: Option<Instant>,
    max_clients: usize,
    interval: Duration,
    /// How far the theoretical arrival time may run ahead of now: (burst - 1) intervals.
    tolerance: Duration,
}

impl Budgets {
    pub(crate) fn new(burst: u32, interval: Duration, max_clients: usize) -> Self {
        Budgets {
            tat: HashMap::new(),
            overflow: None,
            last_sweep: None,
            max_clients: max_clients.max(1),
            interval,
            tolerance: interval * burst.max(1).saturating_sub(1),
        }
    }

    /// Makes room when the table is full (at most once per [`SWEEP_EVERY`]): a client whose budget is full again
    /// is the same as one never seen.
    fn sweep(&mut self, now: Instant) {
        if self.tat.len() < self.max_clients
            || self
                .last_sweep
                .is_some_and(|t| now.saturating_duration_since(t) < SWEEP_EVERY)
        {
            return;
        }
        self.last_sweep = Some(now);
        self.tat.retain(|_, tat| *tat > now);
    }

    /// The theoretical arrival time that counts for `client` (the overflow budget's when it has no slot).
    fn slot(&mut self, client: IpAddr, now: Instant) -> Option<&mut Option<Instant>> {
        if !self.tat.contains_key(&client) {
            self.sweep(now);
            if self.tat.len() >= self.max_clients {
                return Some(&mut self.overflow);
            }
        }
        None
    }

    /// `Some(wait)` while `client` is over its budget: how long until it may try again.
    pub(crate) fn blocked(&mut self, client: IpAddr, now: Instant) -> Option<Duration> {
        let tolerance = self.tolerance;
        let tat = match self.slot(client, now) {
            Some(overflow) => *overflow,
            None => self.tat.get(&client).copied(),
        }?;
        let free_at = tat.checked_sub(tolerance).unwrap_or(now);
        (free_at > now).then(|| free_at - now)
    }

    /// Records a wrong token from `client`; true when this one used up the budget (the next attempts wait).
    pub(crate) fn failed(&mut self, client: IpAddr, now: Instant) -> bool {
        let interval = self.interval;
        let next = |tat: Option<Instant>| tat.map_or(now, |t| t.max(now)) + interval;
        let tat = match self.slot(client, now) {
            Some(overflow) => {
                *overflow = Some(next(*overflow));
                *overflow
            }
            None => {
                let t = next(self.tat.get(&client).copied());
                self.tat.insert(client, t);
                Some(t)
            }
        };
        tat.is_some_and(|t| t > now + self.tolerance)
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.tat.len()
    }
}

/// What became of one authentication attempt.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The credentials were right.
    Passed,
    /// Wrong credentials (one unit of the client's budget used).
    Failed,
    /// Over the budget: refused without looking at the credentials; try again after this.
    Throttled(Duration),
}

/// The process's budgets of failed authentication, shared by the API and the console.
pub(crate) struct AuthThrottle {
    budgets: Mutex<Budgets>,
}

impl Default for AuthThrottle {
    fn default() -> Self {
        AuthThrottle {
            budgets: Mutex::new(Budgets::new(BURST, INTERVAL, MAX_CLIENTS)),
        }
    }
}

impl AuthThrottle {
    fn budgets(&self) -> std::sync::MutexGuard<'_, Budgets> {
        // A panic while holding the lock leaves at worst one budget off by one: keep serving.
        self.budgets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One attempt by `peer` (None: unknown, shares one budget) whose credentials `correct` checks — only when
    /// the client is not over its budget.
    pub(crate) fn attempt(&self, peer: Option<IpAddr>, correct: impl FnOnce() -> bool) -> Attempt {
        let client = client_key(peer.unwrap_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED)));
        let now = Instant::now();
        if let Some(wait) = self.budgets().blocked(client, now) {
            return Attempt::Throttled(wait);
        }
        if correct() {
            return Attempt::Passed;
        }
        if self.budgets().failed(client, now) {
            tracing::warn!(
                client = %client, burst = BURST, per_seconds = INTERVAL.as_secs(),
                "wrong tokens from this client over the budget: its authentication attempts get 429 for a while"
            );
        }
        Attempt::Failed
    }
}

/// `Retry-After` in whole seconds (rounded up, at least 1).
pub(crate) fn retry_after_secs(wait: Duration) -> u64 {
    let s = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    s.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn clients_are_keyed_by_address_and_ipv6_by_its_64() {
        for (given, key) in [
            ("192.0.2.7", "192.0.2.7"),
            ("::ffff:192.0.2.7", "192.0.2.7"),
            ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::"),
            ("2001:db8:1:2::1", "2001:db8:1:2::"),
            ("::1", "::"),
        ] {
            assert_eq!(client_key(ip(given)), ip(key), "{given}");
        }
    }

    #[test]
    fn a_burst_then_one_per_interval() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut b = Budgets::new(3, s(6), 100);
        let a = ip("192.0.2.1");
        // (seconds after t0, fail?, blocked for) — `fail` records a wrong token when not blocked
        let table: [(u64, bool, Option<u64>); 9] = [
            (0, true, None),
            (0, true, None),
            (0, true, None),
            // three at once used the burst: the next waits one interval
            (0, false, Some(6)),
            (2, false, Some(4)),
            (6, true, None),
            (6, false, Some(6)),
            // a long quiet time refills the whole burst, never more
            (60, true, None),
            (60, true, None),
        ];
        for (at, fail, want) in table {
            let now = t0 + s(at);
            assert_eq!(b.blocked(a, now), want.map(s), "at {at}s");
            if fail && want.is_none() {
                b.failed(a, now);
            }
        }
        assert_eq!(b.blocked(a, t0 + s(60)), None, "two of three used");
        b.failed(a, t0 + s(60));
        assert_eq!(b.blocked(a, t0 + s(60)), Some(s(6)));
        // another client is not affected
        assert_eq!(b.blocked(ip("192.0.2.2"), t0 + s(60)), None);
    }

    #[test]
    fn failed_says_when_the_budget_is_used_up() {
        let t0 = Instant::now();
        let mut b = Budgets::new(2, Duration::from_secs(6), 10);
        let a = ip("192.0.2.1");
        assert!(!b.failed(a, t0));
        assert!(b.failed(a, t0), "the second of a burst of two used it up");
    }

    #[test]
    fn memory_is_bounded_and_full_tables_share_an_overflow_budget() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut b = Budgets::new(2, s(6), 4);
        for i in 0..4 {
            let c = ip(&format!("192.0.2.{i}"));
            b.failed(c, t0);
            b.failed(c, t0);
            assert!(b.blocked(c, t0).is_some());
        }
        assert_eq!(b.tracked(), 4);
        // Full of throttled clients: newcomers share the overflow budget and evict no one.
        let (x, y) = (ip("198.51.100.1"), ip("198.51.100.2"));
        b.failed(x, t0);
        assert_eq!(b.blocked(y, t0), None);
        b.failed(y, t0);
        assert!(b.blocked(x, t0).is_some() && b.blocked(y, t0).is_some());
        assert_eq!(b.tracked(), 4);
        assert!(b.blocked(ip("192.0.2.0"), t0).is_some(), "still throttled");
        // Once their budgets are full again the old entries are swept and newcomers get their own.
        let later = t0 + s(13);
        assert_eq!(b.blocked(x, later), None);
        b.failed(x, later);
        assert_eq!(b.tracked(), 1);
        for i in 0..10_000u32 {
            b.failed(IpAddr::from(i.to_be_bytes()), later);
        }
        assert!(b.tracked() <= 4);
    }

    #[test]
    fn the_right_token_is_not_compared_while_throttled_and_never_costs_budget() {
        let t = AuthThrottle::default();
        let peer = Some(ip("192.0.2.9"));
        for _ in 0..100 {
            assert_eq!(t.attempt(peer, || true), Attempt::Passed);
        }
        for _ in 0..BURST {
            assert_eq!(t.attempt(peer, || false), Attempt::Failed);
        }
        let mut compared = false;
        match t.attempt(peer, || {
            compared = true;
            true
        }) {
            Attempt::Throttled(wait) => assert!(wait <= INTERVAL && wait > Duration::ZERO),
            other => panic!("{other:?}"),
        }
        assert!(!compared);
        assert_eq!(t.attempt(Some(ip("192.0.2.10")), || true), Attempt::Passed);
    }

    #[test]
    fn retry_after_rounds_up() {
        for (ms, secs) in [(1, 1), (999, 1), (1000, 1), (1001, 2), (5999, 6), (0, 1)] {
            assert_eq!(retry_after_secs(Duration::from_millis(ms)), secs, "{ms} ms");
        }
    }
}
