//! What every write path of tenant rules and mutes checks beyond validation (README, "Limits per project";
//! docs/rules.md): the per-project limits ([`klaxon_core::Limits`]: rules, mutes, email recipients) and the
//! endpoints that point to this machine or a private network.
//!
//! The API, the console and the CLI (`klaxon rules import|add`, `klaxon mute add`) all come here, so they
//! refuse and warn alike. Limits are refused whatever `force` says; a private endpoint is stored with a
//! warning (the senders refuse to deliver to it unless `--allow-private-endpoints`), and only names that need
//! no DNS are judged here (IP literals, `localhost`): a host name is resolved and checked at delivery.

use klaxon_core::rule::{Channels, Field};
use klaxon_core::{ChannelKind, Limits, RawRule, RuleProblem};
use klaxon_rules::format::document_to_json;
use klaxon_rules::ProjectNotifications;

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
    let why = crate::notifications::private_host(&host)?;
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

/// The refusal of a mute for a project that already has `active` of at most `limit` active mutes.
pub fn mutes_full(project_id: &str, active: u64, limit: usize) -> String {
    format!(
        "project {project_id} already has {active} active mutes, the limit is {limit} per project: remove one \
         (DELETE /api/v1/projects/{project_id}/mutes/{{muteId}}, `klaxon mute rm`), wait for one to end, or raise \
         --max-mutes-per-project (KLAXON_MAX_MUTES_PER_PROJECT)"
    )
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
        let projects = klaxon_rules::parse_import(&file.to_string()).expect("valid");
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
