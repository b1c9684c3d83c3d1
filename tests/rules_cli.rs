//! End-to-end tests of `klaxon rules …`: the real binary against the MongoDB-wire server
//! (`KLAXON_TEST_MONGO_URL`). PoloDB serves one database whatever its name, so every test works on project
//! ids of its own as well as in its own namespace.

mod common;

use common::Env;
use mongodb::bson::oid::ObjectId;
use serde_json::{json, Value};

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `klaxon rules <args>` in `env` (stdin fed from `input`), killed after 60 s.
async fn klaxon(env: &Env, args: &[&str], input: Option<&str>) -> Out {
    let args: Vec<&str> = std::iter::once("rules").chain(args.iter().copied()).collect();
    let (code, stdout, stderr) = env.run_with_input(&args, input).await;
    Out { code, stdout, stderr }
}

/// The environment of one test: its own namespace, warnings only on stderr.
fn env() -> Env {
    Env::new().set("KLAXON_LOG", "warn")
}

fn ok(o: &Out) -> &str {
    assert_eq!(o.code, 0, "stdout: {}\nstderr: {}", o.stdout, o.stderr);
    &o.stdout
}

fn json_of(o: &Out) -> Value {
    serde_json::from_str(ok(o)).unwrap_or_else(|e| panic!("not JSON ({e}): {}", o.stdout))
}

#[tokio::test]
async fn add_list_disable_enable_rm() {
    let env = env();
    let p = ObjectId::new().to_hex();
    let added = json_of(
        &klaxon(
            &env,
            &[
                "add",
                "--project",
                &p,
                "--seen-more",
                "100/1h",
                "--window",
                "sliding",
                "--slack",
                "https://hooks.slack.test/SECRET",
                "--telegram",
                "-100123",
                "--email",
                "a@b.c",
                "--webhook",
                "https://x.test/h",
                "--including",
                "db,timeout",
                "--excluding",
                "auth",
                "--pattern",
                "Timeout.*",
                "--min-period",
                "60",
                "--json",
            ],
            None,
        )
        .await,
    );
    let rid = added["rule"]["_id"].as_str().expect("rule id").to_owned();
    assert_eq!(added["rule"]["threshold"], 100);
    assert_eq!(added["rule"]["thresholdPeriod"], 3_600_000);
    let only_new = klaxon(
        &env,
        &[
            "add",
            "--project",
            &p,
            "--only-new",
            "--webhook",
            "https://x.test/n",
        ],
        None,
    )
    .await;
    assert!(ok(&only_new).starts_with("added rule "), "{}", only_new.stdout);

    let table = klaxon(&env, &["list", "--project", &p], None).await;
    let text = ok(&table);
    assert!(text.contains(&rid), "{text}");
    assert!(
        text.contains("SEEN_MORE 100/1h") && text.contains("sliding"),
        "{text}"
    );
    assert!(
        text.contains("email(60s),slack(60s),telegram(60s),webhook(60s)"),
        "{text}"
    );
    assert!(text.contains("+db,timeout -auth ~/Timeout.*/"), "{text}");
    assert!(!text.contains("SECRET"), "tables never show endpoints: {text}");

    ok(&klaxon(&env, &["disable", &rid], None).await);
    let listed = json_of(&klaxon(&env, &["list", "--project", &p, "--json"], None).await);
    let rules = listed.as_array().expect("array");
    assert_eq!(rules.len(), 2);
    let mine = rules
        .iter()
        .find(|r| r["rule"]["_id"] == rid.as_str())
        .expect("listed");
    assert_eq!(mine["rule"]["isEnabled"], false);
    assert_eq!(mine["problems"], json!([]));

    ok(&klaxon(&env, &["enable", &rid, "--project", &p], None).await);
    let listed = json_of(&klaxon(&env, &["list", "--project", &p, "--json"], None).await);
    assert!(listed
        .as_array()
        .expect("array")
        .iter()
        .any(|r| r["rule"]["_id"] == rid.as_str() && r["rule"]["isEnabled"] == true));

    ok(&klaxon(&env, &["rm", &rid], None).await);
    let listed = json_of(&klaxon(&env, &["list", "--project", &p, "--json"], None).await);
    assert_eq!(listed.as_array().expect("array").len(), 1);
    let gone = klaxon(&env, &["rm", &rid], None).await;
    assert_eq!(gone.code, 1);
    assert!(gone.stderr.contains("no rule with id"), "{}", gone.stderr);

    let check = klaxon(&env, &["check", "--project", &p], None).await;
    assert!(ok(&check).contains("no problems"), "{}", check.stdout);
}

#[tokio::test]
async fn invalid_flags_are_refused_before_anything_is_written() {
    let env = env();
    let p = ObjectId::new().to_hex();
    let cases: [(&[&str], &str); 5] = [
        (
            &["--seen-more", "0/1h", "--slack", "https://s.test/x"],
            "threshold",
        ),
        (
            &["--seen-more", "5/1", "--slack", "https://s.test/x"],
            "needs a unit",
        ),
        (
            &["--seen-more", "5/100ms", "--slack", "https://s.test/x"],
            "thresholdPeriod",
        ),
        (
            &["--only-new", "--pattern", "(bad", "--slack", "https://s.test/x"],
            "invalid regex",
        ),
        (&["--only-new"], "--slack"),
    ];
    for (extra, want) in cases {
        let mut args = vec!["add", "--project", p.as_str()];
        args.extend_from_slice(extra);
        let o = klaxon(&env, &args, None).await;
        assert_ne!(o.code, 0, "{args:?} should fail");
        assert!(
            o.stderr.contains(want),
            "{args:?}: {} should mention {want}",
            o.stderr
        );
    }
    let o = klaxon(&env, &["list", "--project", &p], None).await;
    assert_eq!(o.code, 1, "no project was created: {}", o.stdout);
}

#[tokio::test]
async fn import_hawk_documents_check_reports_the_bad_rule_and_export_round_trips() {
    let env = env();
    let p = ObjectId::new().to_hex();
    let good = ObjectId::new().to_hex();
    let bad = ObjectId::new().to_hex();
    let file = json!([{"_id": {"$oid": p}, "notifications": [
        {"_id": good, "uidAdded": ObjectId::new().to_hex(), "isEnabled": true, "whatToReceive": "SEEN_MORE",
         "including": ["db"], "excluding": [], "threshold": 100, "thresholdPeriod": 3_600_000,
         "channels": {"telegram": {"isEnabled": true, "endpoint": "-100123", "minPeriod": 0},
                      "loop": {"isEnabled": true, "endpoint": "x"}, "webPush": {"isEnabled": true},
                      "desktopPush": {"isEnabled": false}},
         "hawkOnlyField": {"nested": [1, 2]}},
        {"_id": bad, "isEnabled": true, "whatToReceive": "SEEN_MORE", "thresholdPeriod": 60000,
         "channels": {"slack": {"isEnabled": true, "endpoint": "https://s.test/x"}}},
        {"isEnabled": false, "whatToReceive": "ONLY_NEW",
         "channels": {"email": {"isEnabled": true, "endpoint": "a@b.c"}}}
    ]}])
    .to_string();

    // A rule that cannot be used is refused unless forced, and nothing is written.
    let refused = klaxon(&env, &["import", "--file", "-"], Some(&file)).await;
    assert_eq!(refused.code, 1);
    assert!(
        refused.stderr.contains(&bad) && refused.stderr.contains("nothing imported"),
        "{}",
        refused.stderr
    );
    assert_eq!(klaxon(&env, &["list", "--project", &p], None).await.code, 1);

    let stored = klaxon(&env, &["import", "--file", "-", "--force"], Some(&file)).await;
    assert!(
        ok(&stored).contains(&format!("project {p}: stored 3 rule(s)")),
        "{}",
        stored.stdout
    );

    let check = klaxon(&env, &["check", "--project", &p], None).await;
    assert_eq!(check.code, 1, "{}", check.stdout);
    assert!(check.stdout.contains(&format!(
        "rule {bad}: [rule skipped] SEEN_MORE rule has no `threshold`"
    )));
    assert!(check.stdout.contains("fix: set `threshold`"), "{}", check.stdout);
    assert!(
        !check.stdout.contains(&good),
        "the good rule has no problem: {}",
        check.stdout
    );
    let check_json = klaxon(&env, &["check", "--project", &p, "--json"], None).await;
    assert_eq!(check_json.code, 1);
    let problems: Value = serde_json::from_str(&check_json.stdout).expect("JSON");
    assert_eq!(problems.as_array().map(Vec::len), Some(1));
    assert_eq!(problems[0]["ruleId"], bad.as_str());

    let list = klaxon(&env, &["list", "--project", &p], None).await;
    let text = ok(&list);
    assert!(
        text.lines().any(|l| l.contains(&bad) && l.contains("INVALID")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains(&good) && l.contains("loop,telegram") && !l.contains("webPush")),
        "{text}"
    );

    // Export, then import the export: same documents, ids kept, unknown fields kept.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("rules.json");
    let path = path.to_str().expect("utf-8 path");
    ok(&klaxon(&env, &["export", "--project", &p, "--file", path], None).await);
    let exported: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("JSON");
    assert_eq!(exported[0]["_id"], p.as_str());
    assert_eq!(exported[0]["notifications"][0]["_id"], good.as_str());
    assert_eq!(
        exported[0]["notifications"][0]["hawkOnlyField"],
        json!({"nested": [1, 2]})
    );
    assert!(
        exported[0]["notifications"][2]["_id"]
            .as_str()
            .is_some_and(|s| s.len() == 24),
        "id assigned"
    );
    ok(&klaxon(&env, &["import", "--file", path, "--force"], None).await);
    let again = klaxon(&env, &["export", "--project", &p], None).await;
    assert_eq!(serde_json::from_str::<Value>(ok(&again)).expect("JSON"), exported);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn bad_import_files_name_the_problem_and_write_nothing() {
    let env = env();
    let p = ObjectId::new().to_hex();
    let cases = [
        ("[{\"_id\": ", "not valid JSON"),
        (
            r#"[{"_id": "12345", "notifications": []}]"#,
            "invalid project id \"12345\"",
        ),
        (
            &*format!(r#"[{{"_id": "{p}", "notifications": [{{"_id": "zz"}}]}}]"#),
            "invalid rule id \"zz\"",
        ),
        (
            &*format!(r#"[{{"_id": "{p}", "notifications": "x"}}]"#),
            "must be an array",
        ),
    ];
    for (text, want) in cases {
        let o = klaxon(&env, &["import", "--file", "-"], Some(text)).await;
        assert_eq!(o.code, 1, "{text}");
        assert!(
            o.stderr.contains(want),
            "{text}: {} should mention {want}",
            o.stderr
        );
    }
    assert_eq!(
        klaxon(&env, &["list", "--project", &p], None).await.code,
        1,
        "nothing written"
    );
    let missing = klaxon(&env, &["import", "--file", "/nonexistent/rules.json"], None).await;
    assert_eq!(missing.code, 1);
    assert!(
        missing.stderr.contains("cannot read /nonexistent/rules.json"),
        "{}",
        missing.stderr
    );
}

/// At the default log level a `rules` command prints its result and nothing else: no INFO lines (PoloDB's missing
/// `createIndexes` used to add one with a raw BSON hex dump to every command).
#[tokio::test]
async fn default_log_level_prints_only_the_result() {
    // (`check` is left out: PoloDB shares one database between namespaces, so it sees other tests' bad rules.)
    let env = Env::new().unset("KLAXON_LOG");
    for args in [&["list"][..], &["export"][..]] {
        let args: Vec<&str> = std::iter::once("rules").chain(args.iter().copied()).collect();
        let (code, _, stderr) = env.run_with_input(&args, None).await;
        assert_eq!(code, 0, "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?} wrote to stderr at the default level");
    }
}

/// Hawk's default rule (enabled, every channel disabled) is valid but cannot notify yet: import stores it with a
/// warning on stderr instead of refusing the whole file, so a Hawk export imports.
#[tokio::test]
async fn a_rule_that_cannot_notify_yet_is_stored_with_a_warning() {
    let env = env();
    let project = ObjectId::new().to_hex();
    let rule_id = ObjectId::new().to_hex();
    let off = json!({"isEnabled": false, "endpoint": "", "minPeriod": 60});
    let doc = json!([{"_id": project, "notifications": [{
        "_id": rule_id, "isEnabled": true, "uidAdded": ObjectId::new().to_hex(), "whatToReceive": "SEEN_MORE",
        "including": [], "excluding": [], "threshold": 20, "thresholdPeriod": 3_600_000,
        "channels": {"email": off, "telegram": off, "slack": off, "loop": off}}]}]);
    let out = klaxon(&env, &["import", "--file", "-"], Some(&doc.to_string())).await;
    ok(&out);
    assert!(
        out.stderr.contains("warning") && out.stderr.contains(&rule_id),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("no usable channel"), "{}", out.stderr);
    let listed = json_of(&klaxon(&env, &["export", "--project", &project], None).await);
    assert_eq!(listed[0]["notifications"][0]["_id"], json!(rule_id), "{listed}");
}

/// `rules check --file` and `rules import --dry-run` check a file before anything is stored: the same problems
/// and fixes as for stored rules, a rule without `_id` named by its place, exit 1 on problems, nothing written
/// (they do not even need MongoDB).
#[tokio::test]
async fn a_file_is_checked_and_dry_run_imported_before_anything_is_stored() {
    let env = env();
    let p = ObjectId::new().to_hex();
    let bad = ObjectId::new().to_hex();
    let good = ObjectId::new().to_hex();
    let file = json!([{"_id": p, "notifications": [
        {"_id": good, "isEnabled": true, "whatToReceive": "ONLY_NEW",
         "channels": {"email": {"isEnabled": true, "endpoint": "a@b.c", "minPeriod": 0}}},
        {"_id": bad, "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 0, "thresholdPeriod": 60000,
         "channels": {"slack": {"isEnabled": true, "endpoint": "https://s.test/x"}}},
        {"isEnabled": true, "whatToReceive": "ONLY_NEW", "includingPatterns": ["("],
         "channels": {"email": {"isEnabled": true, "endpoint": "a@b.c"}}}
    ]}])
    .to_string();
    // MongoDB where nothing listens: neither command may need it
    let offline = env.clone().set(
        "KLAXON_MONGO_URL",
        &format!("mongodb://127.0.0.1:{}", common::free_port()),
    );

    let check = klaxon(&offline, &["check", "--file", "-"], Some(&file)).await;
    assert_eq!(check.code, 1, "{}{}", check.stdout, check.stderr);
    // the same report as for stored rules
    assert!(
        check.stdout.contains(&format!(
            "project {p} rule {bad}: [rule skipped] `threshold` must be a whole number ≥ 1, got 0\n  fix: set `threshold`"
        )),
        "{}",
        check.stdout
    );
    assert!(
        check.stdout.contains(&format!(
            "project {p} rule #3 (no _id: assigned when stored): [rule skipped] invalid regex"
        )),
        "a rule without an id is named by its place: {}",
        check.stdout
    );
    assert!(!check.stdout.contains(&good), "{}", check.stdout);
    assert!(
        check.stdout.contains("2 problem(s) in 3 rule(s)"),
        "{}",
        check.stdout
    );
    let as_json = klaxon(&offline, &["check", "--file", "-", "-o", "json"], Some(&file)).await;
    assert_eq!(as_json.code, 1);
    let problems: Value = serde_json::from_str(&as_json.stdout).expect("JSON");
    assert_eq!(problems[0]["ruleId"], bad.as_str(), "{problems}");
    assert_eq!(problems[0]["fatal"], true);
    // --project filters the file; a clean file exits 0
    let clean =
        json!([{"_id": p, "notifications": [{"_id": good, "isEnabled": true, "whatToReceive": "ONLY_NEW",
        "channels": {"email": {"isEnabled": true, "endpoint": "a@b.c", "minPeriod": 0}}}]}])
        .to_string();
    let o = klaxon(&offline, &["check", "--file", "-", "--project", &p], Some(&clean)).await;
    assert_eq!(ok(&o).trim(), "1 rule(s) in 1 project(s): no problems");

    let dry = klaxon(&offline, &["import", "--file", "-", "--dry-run"], Some(&file)).await;
    assert_eq!(dry.code, 1, "{}{}", dry.stdout, dry.stderr);
    assert_eq!(
        dry.stdout.trim(),
        format!(
            "project {p}: would store 3 rule(s), replacing its stored rules: {good}, {bad}, #3 (no _id: assigned when stored)"
        )
    );
    assert!(
        dry.stderr.contains("2 problem(s); nothing would be imported") && dry.stderr.contains(&bad),
        "{}",
        dry.stderr
    );
    let dry = klaxon(
        &offline,
        &["import", "--file", "-", "--dry-run", "--json"],
        Some(&clean),
    )
    .await;
    let would: Value = serde_json::from_str(ok(&dry)).expect("the export format");
    assert_eq!(would[0]["notifications"][0]["_id"], good.as_str());

    // nothing was stored by any of them
    assert_eq!(klaxon(&env, &["list", "--project", &p], None).await.code, 1);
}

/// The on-call flags (`--resolve-after`, `--renotify`, `--quiet-hours`, `--quiet-hours-bypass`) and `--no-events`
/// store the documented fields, `rules list` shows them in the rule's cell, and `rules check` reports a stored
/// rule's on-call problems with their fixes.
#[tokio::test]
async fn on_call_flags_are_stored_listed_and_checked() {
    let env = env();
    let p = ObjectId::new().to_hex();
    let key = "r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE";
    let added = json_of(
        &klaxon(
            &env,
            &[
                "add",
                "--project",
                &p,
                "--seen-more",
                "100/5m",
                "--pagerduty",
                key,
                "--slack",
                "https://hooks.slack.test/SECRET",
                "--resolve-after",
                "1h",
                "--renotify",
                "30m/3",
                "--quiet-hours",
                "mon-fri 22:00-07:00 Europe/Berlin",
                "--quiet-hours",
                "sat,sun 00:00-24:00 UTC",
                "--quiet-hours-bypass",
                "pagerduty",
                "--json",
            ],
            None,
        )
        .await,
    );
    let rule = &added["rule"];
    assert_eq!(rule["resolveAfter"], 3_600_000);
    assert_eq!(rule["renotify"], json!({"every": 1_800_000, "max": 3}));
    assert_eq!(
        rule["quietHours"],
        json!([
            {"days": ["mon", "tue", "wed", "thu", "fri"], "from": "22:00", "to": "07:00", "timezone": "Europe/Berlin"},
            {"days": ["sat", "sun"], "from": "00:00", "to": "24:00", "timezone": "UTC"}
        ])
    );
    assert_eq!(rule["quietHoursBypass"], json!(["pagerduty"]));
    let no_events = json_of(
        &klaxon(
            &env,
            &[
                "add",
                "--project",
                &p,
                "--no-events",
                "2h",
                "--pagerduty",
                key,
                "--json",
            ],
            None,
        )
        .await,
    );
    assert_eq!(no_events["rule"]["whatToReceive"], "NO_EVENTS");
    assert_eq!(no_events["rule"]["quietPeriod"], 7_200_000);

    let table = klaxon(&env, &["list", "--project", &p], None).await;
    let text = ok(&table);
    for cell in [
        "SEEN_MORE 100/5m; resolve after 1h; renotify every 30m, 3 times; quiet mon-fri 22:00-07:00 Europe/Berlin, \
         sat,sun 00:00-24:00 UTC (bypass pagerduty)",
        "NO_EVENTS for 2h",
    ] {
        assert!(text.contains(cell), "{cell} in:\n{text}");
    }
    assert!(!text.contains("SECRET") && !text.contains(key), "{text}");
    // what this version stores but does not act on yet is said by `rules check` (never quiet by accident);
    // NO_EVENTS is evaluated: no such warning for it
    let check = klaxon(&env, &["check", "--project", &p], None).await;
    assert!(
        !check.stdout.contains("does not hold firings yet")
            && !check.stdout.contains("does not evaluate them yet"),
        "{}",
        check.stdout
    );
    assert_eq!(
        check.stdout.matches("this version of Klaxon does not").count(),
        0,
        "{}",
        check.stdout
    );

    // refused before anything is written: the flag's parser, or the core's problem with its fix
    let q = ObjectId::new().to_hex();
    let cases: [(&[&str], &str); 6] = [
        (
            &["--seen-more", "5/1h", "--renotify", "30m"],
            "expected EVERY/MAX",
        ),
        (
            &["--seen-more", "5/1h", "--renotify", "30m/101"],
            "`renotify.max` must be a whole number between 1 and 100",
        ),
        (
            &[
                "--seen-more",
                "5/1h",
                "--quiet-hours",
                "mon 22:00-07:00 Europe/Berln",
            ],
            "is not a time zone Klaxon knows (fix: set an IANA",
        ),
        (
            &["--seen-more", "5/1h", "--quiet-hours", "someday 22:00-07:00 UTC"],
            "unknown day",
        ),
        (
            &["--seen-more", "5/1h", "--quiet-hours-bypass", "pagerduty"],
            "--quiet-hours",
        ),
        (&["--no-events", "1s"], "(10 s … 30 days)"),
    ];
    for (extra, want) in cases {
        let mut args = vec!["add", "--project", q.as_str(), "--pagerduty", key];
        args.extend_from_slice(extra);
        let o = klaxon(&env, &args, None).await;
        assert_ne!(o.code, 0, "{args:?} should fail");
        assert!(
            o.stderr.contains(want),
            "{args:?}: {} should mention {want}",
            o.stderr
        );
    }
    assert_eq!(
        klaxon(&env, &["list", "--project", &q], None).await.code,
        1,
        "nothing was stored"
    );

    // a stored rule with on-call problems (forced in): `rules check` names each with its fix
    let file = json!([{"_id": q, "notifications": [
        {"_id": ObjectId::new().to_hex(), "isEnabled": true, "whatToReceive": "ONLY_NEW", "resolveAfter": 500,
         "channels": {"pagerduty": {"isEnabled": true, "endpoint": key, "minPeriod": 0}}},
        {"_id": ObjectId::new().to_hex(), "isEnabled": true, "whatToReceive": "ONLY_NEW",
         "escalation": [{"after": 600000, "channels": {}}, {"after": 60000, "channels": {}}],
         "channels": {"pagerduty": {"isEnabled": true, "endpoint": key, "minPeriod": 0}}},
        {"_id": ObjectId::new().to_hex(), "isEnabled": true, "whatToReceive": "ONLY_NEW",
         "quietHours": [{"days": ["mon"], "from": "22:00", "to": "22:00", "timezone": "UTC"}],
         "channels": {"pagerduty": {"isEnabled": true, "endpoint": key, "minPeriod": 0}}}
    ]}])
    .to_string();
    ok(&klaxon(&env, &["import", "--file", "-", "--force"], Some(&file)).await);
    let check = klaxon(&env, &["check", "--project", &q], None).await;
    assert_eq!(check.code, 1, "{}", check.stdout);
    for want in [
        "`resolveAfter` must be 0 (never) or milliseconds between 1000",
        "set `resolveAfter` in milliseconds",
        "escalation step 2 has `after` 60000, not later than step 1's 600000",
        "order the steps by `after`",
        "`quietHours[0]` goes from 22:00 to 22:00: a window that never ends",
        "span midnight",
    ] {
        assert!(check.stdout.contains(want), "{want} in:\n{}", check.stdout);
    }
}

/// Issue #43's CLI fixes: a refused import never says "stored"; `--escalate AFTER:CHANNEL=ENDPOINT` (repeatable)
/// stores escalation steps; a quiet-hours value without a time zone says so; an import's `name` is kept and
/// exported; `dead replay` without an argument shows a usage naming `--all`.
#[tokio::test]
async fn import_wording_escalate_flag_quiet_hours_time_zone_names_and_dead_replay_usage() {
    let env = env();
    let project = ObjectId::new().to_hex();
    let off = json!({"isEnabled": false, "endpoint": "", "minPeriod": 60});
    let cannot_notify = json!({"_id": ObjectId::new().to_hex(), "isEnabled": true, "whatToReceive": "SEEN_MORE",
        "threshold": 20, "thresholdPeriod": 3_600_000, "channels": {"email": off}});
    let broken = json!({"_id": ObjectId::new().to_hex(), "isEnabled": true, "whatToReceive": "SEEN_MORE",
        "thresholdPeriod": 60000, "channels": {"slack": {"isEnabled": true, "endpoint": "https://s.test/x"}}});
    let file =
        json!([{"_id": project, "name": "Acme", "notifications": [cannot_notify, broken]}]).to_string();
    let refused = klaxon(&env, &["import", "--file", "-"], Some(&file)).await;
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(refused.stderr.contains("nothing imported"), "{}", refused.stderr);
    assert!(
        !refused.stderr.contains("stored"),
        "a refusal must not say stored: {}",
        refused.stderr
    );
    assert!(
        refused
            .stderr
            .contains("1 warning(s), which would not block the import"),
        "{}",
        refused.stderr
    );

    // With a name: kept (Klaxon's own field) and exported.
    let named = json!([{"_id": project, "name": "Acme <shop>", "notifications": []}]).to_string();
    ok(&klaxon(&env, &["import", "--file", "-"], Some(&named)).await);
    let exported = json_of(&klaxon(&env, &["export", "--project", &project], None).await);
    assert_eq!(exported[0]["name"], "Acme <shop>", "{exported}");
    let bad_name = json!([{"_id": project, "name": "x".repeat(101), "notifications": []}]).to_string();
    let o = klaxon(&env, &["import", "--file", "-"], Some(&bad_name)).await;
    assert_ne!(o.code, 0);
    assert!(
        o.stderr
            .contains("`name`: a project name must be 1 to 100 characters"),
        "{}",
        o.stderr
    );

    // --escalate, repeatable: one step per AFTER.
    let added = klaxon(
        &env,
        &[
            "add",
            "--project",
            &project,
            "--seen-more",
            "5/1h",
            "--webhook",
            "https://alerts.example.com/k",
            "--escalate",
            "15m:pagerduty=r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE",
            "--escalate",
            "1h:email=lead@example.com",
            "--json",
        ],
        None,
    )
    .await;
    let rule = json_of(&added)["rule"].clone();
    assert_eq!(rule["escalation"][0]["after"], 900_000, "{rule}");
    assert_eq!(
        rule["escalation"][0]["channels"]["pagerduty"]["endpoint"], "r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE",
        "{rule}"
    );
    assert_eq!(
        rule["escalation"][1]["channels"]["email"]["endpoint"], "lead@example.com",
        "{rule}"
    );
    let bad = klaxon(
        &env,
        &[
            "add",
            "--project",
            &project,
            "--webhook",
            "https://a.example/k",
            "--escalate",
            "15m",
        ],
        None,
    )
    .await;
    assert_ne!(bad.code, 0, "{}", bad.stderr);
    assert!(bad.stderr.contains("AFTER:CHANNEL=ENDPOINT"), "{}", bad.stderr);

    // Quiet hours without a time zone: named as such, not blamed on `from`.
    let o = klaxon(
        &env,
        &[
            "add",
            "--project",
            &project,
            "--seen-more",
            "5/1h",
            "--webhook",
            "https://a.example/k",
            "--quiet-hours",
            "mon-fri 22:00-7:00",
        ],
        None,
    )
    .await;
    assert_ne!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("the time zone is missing"), "{}", o.stderr);
    assert!(!o.stderr.contains("`from`"), "{}", o.stderr);

    // `dead replay` alone: a usage error that shows both ways to call it.
    let (code, out, err) = env.run(&["dead", "replay"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("klaxon dead replay --all") && err.contains("--id"),
        "{err}"
    );
}
