//! Signed action links in messages (`--public-url` + `KLAXON_ACTION_KEY`; README, "Action links").
//!
//! A message about one group carries four links, in this order: "Mute this error for 1 h", "… for 24 h",
//! "Mute this rule for 1 h" and "Why did this fire?". A digest (several groups) carries only "Mute this rule for
//! 1 h": four links per group would bury the list, and muting the rule is what a flood of groups calls for.
//! Direct notifications (`POST /api/v1/notifications`) have no rule and carry none. A firing that opened (or
//! repeats) an alert (`task.alert`) also carries "Acknowledge this alert" and "Resolve this alert" after those:
//! their claims name the alert id. A reminder or an escalation step of an alert carries only those two: it goes
//! to the person being paged, who is there to take the alert, not to mute or explain its rule. The resolved and
//! acknowledged messages carry none.
//!
//! Each link is `<public URL>/a/<token>` ([`klaxon_core::action`]); it expires [`LINK_TTL_S`] after the
//! firing (not after the send), so every retry of a notification carries the same links. Opening one shows a
//! confirmation page on the console; nothing changes before the visitor confirms.

use klaxon_core::action::{Action, ActionKey, Claim, Fired, LINK_TTL_S};
use klaxon_core::{NotificationTask, Reason};
use serde::Serialize;
use url::Url;

use crate::ChannelError;

/// Longest `--public-url` accepted.
pub const MAX_PUBLIC_URL_LEN: usize = 512;

/// One link of a message, for every channel to render its own way (buttons, links, a JSON array).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionLink {
    /// `mute-group-1h`, `mute-group-24h`, `mute-rule-1h`, `explain`, and for a firing of an alert `ack` and
    /// `resolve`.
    pub action: &'static str,
    /// The words shown ("Mute this error for 1 h").
    pub label: &'static str,
    /// `<public URL>/a/<token>`.
    pub url: String,
    /// When the link stops working (RFC 3339).
    pub expires_at: String,
}

/// `--public-url`, validated: an http(s) URL with a host, no query or fragment, at most
/// [`MAX_PUBLIC_URL_LEN`] characters. Kept without its trailing `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl {
    base: String,
    host: String,
}

impl PublicUrl {
    /// Validates `--public-url`.
    pub fn parse(s: &str) -> Result<Self, ChannelError> {
        let invalid = |reason: &str| ChannelError::InvalidConfig {
            setting: "public_url",
            reason: reason.to_owned(),
        };
        let s = s.trim();
        if s.len() > MAX_PUBLIC_URL_LEN {
            return Err(invalid("longer than 512 characters"));
        }
        let url = Url::parse(s).map_err(|e| invalid(&format!("not a URL ({e})")))?;
        let Some(host) = url.host_str() else {
            return Err(invalid("must be an http(s) URL with a host"));
        };
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid("must be an http(s) URL with a host"));
        }
        if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
            return Err(invalid(
                "must have no query, fragment or user name (links are <URL>/a/<token>)",
            ));
        }
        Ok(PublicUrl {
            base: url.as_str().trim_end_matches('/').to_owned(),
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_ascii_lowercase(),
        })
    }

    /// The URL without its trailing `/`.
    pub fn as_str(&self) -> &str {
        &self.base
    }

    /// Its host name (or address), lowercase: the console accepts it in `Host`.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The console's page of a token: `<URL>/a/<token>`.
    pub fn action_url(&self, token: &str) -> String {
        format!("{}/a/{token}", self.base)
    }
}

/// What signs the links of messages: the public URL and the key.
#[derive(Debug, Clone)]
pub struct ActionLinks {
    url: PublicUrl,
    key: ActionKey,
}

impl ActionLinks {
    /// Links under `url`, signed with `key`.
    pub fn new(url: PublicUrl, key: ActionKey) -> Self {
        ActionLinks { url, key }
    }

    /// The links a message of `task` carries (see the module docs for which), each signed to expire
    /// [`LINK_TTL_S`] after the firing. Empty for direct notifications and for ids that are not ObjectIds.
    pub fn for_task(&self, task: &NotificationTask) -> Vec<ActionLink> {
        let actions: &[Action] = match task.reason {
            // an alert's resolve, acknowledgement, reminders and escalations: about the alert, not a firing to
            // explain or mute (reminders and steps get the alert's links below)
            Reason::Direct => &[],
            r if r.is_lifecycle() => &[],
            _ if is_digest(task) => &[Action::MuteRule1h],
            _ => &Action::MESSAGE,
        };
        let first = task.events.first();
        let fired_at_s = task.fired_at_ms.div_euclid(1000);
        let expires_at =
            klaxon_core::notification::rfc3339_ms(fired_at_s.saturating_add(LINK_TTL_S).saturating_mul(1000));
        let mut links: Vec<ActionLink> = actions
            .iter()
            .filter_map(|&action| {
                let claim = Claim::for_message(
                    action,
                    &task.project_id,
                    &task.rule_id,
                    first.map(|e| e.group_hash.as_str()),
                    first.map(|e| e.title.as_str()),
                    fired_at_s,
                )?;
                // "Why did this fire?" shows this firing's numbers, then what the rule would do now.
                let fired = first.map(|e| Fired {
                    at_ms: task.fired_at_ms,
                    count: e.count,
                    reason: task.reason,
                });
                let token = match fired {
                    Some(f) if action == Action::Explain => self
                        .key
                        .sign(&claim.clone().with_fired(f))
                        .or_else(|_| self.key.sign(&claim))
                        .ok()?,
                    _ => self.key.sign(&claim).ok()?,
                };
                Some(ActionLink {
                    action: action.as_str(),
                    label: action.label(),
                    url: self.url.action_url(&token),
                    expires_at: expires_at.clone(),
                })
            })
            .collect();
        // A firing, a reminder or an escalation step of an alert: acknowledge and resolve it.
        if let Some(alert) = task.alert.as_ref().filter(|_| takes_alert_links(task)) {
            links.extend(Action::ALERT.iter().filter_map(|&action| {
                let claim = Claim::for_alert(
                    action,
                    &task.project_id,
                    &task.rule_id,
                    &alert.id,
                    first.map(|e| e.title.as_str()),
                    fired_at_s,
                )?;
                let token = self.key.sign(&claim).ok()?;
                Some(ActionLink {
                    action: action.as_str(),
                    label: action.label(),
                    url: self.url.action_url(&token),
                    expires_at: expires_at.clone(),
                })
            }));
        }
        links
    }
}

/// True when a task's message asks someone to take its alert: a firing (not a direct notification, not a
/// message of an alert's life), a reminder or an escalation step. Not the resolved and acknowledged messages:
/// there is nothing left to take.
fn takes_alert_links(task: &NotificationTask) -> bool {
    match task.reason {
        Reason::Direct | Reason::Resolved | Reason::Acknowledged => false,
        Reason::Reminder { .. } | Reason::Escalation { .. } => true,
        r => !r.is_lifecycle(),
    }
}

/// True when a task's message lists several groups (the templates' "digest" kind).
pub(crate) fn is_digest(task: &NotificationTask) -> bool {
    !matches!(task.reason, Reason::Direct)
        && (matches!(task.reason, Reason::Digest { .. } | Reason::QuietHours { .. }) || task.events.len() > 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaxon_core::NotificationEvent;

    fn links() -> ActionLinks {
        ActionLinks::new(
            PublicUrl::parse("https://klaxon.example.com/").expect("url"),
            ActionKey::new("0123456789abcdef0123456789abcdef").expect("key"),
        )
    }

    fn task(reason: Reason, groups: usize) -> NotificationTask {
        NotificationTask {
            notification_id: "n".into(),
            project_id: "5e3eef0679fa3700a0198a49".into(),
            project_name: None,
            rule_id: "5e3eef0679fa3700a0198a4a".into(),
            channel: klaxon_core::ChannelKind::Webhook,
            endpoint: "https://x.test/".into(),
            min_period_s: 0,
            severity: None,
            fired_at_ms: 1_700_000_000_123,
            reason,
            events: (0..groups)
                .map(|i| NotificationEvent {
                    group_hash: format!("g{i}"),
                    title: format!("T{i}"),
                    count: 1,
                    repetition_id: None,
                    open_for_ms: None,
                    silence_period_ms: None,
                    alert_id: None,
                })
                .collect(),
            text: None,
            send_at_ms: None,
            alert: None,
        }
    }

    #[test]
    fn which_links_each_message_gets() {
        let l = links();
        let one = l.for_task(&task(Reason::New, 1));
        let names: Vec<&str> = one.iter().map(|a| a.action).collect();
        assert_eq!(
            names,
            ["mute-group-1h", "mute-group-24h", "mute-rule-1h", "explain"]
        );
        assert!(one
            .iter()
            .all(|a| a.url.starts_with("https://klaxon.example.com/a/v1.")));
        assert_eq!(
            one[0].expires_at, "2023-11-21T22:13:20Z",
            "7 days after the firing"
        );
        let digest = l.for_task(&task(
            Reason::Digest {
                min_period_s: 60,
                resolved: 0,
                more: Default::default(),
            },
            3,
        ));
        assert_eq!(
            digest.iter().map(|a| a.action).collect::<Vec<_>>(),
            ["mute-rule-1h"]
        );
        assert!(l.for_task(&task(Reason::Direct, 1)).is_empty());
        let mut test = task(Reason::New, 1);
        test.rule_id = "not-an-id".into();
        assert!(l.for_task(&test).is_empty());
        // the same task, the same links (every retry)
        assert_eq!(one, l.for_task(&task(Reason::New, 1)));
    }

    #[test]
    fn a_firing_of_an_alert_also_links_to_ack_and_resolve_it() {
        use klaxon_core::alert::{AlertRef, AlertState};
        let l = links();
        let id = klaxon_core::alert::alert_id("p", "r", "g0", "1");
        let mut t = task(Reason::New, 1);
        t.alert = Some(AlertRef {
            id: id.clone(),
            state: AlertState::Firing,
            opened_at_ms: t.fired_at_ms,
            events: 1,
            by: None,
            firing_notification_id: "n".into(),
        });
        let all = l.for_task(&t);
        assert_eq!(
            all.iter().map(|a| a.action).collect::<Vec<_>>(),
            [
                "mute-group-1h",
                "mute-group-24h",
                "mute-rule-1h",
                "explain",
                "ack",
                "resolve"
            ]
        );
        // the first four are the links of the same task without an alert, byte for byte
        assert_eq!(all[..4], l.for_task(&task(Reason::New, 1))[..]);
        let key = ActionKey::new("0123456789abcdef0123456789abcdef").expect("key");
        for link in &all[4..] {
            let token = link.url.rsplit('/').next().expect("token");
            let claim = key.verify(token, 1_700_000_000).expect("valid");
            assert_eq!(claim.alert_id.as_deref(), Some(id.as_str()));
            assert_eq!(claim.action.as_str(), link.action);
        }
        // the resolved and acknowledged messages carry no links; reminders and escalation steps carry the
        // alert's two, the same as the firing's (same claim, same expiry: 7 days after the task's time)
        for (reason, want) in [
            (Reason::Resolved, &[][..]),
            (Reason::Acknowledged, &[][..]),
            (Reason::Reminder { number: 1, max: 3 }, &["ack", "resolve"][..]),
            (Reason::Escalation { step: 2, steps: 2 }, &["ack", "resolve"][..]),
        ] {
            t.reason = reason;
            let got = l.for_task(&t);
            assert_eq!(
                got.iter().map(|a| a.action).collect::<Vec<_>>(),
                want,
                "{reason:?}"
            );
            if !want.is_empty() {
                assert_eq!(got[..], all[4..], "{reason:?}");
            }
        }
    }

    #[test]
    fn public_urls() {
        let u = PublicUrl::parse(" https://Klaxon.Example.com/ops/ ").expect("valid");
        assert_eq!(u.as_str(), "https://klaxon.example.com/ops");
        assert_eq!(u.host(), "klaxon.example.com");
        assert_eq!(u.action_url("t"), "https://klaxon.example.com/ops/a/t");
        assert_eq!(PublicUrl::parse("http://[::1]:9464").expect("v6").host(), "::1");
        for bad in [
            "klaxon.example.com",
            "ftp://x.test",
            "https://x.test/?a=1",
            "https://x.test/#f",
            "https://user@x.test",
        ] {
            assert!(PublicUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
