//! Bounded text for everything that leaves the process: reasons in AMQP headers, log fields, the delivery trail
//! and dead letters. One tenant's input (a 200 KB title, a serde error that echoes a whole body, a huge hostname)
//! must never make a header frame exceed RabbitMQ's `frame_max` or a log line unbounded.
//!
//! And text shown to people as it really is: [`reveal`] replaces the invisible characters that reorder or hide
//! text (bidi overrides and isolates, zero-width spaces, line/paragraph separators, tag characters, …) with a
//! visible `<U+XXXX>`, so a title `Invoice \u{202E}gpj.exe` cannot pass for `Invoice exe.jpg`.

/// The most bytes a reason may have when it leaves the process (headers, logs, trail, dead letters).
pub const MAX_REASON_BYTES: usize = 512;

/// `text` on one line (control characters become spaces, runs of white space fold into one), trimmed, and cut to
/// at most `max_bytes` bytes at a character boundary; a cut text ends with `…` (counted in the bound).
pub fn one_line(text: &str, max_bytes: usize) -> String {
    const MORE: &str = "…";
    let mut out = String::with_capacity(text.len().min(max_bytes));
    let mut space = false;
    for c in text.trim().chars() {
        let c = if c.is_control() || c.is_whitespace() {
            ' '
        } else {
            c
        };
        if c == ' ' {
            if space {
                continue;
            }
            space = true;
        } else {
            space = false;
        }
        if out.len() + c.len_utf8() > max_bytes {
            while out.len() + MORE.len() > max_bytes {
                if out.pop().is_none() {
                    return out;
                }
            }
            out.push_str(MORE);
            return out;
        }
        out.push(c);
    }
    out
}

/// A reason as it may leave the process: [`one_line`] within [`MAX_REASON_BYTES`].
pub fn reason(text: &str) -> String {
    one_line(text, MAX_REASON_BYTES)
}

/// True for the characters [`reveal`] shows as `<U+XXXX>`: every character of Unicode's general categories Cf
/// (format: bidi embeddings, overrides, isolates and marks, zero-width spaces, word joiners, invisible operators,
/// the byte order mark, interlinear annotations, tag characters, …), Zl and Zp (line and paragraph separators,
/// which break a line where a message expects none), and the Hangul fillers, which are letters that draw
/// nothing. Kept: U+200C ZERO WIDTH NON-JOINER and U+200D ZERO WIDTH JOINER, which only choose glyph shapes
/// (Persian and Indic scripts, emoji sequences) and neither reorder nor hide anything.
///
/// The ranges are Unicode 15's Cf/Zl/Zp (checked against Python's `unicodedata`, Unicode 14, plus the
/// hieroglyph format controls U+13439–U+1343F that Unicode 15 added).
pub fn is_hidden(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{0600}'..='\u{0605}'
            | '\u{061C}'
            | '\u{06DD}'
            | '\u{070F}'
            | '\u{0890}'..='\u{0891}'
            | '\u{08E2}'
            | '\u{115F}'..='\u{1160}'
            | '\u{180E}'
            | '\u{200B}'
            | '\u{200E}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0001}'
            | '\u{E0020}'..='\u{E007F}'
    )
}

/// How [`reveal`] writes a hidden character: `<U+202E>`.
pub fn marker(c: char) -> String {
    format!("<U+{:04X}>", u32::from(c))
}

/// `text` with every [`is_hidden`] character replaced by its visible [`marker`]; borrowed when there is none.
pub fn reveal(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(is_hidden) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_hidden(c) {
            out.push_str(&marker(c));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A duration in words, rounded down to its largest whole unit: "12 days", "1 hour", "5 minutes", "2 seconds",
/// "0 seconds". What "back after … quiet" and explain say.
pub fn duration_words(ms: u64) -> String {
    let secs = ms / 1000;
    let (n, unit) = if secs >= 86_400 {
        (secs / 86_400, "day")
    } else if secs >= 3600 {
        (secs / 3600, "hour")
    } else if secs >= 60 {
        (secs / 60, "minute")
    } else {
        (secs, "second")
    };
    if n == 1 {
        format!("1 {unit}")
    } else {
        format!("{n} {unit}s")
    }
}

/// A period as a table shows it: "1d", "2h", "5m", "30s", "1500ms" (the largest unit that divides it).
pub fn short_duration(ms: u64) -> String {
    match ms {
        m if m % 86_400_000 == 0 => format!("{}d", m / 86_400_000),
        m if m % 3_600_000 == 0 => format!("{}h", m / 3_600_000),
        m if m % 60_000 == 0 => format!("{}m", m / 60_000),
        m if m % 1000 == 0 => format!("{}s", m / 1000),
        m => format!("{m}ms"),
    }
}

/// A period as the console shows it (humantime's): "1h", "7days", "1h 30m".
pub fn compact_duration(ms: u64) -> String {
    humantime::format_duration(std::time::Duration::from_millis(ms)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reveal_table() {
        let cases: &[(&str, &str)] = &[
            ("plain title", "plain title"),
            (
                "Invoice \u{202E}gpj.exe\u{202C}",
                "Invoice <U+202E>gpj.exe<U+202C>",
            ),
            (
                "a\u{2066}b\u{2067}c\u{2068}d\u{2069}",
                "a<U+2066>b<U+2067>c<U+2068>d<U+2069>",
            ),
            ("\u{202A}\u{202B}\u{202D}", "<U+202A><U+202B><U+202D>"),
            ("rtl\u{200F}ltr\u{200E}", "rtl<U+200F>ltr<U+200E>"),
            ("line\u{2028}para\u{2029}", "line<U+2028>para<U+2029>"),
            (
                "zero\u{200B}width\u{2060}joiner\u{FEFF}",
                "zero<U+200B>width<U+2060>joiner<U+FEFF>",
            ),
            ("soft\u{00AD}hyphen", "soft<U+00AD>hyphen"),
            ("tag\u{E0041}\u{E007F}", "tag<U+E0041><U+E007F>"),
            ("hangul\u{3164}filler", "hangul<U+3164>filler"),
            // joiners only shape glyphs: kept (Persian text, emoji sequences)
            ("می\u{200C}خواهم 👩\u{200D}💻", "می\u{200C}خواهم 👩\u{200D}💻"),
            (
                "ordinary ünïcode 😀 and \u{05D0}\u{05D1} Hebrew",
                "ordinary ünïcode 😀 and \u{05D0}\u{05D1} Hebrew",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(reveal(text), *want, "{text:?}");
        }
        assert!(matches!(reveal("nothing hidden"), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn one_line_table() {
        let long = "é".repeat(1000);
        let cases: &[(&str, usize, &str)] = &[
            ("plain", 10, "plain"),
            ("  two\n lines\r\n\tand tabs  ", 100, "two lines and tabs"),
            ("abcdefghij", 10, "abcdefghij"),
            ("abcdefghijk", 10, "abcdefg…"),
            ("", 10, ""),
            ("abc", 2, ""),
        ];
        for (text, max, want) in cases {
            assert_eq!(one_line(text, *max), *want, "{text:?} / {max}");
        }
        let cut = one_line(&long, 101);
        assert!(cut.len() <= 101 && cut.ends_with('…'), "{}", cut.len());
    }

    #[test]
    fn reasons_are_bounded_whatever_the_input() {
        for text in ["x".repeat(300_000), "\n".repeat(10_000), "😀".repeat(50_000)] {
            let r = reason(&text);
            assert!(r.len() <= MAX_REASON_BYTES, "{}", r.len());
            assert!(!r.contains('\n'));
        }
    }
}
