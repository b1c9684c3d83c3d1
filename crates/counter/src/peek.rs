//! Reading what the counting scripts hold for a (rule, group) without counting: `explain` asks "what would
//! the next event do?" and must never change the answer. Plain read commands (GET, HMGET, ZCOUNT, ZCARD,
//! ZSCORE) in one pipeline after one `TIME` (per (rule, group) in a cluster, where a pipeline keeps to one
//! slot). The key layout is the one documented in each `lua/*.lua`; what the state means for the next hit is
//! the core's ([`klaxon_core::explain::counted`]), held to the scripts by `tests/explain.rs`.

use klaxon_core::explain::{Explanation, Peek, RuleVerdict};
use klaxon_core::mute::Mute;
use klaxon_core::{Want, Window};
use redis::Value;

use crate::hit::Hit;
use crate::script_io::{stored_number, stored_text};
use crate::{CounterError, WindowCounter};

fn field(v: &Value, i: usize) -> Option<i64> {
    match v {
        Value::Array(a) => a.get(i).and_then(stored_number),
        _ => None,
    }
}

impl WindowCounter {
    /// Reads the state of each hit's (rule, group) without counting (the hits' specs say which keys), at
    /// `now_ms` (`None`: the Redis server's `TIME`, the clock the scripts count on). The hit's user, when set,
    /// is looked up among a unique-users window's users.
    pub async fn peek(&self, hits: &[Hit], now_ms: Option<i64>) -> Result<Vec<Peek>, CounterError> {
        let now = match now_ms {
            Some(now) => now,
            None => self.server_time_ms().await?,
        };
        let cmds: Vec<Vec<redis::Cmd>> = hits.iter().map(|h| self.peek_cmds(h, now)).collect();
        let mut replies: Vec<Vec<Value>> = Vec::with_capacity(hits.len());
        if self.redis().is_cluster() {
            for c in &cmds {
                replies.push(self.query(c.iter()).await?);
            }
        } else {
            let mut all = self.query(cmds.iter().flatten()).await?.into_iter();
            for c in &cmds {
                replies.push(all.by_ref().take(c.len()).collect());
            }
        }
        Ok(hits
            .iter()
            .zip(replies)
            .map(|(h, r)| decode(h.spec, now, &r))
            .collect())
    }

    /// Finishes an explanation of an event of `project_id` with the state of its counting rules, read now
    /// on the Redis clock and never counted; `mutes` are the project's active ones.
    pub async fn explain(
        &self,
        project_id: &str,
        explanation: Explanation,
        mutes: &[Mute],
    ) -> Result<Vec<RuleVerdict>, CounterError> {
        let hits: Vec<Hit> = explanation
            .counting()
            .map(|(rule_id, want)| {
                let hit = Hit::new(rule_id, explanation.group_hash(), want).with_project(project_id);
                match (want, explanation.user()) {
                    (Want::UniqueUsers { .. }, Some(user)) => hit.with_user(user),
                    _ => hit,
                }
            })
            .collect();
        // one clock for every verdict, also for the rules that count nothing (their on-call state)
        let now = self.server_time_ms().await?;
        let peeks = if hits.is_empty() {
            Vec::new()
        } else {
            self.peek(&hits, Some(now)).await?
        };
        // NO_EVENTS rules: the project's last event, one HGET (none without such a rule)
        let silences = explanation.silences().to_vec();
        let last = if silences.is_empty() {
            None
        } else {
            crate::NoEvents::new(self.redis().clone(), self.namespace())
                .last_event(project_id)
                .await?
        };
        let mut verdicts = explanation.finish_at(&peeks, mutes, now);
        klaxon_core::explain::with_last_event(&mut verdicts, &silences, last);
        Ok(verdicts)
    }

    async fn query<'a>(
        &self,
        cmds: impl Iterator<Item = &'a redis::Cmd>,
    ) -> Result<Vec<Value>, CounterError> {
        let mut p = redis::pipe();
        for c in cmds {
            p.add_command(c.clone());
        }
        Ok(p.query_async(&mut self.redis().clone()).await?)
    }

    fn peek_cmds(&self, hit: &Hit, now: i64) -> Vec<redis::Cmd> {
        let keys = self.keys_of(hit);
        let key = |i: usize| keys.get(i).cloned().unwrap_or_default();
        let user = hit.user.as_deref().unwrap_or_default().to_owned();
        let trailing = |period: u64| {
            vec![
                redis::cmd("ZCOUNT")
                    .arg(key(0))
                    .arg(format!("({}", now - period as i64))
                    .arg("+inf")
                    .clone(),
                redis::cmd("HMGET").arg(key(1)).arg(&["a"]).clone(),
            ]
        };
        match hit.spec {
            Want::FirstSeen => vec![redis::cmd("GET").arg(key(0)).clone()],
            Want::Count {
                window: Window::Fixed,
                ..
            } => vec![redis::cmd("HMGET").arg(key(0)).arg(&["s", "c", "f"]).clone()],
            // The trailing window's members and the cooldown (events and users alike).
            Want::Count {
                period_ms,
                window: Window::Sliding,
                ..
            } => trailing(period_ms),
            Want::UniqueUsers {
                window: Window::Fixed,
                ..
            } => vec![
                redis::cmd("HMGET").arg(key(1)).arg(&["s", "f", "fc"]).clone(),
                redis::cmd("ZCARD").arg(key(0)).clone(),
                redis::cmd("ZSCORE").arg(key(0)).arg(user).clone(),
            ],
            Want::UniqueUsers {
                window: Window::Sliding,
                period_ms,
                ..
            } => {
                let mut cmds = trailing(period_ms);
                cmds.push(redis::cmd("ZSCORE").arg(key(0)).arg(user).clone());
                cmds
            }
            // The key's leading fields and its whole queue: explain is not the hot path, and reading the
            // queue lets the core compute the baseline at `now` without writing the script's pops.
            Want::Spike(sp) => {
                let mut fields: Vec<String> = ["k", "o", "b", "c", "f"].map(String::from).into();
                fields.extend((0..sp.baseline_windows).map(|i| i.to_string()));
                vec![redis::cmd("HMGET").arg(key(0)).arg(fields).clone()]
            }
            Want::Reappeared { .. } => vec![redis::cmd("HMGET").arg(key(0)).arg(&["l"]).clone()],
        }
    }
}

/// The `k` field `lua/spike.lua` writes: the rule's bucket and baseline, and the key's layout (`q`: a queue of
/// buckets and a running baseline sum). A key with another one is started afresh by the script.
fn spike_layout(sp: klaxon_core::Spike) -> String {
    format!("{}:{}:q", sp.period_ms, sp.baseline_windows)
}

fn decode(spec: Want, now: i64, r: &[Value]) -> Peek {
    let at = |i: usize| r.get(i).unwrap_or(&Value::Nil);
    let mut p = Peek {
        now_ms: now,
        ..Peek::default()
    };
    match spec {
        Want::FirstSeen => {
            p.fired_at = stored_text(at(0)).and_then(|v| v.split('|').next().and_then(|t| t.parse().ok()));
        }
        Want::Count {
            period_ms,
            window: Window::Fixed,
            ..
        } => {
            let start = field(at(0), 0);
            // A window that has ended but not expired yet is over: the next event starts a new one.
            if let Some(s) = start.filter(|s| now < s + period_ms as i64) {
                p.window_start = Some(s);
                p.count = field(at(0), 1).unwrap_or(0).max(0) as u64;
                p.fired_at = field(at(0), 2);
            }
        }
        Want::Count {
            period_ms,
            window: Window::Sliding,
            ..
        } => {
            p.count = stored_number(at(0)).unwrap_or(0).max(0) as u64;
            p.fired_at = field(at(1), 0).filter(|a| now < a + period_ms as i64);
        }
        Want::UniqueUsers {
            window: Window::Fixed,
            period_ms,
            ..
        } => {
            if let Some(s) = field(at(0), 0).filter(|s| now < s + period_ms as i64) {
                p.window_start = Some(s);
                p.fired_at = field(at(0), 1);
                p.count = match p.fired_at {
                    Some(_) => field(at(0), 2).unwrap_or(0).max(0) as u64,
                    None => stored_number(at(1)).unwrap_or(0).max(0) as u64,
                };
                p.user_known = !matches!(at(2), Value::Nil);
            }
        }
        Want::UniqueUsers {
            window: Window::Sliding,
            period_ms,
            ..
        } => {
            p.count = stored_number(at(0)).unwrap_or(0).max(0) as u64;
            p.fired_at = field(at(1), 0).filter(|a| now < a + period_ms as i64);
            p.user_known = stored_number(at(2)).is_some_and(|seen| seen > now - period_ms as i64);
        }
        Want::Spike(sp) => {
            let Value::Array(w) = at(0) else { return p };
            let text = |i: usize| w.get(i).and_then(stored_text);
            // no key, or one written for another bucket or baseline (which the script starts afresh): the next
            // hit is the group's first
            if text(0).is_none_or(|k| k != spike_layout(sp)) {
                return p;
            }
            let (Some(origin), Some(newest)) = (field(at(0), 1), field(at(0), 2)) else {
                return p;
            };
            let newest_count = field(at(0), 3).unwrap_or(0).max(0) as u64;
            // a clock behind the newest bucket counts in it, as the script does
            let cur = sp.bucket(now).max(newest);
            if newest == cur {
                p.count = newest_count;
            }
            // the firing: "<bucket>|<at>|…", of the current bucket only
            p.fired_at = text(4).and_then(|f| {
                let mut parts = f.split('|');
                let bucket: i64 = parts.next()?.parse().ok()?;
                (bucket == cur).then(|| parts.next()?.parse().ok())?
            });
            // the queue's entries ("<bucket>:<count>"; stale ones are older than any baseline they could
            // fall in) and the newest bucket, which joins the baseline once it is over
            let held: Vec<(i64, u64)> = (5..w.len())
                .filter_map(text)
                .filter_map(|v| {
                    let (b, c) = v.split_once(':')?;
                    Some((b.parse().ok()?, c.parse().ok()?))
                })
                .chain(std::iter::once((newest, newest_count)))
                .collect();
            (p.baseline_sum, p.baseline_buckets) = sp.baseline(origin, cur, held);
        }
        Want::Reappeared { .. } => {
            p.last_seen = field(at(0), 0);
        }
    }
    p
}
