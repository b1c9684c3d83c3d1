//! `POST /api/v1/events`: one notifier task or an array of them (the queue's format), each validated exactly
//! like an event on the queue ([`EventTask::parse`]) before any is published, then published persistent with
//! confirms to the events queue (with `--events-shards` N > 1: to the shard exchange, keyed by project).

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use klaxon_core::EventTask;
use serde_json::{json, Value};

use crate::error::{json_body, json_response};
use crate::{Api, ApiError};

/// `POST /api/v1/events` → 202 `{"accepted": n}`; an invalid item → 400 naming it, nothing published.
pub(crate) async fn ingest(
    State(api): State<Api>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let items = match json_body(body)? {
        Value::Array(items) => items,
        one => vec![one],
    };
    if items.is_empty() {
        return Err(ApiError::bad_request("no events: the array is empty"));
    }
    let topology = api.topology();
    let batch = format!("{:016x}", rand::random::<u64>());
    let mut messages = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        // counted from 1, as people count
        let n = i + 1;
        let bytes =
            serde_json::to_vec(item).map_err(|e| ApiError::bad_request(format!("event #{n}: {e}")))?;
        let task = EventTask::parse(&bytes).map_err(|e| ApiError::bad_request(format!("event #{n}: {e}")))?;
        // the events queue, or with --events-shards the shard exchange keyed by the project
        let mut m = topology.event(&task.project_id, bytes);
        m.message_id = Some(format!("api-{batch}-{i}"));
        messages.push((m, Duration::ZERO));
    }
    api.publish(&messages).await?;
    Ok(json_response(
        StatusCode::ACCEPTED,
        &json!({ "accepted": messages.len() }),
    ))
}
