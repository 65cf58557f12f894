//! What comes back to a group leader: invitation replies and inbox errors, deliveries from
//! its group queue (status reports and results), the broker link and the timers.

use crate::group::admit;
use crate::group::wire::{
    decode_inbox_message, GroupMessage, InboxMessage, JoinReply, MemberStatus, MgmtKind,
};
use crate::state::is_reachable;
use crate::time::Timestamp;
use crate::wire::{decode_response, Mentions, TaskCommand, TaskResult, TaskState};

use super::{Connection, GroupLeader, GroupPhase, LeaderEvent};

impl GroupLeader {
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

    /// A member announced itself again (it reconnected, was unmuted, or answered
    /// `get-status`): the task commands meant for it that it has not answered since they were
    /// sent are published again with their original ids (a member that had them drops the
    /// copy), so a command that found no queue while the broker restarted is not lost. The
    /// copy mentions only that member: the group exchange delivers it to every member, and
    /// partners that do not drop a repeated id (the SDK's) would run it a second time.
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
            .map(|(_, c)| TaskCommand {
                mentions: Some(Mentions::List(vec![partner.to_owned()])),
                ..c.clone()
            })
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
    ///
    /// [`BrokerLink`]: crate::group::BrokerLink
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
}
