//! Mute requests: `{"ruleId"?, "groupHash"?, "until" (RFC 3339) | "for" (seconds)}`, validated into a
//! [`Mute`] on the Redis clock. Shared by the API and `klaxon mute`.

use klaxon_core::mute::Mute;
use serde_json::Value;

/// Longest mute accepted (a year): a mute is for quiet hours and incidents, not for deleting a rule.
pub const MAX_MUTE_MS: i64 = 366 * 24 * 3600 * 1000;

/// Parses an RFC 3339 time into unix ms.
pub fn parse_rfc3339_ms(s: &str) -> Result<i64, String> {
    time::OffsetDateTime::parse(s.trim(), &time::format_description::well_known::Rfc3339)
        .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
        .map_err(|e| format!("`until` is not an RFC 3339 time ({e})"))
}

/// Validates a mute request made at `now_ms`, giving it `mute_id`.
pub fn mute_from_request(body: &Value, now_ms: i64, mute_id: String) -> Result<Mute, String> {
    let obj = body
        .as_object()
        .ok_or("the body must be an object {\"ruleId\"?, \"groupHash\"?, \"until\" | \"for\"}")?;
    let text = |field: &str| -> Result<Option<String>, String> {
        match obj.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() && s.len() <= 256 => Ok(Some(s.trim().to_owned())),
            Some(_) => Err(format!(
                "`{field}` must be a non-empty string of at most 256 bytes"
            )),
        }
    };
    let rule_id = text("ruleId")?;
    if let Some(r) = &rule_id {
        if !klaxon_core::event::is_object_id(r) {
            return Err("`ruleId` must be a 24-hex-digit ObjectId".into());
        }
    }
    let group_hash = text("groupHash")?;
    let until_ms = match (obj.get("until"), obj.get("for")) {
        (Some(Value::String(u)), None) => parse_rfc3339_ms(u)?,
        (None, Some(f)) => {
            let secs = f
                .as_u64()
                .filter(|s| *s >= 1)
                .ok_or("`for` must be a whole number of seconds ≥ 1")?;
            now_ms.saturating_add((secs.min(i64::MAX as u64 / 1000) as i64).saturating_mul(1000))
        }
        (Some(_), Some(_)) => return Err("give `until` or `for`, not both".into()),
        (Some(_), None) => return Err("`until` must be an RFC 3339 time string".into()),
        (None, None) => return Err("give `until` (RFC 3339) or `for` (seconds)".into()),
    };
    if until_ms <= now_ms {
        return Err("`until` is in the past".into());
    }
    if until_ms - now_ms > MAX_MUTE_MS {
        return Err("a mute may last at most 366 days".into());
    }
    Ok(Mute {
        mute_id,
        rule_id: rule_id.map(|r| r.to_ascii_lowercase()),
        group_hash,
        until_ms,
    })
}

/// The API's JSON form of a mute.
pub fn to_json(m: &Mute) -> Value {
    let mut v = serde_json::json!({
        "muteId": m.mute_id,
        "until": klaxon_core::notification::rfc3339_ms(m.until_ms),
    });
    if let Some(r) = &m.rule_id {
        v["ruleId"] = Value::String(r.clone());
    }
    if let Some(g) = &m.group_hash {
        v["groupHash"] = Value::String(g.clone());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests() {
        let now = 1_880_000_000_000;
        let ok = mute_from_request(&json!({"for": 60}), now, "m".into()).expect("for");
        assert_eq!(ok.until_ms, now + 60_000);
        let ok = mute_from_request(
            &json!({"until": "2030-01-01T00:00:00Z", "groupHash": "g", "ruleId": "5E3EEF0679FA3700A0198A49"}),
            now,
            "m".into(),
        )
        .expect("until");
        assert_eq!(ok.until_ms, 1_893_456_000_000);
        assert_eq!(ok.rule_id.as_deref(), Some("5e3eef0679fa3700a0198a49"));
        for bad in [
            json!({}),
            json!({"for": 0}),
            json!({"for": "60"}),
            json!({"for": 60, "until": "2030-01-01T00:00:00Z"}),
            json!({"until": "2020-01-01T00:00:00Z"}),
            json!({"until": "tomorrow"}),
            json!({"for": 60, "ruleId": "nope"}),
            json!({"for": 400 * 86400}),
            json!([]),
        ] {
            assert!(mute_from_request(&bad, now, "m".into()).is_err(), "{bad}");
        }
    }
}
