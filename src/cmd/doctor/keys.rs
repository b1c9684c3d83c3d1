//! The lines of the keys the processes read (never shown): **action links**, **webhook signing**, **api token**.

use super::{check, Check, Status};

/// Action links need `--public-url` and `KLAXON_ACTION_KEY` together (README, "Action links"): one without the
/// other is a warning (no links are rendered), a bad URL or a short key a failure (the processes refuse to
/// start). Nothing is said when neither is set.
pub(super) fn action_links_check(public_url: Option<&str>) -> Option<Check> {
    let url = match public_url.map(str::trim).filter(|u| !u.is_empty()) {
        None => None,
        Some(u) => match crate::cli::public_url(u) {
            Ok(url) => Some(url),
            Err(e) => return Some(check(Status::Fail, "action links", format!("--public-url: {e}"))),
        },
    };
    match crate::cli::action_setup(url.as_ref()) {
        Err(e) => Some(check(Status::Fail, "action links", e.to_string())),
        Ok(crate::cli::ActionSetup::Off) => None,
        Ok(crate::cli::ActionSetup::Half(why)) => Some(check(Status::Warn, "action links", why)),
        Ok(crate::cli::ActionSetup::On(_, url)) => Some(check(
            Status::Ok,
            "action links",
            format!("messages carry signed links to {}/a/…", url.as_str()),
        )),
    }
}

/// The webhook keys (`KLAXON_WEBHOOK_SECRET`, `…_PREVIOUS`, `KLAXON_WEBHOOK_LEGACY_SECRET`), never shown: a
/// short master key (or another setting the processes refuse) FAILs, a short previous key during a rotation and
/// the deprecated `X-Klaxon-Signature` are warnings. Nothing is said when no key is set (webhooks are unsigned).
pub(super) fn webhook_keys_check() -> Option<Check> {
    const NAME: &str = "webhook signing";
    let keys = match crate::cli::webhook_keys() {
        Err(e) => return Some(check(Status::Fail, NAME, e.to_string())),
        Ok(None) => return None,
        Ok(Some(keys)) => keys,
    };
    let min = klaxon_channels::webhook::MIN_MASTER_KEY_LEN;
    let mut warnings = Vec::new();
    if keys.previous_len().is_some_and(|len| len < min) {
        warnings.push(format!(
            "KLAXON_WEBHOOK_SECRET_PREVIOUS is shorter than {min} bytes: finish the rotation (unset it) soon, \
             tenants' secrets derived from it can be attacked offline"
        ));
    }
    if keys.legacy() {
        warnings.push(
            "KLAXON_WEBHOOK_LEGACY_SECRET is set: deliveries carry the deprecated X-Klaxon-Signature; unset it once \
             receivers verify webhook-signature"
                .to_owned(),
        );
    }
    Some(if warnings.is_empty() {
        check(
            Status::Ok,
            NAME,
            format!(
                "master key set (not shown, at least {min} bytes){}",
                if keys.rotating() {
                    ", rotating from a previous key"
                } else {
                    ""
                }
            ),
        )
    } else {
        check(Status::Warn, NAME, warnings.join("; "))
    })
}

/// `KLAXON_API_TOKEN`, never shown: shorter than 32 bytes is a warning (the wrong-token throttle slows guessing
/// per address; only the token's length makes it hopeless from many). Nothing is said when it is not set.
pub(super) fn api_token_check() -> Option<Check> {
    let token = std::env::var("KLAXON_API_TOKEN")
        .ok()
        .filter(|t| !t.trim().is_empty())?;
    Some(match crate::cli::short_api_token(&token) {
        Some(problem) => check(Status::Warn, "api token", problem),
        None => check(
            Status::Ok,
            "api token",
            format!("set (not shown, at least {} bytes)", klaxon_api::MIN_TOKEN_LEN),
        ),
    })
}
