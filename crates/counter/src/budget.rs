//! [`Budgets`]: per-project budgets per hour in Redis (`lua/budget_take.lua`), today the reminders a project may
//! send in an hour (`--reminder-budget`).
//!
//! A unit is taken per notification id, once: a reminder that waits behind a paced channel and asks again takes
//! nothing more, so the budget counts reminders, not attempts. Hours are clock hours (`now_ms / 3,600,000`);
//! keys are `<ns>:{budget:<project>}:reminders:<hour>`, one per call (one cluster slot), expiring after their hour.

use std::sync::LazyLock;

use redis::Script;

use crate::script_io::key_part;
use crate::{CounterError, RedisHandle};

static TAKE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/budget_take.lua")));

const HOUR_MS: i64 = 3_600_000;

/// Typed front of `lua/budget_take.lua`. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Budgets {
    redis: RedisHandle,
    namespace: String,
}

impl Budgets {
    /// Budget keys under `<namespace>:{budget:…}`.
    pub fn new(redis: RedisHandle, namespace: &str) -> Self {
        Budgets {
            redis,
            namespace: namespace.to_owned(),
        }
    }

    /// Takes `project`'s reminder unit for `notification_id` in the hour of `now_ms`, out of `per_hour`: true
    /// when the reminder has its unit (now or before), false when the hour's budget is spent.
    pub async fn take_reminder(
        &self,
        project: &str,
        notification_id: &str,
        per_hour: u32,
        now_ms: i64,
    ) -> Result<bool, CounterError> {
        let hour = now_ms.div_euclid(HOUR_MS);
        let ttl_ms = (hour + 1) * HOUR_MS - now_ms + 60_000;
        let id: String = notification_id.chars().take(128).collect();
        let taken: i64 = TAKE
            .key(format!(
                "{}:{{budget:{}}}:reminders:{hour}",
                self.namespace,
                key_part(project)
            ))
            .arg(id)
            .arg(per_hour)
            .arg(ttl_ms.max(1))
            .invoke_async(&mut self.redis.clone())
            .await?;
        Ok(taken == 1)
    }
}
