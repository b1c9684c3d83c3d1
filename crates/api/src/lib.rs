//! Klaxon's HTTP API (README, "HTTP API"; docs/api.md), mounted beside `/metrics` on `--http-addr`.
//!
//! ```text
//!  client ──▶ guard (Host, cross-site) ──▶ auth (Bearer token, or loopback only; wrong tokens throttled per client)
//!         ──▶ Content-Type application/json ──▶ body cap (1 MiB) ──▶ handler (timeout) ──▶ JSON
//!                                                                              │
//!        POST /api/v1/events ──────────── EventTask::parse (the queue's validation) ──▶ RabbitMQ (confirms)
//!        GET|PUT /api/v1/projects/{id}/rules ── klaxon-rules (import validation) ──▶ MongoDB
//!                                                └──▶ Redis PUBLISH <ns>:rules:invalidate ──▶ every process
//!  browser ──▶ GET / (the console, `console.rs`): the same helpers, as server-rendered HTML pages
//! ```
//!
//! Backing services are connected on first use, so the API answers (with 503) even while one is down, and
//! every error leaves as `{"error": "…"}` with a 4xx/5xx status — never a stack. What a web page could make a
//! browser send (DNS rebinding, cross-site posts, `text/plain` bodies) is refused by [`guard`] before auth;
//! wrong tokens are slowed per client by `throttle`.
#![deny(missing_docs)]

pub mod bounds;
mod console;
pub mod dead;
pub mod deliveries;
pub mod explain;
pub mod guard;
pub mod invalidation;
pub mod mutes;
pub mod notifications;
mod throttle;
pub mod webhook_secret;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use klaxon_broker::{Broker, Outgoing, Publisher, QueueType, Topology};
use klaxon_core::EventTask;
use klaxon_counter::RedisHandle;
use klaxon_rules::{RuleStore, RulesError};
use serde_json::{json, Value};
use tokio::sync::{Mutex, OnceCell};

/// Largest request body accepted; larger ones get 413.
pub const MAX_BODY: usize = 1024 * 1024;
/// Longest a handler may run before the request fails with 503.
pub const HANDLER_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest an error message that leaves the process may be, in characters.
const MAX_ERROR_CHARS: usize = 2000;

/// What the API needs to reach the backing services. Validated by the binary before it is built.
#[derive(Clone)]
pub struct ApiConfig {
    /// The namespace (queues, Redis keys).
    pub namespace: String,
    /// RabbitMQ URL.
    pub amqp_url: String,
    /// Redis URL (a comma-separated list = Redis Cluster).
    pub redis_url: String,
    /// MongoDB URL.
    pub mongo_url: String,
    /// MongoDB database.
    pub mongo_db: String,
    /// The events queue `POST /api/v1/events` publishes to.
    pub events_queue: String,
    /// Queue type used when the events queue has to be declared.
    pub queue_type: QueueType,
    /// `--allow-private-endpoints`: direct notifications to loopback/private addresses are accepted, and rules
    /// with such endpoints are stored without a warning.
    pub allow_private_endpoints: bool,
    /// The per-project limits (`--max-rules-per-project`, `--max-mutes-per-project`,
    /// `--max-email-recipients`): writes over them are refused, reads take at most them.
    pub limits: klaxon_core::Limits,
    /// `KLAXON_API_TOKEN`: when set, every request needs `Authorization: Bearer <token>`; when not, only
    /// loopback clients are served.
    pub token: Option<String>,
    /// `--allowed-hosts`: the host names the API and the console answer to, besides `localhost` and IP
    /// addresses (anything else: 421).
    pub allowed_hosts: guard::AllowedHosts,
    /// The rule store (rules and the delivery trail), connected on first use to `mongo_url`. Share the cell
    /// with the rest of the process so that it has one MongoDB client; a fresh one when nothing else uses it.
    pub rule_store: Arc<OnceCell<RuleStore>>,
    /// The webhook master keys (`KLAXON_WEBHOOK_SECRET`, `…_PREVIOUS`): the API and the console show each
    /// (project, endpoint)'s signing secret derived from them. `None`: webhooks are unsigned.
    pub webhook_keys: Option<klaxon_channels::webhook::SigningKeys>,
    /// The process's defaults for what rules leave unset (`--including-case`), for a store this API connects.
    pub rule_defaults: klaxon_core::RuleDefaults,
}

impl std::fmt::Debug for ApiConfig {
    // URLs may carry passwords and the token is a secret: say only what is safe.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiConfig")
            .field("namespace", &self.namespace)
            .field("events_queue", &self.events_queue)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("webhook_keys", &self.webhook_keys)
            .field("allowed_hosts", &self.allowed_hosts)
            .finish_non_exhaustive()
    }
}

struct Inner {
    config: ApiConfig,
    store: Arc<OnceCell<RuleStore>>,
    redis: OnceCell<RedisHandle>,
    amqp: Mutex<Option<(Broker, Publisher)>>,
    trail: OnceCell<klaxon_rules::TrailReader>,
    /// Wrong tokens per client, for the API and the console alike.
    throttle: throttle::AuthThrottle,
}

#[derive(Clone)]
struct Api(Arc<Inner>);

/// An error answer: a status and `{"error": message}` (plus optional extra fields).
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    extra: Option<(&'static str, Value)>,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        let mut message: String = message.into();
        if message.chars().count() > MAX_ERROR_CHARS {
            message = message.chars().take(MAX_ERROR_CHARS).collect::<String>() + "…";
        }
        ApiError {
            status,
            message,
            extra: None,
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    fn unavailable(what: &str, e: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{what} is unavailable: {e}"),
        )
    }

    fn rules(e: RulesError) -> Self {
        match e {
            RulesError::InvalidId { .. } => Self::bad_request(e.to_string()),
            RulesError::OverLimit(_) => Self::new(StatusCode::CONFLICT, e.to_string()),
            e if e.is_transient() => Self::unavailable("MongoDB", e),
            e => Self::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({ "error": self.message });
        if let Some((k, v)) = self.extra {
            body[k] = v;
        }
        json_response(self.status, &body)
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The router of `/api/v1` (and the auth, body cap and timeout around it), ready to merge into the
/// operations server. The server must be run with `into_make_service_with_connect_info::<SocketAddr>()`
/// for the loopback check; without it, only token auth can succeed.
pub fn router(config: ApiConfig) -> Router {
    let api = Api(Arc::new(Inner {
        store: config.rule_store.clone(),
        config,
        redis: OnceCell::new(),
        amqp: Mutex::new(None),
        trail: OnceCell::new(),
        throttle: throttle::AuthThrottle::default(),
    }));
    let console = console::router(api.clone());
    Router::new()
        .route("/api/v1/events", post(post_events))
        .route(
            "/api/v1/projects/{project_id}/rules",
            get(get_rules).put(put_rules),
        )
        .route("/api/v1/projects/{project_id}/explain", post(post_explain))
        .route(
            "/api/v1/projects/{project_id}/mutes",
            get(list_mutes).post(add_mute),
        )
        .route(
            "/api/v1/projects/{project_id}/mutes/{mute_id}",
            axum::routing::delete(delete_mute),
        )
        .route("/api/v1/notifications", post(post_notification))
        .route(
            "/api/v1/projects/{project_id}/webhook-secret",
            get(webhook_secret::get_project_secret),
        )
        .route("/api/v1/webhook-secret", get(webhook_secret::get_secret))
        .route("/api/v1/deliveries", get(get_deliveries))
        .route("/api/v1/dead", get(get_dead))
        .route("/api/v1/dead/replay", post(replay_dead))
        .route("/api/v1", get(not_found))
        .route("/api/v1/{*rest}", get(not_found).fallback(not_found))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn(with_timeout))
        .layer(middleware::from_fn(require_json))
        .layer(middleware::from_fn_with_state(api.clone(), authenticate))
        .layer(middleware::from_fn_with_state(api.clone(), guard_requests))
        .with_state(api)
        // The console has its own auth (session cookie, CSRF) and HTML errors; it is not under `/api/v1`'s layers.
        .merge(console)
}

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

async fn with_timeout(req: Request, next: Next) -> Response {
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
fn same_secret(a: &str, b: &str) -> bool {
    use sha2::{Digest, Sha256};
    let (x, y) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    x.iter().zip(y.iter()).fold(0u8, |acc, (p, q)| acc | (p ^ q)) == 0
}

/// The Host and cross-site guards ([`guard`]), before anything else.
async fn guard_requests(State(api): State<Api>, req: Request, next: Next) -> Response {
    match guard::check(&api.0.config.allowed_hosts, &req) {
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

/// The peer address of the request's connection, when the server recorded it.
pub(crate) fn peer_ip(req: &Request) -> Option<std::net::IpAddr> {
    req.extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
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
    match &api.0.config.token {
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
            let given = auth
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim);
            match api
                .0
                .throttle
                .attempt(peer_ip(&req), || given.is_some_and(|g| same_secret(g, token)))
            {
                throttle::Attempt::Passed => next.run(req).await,
                throttle::Attempt::Failed => unauthorized(),
                throttle::Attempt::Throttled(wait) => throttled(wait),
            }
        }
        None => {
            if peer_ip(&req).is_some_and(|ip| ip.is_loopback()) {
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

/// The request body, or the error answer for it (413 over the cap).
fn body_of(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|r| {
        let status = r.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(status, format!("the body is over {MAX_BODY} bytes"))
        } else {
            ApiError::new(status, r.body_text())
        }
    })
}

fn json_body(body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let body = body_of(body)?;
    serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))
}

impl Api {
    async fn store(&self) -> Result<&RuleStore, ApiError> {
        self.rule_store().await.map_err(ApiError::rules)
    }

    /// The rule store (connected on first use): the API's one MongoDB client, for rules and the trail.
    async fn rule_store(&self) -> Result<&RuleStore, RulesError> {
        let c = &self.0.config;
        self.0
            .store
            .get_or_try_init(|| async {
                RuleStore::connect(&c.mongo_url, &c.mongo_db)
                    .await
                    .map(|s| s.with_rule_defaults(c.rule_defaults))
            })
            .await
    }

    async fn redis(&self) -> Result<RedisHandle, ApiError> {
        self.0
            .redis
            .get_or_try_init(|| RedisHandle::connect(&self.0.config.redis_url))
            .await
            .cloned()
            .map_err(|e| ApiError::unavailable("Redis", e))
    }

    /// Publishes with confirms on the shared channel, (re)connecting when it is gone: each message straight
    /// to its queue, or through the delay engine when it has a delay.
    async fn publish(&self, messages: &[(Outgoing, Duration)]) -> Result<(), ApiError> {
        let c = &self.0.config;
        let mut slot = self.0.amqp.lock().await;
        if slot.as_ref().is_some_and(|(b, _)| !b.is_connected()) {
            *slot = None;
        }
        let topology = Topology::new(&c.namespace, &c.events_queue, c.queue_type);
        if slot.is_none() {
            let broker = Broker::connect(&c.amqp_url, Duration::from_secs(5))
                .await
                .map_err(|e| ApiError::unavailable("RabbitMQ", e))?;
            let publisher = broker
                .publisher()
                .await
                .map_err(|e| ApiError::unavailable("RabbitMQ", e))?;
            publisher
                .declare(&topology)
                .await
                .map_err(|e| ApiError::unavailable("RabbitMQ", e))?;
            *slot = Some((broker, publisher));
        }
        let Some((_, publisher)) = slot.as_ref() else {
            return Err(ApiError::unavailable("RabbitMQ", "not connected"));
        };
        let (now, later): (Vec<_>, Vec<_>) = messages.iter().cloned().partition(|(_, d)| d.is_zero());
        let now: Vec<Outgoing> = now.into_iter().map(|(m, _)| m).collect();
        let mut result = Ok(());
        if !now.is_empty() {
            result = publisher.publish_all(&now).await;
        }
        if result.is_ok() && !later.is_empty() {
            result = publisher.publish_delayed(&topology.delay(), &later).await;
        }
        if let Err(e) = result {
            // The channel may be broken; the next request opens a fresh one.
            *slot = None;
            return Err(ApiError::unavailable("RabbitMQ", e));
        }
        Ok(())
    }
}

/// `POST /api/v1/events`: one notifier task or an array; all validated before any is published.
async fn post_events(
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
    let queue = api.0.config.events_queue.clone();
    let batch = format!("{:016x}", rand::random::<u64>());
    let mut messages = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let bytes = serde_json::to_vec(item).map_err(|e| ApiError::bad_request(format!("event {i}: {e}")))?;
        EventTask::parse(&bytes).map_err(|e| ApiError::bad_request(format!("event {i}: {e}")))?;
        let mut m = Outgoing::json(queue.clone(), bytes);
        m.message_id = Some(format!("api-{batch}-{i}"));
        messages.push((m, Duration::ZERO));
    }
    api.publish(&messages).await?;
    Ok(json_response(
        StatusCode::ACCEPTED,
        &json!({ "accepted": messages.len() }),
    ))
}

fn check_project_id(project_id: &str) -> Result<(), ApiError> {
    if klaxon_core::event::is_object_id(project_id) {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "project id `{}` is not a 24-hex-digit ObjectId",
            project_id.chars().take(64).collect::<String>()
        )))
    }
}

/// `GET /api/v1/projects/{id}/rules`: the project in the import/export format.
async fn get_rules(State(api): State<Api>, Path(project_id): Path<String>) -> Result<Response, ApiError> {
    check_project_id(&project_id)?;
    let store = api.store().await?;
    match store.project(&project_id).await.map_err(ApiError::rules)? {
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("unknown project {project_id}"),
        )),
        Some(p) => Ok(json_response(
            StatusCode::OK,
            &json!({
                "_id": p.project_id,
                "notifications": p.notifications.into_iter().map(klaxon_rules::format::oids_to_hex).collect::<Vec<_>>(),
            }),
        )),
    }
}

/// `PUT /api/v1/projects/{id}/rules`: validated like `klaxon rules import` (`?force=true` stores rules the
/// engine cannot use, never over a limit), then every process is told to drop its cached rules of the project.
async fn put_rules(
    State(api): State<Api>,
    Path(project_id): Path<String>,
    RawQuery(query): RawQuery,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    check_project_id(&project_id)?;
    let force = query
        .as_deref()
        .unwrap_or_default()
        .split('&')
        .any(|kv| kv.eq_ignore_ascii_case("force=true") || kv == "force=1");
    let stored = replace_rules(&api, &project_id, json_body(body)?, force).await?;
    Ok(json_response(StatusCode::OK, &stored.body))
}

/// What [`replace_rules`] stored.
struct Stored {
    /// The project as stored (the export format), with `"warnings": [...]` when there are any.
    body: Value,
    /// Some endpoint points to a private address (a warning of `body`).
    private_endpoints: bool,
}

fn problem_json(p: &klaxon_core::RuleProblem) -> Value {
    let mut v = json!({"ruleId": p.rule_id, "fatal": p.fatal, "message": p.message, "fix": p.fix});
    if p.limit {
        v["limit"] = json!(true);
    }
    v
}

/// Validates a project's rules (`{"_id"?, "notifications": [Rule]}`) like `klaxon rules import` and stores
/// them (`force`: even rules the engine cannot use; never over a limit: `klaxon_core::Limits`), then tells
/// every process; returns what was stored, with the warnings (problems that did not refuse the write, and
/// endpoints on private addresses unless `--allow-private-endpoints`). Shared by `PUT` and the console's edit
/// page. Problems are a 400 with `extra = ("problems", [...])`.
async fn replace_rules(
    api: &Api,
    project_id: &str,
    mut body: Value,
    force: bool,
) -> Result<Stored, ApiError> {
    let project_id = project_id.to_owned();
    let Some(obj) = body.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the body must be an object {\"_id\", \"notifications\": [Rule]}",
        ));
    };
    match obj.get("_id").cloned().map(klaxon_rules::format::oids_to_hex) {
        None => {}
        Some(Value::String(id)) if id.eq_ignore_ascii_case(&project_id) => {}
        Some(_) => {
            return Err(ApiError::bad_request(format!(
                "`_id` must be the project of the path ({project_id}) or absent"
            )))
        }
    }
    obj.insert("_id".into(), Value::String(project_id.to_ascii_lowercase()));
    let text = Value::Array(vec![body]).to_string();
    let projects = klaxon_rules::parse_import(&text).map_err(|e| ApiError::bad_request(e.to_string()))?;
    // Like `klaxon rules import`: what the engine cannot use refuses the request unless forced, a limit always;
    // a rule that is valid but cannot notify yet is stored, with a warning.
    let (problems, mut warnings): (Vec<_>, Vec<_>) =
        klaxon_rules::format::import_problems(&projects, &api.0.config.limits)
            .into_iter()
            .map(|(_, p)| p)
            .partition(|p| p.refuses_write(force));
    if !problems.is_empty() {
        let limits = problems.iter().any(|p| p.limit);
        let text = problems
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join("; ");
        let mut e = ApiError::bad_request(format!(
            "{} problem(s), nothing stored ({}): {text}",
            problems.len(),
            if limits {
                "a limit cannot be forced"
            } else {
                "use ?force=true to store anyway"
            }
        ));
        e.extra = Some((
            "problems",
            Value::Array(problems.iter().map(problem_json).collect()),
        ));
        return Err(e);
    }
    let private = if api.0.config.allow_private_endpoints {
        Vec::new()
    } else {
        bounds::private_endpoints(&projects)
    };
    let private_endpoints = !private.is_empty();
    warnings.extend(private.into_iter().map(|(_, p)| p));
    let store = api.store().await?;
    store.replace(&projects).await.map_err(ApiError::rules)?;
    api.publish_invalidation(&project_id).await;
    let exported = klaxon_rules::export_json(&projects);
    let mut body = exported
        .as_array()
        .and_then(|a| a.first())
        .cloned()
        .unwrap_or(Value::Null);
    if !warnings.is_empty() {
        body["warnings"] = Value::Array(warnings.iter().map(problem_json).collect());
    }
    Ok(Stored {
        body,
        private_endpoints,
    })
}

/// `POST /api/v1/projects/{id}/explain` `{"title", "groupHash", "isNew"?, "user"?}`: per rule, what this event
/// would do. Reads only.
async fn post_explain(
    State(api): State<Api>,
    Path(project_id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    check_project_id(&project_id)?;
    let body = json_body(body)?;
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the body must be an object {\"title\", \"groupHash\", \"isNew\"?, \"user\"?}",
        ));
    }
    // Validated exactly like an event on the queue.
    let task = json!({"projectId": project_id, "event": body}).to_string();
    let event = EventTask::parse(task.as_bytes())
        .map_err(|e| ApiError::bad_request(e.to_string()))?
        .event;
    let verdicts = api.explain_event(&project_id, &event).await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({"rules": verdicts.iter().map(explain::Verdict::to_json).collect::<Vec<_>>()}),
    ))
}

impl Api {
    /// Per stored rule of `project_id`, what `event` would do now (mutes included). Reads only; `404` for a
    /// project without rules. The API's and the console's explain both come here.
    pub(crate) async fn explain_event(
        &self,
        project_id: &str,
        event: &klaxon_core::event::Event,
    ) -> Result<Vec<explain::Verdict>, ApiError> {
        let store = self.store().await?;
        let Some(project) = store.project(project_id).await.map_err(ApiError::rules)? else {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("unknown project {project_id}: it has no rules"),
            ));
        };
        let (counter, mutes) = self.active_mutes(project_id).await?;
        let defaults = store.rule_defaults();
        explain::explain(
            &counter,
            project_id,
            &project.notifications,
            &defaults,
            &mutes.mutes,
            event,
            &self.0.config.limits,
        )
        .await
        .map_err(|e| ApiError::unavailable("Redis", e))
    }

    /// Tells every process that `project_id`'s rules changed; a failure only means they refresh on their TTL.
    async fn publish_invalidation(&self, project_id: &str) {
        match self.redis().await {
            Ok(redis) => {
                if let Err(e) = invalidation::publish(redis, &self.0.config.namespace, project_id).await {
                    tracing::warn!(error = %e, project_id, "rules stored, but the invalidation was not published; processes refresh on their TTL");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e.message, project_id, "rules stored, but Redis is unreachable; processes refresh on their TTL")
            }
        }
    }

    /// The delivery trail's reader (through the rule store's client, connected on first use).
    async fn trail(&self) -> Result<&klaxon_rules::TrailReader, ApiError> {
        self.0
            .trail
            .get_or_try_init(|| async {
                let store = self
                    .rule_store()
                    .await
                    .map_err(|e| ApiError::unavailable("MongoDB", e))?;
                Ok(klaxon_rules::TrailReader::new(store))
            })
            .await
    }

    /// The Redis clock (ms), the one mutes and windows use.
    async fn redis_now(&self) -> Result<(klaxon_counter::WindowCounter, i64), ApiError> {
        let counter = klaxon_counter::WindowCounter::new(self.redis().await?, &self.0.config.namespace);
        let now = counter
            .server_time_ms()
            .await
            .map_err(|e| ApiError::unavailable("Redis", e))?;
        Ok((counter, now))
    }

    fn mutes(&self, counter: &klaxon_counter::WindowCounter) -> klaxon_counter::Mutes {
        klaxon_counter::Mutes::new(counter.redis().clone(), &self.0.config.namespace)
            .with_limit(self.0.config.limits.max_mutes)
    }

    /// The project's mutes active now on the Redis clock (at most the limit of them), with the counter they
    /// were read through.
    async fn active_mutes(
        &self,
        project_id: &str,
    ) -> Result<(klaxon_counter::WindowCounter, klaxon_counter::mutes::ReadMutes), ApiError> {
        let (counter, now) = self.redis_now().await?;
        let list = self
            .mutes(&counter)
            .list(project_id, now)
            .await
            .map_err(|e| ApiError::unavailable("Redis", e))?;
        Ok((counter, list))
    }

    /// 404 unless the project exists.
    async fn known_project(&self, project_id: &str) -> Result<(), ApiError> {
        check_project_id(project_id)?;
        match self
            .store()
            .await?
            .project(project_id)
            .await
            .map_err(ApiError::rules)?
        {
            Some(_) => Ok(()),
            None => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("unknown project {project_id}"),
            )),
        }
    }
}

impl Api {
    /// Stores a mute made at `now` on `counter`'s Redis; `409` when the project already has the limit of active
    /// mutes. The API's and the console's mute forms both come here.
    async fn store_mute(
        &self,
        counter: &klaxon_counter::WindowCounter,
        project_id: &str,
        mute: &klaxon_core::mute::Mute,
        now: i64,
    ) -> Result<(), ApiError> {
        let mutes = self.mutes(counter);
        match mutes
            .add(project_id, mute, Some(now))
            .await
            .map_err(|e| ApiError::unavailable("Redis", e))?
        {
            klaxon_counter::mutes::Added::Stored { .. } => Ok(()),
            klaxon_counter::mutes::Added::Full { active } => Err(ApiError::new(
                StatusCode::CONFLICT,
                bounds::mutes_full(project_id, active, mutes.limit()),
            )),
        }
    }
}

/// `POST /api/v1/projects/{id}/mutes` → 201 `{"muteId", "until"}` (`409` over the project's limit of mutes).
async fn add_mute(
    State(api): State<Api>,
    Path(project_id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = json_body(body)?;
    api.known_project(&project_id).await?;
    let (counter, now) = api.redis_now().await?;
    let mute = mutes::mute_from_request(&body, now, format!("{:016x}", rand::random::<u64>()))
        .map_err(ApiError::bad_request)?;
    api.store_mute(&counter, &project_id, &mute, now).await?;
    let v = mutes::to_json(&mute);
    Ok(json_response(
        StatusCode::CREATED,
        &json!({"muteId": v["muteId"], "until": v["until"]}),
    ))
}

/// `GET /api/v1/projects/{id}/mutes` → `{"mutes": [{"muteId", "ruleId"?, "groupHash"?, "until"}]}`, at most the
/// project's limit of them; `"skipped": n` when more are stored (not listed, and not applied either).
async fn list_mutes(State(api): State<Api>, Path(project_id): Path<String>) -> Result<Response, ApiError> {
    api.known_project(&project_id).await?;
    let (_, list) = api.active_mutes(&project_id).await?;
    let mut body = json!({"mutes": list.mutes.iter().map(mutes::to_json).collect::<Vec<_>>()});
    if list.unread > 0 {
        body["skipped"] = json!(list.unread);
    }
    Ok(json_response(StatusCode::OK, &body))
}

/// `DELETE /api/v1/projects/{id}/mutes/{muteId}` → 204, or 404 for an unknown mute.
async fn delete_mute(
    State(api): State<Api>,
    Path((project_id, mute_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    check_project_id(&project_id)?;
    let (counter, _) = api.redis_now().await?;
    let removed = api
        .mutes(&counter)
        .remove(&project_id, &mute_id)
        .await
        .map_err(|e| ApiError::unavailable("Redis", e))?;
    if removed {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::new(StatusCode::NOT_FOUND, "no such mute"))
    }
}

/// `POST /api/v1/notifications` → 202 `{"notificationId", "sendAt"}`: a direct notification, queued for the
/// senders (through the delay engine when `sendAt` is later). See [`notifications`].
async fn post_notification(
    State(api): State<Api>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    use notifications::KeyState;
    let body = json_body(body)?;
    let (counter, now) = api.redis_now().await?;
    let request = notifications::parse(&body, now, api.0.config.allow_private_endpoints)
        .map_err(ApiError::bad_request)?;
    bounds::check_direct_recipients(request.channel, &request.endpoint, &api.0.config.limits)
        .map_err(ApiError::bad_request)?;
    let id = request.notification_id(|| format!("{:032x}", rand::random::<u128>()));
    let mut send_at = request.send_at_ms.unwrap_or(now);
    let mut redis = counter.redis().clone();
    let unavailable = |e: redis::RedisError| ApiError::unavailable("Redis", e);
    let record = notifications::key_of(&api.0.config.namespace, &id);
    if request.idempotency_key.is_some() {
        let fresh: Option<String> = redis::cmd("SET")
            .arg(&record)
            .arg(KeyState::Pending(send_at).encode())
            .arg("NX")
            .arg("PX")
            .arg(notifications::key_ttl_ms(send_at, now))
            .query_async(&mut redis)
            .await
            .map_err(unavailable)?;
        if fresh.is_none() {
            let stored: Option<String> = redis::cmd("GET")
                .arg(&record)
                .query_async(&mut redis)
                .await
                .map_err(unavailable)?;
            match stored.as_deref().and_then(KeyState::decode) {
                // Queued already: the same answer, nothing enqueued twice.
                Some(KeyState::Queued(at)) => {
                    return Ok(json_response(
                        StatusCode::ACCEPTED,
                        &json!({"notificationId": id, "sendAt": notifications::send_at_text(at)}),
                    ));
                }
                // The first request may have died before publishing: publish again, at its time (the
                // senders deliver one id once).
                Some(KeyState::Pending(at)) => send_at = at,
                // Gone in between (expired): go on as a fresh request.
                None => {}
            }
        }
    }
    let mut task = request.task(id.clone(), now);
    task.send_at_ms = (send_at > now).then_some(send_at);
    let bytes = serde_json::to_vec(&task).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the task: {e}"),
        )
    })?;
    let topology = Topology::new(
        &api.0.config.namespace,
        &api.0.config.events_queue,
        api.0.config.queue_type,
    );
    let mut message = Outgoing::json(topology.notify_queue(task.channel), bytes);
    message.message_id = Some(id.clone());
    let wait = Duration::from_millis(u64::try_from(send_at - now).unwrap_or(0)).min(klaxon_broker::MAX_DELAY);
    api.publish(&[(message, wait)]).await?;
    if request.idempotency_key.is_some() {
        let marked: Result<Option<String>, _> = redis::cmd("SET")
            .arg(&record)
            .arg(KeyState::Queued(send_at).encode())
            .arg("XX")
            .arg("KEEPTTL")
            .query_async(&mut redis)
            .await;
        if let Err(e) = marked {
            // A repeat of this request publishes once more; the senders still deliver it once.
            tracing::warn!(notification_id = %id, error = %e, "direct notification queued, but its key was not marked");
        }
    }
    tracing::info!(
        notification_id = %id, channel = %task.channel,
        destination = %klaxon_channels::redact_endpoint(task.channel, &task.endpoint),
        send_at = %notifications::send_at_text(send_at), "direct notification queued"
    );
    Ok(json_response(
        StatusCode::ACCEPTED,
        &json!({"notificationId": id, "sendAt": notifications::send_at_text(send_at)}),
    ))
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

/// `GET /api/v1/deliveries?projectId=&limit=` → `{"deliveries": [...]}`, newest first.
async fn get_deliveries(State(api): State<Api>, RawQuery(query): RawQuery) -> Result<Response, ApiError> {
    let pairs = query_pairs(query.as_deref());
    let limit = limit_of(&pairs, 100, deliveries::MAX_LIMIT)?;
    let project = pairs
        .iter()
        .find(|(k, v)| k == "projectId" && !v.is_empty())
        .map(|(_, v)| v.clone());
    if let Some(p) = &project {
        check_project_id(p)?;
    }
    let records = api
        .trail()
        .await?
        .latest(project.as_deref(), None, limit, deliveries::SCAN)
        .await
        .map_err(|e| ApiError::unavailable("MongoDB", e))?;
    Ok(json_response(
        StatusCode::OK,
        &json!({"deliveries": records.iter().map(deliveries::record_json).collect::<Vec<_>>()}),
    ))
}

/// One pass over the dead-letter queue on a connection of its own (rare, operator-driven).
async fn dead_pass(api: &Api, what: dead::Pass<'_>) -> Result<Vec<dead::DeadItem>, ApiError> {
    let c = &api.0.config;
    let unavailable = |e: klaxon_broker::BrokerError| ApiError::unavailable("RabbitMQ", e);
    let broker = Broker::connect(&c.amqp_url, Duration::from_secs(5))
        .await
        .map_err(unavailable)?;
    let publisher = broker.publisher().await.map_err(unavailable)?;
    let topology = Topology::new(&c.namespace, &c.events_queue, c.queue_type);
    publisher.declare(&topology).await.map_err(unavailable)?;
    let out = dead::pass(&broker, &publisher, &topology, what).await;
    publisher.close().await;
    broker.close().await;
    out.map_err(unavailable)
}

/// `GET /api/v1/dead?limit=` → `{"dead": [...]}` (the messages stay in the queue).
async fn get_dead(State(api): State<Api>, RawQuery(query): RawQuery) -> Result<Response, ApiError> {
    let limit = limit_of(&query_pairs(query.as_deref()), 100, 1000)?;
    let items = dead_pass(&api, dead::Pass::List(limit as u32)).await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({"dead": items.iter().map(dead::DeadItem::to_json).collect::<Vec<_>>()}),
    ))
}

/// `POST /api/v1/dead/replay` `{"notificationIds"?}` (absent: all) → `{"replayed": n, "notificationIds": [...]}`.
async fn replay_dead(
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
    let items = dead_pass(&api, dead::Pass::Replay(ids.as_deref())).await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({"replayed": items.len(), "notificationIds": items.iter().map(|i| i.notification_id.clone()).collect::<Vec<_>>()}),
    ))
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
