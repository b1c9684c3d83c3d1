//! `GET /api/v1/dead?limit=`, `POST /api/v1/dead/replay`: the dead-letter queue `<ns>.dead`, listed and replayed;
//! [`pass`] is shared with `klaxon dead` and the console's dead-letter page.
//!
//! A pass reads at most the messages that were in the queue when it started (so it always ends), holding them
//! unacked: listed messages go back untouched when the channel closes; a replayed one is published to its
//! channel's queue with a fresh attempt count (same body and message id, so the same notificationId and the
//! same dedup) and acked once RabbitMQ confirmed the publish.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use klaxon_broker::{
    header, Broker, BrokerError, Delivery, Outgoing, Publisher, Topology, ATTEMPTS_HEADER, ERROR_HEADER,
};
use klaxon_channels::redact_endpoint;
use klaxon_core::NotificationTask;
use serde::Serialize;
use serde_json::{json, Value};

use super::{limit_of, query_pairs};
use crate::error::{body_of, json_response};
use crate::{Api, ApiError};

/// How long to wait for the next message of a queue known to hold more.
const NEXT_WAIT: Duration = Duration::from_secs(5);

/// One dead-lettered message, as listed (serialized as the API's JSON form).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadItem {
    /// The notification (`-` when the body is not a notification task).
    pub notification_id: String,
    /// Its project.
    pub project_id: String,
    /// Its rule.
    pub rule_id: String,
    /// Its channel.
    pub channel: String,
    /// Attempts made.
    pub attempts: u64,
    /// The redacted endpoint.
    pub destination: String,
    /// Why it was dead-lettered.
    pub reason: String,
}

impl DeadItem {
    fn of(delivery: &Delivery, task: Option<&NotificationTask>) -> Self {
        let attempts = header(&delivery.properties, ATTEMPTS_HEADER)
            .and_then(|a| a.parse().ok())
            .unwrap_or(0);
        let reason = header(&delivery.properties, ERROR_HEADER).unwrap_or_default();
        match task {
            Some(t) => DeadItem {
                notification_id: t.notification_id.clone(),
                project_id: t.project_id.clone(),
                rule_id: t.rule_id.clone(),
                channel: t.channel.as_str().to_owned(),
                attempts,
                destination: redact_endpoint(t.channel, &t.endpoint),
                reason,
            },
            None => DeadItem {
                notification_id: "-".into(),
                project_id: "-".into(),
                rule_id: "-".into(),
                channel: "-".into(),
                attempts,
                destination: "-".into(),
                reason,
            },
        }
    }

    /// The JSON form (API and `klaxon dead list --json`).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// What to do with the messages read.
pub enum Pass<'a> {
    /// List at most this many; they all stay.
    List(u32),
    /// Replay those whose notificationId is listed (every one when `None`).
    Replay(Option<&'a [String]>),
}

/// Reads the dead-letter queue once. Returns the listed items (list) or the replayed ones (replay).
pub async fn pass(
    broker: &Broker,
    publisher: &Publisher,
    topology: &Topology,
    what: Pass<'_>,
) -> Result<Vec<DeadItem>, BrokerError> {
    let queue = topology.dead_queue();
    let count = broker
        .queue_depth(&queue)
        .await?
        .ok_or_else(|| BrokerError::NoQueue { queue: queue.clone() })?
        .messages;
    let limit = match what {
        Pass::List(n) => count.min(n),
        Pass::Replay(_) => count,
    };
    let mut out = Vec::new();
    if limit == 0 {
        return Ok(out);
    }
    let mut consumer = broker
        .consume(
            &queue,
            u16::try_from(limit.clamp(1, 1000)).unwrap_or(1000),
            "klaxon-dead",
        )
        .await?;
    let mut seen = 0u32;
    let result = async {
        while seen < limit {
            let Some(Some(next)) = consumer.next_within(NEXT_WAIT).await else {
                break;
            };
            let delivery = next?;
            seen += 1;
            let task: Option<NotificationTask> = serde_json::from_slice(&delivery.data).ok();
            match &what {
                Pass::List(_) => out.push(DeadItem::of(&delivery, task.as_ref())),
                Pass::Replay(ids) => {
                    let Some(task) = task else { continue };
                    if ids.is_some_and(|ids| !ids.iter().any(|i| i == &task.notification_id)) {
                        continue;
                    }
                    let msg = Outgoing {
                        queue: topology.notify_queue(task.channel),
                        body: delivery.data.clone(),
                        message_id: delivery.properties.message_id().as_ref().map(|s| s.to_string()),
                        headers: Vec::new(),
                        exchange: String::new(),
                        base: None,
                    };
                    publisher.publish_all(&[msg]).await?;
                    consumer.ack(delivery.delivery_tag).await?;
                    out.push(DeadItem::of(&delivery, Some(&task)));
                }
            }
        }
        Ok::<(), BrokerError>(())
    }
    .await;
    // Whatever was not replayed goes back to the queue when the channel closes.
    consumer.close().await;
    result.map(|()| out)
}

impl Api {
    /// One pass over the dead-letter queue on channels of its own (rare, operator-driven), on the API's
    /// connection.
    pub(crate) async fn dead_pass(&self, what: Pass<'_>) -> Result<Vec<DeadItem>, ApiError> {
        let unavailable = |e: klaxon_broker::BrokerError| ApiError::unavailable("RabbitMQ", e);
        let broker = self.broker().await?;
        let publisher = broker.publisher().await.map_err(unavailable)?;
        let out = pass(&broker, &publisher, &self.topology(), what).await;
        publisher.close().await;
        out.map_err(unavailable)
    }
}

/// `GET /api/v1/dead?limit=` → `{"dead": [...]}` (the messages stay in the queue).
pub(crate) async fn list(State(api): State<Api>, RawQuery(query): RawQuery) -> Result<Response, ApiError> {
    let limit = limit_of(&query_pairs(query.as_deref()), 100, 1000)?;
    let items = api.dead_pass(Pass::List(limit as u32)).await?;
    Ok(json_response(StatusCode::OK, &json!({ "dead": items })))
}

/// `POST /api/v1/dead/replay` `{"notificationIds"?}` (absent: all) → `{"replayed": n, "notificationIds": [...]}`.
pub(crate) async fn replay(
    State(api): State<Api>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let raw = body_of(body)?;
    let body = if raw.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(&raw)
            .map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))?
    };
    let ids: Option<Vec<String>> = match body.get("notificationIds") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| ApiError::bad_request("`notificationIds` must be a list of strings"))?,
        ),
        Some(_) => {
            return Err(ApiError::bad_request(
                "`notificationIds` must be a list of strings",
            ))
        }
    };
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the body must be an object {\"notificationIds\"?}",
        ));
    }
    let items = api.dead_pass(Pass::Replay(ids.as_deref())).await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({"replayed": items.len(), "notificationIds": items.iter().map(|i| i.notification_id.clone()).collect::<Vec<_>>()}),
    ))
}
