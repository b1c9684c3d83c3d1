//! `POST /api/v1/notifications`: direct and scheduled notifications.
//!
//! ```text
//! {"channel", "endpoint", "title", "text"?, "sendAt"?, "idempotencyKey"?, "projectId"?}
//!   ──▶ validate (this module) ──▶ idempotency record in Redis `<ns>:{direct:<id>}` (pending → queued,
//!       `klaxon_counter::direct`)
//!   ──▶ NotificationTask (reason `direct`) ──▶ <ns>.notify.<channel>, through the delay engine when sendAt is later
//!   ──▶ the senders: dedup on notificationId, breaker, rate limit, retries, dead letters — like any firing
//! ```
//!
//! Exactly once per key: the id is derived from `idempotencyKey`, and the senders deliver an id once (their
//! dedup store), so a repeated request, even a concurrent one, gives one message. The Redis record makes a
//! repeated request answer with the first one's `sendAt` and not enqueue again once the first was queued; a
//! request that died between the record and the publish left it `pending`, and its retry publishes again.
//!
//! Never before `sendAt`: the task carries `sendAtMs` and a sender that receives it earlier parks it again
//! (the delay engine reaches ~12 days per step; later times come back in steps).

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use klaxon_broker::{Outgoing, Topology};
use klaxon_core::notification::{direct_notification_id, rfc3339_ms};
use klaxon_core::{ChannelKind, Limits, NotificationEvent, NotificationTask, Reason};
use klaxon_counter::direct::{DirectKeys, KeyState};
use serde_json::{json, Value};

use crate::error::{json_body, json_response};
use crate::{Api, ApiError};

/// Longest title accepted, in characters.
pub const MAX_TITLE_CHARS: usize = 2000;
/// Longest text accepted, in characters.
pub const MAX_TEXT_CHARS: usize = 16 * 1024;
/// Longest endpoint accepted, in bytes.
pub const MAX_ENDPOINT_BYTES: usize = 2048;
/// Longest idempotency key accepted, in characters.
pub const MAX_KEY_CHARS: usize = 256;
/// Latest `sendAt` accepted, counted from now.
pub const MAX_SCHEDULE_MS: i64 = 366 * 24 * 3600 * 1000;
/// The rule id direct notifications carry (in the trail, the webhook body, dead letters).
pub const DIRECT_RULE_ID: &str = "api";

/// A validated request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectRequest {
    /// The channel.
    pub channel: ChannelKind,
    /// Its endpoint (trimmed).
    pub endpoint: String,
    /// The title.
    pub title: String,
    /// The body.
    pub text: Option<String>,
    /// `sendAt`, unix ms, when it is later than now (None: now).
    pub send_at_ms: Option<i64>,
    /// The idempotency key.
    pub idempotency_key: Option<String>,
    /// The project it belongs to, if given (shown in the trail).
    pub project_id: String,
}

fn string_field<'a>(body: &'a Value, name: &str) -> Result<Option<&'a str>, String> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(format!("`{name}` must be a string")),
    }
}

fn required<'a>(body: &'a Value, name: &str) -> Result<&'a str, String> {
    match string_field(body, name)? {
        Some(s) if !s.trim().is_empty() => Ok(s),
        _ => Err(format!("`{name}` is required (a non-empty string)")),
    }
}

/// True for hosts that name this machine or a private network without DNS (`localhost`, `*.localhost`) or an
/// IP literal that is not public (loopback, private, link-local, …): what the senders refuse unless
/// `--allow-private-endpoints` is set. Names are resolved and checked again at delivery time.
pub(crate) fn private_host(host: &url::Host<&str>) -> Option<&'static str> {
    match host {
        url::Host::Domain(d) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            (d == "localhost" || d.ends_with(".localhost")).then_some("loopback")
        }
        url::Host::Ipv4(ip) => klaxon_channels::safety::non_public_kind((*ip).into()),
        url::Host::Ipv6(ip) => klaxon_channels::safety::non_public_kind((*ip).into()),
    }
}

fn check_url(endpoint: &str, channel: ChannelKind, allow_private: bool) -> Result<(), String> {
    let url = url::Url::parse(endpoint)
        .map_err(|e| format!("`endpoint` of a {channel} notification must be an http(s) URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "`endpoint` of a {channel} notification must be an http(s) URL, not {}:",
            url.scheme()
        ));
    }
    let Some(host) = url.host() else {
        return Err("`endpoint` has no host".into());
    };
    if !allow_private {
        if let Some(kind) = private_host(&host) {
            return Err(format!(
                "`endpoint` points to a {kind} address; refused (start Klaxon with --allow-private-endpoints to allow it)"
            ));
        }
    }
    Ok(())
}

fn check_endpoint(channel: ChannelKind, endpoint: &str, allow_private: bool) -> Result<(), String> {
    if endpoint.len() > MAX_ENDPOINT_BYTES {
        return Err(format!("`endpoint` is over {MAX_ENDPOINT_BYTES} bytes"));
    }
    if endpoint.chars().any(char::is_control) {
        return Err("`endpoint` contains control characters".into());
    }
    match channel {
        ChannelKind::Email => {
            for address in endpoint.split(',').map(str::trim) {
                let ok = address.rsplit_once('@').is_some_and(|(local, domain)| {
                    !local.is_empty() && (domain.contains('.') || domain == "localhost")
                }) && !address.contains(char::is_whitespace);
                if !ok {
                    return Err(format!(
                        "`endpoint` of an email notification must be addresses separated by commas; `{}` is not one",
                        klaxon_core::text::one_line(address, 100)
                    ));
                }
            }
            Ok(())
        }
        ChannelKind::Telegram if !endpoint.contains("://") => {
            let digits = endpoint.strip_prefix('-').unwrap_or(endpoint);
            let numeric = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
            let channel_name = endpoint.len() > 1
                && endpoint.starts_with('@')
                && endpoint[1..]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if numeric || channel_name {
                Ok(())
            } else {
                Err("`endpoint` of a telegram notification must be a chat id (e.g. 123456789, -1001234567890 for a group) or @channelname".into())
            }
        }
        // a routing key or a Slack channel id (the Web API), not a URL: its shape is all there is to check
        ChannelKind::Pagerduty => match klaxon_core::rule::endpoint_problem(channel, endpoint) {
            Some((message, _)) => Err(format!("`endpoint`: {message}")),
            None => Ok(()),
        },
        ChannelKind::Slack if !endpoint.contains("://") => {
            match klaxon_core::rule::endpoint_problem(channel, endpoint) {
                Some((message, _)) => Err(format!("`endpoint`: {message}")),
                None => Ok(()),
            }
        }
        _ => check_url(endpoint, channel, allow_private),
    }
}

/// Validates a request body against the Redis clock `now_ms`.
pub fn parse(body: &Value, now_ms: i64, allow_private: bool) -> Result<DirectRequest, String> {
    if !body.is_object() {
        return Err(
            "the body must be an object {\"channel\", \"endpoint\", \"title\", \"text\"?, \"sendAt\"?, \"idempotencyKey\"?}"
                .into(),
        );
    }
    let channel_name = required(body, "channel")?;
    let channel = ChannelKind::parse(channel_name.trim()).ok_or_else(|| {
        let known: Vec<&str> = ChannelKind::ALL.iter().map(|c| c.as_str()).collect();
        format!(
            "unknown channel `{}`; one of: {}",
            klaxon_core::text::one_line(channel_name, 40),
            known.join(", ")
        )
    })?;
    let endpoint = required(body, "endpoint")?.trim().to_owned();
    check_endpoint(channel, &endpoint, allow_private)?;
    let title = required(body, "title")?;
    if title.chars().count() > MAX_TITLE_CHARS {
        return Err(format!("`title` is over {MAX_TITLE_CHARS} characters"));
    }
    let text = string_field(body, "text")?.filter(|t| !t.trim().is_empty());
    if text.is_some_and(|t| t.chars().count() > MAX_TEXT_CHARS) {
        return Err(format!("`text` is over {MAX_TEXT_CHARS} characters"));
    }
    let send_at_ms = match string_field(body, "sendAt")? {
        None => None,
        Some(s) => {
            let at = super::mutes::parse_rfc3339_ms(s)
                .map_err(|e| format!("`sendAt` must be an RFC 3339 time (e.g. 2026-12-01T09:00:00Z): {e}"))?;
            if at > now_ms.saturating_add(MAX_SCHEDULE_MS) {
                return Err("`sendAt` is more than 366 days away".into());
            }
            (at > now_ms).then_some(at)
        }
    };
    let idempotency_key = match string_field(body, "idempotencyKey")? {
        None => None,
        Some(k) if k.is_empty() || k.chars().count() > MAX_KEY_CHARS => {
            return Err(format!(
                "`idempotencyKey` must be 1 to {MAX_KEY_CHARS} characters"
            ))
        }
        Some(k) => Some(k.to_owned()),
    };
    let project_id = match string_field(body, "projectId")? {
        None => String::new(),
        Some(p) if klaxon_core::event::is_object_id(p) => p.to_ascii_lowercase(),
        Some(_) => return Err("`projectId` must be a 24-hex-digit ObjectId".into()),
    };
    Ok(DirectRequest {
        channel,
        endpoint,
        title: title.to_owned(),
        text: text.map(str::to_owned),
        send_at_ms,
        idempotency_key,
        project_id,
    })
}

impl DirectRequest {
    /// The notification id: derived from the idempotency key, or `fresh` (random) without one.
    pub fn notification_id(&self, fresh: impl FnOnce() -> String) -> String {
        self.idempotency_key
            .as_deref()
            .map_or_else(fresh, direct_notification_id)
    }

    /// The task the senders deliver.
    pub fn task(&self, notification_id: String, now_ms: i64) -> NotificationTask {
        NotificationTask {
            notification_id,
            project_id: self.project_id.clone(),
            project_name: None,
            rule_id: DIRECT_RULE_ID.to_owned(),
            channel: self.channel,
            endpoint: self.endpoint.clone(),
            min_period_s: 0,
            fired_at_ms: now_ms,
            reason: Reason::Direct,
            events: vec![NotificationEvent {
                group_hash: String::new(),
                title: self.title.clone(),
                count: 1,
                repetition_id: None,
                open_for_ms: None,
                silence_period_ms: None,
                alert_id: None,
            }],
            text: self.text.clone(),
            send_at_ms: self.send_at_ms,
            alert: None,
            severity: None,
        }
    }
}

/// The answer's `sendAt`.
pub fn send_at_text(ms: i64) -> String {
    rfc3339_ms(ms)
}

/// The recipients of a direct email notification, checked against the limit (the rule channels' own check is
/// the core's validation).
pub fn check_direct_recipients(kind: ChannelKind, endpoint: &str, limits: &Limits) -> Result<(), String> {
    let n = klaxon_core::limits::email_recipients(endpoint).count();
    let max = limits.max_email_recipients;
    if kind == ChannelKind::Email && n > max {
        return Err(format!(
            "`endpoint` has {n} email recipients, over the limit of {max}: send to a mailing-list address, or \
             raise --max-email-recipients (KLAXON_MAX_EMAIL_RECIPIENTS)"
        ));
    }
    Ok(())
}

/// `POST /api/v1/notifications` → 202 `{"notificationId", "sendAt"}`: a direct notification, queued for the
/// senders (through the delay engine when `sendAt` is later). See the module's doc.
pub(crate) async fn send(
    State(api): State<Api>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = json_body(body)?;
    let (counter, now) = api.redis_now().await?;
    let request = parse(&body, now, api.config().allow_private_endpoints).map_err(ApiError::bad_request)?;
    check_direct_recipients(request.channel, &request.endpoint, &api.config().limits)
        .map_err(ApiError::bad_request)?;
    let id = request.notification_id(|| format!("{:032x}", rand::random::<u128>()));
    let mut send_at = request.send_at_ms.unwrap_or(now);
    let keys = DirectKeys::new(counter.redis().clone(), &api.config().namespace);
    if request.idempotency_key.is_some() {
        match keys
            .record(&id, send_at, now)
            .await
            .map_err(|e| ApiError::unavailable("Redis", e))?
        {
            // Queued already: the same answer, nothing enqueued twice.
            Some(KeyState::Queued(at)) => {
                return Ok(json_response(
                    StatusCode::ACCEPTED,
                    &json!({"notificationId": id, "sendAt": send_at_text(at)}),
                ));
            }
            // The first request may have died before publishing: publish again, at its time (the senders
            // deliver one id once).
            Some(KeyState::Pending(at)) => send_at = at,
            // Recorded now (or the earlier record expired in between): a fresh request.
            None => {}
        }
    }
    let mut task = request.task(id.clone(), now);
    task.send_at_ms = (send_at > now).then_some(send_at);
    let bytes = serde_json::to_vec(&task).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the task: {e}"),
        )
    })?;
    let topology = Topology::new(
        &api.config().namespace,
        &api.config().events_queue,
        api.config().queue_type,
    );
    let mut message = Outgoing::json(topology.notify_queue(task.channel), bytes);
    message.message_id = Some(id.clone());
    let wait = Duration::from_millis(u64::try_from(send_at - now).unwrap_or(0)).min(klaxon_broker::MAX_DELAY);
    api.publish(&[(message, wait)]).await?;
    if request.idempotency_key.is_some() {
        if let Err(e) = keys.mark_queued(&id, send_at).await {
            // A repeat of this request publishes once more; the senders still deliver it once.
            tracing::warn!(notification_id = %id, error = %e, "direct notification queued, but its key was not marked");
        }
    }
    tracing::info!(
        notification_id = %id, channel = %task.channel,
        destination = %klaxon_channels::redact_endpoint(task.channel, &task.endpoint),
        send_at = %send_at_text(send_at), "direct notification queued"
    );
    Ok(json_response(
        StatusCode::ACCEPTED,
        &json!({"notificationId": id, "sendAt": send_at_text(send_at)}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_800_000_000_000;

    fn ok(body: Value) -> DirectRequest {
        parse(&body, NOW, false).unwrap_or_else(|e| panic!("{body}: {e}"))
    }

    fn err(body: Value) -> String {
        parse(&body, NOW, false).expect_err(&body.to_string())
    }

    #[test]
    fn accepts_each_channel() {
        for (channel, endpoint) in [
            ("slack", "https://hooks.slack.com/services/T/B/x"),
            ("webhook", "https://example.com/hook"),
            ("loop", "https://loop.example/hooks/x"),
            ("telegram", "-1001234567890"),
            ("telegram", "@my_channel"),
            ("telegram", "https://notify.bot.codex.so/u/abc"),
            ("email", "ops@example.com, dev@example.org"),
            ("discord", "https://discord.com/api/webhooks/1/t"),
            ("teams", "https://prod.logic.azure.com/workflows/x"),
            ("pagerduty", "r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE"),
        ] {
            let r = ok(json!({"channel": channel, "endpoint": endpoint, "title": "Deploy"}));
            assert_eq!(r.channel.as_str(), channel);
            assert_eq!(r.send_at_ms, None);
        }
        let e = err(json!({"channel": "pagerduty", "endpoint": "https://x.example/k", "title": "Deploy"}));
        assert!(e.contains("routing key"), "{e}");
        let e =
            err(json!({"channel": "discord", "endpoint": "http://127.0.0.1/api/webhooks/1/t", "title": "D"}));
        assert!(e.contains("loopback"), "{e}");
    }

    #[test]
    fn refuses_bad_input_with_the_reason() {
        let base = |extra: Value| {
            let mut b = json!({"channel": "webhook", "endpoint": "https://example.com/h", "title": "T"});
            for (k, v) in extra.as_object().expect("object") {
                b[k] = v.clone();
            }
            b
        };
        for (body, want) in [
            (json!([1]), "must be an object"),
            (json!({"endpoint": "x", "title": "t"}), "`channel` is required"),
            (base(json!({"channel": "pager"})), "unknown channel `pager`"),
            (base(json!({"channel": 3})), "`channel` must be a string"),
            (base(json!({"endpoint": ""})), "`endpoint` is required"),
            (base(json!({"title": "  "})), "`title` is required"),
            (base(json!({"endpoint": "ftp://example.com/x"})), "http(s) URL"),
            (
                base(json!({"endpoint": "http://127.0.0.1:9/h"})),
                "loopback address; refused",
            ),
            (
                base(json!({"endpoint": "http://localhost/h"})),
                "loopback address; refused",
            ),
            (base(json!({"endpoint": "http://10.0.0.7/h"})), "refused"),
            (base(json!({"endpoint": "http://[::1]/h"})), "refused"),
            // the whole IANA special-purpose registries, as for rules' deliveries (issue #22)
            (
                base(json!({"endpoint": "http://198.18.0.1/h"})),
                "benchmarking address; refused",
            ),
            (
                base(json!({"endpoint": "http://[64:ff9b:1::a00:1]/h"})),
                "local-use NAT64 address; refused",
            ),
            (
                base(json!({"endpoint": "http://192.0.0.170/h"})),
                "NAT64/DNS64 discovery address; refused",
            ),
            (
                base(json!({"channel": "telegram", "endpoint": "chat 12"})),
                "chat id",
            ),
            (
                base(json!({"channel": "email", "endpoint": "not-an-address"})),
                "is not one",
            ),
            (base(json!({"sendAt": "tomorrow"})), "RFC 3339"),
            (base(json!({"sendAt": "2099-01-01T00:00:00Z"})), "366 days"),
            (base(json!({"idempotencyKey": ""})), "1 to 256"),
            (base(json!({"idempotencyKey": "k".repeat(257)})), "1 to 256"),
            (
                base(json!({"title": "t".repeat(MAX_TITLE_CHARS + 1)})),
                "`title` is over",
            ),
            (
                base(json!({"text": "t".repeat(MAX_TEXT_CHARS + 1)})),
                "`text` is over",
            ),
            (base(json!({"projectId": "p1"})), "ObjectId"),
        ] {
            let e = err(body.clone());
            assert!(e.contains(want), "{body}: {e}");
        }
    }

    #[test]
    fn private_endpoints_pass_when_allowed() {
        let body = json!({"channel": "webhook", "endpoint": "http://127.0.0.1:9/h", "title": "T"});
        assert!(parse(&body, NOW, true).is_ok());
    }

    #[test]
    fn send_at_in_the_past_means_now() {
        let r = ok(
            json!({"channel": "slack", "endpoint": "https://h.example/x", "title": "T",
            "sendAt": "2020-01-01T00:00:00Z"}),
        );
        assert_eq!(r.send_at_ms, None);
        let later = NOW + 3_600_000;
        let r = ok(
            json!({"channel": "slack", "endpoint": "https://h.example/x", "title": "T",
            "sendAt": rfc3339_ms(later)}),
        );
        assert_eq!(r.send_at_ms, Some(later));
        let t = r.task("id".into(), NOW);
        assert_eq!(t.send_at_ms, Some(later));
        assert_eq!(t.reason, Reason::Direct);
        assert_eq!(t.rule_id, DIRECT_RULE_ID);
    }

    #[test]
    fn ids_come_from_the_key() {
        let with = ok(
            json!({"channel": "slack", "endpoint": "https://h.example/x", "title": "T", "idempotencyKey": "k1"}),
        );
        assert_eq!(
            with.notification_id(|| "fresh".into()),
            direct_notification_id("k1")
        );
        let without = ok(json!({"channel": "slack", "endpoint": "https://h.example/x", "title": "T"}));
        assert_eq!(without.notification_id(|| "fresh".into()), "fresh");
    }

    #[test]
    fn direct_email_recipients_are_bounded() {
        let limits = Limits::default();
        let list = |n: usize| (0..n).map(|i| format!("u{i}@x.io")).collect::<Vec<_>>().join(",");
        assert!(check_direct_recipients(ChannelKind::Email, &list(50), &limits).is_ok());
        let err = check_direct_recipients(ChannelKind::Email, &list(51), &limits).expect_err("51");
        assert!(err.contains("51 email recipients, over the limit of 50"), "{err}");
        assert!(check_direct_recipients(ChannelKind::Webhook, &list(51), &limits).is_ok());
    }
}
