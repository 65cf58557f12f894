//! Lenient decoding of both dialects: null is absent, unknown fields are ignored, `id` may be
//! a string, a number or null, a response may carry `error` beside `"result": null`, and
//! timestamps take any RFC 3339 offset. The dialect is read from `type` (`message`, `task`,
//! `status-update` are v01.00; `task-command`, `task-result`, `task-status-update` are v02),
//! else from where the object sits (`params.command` is v02).
//!
//! Implementation note: everything decodes in one pass into a flat "raw" struct whose fields
//! are all optional (no `serde_json::Value` in between, no buffering of tagged enums), then is
//! checked and converted. That keeps decoding fast (see `BENCHMARKS.md`) and lets error
//! messages name the missing field.

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::{DecodeError, ErrorCode, RpcError};
use crate::time::Timestamp;
use crate::wire::command::{CommandKind, TaskCommand};
use crate::wire::data::{DataItem, JsonObject, Mentions, Product, SenderRole, TaskStatus};
use crate::wire::jsonrpc::{
    Method, NotificationConfig, NotificationIdParams, Params, Request, Response, RpcId, RpcResult,
};
use crate::wire::task::{EventData, Header, ProductChunk, StatusUpdate, StreamEvent, TaskResult};
use crate::wire::Dialect;

/// Every field any AIP object may have.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawObject {
    #[serde(rename = "type")]
    ty: Option<String>,
    id: Option<String>,
    sent_at: Option<Timestamp>,
    sender_role: Option<SenderRole>,
    sender_id: Option<String>,
    mentions: Option<Mentions>,
    command: Option<CommandKind>,
    command_params: Option<JsonObject>,
    data_items: Option<Vec<DataItem>>,
    task_id: Option<String>,
    group_id: Option<String>,
    session_id: Option<String>,
    status: Option<TaskStatus>,
    products: Option<Vec<Product>>,
    message_history: Option<Vec<RawObject>>,
    command_history: Option<Vec<RawObject>>,
    status_history: Option<Vec<TaskStatus>>,
    product: Option<Product>,
    append: Option<bool>,
    last_chunk: Option<bool>,
}

fn missing(what: &'static str, field: &str) -> DecodeError {
    DecodeError::shape(what, format!("missing field `{field}`"))
}

fn dialect_of(ty: Option<&str>) -> Option<Dialect> {
    match ty? {
        "message" | "task" | "status-update" => Some(Dialect::V1),
        "task-command" | "task-result" | "task-status-update" => Some(Dialect::V2),
        _ => None,
    }
}

/// The fields of a command only: what requests carry (smaller than [`RawObject`], which
/// matters when decoding moves it around).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawCommand {
    #[serde(rename = "type")]
    ty: Option<String>,
    id: Option<String>,
    sent_at: Option<Timestamp>,
    sender_role: Option<SenderRole>,
    sender_id: Option<String>,
    mentions: Option<Mentions>,
    command: Option<CommandKind>,
    command_params: Option<JsonObject>,
    data_items: Option<Vec<DataItem>>,
    task_id: Option<String>,
    group_id: Option<String>,
    session_id: Option<String>,
}

impl RawCommand {
    fn into_command(mut self, context: Dialect) -> Result<(TaskCommand, Dialect), DecodeError> {
        self.take_command(context)
    }

    /// The command, its fields taken out of `self` (a boxed raw command is read in place:
    /// no 300-byte moves on the request path).
    fn take_command(&mut self, context: Dialect) -> Result<(TaskCommand, Dialect), DecodeError> {
        const W: &str = "message";
        match self.ty.as_deref() {
            None | Some("message" | "task-command") => {}
            Some(other) => {
                return Err(DecodeError::UnknownType {
                    what: "command",
                    found: other.to_owned(),
                })
            }
        }
        let dialect = dialect_of(self.ty.as_deref()).unwrap_or(context);
        let c = TaskCommand {
            id: self.id.take().ok_or_else(|| missing(W, "id"))?,
            sent_at: self.sent_at.take().ok_or_else(|| missing(W, "sentAt"))?,
            sender_role: self
                .sender_role
                .take()
                .ok_or_else(|| missing(W, "senderRole"))?,
            sender_id: self
                .sender_id
                .take()
                .ok_or_else(|| missing(W, "senderId"))?,
            mentions: self.mentions.take(),
            command: self.command.take(),
            command_params: self.command_params.take(),
            data_items: self.data_items.take(),
            task_id: self.task_id.take(),
            group_id: self.group_id.take(),
            session_id: self.session_id.take(),
        };
        Ok((c, dialect))
    }
}

/// Takes the [`Header`] fields out of a raw decoded object (direct-mode objects and the group
/// management message carry the same eight, under the same names).
macro_rules! take_header {
    ($raw:expr) => {
        $crate::wire::Header {
            id: $raw.id.take(),
            sent_at: $raw.sent_at.take(),
            sender_role: $raw.sender_role.take(),
            sender_id: $raw.sender_id.take(),
            mentions: $raw.mentions.take(),
            data_items: $raw.data_items.take(),
            group_id: $raw.group_id.take(),
            session_id: $raw.session_id.take(),
        }
    };
}
pub(crate) use take_header;

impl RawObject {
    fn header(&mut self) -> Header {
        take_header!(self)
    }

    fn into_command(self, context: Dialect) -> Result<(TaskCommand, Dialect), DecodeError> {
        RawCommand {
            ty: self.ty,
            id: self.id,
            sent_at: self.sent_at,
            sender_role: self.sender_role,
            sender_id: self.sender_id,
            mentions: self.mentions,
            command: self.command,
            command_params: self.command_params,
            data_items: self.data_items,
            task_id: self.task_id,
            group_id: self.group_id,
            session_id: self.session_id,
        }
        .into_command(context)
    }

    fn history(
        list: Option<Vec<RawObject>>,
        d: Dialect,
    ) -> Result<Option<Vec<TaskCommand>>, DecodeError> {
        list.map(|l| {
            l.into_iter()
                .map(|r| r.into_command(d).map(|(c, _)| c))
                .collect()
        })
        .transpose()
    }

    fn into_task(mut self) -> Result<(TaskResult, Dialect), DecodeError> {
        const W: &str = "task";
        let dialect = match self.ty.as_deref() {
            Some("task") => Dialect::V1,
            Some("task-result") => Dialect::V2,
            None if self.task_id.is_some() => Dialect::V2,
            None => Dialect::V1,
            Some(other) => {
                return Err(DecodeError::UnknownType {
                    what: "task",
                    found: other.to_owned(),
                })
            }
        };
        let status = self.status.take().ok_or_else(|| missing(W, "status"))?;
        let task_id = match dialect {
            Dialect::V1 => self.id.take().ok_or_else(|| missing(W, "id"))?,
            Dialect::V2 => self.task_id.take().ok_or_else(|| missing(W, "taskId"))?,
        };
        let history = self.command_history.take().or(self.message_history.take());
        let header = self.header();
        let t = TaskResult {
            header,
            task_id,
            status,
            products: self.products,
            command_history: Self::history(history, dialect)?,
            status_history: self.status_history,
        };
        Ok((t, dialect))
    }

    fn into_event(mut self) -> Result<(EventData, Dialect), DecodeError> {
        match self.ty.as_deref() {
            Some("task" | "task-result") => self.into_task().map(|(t, d)| (EventData::Task(t), d)),
            Some("message" | "task-command") => self
                .into_command(Dialect::V1)
                .map(|(c, d)| (EventData::Command(c), d)),
            Some(ty @ ("status-update" | "task-status-update")) => {
                let d = dialect_of(Some(ty)).unwrap_or(Dialect::V2);
                let status = self
                    .status
                    .take()
                    .ok_or_else(|| missing("status-update", "status"))?;
                let task_id = self
                    .task_id
                    .take()
                    .ok_or_else(|| missing("status-update", "taskId"))?;
                let header = self.header();
                Ok((
                    EventData::StatusUpdate(StatusUpdate {
                        header,
                        task_id,
                        status,
                    }),
                    d,
                ))
            }
            Some("product-chunk") => {
                const W: &str = "product-chunk";
                let d = if self.sent_at.is_some() || self.sender_role.is_some() {
                    Dialect::V2
                } else {
                    Dialect::V1
                };
                let chunk = ProductChunk {
                    task_id: self.task_id.take().ok_or_else(|| missing(W, "taskId"))?,
                    product: self.product.take().ok_or_else(|| missing(W, "product"))?,
                    append: self.append.unwrap_or(false),
                    last_chunk: self.last_chunk.unwrap_or(false),
                    header: self.header(),
                };
                Ok((EventData::ProductChunk(chunk), d))
            }
            Some(other) => Err(DecodeError::UnknownType {
                what: "event",
                found: other.to_owned(),
            }),
            None => Err(missing("event", "type")),
        }
    }
}

/// `serde_json::from_str` after one UTF-8 check of the whole body: cheaper than
/// `from_slice`, which validates every string again.
fn from_bytes<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, serde_json::Error> {
    match std::str::from_utf8(body) {
        Ok(s) => serde_json::from_str(s),
        // Let serde_json report where the bad byte is.
        Err(_) => serde_json::from_slice(body),
    }
}

fn shape_err(what: &'static str) -> impl Fn(serde_json::Error) -> DecodeError {
    move |e| {
        if e.is_syntax() || e.is_eof() {
            DecodeError::Json(e.to_string())
        } else {
            DecodeError::shape(what, e.to_string())
        }
    }
}

/// A bare command (`Message` / `TaskCommand`).
pub fn decode_command(body: &[u8]) -> Result<(TaskCommand, Dialect), DecodeError> {
    let raw: RawObject = from_bytes(body).map_err(shape_err("message"))?;
    raw.into_command(Dialect::V1)
}

/// A bare task (`Task` / `TaskResult`), e.g. a notification body.
pub fn decode_task(body: &[u8]) -> Result<(TaskResult, Dialect), DecodeError> {
    let raw: RawObject = from_bytes(body).map_err(shape_err("task"))?;
    raw.into_task()
}

/// A bare stream payload (`eventData`).
pub fn decode_event_data(body: &[u8]) -> Result<(EventData, Dialect), DecodeError> {
    let raw: RawObject = from_bytes(body).map_err(shape_err("event"))?;
    raw.into_event()
}

#[derive(Deserialize)]
struct RawRequest<'a> {
    jsonrpc: Option<String>,
    method: Option<String>,
    #[serde(default)]
    id: RpcId,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct RawCommandParams {
    /// Boxed: the request path moves pointers, not two 300-byte structs (BENCHMARKS.md).
    message: Option<Box<RawCommand>>,
    command: Option<Box<RawCommand>>,
}

/// The one-pass shape of a command request (`rpc`, `stream`, `notification/start`).
#[derive(Deserialize)]
struct FastRequest<'a> {
    #[serde(borrow)]
    jsonrpc: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    id: RpcId,
    params: Option<RawCommandParams>,
}

/// The fast path: a well-formed command request (`rpc`, `stream`, `notification/start`)
/// decodes in one serde pass, borrowing the envelope's strings. Anything else (an error to
/// classify, another method) goes the general way.
pub(crate) fn decode_fast(body: &[u8]) -> Option<Request> {
    let raw: FastRequest<'_> = serde_json::from_slice(body).ok()?;
    command_request(
        raw.jsonrpc.as_deref(),
        raw.method.as_deref(),
        raw.id,
        raw.params,
    )
}

/// A command request from its read parts, if it is one.
fn command_request(
    jsonrpc: Option<&str>,
    method: Option<&str>,
    id: RpcId,
    params: Option<RawCommandParams>,
) -> Option<Request> {
    if jsonrpc.is_some_and(|v| v != "2.0") {
        return None;
    }
    let method = Method::parse(method?);
    if !matches!(
        method,
        Method::Rpc | Method::Stream | Method::NotificationStart
    ) {
        return None;
    }
    let p = params?;
    let (mut raw_cmd, context) = match (p.command, p.message) {
        (Some(c), _) => (c, Dialect::V2),
        (None, Some(m)) => (m, Dialect::V1),
        (None, None) => return None,
    };
    let (c, dialect) = raw_cmd.take_command(context).ok()?;
    Some(Request {
        id,
        method,
        params: Params::Command(std::sync::Arc::new(c)),
        dialect,
    })
}

/// A request that cannot be served: the id to answer with (null if unreadable) and the error.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestError {
    /// The request's id, if it could be read.
    pub id: RpcId,
    /// What to answer.
    pub error: RpcError,
}

fn invalid(id: &RpcId, code: ErrorCode, detail: impl Into<String>) -> RequestError {
    RequestError {
        id: id.clone(),
        error: RpcError::new(code).with_data(Value::String(detail.into())),
    }
}

/// Decodes a JSON-RPC request body; on failure, says what to answer (-32700 unreadable JSON,
/// -32600 not a request, -32601 unknown method, -32602 bad params).
pub fn decode_request(body: &[u8]) -> Result<Request, RequestError> {
    if let Some(r) = decode_fast(body) {
        return Ok(r);
    }
    let raw: RawRequest<'_> = match from_bytes(body) {
        Ok(r) => r,
        Err(e) if e.is_syntax() || e.is_eof() => {
            return Err(invalid(&RpcId::Null, ErrorCode::ParseError, e.to_string()))
        }
        Err(e) => {
            // Valid JSON of the wrong shape: recover the id if there is a readable one.
            let id = serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|v| v.get("id").cloned())
                .and_then(|v| serde_json::from_value::<RpcId>(v).ok())
                .unwrap_or_default();
            return Err(invalid(&id, ErrorCode::InvalidRequest, e.to_string()));
        }
    };
    if raw.jsonrpc.as_deref().is_some_and(|v| v != "2.0") {
        return Err(invalid(
            &raw.id,
            ErrorCode::InvalidRequest,
            "jsonrpc must be \"2.0\"",
        ));
    }
    let Some(method) = raw.method.as_deref() else {
        return Err(invalid(
            &raw.id,
            ErrorCode::InvalidRequest,
            "missing field `method`",
        ));
    };
    let method = Method::parse(method);
    let params_text = raw.params.map(RawValue::get).filter(|p| *p != "null");
    let bad = |e: String| invalid(&raw.id, ErrorCode::InvalidParams, e);
    let need = || params_text.ok_or_else(|| bad("missing field `params`".into()));
    let (params, dialect) = match &method {
        Method::Rpc | Method::Stream | Method::NotificationStart => {
            let p: RawCommandParams =
                serde_json::from_str(need()?).map_err(|e| bad(e.to_string()))?;
            let (mut raw_cmd, context) = match (p.command, p.message) {
                (Some(c), _) => (c, Dialect::V2),
                (None, Some(m)) => (m, Dialect::V1),
                (None, None) => {
                    return Err(bad(format!(
                        "missing field `params.{}`",
                        if method == Method::Rpc {
                            "command` or `params.message"
                        } else {
                            "message"
                        }
                    )))
                }
            };
            let (c, d) = raw_cmd
                .take_command(context)
                .map_err(|e| bad(e.to_string()))?;
            (Params::Command(std::sync::Arc::new(c)), d)
        }
        Method::NotificationSet => {
            let c: NotificationConfig =
                serde_json::from_str(need()?).map_err(|e| bad(e.to_string()))?;
            (Params::NotificationSet(c), Dialect::V2)
        }
        Method::NotificationGet | Method::NotificationDelete => {
            let p: NotificationIdParams =
                serde_json::from_str(need()?).map_err(|e| bad(e.to_string()))?;
            (Params::NotificationId(p), Dialect::V2)
        }
        Method::Group | Method::Other(_) => {
            (Params::Other(params_text.map(str::to_owned)), Dialect::V2)
        }
    };
    Ok(Request {
        id: raw.id,
        method,
        params,
        dialect,
    })
}

#[derive(Deserialize)]
struct RawResponse<'a> {
    #[serde(default)]
    id: RpcId,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    error: Option<RpcError>,
}

fn decode_envelope<T>(
    body: &[u8],
    what: &'static str,
    result: impl FnOnce(&str) -> Result<T, DecodeError>,
) -> Result<Response<T>, DecodeError> {
    let raw: RawResponse<'_> = from_bytes(body).map_err(shape_err("JSON-RPC response"))?;
    let outcome = match (raw.error, raw.result) {
        (Some(e), _) => Err(e),
        (None, Some(r)) => Ok(result(r.get())?),
        (None, None) => return Err(DecodeError::shape(what, "neither `result` nor `error`")),
    };
    Ok(Response {
        id: raw.id,
        outcome,
    })
}

/// A response to `rpc` or `notification/start`: a task (or a v01.00 message) or an error.
pub fn decode_rpc_response(body: &[u8]) -> Result<Response<(RpcResult, Dialect)>, DecodeError> {
    decode_envelope(body, "rpc response", |r| {
        let raw: RawObject = serde_json::from_str(r).map_err(shape_err("task"))?;
        match raw.ty.as_deref() {
            Some("message" | "task-command") => raw
                .into_command(Dialect::V1)
                .map(|(c, d)| (RpcResult::Message(Box::new(c)), d)),
            _ => raw
                .into_task()
                .map(|(t, d)| (RpcResult::Task(Box::new(t)), d)),
        }
    })
}

/// A response whose result is any JSON type (`notification/set|get|delete`).
pub fn decode_response<T: DeserializeOwned>(body: &[u8]) -> Result<Response<T>, DecodeError> {
    decode_envelope(body, "response", |r| {
        serde_json::from_str(r).map_err(shape_err("result"))
    })
}

fn lenient_seq<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = f64::deserialize(d)?;
    if v.is_finite() && v >= 0.0 {
        Ok(v as u64)
    } else {
        Err(serde::de::Error::custom(
            "eventSeq must be a non-negative number",
        ))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEventResult {
    #[serde(deserialize_with = "lenient_seq")]
    event_seq: u64,
    event_data: RawObject,
}

/// One stream event's JSON (the `data` of an SSE event): an event, or an error frame.
pub fn decode_stream_event(data: &[u8]) -> Result<Response<(StreamEvent, Dialect)>, DecodeError> {
    decode_envelope(data, "stream event", |r| {
        let raw: RawEventResult = serde_json::from_str(r).map_err(shape_err("stream event"))?;
        let (data, d) = raw.event_data.into_event()?;
        Ok((
            StreamEvent {
                seq: raw.event_seq,
                data,
            },
            d,
        ))
    })
}

/// Whether a body is valid JSON at all (to tell -32700 from other failures).
pub fn is_json(body: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok()
}
