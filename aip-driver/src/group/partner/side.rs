//! The two [`Side`]s (engines of the drive loop) of a group partner's broker links: [`MemberSide`] (one group's member
//! engine and queue) and [`InboxSide`] (the partner's inbox, where invitations arrive).

use core::convert::Infallible;

use aip_proto::drive::Engine;
use aip_proto::group::{
    decode_inbox_message, BrokerLink, GroupMember, InboxInvitation, InboxMessage, LinkInput,
    MemberOutput, Publish,
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

impl Engine for MemberSide {
    type Input = LinkInput;
    type Output = Out<GroupPartnerEvent>;
    type Time = Timestamp;
    type Refusal = Infallible;

    fn handle(&mut self, now: Timestamp, input: LinkInput) -> Result<(), Infallible> {
        Engine::handle(&mut self.engine, now, input)
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        Engine::handle_timeout(&mut self.engine, now);
    }

    fn poll_output(&mut self) -> Option<Out<GroupPartnerEvent>> {
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

    fn next_deadline(&self) -> Option<Timestamp> {
        self.engine.poll_timeout()
    }
}

impl Side<GroupPartnerEvent> for MemberSide {
    fn declarations(&self) -> Vec<Declare> {
        vec![Declare::GroupQueue {
            queue: self.queue.clone(),
            exchange: self.engine.config().exchange.clone(),
        }]
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

impl Engine for InboxSide {
    type Input = LinkInput;
    type Output = Out<GroupPartnerEvent>;
    type Time = Timestamp;
    type Refusal = Infallible;

    fn handle(&mut self, now: Timestamp, input: LinkInput) -> Result<(), Infallible> {
        match input {
            LinkInput::Delivery { body, .. } => {
                if let Ok(InboxMessage::Invitation(inv)) = decode_inbox_message(&body) {
                    let _ = self.invitations.unbounded_send(inv);
                }
            }
            LinkInput::Reconnected => self.link.connected(),
            LinkInput::Lost => self.link.lost(now),
            LinkInput::ConnectFailed => self.link.attempt_failed(now),
        }
        Ok(())
    }

    fn handle_timeout(&mut self, _now: Timestamp) {}

    fn poll_output(&mut self) -> Option<Out<GroupPartnerEvent>> {
        self.out.pop_front().map(Out::Publish)
    }

    fn next_deadline(&self) -> Option<Timestamp> {
        self.link.deadline()
    }
}

impl Side<GroupPartnerEvent> for InboxSide {
    fn declarations(&self) -> Vec<Declare> {
        vec![Declare::Inbox(self.queue.clone())]
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
