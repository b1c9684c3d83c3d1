//! The messages that list what fired and then what resolved: a quiet window's release on a channel
//! ([`Reason::QuietHours`]), and a digest that carries resolves ([`Reason::Digest`] with `resolved > 0`: an
//! alert's resolve on a channel with `minPeriod > 0` joins the channel's digest like a firing). Each resolved
//! line starts with our word `Resolved:`. Every channel renders them as its digest (header "N errors in
//! <project> in quiet hours (2 fired, 1 resolved)" or "… in the last 5 minutes (2 fired, 1 resolved)", one line
//! per group); these helpers give the view ([`crate::render`]) the parts that differ.

use std::borrow::Cow;

use klaxon_core::{NotificationTask, Reason};

/// True for a message in parts (what fired, then what resolved): its order is kept as it is.
pub(crate) fn in_parts(task: &NotificationTask) -> bool {
    task.held_parts().is_some()
}

/// How the message names its period, after "N errors in <project> in ": `quiet hours` for a release, the
/// digest's period for a digest with resolves, with what fired and resolved when something resolved. `None`
/// for any other task.
pub(crate) fn window(task: &NotificationTask) -> Option<String> {
    let (period, fired, resolved) = match task.reason {
        Reason::QuietHours { fired, resolved, .. } => ("quiet hours".to_owned(), fired, resolved),
        Reason::Digest {
            min_period_s,
            resolved,
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
    }
}
