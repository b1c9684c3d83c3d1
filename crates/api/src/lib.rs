//! Klaxon's HTTP API (the contract's "HTTP API and console") and the browser console, mounted beside
//! `/metrics` on `--http-addr`. This file is the router and the layers around it; the handlers are in
//! [`rest`] (one file per resource) and `console/` (server-rendered pages), over one shared state (`state.rs`:
//! the process's clients of Redis and MongoDB, [`klaxon_engine::clients::Clients`], and the API's own RabbitMQ
//! session).
//!
//! ```text
//!  client ──▶ guard (Host, cross-site) ──▶ auth (Bearer token, or loopback only; wrong tokens throttled per client)
//!         ──▶ Content-Type application/json ──▶ body cap (1 MiB) ──▶ handler (timeout) ──▶ JSON
//!                                                                              │
//!   rest/events.rs         POST /api/v1/events (= /ingest) ── EventTask::parse (the queue's validation) ──▶ RabbitMQ (confirms)
//!   rest/rules.rs          GET|PUT …/projects/{id}/rules ── klaxon-store (import validation) ──▶ MongoDB
//!                                               └──▶ klaxon_store::invalidation: Redis PUBLISH ──▶ every process
//!   rest/explain.rs        POST …/projects/{id}/explain ── klaxon_core::explain + the counters' peek (reads only)
//!   rest/mutes.rs          GET|POST|DELETE …/projects/{id}/mutes ──▶ Redis
//!   rest/alerts.rs         GET …/projects/{id}/alerts, POST …/alerts/{alertId}/ack|resolve ──▶ Redis ──▶ RabbitMQ
//!   rest/projects.rs       GET|PUT …/projects/{id} (its name) ──▶ MongoDB; GET /api/v1/alerts (every project's)
//!   rest/notifications.rs  POST /api/v1/notifications ──▶ Redis (idempotency) ──▶ RabbitMQ (the senders' queues)
//!   rest/deliveries.rs, rest/dead.rs, rest/webhook_secret.rs ── the trail (MongoDB), `<ns>.dead`, derived secrets
//!   rest/invalid.rs        GET /api/v1/invalid, POST …/invalid/replay ──▶ `<ns>.events.invalid` ──▶ the events queue
//!
//!  PagerDuty, Slack, Telegram ──▶ guard (Host) ──▶ body cap (256 KiB) ──▶ inbound/ (their own signatures, not the
//!              token): POST /api/v1/integrations/{pagerduty,slack,telegram} ──▶ the hand ack/resolve of rest/alerts.rs
//!
//!  browser ──▶ GET / (console/mod.rs): its own guard, session auth and CSRF; the same state and rest/ functions,
//!              as HTML pages (console/{projects,mutes,alerts,edit,explain,deliveries,dead,invalid}.rs; the
//!              action links of messages in console/action.rs, sign-in in console/auth.rs)
//! ```
//!
//! Backing services are connected on first use, so the API answers (with 503) even while one is down, and
//! every error leaves as `{"error": "…"}` with a 4xx/5xx status — never a stack. What a web page could make a
//! browser send (DNS rebinding, cross-site posts, `text/plain` bodies) is refused by [`guard`] before auth;
//! wrong tokens are slowed per client by `throttle`.
#![deny(missing_docs)]

mod console;
mod error;
pub mod guard;
pub mod inbound;
pub mod proxy;
pub mod rest;
mod state;
mod throttle;

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Router;
use klaxon_broker::QueueType;

pub use error::ApiError;
use state::Api;
pub use throttle::MIN_TOKEN_LEN;

/// Largest request body accepted; larger ones get 413.
pub const MAX_BODY: usize = 1024 * 1024;
/// Longest a handler may run before the request fails with 503.
pub const HANDLER_TIMEOUT: Duration = Duration::from_secs(10);

/// What the API needs to reach the backing services. Validated by the binary before it is built.
#[derive(Clone)]
pub struct ApiConfig {
    /// The namespace (queues, Redis keys).
    pub namespace: String,
    /// RabbitMQ URL: the API keeps one connection of its own for all its requests and console pages.
    pub amqp_url: String,
    /// The process's Redis and MongoDB clients, shared with its other parts (each connected once, on first
    /// use: the API answers 503 while one is down).
    pub clients: klaxon_engine::clients::Clients,
    /// The events queue `POST /api/v1/events` publishes to.
    pub events_queue: String,
    /// Queue type used when the events queue has to be declared.
    pub queue_type: QueueType,
    /// `--events-shards`: with more than 1, `POST /api/v1/events` publishes to the shard exchange keyed by project.
    pub events_shards: u16,
    /// `--allow-private-endpoints`: direct notifications to loopback/private addresses are accepted, and rules
    /// with such endpoints are stored without a warning.
    pub allow_private_endpoints: bool,
    /// The per-project limits (`--max-rules-per-project`, `--max-mutes-per-project`,
    /// `--max-email-recipients`): writes over them are refused, reads take at most them.
    pub limits: klaxon_core::Limits,
    /// `KLAXON_API_TOKEN`: when set, every request needs `Authorization: Bearer <token>`; when not, only
    /// loopback clients are served. A [`klaxon_channels::Secret`]: `Debug` and logs never show it.
    pub token: Option<klaxon_channels::Secret>,
    /// `--allowed-hosts`: the host names the API and the console answer to, besides `localhost` and IP
    /// addresses (anything else: 421).
    pub allowed_hosts: guard::AllowedHosts,
    /// The webhook master keys (`KLAXON_WEBHOOK_SECRET`, `…_PREVIOUS`): the API and the console show each
    /// (project, endpoint)'s signing secret derived from them. `None`: webhooks are unsigned.
    pub webhook_keys: Option<klaxon_channels::webhook::SigningKeys>,
    /// `KLAXON_ACTION_KEY`: the console serves the signed action links of messages (`/a/<token>`) only when
    /// set; `None`: those pages say that action links are off.
    pub action_key: Option<klaxon_core::action::ActionKey>,
    /// The worker's `--output`: how acknowledging or resolving an alert by hand publishes its lifecycle
    /// messages (`klaxon` to the senders' queues; `hawk` and `shadow` publish none, as the worker does:
    /// `shadow` records them in `shadow_trail`).
    pub output: klaxon_engine::sink::Output,
    /// With `--output shadow`, the delivery trail the worker records into: hand changes record their lifecycle
    /// messages there too ([`klaxon_store::Trail::disabled`] otherwise).
    pub shadow_trail: klaxon_store::Trail,
    /// `--trusted-proxies`: only when a request's TCP peer is one of them is its client read from
    /// `X-Forwarded-For` (see [`proxy`]); default none.
    pub trusted_proxies: proxy::TrustedProxies,
    /// The inbound integrations' secrets (`KLAXON_PAGERDUTY_WEBHOOK_SECRET`, `KLAXON_SLACK_SIGNING_SECRET`,
    /// `KLAXON_TELEGRAM_WEBHOOK_SECRET`): each integration's endpoint is off (404) while its secret is unset.
    pub inbound: inbound::InboundSecrets,
}

impl std::fmt::Debug for ApiConfig {
    // URLs may carry passwords and the token is a secret: say only what is safe.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiConfig")
            .field("namespace", &self.namespace)
            .field("events_queue", &self.events_queue)
            .field("events_shards", &self.events_shards)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("webhook_keys", &self.webhook_keys)
            .field("action_key", &self.action_key.as_ref().map(|_| "<set>"))
            .field("allowed_hosts", &self.allowed_hosts)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("inbound", &self.inbound)
            .finish_non_exhaustive()
    }
}

/// The router of `/api/v1` (and the auth, body cap and timeout around it) and of the console, ready to merge
/// into the operations server. The server must be run with
/// `into_make_service_with_connect_info::<SocketAddr>()` for the loopback check; without it, only token auth
/// can succeed.
pub fn router(config: ApiConfig) -> Router {
    let api = Api::new(config);
    let console = console::router(api.clone());
    Router::new()
        .route("/api/v1/events", post(rest::events::ingest))
        // the same, under the name the contract's "Sharded input" gives Klaxon's ingest
        .route("/api/v1/ingest", post(rest::events::ingest))
        .route(
            "/api/v1/projects/{project_id}/rules",
            get(rest::rules::show).put(rest::rules::replace),
        )
        .route(
            "/api/v1/projects/{project_id}/explain",
            post(rest::explain::explain),
        )
        .route(
            "/api/v1/projects/{project_id}/mutes",
            get(rest::mutes::list).post(rest::mutes::add),
        )
        .route(
            "/api/v1/projects/{project_id}/mutes/{mute_id}",
            delete(rest::mutes::remove),
        )
        .route(
            "/api/v1/projects/{project_id}",
            get(rest::projects::show).put(rest::projects::rename),
        )
        .route("/api/v1/alerts", get(rest::projects::list))
        .route("/api/v1/projects/{project_id}/alerts", get(rest::alerts::list))
        .route(
            "/api/v1/projects/{project_id}/alerts/{alert_id}/ack",
            post(rest::alerts::ack),
        )
        .route(
            "/api/v1/projects/{project_id}/alerts/{alert_id}/resolve",
            post(rest::alerts::resolve),
        )
        .route("/api/v1/notifications", post(rest::notifications::send))
        .route(
            "/api/v1/projects/{project_id}/webhook-secret",
            get(rest::webhook_secret::project_secret),
        )
        .route("/api/v1/webhook-secret", get(rest::webhook_secret::secret))
        .route("/api/v1/deliveries", get(rest::deliveries::list))
        .route("/api/v1/dead", get(rest::dead::list))
        .route("/api/v1/dead/replay", post(rest::dead::replay))
        .route("/api/v1/invalid", get(rest::invalid::list))
        .route("/api/v1/invalid/replay", post(rest::invalid::replay))
        .route("/api/v1", get(not_found))
        .route("/api/v1/{*rest}", get(not_found).fallback(not_found))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn(with_timeout))
        .layer(middleware::from_fn(require_json))
        .layer(middleware::from_fn_with_state(api.clone(), authenticate))
        .layer(middleware::from_fn_with_state(api.clone(), guard_requests))
        .with_state(api.clone())
        // The console has its own auth (session cookie, CSRF) and HTML errors; it is not under `/api/v1`'s layers.
        .merge(console)
        // The inbound integrations are authenticated by their own signatures, not by the API's token.
        .merge(inbound::router(api))
}

// ---------------------------------------------------------------------------------------------------------
// The layers (the last added runs first): guard, auth, JSON only, timeout, body cap.

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no such endpoint")
}

/// A known path with the wrong method: a JSON error like every other one (axum's default is an empty 405).
async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed on this endpoint (see docs/api.md)",
    )
}

pub(crate) async fn with_timeout(req: Request, next: Next) -> Response {
    match tokio::time::timeout(HANDLER_TIMEOUT, next.run(req)).await {
        Ok(r) => r,
        Err(_) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the request took over {} s", HANDLER_TIMEOUT.as_secs()),
        )
        .into_response(),
    }
}

/// Compares two secrets in time that does not depend on where they differ (digests first, so the length
/// does not leak either).
pub(crate) fn same_secret(a: &str, b: &str) -> bool {
    use sha2::{Digest, Sha256};
    let (x, y) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    x.iter().zip(y.iter()).fold(0u8, |acc, (p, q)| acc | (p ^ q)) == 0
}

/// The Host and cross-site guards ([`guard`]), before anything else.
async fn guard_requests(State(api): State<Api>, req: Request, next: Next) -> Response {
    match guard::check(&api.config().allowed_hosts, &req) {
        Ok(()) => next.run(req).await,
        Err(r) => {
            tracing::debug!(status = r.status.as_u16(), reason = %r.message, "API request refused by a guard");
            ApiError::new(r.status, r.message).into_response()
        }
    }
}

/// 415 for a POST, PUT or PATCH whose body is not declared `application/json` (see [`guard::check_json`]).
async fn require_json(req: Request, next: Next) -> Response {
    match guard::check_json(&req) {
        Ok(()) => next.run(req).await,
        Err(r) => ApiError::new(r.status, r.message).into_response(),
    }
}

/// Whether the presented `Authorization` is `Bearer <token>`, under the client's budget of wrong tokens (see
/// `throttle`): the API and the console alike.
pub(crate) fn bearer(api: &Api, req: &Request, auth: &header::HeaderValue, token: &str) -> throttle::Attempt {
    let given = auth
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    api.throttle().attempt(client_ip(api, req), || {
        given.is_some_and(|g| same_secret(g, token))
    })
}

/// The address of the request's client, when the server recorded its connection's peer: that peer, or
/// behind a trusted proxy the address it forwarded (see [`proxy`]).
pub(crate) fn client_ip(api: &Api, req: &Request) -> Option<std::net::IpAddr> {
    req.extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| api.config().trusted_proxies.client(c.0.ip(), req.headers()))
}

/// `429` with `Retry-After`: the client presented too many wrong tokens (see `throttle`).
fn throttled(wait: Duration) -> Response {
    let secs = throttle::retry_after_secs(wait);
    let mut r = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        format!("too many wrong tokens from this address: try again in {secs} s"),
    )
    .into_response();
    r.headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
    r
}

async fn authenticate(State(api): State<Api>, req: Request, next: Next) -> Response {
    match &api.config().token {
        Some(token) => {
            let unauthorized = || {
                let mut r = ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "missing or wrong `Authorization: Bearer <token>` (KLAXON_API_TOKEN)",
                )
                .into_response();
                r.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Bearer"),
                );
                r
            };
            // No credentials at all is not a guess: only a presented token uses the client's budget.
            let Some(auth) = req.headers().get(header::AUTHORIZATION) else {
                return unauthorized();
            };
            match bearer(&api, &req, auth, token.expose()) {
                throttle::Attempt::Passed => next.run(req).await,
                throttle::Attempt::Failed => unauthorized(),
                throttle::Attempt::Throttled(wait) => throttled(wait),
            }
        }
        None => {
            if client_ip(&api, &req).is_some_and(|ip| ip.is_loopback()) {
                next.run(req).await
            } else {
                ApiError::new(
                    StatusCode::FORBIDDEN,
                    "KLAXON_API_TOKEN is not set: only loopback clients are served",
                )
                .into_response()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "abcd"));
        assert!(!same_secret("", "a"));
    }
}
