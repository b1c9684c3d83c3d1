//! The documentation is tested like code: no document points outside the repository, the example rules
//! import cleanly and the README's quickstart ends in a real notification, and docs/webhook.md's payload schema
//! and signature snippets (Python, Node) hold against a delivery Klaxon itself made.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

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
fn example_rules_import_cleanly_and_the_quickstart_ends_in_an_email() {
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

    // Quickstart: run, publish a new error, the email arrives at the local SMTP server.
    let mut k = env.spawn("run", &[]);
    let title = format!("TypeError: quickstart {}", env.namespace);
    env.ok(&[
        "publish",
        "--project",
        &project,
        "--title",
        &title,
        "--group",
        "quickstart",
        "--new",
    ]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mails = loop {
        let m = klaxon_testkit::smtp::messages_containing(&title);
        if !m.is_empty() || Instant::now() > deadline {
            break m;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        mails.len(),
        1,
        "one email for the ONLY_NEW rule; log:\n{}",
        k.logs()
    );
    assert!(mails[0].contains("dev@example.com"), "{}", mails[0]);
    assert_eq!(k.terminate(Duration::from_secs(15)), Some(0));
}
