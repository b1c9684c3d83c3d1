//! The project page's mute forms: `POST /projects/{id}/mutes` (a duration like `2h`, or an RFC 3339 time) and
//! `POST /projects/{id}/mutes/{muteId}/delete`, through the API's own mute functions.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::{Deserialize, Serialize};

use super::view::{ms_human, project_path, PageError};
use super::Console;
use crate::rest::mutes::{MuteEnd, MuteRequest, MuteView};
use crate::{Api, ApiError};

/// One active mute as the project page lists it: the API's form, and its end for a table.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct MuteRow {
    #[serde(flatten)]
    mute: MuteView,
    until_shown: String,
}

/// The project's active mutes as the page shows them, and how many more are stored past the limit.
pub(super) async fn active_mutes(api: &Api, project_id: &str) -> Result<(Vec<MuteRow>, u64), ApiError> {
    let (_, list) = api.active_mutes(project_id).await?;
    let shown = list
        .mutes
        .iter()
        .map(|m| MuteRow {
            mute: MuteView::from(m),
            until_shown: ms_human(m.until_ms),
        })
        .collect();
    Ok((shown, list.unread))
}

#[derive(Deserialize)]
pub(super) struct MuteForm {
    #[serde(default)]
    rule_id: String,
    #[serde(default)]
    group_hash: String,
    #[serde(default)]
    duration: String,
    #[serde(default)]
    until: String,
}

/// The API's mute request from the form: `duration` like `2h` (or `until`, RFC 3339).
fn mute_request(form: &MuteForm) -> Result<MuteRequest, String> {
    let given = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
    let end = match (form.duration.trim(), form.until.trim()) {
        ("", "") => return Err("give a duration (like 2h or 30m) or an until time".into()),
        (d, "") => {
            let secs = humantime::parse_duration(d)
                .map_err(|e| format!("the duration `{d}` is not one like 2h or 30m ({e})"))?
                .as_secs();
            MuteEnd::For(secs)
        }
        ("", u) => MuteEnd::Until(u.to_owned()),
        _ => return Err("give a duration or an until time, not both".into()),
    };
    Ok(MuteRequest {
        rule_id: given(&form.rule_id),
        group_hash: given(&form.group_hash),
        end,
    })
}

/// `POST /projects/{id}/mutes`.
pub(super) async fn add(
    State(c): State<Arc<Console>>,
    Path(project_id): Path<String>,
    Form(form): Form<MuteForm>,
) -> Result<Response, PageError> {
    let api = &c.api;
    api.known_project(&project_id).await?;
    let req = mute_request(&form).map_err(|e| PageError(StatusCode::BAD_REQUEST, e))?;
    // Over the project's limit of mutes: a 409 page that says so.
    api.add_mute(&project_id, &req).await?;
    Ok(Redirect::to(&format!("{}?done=muted", project_path(&project_id))).into_response())
}

/// `POST /projects/{id}/mutes/{muteId}/delete`.
pub(super) async fn remove(
    State(c): State<Arc<Console>>,
    Path((project_id, mute_id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    if !c.api.remove_mute(&project_id, &mute_id).await? {
        return Err(PageError(
            StatusCode::NOT_FOUND,
            "No such mute (it may have expired).".into(),
        ));
    }
    Ok(Redirect::to(&format!("{}?done=unmuted", project_path(&project_id))).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mute_forms_become_api_requests() {
        let form = |d: &str, u: &str| MuteForm {
            rule_id: " ".into(),
            group_hash: "g1".into(),
            duration: d.into(),
            until: u.into(),
        };
        let request = |end| MuteRequest {
            rule_id: None,
            group_hash: Some("g1".into()),
            end,
        };
        assert_eq!(mute_request(&form("2h", "")), Ok(request(MuteEnd::For(7200))));
        assert_eq!(
            mute_request(&form("", "2030-01-01T00:00:00Z")),
            Ok(request(MuteEnd::Until("2030-01-01T00:00:00Z".into())))
        );
        assert!(mute_request(&form("", "")).is_err());
        assert!(mute_request(&form("2h", "2030-01-01T00:00:00Z")).is_err());
        assert!(mute_request(&form("soon", "")).is_err());
    }
}
