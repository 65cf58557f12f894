//! A JSON tree that borrows from the bytes it was parsed from: what the decoders read fields
//! out of.
//!
//! [`serde_json::Value`] owns every key and string (one allocation each) and keeps objects in
//! `BTreeMap`s; building and dropping those trees was the largest part of an engine lifecycle's
//! CPU time. Here strings without escapes borrow the input, objects are short vectors (a
//! message has a dozen keys; lookup is a linear scan), and the last of duplicate keys wins, as
//! in `Value`. Nesting is bounded by `serde_json`'s recursion limit (128), so hostile input can
//! neither overflow the stack here nor when the tree is dropped.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// One JSON value, borrowing its strings from the input where it can.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json<'a> {
    Null,
    Bool(bool),
    Number(Number),
    Str(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    Object(Vec<(Cow<'a, str>, Json<'a>)>),
}

/// `null`, for "absent" lookups that need a reference.
pub(crate) static NULL: Json<'static> = Json::Null;

impl<'a> Json<'a> {
    /// Parses JSON text.
    pub(crate) fn parse(bytes: &'a [u8]) -> Result<Json<'a>, serde_json::Error> {
        // UTF-8 checked once for the whole text, then the parser of `super::parse`; invalid
        // UTF-8 gets `serde_json`'s error, with its position.
        match std::str::from_utf8(bytes) {
            Ok(text) => match super::parse::parse(text) {
                Some(tree) => Ok(tree),
                // Refused: `serde_json` says why (with line and column), or, were it ever to
                // accept what the fast parser refused, its tree stands.
                None => serde_json::from_str(text),
            },
            Err(_) => serde_json::from_slice(bytes),
        }
    }

    /// The value under `key` of an object (the last one if the key repeats); `None` for a
    /// missing key or a non-object.
    pub(crate) fn get(&self, key: &str) -> Option<&Json<'a>> {
        match self {
            Json::Object(fields) => fields.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            Json::Null | Json::Bool(_) | Json::Number(_) | Json::Str(_) | Json::Array(_) => None,
        }
    }

    /// The string, if this is one.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            Json::Null | Json::Bool(_) | Json::Number(_) | Json::Array(_) | Json::Object(_) => None,
        }
    }

    /// The boolean, if this is one.
    pub(crate) fn as_bool(&self) -> Option<bool> {
        match self {
            Json::Bool(b) => Some(*b),
            Json::Null | Json::Number(_) | Json::Str(_) | Json::Array(_) | Json::Object(_) => None,
        }
    }

    /// A borrowed view of an owned [`Value`] (for the public decoders that take one).
    pub(crate) fn from_value(v: &'a Value) -> Json<'a> {
        match v {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(*b),
            Value::Number(n) => Json::Number(n.clone()),
            Value::String(s) => Json::Str(Cow::Borrowed(s)),
            Value::Array(a) => Json::Array(a.iter().map(Json::from_value).collect()),
            Value::Object(m) => Json::Object(
                m.iter()
                    .map(|(k, v)| (Cow::Borrowed(k.as_str()), Json::from_value(v)))
                    .collect(),
            ),
        }
    }

    /// An owned [`Value`] of the same JSON (for free-form fields such as snapshot metadata).
    pub(crate) fn to_value(&self) -> Value {
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(n) => Value::Number(n.clone()),
            Json::Str(s) => Value::String(s.clone().into_owned()),
            Json::Array(a) => Value::Array(a.iter().map(Json::to_value).collect()),
            Json::Object(fields) => {
                let mut m = Map::new();
                for (k, v) in fields {
                    m.insert(k.clone().into_owned(), v.to_value());
                }
                Value::Object(m)
            }
        }
    }
}

impl fmt::Display for Json<'_> {
    /// Compact JSON text (for error messages quoting a peer's body).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.to_value(), f)
    }
}

impl<'de> Deserialize<'de> for Json<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Json<'de>, E> {
        Ok(Json::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Json<'de>, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Json<'de>, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Json<'de>, E> {
        // As `Value` does: JSON text never holds a non-finite number, so this is only reached
        // by other deserializers.
        Ok(Number::from_f64(n).map_or(Json::Null, Json::Number))
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Json<'de>, E> {
        Ok(Json::Str(Cow::Borrowed(s)))
    }

    fn visit_str<E>(self, s: &str) -> Result<Json<'de>, E> {
        Ok(Json::Str(Cow::Owned(s.to_owned())))
    }

    fn visit_string<E>(self, s: String) -> Result<Json<'de>, E> {
        Ok(Json::Str(Cow::Owned(s)))
    }

    fn visit_none<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }

    fn visit_unit<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Json<'de>, D::Error> {
        Json::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json<'de>, A::Error> {
        let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8).min(64));
        while let Some(Key(k)) = map.next_key()? {
            let v = map.next_value()?;
            fields.push((k, v));
        }
        Ok(Json::Object(fields))
    }
}

/// An object key, borrowed when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(s)))
    }

    fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(s.to_owned())))
    }

    fn visit_string<E>(self, s: String) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(s)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn strings_borrow_unless_escaped_and_the_last_duplicate_key_wins() {
        let text = br#"{"a":"plain","b":"esc\"aped","a":"again","n":[1,-2,1.5,null,true]}"#;
        let j = Json::parse(text).unwrap();
        assert!(matches!(j.get("b"), Some(Json::Str(Cow::Owned(s))) if s == "esc\"aped"));
        assert!(matches!(
            j.get("a"),
            Some(Json::Str(Cow::Borrowed("again")))
        ));
        let v: Value = serde_json::from_slice(text).unwrap();
        assert_eq!(j.to_value(), v);
        assert_eq!(Json::from_value(&v).to_value(), v);
        assert_eq!(j.get("missing"), None);
    }

    #[test]
    fn hostile_nesting_is_refused_not_overflowed() {
        let deep = "[".repeat(100_000);
        assert!(Json::parse(deep.as_bytes()).is_err());
        let deep_obj = "{\"a\":".repeat(100_000);
        assert!(Json::parse(deep_obj.as_bytes()).is_err());
    }
}
