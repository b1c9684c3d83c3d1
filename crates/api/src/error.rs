//! The API's error answer: a status and `{"error": "…"}`, never a stack; and the request body's reading, whose
//! failures are answers of their own (413 over the cap, 400 for what is not JSON).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use klaxon_store::RulesError;
use serde_json::{json, Value};

use crate::MAX_BODY;

/// Longest an error message that leaves the process may be, in characters.
const MAX_ERROR_CHARS: usize = 2000;

/// An error answer: a status and `{"error": message}` (plus optional extra fields).
#[derive(Debug)]
pub struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
    pub(crate) extra: Option<(&'static str, Value)>,
}

/// `message` cut to [`MAX_ERROR_CHARS`] (and "…") when longer: what an error answer or page may say.
pub(crate) fn bounded(message: String) -> String {
    if message.chars().count() > MAX_ERROR_CHARS {
        message.chars().take(MAX_ERROR_CHARS).collect::<String>() + "…"
    } else {
        message
    }
}

impl ApiError {
    /// An answer with `status` and `message` (bounded).
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: bounded(message.into()),
            extra: None,
        }
    }

    /// 400.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 503: `what` (a backing service) is down.
    pub(crate) fn unavailable(what: &str, e: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{what} is unavailable: {e}"),
        )
    }

    /// A rule store error as an answer (400 for a bad id, 409 over a limit, 503 otherwise).
    pub(crate) fn rules(e: RulesError) -> Self {
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

/// `body` as a JSON answer with `status`.
pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The request body, or the error answer for it (413 over the cap).
pub(crate) fn body_of(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|r| {
        let status = r.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(status, format!("the body is over {MAX_BODY} bytes"))
        } else {
            ApiError::new(status, r.body_text())
        }
    })
}

/// The request body as JSON (400 when it is not).
pub(crate) fn json_body(body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let body = body_of(body)?;
    serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))
}
