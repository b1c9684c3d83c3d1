//! The metrics tables of the documentation (README.md's and docs/operations.md's "## Metrics") and the metrics
//! the process exports name the same metrics, with the same labels: a documented name that is never exported, or
//! an exported one that a table lacks, fails. Generic: a metric added to `DESCRIBED` must be added to every table.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use klaxon_engine::metrics::{Metrics, DESCRIBED};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documents with a "## Metrics" table of every exported metric.
const TABLES: [&str; 2] = ["README.md", "docs/operations.md"];

/// The metrics documented in `doc`'s "## Metrics" table: name → label names, from the backticked names of the
/// table's first column.
fn documented_in(doc: &str) -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(root().join(doc)).unwrap_or_default();
    let section = text
        .split("\n## Metrics\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .unwrap_or_default();
    let mut out = BTreeMap::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let first_column = row.split('|').nth(1).unwrap_or_default();
        for name in first_column.split('`').skip(1).step_by(2) {
            let (name, labels) = match name.split_once('{') {
                Some((n, l)) => (n, l.trim_end_matches('}').split(',').map(str::to_owned).collect()),
                None => (name, Vec::new()),
            };
            out.insert(name.to_owned(), labels);
        }
    }
    out
}

/// README.md's table (the reference the other tables are compared with).
fn documented() -> BTreeMap<String, Vec<String>> {
    documented_in("README.md")
}

/// The Rust sources of the binary and the library crates.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "target" && n != "tests") {
                sources(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Names written as literals in `counter!("…"`, `gauge!("…"` and `histogram!("…"` calls.
fn names_counted_in_sources() -> BTreeSet<String> {
    let mut files = Vec::new();
    sources(&root().join("src"), &mut files);
    sources(&root().join("crates"), &mut files);
    let mut out = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for macro_call in ["counter!(", "gauge!(", "histogram!("] {
            for after in text.split(macro_call).skip(1) {
                let after = after.trim_start();
                if let Some(literal) = after.strip_prefix('"') {
                    if let Some((name, _)) = literal.split_once('"') {
                        out.insert(name.to_owned());
                    }
                }
            }
        }
    }
    out
}

#[test]
fn readme_metrics_table_names_what_is_exported() {
    let documented = documented();
    assert!(
        documented.len() >= 20,
        "read the README's metrics table: {documented:?}"
    );

    // what is described (HELP texts) and registered, with its labels
    let described: BTreeMap<String, Vec<String>> = DESCRIBED
        .iter()
        .map(|m| {
            (
                m.name.to_owned(),
                m.labels.iter().map(|l| (*l).to_owned()).collect(),
            )
        })
        .collect();
    assert_eq!(
        documented, described,
        "README.md's metrics table (left) and klaxon_engine::metrics::DESCRIBED (right) differ"
    );

    // what `/metrics` shows from the start: every unlabeled metric, and nothing undocumented
    let text = Metrics::install().render();
    let rendered: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    for name in &rendered {
        assert!(
            documented.contains_key(name),
            "{name} is exported but not in README.md:\n{text}"
        );
    }
    for (name, labels) in &documented {
        if labels.is_empty() {
            assert!(
                rendered.contains(name),
                "{name} is documented but not exported from the start:\n{text}"
            );
        }
    }

    // what the code counts: every name is documented, and every documented labeled family is counted somewhere
    let counted = names_counted_in_sources();
    for name in &counted {
        assert!(
            documented.contains_key(name),
            "{name} is counted in the code but not in README.md"
        );
    }
    for (name, labels) in &documented {
        if !labels.is_empty() {
            assert!(
                counted.contains(name),
                "{name} is documented but nothing counts it"
            );
        }
    }
}

/// Every metrics table lists what `DESCRIBED` lists, with the same labels (docs/operations.md's table was missing
/// `klaxon_events_acked_total` and `klaxon_firings_muted_total`).
#[test]
fn every_metrics_table_of_the_docs_is_complete() {
    let described: BTreeMap<String, Vec<String>> = DESCRIBED
        .iter()
        .map(|m| {
            (
                m.name.to_owned(),
                m.labels.iter().map(|l| (*l).to_owned()).collect(),
            )
        })
        .collect();
    for doc in TABLES {
        let documented = documented_in(doc);
        assert!(!documented.is_empty(), "{doc} has no \"## Metrics\" table");
        let missing: Vec<_> = described
            .keys()
            .filter(|n| !documented.contains_key(*n))
            .collect();
        let unknown: Vec<_> = documented
            .keys()
            .filter(|n| !described.contains_key(*n))
            .collect();
        assert!(
            missing.is_empty() && unknown.is_empty(),
            "{doc}'s metrics table lacks {missing:?} and lists {unknown:?}, which nothing exports"
        );
        assert_eq!(documented, described, "{doc}: labels differ from DESCRIBED");
    }
}
