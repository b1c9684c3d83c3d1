//! What a newcomer trips over (issue #35), each through the real binary: the warning of `rules add` names the
//! rule it stored, misspelt keys are a `rules check` warning, `klaxon run` names the service it waits for,
//! Teams to a local http receiver, boolean variables spelt the usual ways.

mod common;

use std::time::Duration;

use common::{free_port, json_file, object_id, Env};
use klaxon_testkit::http_sink::{HttpSink, Reply};
use serde_json::json;

/// An environment where private endpoints are not allowed (the default a newcomer has), warnings only.
fn newcomer() -> Env {
    Env::new()
        .unset("KLAXON_ALLOW_PRIVATE_ENDPOINTS")
        .set("KLAXON_LOG", "warn")
}

/// Item 1: the warning names the id `rules add` printed (the stored one), and comes after the result.
#[test]
fn rules_add_warns_about_the_rule_it_stored_after_saying_so() {
    let env = newcomer();
    let project = object_id();
    let (code, out) = env.run_merged(&[
        "rules",
        "add",
        "--project",
        &project,
        "--only-new",
        "--webhook",
        "http://127.0.0.1:9/hook",
    ]);
    assert_eq!(code, 0, "{out}");
    let added = out
        .lines()
        .find_map(|l| l.strip_prefix("added rule "))
        .unwrap_or_else(|| panic!("no added line: {out}"));
    let id = added.split_whitespace().next().expect("an id").to_owned();
    let (at_added, at_warning) = (
        out.find("added rule").expect("added"),
        out.find("warning:").unwrap_or_else(|| panic!("no warning: {out}")),
    );
    assert!(at_added < at_warning, "the result first:\n{out}");
    assert!(
        out[at_warning..].contains(&format!("rule {id}")),
        "the warning names the stored rule {id}:\n{out}"
    );
    assert_eq!(
        out.matches("rule ").count(),
        2,
        "no other rule id is named:\n{out}"
    );
    // the id it names is one `rules rm` knows
    let removed = env.ok(&["rules", "rm", "--project", &project, &id]);
    assert!(removed.starts_with(&format!("removed rule {id}")), "{removed}");
}

/// Item 2: a key one edit from a known one, and `patterns`, are warnings with "did you mean".
#[test]
fn misspelt_keys_are_rules_check_warnings_with_did_you_mean() {
    let env = newcomer();
    let project = object_id();
    let file = json_file(
        &env,
        "typos.json",
        &json!([{"_id": project, "notifications": [{
            "isEnabled": true, "whatToReceive": "ONLY_NEW",
            "includng": ["database"], "patterns": ["^Type"], "uidAdded": "5e3eef0679fa3700a0198a50",
            "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/x", "minPeriod": 0}}
        }]}]),
    );
    let file = file.to_str().expect("path");
    let (code, out, err) = env.run(&["rules", "check", "--file", file]);
    assert_eq!(code, 1, "warnings are problems: {out}{err}");
    assert!(
        out.contains("unknown key `includng` is ignored; did you mean `including`?"),
        "{out}"
    );
    assert!(
        out.contains("unknown key `patterns` is ignored; did you mean `includingPatterns`?"),
        "{out}"
    );
    assert!(!out.contains("uidAdded"), "Hawk's own keys stay silent: {out}");
    // the rule is still usable: imported with a warning, as Hawk's unknown keys are kept
    let (code, out, err) = env.run(&["rules", "import", "--file", file]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("did you mean `including`?"), "{err}");

    // a rule without the typo has no problem
    let clean = json_file(
        &env,
        "clean.json",
        &json!([{"_id": object_id(), "notifications": [{
            "isEnabled": true, "whatToReceive": "ONLY_NEW", "including": ["database"],
            "includingPatterns": ["^Type"],
            "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/x", "minPeriod": 0}}
        }]}]),
    );
    let (code, out, err) = env.run(&["rules", "check", "--file", clean.to_str().expect("path")]);
    assert_eq!(code, 0, "{out}{err}");
}

/// Item 8: no Rust debug formatting in the message about an unknown `whatToReceive`.
#[test]
fn an_unknown_what_to_receive_is_quoted_as_json() {
    let env = newcomer();
    let file = json_file(
        &env,
        "moar.json",
        &json!([{"_id": object_id(), "notifications": [{
            "isEnabled": true, "whatToReceive": "SEEN_MOAR", "threshold": 2, "thresholdPeriod": 60000,
            "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/x", "minPeriod": 0}}
        }]}]),
    );
    let (code, out, err) = env.run(&["rules", "check", "--file", file.to_str().expect("path")]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("unknown `whatToReceive` \"SEEN_MOAR\""), "{out}");
    assert!(!out.contains("Some("), "{out}");
}

/// Item 6: an unreachable Redis is named with its address, never its password, in the log and in /readyz.
#[test]
fn run_names_the_unreachable_redis_and_its_address() {
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let env = Env::new()
        .set("KLAXON_REDIS_URL", &format!("redis://:hunter2pw@{address}/0"))
        .set("KLAXON_LOG", "info,lapin=warn");
    let mut k = env.start_at("run", &format!("127.0.0.1:{}", free_port()), &[]);
    let want = format!("not ready: waiting for redis at {address}");
    let seen = klaxon_testkit::eventually_blocking(Duration::from_secs(30), || {
        k.get("/readyz")
            .filter(|(status, body)| *status == 503 && body.contains(&want))
    });
    assert!(
        seen.is_some(),
        "/readyz: {:?}; log:\n{}",
        k.get("/readyz"),
        k.logs()
    );
    let logged = klaxon_testkit::eventually_blocking(Duration::from_secs(30), || {
        let logs = k.logs();
        logs.lines()
            .any(|l| l.contains("cannot connect; retrying") && l.contains("redis") && l.contains(&address))
            .then_some(logs)
    });
    let logs = logged.unwrap_or_else(|| panic!("no retry line naming {address}:\n{}", k.logs()));
    assert!(!logs.contains("hunter2pw"), "the password is never logged:\n{logs}");
    assert!(!seen.expect("seen").1.contains("hunter2pw"));
    assert_eq!(k.terminate(Duration::from_secs(15)), Some(0), "{}", k.logs());
}

/// Item 7: with --allow-private-endpoints, `rules add --teams http://127.0.0.1:…` stores what `test-notify`
/// delivers to; Teams itself stays https.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teams_to_a_local_http_receiver_is_stored_as_test_notify_delivers() {
    let env = newcomer();
    let sink = HttpSink::start().await.expect("sink");
    sink.set_default(Reply::status(202));
    let url = sink.url("/workflows/local");
    let project = object_id();
    let (code, out, err) = env.run(&[
        "test-notify",
        "--channel",
        "teams",
        "--endpoint",
        &url,
        "--allow-private-endpoints",
    ]);
    assert_eq!(code, 0, "test-notify delivers: {out}{err}");
    assert_eq!(sink.wait_for_count(1, Duration::from_secs(10)).await.len(), 1);
    let (code, out, err) = env.run(&[
        "rules",
        "add",
        "--project",
        &project,
        "--only-new",
        "--teams",
        &url,
        "--allow-private-endpoints",
    ]);
    assert_eq!(code, 0, "rules add agrees: {out}{err}");
    assert!(out.starts_with("added rule "), "{out}");
    assert_eq!(err, "", "nothing to warn about: {err}");
    let (code, out, err) = env.run(&["rules", "check", "--project", &project]);
    assert_eq!(code, 0, "{out}{err}");
    // without the flag: stored, with the private-address warning (the senders would refuse it)
    let (code, out, err) = env.run(&[
        "rules",
        "add",
        "--project",
        &project,
        "--only-new",
        "--teams",
        &url,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("--allow-private-endpoints"), "{err}");
    // a public http URL is not Teams
    let (code, out, err) = env.run(&[
        "rules",
        "add",
        "--project",
        &project,
        "--only-new",
        "--teams",
        "http://teams.example.com/workflows/x",
        "--allow-private-endpoints",
    ]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("Teams Workflows webhooks are https"), "{err}");
}

/// Item 8: KLAXON_ALLOW_PRIVATE_ENDPOINTS takes the usual boolean spellings.
#[test]
fn boolean_variables_take_the_usual_spellings() {
    let add = |value: &str| {
        let env = newcomer().set("KLAXON_ALLOW_PRIVATE_ENDPOINTS", value);
        env.run(&[
            "rules",
            "add",
            "--project",
            &object_id(),
            "--only-new",
            "--webhook",
            "http://127.0.0.1:9/hook",
        ])
    };
    for yes in ["1", "true", "yes", "on", "TRUE", "Yes"] {
        let (code, out, err) = add(yes);
        assert_eq!(code, 0, "{yes}: {out}{err}");
        assert!(!err.contains("warning"), "{yes} allows: {err}");
    }
    for no in ["0", "false", "no", "off"] {
        let (code, out, err) = add(no);
        assert_eq!(code, 0, "{no}: {out}{err}");
        assert!(err.contains("warning"), "{no} does not allow: {err}");
    }
    let (code, out, err) = add("maybe");
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("KLAXON_ALLOW_PRIVATE_ENDPOINTS") || err.contains("maybe"), "{err}");
}
