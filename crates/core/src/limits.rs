//! Per-project bounds (README, "Limits per project"; docs/rules.md): how many rules a project may hold, how
//! many mutes may be active in it, how many recipients one email channel may have, and which keys a rule
//! document may use.
//!
//! Tenants write their own rules and mutes. Without bounds one project could make every one of its events
//! cost thousands of rule evaluations, every firing batch read thousands of mutes, or one alert go to a
//! crowd; and a rule document could carry keys that MongoDB reads as operators (`$where`) or paths (`a.b`)
//! into Hawk's collection. So:
//!
//! * **writes** over a bound (API, console, `klaxon rules import|add`, `klaxon mute add`) are refused,
//!   whatever `force` says: a [`RuleProblem`] with `limit: true` ([`RuleProblem::refuses_write`]);
//! * **readers** of documents someone else wrote (Hawk's garage, an older Klaxon) take the first N in
//!   document order, skip the rest and report it (a problem for `klaxon rules check`, a log line, a metric):
//!   never a stalled batch, never a failed one.
//!
//! Keys that are neither `$`-prefixed nor dotted are kept whatever they are: Hawk adds fields, and a rule
//! document is written back as it was read.

use serde_json::Value;

use crate::problem::RuleProblem;

/// Default of `--max-rules-per-project`.
pub const DEFAULT_MAX_RULES: usize = 100;
/// Default of `--max-mutes-per-project`.
pub const DEFAULT_MAX_MUTES: usize = 1000;
/// Default of `--max-email-recipients`.
pub const DEFAULT_MAX_EMAIL_RECIPIENTS: usize = 50;
/// The largest `--max-rules-per-project` accepted: every event of a project is evaluated against each rule.
pub const CEILING_MAX_RULES: usize = 10_000;
/// The largest `--max-mutes-per-project` accepted: every firing batch of a project reads its mutes.
pub const CEILING_MAX_MUTES: usize = 100_000;
/// The largest `--max-email-recipients` accepted.
pub const CEILING_MAX_EMAIL_RECIPIENTS: usize = 1000;
/// At most this many offending keys are named in one problem (the rest are counted).
const MAX_KEYS_NAMED: usize = 5;

/// The per-project bounds a process enforces. Every process that writes or reads rules or mutes takes them
/// from its flags (`--max-rules-per-project`, `--max-mutes-per-project`, `--max-email-recipients`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most rules one project may hold; readers evaluate the first this many.
    pub max_rules: usize,
    /// Most active mutes one project may have; readers apply the first this many.
    pub max_mutes: usize,
    /// Most addresses one email channel (or direct email) may have; readers send to the first this many.
    pub max_email_recipients: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_rules: DEFAULT_MAX_RULES,
            max_mutes: DEFAULT_MAX_MUTES,
            max_email_recipients: DEFAULT_MAX_EMAIL_RECIPIENTS,
        }
    }
}

impl Limits {
    /// Validated bounds: each at least 1 and at most its ceiling. The error names the flag.
    pub fn new(max_rules: usize, max_mutes: usize, max_email_recipients: usize) -> Result<Self, String> {
        for (flag, value, ceiling) in [
            ("--max-rules-per-project", max_rules, CEILING_MAX_RULES),
            ("--max-mutes-per-project", max_mutes, CEILING_MAX_MUTES),
            (
                "--max-email-recipients",
                max_email_recipients,
                CEILING_MAX_EMAIL_RECIPIENTS,
            ),
        ] {
            if !(1..=ceiling).contains(&value) {
                return Err(format!(
                    "{flag} must be a whole number from 1 to {ceiling}, got {value}"
                ));
            }
        }
        Ok(Limits {
            max_rules,
            max_mutes,
            max_email_recipients,
        })
    }

    /// The problem of a project holding `rules` rules, when that is over the limit. Project-wide: no rule id,
    /// not fatal (the first [`Limits::max_rules`] still work), refused on write.
    pub fn rule_count_problem(&self, rules: usize) -> Option<RuleProblem> {
        let max = self.max_rules;
        (rules > max).then(|| RuleProblem {
            rule_id: None,
            fatal: false,
            limit: true,
            message: format!(
                "the project has {rules} rules, over the limit of {max} per project: writes are refused, and the \
                 engine evaluates only the first {max} (in document order) and skips the other {}",
                rules - max
            ),
            fix: format!(
                "keep at most {max} rules in the project (one rule can carry several channels and filter words), \
                 or raise --max-rules-per-project (KLAXON_MAX_RULES_PER_PROJECT) on every Klaxon process"
            ),
        })
    }

    /// The problem of an email channel with `recipients` addresses, when that is over the limit (the rule
    /// keeps working, with the first [`Limits::max_email_recipients`] addresses).
    pub(crate) fn recipients_problem(&self, rule_id: &str, recipients: usize) -> Option<RuleProblem> {
        let max = self.max_email_recipients;
        (recipients > max).then(|| RuleProblem {
            rule_id: Some(rule_id.to_owned()),
            fatal: false,
            limit: true,
            message: format!(
                "channel `email` has {recipients} recipients, over the limit of {max}: only the first {max} are sent to"
            ),
            fix: format!(
                "send to a mailing-list address instead of listing everyone (at most {max} addresses per email \
                 channel), or raise --max-email-recipients (KLAXON_MAX_EMAIL_RECIPIENTS)"
            ),
        })
    }
}

/// The addresses of an email endpoint: comma-separated, trimmed, empty items dropped (how the email channel
/// reads them).
pub fn email_recipients(endpoint: &str) -> impl Iterator<Item = &str> {
    endpoint.split(',').map(str::trim).filter(|a| !a.is_empty())
}

/// The MongoDB extended-JSON forms a value may take in a rule's JSON form (how a stored ObjectId, date or
/// 64-bit number reads back): objects with exactly these `$` keys are values, not keys stored verbatim.
const EXTENDED_JSON: &[&[&str]] = &[
    &["$oid"],
    &["$date"],
    &["$numberLong"],
    &["$numberInt"],
    &["$numberDouble"],
    &["$numberDecimal"],
    &["$binary"],
    &["$binary", "$type"],
    &["$uuid"],
    &["$timestamp"],
    &["$regularExpression"],
    &["$minKey"],
    &["$maxKey"],
];

fn is_extended_json(map: &serde_json::Map<String, Value>) -> bool {
    EXTENDED_JSON
        .iter()
        .any(|keys| keys.len() == map.len() && keys.iter().all(|k| map.contains_key(*k)))
}

fn bad_keys(value: &Value, path: &str, out: &mut Vec<String>, total: &mut usize) {
    match value {
        Value::Object(map) => {
            let wrapper = is_extended_json(map);
            for (key, inner) in map {
                if (key.starts_with('$') && !wrapper) || key.contains('.') {
                    *total += 1;
                    if out.len() < MAX_KEYS_NAMED {
                        out.push(if path.is_empty() {
                            format!("`{key}`")
                        } else {
                            format!("`{key}` in `{path}`")
                        });
                    }
                }
                let inner_path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                bad_keys(inner, &inner_path, out, total);
            }
        }
        Value::Array(items) => {
            for (i, inner) in items.iter().enumerate() {
                bad_keys(inner, &format!("{path}[{i}]"), out, total);
            }
        }
        _ => {}
    }
}

/// The problem of a rule document (its JSON form, relaxed extended JSON) with keys that start with `$` or
/// contain `.` anywhere, `channels` included: MongoDB reads such keys as operators or paths, so Klaxon never
/// stores them. Extended-JSON values (`{"$oid": …}`, `{"$date": …}`, …) are values, not keys. Not fatal (the
/// engine ignores keys it does not read), refused on write.
pub fn key_problem(rule: &Value) -> Option<RuleProblem> {
    let mut named = Vec::new();
    let mut total = 0;
    bad_keys(rule, "", &mut named, &mut total);
    if total == 0 {
        return None;
    }
    let more = total - named.len();
    let rule_id = rule.get("_id").and_then(|id| match id {
        Value::String(s) => Some(s.clone()),
        Value::Object(m) => m.get("$oid").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    });
    Some(
        RuleProblem {
            rule_id,
            fatal: false,
            limit: true,
            message: format!(
                "the rule document has {total} key(s) that start with `$` or contain `.` ({}{}); MongoDB reads \
                 them as operators or paths, so they are never stored",
                named.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ),
            fix: "rename or remove those keys: a key may not start with `$` or contain `.` (other unknown keys \
                  are kept as they are)"
                .into(),
        }
        .bounded(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_are_validated_with_the_flag_named() {
        assert_eq!(Limits::new(100, 1000, 50), Ok(Limits::default()));
        assert!(Limits::new(1, 1, 1).is_ok());
        assert!(Limits::new(CEILING_MAX_RULES, CEILING_MAX_MUTES, CEILING_MAX_EMAIL_RECIPIENTS).is_ok());
        let cases = [
            ((0, 1000, 50), "--max-rules-per-project"),
            ((CEILING_MAX_RULES + 1, 1000, 50), "--max-rules-per-project"),
            ((100, 0, 50), "--max-mutes-per-project"),
            ((100, CEILING_MAX_MUTES + 1, 50), "--max-mutes-per-project"),
            ((100, 1000, 0), "--max-email-recipients"),
            (
                (100, 1000, CEILING_MAX_EMAIL_RECIPIENTS + 1),
                "--max-email-recipients",
            ),
        ];
        for ((r, m, e), flag) in cases {
            let err = Limits::new(r, m, e).expect_err(flag);
            assert!(err.starts_with(flag), "{err}");
        }
    }

    #[test]
    fn rule_counts_over_the_limit_are_a_project_problem() {
        let limits = Limits::default();
        let cases = [
            (0, None),
            (99, None),
            (100, None),
            (101, Some(1)),
            (150, Some(50)),
        ];
        for (rules, skipped) in cases {
            let p = limits.rule_count_problem(rules);
            assert_eq!(p.is_some(), skipped.is_some(), "{rules}");
            if let (Some(p), Some(skipped)) = (p, skipped) {
                assert!(p.limit && !p.fatal && p.rule_id.is_none(), "{p:?}");
                assert!(p.refuses_write(true), "a limit cannot be forced");
                assert!(
                    p.message.contains(&format!("{rules} rules"))
                        && p.message.contains("limit of 100")
                        && p.message.contains("first 100 (in document order)")
                        && p.message.contains(&format!("other {skipped}")),
                    "{}",
                    p.message
                );
                assert!(p.fix.contains("--max-rules-per-project"), "{}", p.fix);
            }
        }
    }

    #[test]
    fn recipients_are_the_comma_separated_addresses() {
        let cases = [
            ("a@x.io", vec!["a@x.io"]),
            (" a@x.io , b@x.io ", vec!["a@x.io", "b@x.io"]),
            ("a@x.io,,b@x.io,", vec!["a@x.io", "b@x.io"]),
            ("", vec![]),
        ];
        for (endpoint, want) in cases {
            assert_eq!(
                email_recipients(endpoint).collect::<Vec<_>>(),
                want,
                "{endpoint:?}"
            );
        }
    }

    #[test]
    fn dollar_and_dotted_keys_are_found_anywhere_extended_json_values_are_not() {
        let id = "5e3eef0679fa3700a0198a4a";
        // (document, keys named in the problem; empty = no problem)
        let cases: Vec<(Value, Vec<&str>)> = vec![
            (
                json!({"_id": id, "isEnabled": true, "channels": {"slack": {"endpoint": "x"}}}),
                vec![],
            ),
            // what MongoDB documents read as: ObjectIds, dates, 64-bit numbers, binary
            (
                json!({"_id": {"$oid": id}, "uidAdded": {"$oid": id}, "createdAt": {"$date": "2020-01-01T00:00:00Z"},
                       "old": {"$date": {"$numberLong": "-1"}}, "n": {"$numberLong": "5"},
                       "b": {"$binary": {"base64": "AA==", "subType": "00"}}}),
                vec![],
            ),
            // unknown-but-safe keys are kept (Hawk adds fields)
            (
                json!({"_id": id, "somethingNew": {"nested": [1, {"deeper": true}]}}),
                vec![],
            ),
            (json!({"_id": id, "$where": "sleep(1000)"}), vec!["`$where`"]),
            (
                json!({"_id": id, "channels": {"slack": {"isEnabled": true, "$set": {"x": 1}}}}),
                vec!["`$set` in `channels.slack`"],
            ),
            (
                json!({"_id": id, "channels": {"a.b": {"isEnabled": true}}}),
                vec!["`a.b` in `channels`"],
            ),
            (json!({"_id": id, "x.y": 1}), vec!["`x.y`"]),
            (
                json!({"_id": id, "including": [{"$gt": ""}]}),
                vec!["`$gt` in `including[0]`"],
            ),
            // an extended-JSON look-alike with a key too many, or a hostile value inside a wrapper
            (
                json!({"_id": id, "d": {"$date": "2020-01-01T00:00:00Z", "$where": 1}}),
                vec!["`$date` in `d`", "`$where` in `d`"],
            ),
            (
                json!({"_id": id, "d": {"$date": {"$where": 1}}}),
                vec!["`$where` in `d.$date`"],
            ),
        ];
        for (doc, want) in cases {
            let p = key_problem(&doc);
            match (&p, want.is_empty()) {
                (None, true) => {}
                (Some(p), false) => {
                    assert!(p.limit && !p.fatal, "{p:?}");
                    assert_eq!(p.rule_id.as_deref(), Some(id), "{doc}");
                    for key in &want {
                        assert!(p.message.contains(key), "{doc}: {} should name {key}", p.message);
                    }
                    assert!(
                        p.message.contains(&format!("has {} key(s)", want.len())),
                        "{doc}: {}",
                        p.message
                    );
                    assert!(p.fix.contains("rename or remove"), "{}", p.fix);
                }
                _ => panic!("{doc}: got {p:?}, want keys {want:?}"),
            }
        }
    }

    #[test]
    fn many_bad_keys_are_one_bounded_problem() {
        let mut doc = serde_json::Map::new();
        for i in 0..500 {
            doc.insert(format!("${i}\n{}", "k".repeat(200)), json!(i));
        }
        let p = key_problem(&Value::Object(doc)).expect("problem");
        assert!(p.message.contains("has 500 key(s)"), "{}", p.message);
        assert!(
            p.message.len() <= crate::rule::MAX_PROBLEM_BYTES,
            "{}",
            p.message.len()
        );
        assert!(!p.message.contains('\n'));
        assert_eq!(p.rule_id, None);
    }
}
