//! The public types of a group leader: its configuration, the members as it knows them,
//! what it reports and emits, the commands it publishes and the group's phase.

use std::time::Duration;

use crate::group::wire::MemberStatus;
use crate::group::Publish;
use crate::time::Timestamp;
use crate::wire::{CommandKind, DataItem, Dialect, JsonObject, Mentions, TaskResult};

/// Configuration of one group.
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    /// The leader's AIC.
    pub leader_id: String,
    /// The group id (`[A-Za-z0-9-]{1,128}`).
    pub group_id: String,
    /// The dialect to publish in.
    pub dialect: Dialect,
    /// How long members have to answer `get-status` before they count as not connected.
    pub status_timeout: Duration,
    /// How long an inbox invitation is valid.
    pub invitation_ttl: Duration,
    /// Seed of the ids this engine mints.
    pub id_seed: u64,
}

impl LeaderConfig {
    /// A v02 group with a 5 s status deadline and 300 s invitations (the SDK's default).
    pub fn new(leader_id: &str, group_id: &str) -> Self {
        LeaderConfig {
            leader_id: leader_id.into(),
            group_id: group_id.into(),
            dialect: Dialect::V2,
            status_timeout: Duration::from_secs(5),
            invitation_ttl: Duration::from_secs(300),
            id_seed: 0,
        }
    }
}

/// A member's connection as the leader knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connection {
    /// Invited; no answer yet.
    Invited,
    /// In the group.
    Connected,
    /// Did not answer `get-status` in time (crashed, or cut off).
    NotConnected,
    /// Left (or was removed, or refused the invitation).
    Left,
}

/// One member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberView {
    /// Connection.
    pub connection: Connection,
    /// Muted by the leader (as last reported by the member).
    pub muted: bool,
    /// The open inbox invitation's token.
    pub invitation: Option<String>,
    pub(super) awaiting_status: Option<Timestamp>,
    pub(super) invitation_expires: Option<Timestamp>,
}

/// What the application learns.
#[derive(Clone, Debug, PartialEq)]
pub enum LeaderEvent {
    /// A partner reported `connected:true` for the first time (or again after a loss).
    MemberJoined {
        /// The partner.
        partner: String,
    },
    /// A status report (`get-status`, mute, unmute).
    MemberStatus {
        /// The partner.
        partner: String,
        /// What it said.
        status: MemberStatus,
    },
    /// A member did not answer `get-status` before the deadline: now not connected.
    MemberLost {
        /// The partner.
        partner: String,
    },
    /// A member left (its `connected:false`).
    MemberLeft {
        /// The partner.
        partner: String,
    },
    /// A (task, member) moved forward.
    TaskUpdate {
        /// The partner.
        partner: String,
        /// The result as received.
        result: Box<TaskResult>,
    },
    /// A partner refused (or could not take) the invitation.
    InvitationRejected {
        /// The partner.
        partner: String,
        /// -32020 rejected, -32021 connection failed, or another JSON-RPC code.
        code: i64,
        /// Its message.
        message: String,
    },
    /// An inbox invitation expired without the partner joining.
    InvitationExpired {
        /// The partner.
        partner: String,
    },
}

/// What the driver executes.
#[derive(Clone, Debug, PartialEq)]
pub enum LeaderOutput {
    /// Publish on the broker.
    Publish(Publish),
    /// For the application.
    Event(LeaderEvent),
}

/// A command to publish on the group.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupCommand {
    /// start, continue, complete, cancel, get.
    pub kind: CommandKind,
    /// The task.
    pub task_id: String,
    /// The session.
    pub session_id: String,
    /// Who should act (`None`: nobody named; SDK partners act, v01.00 partners decide).
    pub mentions: Option<Mentions>,
    /// Content.
    pub data_items: Option<Vec<DataItem>>,
    /// Parameters.
    pub command_params: Option<JsonObject>,
}

impl GroupCommand {
    /// A command with text input.
    pub fn new(kind: CommandKind, task_id: &str, session_id: &str, mentions: Mentions) -> Self {
        GroupCommand {
            kind,
            task_id: task_id.into(),
            session_id: session_id.into(),
            mentions: Some(mentions),
            data_items: None,
            command_params: None,
        }
    }

    /// With a text data item.
    pub fn text(mut self, text: &str) -> Self {
        self.data_items = Some(vec![DataItem::text(text)]);
        self
    }
}

/// The group's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupPhase {
    /// Working.
    Open,
    /// `disband` sent.
    Disbanded,
}
