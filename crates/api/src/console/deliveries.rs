//! `GET /deliveries?project=&before=&limit=`: the delivery trail, newest first, one row per notification, paged
//! by a cursor.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use serde::{Deserialize, Serialize};

use super::auth::Access;
use super::view::{ms_human, q, render, Nav, PageError, Template};
use super::Console;
use crate::rest::check_project_id;
use crate::rest::deliveries::{RecordView, SCAN};
use crate::ApiError;

/// Deliveries per page unless `?limit=` says otherwise, and the most it may say.
const PAGE: usize = 50;
const MAX_PAGE: usize = 500;

#[derive(Deserialize)]
pub(super) struct DeliveriesQuery {
    #[serde(default)]
    project: String,
    #[serde(default)]
    before: String,
    #[serde(default)]
    limit: String,
}

/// `at_ms:notificationId`.
fn parse_cursor(s: &str) -> Option<klaxon_store::trail::Cursor> {
    let (at, id) = s.split_once(':')?;
    Some(klaxon_store::trail::Cursor {
        at_ms: at.parse().ok()?,
        notification_id: id.to_owned(),
    })
}

/// `GET /deliveries?project=&before=&limit=`: the trail, newest first, one row per notification.
pub(super) async fn page(
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
            SCAN,
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
    let rows: Vec<Row> = records
        .iter()
        .map(|r| Row {
            record: RecordView::from(r),
            at_shown: ms_human(r.at_ms),
            fired_at_shown: ms_human(r.fired_at_ms),
        })
        .collect();
    let page = DeliveriesPage {
        rows,
        project: &project,
        limit,
        next,
        paged: before.is_some(),
        read_ms: started.elapsed().as_millis() as u64,
    };
    Ok(render(
        StatusCode::OK,
        &access.page(Nav::Deliveries, "Deliveries", page),
    ))
}

/// `deliveries.html`.
#[derive(Serialize)]
struct DeliveriesPage<'a> {
    rows: Vec<Row<'a>>,
    /// The project filter (empty: all).
    project: &'a str,
    limit: usize,
    /// The next (older) page's link, when there is one.
    next: Option<String>,
    /// Not the first page.
    paged: bool,
    /// How long the trail took to read.
    read_ms: u64,
}

impl Template for DeliveriesPage<'_> {
    const NAME: &'static str = "deliveries.html";
}

/// One row: the API's record, with its times for a table.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Row<'a> {
    #[serde(flatten)]
    record: RecordView<'a>,
    at_shown: String,
    fired_at_shown: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_at_and_id() {
        assert_eq!(
            parse_cursor("17:n-1:x").map(|c| (c.at_ms, c.notification_id)),
            Some((17, "n-1:x".into()))
        );
        assert!(parse_cursor("x:y").is_none());
    }
}
