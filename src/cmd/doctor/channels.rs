//! The lines of the channels' own settings: **telegram** (a bot token is set), **slack** (whether a Web API bot token
//! is set), **pagerduty** (the Events API URL).

use super::{check, endpoint, Check, Status};

/// Whether `KLAXON_SLACK_BOT_TOKEN` is set (never shown): without it, Slack channels whose endpoint is a
/// channel id cannot deliver; incoming-webhook URLs need no token, so its absence is no warning.
pub(super) fn slack_check() -> Check {
    let token = std::env::var("KLAXON_SLACK_BOT_TOKEN").is_ok_and(|t| !t.trim().is_empty());
    let said = if token {
        "bot token set (not shown): channel ids (C…) go through the Web API"
    } else {
        "no KLAXON_SLACK_BOT_TOKEN: incoming-webhook URLs only (a channel-id endpoint cannot deliver)"
    };
    check(Status::Ok, "slack", said)
}

pub(super) fn telegram_check(api: &str) -> Check {
    let token = std::env::var("KLAXON_TELEGRAM_BOT_TOKEN").is_ok_and(|t| !t.trim().is_empty());
    let scheme = api.split_once("://").map_or("https", |(s, _)| s);
    let api = format!("{scheme}://{}", endpoint(api));
    if token {
        check(
            Status::Ok,
            "telegram",
            format!("bot token set (not shown), API {api}"),
        )
    } else {
        check(
            Status::Warn,
            "telegram",
            "KLAXON_TELEGRAM_BOT_TOKEN is not set: telegram channels cannot deliver",
        )
    }
}

/// `--pagerduty-api` must be an http(s) URL with a host (the senders refuse to start otherwise); shown as the
/// senders post to it (its path kept: `<api>/v2/enqueue`), without credentials or query. Routing keys are per
/// rule: `klaxon rules check` judges them.
pub(super) fn pagerduty_check(api: &str) -> Check {
    match url::Url::parse(api.trim()) {
        Ok(mut u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            check(
                Status::Ok,
                "pagerduty",
                format!("Events API {}/v2/enqueue", u.as_str().trim_end_matches('/')),
            )
        }
        _ => check(
            Status::Fail,
            "pagerduty",
            "--pagerduty-api (KLAXON_PAGERDUTY_API) is not an http(s) URL with a host: the senders refuse to start",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pagerduty_api_is_checked() {
        let ok = pagerduty_check("https://user:pw@events.pagerduty.com");
        assert!(
            ok.status == Status::Ok && !ok.detail.contains("pw"),
            "{}",
            ok.detail
        );
        assert_eq!(ok.detail, "Events API https://events.pagerduty.com/v2/enqueue");
        // a base with a path (a relay, a test stub) keeps it, as the senders post to it
        let relay = pagerduty_check("http://u:pw@127.0.0.1:8080/pd/?token=x");
        assert_eq!(relay.detail, "Events API http://127.0.0.1:8080/pd/v2/enqueue");
        for bad in ["events.pagerduty.com", "ftp://x", ""] {
            assert!(pagerduty_check(bad).status == Status::Fail, "{bad}");
        }
    }
}
