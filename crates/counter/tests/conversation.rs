//! Conversations (an alert's firing message per channel) against real Redis, single node and cluster: what is
//! remembered is read back, per alert and channel, bounded in size, and expiring.

mod common;

use common::{on_both, Env};
use klaxon_core::alert::alert_id;
use klaxon_core::ChannelKind;
use klaxon_counter::conversation::{Conversation, Conversations, CONVERSATION_TTL, MAX_CONVERSATION_BYTES};

async fn remembers_and_recalls(env: Env) {
    let t = env.topology;
    let c = Conversations::new(env.redis.clone(), &env.ns);
    let alert = alert_id("proj", "r", "g", "1");
    let other = alert_id("proj", "r", "g", "2");
    let firing = Conversation {
        message_id: "1234567890123456789".into(),
        destination: "discord:discord.com/abc".into(),
        body: Some("{\"embeds\":[]}".into()),
    };
    assert_eq!(
        c.recall("proj", &alert, ChannelKind::Discord)
            .await
            .expect("recall"),
        None,
        "[{t}] nothing before the firing"
    );
    assert!(c
        .remember("proj", &alert, ChannelKind::Discord, &firing)
        .await
        .expect("remember"));
    assert_eq!(
        c.recall("proj", &alert, ChannelKind::Discord)
            .await
            .expect("recall"),
        Some(firing.clone()),
        "[{t}]"
    );
    // per alert and per channel
    assert_eq!(
        c.recall("proj", &other, ChannelKind::Discord)
            .await
            .expect("recall"),
        None,
        "[{t}]"
    );
    assert_eq!(
        c.recall("proj", &alert, ChannelKind::Telegram)
            .await
            .expect("recall"),
        None,
        "[{t}]"
    );
    assert_eq!(
        c.recall("other", &alert, ChannelKind::Discord)
            .await
            .expect("recall"),
        None,
        "[{t}]"
    );

    // the key expires with the alert
    let key = c.key("proj", &alert, ChannelKind::Discord).expect("key");
    assert_eq!(key, format!("{}:cv:{{proj}}:{alert}:discord", env.ns));
    let ttl: i64 = env.query(redis::cmd("PTTL").arg(&key)).await;
    let want = i64::try_from(CONVERSATION_TTL.as_millis()).expect("fits");
    assert!(ttl > want - 60_000 && ttl <= want, "[{t}] {ttl}");

    // a body too large is left out, the message id kept
    let huge = Conversation {
        body: Some("x".repeat(MAX_CONVERSATION_BYTES + 1)),
        ..firing.clone()
    };
    assert!(c
        .remember("proj", &other, ChannelKind::Telegram, &huge)
        .await
        .expect("remember"));
    let kept = c
        .recall("proj", &other, ChannelKind::Telegram)
        .await
        .expect("recall")
        .expect("kept");
    assert_eq!(
        (kept.message_id.as_str(), kept.body),
        (firing.message_id.as_str(), None),
        "[{t}]"
    );
    let len: i64 = env
        .query(redis::cmd("STRLEN").arg(c.key("proj", &other, ChannelKind::Telegram).expect("key")))
        .await;
    assert!(len < 200, "[{t}] {len}");

    // ids that make no key are neither stored nor read
    for (project, id) in [
        ("p}x", alert.as_str()),
        ("proj", "not-an-alert"),
        ("", alert.as_str()),
    ] {
        assert!(
            c.key(project, id, ChannelKind::Discord).is_none(),
            "[{t}] {project} {id}"
        );
        assert!(!c
            .remember(project, id, ChannelKind::Discord, &firing)
            .await
            .expect("remember"));
        assert_eq!(
            c.recall(project, id, ChannelKind::Discord).await.expect("recall"),
            None
        );
    }
    // a value that is not ours reads as none
    env.query::<()>(redis::cmd("SET").arg(&key).arg("not json")).await;
    assert_eq!(
        c.recall("proj", &alert, ChannelKind::Discord)
            .await
            .expect("recall"),
        None,
        "[{t}]"
    );
}

#[tokio::test]
async fn an_alerts_firing_message_is_remembered_per_channel_bounded_and_expiring() {
    on_both(remembers_and_recalls).await;
}
