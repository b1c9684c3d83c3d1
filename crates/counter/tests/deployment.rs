//! The deployment checks' Redis half, against single-node Redis and the cluster: the consumer registry
//! (`lua/consumers_*.lua`) and `maxmemory-policy` read from every primary.

mod common;

use std::time::Duration;

use klaxon_counter::{eviction_policies, Consumers, PolicySource, NO_EVICTION};

#[tokio::test]
async fn the_registry_counts_live_consumers_and_reports_events_taken() {
    common::on_both(|env| async move {
        let queue = format!("{}.events", env.ns);
        let reg = Consumers::new(env.redis.clone(), &env.ns, &queue);
        let ttl = Duration::from_secs(30);
        let keep = Duration::from_secs(600);
        let t = env.topology;

        let empty = reg.live(10).await.expect("live");
        assert_eq!(
            (empty.live, empty.events_ago, empty.labels.len()),
            (0, None, 0),
            "[{t}]"
        );

        assert_eq!(
            reg.beat("klaxon worker a 1", ttl, 0, keep).await.expect("beat"),
            1,
            "[{t}]"
        );
        // a second beat of the same label refreshes it, it does not add one
        assert_eq!(
            reg.beat("klaxon worker a 1", ttl, 0, keep).await.expect("beat"),
            1,
            "[{t}]"
        );
        assert_eq!(
            reg.beat("klaxon worker b 2", ttl, 5, keep).await.expect("beat"),
            2,
            "[{t}]"
        );
        let now = reg.live(10).await.expect("live");
        assert_eq!(now.live, 2, "[{t}]");
        assert!(
            now.events_ago.is_some_and(|d| d < Duration::from_secs(5)),
            "[{t}] {now:?}"
        );
        let mut labels = now.labels.clone();
        labels.sort();
        assert_eq!(labels, ["klaxon worker a 1", "klaxon worker b 2"], "[{t}]");
        assert_eq!(reg.live(1).await.expect("live").labels.len(), 1, "[{t}] bounded");

        // a registration that is not refreshed runs out; one that leaves is gone at once
        reg.beat("klaxon worker c 3", Duration::from_millis(100), 0, keep)
            .await
            .expect("beat");
        assert_eq!(reg.live(10).await.expect("live").live, 3, "[{t}]");
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(reg.live(10).await.expect("live").live, 2, "[{t}]");
        assert_eq!(reg.leave("klaxon worker a 1").await.expect("leave"), 1, "[{t}]");
        let after = reg.live(10).await.expect("live");
        assert_eq!(after.labels, ["klaxon worker b 2"], "[{t}]");

        // both keys expire
        let ttl_ms: i64 = env.query(redis::cmd("PTTL").arg(reg.key())).await;
        assert!(ttl_ms > 0 && ttl_ms <= 30_000, "[{t}] {ttl_ms}");
        let ttl_ms: i64 = env
            .query(redis::cmd("PTTL").arg(format!("{}:events", reg.key())))
            .await;
        assert!(ttl_ms > 0 && ttl_ms <= 600_000, "[{t}] {ttl_ms}");
        reg.leave("klaxon worker b 2").await.expect("leave");
    })
    .await;
}

#[tokio::test]
async fn maxmemory_policy_is_read_from_the_server_or_every_primary() {
    common::on_both(|env| async move {
        let p = eviction_policies(&env.redis).await.expect("policies");
        assert_eq!(p.source, PolicySource::Config, "[{}]", env.topology);
        // the test services run noeviction (scripts/services, scripts/redis-cluster)
        assert!(p.nodes.iter().all(|n| n.policy == NO_EVICTION), "{p:?}");
        assert!(p.evicting().is_empty());
        if env.topology == "cluster" {
            assert_eq!(p.nodes.len(), 3, "one answer per primary: {p:?}");
            assert!(p.nodes.iter().all(|n| n.node.is_some()), "{p:?}");
        } else {
            assert_eq!(p.nodes.len(), 1);
            assert_eq!(p.nodes[0].node, None);
        }
    })
    .await;
}
