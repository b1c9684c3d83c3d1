//! The text log format's fields, each one `name=value` token whatever it holds, so no tenant text can forge a log
//! line (`--log-format text`, the default).
//!
//! tracing-subscriber's own text formatter writes a `%value` (Display) field as it is: a group hash, a title, a
//! rule id read from a message, or a receiver's answer quoted in an error, holding `\n`, `\r` or an escape
//! sequence, starts a new line or repaints the operator's terminal; one holding ` level=ERROR msg=…` adds fields
//! a log parser takes for the record's own. Every call site cuts tenant text to one line
//! (`klaxon_core::text::one_line`), but one forgotten `%field` (ours or a library's) was enough, and it happened
//! (issue #42: the `alert opened` line's group). This formatter makes it impossible for every line:
//!
//! - a value made only of printable non-space characters other than `"`, `\` and `=` (ids, numbers, channel
//!   names, `true`) is written as it is, so ordinary lines read as before;
//! - any other value is written quoted with Rust's string escapes (`"a b"`, `"x\n level=ERROR"`,
//!   `"\u{1b}[31m"`, `"\u{202e}"`), so it is one token and its text can be read back exactly;
//! - string values (`field = "…"`, `field = some_str`) are always quoted, as tracing-subscriber quotes them;
//! - the message keeps its spaces but its control and invisible characters are escaped the same way;
//! - every value is cut to [`MAX_VALUE_BYTES`] (marked `…`).
//!
//! `--log-format json` needs none of this: each record is one JSON object and serde escapes every string.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::FormatFields;

/// The most bytes of one field's value (before escaping) in a text log line.
pub const MAX_VALUE_BYTES: usize = 4096;

/// The fields formatter of the text log format: see the module docs.
pub struct OneTokenFields;

impl<'w> FormatFields<'w> for OneTokenFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = Fields {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct Fields<'w> {
    writer: Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl Fields<'_> {
    fn write(&mut self, field: &Field, value: Value<'_>) {
        if self.result.is_err() {
            return;
        }
        let name = field.name();
        // `log` crate records bridged by tracing-log carry their metadata as fields the formatter already wrote
        if name.starts_with("log.") {
            return;
        }
        let name = name.strip_prefix("r#").unwrap_or(name);
        let pad = if self.first { "" } else { " " };
        self.first = false;
        self.result = if name == "message" {
            let text = match value {
                Value::Str(s) => cut(s).into_owned(),
                Value::Debug(d) => cut(&d).into_owned(),
            };
            write!(self.writer, "{pad}{}", Message(&text))
        } else {
            match value {
                Value::Str(s) => write!(self.writer, "{pad}{name}={:?}", cut(s)),
                Value::Debug(d) => {
                    let d = cut(&d);
                    if is_bare(&d) {
                        write!(self.writer, "{pad}{name}={d}")
                    } else {
                        write!(self.writer, "{pad}{name}={d:?}")
                    }
                }
            }
        };
    }
}

enum Value<'a> {
    Str(&'a str),
    Debug(String),
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.write(field, Value::Str(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let mut text = String::new();
        let _ = write!(Bounded(&mut text), "{value:?}");
        self.write(field, Value::Debug(text));
    }
}

/// A `fmt::Write` that keeps the first [`MAX_VALUE_BYTES`] + 4 bytes and drops the rest (then [`cut`] marks it),
/// so a huge Debug value is not built whole.
struct Bounded<'a>(&'a mut String);

impl fmt::Write for Bounded<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = (MAX_VALUE_BYTES + 4).saturating_sub(self.0.len());
        if room == 0 {
            return Ok(());
        }
        let mut end = s.len().min(room);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.0.push_str(&s[..end]);
        Ok(())
    }
}

/// `s` cut to at most [`MAX_VALUE_BYTES`] bytes at a character boundary, marked `…` when cut.
fn cut(s: &str) -> std::borrow::Cow<'_, str> {
    if s.len() <= MAX_VALUE_BYTES {
        return s.into();
    }
    let mut end = MAX_VALUE_BYTES - '…'.len_utf8();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end]).into()
}

/// True when `s` can stand unquoted as one token: not empty, and only printable characters that are neither
/// white space nor `"`, `\`, `=` (nor invisible: `klaxon_core::text::is_hidden`).
fn is_bare(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| {
            if c.is_ascii() {
                c.is_ascii_graphic() && !matches!(c, '"' | '\\' | '=')
            } else {
                !c.is_control() && !c.is_whitespace() && !klaxon_core::text::is_hidden(c)
            }
        })
}

/// A message as written: its spaces kept, every control or invisible character escaped as Rust writes it in a
/// string (`\n`, `\r`, `\t`, `\u{1b}`, `\u{202e}`), and a backslash doubled, so it stays on its line.
struct Message<'a>(&'a str);

impl fmt::Display for Message<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c == '\\'
                || c.is_control()
                || klaxon_core::text::is_hidden(c)
                || (c.is_whitespace() && c != ' ')
            {
                write!(f, "{}", c.escape_default())?;
            } else {
                f.write_char(c)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log_filter::tests::Captured;

    fn logged(f: impl FnOnce()) -> String {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .fmt_fields(OneTokenFields)
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let bytes = out.0.lock().map(|v| v.clone()).unwrap_or_default();
        String::from_utf8(bytes).unwrap_or_default()
    }

    #[test]
    fn every_value_is_one_token() {
        // (the value, as a Display field, as written)
        let table: &[(&str, &str)] = &[
            ("5e3eef0679fa3700a0198a49", "5e3eef0679fa3700a0198a49"),
            ("webhook", "webhook"),
            ("https://h.example/x?y", "https://h.example/x?y"),
            ("", r#""""#),
            ("two words", r#""two words""#),
            (
                "g\n2026-11-28T00:00:00Z ERROR forged",
                r#""g\n2026-11-28T00:00:00Z ERROR forged""#,
            ),
            ("g\rERROR", r#""g\rERROR""#),
            ("\u{1b}[31mred", r#""\u{1b}[31mred""#),
            ("x level=ERROR msg=pwned", r#""x level=ERROR msg=pwned""#),
            ("a=b", r#""a=b""#),
            (r#"{"level":"ERROR"}"#, r#""{\"level\":\"ERROR\"}""#),
            ("back\\slash", r#""back\\slash""#),
            ("gpj\u{202e}exe", r#""gpj\u{202e}exe""#),
            ("ünïcode", "ünïcode"),
        ];
        for (value, written) in table {
            let line = logged(|| tracing::info!(v = %value, "m"));
            assert_eq!(line, format!(" INFO m v={written}\n"), "{value:?}");
        }
    }

    #[test]
    fn strings_stay_quoted_and_messages_stay_on_their_line() {
        let line = logged(|| tracing::info!(what = "fired", n = 3, ok = true, "held by quiet hours"));
        assert_eq!(line, " INFO held by quiet hours what=\"fired\" n=3 ok=true\n");
        let hostile = "x\nINFO forged line\r\u{1b}[2J";
        let line = logged(|| tracing::warn!(reason = hostile, "{hostile}"));
        assert_eq!(line.lines().count(), 1, "{line}");
        assert_eq!(
            line,
            " WARN x\\nINFO forged line\\r\\u{1b}[2J reason=\"x\\nINFO forged line\\r\\u{1b}[2J\"\n"
        );
    }

    #[test]
    fn huge_values_are_cut() {
        let big = "a".repeat(100_000);
        let line = logged(|| tracing::info!(v = %big, s = big.as_str(), d = ?big, "m"));
        assert!(line.len() < 3 * MAX_VALUE_BYTES + 100, "{}", line.len());
        assert_eq!(line.matches('…').count(), 3, "{line}");
        assert_eq!(line.lines().count(), 1);
    }
}
