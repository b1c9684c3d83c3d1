//! `GET /invalid` (the queue of invalid events; the messages stay in it) and `POST /invalid/replay` (one, or every
//! one, back to the events queue).

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use serde::{Deserialize, Serialize};

use super::auth::Access;
use super::view::{render, Nav, PageError, Template};
use super::Console;
use crate::rest::invalid;

/// Invalid events listed at once.
const INVALID_LIST: u32 = 200;

#[derive(Deserialize)]
pub(super) struct InvalidQuery {
    replayed: Option<u64>,
}

/// `GET /invalid`: the queue of invalid events (the messages stay in it).
pub(super) async fn page(
    State(c): State<Arc<Console>>,
    Extension(access): Extension<Access>,
    Query(q): Query<InvalidQuery>,
) -> Result<Response, PageError> {
    let items = c.api.invalid_pass(invalid::Pass::List(INVALID_LIST)).await?;
    let page = InvalidPage {
        queue: c.api.topology().invalid_queue(),
        events_queue: c.api.topology().events_queue().to_owned(),
        rows: &items,
        max: INVALID_LIST,
        replayed: q.replayed,
    };
    Ok(render(
        StatusCode::OK,
        &access.page(Nav::Invalid, "Invalid events", page),
    ))
}

/// `invalid.html`.
#[derive(Serialize)]
struct InvalidPage<'a> {
    queue: String,
    events_queue: String,
    rows: &'a [invalid::InvalidItem],
    /// Listed at most.
    max: u32,
    /// How many the last replay published (after `POST /invalid/replay`).
    replayed: Option<u64>,
}

impl Template for InvalidPage<'_> {
    const NAME: &'static str = "invalid.html";
}

#[derive(Deserialize)]
pub(super) struct ReplayForm {
    id: Option<String>,
}

/// `POST /invalid/replay` (`id`, or none: every one).
pub(super) async fn replay(
    State(c): State<Arc<Console>>,
    Form(form): Form<ReplayForm>,
) -> Result<Response, PageError> {
    let ids: Option<Vec<String>> = form
        .id
        .filter(|s| !s.trim().is_empty())
        .map(|s| vec![s.trim().to_owned()]);
    let items = c.api.invalid_pass(invalid::Pass::Replay(ids.as_deref())).await?;
    Ok(Redirect::to(&format!("/invalid?replayed={}", items.len())).into_response())
}
