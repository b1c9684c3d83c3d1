//! Rendering: the compiled-in templates (`templates/console`, minijinja with HTML auto-escaping), the layout's
//! context, error pages, and the small formatting every page shares.

use std::sync::OnceLock;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::auth::Access;
use crate::ApiError;

static TEMPLATES: OnceLock<minijinja::Environment<'static>> = OnceLock::new();

fn templates() -> &'static minijinja::Environment<'static> {
    TEMPLATES.get_or_init(|| {
        let mut env = minijinja::Environment::new();
        // Names end in `.html`, which turns on minijinja's HTML auto-escaping for every `{{ }}`.
        for (name, source) in [
            ("base.html", include_str!("../../templates/console/base.html")),
            ("error.html", include_str!("../../templates/console/error.html")),
            ("login.html", include_str!("../../templates/console/login.html")),
            (
                "projects.html",
                include_str!("../../templates/console/projects.html"),
            ),
            (
                "project.html",
                include_str!("../../templates/console/project.html"),
            ),
            ("edit.html", include_str!("../../templates/console/edit.html")),
            (
                "explain.html",
                include_str!("../../templates/console/explain.html"),
            ),
            (
                "deliveries.html",
                include_str!("../../templates/console/deliveries.html"),
            ),
            ("dead.html", include_str!("../../templates/console/dead.html")),
            (
                "invalid.html",
                include_str!("../../templates/console/invalid.html"),
            ),
            ("action.html", include_str!("../../templates/console/action.html")),
            ("alerts.html", include_str!("../../templates/console/alerts.html")),
            (
                "overview.html",
                include_str!("../../templates/console/overview.html"),
            ),
        ] {
            if let Err(e) = env.add_template(name, source) {
                tracing::error!(template = name, error = %e, "console template does not compile");
            }
        }
        env
    })
}

/// A page's context, tied to the template that shows it.
pub(super) trait Template: Serialize {
    /// The template's name (`templates/console/<NAME>`).
    const NAME: &'static str;
}

/// Renders `ctx` with its template as an HTML answer.
pub(super) fn render<T: Template>(status: StatusCode, ctx: &T) -> Response {
    let out = templates()
        .get_template(T::NAME)
        .and_then(|t| t.render(minijinja::Value::from_serialize(ctx)));
    match out {
        Ok(html) => html_response(status, html),
        Err(e) => {
            tracing::error!(template = T::NAME, error = %e, "console template failed");
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

/// The navigation entry a page lights up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Nav {
    /// Projects, and every page of one project.
    Projects,
    /// Everything open across projects.
    Alerts,
    /// The delivery trail.
    Deliveries,
    /// The dead letters.
    Dead,
    /// The invalid events.
    Invalid,
    /// A page of no section (an action link's): nothing lit.
    None,
}

/// A page inside the layout (`base.html`): what the layout needs, and the page's own fields beside it.
#[derive(Debug, Serialize)]
pub(super) struct Page<'a, T> {
    /// The CSRF token every form of the page carries.
    csrf: &'a str,
    /// Logged in with a session cookie: the layout offers "log out".
    session: bool,
    nav: Nav,
    title: &'a str,
    #[serde(flatten)]
    body: T,
}

impl<T: Template> Template for Page<'_, T> {
    const NAME: &'static str = T::NAME;
}

impl Access {
    /// `body` as a page of the layout, for this visitor.
    pub(super) fn page<'a, T: Template>(&'a self, nav: Nav, title: &'a str, body: T) -> Page<'a, T> {
        Page {
            csrf: &self.csrf,
            session: self.session,
            nav,
            title,
            body,
        }
    }
}

/// `error.html`: a status and what went wrong (outside the layout's forms: no CSRF token, no navigation).
#[derive(Debug, Serialize)]
struct ErrorPage<'a> {
    title: &'a str,
    status: u16,
    message: &'a str,
}

impl Template for ErrorPage<'_> {
    const NAME: &'static str = "error.html";
}

/// An error page with `status`.
pub(super) fn error_page(status: StatusCode, message: &str) -> Response {
    let page = ErrorPage {
        title: status.canonical_reason().unwrap_or("Error"),
        status: status.as_u16(),
        message,
    };
    render(status, &page)
}

/// A failed page: rendered with its status and message (503 when a backing service is down).
pub(super) struct PageError(pub(super) StatusCode, pub(super) String);

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

pub(super) fn rules_error(e: klaxon_store::RulesError) -> PageError {
    match e {
        klaxon_store::RulesError::RuleNotFound(_) => PageError(StatusCode::NOT_FOUND, e.to_string()),
        e => ApiError::rules(e).into(),
    }
}

pub(super) fn project_path(project_id: &str) -> String {
    format!("/projects/{project_id}")
}

/// Percent-encodes a query value.
pub(super) fn q(v: &str) -> String {
    url::form_urlencoded::byte_serialize(v.as_bytes()).collect()
}

/// The fixed notices a redirect may ask for (`?done=`): never free text from the URL.
pub(super) fn notice(done: Option<&str>) -> Option<&'static str> {
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

pub(super) fn ms_human(ms: i64) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_are_fixed_texts() {
        assert_eq!(notice(Some("<b>")), None, "only fixed notices");
        assert!(notice(Some("saved")).is_some());
        assert_eq!(notice(None), None);
    }
}
