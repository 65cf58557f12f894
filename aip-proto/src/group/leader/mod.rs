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

mod incoming;
mod types;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::Value;

use crate::error::UsageError;
use crate::group::wire::{
    encode_group_message, exchange_name, inbox_queue_name, queue_name, AgentRef, AmqpConfig,
    GroupInfo, GroupMessage, InboxInvitation, JoinParams, MgmtCommand, MgmtKind, ServerConfig,
    INBOX_EXCHANGE,
};
use crate::group::{BrokerLink, Publish, SeenIds};
use crate::time::Timestamp;
use crate::wire::{
    encode_request_raw, Dialect, Header, Mentions, Method, RpcId, SenderRole, TaskCommand,
    TaskResult, TaskState,
};
use engine_basics::ids::IdSource;

pub use types::{
    Connection, GroupCommand, GroupPhase, LeaderConfig, LeaderEvent, LeaderOutput, MemberView,
};

/// How many sent task commands are kept for re-publication to a member that reconnects.
const MAX_SENT: usize = 1024;

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
