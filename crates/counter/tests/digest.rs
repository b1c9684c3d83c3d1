//! The digest scripts against single-node Redis and the cluster, with injected time.

mod common;

use std::time::Duration;

use klaxon_core::{ChannelKind, NotificationEvent};
use klaxon_counter::{Claim, DigestKey, Digests};

const KEY: DigestKey<'static> = DigestKey {
    project_id: "p1",
    rule_id: "r1",
    channel: ChannelKind::Slack,
};

fn ev(group: &str, count: u64) -> NotificationEvent {
    NotificationEvent {
        group_hash: group.into(),
        title: format!("Error in {group}"),
        count,
        repetition_id: (group == "g1").then(|| "rep-1".to_owned()),
        open_for_ms: None,
        silence_period_ms: None,
        alert_id: None,
    }
}

/// What a claimed digest window fired (it resolved nothing), by group.
fn sorted(claim: Claim) -> Vec<NotificationEvent> {
    let (mut fired, resolved) = split(claim);
    assert_eq!(resolved, [], "nothing resolved");
    fired.sort_by(|a, b| a.group_hash.cmp(&b.group_hash));
    fired
}

/// What a claimed digest window fired and resolved, each by group.
fn split(claim: Claim) -> (Vec<NotificationEvent>, Vec<NotificationEvent>) {
    match claim {
        Claim::Claimed { events, .. } => {
            let mut c = klaxon_counter::HeldClaim::of(events);
            c.fired.sort_by(|a, b| a.group_hash.cmp(&b.group_hash));
            c.resolved.sort_by(|a, b| a.group_hash.cmp(&b.group_hash));
            (c.fired, c.resolved)
        }
        other => panic!("expected a claim, got {other:?}"),
    }
}

#[tokio::test]
async fn leading_edge_then_one_window_merged_and_claimed_once() {
    common::on_both(|env| async move {
        let d = Digests::new(env.redis.clone(), &env.ns);
        let t0 = 1_000_000;
        // a quiet channel: the first firing goes out at once, nothing is buffered
        let lead = d.append(&KEY, "n0", &ev("g0", 1), 2, Some(t0)).await.expect("append");
        assert!(lead.send_now && !lead.schedule_flush, "{lead:?}");
        // the next one, inside minPeriod, opens a window due minPeriod after that message
        let a = d.append(&KEY, "n1", &ev("g1", 5), 2, Some(t0 + 100)).await.expect("append");
        assert!(a.schedule_flush && !a.send_now, "{a:?}");
        assert_eq!(a.window_start_ms, t0);
        assert_eq!(a.flush_in(2), Duration::from_millis(1900));
        // later firings only append; a larger count of the same group wins, a smaller one does not
        for (id, e, t) in [("n2", ev("g2", 3), 150), ("n3", ev("g1", 9), 200), ("n4", ev("g1", 7), 300)] {
            let a = d.append(&KEY, id, &e, 2, Some(t0 + t)).await.expect("append");
            assert!(!a.schedule_flush && !a.send_now, "{id}");
            assert_eq!(a.window_start_ms, t0);
        }
        // a redelivered firing counts nothing; the redelivered opener asks for the flush again; the redelivered
        // leading firing is sent again (same notification id: the sender drops the copy)
        let dup = d.append(&KEY, "n2", &ev("g2", 50), 2, Some(t0 + 400)).await.expect("append");
        assert!(!dup.schedule_flush && !dup.send_now);
        let again = d.append(&KEY, "n1", &ev("g1", 5), 2, Some(t0 + 500)).await.expect("append");
        assert!(again.schedule_flush);
        assert_eq!(again.window_start_ms, t0);
        let lead_again = d.append(&KEY, "n0", &ev("g0", 1), 2, Some(t0 + 600)).await.expect("append");
        assert!(lead_again.send_now);

        assert!(matches!(d.claim(&KEY, t0, 2, Some(t0 + 1500)).await, Ok(Claim::Early(w)) if w == Duration::from_millis(500)));
        let claimed = sorted(d.claim(&KEY, t0, 2, Some(t0 + 2000)).await.expect("claim"));
        assert_eq!(claimed, vec![ev("g1", 9), ev("g2", 3)]);
        // a second flusher is told to come back later while the lease runs
        assert!(matches!(d.claim(&KEY, t0, 2, Some(t0 + 2001)).await, Ok(Claim::Busy(_))));

        // the digest was the channel's newest message: a firing right after it waits for the next digest,
        // due minPeriod after the digest
        let b = d.append(&KEY, "n5", &ev("g3", 1), 2, Some(t0 + 2100)).await.expect("append");
        assert!(b.schedule_flush && !b.send_now);
        assert_eq!(b.window_start_ms, t0 + 2000);

        d.done(&KEY, t0).await.expect("done");
        assert_eq!(d.claim(&KEY, t0, 2, Some(t0 + 3000)).await.expect("claim"), Claim::Gone);
        let second = sorted(d.claim(&KEY, t0 + 2000, 2, Some(t0 + 4000)).await.expect("claim"));
        assert_eq!(second, vec![ev("g3", 1)]);
        d.done(&KEY, t0 + 2000).await.expect("done");

        // a full minPeriod after the last digest with nothing fired: quiet again, the next firing goes at once
        let c = d.append(&KEY, "n6", &ev("g4", 1), 2, Some(t0 + 6000)).await.expect("append");
        assert!(c.send_now, "{c:?}");
    })
    .await;
}

/// Digests carry resolves like firings: a resolve on a quiet channel goes out at once (and starts the quiet
/// period), one inside `minPeriod` joins the window (opening it like a firing would), a redelivered resolve
/// appends nothing twice, and the claim lists what fired and what resolved apart, the same group in both when it
/// fired and resolved in one window, a resolved entry with how long its alert was open. A tenant's group that
/// starts with `r:` is still a firing, and a bare entry (buffered by an earlier version) reads as fired.
#[tokio::test]
async fn resolves_join_the_digest_like_firings() {
    use klaxon_counter::{Append, HeldEntry};
    common::on_both(|env| async move {
        let d = Digests::new(env.redis.clone(), &env.ns);
        let t0 = 3_000_000;
        let one = |id: &'static str, e: &NotificationEvent, entry: HeldEntry, at: i64| {
            let (d, e) = (d.clone(), e.clone());
            async move {
                let a = Append {
                    key: KEY,
                    notification_id: id,
                    event: &e,
                    min_period_s: 60,
                    entry,
                };
                d.append_all(&[a], Some(at)).await.expect("append").remove(0)
            }
        };
        // a resolve on a quiet channel: at once, alone; the channel is busy for minPeriod after it
        let lead = one("res-a", &ev("ga", 40), HeldEntry::Resolved, t0).await;
        assert!(
            lead.send_now && !lead.schedule_flush,
            "[{}] {lead:?}",
            env.topology
        );
        // a firing right after it opens the window, due minPeriod after the resolve
        let f = one("fire-b", &ev("gb", 7), HeldEntry::Fired, t0 + 10).await;
        assert!(f.schedule_flush && !f.send_now);
        assert_eq!(f.window_start_ms, t0);
        // its resolve joins the same window (fired and resolved in one window); so does a tenant's `r:` group
        let open = NotificationEvent {
            open_for_ms: Some(8_045_000),
            ..ev("gb", 9)
        };
        let r = one("res-b", &open, HeldEntry::Resolved, t0 + 20).await;
        assert!(!r.schedule_flush && !r.send_now);
        assert_eq!(r.window_start_ms, t0);
        one("fire-rx", &ev("r:x", 2), HeldEntry::Fired, t0 + 30).await;
        // redelivered (a timer that came back): nothing twice, nothing sent
        let again = one("res-b", &ev("gb", 99), HeldEntry::Resolved, t0 + 40).await;
        assert!(!again.schedule_flush && !again.send_now);
        // the redelivered leading resolve is sent again (same id: the sender drops the copy)
        assert!(
            one("res-a", &ev("ga", 40), HeldEntry::Resolved, t0 + 50)
                .await
                .send_now
        );
        // an entry an earlier version buffered under its bare group
        let mut conn = env.redis.clone();
        let _: i64 = redis::cmd("HSET")
            .arg(format!("{}:buf", d.key_base(&KEY)))
            .arg("old")
            .arg(r#"{"count":4,"title":"Error in old","repetitionId":null}"#)
            .query_async(&mut conn)
            .await
            .expect("hset");

        let (fired, resolved) = split(d.claim(&KEY, t0, 60, Some(t0 + 60_000)).await.expect("claim"));
        assert_eq!(
            fired,
            vec![ev("gb", 7), ev("old", 4), ev("r:x", 2)],
            "[{}]",
            env.topology
        );
        // a resolved entry keeps how long its alert was open
        assert_eq!(resolved, vec![open], "[{}]", env.topology);
        d.done(&KEY, t0).await.expect("done");
        assert_eq!(
            d.claim(&KEY, t0, 60, Some(t0 + 60_001)).await.expect("claim"),
            Claim::Gone
        );
    })
    .await;
}

#[tokio::test]
async fn a_crashed_claim_is_recovered_after_its_lease() {
    common::on_both(|env| async move {
        let d = Digests::new(env.redis.clone(), &env.ns).with_claim_lease(Duration::from_millis(300));
        let t0 = 5_000_000;
        let lead = d
            .append(&KEY, "n0", &ev("g0", 1), 1, Some(t0))
            .await
            .expect("append");
        assert!(lead.send_now);
        d.append(&KEY, "n1", &ev("g1", 2), 1, Some(t0 + 10))
            .await
            .expect("append");
        let first = sorted(d.claim(&KEY, t0, 1, Some(t0 + 1000)).await.expect("claim"));
        // the flusher "crashes": no done. While the lease runs nobody else takes it...
        assert!(matches!(d.claim(&KEY, t0, 1, None).await, Ok(Claim::Busy(_))));
        // ...after it, the same record comes back, once
        tokio::time::sleep(Duration::from_millis(400)).await;
        let recovered = sorted(d.claim(&KEY, t0, 1, None).await.expect("claim"));
        assert_eq!(recovered, first);
        assert!(matches!(d.claim(&KEY, t0, 1, None).await, Ok(Claim::Busy(_))));
        d.done(&KEY, t0).await.expect("done");
        assert_eq!(d.claim(&KEY, t0, 1, None).await.expect("claim"), Claim::Gone);
    })
    .await;
}

/// A channel that stays busy does not grow its digest state: 5,000 firings, one a second (a window every
/// minute, claimed as it falls due), leave the id set bounded by the last `minPeriod` + 10 minutes of firings.
#[tokio::test]
async fn a_busy_channel_keeps_its_digest_state_bounded() {
    common::on_both(|env| async move {
        let d = Digests::new(env.redis.clone(), &env.ns);
        let key = DigestKey {
            project_id: "busy",
            rule_id: "r1",
            channel: ChannelKind::Slack,
        };
        let t0 = 10_000_000;
        let mut open: Option<i64> = None;
        for i in 0..5_000i64 {
            let now = t0 + i * 1000;
            if let Some(start) = open.filter(|s| now >= s + 60_000) {
                let _ = d.claim(&key, start, 60, Some(now)).await.expect("claim");
                d.done(&key, start).await.expect("done");
                open = None;
            }
            let a = d
                .append(
                    &key,
                    &format!("n{i}"),
                    &ev(&format!("g{}", i % 7), 1),
                    60,
                    Some(now),
                )
                .await
                .expect("append");
            if a.schedule_flush {
                open = Some(a.window_start_ms);
            }
        }
        let ids = format!("{}:idz", d.key_base(&key));
        let mut conn = env.redis.clone();
        let card: u64 = redis::cmd("ZCARD")
            .arg(&ids)
            .query_async(&mut conn)
            .await
            .expect("zcard");
        assert!(card <= 661, "ids kept: {card} (60 s + 600 s of firings at most)");
        let bytes: u64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&ids)
            .query_async(&mut conn)
            .await
            .expect("memory usage");
        assert!(bytes < 128 * 1024, "{bytes} bytes for the id set");
    })
    .await;
}

/// Titles are shortened when buffered: a window of 40 firings with 250 KB titles claims as a small digest.
#[tokio::test]
async fn huge_titles_are_shortened_when_buffered() {
    common::on_both(|env| async move {
        let d = Digests::new(env.redis.clone(), &env.ns);
        let key = DigestKey {
            project_id: "huge",
            rule_id: "r1",
            channel: ChannelKind::Webhook,
        };
        let t0 = 20_000_000;
        let title = "T".repeat(250_000);
        let mut start = None;
        for i in 0..41 {
            let e = NotificationEvent {
                group_hash: format!("g{i}"),
                title: title.clone(),
                count: 1,
                repetition_id: None,
                open_for_ms: None,
                silence_period_ms: None,
                alert_id: None,
            };
            let a = d
                .append(&key, &format!("h{i}"), &e, 60, Some(t0 + i))
                .await
                .expect("append");
            if a.schedule_flush {
                start = Some(a.window_start_ms);
            }
        }
        let start = start.expect("a window opened after the leading firing");
        let events = sorted(d.claim(&key, start, 60, Some(t0 + 60_000)).await.expect("claim"));
        assert_eq!(events.len(), 40);
        let bytes: usize = events.iter().map(|e| e.title.len()).sum();
        assert!(
            events
                .iter()
                .all(|e| e.title.len() <= klaxon_counter::digest::MAX_BUFFERED_TITLE_BYTES),
            "titles cut"
        );
        assert!(bytes <= 40 * 1024, "{bytes} bytes of titles");
    })
    .await;
}

/// Issue #42: a digest (or quiet) window buffered each group as it came, up to 1,000 of each kind: 200 KB group
/// hashes made a ~200 MB buffer. The buffer holds a long group as its digest (`bounded_group`), as alerts and
/// counting keys do, fired and resolved alike, so the claim lists it under the digest.
#[tokio::test]
async fn huge_groups_are_held_as_their_digest_when_buffered() {
    common::on_both(|env| async move {
        let t = env.topology;
        let d = Digests::new(env.redis.clone(), &env.ns);
        let key = DigestKey {
            project_id: "hugeg",
            rule_id: "r1",
            channel: ChannelKind::Webhook,
        };
        let t0 = 21_000_000;
        let groups: Vec<String> = (0..6).map(|i| format!("{i}{}", "g".repeat(200 * 1024))).collect();
        let mut start = None;
        for (i, g) in groups.iter().enumerate() {
            let e = NotificationEvent {
                group_hash: g.clone(),
                ..ev("x", 1)
            };
            let a = d
                .append_all(
                    &[klaxon_counter::Append {
                        key,
                        notification_id: &format!("hg{i}"),
                        event: &e,
                        min_period_s: 60,
                        entry: klaxon_counter::HeldEntry::Fired,
                    }],
                    Some(t0 + i as i64),
                )
                .await
                .expect("append");
            if a[0].schedule_flush {
                start = Some(a[0].window_start_ms);
            }
        }
        // one of them resolves within the window: the same (bounded) group, under its own kind
        let resolved = NotificationEvent {
            group_hash: groups[3].clone(),
            ..ev("x", 1)
        };
        d.append_all(
            &[klaxon_counter::Append {
                key,
                notification_id: "hg-res",
                event: &resolved,
                min_period_s: 60,
                entry: klaxon_counter::HeldEntry::Resolved,
            }],
            Some(t0 + 10),
        )
        .await
        .expect("append");
        let buf = format!("{}:buf", d.key_base(&key));
        let used: Option<u64> = env.query(redis::cmd("MEMORY").arg("USAGE").arg(&buf)).await;
        let used = used.unwrap_or(0);
        eprintln!("measured: [{t}] {used} bytes of digest buffer for 6 entries with 200 KB groups");
        assert!(used > 0 && used < 16 * 1024, "[{t}] {used} bytes");
        let start = start.expect("a window opened after the leading firing");
        let (fired, resolved) = split(d.claim(&key, start, 60, Some(t0 + 60_000)).await.expect("claim"));
        let digest = |g: &str| klaxon_core::alert::bounded_group(g).into_owned();
        let mut want: Vec<String> = groups[1..].iter().map(|g| digest(g)).collect();
        want.sort();
        let got: Vec<String> = fired.iter().map(|e| e.group_hash.clone()).collect();
        assert_eq!(
            got, want,
            "[{t}] the window's firings, by their digests (the first went at once)"
        );
        assert_eq!(
            resolved.iter().map(|e| e.group_hash.clone()).collect::<Vec<_>>(),
            vec![digest(&groups[3])],
            "[{t}]"
        );
        env.redis
            .unlink(&["win", "buf", "idz", "last"].map(|s| format!("{}:{s}", d.key_base(&key))))
            .await
            .expect("unlink");
    })
    .await;
}

/// The firings of a worker's batch, as it appends them: several digests, the same digest more than once (its
/// leading firing, the opener of its window, later ones), and a redelivered firing.
fn batch_firings() -> Vec<(DigestKey<'static>, String, NotificationEvent)> {
    let other = DigestKey {
        project_id: "p2",
        rule_id: "r9",
        channel: ChannelKind::Email,
    };
    let mut out = Vec::new();
    for i in 0..20 {
        let key = if i % 3 == 0 { other } else { KEY };
        out.push((key, format!("n{i}"), ev(&format!("g{}", i % 4), 1 + i)));
    }
    out.push((KEY, "n1".into(), ev("g1", 2)));
    out
}

fn appends<'a>(
    firings: &'a [(DigestKey<'static>, String, NotificationEvent)],
) -> Vec<klaxon_counter::Append<'a>> {
    firings
        .iter()
        .map(|(key, id, event)| klaxon_counter::Append {
            key: *key,
            notification_id: id,
            event,
            min_period_s: 60,
            entry: klaxon_counter::HeldEntry::Fired,
        })
        .collect()
}

/// A batch of firings appended together decides exactly as the same firings appended one after the other:
/// per firing, in order (the first of a quiet channel goes at once, the next opens the window, a redelivered
/// one counts nothing twice), on a single Redis and across cluster slots.
#[tokio::test]
async fn a_batch_of_firings_decides_as_one_by_one() {
    common::on_both(|env| async move {
        let firings = batch_firings();
        let t0 = 30_000_000;
        let batched = Digests::new(env.redis.clone(), &format!("{}-batch", env.ns))
            .append_all(&appends(&firings), Some(t0))
            .await
            .expect("append_all");
        let single = Digests::new(env.redis.clone(), &format!("{}-single", env.ns));
        let mut one_by_one = Vec::new();
        for (key, id, event) in &firings {
            one_by_one.push(single.append(key, id, event, 60, Some(t0)).await.expect("append"));
        }
        assert_eq!(batched, one_by_one, "[{}]", env.topology);
        let sent_now: Vec<usize> = (0..batched.len()).filter(|&i| batched[i].send_now).collect();
        let opened: Vec<usize> = (0..batched.len())
            .filter(|&i| batched[i].schedule_flush)
            .collect();
        // n0 (other) and n1 (KEY) lead; n3 and n2 open their windows; the redelivered n1 is sent again
        assert_eq!(sent_now, vec![0, 1, 20], "[{}]", env.topology);
        assert_eq!(opened, vec![2, 3], "[{}]", env.topology);
        assert!(single.append_all(&[], None).await.expect("nothing").is_empty());
    })
    .await;
}

/// `host:port` of a `redis://[user:pass@]host:port[/db]` URL.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// A loopback TCP proxy in front of Redis that counts round trips: a client write that follows a reply (or opens
/// the connection) starts one. Replies are held back 30 ms, so a request written in several pieces is never taken
/// for several round trips.
async fn round_trip_proxy(upstream: String) -> (String, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let turns = Arc::new(AtomicU64::new(0));
    let counted = turns.clone();
    tokio::spawn(async move {
        // one connection at a time is all the test needs; each gets its own pair of pumps
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                return;
            };
            let (mut cr, mut cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            let replied = Arc::new(AtomicBool::new(true));
            let (replied_up, turns) = (replied.clone(), counted.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n @ 1..) = cr.read(&mut buf).await {
                    if replied_up.swap(false, Ordering::SeqCst) {
                        turns.fetch_add(1, Ordering::SeqCst);
                    }
                    if sw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n @ 1..) = sr.read(&mut buf).await {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    replied.store(true, Ordering::SeqCst);
                    if cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (addr.to_string(), turns)
}

/// The worker appends a batch's digest firings in one Redis round trip, however many there are (it made one per
/// firing before `append_all`: the one-by-one appends below count those).
#[tokio::test]
async fn a_batch_of_digest_firings_is_one_round_trip() {
    use std::sync::atomic::Ordering;
    let url = klaxon_testkit::redis_url();
    let (proxy, turns) = round_trip_proxy(host_port(&url)).await;
    let proxied = url.replacen(&host_port(&url), &proxy, 1);
    let redis = tokio::time::timeout(
        Duration::from_secs(15),
        klaxon_counter::RedisHandle::connect(&proxied),
    )
    .await
    .expect("connect in time")
    .expect("connect through the proxy");
    let ns = klaxon_testkit::unique_namespace();
    let d = Digests::new(redis.clone(), &ns);
    let t0 = 40_000_000;
    // the script is loaded (a NOSCRIPT reload would add round trips that have nothing to do with batching)
    d.append(&KEY, "warm-up", &ev("g0", 1), 60, Some(t0))
        .await
        .expect("append");

    let firings = batch_firings();
    let before = turns.load(Ordering::SeqCst);
    let answers = tokio::time::timeout(
        Duration::from_secs(10),
        d.append_all(&appends(&firings), Some(t0)),
    )
    .await
    .expect("in time")
    .expect("append_all");
    assert_eq!(answers.len(), firings.len());
    assert_eq!(
        turns.load(Ordering::SeqCst) - before,
        1,
        "{} firings in one round trip",
        firings.len()
    );

    // the proxy counts what it should: the same firings one by one are one round trip each
    let other = Digests::new(redis, &format!("{ns}-single"));
    let before = turns.load(Ordering::SeqCst);
    for (key, id, event) in firings.iter().take(5) {
        other.append(key, id, event, 60, Some(t0)).await.expect("append");
    }
    assert_eq!(turns.load(Ordering::SeqCst) - before, 5);
}

fn hold<'a>(
    key: DigestKey<'a>,
    id: &'a str,
    event: &'a NotificationEvent,
    entry: klaxon_counter::HeldEntry,
    until_ms: i64,
) -> klaxon_counter::Hold<'a> {
    klaxon_counter::Hold {
        key,
        notification_id: id,
        event,
        entry,
        until_ms,
        destination: "https://hooks.test/…",
        alert_id: Some("a-1"),
    }
}

/// Held messages are listed from the index until their release: one row per (project, rule, channel) hold with
/// its release's id, destination, due time, counts and first groups; a project's filter and the limit hold; a
/// moved hold is listed once, at its new due time; a claimed hold is no longer listed, and its release leaves
/// the index.
#[tokio::test]
async fn held_messages_are_listed_until_their_release() {
    use klaxon_counter::HeldEntry::*;
    common::on_both(|env| async move {
        let d = Digests::new(env.redis.clone(), &env.ns);
        let t0 = 50_000_000;
        let end = t0 + 60_000;
        const OTHER: DigestKey<'static> = DigestKey {
            project_id: "p2",
            rule_id: "r2",
            channel: ChannelKind::Webhook,
        };
        assert!(d.held(None, 10).await.expect("held").is_empty());
        let (g1, g2, g3) = (ev("g1", 5), ev("g2", 3), ev("g3", 1));
        let holds = [
            hold(KEY, "n1", &g1, Fired, end),
            hold(KEY, "n2", &g2, Fired, end),
            hold(KEY, "r2", &g2, Resolved, end),
            hold(OTHER, "o1", &g3, Fired, end + 1_000),
        ];
        d.hold_all(&holds[..3], Some(t0)).await.expect("hold");
        d.hold_all(&holds[3..], Some(t0 + 500)).await.expect("hold");
        // a redelivery lists nothing twice
        d.hold_all(&holds, Some(t0 + 600)).await.expect("hold");

        let listed = d.held(None, 10).await.expect("held");
        assert_eq!(listed.len(), 2, "[{}] {listed:?}", env.topology);
        let first = &listed[0];
        assert_eq!(
            (
                first.project_id.as_str(),
                first.rule_id.as_str(),
                first.channel,
                first.until_ms
            ),
            ("p1", "r1", ChannelKind::Slack, end)
        );
        assert_eq!(
            first.notification_id,
            klaxon_core::notification::held_release_id("p1", "r1", ChannelKind::Slack, end)
        );
        assert_eq!(first.destination, "https://hooks.test/…");
        assert_eq!((first.fired, first.resolved), (2, 1));
        assert_eq!((first.held_since_ms, first.last_held_ms), (Some(t0), Some(t0)));
        let groups: Vec<(&str, &str, u64, bool)> = first
            .groups
            .iter()
            .map(|g| (g.group.as_str(), g.title.as_str(), g.count, g.resolved))
            .collect();
        assert!(
            first.groups.iter().all(|g| g.alert_id.as_deref() == Some("a-1")),
            "{first:?}"
        );
        assert_eq!(
            groups,
            [
                ("g1", "Error in g1", 5, false),
                ("g2", "Error in g2", 3, false),
                ("g2", "Error in g2", 3, true)
            ]
        );
        assert_eq!(
            (listed[1].project_id.as_str(), listed[1].until_ms),
            ("p2", end + 1_000)
        );
        // a project's filter, and the limit
        let p2 = d.held(Some("p2"), 10).await.expect("held");
        assert_eq!(p2.iter().map(|h| h.rule_id.as_str()).collect::<Vec<_>>(), ["r2"]);
        assert_eq!(d.held(None, 1).await.expect("held").len(), 1);
        assert!(d.held(Some("p3"), 10).await.expect("held").is_empty());

        // the other project's windows changed: listed once, at the new end
        let moved = end + 90_000;
        d.hold_all(&[hold(OTHER, "o2", &g3, Fired, moved)], Some(t0 + 700))
            .await
            .expect("hold");
        let p2 = d.held(Some("p2"), 10).await.expect("held");
        assert_eq!(
            p2.iter().map(|h| h.until_ms).collect::<Vec<_>>(),
            [moved],
            "{p2:?}"
        );

        // claimed: no longer held (its release is the trail's record); done: out of the index
        assert!(matches!(
            d.claim_held(&KEY, end, Some(end)).await,
            Ok(Claim::Claimed { .. })
        ));
        let listed = d.held(None, 10).await.expect("held");
        assert_eq!(
            listed.iter().map(|h| h.project_id.as_str()).collect::<Vec<_>>(),
            ["p2"]
        );
        d.done_held(&KEY, end).await.expect("done");
        let index: Vec<String> = redis::cmd("ZRANGE")
            .arg(format!("{}:quiet:held", env.ns))
            .arg(0)
            .arg(-1)
            .query_async(&mut env.redis.clone())
            .await
            .expect("zrange");
        assert_eq!(index, [r#"["p2","r2","webhook"]"#], "[{}]", env.topology);
    })
    .await;
}

/// Quiet hours hold on the digest scripts with an explicit due time: nothing is sent at once (no leading edge),
/// the first hold schedules the release at the window's end, fired and resolved entries are kept apart, a
/// redelivery holds nothing twice, the claim is early before the end and takes everything once after it, and a
/// hold whose window already ended says "send now". The channel's digest is not touched.
#[tokio::test]
async fn hold_releases_fired_and_resolved_once_at_the_window_end() {
    use klaxon_counter::{HeldClaim, HeldEntry::*};
    common::on_both(|env| async move {
        let d = Digests::new(env.redis.clone(), &env.ns);
        let t0 = 40_000_000;
        let end = t0 + 60_000;
        let (g1, g2, g1_more) = (ev("g1", 5), ev("g2", 3), ev("g1", 8));
        let holds = [
            hold(KEY, "n1", &g1, Fired, end),
            hold(KEY, "n2", &g2, Fired, end),
            hold(KEY, "n3", &g1_more, Fired, end),
            hold(KEY, "r1", &g2, Resolved, end),
            // redelivered: nothing twice; the opener asks for the release again
            hold(KEY, "n2", &g2, Fired, end),
            hold(KEY, "n1", &g1, Fired, end),
        ];
        let answers = d.hold_all(&holds, Some(t0)).await.expect("hold_all");
        let actions: Vec<(bool, bool, i64)> = answers
            .iter()
            .map(|a| (a.send_now, a.schedule_flush, a.window_start_ms))
            .collect();
        assert_eq!(
            actions,
            [
                (false, true, end),
                (false, false, end),
                (false, false, end),
                (false, false, end),
                (false, false, end),
                (false, true, end)
            ],
            "[{}]",
            env.topology
        );
        assert_eq!(answers[0].now_ms, t0);
        // the channel's digest knows nothing of it: its first firing still goes out at once
        let lead = d.append(&KEY, "d0", &ev("g9", 1), 60, Some(t0)).await.expect("append");
        assert!(lead.send_now);

        assert!(matches!(d.claim_held(&KEY, end, Some(end - 1)).await, Ok(Claim::Early(w)) if w == Duration::from_millis(1)));
        let Claim::Claimed { events, .. } = d.claim_held(&KEY, end, Some(end)).await.expect("claim") else {
            panic!("[{}] a claim", env.topology);
        };
        let mut held = HeldClaim::of(events);
        held.fired.sort_by(|a, b| a.group_hash.cmp(&b.group_hash));
        assert_eq!(held.fired, vec![ev("g1", 8), ev("g2", 3)], "[{}]", env.topology);
        assert_eq!(held.resolved, vec![ev("g2", 3)], "[{}]", env.topology);
        assert!(matches!(d.claim_held(&KEY, end, Some(end + 1)).await, Ok(Claim::Busy(_))));
        d.done_held(&KEY, end).await.expect("done");
        assert_eq!(d.claim_held(&KEY, end, Some(end + 2)).await.expect("claim"), Claim::Gone);
        // the digest window is untouched by the release: its own claim still answers for it
        assert_eq!(d.claim(&KEY, t0, 60, Some(t0 + 1)).await.expect("claim"), Claim::Gone);

        // the window is over (Redis clock): send now, nothing held
        let late = d
            .hold_all(&[hold(KEY, "n9", &g1, Fired, end)], Some(end + 5))
            .await
            .expect("hold_all");
        assert!(late[0].send_now && !late[0].schedule_flush, "{late:?}");
        // the windows changed while something was held: the hold moves to the new end and keeps what it held
        let next_end = end + 120_000;
        let a = d.hold_all(&[hold(KEY, "m1", &g1, Fired, next_end)], Some(end + 10)).await.expect("hold");
        let b = d
            .hold_all(&[hold(KEY, "m2", &g2, Fired, next_end - 30_000)], Some(end + 20))
            .await
            .expect("hold");
        assert!(a[0].schedule_flush && b[0].schedule_flush);
        assert_eq!(d.claim_held(&KEY, next_end, Some(next_end)).await.expect("claim"), Claim::Gone);
        let Claim::Claimed { events, .. } = d.claim_held(&KEY, next_end - 30_000, Some(next_end)).await.expect("claim")
        else {
            panic!("[{}] the moved hold", env.topology);
        };
        assert_eq!(HeldClaim::of(events).fired.len(), 2);
        d.done_held(&KEY, next_end - 30_000).await.expect("done");
    })
    .await;
}

/// Three workers hold the firings of one window at once (each also re-holding the others' ids, as redelivered
/// batches would), then three flushers race for the release: exactly one claims it, with every group once.
#[tokio::test]
async fn three_concurrent_holders_and_claimers_release_one_message() {
    use klaxon_counter::{HeldClaim, HeldEntry::Fired};
    common::on_both(|env| async move {
        let key = DigestKey {
            project_id: "fleet",
            rule_id: "r1",
            channel: ChannelKind::Webhook,
        };
        let t0 = 50_000_000;
        let end = t0 + 60_000;
        let events: Vec<NotificationEvent> = (0..30).map(|i| ev(&format!("g{i}"), 1 + i)).collect();
        let ids: Vec<String> = (0..30).map(|i| format!("n{i}")).collect();
        let workers = (0..3).map(|w| {
            let d = Digests::new(env.redis.clone(), &env.ns);
            let (events, ids) = (events.clone(), ids.clone());
            tokio::spawn(async move {
                for round in 0..30 {
                    // worker w holds its own third first, then everybody's (redeliveries)
                    let i = (round + w * 10) % 30;
                    let h = [hold(key, &ids[i], &events[i], Fired, end)];
                    let a = d.hold_all(&h, Some(t0 + round as i64)).await.expect("hold");
                    assert!(!a[0].send_now);
                }
            })
        });
        for w in workers.collect::<Vec<_>>() {
            w.await.expect("worker");
        }
        let claimers = (0..3).map(|_| {
            let d = Digests::new(env.redis.clone(), &env.ns);
            tokio::spawn(async move { d.claim_held(&key, end, Some(end + 1)).await.expect("claim") })
        });
        let mut claimed = Vec::new();
        for c in claimers.collect::<Vec<_>>() {
            if let Claim::Claimed { events, .. } = c.await.expect("claimer") {
                claimed.push(HeldClaim::of(events));
            }
        }
        assert_eq!(claimed.len(), 1, "[{}] one release", env.topology);
        let mut fired = claimed.remove(0).fired;
        fired.sort_by_key(|e| e.count);
        assert_eq!(fired, events, "[{}] every group once", env.topology);
        let d = Digests::new(env.redis.clone(), &env.ns);
        d.done_held(&key, end).await.expect("done");
        assert_eq!(
            d.claim_held(&key, end, Some(end + 2)).await.expect("claim"),
            Claim::Gone
        );
    })
    .await;
}

/// A NO_EVENTS silence keeps its quiet period through the buffer (the digest lists it as a silence without
/// reading its title back); an entry buffered by an earlier version, without one, is no silence.
#[tokio::test]
async fn a_silence_keeps_its_period_through_the_buffer() {
    common::on_both(|env| async move {
        let d = Digests::new(env.redis.clone(), &env.ns);
        let t0 = 5_000_000;
        let old_key = DigestKey {
            rule_id: "r-old",
            ..KEY
        };
        for key in [KEY, old_key] {
            let lead = d
                .append(&key, "s0", &ev("g0", 1), 60, Some(t0))
                .await
                .expect("append");
            assert!(lead.send_now, "[{}] {lead:?}", env.topology);
            let a = d
                .append(&key, "s2", &ev("g2", 3), 60, Some(t0 + 10))
                .await
                .expect("append");
            assert!(a.schedule_flush, "[{}] {a:?}", env.topology);
        }
        let silence = NotificationEvent::silence(3_600_000);
        d.append(&KEY, "s1", &silence, 60, Some(t0 + 20))
            .await
            .expect("append");
        let mut conn = env.redis.clone();
        let _: i64 = redis::cmd("HSET")
            .arg(format!("{}:buf", d.key_base(&old_key)))
            .arg("f:")
            .arg(r#"{"count":0,"title":"No events for 2 hours","repetitionId":null}"#)
            .query_async(&mut conn)
            .await
            .expect("hset");
        for (key, period) in [(KEY, Some(3_600_000)), (old_key, None)] {
            let fired = sorted(d.claim(&key, t0, 60, Some(t0 + 60_000)).await.expect("claim"));
            let periods: Vec<(&str, Option<u64>)> = fired
                .iter()
                .map(|e| (e.group_hash.as_str(), e.silence_period_ms))
                .collect();
            assert_eq!(
                periods,
                [("", period), ("g2", None)],
                "[{}] {}",
                env.topology,
                key.rule_id
            );
            assert_eq!(fired[0].is_silence(), period.is_some());
            if period.is_some() {
                // the silence comes back as it was appended
                assert_eq!(fired[0], silence, "[{}]", env.topology);
            }
        }
    })
    .await;
}

/// Issue #42: a 1,200-group quiet window kept 1,000 groups, and later firings and almost every resolve vanished
/// silently ("fired 1000, resolved 0"). Each kind has its own bound, so resolves are not crowded out by firings,
/// and what is past it is counted exactly: every firing and resolve, once (redeliveries count nothing again).
#[tokio::test]
async fn a_1200_group_quiet_window_counts_what_it_cannot_list() {
    use klaxon_counter::digest::DIGEST_MAX_GROUPS;
    use klaxon_counter::HeldEntry::{Fired, Resolved};
    common::on_both(|env| async move {
        let t = env.topology;
        let d = Digests::new(env.redis.clone(), &env.ns);
        let key = DigestKey {
            project_id: "big",
            rule_id: "r1",
            channel: ChannelKind::Webhook,
        };
        let t0 = 50_000_000;
        let end = t0 + 3_600_000;
        let events: Vec<NotificationEvent> = (0..1200).map(|i| ev(&format!("g{i}"), 1 + i % 7)).collect();
        let fired_ids: Vec<String> = (0..1200).map(|i| format!("f{i}")).collect();
        let resolved_ids: Vec<String> = (0..1006).map(|i| format!("r{i}")).collect();
        // firings first (they would fill a shared bound), then 1,006 resolves, then every firing redelivered
        let mut holds: Vec<klaxon_counter::Hold<'_>> = Vec::new();
        for (e, id) in events.iter().zip(&fired_ids) {
            holds.push(hold(key, id, e, Fired, end));
        }
        for (e, id) in events.iter().zip(&resolved_ids) {
            holds.push(hold(key, id, e, Resolved, end));
        }
        for (e, id) in events.iter().zip(&fired_ids) {
            holds.push(hold(key, id, e, Fired, end));
        }
        for chunk in holds.chunks(500) {
            d.hold_all(chunk, Some(t0)).await.expect("hold_all");
        }
        let Claim::Claimed {
            events: got, more, ..
        } = d.claim_held(&key, end, Some(end)).await.expect("claim")
        else {
            panic!("[{t}] a claim");
        };
        let held = klaxon_counter::HeldClaim::of(got).with_more(more);
        assert_eq!(
            (held.fired.len(), held.resolved.len()),
            (DIGEST_MAX_GROUPS, DIGEST_MAX_GROUPS),
            "[{t}] each kind lists up to its own bound"
        );
        assert_eq!(
            (held.more.fired, held.more.resolved),
            (200, 6),
            "[{t}] exactly what fired and resolved past the bound"
        );
        assert_eq!(
            held.fired.len() as u64 + held.more.fired,
            1200,
            "[{t}] every firing is listed or counted"
        );
        assert_eq!(held.resolved.len() as u64 + held.more.resolved, 1006, "[{t}]");
        d.done_held(&key, end).await.expect("done");
        // an ordinary window counts nothing past a bound
        let small = [hold(key, "s1", &events[0], Fired, end + 10_000)];
        d.hold_all(&small, Some(end + 1)).await.expect("hold");
        let Claim::Claimed { more, .. } = d
            .claim_held(&key, end + 10_000, Some(end + 10_000))
            .await
            .expect("claim")
        else {
            panic!("[{t}] a claim");
        };
        assert!(more.is_none(), "[{t}] {more:?}");
        d.done_held(&key, end + 10_000).await.expect("done");
    })
    .await;
}

/// A listing reads what its limit asks and no more: 600 holds of three projects; the soonest 100 come first, in
/// order of their release; one project's 200 are found among the others. Timed (printed) on both topologies.
#[tokio::test]
async fn listing_held_messages_reads_by_limit_soonest_first() {
    use klaxon_counter::HeldEntry::Fired;
    common::on_both(|env| async move {
        let d = Digests::new(env.redis.clone(), &env.ns);
        let t0 = 60_000_000;
        let projects = ["pa", "pb", "pc"];
        let rules: Vec<String> = (0..200).map(|i| format!("r{i:03}")).collect();
        let event = ev("g1", 1);
        let keys: Vec<(DigestKey<'_>, String, i64)> = rules
            .iter()
            .enumerate()
            .flat_map(|(i, r)| {
                projects.iter().enumerate().map(move |(j, p)| {
                    let key = DigestKey {
                        project_id: p,
                        rule_id: r,
                        channel: ChannelKind::Webhook,
                    };
                    (key, format!("n-{p}-{r}"), t0 + 60_000 + (i * 3 + j) as i64)
                })
            })
            .collect();
        let holds: Vec<klaxon_counter::Hold<'_>> = keys
            .iter()
            .map(|(k, id, until)| hold(*k, id, &event, Fired, *until))
            .collect();
        d.hold_all(&holds, Some(t0)).await.expect("hold");

        let started = std::time::Instant::now();
        let first = d.held(None, 100).await.expect("held");
        let all_limit = started.elapsed();
        assert_eq!(first.len(), 100, "[{}]", env.topology);
        let dues: Vec<i64> = first.iter().map(|h| h.until_ms).collect();
        assert!(dues.windows(2).all(|w| w[0] < w[1]), "soonest first");
        assert_eq!(dues[0], t0 + 60_000);
        let started = std::time::Instant::now();
        let pc = d.held(Some("pc"), 1000).await.expect("held");
        let one_project = started.elapsed();
        assert_eq!(pc.len(), 200, "[{}]", env.topology);
        assert!(pc.iter().all(|h| h.project_id == "pc"));
        eprintln!(
            "[{}] held listing over 600 holds: limit 100 in {all_limit:?}; one project's 200 in {one_project:?}",
            env.topology
        );
    })
    .await;
}
