//! The command line as users and scripts meet it, through the real binary against the real services: output
//! formats, humantime durations, exit codes (0 ok, 1 problems, 2 usage, 3 a service unreachable), per-command
//! help, shell completions, `klaxon doctor` and `klaxon test-notify --json`.

mod common;

use std::process::{Command, Stdio};

use common::{object_id, Env};
use klaxon_testkit::http_sink::{HttpSink, Reply};
use serde_json::{json, Value};

/// Runs klaxon with `env`'s variables but no log filter of the test's (`KLAXON_LOG`, `RUST_LOG`): the
/// default level a user gets. Returns (exit code, stdout, stderr).
fn run_default_log(env: &Env, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(common::BIN);
    cmd.args(args).stdin(Stdio::null()).env_remove("RUST_LOG");
    for (k, _) in std::env::vars() {
        if k.starts_with("KLAXON_") && !k.starts_with("KLAXON_TEST_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in &env.vars {
        if k != "KLAXON_LOG" {
            cmd.env(k, v);
        }
    }
    let out = cmd.output().expect("run klaxon");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect()
}

fn rules_of(project: &str) -> Value {
    json!([{"_id": project, "notifications": [
        {"_id": object_id(), "isEnabled": true, "whatToReceive": "SEEN_MORE", "including": [], "excluding": [],
         "threshold": 100, "thresholdPeriod": 3_600_000,
         "channels": {"webhook": {"isEnabled": true, "endpoint": "https://alerts.example.com/k", "minPeriod": 60}}},
        {"_id": object_id(), "isEnabled": true, "whatToReceive": "ONLY_NEW", "including": [], "excluding": [],
         "channels": {"email": {"isEnabled": true, "endpoint": "dev@example.com", "minPeriod": 0}}}
    ]}])
}

#[test]
fn every_listing_speaks_table_json_and_ndjson_and_old_json_flags_keep_their_output() {
    let env = Env::new();
    let project = object_id();
    env.import(&rules_of(&project));

    // rules list: a table with a header, a JSON array, one object per line; `--json` = `-o json`.
    let table = env.ok(&["rules", "list", "--project", &project]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("PROJECT") && lines[0].contains("STATUS"),
        "{table}"
    );
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines.iter().all(|l| !l.ends_with(' ')),
        "no padding at line ends:\n{table}"
    );
    // aligned: every row's RULE column starts where the header's does
    let col = lines[0].find("RULE").expect("RULE column");
    assert!(
        lines[1..]
            .iter()
            .all(|l| l.as_bytes()[col - 1] == b' ' && l.as_bytes()[col] != b' '),
        "{table}"
    );
    let array: Value =
        serde_json::from_str(&env.ok(&["rules", "list", "--project", &project, "-o", "json"])).expect("JSON");
    assert_eq!(array.as_array().map(Vec::len), Some(2), "{array}");
    let legacy: Value =
        serde_json::from_str(&env.ok(&["rules", "list", "--project", &project, "--json"])).expect("JSON");
    assert_eq!(legacy, array, "--json is -o json for rules list");
    let nd = json_lines(&env.ok(&[
        "rules",
        "list",
        "--project",
        &project,
        "--output-format",
        "ndjson",
    ]));
    assert_eq!(Value::Array(nd), array);
    let via_env = {
        let env = env.clone().set("KLAXON_OUTPUT_FORMAT", "ndjson");
        json_lines(&env.ok(&["rules", "list", "--project", &project]))
    };
    assert_eq!(via_env.len(), 2, "KLAXON_OUTPUT_FORMAT works like -o");
    let check: Value =
        serde_json::from_str(&env.ok(&["rules", "check", "--project", &project, "--format", "json"]))
            .expect("JSON");
    assert_eq!(check, json!([]));

    // mute list
    let out = env.ok(&[
        "mute",
        "add",
        "--project",
        &project,
        "--group",
        "g1",
        "--for",
        "2h",
    ]);
    let id = out.split_whitespace().nth(1).expect("mute id").to_owned();
    let table = env.ok(&["mute", "list", "--project", &project]);
    assert!(
        table.starts_with("MUTE") && table.contains(&id) && table.contains("g1"),
        "{table}"
    );
    let mutes: Value =
        serde_json::from_str(&env.ok(&["mute", "list", "--project", &project, "-o", "json"])).expect("JSON");
    assert_eq!(mutes[0]["muteId"], json!(id), "{mutes}");
    assert_eq!(
        json_lines(&env.ok(&["mute", "list", "--project", &project, "-o", "ndjson"]))[0]["muteId"],
        json!(id)
    );
    env.ok(&["mute", "rm", "--project", &project, &id]);
    assert_eq!(
        env.ok(&["mute", "list", "--project", &project, "-o", "json"])
            .trim(),
        "[]"
    );
    assert_eq!(
        env.ok(&["mute", "list", "--project", &project]).trim(),
        "no active mutes"
    );

    // explain: -o json is the API's answer, ndjson one verdict per line, the table has a header
    let ask = [
        "explain",
        "--project",
        &project,
        "--title",
        "Boom",
        "--group",
        "g1",
    ];
    let v: Value = serde_json::from_str(&env.ok(&[&ask[..], &["-o", "json"]].concat())).expect("JSON");
    assert_eq!(v["rules"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(
        json_lines(&env.ok(&[&ask[..], &["-o", "ndjson"]].concat())).len(),
        2
    );
    assert!(env.ok(&ask).starts_with("RULE"), "table with a header");

    // dead list and deliveries list: `--json` printed one object per line and still does
    assert_eq!(env.ok(&["dead", "list", "-o", "json"]).trim(), "[]");
    assert_eq!(env.ok(&["dead", "list", "--json"]), "");
    assert_eq!(
        env.ok(&["deliveries", "list", "--project", &project, "-o", "json"])
            .trim(),
        "[]"
    );
    assert_eq!(
        env.ok(&["deliveries", "list", "--project", &project, "--json"]),
        ""
    );
    assert!(env
        .ok(&["deliveries", "list", "--project", &project])
        .contains("no deliveries"));
    // Redis out of reach (a closed loopback port): the trail still lists, and the missing held messages are said;
    // `--status held` alone has nothing else to show and fails
    let no_redis = env.clone().set("KLAXON_REDIS_URL", "redis://127.0.0.1:1/");
    let (code, out, err) = no_redis.run(&["deliveries", "list", "--project", &project, "-o", "json"]);
    assert_eq!((code, out.trim()), (0, "[]"), "{err}");
    assert!(
        err.contains("held by quiet hours") || err.contains("Redis"),
        "{err}"
    );
    assert!(err.contains("listing the delivery trail without them"), "{err}");
    let (code, _, err) = no_redis.run(&["deliveries", "list", "--project", &project, "--status", "held"]);
    assert_ne!(code, 0, "{err}");

    // an old `--json` wins over `-o` and KLAXON_OUTPUT_FORMAT (no script breaks where the variable is set)
    let rules = ["rules", "list", "--project", project.as_str()];
    let v: Value =
        serde_json::from_str(&env.ok(&[&rules[..], &["--json", "-o", "ndjson"]].concat())).expect("JSON");
    assert_eq!(v, array);
    let v: Value =
        serde_json::from_str(&env.ok(&[&rules[..], &["-o", "ndjson", "--json"]].concat())).expect("JSON");
    assert_eq!(v, array);
    let v: Value = serde_json::from_str(
        &env.clone()
            .set("KLAXON_OUTPUT_FORMAT", "ndjson")
            .ok(&[&rules[..], &["--json"]].concat()),
    )
    .expect("JSON");
    assert_eq!(v, array);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(common::delete_queues(&env));
}

#[test]
fn durations_take_humantime_and_plain_numbers_keep_their_old_unit() {
    let env = Env::new();
    let project = object_id();
    let secs_from_now = |args: &[&str]| -> i64 {
        let mut all = vec!["mute", "add", "--project", project.as_str()];
        all.extend_from_slice(args);
        let out = env.ok(&all);
        let at = out.split_whitespace().nth(3).expect("until");
        let until = humantime::parse_rfc3339(at).expect("RFC 3339");
        match until.duration_since(std::time::SystemTime::now()) {
            Ok(d) => d.as_secs() as i64,
            Err(e) => -(e.duration().as_secs() as i64),
        }
    };
    let secs = secs_from_now(&["--for", "90"]);
    assert!((80..=95).contains(&secs), "--for 90 is 90 seconds: {secs}");
    let secs = secs_from_now(&["--for", "1h30m"]);
    assert!((5390..=5405).contains(&secs), "--for 1h30m: {secs}");

    // Flags and environment variables of the processes: a good value passes parsing (the command then stops
    // at a later check, before connecting), a bad one is a usage error naming the flag.
    for (args, var) in [
        (["run", "--rules-ttl", "5m"], None),
        (["run", "--dedup-ttl", "7d"], None),
        (["sender", "--breaker-window", "1m"], None),
        (["sender", "--breaker-open", "45"], None),
        (["run", "--batch-wait-ms", "5"], None),
        (["sender", "--retry-schedule", "1s,30s,2m"], None),
        (["worker", "--namespace", "x"], Some(("KLAXON_RULES_TTL", "2m"))),
        (["sender", "--namespace", "x"], Some(("KLAXON_DEDUP_TTL", "3600"))),
    ] {
        let mut e = env.clone();
        if let Some((k, v)) = var {
            e = e.set(k, v);
        }
        let mut all = args.to_vec();
        // an invalid later value, so that nothing starts
        all.extend_from_slice(if args[0] == "worker" {
            &["--batch-max", "0"]
        } else {
            &["--sender-prefetch", "0"]
        });
        let (code, _, err) = e.run(&all);
        assert_eq!(code, 2, "{all:?}: {err}");
        assert!(
            err.contains("must be at least 1"),
            "{all:?} parsed its duration: {err}"
        );
    }
    for (args, var) in [
        (vec!["run", "--rules-ttl", "5 parsecs"], None),
        (vec!["sender", "--retry-schedule", "1,soon"], None),
        (vec!["worker"], Some(("KLAXON_RULES_TTL", "forever"))),
    ] {
        let mut e = env.clone();
        if let Some((k, v)) = var {
            e = e.set(k, v);
        }
        let (code, _, err) = e.run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("duration") || err.contains("not a duration"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn exit_codes_say_usage_problems_and_unreachable_services() {
    let env = Env::new();
    let project = object_id();
    // 2: clap's errors and our own validation of flag values
    for args in [
        vec!["rules", "list", "--no-such-flag"],
        vec!["mute", "list", "--project", "not-an-id"],
        vec!["rules", "rm", "xyz"],
        vec![
            "rules",
            "add",
            "--project",
            &project,
            "--seen-more",
            "0/1h",
            "--webhook",
            "https://x.test/",
        ],
        vec!["run", "--batch-max", "0"],
        vec!["sender", "--breaker-failure-ratio", "2"],
        vec!["completions", "tcsh"],
    ] {
        let (code, out, err) = env.run(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
    }
    // 3: a backing service unreachable
    let nothing = format!("127.0.0.1:{}", common::free_port());
    for (var, url, args) in [
        (
            "KLAXON_REDIS_URL",
            format!("redis://{nothing}/"),
            vec!["mute", "list", "--project", &project],
        ),
        (
            "KLAXON_AMQP_URL",
            format!("amqp://guest:guest@{nothing}/%2f"),
            vec!["dead", "list"],
        ),
        (
            "KLAXON_MONGO_URL",
            format!("mongodb://{nothing}"),
            vec!["rules", "list"],
        ),
        (
            "KLAXON_MONGO_URL",
            format!("mongodb://{nothing}"),
            vec!["deliveries", "list"],
        ),
    ] {
        let (code, out, err) = env.clone().set(var, &url).run(&args);
        assert_eq!(code, 3, "{args:?} with {var}={url}: {out}{err}");
        assert!(err.starts_with("klaxon: error: "), "{err}");
    }
    // 1: problems found
    let bad = object_id();
    env.import_force(
        &json!([{"_id": project, "notifications": [{"_id": bad, "isEnabled": true, "whatToReceive": "SEEN_MORE",
            "threshold": 0, "thresholdPeriod": 60000,
            "channels": {"webhook": {"isEnabled": true, "endpoint": "https://x.test/", "minPeriod": 0}}}]}]),
    );
    let (code, out, _) = env.run(&["rules", "check", "--project", &project]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&bad), "{out}");
    let (code, _, _) = env.run(&["rules", "rm", &object_id(), "--project", &project]);
    assert_eq!(code, 1, "no such rule: a problem, not a usage error");
}

#[test]
fn worker_and_sender_help_show_only_their_own_flags_and_every_command_has_examples() {
    let env = Env::new();
    let help = |args: &[&str]| {
        let mut all = args.to_vec();
        all.push("--help");
        env.ok(&all)
    };
    let delivery = [
        "--smtp-url",
        "--telegram-api",
        "--rate-slack",
        "--breaker-window",
        "--retry-schedule",
        "--dedup-ttl",
        "--max-attempts",
    ];
    let evaluation = [
        "--batch-max",
        "--batch-wait-ms",
        "--prefetch <",
        "--rules-ttl",
        "--output <",
    ];
    let worker = help(&["worker"]);
    let sender = help(&["sender"]);
    let run = help(&["run"]);
    for f in delivery {
        assert!(!worker.contains(f), "worker --help shows {f}:\n{worker}");
        assert!(sender.contains(f), "sender --help lacks {f}");
        assert!(run.contains(f), "run --help lacks {f}");
    }
    for f in evaluation {
        assert!(!sender.contains(f), "sender --help shows {f}:\n{sender}");
        assert!(worker.contains(f), "worker --help lacks {f}");
        assert!(run.contains(f), "run --help lacks {f}");
    }
    // every process serves the HTTP API, whose direct notifications follow --allow-private-endpoints
    assert!(worker.contains("--allow-private-endpoints"), "{worker}");
    for h in [&worker, &sender, &run] {
        assert!(h.contains("--http-addr") && h.contains("--queue-type") && h.contains("KLAXON_HTTP_ADDR"));
    }
    // a sender reads no rules (project names come in the tasks): it takes no --rules-ttl, and its own flags are
    // checked before it connects
    let (code, _, err) = env.run(&["sender", "--rules-ttl", "5m"]);
    assert_eq!(code, 2);
    assert!(err.contains("--rules-ttl"), "{err}");
    let (code, _, err) = env.run(&["sender", "--max-attempts", "0"]);
    assert_eq!(code, 2);
    assert!(err.contains("--max-attempts"), "{err}");

    let top = help(&[]);
    for code in [
        "0  ok",
        "1  problems found",
        "2  usage error",
        "3  a backing service",
    ] {
        assert!(
            top.contains(code),
            "klaxon --help documents exit code `{code}`:\n{top}"
        );
    }
    for cmd in [
        &["run"][..],
        &["worker"],
        &["sender"],
        &["rules"],
        &["rules", "add"],
        &["rules", "list"],
        &["rules", "rm"],
        &["rules", "enable"],
        &["rules", "disable"],
        &["rules", "export"],
        &["rules", "import"],
        &["rules", "check"],
        &["publish"],
        &["deliveries"],
        &["deliveries", "list"],
        &["dead"],
        &["dead", "list"],
        &["dead", "replay"],
        &["invalid"],
        &["invalid", "list"],
        &["invalid", "show"],
        &["invalid", "replay"],
        &["explain"],
        &["mute"],
        &["mute", "add"],
        &["mute", "list"],
        &["mute", "rm"],
        &["test-notify"],
        &["probe"],
        &["bench"],
        &["doctor"],
        &["completions"],
        &["namespace"],
        &["namespace", "delete"],
    ] {
        let h = help(cmd);
        let examples = h
            .split_once("Examples:\n")
            .map(|(_, e)| e)
            .unwrap_or_else(|| panic!("{cmd:?} --help has no Examples:\n{h}"));
        assert!(
            examples
                .lines()
                .next()
                .is_some_and(|l| l.trim_start().starts_with("klaxon ") || l.contains(" klaxon ")),
            "{cmd:?}: {examples}"
        );
    }
}

#[test]
fn completions_for_every_shell() {
    let env = Env::new();
    let bash = env.ok(&["completions", "bash"]);
    assert!(
        bash.contains("complete -F _klaxon") && bash.contains("doctor") && bash.contains("--output-format"),
        "{bash}"
    );
    for shell in ["zsh", "fish", "powershell", "elvish"] {
        let out = env.ok(&["completions", shell]);
        assert!(out.contains("klaxon") && out.contains("rules"), "{shell}: {out}");
    }
}

#[test]
fn doctor_is_all_ok_against_the_services_and_fails_on_a_wrong_redis_port() {
    let env = Env::new()
        // credentials in URLs and the bot token are never printed
        .set(
            "KLAXON_SMTP_URL",
            &klaxon_testkit::smtp_url().replace("smtp://", "smtp://user:smtpSECRET@"),
        )
        .set("KLAXON_TELEGRAM_BOT_TOKEN", "123:tokenSECRET");
    // The namespace's queues exist once any command declared them.
    env.ok(&["dead", "list"]);
    // (generous timeouts: this machine's two cores are shared with other builds and tests)
    let (code, out, err) = run_default_log(&env, &["doctor", "--timeout", "10s"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(err, "", "nothing but the report");
    for line in out.lines() {
        let status = line.split_whitespace().next().unwrap_or_default();
        assert!(["ok", "warn"].contains(&status), "{line}");
        assert!(!line.ends_with(' '), "{line:?}");
    }
    // (rules may warn: PoloDB serves one database to every namespace, with other tests' broken rules in it)
    for check in ["redis", "rabbitmq", "mongodb", "smtp", "telegram"] {
        assert!(
            out.lines()
                .any(|l| l.split_whitespace().nth(1) == Some(check) && l.starts_with("ok")),
            "{check} ok:\n{out}"
        );
    }
    let events = format!("queue {}.events ", env.namespace);
    assert!(
        out.lines()
            .any(|l| l.starts_with("ok") && l.contains(&events) && l.contains("0 messages")),
        "{out}"
    );
    assert!(
        out.contains("Redis 7") || out.contains("Redis 6.2") || out.contains("Redis 8"),
        "{out}"
    );
    assert!(out.contains("220"), "the SMTP greeting: {out}");
    for secret in ["smtpSECRET", "tokenSECRET", "guest:guest"] {
        assert!(!out.contains(secret), "{secret} printed:\n{out}");
    }

    let checks: Value =
        serde_json::from_str(&env.ok(&["doctor", "-o", "json", "--timeout", "10s"])).expect("JSON");
    let checks = checks.as_array().expect("array");
    assert!(
        checks
            .iter()
            .any(|c| c["check"] == "mongodb" && c["status"] == "ok"),
        "{checks:?}"
    );
    assert!(checks.iter().all(|c| c["detail"].is_string()));

    let wrong = env.clone().set(
        "KLAXON_REDIS_URL",
        &format!("redis://127.0.0.1:{}/", common::free_port()),
    );
    let started = std::time::Instant::now();
    let (code, out, err) = run_default_log(&wrong, &["doctor", "--timeout", "2s"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("FAIL") && l.split_whitespace().nth(1) == Some("redis")),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l.starts_with("ok") && l.contains("rabbitmq")),
        "the other checks still run: {out}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "short timeouts"
    );

    // A Redis Cluster is recognised from a node list.
    let cluster = env
        .clone()
        .set("KLAXON_REDIS_URL", &klaxon_testkit::redis_cluster_url());
    let (code, out, err) = run_default_log(&cluster, &["doctor", "--timeout", "10s"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines().any(|l| l.starts_with("ok")
            && l.contains("redis cluster")
            && l.contains("cluster mode detected")),
        "{out}"
    );
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(common::delete_queues(&env));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_notify_json_on_stdout_when_sent_and_on_stderr_when_not() {
    let env = Env::new().set("KLAXON_ALLOW_PRIVATE_ENDPOINTS", "false");
    let hook = HttpSink::start().await.expect("sink");
    hook.set_default(Reply::status(200));
    let url = hook.url("/t");
    let (code, out, err) = run_default_log(
        &env,
        &[
            "test-notify",
            "--channel",
            "webhook",
            "--endpoint",
            &url,
            "--json",
        ],
    );
    assert_eq!(code, 1, "a private address is refused: {out}{err}");
    assert_eq!(out, "", "failures go to stderr");
    let v: Value =
        serde_json::from_str(err.trim()).unwrap_or_else(|e| panic!("one JSON object ({e}): {err}"));
    assert_eq!(v["ok"], false);
    assert_eq!(v["class"], "permanent", "{v}");
    assert!(v["reason"].as_str().is_some_and(|r| r.contains("refused")), "{v}");

    let (code, out, err) = run_default_log(
        &env,
        &[
            "test-notify",
            "--channel",
            "webhook",
            "--endpoint",
            &url,
            "--json",
            "--allow-private-endpoints",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let v: Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("one JSON object ({e}): {out}"));
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["channel"], "webhook");
    assert!(v["notificationId"].is_string());
    assert_eq!(
        hook.wait_for_count(1, std::time::Duration::from_secs(5))
            .await
            .len(),
        1
    );

    let (code, out, err) =
        run_default_log(&env, &["test-notify", "--channel", "webhook", "--endpoint", &url]);
    assert_eq!(code, 1);
    assert!(
        out.is_empty() && err.starts_with("failed (permanent)"),
        "{out}{err}"
    );
}

#[test]
fn cli_commands_print_their_result_and_nothing_else_at_the_default_log_level() {
    let env = Env::new();
    let project = object_id();
    env.import(&rules_of(&project));
    env.ok(&["mute", "add", "--project", &project, "--for", "1m"]);
    for args in [
        vec!["rules", "list", "--project", &project],
        vec!["rules", "check", "--project", &project],
        vec!["dead", "list"],
        vec!["deliveries", "list", "--project", &project],
        vec!["mute", "list", "--project", &project],
        vec![
            "explain",
            "--project",
            &project,
            "--title",
            "Boom",
            "--group",
            "g",
        ],
        vec!["doctor", "-o", "json", "--timeout", "10s"],
    ] {
        let (code, out, err) = run_default_log(&env, &args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        assert!(!out.is_empty(), "{args:?} printed its result");
        assert_eq!(err, "", "{args:?} printed more than its result");
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(common::delete_queues(&env));
}

/// The MongoDB driver ends a dropped client's sessions in a background task that could race its own pool
/// shutdown at exit and panic (a backtrace on stderr in about 7 % of `doctor` runs before commands closed
/// their clients). 30 runs: before the fix this failed about 9 times in 10.
#[test]
fn doctor_never_prints_a_driver_panic_at_exit() {
    let env = Env::new();
    for i in 0..30 {
        let (code, out, err) = run_default_log(&env, &["doctor", "-o", "json", "--timeout", "10s"]);
        assert_eq!(code, 0, "run {i}: {out}{err}");
        assert_eq!(err, "", "run {i} printed more than its result");
    }
}

#[test]
fn rules_check_names_a_project_whose_reminders_can_exceed_the_budget() {
    let env = Env::new();
    let (loud, quiet) = (object_id(), object_id());
    let rule = |every: u64| {
        json!({"isEnabled": true, "whatToReceive": "ONLY_NEW", "including": [], "excluding": [],
            "renotify": {"every": every, "max": 100},
            "channels": {"webhook": {"isEnabled": true, "endpoint": "https://hooks.example.test/h", "minPeriod": 0}}})
    };
    // loud: 10 rules × 100 reminders an hour (every 1 s, max 100) = 1,000 > 600; quiet: 2 × 60 = 120
    let file = common::json_file(
        &env,
        "budget",
        &json!([
            {"_id": loud, "notifications": (0..10).map(|_| rule(1_000)).collect::<Vec<_>>()},
            {"_id": quiet, "notifications": [rule(60_000), rule(60_000)]}
        ]),
    );
    let path = file.to_string_lossy().into_owned();
    let (code, out, err) = env.run(&["rules", "check", "--file", &path]);
    assert_eq!(code, 0, "a note, not a problem: {out}{err}");
    assert!(
        out.contains(&format!(
            "project {loud}: one alert of each rule can send up to 1000 reminders an hour"
        )) && out.contains("over the budget of 600"),
        "{out}"
    );
    assert!(!out.contains(&quiet.to_string()), "{out}");
    // a higher budget (flag or env) silences it; 0 means none
    for budget in ["1000", "0"] {
        let (code, out, _) = env
            .clone()
            .set("KLAXON_REMINDER_BUDGET", budget)
            .run(&["rules", "check", "--file", &path]);
        assert_eq!(code, 0, "{out}");
        assert!(!out.contains("reminders an hour"), "budget {budget}: {out}");
    }
    std::fs::remove_file(file).ok();
}
