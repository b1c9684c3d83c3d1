//! Project names: read from the same `projects` document as the rules and cached with them.

mod common;

use std::time::Duration;

use klaxon_store::RuleCache;
use mongodb::bson::{doc, oid::ObjectId};

#[tokio::test]
async fn the_project_name_is_read_with_the_rules_and_cached_with_them() {
    let store = common::fresh_store().await;
    let projects = common::raw_projects(&store).await;
    let named = ObjectId::new();
    let unnamed = ObjectId::new();
    let rule = doc! {"_id": ObjectId::new(), "isEnabled": true, "whatToReceive": "ONLY_NEW",
    "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.test/x", "minPeriod": 0}}};
    projects
        .insert_one(
            doc! {"_id": named, "name": "  Acme web\n", "token": "secret", "notifications": [rule.clone()]},
        )
        .await
        .expect("insert named");
    projects
        .insert_one(doc! {"_id": unnamed, "notifications": [rule]})
        .await
        .expect("insert unnamed");

    let loaded = store.load(&named.to_hex()).await.expect("load").expect("known");
    assert_eq!(loaded.name.as_deref(), Some("Acme web"), "trimmed, one line");
    assert_eq!(loaded.rules.len(), 1);
    let loaded = store.load(&unnamed.to_hex()).await.expect("load").expect("known");
    assert_eq!(loaded.name, None);

    let cache = RuleCache::new(store.clone(), Duration::from_secs(60));
    let queries = store.queries();
    for _ in 0..5 {
        let rules = cache.get(&named.to_hex()).await.expect("cached");
        assert_eq!(rules.name.as_deref(), Some("Acme web"));
    }
    assert_eq!(
        store.queries(),
        queries + 1,
        "one read serves the rules and the name"
    );

    // Renamed in Hawk: seen after the cache entry is invalidated (or its TTL ends).
    projects
        .update_one(doc! {"_id": named}, doc! {"$set": {"name": "Acme storefront"}})
        .await
        .expect("rename");
    cache.invalidate(&named.to_hex());
    let rules = cache.get(&named.to_hex()).await.expect("reloaded");
    assert_eq!(rules.name.as_deref(), Some("Acme storefront"));
}

/// A name set through Klaxon lives in its own field: Hawk's `name` is left as it is and shown only where Klaxon
/// keeps none; `rules import`'s `name` sets it, an import without one keeps it, export writes it.
#[tokio::test]
async fn a_name_set_through_klaxon_wins_and_leaves_hawks_alone() {
    let store = common::fresh_store().await;
    let projects = common::raw_projects(&store).await;
    let hawk = ObjectId::new();
    projects
        .insert_one(doc! {"_id": hawk, "name": "Hawk name", "notifications": []})
        .await
        .expect("insert");
    let fresh = ObjectId::new();

    store.set_name(&hawk.to_hex(), "Klaxon name").await.expect("set");
    store
        .set_name(&fresh.to_hex(), "Fresh")
        .await
        .expect("set on a new project");
    let raw = projects
        .find_one(doc! {"_id": hawk})
        .await
        .expect("find")
        .expect("there");
    assert_eq!(
        raw.get_str("name").ok(),
        Some("Hawk name"),
        "Hawk's field untouched"
    );
    let loaded = store.load(&hawk.to_hex()).await.expect("load").expect("known");
    assert_eq!(loaded.name.as_deref(), Some("Klaxon name"));
    let names = store
        .names(&[
            hawk.to_hex(),
            fresh.to_hex(),
            ObjectId::new().to_hex(),
            "nope".into(),
        ])
        .await
        .expect("names");
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(names[&fresh.to_hex()].shown(), Some("Fresh"));
    assert_eq!(names[&hawk.to_hex()].hawk.as_deref(), Some("Hawk name"));

    let file = format!(
        r#"[{{"_id": "{fresh}", "name": "Imported", "notifications": []}}, {{"_id": "{hawk}", "notifications": []}}]"#
    );
    store
        .replace(&klaxon_store::parse_import(&file).expect("valid"))
        .await
        .expect("import");
    let names = store
        .names(&[hawk.to_hex(), fresh.to_hex()])
        .await
        .expect("names");
    assert_eq!(names[&fresh.to_hex()].shown(), Some("Imported"));
    assert_eq!(
        names[&hawk.to_hex()].shown(),
        Some("Klaxon name"),
        "an import without a name keeps it"
    );
    let exported = klaxon_store::export_json(&store.export(&[fresh.to_hex()]).await.expect("export"));
    assert_eq!(exported[0]["name"], "Imported");
}
