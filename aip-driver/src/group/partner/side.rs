//! The two [`Side`]s of a group partner's broker links: [`MemberSide`] (one group's member
//! engine and queue) and [`InboxSide`] (the partner's inbox, where invitations arrive).

use aip_proto::group::{
    decode_inbox_message, BrokerLink, GroupMember, InboxInvitation, InboxMessage, MemberOutput,
    Publish,
};
use aip_proto::Timestamp;
use futures::channel::mpsc;

use super::GroupPartnerEvent;
use crate::group::amqp::Declare;
use crate::group::run::{Out, Side};

pub(crate) struct MemberSide {
    pub(super) engine: GroupMember,
    pub(super) queue: String,
    pub(super) group_id: String,
    pub(super) buf: std::collections::VecDeque<Out<GroupPartnerEvent>>,
}

impl Side for MemberSide {
    type Event = GroupPartnerEvent;

    fn declarations(&self) -> Vec<Declare> {
        vec![Declare::GroupQueue {
            queue: self.queue.clone(),
            exchange: self.engine.config().exchange.clone(),
        }]
    }

    fn delivery(&mut self, now: Timestamp, _queue: &str, body: &[u8]) {
        self.engine.handle_delivery(now, body);
    }

    fn poll(&mut self) -> Option<Out<GroupPartnerEvent>> {
        if let Some(o) = self.buf.pop_front() {
            return Some(o);
        }
        let g = self.group_id.clone();
        match self.engine.poll_output()? {
            MemberOutput::Publish(p) => Some(Out::Publish(p)),
            MemberOutput::Event(event) => Some(Out::Event(GroupPartnerEvent::Group {
                group_id: g,
                event: Box::new(event),
            })),
            MemberOutput::Leave(reason) => {
                self.buf
                    .push_back(Out::Leave(vec![self.queue.clone()], None));
                Some(Out::Event(GroupPartnerEvent::Left {
                    group_id: g,
                    reason,
                }))
            }
        }
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        self.engine.poll_timeout()
    }

    fn timeout(&mut self, _now: Timestamp) {}

    fn reconnected(&mut self, now: Timestamp) {
        self.engine.reconnected(now);
    }

    fn link_lost(&mut self, now: Timestamp) {
        self.engine.link_lost(now);
    }

    fn connect_failed(&mut self, now: Timestamp) {
        self.engine.connect_failed(now);
    }

    fn connect_due(&self, now: Timestamp) -> bool {
        self.engine.connect_due(now)
    }

    fn link_event(up: bool, reason: String) -> GroupPartnerEvent {
        // The group id is filled in by the forwarding task.
        if up {
            GroupPartnerEvent::Reconnected {
                group_id: String::new(),
            }
        } else {
            GroupPartnerEvent::Disconnected {
                group_id: String::new(),
                reason,
            }
        }
    }
}

/// The inbox listener's side: invitations are handed to the join task; rejections are
/// published from here.
pub(super) struct InboxSide {
    pub(super) queue: String,
    pub(super) invitations: mpsc::UnboundedSender<InboxInvitation>,
    pub(super) out: std::collections::VecDeque<Publish>,
    /// The inbox has no engine of its own: its link's reconnect timer.
    pub(super) link: BrokerLink,
}

impl Side for InboxSide {
    type Event = GroupPartnerEvent;

    fn declarations(&self) -> Vec<Declare> {
        vec![Declare::Inbox(self.queue.clone())]
    }

    fn delivery(&mut self, _now: Timestamp, _queue: &str, body: &[u8]) {
        if let Ok(InboxMessage::Invitation(inv)) = decode_inbox_message(body) {
            let _ = self.invitations.unbounded_send(inv);
        }
    }

    fn poll(&mut self) -> Option<Out<GroupPartnerEvent>> {
        self.out.pop_front().map(Out::Publish)
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        self.link.deadline()
    }

    fn timeout(&mut self, _now: Timestamp) {}

    fn reconnected(&mut self, _now: Timestamp) {
        self.link.connected();
    }

    fn link_lost(&mut self, now: Timestamp) {
        self.link.lost(now);
    }

    fn connect_failed(&mut self, now: Timestamp) {
        self.link.attempt_failed(now);
    }

    fn connect_due(&self, now: Timestamp) -> bool {
        self.link.connect_due(now)
    }

    fn link_event(up: bool, reason: String) -> GroupPartnerEvent {
        let group_id = "(inbox)".to_owned();
        if up {
            GroupPartnerEvent::Reconnected { group_id }
        } else {
            GroupPartnerEvent::Disconnected { group_id, reason }
        }
    }
}
