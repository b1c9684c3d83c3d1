//! Inbound integrations (the contract's "Close the loop"): PagerDuty, Slack and Telegram calling Klaxon back, so
//! that an alert acknowledged or resolved where people are is acknowledged or resolved in Klaxon — through the
//! same hand path as `POST …/alerts/{id}/ack` ([`crate::Api::change_alert_outcome`]): the other channels get
//! the notice once, and reminders and escalation steps stop.
//!
//! ```text
//!  POST /api/v1/integrations/pagerduty  X-PagerDuty-Signature: v1=<hex HMAC-SHA256(secret, body)>[,v1=…]
//!  POST /api/v1/integrations/slack      X-Slack-Signature: v0=<hex HMAC-SHA256(secret, "v0:{ts}:{body}")>
//!  POST /api/v1/integrations/telegram   X-Telegram-Bot-Api-Secret-Token: <secret>
//!        │
//!        ▼ off (its secret unset) ─▶ 404 disabled
//!        ▼ no signature ─▶ 401 unsigned;  wrong (under the client's wrong-token budget) ─▶ 401 bad_signature (429)
//!        ▼ timestamp older (or later) than the window ─▶ 401 stale
//!        ▼ the request's id seen before (Redis SET NX, bounded time) ─▶ 401 replayed
//!        ▼ the alert: unknown ─▶ 404 unknown_alert (PagerDuty: 200, an incident Klaxon did not trigger);
//!          the click's chat or channel not in the alert's audience ─▶ 403 foreign_project
//!        ▼ acknowledge / resolve by the person (PagerDuty: by "pagerduty") ─▶ 200 accepted
//! ```
//!
//! These routes are not under the API's bearer token (the services cannot send it) nor its JSON-only rule
//! (Slack posts a form): each request is authenticated by its own signature instead. They keep the Host guard,
//! a body cap of [`MAX_INBOUND_BODY`] and the handler timeout, and a client's wrong signatures use its
//! wrong-token budget (`throttle`), like wrong tokens. Every request is counted in
//! `klaxon_inbound_requests_total{integration, outcome}` and logged once ([`InboundRequest`]); no secret or
//! signature is ever logged.

mod pagerduty;
mod slack;
pub mod status;
mod telegram;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use hmac::{Hmac, Mac};
use klaxon_channels::Secret;
use klaxon_core::alert::Alert;
use klaxon_counter::Inbound;
use serde_json::{json, Value};
use sha2::Sha256;

use crate::rest::alerts::{HandAction, HandOutcome};
use crate::{throttle, Api, ApiError};

/// Largest inbound request body, in bytes (PagerDuty's and Slack's payloads are a few KiB).
pub const MAX_INBOUND_BODY: usize = 256 * 1024;

/// The inbound integrations' secrets, each `None` (the integration is off: 404) unless set.
#[derive(Clone, Default)]
pub struct InboundSecrets {
    /// `KLAXON_PAGERDUTY_WEBHOOK_SECRET`: the signing secret of the PagerDuty v3 webhook subscription.
    pub pagerduty: Option<Secret>,
    /// `KLAXON_SLACK_SIGNING_SECRET`: the Slack app's signing secret.
    pub slack: Option<Secret>,
    /// `KLAXON_TELEGRAM_WEBHOOK_SECRET`: the `secret_token` given to Telegram's `setWebhook`.
    pub telegram: Option<Secret>,
}

impl std::fmt::Debug for InboundSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = |s: &Option<Secret>| if s.is_some() { "<set>" } else { "<unset>" };
        f.debug_struct("InboundSecrets")
            .field("pagerduty", &set(&self.pagerduty))
            .field("slack", &set(&self.slack))
            .field("telegram", &set(&self.telegram))
            .finish()
    }
}

/// An inbound integration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Integration {
    PagerDuty,
    Slack,
    Telegram,
}

impl Integration {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Integration::PagerDuty => "pagerduty",
            Integration::Slack => "slack",
            Integration::Telegram => "telegram",
        }
    }

    /// The environment variable that turns it on.
    fn secret_name(self) -> &'static str {
        match self {
            Integration::PagerDuty => "KLAXON_PAGERDUTY_WEBHOOK_SECRET",
            Integration::Slack => "KLAXON_SLACK_SIGNING_SECRET",
            Integration::Telegram => "KLAXON_TELEGRAM_WEBHOOK_SECRET",
        }
    }

    fn secret(self, api: &Api) -> Option<&str> {
        let s = &api.config().inbound;
        match self {
            Integration::PagerDuty => s.pagerduty.as_ref(),
            Integration::Slack => s.slack.as_ref(),
            Integration::Telegram => s.telegram.as_ref(),
        }
        .map(|s| s.expose())
        .filter(|s| !s.is_empty())
    }
}

/// What became of an inbound request: the `outcome` label of `klaxon_inbound_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Verified and acted on (or already so: a second click on an acknowledged alert).
    Accepted,
    /// Verified, and nothing for Klaxon in it (another event type, a link button, a message to the bot).
    Ignored,
    /// The integration's secret is not set (404).
    Disabled,
    /// No signature (401).
    Unsigned,
    /// A wrong signature (401).
    BadSignature,
    /// Signed too long ago, or in the future (401).
    Stale,
    /// Its id was seen before (401).
    Replayed,
    /// Too many wrong signatures from the client (429).
    Throttled,
    /// Verified but malformed (400).
    Invalid,
    /// No such alert or incident (404; PagerDuty: 200).
    UnknownAlert,
    /// The click's chat or channel does not hear of the alert (403).
    ForeignProject,
    /// Redis or RabbitMQ is down (503; the request's id is given back, so the service's retry is served).
    Unavailable,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::Ignored => "ignored",
            Outcome::Disabled => "disabled",
            Outcome::Unsigned => "unsigned",
            Outcome::BadSignature => "bad_signature",
            Outcome::Stale => "stale",
            Outcome::Replayed => "replayed",
            Outcome::Throttled => "throttled",
            Outcome::Invalid => "invalid",
            Outcome::UnknownAlert => "unknown_alert",
            Outcome::ForeignProject => "foreign_project",
            Outcome::Unavailable => "unavailable",
        }
    }

    /// The status of a refusal with this outcome.
    fn status(self) -> StatusCode {
        match self {
            Outcome::Accepted | Outcome::Ignored => StatusCode::OK,
            Outcome::Disabled | Outcome::UnknownAlert => StatusCode::NOT_FOUND,
            Outcome::Unsigned | Outcome::BadSignature | Outcome::Stale | Outcome::Replayed => {
                StatusCode::UNAUTHORIZED
            }
            Outcome::Throttled => StatusCode::TOO_MANY_REQUESTS,
            Outcome::Invalid => StatusCode::BAD_REQUEST,
            Outcome::ForeignProject => StatusCode::FORBIDDEN,
            Outcome::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// One inbound request's end (vector's internal events): the log line and the metric together. `detail` is our
/// words (never a secret, a signature or a body).
pub(crate) struct InboundRequest<'a> {
    pub integration: Integration,
    pub outcome: Outcome,
    pub detail: &'a str,
}

impl InboundRequest<'_> {
    pub(crate) fn emit(self) {
        metrics::counter!(
            "klaxon_inbound_requests_total",
            "integration" => self.integration.as_str(),
            "outcome" => self.outcome.as_str()
        )
        .increment(1);
        let (integration, outcome) = (self.integration.as_str(), self.outcome.as_str());
        match self.outcome {
            Outcome::Accepted | Outcome::Ignored | Outcome::Disabled => {
                tracing::info!(integration, outcome, detail = self.detail, "inbound request")
            }
            Outcome::Unavailable => {
                tracing::warn!(
                    integration,
                    outcome,
                    detail = self.detail,
                    "inbound request failed on our side"
                )
            }
            _ => tracing::warn!(
                integration,
                outcome,
                detail = self.detail,
                "inbound request refused"
            ),
        }
    }
}

/// The end of a request: counted and logged, then answered — `body` with 200 for accepted and ignored ones,
/// `{"error": detail}` with the outcome's status for the others.
pub(crate) fn finish(
    integration: Integration,
    outcome: Outcome,
    detail: &str,
    body: Option<Value>,
) -> Response {
    InboundRequest {
        integration,
        outcome,
        detail,
    }
    .emit();
    match outcome {
        Outcome::Accepted | Outcome::Ignored => {
            let body =
                body.unwrap_or_else(|| json!({"ok": true, "outcome": outcome.as_str(), "detail": detail}));
            crate::error::json_response(StatusCode::OK, &body)
        }
        Outcome::Throttled => {
            let mut r = ApiError::new(outcome.status(), detail).into_response();
            r.headers_mut().insert(
                header::RETRY_AFTER,
                header::HeaderValue::from(throttle::retry_after_secs(throttle::INTERVAL)),
            );
            r
        }
        _ => ApiError::new(outcome.status(), detail).into_response(),
    }
}

/// Like [`finish`], answered 200 whatever the outcome: what a service must not retry (PagerDuty disables a
/// subscription whose deliveries keep failing, and it sends every incident of its services, not only Klaxon's).
pub(crate) fn finish_ok(integration: Integration, outcome: Outcome, detail: &str) -> Response {
    InboundRequest {
        integration,
        outcome,
        detail,
    }
    .emit();
    crate::error::json_response(
        StatusCode::OK,
        &json!({"ok": outcome == Outcome::Accepted, "outcome": outcome.as_str(), "detail": detail}),
    )
}

/// The request's client, headers and body (at most [`MAX_INBOUND_BODY`] bytes; more: 413).
pub(crate) async fn read(
    api: &Api,
    req: Request,
) -> Result<(Option<std::net::IpAddr>, HeaderMap, axum::body::Bytes), Response> {
    let client = crate::client_ip(api, &req);
    let (parts, body) = req.into_parts();
    match axum::body::to_bytes(body, MAX_INBOUND_BODY).await {
        Ok(b) => Ok((client, parts.headers, b)),
        Err(_) => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is over {MAX_INBOUND_BODY} bytes"),
        )
        .into_response()),
    }
}

/// A header's value as text, if present and visible ASCII.
pub(crate) fn header_str<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

/// Whether `signature_hex` is the hex HMAC-SHA256 of the concatenated `parts` under `secret`, compared in
/// constant time (`Mac::verify_slice`); false for anything that is not hex of the right length.
pub(crate) fn hmac_matches(secret: &str, parts: &[&[u8]], signature_hex: &str) -> bool {
    let Ok(given) = hex::decode(signature_hex.trim()) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return false;
    };
    for p in parts {
        mac.update(p);
    }
    mac.verify_slice(&given).is_ok()
}

/// The hex HMAC-SHA256 of the concatenated `parts` (the tests' reference signer, and the docs' examples).
pub fn hmac_hex(secret: &str, parts: &[&[u8]]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    for p in parts {
        mac.update(p);
    }
    hex::encode(mac.finalize().into_bytes())
}

/// Now, unix seconds (this process's clock).
pub(crate) fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// Whether `at` (unix seconds) is within `window` of `now`, either way (a clock ahead of ours is as suspect).
pub(crate) fn fresh(at: i64, now: i64, window: Duration) -> bool {
    (now - at).unsigned_abs() <= window.as_secs()
}

/// The verification of a request's signature under the client's wrong-token budget.
pub(crate) enum Verified {
    Yes,
    /// The outcome and what to say.
    No(Outcome, &'static str),
}

/// Checks a signature (`matches`) under the client's wrong-token budget: a client over it is answered 429
/// without the check, a wrong one uses a unit of it.
pub(crate) fn verify(
    api: &Api,
    req_client: Option<std::net::IpAddr>,
    matches: impl FnOnce() -> bool,
) -> Verified {
    match api.throttle().attempt(req_client, matches) {
        throttle::Attempt::Passed => Verified::Yes,
        throttle::Attempt::Failed => Verified::No(Outcome::BadSignature, "the signature does not match"),
        throttle::Attempt::Throttled(_) => Verified::No(
            Outcome::Throttled,
            "too many wrong signatures from this address: try again later",
        ),
    }
}

/// A request whose signature was verified, on its way to an alert: the replay claim it holds.
pub(crate) struct Claim {
    inbound: Inbound,
    integration: Integration,
    id: String,
}

impl Claim {
    /// Gives the claim back (a failure on our side: the service's retry of the same request must be served).
    pub(crate) async fn give_back(self) {
        if let Err(e) = self.inbound.forget(self.integration.as_str(), &self.id).await {
            tracing::warn!(integration = self.integration.as_str(), error = %e, "cannot give back an inbound request's replay claim");
        }
    }
}

/// Claims request `id` of `integration` for `ttl`: `Ok(Claim)` the first time, `Err(response)` for a replay (401)
/// or when Redis is down (503).
pub(crate) async fn claim(
    api: &Api,
    integration: Integration,
    id: &str,
    ttl: Duration,
) -> Result<Claim, Response> {
    let unavailable = |e: &dyn std::fmt::Display| {
        let detail = format!("Redis is unavailable: {e}");
        finish(integration, Outcome::Unavailable, &detail, None)
    };
    let redis = match api.redis().await {
        Ok(r) => r,
        Err(e) => return Err(unavailable(&e.message)),
    };
    let inbound = Inbound::new(redis, &api.config().namespace);
    match inbound.first_time(integration.as_str(), id, ttl).await {
        Ok(true) => Ok(Claim {
            inbound,
            integration,
            id: id.to_owned(),
        }),
        Ok(false) => Err(finish(
            integration,
            Outcome::Replayed,
            "this request was received before (replay)",
            None,
        )),
        Err(e) => Err(unavailable(&e)),
    }
}

/// What an acknowledge or resolve from an integration came to, for its answer.
pub(crate) enum Acted {
    /// Changed now, or it already was (the alert after it, and whether it changed now).
    Done(Box<Alert>, bool),
    /// No such alert.
    Unknown,
    /// Redis or RabbitMQ is down.
    Unavailable(String),
}

/// Acknowledges or resolves alert `alert_id` of `project_id` by `by` through the hand path; a conflict (already
/// acknowledged, already resolved) is done already, not an error.
pub(crate) async fn act(api: &Api, project_id: &str, alert_id: &str, action: HandAction, by: &str) -> Acted {
    match api.change_alert_outcome(project_id, alert_id, action, by).await {
        Ok(HandOutcome::Done(a)) => Acted::Done(Box::new(a), true),
        Ok(HandOutcome::Conflict { alert, .. }) => Acted::Done(Box::new(alert), false),
        Ok(HandOutcome::NotFound) => Acted::Unknown,
        Err(e) => Acted::Unavailable(e.message),
    }
}

/// Reads alert `alert_id` of `project_id`: `Ok(None)` when there is none (or an id is malformed).
pub(crate) async fn read_alert(api: &Api, project_id: &str, alert_id: &str) -> Result<Option<Alert>, String> {
    if !klaxon_core::alert::is_alert_id(alert_id) || !klaxon_core::event::is_object_id(project_id) {
        return Ok(None);
    }
    let alerts = api.alerts().await.map_err(|e| e.message)?;
    alerts.get(project_id, alert_id).await.map_err(|e| e.to_string())
}

/// The alert a button names, for a request holding `claimed`: the answer instead when there is no such alert
/// (404), or when Redis cannot tell (503, the claim given back so the service's retry is served).
pub(crate) async fn clicked_alert(
    api: &Api,
    integration: Integration,
    claimed: Claim,
    project_id: &str,
    alert_id: &str,
) -> Result<(Alert, Claim), Response> {
    match read_alert(api, project_id, alert_id).await {
        Ok(Some(a)) => Ok((a, claimed)),
        Ok(None) => Err(finish(integration, Outcome::UnknownAlert, "no such alert", None)),
        Err(why) => {
            claimed.give_back().await;
            Err(finish(integration, Outcome::Unavailable, &why, None))
        }
    }
}

/// Whether a (non-shared) member of the alert's audience on `channel` has an endpoint `is_here` accepts: the
/// chat or channel a click came from is one the alert was sent to.
pub(crate) fn hears(
    alert: &Alert,
    channel: klaxon_core::ChannelKind,
    is_here: impl Fn(&str) -> bool,
) -> bool {
    alert
        .audience()
        .into_iter()
        .any(|m| m.channel == channel && !m.shared && is_here(m.endpoint.trim()))
}

/// `by` for a person an integration names (their name there, on one line, bounded), or `fallback` when it names
/// nobody usable.
pub(crate) fn person(name: Option<&str>, fallback: &str) -> String {
    let name = name
        .map(|n| klaxon_core::text::one_line(n, crate::rest::alerts::MAX_BY_CHARS))
        .unwrap_or_default();
    crate::rest::alerts::check_by(&name).unwrap_or_else(|_| fallback.to_owned())
}

/// The router of `/api/v1/integrations/*`: the Host guard, the body cap and the timeout, no bearer token.
pub(crate) fn router(api: Api) -> Router {
    Router::new()
        .route("/api/v1/integrations/pagerduty", post(pagerduty::receive))
        .route("/api/v1/integrations/slack", post(slack::receive))
        .route("/api/v1/integrations/telegram", post(telegram::receive))
        .layer(DefaultBodyLimit::max(MAX_INBOUND_BODY))
        .layer(middleware::from_fn(crate::with_timeout))
        .layer(middleware::from_fn_with_state(api.clone(), guard_hosts))
        .with_state(api)
}

/// The Host guard (and the cross-site one, which a service's request never trips) of the API.
async fn guard_hosts(State(api): State<Api>, req: Request, next: Next) -> Response {
    match crate::guard::check(&api.config().allowed_hosts, &req) {
        Ok(()) => next.run(req).await,
        Err(r) => ApiError::new(r.status, r.message).into_response(),
    }
}

/// The secret of `integration`, when it is on.
pub(crate) fn secret_of(api: &Api, integration: Integration) -> Option<String> {
    integration.secret(api).map(str::to_owned)
}

/// A request to `integration` once it is on and its body is read (at most [`MAX_INBOUND_BODY`]): its secret, the
/// client, the headers and the body; or the answer to give instead (the integration is off, the body too large).
pub(crate) async fn accept(
    api: &Api,
    integration: Integration,
    req: Request,
) -> Result<(String, Option<std::net::IpAddr>, HeaderMap, axum::body::Bytes), Response> {
    let Some(secret) = secret_of(api, integration) else {
        return Err(off(integration));
    };
    let (client, headers, body) = read(api, req).await?;
    Ok((secret, client, headers, body))
}

/// The 404 that says `integration` is off.
pub(crate) fn off(integration: Integration) -> Response {
    let detail = format!(
        "the {} integration is off: set {} to turn it on (docs/integrations.md)",
        integration.as_str(),
        integration.secret_name()
    );
    finish(integration, Outcome::Disabled, &detail, None)
}

#[cfg(test)]
mod tests;
