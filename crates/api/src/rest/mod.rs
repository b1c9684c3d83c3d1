//! The REST API under `/api/v1`, one file per resource (mini-redis's `cmd/`): each holds the resource's wire
//! format (what a request may say, the JSON an answer carries) and its handlers. The `pub` parts are what the
//! CLI prints with, so `klaxon mute list --json` and `GET …/mutes` say the same thing.
//!
//! | file | routes | backing service |
//! |---|---|---|
//! | [`events`] | `POST /events` | RabbitMQ (the events queue, confirms) |
//! | [`rules`] | `GET`/`PUT /projects/{id}/rules` | MongoDB, then Redis pub/sub (invalidation) |
//! | [`explain`] | `POST /projects/{id}/explain` | MongoDB (rules), Redis (state, mutes): reads only |
//! | [`mutes`] | `GET`/`POST /projects/{id}/mutes`, `DELETE …/mutes/{muteId}` | Redis |
//! | [`alerts`] | `GET /projects/{id}/alerts`, `POST …/alerts/{alertId}/ack`, `…/resolve` | Redis, RabbitMQ |
//! | [`projects`] | `GET`/`PUT /projects/{id}` (the name), `GET /alerts` (every project's) | MongoDB, Redis |
//! | [`notifications`] | `POST /notifications` | Redis (idempotency), RabbitMQ (the senders' queues) |
//! | [`deliveries`] | `GET /deliveries` | MongoDB (the delivery trail) |
//! | [`dead`] | `GET /dead`, `POST /dead/replay` | RabbitMQ (the dead-letter queue) |
//! | [`invalid`] | `GET /invalid`, `POST /invalid/replay` | RabbitMQ (the queue of invalid events) |
//! | [`webhook_secret`] | `GET /projects/{id}/webhook-secret`, `GET /webhook-secret` | none (derived) |
//!
//! What every write of tenant rules and mutes checks beyond validation (per-project limits, endpoints on
//! private addresses) lives with its resource ([`rules::private_endpoints`], [`mutes::mutes_full`],
//! [`notifications::check_direct_recipients`]); the API, the console and the CLI all call the same function, so
//! they refuse and warn alike.

pub mod alerts;
pub mod dead;
pub mod deliveries;
pub(crate) mod events;
pub(crate) mod explain;
pub mod invalid;
pub mod mutes;
pub mod notifications;
pub mod projects;
pub mod rules;
pub mod webhook_secret;

use crate::ApiError;

/// 400 unless `project_id` is a 24-hex-digit ObjectId (quoted, bounded, in the answer).
pub(crate) fn check_project_id(project_id: &str) -> Result<(), ApiError> {
    if klaxon_core::event::is_object_id(project_id) {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "project id `{}` is not a 24-hex-digit ObjectId",
            project_id.chars().take(64).collect::<String>()
        )))
    }
}

/// The query string's `key=value` pairs (values percent-decoded enough for ids and numbers).
fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or_default()
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.replace('+', " ")),
            None => (kv.to_owned(), String::new()),
        })
        .collect()
}

/// `limit` from the query: 1..=max, default `default`.
fn limit_of(pairs: &[(String, String)], default: usize, max: usize) -> Result<usize, ApiError> {
    match pairs.iter().find(|(k, _)| k == "limit") {
        None => Ok(default),
        Some((_, v)) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| ApiError::bad_request(format!("`limit` must be a whole number from 1 to {max}"))),
    }
}
