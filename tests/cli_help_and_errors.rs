//! What a newcomer meets first, through the real binary: `--help` (variables named without values, each
//! subcommand showing only the global options it reads), malformed URLs as usage errors naming the flag, errors
//! that say each cause once, and log colours only on a terminal.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{object_id, Env};

/// Runs klaxon with `env` and `extra` variables; kills it after `within`. Returns (exit code, stdout, stderr);
/// the code is `None` when it had to be killed.
fn run_bounded(
    env: &Env,
    extra: &[(&str, &str)],
    args: &[&str],
    within: Duration,
) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(common::BIN);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR");
    for (k, _) in std::env::vars() {
        if k.starts_with("KLAXON_") && !k.starts_with("KLAXON_TEST_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in &env.vars {
        cmd.env(k, v);
    }
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn klaxon");
    let started = Instant::now();
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if started.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().expect("output");
    (
        code,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_names_variables_without_values_and_each_command_shows_only_the_globals_it_reads() {
    // a variable set in the environment is not printed by --help either (it may be a secret)
    let env = Env::new().set("KLAXON_EVENTS_QUEUE", "queue-from-the-environment");
    let help = |args: &[&str]| {
        let mut all = args.to_vec();
        all.push("--help");
        env.ok(&all)
    };
    let top = help(&[]);
    assert!(top.contains("[env: KLAXON_MONGO_DB]"), "{top}");
    assert!(top.contains("[default: the namespace]"), "{top}");
    assert!(!top.contains("KLAXON_MONGO_DB="), "as if set to empty:\n{top}");
    assert!(!top.contains("queue-from-the-environment"), "{top}");
    assert!(!top.contains("=]"), "{top}");

    let globals = [
        "--namespace",
        "--amqp-url",
        "--redis-url",
        "--mongo-url",
        "--mongo-db",
        "--events-queue",
        "--log-format",
    ];
    for (cmd, shown) in [
        (&["completions"][..], &[][..]),
        (&["probe"], &[]),
        (&["test-notify"], &["--log-format"]),
        (&["mute", "add"], &["--namespace", "--redis-url", "--log-format"]),
        (
            &["alerts", "ack"],
            &[
                "--namespace",
                "--amqp-url",
                "--redis-url",
                "--mongo-url",
                "--mongo-db",
                "--events-queue",
                "--log-format",
            ],
        ),
        (
            &["rules", "list"],
            &["--namespace", "--mongo-url", "--mongo-db", "--log-format"],
        ),
        (
            &["dead", "list"],
            &["--namespace", "--amqp-url", "--events-queue", "--log-format"],
        ),
        (
            &["explain"],
            &[
                "--namespace",
                "--redis-url",
                "--mongo-url",
                "--mongo-db",
                "--log-format",
            ],
        ),
        (&["run"], &globals[..]),
        (&["doctor"], &globals[..]),
    ] {
        let h = help(cmd);
        for flag in globals {
            let listed = h
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{flag} <")));
            assert_eq!(
                listed,
                shown.contains(&flag),
                "klaxon {} --help {} {flag}:\n{h}",
                cmd.join(" "),
                if listed { "lists" } else { "lacks" }
            );
        }
        assert!(!h.contains("=]"), "{cmd:?}:\n{h}");
    }

    // hidden is not removed: every flag and variable is still accepted where it was, before or after the
    // subcommand, and a variable a command does not read is not even validated
    let bash = env.ok(&["completions", "bash", "--amqp-url", "x", "--namespace", "y"]);
    assert!(bash.contains("_klaxon"), "{bash}");
    let project = object_id();
    for args in [
        vec!["mute", "list", "--project", &project, "--mongo-url", "nonsense"],
        vec!["--mongo-url", "nonsense", "mute", "list", "--project", &project],
    ] {
        let out = env.ok(&args);
        assert_eq!(out.trim(), "no active mutes", "{args:?}");
    }
    let (code, out, err) = run_bounded(
        &env,
        &[("KLAXON_AMQP_URL", "nonsense")],
        &["mute", "list", "--project", &project],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(0), "{out}{err}");
}

#[test]
fn a_malformed_url_is_a_usage_error_naming_the_flag_before_anything_connects() {
    let env = Env::new();
    let project = object_id();
    let secret = "pw-SECRET";
    for (var, value, flag, args) in [
        (
            "KLAXON_AMQP_URL",
            "nonsense".to_owned(),
            "--amqp-url",
            vec!["dead", "list"],
        ),
        (
            "KLAXON_AMQP_URL",
            format!("amqp://guest:guest@127.0.0.1:5672/%2f,amqp://u:{secret}@h:notaport/"),
            "--amqp-url",
            vec!["publish", "--project", &project, "--title", "t", "--group", "g"],
        ),
        (
            "KLAXON_REDIS_URL",
            "::".to_owned(),
            "--redis-url",
            vec!["mute", "list", "--project", &project],
        ),
        (
            "KLAXON_REDIS_URL",
            format!("redis://:{secret}@h:notaport/"),
            "--redis-url",
            vec!["explain", "--project", &project, "--title", "t", "--group", "g"],
        ),
        (
            "KLAXON_MONGO_URL",
            "x".to_owned(),
            "--mongo-url",
            vec!["rules", "list"],
        ),
        (
            "KLAXON_MONGO_URL",
            format!("mongodb://u:{secret}@h:notaport"),
            "--mongo-url",
            vec!["deliveries", "list"],
        ),
        // the long-running processes too: they used to retry a URL that can never work, forever
        (
            "KLAXON_AMQP_URL",
            "nonsense".to_owned(),
            "--amqp-url",
            vec!["run"],
        ),
        ("KLAXON_REDIS_URL", "::".to_owned(), "--redis-url", vec!["worker"]),
        ("KLAXON_MONGO_URL", "x".to_owned(), "--mongo-url", vec!["sender"]),
        (
            "KLAXON_AMQP_URL",
            "nonsense".to_owned(),
            "--amqp-url",
            vec!["doctor"],
        ),
    ] {
        // as a variable and as the flag
        let mut as_flag = args.clone();
        as_flag.extend([flag, value.as_str()]);
        for (extra, args) in [(vec![(var, value.as_str())], args.clone()), (vec![], as_flag)] {
            let started = Instant::now();
            let (code, out, err) = run_bounded(&env, &extra, &args, Duration::from_secs(30));
            assert_eq!(code, Some(2), "{args:?} {extra:?}: {out}{err}");
            assert!(
                err.starts_with("klaxon: error: ") && err.contains(flag) && err.contains(var),
                "{args:?}: names the flag and its variable: {err}"
            );
            assert!(err.contains("URL"), "{err}");
            assert!(
                !err.contains(secret),
                "the URL's password is never printed: {err}"
            );
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "nothing connected: {args:?}"
            );
        }
    }
}

#[test]
fn errors_say_each_cause_once() {
    let env = Env::new();
    let project = object_id();
    let nothing = format!("127.0.0.1:{}", common::free_port());
    for (var, url, args) in [
        (
            "KLAXON_AMQP_URL",
            format!("amqp://guest:guest@{nothing}/%2f"),
            vec!["dead", "list"],
        ),
        (
            "KLAXON_REDIS_URL",
            format!("redis://{nothing}/"),
            vec!["mute", "list", "--project", &project],
        ),
        (
            "KLAXON_MONGO_URL",
            format!("mongodb://{nothing}/?serverSelectionTimeoutMS=500&connectTimeoutMS=500"),
            vec!["rules", "list"],
        ),
    ] {
        let (code, out, err) = run_bounded(&env, &[(var, &url)], &args, Duration::from_secs(30));
        assert_eq!(code, Some(3), "{args:?}: {out}{err}");
        assert_eq!(
            err.matches("Connection refused").count(),
            1,
            "{args:?}: the cause once: {err}"
        );
        for noise in ["labels:", "source: None", "Kind:"] {
            assert!(!err.contains(noise), "{args:?}: {err}");
        }
    }
}

/// `klaxon run` against a RabbitMQ port where nothing listens logs a WARN line at once; what it looks like
/// with stderr on a pipe, on a terminal (`script` gives it one), and on a terminal with `NO_COLOR`.
#[test]
fn log_lines_are_coloured_only_on_a_terminal_without_no_color() {
    let env = Env::new()
        .set(
            "KLAXON_AMQP_URL",
            &format!("amqp://guest:guest@127.0.0.1:{}/%2f", common::free_port()),
        )
        .set("KLAXON_HTTP_ADDR", &format!("127.0.0.1:{}", common::free_port()));
    let esc = "\u{1b}[";
    let (_, _, piped) = run_bounded(&env, &[], &["run"], Duration::from_secs(3));
    assert!(piped.contains("WARN"), "{piped}");
    assert!(!piped.contains(esc), "no colours into a pipe: {piped:?}");

    let have_script = Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_script {
        eprintln!("util-linux `script` not found: the terminal half of this test did not run");
        return;
    }
    let on_a_terminal = |no_color: Option<&str>| {
        let line = format!("timeout 3 {} run", common::BIN);
        let mut extra = vec![];
        if let Some(v) = no_color {
            extra.push(("NO_COLOR", v));
        }
        // `script` runs the command on a new pseudo-terminal and copies what it writes to stdout
        let mut cmd = Command::new("script");
        cmd.args(["-qec", &line, "/dev/null"])
            .stdin(Stdio::null())
            .env_remove("RUST_LOG")
            .env_remove("NO_COLOR");
        for (k, _) in std::env::vars() {
            if k.starts_with("KLAXON_") && !k.starts_with("KLAXON_TEST_") {
                cmd.env_remove(k);
            }
        }
        for (k, v) in env
            .vars
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(extra)
        {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("script");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let tty = on_a_terminal(None);
    assert!(
        tty.contains("WARN") && tty.contains(esc),
        "colours on a terminal: {tty:?}"
    );
    let plain = on_a_terminal(Some("1"));
    assert!(
        plain.contains("WARN") && !plain.contains(esc),
        "NO_COLOR: {plain:?}"
    );
}

/// `klaxon test-notify` sends what the webhook schema promises (ObjectIds for `projectId` and `ruleId`), and two
/// endpoints on one host are told apart once redacted (a fingerprint of the whole endpoint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_notify_sends_object_ids_and_tells_endpoints_on_one_host_apart() {
    use klaxon_testkit::http_sink::{HttpSink, Reply};
    let env = Env::new();
    let hook = HttpSink::start().await.expect("sink");
    hook.set_default(Reply::status(200));
    let is_object_id = |v: &serde_json::Value| {
        v.as_str()
            .is_some_and(|s| s.len() == 24 && s.chars().all(|c| c.is_ascii_hexdigit()))
    };
    let mut destinations = Vec::new();
    for (path, project) in [
        ("/a/secret-path-1", None),
        ("/b/secret-path-2", Some(object_id())),
    ] {
        let url = hook.url(path);
        let mut args = vec![
            "test-notify",
            "--channel",
            "webhook",
            "--endpoint",
            url.as_str(),
            "--json",
        ];
        if let Some(p) = &project {
            args.extend(["--project", p.as_str()]);
        }
        let env = env.clone();
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        let out = tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            env.ok(&args)
        })
        .await
        .expect("join");
        let v: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
        let dest = v["destination"].as_str().unwrap_or_default().to_owned();
        assert!(
            dest.starts_with("http://127.0.0.1/…#") && !dest.contains("secret"),
            "{v}"
        );
        destinations.push(dest);

        let got = hook
            .wait_for_count(destinations.len(), Duration::from_secs(5))
            .await;
        let body: serde_json::Value =
            serde_json::from_slice(&got[destinations.len() - 1].body).expect("JSON body");
        assert!(is_object_id(&body["projectId"]), "{body}");
        assert!(is_object_id(&body["ruleId"]), "{body}");
        match &project {
            Some(p) => assert_eq!(body["projectId"], p.as_str()),
            None => assert_eq!(body["projectId"], "000000000000000000000000"),
        }
    }
    assert_ne!(destinations[0], destinations[1], "two endpoints on one host");
    let (code, _, err) = env.run(&[
        "test-notify",
        "--channel",
        "webhook",
        "--endpoint",
        &hook.url("/x"),
        "--project",
        "klaxon-test",
    ]);
    assert_eq!(code, 2, "{err}");
}
