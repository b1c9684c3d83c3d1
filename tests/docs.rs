//! The documentation is tested like code: no document (Markdown file or Rust comment) points outside the
//! repository or to a file it does not have, the example rules import cleanly, the README's quickstart runs as
//! written to a real notification and a passing `klaxon doctor`, and docs/webhook.md's payload schema and
//! signature snippets (Python, Node) hold against a delivery Klaxon itself made (and so do the Standard
//! Webhooks reference libraries, where `scripts/services` installed them).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{object_id, reference_hmac_sha256, Env};
use klaxon_testkit::http_sink::HttpSink;
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir` whose name ends with `ext` (not under target/, node_modules/, templates/ or hidden
/// directories): the Markdown documents and the Rust sources.
fn files_ending(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
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
            files_ending(&p, ext, out);
        } else if name.ends_with(ext) {
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

/// The directory of the package `file` belongs to (the nearest one with a Cargo.toml), for paths a crate's
/// comments name relative to itself.
fn crate_dir(root: &Path, file: &Path) -> PathBuf {
    file.ancestors()
        .skip(1)
        .take_while(|d| d.starts_with(root))
        .find(|d| d.join("Cargo.toml").is_file())
        .unwrap_or(root)
        .to_path_buf()
}

/// The comments of a Rust source, line by line: `(line number, text)` for every line a `//`, `///`, `//!` or
/// `/* … */` comment (nested ones too) covers, with only the comment's part of the line. Strings, raw strings,
/// byte strings and character literals are skipped, so `"http://…"` or a `"// …"` in a string is no comment;
/// a lifetime (`'a`) is not mistaken for a character literal.
fn comments(source: &str) -> Vec<(usize, String)> {
    let chars: Vec<char> = source.chars().collect();
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let mut out: Vec<(usize, String)> = Vec::new();
    let (mut i, mut line) = (0, 1);
    // Pushes chars[from..to] as comment text, split at newlines.
    let mut push = |from: usize, to: usize, mut line: usize| {
        let mut text = String::new();
        for &c in &chars[from..to] {
            if c == '\n' {
                out.push((line, std::mem::take(&mut text)));
                line += 1;
            } else {
                text.push(c);
            }
        }
        out.push((line, text));
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && at(i + 1) == '/' {
            let end = chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |n| i + n);
            push(i, end, line);
            i = end;
        } else if c == '/' && at(i + 1) == '*' {
            let (start, mut depth) = (i, 0usize);
            while i < chars.len() {
                if at(i) == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if at(i) == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            let end = i.min(chars.len());
            push(start, end, line);
            line += chars[start..end].iter().filter(|&&c| c == '\n').count();
        } else if c == '"' {
            // an ordinary (or byte, or C) string: up to the first unescaped quote
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if at(i) == '\n' {
                    line += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' {
            // a character literal ('x', '\n', '\'', '"') or a lifetime / label ('a, 'static)
            if at(i + 1) == '\\' {
                let close = chars[i + 3..]
                    .iter()
                    .position(|&c| c == '\'')
                    .map_or(chars.len(), |n| i + 3 + n);
                i = close + 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if matches!(word.as_str(), "r" | "br" | "cr") {
                let hashes = chars[i..].iter().take_while(|&&c| c == '#').count();
                if at(i + hashes) == '"' {
                    // a raw string: ends at a quote followed by as many hashes
                    i += hashes + 1;
                    while i < chars.len() {
                        if chars[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#') {
                            i += hashes + 1;
                            break;
                        }
                        if chars[i] == '\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                }
            }
        } else {
            if c == '\n' {
                line += 1;
            }
            i += 1;
        }
    }
    out
}

/// What is wrong with the comments of one Rust source: `(line, problem)` for each comment line that names a file
/// outside the repository (the contract the project was built from, the team's shared folder), or a
/// repository path (under docs/, lua/, scripts/, deploy/, examples/) for which `exists` says no. Paths with
/// wildcards (`lua/digest_*.lua`) are patterns, not checked.
fn comment_problems(source: &str, exists: impl Fn(&str) -> bool) -> Vec<(usize, String)> {
    const OUTSIDE: [&str; 2] = ["INTERFACE.md", "../shared/"];
    const DIRS: [&str; 5] = ["docs/", "lua/", "scripts/", "deploy/", "examples/"];
    let mut out = Vec::new();
    for (line, text) in comments(source) {
        for name in OUTSIDE.iter().filter(|n| text.contains(*n)) {
            out.push((
                line,
                format!("refers to `{name}`, outside the repository: {}", text.trim()),
            ));
        }
        let is_path_char = |c: char| c.is_alphanumeric() || "_./-".contains(c);
        for (start, _) in text.match_indices(|c: char| c.is_alphabetic()) {
            let before = text[..start].chars().next_back();
            if before.is_some_and(|b| is_path_char(b) || b == ':') {
                continue;
            }
            let rest = &text[start..];
            if !DIRS.iter().any(|d| rest.starts_with(d)) {
                continue;
            }
            let len = rest.find(|c: char| !is_path_char(c)).unwrap_or(rest.len());
            let path = rest[..len].trim_end_matches('.');
            let pattern = rest[len..].starts_with(['*', '{', '<']);
            if !pattern && !exists(path) {
                out.push((line, format!("names `{path}`, which is not in the repository")));
            }
        }
    }
    out
}

#[test]
fn comment_problems_table() {
    let exists = |p: &str| ["docs/api.md", "lua/", "lua/fixed_window.lua", "scripts/test"].contains(&p);
    #[rustfmt::skip]
    let cases: &[(&str, &str, &[usize])] = &[
        ("a line comment", "let a = 1; // see INTERFACE.md\n", &[1]),
        ("a doc comment", "fn f() {}\n/// the format of INTERFACE.md\nfn g() {}\n", &[2]),
        ("an inner doc comment", "//! Per ../shared/STYLE.md\n", &[1]),
        ("a block comment, on its second line", "/* one\n   INTERFACE.md */ fn f() {}\n", &[2]),
        ("a nested block comment", "/* a /* b */ INTERFACE.md */\nfn f() {}\n", &[1]),
        ("code after a nested block comment is code", "/* a /* b */ c */ \"INTERFACE.md\";\n", &[]),
        ("the name in a string", "let s = \"INTERFACE.md\";\n", &[]),
        ("a string with an escaped quote", "let s = \"a\\\"b // INTERFACE.md\";\n", &[]),
        ("a URL in a string, then a comment", "let u = \"http://x\"; // INTERFACE.md\n", &[1]),
        ("a raw string", "let s = r#\"\"// INTERFACE.md\"#; // fine\n", &[]),
        ("a raw string over lines", "let s = r\"\n// INTERFACE.md\n\";\n// INTERFACE.md\n", &[4]),
        ("a byte string", "let s = b\"// INTERFACE.md\";\n", &[]),
        ("a quote as a character", "let q = '\"'; // INTERFACE.md\n", &[1]),
        ("an escaped quote character", "let q = '\\''; let s = \"// INTERFACE.md\";\n", &[]),
        ("a lifetime is no character", "fn f<'a>(s: &'a str) {} // INTERFACE.md\n", &[1]),
        ("a raw identifier", "let r#type = 1; // INTERFACE.md\n", &[1]),
        ("a document that exists", "// see docs/api.md and lua/fixed_window.lua.\n", &[]),
        ("a document that does not", "// see docs/exactly-once.md\n", &[1]),
        ("a missing script, second line", "fn f() {}\n/// lua/nothing.lua\n", &[2]),
        ("a pattern is not a path", "// lua/digest_*.lua and lua/{a,b}.lua, docs/<name>.md\n", &[]),
        ("a path in code is not checked", "let p = root.join(\"docs/nothing.md\");\n", &[]),
        ("another repository's path", "// vector's `src/internal_events/`, a URL https://x.org/docs/y.md\n", &[]),
        ("inside a longer path", "// crates/counter/lua/missing.lua\n", &[]),
        ("a clean file", "//! Nothing to see.\nfn main() {}\n", &[]),
    ];
    for (what, source, want) in cases {
        let got: Vec<usize> = comment_problems(source, exists).iter().map(|(l, _)| *l).collect();
        assert_eq!(&got, want, "{what}: {:?}", comment_problems(source, exists));
    }
}

#[test]
fn docs_refer_to_nothing_outside_the_repository() {
    let root = root();
    let mut files = Vec::new();
    files_ending(&root, ".md", &mut files);
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
    let mut sources = Vec::new();
    for dir in ["crates", "src", "tests"] {
        files_ending(&root.join(dir), ".rs", &mut sources);
    }
    assert!(sources.len() >= 50, "found the sources: {}", sources.len());
    for f in &sources {
        let text = std::fs::read_to_string(f).expect("read");
        let rel = f.strip_prefix(&root).unwrap_or(f).display().to_string();
        let krate = crate_dir(&root, f);
        let exists = |p: &str| root.join(p).exists() || krate.join(p).exists();
        for (line, problem) in comment_problems(&text, exists) {
            problems.push(format!("{rel}:{line}: {problem}"));
        }
    }
    assert!(
        problems.is_empty(),
        "dangling references:\n{}",
        problems.join("\n")
    );
}

/// The first fenced block of `lang` after `marker` in a document.
/// The paths a text names (`crates/…`, `src/…`), with `{a,b}` groups expanded and `*` kept as a pattern.
fn named_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices(['c', 's']) {
        let rest = &text[i..];
        if !(rest.starts_with("crates/") || rest.starts_with("src/"))
            || text[..i].ends_with(|c: char| c.is_alphanumeric() || c == '/' || c == '_')
        {
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || "/_.-{},*".contains(c)))
            .unwrap_or(rest.len());
        let token = rest[..end].trim_end_matches(['.', ',']);
        match (token.find('{'), token.find('}')) {
            (Some(a), Some(b)) if a < b => {
                for name in token[a + 1..b].split(',') {
                    out.push(format!("{}{name}{}", &token[..a], &token[b + 1..]));
                }
            }
            _ => out.push(token.to_string()),
        }
    }
    out
}

/// Whether `path` (which may end in `*.rs`-style patterns or a `/`) names something in the repository.
fn path_exists(root: &Path, path: &str) -> bool {
    match path.rsplit_once('/') {
        Some((dir, file)) if file.contains('*') => {
            let (pre, post) = file.split_once('*').unwrap_or((file, ""));
            std::fs::read_dir(root.join(dir)).is_ok_and(|rd| {
                rd.flatten().any(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.starts_with(pre) && n.ends_with(post)
                })
            })
        }
        _ => root.join(path).exists(),
    }
}

/// The README's architecture section is the map a newcomer follows: every file it names exists, and it names
/// a file for each crate.
#[test]
fn the_architecture_section_names_files_that_exist() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README");
    let start = readme
        .find("\n## Architecture\n")
        .expect("an Architecture section");
    let section = &readme[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let paths = named_paths(section);
    let missing: Vec<&String> = paths.iter().filter(|p| !path_exists(&root, p)).collect();
    assert!(
        missing.is_empty(),
        "the Architecture section names files that do not exist: {missing:?}"
    );
    for krate in std::fs::read_dir(root.join("crates")).expect("crates/").flatten() {
        let name = format!("crates/{}/", krate.file_name().to_string_lossy());
        assert!(
            paths.iter().any(|p| p.starts_with(&name)),
            "the Architecture section names no file of {name}"
        );
    }
}

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

/// A real delivery: `klaxon run` with a master key, an ONLY_NEW rule of `project` with a webhook channel to a
/// local receiver, one event. Returns the recorded request and the endpoint.
async fn real_delivery(env: &Env, project: &str) -> (klaxon_testkit::Request, String) {
    let hook = HttpSink::start().await.expect("sink");
    let endpoint = hook.url("/hook?tenant=a");
    env.import(&serde_json::json!([{"_id": project, "notifications": [{
        "isEnabled": true, "whatToReceive": "ONLY_NEW", "including": [], "excluding": [],
        "channels": {"webhook": {"isEnabled": true, "endpoint": endpoint, "minPeriod": 0}}}]}]));
    let mut k = env.spawn("run", &[]);
    let title = format!("TypeError: docs {}", env.namespace);
    env.publish(project, &title, "docs").new_first().ok();
    let got = hook.wait_for_count(1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1, "one delivery; log:\n{}", k.logs());
    assert_eq!(k.terminate(Duration::from_secs(15)), Some(0));
    (got[0].clone(), endpoint)
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The endpoint's secret as a tenant gets it: `klaxon webhook secret -o json`.
fn cli_secret(env: &Env, project: &str, endpoint: &str) -> String {
    let v = env.webhook_secret(project, endpoint);
    v["secret"].as_str().expect("secret").to_owned()
}

/// One verification case for the documented verifiers: what they are given and the answer they must give.
fn case(what: &str, secret: Value, body: Option<&[u8]>, headers: Value, want: bool) -> Value {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    serde_json::json!({"what": what, "secret": secret, "body": body.map(|b| b64.encode(b)), "headers": headers,
                       "want": want})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_snippets_verify_a_real_delivery_and_the_schema_holds() {
    use klaxon_channels::webhook::EndpointSecret;
    let doc = std::fs::read_to_string(root().join("docs/webhook.md")).expect("docs/webhook.md");
    let env = Env::new().set("KLAXON_WEBHOOK_SECRET", DOCS_MASTER_KEY);
    let project = object_id();
    let (req, endpoint) = real_delivery(&env, &project).await;
    let body = req.body.to_vec();
    let header = |n: &str| req.header(n).unwrap_or_else(|| panic!("no {n}")).to_owned();
    let (id, stamp, signature) = (
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
    );
    assert_eq!(req.json()["notificationId"], id.as_str());
    let secret = cli_secret(&env, &project, &endpoint);
    let other_secret = cli_secret(&env, &object_id(), &endpoint);
    // Requests signed here, with the real secret, at chosen times: only the time makes them fail.
    let key = EndpointSecret::from_whsec(&secret).expect("a whsec_ secret");
    let signed_at = |at: i64| {
        serde_json::json!({"webhook-id": id, "webhook-timestamp": at.to_string(),
                                                 "webhook-signature": key.sign(&id, at, &body)})
    };
    let real =
        serde_json::json!({"webhook-id": id, "webhook-timestamp": stamp, "webhook-signature": signature});
    let with = |name: &str, value: Value| {
        let mut h = real.clone();
        h[name] = value;
        h
    };
    let without = |name: &str| {
        let mut h = real.clone();
        h.as_object_mut().expect("object").remove(name);
        h
    };
    let mut tampered = body.clone();
    tampered.extend_from_slice(b" ");
    let s = Value::String(secret.clone());
    let b = Some(body.as_slice());
    let now = now_s();
    let cases = vec![
        case("the real delivery", s.clone(), b, real.clone(), true),
        case("signed now, here", s.clone(), b, signed_at(now), true),
        case("tampered body", s.clone(), Some(&tampered), real.clone(), false),
        case(
            "stale: signed 6 minutes ago",
            s.clone(),
            b,
            signed_at(now - 360),
            false,
        ),
        case(
            "from the future: 6 minutes ahead",
            s.clone(),
            b,
            signed_at(now + 360),
            false,
        ),
        case(
            "replayed with a fresh timestamp",
            s.clone(),
            b,
            with("webhook-timestamp", json_str(now + 1)),
            false,
        ),
        case(
            "another project's secret",
            Value::String(other_secret),
            b,
            real.clone(),
            false,
        ),
        case(
            "a wrong secret",
            Value::String("whsec_bm90LXRoZS1zZWNyZXQtYXQtYWxsLXJlYWxseQ==".into()),
            b,
            real.clone(),
            false,
        ),
        case(
            "a secret that is not base64",
            Value::String("whsec_!!!ä".into()),
            b,
            real.clone(),
            false,
        ),
        case(
            "a secret that is not a string",
            serde_json::json!(42),
            b,
            real.clone(),
            false,
        ),
        case(
            "non-ASCII signature",
            s.clone(),
            b,
            with("webhook-signature", json_str("v1,ünïcödé∂ƒ")),
            false,
        ),
        case(
            "non-ASCII timestamp digits",
            s.clone(),
            b,
            with("webhook-timestamp", json_str("١٧٩٥٣٤٨٢٠٠")),
            false,
        ),
        case(
            "non-ASCII id",
            s.clone(),
            b,
            with("webhook-id", json_str("ïd-\u{202e}")),
            false,
        ),
        case(
            "bad base64 signature",
            s.clone(),
            b,
            with("webhook-signature", json_str("v1,%%%")),
            false,
        ),
        case("missing webhook-id", s.clone(), b, without("webhook-id"), false),
        case(
            "missing webhook-timestamp",
            s.clone(),
            b,
            without("webhook-timestamp"),
            false,
        ),
        case(
            "missing webhook-signature",
            s.clone(),
            b,
            without("webhook-signature"),
            false,
        ),
        case("no headers at all", s.clone(), b, serde_json::json!({}), false),
        case("headers that are not a mapping", s.clone(), b, Value::Null, false),
        case(
            "a header that is not a string",
            s.clone(),
            b,
            with("webhook-timestamp", serde_json::json!(17)),
            false,
        ),
        case("no body", s.clone(), None, real.clone(), false),
    ];
    // Body as text instead of bytes: a wrong type too.
    let mut text_body = case(
        "a body that is text, not bytes",
        s.clone(),
        b,
        real.clone(),
        false,
    );
    text_body["asText"] = Value::Bool(true);
    let mut cases = cases;
    cases.push(text_body);
    let want: Vec<bool> = cases.iter().map(|c| c["want"] == true).collect();

    let dir = tempfile::tempdir().expect("tmp");
    let cases_file = dir.path().join("cases.json");
    std::fs::write(&cases_file, serde_json::to_vec(&cases).expect("json")).expect("write");
    let run = |lang: &str, program: &str, code: String| -> Vec<bool> {
        let out = Command::new(program)
            .arg(if lang == "python" { "-c" } else { "-e" })
            .arg(&code)
            .arg(&cases_file)
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            out.status.success(),
            "{lang}: the verifier raised: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{lang} printed {}: {e}", String::from_utf8_lossy(&out.stdout)))
    };
    let check = |lang: &str, got: Vec<bool>| {
        let wrong: Vec<String> = cases
            .iter()
            .zip(&got)
            .filter(|(c, g)| c["want"] != **g)
            .map(|(c, g)| format!("{}: got {g}", c["what"]))
            .collect();
        assert!(wrong.is_empty() && got.len() == want.len(), "{lang}: {wrong:?}");
    };

    let mut ran = 0;
    if have("python3") {
        let py = code_block(&doc, "Python (standard library only", "python")
            + r#"
import base64 as _b64, json as _json, sys as _sys
_out = []
for _c in _json.load(open(_sys.argv[1])):
    _body = None if _c["body"] is None else _b64.b64decode(_c["body"])
    if _c.get("asText"):
        _body = _body.decode()
    _out.append(verify(_c["secret"], _body, _c["headers"]))
print(_json.dumps(_out))
"#;
        check("python", run("python", "python3", py));
        ran += 1;

        // The schema block is valid JSON Schema and the real body satisfies it (where jsonschema is installed).
        let schema = code_block(&doc, "## Payload schema", "json");
        let schema_value: Value = serde_json::from_str(&schema).expect("the schema block is JSON");
        assert_eq!(schema_value["required"].as_array().map(Vec::len), Some(6));
        let schema_file = dir.path().join("schema.json");
        let body_file = dir.path().join("body.json");
        std::fs::write(&schema_file, &schema).expect("write");
        std::fs::write(&body_file, &body).expect("write");
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
            + r#"
const _cases = JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8"));
console.log(JSON.stringify(_cases.map((c) => {
  let body = c.body === null ? null : Buffer.from(c.body, "base64");
  if (c.asText) body = body.toString("utf8");
  return verify(c.secret, body, c.headers);
})));
"#;
        check("node", run("node", "node", js));
        ran += 1;
    }
    if ran == 0 {
        eprintln!("neither python3 nor node found: signature snippets not run");
    }
    reference_libraries_accept(&secret, &body, &real, &tampered);
}

/// The master key of the docs tests (at least 32 bytes, as `KLAXON_WEBHOOK_SECRET` must be).
const DOCS_MASTER_KEY: &str = "master-key-for-the-docs-test-0123456789";

/// The endpoint secret as docs/webhook.md's "The derivation" writes it, evaluated term by term: `"text"` is its
/// bytes, `0xNN` one byte, `u64be(len(x))` the byte length of `x` as 8 bytes big-endian, `project` and
/// `endpoint` the values themselves; `‖` concatenates.
fn documented_secret(doc: &str, master: &str, project: &str, endpoint: &str) -> String {
    use base64::Engine as _;
    let start = doc
        .find("**The derivation**")
        .expect("docs/webhook.md: **The derivation**");
    let formula = |name: &str| -> String {
        doc[start..]
            .lines()
            .map(str::trim)
            .find_map(|l| {
                let rest = l.strip_prefix(name)?.trim_start();
                rest.strip_prefix('=').map(|f| f.trim().to_owned())
            })
            .unwrap_or_else(|| panic!("no `{name} = …` line in the derivation"))
    };
    let secret: String = formula("secret").split_whitespace().collect();
    assert_eq!(
        secret, r#""whsec_"+base64(HMAC-SHA256(key=KLAXON_WEBHOOK_SECRET,message))"#,
        "the documented secret line changed: teach this test its new form"
    );
    let var = |name: &str| -> &[u8] {
        match name {
            "project" => project.as_bytes(),
            "endpoint" => endpoint.as_bytes(),
            other => panic!("unknown term `{other}` in the documented message"),
        }
    };
    let mut message = Vec::new();
    for term in formula("message").split('‖').map(str::trim) {
        if let Some(text) = term.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
            message.extend_from_slice(text.as_bytes());
        } else if let Some(hex) = term.strip_prefix("0x") {
            message.push(u8::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("bad byte `{term}`")));
        } else if let Some(v) = term.strip_prefix("u64be(len(").and_then(|t| t.strip_suffix("))")) {
            message.extend_from_slice(&(var(v).len() as u64).to_be_bytes());
        } else {
            message.extend_from_slice(var(term));
        }
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    format!(
        "whsec_{}",
        b64.encode(reference_hmac_sha256(master.as_bytes(), &message))
    )
}

/// docs/webhook.md's derivation, followed as written, gives the secret a tenant is shown, and that secret
/// verifies a real delivery's `webhook-signature` (computed here with a reference HMAC).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_secret_derivation_verifies_a_real_delivery() {
    use base64::Engine as _;
    let doc = std::fs::read_to_string(root().join("docs/webhook.md")).expect("docs/webhook.md");
    let env = Env::new().set("KLAXON_WEBHOOK_SECRET", DOCS_MASTER_KEY);
    let project = object_id();
    let (req, endpoint) = real_delivery(&env, &project).await;
    let header = |n: &str| req.header(n).unwrap_or_else(|| panic!("no {n}")).to_owned();
    let (id, stamp, signatures) = (
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
    );
    let derived = documented_secret(&doc, DOCS_MASTER_KEY, &project.to_ascii_lowercase(), &endpoint);
    assert_eq!(
        derived,
        cli_secret(&env, &project, &endpoint),
        "the docs' formula is the code's"
    );
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = b64.decode(&derived["whsec_".len()..]).expect("base64");
    let signed = [format!("{id}.{stamp}.").as_bytes(), req.body.as_ref()].concat();
    let expected = format!("v1,{}", b64.encode(reference_hmac_sha256(&key, &signed)));
    assert!(
        signatures.split(' ').any(|s| s == expected),
        "the documented derivation's secret verifies the real delivery: {signatures}"
    );
    // The plain concatenation the docs used to show does not give the secret.
    let naive = [
        b"klaxon webhook v1".as_slice(),
        project.as_bytes(),
        endpoint.as_bytes(),
    ]
    .concat();
    assert_ne!(
        format!(
            "whsec_{}",
            b64.encode(reference_hmac_sha256(DOCS_MASTER_KEY.as_bytes(), &naive))
        ),
        derived
    );
    // No legacy key: no deprecated header (it used to be made with the master key).
    assert_eq!(req.header("x-klaxon-signature"), None);
}

fn json_str(v: impl ToString) -> Value {
    Value::String(v.to_string())
}

/// Where `scripts/services` installs the Standard Webhooks reference libraries (PyPI and npm `standardwebhooks`).
fn reference_dir() -> PathBuf {
    let tools = std::env::var_os("KLAXON_TOOLS_DIR").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".local/share/klaxon"),
        PathBuf::from,
    );
    tools.join("standardwebhooks")
}

/// The reference implementations accept the real delivery and refuse it with a tampered body.
fn reference_libraries_accept(secret: &str, body: &[u8], headers: &Value, tampered: &[u8]) {
    let dir = reference_dir();
    let tmp = tempfile::tempdir().expect("tmp");
    let write = |name: &str, bytes: &[u8]| {
        let p = tmp.path().join(name);
        std::fs::write(&p, bytes).expect("write");
        p
    };
    let (body_file, tampered_file) = (write("body", body), write("tampered", tampered));
    let headers_file = write("headers.json", headers.to_string().as_bytes());
    let py_lib = dir.join("py");
    if have("python3") && py_lib.join("standardwebhooks").is_dir() {
        let code = "import json, sys\nfrom standardwebhooks.webhooks import Webhook\n\
wh = Webhook(sys.argv[1]); headers = json.load(open(sys.argv[2]))\n\
def ok(path):\n    try:\n        wh.verify(open(path, 'rb').read(), headers)\n        return True\n    except Exception:\n        return False\n\
print(json.dumps([ok(sys.argv[3]), ok(sys.argv[4])]))\n";
        let out = Command::new("python3")
            .env("PYTHONPATH", &py_lib)
            .args(["-c", code, secret])
            .args([&headers_file, &body_file, &tampered_file])
            .output()
            .expect("python3");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "[true, false]",
            "PyPI standardwebhooks"
        );
    } else {
        eprintln!(
            "PyPI standardwebhooks not installed under {}: not checked (scripts/services installs it)",
            dir.display()
        );
    }
    let node_lib = dir.join("node/node_modules/standardwebhooks");
    if have("node") && node_lib.is_dir() {
        let code = "const { Webhook } = require(process.argv[1]);\nconst fs = require('node:fs');\n\
const wh = new Webhook(process.argv[2]); const headers = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));\n\
const ok = (p) => { try { wh.verify(fs.readFileSync(p), headers); return true; } catch { return false; } };\n\
console.log(JSON.stringify([ok(process.argv[4]), ok(process.argv[5])]));\n";
        let out = Command::new("node")
            .args(["-e", code])
            .arg(&node_lib)
            .arg(secret)
            .args([&headers_file, &body_file, &tampered_file])
            .output()
            .expect("node");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "[true,false]",
            "npm standardwebhooks"
        );
    } else {
        eprintln!(
            "npm standardwebhooks not installed under {}: not checked (scripts/services installs it)",
            dir.display()
        );
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

/// Every JSON example of docs/rules.md's alert and on-call sections (`resolveAfter` … `NO_EVENTS`) is a rule the
/// core accepts without a problem, and each section has one.
#[test]
fn on_call_examples_are_rules_the_core_accepts() {
    let doc = std::fs::read_to_string(root().join("docs/rules.md")).expect("docs/rules.md");
    let start = doc
        .find("## `resolveAfter`")
        .expect("docs/rules.md: the resolveAfter section");
    let end = doc[start..]
        .find("## Title filters")
        .map(|i| start + i)
        .expect("the sections end");
    let part = &doc[start..end];
    let mut seen = Vec::new();
    for block in part.split("```json\n").skip(1) {
        let json = block.split("```").next().expect("a closed block");
        let mut rule: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
        rule["_id"] = Value::String("5e3eef0679fa3700a0198a4a".into());
        let (compiled, problems) =
            klaxon_core::parse_rule_value(&rule).unwrap_or_else(|p| panic!("{p}: {json}"));
        assert!(problems.is_empty(), "{problems:?}: {json}");
        seen.push(compiled.summary());
    }
    for part in [
        "resolve after 1h",
        "renotify every 30m, 3 times",
        "escalate 15m→pagerduty 1h→email",
        "quiet mon-fri 22:00-07:00 Europe/Berlin",
        "NO_EVENTS for 1h",
    ] {
        assert!(seen.iter().any(|s| s.contains(part)), "{part} in {seen:?}");
    }
}
