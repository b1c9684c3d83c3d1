//! Incoming events: Hawk's notifier task, parsed and validated once.

use serde::Deserialize;

/// Bodies larger than this are refused as invalid (Hawk's notifier tasks are well under 1 KiB; a title is
/// capped by the grouper). Keeping a bound protects the worker from one poisoned message.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// Why a message on the events queue cannot be used. The text goes to the `x-klaxon-error` header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidEvent(pub String);

/// One error event as Hawk's grouper hands it to the notifier.
#[derive(Debug, Clone, PartialEq)]
pub struct EventTask {
    /// The project, a 24-hex MongoDB ObjectId.
    pub project_id: String,
    /// The event itself.
    pub event: Event,
}

/// The event part of a notifier task.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The error title (message) that rules filter on.
    pub title: String,
    /// The group this event belongs to; counters are kept per (rule, group).
    pub group_hash: String,
    /// True for the first occurrence of the group.
    pub is_new: bool,
    /// Hawk's repetition id, if any.
    pub repetition_id: Option<String>,
    /// When the event happened, unix seconds, if the producer said.
    pub timestamp: Option<f64>,
    /// The affected user's id (`event.user.id`, or `event.user` when it is a string), if the producer said.
    /// Only `uniqueUsers` rules read it; events without it are not counted by them.
    pub user: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireTask {
    project_id: Option<serde_json::Value>,
    event: Option<WireEvent>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireEvent {
    title: Option<serde_json::Value>,
    group_hash: Option<serde_json::Value>,
    is_new: Option<serde_json::Value>,
    repetition_id: Option<serde_json::Value>,
    timestamp: Option<serde_json::Value>,
    user: Option<serde_json::Value>,
}

fn required_string(value: Option<serde_json::Value>, field: &str) -> Result<String, InvalidEvent> {
    match value {
        None | Some(serde_json::Value::Null) => {
            Err(InvalidEvent(format!("missing required field `{field}`")))
        }
        Some(serde_json::Value::String(s)) if s.is_empty() => {
            Err(InvalidEvent(format!("field `{field}` must not be empty")))
        }
        Some(serde_json::Value::String(s)) => Ok(s),
        Some(other) => Err(InvalidEvent(format!(
            "field `{field}` must be a string, got {}",
            json_type(&other)
        ))),
    }
}

/// An optional field: absent or `null` is `None`; a value `take` accepts is what it makes of it; anything else
/// is refused with "field `<field>` must be <want>, got <its type>".
fn optional<T>(
    value: Option<serde_json::Value>,
    field: &str,
    want: &str,
    take: impl FnOnce(serde_json::Value) -> Result<Option<T>, serde_json::Value>,
) -> Result<Option<T>, InvalidEvent> {
    match value {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => take(v).map_err(|other| {
            InvalidEvent(format!(
                "field `{field}` must be {want}, got {}",
                json_type(&other)
            ))
        }),
    }
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Longest user id kept, in bytes; a longer one is cut (at a character boundary). The counter stores ids
/// longer than a few dozen bytes as digests anyway: this only bounds what a worker holds.
pub const MAX_USER_ID_BYTES: usize = 512;

/// Reads `event.user` tolerantly: Hawk's object with an `id` (a string, or a number written as one), or a
/// plain string. Anything else (no id, an empty one, another type) means "no user": a `uniqueUsers` rule
/// does not count the event, and every other rule still sees it (the field is optional, so a shape we do not
/// know must not make the event invalid).
fn user_of(value: Option<serde_json::Value>) -> Option<String> {
    let id = match value? {
        serde_json::Value::String(s) => s,
        serde_json::Value::Object(mut m) => match m.remove("id")? {
            serde_json::Value::String(s) => s,
            serde_json::Value::Number(n) => n.to_string(),
            _ => return None,
        },
        _ => return None,
    };
    let id = id.trim();
    if id.is_empty() {
        return None;
    }
    let mut end = id.len().min(MAX_USER_ID_BYTES);
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    Some(id[..end].to_owned())
}

/// True when `s` is a 24-character hexadecimal MongoDB ObjectId.
pub fn is_object_id(s: &str) -> bool {
    s.len() == 24 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

impl EventTask {
    /// Parses and validates one message body. Unknown fields are ignored. The reason of a refusal is one line of
    /// at most [`crate::text::MAX_REASON_BYTES`] bytes, whatever the body holds.
    pub fn parse(body: &[u8]) -> Result<Self, InvalidEvent> {
        Self::parse_unbounded(body).map_err(|e| InvalidEvent(crate::text::reason(&e.0)))
    }

    fn parse_unbounded(body: &[u8]) -> Result<Self, InvalidEvent> {
        if body.len() > MAX_BODY_BYTES {
            return Err(InvalidEvent(format!(
                "body is {} bytes, over the {MAX_BODY_BYTES}-byte limit",
                body.len()
            )));
        }
        let wire: WireTask = serde_json::from_slice(body).map_err(|e| {
            if std::str::from_utf8(body).is_err() {
                InvalidEvent("body is not valid UTF-8 JSON".to_owned())
            } else {
                // serde's message can echo a whole (200 KB) string of the body: keep a short prefix of it
                InvalidEvent(format!(
                    "body is not a valid notifier task: {}",
                    crate::text::one_line(&e.to_string(), 160)
                ))
            }
        })?;
        let project_id = required_string(wire.project_id, "projectId")?;
        if !is_object_id(&project_id) {
            return Err(InvalidEvent(
                "field `projectId` must be a 24-hex-digit ObjectId".to_owned(),
            ));
        }
        let ev = wire
            .event
            .ok_or_else(|| InvalidEvent("missing required field `event`".to_owned()))?;
        Ok(EventTask {
            project_id,
            event: Event::from_wire(ev)?,
        })
    }
}

impl Event {
    /// The `event` object of a notifier task on its own (explain's request body), validated exactly as
    /// [`EventTask::parse`] validates it on the queue; the reason of a refusal is bounded the same way.
    pub fn from_json(event: serde_json::Value) -> Result<Self, InvalidEvent> {
        let wire: WireEvent = serde_json::from_value(event).map_err(|e| {
            InvalidEvent(crate::text::reason(&format!(
                "body is not a valid notifier task: {}",
                crate::text::one_line(&e.to_string(), 160)
            )))
        })?;
        Self::from_wire(wire).map_err(|e| InvalidEvent(crate::text::reason(&e.0)))
    }

    /// An event given field by field (explain's form and flags), validated as [`Event::from_json`] validates
    /// `{"title", "groupHash", "isNew", "user"?}`.
    pub fn from_fields(
        title: &str,
        group_hash: &str,
        is_new: bool,
        user: Option<&str>,
    ) -> Result<Self, InvalidEvent> {
        use serde_json::Value as Json;
        let wire = WireEvent {
            title: Some(Json::String(title.to_owned())),
            group_hash: Some(Json::String(group_hash.to_owned())),
            is_new: Some(Json::Bool(is_new)),
            repetition_id: None,
            timestamp: None,
            user: user.map(|u| Json::String(u.to_owned())),
        };
        Self::from_wire(wire).map_err(|e| InvalidEvent(crate::text::reason(&e.0)))
    }

    fn from_wire(ev: WireEvent) -> Result<Self, InvalidEvent> {
        let title = required_string(ev.title, "event.title")?;
        let group_hash = required_string(ev.group_hash, "event.groupHash")?;
        use serde_json::Value as Json;
        let is_new = optional(ev.is_new, "event.isNew", "a boolean", |v| match v {
            Json::Bool(b) => Ok(Some(b)),
            other => Err(other),
        })?
        .unwrap_or(false);
        let repetition_id = optional(
            ev.repetition_id,
            "event.repetitionId",
            "a string or null",
            |v| match v {
                Json::String(s) => Ok(Some(s)),
                other => Err(other),
            },
        )?;
        let timestamp = optional(ev.timestamp, "event.timestamp", "unix seconds", |v| match v {
            Json::Number(n) => Ok(n.as_f64()),
            other => Err(other),
        })?;
        Ok(Event {
            title,
            group_hash,
            is_new,
            repetition_id,
            timestamp,
            user: user_of(ev.user),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "5e3eef0679fa3700a0198a49";

    #[test]
    fn poison_bodies_give_short_one_line_reasons() {
        let huge = "A".repeat(200 * 1024);
        let bodies = [
            serde_json::to_vec(&huge).expect("json"),
            serde_json::to_vec(&serde_json::json!({"projectId": P, "event": huge})).expect("json"),
            serde_json::to_vec(&serde_json::json!({"projectId": huge, "event": {}})).expect("json"),
            serde_json::to_vec(
                &serde_json::json!({"projectId": P, "event": {"title": 1, "groupHash": huge}}),
            )
            .expect("json"),
        ];
        for body in bodies {
            let reason = EventTask::parse(&body).expect_err("poison").0;
            assert!(reason.len() <= 200, "{} bytes: {reason}", reason.len());
            assert!(!reason.contains('\n'));
        }
    }

    #[test]
    fn parses_hawk_task() {
        let body = format!(
            r#"{{"projectId":"{P}","event":{{"title":"TypeError: x","groupHash":"11da","isNew":true,"repetitionId":null,"extra":1}},"more":2}}"#
        );
        let t = EventTask::parse(body.as_bytes()).expect("valid");
        assert_eq!(t.project_id, P);
        assert_eq!(t.event.title, "TypeError: x");
        assert_eq!(t.event.group_hash, "11da");
        assert!(t.event.is_new);
        assert_eq!(t.event.repetition_id, None);
    }

    #[test]
    fn an_event_alone_is_validated_as_on_the_queue() {
        let cases = [
            serde_json::json!({"title": "TypeError: x", "groupHash": "11da", "isNew": true, "user": {"id": "u1"}}),
            serde_json::json!({"title": "T", "groupHash": "g"}),
            serde_json::json!({"title": "", "groupHash": "g"}),
            serde_json::json!({"title": "T", "groupHash": 7}),
            serde_json::json!({"title": "T", "groupHash": "g", "isNew": "yes"}),
            serde_json::json!({"groupHash": "g"}),
        ];
        for event in cases {
            let task = serde_json::json!({"projectId": P, "event": event}).to_string();
            let queued = EventTask::parse(task.as_bytes()).map(|t| t.event);
            assert_eq!(Event::from_json(event.clone()), queued, "{event}");
        }
        let by_fields = Event::from_fields("TypeError: x", "11da", true, Some(" u1 ")).expect("valid");
        assert_eq!(
            (
                by_fields.title.as_str(),
                by_fields.group_hash.as_str(),
                by_fields.is_new
            ),
            ("TypeError: x", "11da", true)
        );
        assert_eq!(by_fields.user.as_deref(), Some("u1"));
        assert_eq!(
            Event::from_fields("T", "g", false, Some("  "))
                .expect("valid")
                .user,
            None
        );
        assert_eq!(
            Event::from_fields("", "g", false, None),
            Err(InvalidEvent("field `event.title` must not be empty".into()))
        );
        assert_eq!(
            Event::from_fields("T", "", false, None),
            Err(InvalidEvent("field `event.groupHash` must not be empty".into()))
        );
    }

    #[test]
    fn rejects_bad_shapes_with_reasons() {
        let cases: &[(&[u8], &str)] = &[
            (b"not json", "not a valid notifier task"),
            (b"\xff\xfe", "not valid UTF-8"),
            (br#"{"event":{"title":"t","groupHash":"g"}}"#, "`projectId`"),
            (br#"{"projectId":"5e3eef0679fa3700a0198a49"}"#, "`event`"),
            (br#"{"projectId":"5e3eef0679fa3700a0198a49","event":{"groupHash":"g"}}"#, "`event.title`"),
            (br#"{"projectId":"5e3eef0679fa3700a0198a49","event":{"title":"t"}}"#, "`event.groupHash`"),
            (br#"{"projectId":42,"event":{"title":"t","groupHash":"g"}}"#, "must be a string"),
            (br#"{"projectId":"nope","event":{"title":"t","groupHash":"g"}}"#, "ObjectId"),
            (
                br#"{"projectId":"5e3eef0679fa3700a0198a49","event":{"title":"t","groupHash":"g","isNew":"yes"}}"#,
                "field `event.isNew` must be a boolean, got a string",
            ),
            (
                br#"{"projectId":"5e3eef0679fa3700a0198a49","event":{"title":"t","groupHash":"g","repetitionId":5}}"#,
                "field `event.repetitionId` must be a string or null, got a number",
            ),
            (
                br#"{"projectId":"5e3eef0679fa3700a0198a49","event":{"title":"t","groupHash":"g","timestamp":"now"}}"#,
                "field `event.timestamp` must be unix seconds, got a string",
            ),
            (br#"[1,2]"#, "not a valid notifier task"),
        ];
        for (body, want) in cases {
            let err = EventTask::parse(body).expect_err("must be invalid");
            assert!(err.0.contains(want), "{err} should mention {want}");
        }
    }

    #[test]
    fn reads_the_user_in_every_shape_and_never_rejects_for_it() {
        let cases = [
            (r#""user":{"id":"u-1","name":"Ann","photo":null}"#, Some("u-1")),
            (r#""user":"u-2""#, Some("u-2")),
            (r#""user":{"id":42}"#, Some("42")),
            (r#""user":{"id":"  "}"#, None),
            (r#""user":{"name":"no id"}"#, None),
            (r#""user":{"id":["x"]}"#, None),
            (r#""user":null"#, None),
            (r#""user":7"#, None),
            (r#""user":"""#, None),
            (r#""other":1"#, None),
        ];
        for (field, want) in cases {
            let body = format!(r#"{{"projectId":"{P}","event":{{"title":"t","groupHash":"g",{field}}}}}"#);
            let t = EventTask::parse(body.as_bytes()).unwrap_or_else(|e| panic!("{field}: {e}"));
            assert_eq!(t.event.user.as_deref(), want, "{field}");
        }
        let body = format!(
            r#"{{"projectId":"{P}","event":{{"title":"t","groupHash":"g","user":"{}"}}}}"#,
            "é".repeat(400)
        );
        let user = EventTask::parse(body.as_bytes())
            .expect("valid")
            .event
            .user
            .expect("user");
        assert_eq!(user.len(), MAX_USER_ID_BYTES, "cut at a character boundary");
    }

    #[test]
    fn rejects_oversized_bodies() {
        let body = vec![b' '; MAX_BODY_BYTES + 1];
        assert!(EventTask::parse(&body).expect_err("too big").0.contains("limit"));
    }
}
