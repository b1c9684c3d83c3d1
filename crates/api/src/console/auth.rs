//! Who may see the console: the session cookie (after `POST /login` with the API token), or
//! `Authorization: Bearer`, or (no token configured) loopback clients; wrong tokens are throttled per client.
//! Every POST's form must carry the CSRF token of its session (or of the process, without a session).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::{Deserialize, Serialize};

use super::view::{error_page, render, Template};
use super::Console;
use crate::throttle::{retry_after_secs, Attempt};
use crate::{bearer, client_ip, same_secret, MAX_BODY};

/// The session cookie's name.
pub(crate) const COOKIE: &str = "klaxon_session";
/// Most sessions kept at once; creating one more evicts the oldest.
pub(crate) const MAX_SESSIONS: usize = 1000;
/// How long a session lasts after login.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// A wrong login token answers only after this (slows guessing; the token is compared in constant time).
const LOGIN_FAILURE_DELAY: Duration = Duration::from_millis(300);

/// 128 random bits as 32 hex digits (session ids, CSRF tokens).
pub(super) fn random_hex() -> String {
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
pub(super) struct Access {
    /// The CSRF token every form of the page carries.
    pub(super) csrf: String,
    /// Logged in with a session cookie (the page offers "log out").
    pub(super) session: bool,
}

impl Console {
    fn token(&self) -> Option<&str> {
        self.api
            .config()
            .token
            .as_ref()
            .map(klaxon_channels::Secret::expose)
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        // A panic while holding the lock cannot leave the map inconsistent: keep serving.
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The request's access, or why it has none.
    fn access(&self, req: &Request) -> Result<Access, Denied> {
        let Some(token) = self.token() else {
            return if is_loopback(&self.api, req) {
                Ok(Access {
                    csrf: self.process_csrf.clone(),
                    session: false,
                })
            } else {
                Err(Denied::NotLoopback)
            };
        };
        if let Some(auth) = req.headers().get(header::AUTHORIZATION) {
            return match bearer(&self.api, req, auth, token) {
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

fn is_loopback(api: &crate::state::Api, req: &Request) -> bool {
    client_ip(api, req).is_some_and(|ip| ip.is_loopback())
}

/// `response` with `Retry-After: <wait in whole seconds>`.
fn with_retry_after(mut response: Response, wait: Duration) -> Response {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs(wait)));
    response
}

/// Auth for every page but `/login`, then the CSRF check of every POST (the form is read here, bounded, and
/// handed on to the handler).
pub(super) async fn authenticate(State(c): State<Arc<Console>>, req: Request, next: Next) -> Response {
    let access = match c.access(&req) {
        Ok(a) => a,
        // The contract: without auth the console answers 401. A browser still gets somewhere useful: the login
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

#[derive(Deserialize)]
pub(super) struct LoginForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    csrf: String,
}

pub(super) async fn login_page(State(c): State<Arc<Console>>, req: Request) -> Response {
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

/// `login.html`: the token form (outside the layout's session: its own CSRF token).
#[derive(Serialize)]
struct LoginPage<'a> {
    title: &'a str,
    login_csrf: &'a str,
    error: Option<&'a str>,
}

impl Template for LoginPage<'_> {
    const NAME: &'static str = "login.html";
}

fn login_form(c: &Console, status: StatusCode, error: Option<&str>) -> Response {
    let page = LoginPage {
        title: "Log in",
        login_csrf: &c.login_csrf,
        error,
    };
    render(status, &page)
}

pub(super) async fn login(
    State(c): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    // The client: the peer, or behind a trusted proxy the address it forwarded.
    let client = c.api.config().trusted_proxies.client(peer.ip(), &headers);
    let Some(token) = c.token() else {
        return if client.is_loopback() {
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
        .throttle()
        .attempt(Some(client), || same_secret(form.token.trim(), token))
    {
        Attempt::Passed => {}
        Attempt::Failed => {
            tokio::time::sleep(LOGIN_FAILURE_DELAY).await;
            tracing::info!(client = %client, "console login refused: wrong token");
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
    tracing::info!(client = %client, "console login");
    let mut r = Redirect::to("/").into_response();
    if let Ok(v) = HeaderValue::from_str(&session_cookie(&id)) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

pub(super) async fn logout(State(c): State<Arc<Console>>, headers: HeaderMap) -> Response {
    if let Some(id) = cookie_value(&headers, COOKIE) {
        c.sessions().remove(id);
    }
    let mut r = Redirect::to(if c.token().is_some() { "/login" } else { "/" }).into_response();
    if let Ok(v) = HeaderValue::from_str(&cleared_cookie()) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
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
}
