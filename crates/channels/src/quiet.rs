//! The messages that list what fired and then what resolved: a quiet window's release on a channel
//! ([`Reason::QuietHours`]), and a digest that carries resolves ([`Reason::Digest`] with `resolved > 0`: an
//! alert's resolve on a channel with `minPeriod > 0` joins the channel's digest like a firing). Each resolved
//! line starts with our word `Resolved:`. Every channel renders them as its digest (header "N errors in
//! <project> in quiet hours (2 fired, 1 resolved)" or "… in the last 5 minutes (2 fired, 1 resolved)", one line
//! per group); these helpers give the view ([`crate::render`]) the parts that differ.
//!
//! Two kinds of entries count no errors: a resolved alert (its events were counted when it fired) and a
//! NO_EVENTS silence (the project sent nothing: an entry that carries its quiet period,
//! [`NotificationEvent::is_silence`]). A message in which nothing counted does not
//! say "0 errors": its header says what happened instead ([`nothing_counted`]: "Shop: 1 resolved in the last 5
//! minutes", "Shop: no events for 30 minutes (held in quiet hours)"), and a silence's line reads "No events from
//! Shop for 30 minutes" without a count ([`silence_line`]), in the words of a single NO_EVENTS message.

use std::borrow::Cow;

use klaxon_core::{NotificationEvent, NotificationTask, Reason};

/// True for a message in parts (what fired, then what resolved): its order is kept as it is.
pub(crate) fn in_parts(task: &NotificationTask) -> bool {
    task.held_parts().is_some()
}

/// How the message names its period, after "N errors in <project> in ": `quiet hours` for a release, the
/// digest's period for a digest with resolves, with what fired and resolved when something resolved (all of
/// it: listed, and counted past the list's bound). `None` for any other task.
pub(crate) fn window(task: &NotificationTask) -> Option<String> {
    let (period, fired, resolved) = match task.reason {
        Reason::QuietHours { fired, resolved, .. } => ("quiet hours".to_owned(), fired, resolved),
        Reason::Digest {
            min_period_s,
            resolved,
            ..
        } if resolved > 0 => {
            let (fired, _) = task.held_parts()?;
            (
                crate::render::last_period(min_period_s),
                u32::try_from(fired.len()).unwrap_or(u32::MAX),
                resolved,
            )
        }
        _ => return None,
    };
    // every firing and resolve of the window, those counted past its list's bound included
    let more = task.unlisted();
    let fired = u64::from(fired).saturating_add(more.fired);
    let resolved = u64::from(resolved).saturating_add(more.resolved);
    Some(if resolved == 0 {
        period
    } else {
        format!("{period} ({fired} fired, {resolved} resolved)")
    })
}

/// The errors the message counts in its header: what fired (a resolved alert's events were counted when it
/// fired). `None` for any other task.
pub(crate) fn total(task: &NotificationTask) -> Option<u64> {
    let (fired, _) = task.held_parts()?;
    Some(fired.iter().map(|e| e.count).sum())
}

/// True for an entry about the project rather than a group: a NO_EVENTS silence, which carries its quiet
/// period ([`NotificationEvent::is_silence`]). Its line shows no count.
pub(crate) fn is_silence(e: &NotificationEvent) -> bool {
    e.is_silence()
}

/// A silence's quiet period in words ("1 hour"), from the period it carries: only our words and numbers.
fn silence_period(e: &NotificationEvent) -> Option<String> {
    e.silence_period_ms.map(klaxon_core::text::duration_words)
}

/// A silence's line in a digest or a quiet window's release, in the words of a single NO_EVENTS message:
/// "No events from Shop for 1 hour" (`project` as the message shows it).
pub(crate) fn silence_line(project: &str, e: &NotificationEvent) -> String {
    match silence_period(e) {
        Some(period) => format!("No events from {project} for {period}"),
        None => format!("No events from {project}"),
    }
}

/// What the header of a digest or a quiet window's release says after the project when nothing in it counted
/// (only resolves, only a NO_EVENTS silence): "1 resolved in the last 5 minutes", "2 resolved in quiet hours",
/// "no events for 30 minutes (held in quiet hours)", "no events for 1 hour, 1 resolved (in the last 5
/// minutes)". Only our words and numbers. `None` when something counted (the header then counts errors), and
/// for any other task.
pub(crate) fn nothing_counted(task: &NotificationTask) -> Option<String> {
    let (fired, resolved) = match task.held_parts() {
        Some(parts) => parts,
        None if matches!(task.reason, Reason::Digest { .. }) => (task.events.as_slice(), &[][..]),
        None => return None,
    };
    if task.events.is_empty() || fired.iter().any(|e| e.count > 0) {
        return None;
    }
    let (silences, others): (Vec<&NotificationEvent>, Vec<&NotificationEvent>) =
        fired.iter().partition(|e| is_silence(e));
    let mut what = Vec::new();
    if let Some(first) = silences.first() {
        let mut words = match silence_period(first) {
            Some(period) => format!("no events for {period}"),
            None => "no events".to_owned(),
        };
        if silences.len() > 1 {
            words.push_str(&format!(" ({} times)", silences.len()));
        }
        what.push(words);
    }
    if !others.is_empty() {
        what.push(format!("{} fired", others.len()));
    }
    if !resolved.is_empty() {
        what.push(format!("{} resolved", resolved.len()));
    }
    let period = match task.reason {
        Reason::QuietHours { .. } if silences.is_empty() => "in quiet hours".to_owned(),
        Reason::QuietHours { .. } => "(held in quiet hours)".to_owned(),
        Reason::Digest { min_period_s, .. } if silences.is_empty() => {
            format!("in {}", crate::render::last_period(min_period_s))
        }
        Reason::Digest { min_period_s, .. } => format!("(in {})", crate::render::last_period(min_period_s)),
        _ => return None,
    };
    Some(format!("{} {period}", what.join(", ")))
}

/// The title of the task's `index`-th event as its line shows it: `Resolved after 2 h 14 min: <title>` for the
/// resolved part (`Resolved: <title>` when how long the alert was open is not known), the title otherwise.
pub(crate) fn title<'a>(task: &NotificationTask, index: usize, title: &'a str) -> Cow<'a, str> {
    match task.held_parts() {
        Some((fired, _)) if index >= fired.len() => {
            match task.events.get(index).and_then(|e| e.open_for_ms) {
                Some(ms) => Cow::Owned(format!(
                    "Resolved after {}: {title}",
                    crate::render::alert_duration(i64::try_from(ms).unwrap_or(i64::MAX))
                )),
                None => Cow::Owned(format!("Resolved: {title}")),
            }
        }
        _ => Cow::Borrowed(title),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaxon_core::notification::DigestWindow;
    use klaxon_core::{ChannelKind, NotificationEvent};

    fn ev(g: &str, count: u64) -> NotificationEvent {
        NotificationEvent {
            group_hash: g.into(),
            title: format!("Error {g}"),
            count,
            repetition_id: None,
            open_for_ms: None,
            silence_period_ms: None,
            alert_id: None,
        }
    }

    #[test]
    fn a_release_lists_what_fired_then_what_resolved() {
        let w = DigestWindow {
            project_id: "p",
            project_name: None,
            rule_id: "r",
            channel: ChannelKind::Webhook,
            endpoint: "https://h.test/",
            min_period_s: 0,
            severity: None,
            window_start_ms: 1_700_002_800_000,
        };
        let t = NotificationTask::for_held(&w, 1, vec![ev("a", 2), ev("b", 9)], vec![ev("c", 4)]);
        assert!(in_parts(&t));
        let titles: Vec<String> = t
            .events
            .iter()
            .enumerate()
            .map(|(i, e)| title(&t, i, &e.title).into_owned())
            .collect();
        assert_eq!(titles, ["Error b", "Error a", "Resolved: Error c"]);
        assert_eq!(total(&t), Some(11));
        assert_eq!(window(&t).as_deref(), Some("quiet hours (2 fired, 1 resolved)"));
        let only_fired = NotificationTask::for_held(&w, 1, vec![ev("a", 2)], vec![]);
        assert_eq!(window(&only_fired).as_deref(), Some("quiet hours"));
        // the same window on the same channel is the same notification, whenever it is claimed
        assert_eq!(
            NotificationTask::for_held(&w, 5, vec![ev("a", 2)], vec![]).notification_id,
            only_fired.notification_id
        );
    }

    #[test]
    fn a_digest_with_resolves_lists_them_after_what_fired() {
        let w = DigestWindow {
            project_id: "p",
            project_name: None,
            rule_id: "r",
            channel: ChannelKind::Slack,
            endpoint: "https://h.test/",
            min_period_s: 300,
            severity: None,
            window_start_ms: 1_700_000_000_000,
        };
        // a resolved entry says how long its alert was open, when the digest knows it
        let open = NotificationEvent {
            open_for_ms: Some((2 * 3600 + 14 * 60 + 5) * 1000),
            ..ev("a", 4)
        };
        let t = NotificationTask::for_digest(&w, 1, vec![ev("a", 2), ev("b", 9)], vec![ev("c", 1), open]);
        assert!(in_parts(&t));
        let titles: Vec<String> = t
            .events
            .iter()
            .enumerate()
            .map(|(i, e)| title(&t, i, &e.title).into_owned())
            .collect();
        assert_eq!(
            titles,
            [
                "Error b",
                "Error a",
                "Resolved after 2 h 14 min: Error a",
                "Resolved: Error c"
            ]
        );
        assert_eq!(total(&t), Some(11));
        assert_eq!(
            window(&t).as_deref(),
            Some("the last 5 minutes (2 fired, 2 resolved)")
        );
        // a digest of firings only is as it always was
        let only_fired = NotificationTask::for_digest(&w, 1, vec![ev("a", 2)], vec![]);
        assert!(!in_parts(&only_fired));
        assert_eq!((window(&only_fired), total(&only_fired)), (None, None));
        // a window where only resolves happened
        let only_resolved = NotificationTask::for_digest(&w, 1, vec![], vec![ev("c", 7)]);
        assert_eq!(
            window(&only_resolved).as_deref(),
            Some("the last 5 minutes (0 fired, 1 resolved)")
        );
        assert_eq!(total(&only_resolved), Some(0));
        // …whose header says so instead of "0 errors"
        assert_eq!(
            nothing_counted(&only_resolved).as_deref(),
            Some("1 resolved in the last 5 minutes")
        );
        assert_eq!(nothing_counted(&t), None);
        assert_eq!(nothing_counted(&only_fired), None);
    }

    fn silence(quiet_period_ms: u64) -> NotificationEvent {
        NotificationEvent::silence(quiet_period_ms)
    }

    #[test]
    fn a_message_in_which_nothing_counted_says_what_happened() {
        let w = |min_period_s| DigestWindow {
            project_id: "p",
            project_name: None,
            rule_id: "r",
            channel: ChannelKind::Telegram,
            endpoint: "1",
            min_period_s,
            severity: None,
            window_start_ms: 1_700_002_800_000,
        };
        let (quiet, digest) = (w(0), w(300));
        let held = |f: Vec<NotificationEvent>, r| NotificationTask::for_held(&quiet, 1, f, r);
        let digested = |f: Vec<NotificationEvent>, r| NotificationTask::for_digest(&digest, 1, f, r);
        let h = 3_600_000;
        // (task, what the header says after the project; None: it counts errors as before)
        let cases = [
            (
                held(vec![silence(h)], vec![]),
                Some("no events for 1 hour (held in quiet hours)"),
            ),
            (
                held(vec![silence(30 * 60_000)], vec![ev("a", 4)]),
                Some("no events for 30 minutes, 1 resolved (held in quiet hours)"),
            ),
            (
                held(vec![], vec![ev("a", 4), ev("b", 1)]),
                Some("2 resolved in quiet hours"),
            ),
            (
                held(vec![silence(h), silence(h)], vec![]),
                Some("no events for 1 hour (2 times) (held in quiet hours)"),
            ),
            // a resolved silence is a resolve like any other
            (held(vec![], vec![silence(h)]), Some("1 resolved in quiet hours")),
            (
                digested(vec![silence(h)], vec![]),
                Some("no events for 1 hour (in the last 5 minutes)"),
            ),
            (
                digested(vec![], vec![ev("c", 7)]),
                Some("1 resolved in the last 5 minutes"),
            ),
            // something counted: the header counts it, the silence is one line among the others
            (held(vec![silence(h), ev("a", 2)], vec![]), None),
            (digested(vec![ev("a", 2)], vec![silence(h)]), None),
            (digested(vec![silence(h), ev("a", 1)], vec![]), None),
        ];
        for (task, want) in cases {
            assert_eq!(nothing_counted(&task).as_deref(), want, "{:?}", task.events);
        }
        // a NO_EVENTS firing on its own is its own message, not a list
        let mut single = held(vec![silence(h)], vec![]);
        single.reason = Reason::NoEvents {
            quiet_period_ms: 3_600_000,
            last_event_ms: None,
        };
        assert_eq!(nothing_counted(&single), None);
    }

    #[test]
    fn a_silence_line_names_the_project_and_the_period_it_carries() {
        for (ms, want) in [
            (3_600_000, "No events from Shop for 1 hour"),
            (30 * 60_000, "No events from Shop for 30 minutes"),
            (2 * 86_400_000, "No events from Shop for 2 days"),
            (10_000, "No events from Shop for 10 seconds"),
        ] {
            assert_eq!(silence_line("Shop", &silence(ms)), want);
        }
        // the period comes from the entry, never from its title: a tenant's title gives none of its words
        for title in [
            "",
            "No events for",
            "No events for <b>1</b> hour",
            "No events for 2 hours",
            "Boom",
        ] {
            let entry = NotificationEvent {
                title: title.to_owned(),
                silence_period_ms: None,
                ..silence(3_600_000)
            };
            assert_eq!(silence_line("Shop", &entry), "No events from Shop", "{title}");
        }
        assert!(is_silence(&silence(1000)));
        // an entry without a group is not a silence unless it says so (a direct notification's, an old buffer's)
        assert!(!is_silence(&ev("a", 0)));
        assert!(!is_silence(&ev("", 0)));
    }
}
