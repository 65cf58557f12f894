//! The leader side of one group: [`GroupLeader`].
//!
//! The leader owns the group exchange and its own queue on it, invites partners (JSON-RPC
//! `group`, whose body this engine writes and whose reply it reads, or the v02.01 inbox),
//! publishes task and management commands with `mentions`, and keeps, per member, its
//! connection and mute status and, per (task, member), the latest result.
//!
//! Rules:
//! * its own commands come back through the fanout and are dropped, as are duplicates (by
//!   message id) and messages of another group;
//! * a result only moves a (task, member) forward: a state that cannot follow the known one
//!   in the task machine, or an older `stateChangedAt`, is a stale or reordered delivery and
//!   is ignored, so a redelivered `accepted` after `completed` changes nothing;
//! * `get-status` arms a deadline: a connected member that has not answered by then is
//!   reported not connected ([`LeaderEvent::MemberLost`]), which is how a partner that died
//!   without leaving (SIGKILL, its queue auto-deleted) is noticed.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use serde_json::Value;

use crate::engine::IdSource;
use crate::error::UsageError;
use crate::group::wire::{
    decode_inbox_message, encode_group_message, exchange_name, inbox_queue_name, queue_name,
    AgentRef, AmqpConfig, GroupInfo, GroupMessage, InboxInvitation, InboxMessage, JoinParams,
    JoinReply, MemberStatus, MgmtCommand, MgmtKind, ServerConfig, INBOX_EXCHANGE,
};
use crate::group::{admit, BrokerLink, Publish, SeenIds};
use crate::state::is_reachable;
use crate::time::Timestamp;
use crate::wire::{
    decode_response, encode_request_raw, CommandKind, DataItem, Dialect, Header, JsonObject,
    Mentions, Method, RpcId, SenderRole, TaskCommand, TaskResult, TaskState,
};

/// How many sent task commands are kept for re-publication to a member that reconnects.
const MAX_SENT: usize = 1024;

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
    awaiting_status: Option<Timestamp>,
    invitation_expires: Option<Timestamp>,
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

/// The leader-side engine of one group.
#[derive(Debug)]
pub struct GroupLeader {
    cfg: LeaderConfig,
    ids: IdSource,
    phase: GroupPhase,
    members: BTreeMap<String, MemberView>,
    results: BTreeMap<(String, String), TaskResult>,
    /// Task commands sent (bounded), with the local sequence number they were sent at.
    sent: VecDeque<(u64, TaskCommand)>,
    /// Per (task, partner): the sequence number of the last result heard.
    heard: BTreeMap<(String, String), u64>,
    seq: u64,
    seen: SeenIds,
    out: VecDeque<LeaderOutput>,
    now: Timestamp,
    /// The broker link and its reconnect back-off.
    link: BrokerLink,
}

impl GroupLeader {
    /// A new group. The driver declares [`Self::exchange`] (fanout, durable, auto-delete)
    /// and [`Self::queue`] (durable, auto-delete), binds and consumes it.
    pub fn new(now: Timestamp, cfg: LeaderConfig) -> Result<Self, UsageError> {
        if !crate::group::wire::is_valid_group_id(&cfg.group_id) {
            return Err(UsageError::InvalidArgument(format!(
                "group id {:?} must match [A-Za-z0-9-]{{1,128}}",
                cfg.group_id
            )));
        }
        Ok(GroupLeader {
            ids: IdSource::new(cfg.id_seed),
            cfg,
            phase: GroupPhase::Open,
            members: BTreeMap::new(),
            results: BTreeMap::new(),
            sent: VecDeque::new(),
            heard: BTreeMap::new(),
            seq: 0,
            seen: SeenIds::new(16_384),
            out: VecDeque::new(),
            now,
            link: BrokerLink::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LeaderConfig {
        &self.cfg
    }

    /// `group_{leader}_{gid}`.
    pub fn exchange(&self) -> String {
        exchange_name(&self.cfg.leader_id, &self.cfg.group_id)
    }

    /// The leader's own queue on the exchange.
    pub fn queue(&self) -> String {
        queue_name(&self.cfg.leader_id, &self.cfg.group_id, &self.cfg.leader_id)
    }

    /// The leader's inbox queue (invitation errors arrive there).
    pub fn inbox_queue(&self) -> String {
        inbox_queue_name(&self.cfg.leader_id)
    }

    /// Open or disbanded.
    pub fn phase(&self) -> GroupPhase {
        self.phase
    }

    /// Every member, by AIC.
    pub fn members(&self) -> &BTreeMap<String, MemberView> {
        &self.members
    }

    /// One member.
    pub fn member(&self, partner: &str) -> Option<&MemberView> {
        self.members.get(partner)
    }

    /// The latest result of `task_id` from `partner`.
    pub fn result(&self, task_id: &str, partner: &str) -> Option<&TaskResult> {
        self.results.get(&(task_id.to_owned(), partner.to_owned()))
    }

    /// Every (partner, result) of a task.
    pub fn results<'a>(
        &'a self,
        task_id: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a TaskResult)> + 'a {
        self.results
            .range((task_id.to_owned(), String::new())..)
            .take_while(move |((t, _), _)| t == task_id)
            .map(|((_, p), r)| (p.as_str(), r))
    }

    /// The next output.
    pub fn poll_output(&mut self) -> Option<LeaderOutput> {
        self.out.pop_front()
    }

    fn tick(&mut self, now: Timestamp) {
        if now > self.now {
            self.now = now;
        }
    }

    fn group_info(&self, invitee: &str) -> GroupInfo {
        let mut partners: Vec<AgentRef> = self
            .members
            .iter()
            .filter(|(a, m)| m.connection != Connection::Left && a.as_str() != invitee)
            .map(|(a, _)| AgentRef::new(a.clone()))
            .collect();
        partners.push(AgentRef::new(invitee));
        GroupInfo {
            group_id: self.cfg.group_id.clone(),
            leader: AgentRef::new(self.cfg.leader_id.clone()),
            partners,
        }
    }

    fn invited(&mut self, partner: &str) -> &mut MemberView {
        let m = self
            .members
            .entry(partner.to_owned())
            .or_insert_with(|| MemberView {
                connection: Connection::Invited,
                muted: false,
                invitation: None,
                awaiting_status: None,
                invitation_expires: None,
            });
        if m.connection == Connection::Left {
            m.connection = Connection::Invited;
        }
        m
    }

    /// The JSON-RPC `group` request inviting `partner` (POST it to the partner's group RPC
    /// URL and feed the reply to [`Self::handle_invite_reply`]).
    pub fn invite_rpc(
        &mut self,
        now: Timestamp,
        partner: &str,
        server: ServerConfig,
    ) -> Result<Vec<u8>, UsageError> {
        self.tick(now);
        self.open()?;
        let params = JoinParams {
            protocol: "rabbitmq:4.0".into(),
            group: self.group_info(partner),
            server,
            amqp: AmqpConfig::fanout(self.exchange()),
        };
        self.invited(partner);
        let id = RpcId::Str(self.ids.next("invite"));
        let params = serde_json::to_string(&params)
            .map_err(|e| UsageError::InvalidArgument(e.to_string()))?;
        Ok(encode_request_raw(
            &id,
            &Method::Other("group".into()),
            Some(&params),
        ))
    }

    /// The partner's reply to the `group` request (its HTTP body).
    pub fn handle_invite_reply(&mut self, now: Timestamp, partner: &str, body: &[u8]) {
        self.tick(now);
        let reply = decode_response::<JoinReply>(body);
        let (code, message) = match reply {
            Ok(r) => match r.outcome {
                Ok(_) => {
                    self.connected(partner, None);
                    return;
                }
                Err(e) => (e.code.code(), e.message),
            },
            Err(e) => (-32006, e.to_string()),
        };
        self.refused(partner, code, message);
    }

    fn refused(&mut self, partner: &str, code: i64, message: String) {
        if let Some(m) = self.members.get_mut(partner) {
            if m.connection == Connection::Invited {
                m.connection = Connection::Left;
                m.invitation = None;
                m.invitation_expires = None;
            }
        }
        self.event(LeaderEvent::InvitationRejected {
            partner: partner.to_owned(),
            code,
            message,
        });
    }

    /// Invites `partner` through its inbox (v02.01): publish to `inbox.topic` with key
    /// `inbox_{partner}`. Returns the invitation token.
    pub fn invite_inbox(&mut self, now: Timestamp, partner: &str) -> Result<String, UsageError> {
        self.tick(now);
        self.open()?;
        let token = self.ids.next("inv");
        let expires = self.now.saturating_add(self.cfg.invitation_ttl);
        let inv = InboxInvitation {
            ty: "group-invitation".into(),
            protocol: "rabbitmq:4.2".into(),
            expires_at: expires.to_rfc3339(),
            invitation_token: token.clone(),
            group: self.group_info(partner),
            amqp: AmqpConfig::fanout(self.exchange()),
        };
        let m = self.invited(partner);
        m.invitation = Some(token.clone());
        m.invitation_expires = Some(expires);
        let body =
            serde_json::to_vec(&inv).map_err(|e| UsageError::InvalidArgument(e.to_string()))?;
        self.out.push_back(LeaderOutput::Publish(Publish {
            exchange: INBOX_EXCHANGE.into(),
            routing_key: inbox_queue_name(partner),
            message_id: token.clone(),
            body,
        }));
        Ok(token)
    }

    fn open(&self) -> Result<(), UsageError> {
        match self.phase {
            GroupPhase::Open => Ok(()),
            GroupPhase::Disbanded => Err(UsageError::Unsupported("the group is disbanded".into())),
        }
    }

    fn event(&mut self, e: LeaderEvent) {
        self.out.push_back(LeaderOutput::Event(e));
    }

    fn connected(&mut self, partner: &str, muted: Option<bool>) {
        let m = self.invited(partner);
        let was = m.connection;
        m.connection = Connection::Connected;
        m.invitation = None;
        m.invitation_expires = None;
        m.awaiting_status = None;
        if let Some(x) = muted {
            m.muted = x;
        }
        if was != Connection::Connected {
            self.event(LeaderEvent::MemberJoined {
                partner: partner.to_owned(),
            });
        }
    }

    fn publish(&mut self, msg: &GroupMessage) -> String {
        let id = msg.message_id().unwrap_or_default().to_owned();
        let p = Publish {
            exchange: self.exchange(),
            routing_key: String::new(),
            message_id: id.clone(),
            body: encode_group_message(msg, self.cfg.dialect),
        };
        self.out.push_back(LeaderOutput::Publish(p));
        id
    }

    /// Publishes a task command; returns its message id.
    pub fn send(&mut self, now: Timestamp, cmd: GroupCommand) -> Result<String, UsageError> {
        self.tick(now);
        self.open()?;
        if let Some(Mentions::List(l)) = &cmd.mentions {
            if let Some(p) = l.iter().find(|p| !self.members.contains_key(*p)) {
                return Err(UsageError::UnknownPartner(p.clone()));
            }
        }
        let mut c = TaskCommand::new(
            self.ids.next("cmd"),
            self.now,
            self.cfg.leader_id.clone(),
            cmd.kind,
        );
        c.mentions = cmd.mentions;
        c.data_items = cmd.data_items;
        c.command_params = cmd.command_params;
        c.task_id = Some(cmd.task_id);
        c.group_id = Some(self.cfg.group_id.clone());
        c.session_id = Some(cmd.session_id);
        self.seq += 1;
        self.sent.push_back((self.seq, c.clone()));
        if self.sent.len() > MAX_SENT {
            self.sent.pop_front();
        }
        Ok(self.publish(&GroupMessage::Command(c)))
    }

    /// Publishes a management command; `get-status` arms the status deadline for the
    /// connected members it names.
    pub fn mgmt(
        &mut self,
        now: Timestamp,
        kind: MgmtKind,
        mentions: Mentions,
        session_id: Option<String>,
    ) -> Result<String, UsageError> {
        self.tick(now);
        self.open()?;
        if kind == MgmtKind::GetStatus {
            let deadline = self.now.saturating_add(self.cfg.status_timeout);
            for (aic, m) in self.members.iter_mut() {
                let named = match &mentions {
                    Mentions::All => true,
                    Mentions::List(l) => l.contains(aic),
                };
                if named && m.connection == Connection::Connected && m.awaiting_status.is_none() {
                    m.awaiting_status = Some(deadline);
                }
            }
        }
        if kind == MgmtKind::Disband {
            self.phase = GroupPhase::Disbanded;
        }
        let mut header = Header {
            id: Some(self.ids.next("mgmt")),
            sent_at: Some(self.now),
            sender_role: Some(SenderRole::Leader),
            sender_id: Some(self.cfg.leader_id.clone()),
            mentions: Some(mentions),
            group_id: Some(self.cfg.group_id.clone()),
            session_id,
            ..Header::default()
        };
        if self.cfg.dialect == Dialect::V2 {
            header.data_items = Some(Vec::new());
        }
        Ok(self.publish(&GroupMessage::Mgmt(MgmtCommand {
            header,
            command: kind,
        })))
    }

    /// `get-status` to the named members (or `"all"`).
    pub fn get_status(&mut self, now: Timestamp, mentions: Mentions) -> Result<String, UsageError> {
        self.mgmt(now, MgmtKind::GetStatus, mentions, None)
    }

    /// `mute` one member.
    pub fn mute(&mut self, now: Timestamp, partner: &str) -> Result<String, UsageError> {
        self.mgmt(
            now,
            MgmtKind::Mute,
            Mentions::List(vec![partner.into()]),
            None,
        )
    }

    /// `unmute` one member.
    pub fn unmute(&mut self, now: Timestamp, partner: &str) -> Result<String, UsageError> {
        self.mgmt(
            now,
            MgmtKind::Unmute,
            Mentions::List(vec![partner.into()]),
            None,
        )
    }

    /// `leave-group` to one member.
    pub fn remove(&mut self, now: Timestamp, partner: &str) -> Result<String, UsageError> {
        self.mgmt(
            now,
            MgmtKind::LeaveGroup,
            Mentions::List(vec![partner.into()]),
            None,
        )
    }

    /// `disband` (mentions `"all"`), as the SDK's dissolve. No command can follow; the
    /// driver deletes the leader queue afterwards (the exchange goes with its last queue).
    pub fn disband(&mut self, now: Timestamp) -> Result<String, UsageError> {
        self.mgmt(now, MgmtKind::Disband, Mentions::All, None)
    }

    /// One delivery from the leader's group queue.
    pub fn handle_delivery(&mut self, now: Timestamp, body: &[u8]) {
        self.tick(now);
        let Some((sender, msg)) = admit(
            body,
            &self.cfg.leader_id,
            &self.cfg.group_id,
            &mut self.seen,
        ) else {
            return;
        };
        match msg {
            GroupMessage::MgmtResult(r) => self.on_status(&sender, r.status),
            GroupMessage::Result(r) => self.on_result(&sender, r),
            GroupMessage::Mgmt(m) => {
                // A member announcing its own leave; its connected:false follows.
                if m.command == MgmtKind::LeaveGroup {
                    if let Some(m) = self.members.get_mut(&sender) {
                        m.awaiting_status = None;
                    }
                }
            }
            GroupMessage::Command(_) => {}
        }
    }

    fn on_status(&mut self, sender: &str, status: MemberStatus) {
        if status.connected {
            // Only invited members join, and a member that left must be invited again.
            let known = self.members.get(sender).map(|m| m.connection);
            let rejoin = match known {
                None | Some(Connection::Left) => return,
                Some(Connection::Invited) => false,
                Some(Connection::Connected | Connection::NotConnected) => true,
            };
            self.connected(sender, Some(status.muted));
            if rejoin {
                self.resend(sender);
            }
            self.event(LeaderEvent::MemberStatus {
                partner: sender.to_owned(),
                status,
            });
        } else {
            let Some(m) = self.members.get_mut(sender) else {
                return;
            };
            let was = m.connection;
            m.connection = Connection::Left;
            m.muted = status.muted;
            m.awaiting_status = None;
            if was != Connection::Left {
                self.event(LeaderEvent::MemberLeft {
                    partner: sender.to_owned(),
                });
            }
        }
    }

    fn on_result(&mut self, sender: &str, r: TaskResult) {
        if !self.members.contains_key(sender) {
            return;
        }
        let key = (r.task_id.clone(), sender.to_owned());
        self.seq += 1;
        self.heard.insert(key.clone(), self.seq);
        if let Some(prev) = self.results.get(&key) {
            let (ps, ns) = (prev.status.state, r.status.state);
            let older = r.status.state_changed_at < prev.status.state_changed_at;
            if older || ps == ns || !is_reachable(Some(ps), ns) {
                return;
            }
        } else if !is_reachable(None, r.status.state) && r.status.state != TaskState::Rejected {
            // A first result must be a state a task can reach from its start.
            return;
        }
        self.results.insert(key, r.clone());
        self.event(LeaderEvent::TaskUpdate {
            partner: sender.to_owned(),
            result: Box::new(r),
        });
    }

    /// A member announced itself again (it reconnected, or answered `get-status`): the task
    /// commands meant for it that it has not answered since they were sent are published
    /// again with their original ids (a member that had them drops the copy), so a command
    /// that found no queue while the broker restarted is not lost.
    fn resend(&mut self, partner: &str) {
        let again: Vec<TaskCommand> = self
            .sent
            .iter()
            .filter(|(seq, c)| {
                let meant = match &c.mentions {
                    None => true,
                    Some(Mentions::All) => true,
                    Some(Mentions::List(l)) => l.is_empty() || l.iter().any(|p| p == partner),
                };
                let task = c.task_id.clone().unwrap_or_default();
                let heard = self
                    .heard
                    .get(&(task, partner.to_owned()))
                    .copied()
                    .unwrap_or(0);
                meant && heard < *seq
            })
            .map(|(_, c)| c.clone())
            .collect();
        for c in again {
            self.publish(&GroupMessage::Command(c));
        }
    }

    /// One delivery from the leader's inbox (invitation errors).
    pub fn handle_inbox(&mut self, now: Timestamp, body: &[u8]) {
        self.tick(now);
        let Ok(InboxMessage::InvitationError(e)) = decode_inbox_message(body) else {
            return;
        };
        if e.group_id != self.cfg.group_id {
            return;
        }
        let open = self
            .members
            .get(&e.partner_aic)
            .is_some_and(|m| m.invitation.as_deref() == Some(e.invitation_token.as_str()));
        if open {
            self.refused(&e.partner_aic, e.error.code, e.error.message);
        }
    }

    /// The driver's broker connection came back (exchange, queue and inbox declared again).
    /// Messages published to the leader's queue while it was gone are lost with it, so the
    /// leader asks every member for its status: members answer with their status and latest
    /// results, and the leader republishes the commands they have not answered.
    pub fn reconnected(&mut self, now: Timestamp) {
        self.link.connected();
        if self.phase == GroupPhase::Open {
            let _ = self.get_status(now, Mentions::All);
        }
    }

    /// The driver lost its broker connection at `now` (see [`BrokerLink`]).
    pub fn link_lost(&mut self, now: Timestamp) {
        self.link.lost(now);
    }

    /// The driver's attempt to connect again failed at `now`.
    pub fn connect_failed(&mut self, now: Timestamp) {
        self.link.attempt_failed(now);
    }

    /// Whether the driver should try to connect at `now` (the link is down and its back-off
    /// has passed).
    pub fn connect_due(&self, now: Timestamp) -> bool {
        self.link.connect_due(now)
    }

    /// When [`Self::handle_timeout`] is due next, or the next connection attempt while the
    /// broker link is down.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.members
            .values()
            .flat_map(|m| [m.awaiting_status, m.invitation_expires])
            .flatten()
            .chain(self.link.deadline())
            .min()
    }

    /// Status deadlines and invitation expiry.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.tick(now);
        let now = self.now;
        let mut lost = Vec::new();
        let mut expired = Vec::new();
        for (aic, m) in self.members.iter_mut() {
            if m.awaiting_status.is_some_and(|d| d <= now) {
                m.awaiting_status = None;
                if m.connection == Connection::Connected {
                    m.connection = Connection::NotConnected;
                    lost.push(aic.clone());
                }
            }
            if m.invitation_expires.is_some_and(|d| d <= now) {
                m.invitation_expires = None;
                m.invitation = None;
                if m.connection == Connection::Invited {
                    m.connection = Connection::Left;
                    expired.push(aic.clone());
                }
            }
        }
        for partner in lost {
            self.event(LeaderEvent::MemberLost { partner });
        }
        for partner in expired {
            self.event(LeaderEvent::InvitationExpired { partner });
        }
    }

    /// Partners whose latest result of `task_id` is in `state`.
    pub fn partners_in(&self, task_id: &str, state: TaskState) -> BTreeSet<String> {
        self.results(task_id)
            .filter(|(_, r)| r.status.state == state)
            .map(|(p, _)| p.to_owned())
            .collect()
    }

    /// The invitation body as JSON (for logging/tests).
    pub fn describe(&self) -> Value {
        serde_json::json!({
            "groupId": self.cfg.group_id,
            "exchange": self.exchange(),
            "members": self.members.iter().map(|(a, m)| (a.clone(), format!("{:?}", m.connection))).collect::<BTreeMap<_, _>>(),
        })
    }
}
