//! RuleStore and RuleCache against a real MongoDB-wire server (`KLAXON_TEST_MONGO_URL`).

mod common;

use std::sync::Arc;
use std::time::Duration;

use klaxon_core::{ChannelKind, WhatToReceive};
use klaxon_store::{InvalidationMode, RuleCache, RulesError};
use mongodb::bson::{doc, oid::ObjectId};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn project() -> String {
    ObjectId::new().to_hex()
}

fn only_new_slack() -> serde_json::Value {
    json!({"isEnabled": true, "whatToReceive": "ONLY_NEW", "including": [], "excluding": [],
           "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.test/x", "minPeriod": 0}}})
}

#[tokio::test]
async fn add_list_disable_enable_remove_round_trip() {
    let store = common::fresh_store().await;
    let p = project();
    let a = store
        .add_rule(&p, &only_new_slack(), 100)
        .await
        .expect("add to a new project");
    let b = store
        .add_rule(&p, &json!({"isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 3, "thresholdPeriod": 60000,
            "window": "sliding", "channels": {"webhook": {"isEnabled": true, "endpoint": "https://x.test/h", "minPeriod": 5}}}), 100)
        .await
        .expect("add to an existing project");
    assert_ne!(a, b);

    let stored = store.project(&p).await.expect("read").expect("project exists");
    assert_eq!(stored.notifications.len(), 2);
    let rules = stored.rules();
    assert!(rules.problems.is_empty(), "{:?}", rules.problems);
    assert_eq!(
        rules.rules[1].what,
        WhatToReceive::SeenMore {
            threshold: 3,
            period_ms: 60000
        }
    );
    assert_eq!(rules.rules[1].channels[0].kind, ChannelKind::Webhook);

    // Without the project: the rule is searched.
    assert_eq!(store.set_enabled(None, &a, false).await.expect("disable"), p);
    let loaded = store.load(&p).await.expect("load").expect("known");
    assert!(!loaded.rules.iter().find(|r| r.id == a).expect("rule a").enabled);
    store.set_enabled(Some(&p), &a, true).await.expect("enable");
    let loaded = store.load(&p).await.expect("load").expect("known");
    assert!(loaded.rules.iter().find(|r| r.id == a).expect("rule a").enabled);

    assert_eq!(store.remove_rule(Some(&p), &b).await.expect("remove"), p);
    let loaded = store.load(&p).await.expect("load").expect("known");
    assert_eq!(
        loaded.rules.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        vec![a.as_str()]
    );

    let missing = store.remove_rule(None, &b).await.expect_err("already removed");
    assert!(matches!(missing, RulesError::RuleNotFound(_)), "{missing}");
    assert!(!missing.is_transient());
    let bad = store.set_enabled(None, "nope", true).await.expect_err("bad id");
    assert!(matches!(bad, RulesError::InvalidId { .. }), "{bad}");
}

#[tokio::test]
async fn reads_a_hawk_document_with_extra_fields_and_unsupported_channels() {
    let store = common::fresh_store().await;
    let pid = ObjectId::new();
    let rid = ObjectId::new();
    common::raw_projects(&store)
        .await
        .insert_one(doc! {
            "_id": pid, "name": "Hawk project", "token": "secret-token", "uidAdded": ObjectId::new(),
            "notifications": [{
                "_id": rid, "uidAdded": ObjectId::new(), "isEnabled": true, "whatToReceive": "SEEN_MORE",
                "including": ["db"], "excluding": [], "threshold": 100_i32, "thresholdPeriod": 3_600_000_i64,
                "channels": {
                    "email": {"isEnabled": false, "endpoint": "a@b.c", "minPeriod": 60},
                    "telegram": {"isEnabled": true, "endpoint": "-100123", "minPeriod": 0},
                    "loop": {"isEnabled": true, "endpoint": "x", "minPeriod": 0},
                    "webPush": {"isEnabled": true, "endpoint": "x", "minPeriod": 0},
                    "desktopPush": {"isEnabled": true, "endpoint": "x", "minPeriod": 0},
                },
            }],
        })
        .await
        .expect("insert Hawk document");
    let rules = store
        .load(&pid.to_hex())
        .await
        .expect("load")
        .expect("known project");
    assert!(rules.problems.is_empty(), "{:?}", rules.problems);
    assert_eq!(rules.rules.len(), 1);
    let r = &rules.rules[0];
    assert_eq!(r.id, rid.to_hex());
    assert_eq!(
        r.what,
        WhatToReceive::SeenMore {
            threshold: 100,
            period_ms: 3_600_000
        }
    );
    assert_eq!(
        r.channels.iter().map(|c| c.kind).collect::<Vec<_>>(),
        vec![ChannelKind::Telegram, ChannelKind::Loop],
        "Hawk's loop is delivered; webPush and desktopPush are ignored"
    );
    assert_eq!(store.queries(), 1);
}

#[tokio::test]
async fn one_bad_rule_is_reported_once_and_the_good_one_still_loads() {
    let store = common::fresh_store().await;
    let p = project();
    let bad = ObjectId::new().to_hex();
    let good = ObjectId::new().to_hex();
    let import = json!([{"_id": p, "notifications": [
        {"_id": bad, "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 0, "thresholdPeriod": 60000,
         "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.test/x"}}},
        {"_id": good, "isEnabled": true, "whatToReceive": "ONLY_NEW", "includingPatterns": ["^Timeout"],
         "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.test/x"}}},
    ]}]);
    let parsed = klaxon_store::parse_import(&import.to_string()).expect("well-formed");
    store.replace(&parsed).await.expect("import");

    for _ in 0..3 {
        let rules = store.load(&p).await.expect("load").expect("known");
        assert_eq!(
            rules.rules.iter().map(|r| r.id.clone()).collect::<Vec<_>>(),
            vec![good.clone()]
        );
        assert_eq!(rules.problems.len(), 1);
        assert_eq!(rules.problems[0].rule_id.as_deref(), Some(bad.as_str()));
    }
    // Reported once per rule version, not per load.
    assert_eq!(store.problems_reported(), 1);
}

#[tokio::test]
async fn import_replaces_existing_and_creates_missing_projects_and_export_matches() {
    let store = common::fresh_store().await;
    let existing = project();
    let old = store
        .add_rule(&existing, &only_new_slack(), 100)
        .await
        .expect("add");
    let created = project();
    let file = json!([
        {"_id": existing, "notifications": [only_new_slack()]},
        {"_id": {"$oid": created}, "notifications": [only_new_slack(), only_new_slack()]},
    ]);
    let parsed = klaxon_store::parse_import(&file.to_string()).expect("well-formed");
    store.replace(&parsed).await.expect("import");

    let ex = store.project(&existing).await.expect("read").expect("exists");
    assert_eq!(ex.notifications.len(), 1);
    assert_ne!(ex.rules().rules[0].id, old, "replaced, not appended");
    assert_eq!(
        store
            .project(&created)
            .await
            .expect("read")
            .expect("created")
            .notifications
            .len(),
        2
    );

    let exported = store
        .export(&[existing.clone(), created.clone()])
        .await
        .expect("export");
    assert_eq!(exported, parsed);
    // PoloDB serves one database whatever the name, so other tests' projects may be listed too.
    let all = store.export(&[]).await.expect("export all");
    for p in &parsed {
        assert!(all.contains(p), "export of every project lists {}", p.project_id);
    }
    // Importing the export again is a no-op.
    let text = klaxon_store::export_json(&exported).to_string();
    assert_eq!(klaxon_store::parse_import(&text).expect("re-import"), parsed);
}

#[tokio::test]
async fn unknown_project_has_no_rules_and_is_negatively_cached() {
    let store = common::fresh_store().await;
    let cache = RuleCache::new(store.clone(), Duration::from_secs(60));
    let p = project();
    for _ in 0..5 {
        let rules = cache.get(&p).await.expect("unknown is not an error");
        assert!(rules.rules.is_empty());
    }
    assert_eq!(cache.queries(), 1);
    // Not an ObjectId: no rules, and no query at all.
    assert!(cache
        .get("not-a-project")
        .await
        .expect("no error")
        .rules
        .is_empty());
    assert_eq!(cache.queries(), 1);
}

#[tokio::test]
async fn five_sequential_and_a_hundred_concurrent_events_cost_one_query() {
    let store = common::fresh_store().await;
    let p = project();
    store.add_rule(&p, &only_new_slack(), 100).await.expect("add");
    let cache = RuleCache::new(store.clone(), Duration::from_secs(60));
    for _ in 0..5 {
        assert_eq!(cache.get(&p).await.expect("rules").rules.len(), 1);
    }
    assert_eq!(store.queries(), 1);

    let q = project();
    store.add_rule(&q, &only_new_slack(), 100).await.expect("add");
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let cache = cache.clone();
            let q = q.clone();
            tokio::spawn(async move { cache.get(&q).await.map(|r| r.rules.len()) })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.expect("task").expect("rules"), 1);
    }
    assert_eq!(store.queries(), 2, "one query for p, one for q");
    // Upper-case ids are the same project.
    cache.get(&q.to_ascii_uppercase()).await.expect("rules");
    assert_eq!(store.queries(), 2);
}

#[tokio::test]
async fn ttl_expiry_and_invalidation_reload() {
    let store = common::fresh_store().await;
    let p = project();
    let rid = store.add_rule(&p, &only_new_slack(), 100).await.expect("add");
    let cache = RuleCache::new(store.clone(), Duration::from_millis(300));
    assert!(cache.get(&p).await.expect("rules").rules[0].enabled);

    store.set_enabled(Some(&p), &rid, false).await.expect("disable");
    // Within the TTL the cached rules are used…
    assert!(cache.get(&p).await.expect("rules").rules[0].enabled);
    assert_eq!(store.queries(), 1);
    // …after it they are reloaded.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!cache.get(&p).await.expect("rules").rules[0].enabled);
    assert_eq!(store.queries(), 2);

    let cache = RuleCache::new(store.clone(), Duration::from_secs(60));
    assert!(!cache.get(&p).await.expect("rules").rules[0].enabled);
    store.set_enabled(Some(&p), &rid, true).await.expect("enable");
    cache.invalidate(&p);
    assert!(cache.get(&p).await.expect("rules").rules[0].enabled);
    assert_eq!(cache.invalidations(), 1);
}

#[tokio::test]
async fn change_streams_are_detected_not_configured() {
    let store = common::fresh_store().await;
    let cache = RuleCache::new(store, Duration::from_secs(60));
    assert_eq!(cache.invalidation_mode(), InvalidationMode::NotStarted);
    let shutdown = CancellationToken::new();
    let mode = cache.start_invalidation(shutdown.clone()).await;
    // PoloDB (and standalone MongoDB) have none; a replica set has them. Either way the cache says which.
    assert_ne!(mode, InvalidationMode::NotStarted);
    assert_eq!(cache.invalidation_mode(), mode);
    shutdown.cancel();
}

#[tokio::test]
async fn mongodb_stopped_mid_test_keeps_serving_cached_rules() {
    let mut polo = common::OwnPolo::start();
    let db = klaxon_testkit::unique_namespace();
    let store = klaxon_store::RuleStore::connect(&polo.url, &db)
        .await
        .expect("own PoloDB");
    let p = project();
    let never_loaded = project();
    store.add_rule(&p, &only_new_slack(), 100).await.expect("add");
    let cache = RuleCache::new(store.clone(), Duration::from_millis(200))
        .with_error_retry(Duration::from_millis(100));
    let before: Arc<klaxon_core::ProjectRules> = cache.get(&p).await.expect("rules");
    assert_eq!(before.rules.len(), 1);
    assert_eq!(cache.stale_served(), 0);

    polo.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Five events after the TTL, MongoDB gone: every one still gets the last good rules.
    for _ in 0..5 {
        let rules = tokio::time::timeout(Duration::from_secs(10), cache.get(&p))
            .await
            .expect("bounded by the server selection timeout")
            .expect("stale-while-error never fails with a cached value");
        assert_eq!(rules.rules.len(), 1);
        assert_eq!(rules.rules[0].id, before.rules[0].id);
    }
    assert!(
        cache.stale_served() >= 5,
        "stale_served = {}",
        cache.stale_served()
    );
    assert!(cache.load_errors() >= 1);
    assert!(cache.is_degraded());

    // A project never loaded has nothing to fall back to: a transient error.
    let err = tokio::time::timeout(Duration::from_secs(10), cache.get(&never_loaded))
        .await
        .expect("bounded")
        .expect_err("nothing cached");
    assert!(err.is_transient(), "{err}");
}

/// A server that accepts connections but stalls (here: frozen with SIGSTOP) makes a rule lookup fail as a
/// transient error within the query deadline, instead of hanging the batch that asked.
#[tokio::test]
async fn a_stalled_server_fails_a_lookup_in_bounded_time() {
    let polo = common::OwnPolo::start();
    let db = klaxon_testkit::unique_namespace();
    let store = klaxon_store::RuleStore::connect(&polo.url, &db)
        .await
        .expect("own PoloDB");
    let p = project();
    store.add_rule(&p, &only_new_slack(), 100).await.expect("add");
    assert!(store.load(&p).await.expect("load").is_some());
    polo.signal("STOP");
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(30), store.load(&p))
        .await
        .expect("the lookup returns by itself");
    polo.signal("CONT");
    let err = result.expect_err("a stalled server is an error");
    assert!(err.is_transient(), "{err}");
    let took = started.elapsed();
    assert!(
        took <= klaxon_store::store::QUERY_TIMEOUT + Duration::from_secs(3),
        "bounded: {took:?}"
    );
}

/// A document over the rule limit, written straight into the collection the way Hawk would: the store reads
/// the first `max_rules` (document order), reports the project once, never fails; `add_rule` refuses a project
/// at the limit.
#[tokio::test]
async fn a_project_over_the_rule_limit_gives_its_first_rules_and_refuses_more() {
    let store = common::fresh_store().await;
    let projects = common::raw_projects(&store).await;
    let p = ObjectId::new();
    let rules: Vec<mongodb::bson::Document> = (0..7)
        .map(|i| {
            doc! {"_id": ObjectId::new(), "isEnabled": true, "whatToReceive": "ONLY_NEW", "including": [format!("r{i}")],
                  "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.test/x", "minPeriod": 0}}}
        })
        .collect();
    let ids: Vec<String> = rules
        .iter()
        .map(|d| d.get_object_id("_id").expect("id").to_hex())
        .collect();
    projects
        .insert_one(doc! {"_id": p, "notifications": rules})
        .await
        .expect("insert");
    let limits = klaxon_core::Limits::new(5, 1000, 50).expect("limits");
    let loaded = store
        .load_with(&p.to_hex(), &limits)
        .await
        .expect("load")
        .expect("known");
    assert_eq!(
        loaded.rules.iter().map(|r| r.id.clone()).collect::<Vec<_>>(),
        ids[..5],
        "the first five, in document order"
    );
    assert_eq!(loaded.skipped, 2);
    assert_eq!(loaded.problems.len(), 1, "{:?}", loaded.problems);
    assert!(loaded.problems[0]
        .message
        .contains("7 rules, over the limit of 5"));
    let reported = store.problems_reported();
    store.load_with(&p.to_hex(), &limits).await.expect("load again");
    assert_eq!(store.problems_reported(), reported, "reported once");
    // The cache reads with its limits.
    let cache = RuleCache::new(store.clone(), Duration::from_secs(60)).with_limits(limits);
    assert_eq!(cache.get(&p.to_hex()).await.expect("rules").rules.len(), 5);
    assert_eq!(
        store
            .load(&p.to_hex())
            .await
            .expect("load")
            .expect("known")
            .rules
            .len(),
        7,
        "default limit 100"
    );

    let full = store
        .add_rule(&p.to_hex(), &only_new_slack(), 7)
        .await
        .expect_err("at the limit");
    assert!(
        matches!(full, RulesError::OverLimit(_)) && !full.is_transient(),
        "{full}"
    );
    assert!(
        full.to_string().contains("already holds 7 rules, the limit is 7"),
        "{full}"
    );
    store
        .add_rule(&p.to_hex(), &only_new_slack(), 8)
        .await
        .expect("below the limit");
}
