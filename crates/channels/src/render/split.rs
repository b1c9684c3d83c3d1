//! Splitting and cutting messages to a channel's length limit (UTF-16 units, line boundaries, HTML kept
//! balanced).

pub(crate) fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// Splits a message into parts of at most `limit` UTF-16 units on line boundaries; concatenating the parts
/// gives the message back. A single line longer than `limit` is cut at character boundaries as a last resort,
/// backing off so that an HTML tag or entity (`<b>`, `&amp;`) is never cut in half.
pub fn split_message(text: &str, limit: usize) -> Vec<String> {
    let limit = limit.max(16);
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut current_len = 0;
    for line in text.split_inclusive('\n') {
        let len = utf16_len(line);
        if current_len + len <= limit {
            current.push_str(line);
            current_len += len;
            continue;
        }
        if !current.is_empty() {
            parts.push(std::mem::take(&mut current));
        }
        if len <= limit {
            current.push_str(line);
            current_len = len;
            continue;
        }
        let mut rest = line;
        while utf16_len(rest) > limit {
            let cut = cut_point(rest, limit);
            parts.push(rest[..cut].to_owned());
            rest = &rest[cut..];
        }
        current.push_str(rest);
        current_len = utf16_len(rest);
    }
    if !current.is_empty() {
        parts.push(current);
    }
    parts
}

/// `s` cut to `max` characters (then `…`): for text that needs no escaping, or that was escaped already and
/// has no escapes to split (PagerDuty's plain text, Discord's footers).
pub(crate) fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Byte index at most `limit` UTF-16 units into `s` (which is longer than that), not inside a tag or entity.
pub(super) fn cut_point(s: &str, limit: usize) -> usize {
    let mut units = 0;
    let mut end = 0;
    for (i, c) in s.char_indices() {
        if units + c.len_utf16() > limit {
            break;
        }
        units += c.len_utf16();
        end = i + c.len_utf8();
    }
    let head = &s[..end];
    let mut cut = end;
    for (open, close) in [('<', '>'), ('&', ';')] {
        if let Some(at) = head.rfind(open) {
            if !head[at..].contains(close) && at > 0 {
                cut = cut.min(at);
            }
        }
    }
    if cut == 0 {
        end
    } else {
        cut
    }
}

/// Splits Telegram HTML into parts of at most `limit` UTF-16 units like [`split_message`], and keeps every
/// part valid on its own: tags still open where a part ends are closed there and opened again at the start
/// of the next part (Telegram rejects a message whose tags do not balance). Tags added that way count
/// against the limit: when they push a part over it, the text is split again with less room, a bounded
/// number of times.
pub fn split_html(text: &str, limit: usize) -> Vec<String> {
    let mut budget = limit.max(64);
    let mut parts = Vec::new();
    for _ in 0..8 {
        parts = balance(split_message(text, budget));
        let longest = parts.iter().map(|p| utf16_len(p)).max().unwrap_or(0);
        if longest <= limit {
            break;
        }
        budget = budget.saturating_sub(longest - limit).max(64);
    }
    parts
}

/// Closes the tags left open at the end of each part and reopens them at the start of the next.
pub(super) fn balance(parts: Vec<String>) -> Vec<String> {
    // (name, the opening tag as written)
    let mut open: Vec<(String, String)> = Vec::new();
    let mut out = Vec::with_capacity(parts.len());
    for part in parts {
        let mut balanced: String = open.iter().map(|(_, tag)| tag.as_str()).collect();
        let mut rest = part.as_str();
        while let Some(at) = rest.find('<') {
            let Some(len) = rest[at..].find('>') else { break };
            let tag = &rest[at..=at + len];
            let closing = tag.starts_with("</");
            let name: String = tag
                .trim_start_matches("</")
                .trim_start_matches('<')
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '>' && *c != '/')
                .collect();
            if closing {
                if let Some(i) = open.iter().rposition(|(n, _)| *n == name) {
                    open.remove(i);
                }
            } else if !tag.ends_with("/>") && !name.is_empty() {
                open.push((name, tag.to_owned()));
            }
            rest = &rest[at + len + 1..];
        }
        balanced.push_str(&part);
        for (name, _) in open.iter().rev() {
            balanced.push_str("</");
            balanced.push_str(name);
            balanced.push('>');
        }
        out.push(balanced);
    }
    out
}
