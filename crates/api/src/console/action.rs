//! `GET|POST /a/{token}`: the signed action links of messages (README, "Action links"; `klaxon_core::action`).
//!
//! The token is the authority for its one action, so these pages need no console login. A `GET` never changes
//! anything (mail and chat clients open links to scan them): it shows what the link would do — the project, the
//! rule as the project page describes it (never its channels or endpoints), the group's title when the link
//! carries it, and for how long — with a form. The form `POST`s back to the same URL with a CSRF value bound to
//! the link (`ActionKey::form_token`; the visitor has no session to bind one to), past the console's guards
//! (Host allowlist, cross-site `Origin` → 403). Confirming a mute makes it through the API's own mute function,
//! with an id derived from the token, and answers "muted until …" with an Undo button: itself a signed action
//! bound to that mute id, expiring when the mute does, confirmed by `POST` too. A link does its action once: the
//! mute and the record of the link's use are written in one Redis step (`lua/mute_add.lua`), so confirming a
//! used link again — after Undo, after the mute was deleted, or a second click — changes nothing and the page
//! says when the link was used (`409`; its `GET` says so too, with the Undo button while the mute lasts). "Why did this fire?" is read-only: its `GET` shows the explain verdict of that rule for that
//! group.
//!
//! "Acknowledge this alert" and "Resolve this alert" (on a firing of an alert) name the alert in their claim: the
//! `GET` shows the alert (or that it is acknowledged or resolved already), the confirmed `POST` acknowledges or
//! resolves it through the API's own [`Api::change_alert`] (by `link`), which publishes the lifecycle messages. A
//! used link does nothing when confirmed again: the alert is acknowledged or resolved already (`409`, saying by
//! whom and when), and the same lifecycle messages (same notification ids) are not delivered twice.
//!
//! Refusals are pages with a 4xx status and nothing that helps forging: 400 malformed, 403 bad signature,
//! 410 expired, 404 when action links are off here (no `KLAXON_ACTION_KEY`) or the rule is gone — except for the
//! alert links: an alert is acknowledged or resolved without its rule, so they work while the alert exists, also
//! after its rule was deleted (the page then says the rule is deleted).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Form;
use klaxon_core::action::{Action, ActionError, ActionKey, Claim};
use klaxon_core::event::Event;
use klaxon_core::RuleVerdict;
use serde::{Deserialize, Serialize};

use super::projects::{rule_view, RuleView};
use super::view::{ms_human, render, Nav, PageError, Template};
use super::Console;
use crate::rest::alerts::{check_by, HandAction, MAX_BY_CHARS};
use crate::rest::mutes::{LinkMute, MuteEnd, MuteRequest};
use crate::{Api, ApiError};

/// `by` of an alert acknowledged or resolved through an action link.
const LINK_BY: &str = "link";

/// The hand action of an alert link.
fn hand_action(action: Action) -> HandAction {
    if action == Action::Ack {
        HandAction::Acknowledge
    } else {
        HandAction::Resolve
    }
}

/// The alert of an alert link's claim, as it is now (404 page when it is gone).
async fn claimed_alert(api: &Api, claim: &Claim) -> Result<klaxon_core::alert::Alert, PageError> {
    let gone = || {
        PageError(
            StatusCode::NOT_FOUND,
            "The alert of this link no longer exists (resolved alerts are kept 7 days). Nothing was done."
                .into(),
        )
    };
    let id = claim.alert_id.as_deref().ok_or_else(gone)?;
    if !klaxon_core::alert::is_alert_id(id) {
        return Err(gone());
    }
    api.alerts()
        .await?
        .get(&claim.project_id, id)
        .await
        .map_err(|e| ApiError::unavailable("Redis", e))?
        .ok_or_else(gone)
}

/// What an alert is now, in words: "firing since …, N events", "acknowledged by X at …", "resolved by X at …".
fn alert_words(a: &klaxon_core::alert::Alert) -> String {
    let by = |who: &Option<String>, at: Option<i64>| {
        format!(
            "{}{}",
            who.as_deref().map(|w| format!(" by {w}")).unwrap_or_default(),
            at.map(|t| format!(" at {}", ms_human(t))).unwrap_or_default()
        )
    };
    match a.state {
        klaxon_core::alert::AlertState::Firing => format!(
            "Alert {} is firing since {} ({} events).",
            a.id,
            ms_human(a.fired_at_ms),
            a.events
        ),
        klaxon_core::alert::AlertState::Acknowledged => format!(
            "Alert {} is acknowledged{} ({} events).",
            a.id,
            by(&a.acknowledged_by, a.acknowledged_at_ms),
            a.events
        ),
        klaxon_core::alert::AlertState::Resolved => format!(
            "Alert {} is resolved{}.",
            a.id,
            by(&a.resolved_by, a.resolved_at_ms)
        ),
    }
}

fn now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The page of a refused link: what went wrong in words, nothing about why the signature failed.
fn refusal(e: ActionError) -> PageError {
    let (status, message) = match e {
        ActionError::Expired => (
            StatusCode::GONE,
            "This link has expired (action links work for 7 days after the alert). Open the console to mute or explain from there.",
        ),
        ActionError::BadSignature => (
            StatusCode::FORBIDDEN,
            "This link is not valid: it was changed, or it was not made by this Klaxon. Nothing was done.",
        ),
        ActionError::Malformed | ActionError::TooLong => (
            StatusCode::BAD_REQUEST,
            "This is not a Klaxon action link (it may have been cut when it was copied). Nothing was done.",
        ),
    };
    PageError(status, message.into())
}

impl Console {
    fn action_key(&self) -> Result<&ActionKey, PageError> {
        self.api.config().action_key.as_ref().ok_or_else(|| {
            PageError(
                StatusCode::NOT_FOUND,
                "Action links are not enabled on this server (KLAXON_ACTION_KEY is not set).".into(),
            )
        })
    }

    /// The key and the verified claim of `token`.
    fn verified(&self, token: &str) -> Result<(&ActionKey, Claim), PageError> {
        let key = self.action_key()?;
        let claim = key.verify(token, now_s()).map_err(refusal)?;
        Ok((key, claim))
    }
}

/// The project's name and the rule's description, from the store. A rule that is gone is a 404, except for an
/// alert link ([`Action::on_alert`]): the alert lives on without its rule (`None`).
async fn describe(api: &Api, claim: &Claim) -> Result<(String, Option<RuleView>), PageError> {
    let store = api.store().await?;
    let limits = &api.config().limits;
    let name = store
        .load_with(&claim.project_id, limits)
        .await
        .map_err(super::view::rules_error)?
        .and_then(|rules| rules.name)
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| claim.project_id.clone());
    let project = store
        .project(&claim.project_id)
        .await
        .map_err(super::view::rules_error)?;
    let rule = project
        .iter()
        .flat_map(|p| p.notifications.iter())
        .map(|r| rule_view(r, limits))
        .find(|r| r.id.eq_ignore_ascii_case(&claim.rule_id));
    if rule.is_none() && !claim.action.on_alert() {
        return Err(PageError(
            StatusCode::NOT_FOUND,
            "The rule of this link no longer exists. Nothing was done.".into(),
        ));
    }
    Ok((name, rule))
}

/// `action.html`: what a link does, the form that does it, and what was done.
#[derive(Serialize)]
struct ActionPage {
    title: String,
    /// No session here: the layout shows no "log out" and the page's own form carries its own CSRF value.
    csrf: &'static str,
    session: bool,
    nav: Nav,
    project: String,
    project_id: String,
    /// None: the rule was deleted since (alert links only).
    rule: Option<RuleView>,
    rule_id: String,
    group_hash: Option<String>,
    /// The title the link carries (explain links only).
    event_title: Option<String>,
    /// What the page asks or says.
    stage: &'static str,
    action: &'static str,
    /// "Mute this error for 1 h" and the like.
    label: &'static str,
    /// The sentence of what will happen (or happened).
    what: String,
    /// The form's target and CSRF value (a confirmation, or the Undo button).
    form_action: Option<String>,
    form_csrf: Option<String>,
    button: &'static str,
    /// Until when the link works.
    link_expires: String,
    verdicts: Vec<RuleVerdict>,
    title_cut: bool,
    /// "Why did this fire?": when the link's firing happened and its numbers, in words.
    fired_at: Option<String>,
    fired_words: Option<String>,
}

impl Template for ActionPage {
    const NAME: &'static str = "action.html";
}

fn duration_words(secs: u64) -> &'static str {
    if secs >= 24 * 3600 {
        "24 hours"
    } else {
        "1 hour"
    }
}

/// What a mute of `claim` covers, in words.
fn mute_scope(claim: &Claim) -> String {
    match &claim.group_hash {
        Some(g) => format!("this rule's alerts for the group {g}"),
        None => "every alert of this rule (all groups)".into(),
    }
}

fn page(
    claim: &Claim,
    project: String,
    rule: Option<RuleView>,
    stage: &'static str,
    what: String,
) -> ActionPage {
    ActionPage {
        title: format!("{} · Klaxon action", claim.action.label()),
        csrf: "",
        session: false,
        nav: Nav::None,
        project,
        project_id: claim.project_id.clone(),
        rule,
        rule_id: claim.rule_id.clone(),
        group_hash: claim.group_hash.clone(),
        event_title: claim.title.clone(),
        stage,
        action: claim.action.as_str(),
        label: claim.action.label(),
        what,
        form_action: None,
        form_csrf: None,
        button: "",
        link_expires: ms_human(claim.expires_s.saturating_mul(1000)),
        verdicts: Vec::new(),
        fired_at: claim.fired.as_ref().map(|f| ms_human(f.at_ms)),
        fired_words: claim.fired.as_ref().map(klaxon_core::action::Fired::words),
        title_cut: claim
            .title
            .as_ref()
            .is_some_and(|t| t.chars().count() >= klaxon_core::action::MAX_TITLE_CHARS),
    }
}

/// `GET /a/{token}`: the confirmation page (or, for "why did this fire?", the answer). Changes nothing.
pub(super) async fn show(
    State(c): State<Arc<Console>>,
    Path(token): Path<String>,
) -> Result<Response, PageError> {
    let (key, claim) = c.verified(&token)?;
    let (project, rule) = describe(&c.api, &claim).await?;
    let mut p = match claim.action {
        Action::Explain => {
            let group = claim.group_hash.clone().unwrap_or_default();
            // An ONLY_NEW rule fired on a first occurrence: asked as one, it answers whether it would again.
            let event = Event {
                title: claim.title.clone().unwrap_or_default(),
                group_hash: group,
                is_new: rule.as_ref().is_some_and(|r| r.what == "ONLY_NEW"),
                repetition_id: None,
                timestamp: None,
                user: None,
            };
            let verdicts: Vec<RuleVerdict> = c
                .api
                .explain_event(&claim.project_id, &event)
                .await?
                .into_iter()
                .filter(|v| v.rule_id.eq_ignore_ascii_case(&claim.rule_id))
                .collect();
            let mut p = page(
                &claim,
                project,
                rule,
                "explain",
                if claim.fired.is_some() {
                    "Why this rule fired, as the firing saw it; then what it would do with this error now (read \
                     only: nothing is counted or changed)."
                        .into()
                } else {
                    "What this rule does with this error right now, and why (read only: nothing is counted or \
                     changed)."
                        .into()
                },
            );
            p.verdicts = verdicts;
            return Ok(render(StatusCode::OK, &p));
        }
        Action::Undo => page(
            &claim,
            project,
            rule,
            "confirm",
            "Remove the mute made from an alert's link: alerts of this rule are delivered again.".into(),
        ),
        Action::Ack | Action::Resolve => {
            let alert = claimed_alert(&c.api, &claim).await?;
            let done = match claim.action {
                Action::Ack => !matches!(alert.state, klaxon_core::alert::AlertState::Firing),
                _ => !alert.state.is_open(),
            };
            if done {
                let what = format!("{} Nothing to do.", alert_words(&alert));
                return Ok(render(StatusCode::OK, &page(&claim, project, rule, "used", what)));
            }
            let then = if claim.action == Action::Ack {
                "Acknowledge it when you confirm: its reminders and escalation stop, and its channels are told who \
                 is on it."
            } else {
                "Resolve it when you confirm: every channel that delivered its firing gets a resolved message; a \
                 later firing opens a new alert."
            };
            page(
                &claim,
                project,
                rule,
                "confirm",
                format!("{} {then}", alert_words(&alert)),
            )
        }
        mute => {
            if let Some(at_ms) = c
                .api
                .link_used(&claim.project_id, &key.mute_id_for(&token))
                .await?
            {
                return used(&c, key, &token, &claim, project, rule, at_ms, StatusCode::OK).await;
            }
            let secs = mute.mute_secs().unwrap_or(3600);
            page(
                &claim,
                project,
                rule,
                "confirm",
                format!(
                    "Mute {} for {}, starting when you confirm. Firings are still counted, but not delivered (and not sent later).",
                    mute_scope(&claim),
                    duration_words(secs)
                ),
            )
        }
    };
    p.button = match claim.action {
        Action::Undo => "Remove the mute",
        Action::Ack => "Confirm: acknowledge",
        Action::Resolve => "Confirm: resolve",
        _ => "Confirm: mute",
    };
    p.form_csrf = Some(key.form_token(&token));
    p.form_action = Some(format!("/a/{token}"));
    Ok(render(StatusCode::OK, &p))
}

#[derive(Deserialize)]
pub(super) struct ConfirmForm {
    #[serde(default)]
    csrf: String,
    /// Who confirms (acknowledge and resolve links; optional): kept with the change as "<name> via link".
    #[serde(default)]
    name: String,
}

/// The `by` a link's acknowledge or resolve is recorded with: "<name> via link" when the form names someone,
/// else "link"; a name that would not fit (`by` is at most [`MAX_BY_CHARS`] characters) or holds control
/// characters is refused.
fn link_by(name: &str) -> Result<String, PageError> {
    let name = name.trim();
    if name.is_empty() {
        return Ok(LINK_BY.to_owned());
    }
    check_by(&format!("{name} via {LINK_BY}")).map_err(|_| {
        PageError(
            StatusCode::BAD_REQUEST,
            format!(
                "Your name must be at most {} characters, without line breaks. Nothing was done: go back and \
                 try again.",
                MAX_BY_CHARS - " via link".len()
            ),
        )
    })
}

/// `POST /a/{token}`: performs the link's action after the confirmation page's form.
pub(super) async fn confirm(
    State(c): State<Arc<Console>>,
    Path(token): Path<String>,
    Form(form): Form<ConfirmForm>,
) -> Result<Response, PageError> {
    let (key, claim) = c.verified(&token)?;
    if !key.form_token_ok(&token, &form.csrf) {
        return Err(PageError(
            StatusCode::FORBIDDEN,
            "The confirmation form is missing or wrong: open the link again and press the button on its page."
                .into(),
        ));
    }
    let (project, rule) = describe(&c.api, &claim).await?;
    let by = link_by(&form.name)?;
    match claim.action {
        Action::Explain => Err(PageError(
            StatusCode::BAD_REQUEST,
            "\"Why did this fire?\" changes nothing: open the link to see the answer.".into(),
        )),
        Action::Undo => {
            let mute_id = claim.mute_id.clone().unwrap_or_default();
            let removed = !mute_id.is_empty() && c.api.remove_mute(&claim.project_id, &mute_id).await?;
            let what = if removed {
                "The mute is removed: alerts of this rule are delivered again.".to_owned()
            } else {
                "There was no such mute any more (it ended or was removed already). Nothing was changed."
                    .to_owned()
            };
            tracing::info!(project_id = %claim.project_id, rule_id = %claim.rule_id, removed, "action link: mute undone");
            Ok(render(StatusCode::OK, &page(&claim, project, rule, "done", what)))
        }
        Action::Ack | Action::Resolve => {
            let alert_id = claim.alert_id.clone().unwrap_or_default();
            match c
                .api
                .change_alert(&claim.project_id, &alert_id, hand_action(claim.action), &by)
                .await
            {
                Ok(alert) => {
                    tracing::info!(project_id = %claim.project_id, alert_id = %alert.id, action = claim.action.as_str(), "action link: alert changed");
                    let what = format!("Done. {} Its channels are told.", alert_words(&alert));
                    Ok(render(StatusCode::OK, &page(&claim, project, rule, "done", what)))
                }
                // Used already (or changed by someone else): nothing is done again.
                Err(e) if e.status == StatusCode::CONFLICT => {
                    let alert = claimed_alert(&c.api, &claim).await?;
                    let what = format!("{} Nothing was changed.", alert_words(&alert));
                    Ok(render(StatusCode::CONFLICT, &page(&claim, project, rule, "used", what)))
                }
                Err(e) if e.status == StatusCode::NOT_FOUND => Err(PageError(
                    StatusCode::NOT_FOUND,
                    "The alert of this link no longer exists (resolved alerts are kept 7 days). Nothing was done."
                        .into(),
                )),
                Err(e) => Err(e.into()),
            }
        }
        mute => {
            let secs = mute.mute_secs().unwrap_or(3600);
            let request = MuteRequest {
                rule_id: Some(claim.rule_id.clone()),
                group_hash: claim.group_hash.clone(),
                end: MuteEnd::For(secs),
            };
            let made = match c
                .api
                .add_link_mute(
                    &claim.project_id,
                    &request,
                    key.mute_id_for(&token),
                    claim.expires_s.saturating_mul(1000),
                )
                .await?
            {
                LinkMute::Made(m) => m,
                LinkMute::Used { at_ms } => {
                    tracing::info!(
                        project_id = %claim.project_id,
                        rule_id = %claim.rule_id,
                        action = mute.as_str(),
                        "action link: used already, nothing done"
                    );
                    return used(
                        &c,
                        key,
                        &token,
                        &claim,
                        project,
                        rule,
                        at_ms,
                        StatusCode::CONFLICT,
                    )
                    .await;
                }
            };
            tracing::info!(
                project_id = %claim.project_id,
                rule_id = %claim.rule_id,
                action = mute.as_str(),
                mute_id = %made.mute_id,
                "action link: muted"
            );
            let what = format!(
                "Muted {} until {}. Firings are counted but not delivered until then.",
                mute_scope(&claim),
                ms_human(made.until_ms)
            );
            let mut p = page(&claim, project, rule, "done", what);
            undo_button(key, &claim, &made.mute_id, made.until_ms, &mut p);
            Ok(render(StatusCode::OK, &p))
        }
    }
}

/// The Undo button of the mute `mute_id` of a link, on `p`: a signed action bound to that mute, expiring when
/// the mute does.
fn undo_button(key: &ActionKey, claim: &Claim, mute_id: &str, until_ms: i64, p: &mut ActionPage) {
    let undo = Claim {
        action: Action::Undo,
        mute_id: Some(mute_id.to_owned()),
        expires_s: until_ms.div_euclid(1000).saturating_add(1),
        title: None,
        ..claim.clone()
    };
    if let Ok(undo_token) = key.sign(&undo) {
        p.form_csrf = Some(key.form_token(&undo_token));
        p.form_action = Some(format!("/a/{undo_token}"));
        p.button = "Undo";
    }
}

/// The page of a mute link used already (at `at_ms`): nothing is done again; while the mute it made lasts,
/// its Undo button (a second click on "Confirm" still finds the way back).
#[allow(clippy::too_many_arguments)]
async fn used(
    c: &Console,
    key: &ActionKey,
    token: &str,
    claim: &Claim,
    project: String,
    rule: Option<RuleView>,
    at_ms: i64,
    status: StatusCode,
) -> Result<Response, PageError> {
    let mute_id = key.mute_id_for(token);
    let (_, list) = c.api.active_mutes(&claim.project_id).await?;
    let active = list.mutes.iter().find(|m| m.mute_id == mute_id);
    let mut what = format!(
        "This link was already used, at {} ({}): a link does its action once, so nothing was changed.",
        ms_human(at_ms),
        klaxon_core::notification::rfc3339_ms(at_ms)
    );
    match active {
        Some(m) => what.push_str(&format!(" Its mute lasts until {}.", ms_human(m.until_ms))),
        None => what.push_str(" Its mute has ended or was removed; mute again from the console if needed."),
    }
    let mut p = page(claim, project, rule, "used", what);
    if let Some(m) = active {
        undo_button(key, claim, &m.mute_id, m.until_ms, &mut p);
    }
    Ok(render(status, &p))
}
