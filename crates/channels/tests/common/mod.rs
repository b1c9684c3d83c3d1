//! Shared helpers for the channel tests.
#![allow(dead_code)] // each test binary uses a different subset

use std::time::Duration;

use klaxon_channels::webhook::SigningKeys;
use klaxon_channels::{Channels, ChannelsConfig, DeliveryError, Secret};
use klaxon_core::{ChannelKind, NotificationEvent, NotificationTask, Reason, Window};

/// Every secret the tests configure; none may ever show up in an error or a Debug output.
pub const TOKEN: &str = "987654:SECRETTOKENabc";
pub const HMAC_KEY: &str = "SECRETHMACkey-0123456789abcdef0123456789";
pub const SMTP_PASSWORD: &str = "SECRETSMTPpw";
pub const ENDPOINT_SECRET: &str = "SECRETPATHxyz";
pub const SLACK_TOKEN: &str = "xoxb-1-SECRETSLACKtoken";
pub const ALL_SECRETS: [&str; 5] = [TOKEN, HMAC_KEY, SMTP_PASSWORD, ENDPOINT_SECRET, SLACK_TOKEN];

/// A config for loopback sinks: private endpoints allowed, short timeouts.
pub fn config(telegram_api: &str) -> ChannelsConfig {
    ChannelsConfig {
        telegram_api: telegram_api.to_owned(),
        // the same local server plays PagerDuty (`/v2/enqueue`)
        pagerduty_api: telegram_api.to_owned(),
        telegram_bot_token: Some(Secret::new(TOKEN)),
        // the same local server plays the Slack Web API (`/chat.postMessage`, `/chat.update`)
        slack_api: telegram_api.to_owned(),
        slack_bot_token: Some(Secret::new(SLACK_TOKEN)),
        smtp_url: Secret::new(klaxon_testkit::smtp_url()),
        smtp_from: "klaxon-test@localhost".into(),
        webhook_keys: SigningKeys::from_settings(Some(Secret::new(HMAC_KEY)), None, None)
            .expect("valid keys"),
        allow_private_endpoints: true,
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
    }
}

pub fn channels(cfg: ChannelsConfig) -> Channels {
    Channels::new(cfg).expect("valid channels config")
}

pub fn task(
    channel: ChannelKind,
    endpoint: &str,
    reason: Reason,
    events: &[(&str, u64)],
) -> NotificationTask {
    let ns = klaxon_testkit::unique_namespace();
    NotificationTask {
        notification_id: format!("nid-{ns}"),
        project_id: format!("proj-{ns}"),
        project_name: None,
        rule_id: format!("rule-{ns}"),
        channel,
        endpoint: endpoint.to_owned(),
        min_period_s: 0,
        fired_at_ms: 1_700_000_000_123,
        reason,
        events: events
            .iter()
            .enumerate()
            .map(|(i, (title, count))| NotificationEvent {
                group_hash: format!("g{i}-{ns}"),
                title: (*title).to_owned(),
                count: *count,
                repetition_id: if i == 0 { Some(format!("rep-{ns}")) } else { None },
                open_for_ms: None,
                silence_period_ms: None,
                alert_id: None,
            })
            .collect(),
        text: None,
        send_at_ms: None,
        alert: None,
        severity: None,
    }
}

pub fn threshold() -> Reason {
    Reason::Threshold {
        threshold: 100,
        period_ms: 60_000,
        window: Window::Fixed,
    }
}

/// Fails the test if a secret shows in the error's reason, Display or Debug.
pub fn assert_secret_free(err: &DeliveryError) {
    let shown = format!("{} | {err} | {err:?}", err.reason());
    for secret in ALL_SECRETS {
        assert!(!shown.contains(secret), "secret leaked: {shown}");
    }
}

/// An alert as the counter stores it: opened by a firing 2 h 14 min before `at_ms` (1,240 events), in `state`,
/// `by` who acknowledged or resolved it, delivered on `channel` to `endpoint`.
pub fn alert(
    channel: ChannelKind,
    endpoint: &str,
    state: klaxon_core::alert::AlertState,
    by: Option<&str>,
) -> klaxon_core::alert::Alert {
    use klaxon_core::alert::{alert_id, Alert, AlertChannel, AlertState};
    let ns = klaxon_testkit::unique_namespace();
    let (project, rule, group, firing) = (
        format!("proj-{ns}"),
        format!("rule-{ns}"),
        format!("g0-{ns}"),
        "1700000000000".to_owned(),
    );
    let at_ms = 1_700_000_000_123_i64;
    let opened = at_ms - (2 * 3600 + 14 * 60) * 1000;
    Alert {
        id: alert_id(&project, &rule, &group, &firing),
        project_id: project,
        project_name: Some("Acme".into()),
        rule_id: rule,
        group,
        title: format!("TypeError {ns}"),
        state,
        firing,
        fired_at_ms: opened,
        acknowledged_at_ms: (state != AlertState::Firing).then_some(at_ms),
        acknowledged_by: (state == AlertState::Acknowledged).then(|| by.unwrap_or_default().to_owned()),
        resolved_at_ms: (state == AlertState::Resolved).then_some(at_ms),
        resolved_by: (state == AlertState::Resolved).then(|| by.unwrap_or_default().to_owned()),
        events: 1_240,
        last_event_at_ms: at_ms - 60_000,
        resolve_after_ms: 3_600_000,
        channels: vec![AlertChannel::of_rule(channel, endpoint, None)],
        heard: Vec::new(),
        closes: Vec::new(),
    }
}

/// The lifecycle task of `alert` on its first channel, at the alert's resolve time, as the engine makes it.
pub fn lifecycle_task(alert: &klaxon_core::alert::Alert, reason: Reason) -> NotificationTask {
    NotificationTask::for_alert(alert, &alert.channels[0], reason, 1_700_000_000_123)
}
