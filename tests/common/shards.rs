//! Sharded input (`--events-shards`) in tests: events as Klaxon's producers publish them, shard queues read back,
//! and projects chosen by the shard the broker's own hash puts them on (tests/e2e_shards.rs, tests/e2e_chaos.rs).

use klaxon_broker::{Broker, Outgoing, Topology};
use serde_json::json;

/// An event of `project` as Klaxon's producers publish it (through the shard exchange, keyed by project), with
/// message id `id` (the counting's idempotency key).
pub fn event(topo: &Topology, project: &str, group: &str, id: &str) -> Outgoing {
    let body = json!({"projectId": project,
        "event": {"title": format!("Shard test {group}"), "groupHash": group, "isNew": false}});
    let mut m = topo.event(project, serde_json::to_vec(&body).expect("json"));
    m.message_id = Some(id.to_owned());
    m
}

/// Publishes `msgs` with publisher confirms, in chunks, on a channel of the caller's own.
pub async fn publish(b: &Broker, msgs: &[Outgoing]) {
    let publisher = b.publisher().await.expect("publisher");
    for chunk in msgs.chunks(2000) {
        publisher.publish_all(chunk).await.expect("publish");
    }
    publisher.close().await;
}

/// Every message of `queue`, read one at a time and acked: (projectId, message_id) in queue order.
pub async fn read_all(b: &Broker, queue: &str) -> Vec<(String, String)> {
    let reader = b.reader().await.expect("reader");
    let mut out = Vec::new();
    // bounded: the tests publish far fewer
    for _ in 0..10_000 {
        let Some(d) = reader.get(queue).await.expect("basic.get") else {
            break;
        };
        reader.ack(d.delivery_tag).await.expect("ack");
        let body: serde_json::Value = serde_json::from_slice(&d.data).expect("json body");
        let id = d.properties.message_id().map(str::to_owned).unwrap_or_default();
        out.push((body["projectId"].as_str().unwrap_or_default().to_owned(), id));
    }
    reader.close().await;
    out
}

/// `per_shard` fresh project ids on each shard of `topo` (index = shard number). The broker's own hashing
/// decides: `topo` is declared, one probe event per candidate goes through the exchange, and the shards are read
/// back (the probes are acked there, before any worker runs).
pub async fn projects_per_shard(b: &Broker, topo: &Topology, per_shard: usize) -> Vec<Vec<String>> {
    b.declare_topology(topo).await.expect("declare");
    let shards = topo.shards();
    let mut on: Vec<Vec<String>> = vec![Vec::new(); usize::from(shards)];
    for round in 0..20 {
        if on.iter().all(|s| s.len() >= per_shard) {
            break;
        }
        let probes: Vec<Outgoing> = (0..usize::from(shards) * per_shard * 2)
            .map(|i| event(topo, &super::object_id(), "probe", &format!("probe-{round}-{i}")))
            .collect();
        publish(b, &probes).await;
        for (i, shard) in (0..shards).zip(on.iter_mut()) {
            for (p, _) in read_all(b, &topo.shard_queue(i)).await {
                if shard.len() < per_shard {
                    shard.push(p);
                }
            }
        }
    }
    assert!(
        on.iter().all(|s| s.len() == per_shard),
        "the hash ring left a shard without projects: {on:?}"
    );
    on
}
