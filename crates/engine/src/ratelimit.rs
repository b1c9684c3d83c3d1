//! Fleet-wide rate limits per destination: the policy around GCRA in Redis ([`klaxon_counter::Gcra`],
//! `lua/gcra_reserve.lua`).
//!
//! A sender asks for a send slot before each attempt. A slot at most [`RateLimiter::max_sleep`] away is
//! *reserved* and the sender sleeps until it (short waits only, so a prefetch slot is never held long); a
//! slot further away reserves nothing and the task is delayed through the broker, then asks again. Because
//! every sender of the namespace reserves slots in the same Redis key on the Redis clock, the limit holds
//! across processes, and an over-limit task is delayed, never dropped.
//!
//! Every limit is shared fairly between the projects that use it (`lua/gcra_reserve.lua`): while other projects
//! wait for a destination — the Telegram bot above all, which every tenant's chats share — one project gets at
//! most its share of the rate and cannot reserve the slots another project's next message needs. And a task
//! reserves only as far ahead as its priority allows ([`klaxon_core::priority`]): a firing up to `max_sleep`, an
//! escalation step a quarter of it, a reminder a tenth, so a firing waits behind other firings' reservations and
//! at most a tenth of a second of reminders', never behind a backlog of reminders.
//!
//! Limits (messages per second, 0 = none) are per destination ([`klaxon_channels::Channels::destination_key`]):
//! Telegram 1/s per chat and 30/s per bot, Slack (and Loop, Discord, Teams) 1/s per webhook by default;
//! webhooks, PagerDuty routing keys and email are unlimited unless configured. Keys are `<ns>:{rl:<destination>}`.

use std::time::Duration;

use klaxon_channels::Channels;
use klaxon_core::priority::Priority;
use klaxon_core::{ChannelKind, NotificationTask};
use klaxon_counter::{Gcra, RedisHandle};

use crate::EngineError;

/// The answer to a slot request (re-exported: [`RateLimiter::acquire`] returns it).
pub use klaxon_counter::Slot;

/// Messages per second per destination kind; 0 (or less) means unlimited.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimits {
    /// Per Telegram chat (default 1).
    pub telegram_chat: f64,
    /// Per Telegram bot, i.e. all Bot API deliveries of this namespace (default 30).
    pub telegram_bot: f64,
    /// Per Slack webhook (default 1).
    pub slack: f64,
    /// Per webhook URL (default unlimited).
    pub webhook: f64,
    /// Per set of recipient domains (default unlimited).
    pub email: f64,
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits {
            telegram_chat: 1.0,
            telegram_bot: 30.0,
            slack: 1.0,
            webhook: 0.0,
            email: 0.0,
        }
    }
}

/// The key of the Telegram bot's limit: every tenant's Bot API chats share it, fleet-wide.
const TELEGRAM_BOT: &str = "telegram:bot";

/// A reservation for one delivery ([`RateLimiter::acquire_calls`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paced {
    /// The slot of its first request (or "later").
    pub slot: Slot,
    /// How long to wait between its requests (zero for one request): each takes its own slot of the bot's pace.
    pub gap: Duration,
}

/// One limit to check for a task: a Redis key suffix and a rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// `<destination key>` (no namespace).
    pub key: String,
    /// Messages per second (> 0).
    pub per_second: f64,
}

impl RateLimits {
    /// The limits that apply to `task`, most specific first. The destination's key is made only when its
    /// channel has a limit (webhooks and PagerDuty have none unless configured).
    pub fn limits_for(&self, task: &NotificationTask) -> Vec<Limit> {
        let on = |per_second: f64| per_second > 0.0 && per_second.is_finite();
        let mut out = Vec::with_capacity(2);
        let per_destination = match task.channel {
            ChannelKind::Telegram => self.telegram_chat,
            // Loop (Mattermost), Discord and Teams incoming webhooks are paced like Slack's (Discord documents
            // 5 requests per 2 s per webhook, Workflows throttle a flow's runs)
            ChannelKind::Slack | ChannelKind::Loop | ChannelKind::Discord | ChannelKind::Teams => self.slack,
            // PagerDuty routing keys like webhooks: unlimited unless configured (the Events API answers 429,
            // which is retried)
            ChannelKind::Webhook | ChannelKind::Pagerduty => self.webhook,
            ChannelKind::Email => self.email,
        };
        if on(per_destination) {
            out.push(Limit {
                key: Channels::destination_key(task),
                per_second: per_destination,
            });
        }
        // Bot API chats share the bot's global limit; notify-bot URLs do not use our bot.
        if task.channel == ChannelKind::Telegram
            && on(self.telegram_bot)
            && Channels::host_key(task) == "telegram-api"
        {
            out.push(Limit {
                key: TELEGRAM_BOT.to_owned(),
                per_second: self.telegram_bot,
            });
        }
        out
    }
}

/// Typed front of the rate limits: which GCRA reservations ([`klaxon_counter::Gcra`]) a task needs. Cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    gcra: Gcra,
    limits: RateLimits,
    max_sleep: Duration,
}

impl RateLimiter {
    /// A limiter with these limits; reservations at most `max_sleep` away are taken.
    pub fn new(redis: RedisHandle, namespace: &str, limits: RateLimits, max_sleep: Duration) -> Self {
        RateLimiter {
            gcra: Gcra::new(redis, namespace),
            limits,
            max_sleep,
        }
    }

    /// The longest in-process wait for a reserved slot.
    pub fn max_sleep(&self) -> Duration {
        self.max_sleep
    }

    /// Asks for a slot for `task` under every limit that applies, as far ahead as its priority may
    /// ([`Priority::horizon`]: a firing up to [`RateLimiter::max_sleep`], a reminder a tenth of it) and within
    /// its project's fair share of each limit. With two limits (Telegram chat and bot), a slot taken under the
    /// first is kept even when the second says "later": that costs the chat one slot, never a lost message.
    pub async fn acquire(&self, task: &NotificationTask) -> Result<Slot, EngineError> {
        Ok(self.acquire_calls(task, 1).await?.slot)
    }

    /// [`RateLimiter::acquire`] for a delivery that sends `calls` requests to the destination (a lifecycle
    /// message in an alert's conversation: the edit of the firing message, then the message; see
    /// `klaxon_channels::Channels::calls`). Every limit reserves `calls` consecutive slots and charges the
    /// project's share `calls` messages, so a conversation costs the bot what it sends. Under the Telegram bot's
    /// fleet-wide pace the requests are also spaced ([`Paced::gap`]: one interval, 33 ms at 30/s), so each takes
    /// its own slot; the chat's own pace (1/s) is charged but not spaced, which would hold the host's slot a
    /// second.
    pub async fn acquire_calls(&self, task: &NotificationTask, calls: u32) -> Result<Paced, EngineError> {
        let calls = calls.max(1);
        let horizon = Priority::of(&task.reason).horizon(self.max_sleep);
        let share = Some((task.project_id.as_str(), self.max_sleep));
        let mut wait = Duration::ZERO;
        let mut gap = Duration::ZERO;
        for limit in self.limits.limits_for(task) {
            match self
                .gcra
                .reserve_calls(&limit.key, share, limit.per_second, 1, calls, horizon, None)
                .await?
            {
                Slot::Reserved(w) => wait = wait.max(w),
                later @ Slot::Later(_) => {
                    return Ok(Paced {
                        slot: later,
                        gap: Duration::ZERO,
                    })
                }
            }
            if calls > 1 && limit.key == TELEGRAM_BOT {
                gap = gap.max(Gcra::interval(limit.per_second));
            }
        }
        Ok(Paced {
            slot: Slot::Reserved(wait),
            gap,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_per_channel() {
        let l = RateLimits::default();
        let chat = klaxon_channels::test_task(ChannelKind::Telegram, "-100123");
        let got = l.limits_for(&chat);
        assert_eq!(got.len(), 2);
        assert!(got[0].key.starts_with("telegram:chat:"));
        assert_eq!(
            got[1],
            Limit {
                key: "telegram:bot".into(),
                per_second: 30.0
            }
        );
        let bot_url = klaxon_channels::test_task(ChannelKind::Telegram, "https://notify.bot.codex.so/u/x");
        assert_eq!(l.limits_for(&bot_url).len(), 1);
        let slack = klaxon_channels::test_task(ChannelKind::Slack, "https://hooks.slack.com/services/x");
        assert_eq!(l.limits_for(&slack)[0].per_second, 1.0);
        let hook = klaxon_channels::test_task(ChannelKind::Webhook, "https://example.com/h");
        assert!(l.limits_for(&hook).is_empty());
        let email = klaxon_channels::test_task(ChannelKind::Email, "a@b.test");
        assert!(l.limits_for(&email).is_empty());
        let custom = RateLimits { webhook: 5.0, ..l };
        assert_eq!(custom.limits_for(&hook)[0].per_second, 5.0);
    }
}
