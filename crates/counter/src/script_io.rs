//! What every script call shares: how arguments are written (durations, the injected clock) and how reply
//! items are read, with one error for a reply that does not have the shape a script promises.

use redis::Value;

use crate::CounterError;

/// A duration as a script's ms argument: saturating, and at least 1 ms (Redis refuses a zero `PX`).
pub(crate) fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The scripts' `now` argument (`ARGV[1]` everywhere): the injected clock, or '' for the server's `TIME`.
pub(crate) fn now_arg<T: ToString>(now_ms: Option<T>) -> String {
    now_ms.map(|n| n.to_string()).unwrap_or_default()
}

/// An id (a project's) as a part of a key or a set member: at most 64 of its characters, only `[A-Za-z0-9_-]`
/// (a hostile id can neither leave its key's hash slot nor grow the key; ids that clash share one key).
pub(crate) fn key_part(id: &str) -> String {
    id.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .take(64)
        .collect()
}

/// A reply of `script` that does not have the promised shape.
pub(crate) fn bad(script: &'static str, detail: impl Into<String>) -> CounterError {
    CounterError::BadReply {
        script,
        detail: detail.into(),
    }
}

/// An integer item of `script`'s reply.
pub(crate) fn int(v: &Value, script: &'static str) -> Result<i64, CounterError> {
    match v {
        Value::Int(n) => Ok(*n),
        other => Err(bad(script, format!("expected an integer, got {other:?}"))),
    }
}

/// A string item of `script`'s reply (an integer is taken as its decimal text).
pub(crate) fn text(v: &Value, script: &'static str) -> Result<String, CounterError> {
    match v {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Ok(s.clone()),
        Value::Int(n) => Ok(n.to_string()),
        other => Err(bad(script, format!("expected a string, got {other:?}"))),
    }
}

/// A number stored as a hash field or a score (a string, an integer or a double), read leniently: `None`
/// when absent or not a number.
pub(crate) fn stored_number(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()
            .map(|f| f as i64),
        Value::SimpleString(s) => s.trim().parse::<f64>().ok().map(|f| f as i64),
        Value::Double(d) => Some(*d as i64),
        _ => None,
    }
}

/// A string stored as a hash field: `None` when absent.
pub(crate) fn stored_text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_read_as_the_scripts_write_them() {
        assert_eq!(int(&Value::Int(-1), "s").ok(), Some(-1));
        assert!(int(&Value::BulkString(b"1".to_vec()), "s").is_err());
        assert_eq!(text(&Value::Int(7), "s").ok().as_deref(), Some("7"));
        assert_eq!(
            text(&Value::BulkString(b"claimed".to_vec()), "s").ok().as_deref(),
            Some("claimed")
        );
        assert!(text(&Value::Nil, "s").is_err());
        let numbers: &[(Value, Option<i64>)] = &[
            (Value::Int(3), Some(3)),
            (Value::BulkString(b" 42 ".to_vec()), Some(42)),
            (
                Value::BulkString(b"1700000000000.0".to_vec()),
                Some(1_700_000_000_000),
            ),
            (Value::SimpleString("5".into()), Some(5)),
            (Value::Double(2.9), Some(2)),
            (Value::BulkString(b"x".to_vec()), None),
            (Value::Nil, None),
        ];
        for (v, want) in numbers {
            assert_eq!(stored_number(v), *want, "{v:?}");
        }
        assert_eq!(stored_text(&Value::Nil), None);
        assert_eq!(now_arg(None::<i64>), "");
        assert_eq!(now_arg(Some(12_i64)), "12");
        assert_eq!(ms(std::time::Duration::ZERO), 1);
    }
}
