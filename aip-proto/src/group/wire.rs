//! Group-mode wire: the messages on a group's fanout exchange, the join invitation (JSON-RPC
//! `group` and the v02.01 inbox form) and the broker names the SDK uses.
//!
//! | | v01.00 (seed) | v02.x (acps-sdk 2.x) |
//! |---|---|---|
//! | management command | `group-mgmt-message` + `groupMgmtCommand` | `group-mgmt-command` + `command` (+ required `groupId`) |
//! | management reply | `group-mgmt-message` + `groupMemberStatus` | `group-mgmt-result` + `status` |
//! | business | `message` / `task` | `task-command` / `task-result` |
//!
//! Bodies are bare JSON (no JSON-RPC envelope). Decoding accepts both dialects; encoding
//! writes the chosen one and omits absent fields.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::DecodeError;
use crate::time::Timestamp;
use crate::wire::{
    decode_command, decode_task, encode_command, encode_task, DataItem, Dialect, Header, Mentions,
    SenderRole, TaskCommand, TaskResult,
};

/// Topic exchange of the v02.01 inboxes.
pub const INBOX_EXCHANGE: &str = "inbox.topic";
/// `x-expires` of an inbox queue: 60 days (ms), as the SDK declares it.
pub const INBOX_QUEUE_EXPIRES_MS: u64 = 60 * 24 * 60 * 60 * 1000;
/// `x-message-ttl` of an inbox queue: 7 days (ms), as the SDK declares it.
pub const INBOX_MESSAGE_TTL_MS: u64 = 7 * 24 * 60 * 60 * 1000;
/// The clock skew the SDK allows when checking an invitation's expiry.
pub const INVITATION_CLOCK_SKEW_MS: u64 = 30_000;
/// JSON-RPC / invitation error: the partner refused the invitation (SDK code, not in the spec).
pub const INVITATION_REJECTED: i64 = -32020;
/// JSON-RPC / invitation error: the partner could not connect to the broker (SDK code).
pub const CONNECTION_FAILED: i64 = -32021;

/// `group_{leaderAIC}_{groupId}`: the group's fanout exchange (durable, auto-delete).
pub fn exchange_name(leader: &str, group_id: &str) -> String {
    format!("group_{leader}_{group_id}")
}

/// `group_{leaderAIC}_{groupId}_{memberAIC}`: a member's queue (durable, auto-delete).
pub fn queue_name(leader: &str, group_id: &str, member: &str) -> String {
    format!("group_{leader}_{group_id}_{member}")
}

/// `inbox_{AIC}`: an agent's inbox queue, bound to [`INBOX_EXCHANGE`] with its own name.
pub fn inbox_queue_name(aic: &str) -> String {
    format!("inbox_{aic}")
}

/// Whether `id` is a valid group id (`[A-Za-z0-9-]{1,128}`, what the SDK enforces).
pub fn is_valid_group_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A management command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MgmtKind {
    /// Ask the mentioned members for their status.
    GetStatus,
    /// The mentioned members leave (or a member announces it leaves).
    LeaveGroup,
    /// The mentioned members stop publishing.
    Mute,
    /// The mentioned members may publish again.
    Unmute,
    /// The SDK's dissolve (mentions `"all"`); not in the spec. Members leave.
    Disband,
    /// Anything else (ignored).
    Other(String),
}

impl MgmtKind {
    /// The wire string.
    pub fn as_str(&self) -> &str {
        match self {
            MgmtKind::GetStatus => "get-status",
            MgmtKind::LeaveGroup => "leave-group",
            MgmtKind::Mute => "mute",
            MgmtKind::Unmute => "unmute",
            MgmtKind::Disband => "disband",
            MgmtKind::Other(s) => s,
        }
    }

    /// Parses a wire string (case-insensitive).
    pub fn parse(s: &str) -> MgmtKind {
        match s.to_ascii_lowercase().as_str() {
            "get-status" => MgmtKind::GetStatus,
            "leave-group" => MgmtKind::LeaveGroup,
            "mute" => MgmtKind::Mute,
            "unmute" => MgmtKind::Unmute,
            "disband" => MgmtKind::Disband,
            _ => MgmtKind::Other(s.to_owned()),
        }
    }
}

/// `GroupMemberStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MemberStatus {
    /// Whether the member is in the group.
    pub connected: bool,
    /// Whether it is muted.
    #[serde(default)]
    pub muted: bool,
}

/// A management command (`group-mgmt-command` / v01.00 `group-mgmt-message`).
#[derive(Clone, Debug, PartialEq)]
pub struct MgmtCommand {
    /// Message fields (`mentions`, `groupId`, `sessionId` live here).
    pub header: Header,
    /// What is asked.
    pub command: MgmtKind,
}

/// A member's status report (`group-mgmt-result` / v01.00 `group-mgmt-message`).
#[derive(Clone, Debug, PartialEq)]
pub struct MgmtResult {
    /// Message fields.
    pub header: Header,
    /// The status.
    pub status: MemberStatus,
}

/// One message on a group exchange.
#[derive(Clone, Debug, PartialEq)]
pub enum GroupMessage {
    /// Leader → partners.
    Command(TaskCommand),
    /// Partner → group.
    Result(TaskResult),
    /// Management command.
    Mgmt(MgmtCommand),
    /// Management reply.
    MgmtResult(MgmtResult),
}

impl GroupMessage {
    /// The sender's AIC.
    pub fn sender_id(&self) -> Option<&str> {
        match self {
            GroupMessage::Command(c) => Some(&c.sender_id),
            GroupMessage::Result(r) => r.header.sender_id.as_deref(),
            GroupMessage::Mgmt(m) => m.header.sender_id.as_deref(),
            GroupMessage::MgmtResult(m) => m.header.sender_id.as_deref(),
        }
    }

    /// The message id (v01.00 tasks have none: their `id` is the task id).
    pub fn message_id(&self) -> Option<&str> {
        match self {
            GroupMessage::Command(c) => Some(&c.id),
            GroupMessage::Result(r) => r.header.id.as_deref(),
            GroupMessage::Mgmt(m) => m.header.id.as_deref(),
            GroupMessage::MgmtResult(m) => m.header.id.as_deref(),
        }
    }

    /// The group id, where the message carries one.
    pub fn group_id(&self) -> Option<&str> {
        match self {
            GroupMessage::Command(c) => c.group_id.as_deref(),
            GroupMessage::Result(r) => r.header.group_id.as_deref(),
            GroupMessage::Mgmt(m) => m.header.group_id.as_deref(),
            GroupMessage::MgmtResult(m) => m.header.group_id.as_deref(),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMgmt {
    id: Option<String>,
    sent_at: Option<Timestamp>,
    sender_role: Option<SenderRole>,
    sender_id: Option<String>,
    mentions: Option<Mentions>,
    data_items: Option<Vec<DataItem>>,
    group_id: Option<String>,
    session_id: Option<String>,
    command: Option<String>,
    group_mgmt_command: Option<String>,
    status: Option<MemberStatus>,
    group_member_status: Option<MemberStatus>,
}

impl RawMgmt {
    fn header(&mut self) -> Header {
        crate::wire::take_header!(self)
    }
}

fn shape(detail: impl Into<String>) -> DecodeError {
    DecodeError::Shape {
        what: "group message",
        detail: detail.into(),
    }
}

/// Decodes one group message in either dialect, and says which.
pub fn decode_group_message(body: &[u8]) -> Result<(GroupMessage, Dialect), DecodeError> {
    #[derive(Deserialize)]
    struct Ty {
        #[serde(rename = "type")]
        ty: Option<String>,
    }
    let ty: Ty = serde_json::from_slice(body).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            DecodeError::Json(e.to_string())
        } else {
            shape(e.to_string())
        }
    })?;
    let ty = ty.ty.unwrap_or_default();
    match ty.as_str() {
        "message" | "task-command" => {
            decode_command(body).map(|(c, d)| (GroupMessage::Command(c), d))
        }
        "task" | "task-result" => decode_task(body).map(|(t, d)| (GroupMessage::Result(t), d)),
        "group-mgmt-command" | "group-mgmt-result" | "group-mgmt-message" => {
            let mut raw: RawMgmt =
                serde_json::from_slice(body).map_err(|e| shape(e.to_string()))?;
            let dialect = if ty == "group-mgmt-message" {
                Dialect::V1
            } else {
                Dialect::V2
            };
            let header = raw.header();
            if let Some(status) = raw.status.or(raw.group_member_status) {
                if ty != "group-mgmt-command" {
                    return Ok((
                        GroupMessage::MgmtResult(MgmtResult { header, status }),
                        dialect,
                    ));
                }
            }
            match raw.command.or(raw.group_mgmt_command) {
                Some(c) if ty != "group-mgmt-result" => Ok((
                    GroupMessage::Mgmt(MgmtCommand {
                        header,
                        command: MgmtKind::parse(&c),
                    }),
                    dialect,
                )),
                _ => Err(shape(format!("{ty} without a command or a status"))),
            }
        }
        other => Err(DecodeError::UnknownType {
            what: "group message",
            found: other.to_owned(),
        }),
    }
}

fn header_into(m: &mut Map<String, Value>, h: &Header, v1: bool) {
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            m.insert(k.to_owned(), v);
        }
    };
    put("id", h.id.clone().map(Value::String));
    put("sentAt", h.sent_at.map(|t| Value::String(t.to_rfc3339())));
    put(
        "senderRole",
        h.sender_role.map(|r| Value::String(r.as_str().to_owned())),
    );
    put("senderId", h.sender_id.clone().map(Value::String));
    put(
        "mentions",
        h.mentions
            .as_ref()
            .map(|x| serde_json::to_value(x).unwrap_or(Value::Null)),
    );
    if !v1 {
        put(
            "dataItems",
            h.data_items
                .as_ref()
                .map(|x| serde_json::to_value(x).unwrap_or(Value::Null)),
        );
    }
    put("groupId", h.group_id.clone().map(Value::String));
    put("sessionId", h.session_id.clone().map(Value::String));
}

/// Encodes one group message in `dialect` (absent fields omitted).
pub fn encode_group_message(m: &GroupMessage, dialect: Dialect) -> Vec<u8> {
    let v1 = dialect == Dialect::V1;
    match m {
        GroupMessage::Command(c) => encode_command(c, dialect),
        GroupMessage::Result(t) => encode_task(t, dialect),
        GroupMessage::Mgmt(c) => {
            let kind = Value::from(c.command.as_str());
            let (ty, key) = if v1 {
                ("group-mgmt-message", "groupMgmtCommand")
            } else {
                ("group-mgmt-command", "command")
            };
            mgmt_object(ty, &c.header, v1, key, kind)
        }
        GroupMessage::MgmtResult(r) => {
            let status = serde_json::to_value(r.status).unwrap_or(Value::Null);
            let (ty, key) = if v1 {
                ("group-mgmt-message", "groupMemberStatus")
            } else {
                ("group-mgmt-result", "status")
            };
            mgmt_object(ty, &r.header, v1, key, status)
        }
    }
}

fn mgmt_object(ty: &str, h: &Header, v1: bool, key: &str, value: Value) -> Vec<u8> {
    let mut o = Map::new();
    o.insert("type".into(), Value::from(ty));
    header_into(&mut o, h, v1);
    o.insert(key.into(), value);
    serde_json::to_vec(&o).unwrap_or_default()
}

/// An agent in an invitation (`{aic}`; the seed also lists `skills`, kept if present).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentRef {
    /// Its AIC.
    pub aic: String,
    /// v01.00 `skills` (ids), if the sender gave them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<Value>>,
}

impl AgentRef {
    /// An agent with only its AIC.
    pub fn new(aic: impl Into<String>) -> Self {
        AgentRef {
            aic: aic.into(),
            skills: None,
        }
    }
}

/// `group`: who is in it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupInfo {
    /// The group id.
    pub group_id: String,
    /// The leader.
    pub leader: AgentRef,
    /// The partners invited so far (including the invitee).
    #[serde(default)]
    pub partners: Vec<AgentRef>,
}

/// `server`: where the broker is (RPC invitation only).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerConfig {
    /// Host name.
    pub host: String,
    /// Port (5672 plain, 5671 TLS).
    pub port: u16,
    /// Virtual host.
    pub vhost: String,
    /// `"user:password"` (PLAIN); absent or null means TLS client certificate + EXTERNAL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_token: Option<String>,
}

impl ServerConfig {
    /// The PLAIN credentials in `accessToken`, if any. An empty or colon-less token is an
    /// error (the SDK refuses it too).
    pub fn plain_credentials(&self) -> Result<Option<(&str, &str)>, String> {
        match self.access_token.as_deref() {
            None => Ok(None),
            Some(t) => t
                .split_once(':')
                .map(Some)
                .ok_or_else(|| "malformed accessToken: expected user:password".to_owned()),
        }
    }
}

/// `amqp`: the group exchange.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AmqpConfig {
    /// The exchange name.
    pub exchange: String,
    /// `fanout`.
    #[serde(default = "fanout")]
    pub exchange_type: String,
    /// `""`.
    #[serde(default)]
    pub routing_key: String,
}

fn fanout() -> String {
    "fanout".into()
}

impl AmqpConfig {
    /// A fanout exchange with an empty routing key.
    pub fn fanout(exchange: impl Into<String>) -> Self {
        AmqpConfig {
            exchange: exchange.into(),
            exchange_type: fanout(),
            routing_key: String::new(),
        }
    }
}

/// `params` of the JSON-RPC `group` method (v01.00 / v02.00, the v02.01 fallback).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JoinParams {
    /// A label such as `rabbitmq:4.0` (not checked).
    pub protocol: String,
    /// The group.
    pub group: GroupInfo,
    /// The broker.
    pub server: ServerConfig,
    /// The exchange.
    pub amqp: AmqpConfig,
}

/// The reply to `group` the SDK 2.1.0 leader accepts (v02.00 shape) plus the v02.01 spec's
/// `status`/`groupId` (pydantic ignores them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinReply {
    /// `agent-{AIC}`.
    pub connection_name: String,
    /// The virtual host.
    pub vhost: String,
    /// Broker node (the SDK writes `unknown`).
    pub node_name: String,
    /// The member's queue.
    pub queue_name: String,
    /// Anything identifying the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_id: Option<String>,
    /// v02.01: `joining`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// v02.01: the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
}

/// v02.01 inbox invitation (`type:"group-invitation"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InboxInvitation {
    /// `group-invitation`.
    #[serde(rename = "type")]
    pub ty: String,
    /// A label such as `rabbitmq:4.2`.
    pub protocol: String,
    /// RFC 3339 expiry.
    pub expires_at: String,
    /// Opaque token echoed in a rejection.
    pub invitation_token: String,
    /// The group.
    pub group: GroupInfo,
    /// The exchange.
    pub amqp: AmqpConfig,
}

/// The error object of an invitation rejection.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InvitationErrorBody {
    /// -32020 rejected, -32021 connection failed.
    pub code: i64,
    /// Human text.
    pub message: String,
    /// `{errorType, details}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// v02.01 rejection sent to the leader's inbox (`type:"group-invitation-error"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvitationError {
    /// `group-invitation-error`.
    #[serde(rename = "type")]
    pub ty: String,
    /// The group.
    pub group_id: String,
    /// Who refused.
    pub partner_aic: String,
    /// The invitation's token.
    pub invitation_token: String,
    /// Why.
    pub error: InvitationErrorBody,
}

/// What arrives in an inbox.
#[derive(Clone, Debug, PartialEq)]
pub enum InboxMessage {
    /// An invitation (partner inbox).
    Invitation(InboxInvitation),
    /// A rejection (leader inbox).
    InvitationError(InvitationError),
}

/// Decodes an inbox message.
pub fn decode_inbox_message(body: &[u8]) -> Result<InboxMessage, DecodeError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| DecodeError::Json(e.to_string()))?;
    let ty = v
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let bad = |e: serde_json::Error| DecodeError::Shape {
        what: "inbox message",
        detail: e.to_string(),
    };
    match ty.as_str() {
        "group-invitation" => serde_json::from_value(v)
            .map(InboxMessage::Invitation)
            .map_err(bad),
        "group-invitation-error" => serde_json::from_value(v)
            .map(InboxMessage::InvitationError)
            .map_err(bad),
        _ => Err(DecodeError::UnknownType {
            what: "inbox message",
            found: ty,
        }),
    }
}
