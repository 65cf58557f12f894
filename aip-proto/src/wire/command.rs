//! Leader → partner: [`TaskCommand`] (v01.00 `Message`, v02 `TaskCommand`) and the typed
//! readings of its `commandParams` ([`StartParams`], [`GetParams`], [`ReStreamParams`],
//! [`NotificationStartParams`]).
//!
//! `commandParams` stays a JSON object on the wire type, so nothing a peer sends is lost; the
//! typed readers accept both dialects' keys (`responseTimeout` and v02's `timeout`,
//! `lastMessageSentAt` and v02's `lastCommandSentAt`) and numbers written as floats.

use core::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::time::Timestamp;
use crate::wire::data::{DataItem, JsonObject, Mentions, SenderRole, TaskState};

/// What a command asks (`TaskCommandType` in v02, `TaskCommand` in v01.00).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CommandKind {
    /// Read the task.
    Get,
    /// Create the task.
    Start,
    /// Give more input (awaiting-input) or ask for more work (awaiting-completion).
    Continue,
    /// Stop the task.
    Cancel,
    /// Accept the products (awaiting-completion).
    Complete,
    /// Reconnect a stream (method `stream` only).
    ReStream,
    /// A command this implementation does not know (answered with -32602).
    Other(String),
}

impl CommandKind {
    /// The wire string.
    pub fn as_str(&self) -> &str {
        match self {
            CommandKind::Get => "get",
            CommandKind::Start => "start",
            CommandKind::Continue => "continue",
            CommandKind::Cancel => "cancel",
            CommandKind::Complete => "complete",
            CommandKind::ReStream => "re-stream",
            CommandKind::Other(s) => s,
        }
    }

    /// Parses a command name (case-insensitive; `restream` and `re_stream` too).
    pub fn parse(s: &str) -> CommandKind {
        const KNOWN: [(&str, CommandKind); 8] = [
            ("get", CommandKind::Get),
            ("start", CommandKind::Start),
            ("continue", CommandKind::Continue),
            ("cancel", CommandKind::Cancel),
            ("complete", CommandKind::Complete),
            ("re-stream", CommandKind::ReStream),
            ("restream", CommandKind::ReStream),
            ("re_stream", CommandKind::ReStream),
        ];
        // The exact spellings first (what peers send), then any case.
        KNOWN
            .into_iter()
            .find(|(k, _)| *k == s)
            .or_else(|| KNOWN.into_iter().find(|(k, _)| k.eq_ignore_ascii_case(s)))
            .map_or_else(|| CommandKind::Other(s.to_owned()), |(_, c)| c)
    }
}

impl fmt::Display for CommandKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for CommandKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for CommandKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(CommandKind::parse(&s))
    }
}

/// A leader's command: v01.00 `Message` (`type:"message"`) or v02 `TaskCommand`
/// (`type:"task-command"`). The same value encodes in either dialect
/// ([`crate::wire::encode_command`]).
#[derive(Clone, Debug, PartialEq)]
pub struct TaskCommand {
    /// Message id, unique per sender (partners use it to recognise a re-sent command).
    pub id: String,
    /// When it was sent.
    pub sent_at: Timestamp,
    /// `leader` (or `partner` for a partner's plain message in v01.00).
    pub sender_role: SenderRole,
    /// The sender's AIC.
    pub sender_id: String,
    /// Group mode: who should act.
    pub mentions: Option<Mentions>,
    /// What is asked (required in v02; a v01.00 message may carry none).
    pub command: Option<CommandKind>,
    /// Parameters of the command.
    pub command_params: Option<JsonObject>,
    /// Content (required in v01.00, where absent is written `[]`).
    pub data_items: Option<Vec<DataItem>>,
    /// The task (may be absent on a v02 start: the partner then assigns one).
    pub task_id: Option<String>,
    /// Group mode: the group.
    pub group_id: Option<String>,
    /// The session.
    pub session_id: Option<String>,
}

impl TaskCommand {
    /// A leader's command with only the required fields set.
    pub fn new(
        id: impl Into<String>,
        sent_at: Timestamp,
        sender_id: impl Into<String>,
        command: CommandKind,
    ) -> Self {
        TaskCommand {
            id: id.into(),
            sent_at,
            sender_role: SenderRole::Leader,
            sender_id: sender_id.into(),
            mentions: None,
            command: Some(command),
            command_params: None,
            data_items: None,
            task_id: None,
            group_id: None,
            session_id: None,
        }
    }

    /// The command, or `Other("")` for a plain message.
    pub fn kind(&self) -> CommandKind {
        self.command
            .clone()
            .unwrap_or_else(|| CommandKind::Other(String::new()))
    }

    /// The data items (empty if absent).
    pub fn items(&self) -> &[DataItem] {
        self.data_items.as_deref().unwrap_or(&[])
    }

    fn param(&self, key: &str) -> Option<&Value> {
        self.command_params
            .as_ref()
            .and_then(|p| p.get(key))
            .filter(|v| !v.is_null())
    }

    fn param_u64(&self, key: &str) -> Option<u64> {
        let v = self.param(key)?;
        v.as_u64()
            .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
            .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
    }

    fn param_str(&self, key: &str) -> Option<&str> {
        self.param(key).and_then(Value::as_str)
    }

    fn param_time(&self, key: &str) -> Option<Timestamp> {
        self.param_str(key)
            .and_then(|s| Timestamp::parse_rfc3339(s).ok())
    }

    /// `commandParams` read as start parameters.
    pub fn start_params(&self) -> StartParams {
        StartParams {
            response_timeout: self
                .param_u64("responseTimeout")
                .or_else(|| self.param_u64("timeout"))
                .map(Duration::from_millis),
            awaiting_input_timeout: self
                .param_u64("awaitingInputTimeout")
                .map(Duration::from_millis),
            awaiting_completion_timeout: self
                .param_u64("awaitingCompletionTimeout")
                .map(Duration::from_millis),
            max_products_bytes: self.param_u64("maxProductsBytes"),
        }
    }

    /// `commandParams` read as get parameters.
    pub fn get_params(&self) -> GetParams {
        GetParams {
            last_command_sent_at: self
                .param_time("lastCommandSentAt")
                .or_else(|| self.param_time("lastMessageSentAt")),
            last_state_changed_at: self.param_time("lastStateChangedAt"),
        }
    }

    /// `commandParams` read as re-stream parameters.
    pub fn restream_params(&self) -> ReStreamParams {
        ReStreamParams {
            last_event_seq: self.param_u64("lastEventSeq"),
        }
    }

    /// `commandParams` read as notification start parameters (`None` without a config id).
    pub fn notification_start_params(&self) -> Option<NotificationStartParams> {
        let id = self.param_str("notificationConfigId")?.to_owned();
        let states = self
            .param("notifyOnStates")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().and_then(TaskState::parse))
                    .collect()
            })
            .unwrap_or_default();
        Some(NotificationStartParams {
            notification_config_id: id,
            notify_on_states: states,
        })
    }
}

/// Start parameters (v01.00 keys; v02's `timeout` is read as the response timeout).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StartParams {
    /// How long the start request may wait for its answer.
    pub response_timeout: Option<Duration>,
    /// How long the task may wait in awaiting-input before it is canceled.
    pub awaiting_input_timeout: Option<Duration>,
    /// How long the task may wait in awaiting-completion before it is completed.
    pub awaiting_completion_timeout: Option<Duration>,
    /// Most bytes of products the partner may deliver.
    pub max_products_bytes: Option<u64>,
}

impl StartParams {
    /// The parameters as `commandParams` (milliseconds; absent fields omitted). v02 peers get
    /// `timeout` for the response timeout as well.
    pub fn to_params(&self, dialect: crate::wire::Dialect) -> JsonObject {
        let mut m = JsonObject::new();
        let ms = |d: Duration| Value::from(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        if let Some(d) = self.response_timeout {
            m.insert("responseTimeout".into(), ms(d));
            if dialect == crate::wire::Dialect::V2 {
                m.insert("timeout".into(), ms(d));
            }
        }
        if let Some(d) = self.awaiting_input_timeout {
            m.insert("awaitingInputTimeout".into(), ms(d));
        }
        if let Some(d) = self.awaiting_completion_timeout {
            m.insert("awaitingCompletionTimeout".into(), ms(d));
        }
        if let Some(b) = self.max_products_bytes {
            m.insert("maxProductsBytes".into(), b.into());
        }
        m
    }
}

/// Get parameters: only history newer than these instants is returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GetParams {
    /// `lastCommandSentAt` (v02) / `lastMessageSentAt` (v01.00).
    pub last_command_sent_at: Option<Timestamp>,
    /// `lastStateChangedAt`.
    pub last_state_changed_at: Option<Timestamp>,
}

impl GetParams {
    /// The parameters as `commandParams`: v01.00 writes both keys (null when absent, as its
    /// schema requires them), v02 only the present ones.
    pub fn to_params(&self, dialect: crate::wire::Dialect) -> JsonObject {
        let mut m = JsonObject::new();
        let t = |t: Option<Timestamp>| t.map_or(Value::Null, |t| Value::String(t.to_rfc3339()));
        match dialect {
            crate::wire::Dialect::V1 => {
                m.insert("lastMessageSentAt".into(), t(self.last_command_sent_at));
                m.insert("lastStateChangedAt".into(), t(self.last_state_changed_at));
            }
            crate::wire::Dialect::V2 => {
                if self.last_command_sent_at.is_some() {
                    m.insert("lastCommandSentAt".into(), t(self.last_command_sent_at));
                }
                if self.last_state_changed_at.is_some() {
                    m.insert("lastStateChangedAt".into(), t(self.last_state_changed_at));
                }
            }
        }
        m
    }
}

/// Re-stream parameters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReStreamParams {
    /// The last event seen; absent replays everything.
    pub last_event_seq: Option<u64>,
}

/// `NotificationStartParams`: which configuration to notify and on which states.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotificationStartParams {
    /// A configuration registered with `notification/set`.
    pub notification_config_id: String,
    /// States to notify on; empty means every state change.
    pub notify_on_states: Vec<TaskState>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(params: &str) -> TaskCommand {
        let mut c = TaskCommand::new("m", Timestamp::UNIX_EPOCH, "L", CommandKind::Start);
        c.command_params = serde_json::from_str(params).unwrap();
        c
    }

    #[test]
    fn start_params_read_both_dialects_keys() {
        let p = cmd(r#"{"responseTimeout":1000,"awaitingInputTimeout":2000.0,"awaitingCompletionTimeout":"3000","maxProductsBytes":10}"#).start_params();
        assert_eq!(p.response_timeout, Some(Duration::from_secs(1)));
        assert_eq!(p.awaiting_input_timeout, Some(Duration::from_secs(2)));
        assert_eq!(p.awaiting_completion_timeout, Some(Duration::from_secs(3)));
        assert_eq!(p.max_products_bytes, Some(10));
        let v2 = cmd(r#"{"timeout":500,"maxProductsBytes":null}"#).start_params();
        assert_eq!(v2.response_timeout, Some(Duration::from_millis(500)));
        assert_eq!(v2.max_products_bytes, None);
    }

    #[test]
    fn get_params_read_v1_and_v2_names_and_nulls() {
        let p =
            cmd(r#"{"lastMessageSentAt":"2025-09-01T12:00:00+08:00","lastStateChangedAt":null}"#)
                .get_params();
        assert!(p.last_command_sent_at.is_some());
        assert_eq!(p.last_state_changed_at, None);
        assert_eq!(
            Value::Object(GetParams::default().to_params(crate::wire::Dialect::V1)),
            serde_json::json!({"lastMessageSentAt": null, "lastStateChangedAt": null})
        );
        assert!(GetParams::default()
            .to_params(crate::wire::Dialect::V2)
            .is_empty());
    }

    #[test]
    fn notification_start_params_need_a_config_id() {
        let p = cmd(r#"{"notificationConfigId":"n-1","notifyOnStates":["working","AwaitingCompletion","bogus"]}"#)
            .notification_start_params()
            .unwrap();
        assert_eq!(
            p.notify_on_states,
            vec![TaskState::Working, TaskState::AwaitingCompletion]
        );
        assert!(cmd(r#"{"notifyOnStates":null}"#)
            .notification_start_params()
            .is_none());
    }
}
