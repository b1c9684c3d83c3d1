//! Bounded text for everything that leaves the process: reasons in AMQP headers, log fields, the delivery trail
//! and dead letters. One tenant's input (a 200 KB title, a serde error that echoes a whole body, a huge hostname)
//! must never make a header frame exceed RabbitMQ's `frame_max` or a log line unbounded.

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

#[cfg(test)]
mod tests {
    use super::*;

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
