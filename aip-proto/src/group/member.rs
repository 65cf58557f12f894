//! The partner side of one group: [`GroupMember`].
//!
//! Feed every delivery from the member's queue with [`GroupMember::handle_delivery`], call the
//! task methods when the application decides, and after every call drain
//! [`GroupMember::poll_output`]: [`MemberOutput::Publish`] goes to the group exchange,
//! [`MemberOutput::Leave`] tells the driver to stop consuming, delete the queue and close.
//!
//! Rules (spec §7 and what acps-sdk 2.1.0 does):
//! * the member's own messages (fanout echoes them) are dropped, as are messages of another
//!   group and any message id already seen (a broker may redeliver);
//! * a task command acts when it mentions `"all"` or this member; absent or `[]` means
//!   "nobody mentioned": the SDK partner acts on it, the spec leaves it to the partner, so
//!   it acts in v02 and, in v01.00, only when [`MemberConfig::act_on_unaddressed`] says so;
//! * management commands act only for `"all"` or a named member;
//! * a muted member holds its task results and publishes them, in order, on unmute;
//! * each task moves through the same [`TaskMachine`] as direct mode; a command in the wrong
//!   state (or a repeated start) republishes the current result instead of an error.

use std::collections::{BTreeMap, VecDeque};

use crate::error::UsageError;
use crate::group::wire::{
    encode_group_message, GroupMessage, MemberStatus, MgmtCommand, MgmtKind, MgmtResult,
};
use crate::group::{admit_addressed, BrokerLink, Publish, SeenIds};
use crate::state::{command_effect, Cause, TaskMachine};
use crate::time::Timestamp;
use crate::wire::{
    CommandKind, DataItem, Dialect, Header, Mentions, Product, SenderRole, TaskCommand, TaskResult,
    TaskState, TaskStatus,
};
use engine_basics::ids::IdSource;

/// Configuration of one membership.
#[derive(Clone, Debug)]
pub struct MemberConfig {
    /// This partner's AIC.
    pub partner_id: String,
    /// The leader's AIC.
    pub leader_id: String,
    /// The group id.
    pub group_id: String,
    /// The group exchange (from the invitation).
    pub exchange: String,
    /// The dialect to publish in (v02 unless the leader spoke v01.00).
    pub dialect: Dialect,
    /// Act on a task command that mentions nobody (absent or `[]`). `None`: yes in v02 (the
    /// SDK partner does), no in v01.00 (the seed: "decide yourself", so the application is
    /// told with [`Mention::Nobody`] only when this is `Some(true)`).
    pub act_on_unaddressed: Option<bool>,
    /// Seed of the ids this engine mints.
    pub id_seed: u64,
}

impl MemberConfig {
    /// A v02 membership.
    pub fn new(partner_id: &str, leader_id: &str, group_id: &str) -> Self {
        MemberConfig {
            partner_id: partner_id.into(),
            leader_id: leader_id.into(),
            group_id: group_id.into(),
            exchange: crate::group::exchange_name(leader_id, group_id),
            dialect: Dialect::V2,
            act_on_unaddressed: None,
            id_seed: 0,
        }
    }
}

/// How a command that this member acts on addressed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mention {
    /// By name.
    Me,
    /// `"all"`.
    All,
    /// Nobody was mentioned (absent or `[]`).
    Nobody,
}

/// Why the member left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaveReason {
    /// The leader sent `leave-group` naming it (or `"all"`).
    Asked,
    /// The leader dissolved the group (`disband`).
    Disbanded,
    /// The application called [`GroupMember::leave`].
    Own,
}

/// What the application learns.
#[derive(Clone, Debug, PartialEq)]
pub enum MemberEvent {
    /// A new task: decide with [`GroupMember::accept`] or [`GroupMember::reject`].
    TaskStarted {
        /// The task.
        task_id: String,
        /// The start command.
        command: TaskCommand,
        /// How it addressed this member.
        mention: Mention,
    },
    /// `continue` moved the task back to working; the command carries the new input.
    Continued {
        /// The task.
        task_id: String,
        /// The command.
        command: TaskCommand,
    },
    /// The leader canceled the task.
    Canceled {
        /// The task.
        task_id: String,
    },
    /// The leader completed the task.
    Completed {
        /// The task.
        task_id: String,
    },
    /// Mute state changed.
    Muted(bool),
}

/// What the driver executes.
#[derive(Clone, Debug, PartialEq)]
pub enum MemberOutput {
    /// Publish on the broker.
    Publish(Publish),
    /// For the application.
    Event(MemberEvent),
    /// Stop consuming, delete the member queue, close the channel. Last output.
    Leave(LeaveReason),
}

#[derive(Debug)]
struct MemberTask {
    machine: TaskMachine,
    status: Option<TaskStatus>,
    session_id: Option<String>,
    products: Vec<Product>,
}

/// Is this member joined, left?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberPhase {
    /// In the group.
    Joined,
    /// Left (no more outputs but nothing).
    Left,
}

/// The partner-side engine of one group membership.
#[derive(Debug)]
pub struct GroupMember {
    cfg: MemberConfig,
    ids: IdSource,
    phase: MemberPhase,
    muted: bool,
    tasks: BTreeMap<String, MemberTask>,
    seen: SeenIds,
    held: Vec<Publish>,
    out: VecDeque<MemberOutput>,
    now: Timestamp,
    /// The broker link and its reconnect back-off.
    link: BrokerLink,
}

impl GroupMember {
    /// A member that has just joined (queue declared, bound and consumed): it announces
    /// itself with `group-mgmt-result {connected:true}` as the SDK partner does.
    pub fn joined(now: Timestamp, cfg: MemberConfig) -> Self {
        let mut m = GroupMember {
            ids: IdSource::new(cfg.id_seed),
            cfg,
            phase: MemberPhase::Joined,
            muted: false,
            tasks: BTreeMap::new(),
            seen: SeenIds::new(4096),
            held: Vec::new(),
            out: VecDeque::new(),
            now,
            link: BrokerLink::new(),
        };
        m.publish_status(None);
        m
    }

    /// The configuration.
    pub fn config(&self) -> &MemberConfig {
        &self.cfg
    }

    /// Joined or left.
    pub fn phase(&self) -> MemberPhase {
        self.phase
    }

    /// Whether the leader muted this member.
    pub fn is_muted(&self) -> bool {
        self.muted
    }

    /// A task's state (`None`: unknown, or not decided yet).
    pub fn task_state(&self, task_id: &str) -> Option<TaskState> {
        self.tasks.get(task_id).and_then(|t| t.machine.state())
    }

    /// The ids of the tasks this member holds, in order.
    pub fn task_ids(&self) -> impl Iterator<Item = &str> {
        self.tasks.keys().map(String::as_str)
    }

    /// The next output.
    pub fn poll_output(&mut self) -> Option<MemberOutput> {
        self.out.pop_front()
    }

    fn tick(&mut self, now: Timestamp) {
        if now > self.now {
            self.now = now;
        }
    }

    fn header(&mut self, kind: &str, session_id: Option<String>) -> Header {
        let mut h = Header::partner(self.ids.next(kind), self.now, self.cfg.partner_id.clone());
        h.group_id = Some(self.cfg.group_id.clone());
        h.session_id = session_id;
        h
    }

    fn publish(&mut self, msg: &GroupMessage, hold_if_muted: bool) {
        let p = Publish {
            exchange: self.cfg.exchange.clone(),
            routing_key: String::new(),
            message_id: msg.message_id().unwrap_or_default().to_owned(),
            body: encode_group_message(msg, self.cfg.dialect),
        };
        if hold_if_muted && self.muted {
            self.held.push(p);
        } else {
            self.out.push_back(MemberOutput::Publish(p));
        }
    }

    fn publish_status(&mut self, session_id: Option<String>) {
        let header = self.header("mgmt-result", session_id);
        let connected = self.phase == MemberPhase::Joined;
        let msg = GroupMessage::MgmtResult(MgmtResult {
            header,
            status: MemberStatus {
                connected,
                muted: self.muted,
            },
        });
        self.publish(&msg, false);
    }

    fn publish_result(&mut self, task_id: &str) {
        let Some(t) = self.tasks.get(task_id) else {
            return;
        };
        let Some(status) = t.status.clone() else {
            return;
        };
        let session = t.session_id.clone();
        let products = (!t.products.is_empty()).then(|| t.products.clone());
        let header = self.header("result", session);
        let msg = GroupMessage::Result(TaskResult {
            header,
            task_id: task_id.to_owned(),
            status,
            products,
            command_history: None,
            status_history: None,
        });
        self.publish(&msg, true);
    }

    fn mention(&self, m: Option<&Mentions>, task_command: bool) -> Option<Mention> {
        mention_of(&self.cfg, m, task_command)
    }

    /// One delivery from the member queue (ack it after this returns: the engine has taken
    /// everything it needs). Bodies that are not group messages are ignored.
    pub fn handle_delivery(&mut self, now: Timestamp, body: &[u8]) {
        self.tick(now);
        if self.phase != MemberPhase::Joined {
            return;
        }
        // A command or management message meant for other members is not remembered: the
        // leader may publish it again to this member alone, with the same id.
        let cfg = &self.cfg;
        let addressed = |msg: &GroupMessage| match msg {
            GroupMessage::Command(c) => mention_of(cfg, c.mentions.as_ref(), true).is_some(),
            GroupMessage::Mgmt(m) => mention_of(cfg, m.header.mentions.as_ref(), false).is_some(),
            GroupMessage::Result(_) | GroupMessage::MgmtResult(_) => true,
        };
        let Some((_, msg)) = admit_addressed(
            body,
            &self.cfg.partner_id,
            &self.cfg.group_id,
            &mut self.seen,
            addressed,
        ) else {
            return;
        };
        match msg {
            GroupMessage::Command(c) => self.on_command(c),
            GroupMessage::Mgmt(m) => self.on_mgmt(m),
            GroupMessage::Result(_) | GroupMessage::MgmtResult(_) => {}
        }
    }

    fn on_command(&mut self, c: TaskCommand) {
        let Some(mention) = self.mention(c.mentions.as_ref(), true) else {
            return;
        };
        let Some(task_id) = c.task_id.clone() else {
            return;
        };
        let kind = c.kind();
        let Some(task) = self.tasks.get_mut(&task_id) else {
            if kind == CommandKind::Start {
                self.tasks.insert(
                    task_id.clone(),
                    MemberTask {
                        machine: TaskMachine::new(),
                        status: None,
                        session_id: c.session_id.clone(),
                        products: Vec::new(),
                    },
                );
                self.out
                    .push_back(MemberOutput::Event(MemberEvent::TaskStarted {
                        task_id,
                        command: c,
                        mention,
                    }));
            }
            return;
        };
        let Some(state) = task.machine.state() else {
            return; // start not decided yet: the decision will publish
        };
        match command_effect(state, &kind) {
            Some((cause, to)) => {
                if task.machine.apply(&task_id, cause, to).is_err() {
                    return;
                }
                task.status = Some(TaskStatus::new(to, self.now));
                let ev = match cause {
                    Cause::Continue => MemberEvent::Continued {
                        task_id: task_id.clone(),
                        command: c,
                    },
                    Cause::Cancel => MemberEvent::Canceled {
                        task_id: task_id.clone(),
                    },
                    _ => MemberEvent::Completed {
                        task_id: task_id.clone(),
                    },
                };
                self.publish_result(&task_id);
                self.out.push_back(MemberOutput::Event(ev));
            }
            // get, a repeated start, a command in the wrong state: the current result again.
            None => self.publish_result(&task_id),
        }
    }

    fn on_mgmt(&mut self, m: MgmtCommand) {
        if self.mention(m.header.mentions.as_ref(), false).is_none() {
            return;
        }
        let session = m.header.session_id.clone();
        match m.command {
            MgmtKind::GetStatus => {
                // The status, then the latest result of every task: a leader that lost its
                // queue (its connection dropped) learns what it missed; it drops what it has.
                self.publish_status(session);
                let ids: Vec<String> = self.tasks.keys().cloned().collect();
                for id in ids {
                    self.publish_result(&id);
                }
            }
            MgmtKind::Mute | MgmtKind::Unmute => {
                let mute = m.command == MgmtKind::Mute;
                let changed = self.muted != mute;
                self.muted = mute;
                self.publish_status(session);
                if changed {
                    if !mute {
                        for p in std::mem::take(&mut self.held) {
                            self.out.push_back(MemberOutput::Publish(p));
                        }
                    }
                    self.out
                        .push_back(MemberOutput::Event(MemberEvent::Muted(mute)));
                }
            }
            MgmtKind::LeaveGroup | MgmtKind::Disband => {
                let reason = if m.command == MgmtKind::Disband {
                    LeaveReason::Disbanded
                } else {
                    LeaveReason::Asked
                };
                self.finish(session, reason);
            }
            MgmtKind::Other(_) => {}
        }
    }

    fn finish(&mut self, session: Option<String>, reason: LeaveReason) {
        // Held results are not lost on leave: the leader still learns them.
        for p in std::mem::take(&mut self.held) {
            self.out.push_back(MemberOutput::Publish(p));
        }
        self.phase = MemberPhase::Left;
        self.publish_status(session);
        self.out.push_back(MemberOutput::Leave(reason));
    }

    /// The driver lost its broker connection at `now` (see [`BrokerLink`]).
    pub fn link_lost(&mut self, now: Timestamp) {
        self.tick(now);
        self.link.lost(now);
    }

    /// The driver's attempt to connect again failed at `now`.
    pub fn connect_failed(&mut self, now: Timestamp) {
        self.tick(now);
        self.link.attempt_failed(now);
    }

    /// Whether the driver should try to connect at `now` (the link is down and its back-off
    /// has passed).
    pub fn connect_due(&self, now: Timestamp) -> bool {
        self.link.connect_due(now)
    }

    /// The next connection attempt while the broker link is down (the member has no other
    /// timer).
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.link.deadline()
    }

    /// The driver's broker connection came back (queue declared and bound again): announce
    /// `connected:true` again and republish the latest result of every task (the leader
    /// drops what it had), so nothing published into a queue that the restart removed is
    /// lost. The leader answers by republishing its commands this member has not answered.
    pub fn reconnected(&mut self, now: Timestamp) {
        self.tick(now);
        self.link.connected();
        if self.phase != MemberPhase::Joined {
            return;
        }
        self.publish_status(None);
        let ids: Vec<String> = self.tasks.keys().cloned().collect();
        for id in ids {
            self.publish_result(&id);
        }
    }

    /// Leaves on the member's own initiative: `leave-group` naming itself, then
    /// `connected:false`, then [`MemberOutput::Leave`].
    pub fn leave(&mut self, now: Timestamp, session_id: Option<String>) {
        self.tick(now);
        if self.phase != MemberPhase::Joined {
            return;
        }
        let mut header = self.header("mgmt-cmd", session_id.clone());
        header.mentions = Some(Mentions::List(vec![self.cfg.partner_id.clone()]));
        self.publish(
            &GroupMessage::Mgmt(MgmtCommand {
                header,
                command: MgmtKind::LeaveGroup,
            }),
            false,
        );
        self.finish(session_id, LeaveReason::Own);
    }

    fn step(
        &mut self,
        now: Timestamp,
        task_id: &str,
        cause: Cause,
        to: TaskState,
        items: Option<Vec<DataItem>>,
        products: Vec<Product>,
    ) -> Result<(), UsageError> {
        self.tick(now);
        let now = self.now;
        let t = self
            .tasks
            .get_mut(task_id)
            .ok_or_else(|| UsageError::UnknownTask(task_id.to_owned()))?;
        if cause == Cause::Start && t.machine.state().is_some() {
            return Err(UsageError::AlreadyDecided(task_id.to_owned()));
        }
        t.machine.apply(task_id, cause, to)?;
        let mut status = TaskStatus::new(to, now);
        status.data_items = items;
        t.status = Some(status);
        t.products.extend(products);
        self.publish_result(task_id);
        Ok(())
    }

    /// Accepts a started task (publishes `accepted`).
    pub fn accept(&mut self, now: Timestamp, task_id: &str) -> Result<(), UsageError> {
        self.step(
            now,
            task_id,
            Cause::Start,
            TaskState::Accepted,
            None,
            vec![],
        )
    }

    /// Rejects a started task with a reason.
    pub fn reject(
        &mut self,
        now: Timestamp,
        task_id: &str,
        reason: &str,
    ) -> Result<(), UsageError> {
        let items = Some(vec![DataItem::text(reason)]);
        self.step(
            now,
            task_id,
            Cause::Start,
            TaskState::Rejected,
            items,
            vec![],
        )
    }

    /// accepted → working.
    pub fn start_working(&mut self, now: Timestamp, task_id: &str) -> Result<(), UsageError> {
        self.step(
            now,
            task_id,
            Cause::Partner,
            TaskState::Working,
            None,
            vec![],
        )
    }

    /// working → awaiting-input with a question.
    pub fn request_input(
        &mut self,
        now: Timestamp,
        task_id: &str,
        question: &str,
    ) -> Result<(), UsageError> {
        let items = Some(vec![DataItem::text(question)]);
        self.step(
            now,
            task_id,
            Cause::Partner,
            TaskState::AwaitingInput,
            items,
            vec![],
        )
    }

    /// working → awaiting-completion with products.
    pub fn submit(
        &mut self,
        now: Timestamp,
        task_id: &str,
        products: Vec<Product>,
    ) -> Result<(), UsageError> {
        let to = TaskState::AwaitingCompletion;
        self.step(now, task_id, Cause::Partner, to, None, products)
    }

    /// working → failed with a reason.
    pub fn fail(&mut self, now: Timestamp, task_id: &str, reason: &str) -> Result<(), UsageError> {
        let items = Some(vec![DataItem::text(reason)]);
        self.step(
            now,
            task_id,
            Cause::Partner,
            TaskState::Failed,
            items,
            vec![],
        )
    }

    /// The sender role this engine writes (always partner).
    pub fn role(&self) -> SenderRole {
        SenderRole::Partner
    }
}

/// How a message's mentions concern the member `cfg` describes (`None`: not at all). A
/// management message must name the member or all; a task command that names nobody is
/// acted on as [`MemberConfig::act_on_unaddressed`] says.
fn mention_of(cfg: &MemberConfig, m: Option<&Mentions>, task_command: bool) -> Option<Mention> {
    match m {
        Some(Mentions::All) => Some(Mention::All),
        Some(Mentions::List(l)) if l.contains(&cfg.partner_id) => Some(Mention::Me),
        Some(Mentions::List(l)) if !l.is_empty() => None,
        _ if !task_command => None,
        _ => {
            let act = cfg.act_on_unaddressed.unwrap_or(cfg.dialect == Dialect::V2);
            act.then_some(Mention::Nobody)
        }
    }
}
