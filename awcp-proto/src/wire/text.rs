//! A message kept as its JSON text, for journal records.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use super::encode::{encode_message_ref, MessageRef};
use super::types::{Dialect, Message};

/// A JSON document kept as its text (checked to be valid JSON) and shared. A journal record
/// holds the INVITE this way: a record is taken and written at every journaled step, and the
/// INVITE in it never changes, so it is encoded once per delegation and then copied into
/// each record as it is, instead of living as a `serde_json::Value` tree (a few KiB per
/// delegation) walked and escaped again at every write.
///
/// Serialized as the JSON it holds (not as a string); deserialized from any JSON value.
/// Two are equal when they hold the same JSON value (key order and spacing aside).
#[derive(Clone, Debug)]
pub struct JsonText(Arc<RawValue>);

impl JsonText {
    /// `msg` encoded in `dialect`.
    pub fn of_message(msg: &Message, dialect: Dialect) -> JsonText {
        JsonText::of_encoded(encode_message_ref(msg.into(), dialect))
    }

    /// A lent message encoded in `dialect`.
    pub(crate) fn of_message_ref(msg: MessageRef<'_>, dialect: Dialect) -> JsonText {
        JsonText::of_encoded(encode_message_ref(msg, dialect))
    }

    fn of_encoded(text: String) -> JsonText {
        // The encoder writes valid JSON, so this never falls back; if it ever did, the record
        // would hold `null` and be reported as malformed when read back, not crash the engine.
        let raw = RawValue::from_string(text).unwrap_or_else(|_| RawValue::NULL.to_owned());
        JsonText(Arc::from(raw))
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for JsonText {
    fn eq(&self, other: &Self) -> bool {
        let value = |t: &JsonText| serde_json::from_str::<serde_json::Value>(t.get()).ok();
        self.get() == other.get() || value(self) == value(other)
    }
}

impl Serialize for JsonText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(d).map(|raw| JsonText(Arc::from(raw)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_as_written_and_read_back_from_text_or_from_a_value() {
        let t = JsonText::of_encoded(r#"{"a":[1,2],"b":"x\"y"}"#.to_owned());
        let rec = serde_json::to_string(&serde_json::json!({ "k": 1 })).unwrap();
        assert_eq!(rec, r#"{"k":1}"#);
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct R {
            invite: JsonText,
        }
        let text = serde_json::to_string(&R { invite: t.clone() }).unwrap();
        assert_eq!(text, r#"{"invite":{"a":[1,2],"b":"x\"y"}}"#);
        let back: R = serde_json::from_str(&text).unwrap();
        assert_eq!(back.invite, t);
        // Records are read through a Value first (for their migrations).
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let back: R = serde_json::from_value(v).unwrap();
        assert_eq!(back.invite.get(), r#"{"a":[1,2],"b":"x\"y"}"#);
        // Equal as JSON values, whatever the order of the keys.
        let reordered = JsonText::of_encoded(r#"{"b":"x\"y", "a":[1,2]}"#.to_owned());
        assert_eq!(reordered, t);
        assert_ne!(JsonText::of_encoded(r#"{"a":[2,1]}"#.to_owned()), t);
        // Not JSON: never kept.
        assert_eq!(JsonText::of_encoded("{".to_owned()).get(), "null");
    }
}
