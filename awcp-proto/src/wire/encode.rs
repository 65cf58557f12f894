//! Per-dialect encoder. (Being written.)

use super::types::*;

/// Encodes a message as compact JSON in `dialect`.
pub fn encode_message(msg: &Message, dialect: Dialect) -> String {
    message_to_value(msg, dialect).to_string()
}

/// Encodes a task event as compact JSON in `dialect`.
pub fn encode_event(ev: &TaskEvent, dialect: Dialect) -> String {
    event_to_value(ev, dialect).to_string()
}

/// A message as a JSON value in `dialect`.
pub fn message_to_value(msg: &Message, dialect: Dialect) -> serde_json::Value {
    let _ = (msg, dialect);
    serde_json::Value::Null
}

/// A task event as a JSON value in `dialect`.
pub fn event_to_value(ev: &TaskEvent, dialect: Dialect) -> serde_json::Value {
    let _ = (ev, dialect);
    serde_json::Value::Null
}

/// A transport handle as a JSON value.
pub fn encode_handle(handle: &TransportHandle) -> serde_json::Value {
    let _ = handle;
    serde_json::Value::Null
}
