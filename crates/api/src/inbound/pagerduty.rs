//! `POST /api/v1/integrations/pagerduty`: PagerDuty's v3 webhooks (a generic webhook subscription on the service
//! Klaxon triggers into).
//!
//! Verified by `X-PagerDuty-Signature`: `v1=<hex HMAC-SHA256 of the raw body>` under the subscription's secret
//! (`KLAXON_PAGERDUTY_WEBHOOK_SECRET`); during a secret rotation PagerDuty sends several, comma-separated, and
//! one match is enough. A payload whose `event.occurred_at` is more than [`STALE_AFTER`] from now is stale; each
//! `event.id` is accepted once within [`REPLAY_WINDOW`].
//!
//! `incident.acknowledged` and `incident.resolved` acknowledge and resolve, by `pagerduty`, the alerts of the
//! incident `event.data.incident_key` names — the `dedup_key` Klaxon triggered it with, which the sender remembered
//! with its project and alerts ([`klaxon_counter::Inbound::incident`]). Other events (`incident.triggered`,
//! `pagey.ping`, …) are ignored; an incident Klaxon did not trigger is counted `unknown_alert` and answered 200,
//! since the subscription sends every incident of its services and PagerDuty would retry (and finally disable)
//! a subscription answered with errors.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::response::Response;
use klaxon_counter::Inbound;
use serde_json::Value;

use super::{
    act, claim, finish, finish_ok, fresh, hmac_matches, now_secs, verify, Acted, Integration, Outcome,
    Verified,
};
use crate::rest::alerts::HandAction;
use crate::Api;

/// How far `event.occurred_at` may be from now (PagerDuty delivers within seconds, and retries for a while).
pub const STALE_AFTER: Duration = Duration::from_secs(10 * 60);
/// How long an `event.id` is remembered: longer than a payload stays fresh, so a replay is never accepted.
pub const REPLAY_WINDOW: Duration = Duration::from_secs(30 * 60);
/// Who acknowledges or resolves an alert from PagerDuty.
pub const BY: &str = "pagerduty";

const I: Integration = Integration::PagerDuty;

/// Whether one of the `v1=` signatures of the header matches the body.
pub(crate) fn signature_matches(secret: &str, header: &str, body: &[u8]) -> bool {
    header
        .split(',')
        .filter_map(|s| s.trim().strip_prefix("v1="))
        .take(8)
        .any(|sig| hmac_matches(secret, &[body], sig))
}

/// Unix seconds of an RFC 3339 time.
fn unix(s: &str) -> Option<i64> {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(|t| t.unix_timestamp())
}

pub(crate) async fn receive(State(api): State<Api>, req: Request) -> Response {
    let (secret, client, headers, body) = match super::accept(&api, I, req).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let Some(signatures) = super::header_str(&headers, "x-pagerduty-signature").filter(|s| !s.is_empty())
    else {
        return finish(I, Outcome::Unsigned, "no X-PagerDuty-Signature header", None);
    };
    if let Verified::No(outcome, why) = verify(&api, client, || signature_matches(&secret, signatures, &body))
    {
        return finish(I, outcome, why, None);
    }
    let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
        return finish(I, Outcome::Invalid, "the body is not JSON", None);
    };
    let event = &payload["event"];
    let (Some(id), Some(kind)) = (event["id"].as_str(), event["event_type"].as_str()) else {
        return finish(I, Outcome::Invalid, "no event.id or event.event_type", None);
    };
    let Some(at) = event["occurred_at"].as_str().and_then(unix) else {
        return finish(
            I,
            Outcome::Invalid,
            "event.occurred_at is not an RFC 3339 time",
            None,
        );
    };
    if !fresh(at, now_secs(), STALE_AFTER) {
        let detail = format!(
            "event.occurred_at is more than {} minutes from now",
            STALE_AFTER.as_secs() / 60
        );
        return finish(I, Outcome::Stale, &detail, None);
    }
    let claimed = match claim(&api, I, id, REPLAY_WINDOW).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let action = match kind {
        "incident.acknowledged" => HandAction::Acknowledge,
        "incident.resolved" => HandAction::Resolve,
        _ => return finish_ok(I, Outcome::Ignored, "not an acknowledge or a resolve"),
    };
    let Some(key) = event["data"]["incident_key"].as_str() else {
        return finish_ok(I, Outcome::UnknownAlert, "the incident has no incident_key");
    };
    let incident = match api.redis().await {
        Ok(redis) => Inbound::new(redis, &api.config().namespace).incident(key).await,
        Err(e) => {
            claimed.give_back().await;
            return finish(I, Outcome::Unavailable, &e.message, None);
        }
    };
    let incident = match incident {
        Ok(Some(i)) => i,
        Ok(None) => return finish_ok(I, Outcome::UnknownAlert, "not an incident Klaxon triggered"),
        Err(e) => {
            claimed.give_back().await;
            return finish(
                I,
                Outcome::Unavailable,
                &format!("Redis is unavailable: {e}"),
                None,
            );
        }
    };
    let (mut changed, mut known) = (0, 0);
    for alert_id in &incident.alert_ids {
        match act(&api, &incident.project_id, alert_id, action, BY).await {
            Acted::Done(_, now) => {
                known += 1;
                changed += usize::from(now);
            }
            Acted::Unknown => {}
            Acted::Unavailable(why) => {
                claimed.give_back().await;
                return finish(I, Outcome::Unavailable, &why, None);
            }
        }
    }
    if known == 0 {
        return finish_ok(I, Outcome::UnknownAlert, "the incident's alerts are gone");
    }
    let detail = format!("{} alert(s) {}, {changed} of them now", known, action.done());
    finish_ok(I, Outcome::Accepted, &detail)
}
