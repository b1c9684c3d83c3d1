//! `GET /dead` (the dead-letter queue; the messages stay in it) and `POST /dead/replay` (one, or every one).

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use serde::{Deserialize, Serialize};

use super::auth::Access;
use super::view::{render, Nav, PageError, Template};
use super::Console;
use crate::rest::dead;

/// Dead letters listed at once.
const DEAD_LIST: u32 = 200;

#[derive(Deserialize)]
pub(super) struct DeadQuery {
    replayed: Option<u64>,
}

/// `GET /dead`: the dead-letter queue (the messages stay in it).
pub(super) async fn page(
    State(c): State<Arc<Console>>,
    Extension(access): Extension<Access>,
    Query(dq): Query<DeadQuery>,
) -> Result<Response, PageError> {
    let items = c.api.dead_pass(dead::Pass::List(DEAD_LIST)).await?;
    let page = DeadPage {
        rows: &items,
        max: DEAD_LIST,
        replayed: dq.replayed,
    };
    Ok(render(
        StatusCode::OK,
        &access.page(Nav::Dead, "Dead letters", page),
    ))
}

/// `dead.html`.
#[derive(Serialize)]
struct DeadPage<'a> {
    rows: &'a [dead::DeadItem],
    /// Listed at most.
    max: u32,
    /// How many the last replay published (after `POST /dead/replay`).
    replayed: Option<u64>,
}

impl Template for DeadPage<'_> {
    const NAME: &'static str = "dead.html";
}

#[derive(Deserialize)]
pub(super) struct ReplayForm {
    notification_id: Option<String>,
}

/// `POST /dead/replay` (`notification_id`, or none: every one).
pub(super) async fn replay(
    State(c): State<Arc<Console>>,
    Form(form): Form<ReplayForm>,
) -> Result<Response, PageError> {
    let ids: Option<Vec<String>> = form
        .notification_id
        .filter(|s| !s.trim().is_empty())
        .map(|s| vec![s.trim().to_owned()]);
    let items = c.api.dead_pass(dead::Pass::Replay(ids.as_deref())).await?;
    Ok(Redirect::to(&format!("/dead?replayed={}", items.len())).into_response())
}
