//! `klaxon namespace delete` against the real RabbitMQ and Redis (single node and Cluster), with two namespaces
//! where one name is a prefix of the other (`<ns>` and `<ns>2`): only the named one goes, nothing happens without
//! `--yes`, a namespace in use is refused, and `--drop-database` drops only the namespace's own database.

mod common;

use std::time::Duration;

use common::{object_id, Env};
use klaxon_broker::{Broker, QueueType, Topology};
use klaxon_counter::RedisHandle;

/// `env` for namespace `ns` (its own `KLAXON_NAMESPACE`).
fn in_namespace(env: &Env, ns: &str) -> Env {
    env.in_namespace(ns)
}

/// Every queue and exchange Klaxon declares for `ns`.
fn names(ns: &str) -> (Vec<String>, Vec<String>) {
    let topology = Topology::new(ns, &format!("{ns}.events"), QueueType::Classic);
    let mut queues = topology.queues();
    queues.extend(topology.delay().queues());
    (queues, topology.delay().exchanges())
}

/// (queues that exist, exchanges that exist, messages in `<ns>.events`) of `ns`.
async fn existing(broker: &Broker, ns: &str) -> (usize, usize, u32) {
    let (queues, exchanges) = names(ns);
    let mut q = 0;
    let mut events = 0;
    for name in &queues {
        if let Some(depth) = broker.queue_depth(name).await.expect("passive declare") {
            q += 1;
            if *name == format!("{ns}.events") {
                events = depth.messages;
            }
        }
    }
    let mut x = 0;
    for name in &exchanges {
        if broker.exchange_exists(name).await.expect("passive declare") {
            x += 1;
        }
    }
    (q, x, events)
}

async fn set_keys(redis: &RedisHandle, keys: &[String]) {
    let mut conn = redis.clone();
    for k in keys {
        let _: () = redis::cmd("SET")
            .arg(k)
            .arg("1")
            .arg("EX")
            .arg(600)
            .query_async(&mut conn)
            .await
            .expect("SET");
    }
}

async fn count_existing(redis: &RedisHandle, keys: &[String]) -> usize {
    let mut conn = redis.clone();
    let mut n = 0;
    for k in keys {
        let exists: u64 = redis::cmd("EXISTS")
            .arg(k)
            .query_async(&mut conn)
            .await
            .expect("EXISTS");
        n += exists as usize;
    }
    n
}

/// The keys a namespace's Klaxon writes, in each shape (counters, first-seen, dedup, rate limit, digest, direct).
fn keys_of(ns: &str) -> Vec<String> {
    let p = object_id();
    vec![
        format!("{ns}:{{{p}:r1:g1}}:fx"),
        format!("{ns}:{{{p}:r1:g2}}:new"),
        format!("{ns}:{{dd:n1}}"),
        format!("{ns}:{{rl:slack:hooks.slack.com/a1b2c3}}"),
        format!("{ns}:{{dg:{p}:r1:slack}}:last"),
        format!("{ns}:{{direct:n2}}"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_one_namespace_and_never_the_one_its_name_is_a_prefix_of() {
    let a = Env::new();
    let ns = a.namespace.clone();
    let b = in_namespace(&a, &format!("{ns}2"));
    let project = object_id();
    // Both namespaces: their queues (one event waiting in each), a mute and the keys of each kind.
    for env in [&a, &b] {
        let env = env.clone();
        let project = project.clone();
        tokio::task::spawn_blocking(move || {
            env.publish(&project, "Boom", "g1").ok();
            env.ok(&["dead", "list"]); // declares every queue and the delay engine
            env.ok(&["mute", "add", "--project", &project, "--for", "1h"]);
        })
        .await
        .expect("join");
    }
    let redis = RedisHandle::connect(&klaxon_testkit::redis_url())
        .await
        .expect("redis");
    let a_keys = keys_of(&ns);
    let b_keys = keys_of(&b.namespace);
    set_keys(&redis, &a_keys).await;
    set_keys(&redis, &b_keys).await;
    let broker = Broker::connect(&klaxon_testkit::amqp_url(), Duration::from_secs(10))
        .await
        .expect("rabbitmq");
    let (all_queues, all_exchanges) = names(&ns);
    assert_eq!(
        existing(&broker, &ns).await,
        (all_queues.len(), all_exchanges.len(), 1)
    );

    let run = |env: &Env, args: &[&str]| {
        let env = env.clone();
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        async move {
            tokio::task::spawn_blocking(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                env.run(&args)
            })
            .await
            .expect("join")
        }
    };

    // The namespace is never assumed.
    let (code, _, err) = run(
        &a.clone().unset("KLAXON_NAMESPACE"),
        &["namespace", "delete", "--yes"],
    )
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--namespace"), "{err}");

    // Without --yes: what would go, nothing deleted, exit 2.
    let (code, out, err) = run(&a, &["namespace", "delete", "--namespace", &ns]).await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("nothing deleted") && err.contains("--yes"), "{err}");
    assert!(
        out.contains(&format!("  queue {ns}.events (1 message(s))")),
        "{out}"
    );
    assert!(out.contains(&format!("  exchange {ns}.delay.deliver")), "{out}");
    assert!(
        out.contains(&format!("  7 Redis key(s) `{ns}:*` (on 1 node(s))")),
        "6 keys of each shape and the mute: {out}"
    );
    assert!(out.contains(&format!("kept MongoDB database `{ns}`")), "{out}");
    assert!(
        !out.contains(&format!("{ns}2")),
        "the other namespace is not listed: {out}"
    );
    assert_eq!(
        existing(&broker, &ns).await,
        (all_queues.len(), all_exchanges.len(), 1),
        "nothing deleted"
    );
    assert_eq!(count_existing(&redis, &a_keys).await, a_keys.len());

    // Refusals that touch nothing: a database Klaxon does not own; a namespace in use.
    let (code, _, err) = run(
        &a,
        &[
            "namespace",
            "delete",
            "--yes",
            "--drop-database",
            "--mongo-db",
            "accounts",
        ],
    )
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("accounts"), "{err}");
    let consumer = broker
        .consume(&format!("{ns}.dead"), 1, "a-test-consumer")
        .await
        .expect("consume");
    let (code, _, err) = run(&a, &["namespace", "delete", "--yes"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("in use") && err.contains(&format!("{ns}.dead (1 consumer(s))")),
        "{err}"
    );
    consumer.close().await;
    assert_eq!(count_existing(&redis, &a_keys).await, a_keys.len());

    // --yes (the namespace from the variable): everything of `ns`, and only that.
    let consumer_gone = klaxon_testkit::wait_for(Duration::from_secs(10), || async {
        let depth = broker.queue_depth(&format!("{ns}.dead")).await.ok().flatten()?;
        (depth.consumers == 0).then_some(())
    })
    .await;
    assert!(consumer_gone.is_some(), "the test's consumer went away");
    let (code, out, err) = run(
        &a,
        &["namespace", "delete", "--yes", "--events-queue", "notifier"],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("kept queue notifier"), "{out}");
    assert!(
        out.contains(&format!("deleted queue {ns}.events (1 message(s))")),
        "{out}"
    );
    assert!(out.contains(&format!("deleted exchange {ns}.delay.L19")), "{out}");
    assert!(out.contains(&format!("deleted 7 Redis key(s) `{ns}:*`")), "{out}");
    assert_eq!(existing(&broker, &ns).await, (0, 0, 0), "{out}");
    assert_eq!(count_existing(&redis, &a_keys).await, 0);
    assert!(
        klaxon_counter::namespace::keys(&redis, &ns, 100)
            .await
            .expect("scan")
            .is_empty(),
        "the mute went too"
    );

    // The namespace whose name starts with the deleted one's is whole.
    let b_ns = b.namespace.clone();
    assert_eq!(
        existing(&broker, &b_ns).await,
        (all_queues.len(), all_exchanges.len(), 1)
    );
    assert_eq!(count_existing(&redis, &b_keys).await, b_keys.len());
    let b_mutes = b.ok(&["mute", "list", "--project", &project, "-o", "json"]);
    assert!(b_mutes.contains("muteId"), "{b_mutes}");

    // Again: nothing left, exit 0.
    let (code, out, _) = run(&a, &["namespace", "delete", "--yes"]).await;
    assert_eq!(
        (code, out.trim()),
        (0, format!("namespace {ns}: nothing to delete").as_str())
    );

    // Clean up the other one.
    let (code, out, err) = run(&b, &["namespace", "delete", "--yes"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(existing(&broker, &b_ns).await, (0, 0, 0));
    broker.close().await;
}

/// In a Redis Cluster every master holds some of the namespace's keys: all of them go, and none of the other
/// namespace's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_the_keys_on_every_master_of_a_cluster() {
    let cluster_url = klaxon_testkit::redis_cluster_url();
    let a = Env::new().set("KLAXON_REDIS_URL", &cluster_url);
    let ns = a.namespace.clone();
    let b = in_namespace(&a, &format!("{ns}2"));
    let redis = RedisHandle::connect(&cluster_url).await.expect("cluster");
    // 60 hash tags: spread over every master's slots
    let a_keys: Vec<String> = (0..60).map(|i| format!("{ns}:{{dd:n{i}}}")).collect();
    let b_keys: Vec<String> = (0..60).map(|i| format!("{}:{{dd:n{i}}}", b.namespace)).collect();
    set_keys(&redis, &a_keys).await;
    set_keys(&redis, &b_keys).await;
    let masters = redis.key_nodes().await.expect("masters");
    assert!(masters >= 3, "a cluster of {masters} masters");

    let env = a.clone();
    let (code, out, err) = tokio::task::spawn_blocking(move || env.run(&["namespace", "delete", "--yes"]))
        .await
        .expect("join");
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "deleted 60 Redis key(s) `{ns}:*` (on {masters} node(s))"
        )),
        "{out}"
    );
    assert_eq!(count_existing(&redis, &a_keys).await, 0);
    assert_eq!(count_existing(&redis, &b_keys).await, b_keys.len());
    let env = b.clone();
    let (code, out, err) = tokio::task::spawn_blocking(move || env.run(&["namespace", "delete", "--yes"]))
        .await
        .expect("join");
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(count_existing(&redis, &b_keys).await, 0);
}

/// `--drop-database` on a server that cannot drop a database (PoloDB has no `dropDatabase`): exit 1, and nothing
/// else was deleted either. Runs against a PoloDB of its own (the shared one serves every namespace from one
/// database); skipped where PoloDB is not installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_cannot_be_dropped_leaves_the_namespace_whole() {
    let Some(bin) = klaxon_testkit::polodb_bin() else {
        eprintln!("PoloDB not installed (KLAXON_POLODB_BIN): --drop-database's failure path not tested");
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let port = common::free_port();
    let mut polodb =
        klaxon_testkit::polodb_serve(&bin, port, &dir.path().join("data")).expect("start PoloDB");
    let url = format!("mongodb://127.0.0.1:{port}/?serverSelectionTimeoutMS=2000");
    let env = Env::new().set("KLAXON_MONGO_URL", &url);
    let ns = env.namespace.clone();
    let e = env.clone();
    let up = klaxon_testkit::wait_for(Duration::from_secs(20), || {
        let e = e.clone();
        async move {
            tokio::task::spawn_blocking(move || e.run(&["rules", "list"]).0 == 0)
                .await
                .ok()?
                .then_some(())
        }
    })
    .await;
    assert!(up.is_some(), "PoloDB on {port} answers");
    let e = env.clone();
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        e.ok(&["dead", "list"]);
        e.run(&["namespace", "delete", "--yes", "--drop-database"])
    })
    .await
    .expect("join");
    let broker = Broker::connect(&klaxon_testkit::amqp_url(), Duration::from_secs(10))
        .await
        .expect("rabbitmq");
    let (queues, exchanges) = names(&ns);
    let whole = existing(&broker, &ns).await;
    let e = env.clone();
    let cleanup = tokio::task::spawn_blocking(move || e.run(&["namespace", "delete", "--yes"]))
        .await
        .expect("join");
    let _ = polodb.kill();
    let _ = polodb.wait();
    broker.close().await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(&format!("cannot drop MongoDB database `{ns}`")),
        "{err}"
    );
    assert_eq!(
        whole,
        (queues.len(), exchanges.len(), 0),
        "nothing deleted: {out}"
    );
    assert_eq!(cleanup.0, 0, "{cleanup:?}");
}
