//! Broker adapter against the real RabbitMQ on loopback.

use std::time::Duration;

use klaxon_broker::{
    header, set_aside, Broker, BrokerError, Consumer, Delivery, Outgoing, Publisher, QueueType, Topology,
    ERROR_HEADER,
};
use klaxon_core::ChannelKind;

const T: Duration = Duration::from_secs(10);

/// The next delivery, which must arrive within `T`.
async fn recv(consumer: &mut Consumer) -> Delivery {
    consumer
        .next_within(T)
        .await
        .expect("in time")
        .expect("open")
        .expect("ok")
}

/// A connection to the test broker and the classic topology of namespace `ns`, declared.
async fn declared(ns: &str) -> (Broker, Topology, Publisher) {
    let broker = Broker::connect(&klaxon_testkit::amqp_url(), T)
        .await
        .expect("connect");
    let topo = Topology::new(ns, &format!("{ns}.events"), QueueType::Classic);
    let publisher = broker.publisher().await.expect("publisher");
    publisher.declare(&topo).await.expect("declare");
    (broker, topo, publisher)
}

async fn delete_all(broker: &Broker, topo: &Topology) {
    broker
        .delete_topology(topo)
        .await
        .expect("delete the namespace's queues and exchanges");
}

#[tokio::test]
async fn publish_confirm_consume_ack_and_set_aside() {
    let ns = klaxon_testkit::unique_namespace();
    let (broker, topo, publisher) = declared(&ns).await;
    // declaring twice is fine
    publisher.declare(&topo).await.expect("declare again");

    let mut first = Outgoing::json(topo.events_queue(), b"{\"a\":1}".to_vec());
    first.message_id = Some("m-1".into());
    publisher
        .publish_all(&[first, Outgoing::json(topo.events_queue(), b"not json".to_vec())])
        .await
        .expect("publish");

    let mut consumer = broker
        .consume(topo.events_queue(), 10, "t")
        .await
        .expect("consume");
    let d1 = recv(&mut consumer).await;
    assert_eq!(d1.data, b"{\"a\":1}");
    assert_eq!(d1.properties.message_id(), Some("m-1"));
    assert!(d1.properties.is_persistent());
    let d2 = recv(&mut consumer).await;

    publisher
        .publish_all(&[set_aside(&d2, topo.invalid_queue(), "body is not JSON")])
        .await
        .expect("set aside");
    consumer.ack_up_to(d2.delivery_tag).await.expect("ack");

    let mut invalid = broker
        .consume(&topo.invalid_queue(), 10, "t2")
        .await
        .expect("consume invalid");
    let moved = recv(&mut invalid).await;
    assert_eq!(moved.data, b"not json", "moved untouched");
    assert_eq!(
        header(&moved.properties, ERROR_HEADER).as_deref(),
        Some("body is not JSON")
    );
    invalid.ack(moved.delivery_tag).await.expect("ack");

    // nothing left on the events queue after the multiple ack
    consumer.cancel().await.expect("cancel");
    consumer.close().await;
    let mut again = broker
        .consume(topo.events_queue(), 10, "t3")
        .await
        .expect("consume");
    assert!(
        again.next_within(Duration::from_millis(500)).await.is_none(),
        "queue drained"
    );
    again.close().await;
    invalid.close().await;
    delete_all(&broker, &topo).await;
    broker.close().await;
}

#[tokio::test]
async fn a_publish_no_queue_takes_is_an_error_not_a_confirmed_loss() {
    let ns = klaxon_testkit::unique_namespace();
    let broker = Broker::connect(&klaxon_testkit::amqp_url(), T)
        .await
        .expect("connect");
    let publisher = broker.publisher().await.expect("publisher");
    let missing = format!("{ns}.no-such-queue");
    let err = publisher
        .publish_all(&[Outgoing::json(&missing, b"{}".to_vec())])
        .await
        .expect_err("the broker returns the message");
    assert!(
        matches!(&err, BrokerError::Unroutable { queue } if *queue == missing),
        "{err}"
    );
    // The channel stays usable: the next publish to a queue that exists is confirmed.
    let topo = Topology::new(&ns, &format!("{ns}.events"), QueueType::Classic);
    publisher.declare(&topo).await.expect("declare");
    publisher
        .publish_all(&[Outgoing::json(topo.events_queue(), b"{}".to_vec())])
        .await
        .expect("publish to a queue that exists");
    delete_all(&broker, &topo).await;
    broker.close().await;
}

#[tokio::test]
async fn unacked_messages_come_back_after_the_channel_closes() {
    let ns = klaxon_testkit::unique_namespace();
    let (broker, topo, publisher) = declared(&ns).await;
    let q = topo.notify_queue(ChannelKind::Slack);
    publisher
        .publish_all(&[Outgoing::json(&q, b"x".to_vec())])
        .await
        .expect("publish");
    let mut c = broker.consume(&q, 1, "a").await.expect("consume");
    let d = recv(&mut c).await;
    assert!(!d.redelivered);
    c.close().await;
    let mut c2 = broker.consume(&q, 1, "b").await.expect("consume");
    let d = recv(&mut c2).await;
    assert!(d.redelivered, "handed back, not lost");
    c2.ack(d.delivery_tag).await.expect("ack");
    c2.close().await;
    delete_all(&broker, &topo).await;
    broker.close().await;
}

/// The worker queues its batch ack without waiting for lapin's I/O thread to write it: the ack must still reach
/// the broker ahead of the channel's close (nothing comes back), and an ack on a closed channel is an error.
#[tokio::test]
async fn a_queued_ack_goes_out_before_the_channel_closes() {
    let ns = klaxon_testkit::unique_namespace();
    let (broker, topo, publisher) = declared(&ns).await;
    let q = topo.notify_queue(ChannelKind::Slack);
    let three: Vec<_> = (0..3).map(|i| Outgoing::json(&q, vec![b'0' + i])).collect();
    publisher.publish_all(&three).await.expect("publish");
    let mut c = broker.consume(&q, 10, "a").await.expect("consume");
    let mut last = 0;
    for _ in 0..3 {
        last = recv(&mut c).await.delivery_tag;
    }
    let queued = c.ack_up_to_queued(last).expect("queued");
    // closed at once, the ack not awaited: the close goes out after it
    c.close().await;
    queued
        .written()
        .await
        .expect("the ack was written before the close");
    assert!(
        c.ack_up_to_queued(last).is_err(),
        "an ack on a closed channel is an error"
    );
    let mut c2 = broker.consume(&q, 10, "b").await.expect("consume");
    assert!(
        c2.next_within(Duration::from_millis(500)).await.is_none(),
        "all three acked: none handed back"
    );
    c2.close().await;
    delete_all(&broker, &topo).await;
    broker.close().await;
}

#[tokio::test]
async fn quorum_queues_work_on_a_single_node_and_clash_is_reported() {
    let ns = klaxon_testkit::unique_namespace();
    let broker = Broker::connect(&klaxon_testkit::amqp_url(), T)
        .await
        .expect("connect");
    let quorum = Topology::new(&ns, &format!("{ns}.events"), QueueType::Quorum);
    let publisher = broker.publisher().await.expect("publisher");
    publisher.declare(&quorum).await.expect("declare quorum");
    publisher
        .publish_all(&[Outgoing::json(quorum.events_queue(), b"q".to_vec())])
        .await
        .expect("publish");
    let mut c = broker
        .consume(quorum.events_queue(), 5, "q")
        .await
        .expect("consume");
    let d = recv(&mut c).await;
    assert_eq!(d.data, b"q");
    c.ack(d.delivery_tag).await.expect("ack");
    c.close().await;

    // The same names as classic queues: the broker refuses, and the error says what to do.
    let classic = Topology::new(&ns, &format!("{ns}.events"), QueueType::Classic);
    let err = broker.declare_topology(&classic).await.expect_err("clash");
    assert!(!err.is_transient(), "{err}");
    assert!(err.to_string().contains("different settings"), "{err}");
    delete_all(&broker, &quorum).await;
    broker.close().await;
}

#[tokio::test]
async fn a_node_list_connects_past_a_dead_node_and_small_frames_carry_big_bodies() {
    // a port nobody listens on (bound, then released)
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let live = klaxon_testkit::amqp_url();
    let dead_url = format!("amqp://guest:guest@127.0.0.1:{dead}/%2f");
    // whichever node the random start picks, every attempt ends connected to the live one
    for _ in 0..4 {
        for list in [format!("{dead_url},{live}"), format!("{live}, {dead_url}")] {
            let broker = Broker::connect(&list, Duration::from_secs(5))
                .await
                .expect("connects");
            assert!(broker.is_connected());
            broker.close().await;
        }
    }
    assert!(
        Broker::connect(&dead_url, Duration::from_secs(5)).await.is_err(),
        "a list of dead nodes fails"
    );

    // a body much larger than the 16 KiB frames Klaxon proposes arrives whole
    let broker = Broker::connect(&live, Duration::from_secs(5))
        .await
        .expect("connect");
    let ns = klaxon_testkit::unique_namespace();
    let topo = Topology::new(&ns, &format!("{ns}.events"), QueueType::Classic);
    let publisher = broker.publisher().await.expect("publisher");
    publisher.declare(&topo).await.expect("declare");
    let body: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    publisher
        .publish_all(&[Outgoing::json(topo.events_queue(), body.clone())])
        .await
        .expect("publish");
    let mut consumer = broker
        .consume(topo.events_queue(), 1, "big")
        .await
        .expect("consume");
    let d = recv(&mut consumer).await;
    assert_eq!(d.data, body);
    consumer.ack(d.delivery_tag).await.expect("ack");
    consumer.close().await;
    publisher.close().await;
    delete_all(&broker, &topo).await;
    broker.close().await;
}

#[tokio::test]
async fn queue_depth_and_deletes_on_their_own_channels() {
    use klaxon_broker::QueueDepth;
    let ns = klaxon_testkit::unique_namespace();
    let (broker, topo, publisher) = declared(&ns).await;
    let raw = format!("{ns}.raw");
    publisher.declare_plain(&raw).await.expect("declare raw");
    publisher
        .publish_all(&[
            Outgoing::json(topo.dead_queue(), b"{}".to_vec()),
            Outgoing::json(topo.dead_queue(), b"{}".to_vec()),
        ])
        .await
        .expect("publish");
    let missing = format!("{ns}.missing");
    // (queue, expected depth): a missing queue is `None`, and it does not spoil the connection for the next
    let table = [
        (
            topo.dead_queue(),
            Some(QueueDepth {
                messages: 2,
                consumers: 0,
            }),
        ),
        (missing.clone(), None),
        (
            topo.invalid_queue(),
            Some(QueueDepth {
                messages: 0,
                consumers: 0,
            }),
        ),
        (missing, None),
        (
            raw.clone(),
            Some(QueueDepth {
                messages: 0,
                consumers: 0,
            }),
        ),
    ];
    for (queue, want) in table {
        assert_eq!(broker.queue_depth(&queue).await.expect("depth"), want, "{queue}");
    }
    broker.delete_queue(&raw).await.expect("delete raw");
    assert_eq!(broker.queue_depth(&raw).await.expect("depth"), None);
    broker.delete_topology(&topo).await.expect("delete topology");
    for queue in topo.queues() {
        assert_eq!(broker.queue_depth(&queue).await.expect("depth"), None, "{queue}");
    }
    assert!(broker.is_connected());
    publisher.close().await;
    broker.close().await;
}

/// True when `queue` is a classic queue declared without arguments: a plain declare (Hawk's `assertQueue(name)`)
/// is refused by a quorum queue. Checked on a connection of its own, since a refusal closes the channel.
async fn is_plain_classic(queue: &str) -> bool {
    let broker = Broker::connect(&klaxon_testkit::amqp_url(), T)
        .await
        .expect("connect");
    let publisher = broker.publisher().await.expect("publisher");
    let plain = publisher.declare_plain(queue).await;
    broker.close().await;
    match plain {
        Ok(()) => true,
        Err(BrokerError::Incompatible { .. }) => false,
        Err(e) => panic!("declaring {queue}: {e}"),
    }
}

#[tokio::test]
async fn existing_queues_are_used_as_they_are_and_only_missing_ones_get_the_configured_type() {
    let ns = klaxon_testkit::unique_namespace();
    let broker = Broker::connect(&klaxon_testkit::amqp_url(), T)
        .await
        .expect("connect");
    // Hawk's grouper made the events queue: plain, durable, classic.
    let events = format!("{ns}.notifier");
    let publisher = broker.publisher().await.expect("publisher");
    publisher.declare_plain(&events).await.expect("as Hawk does");
    publisher
        .publish_all(&[Outgoing::json(&events, b"{\"from\":\"hawk\"}".to_vec())])
        .await
        .expect("publish");

    // A quorum deployment (deploy/'s configmap) declares its topology over it: no PRECONDITION_FAILED.
    let quorum = Topology::new(&ns, &events, QueueType::Quorum);
    publisher
        .declare(&quorum)
        .await
        .expect("an existing queue is used as it is");
    publisher
        .declare(&quorum)
        .await
        .expect("and again (every session declares)");
    assert!(is_plain_classic(&events).await, "the events queue kept its type");
    assert!(
        !is_plain_classic(&quorum.invalid_queue()).await,
        "a missing queue was declared with the configured type (quorum)"
    );
    // the publisher's own channel survived the passive declares of missing queues
    publisher
        .publish_all(&[Outgoing::json(&events, b"{\"from\":\"klaxon\"}".to_vec())])
        .await
        .expect("publish after declaring");
    let mut consumer = broker.consume(&events, 10, "as-is").await.expect("consume");
    assert_eq!(recv(&mut consumer).await.data, b"{\"from\":\"hawk\"}");
    let second = recv(&mut consumer).await;
    assert_eq!(second.data, b"{\"from\":\"klaxon\"}");
    consumer.ack_up_to(second.delivery_tag).await.expect("ack");
    consumer.close().await;

    // One queue outside a topology (Hawk's `sender/<channel>`): as it is when it exists, declared when missing.
    use klaxon_broker::Ensured;
    let raw = format!("{ns}.sender");
    assert_eq!(
        publisher
            .ensure_queue(&raw, QueueType::Classic)
            .await
            .expect("ensure"),
        Ensured::Created
    );
    assert_eq!(
        publisher
            .ensure_queue(&raw, QueueType::Quorum)
            .await
            .expect("ensure"),
        Ensured::Existing
    );
    assert!(is_plain_classic(&raw).await);
    broker.delete_queue(&raw).await.expect("delete");
    broker.delete_queue(&events).await.expect("delete");
    delete_all(&broker, &quorum).await;
    publisher.close().await;
    broker.close().await;
}

#[tokio::test]
async fn two_processes_declaring_a_missing_queue_with_different_types_both_start() {
    let ns = klaxon_testkit::unique_namespace();
    let a = Broker::connect(&klaxon_testkit::amqp_url(), T)
        .await
        .expect("connect");
    let b = Broker::connect(&klaxon_testkit::amqp_url(), T)
        .await
        .expect("connect");
    let (pa, pb) = (
        a.publisher().await.expect("publisher"),
        b.publisher().await.expect("publisher"),
    );
    // Each round: both find the queue missing and race to declare it, one as classic, one as quorum; the loser
    // must use the winner's queue instead of failing (before: PRECONDITION_FAILED and a reconnect loop).
    for round in 0..10 {
        let q = format!("{ns}.race{round}");
        let (ra, rb) = tokio::join!(
            pa.ensure_queue(&q, QueueType::Classic),
            pb.ensure_queue(&q, QueueType::Quorum)
        );
        let (ra, rb) = (ra.expect("classic side"), rb.expect("quorum side"));
        assert!(
            matches!(
                (ra, rb),
                (klaxon_broker::Ensured::Created, klaxon_broker::Ensured::Existing)
                    | (klaxon_broker::Ensured::Existing, klaxon_broker::Ensured::Created)
            ),
            "exactly one created it: {ra:?} {rb:?}"
        );
        a.delete_queue(&q).await.expect("delete");
    }
    pa.close().await;
    pb.close().await;
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn a_session_opens_with_its_topology_declared_and_an_unreachable_broker_is_a_transient_error() {
    let ns = format!("klx-session-{}", std::process::id());
    let topo = Topology::new(&ns, &format!("{ns}.events"), QueueType::Classic);
    let session = klaxon_broker::Session::open(&klaxon_testkit::amqp_url(), T, "test", &topo)
        .await
        .expect("open");
    // every queue of the topology exists, and the session's publisher publishes with confirms
    for q in topo.queues() {
        assert!(
            session.broker.queue_depth(&q).await.expect("depth").is_some(),
            "{q} declared"
        );
    }
    session
        .publisher
        .publish_all(&[Outgoing::json(topo.events_queue(), b"{}".to_vec())])
        .await
        .expect("published");
    let depth = session
        .broker
        .queue_depth(topo.events_queue())
        .await
        .expect("depth")
        .expect("queue");
    assert_eq!(depth.messages, 1);
    delete_all(&session.broker, &topo).await;
    session.close().await;
    assert!(!session.broker.is_connected());

    let refused = klaxon_broker::Session::open("amqp://guest:guest@127.0.0.1:1/%2f", T, "test", &topo).await;
    assert!(
        refused.as_ref().is_err_and(BrokerError::is_transient),
        "{:?}",
        refused.err()
    );
}
