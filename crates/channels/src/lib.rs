//! Klaxon's delivery adapters: Slack, Telegram, email, signed webhooks, Loop, Discord, Microsoft Teams and
//! PagerDuty.
//!
//! ```text
//! NotificationTask ──Channels::deliver──▶ render (minijinja templates in templates/, escaped per channel)
//!                                      ──▶ slack.rs / telegram.rs / webhook.rs / mattermost.rs (loop) /
//!                                          discord.rs / teams.rs / pagerduty.rs ──▶ http_client.rs (one reqwest
//!                                          client)
//!                                      ──▶ email.rs ──▶ one pooled lettre SMTP transport
//!                  ◀── Ok(Delivered) | Err(DeliveryError::Transient{reason, retry_after} | Permanent{reason})
//! ```
//!
//! This crate only makes one attempt. The sender loop (`klaxon-engine`) owns retries, dead letters,
//! deduplication, rate limits and circuit breakers, and uses what this crate gives it for that:
//! the error class and `retry_after` ([`DeliveryError`]), a rate-limit key per destination
//! ([`Channels::destination_key`]), a breaker/bulkhead key per host ([`Channels::host_key`]) and a
//! loggable form of the endpoint ([`redact_endpoint`]).
//!
//! Safety: endpoints are user input. Unless `allow_private_endpoints` is set, HTTP deliveries to addresses the
//! IANA special-purpose registries mark not globally reachable (loopback, private, link-local, benchmarking,
//! multicast, …) are refused with a permanent error before any byte is sent, and the check is done on the very
//! addresses the client connects to (see [`safety`]). Redirects are never followed and proxies are not used.
//! Secrets — the bot token, the SMTP password, the webhook master keys, the per-endpoint webhook secrets derived
//! from them ([`webhook`]) and the endpoints themselves — are held in [`Secret`]/[`webhook::EndpointSecret`] or
//! redacted, and are scrubbed from every reason.
#![deny(missing_docs)]

pub mod action_links;
pub mod buttons;
mod discord;
mod email;
pub mod error;
mod http_client;
pub mod link;
mod mattermost;
mod pagerduty;
mod quiet;
pub mod render;
pub mod safety;
mod secret;
mod slack;
mod slack_api;
mod teams;
mod telegram;
pub mod webhook;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use klaxon_core::{ChannelKind, NotificationEvent, NotificationTask, Reason};
use lettre::message::Mailbox;
use lettre::{AsyncSmtpTransport, Tokio1Executor};
use url::Url;

pub use action_links::{ActionLink, ActionLinks, PublicUrl};
pub use discord::{DISCORD_DESCRIPTION_MAX, DISCORD_EMBEDS_MAX, DISCORD_TITLE_MAX, DISCORD_TOTAL_MAX};
pub use email::{message_id as email_message_id, replies_to as email_replies_to, MAX_SUBJECT_CHARS};
pub use error::{ChannelError, DeliveryError};
pub use link::UrlTemplate;
pub use mattermost::LOOP_TEXT_MAX;
pub use pagerduty::{trigger_key as pagerduty_trigger_key, PAGERDUTY_EVENT_MAX, PAGERDUTY_SUMMARY_MAX};
pub use render::MessageContext;
use secret::short_hash;
pub use secret::{redact_endpoint, Secret};
pub use slack::{SLACK_BLOCKS_MAX, SLACK_TEXT_MAX};
pub use teams::{ADAPTIVE_CARD, TEAMS_BODY_MAX};

/// Delivery settings, validated once by [`Channels::new`]. `Debug` shows no secret.
#[derive(Debug, Clone)]
pub struct ChannelsConfig {
    /// Telegram Bot API base URL (`--telegram-api`).
    pub telegram_api: String,
    /// PagerDuty Events API base URL (`--pagerduty-api`): events are POSTed to `<it>/v2/enqueue`.
    pub pagerduty_api: String,
    /// Telegram bot token (`KLAXON_TELEGRAM_BOT_TOKEN`); without it, chat-id deliveries fail permanently.
    pub telegram_bot_token: Option<Secret>,
    /// Slack Web API base URL (`--slack-api`): messages to a channel id go to `<it>/chat.postMessage`.
    pub slack_api: String,
    /// Slack bot token (`KLAXON_SLACK_BOT_TOKEN`, `xoxb-…`); without it, channel-id deliveries fail permanently.
    pub slack_bot_token: Option<Secret>,
    /// SMTP server URL (`--smtp-url`), see the forms in the `email` module docs: `smtp://host:port`,
    /// `smtp://host:port?tls=starttls`, `smtps://user:pass@host:port`.
    pub smtp_url: Secret,
    /// The From address (`--smtp-from`).
    pub smtp_from: String,
    /// The master keys webhook secrets are derived from (`KLAXON_WEBHOOK_SECRET`, and
    /// `KLAXON_WEBHOOK_SECRET_PREVIOUS` during a rotation); `None`: webhooks go out unsigned.
    pub webhook_keys: Option<webhook::SigningKeys>,
    /// Allow endpoints on loopback/private/link-local addresses (`--allow-private-endpoints`).
    pub allow_private_endpoints: bool,
    /// TCP (and TLS) connect timeout.
    pub connect_timeout: Duration,
    /// Whole-request timeout for HTTP; per-command timeout for SMTP.
    pub request_timeout: Duration,
}

impl Default for ChannelsConfig {
    /// The defaults of the README's "Running" table: public Telegram, Slack and PagerDuty APIs, `smtp://127.0.0.1:25`,
    /// `klaxon@localhost`, private endpoints refused, 5 s connect and 10 s request timeouts.
    fn default() -> Self {
        ChannelsConfig {
            telegram_api: "https://api.telegram.org".into(),
            pagerduty_api: "https://events.pagerduty.com".into(),
            telegram_bot_token: None,
            slack_api: "https://slack.com/api".into(),
            slack_bot_token: None,
            smtp_url: Secret::new("smtp://127.0.0.1:25"),
            smtp_from: "klaxon@localhost".into(),
            webhook_keys: None,
            allow_private_endpoints: false,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
        }
    }
}

/// What a delivery would send, rendered but not sent (golden tests, previews).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    /// The email subject (email only).
    pub subject: Option<String>,
    /// Every body that would be sent, in order: the JSON request for Slack, Loop, webhooks, Discord, Teams and
    /// PagerDuty, one request per part for Telegram, the text and then the HTML part for email.
    pub bodies: Vec<String>,
}

/// A successful delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// Messages sent: more than 1 when a long Telegram message was split.
    pub messages: usize,
    /// The message an alert's first firing on a channel that keeps conversations sent
    /// ([`Channels::opens_conversation`]), for the sender to remember; None otherwise, or when the answer did
    /// not name it.
    pub sent: Option<MessageRef>,
    /// What became of the edit of the firing message, for a lifecycle message delivered in a conversation
    /// ([`Channels::deliver_in`]); None when nothing was edited or tried.
    pub edit: Option<Edit>,
}

impl Delivered {
    /// `n` messages sent, nothing remembered or edited.
    pub fn messages(n: usize) -> Self {
        Delivered {
            messages: n,
            sent: None,
            edit: None,
        }
    }
}

/// The firing message of an alert on a channel that can edit and reply (Discord webhooks, the Telegram Bot API):
/// what the sender remembers after the firing and hands back with the alert's lifecycle messages. It holds no
/// secret: the destination is [`Channels::destination_key`] (hashed), the body is the message as the channel
/// showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageRef {
    /// The message id the channel answered (Discord's snowflake, Telegram's `message_id`).
    pub message_id: String,
    /// [`Channels::destination_key`] of the firing's task: a lifecycle message to another destination (an
    /// escalation's own chat) is not put in this conversation.
    pub destination: String,
    /// The firing message as sent (Discord: the request's JSON; Telegram: the first part's HTML), what an edit
    /// starts from; None when it was too large to keep.
    pub body: Option<String>,
}

/// The outcome of editing an alert's firing message to show its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edit {
    /// The firing message now shows the alert's state.
    Edited,
    /// The edit failed (message deleted, 400/404, …): the lifecycle message was sent all the same.
    Failed,
}

impl Edit {
    /// The metric label: `edited` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Edit::Edited => "edited",
            Edit::Failed => "failed",
        }
    }
}

struct Inner {
    cfg: ChannelsConfig,
    telegram_api: Url,
    slack_api: Url,
    pagerduty_api: Url,
    from: Mailbox,
    http: http_client::Http,
    smtp: AsyncSmtpTransport<Tokio1Executor>,
    renderer: render::Renderer,
}

/// The delivery adapters. Cheap to clone: clones share one HTTP client (and its connection pool), one pooled
/// SMTP transport and the compiled templates.
#[derive(Clone)]
pub struct Channels {
    inner: Arc<Inner>,
    links: Option<Arc<UrlTemplate>>,
    actions: Option<Arc<ActionLinks>>,
    buttons: buttons::Buttons,
}

impl std::fmt::Debug for Channels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channels")
            .field("cfg", &self.inner.cfg)
            .finish_non_exhaustive()
    }
}

impl Channels {
    /// Validates the configuration and builds the clients. Nothing connects yet. Call it inside a Tokio
    /// runtime (the SMTP pool runs a task on it).
    pub fn new(cfg: ChannelsConfig) -> Result<Self, ChannelError> {
        let invalid = |setting: &'static str, reason: String| ChannelError::InvalidConfig { setting, reason };
        let telegram_api =
            Url::parse(cfg.telegram_api.trim()).map_err(|e| invalid("telegram_api", e.to_string()))?;
        if !matches!(telegram_api.scheme(), "http" | "https") || telegram_api.host_str().is_none() {
            return Err(invalid(
                "telegram_api",
                "must be an http(s) URL with a host".into(),
            ));
        }
        let slack_api = Url::parse(cfg.slack_api.trim()).map_err(|e| invalid("slack_api", e.to_string()))?;
        if !matches!(slack_api.scheme(), "http" | "https") || slack_api.host_str().is_none() {
            return Err(invalid("slack_api", "must be an http(s) URL with a host".into()));
        }
        let pagerduty_api =
            Url::parse(cfg.pagerduty_api.trim()).map_err(|e| invalid("pagerduty_api", e.to_string()))?;
        if !matches!(pagerduty_api.scheme(), "http" | "https") || pagerduty_api.host_str().is_none() {
            return Err(invalid(
                "pagerduty_api",
                "must be an http(s) URL with a host".into(),
            ));
        }
        if cfg.connect_timeout.is_zero() || cfg.request_timeout.is_zero() {
            return Err(invalid("timeouts", "must be greater than zero".into()));
        }
        let from = email::parse_from(&cfg.smtp_from)?;
        let smtp = email::transport(&cfg.smtp_url, cfg.request_timeout)?;
        let http = http_client::Http::new(
            cfg.allow_private_endpoints,
            cfg.connect_timeout,
            cfg.request_timeout,
        )
        .map_err(|e| invalid("http client", e.without_url().to_string()))?;
        let renderer = render::Renderer::new().map_err(|e| invalid("templates", e.to_string()))?;
        Ok(Channels {
            inner: Arc::new(Inner {
                cfg,
                telegram_api,
                slack_api,
                pagerduty_api,
                from,
                http,
                smtp,
                renderer,
            }),
            links: None,
            actions: None,
            buttons: buttons::Buttons::default(),
        })
    }

    /// Adds a link to the event to every message (`--event-url-template`, see [`link`]). The template is
    /// validated here; an empty one means no links.
    pub fn with_event_url_template(mut self, template: &str) -> Result<Self, ChannelError> {
        self.links = if template.trim().is_empty() {
            None
        } else {
            Some(Arc::new(UrlTemplate::parse(template)?))
        };
        Ok(self)
    }

    /// Adds signed action links (mute, explain) to every message (`--public-url` + `KLAXON_ACTION_KEY`, see
    /// [`action_links`]); `None`: no action links.
    pub fn with_action_links(mut self, links: Option<ActionLinks>) -> Self {
        self.actions = links.map(Arc::new);
        self
    }

    /// Adds Acknowledge and Resolve buttons to the alerts' messages on the channels `buttons` names (see
    /// [`buttons`]): each when its inbound integration's secret is set.
    pub fn with_buttons(mut self, buttons: buttons::Buttons) -> Self {
        self.buttons = buttons;
        self
    }

    /// The action links a message of `task` carries (none without `--public-url` and a key).
    pub fn action_links(&self, task: &NotificationTask) -> Vec<ActionLink> {
        self.actions
            .as_deref()
            .map(|a| a.for_task(task))
            .unwrap_or_default()
    }

    /// What a message of `task` is rendered with: the project's name the task carries (the id is shown when it
    /// has none), the event links and the action links.
    fn context<'a>(&'a self, task: &'a NotificationTask, actions: &'a [ActionLink]) -> MessageContext<'a> {
        MessageContext {
            project_name: task.project_name.as_deref(),
            links: self.links.as_deref(),
            actions,
            // set by the channels whose messages carry buttons (Slack's Web API, Telegram's Bot API)
            buttons: false,
        }
    }

    /// Renders what [`Channels::deliver`] would send for `task`, without sending.
    pub fn preview(&self, task: &NotificationTask) -> Result<Preview, DeliveryError> {
        let actions = self.action_links(task);
        let ctx = self.context(task, &actions);
        let bodies = |bodies: Vec<String>| Preview {
            subject: None,
            bodies,
        };
        // Exhaustive: a channel added later does not compile until it renders here too.
        match task.channel {
            ChannelKind::Slack if !task.endpoint.contains("://") => Ok(bodies(vec![self
                .slack_api_body(task, ctx, task.endpoint.trim(), None)?
                .to_string()])),
            ChannelKind::Slack => Ok(bodies(vec![self.slack_body(task, ctx)?])),
            ChannelKind::Telegram => Ok(bodies(
                self.telegram_parts(task, ctx)?
                    .into_iter()
                    .enumerate()
                    .map(|(i, text)| self.telegram_request(task, i, &text).to_string())
                    .collect(),
            )),
            ChannelKind::Email => {
                let (subject, text, html) = self.email_parts(task, ctx)?;
                Ok(Preview {
                    subject: Some(subject),
                    bodies: vec![text, html],
                })
            }
            ChannelKind::Loop => Ok(bodies(vec![self.loop_body(task, ctx)?])),
            ChannelKind::Webhook => Ok(bodies(vec![String::from_utf8_lossy(
                &webhook::webhook_body_with(task, ctx),
            )
            .into_owned()])),
            ChannelKind::Discord => Ok(bodies(vec![self.discord_body(task, ctx)?])),
            ChannelKind::Teams => Ok(bodies(vec![self.teams_body(task, ctx)?])),
            ChannelKind::Pagerduty => Ok(bodies(vec![self.pagerduty_body(task, ctx)?])),
        }
    }

    /// True when `task`'s channel can keep an alert as one conversation: Discord webhooks, Telegram chats
    /// through the Bot API (not Hawk's notify-bot URLs) and Slack channels through the Web API (not incoming
    /// webhooks).
    pub fn keeps_conversation(task: &NotificationTask) -> bool {
        match task.channel {
            ChannelKind::Discord => true,
            ChannelKind::Telegram | ChannelKind::Slack => !task.endpoint.contains("://"),
            _ => false,
        }
    }

    /// True when delivering `task` starts an alert's conversation: the alert's first firing on a channel that
    /// keeps conversations (its notification id is the alert's `firingNotificationId`). Its
    /// [`Delivered::sent`] is then the message to remember.
    pub fn opens_conversation(task: &NotificationTask) -> bool {
        Self::keeps_conversation(task)
            && !task.reason.is_lifecycle()
            && task
                .alert
                .as_ref()
                .is_some_and(|a| a.firing_notification_id == task.notification_id)
    }

    /// Delivers one notification, one attempt. Logs the outcome with the redacted destination.
    pub async fn deliver(&self, task: &NotificationTask) -> Result<Delivered, DeliveryError> {
        self.deliver_in(task, None).await
    }

    /// [`Channels::deliver`], in the conversation of `firing` (the alert's firing message, see
    /// [`MessageRef`]) when `task` is a lifecycle message on a channel that keeps conversations: the firing
    /// message is first edited to show the alert's state, then the lifecycle message is sent (a reply on
    /// Telegram, a reply in the message's thread on Slack, a new message on Discord). An edit that fails never stops the lifecycle message. `firing` for
    /// another destination, or for any other task, is ignored.
    pub async fn deliver_in(
        &self,
        task: &NotificationTask,
        firing: Option<&MessageRef>,
    ) -> Result<Delivered, DeliveryError> {
        self.deliver_paced(task, firing, Duration::ZERO).await
    }

    /// True when `firing` is the conversation `task` is delivered in: a lifecycle message on a channel that
    /// keeps conversations, to the firing's own destination.
    fn in_conversation(task: &NotificationTask, firing: &MessageRef) -> bool {
        task.reason.is_lifecycle()
            && Self::keeps_conversation(task)
            && firing.destination == Self::destination_key(task)
    }

    /// How many requests delivering `task` in the conversation of `firing` sends to its destination before its
    /// message's parts: 2 when the firing message is edited first (a lifecycle message on Telegram, Slack's Web
    /// API or Discord whose firing message was kept), else 1. What a sender reserves under the destination's
    /// pace (`klaxon_engine::ratelimit`), so a conversation costs the paced budget what it sends.
    pub fn calls(task: &NotificationTask, firing: Option<&MessageRef>) -> u32 {
        let edits = firing.is_some_and(|f| Self::in_conversation(task, f) && f.body.is_some());
        1 + u32::from(edits)
    }

    /// [`Channels::deliver_in`], waiting `gap` between the edit of the firing message and the message (Telegram:
    /// each of the two Bot API calls then takes its own slot of the bot's pace, [`Channels::calls`]).
    pub async fn deliver_paced(
        &self,
        task: &NotificationTask,
        firing: Option<&MessageRef>,
        gap: Duration,
    ) -> Result<Delivered, DeliveryError> {
        let firing = firing.filter(|f| Self::in_conversation(task, f));
        let started = Instant::now();
        let actions = self.action_links(task);
        let ctx = self.context(task, &actions);
        let result = if task.events.is_empty() {
            Err(DeliveryError::permanent("notification has no events"))
        } else {
            match task.channel {
                // a Slack channel id: the Web API with the operator's bot token (`slack_api.rs`)
                ChannelKind::Slack if !task.endpoint.contains("://") => {
                    self.deliver_slack_api(task, ctx, firing).await
                }
                // Slack and Loop (Mattermost) incoming webhooks: one JSON POST to the endpoint, which explains a
                // failure in its body (Slack in short plain text, `invalid_payload`; Mattermost in JSON or text).
                ChannelKind::Slack => {
                    let body = || self.slack_body(task, ctx);
                    self.inner.http.post_json_to_endpoint(task, body).await
                }
                ChannelKind::Loop => {
                    let body = || self.loop_body(task, ctx);
                    self.inner.http.post_json_to_endpoint(task, body).await
                }
                ChannelKind::Telegram => self.deliver_telegram(task, ctx, firing, gap).await,
                ChannelKind::Email => self.deliver_email(task, ctx).await,
                ChannelKind::Webhook => self.deliver_webhook(task, ctx).await,
                ChannelKind::Discord => self.deliver_discord(task, ctx, firing).await,
                // a Workflows webhook: one JSON POST to the endpoint, classified like Slack's
                ChannelKind::Teams => {
                    let body = || self.teams_body(task, ctx);
                    self.inner.http.post_json_to_endpoint(task, body).await
                }
                ChannelKind::Pagerduty => self.deliver_pagerduty(task, ctx).await,
            }
        };
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match &result {
            Ok(d) => tracing::debug!(
                channel = task.channel.as_str(),
                notification_id = %klaxon_core::text::one_line(&task.notification_id, 256),
                destination = %redact_endpoint(task.channel, &task.endpoint),
                messages = d.messages,
                edit = d.edit.map(Edit::as_str),
                elapsed_ms,
                "notification delivered"
            ),
            Err(e) => tracing::info!(
                channel = task.channel.as_str(),
                notification_id = %klaxon_core::text::one_line(&task.notification_id, 256),
                destination = %redact_endpoint(task.channel, &task.endpoint),
                class = e.class(),
                reason = e.reason(),
                retry_after_ms = e.retry_after().map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                elapsed_ms,
                "notification delivery failed"
            ),
        }
        result
    }

    /// The rate-limit / dedup key of a task's destination, with the secret parts hashed:
    /// `telegram:chat:<hash>`, `telegram:<host>/<hash>` (notify-bot URL), `slack:channel:<hash>` (Web API),
    /// `slack:<host>/<hash>` (incoming webhook),
    /// `webhook:<host>/<hash>` (and likewise Loop, Discord, Teams), `pagerduty:<hash>` (the routing key),
    /// `email:<domain>[,<domain>…]`.
    pub fn destination_key(task: &NotificationTask) -> String {
        let endpoint = task.endpoint.trim();
        match task.channel {
            ChannelKind::Email => {
                let mut domains: Vec<String> = endpoint
                    .split(',')
                    .filter_map(|a| a.trim().trim_end_matches('>').rsplit_once('@'))
                    .map(|(_, d)| d.to_ascii_lowercase())
                    .collect();
                domains.sort();
                domains.dedup();
                format!("email:{}", domains.join(","))
            }
            ChannelKind::Telegram if !endpoint.contains("://") => {
                format!("telegram:chat:{}", short_hash(endpoint))
            }
            ChannelKind::Slack if !endpoint.contains("://") => {
                format!("slack:channel:{}", short_hash(endpoint))
            }
            ChannelKind::Pagerduty => format!("pagerduty:{}", short_hash(endpoint)),
            channel => match Url::parse(endpoint) {
                Ok(url) => format!(
                    "{}:{}/{}",
                    channel.as_str(),
                    url.host_str().unwrap_or(""),
                    short_hash(endpoint)
                ),
                Err(_) => format!("{}:invalid/{}", channel.as_str(), short_hash(endpoint)),
            },
        }
    }

    /// The breaker/bulkhead key of the host a task is delivered through: `host:<name>` for HTTP endpoints,
    /// `telegram-api` for Bot API deliveries (all chats share it), `slack-api` for Slack Web API deliveries (all
    /// channels share it), `pagerduty-api` for PagerDuty (every routing
    /// key goes through the one Events API), `smtp` for email (all go through the one SMTP server).
    pub fn host_key(task: &NotificationTask) -> String {
        let endpoint = task.endpoint.trim();
        match task.channel {
            ChannelKind::Email => "smtp".to_owned(),
            ChannelKind::Telegram if !endpoint.contains("://") => "telegram-api".to_owned(),
            ChannelKind::Slack if !endpoint.contains("://") => "slack-api".to_owned(),
            ChannelKind::Pagerduty => "pagerduty-api".to_owned(),
            _ => match Url::parse(endpoint) {
                Ok(url) => format!("host:{}", url.host_str().unwrap_or("").to_ascii_lowercase()),
                Err(_) => "host:invalid".to_owned(),
            },
        }
    }
}

/// The project id of a test notification when none is given: an ObjectId, as the webhook payload's schema says
/// (receivers may parse it), that no real project has.
pub const TEST_PROJECT_ID: &str = "000000000000000000000000";
/// The rule id of a test notification: an ObjectId no real rule has.
pub const TEST_RULE_ID: &str = "000000000000000000000000";

/// A "test notification" for `klaxon test-notify`: a new-error notification titled
/// `Klaxon test notification`, with a fresh id (`test-…`) so that deduplication never swallows it, for project
/// [`TEST_PROJECT_ID`].
pub fn test_task(channel: ChannelKind, endpoint: &str) -> NotificationTask {
    test_task_for(channel, endpoint, TEST_PROJECT_ID)
}

/// [`test_task`] for a given project (24-hex ObjectId; `klaxon test-notify --project`), so that a receiver
/// that routes by project can be tried with a real one.
pub fn test_task_for(channel: ChannelKind, endpoint: &str, project_id: &str) -> NotificationTask {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let fired_at_ms = i64::try_from(now.as_millis()).unwrap_or(i64::MAX);
    NotificationTask {
        notification_id: format!("test-{:x}", now.as_nanos()),
        project_id: project_id.to_ascii_lowercase(),
        project_name: None,
        rule_id: TEST_RULE_ID.into(),
        channel,
        endpoint: endpoint.to_owned(),
        min_period_s: 0,
        fired_at_ms,
        reason: Reason::New,
        events: vec![NotificationEvent {
            group_hash: "klaxon-test".into(),
            title: "Klaxon test notification".into(),
            count: 1,
            repetition_id: None,
            open_for_ms: None,
            silence_period_ms: None,
            alert_id: None,
        }],
        text: None,
        send_at_ms: None,
        alert: None,
        severity: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_hide_secrets() {
        let table = [
            (
                ChannelKind::Slack,
                "https://hooks.slack.com/services/T/B/SECRET",
                "slack:hooks.slack.com/",
                "host:hooks.slack.com",
            ),
            (
                ChannelKind::Webhook,
                "https://Example.com/h?t=SECRET",
                "webhook:example.com/",
                "host:example.com",
            ),
            (
                ChannelKind::Telegram,
                "-100SECRET",
                "telegram:chat:",
                "telegram-api",
            ),
            (
                ChannelKind::Telegram,
                "https://notify.bot.codex.so/u/SECRET",
                "telegram:notify.bot.codex.so/",
                "host:notify.bot.codex.so",
            ),
            (
                ChannelKind::Email,
                "SECRET@B.test, x@a.test",
                "email:a.test,b.test",
                "smtp",
            ),
            (
                ChannelKind::Pagerduty,
                "SECRETr3FPuDvNOTEDyQYCc7trBkym",
                "pagerduty:",
                "pagerduty-api",
            ),
            (
                ChannelKind::Discord,
                "https://discord.com/api/webhooks/1/SECRET",
                "discord:discord.com/",
                "host:discord.com",
            ),
            (ChannelKind::Slack, "C0SECRET1", "slack:channel:", "slack-api"),
        ];
        for (channel, endpoint, key_prefix, host) in table {
            let t = test_task(channel, endpoint);
            let key = Channels::destination_key(&t);
            assert!(key.starts_with(key_prefix), "{key}");
            assert!(!key.contains("SECRET"), "{key}");
            assert_eq!(Channels::host_key(&t), host);
        }
        // different endpoints on one host are different destinations
        let a = Channels::destination_key(&test_task(ChannelKind::Slack, "https://hooks.slack.com/a"));
        let b = Channels::destination_key(&test_task(ChannelKind::Slack, "https://hooks.slack.com/b"));
        assert_ne!(a, b);
    }

    #[test]
    fn needs_a_runtime_and_says_so() {
        let err = Channels::new(ChannelsConfig::default()).expect_err("no runtime");
        assert!(err.to_string().contains("Tokio runtime"), "{err}");
    }

    #[tokio::test]
    async fn config_validation_and_debug() {
        let cfg = ChannelsConfig {
            telegram_bot_token: Some(Secret::new("123:TOKEN")),
            slack_bot_token: Some(Secret::new("xoxb-SLACKTOKEN")),
            smtp_url: Secret::new("smtps://user:PASSWORD@mail.example.com"),
            webhook_keys: webhook::SigningKeys::from_settings(
                Some(Secret::new("HMACKEY-0123456789abcdef0123456789abcdef")),
                Some(Secret::new("OLDHMACKEY")),
                Some(Secret::new("LEGACYHMACKEY")),
            )
            .expect("valid"),
            ..ChannelsConfig::default()
        };
        let channels = Channels::new(cfg.clone()).expect("valid");
        let debug = format!("{channels:?} {cfg:?}");
        for secret in [
            "TOKEN",
            "SLACKTOKEN",
            "PASSWORD",
            "HMACKEY",
            "OLDHMACKEY",
            "LEGACYHMACKEY",
        ] {
            assert!(!debug.contains(secret), "{debug}");
        }
        for bad in [
            ChannelsConfig {
                telegram_api: "ftp://x".into(),
                ..cfg.clone()
            },
            ChannelsConfig {
                smtp_from: "nobody".into(),
                ..cfg.clone()
            },
            ChannelsConfig {
                smtp_url: Secret::new("imap://user:PASSWORD@x"),
                ..cfg.clone()
            },
            ChannelsConfig {
                request_timeout: Duration::ZERO,
                ..cfg.clone()
            },
            ChannelsConfig {
                pagerduty_api: "events.pagerduty.com".into(),
                ..cfg.clone()
            },
            ChannelsConfig {
                slack_api: "slack.com/api".into(),
                ..cfg.clone()
            },
        ] {
            let err = Channels::new(bad).expect_err("invalid");
            assert!(!err.to_string().contains("PASSWORD"), "{err}");
        }
    }
}
