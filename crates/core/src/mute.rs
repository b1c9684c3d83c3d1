//! Mutes: "be quiet about this until then". A mute belongs to a project and matches a rule, a group, both,
//! or (neither given) every firing of the project. While one matches, firings are counted but not delivered.

use serde::{Deserialize, Serialize};

/// One mute, as stored (JSON) and listed by the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mute {
    /// Its id (random hex).
    pub mute_id: String,
    /// Only this rule (any rule when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
    /// Only this group (any group when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_hash: Option<String>,
    /// Ends at this time, unix ms (on the Redis clock, like windows).
    pub until_ms: i64,
}

impl Mute {
    /// True when the mute silences a firing of `rule_id` for `group_hash` at `now_ms`.
    pub fn matches(&self, rule_id: &str, group_hash: &str, now_ms: i64) -> bool {
        now_ms < self.until_ms
            && self
                .rule_id
                .as_deref()
                .is_none_or(|r| r.eq_ignore_ascii_case(rule_id))
            // an alert's long group is held as its digest (`alert::bounded_group`): a mute of the group matches it
            && self.group_hash.as_deref().is_none_or(|g| {
                g == group_hash || crate::alert::bounded_group(g) == crate::alert::bounded_group(group_hash)
            })
    }
}

/// True when any of `mutes` silences the firing.
pub fn is_muted(mutes: &[Mute], rule_id: &str, group_hash: &str, now_ms: i64) -> bool {
    mutes.iter().any(|m| m.matches(rule_id, group_hash, now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let m = |rule: Option<&str>, group: Option<&str>| Mute {
            mute_id: "m".into(),
            rule_id: rule.map(str::to_owned),
            group_hash: group.map(str::to_owned),
            until_ms: 100,
        };
        let cases = [
            (m(None, None), "r", "g", 99, true),
            (m(None, None), "r", "g", 100, false),
            (m(Some("r"), None), "r", "x", 0, true),
            (m(Some("R"), None), "r", "x", 0, true),
            (m(Some("r"), None), "s", "g", 0, false),
            (m(None, Some("g")), "s", "g", 0, true),
            (m(None, Some("g")), "s", "h", 0, false),
            (m(Some("r"), Some("g")), "r", "g", 0, true),
            (m(Some("r"), Some("g")), "r", "h", 0, false),
        ];
        for (i, (mute, rule, group, now, want)) in cases.iter().enumerate() {
            assert_eq!(mute.matches(rule, group, *now), *want, "case {i}");
        }
        assert!(!is_muted(&[], "r", "g", 0));
    }
}
