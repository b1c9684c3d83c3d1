//! Held messages, listed: what quiet hours (`quietHours`) hold, as `klaxon deliveries list`,
//! `GET /api/v1/deliveries` and the console's deliveries page show it before its release ([`Digests::held`]).
//!
//! A hold lives under its channel's hash tag (`<ns>:{dg:<project>:<rule>:<channel>}:quiet:*`, see
//! [`crate::digest`]), so finding every hold would take a `SCAN` of the namespace. Instead one index lists them:
//!
//! | key | what |
//! |---|---|
//! | `<ns>:quiet:held` | zset `["<project>","<rule>","<channel>"]` → the hold's due time (unix ms, the quiet window's end) |
//!
//! * **Written** after a hold opens or moves (its script's answer says so: [`Digests::hold_all`]), a second
//!   command after the script, as `<ns>:al:projects` is for alerts (its own key: any node of a cluster). A failed
//!   write fails the hold's batch, which is redelivered and indexes again (the opener's redelivery answers the
//!   same). Members past their due time by more than the holds' safety net (7 days) are trimmed on each write.
//! * **Taken out** when the release is done ([`Digests::done_held`], `lua/held_forget.lua`: only while the
//!   index still lists it with that due time), or when a read finds the hold gone (claimed, expired).
//! * **Read** with a limit: the soonest members (`ZRANGE … WITHSCORES` by rank, in chunks, at most
//!   [`MAX_INDEX_READ`] members looked at), then for each one a pipeline on its own slot: the hold's due time
//!   and destination, its counters, its first groups (`HSCAN … COUNT`) and its first and last append. A hold
//!   is listed only while its `…:quiet:win` still has that due time: once claimed, its release is the
//!   delivery-trail record it becomes, under the same id ([`klaxon_core::notification::held_release_id`]).

use std::sync::LazyLock;

use klaxon_core::notification::held_release_id;
use klaxon_core::ChannelKind;
use redis::{Script, Value};
use serde::Deserialize;

use crate::digest::KEEP;
use crate::script_io::{ms, stored_number, stored_text};
use crate::{CounterError, DigestKey, Digests};

static FORGET: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/held_forget.lua")));

/// The most held messages one read lists.
pub const MAX_HELD_LISTED: usize = 1000;
/// The most index members one read looks at (a project's filter skips the others' holds).
pub const MAX_INDEX_READ: usize = 10_000;
/// Index members read per round trip.
const INDEX_CHUNK: usize = 500;
/// The most groups listed per held message (the counts say how many it holds).
pub const MAX_HELD_GROUPS_SHOWN: usize = 5;
/// `HSCAN`'s `COUNT` for a hold's groups: enough to find [`MAX_HELD_GROUPS_SHOWN`] past the counters.
const GROUPS_SCAN: usize = 16;
/// Holds read at once.
const READS_AT_ONCE: usize = 16;

/// One message a quiet window holds: the release it becomes, and what it lists so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldMessage {
    /// The release's notification id (the trail's record of it has the same).
    pub notification_id: String,
    /// The project.
    pub project_id: String,
    /// The rule.
    pub rule_id: String,
    /// The channel.
    pub channel: ChannelKind,
    /// The redacted destination (empty for a hold opened by an earlier version).
    pub destination: String,
    /// Held until then (unix ms): the quiet window's end, when it is released.
    pub until_ms: i64,
    /// When its first message was held (unix ms; `None` when not known).
    pub held_since_ms: Option<i64>,
    /// When its latest message was held (unix ms; `None` when not known).
    pub last_held_ms: Option<i64>,
    /// Groups held as fired (listed and counted past the list's bound).
    pub fired: u64,
    /// Groups held as resolved.
    pub resolved: u64,
    /// The first groups it lists (at most [`MAX_HELD_GROUPS_SHOWN`]): fired first, then resolved, each by count.
    pub groups: Vec<HeldGroup>,
}

/// One group a held message lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldGroup {
    /// The group hash.
    pub group: String,
    /// Its title (cut to 1 KiB when held).
    pub title: String,
    /// Its count.
    pub count: u64,
    /// Held as resolved (otherwise as fired).
    pub resolved: bool,
    /// The alert it is about (held by a version that kept it).
    pub alert_id: Option<String>,
}

/// An index member: the hold's (project, rule, channel).
fn member(key: &DigestKey<'_>) -> String {
    serde_json::json!([key.project_id, key.rule_id, key.channel.as_str()]).to_string()
}

/// A member read back; `None` when it is not one (never written by Klaxon).
fn parse_member(m: &str) -> Option<(String, String, ChannelKind)> {
    let [p, r, c]: [String; 3] = serde_json::from_str(m).ok()?;
    let channel = ChannelKind::ALL.into_iter().find(|k| k.as_str() == c)?;
    Some((p, r, channel))
}

/// A buffered entry's value (`digest_append.lua`).
#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    count: u64,
    #[serde(default)]
    title: String,
    #[serde(default, rename = "alertId")]
    alert_id: Option<String>,
}

/// The groups of an `HSCAN` page (`[cursor, [field, value, …]]`): entries only (not the `#` counters), fired
/// first, then by count, highest first, then by group; at most [`MAX_HELD_GROUPS_SHOWN`].
fn groups_of(page: &Value) -> Vec<HeldGroup> {
    let Value::Array(parts) = page else {
        return Vec::new();
    };
    let Some(Value::Array(flat)) = parts.get(1) else {
        return Vec::new();
    };
    let mut out: Vec<HeldGroup> = flat
        .chunks_exact(2)
        .filter_map(|fv| {
            let field = stored_text(&fv[0])?;
            if field.starts_with('#') {
                return None;
            }
            let (resolved, group) = match field.split_once(':') {
                Some(("r", g)) => (true, g.to_owned()),
                Some(("f", g)) => (false, g.to_owned()),
                // a bare group: buffered by an earlier version, a firing
                _ => (false, field.clone()),
            };
            let entry: Entry = serde_json::from_str(&stored_text(&fv[1])?).ok()?;
            Some(HeldGroup {
                group,
                title: entry.title,
                count: entry.count,
                resolved,
                alert_id: entry.alert_id,
            })
        })
        .collect();
    out.sort_by(|a, b| {
        a.resolved
            .cmp(&b.resolved)
            .then(b.count.cmp(&a.count))
            .then_with(|| a.group.cmp(&b.group))
    });
    out.truncate(MAX_HELD_GROUPS_SHOWN);
    out
}

/// The score of a one-member `ZRANGE … WITHSCORES` reply (RESP2: `[member, score]`; RESP3: `[[member, score]]`).
fn only_score(v: &Value) -> Option<i64> {
    match v {
        Value::Array(items) => match items.as_slice() {
            [Value::Array(pair)] => pair.get(1).and_then(stored_number),
            [_, score] => stored_number(score),
            _ => None,
        },
        _ => None,
    }
}

/// Item `i` of an `HMGET` reply.
fn field(v: &Value, i: usize) -> Option<&Value> {
    match v {
        Value::Array(items) => items.get(i),
        _ => None,
    }
}

impl Digests {
    /// `<ns>:quiet:held`: the index of held messages.
    fn held_index_key(&self) -> String {
        format!("{}:quiet:held", self.namespace())
    }

    /// Indexes the holds that opened or moved (`(key, due ms, now ms on the Redis clock)`), and trims members
    /// overdue by more than the holds' safety net.
    pub(crate) async fn index_holds(&self, opened: &[(DigestKey<'_>, i64, i64)]) -> Result<(), CounterError> {
        let Some(now) = opened.iter().map(|(_, _, now)| *now).max() else {
            return Ok(());
        };
        let key = self.held_index_key();
        let mut pipe = redis::pipe();
        for (k, until, _) in opened {
            pipe.cmd("ZADD").arg(&key).arg(*until).arg(member(k)).ignore();
        }
        let keep = i64::try_from(ms(KEEP)).unwrap_or(i64::MAX);
        pipe.cmd("ZREMRANGEBYSCORE")
            .arg(&key)
            .arg("-inf")
            .arg(format!("({}", now.saturating_sub(keep)))
            .ignore();
        let () = pipe.query_async(&mut self.redis().clone()).await?;
        Ok(())
    }

    /// Takes the hold of `key` due at `until_ms` out of the index (`lua/held_forget.lua`: not a later hold).
    pub(crate) async fn unindex_hold(&self, key: &DigestKey<'_>, until_ms: i64) -> Result<(), CounterError> {
        let _: i64 = FORGET
            .key(self.held_index_key())
            .arg(member(key))
            .arg(until_ms)
            .invoke_async(&mut self.redis().clone())
            .await?;
        Ok(())
    }

    /// The messages quiet hours hold now (of `project`, if given), soonest release first, at most `limit`
    /// (and [`MAX_HELD_LISTED`]). Bounded: at most [`MAX_INDEX_READ`] index members are looked at, and one
    /// pipeline per hold listed or found gone (a hold found gone leaves the index).
    pub async fn held(&self, project: Option<&str>, limit: usize) -> Result<Vec<HeldMessage>, CounterError> {
        let limit = limit.min(MAX_HELD_LISTED);
        let key = self.held_index_key();
        let mut out = Vec::new();
        let mut start = 0usize;
        while out.len() < limit && start < MAX_INDEX_READ {
            let stop = (start + INDEX_CHUNK).min(MAX_INDEX_READ) - 1;
            let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
                .arg(&key)
                .arg(start)
                .arg(stop)
                .arg("WITHSCORES")
                .query_async(&mut self.redis().clone())
                .await?;
            let read = members.len();
            let wanted: Vec<((String, String, ChannelKind), i64)> = members
                .into_iter()
                .filter_map(|(m, score)| Some((parse_member(&m)?, score as i64)))
                .filter(|((p, _, _), _)| project.is_none_or(|want| p.eq_ignore_ascii_case(want)))
                .collect();
            for batch in wanted.chunks(READS_AT_ONCE) {
                // owned values in each future: the caller's future stays `Send` for any handler
                let reads = batch.iter().cloned().map(|((p, r, c), until)| {
                    let digests = self.clone();
                    async move { digests.read_hold(&p, &r, c, until).await }
                });
                let found = futures_util::future::try_join_all(reads).await?;
                out.extend(found.into_iter().flatten());
                if out.len() >= limit {
                    break;
                }
            }
            if read < INDEX_CHUNK {
                break;
            }
            start += INDEX_CHUNK;
        }
        out.truncate(limit);
        Ok(out)
    }

    /// One indexed hold, read in one pipeline on its slot; `None` (and out of the index) when it is gone or no
    /// longer due at `until_ms`.
    async fn read_hold(
        &self,
        project_id: &str,
        rule_id: &str,
        channel: ChannelKind,
        until_ms: i64,
    ) -> Result<Option<HeldMessage>, CounterError> {
        let key = DigestKey {
            project_id,
            rule_id,
            channel,
        };
        let base = self.hold_base(&key);
        let (win, buf, ids) = (
            format!("{base}:win"),
            format!("{base}:buf"),
            format!("{base}:idz"),
        );
        let mut pipe = redis::pipe();
        pipe.cmd("HMGET").arg(&win).arg("start").arg("dest");
        pipe.cmd("HMGET")
            .arg(&buf)
            .arg("#f")
            .arg("#r")
            .arg("#mf")
            .arg("#mr");
        pipe.cmd("HSCAN").arg(&buf).arg(0).arg("COUNT").arg(GROUPS_SCAN);
        pipe.cmd("ZRANGE").arg(&ids).arg(0).arg(0).arg("WITHSCORES");
        pipe.cmd("ZRANGE").arg(&ids).arg(-1).arg(-1).arg("WITHSCORES");
        let replies: Vec<Value> = pipe.query_async(&mut self.redis().clone()).await?;
        let [win, counts, page, first, last] = replies.as_slice() else {
            return Ok(None);
        };
        if field(win, 0).and_then(stored_number) != Some(until_ms) {
            self.unindex_hold(&key, until_ms).await?;
            return Ok(None);
        }
        let count = |i: usize| {
            field(counts, i)
                .and_then(stored_number)
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(0)
        };
        Ok(Some(HeldMessage {
            notification_id: held_release_id(project_id, rule_id, channel, until_ms),
            project_id: project_id.to_owned(),
            rule_id: rule_id.to_owned(),
            channel,
            destination: field(win, 1).and_then(stored_text).unwrap_or_default(),
            until_ms,
            held_since_ms: only_score(first),
            last_held_ms: only_score(last),
            fired: count(0) + count(2),
            resolved: count(1) + count(3),
            groups: groups_of(page),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn members_round_trip_and_strangers_are_skipped() {
        let key = DigestKey {
            project_id: "5e3eef0679fa3700a0198a49",
            rule_id: "r\"1",
            channel: ChannelKind::Slack,
        };
        assert_eq!(
            parse_member(&member(&key)),
            Some((
                "5e3eef0679fa3700a0198a49".into(),
                "r\"1".into(),
                ChannelKind::Slack
            ))
        );
        for stranger in ["", "x", "[\"p\",\"r\"]", "[\"p\",\"r\",\"pigeon\"]", "[1,2,3]"] {
            assert_eq!(parse_member(stranger), None, "{stranger}");
        }
    }

    /// Entries only (not the counters), fired first, by count, at most the bound; a bare group is a firing.
    #[test]
    fn groups_are_listed_fired_first_by_count() {
        let entry =
            |count: u64, title: &str| bulk(&serde_json::json!({"count": count, "title": title}).to_string());
        let mut flat = vec![bulk("#f"), bulk("3"), bulk("#mr"), bulk("1")];
        for (field, count) in [("r:a", 9), ("f:b", 1), ("f:c", 4), ("old", 2), ("f:r:d", 2)] {
            flat.push(bulk(field));
            flat.push(entry(count, &format!("title {field}")));
        }
        flat.push(bulk("f:broken"));
        flat.push(bulk("not json"));
        let got = groups_of(&Value::Array(vec![bulk("0"), Value::Array(flat)]));
        let shown: Vec<(&str, u64, bool)> = got
            .iter()
            .map(|g| (g.group.as_str(), g.count, g.resolved))
            .collect();
        assert_eq!(
            shown,
            [
                ("c", 4, false),
                ("old", 2, false),
                ("r:d", 2, false),
                ("b", 1, false),
                ("a", 9, true)
            ]
        );
        assert_eq!(got[0].title, "title f:c");
        assert!(groups_of(&Value::Nil).is_empty());
    }

    #[test]
    fn one_member_scores_are_read_in_both_protocols() {
        assert_eq!(only_score(&Value::Array(vec![bulk("id"), bulk("17")])), Some(17));
        assert_eq!(
            only_score(&Value::Array(vec![Value::Array(vec![
                bulk("id"),
                Value::Double(18.0)
            ])])),
            Some(18)
        );
        assert_eq!(only_score(&Value::Array(vec![])), None);
    }
}
