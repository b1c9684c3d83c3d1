//! How CLI commands print what they list: one switch, `-o/--output-format table|json|ndjson`, shared by every
//! listing command (`rules list|check`, `dead list`, `deliveries list`, `mute list`, `explain`, `doctor`).
//!
//! - `table`: aligned columns under a header, no spaces at line ends; for people.
//! - `json`: one JSON document (an array of the listed objects); for `jq` and scripts.
//! - `ndjson`: one JSON object per line; for streaming tools and `grep`.
//!
//! Everything goes through [`emit`], which stops quietly when the reader went away (`klaxon … | head`).

use std::io::Write as _;

use clap::{Args, ValueEnum};
use serde_json::Value;

/// The output formats of listing commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns with a header.
    Table,
    /// One JSON document.
    Json,
    /// One JSON object per line.
    Ndjson,
}

/// `-o/--output-format`, plus the `--json` flag the command had before the switch existed.
///
/// `--json` keeps its old meaning per command (an array for `rules`, one object per line for `dead` and
/// `deliveries`), so scripts written against it keep working, also where `KLAXON_OUTPUT_FORMAT` is set.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Output format: table (aligned columns), json (one JSON document), ndjson (one object per line).
    #[arg(
        short = 'o',
        long = "output-format",
        visible_alias = "format",
        env = "KLAXON_OUTPUT_FORMAT",
        value_enum,
        value_name = "FORMAT",
        default_value = "table"
    )]
    format: Format,
    /// The command's JSON output from before `-o` (kept for scripts); wins over `-o` and KLAXON_OUTPUT_FORMAT.
    #[arg(long)]
    json: bool,
}

impl OutputArgs {
    /// The chosen format, where `--json` means `legacy_json`.
    pub fn format(&self, legacy_json: Format) -> Format {
        if self.json {
            legacy_json
        } else {
            self.format
        }
    }
}

/// Writes `text` to stdout. A closed pipe (`| head`) ends the output silently instead of panicking like
/// `println!`; other write errors are reported.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Renders rows as aligned columns: every column but the last padded to its widest cell, two spaces
/// between columns, no trailing spaces. Tabs and line breaks inside cells become spaces so that one row
/// stays one line. `header` = `None` prints the rows only.
pub fn table(header: Option<&[&str]>, rows: &[Vec<String>]) -> String {
    let clean = |c: &str| -> String {
        c.chars()
            .map(|ch| if ch.is_control() { ' ' } else { ch })
            .collect()
    };
    let mut lines: Vec<Vec<String>> = Vec::with_capacity(rows.len() + 1);
    if let Some(h) = header {
        lines.push(h.iter().map(|c| clean(c)).collect());
    }
    lines.extend(rows.iter().map(|r| r.iter().map(|c| clean(c)).collect()));
    let columns = lines.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; columns];
    for line in &lines {
        for (w, c) in widths.iter_mut().zip(line) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for line in &lines {
        let mut text = String::new();
        for (i, c) in line.iter().enumerate() {
            text.push_str(c);
            if i + 1 < line.len() {
                let pad = widths[i] - c.chars().count() + 2;
                text.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

/// Renders a list in `format`: a table of `row(item)` under `header` (or `empty` when there is nothing),
/// a JSON array of `json(item)`, or one `json(item)` per line.
pub fn list<T>(
    format: Format,
    items: &[T],
    header: &[&str],
    row: impl Fn(&T) -> Vec<String>,
    json: impl Fn(&T) -> Value,
    empty: &str,
) -> String {
    match format {
        Format::Table if items.is_empty() => format!("{empty}\n"),
        Format::Table => table(Some(header), &items.iter().map(row).collect::<Vec<_>>()),
        Format::Json => {
            let all: Vec<Value> = items.iter().map(json).collect();
            let mut s = serde_json::to_string_pretty(&all).unwrap_or_else(|_| "[]".into());
            s.push('\n');
            s
        }
        Format::Ndjson => items.iter().map(|i| format!("{}\n", json(i))).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|c| (*c).to_owned()).collect()
    }

    #[test]
    fn tables_align_and_end_without_spaces() {
        let t = table(
            Some(&["ID", "STATUS", "NOTE"]),
            &[s(&["a", "ok", ""]), s(&["longer-id", "FAIL", "line\nbreak\ttab"])],
        );
        assert_eq!(
            t,
            "ID         STATUS  NOTE\n\
             a          ok\n\
             longer-id  FAIL    line break tab\n"
        );
        assert!(t.lines().all(|l| !l.ends_with(' ')));
        assert_eq!(table(None, &[s(&["x", "y"])]), "x  y\n");
        assert_eq!(table(Some(&["A"]), &[]), "A\n");
    }

    #[test]
    fn every_format_of_a_list() {
        let items = [(1, "a"), (2, "b")];
        let row = |i: &(i32, &str)| vec![i.0.to_string(), i.1.to_owned()];
        let js = |i: &(i32, &str)| json!({"n": i.0, "s": i.1});
        assert_eq!(
            list(Format::Table, &items, &["N", "S"], row, js, "none"),
            "N  S\n1  a\n2  b\n"
        );
        let v: Value = serde_json::from_str(&list(Format::Json, &items, &["N", "S"], row, js, "none"))
            .expect("one JSON document");
        assert_eq!(v, json!([{"n": 1, "s": "a"}, {"n": 2, "s": "b"}]));
        assert_eq!(
            list(Format::Ndjson, &items, &["N", "S"], row, js, "none"),
            "{\"n\":1,\"s\":\"a\"}\n{\"n\":2,\"s\":\"b\"}\n"
        );
        let none: [(i32, &str); 0] = [];
        assert_eq!(list(Format::Table, &none, &["N"], row, js, "none"), "none\n");
        assert_eq!(list(Format::Json, &none, &["N"], row, js, "none"), "[]\n");
        assert_eq!(list(Format::Ndjson, &none, &["N"], row, js, "none"), "");
    }
}
