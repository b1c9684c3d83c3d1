use super::*;

fn cfg() -> BreakerConfig {
    BreakerConfig {
        window: Duration::from_secs(10),
        min_requests: 4,
        failure_ratio: 0.5,
        open_for: Duration::from_secs(5),
        host_min_endpoints: 3,
    }
}

const FAIL: Outcome = Outcome::Failed { retry_after: None };
const THROTTLED: Outcome = Outcome::Throttled { retry_after: None };

fn ok(b: bool) -> Outcome {
    if b {
        Outcome::Ok
    } else {
        FAIL
    }
}

fn rejected(a: Admission) -> Option<Blocked> {
    match a {
        Admission::Reject(_, why) => Some(why),
        _ => None,
    }
}

#[test]
fn an_endpoint_opens_on_failure_ratio_and_recovers_through_a_probe() {
    let b = Breakers::new(cfg());
    let t0 = Instant::now();
    let s = Duration::from_secs;
    // (offset s, outcome, expected transition of the endpoint); an endpoint is tracked from its first
    // failure on (a healthy one leaves no state)
    let steps: &[(u64, bool, Option<Transition>)] = &[
        (0, true, None),
        (1, false, None),
        (2, true, None),
        (2, true, None),
        (3, false, Some(Transition::Opened)), // 2 of the 4 since the first failure = 0.5
    ];
    for &(at, good, want) in steps {
        assert_eq!(b.record("e", "h", ok(good), t0 + s(at)).endpoint, want, "at {at}");
    }
    assert_eq!(
        b.admit("e", "h", t0 + s(4)),
        Admission::Reject(s(4), Blocked::Endpoint)
    );
    assert_eq!(b.blocked("e", "h", t0 + s(4)), Some((s(4), Blocked::Endpoint)));
    // another endpoint of the same host goes ahead
    assert_eq!(b.admit("other", "h", t0 + s(4)), Admission::Allow);
    // open_for passed: one probe, the others wait
    assert_eq!(b.blocked("e", "h", t0 + s(8)), None);
    assert_eq!(b.admit("e", "h", t0 + s(8)), Admission::Probe);
    assert_eq!(rejected(b.admit("e", "h", t0 + s(8))), Some(Blocked::Endpoint));
    // probe fails: open again
    assert_eq!(
        b.record("e", "h", FAIL, t0 + s(9)).endpoint,
        Some(Transition::Opened)
    );
    assert!(rejected(b.admit("e", "h", t0 + s(10))).is_some());
    // a late failure while open does not re-announce
    assert_eq!(b.record("e", "h", FAIL, t0 + s(10)).endpoint, None);
    assert_eq!(b.admit("e", "h", t0 + s(16)), Admission::Probe);
    assert_eq!(
        b.record("e", "h", Outcome::Ok, t0 + s(16)).endpoint,
        Some(Transition::Closed)
    );
    assert_eq!(b.admit("e", "h", t0 + s(16)), Admission::Allow);
}

#[test]
fn old_outcomes_leave_the_window_and_few_requests_never_open() {
    let b = Breakers::new(cfg());
    let t0 = Instant::now();
    let s = Duration::from_secs;
    for i in 0..3 {
        assert_eq!(
            b.record("e", "h", FAIL, t0 + s(i)),
            Changes::default(),
            "below min_requests"
        );
    }
    // 20 s later the old failures are gone: 1 failure + 3 successes = 0.25
    assert_eq!(b.record("e", "h", FAIL, t0 + s(30)).endpoint, None);
    for i in 0..3 {
        assert_eq!(b.record("e", "h", Outcome::Ok, t0 + s(31 + i)).endpoint, None);
    }
    assert_eq!(b.admit("e", "h", t0 + s(35)), Admission::Allow);
}

#[test]
fn a_lost_probe_is_replaced_and_a_released_one_is_free_at_once() {
    let b = Breakers::new(BreakerConfig {
        min_requests: 1,
        ..cfg()
    });
    let t0 = Instant::now();
    let s = Duration::from_secs;
    assert_eq!(b.record("e", "h", FAIL, t0).endpoint, Some(Transition::Opened));
    assert_eq!(b.admit("e", "h", t0 + s(5)), Admission::Probe);
    assert!(rejected(b.admit("e", "h", t0 + s(6))).is_some());
    assert_eq!(b.admit("e", "h", t0 + s(10)), Admission::Probe);
    // the probe was parked before it was sent: the next task probes at once
    b.release_probe("e", "h", t0 + s(10));
    assert_eq!(b.admit("e", "h", t0 + s(10)), Admission::Probe);
}

#[test]
fn endpoints_are_independent_and_429s_never_open_the_host() {
    let b = Breakers::new(cfg());
    let t0 = Instant::now();
    let s = Duration::from_secs;
    // endpoint A of a SaaS host answers 429 a hundred times, B is fine
    for i in 0..100 {
        let c = b.record(
            "A",
            "pagerduty-api",
            THROTTLED,
            t0 + Duration::from_millis(i * 10),
        );
        assert_eq!(c.host, None, "a 429 never opens the host");
    }
    assert_eq!(
        rejected(b.admit("A", "pagerduty-api", t0 + s(1))),
        Some(Blocked::Endpoint)
    );
    assert_eq!(b.admit("B", "pagerduty-api", t0 + s(1)), Admission::Allow);
    // many endpoints all throttled: still no host breaker
    for n in 0..50 {
        for i in 0..5 {
            let c = b.record(
                &format!("T{n}"),
                "pagerduty-api",
                THROTTLED,
                t0 + s(2) + Duration::from_millis(i),
            );
            assert_eq!(c.host, None);
        }
    }
    assert_eq!(b.admit("B", "pagerduty-api", t0 + s(3)), Admission::Allow);
    // one endpoint's 5xx: its breaker only
    for i in 0..10 {
        assert_eq!(
            b.record("C", "pagerduty-api", FAIL, t0 + s(4) + Duration::from_millis(i))
                .host,
            None
        );
    }
    assert_eq!(
        rejected(b.admit("C", "pagerduty-api", t0 + s(5))),
        Some(Blocked::Endpoint)
    );
    assert_eq!(b.admit("B", "pagerduty-api", t0 + s(5)), Admission::Allow);
}

#[test]
fn a_retry_after_parks_only_its_endpoint() {
    let b = Breakers::new(cfg());
    let t0 = Instant::now();
    let s = Duration::from_secs;
    // A asked for 20 s; then (endpoint, at s, expected block)
    let wait = |secs| Outcome::Throttled {
        retry_after: Some(s(secs)),
    };
    b.record("A", "host:discord.com", wait(20), t0);
    type Row = (&'static str, u64, Option<(Duration, Blocked)>);
    let table: &[Row] = &[
        ("A", 0, Some((s(20), Blocked::Throttled))),
        ("A", 19, Some((s(1), Blocked::Throttled))),
        ("B", 0, None),
        ("A", 20, None),
    ];
    for &(ep, at, want) in table {
        assert_eq!(
            b.blocked(ep, "host:discord.com", t0 + s(at)),
            want,
            "{ep} at {at}"
        );
    }
    // a 503 with Retry-After too, capped at MAX_THROTTLE
    b.record(
        "C",
        "host:discord.com",
        Outcome::Failed {
            retry_after: Some(s(999_999)),
        },
        t0,
    );
    assert_eq!(
        b.blocked("C", "host:discord.com", t0),
        Some((MAX_THROTTLE, Blocked::Throttled))
    );
}

#[test]
fn the_host_opens_only_across_many_endpoints() {
    let b = Breakers::new(cfg());
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    // (endpoint, outcome, expected host transition)
    let steps: &[(&str, Outcome, Option<Transition>)] = &[
        ("ok1", Outcome::Ok, None),
        ("A", FAIL, None),
        ("A", FAIL, None),
        ("A", FAIL, None), // one endpoint, however often: not the host
        ("B", THROTTLED, None),
        ("C", FAIL, None), // two endpoints
        ("ok2", Outcome::Ok, None),
        ("D", FAIL, Some(Transition::Opened)), // three of five = 0.6 ≥ 0.5
    ];
    for (i, &(ep, outcome, want)) in steps.iter().enumerate() {
        assert_eq!(
            b.record(ep, "h", outcome, t0 + ms(i as u64)).host,
            want,
            "step {i} {ep}"
        );
    }
    assert_eq!(rejected(b.admit("ok1", "h", t0 + ms(10))), Some(Blocked::Host));
    assert_eq!(b.admit("x", "other-host", t0 + ms(10)), Admission::Allow);
}

#[test]
fn many_healthy_endpoints_keep_the_host_closed() {
    let b = Breakers::new(cfg());
    let t0 = Instant::now();
    for n in 0..10 {
        b.record(&format!("ok{n}"), "h", Outcome::Ok, t0);
    }
    // failing endpoints must be at least half of those seen: 10 of 20
    for n in 0..9 {
        assert_eq!(b.record(&format!("bad{n}"), "h", FAIL, t0).host, None, "bad{n}");
    }
    assert_eq!(b.record("bad9", "h", FAIL, t0).host, Some(Transition::Opened));
}

#[test]
fn a_half_open_host_gives_every_endpoint_its_own_probe() {
    let b = Breakers::new(BreakerConfig {
        min_requests: 100,
        ..cfg()
    });
    let t0 = Instant::now();
    let s = Duration::from_secs;
    for ep in ["A", "C", "D"] {
        b.record(ep, "h", FAIL, t0);
    }
    assert_eq!(rejected(b.admit("B", "h", t0 + s(1))), Some(Blocked::Host));
    // open_for passed: A probes; A's other tasks wait, B still gets its own probe
    assert_eq!(b.admit("A", "h", t0 + s(5)), Admission::Probe);
    assert_eq!(rejected(b.admit("A", "h", t0 + s(5))), Some(Blocked::Host));
    assert_eq!(b.blocked("B", "h", t0 + s(5)), None);
    // A's probe fails: one endpoint is not the host, the round goes on
    assert_eq!(b.record("A", "h", FAIL, t0 + s(5)).host, None);
    assert_eq!(rejected(b.admit("A", "h", t0 + s(6))), Some(Blocked::Host));
    assert_eq!(b.admit("B", "h", t0 + s(6)), Admission::Probe);
    assert_eq!(
        b.record("B", "h", Outcome::Ok, t0 + s(6)).host,
        Some(Transition::Closed)
    );
    assert_eq!(b.admit("A", "h", t0 + s(6)), Admission::Allow);
    // re-opens when three distinct probes fail
    for ep in ["A", "C", "D"] {
        b.record(ep, "h", FAIL, t0 + s(7));
    }
    for (i, ep) in ["A", "C", "D"].into_iter().enumerate() {
        assert_eq!(b.admit(ep, "h", t0 + s(12)), Admission::Probe);
        let want = (i == 2).then_some(Transition::Opened);
        assert_eq!(b.record(ep, "h", FAIL, t0 + s(12)).host, want, "{ep}");
    }
    assert_eq!(rejected(b.admit("B", "h", t0 + s(13))), Some(Blocked::Host));
    // a round whose probes never report is replaced after open_for
    assert_eq!(b.admit("A", "h", t0 + s(17)), Admission::Probe);
    assert_eq!(rejected(b.admit("A", "h", t0 + s(18))), Some(Blocked::Host));
    assert_eq!(b.admit("A", "h", t0 + s(22)), Admission::Probe);
}

#[test]
fn memory_is_bounded() {
    let b = Breakers::new(cfg());
    let t0 = Instant::now();
    // healthy endpoints leave no endpoint state (their host remembers them, bounded)
    for n in 0..1000 {
        b.record(&format!("ok{n}"), "h", Outcome::Ok, t0);
    }
    assert_eq!(b.tracked(), (0, 1));
    // failing ones are bounded, the least recent forgotten first
    for n in 0..(MAX_ENDPOINTS + 50) {
        b.record(
            &format!("bad{n}"),
            &format!("h{}", n.min(MAX_HOSTS + 10)),
            FAIL,
            t0 + Duration::from_micros(n as u64),
        );
    }
    let (endpoints, hosts) = b.tracked();
    assert!(endpoints <= MAX_ENDPOINTS, "{endpoints}");
    assert!(hosts <= MAX_HOSTS, "{hosts}");
}

#[tokio::test]
async fn bulkhead_bounds_each_host_and_each_endpoint_separately() {
    let b = Bulkheads::new(4);
    assert_eq!(b.per_endpoint(), 2);
    let _a1 = b.try_endpoint("a").expect("free");
    let _a2 = b.try_endpoint("a").expect("free");
    assert!(
        b.try_endpoint("a").is_none(),
        "endpoint a holds half the host at most"
    );
    assert!(b.try_endpoint("b").is_some(), "endpoint b has its own share");
    let _h1 = b.acquire("h").await;
    let _h2 = b.acquire("h").await;
    let _h3 = b.acquire("h").await;
    let _h4 = b.acquire("h").await;
    // "h" is full, "other" is not
    let fifth = tokio::time::timeout(Duration::from_millis(100), b.acquire("h")).await;
    assert!(fifth.is_err(), "a fifth slot on host h must wait");
    let other = tokio::time::timeout(Duration::from_millis(100), b.acquire("other")).await;
    assert!(other.is_ok(), "host other has its own budget");
    assert_eq!(Bulkheads::new(1).per_endpoint(), 1);
}

#[tokio::test]
async fn a_project_holds_at_most_half_of_a_host_whatever_its_endpoints() {
    let b = Bulkheads::new(4);
    assert_eq!(b.per_project(), 2);
    // tenant A's two slow endpoints on one host: each has its endpoint share, together the project's share
    let _a1 = b.try_project("host:h", "a").expect("free");
    let _a2 = b.try_project("host:h", "a").expect("free");
    assert!(
        b.try_project("host:h", "a").is_none(),
        "project a holds half the host at most"
    );
    // another project on the same host, and project a on another host, have their own shares
    let b1 = b.try_project("host:h", "b");
    assert!(b1.is_some(), "project b has its own share of host h");
    assert!(b.try_project("host:other", "a").is_some());
    // a slot given back is free again at once
    drop(_a1);
    assert!(b.try_project("host:h", "a").is_some());
    // a hostile project id is bounded in the key and still one share
    let long = "x".repeat(100_000);
    let _l = b.try_project("host:h", &long).expect("free");
    assert_eq!(Bulkheads::new(1).per_project(), 1);
}
