//! The data objects both dialects share unchanged: [`TaskState`], [`TaskStatus`],
//! [`DataItem`], [`Product`], plus [`SenderRole`] and [`Mentions`].
//!
//! Decoding is lenient (null is absent, unknown fields are ignored, state names in any case);
//! encoding omits absent fields.

use core::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::time::Timestamp;

/// A JSON object (`metadata`, `commandParams`).
pub type JsonObject = Map<String, Value>;

/// The eight task states (§4.2); four are terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TaskState {
    /// The partner took the task; work has not begun.
    Accepted,
    /// The partner is working.
    Working,
    /// The partner waits for more input from the leader.
    AwaitingInput,
    /// The partner delivered products and waits for the leader to complete the task.
    AwaitingCompletion,
    /// Done (terminal).
    Completed,
    /// Canceled by the leader or a timeout (terminal).
    Canceled,
    /// Failed inside the partner (terminal).
    Failed,
    /// Refused at start (terminal).
    Rejected,
}

impl TaskState {
    /// Every state, in the spec's order.
    pub const ALL: [TaskState; 8] = [
        TaskState::Accepted,
        TaskState::Working,
        TaskState::AwaitingInput,
        TaskState::AwaitingCompletion,
        TaskState::Completed,
        TaskState::Canceled,
        TaskState::Failed,
        TaskState::Rejected,
    ];

    /// The wire string (`awaiting-input`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Accepted => "accepted",
            TaskState::Working => "working",
            TaskState::AwaitingInput => "awaiting-input",
            TaskState::AwaitingCompletion => "awaiting-completion",
            TaskState::Completed => "completed",
            TaskState::Canceled => "canceled",
            TaskState::Failed => "failed",
            TaskState::Rejected => "rejected",
        }
    }

    /// Parses a state leniently: any case, `-`/`_` or none between words (the seed's own
    /// comments write `AwaitingCompletion`), and `cancelled`.
    pub fn parse(s: &str) -> Option<TaskState> {
        let mut norm = [0u8; 24];
        let mut n = 0;
        for c in s.bytes().filter(|c| !matches!(c, b'-' | b'_' | b' ')) {
            *norm.get_mut(n)? = c.to_ascii_lowercase();
            n += 1;
        }
        Some(match &norm[..n] {
            b"accepted" => TaskState::Accepted,
            b"working" => TaskState::Working,
            b"awaitinginput" => TaskState::AwaitingInput,
            b"awaitingcompletion" => TaskState::AwaitingCompletion,
            b"completed" => TaskState::Completed,
            b"canceled" | b"cancelled" => TaskState::Canceled,
            b"failed" => TaskState::Failed,
            b"rejected" => TaskState::Rejected,
            _ => return None,
        })
    }

    /// Completed, canceled, failed or rejected.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Canceled | TaskState::Failed | TaskState::Rejected
        )
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for TaskState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for TaskState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        TaskState::parse(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown task state {s:?}")))
    }
}

/// Who sent a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SenderRole {
    /// The agent that issues tasks.
    Leader,
    /// The agent that works on them.
    Partner,
}

impl SenderRole {
    /// `leader` or `partner` in any case.
    pub fn parse(s: &str) -> Option<SenderRole> {
        if s.eq_ignore_ascii_case("leader") {
            Some(SenderRole::Leader)
        } else if s.eq_ignore_ascii_case("partner") {
            Some(SenderRole::Partner)
        } else {
            None
        }
    }

    /// `leader` or `partner`.
    pub fn as_str(self) -> &'static str {
        match self {
            SenderRole::Leader => "leader",
            SenderRole::Partner => "partner",
        }
    }
}

impl Serialize for SenderRole {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SenderRole {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        SenderRole::parse(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown senderRole {s:?}")))
    }
}

/// `mentions`: who in a group should act (v01.00: a list; v02: `"all"` or a list).
/// Absent, null and `[]` all mean "nobody mentioned" in the spec; the group layer reads them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mentions {
    /// `"all"`.
    All,
    /// A list of AICs.
    List(Vec<String>),
}

impl Serialize for Mentions {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Mentions::All => s.serialize_str("all"),
            Mentions::List(l) => l.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Mentions {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Mentions;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"all\" or a list of agent ids")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Mentions, E> {
                Ok(if v.eq_ignore_ascii_case("all") {
                    Mentions::All
                } else {
                    Mentions::List(vec![v.to_owned()])
                })
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Mentions, A::Error> {
                let mut l = Vec::new();
                while let Some(x) = a.next_element::<String>()? {
                    l.push(x);
                }
                Ok(Mentions::List(l))
            }
        }
        d.deserialize_any(V)
    }
}

/// The smallest unit of content (§4.5): text, a file (by `uri` or inline base64 `bytes`) or
/// structured data, each with optional `metadata`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum DataItem {
    /// `{"type":"text","text":…}`.
    Text {
        /// The text.
        text: String,
        /// Extra information.
        #[serde(skip_serializing_if = "Option::is_none")]
        metadata: Option<JsonObject>,
    },
    /// `{"type":"file","name"?,"mimeType"?,"uri"?,"bytes"?}`.
    #[serde(rename_all = "camelCase")]
    File {
        /// File name.
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// Media type.
        #[serde(skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// Where the file is (exclusive with `bytes`).
        #[serde(skip_serializing_if = "Option::is_none")]
        uri: Option<String>,
        /// The content, base64 (exclusive with `uri`).
        #[serde(skip_serializing_if = "Option::is_none")]
        bytes: Option<String>,
        /// Extra information.
        #[serde(skip_serializing_if = "Option::is_none")]
        metadata: Option<JsonObject>,
    },
    /// `{"type":"data","data":{…}}`.
    Data {
        /// The structured data (an object per the spec; any JSON value is kept).
        data: Value,
        /// Extra information.
        #[serde(skip_serializing_if = "Option::is_none")]
        metadata: Option<JsonObject>,
    },
}

impl DataItem {
    /// A text item without metadata.
    pub fn text(text: impl Into<String>) -> Self {
        DataItem::Text {
            text: text.into(),
            metadata: None,
        }
    }

    /// The text of a text item.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            DataItem::Text { text, .. } => Some(text),
            DataItem::File { .. } | DataItem::Data { .. } => None,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawDataItem {
    #[serde(rename = "type")]
    ty: Option<String>,
    text: Option<String>,
    name: Option<String>,
    mime_type: Option<String>,
    uri: Option<String>,
    bytes: Option<String>,
    #[serde(default)]
    data: Value,
    metadata: Option<JsonObject>,
}

impl<'de> Deserialize<'de> for DataItem {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let r = RawDataItem::deserialize(d)?;
        match r.ty.as_deref() {
            Some("text") => Ok(DataItem::Text {
                text: r.text.ok_or_else(|| D::Error::missing_field("text"))?,
                metadata: r.metadata,
            }),
            Some("file") => Ok(DataItem::File {
                name: r.name,
                mime_type: r.mime_type,
                uri: r.uri,
                bytes: r.bytes,
                metadata: r.metadata,
            }),
            Some("data") => {
                if r.data.is_null() {
                    return Err(D::Error::missing_field("data"));
                }
                Ok(DataItem::Data {
                    data: r.data,
                    metadata: r.metadata,
                })
            }
            Some(other) => Err(D::Error::custom(format!(
                "unknown dataItem type {other:?} (expected text, file or data)"
            ))),
            None => Err(D::Error::missing_field("type")),
        }
    }
}

/// `TaskStatus`: a state, when it was entered and what came with it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// The state.
    pub state: TaskState,
    /// When the state was entered.
    pub state_changed_at: Timestamp,
    /// Content that came with the change (a question, a failure reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_items: Option<Vec<DataItem>>,
}

impl TaskStatus {
    /// A status without data items.
    pub fn new(state: TaskState, at: Timestamp) -> Self {
        TaskStatus {
            state,
            state_changed_at: at,
            data_items: None,
        }
    }
}

/// `Product`: a result of the work (§4.4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Product {
    /// Unique within the task.
    pub id: String,
    /// A short name (often a file name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The content (required on the wire; absent or null reads as empty).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub data_items: Vec<DataItem>,
}

impl Product {
    /// A product with one text item.
    pub fn text(id: impl Into<String>, text: impl Into<String>) -> Self {
        Product {
            id: id.into(),
            name: None,
            description: None,
            data_items: vec![DataItem::text(text)],
        }
    }
}

fn null_as_empty<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_names_parse_in_every_spelling_the_documents_use() {
        for (s, want) in [
            ("awaiting-completion", TaskState::AwaitingCompletion),
            ("AwaitingCompletion", TaskState::AwaitingCompletion),
            ("awaiting_input", TaskState::AwaitingInput),
            ("Accepted", TaskState::Accepted),
            ("cancelled", TaskState::Canceled),
        ] {
            assert_eq!(TaskState::parse(s), Some(want), "{s}");
        }
        assert_eq!(TaskState::parse("done"), None);
        assert_eq!(
            TaskState::parse("a-very-long-string-that-is-no-state"),
            None
        );
        for s in TaskState::ALL {
            assert_eq!(TaskState::parse(s.as_str()), Some(s));
        }
    }

    #[test]
    fn data_items_read_nulls_as_absent_and_write_them_omitted() {
        let v = r#"[{"metadata":null,"type":"text","text":"hi","extra":1},
                   {"type":"file","name":null,"uri":"https://x/y.pdf","bytes":null},
                   {"type":"data","data":{"a":1},"metadata":{"k":"v"}}]"#;
        let items: Vec<DataItem> = serde_json::from_str(v).unwrap();
        assert_eq!(items[0], DataItem::text("hi"));
        assert_eq!(
            serde_json::to_string(&items).unwrap(),
            r#"[{"type":"text","text":"hi"},{"type":"file","uri":"https://x/y.pdf"},{"type":"data","data":{"a":1},"metadata":{"k":"v"}}]"#
        );
    }

    #[test]
    fn unknown_data_item_types_are_refused_with_their_name() {
        let e = serde_json::from_str::<DataItem>(r#"{"type":"image","src":"x"}"#).unwrap_err();
        assert!(e.to_string().contains("image"), "{e}");
        assert!(serde_json::from_str::<DataItem>(r#"{"type":"text"}"#).is_err());
    }

    #[test]
    fn mentions_read_all_or_a_list() {
        assert_eq!(
            serde_json::from_str::<Mentions>(r#""all""#).unwrap(),
            Mentions::All
        );
        assert_eq!(
            serde_json::from_str::<Mentions>(r#"["a","b"]"#).unwrap(),
            Mentions::List(vec!["a".into(), "b".into()])
        );
        assert_eq!(serde_json::to_string(&Mentions::All).unwrap(), r#""all""#);
    }
}
