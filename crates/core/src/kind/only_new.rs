//! ONLY_NEW (Hawk's): a group's first occurrence (`isNew: true`) fires, once per (rule, group)
//! (`lua/first_seen.lua`).

use super::{Skip, Want};
use crate::event::Event;

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
