//! Alerts in the engine: the worker opens them and counts events into them ([`open`]), the timer loop
//! ([`crate::timers`]) resolves them and sends their reminders and escalation steps ([`decide`] says what a due
//! one does) (`klaxon_core::alert` is the model, `klaxon_counter::alerts` the state in Redis, [`crate::timer`]
//! the timer messages).
//!
//! ```text
//! worker batch: every matched (event, rule) pair is a Touch, sent beside the counting (one round trip):
//!               it counts into the (rule, group)'s open alert, if any
//!               route ──▶ crossed firings (not muted) ──▶ Alerts::open ──▶ tasks carry `alert`
//!                                                         (then the firing pairs of the alerts opened now
//!                                                          are touched: they found none before)
//!               a new alert with resolveAfter > 0 ──▶ timer message ──delay engine──▶ <ns>.alerts.timer
//!                 (due at last event + resolveAfter)
//! timer loop: Alerts::resolve_due ──NotDue{at}──▶ the timer again, due at `at`
//!                                 ──Done / AlreadyResolved──▶ lifecycle tasks (Reason::Resolved), one per channel
//!                                    that delivered the firing ──outbox (route: held in a quiet window, through
//!                                    the channel's digest with `minPeriod > 0`, else now), confirmed──▶ ack
//!                                 ──Never / NotFound──▶ ack
//! ```
//!
//! * **Once.** An alert's id derives from its firing (`alert_id`), so a redelivered batch or another worker
//!   finds the same alert (`Opened::Again`) and schedules its timer again: two timers of one alert are harmless,
//!   the second finds it resolved and publishes the same tasks, whose notification ids depend only on (alert,
//!   "resolved", channel), so the senders deliver each once. The timer is acked only after the resolved tasks
//!   were confirmed: a crash in between brings the timer back, `resolve_due` answers `AlreadyResolved`, and the
//!   same tasks are published again.
//! * **Muted rules still resolve.** A muted firing opens no alert, but an alert opened before the mute resolves
//!   as usual: a resolve timer never reads mutes. A due reminder or escalation step does: a mute that matches
//!   the alert silences it (nothing sent, the chain goes on; [`decide::OnCallDue::under_mute`]).
//! * **Bounded.** A timer message is small JSON (at most [`crate::timer::TIMER_MAX_BYTES`]); anything else in the
//!   queue is set aside to `<ns>.dead` with the reason, never retried, never a reason to stop the loop.
//!

pub mod decide;
pub mod open;
#[cfg(test)]
pub(crate) mod tests;

pub use open::{alert_of, fired_touches, touches, OnCall};
