//! [`Field`]: one field of a stored rule document as read — missing, of the expected type, or any other JSON
//! value kept as it was. The raw model ([`crate::rule::RawRule`]) is made of them and each rule kind
//! ([`crate::kind`]) reads its own; this module sits below both.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One field of a stored document as read: absent, of the expected type, or some other JSON value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Field<T> {
    /// Not in the document (never written back).
    #[default]
    #[serde(skip)]
    Missing,
    /// Of the expected type.
    Typed(T),
    /// Any other value, `null` included: validation reports it, writing the document back keeps it.
    Other(Value),
}

impl<T> Field<T> {
    /// True when the document has no such field (serde's `skip_serializing_if`).
    pub fn is_missing(&self) -> bool {
        matches!(self, Field::Missing)
    }

    /// The value when it has the expected type.
    pub fn typed(&self) -> Option<&T> {
        match self {
            Field::Typed(t) => Some(t),
            _ => None,
        }
    }

    /// True when the field is absent or `null`: both mean "not set" in Hawk's documents.
    pub fn is_unset(&self) -> bool {
        matches!(self, Field::Missing | Field::Other(Value::Null))
    }
}

impl<T: Serialize> Field<T> {
    /// The field's JSON value as the document holds it (`null` when missing), for messages.
    pub fn to_json(&self) -> Value {
        match self {
            Field::Missing => Value::Null,
            Field::Typed(t) => serde_json::to_value(t).unwrap_or(Value::Null),
            Field::Other(v) => v.clone(),
        }
    }
}

impl Field<u64> {
    /// The value as a whole number, also when MongoDB wrote it as a double with no fraction or as extended
    /// JSON (`{"$numberLong": "…"}`).
    pub fn whole(&self) -> Option<u64> {
        match self {
            Field::Missing => None,
            Field::Typed(n) => Some(*n),
            Field::Other(v) => whole_number(v),
        }
    }
}

fn whole_number(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                .map(|f| f as u64)
        }),
        // Relaxed extended JSON of an int64 that does not fit a double, or a canonical one.
        Value::Object(m) => m
            .get("$numberLong")
            .or_else(|| m.get("$numberInt"))
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok()),
        _ => None,
    }
}
