//! Rendering a [`NotificationTask`] into message text, from the minijinja templates in `templates/`.
//!
//! One view model feeds every template, so all channels say the same thing: the project (its name when known,
//! see [`MessageContext`]), rule, title(s), what happened in words ("first seen", "100 times in the last
//! hour", "50 users in the last hour"), a link to the event (`--event-url-template`) and the firing time. The
//! messages of an alert's life (resolved, acknowledged, a reminder, an escalation) are
//! views of the same model: the title after "Resolved: " (…), a status line of our words and numbers around who
//! did it (tenant text, escaped like a title), and the alert they are about.
//!
//! **Tenant text is data, never markup.** Titles, project names and every other value come from tenants (a
//! title is whatever an app threw). The engine applies one neutralising step to every value a template prints,
//! chosen by the template, so a template cannot forget it — see [`escape_telegram`], [`escape_loop`],
//! [`escape_slack_text`] and, for Slack's blocks, [`slack_literal`]; the email HTML part gets full HTML escaping
//! and the email text part none (it is not markup). Before that, every value is [`reveal`]ed: characters that
//! reorder or hide text (bidi overrides, zero-width spaces, …) become a visible `<U+202E>`. Titles are shown on
//! one line (control characters become spaces) and cut at [`MAX_TITLE_CHARS`]; the webhook body, which is
//! data for machines rather than text for people, carries them untouched. What each channel can and cannot
//! neutralise is documented in `docs/messages.md`.

use klaxon_core::text::reveal;
use klaxon_core::{NotificationTask, Reason, Window};

use crate::action_links::ActionLink;
use crate::link::UrlTemplate;
use minijinja::{AutoEscape, Environment, Value};
use serde::Serialize;

use crate::DeliveryError;

mod escape;
mod split;
pub use escape::*;
pub use split::*;

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
/// Longest rule id shown (footers), in characters: ids are ObjectIds, a document written elsewhere may hold more.
const MAX_RULE_CHARS: usize = 100;

/// How much of a notification a message shows: the bounds the view model cuts tenant text to. Every channel
/// renders with [`ROOMS`]`[0]` (the documented bounds) and checks the exact payload against its own documented
/// limit (after escaping, which can multiply a title's length: `<` is `&lt;` in HTML and `<` + a word joiner in
/// Teams); a payload over it is rendered again with the next, smaller room ([`fit`]). The last room fits every
/// channel's limit whatever the input (`tests/bounds.rs` proves it with hostile titles, names and URLs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Room {
    /// Longest title of a single notification, in shown characters.
    pub(crate) title: usize,
    /// Longest title on a digest line.
    pub(crate) digest_title: usize,
    /// Most digest lines (the rest are "and K more").
    pub(crate) groups: usize,
    /// Longest project name.
    pub(crate) project: usize,
    /// Longest body of a direct notification.
    pub(crate) text: usize,
    /// Whether the events' links (`--event-url-template`) are shown.
    pub(crate) links: bool,
}

/// The rooms a message is tried in, largest first. The first is what every message normally gets.
pub(crate) const ROOMS: [Room; 5] = [
    Room {
        title: MAX_TITLE_CHARS,
        digest_title: DIGEST_TITLE_CHARS,
        groups: DIGEST_MAX_GROUPS,
        project: klaxon_core::rule::MAX_PROJECT_NAME_CHARS,
        text: 16 * 1024,
        links: true,
    },
    Room {
        title: 500,
        digest_title: 150,
        groups: DIGEST_MAX_GROUPS,
        project: 200,
        text: 6000,
        links: true,
    },
    Room {
        title: 250,
        digest_title: 80,
        groups: 10,
        project: 100,
        text: 2500,
        links: true,
    },
    Room {
        title: 200,
        digest_title: 60,
        groups: 10,
        project: 100,
        text: 1500,
        links: false,
    },
    Room {
        title: 100,
        digest_title: 40,
        groups: 5,
        project: 60,
        text: 700,
        links: false,
    },
];

/// The first of [`ROOMS`] whose rendering `build` makes a payload that `fits`; the last room's payload when
/// none does (the property tests show the last always fits).
pub(crate) fn fit<T>(
    mut build: impl FnMut(Room) -> Result<T, DeliveryError>,
    fits: impl Fn(&T) -> bool,
) -> Result<T, DeliveryError> {
    let (last, larger) = ROOMS
        .split_last()
        .unwrap_or_else(|| unreachable!("ROOMS is not empty"));
    for room in larger {
        let out = build(*room)?;
        if fits(&out) {
            return Ok(out);
        }
    }
    build(*last)
}

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
    /// The signed action links of the message (`--public-url` + `KLAXON_ACTION_KEY`), in the order shown.
    pub actions: &'a [ActionLink],
    /// The message carries interactive Acknowledge and Resolve buttons (Slack's Web API, Telegram's Bot API,
    /// [`crate::buttons`]): its `ack` and `resolve` links are then shown apart, as a footer ("or open: ack ·
    /// resolve"), so the two controls do not read as duplicates; the links stay in the message.
    pub buttons: bool,
}

/// One group as the templates show it.
#[derive(Serialize)]
pub(crate) struct ViewEvent {
    /// One line, hidden characters revealed, bounded.
    pub(crate) title: String,
    pub(crate) count: u64,
    /// Whether its line shows its count (`12 × title`): not a NO_EVENTS silence's, which is about the project
    /// and counts nothing ([`crate::quiet::is_silence`]).
    pub(crate) counted: bool,
    pub(crate) url: Option<String>,
    /// The group, as data (PagerDuty's `custom_details`); no template prints it.
    pub(crate) group_hash: String,
    /// In a message in parts (a release, a digest with resolves): this line is of what resolved.
    pub(crate) resolved: bool,
}

/// What a message is about: the rule kind that fired (SEEN_MORE split by what it counts), a digest, a direct
/// notification, or a moment of an alert's life (resolved, acknowledged, a reminder, an escalation). Channels
/// switch on it; templates see its word (`new`, `threshold`, `users`, `spike`, `reappeared`, `no_events`,
/// `digest`, `direct`, `resolved`, `acknowledged`, `reminder`, `escalation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ViewKind {
    /// ONLY_NEW.
    New,
    /// SEEN_MORE counting events.
    Threshold,
    /// SEEN_MORE counting distinct users.
    Users,
    /// SPIKE.
    Spike,
    /// REAPPEARED.
    Reappeared,
    /// NO_EVENTS: the project went silent.
    #[serde(rename = "no_events")]
    NoEvents,
    /// A digest of several firings.
    Digest,
    /// A direct notification.
    Direct,
    /// An alert resolved.
    Resolved,
    /// An alert acknowledged.
    Acknowledged,
    /// A reminder of an alert still firing.
    Reminder,
    /// An escalation step of an alert still firing.
    Escalation,
}

impl ViewKind {
    /// The word templates and PagerDuty's `custom_details.what` see.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ViewKind::New => "new",
            ViewKind::Threshold => "threshold",
            ViewKind::Users => "users",
            ViewKind::Spike => "spike",
            ViewKind::Reappeared => "reappeared",
            ViewKind::NoEvents => "no_events",
            ViewKind::Digest => "digest",
            ViewKind::Direct => "direct",
            ViewKind::Resolved => "resolved",
            ViewKind::Acknowledged => "acknowledged",
            ViewKind::Reminder => "reminder",
            ViewKind::Escalation => "escalation",
        }
    }

    /// A message about an alert's life, not a firing.
    pub(crate) fn is_lifecycle(self) -> bool {
        matches!(
            self,
            ViewKind::Resolved | ViewKind::Acknowledged | ViewKind::Reminder | ViewKind::Escalation
        )
    }

    /// The words a lifecycle message's headline (and email subject) starts with: `Resolved`, `Acknowledged`,
    /// `Reminder`, `Escalated`; empty for the others.
    pub(crate) fn headline(self) -> &'static str {
        match self {
            ViewKind::Resolved => "Resolved",
            ViewKind::Acknowledged => "Acknowledged",
            ViewKind::Reminder => "Reminder",
            ViewKind::Escalation => "Escalated",
            _ => "",
        }
    }

    /// The words a signal's line starts with (SPIKE, REAPPEARED, NO_EVENTS: "Spike in project P: …"); empty
    /// for the others.
    pub(crate) fn signal_word(self) -> &'static str {
        match self {
            ViewKind::Spike => "Spike",
            ViewKind::Reappeared => "Reappeared",
            ViewKind::NoEvents => "No events",
            _ => "",
        }
    }

    /// What the footer's time is: `fired` for a firing, the moment of the alert's life otherwise.
    fn at_word(self) -> &'static str {
        match self {
            ViewKind::Resolved => "resolved",
            ViewKind::Acknowledged => "acknowledged",
            ViewKind::Reminder => "reminded",
            ViewKind::Escalation => "escalated",
            _ => "fired",
        }
    }
}

/// What every template (and Slack's blocks) is rendered from. Tenant strings in it are revealed and bounded
/// but not escaped: each channel escapes them its own way.
#[derive(Serialize)]
pub(crate) struct View {
    pub(crate) kind: ViewKind,
    pub(crate) project: String,
    pub(crate) project_id: String,
    pub(crate) rule: String,
    pub(crate) notification_id: String,
    pub(crate) fired_at: String,
    pub(crate) window: String,
    pub(crate) window_kind: &'static str,
    pub(crate) threshold: u64,
    pub(crate) seen: String,
    /// A signal's first words ([`ViewKind::signal_word`]).
    pub(crate) signal_word: &'static str,
    pub(crate) url: Option<String>,
    pub(crate) total: u64,
    /// A digest's header is `head_pre`, the project, then `head_post` (our words and numbers): "12 errors in " +
    /// P + " in the last 5 minutes", or, when nothing in it counted, "" + P + ": 1 resolved in the last 5
    /// minutes" ([`crate::quiet::nothing_counted`]). Empty for other kinds. Templates print both as they are
    /// (`|safe`, like [`View::status`]): they must only ever hold our words and numbers.
    pub(crate) head_pre: String,
    /// The end of a digest's header.
    pub(crate) head_post: String,
    pub(crate) events: Vec<ViewEvent>,
    /// How many entries the message does not show as lines: past the channel's room, and what the window
    /// counted past its list's bound ([`klaxon_core::notification::Unlisted`]).
    pub(crate) more: usize,
    /// Of [`View::more`]: how many fired, how many resolved.
    pub(crate) more_fired: u64,
    /// See [`View::more_fired`].
    pub(crate) more_resolved: u64,
    /// What follows "and N more" in a digest or release that lists what fired and what resolved, or that
    /// counted entries past its bound: " (X fired, Y resolved)"; empty otherwise. Templates print it as it is
    /// (`|safe`): only our words and numbers.
    pub(crate) more_parts: String,
    /// The body of a direct notification.
    pub(crate) text: Option<String>,
    /// The signed action links (ours: URLs we built, labels of our words).
    pub(crate) actions: Vec<ActionLink>,
    /// With buttons ([`MessageContext::buttons`]): the `ack` and `resolve` links, labelled `ack` and `resolve`,
    /// for the footer "or open: …"; empty otherwise (they are then among [`View::actions`]).
    pub(crate) open_actions: Vec<ActionLink>,
    /// The alert the task opened, repeats or is about (24 hex: ours), when it carries one.
    pub(crate) alert_id: Option<String>,
    /// A lifecycle message (resolved, acknowledged, reminder, escalation).
    pub(crate) lifecycle: bool,
    /// A lifecycle message's headline words ([`ViewKind::headline`]).
    pub(crate) headline: &'static str,
    /// What the footer's time is: `fired`, `resolved`, `acknowledged`, `reminded`, `escalated`.
    pub(crate) at_word: &'static str,
    /// A lifecycle message's status line is `status`, then `by` (tenant text: who acknowledged or resolved
    /// it), then `status_end` — our words and numbers around the tenant's. Templates print the two as they are
    /// (`|safe`: no channel's escaping, so Loop's line-start rule does not mark a piece in mid-line): they
    /// must only ever hold our words and numbers.
    pub(crate) status: String,
    /// Who acknowledged or resolved the alert by hand (revealed, one line, bounded; escaped by each channel).
    pub(crate) by: Option<String>,
    /// The end of a lifecycle message's status line.
    pub(crate) status_end: String,
}

impl View {
    /// The "and N more" line when only the first `shown` of [`View::events`] are shown (a channel with less
    /// room than the view), with " (X fired, Y resolved)" as [`View::more_parts`] has it; `None` when nothing
    /// is left out.
    pub(crate) fn more_after(&self, shown: usize) -> Option<String> {
        let hidden = self.events.get(shown..).unwrap_or_default();
        let resolved = hidden.iter().filter(|e| e.resolved).count() as u64 + self.more_resolved;
        let fired = (hidden.len() as u64 - (resolved - self.more_resolved)) + self.more_fired;
        let n = fired + resolved;
        if n == 0 {
            return None;
        }
        Some(if self.more_parts.is_empty() {
            format!("and {n} more")
        } else {
            format!("and {n} more ({fired} fired, {resolved} resolved)")
        })
    }

    /// The footer of Slack's, Discord's and Teams' messages: the rule and the time, and the alert a firing
    /// opened (a lifecycle message names it in its body).
    pub(crate) fn footer(&self) -> String {
        let mut footer = format!("Rule {} · {} at {}", self.rule, self.at_word, self.fired_at);
        if let Some(id) = self.alert_id.as_deref().filter(|_| !self.lifecycle) {
            footer.push_str(&format!(" · alert {id}"));
        }
        footer
    }
}

/// The template engine with every template loaded (they are compiled into the binary).
pub(crate) struct Renderer {
    env: Environment<'static>,
}

impl Renderer {
    pub(crate) fn new() -> Result<Self, minijinja::Error> {
        let mut env = Environment::new();
        // One neutralising step per template (its channel), applied by the engine to every printed value.
        env.set_auto_escape_callback(|name| match name {
            TELEGRAM => AutoEscape::Custom("telegram"),
            SLACK => AutoEscape::Custom("slack"),
            LOOP => AutoEscape::Custom("loop"),
            EMAIL_HTML => AutoEscape::Html,
            _ => AutoEscape::Custom("plain"),
        });
        env.set_formatter(|out, state, value| {
            if value.is_safe() || value.is_number() {
                // ours (numbers, links marked safe by the URL filters): nothing to neutralise
                return out.write_str(&value_text(value)).map_err(minijinja::Error::from);
            }
            let raw = value_text(value);
            let shown = reveal(&raw);
            let escaped = match state.auto_escape() {
                AutoEscape::Custom("telegram") => escape_telegram(&shown),
                AutoEscape::Custom("slack") => escape_slack_text(&shown),
                AutoEscape::Custom("loop") => escape_loop(&shown),
                AutoEscape::Custom(_) | AutoEscape::None => shown.into_owned(),
                _ => {
                    return minijinja::escape_formatter(out, state, &Value::from(shown.into_owned()));
                }
            };
            out.write_str(&escaped).map_err(minijinja::Error::from)
        });
        // Links we build (`--event-url-template`, values percent-encoded) in each markup's own URL syntax.
        env.add_filter("md_url", |url: String| {
            Value::from_safe_string(markdown_url(&url))
        });
        env.add_filter("slack_url", |url: String| {
            Value::from_safe_string(entities(&url, false))
        });
        env.add_filter("html_url", |url: String| {
            Value::from_safe_string(entities(&url, true))
        });
        env.add_template(TELEGRAM, include_str!("../../templates/telegram.tg.html"))?;
        env.add_template(SLACK, include_str!("../../templates/slack.mrkdwn"))?;
        env.add_template(LOOP, include_str!("../../templates/loop.md"))?;
        env.add_template(EMAIL_TEXT, include_str!("../../templates/email.txt"))?;
        env.add_template(EMAIL_HTML, include_str!("../../templates/email.html"))?;
        env.add_template(EMAIL_SUBJECT, include_str!("../../templates/email_subject.txt"))?;
        Ok(Renderer { env })
    }

    /// Renders one template for a task, showing the project id and no links.
    #[allow(dead_code)] // the adapters use render_with; kept for callers without a context
    pub(crate) fn render(&self, template: &str, task: &NotificationTask) -> Result<String, DeliveryError> {
        self.render_with(template, task, MessageContext::default())
    }

    /// The view model of a task, cut to `room` (Slack's blocks, Discord's embeds, Teams' card and PagerDuty's
    /// event are built from it directly).
    pub(crate) fn view_in(&self, task: &NotificationTask, ctx: MessageContext<'_>, room: Room) -> View {
        view(task, ctx, room)
    }

    /// Renders one template from a view model.
    pub(crate) fn render_view(&self, template: &str, view: &View) -> Result<String, DeliveryError> {
        self.env
            .get_template(template)
            .and_then(|t| t.render(Value::from_serialize(view)))
            .map_err(|e| DeliveryError::permanent(format!("rendering {template} failed: {e}")))
    }

    /// Renders one template for a task, with the project's name and event links when known.
    pub(crate) fn render_with(
        &self,
        template: &str,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<String, DeliveryError> {
        self.render_view(template, &view(task, ctx, ROOMS[0]))
    }
}

fn value_text(value: &Value) -> String {
    if value.is_undefined() || value.is_none() {
        String::new()
    } else {
        value.to_string()
    }
}

/// A title as shown in messages: one line, hidden characters revealed, at most [`MAX_TITLE_CHARS`].
pub fn display_title(title: &str) -> String {
    bounded_line(title, MAX_TITLE_CHARS)
}

/// `text` on one line (control characters become spaces), every hidden character shown as `<U+XXXX>`
/// ([`klaxon_core::text::reveal`]), and at most `max` characters of that (then `…`): the bound holds for what
/// is shown, so a title made of bidi controls cannot grow eight-fold past a channel's limits.
fn bounded_line(text: &str, max: usize) -> String {
    let mut out = String::new();
    let mut shown = 0;
    for c in text.chars() {
        let piece = if c.is_control() {
            " ".to_owned()
        } else if klaxon_core::text::is_hidden(c) {
            klaxon_core::text::marker(c)
        } else {
            c.to_string()
        };
        let len = piece.chars().count();
        if shown + len > max {
            out.push('…');
            break;
        }
        out.push_str(&piece);
        shown += len;
    }
    out
}

/// A direct notification's body: its lines kept, every hidden character shown ([`reveal`]), and at most `max`
/// characters of that (then `…`).
fn bounded_text(text: &str, max: usize) -> String {
    let shown = reveal(text);
    if shown.chars().count() <= max {
        return shown.into_owned();
    }
    let mut out: String = shown.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
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

/// What a SPIKE or REAPPEARED firing saw, in its kind's words ([`klaxon_core::Baseline::words`],
/// [`klaxon_core::kind::reappeared::words`]): "312 in the last hour, usually ~20 (15.6×)", "back after 12 days
/// quiet". Only numbers: no tenant text.
fn signal_words(task: &NotificationTask, count: u64, window: &str) -> String {
    match task.reason {
        Reason::Spike { baseline, .. } => baseline.words(count, window),
        Reason::Reappeared {
            quiet_period_ms,
            last_seen_ms,
        } => klaxon_core::kind::reappeared::words(quiet_period_ms, last_seen_ms, task.fired_at_ms),
        Reason::NoEvents { last_event_ms, .. } => match last_event_ms {
            Some(last) => format!(
                "last event {} ago, at {}",
                klaxon_core::text::duration_words(u64::try_from(task.fired_at_ms - last).unwrap_or(0)),
                klaxon_core::notification::rfc3339_ms(last)
            ),
            None => "no event seen since the rule was stored".to_owned(),
        },
        _ => String::new(),
    }
}

fn window_name(window: Window) -> &'static str {
    match window {
        Window::Fixed => "fixed",
        Window::Sliding => "sliding",
    }
}

/// A message's action links as its templates show them: all in one row, or, when the message carries interactive
/// buttons ([`MessageContext::buttons`]), the `ack` and `resolve` links apart (labelled `ack` and `resolve`, for
/// the footer "or open: ack · resolve") so that they do not read as a second pair of Acknowledge and Resolve.
fn split_actions(actions: &[ActionLink], buttons: bool) -> (Vec<ActionLink>, Vec<ActionLink>) {
    if !buttons {
        return (actions.to_vec(), Vec::new());
    }
    let (open, rest): (Vec<ActionLink>, Vec<ActionLink>) = actions
        .iter()
        .cloned()
        .partition(|a| matches!(a.action, "ack" | "resolve"));
    let open = open
        .into_iter()
        .map(|a| ActionLink { label: a.action, ..a })
        .collect();
    (rest, open)
}

fn view(task: &NotificationTask, ctx: MessageContext<'_>, room: Room) -> View {
    let direct = matches!(task.reason, Reason::Direct);
    let digest = !task.reason.is_lifecycle() && crate::action_links::is_digest(task);
    let (kind, window_secs, window_kind, threshold) = match task.reason {
        Reason::Threshold {
            threshold,
            period_ms,
            window,
        } if !digest => (
            ViewKind::Threshold,
            period_ms / 1000,
            window_name(window),
            threshold,
        ),
        Reason::UniqueUsers {
            threshold,
            period_ms,
            window,
        } if !digest => (ViewKind::Users, period_ms / 1000, window_name(window), threshold),
        Reason::New if !digest => (ViewKind::New, 0, "", 0),
        Reason::Spike { spike, baseline } if !digest => {
            (ViewKind::Spike, spike.period_ms / 1000, "", baseline.needed)
        }
        Reason::Reappeared { .. } if !digest => (ViewKind::Reappeared, 0, "", 0),
        Reason::NoEvents { .. } if !digest => (ViewKind::NoEvents, 0, "", 0),
        Reason::Digest { min_period_s, .. } => (ViewKind::Digest, min_period_s, "", 0),
        Reason::Direct => (ViewKind::Direct, 0, "", 0),
        Reason::Resolved => (ViewKind::Resolved, 0, "", 0),
        Reason::Acknowledged => (ViewKind::Acknowledged, 0, "", 0),
        Reason::Reminder { .. } => (ViewKind::Reminder, 0, "", 0),
        Reason::Escalation { .. } => (ViewKind::Escalation, 0, "", 0),
        // a quiet window's release: shown as a digest of what fired and resolved (crate::quiet)
        Reason::QuietHours { .. } => (ViewKind::Digest, 0, "", 0),
        // several groups in a firing's task: shown as a digest
        _ => (ViewKind::Digest, task.min_period_s, "", 0),
    };
    let window = crate::quiet::window(task).unwrap_or_else(|| last_period(window_secs));
    let total = crate::quiet::total(task).unwrap_or_else(|| task.events.iter().map(|e| e.count).sum());
    // a digest in which nothing counted (only resolves, a NO_EVENTS silence) says what happened, not "0 errors"
    let nothing_counted = (kind == ViewKind::Digest)
        .then(|| crate::quiet::nothing_counted(task))
        .flatten();
    let (head_pre, head_post) = match (&nothing_counted, kind) {
        (Some(what), _) => (String::new(), format!(": {what}")),
        (None, ViewKind::Digest) => (format!("{total} errors in "), format!(" in {window}")),
        (None, _) => (String::new(), String::new()),
    };
    let first_count = task.events.first().map_or(0, |e| e.count);
    let seen = match kind {
        ViewKind::New => "first seen".to_owned(),
        ViewKind::Direct
        | ViewKind::Resolved
        | ViewKind::Acknowledged
        | ViewKind::Reminder
        | ViewKind::Escalation => String::new(),
        ViewKind::Threshold => format!("{} in {window}", times(first_count, "time", "times")),
        ViewKind::Users => format!("{} in {window}", times(first_count, "user", "users")),
        ViewKind::Spike | ViewKind::Reappeared | ViewKind::NoEvents => {
            signal_words(task, first_count, &window)
        }
        ViewKind::Digest => match &nothing_counted {
            Some(what) => what.clone(),
            None => format!(
                "{} in {window}",
                times(task.events.iter().map(|e| e.count).sum(), "error", "errors")
            ),
        },
    };
    let link = |e: &klaxon_core::NotificationEvent| {
        ctx.links
            .filter(|_| room.links)
            // a NO_EVENTS message is about the project: no event to open
            .filter(|_| !e.group_hash.is_empty())
            .and_then(|t| t.link(&task.project_id, &e.group_hash, e.repetition_id.as_deref()))
    };
    let title_max = if digest { room.digest_title } else { room.title };
    let mut events: Vec<(usize, &klaxon_core::NotificationEvent)> = task.events.iter().enumerate().collect();
    // a quiet window's release and a digest with resolves keep their order: what fired, then what resolved
    if digest && !crate::quiet::in_parts(task) {
        // stable: equal counts keep the order the digest collected them in
        events.sort_by_key(|(_, e)| std::cmp::Reverse(e.count));
    }
    // what is not shown as lines: past the room, and what the window counted past its list's bound
    let fired_n = task.held_parts().map(|(fired, _)| fired.len());
    let is_resolved = |i: usize| fired_n.is_some_and(|n| i >= n);
    let unlisted = task.unlisted();
    let hidden = events.get(room.groups..).unwrap_or_default();
    let hidden_resolved = hidden.iter().filter(|(i, _)| is_resolved(*i)).count() as u64;
    let more_fired = (hidden.len() as u64 - hidden_resolved).saturating_add(unlisted.fired);
    let more_resolved = hidden_resolved.saturating_add(unlisted.resolved);
    let more = usize::try_from(more_fired.saturating_add(more_resolved)).unwrap_or(usize::MAX);
    let more_parts = if more > 0 && (fired_n.is_some() || !unlisted.is_none()) {
        format!(" ({more_fired} fired, {more_resolved} resolved)")
    } else {
        String::new()
    };
    let life = lifecycle_words(task, kind, room);
    let project = ctx
        .project_name
        .map(|n| bounded_line(n, room.project))
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| task.project_id.clone());
    // a NO_EVENTS silence listed among other entries is about the project: "No events from P for 1 hour"
    let silence =
        |e: &klaxon_core::NotificationEvent| kind == ViewKind::Digest && crate::quiet::is_silence(e);
    let (actions, open_actions) = split_actions(ctx.actions, ctx.buttons);
    View {
        kind,
        project: project.clone(),
        project_id: task.project_id.clone(),
        rule: bounded_line(&task.rule_id, MAX_RULE_CHARS),
        notification_id: task.notification_id.clone(),
        fired_at: task.fired_at_rfc3339(),
        window,
        window_kind,
        threshold,
        seen,
        signal_word: kind.signal_word(),
        url: events.first().and_then(|&(_, e)| link(e)),
        total,
        head_pre,
        head_post,
        events: events
            .into_iter()
            .take(room.groups)
            .map(|(i, e)| ViewEvent {
                title: {
                    let title = if silence(e) {
                        std::borrow::Cow::Owned(crate::quiet::silence_line(&project, e))
                    } else {
                        std::borrow::Cow::Borrowed(e.title.as_str())
                    };
                    bounded_line(&crate::quiet::title(task, i, &title), title_max)
                },
                count: e.count,
                counted: !silence(e),
                url: link(e),
                group_hash: e.group_hash.clone(),
                resolved: is_resolved(i),
            })
            .collect(),
        more,
        more_fired,
        more_resolved,
        more_parts,
        text: task
            .text
            .as_deref()
            .filter(|_| direct)
            .map(|t| bounded_text(t, room.text)),
        actions: if direct { Vec::new() } else { actions },
        open_actions: if direct { Vec::new() } else { open_actions },
        alert_id: task
            .alert
            .as_ref()
            .map(|a| a.id.clone())
            .filter(|id| klaxon_core::alert::is_alert_id(id)),
        lifecycle: kind.is_lifecycle(),
        headline: kind.headline(),
        at_word: kind.at_word(),
        status: life.status,
        by: life.by,
        status_end: life.status_end,
    }
}

/// Longest `by` shown (who acknowledged or resolved an alert by hand: an API token's label, `cli`, …), in
/// shown characters.
pub const MAX_BY_CHARS: usize = 200;

/// A lifecycle message's status line, in three pieces (see [`View::status`]).
#[derive(Default)]
struct LifeWords {
    status: String,
    by: Option<String>,
    status_end: String,
}

/// What a lifecycle message says of its alert: "Resolved after 2 h 14 min, 1,240 events · resolved by alice",
/// "Acknowledged by alice · firing for 5 min, 12 events", "Still firing: reminder 1 of 3 · firing for 1 h,
/// 40 events", "Escalated (step 1 of 2): still firing · firing for 30 min, 40 events". How long is the task's
/// time minus the alert's opening; the events are the alert's. `timeout` (resolveAfter) and `event` (NO_EVENTS:
/// the project's next event) are Klaxon resolving by itself; any other `by` is who did it, tenant text.
fn lifecycle_words(task: &NotificationTask, kind: ViewKind, room: Room) -> LifeWords {
    if !kind.is_lifecycle() {
        return LifeWords::default();
    }
    let alert = task.alert.as_ref();
    let events = alert.map_or_else(|| task.events.first().map_or(0, |e| e.count), |a| a.events);
    let events = times_thousands(events, "event", "events");
    let open = alert.map(|a| alert_duration(task.fired_at_ms.saturating_sub(a.opened_at_ms)));
    let firing_for = match &open {
        Some(d) => format!(" · firing for {d}, {events}"),
        None => format!(" · {events}"),
    };
    let by = alert
        .and_then(|a| a.by.as_deref())
        .map(|b| bounded_line(b.trim(), room.project.min(MAX_BY_CHARS)))
        .filter(|b| !b.trim().is_empty());
    match task.reason {
        Reason::Resolved => {
            let mut status = match &open {
                Some(d) => format!("Resolved after {d}, {events}"),
                None => format!("Resolved, {events}"),
            };
            let by = match by.as_deref() {
                Some("timeout") | Some("event") => {
                    status.push_str(" · resolved automatically");
                    None
                }
                Some(_) => {
                    status.push_str(" · resolved by ");
                    by
                }
                None => None,
            };
            LifeWords {
                status,
                by,
                status_end: String::new(),
            }
        }
        Reason::Acknowledged => LifeWords {
            status: if by.is_some() {
                "Acknowledged by ".into()
            } else {
                "Acknowledged".into()
            },
            by,
            status_end: firing_for,
        },
        Reason::Reminder { number, max } => LifeWords {
            status: format!("Still firing: reminder {number} of {max}{firing_for}"),
            ..LifeWords::default()
        },
        Reason::Escalation { step, steps } => LifeWords {
            status: format!("Escalated (step {step} of {steps}): still firing{firing_for}"),
            ..LifeWords::default()
        },
        _ => LifeWords::default(),
    }
}

/// `n` with a comma between thousands: `1,240`, `1,000,000`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn times_thousands(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { many })
}

/// How long an alert was open, as a person says it, to the minute: `45 s`, `12 min`, `2 h 14 min`, `3 h`,
/// `2 d 5 h`, `9 d`.
pub fn alert_duration(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    let (d, h, m) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s} s"),
        (0, 0, m) => format!("{m} min"),
        (0, h, 0) => format!("{h} h"),
        (0, h, m) => format!("{h} h {m} min"),
        (d, 0, _) => format!("{d} d"),
        (d, h, _) => format!("{d} d {h} h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaxon_core::{ChannelKind, NotificationEvent};

    fn task(reason: Reason, events: Vec<(&str, u64)>) -> NotificationTask {
        NotificationTask {
            notification_id: "nid".into(),
            project_id: "proj".into(),
            project_name: None,
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
                    open_for_ms: None,
                    silence_period_ms: None,
                    alert_id: None,
                })
                .collect(),
            text: None,
            send_at_ms: None,
            alert: None,
            severity: None,
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
                Reason::Digest {
                    min_period_s: 300,
                    resolved: 0,
                    more: Default::default(),
                },
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
        assert_eq!(md, "**Deploy &lt;v2&gt; &amp; done**");
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
            .render(
                TELEGRAM,
                &task(
                    Reason::Digest {
                        min_period_s: 300,
                        resolved: 0,
                        more: Default::default(),
                    },
                    events,
                ),
            )
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
    fn and_n_more_says_what_fired_and_resolved_exactly() {
        let r = Renderer::new().expect("templates");
        // 22 fired and 8 resolved listed (the last 8 events), 200 fired and 6 resolved past the list's bound
        let titles: Vec<String> = (0..30).map(|i| format!("Err{i:02}")).collect();
        let events = titles.iter().map(|t| (t.as_str(), 1)).collect();
        let mut t = task(
            Reason::QuietHours {
                until_ms: 1_700_000_000_000,
                fired: 22,
                resolved: 8,
                more: klaxon_core::notification::Unlisted {
                    fired: 200,
                    resolved: 6,
                },
            },
            events,
        );
        let v = view(&t, MessageContext::default(), ROOMS[0]);
        // 20 shown: 2 fired and 8 resolved of the list are not, and what the window counted past it
        assert_eq!((v.more, v.more_fired, v.more_resolved), (216, 202, 14));
        assert_eq!(v.more_parts, " (202 fired, 14 resolved)");
        assert_eq!(
            v.more_after(5).as_deref(),
            Some("and 231 more (217 fired, 14 resolved)"),
            "a channel with room for 5"
        );
        let out = r.render(TELEGRAM, &t).expect("render");
        assert!(out.contains("in quiet hours (222 fired, 14 resolved)"), "{out}");
        assert!(out.contains("\nand 216 more (202 fired, 14 resolved)\n"), "{out}");
        // a digest of firings only, nothing past any bound: as before
        t.reason = Reason::Digest {
            min_period_s: 300,
            resolved: 0,
            more: Default::default(),
        };
        let v = view(&t, MessageContext::default(), ROOMS[0]);
        assert_eq!((v.more, v.more_parts.as_str()), (10, ""));
        assert_eq!(v.more_after(20).as_deref(), Some("and 10 more"));
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

    /// Shows the word joiner as `⁀` so the tables below can be read.
    fn shown(s: &str) -> String {
        s.replace(WORD_JOINER, "⁀")
    }

    /// Loop / Mattermost: input → exactly what is sent (`⁀` = U+2060 WORD JOINER).
    #[test]
    fn loop_escaping_table() {
        let table: &[(&str, &str)] = &[
            (
                "plain TypeError: x is undefined",
                "plain TypeError: x is undefined",
            ),
            (
                "boom @channel @all @here @everyone @bob",
                "boom @⁀channel @⁀all @⁀here @⁀everyone @⁀bob",
            ),
            ("x.@channel _@here", "x.@⁀channel \\_@⁀here"),
            ("*bold* _it_ ~s~ `code`", "⁀\\*bold\\* \\_it\\_ ~⁀s~⁀ \\`code\\`"),
            ("snake_case_name stays", "snake_case_name stays"),
            ("[x](https://evil.example)", "⁀\\[x\\](https:⁀//evil.example)"),
            (
                "![img](http://e.test/a.png)",
                "⁀\\!\\[img\\](http:⁀//e.test⁀/a.png)",
            ),
            (
                "see https://evil.example/x now",
                "see https:⁀//evil.example/x now",
            ),
            (
                "<http://evil.example> <b>x</b> &amp;",
                "⁀&lt;http:⁀//evil.example&gt; &lt;b&gt;x&lt;/b&gt; &amp;amp;",
            ),
            (
                "go www.evil.example or WWW2.evil.example",
                "go www⁀.evil.example or WWW2⁀.evil.example",
            ),
            ("evil.com/path and a/b", "evil.com⁀/path and a/b"),
            (
                "mailto:a@b.test :fire: :) 12:30",
                "mailto:⁀a@⁀b.test :⁀fire: :⁀) 12:⁀30",
            ),
            ("#tag ~town-square $x^2$", "⁀#⁀tag ~⁀town-square &#36;x^2&#36;"),
            ("# heading", "⁀#⁀ heading"),
            ("- list", "⁀- list"),
            ("1. ordered", "⁀1. ordered"),
            ("> quote", "⁀&gt; quote"),
            ("    code", "⁀    code"),
            ("===", "⁀==="),
            ("a|b", "a\\|b"),
            (r"C:\new \* \\", r"C:⁀\new \\\* \\\\"),
        ];
        for (input, want) in table {
            assert_eq!(shown(&escape_loop(input)), *want, "{input:?}");
        }
        // every line of a multi-line text gets the line-start rule
        assert_eq!(shown(&escape_loop("ok\n# no")), "ok\n⁀#⁀ no");
    }

    /// Slack: the plain-text fallback and the literal text of `rich_text` elements.
    #[test]
    fn slack_escaping_table() {
        let table: &[(&str, &str, &str)] = &[
            // input, top-level text, rich_text element
            ("plain", "plain", "plain"),
            (
                "<!channel> <!here> <@U123> <#C1>",
                "&lt;!channel&gt; &lt;!here&gt; &lt;@U123&gt; &lt;#C1&gt;",
                "<⁀!channel> <⁀!here> <⁀@U123> <⁀#C1>",
            ),
            ("*b* _i_ ~s~ `c`", "*b* _i_ ~s~ `c`", "*b* _i_ ~s~ `c`"),
            ("& &amp;", "&amp; &amp;amp;", "& &amp;"),
            (
                "https://evil.example www.evil.example <https://e.test|x>",
                "https:⁀//evil.example www⁀.evil.example &lt;https:⁀//e.test|x&gt;",
                "https:⁀//evil.example www⁀.evil.example <⁀https:⁀//e.test|x>",
            ),
        ];
        for (input, text, literal) in table {
            assert_eq!(shown(&escape_slack_text(input)), *text, "{input:?}");
            assert_eq!(shown(&slack_literal(input)), *literal, "{input:?}");
        }
    }

    /// Discord: input → exactly what is sent (`⁀` = U+2060 WORD JOINER).
    #[test]
    fn discord_escaping_table() {
        let table: &[(&str, &str)] = &[
            ("plain TypeError x is undefined", "plain TypeError x is undefined"),
            ("@everyone @here @bob", "@⁀everyone @⁀here @⁀bob"),
            (
                "<@123> <@&456> <#789> <t:1700000000:R>",
                "\\<@⁀123\\> \\<@⁀&456\\> \\<\\#789\\> \\<t:⁀1700000000:⁀R\\>",
            ),
            (
                "**b** *i* __u__ ~~s~~ ||sp|| `c`",
                "\\*\\*b\\*\\* \\*i\\* \\_\\_u\\_\\_ \\~\\~s\\~\\~ \\|\\|sp\\|\\| \\`c\\`",
            ),
            ("[x](https://evil.example)", "\\[x\\]\\(https:⁀//evil.example\\)"),
            ("# h", "\\# h"),
            ("- l", "\\- l"),
            ("> q", "\\> q"),
            ("1. one", "1\\. one"),
            ("v1.2 x", "v1.2 x"),
            (":fire: 12:30", ":⁀fire: 12:⁀30"),
            ("C:\\x", "C:⁀\\\\x"),
            ("www.evil.example", "www⁀.evil.example"),
        ];
        for (input, want) in table {
            assert_eq!(shown(&escape_discord(input)), *want, "{input:?}");
        }
        let long = "*".repeat(300);
        let cut = escape_discord_bounded(&long, 256);
        assert!(cut.chars().count() <= 256 && cut.ends_with('…'), "{cut}");
        assert!(!cut.trim_end_matches('…').ends_with("\\*\\") && cut.trim_end_matches('…').ends_with("\\*"));
    }

    #[test]
    fn teams_escaping_table() {
        let table: &[(&str, &str)] = &[
            ("**b** _i_ [x](y) # h", "**b** _i_ [x](y) # h"),
            ("<at>Bob</at> @bob", "<⁀at>Bob<⁀/at> @⁀bob"),
            (
                "https://evil.example www.evil.example",
                "https:⁀//evil.example www⁀.evil.example",
            ),
        ];
        for (input, want) in table {
            assert_eq!(shown(&teams_literal(input)), *want, "{input:?}");
        }
    }

    #[test]
    fn telegram_escaping_table() {
        let table: &[(&str, &str)] = &[
            ("<b>x</b> & \"q\"", "&lt;b&gt;x&lt;/b&gt; &amp; &quot;q&quot;"),
            ("ping @admin", "ping @⁀admin"),
            ("https://evil.example", "https://evil.example"),
        ];
        for (input, want) in table {
            assert_eq!(shown(&escape_telegram(input)), *want, "{input:?}");
        }
    }

    /// Bidi and other hidden characters are shown, in every template, and count against the bounds.
    #[test]
    fn hidden_characters_are_revealed_everywhere() {
        let r = Renderer::new().expect("templates");
        let mut t = task(Reason::New, vec![("Invoice \u{202E}gpj.exe\u{202C}", 1)]);
        t.events[0].group_hash = "g".into();
        for name in [TELEGRAM, SLACK, LOOP, EMAIL_TEXT, EMAIL_HTML, EMAIL_SUBJECT] {
            let out = r.render(name, &t).expect("render");
            assert!(
                !out.contains('\u{202E}') && !out.contains('\u{202C}'),
                "{name}: {out}"
            );
            assert!(out.contains("U+202E") && out.contains("U+202C"), "{name}: {out}");
        }
        let mut d = task(Reason::Direct, vec![("t", 1)]);
        d.text = Some("line\u{2028}two\u{2066}".into());
        let out = r.render(EMAIL_TEXT, &d).expect("render");
        assert!(out.contains("line<U+2028>two<U+2066>"), "{out}");
        let many = "\u{202E}".repeat(5000);
        assert_eq!(display_title(&many).chars().count(), MAX_TITLE_CHARS + 1);
        assert!(display_title(&many).ends_with('…'));
    }

    /// SPIKE and REAPPEARED say the numbers that made them fire, on every channel; the title stays data.
    #[test]
    fn spike_and_reappeared_say_their_numbers() {
        let r = Renderer::new().expect("templates");
        let spike = |sum, buckets| Reason::Spike {
            spike: klaxon_core::Spike {
                period_ms: 3_600_000,
                baseline_windows: 24,
                factor_milli: 5000,
                threshold: 10,
            },
            baseline: klaxon_core::Baseline {
                sum,
                buckets,
                needed: 100,
            },
        };
        let back = |last_seen_ms| Reason::Reappeared {
            quiet_period_ms: 7 * 86_400_000,
            last_seen_ms,
        };
        let title = "<b>*x*</b> @channel";
        let cases = [
            (
                spike(480, 24),
                312,
                "Spike in project proj: 312 in the last hour, usually ~20 (15.6×)",
            ),
            (
                spike(30, 4),
                90,
                "Spike in project proj: 90 in the last hour, usually ~7.5 (12.0×)",
            ),
            (
                spike(0, 24),
                40,
                "Spike in project proj: 40 in the last hour, usually none",
            ),
            (
                back(Some(1_700_000_000_123 - 12 * 86_400_000 - 5_000)),
                1,
                "Reappeared in project proj: back after 12 days quiet",
            ),
            (
                back(None),
                1,
                "Reappeared in project proj: back after more than 7 days quiet",
            ),
        ];
        for (reason, count, says) in cases {
            let mut t = task(reason, vec![(title, count)]);
            t.min_period_s = 0;
            for name in [TELEGRAM, SLACK, LOOP, EMAIL_TEXT, EMAIL_HTML, EMAIL_SUBJECT] {
                // markdown channels put a word joiner after `~` (strike-through): not part of the words
                let out = r.render(name, &t).expect("render").replace('\u{2060}', "");
                // the subject is short: "Spike in <project>: …"
                let says = if name == EMAIL_SUBJECT {
                    says.replace("in project ", "in ")
                } else {
                    says.to_owned()
                };
                assert!(out.contains(&says), "{name}: {out}");
                if ![EMAIL_TEXT, EMAIL_SUBJECT].contains(&name) {
                    // (plain text is no markup: the email's text part shows the title as it is)
                    assert!(!out.contains("<b>*x*</b>"), "{name}: the title is data: {out}");
                }
            }
        }
    }

    #[test]
    fn numbers_and_durations_of_an_alert() {
        for (n, shown) in [
            (0, "0"),
            (7, "7"),
            (999, "999"),
            (1_000, "1,000"),
            (1_240, "1,240"),
            (12_345_678, "12,345,678"),
            (u64::MAX, "18,446,744,073,709,551,615"),
        ] {
            assert_eq!(thousands(n), shown);
        }
        for (ms, shown) in [
            (-5, "0 s"),
            (45_000, "45 s"),
            (60_000, "1 min"),
            (12 * 60_000 + 59_999, "12 min"),
            (3_600_000, "1 h"),
            ((2 * 3600 + 14 * 60 + 5) * 1000, "2 h 14 min"),
            (86_400_000, "1 d"),
            ((2 * 86_400 + 5 * 3600 + 59 * 60) * 1000, "2 d 5 h"),
            (i64::MAX, "106751991167 d 7 h"),
        ] {
            assert_eq!(alert_duration(ms), shown, "{ms}");
        }
    }

    /// What each moment of an alert's life says, and what resolved it: Klaxon itself (`timeout`, `event`) or
    /// someone (tenant text, escaped like titles).
    #[test]
    fn lifecycle_messages_say_what_happened_to_the_alert() {
        let r = Renderer::new().expect("templates");
        let alert = |by: Option<&str>| klaxon_core::alert::AlertRef {
            id: "a1e2c3d4e5f60718293a4b5c".into(),
            state: klaxon_core::alert::AlertState::Resolved,
            opened_at_ms: 1_700_000_000_123 - (2 * 3600 + 14 * 60) * 1000,
            events: 1_240,
            by: by.map(str::to_owned),
            firing_notification_id: "f1".into(),
        };
        let cases: [(Reason, Option<&str>, &str); 8] = [
            (
                Reason::Resolved,
                Some("timeout"),
                "Resolved after 2 h 14 min, 1,240 events · resolved automatically",
            ),
            (
                Reason::Resolved,
                Some("event"),
                "Resolved after 2 h 14 min, 1,240 events · resolved automatically",
            ),
            (
                Reason::Resolved,
                Some("alice"),
                "Resolved after 2 h 14 min, 1,240 events · resolved by alice",
            ),
            (
                Reason::Resolved,
                None,
                "Resolved after 2 h 14 min, 1,240 events\n",
            ),
            (
                Reason::Acknowledged,
                Some("cli"),
                "Acknowledged by cli · firing for 2 h 14 min, 1,240 events",
            ),
            (
                Reason::Acknowledged,
                None,
                "Acknowledged · firing for 2 h 14 min, 1,240 events",
            ),
            (
                Reason::Reminder { number: 1, max: 3 },
                None,
                "Still firing: reminder 1 of 3 · firing for 2 h 14 min, 1,240 events",
            ),
            (
                Reason::Escalation { step: 2, steps: 2 },
                None,
                "Escalated (step 2 of 2): still firing · firing for 2 h 14 min, 1,240 events",
            ),
        ];
        for (reason, by, says) in cases {
            let mut t = task(reason, vec![("Boom", 1_240)]);
            t.alert = Some(alert(by));
            for name in [TELEGRAM, SLACK, LOOP, EMAIL_TEXT] {
                let out = r.render(name, &t).expect("render");
                let out = if name == EMAIL_TEXT {
                    out.replace(".\n", "\n")
                } else {
                    out
                };
                assert!(out.contains(says), "{name}: {out}");
                assert!(
                    out.contains("Alert a1e2c3d4e5f60718293a4b5c in project proj"),
                    "{name}: names the alert: {out}"
                );
            }
            let subject = r.render(EMAIL_SUBJECT, &t).expect("subject");
            let head = reason_head(reason);
            assert!(subject.starts_with(&format!("{head}: ")), "{subject}");
        }
        // `by` is tenant text: escaped per channel, on one line
        let mut t = task(Reason::Acknowledged, vec![("Boom", 3)]);
        t.alert = Some(alert(Some("<b>@here</b>\nx")));
        let tg = r.render(TELEGRAM, &t).expect("tg");
        assert!(
            tg.contains("Acknowledged by &lt;b&gt;@\u{2060}here&lt;/b&gt; x · firing"),
            "{tg}"
        );
        let md = r.render(LOOP, &t).expect("loop");
        // (Loop escapes each value as if it started a line: a word joiner before its `<`)
        assert!(
            md.contains("Acknowledged by \u{2060}&lt;b&gt;@\u{2060}here&lt;/b&gt; x · firing"),
            "{md}"
        );
        // a task without its alert still says what happened (and names no alert)
        let mut t = task(Reason::Resolved, vec![("Boom", 3)]);
        t.min_period_s = 0;
        let out = r.render(TELEGRAM, &t).expect("tg");
        assert!(out.contains("Resolved, 3 events\nIn project proj"), "{out}");
        // a firing that opened an alert names it in its footer; one without, as before
        let mut t = task(Reason::New, vec![("Boom", 1)]);
        let before = r.render(TELEGRAM, &t).expect("tg");
        t.alert = Some(alert(None));
        let after = r.render(TELEGRAM, &t).expect("tg");
        assert_eq!(
            after.replace(" · alert a1e2c3d4e5f60718293a4b5c</i>", "</i>"),
            before
        );
        assert_ne!(after, before);
        // an alert id that is not ours is not shown
        t.alert.as_mut().expect("alert").id = "<b>x</b>".into();
        assert_eq!(r.render(TELEGRAM, &t).expect("tg"), before);
    }

    fn reason_head(reason: Reason) -> &'static str {
        match reason {
            Reason::Resolved => "Resolved",
            Reason::Acknowledged => "Acknowledged",
            Reason::Reminder { .. } => "Reminder",
            _ => "Escalated",
        }
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
            actions: &[],
            buttons: false,
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
        let md = r.render_with(LOOP, &t, ctx).expect("loop");
        assert!(
            md.contains("[Open event](https://garage.hawk.so/project/proj/event/g-Boom/rep1/overview)"),
            "our own links are links: {md}"
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
    fn a_silence_in_a_list_names_the_project_and_no_count() {
        let r = Renderer::new().expect("templates");
        let ctx = MessageContext {
            project_name: Some("Shop <eu>"),
            ..MessageContext::default()
        };
        let w = klaxon_core::notification::DigestWindow {
            project_id: "proj",
            project_name: None,
            rule_id: "rule",
            channel: ChannelKind::Telegram,
            endpoint: "1",
            min_period_s: 0,
            severity: None,
            window_start_ms: 1_700_002_800_000,
        };
        let silence = NotificationEvent {
            group_hash: String::new(),
            title: klaxon_core::kind::no_events::title(1_800_000),
            count: 0,
            repetition_id: None,
            open_for_ms: None,
            silence_period_ms: Some(1_800_000),
            alert_id: None,
        };
        let boom = NotificationEvent {
            group_hash: "g".into(),
            title: "Boom".into(),
            count: 3,
            repetition_id: None,
            open_for_ms: None,
            silence_period_ms: None,
            alert_id: None,
        };
        let resolved_silence = NotificationEvent {
            open_for_ms: Some(3_600_000),
            ..silence.clone()
        };
        // something counted: the header counts it; the silences' lines (fired, resolved) have no count
        let t = NotificationTask::for_held(&w, 1, vec![boom, silence.clone()], vec![resolved_silence]);
        let tg = r.render_with(TELEGRAM, &t, ctx).expect("tg");
        let lines: Vec<&str> = tg.lines().collect();
        assert_eq!(
            lines[..4],
            [
                "<b>3 errors in Shop &lt;eu&gt; in quiet hours (2 fired, 1 resolved)</b>",
                "3 × Boom",
                "No events from Shop &lt;eu&gt; for 30 minutes",
                "Resolved after 1 h: No events from Shop &lt;eu&gt; for 30 minutes",
            ],
            "{tg}"
        );
        // nothing counted: the header says what happened, on every template
        let only = NotificationTask::for_held(&w, 1, vec![silence], vec![]);
        let head = "Shop <eu>: no events for 30 minutes (held in quiet hours)";
        let text = r.render_with(EMAIL_TEXT, &only, ctx).expect("text");
        assert!(
            text.starts_with(&format!("{head}\n\nNo events from Shop <eu> for 30 minutes\n")),
            "{text}"
        );
        let subject = r.render_with(EMAIL_SUBJECT, &only, ctx).expect("subject");
        assert!(subject.starts_with(&format!("[Klaxon] {head}: ")), "{subject}");
        let html = r.render_with(EMAIL_HTML, &only, ctx).expect("html");
        assert!(
            html.contains("<h2>Shop &lt;eu&gt;: no events for 30 minutes (held in quiet hours)</h2>"),
            "{html}"
        );
        assert!(!html.contains("<b>0</b>"), "{html}");
        let md = r.render_with(LOOP, &only, ctx).expect("loop");
        assert!(
            md.starts_with(
                "**Shop &lt;eu&gt;: no events for 30 minutes (held in quiet hours)**\n- No events from Shop &lt;eu&gt; for 30 minutes\n"
            ),
            "{md}"
        );
        let slack = r.render_with(SLACK, &only, ctx).expect("slack");
        assert!(!slack.contains("0 ×") && !slack.contains("0 errors"), "{slack}");
        let view = r.view_in(&only, ctx, ROOMS[0]);
        assert_eq!(
            (
                view.head_pre.as_str(),
                view.head_post.as_str(),
                view.seen.as_str()
            ),
            (
                "",
                ": no events for 30 minutes (held in quiet hours)",
                "no events for 30 minutes (held in quiet hours)"
            )
        );
        assert!(!view.events[0].counted);
        // a single NO_EVENTS firing is its own message, as before
        let single = NotificationTask {
            reason: Reason::NoEvents {
                quiet_period_ms: 1_800_000,
                last_event_ms: None,
            },
            ..only.clone()
        };
        let tg = r.render_with(TELEGRAM, &single, ctx).expect("tg");
        assert!(
            tg.starts_with("<b>No events for 30 minutes</b>\nNo events in project Shop"),
            "{tg}"
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
