//! `GET /api/v1/projects/{projectId}/webhook-secret?endpoint=<URL>` (and `GET /api/v1/webhook-secret?endpoint=`
//! for notifications without a project): the Standard Webhooks secret a tenant's receiver verifies with.
//!
//! The secret is derived from the master key, the project and the endpoint
//! ([`klaxon_channels::webhook::SigningKeys`]): any (project, endpoint) may be asked for, and the answer only
//! ever verifies deliveries of that project to that endpoint, so handing a tenant the secrets of its own
//! project gives it nothing over any other tenant. The same JSON is printed by `klaxon webhook secret -o json`.

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use klaxon_channels::webhook::{endpoint_key, project_key, SigningKeys};
use serde_json::{json, Value};

use super::check_project_id;
use super::notifications::MAX_ENDPOINT_BYTES;
use crate::error::json_response;
use crate::{Api, ApiError};

/// Why there is no secret to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretError {
    /// The endpoint is missing or not an http(s) URL with a host (a 400).
    BadEndpoint(String),
    /// No master key is configured: deliveries are unsigned (a 404).
    NotConfigured,
}

impl std::fmt::Display for SecretError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretError::BadEndpoint(why) => f.write_str(why),
            SecretError::NotConfigured => f.write_str(
                "webhook signing is off: KLAXON_WEBHOOK_SECRET is not set on this process, so webhooks are sent \
                 unsigned (set the same master key on every klaxon process)",
            ),
        }
    }
}

/// Checks `endpoint` like a webhook channel's: an http(s) URL with a host, at most
/// [`MAX_ENDPOINT_BYTES`] bytes, no control characters.
pub fn check_endpoint(endpoint: &str) -> Result<(), SecretError> {
    let bad = |why: &str| Err(SecretError::BadEndpoint(why.to_owned()));
    let e = endpoint.trim();
    if e.is_empty() {
        return bad("`endpoint` is required: the webhook channel's URL, e.g. ?endpoint=https%3A%2F%2Fhooks.example.com%2Fklaxon");
    }
    if e.len() > MAX_ENDPOINT_BYTES {
        return bad("`endpoint` is over 2048 bytes");
    }
    if e.chars().any(char::is_control) {
        return bad("`endpoint` contains control characters");
    }
    match url::Url::parse(e) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some_and(|h| !h.is_empty()) => {
            Ok(())
        }
        _ => bad("`endpoint` must be the webhook channel's http(s) URL"),
    }
}

/// The answer: `{"projectId", "endpoint", "secret", "previousSecret"?}` — `projectId` is `null` for the
/// secret of notifications without a project, `endpoint` the URL as normalized for the derivation, and
/// `previousSecret` (during a rotation only) the secret under the previous master key, which deliveries are
/// still signed with too.
pub fn secret_json(
    keys: Option<&SigningKeys>,
    project_id: Option<&str>,
    endpoint: &str,
) -> Result<Value, SecretError> {
    check_endpoint(endpoint)?;
    let keys = keys.ok_or(SecretError::NotConfigured)?;
    let project = project_id.map(project_key).unwrap_or_default();
    let mut out = json!({
        "projectId": (!project.is_empty()).then_some(project.as_str()),
        "endpoint": endpoint_key(endpoint),
        "secret": keys.endpoint_secret(&project, endpoint).expose_whsec(),
    });
    if let Some(previous) = keys.previous_endpoint_secret(&project, endpoint) {
        out["previousSecret"] = json!(previous.expose_whsec());
    }
    Ok(out)
}

/// `endpoint` from a query string, percent-decoded (`+` is a space, as in forms).
pub fn endpoint_param(query: Option<&str>) -> String {
    url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == "endpoint")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

impl From<SecretError> for ApiError {
    fn from(e: SecretError) -> Self {
        let status = match e {
            SecretError::BadEndpoint(_) => StatusCode::BAD_REQUEST,
            SecretError::NotConfigured => StatusCode::NOT_FOUND,
        };
        ApiError::new(status, e.to_string())
    }
}

fn answer(api: &Api, project_id: Option<&str>, query: Option<&str>) -> Result<Response, ApiError> {
    let v = secret_json(
        api.config().webhook_keys.as_ref(),
        project_id,
        &endpoint_param(query),
    )?;
    let mut r = json_response(StatusCode::OK, &v);
    // A secret: no cache keeps it.
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(r)
}

/// `GET /api/v1/projects/{id}/webhook-secret?endpoint=`: the project's secret for that endpoint.
pub(crate) async fn project_secret(
    State(api): State<Api>,
    Path(project_id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    check_project_id(&project_id)?;
    answer(&api, Some(&project_id), query.as_deref())
}

/// `GET /api/v1/webhook-secret?endpoint=`: the secret of notifications without a project to that endpoint.
pub(crate) async fn secret(State(api): State<Api>, RawQuery(query): RawQuery) -> Result<Response, ApiError> {
    answer(&api, None, query.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaxon_channels::webhook::EndpointSecret;
    use klaxon_channels::Secret;

    const P: &str = "5e3eef0679fa3700a0198a49";

    fn keys(previous: Option<&str>) -> SigningKeys {
        SigningKeys::from_settings(
            Some(Secret::new("MASTER-0123456789abcdef0123456789abcdef")),
            previous.map(Secret::new),
            None,
        )
        .expect("valid")
        .expect("some")
    }

    #[test]
    fn answers_the_projects_own_secret() {
        let k = keys(None);
        let v = secret_json(Some(&k), Some(&P.to_uppercase()), "https://H.example/x").expect("ok");
        assert_eq!(v["projectId"], P);
        assert_eq!(v["endpoint"], "https://h.example/x");
        let s = v["secret"].as_str().expect("secret");
        assert_eq!(
            EndpointSecret::from_whsec(s),
            Some(k.endpoint_secret(P, "https://h.example/x"))
        );
        assert!(v.get("previousSecret").is_none());
        let other =
            secret_json(Some(&k), Some("65a000000000000000000001"), "https://h.example/x").expect("ok");
        assert_ne!(other["secret"], v["secret"], "bound to the project");
        let none = secret_json(Some(&k), None, "https://h.example/x").expect("ok");
        assert_eq!(none["projectId"], Value::Null);
        assert_ne!(none["secret"], v["secret"]);
        let rotating = secret_json(Some(&keys(Some("OLD"))), Some(P), "https://h.example/x").expect("ok");
        assert_eq!(rotating["secret"], v["secret"]);
        assert!(rotating["previousSecret"].as_str().is_some_and(|p| p != s));
        assert!(!v.to_string().contains("MASTER"));
    }

    #[test]
    fn refuses_what_is_not_a_webhook_url_or_when_unsigned() {
        for bad in [
            "",
            "  ",
            "ftp://h/x",
            "not a url",
            "https://h/\u{7}",
            &format!("https://h/{}", "a".repeat(2048)),
        ] {
            assert!(
                matches!(
                    secret_json(Some(&keys(None)), Some(P), bad),
                    Err(SecretError::BadEndpoint(_))
                ),
                "{bad:?}"
            );
        }
        assert_eq!(
            secret_json(None, Some(P), "https://h.example/x"),
            Err(SecretError::NotConfigured)
        );
    }

    #[test]
    fn the_endpoint_is_percent_decoded() {
        assert_eq!(
            endpoint_param(Some("x=1&endpoint=https%3A%2F%2Fh.example%2Fa%3Fb%3Dc%26d&y")),
            "https://h.example/a?b=c&d"
        );
        assert_eq!(
            endpoint_param(Some("endpoint=https://h.example/a+b")),
            "https://h.example/a b"
        );
        assert_eq!(endpoint_param(None), "");
    }
}
