//! JSON-RPC 2.0 envelopes (§5.1) and the notification parameter objects (§6.3).

use core::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Number;

use crate::error::RpcError;
use crate::wire::command::TaskCommand;
use crate::wire::Dialect;

/// A request `id`: a string, a number or null (absent reads as null). A response echoes it
/// exactly (a number stays a number).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum RpcId {
    /// `null` or absent.
    #[default]
    Null,
    /// A string id.
    Str(String),
    /// A numeric id, kept as written.
    Num(Number),
}

impl fmt::Display for RpcId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RpcId::Null => f.write_str("null"),
            RpcId::Str(s) => write!(f, "{s:?}"),
            RpcId::Num(n) => write!(f, "{n}"),
        }
    }
}

impl Serialize for RpcId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RpcId::Null => s.serialize_unit(),
            RpcId::Str(v) => s.serialize_str(v),
            RpcId::Num(n) => n.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for RpcId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = RpcId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, a number or null")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RpcId, E> {
                Ok(RpcId::Str(v.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<RpcId, E> {
                Ok(RpcId::Str(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RpcId, E> {
                Ok(RpcId::Num(v.into()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<RpcId, E> {
                Ok(RpcId::Num(v.into()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<RpcId, E> {
                Number::from_f64(v)
                    .map(RpcId::Num)
                    .ok_or_else(|| E::custom("id is not a finite number"))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<RpcId, E> {
                Ok(RpcId::Null)
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<RpcId, E> {
                Ok(RpcId::Null)
            }
        }
        d.deserialize_any(V)
    }
}

/// The method of a request (also its relative URL).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Method {
    /// `rpc`.
    Rpc,
    /// `stream`.
    Stream,
    /// `notification/set`.
    NotificationSet,
    /// `notification/get`.
    NotificationGet,
    /// `notification/delete`.
    NotificationDelete,
    /// `notification/start`.
    NotificationStart,
    /// `group` (group-mode invitation; not handled in direct mode).
    Group,
    /// Anything else (answered with -32601).
    Other(String),
}

impl Method {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Rpc => "rpc",
            Method::Stream => "stream",
            Method::NotificationSet => "notification/set",
            Method::NotificationGet => "notification/get",
            Method::NotificationDelete => "notification/delete",
            Method::NotificationStart => "notification/start",
            Method::Group => "group",
            Method::Other(s) => s,
        }
    }

    /// Parses a method name.
    pub fn parse(s: &str) -> Method {
        match s {
            "rpc" => Method::Rpc,
            "stream" => Method::Stream,
            "notification/set" => Method::NotificationSet,
            "notification/get" => Method::NotificationGet,
            "notification/delete" => Method::NotificationDelete,
            "notification/start" => Method::NotificationStart,
            "group" => Method::Group,
            other => Method::Other(other.to_owned()),
        }
    }
}

/// `NotificationConfig`: where and how a partner notifies (§6.3.1).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotificationConfig {
    /// Assigned by the partner; absent when the leader creates a new configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The leader's receiver URL.
    pub url: String,
    /// Sent back in `X-ACPS-AIP-Notification-Token`.
    pub token: String,
    /// The task the configuration belongs to.
    pub task_id: String,
}

impl fmt::Debug for NotificationConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NotificationConfig")
            .field("id", &self.id)
            .field("url", &self.url)
            .field("token", &"<redacted>")
            .field("task_id", &self.task_id)
            .finish()
    }
}

/// `NotificationIdRequest` params of `notification/get` and `notification/delete`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotificationIdParams {
    /// The task.
    pub task_id: String,
    /// One configuration; absent means all of the task's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notification_config_id: Option<String>,
}

/// What a request carries, by method.
#[derive(Clone, Debug, PartialEq)]
pub enum Params {
    /// `rpc`, `stream`, `notification/start`: the command (`params.message` or
    /// `params.command`).
    /// Shared: a partner keeps the start in the task's history and answers the request from
    /// the same command (no copy).
    Command(std::sync::Arc<TaskCommand>),
    /// `notification/set`.
    NotificationSet(NotificationConfig),
    /// `notification/get` / `notification/delete`.
    NotificationId(NotificationIdParams),
    /// Any other method: the params as received (JSON text), if any.
    Other(Option<String>),
}

/// A decoded JSON-RPC request.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// Echoed in the answer.
    pub id: RpcId,
    /// What is asked.
    pub method: Method,
    /// The parameters.
    pub params: Params,
    /// The dialect the request was written in; the answer uses it.
    pub dialect: Dialect,
}

/// A decoded JSON-RPC response: a result or an error.
#[derive(Clone, Debug, PartialEq)]
pub struct Response<T> {
    /// The id it answers (`Null` when the server could not read the request's).
    pub id: RpcId,
    /// The outcome.
    pub outcome: Result<T, RpcError>,
}

/// `result` of a successful `rpc`: a task, or (v01.00) a plain message.
#[derive(Clone, Debug, PartialEq)]
pub enum RpcResult {
    /// The task.
    Task(Box<crate::wire::TaskResult>),
    /// A message.
    Message(Box<TaskCommand>),
}
