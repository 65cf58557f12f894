//! Strict encoding in a chosen dialect: absent fields are omitted, and fields a dialect
//! requires are always written (v01.00 `Message.dataItems` as `[]`, `Task.sessionId` as `""`;
//! v02 `TaskResult` message fields from the status when the value has none).
//!
//! Key order follows the SDK's (`type, id, sentAt, senderRole, senderId, …`), although JSON
//! readers do not care.

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use crate::error::RpcError;
use crate::time::Timestamp;
use crate::wire::command::TaskCommand;
use crate::wire::data::{DataItem, Mentions, Product, SenderRole, TaskStatus};
use crate::wire::jsonrpc::{Method, NotificationConfig, NotificationIdParams, RpcId};
use crate::wire::task::{EventData, Header, ProductChunk, StatusUpdate, StreamEvent, TaskResult};
use crate::wire::Dialect;

/// A value paired with the dialect to write it in; `serde_json::to_vec(&InDialect(&v, d))`.
#[derive(Clone, Copy, Debug)]
pub struct InDialect<'a, T: ?Sized>(pub &'a T, pub Dialect);

fn opt<M: SerializeMap, T: Serialize + ?Sized>(
    m: &mut M,
    k: &'static str,
    v: Option<&T>,
) -> Result<(), M::Error> {
    match v {
        Some(v) => m.serialize_entry(k, v),
        None => Ok(()),
    }
}

impl Serialize for InDialect<'_, TaskCommand> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (c, d) = (self.0, self.1);
        let mut m = s.serialize_map(None)?;
        let ty = match (d, c.command.is_some()) {
            (Dialect::V1, _) | (Dialect::V2, false) => "message",
            (Dialect::V2, true) => "task-command",
        };
        m.serialize_entry("type", ty)?;
        m.serialize_entry("id", &c.id)?;
        m.serialize_entry("sentAt", &c.sent_at)?;
        m.serialize_entry("senderRole", &c.sender_role)?;
        m.serialize_entry("senderId", &c.sender_id)?;
        opt(&mut m, "mentions", c.mentions.as_ref())?;
        match d {
            Dialect::V1 => {
                opt(&mut m, "command", c.command.as_ref())?;
                opt(&mut m, "commandParams", c.command_params.as_ref())?;
                m.serialize_entry("dataItems", c.items())?;
                opt(&mut m, "taskId", c.task_id.as_ref())?;
                opt(&mut m, "groupId", c.group_id.as_ref())?;
                opt(&mut m, "sessionId", c.session_id.as_ref())?;
            }
            Dialect::V2 => {
                opt(&mut m, "dataItems", c.data_items.as_ref())?;
                opt(&mut m, "groupId", c.group_id.as_ref())?;
                opt(&mut m, "sessionId", c.session_id.as_ref())?;
                opt(&mut m, "command", c.command.as_ref())?;
                opt(&mut m, "commandParams", c.command_params.as_ref())?;
                opt(&mut m, "taskId", c.task_id.as_ref())?;
            }
        }
        m.end()
    }
}

impl Serialize for InDialect<'_, [TaskCommand]> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut q = s.serialize_seq(Some(self.0.len()))?;
        for c in self.0 {
            q.serialize_element(&InDialect(c, self.1))?;
        }
        q.end()
    }
}

/// Writes the v02 `Message` fields of `h` (with fallbacks for the required ones).
fn v2_header<M: SerializeMap>(
    m: &mut M,
    h: &Header,
    fallback_id: &dyn Fn() -> String,
    fallback_time: &crate::time::Timestamp,
) -> Result<(), M::Error> {
    match &h.id {
        Some(id) => m.serialize_entry("id", id)?,
        None => m.serialize_entry("id", &fallback_id())?,
    }
    m.serialize_entry("sentAt", h.sent_at.as_ref().unwrap_or(fallback_time))?;
    m.serialize_entry("senderRole", &h.sender_role.unwrap_or(SenderRole::Partner))?;
    m.serialize_entry("senderId", h.sender_id.as_deref().unwrap_or(""))?;
    opt(m, "mentions", h.mentions.as_ref())?;
    opt(m, "dataItems", h.data_items.as_ref())?;
    opt(m, "groupId", h.group_id.as_ref())?;
    opt(m, "sessionId", h.session_id.as_ref())
}

impl Serialize for InDialect<'_, TaskResult> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        InDialect(&ResultParts::of(self.0), self.1).serialize(s)
    }
}

/// A task result's fields, borrowed: from a [`TaskResult`], or straight from an engine's task
/// (a partner's reply is written without building a result).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ResultParts<'a> {
    pub(crate) id: Option<&'a str>,
    pub(crate) sent_at: Option<&'a Timestamp>,
    pub(crate) sender_role: Option<SenderRole>,
    pub(crate) sender_id: Option<&'a str>,
    pub(crate) mentions: Option<&'a Mentions>,
    pub(crate) data_items: Option<&'a [DataItem]>,
    pub(crate) group_id: Option<&'a str>,
    pub(crate) session_id: Option<&'a str>,
    pub(crate) task_id: &'a str,
    pub(crate) status: &'a TaskStatus,
    pub(crate) products: Option<&'a [Product]>,
    pub(crate) command_history: Option<&'a [TaskCommand]>,
    pub(crate) status_history: Option<&'a [TaskStatus]>,
}

impl<'a> ResultParts<'a> {
    /// The parts of `t`.
    pub(crate) fn of(t: &'a TaskResult) -> Self {
        let h = &t.header;
        ResultParts {
            id: h.id.as_deref(),
            sent_at: h.sent_at.as_ref(),
            sender_role: h.sender_role,
            sender_id: h.sender_id.as_deref(),
            mentions: h.mentions.as_ref(),
            data_items: h.data_items.as_deref(),
            group_id: h.group_id.as_deref(),
            session_id: h.session_id.as_deref(),
            task_id: &t.task_id,
            status: &t.status,
            products: t.products.as_deref(),
            command_history: t.command_history.as_deref(),
            status_history: t.status_history.as_deref(),
        }
    }

    /// An owned result with these parts.
    pub(crate) fn to_result(self) -> TaskResult {
        TaskResult {
            header: Header {
                id: self.id.map(str::to_owned),
                sent_at: self.sent_at.copied(),
                sender_role: self.sender_role,
                sender_id: self.sender_id.map(str::to_owned),
                mentions: self.mentions.cloned(),
                data_items: self.data_items.map(<[DataItem]>::to_vec),
                group_id: self.group_id.map(str::to_owned),
                session_id: self.session_id.map(str::to_owned),
            },
            task_id: self.task_id.to_owned(),
            status: self.status.clone(),
            products: self.products.map(<[Product]>::to_vec),
            command_history: self.command_history.map(<[TaskCommand]>::to_vec),
            status_history: self.status_history.map(<[TaskStatus]>::to_vec),
        }
    }
}

impl Serialize for InDialect<'_, ResultParts<'_>> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (t, d) = (self.0, self.1);
        let mut m = s.serialize_map(None)?;
        match d {
            Dialect::V1 => {
                m.serialize_entry("type", "task")?;
                m.serialize_entry("id", t.task_id)?;
                opt(&mut m, "senderId", t.sender_id)?;
                m.serialize_entry("status", t.status)?;
                opt(&mut m, "products", t.products)?;
                if let Some(h) = t.command_history {
                    m.serialize_entry("messageHistory", &InDialect(h, d))?;
                }
                opt(&mut m, "statusHistory", t.status_history)?;
                opt(&mut m, "groupId", t.group_id)?;
                m.serialize_entry("sessionId", t.session_id.unwrap_or(""))?;
            }
            Dialect::V2 => {
                m.serialize_entry("type", "task-result")?;
                match t.id {
                    Some(id) => m.serialize_entry("id", id)?,
                    // Only for a result built without a message id (never by the engines).
                    None => m.serialize_entry("id", &format!("result-{}", t.task_id))?,
                }
                m.serialize_entry("sentAt", t.sent_at.unwrap_or(&t.status.state_changed_at))?;
                m.serialize_entry("senderRole", &t.sender_role.unwrap_or(SenderRole::Partner))?;
                m.serialize_entry("senderId", t.sender_id.unwrap_or(""))?;
                opt(&mut m, "mentions", t.mentions)?;
                opt(&mut m, "dataItems", t.data_items)?;
                opt(&mut m, "groupId", t.group_id)?;
                opt(&mut m, "sessionId", t.session_id)?;
                m.serialize_entry("taskId", t.task_id)?;
                m.serialize_entry("status", t.status)?;
                opt(&mut m, "products", t.products)?;
                if let Some(h) = t.command_history {
                    m.serialize_entry("commandHistory", &InDialect(h, d))?;
                }
                opt(&mut m, "statusHistory", t.status_history)?;
            }
        }
        m.end()
    }
}

impl Serialize for InDialect<'_, StatusUpdate> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (u, d) = (self.0, self.1);
        let mut m = s.serialize_map(None)?;
        match d {
            Dialect::V1 => {
                m.serialize_entry("type", "status-update")?;
                m.serialize_entry("taskId", &u.task_id)?;
                m.serialize_entry("status", &u.status)?;
                m.serialize_entry("sessionId", u.header.session_id.as_deref().unwrap_or(""))?;
            }
            Dialect::V2 => {
                m.serialize_entry("type", "task-status-update")?;
                v2_header(
                    &mut m,
                    &u.header,
                    &|| format!("status-{}", u.task_id),
                    &u.status.state_changed_at,
                )?;
                m.serialize_entry("taskId", &u.task_id)?;
                m.serialize_entry("status", &u.status)?;
            }
        }
        m.end()
    }
}

impl Serialize for InDialect<'_, ProductChunk> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (p, d) = (self.0, self.1);
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("type", "product-chunk")?;
        if d == Dialect::V2 {
            v2_header(
                &mut m,
                &p.header,
                &|| format!("chunk-{}", p.task_id),
                &crate::time::Timestamp::UNIX_EPOCH,
            )?;
        }
        m.serialize_entry("taskId", &p.task_id)?;
        m.serialize_entry("product", &p.product)?;
        m.serialize_entry("append", &p.append)?;
        m.serialize_entry("lastChunk", &p.last_chunk)?;
        if d == Dialect::V1 {
            m.serialize_entry("sessionId", p.header.session_id.as_deref().unwrap_or(""))?;
        }
        m.end()
    }
}

impl Serialize for InDialect<'_, EventData> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            EventData::Task(t) => InDialect(t, self.1).serialize(s),
            EventData::Command(c) => InDialect(c, self.1).serialize(s),
            EventData::StatusUpdate(u) => InDialect(u, self.1).serialize(s),
            EventData::ProductChunk(p) => InDialect(p, self.1).serialize(s),
        }
    }
}

struct EventResult<'a>(&'a StreamEvent, Dialect);

impl Serialize for EventResult<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("eventSeq", &self.0.seq)?;
        m.serialize_entry("eventData", &InDialect(&self.0.data, self.1))?;
        m.end()
    }
}

fn to_vec<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    // Serialising these types cannot fail: every map key is a string and no value is a float
    // that JSON cannot hold except inside caller-given `serde_json::Value`s, which are valid.
    // Most bodies are a few hundred bytes: one allocation instead of growing from 128.
    let mut out = Vec::with_capacity(512);
    match serde_json::to_writer(&mut out, v) {
        Ok(()) => out,
        Err(_) => Vec::new(),
    }
}

/// A bare command (group mode; histories).
pub fn encode_command(c: &TaskCommand, d: Dialect) -> Vec<u8> {
    to_vec(&InDialect(c, d))
}

/// A bare task (notification body; group mode).
pub fn encode_task(t: &TaskResult, d: Dialect) -> Vec<u8> {
    to_vec(&InDialect(t, d))
}

#[derive(Serialize)]
struct Envelope<'a, P: Serialize, R: Serialize> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a str>,
    id: &'a RpcId,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<P>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<R>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a RpcError>,
}

type NoValue = ();

struct CommandParams<'a>(&'a TaskCommand, Dialect, &'static str);

impl Serialize for CommandParams<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(1))?;
        m.serialize_entry(self.2, &InDialect(self.0, self.1))?;
        m.end()
    }
}

/// The params key that carries the command for `method` in `d`: `message` in v01.00 and for
/// v02 `stream`, `command` for v02 `rpc` and `notification/start` (the v02.00/v02.01 text).
pub fn command_key(method: &Method, d: Dialect) -> &'static str {
    match (d, method) {
        (Dialect::V2, Method::Rpc | Method::NotificationStart) => "command",
        _ => "message",
    }
}

/// A request whose params carry a command (`rpc`, `stream`, `notification/start`).
pub fn encode_command_request(id: &RpcId, method: &Method, c: &TaskCommand, d: Dialect) -> Vec<u8> {
    to_vec(&Envelope::<_, NoValue> {
        jsonrpc: "2.0",
        method: Some(method.as_str()),
        id,
        params: Some(CommandParams(c, d, command_key(method, d))),
        result: None,
        error: None,
    })
}

/// A `notification/set` request.
pub fn encode_notification_set(id: &RpcId, config: &NotificationConfig) -> Vec<u8> {
    to_vec(&Envelope::<_, NoValue> {
        jsonrpc: "2.0",
        method: Some(Method::NotificationSet.as_str()),
        id,
        params: Some(config),
        result: None,
        error: None,
    })
}

/// A `notification/get` or `notification/delete` request.
pub fn encode_notification_id(id: &RpcId, method: &Method, p: &NotificationIdParams) -> Vec<u8> {
    to_vec(&Envelope::<_, NoValue> {
        jsonrpc: "2.0",
        method: Some(method.as_str()),
        id,
        params: Some(p),
        result: None,
        error: None,
    })
}

/// A request with any params, given as JSON text (`group`, or a method this crate does not
/// model); `None` omits `params`.
pub fn encode_request_raw(id: &RpcId, method: &Method, params: Option<&str>) -> Vec<u8> {
    let params = params.and_then(|p| serde_json::value::RawValue::from_string(p.to_owned()).ok());
    to_vec(&Envelope::<_, NoValue> {
        jsonrpc: "2.0",
        method: Some(method.as_str()),
        id,
        params,
        result: None,
        error: None,
    })
}

/// A successful response with any serialisable result.
pub fn encode_result<R: Serialize>(id: &RpcId, result: &R) -> Vec<u8> {
    to_vec(&Envelope::<NoValue, _> {
        jsonrpc: "2.0",
        method: None,
        id,
        params: None,
        result: Some(result),
        error: None,
    })
}

/// A successful `rpc` response carrying a task.
pub fn encode_task_response(id: &RpcId, t: &TaskResult, d: Dialect) -> Vec<u8> {
    encode_parts_response(id, &ResultParts::of(t), d)
}

/// [`encode_task_response`] of a result given by its parts.
pub(crate) fn encode_parts_response(id: &RpcId, t: &ResultParts<'_>, d: Dialect) -> Vec<u8> {
    encode_result(id, &InDialect(t, d))
}

/// An error response (`result` omitted).
pub fn encode_error(id: &RpcId, e: &RpcError) -> Vec<u8> {
    to_vec(&Envelope::<NoValue, NoValue> {
        jsonrpc: "2.0",
        method: None,
        id,
        params: None,
        result: None,
        error: Some(e),
    })
}

/// One stream event as its JSON-RPC response (`{"jsonrpc","id","result":{eventSeq,eventData}}`),
/// not yet SSE-framed.
pub fn encode_stream_event(id: &RpcId, e: &StreamEvent, d: Dialect) -> Vec<u8> {
    encode_result(id, &EventResult(e, d))
}
