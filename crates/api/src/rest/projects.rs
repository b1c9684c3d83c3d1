//! `GET|PUT /api/v1/projects/{projectId}` (a project's name) and `GET /api/v1/alerts` (the alerts of every
//! project, with their project's name): the contract's "Close the loop".
//!
//! ```text
//!  PUT {"name"} ──▶ klaxon_core::rule::check_project_name ──▶ MongoDB `projects.klaxonName` ──▶ Redis pub/sub
//!                   (every process reloads the project: the next message carries the name)
//!  GET /alerts  ──▶ klaxon_counter::Alerts::list_all (Redis: every project that opened an alert)
//!               ──▶ the projects' names (MongoDB; the name kept with the alert when MongoDB cannot answer)
//! ```
//!
//! Names are tenant or operator text: bounded here, escaped by every channel and page that shows them.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use klaxon_core::alert::{Alert, AlertState};
use klaxon_counter::{Alerts, CounterError};
use klaxon_store::{ProjectName, RuleStore};
use serde_json::{json, Value};

use super::alerts::{parse_state, DEFAULT_LIST_LIMIT};
use super::{check_project_id, limit_of, query_pairs};
use crate::error::{json_body, json_response};
use crate::{Api, ApiError};

/// The most alerts one cross-project list holds.
pub const MAX_LIST_ALL: usize = 1000;

/// `{"projectId", "name"}`: the name shown (Klaxon's, else Hawk's; `null` when none).
pub fn name_json(project_id: &str, name: &ProjectName) -> Value {
    json!({"projectId": project_id, "name": name.shown()})
}

/// An alert of the cross-project list with the name of its project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectAlert {
    /// The alert.
    pub alert: Alert,
    /// Its project's name now (Klaxon's, else Hawk's, else the one kept with the alert, else the project id).
    pub project_name: String,
}

impl ProjectAlert {
    /// The list item: the alert's view with `"projectId"` and `"projectName"`.
    pub fn to_json(&self) -> Value {
        let mut v = serde_json::to_value(self.alert.view()).unwrap_or(Value::Null);
        if let Some(m) = v.as_object_mut() {
            m.insert("projectId".into(), Value::String(self.alert.project_id.clone()));
            m.insert("projectName".into(), Value::String(self.project_name.clone()));
        }
        v
    }
}

/// `{"alerts": [ProjectAlert…]}`.
pub fn list_all_json(list: &[ProjectAlert]) -> Value {
    json!({"alerts": list.iter().map(ProjectAlert::to_json).collect::<Vec<_>>()})
}

/// The alerts of every project (of one state or all), newest first, at most `limit`, each with its project's
/// name: read from `store` when given and answering (a failure is logged, and the name kept with the alert
/// when it opened is shown), the project id when there is none. The API, the console and `klaxon alerts list`
/// share it.
pub async fn list_all(
    alerts: &Alerts,
    store: Option<&RuleStore>,
    state: Option<AlertState>,
    limit: usize,
) -> Result<Vec<ProjectAlert>, CounterError> {
    Ok(with_names(alerts.list_all(state, limit).await?, store).await)
}

/// `list` with the name of each alert's project (see [`list_all`]).
pub async fn with_names(list: Vec<Alert>, store: Option<&RuleStore>) -> Vec<ProjectAlert> {
    let mut ids: Vec<String> = list.iter().map(|a| a.project_id.clone()).collect();
    ids.sort();
    ids.dedup();
    let names = match store {
        Some(store) if !ids.is_empty() => store.names(&ids).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "project names unavailable; showing the names kept with the alerts");
            Default::default()
        }),
        _ => Default::default(),
    };
    list.into_iter()
        .map(|alert| {
            let project_name = names
                .get(&alert.project_id)
                .and_then(|n| n.shown().map(str::to_owned))
                .or_else(|| alert.project_name.clone())
                .unwrap_or_else(|| alert.project_id.clone());
            ProjectAlert { alert, project_name }
        })
        .collect()
}

/// `GET /api/v1/projects/{id}` → `{"projectId", "name"}`; 404 when there is no such project.
pub(crate) async fn show(
    State(api): State<Api>,
    Path(project_id): Path<String>,
) -> Result<Response, ApiError> {
    check_project_id(&project_id)?;
    let project_id = project_id.to_ascii_lowercase();
    let store = api.store().await?;
    let names = store
        .names(std::slice::from_ref(&project_id))
        .await
        .map_err(ApiError::rules)?;
    match names.get(&project_id) {
        Some(name) => Ok(json_response(StatusCode::OK, &name_json(&project_id, name))),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("unknown project {project_id}"),
        )),
    }
}

/// The name of a `PUT` body `{"name"}`, checked.
pub fn name_of_body(body: &Value) -> Result<String, String> {
    match body.get("name") {
        Some(Value::String(n)) => klaxon_core::rule::check_project_name(n),
        Some(_) => Err("`name` must be a string".into()),
        None => Err("the body must be an object {\"name\": \"…\"}".into()),
    }
}

/// `PUT /api/v1/projects/{id}` `{"name"}` → 200 `{"projectId", "name"}`: stored (the project document is made
/// when there is none), then every process reloads the project, so the next message carries the name.
pub(crate) async fn rename(
    State(api): State<Api>,
    Path(project_id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    check_project_id(&project_id)?;
    let project_id = project_id.to_ascii_lowercase();
    let body = json_body(body)?;
    let name = name_of_body(&body).map_err(ApiError::bad_request)?;
    api.rename_project(&project_id, &name).await?;
    let stored = ProjectName {
        klaxon: Some(name),
        hawk: None,
    };
    Ok(json_response(StatusCode::OK, &name_json(&project_id, &stored)))
}

/// `GET /api/v1/alerts?state=&limit=` → `{"alerts": [{…AlertView, "projectId", "projectName"}]}`, newest first.
pub(crate) async fn list(State(api): State<Api>, RawQuery(query): RawQuery) -> Result<Response, ApiError> {
    let pairs = query_pairs(query.as_deref());
    let state = match pairs.iter().find(|(k, _)| k == "state") {
        Some((_, s)) if !s.is_empty() => Some(parse_state(s).map_err(ApiError::bad_request)?),
        _ => None,
    };
    let limit = limit_of(&pairs, DEFAULT_LIST_LIMIT, MAX_LIST_ALL)?;
    let list = api.list_all_alerts(state, limit).await?;
    Ok(json_response(StatusCode::OK, &list_all_json(&list)))
}

impl Api {
    /// Stores a checked project name and tells every process to reload the project.
    pub(crate) async fn rename_project(&self, project_id: &str, name: &str) -> Result<(), ApiError> {
        self.store()
            .await?
            .set_name(project_id, name)
            .await
            .map_err(ApiError::rules)?;
        self.publish_invalidation(project_id).await;
        tracing::info!(project_id, "project renamed");
        Ok(())
    }

    /// [`list_all`] on the API's clients (names from MongoDB when it answers).
    pub(crate) async fn list_all_alerts(
        &self,
        state: Option<AlertState>,
        limit: usize,
    ) -> Result<Vec<ProjectAlert>, ApiError> {
        let store = self.store().await.ok();
        list_all(&self.alerts().await?, store, state, limit)
            .await
            .map_err(|e| ApiError::unavailable("Redis", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_bodies_are_checked() {
        assert_eq!(name_of_body(&json!({"name": " Acme "})).as_deref(), Ok("Acme"));
        for bad in [
            json!({"name": ""}),
            json!({"name": "x".repeat(101)}),
            json!({"name": "a\u{0}b"}),
            json!({"name": 3}),
            json!({}),
            json!("Acme"),
        ] {
            assert!(name_of_body(&bad).is_err(), "{bad}");
        }
        assert!(name_of_body(&json!({"name": "x".repeat(100)})).is_ok());
    }
}
