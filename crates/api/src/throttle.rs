//! Failed authentication slowed per client: a GCRA budget of wrong tokens per client address, in this process.
//!
//! Every wrong `Authorization: Bearer` (API and console) and every wrong token on the console's `POST /login`
//! uses one unit of the client's budget: [`BURST`] at once, then one more every [`INTERVAL`]. A client over its
//! budget gets `429` with `Retry-After` for **every** request that presents credentials — the right token
//! included, and without comparing it: answering the right token while refusing wrong ones would tell a guesser
//! which guess was right at full speed, which is exactly what the budget is there to stop.
//!
//! A client that never presented a wrong token is **never** refused, whatever other clients send: only a client
//! in the table (one that sent wrong tokens itself) can be over budget, so any other client's token is always
//! compared, and the right one passes (successes cost nothing). There is no shared budget a flood could use up.
//! Requests without credentials (a console session cookie, no `Authorization` header) are not attempts.
//!
//! The client is the peer address of the TCP connection — or, behind a proxy listed in `--trusted-proxies`, the
//! address that proxy forwarded (`crate::proxy`) — an IPv6 client by its /64, which one host usually owns whole.
//!
//! Memory is bounded: at most [`MAX_CLIENTS`] addresses are tracked. A client whose budget is full again is
//! forgotten; when the table is full, a new offender takes the place of the client that owes least (whose
//! budget is nearest to full again), so a flood of one-guess addresses never frees a client that guessed a lot.
//! What bounds guessing from more addresses than the table holds is the token itself: each guess is still one
//! request, and a token of 32 random bytes (`openssl rand -hex 32`) cannot be found at any request rate — which is
//! why `klaxon run` warns and `klaxon doctor` says so when `KLAXON_API_TOKEN` is shorter than [`MIN_TOKEN_LEN`].

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Wrong tokens a client may present at once.
pub const BURST: u32 = 10;
/// After the burst, one more wrong token per this interval (10 a minute).
pub const INTERVAL: Duration = Duration::from_secs(6);
/// Most client addresses tracked at once.
pub const MAX_CLIENTS: usize = 10_000;
/// A `KLAXON_API_TOKEN` shorter than this (in bytes) is warned about: the throttle slows guessing per address,
/// the token's length is what makes guessing hopeless from any number of addresses.
pub const MIN_TOKEN_LEN: usize = 32;
/// How often at most the "table is full" warning is logged.
const FULL_WARNING_EVERY: Duration = Duration::from_secs(60);

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
/// Only clients that presented wrong tokens are in the table; `order` holds the same entries by that time, so
/// forgetting the clients whose budget is full again and finding the one that owes least are cheap.
#[derive(Debug)]
pub(crate) struct Budgets {
    tat: HashMap<IpAddr, Instant>,
    order: BTreeSet<(Instant, IpAddr)>,
    max_clients: usize,
    interval: Duration,
    /// How far the theoretical arrival time may run ahead of now: (burst - 1) intervals.
    tolerance: Duration,
    /// Clients forgotten to make room since the last warning, and when that was.
    evicted: u64,
    last_warning: Option<Instant>,
}

impl Budgets {
    pub(crate) fn new(burst: u32, interval: Duration, max_clients: usize) -> Self {
        Budgets {
            tat: HashMap::new(),
            order: BTreeSet::new(),
            max_clients: max_clients.max(1),
            interval,
            tolerance: interval * burst.max(1).saturating_sub(1),
            evicted: 0,
            last_warning: None,
        }
    }

    /// `Some(wait)` while `client` is over its budget: how long until it may try again. A client that is not in
    /// the table (never sent a wrong token, or forgotten) never is.
    pub(crate) fn blocked(&self, client: IpAddr, now: Instant) -> Option<Duration> {
        let tat = *self.tat.get(&client)?;
        let free_at = tat.checked_sub(self.tolerance).unwrap_or(now);
        (free_at > now).then(|| free_at - now)
    }

    /// Forgets the clients whose budget is full again: the same as never seen.
    fn forget_recovered(&mut self, now: Instant) {
        while let Some(&(tat, client)) = self.order.first() {
            if tat > now {
                break;
            }
            self.order.pop_first();
            self.tat.remove(&client);
        }
    }

    /// Records a wrong token from `client`; true when this one used up the budget (the next attempts wait).
    pub(crate) fn failed(&mut self, client: IpAddr, now: Instant) -> bool {
        self.forget_recovered(now);
        let next = match self.tat.get(&client).copied() {
            Some(old) => {
                self.order.remove(&(old, client));
                old.max(now) + self.interval
            }
            None => {
                if self.tat.len() >= self.max_clients {
                    // Full: the client that owes least makes room (a newcomer owes one interval, so a client
                    // that guessed a lot stays until its debt is no larger than a one-guess client's).
                    if let Some((_, least)) = self.order.pop_first() {
                        self.tat.remove(&least);
                        self.evicted += 1;
                        self.warn_full(now);
                    }
                }
                now + self.interval
            }
        };
        self.tat.insert(client, next);
        self.order.insert((next, client));
        next > now + self.tolerance
    }

    /// Says (at most once a minute) that wrong tokens come from more addresses than the table holds.
    fn warn_full(&mut self, now: Instant) {
        if self
            .last_warning
            .is_some_and(|t| now.saturating_duration_since(t) < FULL_WARNING_EVERY)
        {
            return;
        }
        self.last_warning = Some(now);
        tracing::warn!(
            tracked = self.max_clients,
            forgotten = self.evicted,
            "wrong tokens come from more client addresses than the throttle tracks: the clients that owe least \
             are forgotten (clients that never sent a wrong token are not affected; a long random \
             KLAXON_API_TOKEN is what keeps guessing hopeless)"
        );
        self.evicted = 0;
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        debug_assert_eq!(self.tat.len(), self.order.len());
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
        // Test builds only (`fault-injection`): a smaller table, so that an end-to-end flood fills it within
        // the time its entries live even on a loaded machine.
        #[cfg(feature = "fault-injection")]
        let max_clients = std::env::var("KLAXON_TEST_THROTTLE_MAX_CLIENTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(MAX_CLIENTS);
        #[cfg(not(feature = "fault-injection"))]
        let max_clients = MAX_CLIENTS;
        AuthThrottle {
            budgets: Mutex::new(Budgets::new(BURST, INTERVAL, max_clients)),
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
    fn memory_is_bounded_and_a_full_table_forgets_the_client_that_owes_least() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut b = Budgets::new(2, s(6), 4);
        // A client that guessed a lot: over its budget, owing two intervals.
        let heavy = ip("192.0.2.200");
        b.failed(heavy, t0);
        assert!(b.failed(heavy, t0));
        // A flood of one-guess addresses fills the table over and over: it never frees the heavy guesser.
        for i in 0..10_000u32 {
            b.failed(IpAddr::from((0x0a00_0000 + i).to_be_bytes()), t0);
            assert!(b.tracked() <= 4);
        }
        assert!(b.blocked(heavy, t0).is_some(), "still throttled");
        // A newcomer that keeps guessing from one address gets a place and is throttled like anyone.
        let n = ip("198.51.100.1");
        assert_eq!(b.blocked(n, t0), None);
        b.failed(n, t0);
        assert!(b.failed(n, t0));
        assert!(b.blocked(n, t0).is_some());
        assert!(b.blocked(heavy, t0).is_some());
        // Once their budgets are full again the entries are forgotten.
        let later = t0 + s(13);
        assert_eq!(b.blocked(heavy, later), None);
        b.failed(ip("198.51.100.2"), later);
        assert_eq!(b.tracked(), 1);
    }

    #[test]
    fn a_client_that_sent_no_wrong_token_is_never_refused_whatever_others_send() {
        let t = AuthThrottle::default();
        // More one-guess addresses than the table holds (one IPv6 /48 holds 65,536 /64s), then each of the
        // first ones over its budget.
        for i in 0..(MAX_CLIENTS as u128 + 5_000) {
            let addr = Ipv6Addr::from((0x2001_0db8_0001u128 << 80) | (i << 64) | 1);
            assert_eq!(t.attempt(Some(IpAddr::V6(addr)), || false), Attempt::Failed);
        }
        for i in 0..50u32 {
            for _ in 0..=BURST {
                t.attempt(Some(IpAddr::from((0x7f00_0100 + i).to_be_bytes())), || false);
            }
        }
        for operator in ["127.0.0.1", "::1", "2001:db8:1:ffff::1", "192.0.2.1"] {
            let mut compared = false;
            let got = t.attempt(Some(ip(operator)), || {
                compared = true;
                true
            });
            assert_eq!(got, Attempt::Passed, "{operator}");
            assert!(compared, "{operator}");
        }
        // A wrong token from a fresh address is compared too (and costs its own budget only).
        assert_eq!(t.attempt(Some(ip("192.0.2.2")), || false), Attempt::Failed);
        assert_eq!(t.attempt(Some(ip("192.0.2.1")), || true), Attempt::Passed);
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
