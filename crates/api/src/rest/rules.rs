//! `GET|PUT /api/v1/projects/{projectId}/rules`: a project's rules in the import/export format
//! (`{"_id", "notifications": [Rule]}`), stored like `klaxon rules import`, then every process is told to drop
//! its cached rules of the project (Redis pub/sub, `klaxon_store::invalidation`), so running workers use them
//! within a second. The console's editor stores through [`Api::replace_rules`] too.
//!
//! Beyond validation, a write is checked against the per-project limits ([`klaxon_core::Limits`], refused
//! whatever `force` says) and for endpoints that point to this machine or a private network
//! ([`private_endpoints`]: stored with a warning, since the senders refuse to deliver there unless
//! `--allow-private-endpoints`; `klaxon rules import|add` warn the same). Only names that need no DNS are
//! judged here (IP literals, `localhost`): a host name is resolved and checked at delivery.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use klaxon_core::rule::{Channels, Field};
use klaxon_core::{ChannelKind, RawRule, RuleProblem};
use klaxon_engine::after_store;
use klaxon_store::format::{document_to_json, oids_to_hex};
use klaxon_store::ProjectNotifications;
use serde::Serialize;
use serde_json::{json, Value};

use super::check_project_id;
use crate::error::{json_body, json_response};
use crate::{Api, ApiError};

/// `GET /api/v1/projects/{id}/rules`: the project in the import/export format.
pub(crate) async fn show(
    State(api): State<Api>,
    Path(project_id): Path<String>,
) -> Result<Response, ApiError> {
    check_project_id(&project_id)?;
    let store = api.store().await?;
    match store.project(&project_id).await.map_err(ApiError::rules)? {
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("unknown project {project_id}"),
        )),
        Some(p) => Ok(json_response(
            StatusCode::OK,
            &json!({
                "_id": p.project_id,
                "notifications": p.notifications.into_iter().map(oids_to_hex).collect::<Vec<_>>(),
            }),
        )),
    }
}

/// `PUT /api/v1/projects/{id}/rules`: validated like `klaxon rules import` (`?force=true` stores rules the
/// engine cannot use, never over a limit), then every process is told to drop its cached rules of the project.
/// Problems: 400 `{"error", "problems": [{"ruleId", "fatal", "message", "fix", "limit"?}]}`.
pub(crate) async fn replace(
    State(api): State<Api>,
    Path(project_id): Path<String>,
    RawQuery(query): RawQuery,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    check_project_id(&project_id)?;
    let force = query
        .as_deref()
        .unwrap_or_default()
        .split('&')
        .any(|kv| kv.eq_ignore_ascii_case("force=true") || kv == "force=1");
    let stored = api.replace_rules(&project_id, json_body(body)?, force).await?;
    Ok(json_response(StatusCode::OK, &stored.body))
}

/// What [`Api::replace_rules`] stored.
pub(crate) struct Stored {
    /// The project as stored (the export format), with `"warnings": [...]` when there are any.
    pub(crate) body: Value,
    /// Some endpoint points to a private address (a warning of `body`).
    pub(crate) private_endpoints: bool,
}

/// Why [`Api::replace_rules`] stored nothing.
#[derive(Debug)]
pub(crate) enum NotStored {
    /// The rules have problems that refuse the write (rules the engine cannot use, unless forced; a limit,
    /// always): a 400 that lists them.
    Refused {
        /// The answer's `error`: how many, and whether `force` could help (bounded like every error).
        message: String,
        /// Each problem.
        problems: Vec<RuleProblem>,
    },
    /// The body is not a project of this path, or a backing service failed.
    Failed(ApiError),
}

impl From<ApiError> for NotStored {
    fn from(e: ApiError) -> Self {
        NotStored::Failed(e)
    }
}

impl From<NotStored> for ApiError {
    fn from(e: NotStored) -> Self {
        match e {
            NotStored::Refused { message, problems } => {
                let mut e = ApiError::bad_request(message);
                e.extra = Some((
                    "problems",
                    json!(problems.iter().map(ProblemView::from).collect::<Vec<_>>()),
                ));
                e
            }
            NotStored::Failed(e) => e,
        }
    }
}

/// A rule problem as the API answers it (and the console's editor lists it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ProblemView<'a> {
    /// The rule, when it could be read.
    pub(crate) rule_id: Option<&'a str>,
    /// The whole rule is skipped.
    pub(crate) fatal: bool,
    /// What is wrong.
    pub(crate) message: &'a str,
    /// How to fix it.
    pub(crate) fix: &'a str,
    /// A per-project limit: `force` cannot store it (present only when true).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) limit: bool,
}

impl<'a> From<&'a RuleProblem> for ProblemView<'a> {
    fn from(p: &'a RuleProblem) -> Self {
        ProblemView {
            rule_id: p.rule_id.as_deref(),
            fatal: p.fatal,
            message: &p.message,
            fix: &p.fix,
            limit: p.limit,
        }
    }
}

impl Api {
    /// The engine's one step after a store (`klaxon_engine::after_store`): starts the clock of the NO_EVENTS
    /// rules just stored of a project that has sent no event yet (their timers through the delay engine). A
    /// failure only warns: the rules are stored, and start counting at the project's first event instead.
    async fn after_store(&self, stored: &[after_store::Stored]) {
        if !stored.iter().any(after_store::Stored::arms) {
            return;
        }
        let armed = async {
            let redis = self.redis().await?;
            let no_events = klaxon_counter::NoEvents::new(redis, &self.config().namespace);
            let timers = after_store::arm(&no_events, &self.topology(), stored)
                .await
                .map_err(|e| ApiError::unavailable("Redis", e))?;
            self.publish(&timers).await
        };
        if let Err(e) = armed.await {
            let project_id = stored.first().map_or("", |s| s.project_id.as_str());
            tracing::warn!(
                error = %e.message, project_id,
                "NO_EVENTS rules stored, but their clock did not start: they start counting at the project's first event"
            );
        }
    }

    /// Validates a project's rules (`{"_id"?, "notifications": [Rule]}`) like `klaxon rules import` and stores
    /// them (`force`: even rules the engine cannot use; never over a limit: `klaxon_core::Limits`), then tells
    /// every process; returns what was stored, with the warnings (problems that did not refuse the write, and
    /// endpoints on private addresses unless `--allow-private-endpoints`). Shared by `PUT` and the console's
    /// edit page.
    pub(crate) async fn replace_rules(
        &self,
        project_id: &str,
        mut body: Value,
        force: bool,
    ) -> Result<Stored, NotStored> {
        let Some(obj) = body.as_object_mut() else {
            return Err(ApiError::bad_request(
                "the body must be an object {\"_id\", \"notifications\": [Rule]}",
            )
            .into());
        };
        match obj.get("_id").cloned().map(oids_to_hex) {
            None => {}
            Some(Value::String(id)) if id.eq_ignore_ascii_case(project_id) => {}
            Some(_) => {
                return Err(ApiError::bad_request(format!(
                    "`_id` must be the project of the path ({project_id}) or absent"
                ))
                .into())
            }
        }
        obj.insert("_id".into(), Value::String(project_id.to_ascii_lowercase()));
        let projects = klaxon_store::import_from_json(&Value::Array(vec![body]))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        // Like `klaxon rules import`: what the engine cannot use refuses the request unless forced, a limit
        // always; a rule that is valid but cannot notify yet is stored, with a warning.
        let (problems, mut warnings): (Vec<_>, Vec<_>) =
            klaxon_store::format::import_problems(&projects, &self.config().limits)
                .into_iter()
                .map(|(_, p)| p)
                .partition(|p| p.refuses_write(force));
        if !problems.is_empty() {
            let limits = problems.iter().any(|p| p.limit);
            let text = problems
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join("; ");
            let message = crate::error::bounded(format!(
                "{} problem(s), nothing stored ({}): {text}",
                problems.len(),
                if limits {
                    "a limit cannot be forced"
                } else {
                    "use ?force=true to store anyway"
                }
            ));
            return Err(NotStored::Refused { message, problems });
        }
        let private = if self.config().allow_private_endpoints {
            Vec::new()
        } else {
            private_endpoints(&projects)
        };
        let private_endpoints = !private.is_empty();
        warnings.extend(private.into_iter().map(|(_, p)| p));
        let store = self.store().await?;
        store.replace(&projects).await.map_err(ApiError::rules)?;
        self.publish_invalidation(project_id).await;
        let stored: Vec<after_store::Stored> = projects
            .iter()
            .map(|p| after_store::Stored {
                project_id: p.project_id.to_hex(),
                rules: p.rules(),
            })
            .collect();
        self.after_store(&stored).await;
        let exported = klaxon_store::export_json(&projects);
        let mut body = exported
            .as_array()
            .and_then(|a| a.first())
            .cloned()
            .unwrap_or(Value::Null);
        if !warnings.is_empty() {
            body["warnings"] = json!(warnings.iter().map(ProblemView::from).collect::<Vec<_>>());
        }
        Ok(Stored {
            body,
            private_endpoints,
        })
    }
}

/// Why `endpoint` of a `kind` channel is a private address, when it is one that needs no DNS to tell: an IP
/// literal that is not public (loopback, private, link-local, … per the senders' classifier) or `localhost`.
/// Only URL endpoints are judged (Slack, webhook, Loop, a Telegram notify-bot URL): email goes to the SMTP
/// relay, a Telegram chat id to the Bot API.
pub fn private_endpoint(kind: ChannelKind, endpoint: &str) -> Option<(String, &'static str)> {
    if kind == ChannelKind::Email || !endpoint.contains("://") {
        return None;
    }
    let url = url::Url::parse(endpoint.trim()).ok()?;
    let host = url.host()?;
    let why = super::notifications::private_host(&host)?;
    Some((klaxon_core::text::one_line(&host.to_string(), 100), why))
}

/// A warning for every enabled channel of `projects` whose endpoint is a private address (see
/// [`private_endpoint`]), as non-fatal problems of their rules, with their project's id.
pub fn private_endpoints(projects: &[ProjectNotifications]) -> Vec<(String, RuleProblem)> {
    let mut out = Vec::new();
    for p in projects {
        for doc in &p.notifications {
            let Ok(rule) = RawRule::from_value(&document_to_json(doc)) else {
                continue;
            };
            let channels = rule.channels.typed().map(Channels::enabled).into_iter().flatten();
            for (key, ch) in channels {
                let (Some(kind), Field::Typed(endpoint)) = (ChannelKind::parse(key), &ch.endpoint) else {
                    continue;
                };
                if let Some((host, why)) = private_endpoint(kind, endpoint) {
                    out.push((
                        p.project_id.to_hex(),
                        RuleProblem {
                            rule_id: rule.id().map(str::to_owned),
                            fatal: false,
                            limit: false,
                            message: format!(
                                "channel `{key}` points to a {why} address ({host}): the senders refuse to deliver \
                                 to it unless Klaxon runs with --allow-private-endpoints"
                            ),
                            fix: "use a public endpoint, or start the senders with --allow-private-endpoints \
                                  (KLAXON_ALLOW_PRIVATE_ENDPOINTS) if this address is meant"
                                .into(),
                        },
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn private_endpoints_are_told_without_dns() {
        // (channel, endpoint, flagged)
        let cases = [
            (
                ChannelKind::Webhook,
                "http://127.0.0.1:8080/hook",
                Some("loopback"),
            ),
            (ChannelKind::Webhook, "http://localhost/hook", Some("loopback")),
            (ChannelKind::Slack, "https://10.1.2.3/services/x", Some("private")),
            (ChannelKind::Loop, "http://[::1]:9000/hooks/x", Some("loopback")),
            (
                ChannelKind::Webhook,
                "http://169.254.169.254/latest/meta-data",
                Some("link-local"),
            ),
            (
                ChannelKind::Telegram,
                "http://192.168.1.5/notify",
                Some("private"),
            ),
            (ChannelKind::Webhook, "https://hooks.example.com/x", None),
            (ChannelKind::Webhook, "https://93.184.216.34/x", None),
            (ChannelKind::Slack, "https://hooks.slack.com/services/T/B/X", None),
            (ChannelKind::Telegram, "-100123", None),
            (ChannelKind::Email, "ops@localhost", None),
            (ChannelKind::Webhook, "not a url", None),
        ];
        for (kind, endpoint, want) in cases {
            let got = private_endpoint(kind, endpoint).map(|(_, why)| why);
            match want {
                Some(w) => assert!(got.is_some_and(|g| g.starts_with(w)), "{endpoint}: {got:?}"),
                None => assert_eq!(got, None, "{endpoint}"),
            }
        }
        let file = json!([{"_id": "5e3eef0679fa3700a0198a49", "notifications": [
            {"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW", "channels": {
                "webhook": {"isEnabled": true, "endpoint": "http://127.0.0.1:9/h?secret=s3cr3t", "minPeriod": 0},
                "slack": {"isEnabled": false, "endpoint": "http://10.0.0.1/off", "minPeriod": 0},
                "loop": {"isEnabled": true, "endpoint": "https://chat.example.com/hooks/x", "minPeriod": 0}}}]}]);
        let projects = klaxon_store::parse_import(&file.to_string()).expect("valid");
        let warnings = private_endpoints(&projects);
        assert_eq!(warnings.len(), 1, "only enabled channels: {warnings:?}");
        let w = &warnings[0].1;
        assert_eq!(w.rule_id.as_deref(), Some("5e3eef0679fa3700a0198a4a"));
        assert!(!w.fatal && !w.limit && !w.refuses_write(false));
        assert!(
            w.message.contains("`webhook`") && w.message.contains("loopback"),
            "{}",
            w.message
        );
        assert!(
            !w.message.contains("s3cr3t"),
            "only the host is quoted: {}",
            w.message
        );
        assert!(w.fix.contains("--allow-private-endpoints"));
    }
}
