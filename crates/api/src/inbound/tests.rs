//! Signature checks against known vectors: Slack's own example ("Verifying requests from Slack") and
//! PagerDuty vectors made with `openssl dgst -sha256 -hmac`.

use std::time::Duration;

use super::*;

/// Slack's documented example request.
const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const SLACK_TS: &str = "1531420618";
const SLACK_BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
const SLACK_SIGNATURE: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

/// `printf '%s' "$PD_BODY" | openssl dgst -sha256 -hmac "$PD_SECRET"`.
const PD_SECRET: &str = "whsec-pd-test-0123456789";
const PD_BODY: &str = r#"{"event":{"id":"01DEN7ATSYVPXJ4ZP6EQ5JHZNH","event_type":"incident.acknowledged"}}"#;
const PD_SIGNATURE: &str = "5da5d527b5d66725bde1e5ff214076e370fb79486a8647cbc00e0d9c75a9dedb";

#[test]
fn slack_signatures_match_slacks_documented_example() {
    let body = SLACK_BODY.as_bytes();
    assert!(slack::signature_matches(
        SLACK_SECRET,
        SLACK_TS,
        SLACK_SIGNATURE,
        body
    ));
    assert_eq!(
        format!(
            "v0={}",
            hmac_hex(SLACK_SECRET, &[b"v0:", SLACK_TS.as_bytes(), b":", body])
        ),
        SLACK_SIGNATURE
    );
    // (secret, timestamp, signature, body): each one changed fails
    let other_body = SLACK_BODY.replace("roadrunner", "coyote");
    let cases: [(&str, &str, &str, &[u8]); 7] = [
        (
            "8f742231b10e8888abcd99yyyzzz85a6",
            SLACK_TS,
            SLACK_SIGNATURE,
            body,
        ),
        (SLACK_SECRET, "1531420619", SLACK_SIGNATURE, body),
        (SLACK_SECRET, SLACK_TS, SLACK_SIGNATURE, other_body.as_bytes()),
        (SLACK_SECRET, SLACK_TS, &SLACK_SIGNATURE[3..], body),
        (
            SLACK_SECRET,
            SLACK_TS,
            "v1=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
            body,
        ),
        (SLACK_SECRET, SLACK_TS, "v0=a2114d57", body),
        (SLACK_SECRET, SLACK_TS, "v0=not hex", body),
    ];
    for (secret, ts, sig, body) in cases {
        assert!(!slack::signature_matches(secret, ts, sig, body), "{ts} {sig}");
    }
}

#[test]
fn pagerduty_signatures_match_any_of_a_rotation() {
    let body = PD_BODY.as_bytes();
    let one = format!("v1={PD_SIGNATURE}");
    assert!(pagerduty::signature_matches(PD_SECRET, &one, body));
    assert_eq!(hmac_hex(PD_SECRET, &[body]), PD_SIGNATURE);
    // during a rotation: several, comma-separated; any match is enough, in any place
    let old = format!("v1={}", hmac_hex("an-old-secret", &[body]));
    for header in [
        format!("{old},{one}"),
        format!("{one}, {old}"),
        format!("{old} , {one}"),
    ] {
        assert!(pagerduty::signature_matches(PD_SECRET, &header, body), "{header}");
    }
    for header in [
        old.clone(),
        PD_SIGNATURE.to_owned(),
        format!("v0={PD_SIGNATURE}"),
        String::new(),
        "v1=".to_owned(),
    ] {
        assert!(
            !pagerduty::signature_matches(PD_SECRET, &header, body),
            "{header}"
        );
    }
    assert!(!pagerduty::signature_matches(PD_SECRET, &one, b"{}"));
}

#[test]
fn freshness_is_a_window_either_way() {
    let w = Duration::from_secs(300);
    let now = 1_700_000_000;
    for (at, ok) in [
        (now, true),
        (now - 300, true),
        (now - 301, false),
        (now + 300, true),
        (now + 301, false),
        (0, false),
    ] {
        assert_eq!(fresh(at, now, w), ok, "{at}");
    }
}

#[test]
fn outcomes_have_their_status_and_labels() {
    for (o, label, status) in [
        (Outcome::Accepted, "accepted", 200),
        (Outcome::Disabled, "disabled", 404),
        (Outcome::Unsigned, "unsigned", 401),
        (Outcome::BadSignature, "bad_signature", 401),
        (Outcome::Stale, "stale", 401),
        (Outcome::Replayed, "replayed", 401),
        (Outcome::UnknownAlert, "unknown_alert", 404),
        (Outcome::ForeignProject, "foreign_project", 403),
        (Outcome::Throttled, "throttled", 429),
    ] {
        assert_eq!(o.as_str(), label);
        assert_eq!(o.status().as_u16(), status, "{label}");
    }
}

#[test]
fn secrets_never_show_in_debug() {
    let s = InboundSecrets {
        pagerduty: Some(Secret::new("PDsecretVALUE")),
        slack: None,
        telegram: Some(Secret::new("TGsecretVALUE")),
    };
    let shown = format!("{s:?}");
    assert!(!shown.contains("secretVALUE"), "{shown}");
    assert!(shown.contains("<set>") && shown.contains("<unset>"), "{shown}");
}

#[test]
fn people_are_named_on_one_bounded_line() {
    assert_eq!(person(Some("ana"), "slack"), "ana");
    assert_eq!(person(Some("  "), "slack"), "slack");
    assert_eq!(person(None, "telegram"), "telegram");
    let long = "x".repeat(500);
    assert!(person(Some(&long), "slack").chars().count() <= crate::rest::alerts::MAX_BY_CHARS);
    assert!(!person(Some("a\nb"), "slack").contains('\n'));
}
