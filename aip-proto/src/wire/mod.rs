//! Wire types for both dialects and their codecs.
//!
//! | | v01.00 (seed) | v02.00 / v02.01 (acps-sdk 2.x) |
//! |---|---|---|
//! | leader → partner | `Message` (`type:"message"`) | `TaskCommand` (`type:"task-command"`) |
//! | partner → leader | `Task` (`type:"task"`, `id` = task id) | `TaskResult` (`type:"task-result"`) |
//! | status event | `status-update` | `task-status-update` (+ message fields) |
//! | `rpc` params | `message` | `command` |
//!
//! One Rust value per concept ([`TaskCommand`], [`TaskResult`], [`StatusUpdate`],
//! [`ProductChunk`]) decodes from either dialect and encodes into either ([`InDialect`]).
//! Decoding reports the [`Dialect`] it found so an answer can use the request's.

mod command;
mod data;
mod decode;
mod encode;
mod jsonrpc;
mod task;

pub use command::{
    CommandKind, GetParams, NotificationStartParams, ReStreamParams, StartParams, TaskCommand,
};
pub use data::{DataItem, JsonObject, Mentions, Product, SenderRole, TaskState, TaskStatus};
pub(crate) use decode::take_header;
pub use decode::{
    decode_command, decode_event_data, decode_request, decode_response, decode_rpc_response,
    decode_stream_event, decode_task, is_json, RequestError,
};
pub use encode::{
    command_key, encode_command, encode_command_request, encode_error, encode_notification_id,
    encode_notification_set, encode_request_raw, encode_result, encode_stream_event, encode_task,
    encode_task_response, InDialect,
};
pub(crate) use encode::{encode_parts_response, ResultParts};
pub use jsonrpc::{
    Method, NotificationConfig, NotificationIdParams, Params, Request, Response, RpcId, RpcResult,
};
pub use task::{EventData, Header, ProductChunk, StatusUpdate, StreamEvent, TaskResult};

/// Which version of AIP a peer speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Dialect {
    /// v01.00, the seed (`Message`/`Task`, `status-update`).
    V1,
    /// v02.00 / v02.01 / v02.02 (`TaskCommand`/`TaskResult`, `task-status-update`), what
    /// `acps-sdk` 2.x on PyPI speaks. The default.
    #[default]
    V2,
}

impl Dialect {
    /// The dialect for an ACS `protocolVersion` (`"01.00"` → V1, `"02.01"` → V2; anything
    /// unrecognised → V2, the dialect of the only released SDK).
    pub fn from_protocol_version(v: &str) -> Dialect {
        let v = v.trim().trim_start_matches(['v', 'V']);
        if v == "1" || v.starts_with("01") || v.starts_with("1.") {
            Dialect::V1
        } else {
            Dialect::V2
        }
    }

    /// `"01.00"` or `"02.01"` (the newest v02 this crate implements).
    pub fn protocol_version(self) -> &'static str {
        match self {
            Dialect::V1 => "01.00",
            Dialect::V2 => "02.01",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_versions_pick_the_dialect() {
        for (v, d) in [
            ("01.00", Dialect::V1),
            ("1.0", Dialect::V1),
            ("v1", Dialect::V1),
            ("02.00", Dialect::V2),
            ("02.01", Dialect::V2),
            ("02.02", Dialect::V2),
            ("", Dialect::V2),
        ] {
            assert_eq!(Dialect::from_protocol_version(v), d, "{v}");
        }
    }
}
