//! The rule kinds, one module each: [`only_new`], [`seen_more`] (and Hawk's legacy `ALL`), [`spike`],
//! [`reappeared`], [`no_events`]. A kind's module holds everything about it that is not I/O:
//!
//! - its part of the rule check: the fields it reads, their defaults and limits, the problems and their fixes
//!   (`read`, called by [`crate::rule::RawRule::validate`]);
//! - what it asks the counter for each event it wants ([`Want`], from `want`); a kind that watches the whole
//!   project instead of groups ([`no_events`]) asks nothing and answers [`Skip::ProjectWide`];
//! - the firing decision `explain` reads the counter's state with ([`Spike::needed`], [`reappeared::reappears`]),
//!   and the kind's verdict for `explain` in words (`verdict` from the counter's [`crate::explain::Peek`];
//!   [`no_events::explain_reason`]);
//! - the rule and its firings in words (`summary` for `klaxon rules list`, `watches_for` for the console,
//!   `words` for the messages).
//!
//! A notification says why it was sent with [`crate::Reason`]: what the kind asked plus what the counter
//! observed ([`Signal`]). Channels switch on [`Kind`], never on strings.
//!
//! The modules sit above [`crate::field`] and [`crate::problem`] and below [`crate::rule`]: a kind knows the
//! fields it reads and the problems it reports, never the raw document or the compiled rule. Its verdict speaks
//! `explain`'s vocabulary ([`crate::explain::RuleVerdict`]); `explain` itself only dispatches to it.

pub mod no_events;
pub mod only_new;
pub mod reappeared;
pub mod seen_more;
pub mod spike;

use std::fmt;

pub use seen_more::Window;
pub use spike::{Baseline, Spike};

use crate::event::Event;
use crate::field::Field;
use crate::problem::RuleProblem;

/// A rule's kind, without its parameters (`whatToReceive`; Hawk's legacy `ALL` is a [`Kind::SeenMore`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `ONLY_NEW` ([`only_new`]).
    OnlyNew,
    /// `SEEN_MORE` ([`seen_more`]).
    SeenMore,
    /// `SPIKE` ([`spike`]).
    Spike,
    /// `REAPPEARED` ([`reappeared`]).
    Reappeared,
    /// `NO_EVENTS` ([`no_events`]).
    NoEvents,
}

impl Kind {
    /// Every kind, in a stable order.
    pub const ALL: [Kind; 5] = [
        Kind::OnlyNew,
        Kind::SeenMore,
        Kind::Spike,
        Kind::Reappeared,
        Kind::NoEvents,
    ];

    /// The kind's name in `whatToReceive`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::OnlyNew => only_new::NAME,
            Kind::SeenMore => seen_more::NAME,
            Kind::Spike => spike::NAME,
            Kind::Reappeared => reappeared::NAME,
            Kind::NoEvents => no_events::NAME,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a rule reacts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhatToReceive {
    /// Only the first occurrence of a group (`isNew: true`).
    OnlyNew,
    /// Occurrences counted in a window; fires when the count reaches `threshold`.
    SeenMore {
        /// Count that fires the rule, ≥ 1.
        threshold: u64,
        /// Window length in milliseconds, ≥ 1000.
        period_ms: u64,
    },
    /// Klaxon's SPIKE: the count of the current bucket reaches `max(threshold, factor × baseline)`, the
    /// baseline being the mean count of the previous `baseline_windows` buckets of the group.
    Spike(Spike),
    /// Klaxon's REAPPEARED: a group is seen again after at least `quiet_period_ms` without events.
    Reappeared {
        /// The quiet that makes the next event a reappearance, ms.
        quiet_period_ms: u64,
    },
    /// Klaxon's NO_EVENTS: the project sent no event at all for `quiet_period_ms`.
    NoEvents {
        /// The silence that fires the rule, ms.
        quiet_period_ms: u64,
    },
}

/// The fields of a stored rule that the kinds read ([`WhatToReceive::read`]): the raw model lends them.
pub(crate) struct KindFields<'a> {
    /// `whatToReceive`.
    pub(crate) what_to_receive: &'a Field<String>,
    /// `threshold`: SEEN_MORE's count, SPIKE's least count.
    pub(crate) threshold: &'a Field<u64>,
    /// `thresholdPeriod`: SEEN_MORE's window, SPIKE's bucket.
    pub(crate) threshold_period: &'a Field<u64>,
    /// SPIKE's `baselineWindows`.
    pub(crate) baseline_windows: &'a Field<u64>,
    /// SPIKE's `factor`.
    pub(crate) factor: &'a Field<f64>,
    /// REAPPEARED's and NO_EVENTS' `quietPeriod`.
    pub(crate) quiet_period: &'a Field<u64>,
}

/// Why `uniqueUsers` means nothing to the kinds that count events only.
const EVENTS_ONLY: &str =
    "`uniqueUsers` is not supported by SPIKE and REAPPEARED rules, which count events; it is ignored";

/// The names `whatToReceive` takes, for the fix of a missing or unknown one.
const KIND_NAMES_FIX: &str = "use \"ONLY_NEW\", \"SEEN_MORE\", \"SPIKE\", \"REAPPEARED\" or \"NO_EVENTS\"";

impl WhatToReceive {
    /// Reads the kind and its parameters from a stored rule's fields; `fatal` makes the problem.
    pub(crate) fn read(
        f: &KindFields<'_>,
        fatal: &dyn Fn(String, &str) -> RuleProblem,
    ) -> Result<WhatToReceive, RuleProblem> {
        Ok(match f.what_to_receive.typed().map(String::as_str) {
            Some(only_new::NAME) => WhatToReceive::OnlyNew,
            Some(seen_more::NAME) => {
                let (threshold, period_ms) = seen_more::read(f.threshold, f.threshold_period, fatal)?;
                WhatToReceive::SeenMore { threshold, period_ms }
            }
            Some("ALL") => {
                let (threshold, period_ms) = seen_more::read_legacy_all(f.threshold_period, fatal)?;
                WhatToReceive::SeenMore { threshold, period_ms }
            }
            Some(spike::NAME) => WhatToReceive::Spike(Spike::read(
                f.threshold_period,
                f.baseline_windows,
                f.factor,
                f.threshold,
                fatal,
            )?),
            Some(reappeared::NAME) => WhatToReceive::Reappeared {
                quiet_period_ms: reappeared::read(f.quiet_period, fatal)?,
            },
            Some(no_events::NAME) => WhatToReceive::NoEvents {
                quiet_period_ms: no_events::read(f.quiet_period, fatal)?,
            },
            _ if f.what_to_receive.is_missing() => {
                return Err(fatal("rule has no `whatToReceive`".into(), KIND_NAMES_FIX))
            }
            _ => {
                return Err(fatal(
                    format!("unknown `whatToReceive` {}", f.what_to_receive.to_json()),
                    KIND_NAMES_FIX,
                ))
            }
        })
    }

    /// The kind, without its parameters.
    pub fn kind(&self) -> Kind {
        match self {
            WhatToReceive::OnlyNew => Kind::OnlyNew,
            WhatToReceive::SeenMore { .. } => Kind::SeenMore,
            WhatToReceive::Spike(_) => Kind::Spike,
            WhatToReceive::Reappeared { .. } => Kind::Reappeared,
            WhatToReceive::NoEvents { .. } => Kind::NoEvents,
        }
    }

    /// The warning for a rule of this kind with `uniqueUsers: true` (message, fix), when the kind ignores it.
    pub(crate) fn unique_users_warning(&self) -> Option<(String, String)> {
        match self {
            WhatToReceive::SeenMore { .. } => None,
            WhatToReceive::OnlyNew => Some(only_new::unique_users_warning()),
            WhatToReceive::Spike(_) | WhatToReceive::Reappeared { .. } => {
                Some((EVENTS_ONLY.into(), "remove `uniqueUsers`".into()))
            }
            WhatToReceive::NoEvents { .. } => Some((
                "`uniqueUsers` means nothing to a NO_EVENTS rule, which watches whether the project sends any \
                 event; it is ignored"
                    .into(),
                "remove `uniqueUsers`".into(),
            )),
        }
    }

    /// What the rule (`rule_id`, counting with `window`, distinct users when `unique_users`) asks the counter
    /// for `event`, or why the kind does not want it.
    pub(crate) fn want(
        &self,
        rule_id: &str,
        window: Window,
        unique_users: bool,
        event: &Event,
    ) -> Result<Want, Skip> {
        match *self {
            WhatToReceive::OnlyNew => only_new::want(event),
            WhatToReceive::SeenMore { threshold, period_ms } => {
                seen_more::want(threshold, period_ms, window, unique_users, event)
            }
            WhatToReceive::Spike(spike) => Ok(spike.want()),
            WhatToReceive::Reappeared { quiet_period_ms } => {
                Ok(reappeared::want(quiet_period_ms, rule_id, event))
            }
            WhatToReceive::NoEvents { .. } => no_events::want(),
        }
    }

    /// The rule in a table cell (`klaxon rules list`): "ONLY_NEW", "SEEN_MORE 100/1h", "SEEN_MORE 5
    /// users/10m", "SPIKE 5x/1h over 24 (min 10)", "REAPPEARED after 7d", "NO_EVENTS for 1h".
    pub fn summary(&self, unique_users: bool) -> String {
        match self {
            WhatToReceive::OnlyNew => only_new::NAME.to_owned(),
            WhatToReceive::SeenMore { threshold, period_ms } => {
                seen_more::summary(*threshold, *period_ms, unique_users)
            }
            WhatToReceive::Spike(s) => s.summary(),
            WhatToReceive::Reappeared { quiet_period_ms } => reappeared::summary(*quiet_period_ms),
            WhatToReceive::NoEvents { quiet_period_ms } => no_events::summary(*quiet_period_ms),
        }
    }

    /// What a SPIKE, REAPPEARED or NO_EVENTS rule watches for, in a sentence (the console; the other kinds
    /// show their threshold and period instead): "5× its mean of the previous 24 buckets of 1h (at least 10)",
    /// "seen again after 7days quiet", "no event from the project for 1h".
    pub fn watches_for(&self) -> Option<String> {
        match self {
            WhatToReceive::Spike(s) => Some(s.watches_for()),
            WhatToReceive::Reappeared { quiet_period_ms } => Some(reappeared::watches_for(*quiet_period_ms)),
            WhatToReceive::NoEvents { quiet_period_ms } => Some(no_events::watches_for(*quiet_period_ms)),
            WhatToReceive::OnlyNew | WhatToReceive::SeenMore { .. } => None,
        }
    }
}

/// What a rule asks the counter to do for one event: the counter (`klaxon-counter`'s `Hit`) takes it as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Want {
    /// Fire once per (rule, group): the event is a first occurrence.
    FirstSeen,
    /// Count the event; fire when the window's count reaches `threshold`.
    Count {
        /// Count that fires.
        threshold: u64,
        /// Window length in ms.
        period_ms: u64,
        /// Fixed or sliding.
        window: Window,
    },
    /// Count the event's user; fire when the number of distinct users in the window reaches `threshold`
    /// (`uniqueUsers: true`). Only events with a user are wanted.
    UniqueUsers {
        /// Distinct users that fire.
        threshold: u64,
        /// Window length in ms.
        period_ms: u64,
        /// Fixed or sliding, with the same semantics as for events.
        window: Window,
    },
    /// Count the event in the current bucket; fire once per bucket when the count reaches the spike's
    /// [`Spike::needed`].
    Spike(Spike),
    /// Note that the group was seen; fire when it had been quiet for at least `quiet_period_ms`.
    Reappeared {
        /// The rule's `quietPeriod`, ms.
        quiet_period_ms: u64,
        /// Since when the rule watches groups (its ObjectId's time, unix ms; `i64::MAX`, never, when the id
        /// is not an ObjectId). A group the counter has no mark for is known to have been quiet for
        /// `quiet_period_ms` only when the rule has watched that long.
        armed_at_ms: i64,
        /// The event is a group's first occurrence (`isNew`): ONLY_NEW's business, never a reappearance.
        is_new: bool,
    },
}

impl Want {
    /// The kind that asked.
    pub fn kind(&self) -> Kind {
        match self {
            Want::FirstSeen => Kind::OnlyNew,
            Want::Count { .. } | Want::UniqueUsers { .. } => Kind::SeenMore,
            Want::Spike(_) => Kind::Spike,
            Want::Reappeared { .. } => Kind::Reappeared,
        }
    }

    /// The `window` label of a firing in the `klaxon_thresholds_crossed_total` metric: `first_seen` for
    /// ONLY_NEW, `spike` and `reappeared` for those kinds, else the rule's window (`fixed` or `sliding`,
    /// [`Window`]'s `Display`).
    pub fn label(&self) -> String {
        match self {
            Want::FirstSeen => "first_seen".to_owned(),
            Want::Spike(_) => "spike".to_owned(),
            Want::Reappeared { .. } => "reappeared".to_owned(),
            Want::Count { window, .. } | Want::UniqueUsers { window, .. } => window.to_string(),
        }
    }
}

/// What the counter observed of a SPIKE or REAPPEARED firing beyond its count: the numbers that made it fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// A SPIKE firing's baseline.
    Spike(Baseline),
    /// A REAPPEARED firing's previous sighting.
    Reappeared {
        /// When the group was last seen before, unix ms; `None` when its mark had expired.
        last_seen_ms: Option<i64>,
    },
}

/// Why a rule does not count an event (see [`crate::CompiledRule::decide`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// `isEnabled: false`.
    Disabled,
    /// No enabled channel with an endpoint: nothing could be sent.
    NoChannels,
    /// An ONLY_NEW rule and an event that is not a first occurrence.
    NotNew,
    /// A `uniqueUsers` rule and an event without a user.
    NoUser,
    /// The title filters rejected the title.
    Filtered(crate::filter::FilterMiss),
    /// A NO_EVENTS rule ([`no_events`]): it watches the project as a whole, so nothing is counted per group and
    /// the counter is never asked; every event of the project restarts its silence, which the engine notes once
    /// per project.
    ProjectWide,
}
