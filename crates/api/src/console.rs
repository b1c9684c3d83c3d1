//! The web console at `GET /`: server-rendered HTML pages over the API's own helpers (no JavaScript needed).
//!
//! ```text
//!  browser ──▶ security headers ──▶ guard (Host; cross-site POST → 403) ──▶ timeout
//!          ──▶ auth ─┬─ KLAXON_API_TOKEN set: session cookie (POST /login)
//!                    │                       or `Authorization: Bearer` (wrong tokens throttled per client)
//!                    └─ not set: loopback clients only
//!          ──▶ POST? the form's `csrf` field must match (the session's, or the process's without a session)
//!          ──▶ page: rule store / Redis (mutes, explain) / RabbitMQ (queue depths, dead letters) / the trail
//! ```
//!
//! Sessions live in this process only (bounded, expiring): a restart logs everyone out, and behind a load
//! balancer a session sticks to the process that made it. Templates are compiled in (`templates/console`) and
//! rendered by minijinja with HTML auto-escaping; secrets (endpoints, the token, URLs) are never rendered — the
//! one exception is a webhook channel's own signing secret on its project's page, which is there to be copied.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use klaxon_broker::{Broker, BrokerError, Topology, QUEUE_DECLARE_PASSIVE};
use klaxon_core::rule::{Field, RawChannel, RuleId};
use klaxon_core::{ChannelKind, EventTask, RawRule};
use klaxon_rules::format::oids_to_hex;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::throttle::{retry_after_secs, Attempt};
use crate::{
    check_project_id, dead, guard, mutes, peer_ip, same_secret, Api, ApiError, HANDLER_TIMEOUT, MAX_BODY,
};

/// The session cookie's name.
pub(crate) const COOKIE: &str = "klaxon_session";
/// Most sessions kept at once; creating one more evicts the oldest.
pub(crate) const MAX_SESSIONS: usize = 1000;
/// How long a session lasts after login.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Deliveries per page unless `?limit=` says otherwise, and the most it may say.
const PAGE: usize = 50;
const MAX_PAGE: usize = 500;
/// Projects listed on `/` at most (the rest are reachable with "open a project").
const MAX_PROJECTS: usize = 500;
/// Dead letters listed at once.
const DEAD_LIST: u32 = 200;
/// Trail records read at most for the last hour's counts.
const LAST_HOUR_SCAN: usize = 100_000;
/// How long the last hour's counts may take before the page shows them as unavailable (on a MongoDB-wire
/// server without indexes, e.g. PoloDB, the trail is scanned whole).
const LAST_HOUR_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the queue depths may take before the page shows them as unavailable.
const QUEUES_TIMEOUT: Duration = Duration::from_secs(4);
/// A wrong login token answers only after this (slows guessing; the token is compared in constant time).
const LOGIN_FAILURE_DELAY: Duration = Duration::from_millis(300);

const SECURITY_HEADERS: [(&str, &str); 6] = [
    (
        "content-security-policy",
        "default-src 'self'; style-src 'self' 'unsafe-inline'",
    ),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("x-content-type-options", "nosniff"),
    ("cache-control", "no-store"),
    ("cross-origin-opener-policy", "same-origin"),
];

/// 128 random bits as 32 hex digits (session ids, CSRF tokens).
fn random_hex() -> String {
    format!("{:032x}", rand::random::<u128>())
}

struct Session {
    csrf: String,
    expires: Instant,
}

/// The logged-in sessions: id → CSRF token, bounded and expiring. Time is a parameter (tests).
pub(crate) struct Sessions {
    map: HashMap<String, Session>,
    max: usize,
    ttl: Duration,
}

impl Sessions {
    pub(crate) fn new(max: usize, ttl: Duration) -> Self {
        Sessions {
            map: HashMap::new(),
            max: max.max(1),
            ttl,
        }
    }

    /// A new session: (id, CSRF token). When full, expired sessions go first, then the oldest.
    pub(crate) fn create(&mut self, now: Instant) -> (String, String) {
        if self.map.len() >= self.max {
            self.map.retain(|_, s| s.expires > now);
        }
        while self.map.len() >= self.max {
            let Some(oldest) = self
                .map
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            self.map.remove(&oldest);
        }
        let (id, csrf) = (random_hex(), random_hex());
        self.map.insert(
            id.clone(),
            Session {
                csrf: csrf.clone(),
                expires: now + self.ttl,
            },
        );
        (id, csrf)
    }

    /// The CSRF token of a live session; an expired one is forgotten.
    pub(crate) fn csrf(&mut self, id: &str, now: Instant) -> Option<String> {
        match self.map.get(id) {
            Some(s) if s.expires > now => Some(s.csrf.clone()),
            Some(_) => {
                self.map.remove(id);
                None
            }
            None => None,
        }
    }

    pub(crate) fn remove(&mut self, id: &str) -> bool {
        self.map.remove(id).is_some()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub(crate) fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// `Set-Cookie` for a new session: not readable by scripts, never sent by another site's request.
pub(crate) fn session_cookie(id: &str) -> String {
    format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        SESSION_TTL.as_secs()
    )
}

/// `Set-Cookie` that removes the session cookie.
pub(crate) fn cleared_cookie() -> String {
    format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
}

/// True when the urlencoded form `body` has a `csrf` field equal to `expected` (constant-time compare).
pub(crate) fn csrf_ok(body: &[u8], expected: &str) -> bool {
    url::form_urlencoded::parse(body)
        .find(|(k, _)| k == "csrf")
        .is_some_and(|(_, v)| !expected.is_empty() && same_secret(&v, expected))
}

/// Who is asking, as far as the pages care.
#[derive(Clone)]
struct Access {
    /// The CSRF token every form of the page carries.
    csrf: String,
    /// Logged in with a session cookie (the page offers "log out").
    session: bool,
}

pub(crate) struct Console {
    api: Api,
    sessions: Mutex<Sessions>,
    /// The CSRF token of requests without a session (no token configured, or a Bearer client).
    process_csrf: String,
    /// The CSRF token of the login form.
    login_csrf: String,
}

impl Console {
    fn token(&self) -> Option<&str> {
        self.api.0.config.token.as_deref()
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        // A panic while holding the lock cannot leave the map inconsistent: keep serving.
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The request's access, or why it has none.
    fn access(&self, req: &Request) -> Result<Access, Denied> {
        let Some(token) = self.token() else {
            return if is_loopback(req) {
                Ok(Access {
                    csrf: self.process_csrf.clone(),
                    session: false,
                })
            } else {
                Err(Denied::NotLoopback)
            };
        };
        if let Some(auth) = req.headers().get(header::AUTHORIZATION) {
            let given = auth
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim);
            return match self
                .api
                .0
                .throttle
                .attempt(peer_ip(req), || given.is_some_and(|g| same_secret(g, token)))
            {
                Attempt::Passed => Ok(Access {
                    csrf: self.process_csrf.clone(),
                    session: false,
                }),
                Attempt::Failed => Err(Denied::WrongBearer),
                Attempt::Throttled(wait) => Err(Denied::Throttled(wait)),
            };
        }
        let csrf =
            cookie_value(req.headers(), COOKIE).and_then(|id| self.sessions().csrf(id, Instant::now()));
        match csrf {
            Some(csrf) => Ok(Access { csrf, session: true }),
            None => Err(Denied::NoSession),
        }
    }
}

/// Why a request is not served.
enum Denied {
    /// No token configured and the client is not on loopback: 403.
    NotLoopback,
    /// `Authorization: Bearer` with the wrong token: 401.
    WrongBearer,
    /// No (live) session: 401 (a GET gets the login form with it).
    NoSession,
    /// Too many wrong tokens from this client: 429 with `Retry-After`, the token not even compared.
    Throttled(Duration),
}

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        match self {
            Denied::NotLoopback => error_page(
                StatusCode::FORBIDDEN,
                "KLAXON_API_TOKEN is not set: the console serves loopback clients only.",
            ),
            Denied::WrongBearer => {
                error_page(StatusCode::UNAUTHORIZED, "Wrong `Authorization: Bearer` token.")
            }
            Denied::NoSession => error_page(
                StatusCode::UNAUTHORIZED,
                "Not logged in (or the session expired): open /login and enter the API token.",
            ),
            Denied::Throttled(wait) => with_retry_after(
                error_page(
                    StatusCode::TOO_MANY_REQUESTS,
                    &format!(
                        "Too many wrong tokens from your address: try again in {} s.",
                        retry_after_secs(wait)
                    ),
                ),
                wait,
            ),
        }
    }
}

fn is_loopback(req: &Request) -> bool {
    peer_ip(req).is_some_and(|ip| ip.is_loopback())
}

/// `response` with `Retry-After: <wait in whole seconds>`.
fn with_retry_after(mut response: Response, wait: Duration) -> Response {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs(wait)));
    response
}

/// The console's routes, with their own auth, CSRF check, HTML errors and security headers.
pub(crate) fn router(api: Api) -> Router {
    let console = Arc::new(Console {
        api,
        sessions: Mutex::new(Sessions::new(MAX_SESSIONS, SESSION_TTL)),
        process_csrf: random_hex(),
        login_csrf: random_hex(),
    });
    let pages = Router::new()
        .route("/", get(projects_page))
        .route("/projects", get(open_project))
        .route("/projects/{project_id}", get(project_page))
        .route("/projects/{project_id}/edit", get(edit_page).post(edit_save))
        .route("/projects/{project_id}/explain", get(explain_page))
        .route(
            "/projects/{project_id}/rules/{rule_id}/enabled",
            post(set_enabled),
        )
        .route("/projects/{project_id}/mutes", post(add_mute))
        .route("/projects/{project_id}/mutes/{mute_id}/delete", post(remove_mute))
        .route("/deliveries", get(deliveries_page))
        .route("/dead", get(dead_page))
        .route("/dead/replay", post(replay_dead))
        .route("/logout", post(logout))
        .route_layer(middleware::from_fn_with_state(console.clone(), authenticate));
    Router::new()
        .route("/login", get(login_page).post(login))
        .merge(pages)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn(with_timeout))
        .layer(middleware::from_fn_with_state(console.clone(), guard_requests))
        .layer(middleware::from_fn(security_headers))
        .with_state(console)
}

/// The Host and cross-site guards (`guard.rs`) for every page and form, `/login` included, before auth.
async fn guard_requests(State(c): State<Arc<Console>>, req: Request, next: Next) -> Response {
    match guard::check(&c.api.0.config.allowed_hosts, &req) {
        Ok(()) => next.run(req).await,
        Err(r) => {
            tracing::debug!(status = r.status.as_u16(), reason = %r.message, "console request refused by a guard");
            error_page(r.status, &r.message)
        }
    }
}

async fn security_headers(req: Request, next: Next) -> Response {
    let mut r = next.run(req).await;
    for (k, v) in SECURITY_HEADERS {
        r.headers_mut().insert(k, HeaderValue::from_static(v));
    }
    r
}

async fn with_timeout(req: Request, next: Next) -> Response {
    match tokio::time::timeout(HANDLER_TIMEOUT, next.run(req)).await {
        Ok(r) => r,
        Err(_) => error_page(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "The page took over {} s: a backing service is slow or unreachable.",
                HANDLER_TIMEOUT.as_secs()
            ),
        ),
    }
}

/// Auth for every page but `/login`, then the CSRF check of every POST (the form is read here, bounded, and
/// handed on to the handler).
async fn authenticate(State(c): State<Arc<Console>>, req: Request, next: Next) -> Response {
    let access = match c.access(&req) {
        Ok(a) => a,
        // INTERFACE: without auth the console answers 401. A browser still gets somewhere useful: the login
        // form itself, served with the 401 (it posts to /login, which sends the new session on to `/`).
        Err(Denied::NoSession) if req.method() == Method::GET => {
            return login_form(&c, StatusCode::UNAUTHORIZED, None);
        }
        Err(denied) => return denied.into_response(),
    };
    let mut req = if req.method() == Method::POST {
        let (parts, body) = req.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
            return error_page(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("The form is over {MAX_BODY} bytes."),
            );
        };
        if !csrf_ok(&bytes, &access.csrf) {
            return error_page(
                StatusCode::FORBIDDEN,
                "The form's CSRF token is missing or wrong (an old page, or a request from another site). Reload the page and try again.",
            );
        }
        Request::from_parts(parts, Body::from(bytes))
    } else {
        req
    };
    req.extensions_mut().insert(access);
    next.run(req).await
}

// ---------------------------------------------------------------------------------------------------------
// Rendering

static TEMPLATES: OnceLock<minijinja::Environment<'static>> = OnceLock::new();

fn templates() -> &'static minijinja::Environment<'static> {
    TEMPLATES.get_or_init(|| {
        let mut env = minijinja::Environment::new();
        // Names end in `.html`, which turns on minijinja's HTML auto-escaping for every `{{ }}`.
        for (name, source) in [
            ("base.html", include_str!("../templates/console/base.html")),
            ("error.html", include_str!("../templates/console/error.html")),
            ("login.html", include_str!("../templates/console/login.html")),
            (
                "projects.html",
                include_str!("../templates/console/projects.html"),
            ),
            ("project.html", include_str!("../templates/console/project.html")),
            ("edit.html", include_str!("../templates/console/edit.html")),
            ("explain.html", include_str!("../templates/console/explain.html")),
            (
                "deliveries.html",
                include_str!("../templates/console/deliveries.html"),
            ),
            ("dead.html", include_str!("../templates/console/dead.html")),
        ] {
            if let Err(e) = env.add_template(name, source) {
                tracing::error!(template = name, error = %e, "console template does not compile");
            }
        }
        env
    })
}

/// Renders `name` with `ctx` (an object) as an HTML answer.
fn render(status: StatusCode, name: &str, ctx: Value) -> Response {
    let out = templates()
        .get_template(name)
        .and_then(|t| t.render(minijinja::Value::from_serialize(&ctx)));
    match out {
        Ok(html) => html_response(status, html),
        Err(e) => {
            tracing::error!(template = name, error = %e, "console template failed");
            html_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "<!doctype html><title>Klaxon</title><p>The page could not be rendered; see the log.</p>"
                    .into(),
            )
        }
    }
}

fn html_response(status: StatusCode, html: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

/// A page's context: `fields` plus what the layout needs.
fn page_ctx(access: &Access, nav: &str, title: &str, fields: Value) -> Value {
    let mut m = match fields {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    m.insert("csrf".into(), json!(access.csrf));
    m.insert("session".into(), json!(access.session));
    m.insert("nav".into(), json!(nav));
    m.insert("title".into(), json!(title));
    Value::Object(m)
}

fn error_page(status: StatusCode, message: &str) -> Response {
    render(
        status,
        "error.html",
        json!({"title": status.canonical_reason().unwrap_or("Error"), "status": status.as_u16(), "message": message}),
    )
}

/// A failed page: rendered with its status and message (503 when a backing service is down).
struct PageError(StatusCode, String);

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        PageError(e.status, e.message)
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        error_page(self.0, &self.1)
    }
}

fn rules_error(e: klaxon_rules::RulesError) -> PageError {
    match e {
        klaxon_rules::RulesError::RuleNotFound(_) => PageError(StatusCode::NOT_FOUND, e.to_string()),
        e => ApiError::rules(e).into(),
    }
}

fn project_path(project_id: &str) -> String {
    format!("/projects/{project_id}")
}

/// Percent-encodes a query value.
fn q(v: &str) -> String {
    url::form_urlencoded::byte_serialize(v.as_bytes()).collect()
}

/// The fixed notices a redirect may ask for (`?done=`): never free text from the URL.
fn notice(done: Option<&str>) -> Option<&'static str> {
    Some(match done? {
        "saved" => "Rules saved; running workers use them within a second.",
        "saved-private" => {
            "Rules saved; running workers use them within a second. Warning: an endpoint points to a loopback or \
             private address, and the senders refuse to deliver to it unless Klaxon runs with \
             --allow-private-endpoints."
        }
        "enabled" => "Rule enabled.",
        "disabled" => "Rule disabled.",
        "muted" => "Mute added.",
        "unmuted" => "Mute removed.",
        _ => return None,
    })
}

fn ms_human(ms: i64) -> String {
    if ms <= 0 {
        return "-".into();
    }
    let t = klaxon_core::notification::rfc3339_ms(ms);
    // 2026-01-02T03:04:05.678Z → 2026-01-02 03:04:05Z: enough for a table.
    match (t.get(..10), t.get(11..19)) {
        (Some(d), Some(h)) => format!("{d} {h}Z"),
        _ => t,
    }
}

// ---------------------------------------------------------------------------------------------------------
// Login

#[derive(Deserialize)]
struct LoginForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    csrf: String,
}

async fn login_page(State(c): State<Arc<Console>>, req: Request) -> Response {
    if c.token().is_none() {
        return match c.access(&req) {
            Ok(_) => Redirect::to("/").into_response(),
            Err(denied) => denied.into_response(),
        };
    }
    if c.access(&req).is_ok() {
        return Redirect::to("/").into_response();
    }
    login_form(&c, StatusCode::OK, None)
}

fn login_form(c: &Console, status: StatusCode, error: Option<&str>) -> Response {
    render(
        status,
        "login.html",
        json!({"title": "Log in", "login_csrf": c.login_csrf, "error": error}),
    )
}

async fn login(
    State(c): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Form(form): Form<LoginForm>,
) -> Response {
    let Some(token) = c.token() else {
        return if peer.ip().is_loopback() {
            Redirect::to("/").into_response()
        } else {
            error_page(
                StatusCode::FORBIDDEN,
                "KLAXON_API_TOKEN is not set: the console serves loopback clients only.",
            )
        };
    };
    if !same_secret(&form.csrf, &c.login_csrf) {
        return error_page(
            StatusCode::FORBIDDEN,
            "The login form's CSRF token is wrong: reload the page.",
        );
    }
    match c
        .api
        .0
        .throttle
        .attempt(Some(peer.ip()), || same_secret(form.token.trim(), token))
    {
        Attempt::Passed => {}
        Attempt::Failed => {
            tokio::time::sleep(LOGIN_FAILURE_DELAY).await;
            tracing::info!(peer = %peer.ip(), "console login refused: wrong token");
            return login_form(&c, StatusCode::UNAUTHORIZED, Some("Wrong token."));
        }
        Attempt::Throttled(wait) => {
            let said = format!(
                "Too many wrong tokens from your address: try again in {} s.",
                retry_after_secs(wait)
            );
            return with_retry_after(login_form(&c, StatusCode::TOO_MANY_REQUESTS, Some(&said)), wait);
        }
    }
    let (id, _) = c.sessions().create(Instant::now());
    tracing::info!(peer = %peer.ip(), "console login");
    let mut r = Redirect::to("/").into_response();
    if let Ok(v) = HeaderValue::from_str(&session_cookie(&id)) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

async fn logout(State(c): State<Arc<Console>>, headers: HeaderMap) -> Response {
    if let Some(id) = cookie_value(&headers, COOKIE) {
        c.sessions().remove(id);
    }
    let mut r = Redirect::to(if c.token().is_some() { "/login" } else { "/" }).into_response();
    if let Ok(v) = HeaderValue::from_str(&cleared_cookie()) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

// ---------------------------------------------------------------------------------------------------------
// Projects

/// `GET /`: projects with rules, the namespace's queue depths, the last hour of the trail.
async fn projects_page(
    State(c): State<Arc<Console>>,
    Extension(access): Extension<Access>,
) -> Result<Response, PageError> {
    let api = &c.api;
    let store = api.store().await?;
    let hour = async {
        tokio::time::timeout(LAST_HOUR_TIMEOUT, last_hour(api))
            .await
            .unwrap_or_else(|_| {
                Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("no answer within {} s", LAST_HOUR_TIMEOUT.as_secs()),
                ))
            })
    };
    // The two MongoDB reads one after the other (a MongoDB-wire server like PoloDB loses cursors under
    // concurrent reads); RabbitMQ meanwhile.
    let mongo = async {
        let projects = match store.projects().await {
            // One retry of this read-only query on a transient error (PoloDB under concurrent load has been
            // seen answering "cursor not found" to it).
            Err(e) if e.is_transient() => {
                tracing::debug!(error = %e, "console: listing projects failed; retrying once");
                tokio::time::sleep(Duration::from_millis(100)).await;
                store.projects().await
            }
            r => r,
        };
        (projects, hour.await)
    };
    let ((projects, hour), queues) = tokio::join!(mongo, queue_depths(api));
    let projects = projects.map_err(rules_error)?;
    let (hour_rows, hour_error) = match hour {
        Ok(h) => (h, None),
        Err(e) => (BTreeMap::new(), Some(e.message)),
    };
    let zero = json!({"firings": 0, "sent": 0, "retrying": 0, "dead": 0, "shadow": 0});
    // The busiest projects of the last hour first, then the newest (an ObjectId starts with its creation
    // time), so that what needs a look is on the page however many projects the store holds.
    let firings = |p: &klaxon_rules::ProjectNotifications| {
        hour_rows
            .get(&p.project_id.to_hex())
            .and_then(|h| h["firings"].as_u64())
            .unwrap_or(0)
    };
    let mut projects = projects;
    projects.sort_by(|a, b| {
        firings(b)
            .cmp(&firings(a))
            .then_with(|| b.project_id.bytes().cmp(&a.project_id.bytes()))
    });
    let rows: Vec<Value> = projects
        .iter()
        .take(MAX_PROJECTS)
        .map(|p| {
            let id = p.project_id.to_hex();
            let enabled = p
                .notifications
                .iter()
                .filter(|d| d.get_bool("isEnabled").unwrap_or(false))
                .count();
            json!({"id": id, "rules": p.notifications.len(), "enabled": enabled,
                   "hour": hour_rows.get(&id).cloned().unwrap_or_else(|| zero.clone())})
        })
        .collect();
    let total = hour_rows.values().fold(
        json!({"firings": 0, "sent": 0, "retrying": 0, "dead": 0, "shadow": 0}),
        |mut acc, v| {
            for k in ["firings", "sent", "retrying", "dead", "shadow"] {
                acc[k] = json!(acc[k].as_u64().unwrap_or(0) + v[k].as_u64().unwrap_or(0));
            }
            acc
        },
    );
    let (queues, queues_error) = match queues {
        Ok(q) => (q, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    Ok(render(
        StatusCode::OK,
        "projects.html",
        page_ctx(
            &access,
            "projects",
            "Projects",
            json!({"projects": rows, "project_count": projects.len(), "max_projects": MAX_PROJECTS, "queues": queues, "queues_error": queues_error,
                   "hour_total": total, "hour_error": hour_error, "namespace": api.0.config.namespace}),
        ),
    ))
}

/// Message counts of the namespace's queues, by passive declare (which never creates a queue); `null` for a
/// queue that does not exist. Err: RabbitMQ is unavailable.
async fn queue_depths(api: &Api) -> Result<Vec<Value>, String> {
    let c = &api.0.config;
    let topology = Topology::new(&c.namespace, &c.events_queue, c.queue_type);
    let read = async {
        let broker = Broker::connect(&c.amqp_url, QUEUES_TIMEOUT)
            .await
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for queue in topology.queues() {
            let (messages, consumers) = match broker.queue_depth(&queue).await {
                Ok(Some(q)) => (Some(q.messages), Some(q.consumers)),
                // missing, or the declare failed: shown as unknown
                Ok(None)
                | Err(BrokerError::Amqp {
                    op: QUEUE_DECLARE_PASSIVE,
                    ..
                }) => (None, None),
                // no channel: RabbitMQ is unavailable
                Err(e) => {
                    broker.close().await;
                    return Err(e.to_string());
                }
            };
            out.push(json!({"name": queue, "messages": messages, "consumers": consumers}));
        }
        broker.close().await;
        Ok(out)
    };
    match tokio::time::timeout(QUEUES_TIMEOUT, read).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} s", QUEUES_TIMEOUT.as_secs())),
    }
}

/// The last hour of the delivery trail per project: distinct notifications fired, and records by status.
async fn last_hour(api: &Api) -> Result<BTreeMap<String, Value>, ApiError> {
    let since = klaxon_rules::trail::now_ms() - 3_600_000;
    let records = api
        .trail()
        .await?
        .since(since, LAST_HOUR_SCAN)
        .await
        .map_err(|e| ApiError::unavailable("MongoDB", e))?;
    Ok(hour_counts(&records, since))
}

/// Per project: distinct notifications fired since `since` (ms), and the records by status.
fn hour_counts(records: &[klaxon_rules::trail::Record], since: i64) -> BTreeMap<String, Value> {
    let mut fired: HashMap<&str, std::collections::HashSet<&str>> = HashMap::new();
    let mut out: BTreeMap<String, Value> = BTreeMap::new();
    for r in records {
        let row = out
            .entry(r.project_id.clone())
            .or_insert_with(|| json!({"firings": 0, "sent": 0, "retrying": 0, "dead": 0, "shadow": 0}));
        let k = r.status.as_str();
        row[k] = json!(row[k].as_u64().unwrap_or(0) + 1);
        if r.fired_at_ms >= since {
            fired
                .entry(r.project_id.as_str())
                .or_default()
                .insert(r.notification_id.as_str());
        }
    }
    for (p, ids) in fired {
        if let Some(row) = out.get_mut(p) {
            row["firings"] = json!(ids.len());
        }
    }
    out
}

#[derive(Deserialize)]
struct OpenQuery {
    #[serde(default)]
    id: String,
}

/// `GET /projects?id=`: the "open a project" form.
async fn open_project(Query(q): Query<OpenQuery>) -> Result<Response, PageError> {
    let id = q.id.trim().to_ascii_lowercase();
    check_project_id(&id)?;
    Ok(Redirect::to(&project_path(&id)).into_response())
}

/// One rule as the project page shows it (endpoints redacted), read through the core's [`RawRule`] so that
/// a broken rule is shown too.
fn rule_view(rule: &Value, limits: &klaxon_core::Limits) -> Value {
    // Ids as hex, like everywhere in the console; a value that is not a rule shows as an empty one.
    let raw = RawRule::from_value(&oids_to_hex(rule.clone())).unwrap_or_default();
    let text = |f: &Field<String>| f.typed().cloned();
    let list = |f: &Field<Vec<String>>| -> Vec<String> {
        match f {
            Field::Typed(items) => items.clone(),
            Field::Other(Value::Array(items)) => items
                .iter()
                .map(|i| match i {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect(),
            _ => Vec::new(),
        }
    };
    let mut channels = Vec::new();
    for (name, ch) in raw
        .channels
        .typed()
        .map(|chs| chs.0.as_slice())
        .unwrap_or_default()
    {
        let ch = ch.typed();
        let endpoint = ch
            .and_then(|c| c.endpoint.typed())
            .map(String::as_str)
            .unwrap_or("");
        let shown = match ChannelKind::parse(name) {
            Some(kind) if !endpoint.trim().is_empty() => klaxon_channels::redact_endpoint(kind, endpoint),
            Some(_) => "(no endpoint)".into(),
            None => "(not delivered by Klaxon)".into(),
        };
        channels
            .push(json!({"name": name, "enabled": ch.is_some_and(RawChannel::is_on), "destination": shown}));
    }
    let period = raw
        .threshold_period
        .typed()
        .map(|ms| humantime::format_duration(Duration::from_millis(*ms)).to_string());
    let problems: Vec<Value> = klaxon_rules::format::rule_problems(rule, limits)
        .into_iter()
        .map(|p| json!({"fatal": p.fatal, "message": p.message, "fix": p.fix}))
        .collect();
    // After `oids_to_hex`, an id still in `{"$oid": …}` form carries other keys: not shown as an id.
    let id = match &raw.id {
        Field::Typed(RuleId::Hex(id)) => id.clone(),
        _ => "?".into(),
    };
    json!({
        "id": id,
        "enabled": raw.is_enabled.typed() == Some(&true),
        "what": text(&raw.what_to_receive).unwrap_or_else(|| "?".into()),
        "threshold": raw.threshold.to_json(),
        "period": period,
        "window": text(&raw.window).unwrap_or_else(|| "fixed".into()),
        "unique_users": raw.unique_users.typed() == Some(&true),
        "including": list(&raw.including),
        "excluding": list(&raw.excluding),
        "including_patterns": list(&raw.including_patterns),
        "excluding_patterns": list(&raw.excluding_patterns),
        "channels": channels,
        "problems": problems,
    })
}

/// Adds the webhook channel's Standard Webhooks signing secret to a rule's view (`signing_secret`, or
/// `unsigned` without a master key): the project page shows it, behind the console's auth, so the tenant can
/// configure its receiver. Derived for this project only (see `webhook_secret`).
fn add_signing_secret(
    view: &mut Value,
    rule: &Value,
    project_id: &str,
    keys: Option<&klaxon_channels::webhook::SigningKeys>,
) {
    let Some(endpoint) = rule
        .pointer("/channels/webhook/endpoint")
        .and_then(Value::as_str)
        .filter(|e| !e.trim().is_empty())
    else {
        return;
    };
    let Some(ch) = view["channels"]
        .as_array_mut()
        .and_then(|chs| chs.iter_mut().find(|c| c["name"] == "webhook"))
    else {
        return;
    };
    match keys {
        Some(k) => ch["signing_secret"] = json!(k.endpoint_secret(project_id, endpoint).expose_whsec()),
        None => ch["unsigned"] = json!(true),
    }
}

#[derive(Deserialize)]
struct DoneQuery {
    done: Option<String>,
}

/// `GET /projects/{id}`: rules, enable/disable, mutes.
async fn project_page(
    State(c): State<Arc<Console>>,
    Extension(access): Extension<Access>,
    Path(project_id): Path<String>,
    Query(dq): Query<DoneQuery>,
) -> Result<Response, PageError> {
    check_project_id(&project_id)?;
    let project_id = project_id.to_ascii_lowercase();
    let api = &c.api;
    let project = api
        .store()
        .await?
        .project(&project_id)
        .await
        .map_err(rules_error)?;
    let limits = &api.0.config.limits;
    let (exists, rules) = match &project {
        // The rules the engine evaluates: a project over the limit (written elsewhere) shows its first ones
        // and says so below; the editor shows every stored rule, to remove some.
        Some(p) => (
            true,
            p.notifications
                .iter()
                .take(limits.max_rules)
                .map(|r| {
                    let mut view = rule_view(r, limits);
                    add_signing_secret(&mut view, r, &project_id, api.0.config.webhook_keys.as_ref());
                    view
                })
                .collect::<Vec<_>>(),
        ),
        None => (false, Vec::new()),
    };
    // Over a limit: what the engine skips, said above the lists.
    let mut over_limit: Vec<String> = project
        .as_ref()
        .and_then(|p| limits.rule_count_problem(p.notifications.len()))
        .map(|p| {
            format!(
                "{}; the list below shows those {}, Edit rules shows them all (fix: {})",
                p.message, limits.max_rules, p.fix
            )
        })
        .into_iter()
        .collect();
    let (mutes, mutes_error) = match active_mutes(api, &project_id).await {
        Ok((m, unread)) => {
            if unread > 0 {
                over_limit.push(format!(
                    "{unread} more mutes are stored than the limit of {} per project: they are not shown and \
                     not applied (delete mutes, or let them expire)",
                    limits.max_mutes
                ));
            }
            (m, None)
        }
        Err(e) => (Vec::new(), Some(e.message)),
    };
    Ok(render(
        if exists {
            StatusCode::OK
        } else {
            StatusCode::NOT_FOUND
        },
        "project.html",
        page_ctx(
            &access,
            "projects",
            &format!("Project {project_id}"),
            json!({"project_id": project_id, "exists": exists, "rules": rules, "mutes": mutes,
                   "mutes_error": mutes_error, "notice": notice(dq.done.as_deref()), "over_limit": over_limit}),
        ),
    ))
}

/// The project's active mutes as the page shows them, and how many more are stored past the limit.
async fn active_mutes(api: &Api, project_id: &str) -> Result<(Vec<Value>, u64), ApiError> {
    let (_, list) = api.active_mutes(project_id).await?;
    let shown = list
        .mutes
        .iter()
        .map(|m| {
            let mut v = mutes::to_json(m);
            v["untilShown"] = json!(ms_human(m.until_ms));
            v
        })
        .collect();
    Ok((shown, list.unread))
}

#[derive(Deserialize)]
struct EnabledForm {
    #[serde(default)]
    enabled: String,
}

/// `POST /projects/{id}/rules/{ruleId}/enabled` `enabled=true|false`.
async fn set_enabled(
    State(c): State<Arc<Console>>,
    Path((project_id, rule_id)): Path<(String, String)>,
    Form(form): Form<EnabledForm>,
) -> Result<Response, PageError> {
    check_project_id(&project_id)?;
    let enabled = match form.enabled.as_str() {
        "true" => true,
        "false" => false,
        _ => {
            return Err(PageError(
                StatusCode::BAD_REQUEST,
                "`enabled` must be true or false".into(),
            ))
        }
    };
    let api = &c.api;
    api.store()
        .await?
        .set_enabled(Some(&project_id), &rule_id, enabled)
        .await
        .map_err(rules_error)?;
    api.publish_invalidation(&project_id).await;
    let done = if enabled { "enabled" } else { "disabled" };
    Ok(Redirect::to(&format!("{}?done={done}", project_path(&project_id))).into_response())
}

#[derive(Deserialize)]
struct MuteForm {
    #[serde(default)]
    rule_id: String,
    #[serde(default)]
    group_hash: String,
    #[serde(default)]
    duration: String,
    #[serde(default)]
    until: String,
}

/// The API's mute request from the form: `duration` like `2h` (or `until`, RFC 3339).
fn mute_request(form: &MuteForm) -> Result<Value, String> {
    let mut req = Map::new();
    if !form.rule_id.trim().is_empty() {
        req.insert("ruleId".into(), json!(form.rule_id.trim()));
    }
    if !form.group_hash.trim().is_empty() {
        req.insert("groupHash".into(), json!(form.group_hash.trim()));
    }
    match (form.duration.trim(), form.until.trim()) {
        ("", "") => return Err("give a duration (like 2h or 30m) or an until time".into()),
        (d, "") => {
            let secs = humantime::parse_duration(d)
                .map_err(|e| format!("the duration `{d}` is not one like 2h or 30m ({e})"))?
                .as_secs();
            req.insert("for".into(), json!(secs));
        }
        ("", u) => {
            req.insert("until".into(), json!(u));
        }
        _ => return Err("give a duration or an until time, not both".into()),
    }
    Ok(Value::Object(req))
}

/// `POST /projects/{id}/mutes`.
async fn add_mute(
    State(c): State<Arc<Console>>,
    Path(project_id): Path<String>,
    Form(form): Form<MuteForm>,
) -> Result<Response, PageError> {
    let api = &c.api;
    api.known_project(&project_id).await?;
    let req = mute_request(&form).map_err(|e| PageError(StatusCode::BAD_REQUEST, e))?;
    let (counter, now) = api.redis_now().await?;
    let mute = mutes::mute_from_request(&req, now, format!("{:016x}", rand::random::<u64>()))
        .map_err(|e| PageError(StatusCode::BAD_REQUEST, e))?;
    // Over the project's limit of mutes: a 409 page that says so.
    api.store_mute(&counter, &project_id, &mute, now).await?;
    Ok(Redirect::to(&format!("{}?done=muted", project_path(&project_id))).into_response())
}

/// `POST /projects/{id}/mutes/{muteId}/delete`.
async fn remove_mute(
    State(c): State<Arc<Console>>,
    Path((project_id, mute_id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    check_project_id(&project_id)?;
    let api = &c.api;
    let (counter, _) = api.redis_now().await?;
    let removed = api
        .mutes(&counter)
        .remove(&project_id, &mute_id)
        .await
        .map_err(|e| ApiError::unavailable("Redis", e))?;
    if !removed {
        return Err(PageError(
            StatusCode::NOT_FOUND,
            "No such mute (it may have expired).".into(),
        ));
    }
    Ok(Redirect::to(&format!("{}?done=unmuted", project_path(&project_id))).into_response())
}

// ---------------------------------------------------------------------------------------------------------
// Edit

/// What the edit page shows instead of a stored endpoint (which can hold a bot token or a webhook secret);
/// saving it unchanged keeps the stored endpoint.
const KEEP: &str = "(unchanged)";

fn endpoint_placeholder(channel: &str, endpoint: &str) -> String {
    match ChannelKind::parse(channel) {
        Some(kind) => format!("{KEEP} {}", klaxon_channels::redact_endpoint(kind, endpoint)),
        None => KEEP.to_owned(),
    }
}

/// The project's rules in the import/export format, pretty-printed for the textarea, endpoints replaced by
/// [`KEEP`] placeholders.
fn export_text(project_id: &str, notifications: &[Value]) -> String {
    let rules: Vec<Value> = notifications
        .iter()
        .cloned()
        .map(oids_to_hex)
        .map(|mut rule| {
            if let Some(Value::Object(chs)) = rule.get_mut("channels") {
                for (name, ch) in chs.iter_mut() {
                    if let Some(ep) = ch.get_mut("endpoint") {
                        if let Some(text) = ep.as_str().filter(|t| !t.trim().is_empty()) {
                            *ep = json!(endpoint_placeholder(name, text));
                        }
                    }
                }
            }
            rule
        })
        .collect();
    let v = json!({"_id": project_id, "notifications": rules});
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

/// Puts the stored endpoint back where the submitted rules still hold a [`KEEP`] placeholder (matched by rule
/// id and channel). A placeholder with no stored endpoint to stand for is an error.
fn restore_endpoints(body: &mut Value, stored: &[Value]) -> Result<(), String> {
    let stored: Vec<Value> = stored.iter().cloned().map(oids_to_hex).collect();
    let Some(Value::Array(rules)) = body.get_mut("notifications") else {
        return Ok(());
    };
    for rule in rules {
        let id = rule
            .get("_id")
            .cloned()
            .map(oids_to_hex)
            .and_then(|v| v.as_str().map(str::to_ascii_lowercase));
        let Some(Value::Object(chs)) = rule.get_mut("channels") else {
            continue;
        };
        for (name, ch) in chs.iter_mut() {
            let Some(ep) = ch.get_mut("endpoint") else {
                continue;
            };
            if !ep.as_str().is_some_and(|t| t.trim_start().starts_with(KEEP)) {
                continue;
            }
            let original = stored
                .iter()
                .find(|r| {
                    r.get("_id")
                        .and_then(Value::as_str)
                        .is_some_and(|s| Some(s.to_ascii_lowercase()) == id)
                })
                .and_then(|r| r.pointer(&format!("/channels/{name}/endpoint")))
                .and_then(Value::as_str);
            match original {
                Some(o) => *ep = json!(o),
                None => {
                    return Err(format!(
                        "rule {}, channel `{name}`: the endpoint is the {KEEP} placeholder but no stored rule with this id has one; write the endpoint",
                        id.as_deref().unwrap_or("<no id>")
                    ))
                }
            }
        }
    }
    Ok(())
}

/// `GET /projects/{id}/edit`.
async fn edit_page(
    State(c): State<Arc<Console>>,
    Extension(access): Extension<Access>,
    Path(project_id): Path<String>,
) -> Result<Response, PageError> {
    check_project_id(&project_id)?;
    let project_id = project_id.to_ascii_lowercase();
    let project = c
        .api
        .store()
        .await?
        .project(&project_id)
        .await
        .map_err(rules_error)?;
    let text = export_text(
        &project_id,
        project
            .as_ref()
            .map(|p| p.notifications.as_slice())
            .unwrap_or(&[]),
    );
    Ok(edit_form(
        &access,
        &project_id,
        &text,
        false,
        None,
        &[],
        StatusCode::OK,
    ))
}

fn edit_form(
    access: &Access,
    project_id: &str,
    text: &str,
    force: bool,
    error: Option<&str>,
    problems: &[Value],
    status: StatusCode,
) -> Response {
    render(
        status,
        "edit.html",
        page_ctx(
            access,
            "projects",
            &format!("Edit rules of {project_id}"),
            json!({"project_id": project_id, "text": text, "force": force, "error": error, "problems": problems}),
        ),
    )
}

#[derive(Deserialize)]
struct EditForm {
    #[serde(default)]
    rules: String,
    force: Option<String>,
}

/// `POST /projects/{id}/edit`: validated and stored like `PUT /api/v1/projects/{id}/rules`; on an error the
/// page comes back with the problems and the user's text.
async fn edit_save(
    State(c): State<Arc<Console>>,
    Extension(access): Extension<Access>,
    Path(project_id): Path<String>,
    Form(form): Form<EditForm>,
) -> Result<Response, PageError> {
    check_project_id(&project_id)?;
    let project_id = project_id.to_ascii_lowercase();
    let force = form.force.is_some();
    let back = |status: StatusCode, error: &str, problems: &[Value]| {
        edit_form(
            &access,
            &project_id,
            &form.rules,
            force,
            Some(error),
            problems,
            status,
        )
    };
    let mut body: Value = match serde_json::from_str(&form.rules) {
        Ok(v) => v,
        Err(e) => {
            return Ok(back(
                StatusCode::BAD_REQUEST,
                &format!("The text is not JSON: {e}"),
                &[],
            ))
        }
    };
    let stored = c
        .api
        .store()
        .await?
        .project(&project_id)
        .await
        .map_err(rules_error)?
        .map(|p| p.notifications)
        .unwrap_or_default();
    if let Err(e) = restore_endpoints(&mut body, &stored) {
        return Ok(back(StatusCode::BAD_REQUEST, &e, &[]));
    }
    match crate::replace_rules(&c.api, &project_id, body, force).await {
        Ok(stored) => {
            let done = if stored.private_endpoints {
                "saved-private"
            } else {
                "saved"
            };
            Ok(Redirect::to(&format!("{}?done={done}", project_path(&project_id))).into_response())
        }
        Err(e) => {
            let problems = match &e.extra {
                Some(("problems", Value::Array(list))) => list.clone(),
                _ => Vec::new(),
            };
            Ok(back(e.status, &e.message, &problems))
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Explain

#[derive(Deserialize)]
struct ExplainQuery {
    #[serde(default)]
    title: String,
    #[serde(default, rename = "groupHash")]
    group_hash: String,
    #[serde(default, rename = "isNew")]
    is_new: Option<String>,
    #[serde(default)]
    user: String,
}

/// `GET /projects/{id}/explain?title=&groupHash=&isNew=&user=`: what each rule would do (reads only).
async fn explain_page(
    State(c): State<Arc<Console>>,
    Extension(access): Extension<Access>,
    Path(project_id): Path<String>,
    Query(ask): Query<ExplainQuery>,
) -> Result<Response, PageError> {
    check_project_id(&project_id)?;
    let project_id = project_id.to_ascii_lowercase();
    let asked = !ask.title.is_empty() || !ask.group_hash.is_empty();
    let mut error = None;
    let mut verdicts = Vec::new();
    if asked {
        let mut event =
            json!({"title": ask.title, "groupHash": ask.group_hash, "isNew": ask.is_new.is_some()});
        if !ask.user.trim().is_empty() {
            event["user"] = json!(ask.user.trim());
        }
        // Validated exactly like an event on the queue (and like the API's explain).
        let task = json!({"projectId": project_id, "event": event}).to_string();
        match EventTask::parse(task.as_bytes()) {
            Err(e) => error = Some(e.to_string()),
            Ok(task) => {
                verdicts = c
                    .api
                    .explain_event(&project_id, &task.event)
                    .await?
                    .iter()
                    .map(|v| {
                        let mut j = v.to_json();
                        j["windowEndsAtShown"] = json!(v.window_ends_at.map(ms_human));
                        j
                    })
                    .collect();
            }
        }
    }
    Ok(render(
        if error.is_some() {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::OK
        },
        "explain.html",
        page_ctx(
            &access,
            "projects",
            &format!("Explain · {project_id}"),
            json!({"project_id": project_id, "asked": asked && error.is_none(), "error": error, "verdicts": verdicts,
                   "title_in": ask.title, "group_in": ask.group_hash, "is_new": ask.is_new.is_some(), "user_in": ask.user}),
        ),
    ))
}

// ---------------------------------------------------------------------------------------------------------
// Deliveries and dead letters

#[derive(Deserialize)]
struct DeliveriesQuery {
    #[serde(default)]
    project: String,
    #[serde(default)]
    before: String,
    #[serde(default)]
    limit: String,
}

/// `at_ms:notificationId`.
fn parse_cursor(s: &str) -> Option<klaxon_rules::trail::Cursor> {
    let (at, id) = s.split_once(':')?;
    Some(klaxon_rules::trail::Cursor {
        at_ms: at.parse().ok()?,
        notification_id: id.to_owned(),
    })
}

/// `GET /deliveries?project=&before=&limit=`: the trail, newest first, one row per notification.
async fn deliveries_page(
    State(c): State<Arc<Console>>,
    Extension(access): Extension<Access>,
    Query(dq): Query<DeliveriesQuery>,
) -> Result<Response, PageError> {
    let project = dq.project.trim().to_ascii_lowercase();
    if !project.is_empty() {
        check_project_id(&project)?;
    }
    let limit = if dq.limit.is_empty() {
        PAGE
    } else {
        dq.limit
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| {
                PageError(
                    StatusCode::BAD_REQUEST,
                    format!("`limit` must be a whole number from 1 to {MAX_PAGE}"),
                )
            })?
    };
    let before = if dq.before.is_empty() {
        None
    } else {
        Some(
            parse_cursor(&dq.before)
                .ok_or_else(|| PageError(StatusCode::BAD_REQUEST, "`before` is not a page cursor".into()))?,
        )
    };
    let started = Instant::now();
    let (records, more) = c
        .api
        .trail()
        .await?
        .page(
            (!project.is_empty()).then_some(project.as_str()),
            before.as_ref(),
            limit,
            crate::deliveries::SCAN,
        )
        .await
        .map_err(|e| ApiError::unavailable("MongoDB", e))?;
    let next = if more {
        records.last().map(|r| {
            let cursor = format!("{}:{}", r.at_ms, r.notification_id);
            format!(
                "/deliveries?project={}&limit={limit}&before={}",
                q(&project),
                q(&cursor)
            )
        })
    } else {
        None
    };
    let rows: Vec<Value> = records
        .iter()
        .map(|r| {
            let mut v = crate::deliveries::record_json(r);
            v["atShown"] = json!(ms_human(r.at_ms));
            v["firedAtShown"] = json!(ms_human(r.fired_at_ms));
            v
        })
        .collect();
    Ok(render(
        StatusCode::OK,
        "deliveries.html",
        page_ctx(
            &access,
            "deliveries",
            "Deliveries",
            json!({"rows": rows, "project": project, "limit": limit, "next": next, "paged": before.is_some(),
                   "read_ms": started.elapsed().as_millis() as u64}),
        ),
    ))
}

#[derive(Deserialize)]
struct DeadQuery {
    replayed: Option<u64>,
}

/// `GET /dead`: the dead-letter queue (the messages stay in it).
async fn dead_page(
    State(c): State<Arc<Console>>,
    Extension(access): Extension<Access>,
    Query(dq): Query<DeadQuery>,
) -> Result<Response, PageError> {
    let items = crate::dead_pass(&c.api, dead::Pass::List(DEAD_LIST)).await?;
    let rows: Vec<Value> = items.iter().map(dead::DeadItem::to_json).collect();
    Ok(render(
        StatusCode::OK,
        "dead.html",
        page_ctx(
            &access,
            "dead",
            "Dead letters",
            json!({"rows": rows, "max": DEAD_LIST, "replayed": dq.replayed}),
        ),
    ))
}

#[derive(Deserialize)]
struct ReplayForm {
    notification_id: Option<String>,
}

/// `POST /dead/replay` (`notification_id`, or none: every one).
async fn replay_dead(
    State(c): State<Arc<Console>>,
    Form(form): Form<ReplayForm>,
) -> Result<Response, PageError> {
    let ids: Option<Vec<String>> = form
        .notification_id
        .filter(|s| !s.trim().is_empty())
        .map(|s| vec![s.trim().to_owned()]);
    let items = crate::dead_pass(&c.api, dead::Pass::Replay(ids.as_deref())).await?;
    Ok(Redirect::to(&format!("/dead?replayed={}", items.len())).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_are_bounded_and_removed() {
        let t0 = Instant::now();
        let mut s = Sessions::new(3, Duration::from_secs(60));
        let (a, csrf_a) = s.create(t0);
        assert_eq!(a.len(), 32, "128 bits of hex");
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, csrf_a);
        assert_eq!(s.csrf(&a, t0 + Duration::from_secs(59)), Some(csrf_a.clone()));
        assert_eq!(s.csrf(&a, t0 + Duration::from_secs(60)), None, "expired");
        assert_eq!(s.len(), 0, "an expired session is forgotten when seen");
        assert_eq!(s.csrf("nope", t0), None);

        // Bounded: the fourth session evicts the oldest.
        let ids: Vec<String> = (0..4).map(|i| s.create(t0 + Duration::from_secs(i)).0).collect();
        assert_eq!(s.len(), 3);
        let now = t0 + Duration::from_secs(5);
        assert_eq!(s.csrf(&ids[0], now), None, "the oldest went");
        assert!(ids[1..].iter().all(|id| s.csrf(id, now).is_some()));
        // Expired ones go before live ones.
        let mut s = Sessions::new(2, Duration::from_secs(10));
        let old = s.create(t0).0;
        let live = s.create(t0 + Duration::from_secs(8)).0;
        s.create(t0 + Duration::from_secs(11));
        let now = t0 + Duration::from_secs(12);
        assert!(s.csrf(&old, now).is_none() && s.csrf(&live, now).is_some());
        assert!(s.remove(&live));
        assert!(!s.remove(&live));
        assert!(s.csrf(&live, now).is_none());
    }

    #[test]
    fn cookies_are_found_and_set_with_the_safe_flags() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; klaxon_session_x=no"),
        );
        h.append(
            header::COOKIE,
            HeaderValue::from_static("b=2;klaxon_session=abc123 ; c=3"),
        );
        assert_eq!(cookie_value(&h, COOKIE), Some("abc123"));
        assert_eq!(cookie_value(&h, "a"), Some("1"));
        assert_eq!(cookie_value(&h, "zzz"), None);
        assert_eq!(cookie_value(&HeaderMap::new(), COOKIE), None);
        let c = session_cookie("abc");
        for flag in [
            "klaxon_session=abc;",
            "HttpOnly",
            "SameSite=Strict",
            "Path=/",
            "Max-Age=43200",
        ] {
            assert!(c.contains(flag), "{flag} in {c}");
        }
        assert!(cleared_cookie().contains("Max-Age=0"));
    }

    #[test]
    fn csrf_must_match_exactly() {
        let t = "0123456789abcdef0123456789abcdef";
        assert!(csrf_ok(format!("a=1&csrf={t}").as_bytes(), t));
        assert!(csrf_ok(format!("csrf={t}&rules=%7B%7D").as_bytes(), t));
        assert!(!csrf_ok(b"a=1", t), "missing");
        assert!(!csrf_ok(b"csrf=", t), "empty");
        assert!(!csrf_ok(format!("csrf={t}0").as_bytes(), t), "longer");
        assert!(!csrf_ok(b"csrf=0123456789abcdef0123456789abcdee", t));
        assert!(!csrf_ok(b"csrf=", ""), "an empty expected token never matches");
    }

    /// The project page shows broken rules as they are stored, with their problems.
    #[test]
    fn rule_views_show_what_is_stored() {
        let id = "5e3eef0679fa3700a0198a49";
        let broken = json!({"_id": {"$oid": id}, "isEnabled": "yes", "whatToReceive": 5, "threshold": "3",
            "thresholdPeriod": 90_000, "window": null, "uniqueUsers": true, "including": ["a", 1],
            "channels": {"slack": {"isEnabled": true, "endpoint": " "}, "webPush": {"isEnabled": true},
                         "email": "x", "webhook": {"isEnabled": false, "endpoint": "https://h.test/x"}}});
        let v = rule_view(&broken, &klaxon_core::Limits::default());
        let want = json!({"id": id, "enabled": false, "what": "?", "threshold": "3", "period": "1m 30s",
            "window": "fixed", "unique_users": true, "including": ["a", "1"], "excluding": [],
            "including_patterns": [], "excluding_patterns": []});
        for (k, w) in want.as_object().into_iter().flatten() {
            assert_eq!(&v[k], w, "{k}");
        }
        let channels: Vec<(&str, bool, &str)> = v["channels"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or_default(),
                    c["enabled"] == true,
                    c["destination"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            channels[..3],
            [
                ("slack", true, "(no endpoint)"),
                ("webPush", true, "(not delivered by Klaxon)"),
                ("email", false, "(no endpoint)")
            ]
        );
        assert_eq!((channels[3].0, channels[3].1), ("webhook", false));
        assert_eq!(v["problems"][0]["message"], "`isEnabled` must be a boolean");
        let v = rule_view(&json!(3), &klaxon_core::Limits::default());
        assert_eq!(
            (&v["id"], &v["what"], &v["window"]),
            (&json!("?"), &json!("?"), &json!("fixed"))
        );
        assert_eq!(v["problems"][0]["message"], "rule is not an object");
        let v = rule_view(
            &json!({"_id": {"$oid": id, "x": 1}}),
            &klaxon_core::Limits::default(),
        );
        assert_eq!(v["id"], "?", "not an ObjectId");
    }

    #[tokio::test]
    async fn pages_escape_what_they_show() {
        let access = Access {
            csrf: "tok".into(),
            session: true,
        };
        let rule = json!({"_id": "5e3eef0679fa3700a0198a49", "isEnabled": true, "whatToReceive": "SEEN_MORE",
            "threshold": 3, "thresholdPeriod": 3_600_000, "including": ["<script>alert(1)</script>"], "excluding": [],
            "channels": {"telegram": {"isEnabled": true, "endpoint": "https://api.telegram.org/bot123:SECRET/sendMessage?chat_id=1"}}});
        let r = render(
            StatusCode::OK,
            "project.html",
            page_ctx(
                &access,
                "projects",
                "P",
                json!({"project_id": "5e3eef0679fa3700a0198a48", "exists": true, "rules": [rule_view(&rule, &klaxon_core::Limits::default())],
                       "mutes": [], "mutes_error": null, "notice": null}),
            ),
        );
        assert_eq!(r.status(), StatusCode::OK);
        let html = axum::body::to_bytes(r.into_body(), usize::MAX)
            .await
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"),
            "{html}"
        );
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains("SECRET"), "the endpoint is redacted: {html}");
        assert!(
            html.contains("name=\"csrf\" value=\"tok\""),
            "forms carry the token"
        );
    }

    #[tokio::test]
    async fn the_project_page_shows_each_webhook_channels_own_signing_secret() {
        use klaxon_channels::webhook::SigningKeys;
        let access = Access {
            csrf: "tok".into(),
            session: true,
        };
        let (p, endpoint) = (
            "5e3eef0679fa3700a0198a48",
            "https://hooks.example/k?token=SECRETPATH",
        );
        let rule = json!({"_id": "5e3eef0679fa3700a0198a49", "isEnabled": true, "whatToReceive": "ONLY_NEW",
            "channels": {"webhook": {"isEnabled": true, "endpoint": endpoint},
                         "slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/services/x"}}});
        let keys = SigningKeys::from_settings(Some(klaxon_channels::Secret::new("MASTERKEY")), None)
            .expect("valid")
            .expect("some");
        let page = |keys: Option<&SigningKeys>| {
            let mut view = rule_view(&rule, &klaxon_core::Limits::default());
            add_signing_secret(&mut view, &rule, p, keys);
            let r = render(
                StatusCode::OK,
                "project.html",
                page_ctx(
                    &access,
                    "projects",
                    "P",
                    json!({"project_id": p, "exists": true, "rules": [view], "mutes": [], "mutes_error": null,
                           "notice": null}),
                ),
            );
            async move {
                axum::body::to_bytes(r.into_body(), usize::MAX)
                    .await
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default()
            }
        };
        let html = page(Some(&keys)).await;
        let secret = keys.endpoint_secret(p, endpoint).expose_whsec();
        // base64 may hold `/` and `+`: the page escapes them like any text, so compare with the escaped form.
        let shown = secret.replace('/', "&#x2f;");
        assert!(html.contains(&shown), "the project's own secret is shown: {html}");
        assert_eq!(
            html.matches("signing secret").count(),
            1,
            "for the webhook channel only"
        );
        let other = keys
            .endpoint_secret("65a000000000000000000001", endpoint)
            .expose_whsec();
        assert!(!html.contains(&other.replace('/', "&#x2f;")));
        for hidden in ["MASTERKEY", "SECRETPATH"] {
            assert!(!html.contains(hidden), "{hidden} in {html}");
        }
        let html = page(None).await;
        assert!(html.contains("unsigned") && !html.contains("whsec_"), "{html}");
    }

    #[test]
    fn the_edit_page_hides_endpoints_and_saving_keeps_them() {
        let p = "5e3eef0679fa3700a0198a48";
        let stored = vec![
            json!({"_id": {"$oid": "5e3eef0679fa3700a0198a49"}, "threshold": 3, "channels": {
            "telegram": {"isEnabled": true, "endpoint": "https://api.telegram.org/bot123:SECRET/sendMessage?chat_id=1"},
            "webPush": {"isEnabled": false, "endpoint": "push-secret"}}}),
        ];
        let text = export_text(p, &stored);
        assert!(
            !text.contains("SECRET") && !text.contains("push-secret"),
            "{text}"
        );
        assert!(text.contains("(unchanged) https://api.telegram.org/"), "{text}");
        // Saved as shown (with an edit elsewhere): the stored endpoints come back.
        let mut body: Value = serde_json::from_str(&text).expect("json");
        body["notifications"][0]["threshold"] = json!(9);
        restore_endpoints(&mut body, &stored).expect("restored");
        assert_eq!(
            body["notifications"][0]["channels"]["telegram"]["endpoint"],
            "https://api.telegram.org/bot123:SECRET/sendMessage?chat_id=1"
        );
        assert_eq!(
            body["notifications"][0]["channels"]["webPush"]["endpoint"],
            "push-secret"
        );
        assert_eq!(body["notifications"][0]["threshold"], 9);
        // A new endpoint is taken as typed; a placeholder under an unknown rule id is an error.
        let mut body: Value = serde_json::from_str(&text).expect("json");
        body["notifications"][0]["channels"]["telegram"]["endpoint"] = json!("https://new.example/x");
        restore_endpoints(&mut body, &stored).expect("restored");
        assert_eq!(
            body["notifications"][0]["channels"]["telegram"]["endpoint"],
            "https://new.example/x"
        );
        let mut body: Value = serde_json::from_str(&text).expect("json");
        body["notifications"][0]["_id"] = json!("5e3eef0679fa3700a0198a4a");
        assert!(restore_endpoints(&mut body, &stored).is_err());
    }

    #[test]
    fn the_last_hour_counts_firings_once_and_records_by_status() {
        use klaxon_rules::trail::{Record, Status};
        let rec = |p: &str, n: &str, status: Status, fired: i64| Record {
            notification_id: n.into(),
            project_id: p.into(),
            rule_id: "r".into(),
            channel: "webhook".into(),
            destination: "-".into(),
            attempts: 1,
            status,
            last_error: None,
            fired_at_ms: fired,
            at_ms: 2_000,
        };
        let records = [
            rec("a", "n1", Status::Retrying, 1_500),
            rec("a", "n1", Status::Sent, 1_500),
            rec("a", "n2", Status::Dead, 1_600),
            rec("a", "n3", Status::Sent, 500), // fired before the hour, delivered in it
            rec("b", "n4", Status::Sent, 1_900),
        ];
        let c = hour_counts(&records, 1_000);
        assert_eq!(
            c["a"],
            json!({"firings": 2, "sent": 2, "retrying": 1, "dead": 1, "shadow": 0})
        );
        assert_eq!(
            c["b"],
            json!({"firings": 1, "sent": 1, "retrying": 0, "dead": 0, "shadow": 0})
        );
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn mute_forms_become_api_requests() {
        let form = |d: &str, u: &str| MuteForm {
            rule_id: " ".into(),
            group_hash: "g1".into(),
            duration: d.into(),
            until: u.into(),
        };
        assert_eq!(
            mute_request(&form("2h", "")),
            Ok(json!({"groupHash": "g1", "for": 7200}))
        );
        assert_eq!(
            mute_request(&form("", "2030-01-01T00:00:00Z")),
            Ok(json!({"groupHash": "g1", "until": "2030-01-01T00:00:00Z"}))
        );
        assert!(mute_request(&form("", "")).is_err());
        assert!(mute_request(&form("2h", "2030-01-01T00:00:00Z")).is_err());
        assert!(mute_request(&form("soon", "")).is_err());
        assert_eq!(notice(Some("<b>")), None, "only fixed notices");
        assert_eq!(
            parse_cursor("17:n-1:x").map(|c| (c.at_ms, c.notification_id)),
            Some((17, "n-1:x".into()))
        );
        assert!(parse_cursor("x:y").is_none());
    }
}
