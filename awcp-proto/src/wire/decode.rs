//! Two-dialect decoder. (Being written.)

use super::types::*;

/// What is wrong with a field.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// The input is not a JSON object.
    Json(String),
    /// A required field is absent or `null`.
    Missing,
    /// A field has the wrong JSON type.
    WrongType {
        /// The JSON type that was expected.
        expected: &'static str,
    },
    /// A field has the right type but an unacceptable value.
    Invalid(String),
}

/// A message or event could not be decoded; `field` is a dotted path such as `task.prompt`
/// (empty for the whole document).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(field, kind))]
pub struct DecodeError {
    /// Dotted path of the offending field.
    pub field: String,
    /// What is wrong with it.
    pub kind: DecodeErrorKind,
}

fn render(field: &str, kind: &DecodeErrorKind) -> String {
    let what = match kind {
        DecodeErrorKind::Json(e) => format!("malformed JSON: {e}"),
        DecodeErrorKind::Missing => "missing required field".to_owned(),
        DecodeErrorKind::WrongType { expected } => format!("expected {expected}"),
        DecodeErrorKind::Invalid(why) => why.clone(),
    };
    if field.is_empty() {
        what
    } else {
        format!("field `{field}`: {what}")
    }
}

/// Decodes a control-plane message from JSON bytes; returns the dialect it was written in.
pub fn decode_message(json: &[u8]) -> Result<(Message, Dialect), DecodeError> {
    let _ = json;
    Err(DecodeError {
        field: String::new(),
        kind: DecodeErrorKind::Json("decoder not written yet".into()),
    })
}

/// Decodes an SSE task event (the JSON of one `data:` payload); returns its dialect.
pub fn decode_event(json: &[u8]) -> Result<(TaskEvent, Dialect), DecodeError> {
    let _ = json;
    Err(DecodeError {
        field: String::new(),
        kind: DecodeErrorKind::Json("decoder not written yet".into()),
    })
}

/// Decodes a transport handle object; `path` prefixes field names in errors.
pub fn decode_handle(
    value: &serde_json::Value,
    path: &str,
) -> Result<TransportHandle, DecodeError> {
    let _ = value;
    Err(DecodeError {
        field: path.to_owned(),
        kind: DecodeErrorKind::Missing,
    })
}
