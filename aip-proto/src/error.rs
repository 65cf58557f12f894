//! Errors, sorted by who is at fault.
//!
//! * [`ErrorCode`] / [`RpcError`]: what goes on the wire in a JSON-RPC `error` (the seed's
//!   §5.2 table, the same in every AIP version, plus the SDK's group-invite codes).
//! * [`DecodeError`]: a peer sent something we cannot read (its fault); the engines turn it
//!   into the right JSON-RPC error or a [`crate::leader::CallError`].
//! * [`UsageError`]: the local application called an engine wrongly; the call changed nothing.

use core::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::wire::TaskState;

/// A JSON-RPC 2.0 / AIP error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// -32700: the body is not valid JSON (the SDK also uses it for every validation failure).
    ParseError,
    /// -32600: valid JSON, but not a JSON-RPC request object.
    InvalidRequest,
    /// -32601: unknown method.
    MethodNotFound,
    /// -32602: missing or ill-typed parameters.
    InvalidParams,
    /// -32603: an unexpected server-side failure.
    InternalError,
    /// -32001: unknown task (also v02.02's "Stream events expired").
    TaskNotFound,
    /// -32002: the task cannot be canceled (also a stream server's "buffer overflow").
    TaskNotCancelable,
    /// -32003: notifications are not supported.
    NotificationNotSupported,
    /// -32004: the operation is not supported.
    UnsupportedOperation,
    /// -32005: incompatible content types.
    ContentTypeNotSupported,
    /// -32006: the agent produced an invalid response.
    InvalidAgentResponse,
    /// -32007: group mode is not supported.
    GroupNotSupported,
    /// -32008: authentication required.
    AuthenticationRequired,
    /// -32009: authorization failed.
    AuthorizationFailed,
    /// -32010: invalid access token.
    AccessTokenInvalid,
    /// -32020: a group invitation was rejected (SDK 2.1.0, not in the spec).
    InvitationRejected,
    /// -32021: joining a group failed to connect (SDK 2.1.0, not in the spec).
    ConnectionFailed,
    /// Any other code.
    Other(i64),
}

impl ErrorCode {
    /// The numeric code.
    pub fn code(self) -> i64 {
        match self {
            ErrorCode::ParseError => -32700,
            ErrorCode::InvalidRequest => -32600,
            ErrorCode::MethodNotFound => -32601,
            ErrorCode::InvalidParams => -32602,
            ErrorCode::InternalError => -32603,
            ErrorCode::TaskNotFound => -32001,
            ErrorCode::TaskNotCancelable => -32002,
            ErrorCode::NotificationNotSupported => -32003,
            ErrorCode::UnsupportedOperation => -32004,
            ErrorCode::ContentTypeNotSupported => -32005,
            ErrorCode::InvalidAgentResponse => -32006,
            ErrorCode::GroupNotSupported => -32007,
            ErrorCode::AuthenticationRequired => -32008,
            ErrorCode::AuthorizationFailed => -32009,
            ErrorCode::AccessTokenInvalid => -32010,
            ErrorCode::InvitationRejected => -32020,
            ErrorCode::ConnectionFailed => -32021,
            ErrorCode::Other(c) => c,
        }
    }

    /// The code for a number.
    pub fn from_code(code: i64) -> ErrorCode {
        match code {
            -32700 => ErrorCode::ParseError,
            -32600 => ErrorCode::InvalidRequest,
            -32601 => ErrorCode::MethodNotFound,
            -32602 => ErrorCode::InvalidParams,
            -32603 => ErrorCode::InternalError,
            -32001 => ErrorCode::TaskNotFound,
            -32002 => ErrorCode::TaskNotCancelable,
            -32003 => ErrorCode::NotificationNotSupported,
            -32004 => ErrorCode::UnsupportedOperation,
            -32005 => ErrorCode::ContentTypeNotSupported,
            -32006 => ErrorCode::InvalidAgentResponse,
            -32007 => ErrorCode::GroupNotSupported,
            -32008 => ErrorCode::AuthenticationRequired,
            -32009 => ErrorCode::AuthorizationFailed,
            -32010 => ErrorCode::AccessTokenInvalid,
            -32020 => ErrorCode::InvitationRejected,
            -32021 => ErrorCode::ConnectionFailed,
            c => ErrorCode::Other(c),
        }
    }

    /// The spec's message for the code.
    pub fn default_message(self) -> &'static str {
        match self {
            ErrorCode::ParseError => "Invalid JSON payload",
            ErrorCode::InvalidRequest => "Invalid JSON-RPC Request",
            ErrorCode::MethodNotFound => "Method not found",
            ErrorCode::InvalidParams => "Invalid method parameters",
            ErrorCode::InternalError => "Internal server error",
            ErrorCode::TaskNotFound => "Task not found",
            ErrorCode::TaskNotCancelable => "Task cannot be canceled",
            ErrorCode::NotificationNotSupported => "Notification is not supported",
            ErrorCode::UnsupportedOperation => "This operation is not supported",
            ErrorCode::ContentTypeNotSupported => "Incompatible content types",
            ErrorCode::InvalidAgentResponse => "Invalid agent response type",
            ErrorCode::GroupNotSupported => "Group communication is not supported",
            ErrorCode::AuthenticationRequired => "Authentication required",
            ErrorCode::AuthorizationFailed => "Authorization failed",
            ErrorCode::AccessTokenInvalid => "Invalid access token",
            ErrorCode::InvitationRejected => "Invitation rejected",
            ErrorCode::ConnectionFailed => "Connection failed",
            ErrorCode::Other(_) => "Server error",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.code(), self.default_message())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(self.code())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Lenient: an integer written as a float (`-32001.0`) is still the code.
        let v = f64::deserialize(d)?;
        Ok(ErrorCode::from_code(v as i64))
    }
}

/// A JSON-RPC `error` object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    /// The code.
    pub code: ErrorCode,
    /// A short description.
    #[serde(default)]
    pub message: String,
    /// Details (absent when `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with the spec's message for `code`.
    pub fn new(code: ErrorCode) -> Self {
        RpcError {
            code,
            message: code.default_message().to_owned(),
            data: None,
        }
    }

    /// An error with `message`.
    pub fn with_message(code: ErrorCode, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Adds `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// -32001 with `data: {"taskId": …}` (what the SDK answers).
    pub fn task_not_found(task_id: &str) -> Self {
        RpcError::new(ErrorCode::TaskNotFound).with_data(serde_json::json!({ "taskId": task_id }))
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.code(), self.message)?;
        if let Some(d) = &self.data {
            write!(f, " ({d})")?;
        }
        Ok(())
    }
}

impl std::error::Error for RpcError {}

/// A message we could not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Not JSON at all.
    #[error("invalid JSON: {0}")]
    Json(String),
    /// JSON, but not the object this place needs (a JSON-RPC request, a task, …).
    #[error("invalid {what}: {detail}")]
    Shape {
        /// What was expected (`JSON-RPC request`, `task`, …).
        what: &'static str,
        /// What is wrong, naming the field.
        detail: String,
    },
    /// A `type` this place does not know.
    #[error("unknown {what} type {found:?}")]
    UnknownType {
        /// What was being decoded.
        what: &'static str,
        /// The `type` found.
        found: String,
    },
}

impl DecodeError {
    pub(crate) fn shape(what: &'static str, detail: impl Into<String>) -> Self {
        DecodeError::Shape {
            what,
            detail: detail.into(),
        }
    }

    /// The JSON-RPC error a server answers this with (-32700 for syntax, -32602 otherwise).
    pub fn to_rpc_error(&self) -> RpcError {
        match self {
            DecodeError::Json(m) => {
                RpcError::new(ErrorCode::ParseError).with_data(Value::String(m.clone()))
            }
            DecodeError::Shape { .. } | DecodeError::UnknownType { .. } => {
                RpcError::new(ErrorCode::InvalidParams).with_data(Value::String(self.to_string()))
            }
        }
    }
}

/// Local misuse of an engine API: the call changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UsageError {
    /// No task with this id.
    #[error("unknown task {0}")]
    UnknownTask(String),
    /// A task with this id exists already.
    #[error("task {0} exists already")]
    TaskExists(String),
    /// The spec's table has no such transition.
    #[error("task {task}: {from} → {to} is not a transition of the task state machine")]
    IllegalTransition {
        /// The task.
        task: String,
        /// Its state (`none` before the start decision).
        from: StateName,
        /// The state asked for.
        to: TaskState,
    },
    /// The start of this task was already decided (accept or reject twice).
    #[error("task {0}: the start was already decided")]
    AlreadyDecided(String),
    /// No partner registered under this id.
    #[error("unknown partner {0}")]
    UnknownPartner(String),
    /// The engine is not set up for this (notifications off, no receiver URL, …).
    #[error("not supported: {0}")]
    Unsupported(String),
    /// An argument is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// A task state or "none" (before the start decision), for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateName(pub Option<TaskState>);

impl fmt::Display for StateName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(s) => f.write_str(s.as_str()),
            None => f.write_str("none"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_code_round_trips() {
        for c in [
            -32700, -32600, -32601, -32602, -32603, -32001, -32002, -32003, -32004, -32005, -32006,
            -32007, -32008, -32009, -32010, -32020, -32021, -32050,
        ] {
            assert_eq!(ErrorCode::from_code(c).code(), c);
        }
        assert_eq!(ErrorCode::from_code(-32050), ErrorCode::Other(-32050));
    }

    #[test]
    fn error_objects_decode_leniently_and_encode_strictly() {
        let e: RpcError =
            serde_json::from_str(r#"{"code":-32001.0,"message":"Task not found","data":null}"#)
                .unwrap();
        assert_eq!(e.code, ErrorCode::TaskNotFound);
        assert_eq!(e.data, None);
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"code":-32001,"message":"Task not found"}"#
        );
    }
}
