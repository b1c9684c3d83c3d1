//! `GET /api/v1/invalid?limit=&offset=`, `POST /api/v1/invalid/replay`: the queue of invalid events
//! `<ns>.events.invalid` (bodies the worker could not read, untouched, the reason in `x-klaxon-error`), listed (a
//! page at a time past the 1,000th) and replayed; [`pass`] is shared with `klaxon invalid` and the console's page.
//!
//! As for dead letters ([`super::dead`]), a pass reads at most the messages that were in the queue when it
//! started (so it always ends), holding them unacked: listed messages go back untouched when the channel closes;
//! a replayed one is published, body and properties untouched (the reason header dropped), to the events queue
//! and acked once RabbitMQ confirmed the publish. Messages are named by the SHA-256 of their body (its first 16
//! hex digits), since many have no message id: the same name in the list, `show` and `replay`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use klaxon_broker::{
    header, without_header, Broker, BrokerError, Delivery, Outgoing, Publisher, Topology, ERROR_HEADER,
};
use serde::Serialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::{limit_of, query_pairs};
use crate::error::{body_of, json_response};
use crate::{Api, ApiError};

/// Longest body a listing carries (bytes); `show` gives the whole body.
pub const PREVIEW_BYTES: usize = 2048;

/// One invalid event, as listed (serialized as the API's JSON form).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InvalidItem {
    /// The first 16 hex digits of the body's SHA-256: how `show` and `replay` name it.
    pub id: String,
    /// The AMQP message id, when the producer gave one.
    pub message_id: Option<String>,
    /// Why the worker set it aside (`x-klaxon-error`).
    pub reason: String,
    /// The body's size in bytes.
    pub bytes: usize,
    /// The body as text (invalid UTF-8 replaced), at most [`PREVIEW_BYTES`] in a listing.
    pub body: String,
    /// The listing's body is cut.
    pub truncated: bool,
}

impl InvalidItem {
    fn of(delivery: &Delivery, whole: bool) -> Self {
        let data = &delivery.data;
        let shown = if whole {
            data.len()
        } else {
            data.len().min(PREVIEW_BYTES)
        };
        let mut body = String::from_utf8_lossy(&data[..shown]).into_owned();
        if shown < data.len() {
            // a cut in the middle of a character shows as one replacement character: drop it
            body = body.trim_end_matches('\u{FFFD}').to_owned();
        }
        InvalidItem {
            id: id_of(data),
            message_id: delivery.properties.message_id().as_ref().map(|s| s.to_string()),
            reason: header(&delivery.properties, ERROR_HEADER).unwrap_or_default(),
            bytes: data.len(),
            body,
            truncated: shown < data.len(),
        }
    }

    /// The JSON form (API and `klaxon invalid list -o json`).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The body on one line, at most `chars` characters (tables).
    pub fn preview(&self, chars: usize) -> String {
        klaxon_core::text::one_line(&self.body, chars.saturating_mul(4))
            .chars()
            .take(chars)
            .collect()
    }
}

/// The name of a body: the first 16 hex digits of its SHA-256.
pub fn id_of(body: &[u8]) -> String {
    Sha256::digest(body)[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What to do with the messages read.
pub enum Pass<'a> {
    /// List at most this many from the first (bodies cut to [`PREVIEW_BYTES`]); they all stay.
    List(u32),
    /// List at most `limit` after the first `offset` messages of the queue (bodies cut); they all stay. A page
    /// of a queue longer than a list may show.
    Page {
        /// Messages skipped from the head of the queue.
        offset: u32,
        /// At most this many listed.
        limit: u32,
    },
    /// The messages with one of these ids, whole bodies; they all stay.
    Show(&'a [String]),
    /// Replay those whose id is listed (every one when `None`) to the events queue.
    Replay(Option<&'a [String]>),
}

/// Reads the queue of invalid events once. Returns the listed, shown or replayed items.
///
/// Each call is bounded: it reads at most the messages in the queue when it started (a list page: at most
/// `offset + limit` of them) and keeps in memory only the items it returns. The messages are taken one at a time
/// ([`klaxon_broker::Reader`]) rather than consumed, since a consumer's prefetch bound (at most 1,000 unacked)
/// stopped every pass at the 1,000th message: one past it could not be listed, shown or replayed.
pub async fn pass(
    broker: &Broker,
    publisher: &Publisher,
    topology: &Topology,
    what: Pass<'_>,
) -> Result<Vec<InvalidItem>, BrokerError> {
    let queue = topology.invalid_queue();
    let count = broker
        .queue_depth(&queue)
        .await?
        .ok_or_else(|| BrokerError::NoQueue { queue: queue.clone() })?
        .messages;
    let (skip, limit) = match what {
        Pass::List(n) => (0, count.min(n)),
        Pass::Page { offset, limit } => (offset, count.min(offset.saturating_add(limit))),
        Pass::Show(_) | Pass::Replay(_) => (0, count),
    };
    let mut out = Vec::new();
    if limit <= skip {
        return Ok(out);
    }
    let reader = broker.reader().await?;
    let wanted = |ids: &[String], data: &[u8]| {
        let id = id_of(data);
        ids.iter().any(|i| i.trim().eq_ignore_ascii_case(&id))
    };
    let mut seen = 0u32;
    let result = async {
        while seen < limit {
            let Some(delivery) = reader.get(&queue).await? else {
                break;
            };
            seen += 1;
            if seen <= skip {
                continue;
            }
            match &what {
                Pass::List(_) | Pass::Page { .. } => out.push(InvalidItem::of(&delivery, false)),
                Pass::Show(ids) => {
                    if wanted(ids, &delivery.data) {
                        out.push(InvalidItem::of(&delivery, true));
                    }
                }
                Pass::Replay(ids) => {
                    if ids.is_some_and(|ids| !wanted(ids, &delivery.data)) {
                        continue;
                    }
                    let base = without_header(&delivery.properties, ERROR_HEADER);
                    let msg = Outgoing {
                        queue: topology.events_queue().to_owned(),
                        body: delivery.data.clone(),
                        message_id: None,
                        headers: Vec::new(),
                        exchange: String::new(),
                        base: Some(base),
                    };
                    publisher.publish_all(&[msg]).await?;
                    reader.ack(delivery.delivery_tag).await?;
                    out.push(InvalidItem::of(&delivery, false));
                }
            }
        }
        Ok::<(), BrokerError>(())
    }
    .await;
    // Whatever was not replayed goes back to the queue when the channel closes.
    reader.close().await;
    result.map(|()| out)
}

impl Api {
    /// One pass over the queue of invalid events on channels of its own (rare, operator-driven), on the API's
    /// connection.
    pub(crate) async fn invalid_pass(&self, what: Pass<'_>) -> Result<Vec<InvalidItem>, ApiError> {
        let unavailable = |e: BrokerError| ApiError::unavailable("RabbitMQ", e);
        let broker = self.broker().await?;
        let publisher = broker.publisher().await.map_err(unavailable)?;
        let out = pass(&broker, &publisher, &self.topology(), what).await;
        publisher.close().await;
        out.map_err(unavailable)
    }
}

/// `GET /api/v1/invalid?limit=&offset=` → `{"invalid": [...]}` (the messages stay in the queue; bodies cut to
/// 2 KiB): at most `limit` (≤ 1,000) after the first `offset` of the queue.
pub(crate) async fn list(State(api): State<Api>, RawQuery(query): RawQuery) -> Result<Response, ApiError> {
    let pairs = query_pairs(query.as_deref());
    let limit = limit_of(&pairs, 100, 1000)?;
    let offset = match pairs.iter().find(|(k, _)| k == "offset") {
        None => 0,
        Some((_, v)) => v
            .parse::<u32>()
            .map_err(|_| ApiError::bad_request("`offset` must be a whole number (messages skipped)"))?,
    };
    let items = api
        .invalid_pass(Pass::Page {
            offset,
            limit: limit as u32,
        })
        .await?;
    Ok(json_response(StatusCode::OK, &json!({ "invalid": items })))
}

/// `POST /api/v1/invalid/replay` `{"ids"?}` (absent: all) → `{"replayed": n, "ids": [...]}`.
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
    if !body.is_object() {
        return Err(ApiError::bad_request("the body must be an object {\"ids\"?}"));
    }
    let bad =
        || ApiError::bad_request("`ids` must be a list of strings (the ids `GET /api/v1/invalid` gives)");
    let ids: Option<Vec<String>> = match body.get("ids") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(bad)?,
        ),
        Some(_) => return Err(bad()),
    };
    let items = api.invalid_pass(Pass::Replay(ids.as_deref())).await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({"replayed": items.len(), "ids": items.iter().map(|i| i.id.clone()).collect::<Vec<_>>()}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_bodies() {
        assert_eq!(id_of(b"not json"), id_of(b"not json"));
        assert_ne!(id_of(b"not json"), id_of(b"not json "));
        assert_eq!(id_of(b"").len(), 16);
        assert!(id_of(b"x").bytes().all(|b| b.is_ascii_hexdigit()));
    }
}
