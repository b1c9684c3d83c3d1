//! `GET /deliveries?project=&before=&limit=`: on the first page, the messages quiet hours hold now (status
//! `held`, until when, what), then the delivery trail, newest first, one row per notification, paged by a cursor.
//! A held message leaves the list when its release is claimed and comes back as the trail's record of it, under
//! the same id (`crate::rest::deliveries::merge`).

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
use crate::rest::deliveries::{merge, Delivery, RecordView, SCAN};
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
    let project_filter = (!project.is_empty()).then_some(project.as_str());
    // the first page opens with what quiet hours hold; Redis down leaves the trail readable, and says so
    let (held, held_error) = if before.is_some() {
        (Vec::new(), None)
    } else {
        crate::rest::deliveries::held(&c.api, project_filter, limit).await
    };
    let (records, more) = c
        .api
        .trail()
        .await?
        .page(project_filter, before.as_ref(), limit, SCAN)
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
    let trail_rows = records.len();
    // the trail's page keeps its size; the held messages come on top of it
    let listed = merge(held, records, usize::MAX);
    let held_rows = listed.len() - trail_rows;
    let rows: Vec<Row> = listed.iter().map(Row::of).collect();
    let page = DeliveriesPage {
        rows,
        held_rows,
        held_error,
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
    /// How many of the rows are held messages (the first ones).
    held_rows: usize,
    /// Why the held messages could not be read (Redis unavailable), if so.
    held_error: Option<String>,
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

/// One row: the API's record (or held message), with its times for a table.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Row<'a> {
    #[serde(flatten)]
    record: RecordView<'a>,
    at_shown: String,
    fired_at_shown: String,
    /// A held message: until when, for a table.
    held_until_shown: Option<String>,
}

impl<'a> Row<'a> {
    fn of(d: &'a Delivery) -> Self {
        match d {
            Delivery::Trail(r) => Row {
                record: RecordView::from(r),
                at_shown: ms_human(r.at_ms),
                fired_at_shown: ms_human(r.fired_at_ms),
                held_until_shown: None,
            },
            Delivery::Held(h) => Row {
                record: RecordView::from(h),
                at_shown: ms_human(h.last_held_ms.unwrap_or(0)),
                fired_at_shown: ms_human(h.held_since_ms.unwrap_or(0)),
                held_until_shown: Some(ms_human(h.until_ms)),
            },
        }
    }
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
