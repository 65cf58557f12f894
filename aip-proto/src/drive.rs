//! The canonical drive loop both protocols share ([`engine_basics::drive`], re-exported here),
//! with AIP's four engines as [`Engine`]s: [`Partner`], [`Leader`], and group mode's
//! [`GroupLeader`] and [`GroupMember`]. `aip-driver` runs every one of them through [`turn`],
//! as `awcp-driver` runs AWCP's delegator and executor.
//!
//! The contract, in short (the whole of it is on [`engine_basics::drive`]): feed one input,
//! the deadline or nothing; drain every output, executing each; ask for the next deadline;
//! wait for the next input or that deadline. An application call (`accept`, `start`, `send`,
//! …) is made on the engine directly and followed by a turn with [`Wake::Drained`].
//!
//! AIP's engines take every input (a bad request is answered, a stale completion ignored by
//! the engine itself), so their [`Engine::Refusal`] is [`Infallible`].

use core::convert::Infallible;

pub use engine_basics::drive::{turn, Engine, Host, InputOf, TimeOf, Wake};

use crate::group::MemberOutput;
use crate::group::{GroupLeader, GroupMember, LeaderOutput as GroupLeaderOutput, LinkInput};
use crate::leader::{Leader, LeaderInput, LeaderOutput};
use crate::partner::{Partner, PartnerInput, PartnerOutput};
use crate::time::Timestamp;

impl Engine for Partner {
    type Input = PartnerInput;
    type Output = PartnerOutput;
    type Time = Timestamp;
    type Refusal = Infallible;
    fn handle(&mut self, now: Timestamp, input: PartnerInput) -> Result<(), Infallible> {
        Partner::handle(self, now, input);
        Ok(())
    }
    fn handle_timeout(&mut self, now: Timestamp) {
        Partner::handle_timeout(self, now);
    }
    fn poll_output(&mut self) -> Option<PartnerOutput> {
        Partner::poll_output(self)
    }
    fn next_deadline(&self) -> Option<Timestamp> {
        self.poll_timeout()
    }
}

impl Engine for Leader {
    type Input = LeaderInput;
    type Output = LeaderOutput;
    type Time = Timestamp;
    type Refusal = Infallible;
    fn handle(&mut self, now: Timestamp, input: LeaderInput) -> Result<(), Infallible> {
        Leader::handle(self, now, input);
        Ok(())
    }
    fn handle_timeout(&mut self, now: Timestamp) {
        Leader::handle_timeout(self, now);
    }
    fn poll_output(&mut self) -> Option<LeaderOutput> {
        Leader::poll_output(self)
    }
    fn next_deadline(&self) -> Option<Timestamp> {
        self.poll_timeout()
    }
}

/// A group leader consumes two queues: its inbox (invitation replies) and its group queue
/// (members' status reports and results); a delivery's queue says which.
impl Engine for GroupLeader {
    type Input = LinkInput;
    type Output = GroupLeaderOutput;
    type Time = Timestamp;
    type Refusal = Infallible;
    fn handle(&mut self, now: Timestamp, input: LinkInput) -> Result<(), Infallible> {
        match input {
            LinkInput::Delivery { queue, body } if queue == self.inbox_queue() => {
                self.handle_inbox(now, &body);
            }
            LinkInput::Delivery { body, .. } => self.handle_delivery(now, &body),
            LinkInput::Reconnected => self.reconnected(now),
            LinkInput::Lost => self.link_lost(now),
            LinkInput::ConnectFailed => self.connect_failed(now),
        }
        Ok(())
    }
    fn handle_timeout(&mut self, now: Timestamp) {
        GroupLeader::handle_timeout(self, now);
    }
    fn poll_output(&mut self) -> Option<GroupLeaderOutput> {
        GroupLeader::poll_output(self)
    }
    fn next_deadline(&self) -> Option<Timestamp> {
        self.poll_timeout()
    }
}

/// A member consumes its own queue in the group; its only timer is the broker link's
/// reconnect back-off, which the driver asks about with [`GroupMember::connect_due`].
impl Engine for GroupMember {
    type Input = LinkInput;
    type Output = MemberOutput;
    type Time = Timestamp;
    type Refusal = Infallible;
    fn handle(&mut self, now: Timestamp, input: LinkInput) -> Result<(), Infallible> {
        match input {
            LinkInput::Delivery { body, .. } => self.handle_delivery(now, &body),
            LinkInput::Reconnected => self.reconnected(now),
            LinkInput::Lost => self.link_lost(now),
            LinkInput::ConnectFailed => self.connect_failed(now),
        }
        Ok(())
    }
    fn handle_timeout(&mut self, _now: Timestamp) {}
    fn poll_output(&mut self) -> Option<MemberOutput> {
        GroupMember::poll_output(self)
    }
    fn next_deadline(&self) -> Option<Timestamp> {
        self.poll_timeout()
    }
}
