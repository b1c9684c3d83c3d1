//! Rendering a [`NotificationTask`] into message text, from the minijinja templates in `templates/`.
//!
//! One view model feeds every template, so all channels say the same thing: the project (its name when known,
//! see [`MessageContext`]), rule, title(s), what happened in words ("first seen", "100 times in the last
//! hour", "50 users in the last hour"), a link to the event (`--event-url-template`) and the firing time. Escaping is chosen by template name and applied by the engine to every value, so a
//! template cannot forget it: `*.tg.html` gets Telegram's HTML escaping (`&`, `<`, `>`, `"` only: the entities
//! Telegram's parser knows), `*.html` full HTML escaping, `*.mrkdwn` Slack's (`&`, `<`, `>`), `*.md`
//! Markdown's (Loop/Mattermost: a backslash before the characters that would format), and `*.txt` none. Titles are shown on one line (control characters become spaces) and cut at [`MAX_TITLE_CHARS`];
//! the webhook body, which is data rather than text, carries them untouched.

use klaxon_core::{NotificationTask, Reason, Window};

use crate::link::UrlTemplate;
use minijinja::{AutoEscape, Environment, Value};
use serde::Serialize;

use crate::DeliveryError;

/// Groups listed in a digest before "and K more".
pub const DIGEST_MAX_GROUPS: usize = 20;
/// Longest title shown in a message, in characters.
pub const MAX_TITLE_CHARS: usize = 1000;
/// Longest title shown on a digest line, in characters: 20 lines stay far below every channel's limit
/// (Slack's 40,000-character `text`, 50 blocks) even when every character is escaped.
pub const DIGEST_TITLE_CHARS: usize = 300;
/// Telegram's message limit (UTF-16 code units, which is never less than characters).
pub const TELEGRAM_MAX: usize = 4096;
/// Slack's limit for a section block's text.
pub const SLACK_SECTION_MAX: usize = 3000;

pub(crate) const TELEGRAM: &str = "telegram.tg.html";
pub(crate) const SLACK: &str = "slack.mrkdwn";
pub(crate) const LOOP: &str = "loop.md";
pub(crate) const EMAIL_TEXT: &str = "email.txt";
pub(crate) const EMAIL_HTML: &str = "email.html";
pub(crate) const EMAIL_SUBJECT: &str = "email_subject.txt";

/// What a message says beyond the task itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct MessageContext<'a> {
    /// The project's display name (Hawk's `projects.name`); the id is shown when it is unknown.
    pub project_name: Option<&'a str>,
    /// `--event-url-template`: every event gets a link when set.
    pub links: Option<&'a UrlTemplate>,
}

#[derive(Serialize)]
struct ViewEvent {
    title: String,
    count: u64,
    url: Option<String>,
}

#[derive(Serialize)]
struct View {
    kind: &'static str,
    project: String,
    project_id: String,
    rule: String,
    notification_id: String,
    fired_at: String,
    window: String,
    window_kind: &'static str,
    threshold: u64,
    seen: String,
    url: Option<String>,
    total: u64,
    events: Vec<ViewEvent>,
    more: usize,
    /// The body of a direct notification.
    text: Option<String>,
}

/// The template engine with every template loaded (they are compiled into the binary).
pub(crate) struct Renderer {
    env: Environment<'static>,
}

impl Renderer {
    pub(crate) fn new() -> Result<Self, minijinja::Error> {
        let mut env = Environment::new();
        env.set_auto_escape_callback(|name| {
            if name.ends_with(".tg.html") {
                AutoEscape::Custom("telegram")
            } else if name.ends_with(".html") {
                AutoEscape::Html
            } else if name.ends_with(".mrkdwn") {
                AutoEscape::Custom("mrkdwn")
            } else if name.ends_with(".md") {
                AutoEscape::Custom("markdown")
            } else {
                AutoEscape::None
            }
        });
        env.set_formatter(|out, state, value| match state.auto_escape() {
            AutoEscape::Custom(which) if !value.is_safe() => {
                let raw = value_text(value);
                let escaped = match which {
                    "telegram" => escape_telegram(&raw),
                    "markdown" => escape_markdown(&raw),
                    _ => escape_mrkdwn(&raw),
                };
                out.write_str(&escaped).map_err(minijinja::Error::from)
            }
            _ => minijinja::escape_formatter(out, state, value),
        });
        env.add_template(TELEGRAM, include_str!("../templates/telegram.tg.html"))?;
        env.add_template(SLACK, include_str!("../templates/slack.mrkdwn"))?;
        env.add_template(LOOP, include_str!("../templates/loop.md"))?;
        env.add_template(EMAIL_TEXT, include_str!("../templates/email.txt"))?;
        env.add_template(EMAIL_HTML, include_str!("../templates/email.html"))?;
        env.add_template(EMAIL_SUBJECT, include_str!("../templates/email_subject.txt"))?;
        Ok(Renderer { env })
    }

    /// Renders one template for a task, showing the project id and no links.
    #[allow(dead_code)] // the adapters use render_with; kept for callers without a context
    pub(crate) fn render(&self, template: &str, task: &NotificationTask) -> Result<String, DeliveryError> {
        self.render_with(template, task, MessageContext::default())
    }

    /// Renders one template for a task, with the project's name and event links when known.
    pub(crate) fn render_with(
        &self,
        template: &str,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<String, DeliveryError> {
        let view = view(task, ctx);
        self.env
            .get_template(template)
            .and_then(|t| t.render(Value::from_serialize(&view)))
            .map_err(|e| DeliveryError::permanent(format!("rendering {template} failed: {e}")))
    }
}

fn value_text(value: &Value) -> String {
    if value.is_undefined() || value.is_none() {
        String::new()
    } else {
        value.to_string()
    }
}

/// Escapes text for Telegram's HTML parse mode.
pub fn escape_telegram(s: &str) -> String {
    escape_entities(s, true)
}

/// Escapes text for Slack's mrkdwn.
pub fn escape_mrkdwn(s: &str) -> String {
    escape_entities(s, false)
}

/// Escapes text for Markdown (Loop, Mattermost): a backslash before every character that would start
/// formatting, a link, an HTML tag or a table cell. `_` inside a word (`snake_case`) formats nothing in
/// Mattermost's CommonMark and is left alone, so identifiers stay readable and searchable.
pub fn escape_markdown(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len() + 8);
    for (i, &c) in chars.iter().enumerate() {
        let escape = match c {
            '\\' | '`' | '*' | '~' | '[' | ']' | '<' | '>' | '#' | '|' | '!' => true,
            '_' => {
                let word =
                    |j: Option<usize>| j.and_then(|j| chars.get(j)).is_some_and(|c| c.is_alphanumeric());
                !(word(i.checked_sub(1)) && word(i.checked_add(1)))
            }
            _ => false,
        };
        if escape {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `&`, `<` and `>` as entities, and `"` too when `quote`.
fn escape_entities(s: &str, quote: bool) -> String {
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

/// A title as shown in messages: one line, at most [`MAX_TITLE_CHARS`].
pub fn display_title(title: &str) -> String {
    bounded_line(title, MAX_TITLE_CHARS)
}

fn bounded_line(title: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in title.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out
}

/// "30 seconds", "1 minute", "5 minutes", "2 hours".
pub fn human_duration(secs: u64) -> String {
    let (n, unit) = if secs >= 3600 && secs % 3600 == 0 {
        (secs / 3600, "hour")
    } else if secs >= 60 && secs % 60 == 0 {
        (secs / 60, "minute")
    } else {
        (secs, "second")
    };
    let mut s = format!("{n} {unit}");
    if n != 1 {
        s.push('s');
    }
    s
}

/// A period in words, as the end of "… in the last hour": "the last hour", "the last 5 minutes",
/// "the last day", "the last 90 seconds".
pub fn last_period(secs: u64) -> String {
    let (n, unit) = if secs >= 86_400 && secs % 86_400 == 0 {
        (secs / 86_400, "day")
    } else if secs >= 3600 && secs % 3600 == 0 {
        (secs / 3600, "hour")
    } else if secs >= 60 && secs % 60 == 0 {
        (secs / 60, "minute")
    } else {
        (secs, "second")
    };
    if n == 1 {
        format!("the last {unit}")
    } else {
        format!("the last {n} {unit}s")
    }
}

fn times(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

fn window_name(window: Window) -> &'static str {
    match window {
        Window::Fixed => "fixed",
        Window::Sliding => "sliding",
    }
}

fn view(task: &NotificationTask, ctx: MessageContext<'_>) -> View {
    let direct = matches!(task.reason, Reason::Direct);
    let digest = !direct && (matches!(task.reason, Reason::Digest { .. }) || task.events.len() > 1);
    let (kind, window_secs, window_kind, threshold) = match task.reason {
        Reason::Threshold {
            threshold,
            period_ms,
            window,
        } if !digest => ("threshold", period_ms / 1000, window_name(window), threshold),
        Reason::UniqueUsers {
            threshold,
            period_ms,
            window,
        } if !digest => ("users", period_ms / 1000, window_name(window), threshold),
        Reason::New if !digest => ("new", 0, "", 0),
        Reason::Digest { min_period_s } => ("digest", min_period_s, "", 0),
        Reason::Direct => ("direct", 0, "", 0),
        _ => ("digest", task.min_period_s, "", 0),
    };
    let window = last_period(window_secs);
    let first_count = task.events.first().map_or(0, |e| e.count);
    let seen = match kind {
        "new" => "first seen".to_owned(),
        "direct" => String::new(),
        "threshold" => format!("{} in {window}", times(first_count, "time", "times")),
        "users" => format!("{} in {window}", times(first_count, "user", "users")),
        _ => format!(
            "{} in {window}",
            times(task.events.iter().map(|e| e.count).sum(), "error", "errors")
        ),
    };
    let link = |e: &klaxon_core::NotificationEvent| {
        ctx.links
            .and_then(|t| t.link(&task.project_id, &e.group_hash, e.repetition_id.as_deref()))
    };
    let title_max = if digest {
        DIGEST_TITLE_CHARS
    } else {
        MAX_TITLE_CHARS
    };
    let mut events: Vec<&klaxon_core::NotificationEvent> = task.events.iter().collect();
    if digest {
        // stable: equal counts keep the order the digest collected them in
        events.sort_by_key(|e| std::cmp::Reverse(e.count));
    }
    let more = events.len().saturating_sub(DIGEST_MAX_GROUPS);
    View {
        kind,
        project: ctx
            .project_name
            .map(|n| bounded_line(n, klaxon_core::rule::MAX_PROJECT_NAME_CHARS))
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| task.project_id.clone()),
        project_id: task.project_id.clone(),
        rule: task.rule_id.clone(),
        notification_id: task.notification_id.clone(),
        fired_at: task.fired_at_rfc3339(),
        window,
        window_kind,
        threshold,
        seen,
        url: events.first().and_then(|e| link(e)),
        total: task.events.iter().map(|e| e.count).sum(),
        events: events
            .into_iter()
            .take(DIGEST_MAX_GROUPS)
            .map(|e| ViewEvent {
                title: bounded_line(&e.title, title_max),
                count: e.count,
                url: link(e),
            })
            .collect(),
        more,
        text: task.text.clone().filter(|_| direct),
    }
}

fn utf16_len(s: &str) -> usize {
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

/// Byte index at most `limit` UTF-16 units into `s` (which is longer than that), not inside a tag or entity.
fn cut_point(s: &str, limit: usize) -> usize {
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
fn balance(parts: Vec<String>) -> Vec<String> {
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

/// Slack `blocks`: the rendered mrkdwn in section blocks of at most [`SLACK_SECTION_MAX`] characters.
pub(crate) fn slack_blocks(text: &str) -> Vec<serde_json::Value> {
    split_message(text, SLACK_SECTION_MAX)
        .into_iter()
        .map(|part| {
            serde_json::json!({
                "type": "section",
                "text": {"type": "mrkdwn", "text": part.trim_end()},
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaxon_core::{ChannelKind, NotificationEvent};

    fn task(reason: Reason, events: Vec<(&str, u64)>) -> NotificationTask {
        NotificationTask {
            notification_id: "nid".into(),
            project_id: "proj".into(),
            rule_id: "rule".into(),
            channel: ChannelKind::Telegram,
            endpoint: "1".into(),
            min_period_s: 300,
            fired_at_ms: 1_700_000_000_123,
            reason,
            events: events
                .into_iter()
                .map(|(t, c)| NotificationEvent {
                    group_hash: format!("g-{t}"),
                    title: t.into(),
                    count: c,
                    repetition_id: None,
                })
                .collect(),
            text: None,
            send_at_ms: None,
        }
    }

    #[test]
    fn renders_every_kind_in_every_template() {
        let r = Renderer::new().expect("templates");
        let threshold = Reason::Threshold {
            threshold: 100,
            period_ms: 60_000,
            window: Window::Sliding,
        };
        for t in [
            task(Reason::New, vec![("Boom", 1)]),
            task(threshold, vec![("Boom", 100)]),
            task(
                Reason::Digest { min_period_s: 300 },
                vec![("Bang", 3), ("Boom", 5)],
            ),
        ] {
            for name in [TELEGRAM, SLACK, EMAIL_TEXT, EMAIL_HTML, EMAIL_SUBJECT] {
                let out = r.render(name, &t).expect("render");
                assert!(out.contains("Boom"), "{name}: {out}");
                if name != EMAIL_SUBJECT {
                    assert!(out.contains("2023-11-14T22:13:20.123Z"), "{name}: {out}");
                }
            }
        }
        let out = r
            .render(TELEGRAM, &task(threshold, vec![("Boom", 100)]))
            .expect("render");
        assert!(
            out.contains("Seen 100 times in the last minute (sliding window, threshold 100)"),
            "{out}"
        );
    }

    #[test]
    fn direct_notifications_show_title_and_text_only() {
        let r = Renderer::new().expect("templates");
        let mut t = task(Reason::Direct, vec![("Deploy <v2> & done", 1)]);
        t.text = Some("All *green*\nsecond line".into());
        let tg = r.render(TELEGRAM, &t).expect("render");
        assert_eq!(
            tg,
            "<b>Deploy &lt;v2&gt; &amp; done</b>\nAll *green*\nsecond line"
        );
        let slack = r.render(SLACK, &t).expect("render");
        assert_eq!(slack, "*Deploy &lt;v2&gt; &amp; done*\nAll *green*\nsecond line");
        assert_eq!(r.render(EMAIL_SUBJECT, &t).expect("render"), "Deploy <v2> & done");
        let text = r.render(EMAIL_TEXT, &t).expect("render");
        assert!(
            text.starts_with("Deploy <v2> & done\n\nAll *green*\nsecond line\n\nNotification nid"),
            "{text}"
        );
        let html = r.render(EMAIL_HTML, &t).expect("render");
        assert!(
            html.contains("<h2>Deploy &lt;v2&gt; &amp; done</h2>") && !html.contains("Rule rule"),
            "{html}"
        );
        assert!(!tg.contains("rule") && !tg.contains("fired at"), "{tg}");
        t.text = None;
        assert_eq!(
            r.render(TELEGRAM, &t).expect("render"),
            "<b>Deploy &lt;v2&gt; &amp; done</b>"
        );
        let md = r.render(LOOP, &t).expect("render");
        assert_eq!(md, "**Deploy \\<v2\\> & done**");
    }

    #[test]
    fn digest_sorts_and_truncates() {
        let r = Renderer::new().expect("templates");
        let titles: Vec<String> = (0..25).map(|i| format!("Err{i:02}")).collect();
        let events = titles
            .iter()
            .enumerate()
            .map(|(i, t)| (t.as_str(), i as u64 + 1))
            .collect();
        let out = r
            .render(TELEGRAM, &task(Reason::Digest { min_period_s: 300 }, events))
            .expect("render");
        assert!(
            out.starts_with("<b>325 errors in proj in the last 5 minutes</b>\n"),
            "{out}"
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[1], "25 × Err24");
        assert_eq!(lines[20], "6 × Err05");
        assert_eq!(lines[21], "and 5 more");
        assert!(!out.contains("Err04"));
    }

    #[test]
    fn escaping_per_template() {
        let r = Renderer::new().expect("templates");
        let t = task(Reason::New, vec![("<script>&\"x", 1)]);
        let tg = r.render(TELEGRAM, &t).expect("tg");
        assert!(tg.contains("&lt;script&gt;&amp;&quot;x"), "{tg}");
        let slack = r.render(SLACK, &t).expect("slack");
        assert!(slack.contains("&lt;script&gt;&amp;\"x"), "{slack}");
        let html = r.render(EMAIL_HTML, &t).expect("html");
        assert!(html.contains("&lt;script&gt;&amp;&quot;x"), "{html}");
        let text = r.render(EMAIL_TEXT, &t).expect("text");
        assert!(text.contains("<script>&\"x"), "{text}");
    }

    #[test]
    fn titles_become_one_bounded_line() {
        assert_eq!(display_title("a\nb\tc"), "a b c");
        let long = display_title(&"x".repeat(5000));
        assert_eq!(long.chars().count(), MAX_TITLE_CHARS + 1);
    }

    #[test]
    fn periods_in_words() {
        for (secs, words) in [
            (60, "the last minute"),
            (300, "the last 5 minutes"),
            (3600, "the last hour"),
            (7200, "the last 2 hours"),
            (86_400, "the last day"),
            (604_800, "the last 7 days"),
            (90, "the last 90 seconds"),
            (1, "the last second"),
        ] {
            assert_eq!(last_period(secs), words);
        }
    }

    #[test]
    fn names_links_and_what_happened_in_words() {
        let r = Renderer::new().expect("templates");
        let links = UrlTemplate::parse(
            "https://garage.hawk.so/project/{projectId}/event/{groupHash}/{repetitionId}/overview",
        )
        .expect("template");
        let ctx = MessageContext {
            project_name: Some("Acme <web>"),
            links: Some(&links),
        };
        let users = Reason::UniqueUsers {
            threshold: 50,
            period_ms: 3_600_000,
            window: Window::Fixed,
        };
        let mut t = task(users, vec![("Boom", 50)]);
        t.events[0].repetition_id = Some("rep1".into());
        let tg = r.render_with(TELEGRAM, &t, ctx).expect("tg");
        assert!(
            tg.contains(
                "Seen by 50 users in the last hour (fixed window, threshold 50) in project Acme &lt;web&gt;"
            ),
            "{tg}"
        );
        assert!(
            tg.contains(
                r#"<a href="https://garage.hawk.so/project/proj/event/g-Boom/rep1/overview">Open event</a>"#
            ),
            "{tg}"
        );
        let slack = r.render_with(SLACK, &t, ctx).expect("slack");
        assert!(
            slack.contains("<https://garage.hawk.so/project/proj/event/g-Boom/rep1/overview|Open event>"),
            "{slack}"
        );
        let new = r
            .render_with(EMAIL_SUBJECT, &task(Reason::New, vec![("Boom", 1)]), ctx)
            .expect("subject");
        assert_eq!(new, "[Klaxon] New error in Acme <web>: Boom");
        let text = r
            .render_with(EMAIL_TEXT, &task(Reason::New, vec![("Boom", 1)]), ctx)
            .expect("text");
        assert!(text.contains("First seen."), "{text}");
        assert!(
            text.contains("Open event: https://garage.hawk.so/project/proj/event/g-Boom/overview"),
            "{text}"
        );
        // without a context: the id, no link
        let plain = r.render(TELEGRAM, &t).expect("plain");
        assert!(
            plain.contains("in project proj\n") && !plain.contains("href"),
            "{plain}"
        );
    }

    #[test]
    fn html_parts_are_balanced_when_a_line_is_cut() {
        let line = format!(
            "<b>{}</b> <a href=\"https://x.test/e\">{}</a>\n<i>end</i>",
            "x".repeat(5000),
            "y".repeat(300)
        );
        let parts = split_html(&line, TELEGRAM_MAX);
        assert!(parts.len() >= 2, "{}", parts.len());
        for p in &parts {
            assert!(utf16_len(p) <= TELEGRAM_MAX, "{}", utf16_len(p));
            for tag in ["b", "a", "i"] {
                assert_eq!(
                    p.matches(&format!("<{tag}")).count(),
                    p.matches(&format!("</{tag}>")).count(),
                    "<{tag}> balanced in {}…",
                    &p[..40]
                );
            }
        }
        assert!(parts[1].starts_with("<b>"), "reopened: {}", &parts[1][..10]);
        // only the added tags differ from the text
        let stripped: String = parts
            .concat()
            .replace("</b><b>", "")
            .replace("</a><a href=\"https://x.test/e\">", "");
        assert_eq!(stripped.len(), line.len());
    }

    #[test]
    fn durations() {
        assert_eq!(human_duration(30), "30 seconds");
        assert_eq!(human_duration(60), "1 minute");
        assert_eq!(human_duration(300), "5 minutes");
        assert_eq!(human_duration(90), "90 seconds");
        assert_eq!(human_duration(7200), "2 hours");
        assert_eq!(human_duration(1), "1 second");
    }

    #[test]
    fn split_keeps_every_char_and_line() {
        let text: String = (0..300)
            .map(|i| format!("line {i:04} {}\n", "é".repeat(20)))
            .collect();
        let parts = split_message(&text, 1000);
        assert!(parts.len() > 1);
        assert_eq!(parts.concat(), text);
        for p in &parts {
            assert!(utf16_len(p) <= 1000);
            assert!(p.ends_with('\n'), "parts end on a line boundary");
        }
        assert_eq!(split_message("short", 4096), vec!["short".to_owned()]);
        assert!(split_message("", 4096).is_empty());
    }

    #[test]
    fn split_cuts_overlong_lines_outside_tags_and_entities() {
        let line = format!("{}&amp;<b>{}</b>", "a".repeat(97), "b".repeat(250));
        let parts = split_message(&line, 100);
        assert_eq!(parts.concat(), line);
        assert_eq!(parts[0], "a".repeat(97), "backs off before the entity");
        assert!(parts[1].starts_with("&amp;<b>"));
        // a cut that would fall inside a tag backs off before it
        let line = format!("{}<b>{}", "a".repeat(99), "b".repeat(50));
        assert_eq!(split_message(&line, 100)[0], "a".repeat(99));
        for p in &parts {
            assert!(utf16_len(p) <= 100);
        }
        // astral chars count double and are never split
        let emoji = "😀".repeat(60);
        let parts = split_message(&emoji, 100);
        assert_eq!(parts.concat(), emoji);
        assert_eq!(parts[0].chars().count(), 50);
    }
}
