//! Per-channel escaping: what neutralises tenant text in each channel's markup (see the module docs of
//! [`super`]).

/// U+2060 WORD JOINER: invisible, no width, not white space, not a letter. Put after `@` it splits the word
/// every mention parser looks for (`@channel` becomes `@` and `channel`); put inside `https://` or `www.` it
/// stops every autolinker we know of, and the text still reads (and copies) as it was written.
pub const WORD_JOINER: char = '\u{2060}';

/// Telegram, HTML parse mode: the four entities Telegram's parser knows (`&amp; &lt; &gt; &quot;`), and a word
/// joiner after `@`, so `@username` in a title never mentions (and notifies) a member of the chat. Telegram still
/// turns URLs, domain names, `#hashtags` and `/commands` in plain text into clickable entities on its own (no
/// escape exists for that); every message is sent with link previews off, so no URL becomes a preview card.
pub fn escape_telegram(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' | '<' | '>' => out.extend(html_entity(c)),
            '"' => out.push_str("&quot;"),
            '@' => {
                out.push('@');
                out.push(WORD_JOINER);
            }
            c => out.push(c),
        }
    }
    out
}

/// Loop / Mattermost Markdown. What each rule defeats, checked against Mattermost's sources — the server's
/// mention parser (`server/channels/app/mention_parser_standard.go`: the post is parsed as Markdown, adjacent
/// text nodes joined, then split into words on anything that is not a letter, digit or `.-_:@`), its Markdown
/// parser (`server/public/shared/markdown`) and the web app's marked fork (`mattermost/marked`):
///
/// - `@` → `@` + word joiner: no `@channel`, `@all`, `@here`, `@everyone`, `@user` or `@group` mention. A
///   backslash would not do: `\@` becomes a text node `@` that the server joins with `channel` again, and
///   `&#64;` likewise.
/// - `:` followed by anything but white space → `:` + word joiner: no `scheme:` autolink (`https://…`,
///   `mailto:…`, custom schemes), no `:emoji:`, no `:)` emoticon. `www.` → `www` + word joiner + `.`, and a
///   `/` right after `.xyz` gets one before it (marked autolinks `example.com/path` without a scheme).
/// - `&`, `<`, `>` → `&amp; &lt; &gt;` (no HTML, no `<http://…>` autolink: marked has no backslash escape
///   for `<`), `$` → `&#36;` (inline LaTeX).
/// - `` ` * [ ] | ! `` and `_` at a word edge get a backslash (both marked and CommonMark honour it): no code,
///   emphasis, links, images or table cells. `_` inside a word (`snake_case`) formats nothing and is kept.
///   `\` is doubled unless a letter or digit follows (marked only unescapes `\\` before a non-word character).
/// - `#` and `~` + word joiner: no `#hashtag` search link, no `~channel` link, no `~~strike~~`.
/// - A line that starts like a Markdown block starts with a word joiner: no heading, list, quote, code block,
///   rule, table or setext underline from a title that begins with `#`, `-`, `1.`, `>`, spaces or `===`.
///
/// What remains: a user who set a custom mention keyword (or their first name) is notified when a title
/// contains that word, as for any text posted in the channel.
pub fn escape_loop(s: &str) -> String {
    escape_chars(s, |chars, i, out| {
        let (c, next) = (chars[i], chars.get(i + 1).copied());
        if (i == 0 || chars[i - 1] == '\n') && starts_a_block(&chars[i..]) {
            out.push(WORD_JOINER);
        }
        match c {
            '&' | '<' | '>' => out.extend(html_entity(c)),
            '$' => out.push_str("&#36;"),
            '\\' => {
                out.push('\\');
                if !next.is_some_and(|n| n.is_ascii_alphanumeric()) {
                    out.push('\\');
                }
            }
            '`' | '*' | '[' | ']' | '|' | '!' => {
                out.push('\\');
                out.push(c);
            }
            '_' => {
                let word =
                    |j: Option<usize>| j.and_then(|j| chars.get(j)).is_some_and(|c| c.is_alphanumeric());
                if !(word(i.checked_sub(1)) && word(i.checked_add(1))) {
                    out.push('\\');
                }
                out.push('_');
            }
            '@' | '#' | '~' => {
                out.push(c);
                out.push(WORD_JOINER);
            }
            ':' => {
                out.push(':');
                if next.is_some_and(|n| !n.is_whitespace()) {
                    out.push(WORD_JOINER);
                }
            }
            c => out.push(c),
        }
    })
}

/// Slack's top-level `text`, in mrkdwn: the text of push notifications, and of the message only for clients that
/// cannot show blocks (when blocks are present Slack shows them instead). Slack's three control characters as
/// entities (`&amp; &lt; &gt;`, as Slack's formatting reference asks), so `<!channel>`, `<!here>`, `<@U…>`,
/// `<#C…>` and `<url|label>` stay text, and the link breaks of [`escape_loop`] (Slack turns URLs into links in
/// `text`). mrkdwn has no escape for `*`, `_`, `~` and `` ` ``: that is why the displayed message is built from
/// `rich_text` blocks, where tenant text is literal ([`slack_literal`]).
pub fn escape_slack_text(s: &str) -> String {
    escape_chars(s, |chars, i, out| match html_entity(chars[i]) {
        Some(entity) => out.push_str(entity),
        None => {
            out.push(chars[i]);
            if link_break_after(chars, i) {
                out.push(WORD_JOINER);
            }
        }
    })
}

/// Slack's blocks carry tenant text in `rich_text` `text` elements, which Slack shows literally: no mrkdwn, no
/// mentions (those are separate `user`/`broadcast` elements), and bare URLs are not made links (integrators
/// report having to add `link` elements to make them clickable). Belt and braces, in case a client parses
/// them after all: a word joiner after `<` (no `<!channel>` control sequence) and the link breaks of
/// [`escape_loop`]. Entities would show as `&lt;` here, so `&`, `<` and `>` stay themselves.
pub fn slack_literal(s: &str) -> String {
    escape_chars(s, |chars, i, out| {
        out.push(chars[i]);
        if chars[i] == '<' || link_break_after(chars, i) {
            out.push(WORD_JOINER);
        }
    })
}

/// Discord Markdown (embed titles and descriptions, and `content`). Discord's parser (simple-markdown) honours a
/// backslash before any ASCII punctuation, so every character that can open markup gets one: `\ * _ ~ | ` > #
/// - + [ ] ( ) < !` and `.` after the digits of a line start (no bold, italic, underline, strike, spoiler, code,
/// quote, heading, list, masked link, `<@id>`/`<#id>`/`<t:…>` tag or custom emoji). `@` gets a word joiner
/// after it, so `@everyone`, `@here` and `@name` stay text even in a client that ignores `allowed_mentions`
/// (every message is also sent with `allowed_mentions: {"parse": []}`, which stops any ping server-side).
/// `:` followed by anything but white space gets a word joiner (no `https://…` autolink, no `:emoji:`), as
/// for Loop, and so does the `.` of `www.`.
pub fn escape_discord(s: &str) -> String {
    escape_chars(s, |chars, i, out| {
        let c = chars[i];
        match c {
            '\\' | '*' | '_' | '~' | '|' | '`' | '>' | '#' | '-' | '+' | '[' | ']' | '(' | ')' | '<'
            | '!' => {
                out.push('\\');
                out.push(c);
            }
            '.' if digits_from_line_start(chars, i) => {
                out.push('\\');
                out.push('.');
            }
            '@' => {
                out.push('@');
                out.push(WORD_JOINER);
            }
            c => {
                out.push(c);
                if link_break_after(chars, i) {
                    out.push(WORD_JOINER);
                }
            }
        }
    })
}

/// True when `chars[..i]` since the last line start is one or more ASCII digits (`1.` opens a list there).
pub(super) fn digits_from_line_start(chars: &[char], i: usize) -> bool {
    let digits = chars[..i].iter().rev().take_while(|c| c.is_ascii_digit()).count();
    digits > 0 && (digits == i || chars[i - digits - 1] == '\n')
}

/// [`escape_discord`] of `s`, cut to at most `max` characters (then `…`) without splitting an escape: a cut
/// that would leave a lone backslash drops it.
pub fn escape_discord_bounded(s: &str, max: usize) -> String {
    cut_escaped(&escape_discord(s), max)
}

/// Already-escaped Markdown cut to at most `max` characters (then `…`) without leaving half an escape.
pub(crate) fn cut_escaped(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    // an odd run of trailing backslashes ends in half an escape
    let trailing = out.chars().rev().take_while(|c| *c == '\\').count();
    if trailing % 2 == 1 {
        out.pop();
    }
    out.push('…');
    out
}

/// Microsoft Teams: tenant text goes in Adaptive Card `TextRun`s of `RichTextBlock`s, which the Adaptive Cards
/// schema says take no Markdown ("Text to display. Markdown is not supported."), so `**`, `_`, `[x](url)`, lists
/// and headings stay text; HTML is never rendered in Adaptive Cards. Mentions need an `<at>…</at>` tag *and* a
/// `msteams.entities` entry, which Klaxon never sends. Belt and braces, in case a client parses runs after all:
/// a word joiner after `@` and `<` (no `<at>`), and the link breaks of [`escape_loop`] (`https:⁠//`, `www⁠.`).
pub fn teams_literal(s: &str) -> String {
    escape_chars(s, |chars, i, out| {
        out.push(chars[i]);
        if matches!(chars[i], '@' | '<') || link_break_after(chars, i) {
            out.push(WORD_JOINER);
        }
    })
}

/// The walk the escapers of Loop and Slack share: a word joiner wherever [`link_break_before`] puts one, then
/// `each` writes character `i` of `chars` (seeing its neighbours) its own way.
pub(super) fn escape_chars(s: &str, mut each: impl FnMut(&[char], usize, &mut String)) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len() + 16);
    for i in 0..chars.len() {
        if link_break_before(&chars, i) {
            out.push(WORD_JOINER);
        }
        each(&chars, i, &mut out);
    }
    out
}

/// `&`, `<` and `>` as HTML entities (Telegram's HTML, Loop's Markdown and Slack's `text` all take them).
pub(super) fn html_entity(c: char) -> Option<&'static str> {
    match c {
        '&' => Some("&amp;"),
        '<' => Some("&lt;"),
        '>' => Some("&gt;"),
        _ => None,
    }
}

/// True when a line starting with `rest` could open a Markdown block (heading, quote, list, code block,
/// thematic break, setext underline, table, fence, HTML block) instead of a paragraph.
pub(super) fn starts_a_block(rest: &[char]) -> bool {
    match rest.first() {
        None => false,
        Some(c) if c.is_whitespace() => *c != '\n',
        Some(c) if "#>-+*=_~|`!<&$[:\\".contains(*c) => true,
        Some(c) if c.is_ascii_digit() => {
            let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
            matches!(rest.get(digits), Some('.' | ')'))
        }
        Some(_) => false,
    }
}

/// A word joiner goes before `chars[i]`: the `.` of `www.` (or `www1.`…`www999.`), or a `/` right after a dot
/// and 2-4 letters (`example.com/…`, which marked links without a scheme).
pub(super) fn link_break_before(chars: &[char], i: usize) -> bool {
    let before = &chars[..i];
    match chars[i] {
        '.' => {
            let digits = before.iter().rev().take_while(|c| c.is_ascii_digit()).count();
            if digits > 3 {
                return false;
            }
            let head = &before[..before.len() - digits];
            head.len() >= 3
                && head[head.len() - 3..]
                    .iter()
                    .all(|c| c.eq_ignore_ascii_case(&'w'))
        }
        '/' => {
            let letters = before.iter().rev().take_while(|c| c.is_alphabetic()).count();
            (2..=4).contains(&letters) && before.len() > letters && before[before.len() - letters - 1] == '.'
        }
        _ => false,
    }
}

/// A word joiner goes after `chars[i]`: a `:` followed by anything but white space (`https:`, `mailto:`).
pub(super) fn link_break_after(chars: &[char], i: usize) -> bool {
    chars[i] == ':' && chars.get(i + 1).is_some_and(|n| !n.is_whitespace())
}

/// A URL we built, as a Markdown link destination: the characters that would end or break one percent-encoded.
pub(super) fn markdown_url(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    for c in url.chars() {
        match c {
            '(' => out.push_str("%28"),
            ')' => out.push_str("%29"),
            '<' => out.push_str("%3C"),
            '>' => out.push_str("%3E"),
            ' ' => out.push_str("%20"),
            '\\' => out.push_str("%5C"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// `&`, `<` and `>` as entities, and `"` too when `quote`.
pub(super) fn entities(s: &str, quote: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if quote => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}
