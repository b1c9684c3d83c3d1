//! The direct notifications' idempotency keys against real Redis, single node and cluster: the first request
//! records its key pending, a repeat finds what the first left (pending, then queued once it was published),
//! the record keeps its expiry when marked, and marking never creates a record.

mod common;

use common::{on_both, Env};
use klaxon_counter::direct::{key_of, key_ttl_ms, DirectKeys, KeyState, KEY_RETENTION_MS};

const NOW: i64 = 1_800_000_000_000;

async fn records_once_then_answers(env: Env) {
    let t = env.topology;
    let keys = DirectKeys::new(env.redis.clone(), &env.ns);
    let later = NOW + 60_000;

    // the first request records its key: a fresh request
    assert_eq!(
        keys.record("n1", later, NOW).await.expect("record"),
        None,
        "[{t}]"
    );
    let key = key_of(&env.ns, "n1");
    let stored: Option<String> = env.query(redis::cmd("GET").arg(&key)).await;
    assert_eq!(stored.as_deref(), Some("pending:1800000060000"), "[{t}]");
    let ttl: i64 = env.query(redis::cmd("PTTL").arg(&key)).await;
    let want = key_ttl_ms(later, NOW);
    assert_eq!(want, KEY_RETENTION_MS + 60_000);
    assert!(ttl > want - 60_000 && ttl <= want, "[{t}] {ttl}");

    // a repeat before the publish finds it pending, at the first request's time (not its own)
    assert_eq!(
        keys.record("n1", NOW, NOW).await.expect("record"),
        Some(KeyState::Pending(later)),
        "[{t}]"
    );
    // once queued, a repeat finds it queued, and the record kept its expiry
    keys.mark_queued("n1", later).await.expect("mark");
    assert_eq!(
        keys.record("n1", NOW, NOW).await.expect("record"),
        Some(KeyState::Queued(later)),
        "[{t}]"
    );
    let kept: i64 = env.query(redis::cmd("PTTL").arg(&key)).await;
    assert!(kept > want - 60_000 && kept <= ttl, "[{t}] {kept}");

    // marking a key nobody recorded (it expired) creates nothing
    keys.mark_queued("n2", later).await.expect("mark");
    let exists: i64 = env.query(redis::cmd("EXISTS").arg(key_of(&env.ns, "n2"))).await;
    assert_eq!(exists, 0, "[{t}]");

    // keys are per namespace and per id
    let other = DirectKeys::new(env.redis.clone(), &format!("{}-other", env.ns));
    assert_eq!(
        other.record("n1", later, NOW).await.expect("record"),
        None,
        "[{t}]"
    );
    assert_eq!(
        keys.record("n3", later, NOW).await.expect("record"),
        None,
        "[{t}]"
    );

    // a value that is not ours reads as none (the request goes on as a fresh one)
    env.query::<()>(redis::cmd("SET").arg(key_of(&env.ns, "n4")).arg("other"))
        .await;
    assert_eq!(
        keys.record("n4", later, NOW).await.expect("record"),
        None,
        "[{t}]"
    );
    for id in ["n1", "n3", "n4"] {
        env.query::<i64>(redis::cmd("DEL").arg(key_of(&env.ns, id))).await;
    }
    env.query::<i64>(redis::cmd("DEL").arg(key_of(&format!("{}-other", env.ns), "n1")))
        .await;
}

#[tokio::test]
async fn a_direct_notifications_key_is_recorded_once_and_marked_queued() {
    on_both(records_once_then_answers).await;
}
