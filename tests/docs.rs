//! The documentation is tested like code: no document points outside the repository, the example rules
//! import cleanly, the README's quickstart runs as written to a real notification and a passing
//! `klaxon doctor`, and docs/webhook.md's payload schema and signature snippets (Python, Node) hold against a
//! delivery Klaxon itself made.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{object_id, Env};
use klaxon_testkit::http_sink::{HttpSink, Reply};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every Markdown file of the repository (not under target/ or hidden directories).
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        // `templates/` holds message templates (minijinja in Markdown), not documentation
        if name.starts_with('.') || name == "target" || name == "node_modules" || name == "templates" {
            continue;
        }
        if p.is_dir() {
            markdown_files(&p, out);
        } else if name.ends_with(".md") {
            out.push(p);
        }
    }
}

/// `[text](target)` link targets of a Markdown text.
fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].trim().to_owned());
            rest = &rest[end..];
        }
    }
    out
}

#[test]
fn docs_refer_to_nothing_outside_the_repository() {
    let root = root();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    assert!(files.len() >= 3, "found the docs: {files:?}");
    let mut problems = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read");
        let rel = f.strip_prefix(&root).unwrap_or(f).display().to_string();
        for target in link_targets(&text) {
            let target = target.split_whitespace().next().unwrap_or("");
            if target.is_empty()
                || target.starts_with('#')
                || target.contains("://")
                || target.starts_with("mailto:")
            {
                continue;
            }
            let path = target.split('#').next().unwrap_or(target);
            let resolved = f.parent().unwrap_or(&root).join(path);
            match resolved.canonicalize() {
                Ok(p) if p.starts_with(root.canonicalize().expect("root")) => {}
                Ok(_) => problems.push(format!("{rel}: link `{target}` leaves the repository")),
                Err(_) => problems.push(format!("{rel}: link `{target}` points to nothing")),
            }
        }
        // Files named in prose: the contract file the project was built from is not part of the repository.
        for (n, line) in text.lines().enumerate() {
            if line.contains("../shared/") || line.contains("INTERFACE.md") {
                problems.push(format!(
                    "{rel}:{}: refers to a file outside the repository: {line}",
                    n + 1
                ));
            }
        }
    }
    // Source comments count too: they are documentation a reader follows.
    assert!(
        problems.is_empty(),
        "dangling references:\n{}",
        problems.join("\n")
    );
}

/// The first fenced block of `lang` after `marker` in a document.
fn code_block(doc: &str, marker: &str, lang: &str) -> String {
    let start = doc
        .find(marker)
        .unwrap_or_else(|| panic!("`{marker}` not in the document"));
    let fence = format!("```{lang}\n");
    let from = doc[start..]
        .find(&fence)
        .map(|i| start + i + fence.len())
        .expect("block");
    let len = doc[from..].find("\n```").expect("closing fence");
    doc[from..from + len + 1].to_owned()
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A real signed delivery: `klaxon test-notify` to a local receiver with a webhook secret.
async fn signed_delivery(secret: &str) -> (Vec<u8>, String) {
    let env = Env::new().set("KLAXON_WEBHOOK_SECRET", secret);
    let hook = HttpSink::start().await.expect("sink");
    hook.script([Reply::status(200)]);
    let url = hook.url("/hook");
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        env.run(&["test-notify", "--channel", "webhook", "--endpoint", &url])
    })
    .await
    .expect("join");
    assert_eq!(code, 0, "{out}{err}");
    let req = hook.requests().pop().expect("one request");
    let sig = req.header("x-klaxon-signature").expect("signed").to_owned();
    (req.body.to_vec(), sig)
}

#[tokio::test]
async fn webhook_snippets_verify_a_real_signature_and_the_schema_holds() {
    let doc = std::fs::read_to_string(root().join("docs/webhook.md")).expect("docs/webhook.md");
    let secret = "s3cret-for-docs-test";
    let (body, sig) = signed_delivery(secret).await;
    let dir = tempfile::tempdir().expect("tmp");
    let body_file = dir.path().join("body.json");
    let tampered_file = dir.path().join("tampered.json");
    std::fs::write(&body_file, &body).expect("write");
    let mut tampered = body.clone();
    tampered.extend_from_slice(b" ");
    std::fs::write(&tampered_file, &tampered).expect("write");

    let mut ran = 0;
    if have("python3") {
        let py = code_block(&doc, "Python (standard library only", "python")
            + "\nimport sys\nprint(verify(sys.argv[2].encode(), open(sys.argv[1], 'rb').read(), sys.argv[3]))\n";
        for (file, key, want) in [
            (&body_file, secret, "True"),
            (&tampered_file, secret, "False"),
            (&body_file, "wrong", "False"),
        ] {
            let out = Command::new("python3")
                .arg("-c")
                .arg(&py)
                .arg(file)
                .arg(key)
                .arg(&sig)
                .output()
                .expect("python3");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                want,
                "python, {file:?} {key}"
            );
        }
        ran += 1;

        // The schema block is valid JSON Schema and the real body satisfies it (where jsonschema is installed).
        let schema = code_block(&doc, "## Payload schema", "json");
        let schema_value: Value = serde_json::from_str(&schema).expect("the schema block is JSON");
        assert_eq!(schema_value["required"].as_array().map(Vec::len), Some(6));
        let schema_file = dir.path().join("schema.json");
        std::fs::write(&schema_file, &schema).expect("write");
        let check = "import json, sys\ntry:\n    import jsonschema\nexcept ImportError:\n    print('skip'); sys.exit(0)\n\
schema = json.load(open(sys.argv[1]))\njsonschema.Draft202012Validator.check_schema(schema)\n\
v = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())\n\
v.validate(json.load(open(sys.argv[2])))\nbad = json.load(open(sys.argv[2])); bad['events'][0]['count'] = 'x'\n\
print('ok' if not v.is_valid(bad) else 'schema too loose')\n";
        let out = Command::new("python3")
            .arg("-c")
            .arg(check)
            .arg(&schema_file)
            .arg(&body_file)
            .output()
            .expect("python3");
        let said = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(said == "ok" || said == "skip", "{said}");
        if said == "skip" {
            eprintln!("python3 has no jsonschema module: schema checked as JSON only");
        }
    }
    if have("node") {
        let js = code_block(&doc, "Node.js (no packages", "js")
            + "\nconst [, file, key, sig] = process.argv;\nconsole.log(verify(key, require('node:fs').readFileSync(file), sig));\n";
        for (file, key, want) in [
            (&body_file, secret, "true"),
            (&tampered_file, secret, "false"),
            (&body_file, "wrong", "false"),
        ] {
            let out = Command::new("node")
                .arg("-e")
                .arg(&js)
                .arg(file)
                .arg(key)
                .arg(&sig)
                .output()
                .expect("node");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                want,
                "node, {file:?} {key}"
            );
        }
        ran += 1;
    }
    if ran == 0 {
        eprintln!("neither python3 nor node found: signature snippets not run");
    }
}

#[test]
fn example_rules_import_cleanly() {
    // The example uses a fixed project id; PoloDB shares one database between namespaces, so the test imports
    // the same rules under a project id of its own.
    let text = std::fs::read_to_string(root().join("examples/rules.json")).expect("examples/rules.json");
    let mut rules: Value = serde_json::from_str(&text).expect("JSON");
    let project = object_id();
    rules[0]["_id"] = Value::String(project.clone());
    for rule in rules[0]["notifications"].as_array_mut().expect("rules") {
        rule["_id"] = Value::String(object_id());
    }
    let env = Env::new();
    let file = common::json_file(&env, "examples", &rules);
    let out = env.ok(&["rules", "import", "--file", file.to_str().expect("path")]);
    assert!(out.contains("stored 3 rule(s)"), "{out}");
    let (code, out, err) = env.run(&["rules", "check", "--project", &project]);
    assert_eq!(code, 0, "the examples have no problems: {out}{err}");
}

/// The README's quickstart, run as a newcomer would: its block's lines in one `bash -e`, in a fresh shell that has
/// no `KLAXON_SMTP_URL` (the block's `export` must provide it), from the repository root. Only the install step is
/// not run (a release build takes ~10 minutes): the test checks it is `cargo install --path . --locked` and puts
/// the binary under test on the PATH instead, where `cargo install` would put `klaxon`. The test's own settings
/// come from the environment, never from edits of the commands: its namespace, a free `KLAXON_HTTP_ADDR`, and a
/// `KLAXON_SMTP_FROM` of its own to recognise its email among others with the same title.
#[test]
fn the_readme_quickstart_runs_as_written_to_an_email_and_a_passing_doctor() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let block = code_block(&readme, "**Quickstart**", "sh");
    let mut script = String::from(
        "set -euo pipefail\n\
         trap 'rc=$?; if [ \"$rc\" -ne 0 ]; then kill $(jobs -p) 2>/dev/null; fi' EXIT\n",
    );
    let mut install = None;
    let mut ran = Vec::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let command = line.split("  #").next().unwrap_or(line).trim();
        if command.starts_with("cargo install") {
            install = Some(command.to_owned());
            continue;
        }
        ran.push(command.to_owned());
        script.push_str(line);
        script.push('\n');
    }
    assert_eq!(
        install.as_deref(),
        Some("cargo install --path . --locked"),
        "{block}"
    );
    for step in [
        "export KLAXON_SMTP_URL=",
        "klaxon rules import",
        "klaxon run &",
        "klaxon publish",
        "klaxon doctor",
    ] {
        assert!(
            ran.iter().any(|c| c.starts_with(step)),
            "`{step}` in the quickstart:\n{block}"
        );
    }
    assert!(
        ran.last().is_some_and(|c| c == "klaxon doctor"),
        "the quickstart ends with `klaxon doctor`:\n{block}"
    );
    script.push_str("echo \"klaxon-run-pid=$!\"\n");

    let bin_dir = tempfile::tempdir().expect("tmp");
    std::os::unix::fs::symlink(common::BIN, bin_dir.path().join("klaxon")).expect("symlink");
    let path = format!(
        "{}:{}",
        bin_dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let env = Env::new().unset("KLAXON_SMTP_URL");
    let from = format!("quickstart-{}@example.com", env.namespace);
    let env = env
        .set("KLAXON_HTTP_ADDR", &format!("127.0.0.1:{}", common::free_port()))
        .set("KLAXON_SMTP_FROM", &from);
    let out_file = bin_dir.path().join("stdout");
    let err_file = bin_dir.path().join("stderr");
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(&script)
        .current_dir(root())
        .env("PATH", path)
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        // files, not pipes: `klaxon run &` keeps running (and writing) after the script ends
        .stdout(std::fs::File::create(&out_file).expect("stdout file"))
        .stderr(std::fs::File::create(&err_file).expect("stderr file"));
    for (k, _) in std::env::vars() {
        if k.starts_with("KLAXON_") && !k.starts_with("KLAXON_TEST_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in &env.vars {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("bash");
    let status =
        klaxon_testkit::eventually_blocking(Duration::from_secs(120), || child.try_wait().ok().flatten());
    let stdout = std::fs::read_to_string(&out_file).unwrap_or_default();
    let stderr = || std::fs::read_to_string(&err_file).unwrap_or_default();
    let Some(status) = status else {
        let _ = child.kill();
        panic!("the quickstart did not finish in 120 s:\n{stdout}\n{}", stderr());
    };
    assert!(
        status.success(),
        "the quickstart failed ({status}):\n{stdout}\n{}",
        stderr()
    );
    let run_pid: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("klaxon-run-pid="))
        .and_then(|p| p.trim().parse().ok())
        .expect("the background `klaxon run`'s pid");
    let stop_run = || {
        let _ = Command::new("kill")
            .args(["-TERM", &run_pid.to_string()])
            .status();
    };

    // `klaxon doctor` (the last command) passed: no FAIL, SMTP reached through the exported variable.
    let doctor: Vec<&str> = stdout
        .lines()
        .filter(|l| ["ok ", "warn ", "FAIL "].iter().any(|s| l.starts_with(s)))
        .collect();
    let smtp_ok = doctor
        .iter()
        .any(|l| l.starts_with("ok") && l.split_whitespace().nth(1) == Some("smtp") && l.contains(":2525"));
    if doctor.iter().any(|l| l.starts_with("FAIL")) || !smtp_ok {
        stop_run();
        panic!("doctor:\n{stdout}\n{}", stderr());
    }
    // `klaxon run` said where its console is and what to run next.
    assert!(
        stderr().contains("console and HTTP API ready") && stderr().contains("klaxon doctor"),
        "{}",
        stderr()
    );

    // The example's ONLY_NEW rule emailed dev@example.com.
    let mails = klaxon_testkit::eventually_blocking(Duration::from_secs(30), || {
        let m = klaxon_testkit::smtp::messages_containing(&from);
        (!m.is_empty()).then_some(m)
    })
    .unwrap_or_default();
    stop_run();
    assert_eq!(mails.len(), 1, "one email; run's log:\n{}", stderr());
    assert!(
        mails[0].contains("dev@example.com") && mails[0].contains("TypeError: x is undefined"),
        "{}",
        mails[0]
    );
    // `klaxon run` drains and exits after SIGTERM.
    let stopped = klaxon_testkit::eventually_blocking(Duration::from_secs(15), || {
        // gone, or a zombie nobody reaped yet (the orphan's parent is whatever init this machine has)
        let stat = std::fs::read_to_string(format!("/proc/{run_pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
        matches!(state, None | Some(Some('Z'))).then_some(())
    });
    assert!(stopped.is_some(), "klaxon run (pid {run_pid}) still running");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(common::delete_queues(&env));
}
