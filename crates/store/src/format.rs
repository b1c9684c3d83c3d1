//! The import/export format (README, "Rules"): a JSON array of `{"_id": "<24-hex projectId>", "name"?,
//! "notifications": [Rule, …]}`, ObjectIds written as 24-hex strings (or `{"$oid": …}` on input). `name` is the
//! project's name as Klaxon keeps it (`klaxonName` in the document, see [`crate::store::NAME_FIELD`]).
//!
//! Everything is validated before anything is written, so bad input never leaves a half-imported file
//! behind.

use klaxon_core::Limits;
use mongodb::bson::{oid::ObjectId, Bson, Document};
use serde_json::{Map, Value};

use crate::RulesError;

/// Rule fields that hold ObjectIds in Hawk's shape and are written as 24-hex strings in the file.
const OID_FIELDS: [&str; 2] = ["_id", "uidAdded"];

/// The notifications of one project, in the BSON shape Hawk stores.
#[derive(Debug, Clone, PartialEq)]
pub struct ProjectNotifications {
    /// The project (`projects._id`).
    pub project_id: ObjectId,
    /// The rules, each with an ObjectId `_id`.
    pub notifications: Vec<Document>,
    /// The project's name as Klaxon keeps it (the file's top-level `name`, checked by
    /// [`klaxon_core::rule::check_project_name`]); `None` leaves a stored name as it is.
    pub name: Option<String>,
    /// The name shown, as read (Klaxon's, else Hawk's `name`); never written.
    pub shown_name: Option<String>,
}

/// Parses a 24-hex ObjectId.
pub fn parse_object_id(what: &'static str, value: &str) -> Result<ObjectId, RulesError> {
    let value = value.trim();
    if value.len() != 24 {
        return Err(RulesError::InvalidId {
            what,
            value: value.to_owned(),
        });
    }
    ObjectId::parse_str(value).map_err(|_| RulesError::InvalidId {
        what,
        value: value.to_owned(),
    })
}

/// Reads an ObjectId written as a 24-hex string or `{"$oid": "…"}`.
fn oid_value(what: &'static str, v: &Value) -> Result<ObjectId, RulesError> {
    match v {
        Value::String(s) => parse_object_id(what, s),
        Value::Object(m) if m.len() == 1 && m.get("$oid").is_some_and(Value::is_string) => {
            parse_object_id(what, m.get("$oid").and_then(Value::as_str).unwrap_or_default())
        }
        other => Err(RulesError::InvalidId {
            what,
            value: other.to_string(),
        }),
    }
}

/// Turns one rule of the file into its stored form: ObjectId fields become ObjectIds, a missing `_id` is
/// assigned, the rest is read as MongoDB extended JSON (so `{"$date": …}` and friends survive a round trip).
pub fn rule_to_document(rule: &Value) -> Result<Document, RulesError> {
    let Some(obj) = rule.as_object() else {
        return Err(RulesError::InvalidInput(format!(
            "a rule must be a JSON object, got {rule}"
        )));
    };
    let mut doc = Document::new();
    let id = match obj.get("_id") {
        None | Some(Value::Null) => ObjectId::new(),
        Some(v) => oid_value("rule id", v)?,
    };
    doc.insert("_id", id);
    for (key, value) in obj {
        if key == "_id" {
            continue;
        }
        let bson = if OID_FIELDS.contains(&key.as_str()) && !value.is_null() {
            Bson::ObjectId(
                oid_value("ObjectId field", value)
                    .map_err(|e| RulesError::InvalidInput(format!("rule {id}: field `{key}`: {e}")))?,
            )
        } else {
            Bson::try_from(value.clone())
                .map_err(|e| RulesError::InvalidInput(format!("rule {id}: field `{key}`: {e}")))?
        };
        doc.insert(key.clone(), bson);
    }
    Ok(doc)
}

/// Parses an import file. Errors name the project (by position and id) and the problem; nothing is
/// returned unless the whole file is well-formed. Listing a project twice is an error (which one wins
/// would be a guess).
pub fn parse_import(text: &str) -> Result<Vec<ProjectNotifications>, RulesError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| RulesError::InvalidInput(format!("not valid JSON: {e}")))?;
    import_from_json(&value)
}

/// [`parse_import`] of a file already read as JSON (the API's `PUT …/rules` body).
pub fn import_from_json(value: &Value) -> Result<Vec<ProjectNotifications>, RulesError> {
    let Value::Array(items) = value else {
        return Err(RulesError::InvalidInput(
            "expected a JSON array of {\"_id\": \"<projectId>\", \"notifications\": [...]}".into(),
        ));
    };
    let mut out: Vec<ProjectNotifications> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = |msg: String| RulesError::InvalidInput(format!("item #{}: {msg}", i + 1));
        let Some(obj) = item.as_object() else {
            return Err(at("expected an object with `_id` and `notifications`".into()));
        };
        let project_id = match obj.get("_id") {
            Some(v) => oid_value("project id", v).map_err(|e| at(e.to_string()))?,
            None => return Err(at("missing `_id` (the project id)".into())),
        };
        let at = |msg: String| RulesError::InvalidInput(format!("project {project_id}: {msg}"));
        let rules = match obj.get("notifications") {
            Some(Value::Array(rules)) => rules,
            None | Some(Value::Null) => return Err(at("missing `notifications` array".into())),
            Some(_) => return Err(at("`notifications` must be an array of rules".into())),
        };
        let mut notifications = Vec::with_capacity(rules.len());
        for (j, rule) in rules.iter().enumerate() {
            notifications.push(
                rule_to_document(rule).map_err(|e| at(format!("rule #{}: {}", j + 1, strip_prefix(&e))))?,
            );
        }
        let mut ids: Vec<ObjectId> = notifications
            .iter()
            .filter_map(|d| d.get_object_id("_id").ok())
            .collect();
        ids.sort();
        if let Some(dup) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(at(format!("rule id {} appears twice", dup[0])));
        }
        if out.iter().any(|p| p.project_id == project_id) {
            return Err(at("listed twice".into()));
        }
        let name = match obj.get("name") {
            None | Some(Value::Null) => None,
            Some(Value::String(n)) => {
                Some(klaxon_core::rule::check_project_name(n).map_err(|e| at(format!("`name`: {e}")))?)
            }
            Some(_) => return Err(at("`name` must be a string".into())),
        };
        out.push(ProjectNotifications {
            project_id,
            notifications,
            shown_name: name.clone(),
            name,
        });
    }
    Ok(out)
}

fn strip_prefix(e: &RulesError) -> String {
    let s = e.to_string();
    s.strip_prefix("invalid input: ").map(str::to_owned).unwrap_or(s)
}

/// Replaces every `{"$oid": "…"}` by its 24-hex string, recursively (the file's way of writing ObjectIds).
pub fn oids_to_hex(v: Value) -> Value {
    match v {
        Value::Object(m) if m.len() == 1 && m.get("$oid").is_some_and(Value::is_string) => {
            m.into_iter().next().map(|(_, s)| s).unwrap_or(Value::Null)
        }
        Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (k, oids_to_hex(v))).collect()),
        Value::Array(a) => Value::Array(a.into_iter().map(oids_to_hex).collect()),
        other => other,
    }
}

impl ProjectNotifications {
    /// The project's rules as the engine reads them once stored (validated, compiled): what a step after the
    /// store acts on (`klaxon_engine::after_store`).
    pub fn rules(&self) -> klaxon_core::ProjectRules {
        let notifications = self.notifications.iter().map(document_to_json).collect();
        klaxon_core::ProjectRules::from_notifications(Some(&Value::Array(notifications)))
    }
}

/// The JSON form of a stored rule that the core's parser reads (relaxed extended JSON: ObjectIds as
/// `{"$oid": …}`).
pub fn document_to_json(doc: &Document) -> Value {
    Bson::Document(doc.clone()).into_relaxed_extjson()
}

/// The export file for these projects.
pub fn export_json(projects: &[ProjectNotifications]) -> Value {
    Value::Array(
        projects
            .iter()
            .map(|p| {
                let mut m = Map::new();
                m.insert("_id".into(), Value::String(p.project_id.to_hex()));
                if let Some(name) = &p.name {
                    m.insert("name".into(), Value::String(name.clone()));
                }
                m.insert(
                    "notifications".into(),
                    Value::Array(
                        p.notifications
                            .iter()
                            .map(|d| oids_to_hex(document_to_json(d)))
                            .collect(),
                    ),
                );
                Value::Object(m)
            })
            .collect(),
    )
}

/// Every problem the core finds in a stored rule (its JSON form) under `limits`: its warnings, or the one that
/// makes it unusable, and keys MongoDB would read as operators or paths ([`klaxon_core::rule_problems`]).
/// `klaxon rules check|import` and the HTTP API validate with this.
pub fn rule_problems(rule: &Value, limits: &Limits) -> Vec<klaxon_core::RuleProblem> {
    klaxon_core::rule_problems(rule, limits)
}

/// Every problem in parsed import input under `limits`, with the project it belongs to: each rule's, and a
/// project over [`Limits::max_rules`]. Empty = safe to store; what a write refuses is
/// [`klaxon_core::RuleProblem::refuses_write`].
pub fn import_problems(
    projects: &[ProjectNotifications],
    limits: &Limits,
) -> Vec<(ObjectId, klaxon_core::RuleProblem)> {
    let mut out = Vec::new();
    for p in projects {
        out.extend(
            limits
                .rule_count_problem(p.notifications.len())
                .map(|x| (p.project_id, x)),
        );
        for rule in &p.notifications {
            out.extend(
                rule_problems(&document_to_json(rule), limits)
                    .into_iter()
                    .map(|x| (p.project_id, x)),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip_keeps_ids_and_types() {
        let input = json!([{
            "_id": "5e3eef0679fa3700a0198a49",
            "notifications": [
                {"_id": "5e3eef0679fa3700a0198a4a", "uidAdded": {"$oid": "5e3eef0679fa3700a0198a00"},
                 "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 100, "thresholdPeriod": 3_600_000_000_i64,
                 "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.test/x", "minPeriod": 0}}},
                {"isEnabled": false, "whatToReceive": "ONLY_NEW"}
            ]
        }]);
        let parsed = parse_import(&input.to_string()).expect("valid");
        assert_eq!(parsed.len(), 1);
        let rules = &parsed[0].notifications;
        assert!(matches!(rules[0].get("_id"), Some(Bson::ObjectId(_))));
        assert!(matches!(rules[0].get("uidAdded"), Some(Bson::ObjectId(_))));
        assert!(matches!(rules[0].get("threshold"), Some(Bson::Int32(100))));
        assert!(matches!(rules[0].get("thresholdPeriod"), Some(Bson::Int64(_))));
        // A rule without `_id` gets one.
        assert!(matches!(rules[1].get("_id"), Some(Bson::ObjectId(_))));

        let out = export_json(&parsed);
        assert_eq!(out[0]["_id"], "5e3eef0679fa3700a0198a49");
        assert_eq!(out[0]["notifications"][0]["_id"], "5e3eef0679fa3700a0198a4a");
        assert_eq!(out[0]["notifications"][0]["uidAdded"], "5e3eef0679fa3700a0198a00");
        assert_eq!(out[0]["notifications"][0]["thresholdPeriod"], 3_600_000_000_i64);
        // Exported text imports again to the same documents.
        let again = parse_import(&out.to_string()).expect("valid");
        assert_eq!(again, parsed);

        let named = parse_import(
            r#"[{"_id": "5e3eef0679fa3700a0198a49", "name": " Acme <shop> ", "notifications": []}]"#,
        )
        .expect("valid");
        assert_eq!(named[0].name.as_deref(), Some("Acme <shop>"), "trimmed");
        assert_eq!(export_json(&named)[0]["name"], "Acme <shop>");
        assert!(out[0].get("name").is_none(), "no name, no field");
    }

    #[test]
    fn bad_input_names_the_problem() {
        let cases = [
            ("{not json", "not valid JSON"),
            ("{}", "expected a JSON array"),
            (r#"[{"notifications": []}]"#, "missing `_id`"),
            (
                r#"[{"_id": "5e3eef0679fa3700a0198a49", "name": "", "notifications": []}]"#,
                "`name`: a project name must be 1 to 100 characters",
            ),
            (
                r#"[{"_id": "5e3eef0679fa3700a0198a49", "name": 7, "notifications": []}]"#,
                "`name` must be a string",
            ),
            (
                r#"[{"_id": "xyz", "notifications": []}]"#,
                "invalid project id \"xyz\"",
            ),
            (
                r#"[{"_id": "5e3eef0679fa3700a0198a49"}]"#,
                "missing `notifications`",
            ),
            (
                r#"[{"_id": "5e3eef0679fa3700a0198a49", "notifications": {}}]"#,
                "must be an array",
            ),
            (
                r#"[{"_id": "5e3eef0679fa3700a0198a49", "notifications": [{"_id": "nothex"}]}]"#,
                "rule #1: invalid rule id",
            ),
            (
                r#"[{"_id": "5e3eef0679fa3700a0198a49", "notifications": [1]}]"#,
                "rule #1: a rule must be a JSON object",
            ),
            (
                r#"[{"_id": "5e3eef0679fa3700a0198a49", "notifications": [{"uidAdded": "zz"}]}]"#,
                "field `uidAdded`",
            ),
            (
                r#"[{"_id": "5e3eef0679fa3700a0198a49", "notifications": [{"_id": "5e3eef0679fa3700a0198a4a"}, {"_id": "5e3eef0679fa3700a0198a4a"}]}]"#,
                "appears twice",
            ),
            (
                r#"[{"_id": "5e3eef0679fa3700a0198a49", "notifications": []}, {"_id": "5e3eef0679fa3700a0198a49", "notifications": []}]"#,
                "listed twice",
            ),
        ];
        for (text, want) in cases {
            let err = parse_import(text).expect_err(text).to_string();
            assert!(err.contains(want), "{text}: {err} should contain {want}");
        }
    }

    /// What reaches Hawk's collection is checked in its stored form: extended-JSON values become BSON values
    /// (no `$` key left), anything else with a `$`-prefixed or dotted key is a limit problem, which no `force`
    /// stores.
    #[test]
    fn operator_and_dotted_keys_are_refused_in_their_stored_form() {
        let project = "5e3eef0679fa3700a0198a49";
        let rule = |extra: Value| {
            let mut r = json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW",
                "channels": {"webhook": {"isEnabled": true, "endpoint": "https://h.example/x", "minPeriod": 0}}});
            if let (Some(r), Value::Object(e)) = (r.as_object_mut(), extra) {
                r.extend(e);
            }
            json!([{"_id": project, "notifications": [r]}]).to_string()
        };
        // (extra fields, a key named in the refusal; None = stored)
        let cases = [
            (
                json!({"createdAt": {"$date": "2020-01-01T00:00:00Z"}, "n": {"$numberLong": "7"}}),
                None,
            ),
            (json!({"somethingNew": {"nested": [1, 2]}}), None),
            (json!({"$where": "sleep(5000)"}), Some("`$where`")),
            (
                json!({"filter": {"$where": "sleep(5000)"}}),
                Some("`$where` in `filter`"),
            ),
            (json!({"a.b": 1}), Some("`a.b`")),
            (
                json!({"channels": {"webhook": {"isEnabled": true, "endpoint": "https://h.example/x", "$inc": {"x": 1}}}}),
                Some("`$inc` in `channels.webhook`"),
            ),
            (
                json!({"channels": {"web.hook": {"isEnabled": true, "endpoint": "https://h.example/x"}}}),
                Some("`web.hook` in `channels`"),
            ),
        ];
        for (extra, refused) in cases {
            let text = rule(extra.clone());
            let projects = parse_import(&text).unwrap_or_else(|e| panic!("{extra}: {e}"));
            let problems: Vec<_> = import_problems(&projects, &Limits::default())
                .into_iter()
                .filter(|(_, p)| p.limit)
                .collect();
            match refused {
                None => assert!(problems.is_empty(), "{extra}: {problems:?}"),
                Some(key) => {
                    assert_eq!(problems.len(), 1, "{extra}: {problems:?}");
                    let p = &problems[0].1;
                    assert!(p.refuses_write(true), "{extra}: {p:?}");
                    assert!(p.message.contains(key), "{extra}: {}", p.message);
                }
            }
        }
    }

    #[test]
    fn a_project_over_the_rule_limit_is_one_problem_that_force_does_not_lift() {
        let rules: Vec<Value> = (0..4)
            .map(|_| json!({"isEnabled": true, "whatToReceive": "ONLY_NEW", "channels": {}}))
            .collect();
        let text = json!([{"_id": "5e3eef0679fa3700a0198a49", "notifications": rules}]).to_string();
        let projects = parse_import(&text).expect("valid");
        let limits = Limits::new(3, 1000, 50).expect("limits");
        let problems: Vec<_> = import_problems(&projects, &limits)
            .into_iter()
            .filter(|(_, p)| p.refuses_write(true))
            .collect();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].1.message.contains("4 rules, over the limit of 3"));
        assert!(
            import_problems(&projects, &Limits::new(4, 1000, 50).expect("limits"))
                .iter()
                .all(|(_, p)| !p.refuses_write(true))
        );
    }

    #[test]
    fn oids_to_hex_is_recursive_and_leaves_other_objects() {
        let v = json!({"a": {"$oid": "5e3eef0679fa3700a0198a49"}, "b": [{"$oid": "5e3eef0679fa3700a0198a4a"}],
            "c": {"$oid": "x", "other": 1}, "d": {"$date": "2020-01-01T00:00:00Z"}});
        let out = oids_to_hex(v);
        assert_eq!(out["a"], "5e3eef0679fa3700a0198a49");
        assert_eq!(out["b"][0], "5e3eef0679fa3700a0198a4a");
        assert_eq!(out["c"]["other"], 1);
        assert_eq!(out["d"]["$date"], "2020-01-01T00:00:00Z");
    }
}
