//! The delay engine against the real RabbitMQ on loopback: no head-of-line blocking, "not earlier than"
//! and at most 1 s late, headers preserved and `x-death` kept bounded.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use klaxon_broker::{header, Broker, DelayTopology, Outgoing, QueueType, Topology};
use rand::Rng;

const T: Duration = Duration::from_secs(10);

/// A namespace's topology (its delay engine included) and one of its delay targets as the destination queue;
/// deleted on `cleanup`.
struct Setup {
    broker: Broker,
    topology: Topology,
    delay: DelayTopology,
    queue: String,
}

impl Setup {
    async fn new() -> Self {
        let ns = klaxon_testkit::unique_namespace();
        let broker = Broker::connect(&klaxon_testkit::amqp_url(), T)
            .await
            .expect("connect");
        let topology = Topology::new(&ns, &format!("{ns}.events"), QueueType::Classic);
        let publisher = broker.publisher().await.expect("publisher");
        publisher.declare(&topology).await.expect("declare");
        publisher
            .declare(&topology)
            .await
            .expect("declare again (idempotent)");
        publisher.close().await;
        let queue = topology.digest_flush_queue();
        assert!(
            topology.delay_targets().contains(&queue),
            "bound to the delay engine"
        );
        Setup {
            broker,
            delay: topology.delay(),
            topology,
            queue,
        }
    }

    async fn cleanup(self) {
        self.broker
            .delete_topology(&self.topology)
            .await
            .expect("delete the namespace, its delay engine included");
        self.broker.close().await;
    }
}

#[tokio::test]
async fn a_short_delay_is_not_blocked_by_a_long_one() {
    let s = Setup::new().await;
    let publisher = s.broker.publisher().await.expect("publisher");
    let started = Instant::now();
    let long = Outgoing::json(s.queue.clone(), b"long".to_vec());
    let mut short = Outgoing::json(s.queue.clone(), b"short".to_vec());
    short.headers = vec![("x-klaxon-attempts".into(), "3".into())];
    publisher
        .publish_delayed(&s.delay, &[(long, Duration::from_secs(60))])
        .await
        .expect("publish long");
    publisher
        .publish_delayed(&s.delay, &[(short, Duration::from_secs(1))])
        .await
        .expect("publish short");

    let mut consumer = s.broker.consume(&s.queue, 10, "t").await.expect("consume");
    let d = consumer
        .next_within(Duration::from_secs(5))
        .await
        .expect("the 1 s message arrives within 5 s")
        .expect("open")
        .expect("ok");
    let took = started.elapsed();
    assert_eq!(d.data, b"short", "the 60 s message must not come first");
    assert!(
        took >= Duration::from_secs(1),
        "not earlier than its delay: {took:?}"
    );
    assert!(took < Duration::from_secs(2), "at most 1 s late: {took:?}");
    assert_eq!(header(&d.properties, "x-klaxon-attempts").as_deref(), Some("3"));
    assert!(d.properties.is_persistent(), "persistent end to end");

    // Delaying the delivered message again keeps x-death bounded (stripped, then set by this pass only).
    let mut again = Outgoing::json(s.queue.clone(), d.data.clone());
    again.base = Some(d.properties.clone());
    consumer.ack(d.delivery_tag).await.expect("ack");
    publisher
        .publish_delayed(&s.delay, &[(again, Duration::from_secs(1))])
        .await
        .expect("publish again");
    let d2 = consumer
        .next_within(Duration::from_secs(5))
        .await
        .expect("in time")
        .expect("open")
        .expect("ok");
    assert_eq!(d2.data, b"short");
    assert_eq!(
        d2.properties.death_count(),
        1,
        "only the level-0 pass of this delay is recorded: {:?}",
        d2.properties
    );
    consumer.ack(d2.delivery_tag).await.expect("ack");

    // The long one is still waiting.
    assert!(consumer.next_within(Duration::from_millis(500)).await.is_none());
    consumer.close().await;
    publisher.close().await;
    s.cleanup().await;
}

#[tokio::test]
async fn two_hundred_random_delays_fire_on_time() {
    let s = Setup::new().await;
    let publisher = s.broker.publisher().await.expect("publisher");
    let mut rng = rand::rng();
    let delays: Vec<Duration> = (0..200)
        .map(|_| Duration::from_millis(rng.random_range(1000..=5000)))
        .collect();
    let batch: Vec<(Outgoing, Duration)> = delays
        .iter()
        .enumerate()
        .map(|(i, d)| (Outgoing::json(s.queue.clone(), i.to_string().into_bytes()), *d))
        .collect();
    let mut consumer = s.broker.consume(&s.queue, 250, "t").await.expect("consume");
    let started = Instant::now();
    // one by one, so each message's own publish time is known
    let mut sent_at = Vec::with_capacity(batch.len());
    for m in &batch {
        sent_at.push(started.elapsed());
        publisher
            .publish_delayed(&s.delay, std::slice::from_ref(m))
            .await
            .expect("publish");
    }
    let mut arrived: HashMap<usize, Duration> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while arrived.len() < delays.len() && Instant::now() < deadline {
        let Some(Some(Ok(d))) = consumer.next_within(Duration::from_secs(1)).await else {
            continue;
        };
        let i: usize = String::from_utf8_lossy(&d.data).parse().expect("index");
        assert!(
            arrived.insert(i, started.elapsed()).is_none(),
            "message {i} delivered twice"
        );
        consumer.ack(d.delivery_tag).await.expect("ack");
    }
    assert_eq!(arrived.len(), delays.len(), "every message arrives");
    let mut worst = Duration::ZERO;
    for (i, d) in delays.iter().enumerate() {
        let at = arrived[&i].saturating_sub(sent_at[i]);
        // due: the delay rounded up to whole seconds ("not earlier than")
        let due = Duration::from_secs(DelayTopology::delay_seconds(*d));
        assert!(at >= *d, "message {i} delayed {d:?} arrived early at {at:?}");
        assert!(
            at <= due + Duration::from_secs(1),
            "message {i} due at {due:?} arrived late at {at:?}"
        );
        worst = worst.max(at.saturating_sub(due));
    }
    eprintln!("200 delays of 1-5 s: worst lateness after the rounded-up due time {worst:?}");
    consumer.close().await;
    publisher.close().await;
    s.cleanup().await;
}
