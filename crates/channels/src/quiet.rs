//! The message a quiet window releases on a channel ([`Reason::QuietHours`]): a digest of what fired during the
//! quiet hours, then what resolved in them, each resolved line starting with our word `Resolved:`. Every channel
//! renders it as its digest (header "N errors in <project> in quiet hours (2 fired, 1 resolved)", one line per
//! group); these helpers give the view ([`crate::render`]) the parts that differ.

use std::borrow::Cow;

use klaxon_core::{NotificationTask, Reason};

/// True for a quiet window's release.
pub(crate) fn is_release(task: &NotificationTask) -> bool {
    matches!(task.reason, Reason::QuietHours { .. })
}

/// How the release names its period, after "N errors in <project> in ": `quiet hours`, with what fired and
/// resolved when something resolved. `None` for any other task.
pub(crate) fn window(task: &NotificationTask) -> Option<String> {
    let Reason::QuietHours { fired, resolved, .. } = task.reason else {
        return None;
    };
    Some(if resolved == 0 {
        "quiet hours".to_owned()
    } else {
        format!("quiet hours ({fired} fired, {resolved} resolved)")
    })
}

/// The errors a release counts in its header: what fired (a resolved alert's events were counted when it
/// fired). `None` for any other task.
pub(crate) fn total(task: &NotificationTask) -> Option<u64> {
    let (fired, _) = task.held_parts()?;
    Some(fired.iter().map(|e| e.count).sum())
}

/// The title of the task's `index`-th event as its line shows it: `Resolved: <title>` for the release's
/// resolved part, the title otherwise.
pub(crate) fn title<'a>(task: &NotificationTask, index: usize, title: &'a str) -> Cow<'a, str> {
    match task.held_parts() {
        Some((fired, _)) if index >= fired.len() => Cow::Owned(format!("Resolved: {title}")),
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
        assert!(is_release(&t));
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
}
