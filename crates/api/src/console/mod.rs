//! The web console at `GET /`: server-rendered HTML pages over the API's own state and functions (no JavaScript
//! needed).
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
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | the routes and the layers around them (security headers, guard, timeout) |
//! | `auth.rs` | sessions, cookies, CSRF, `/login`, `/logout`, the auth layer |
//! | `action.rs` | `/a/{token}`: the signed action links of messages (no login; the token is the authority) |
//! | `view.rs` | the templates, the layout every page shares, error pages |
//! | `projects.rs` | `/` (projects, queues, the last hour), `/projects?id=`, `/projects/{id}`, enable/disable |
//! | `mutes.rs` | the project page's mute forms (the API's own mute functions) |
//! | `alerts.rs` | `/projects/{id}/alerts`: open and recently resolved alerts, Acknowledge and Resolve |
//! | `edit.rs` | `/projects/{id}/edit`: the rules as JSON, endpoints hidden, saved like `PUT …/rules` |
//! | `explain.rs` | `/projects/{id}/explain` |
//! | `deliveries.rs` | `/deliveries`: the trail, paged |
//! | `dead.rs` | `/dead`, `/dead/replay` |
//! | `invalid.rs` | `/invalid`, `/invalid/replay` |

mod action;
mod alerts;
mod auth;
mod dead;
mod deliveries;
mod edit;
mod explain;
mod invalid;
mod mutes;
mod overview;
mod projects;
mod view;

use std::sync::{Arc, Mutex};

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use klaxon_store::StoredProject;

use self::auth::{Sessions, MAX_SESSIONS, SESSION_TTL};
use self::view::{error_page, rules_error, PageError};
use crate::rest::check_project_id;
use crate::{guard, Api, HANDLER_TIMEOUT, MAX_BODY};

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

/// The console's state: the API's, and the sessions of this process.
pub(crate) struct Console {
    api: Api,
    sessions: Mutex<Sessions>,
    /// The CSRF token of requests without a session (no token configured, or a Bearer client).
    process_csrf: String,
    /// The CSRF token of the login form.
    login_csrf: String,
}

impl Console {
    /// The stored rules of a project (`None`: the store has no such project).
    async fn stored(&self, project_id: &str) -> Result<Option<StoredProject>, PageError> {
        self.api
            .store()
            .await?
            .project(project_id)
            .await
            .map_err(rules_error)
    }
}

/// A project id from a page's path: a 24-hex ObjectId (else 400), lowercased as every page shows it.
fn path_project(from_path: &str) -> Result<String, PageError> {
    check_project_id(from_path)?;
    Ok(from_path.to_ascii_lowercase())
}

/// The console's routes, with their own auth, CSRF check, HTML errors and security headers.
pub(crate) fn router(api: Api) -> Router {
    let console = Arc::new(Console {
        api,
        sessions: Mutex::new(Sessions::new(MAX_SESSIONS, SESSION_TTL)),
        process_csrf: auth::random_hex(),
        login_csrf: auth::random_hex(),
    });
    let pages = Router::new()
        .route("/", get(projects::list))
        .route("/projects", get(projects::open))
        .route("/projects/{project_id}", get(projects::show))
        .route("/projects/{project_id}/edit", get(edit::show).post(edit::save))
        .route("/projects/{project_id}/explain", get(explain::page))
        .route(
            "/projects/{project_id}/rules/{rule_id}/enabled",
            post(projects::set_enabled),
        )
        .route("/alerts", get(overview::page))
        .route("/projects/{project_id}/alerts", get(alerts::page))
        .route("/projects/{project_id}/alerts/{alert_id}/ack", post(alerts::ack))
        .route(
            "/projects/{project_id}/alerts/{alert_id}/resolve",
            post(alerts::resolve),
        )
        .route("/projects/{project_id}/mutes", post(mutes::add))
        .route(
            "/projects/{project_id}/mutes/{mute_id}/delete",
            post(mutes::remove),
        )
        .route("/deliveries", get(deliveries::page))
        .route("/dead", get(dead::page))
        .route("/dead/replay", post(dead::replay))
        .route("/invalid", get(invalid::page))
        .route("/invalid/replay", post(invalid::replay))
        .route("/logout", post(auth::logout))
        .route_layer(middleware::from_fn_with_state(
            console.clone(),
            auth::authenticate,
        ));
    Router::new()
        .route("/login", get(auth::login_page).post(auth::login))
        // Signed action links: the token is the authority (no session), the guards still apply.
        .route("/a/{token}", get(action::show).post(action::confirm))
        .merge(pages)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn(with_timeout))
        .layer(middleware::from_fn_with_state(console.clone(), guard_requests))
        .layer(middleware::from_fn(security_headers))
        .with_state(console)
}

/// The Host and cross-site guards (`guard.rs`) for every page and form, `/login` included, before auth.
async fn guard_requests(State(c): State<Arc<Console>>, req: Request, next: Next) -> Response {
    match guard::check(&c.api.config().allowed_hosts, &req) {
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
