//! ONLY_NEW (Hawk's): a group's first occurrence (`isNew: true`) fires, once per (rule, group)
//! (`lua/first_seen.lua`).

use super::{Skip, Want};
use crate::event::Event;
use crate::explain::{Peek, RuleVerdict, Verdict};
use crate::notification::rfc3339_ms;

/// The rule kind's name in `whatToReceive`.
pub const NAME: &str = "ONLY_NEW";

/// What an ONLY_NEW rule asks the counter for one event: a first occurrence fires once; any other event is
/// not its business.
pub(crate) fn want(event: &Event) -> Result<Want, Skip> {
    if event.is_new {
        Ok(Want::FirstSeen)
    } else {
        Err(Skip::NotNew)
    }
}

/// Why `uniqueUsers` means nothing on an ONLY_NEW rule, with the fix.
pub(crate) fn unique_users_warning() -> (String, String) {
    (
        "`uniqueUsers` counts distinct users toward a SEEN_MORE `threshold`; an ONLY_NEW rule \
         has no threshold, so it is ignored here"
            .into(),
        "remove `uniqueUsers`, or make the rule SEEN_MORE with a `threshold` of users".into(),
    )
}

/// An ONLY_NEW rule's verdict for `explain` (`lua/first_seen.lua`'s decision): the group's first occurrence fires,
/// once.
pub(crate) fn verdict(rule_id: &str, peek: &Peek) -> RuleVerdict {
    match peek.fired_at {
        Some(t) => RuleVerdict::new(
            rule_id,
            Verdict::AlreadyNotified,
            format!("ONLY_NEW: this group was already notified at {}", rfc3339_ms(t)),
        ),
        None => RuleVerdict::new(
            rule_id,
            Verdict::WouldFire,
            "ONLY_NEW: the first occurrence of this group fires",
        ),
    }
}
