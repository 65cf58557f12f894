//! The canonical drive loop ([`engine_basics::drive`], re-exported here), with AWCP's two
//! engines, [`Delegator`] and [`Executor`], as [`Engine`]s. Both runtime drivers
//! (`awcp-driver`, under tokio and smol) and the deterministic simulation drive them through
//! [`turn`]; AIP's drivers run through the same loop.
//!
//! The contract, in short (the whole of it is on [`engine_basics::drive`]): feed one input,
//! the deadline or nothing; drain every output, executing each; ask for the next deadline;
//! wait for the next input or that deadline.

pub use engine_basics::drive::{turn, Engine, Host, InputOf, TimeOf, Wake};

use crate::time::Timestamp;

use super::delegator::{Delegator, DelegatorInput, DelegatorOutput};
use super::executor::{Executor, ExecutorInput, ExecutorOutput};
use super::UsageError;

impl Engine for Delegator {
    type Input = DelegatorInput;
    type Output = DelegatorOutput;
    type Time = Timestamp;
    type Refusal = UsageError;
    fn handle(&mut self, now: Timestamp, input: DelegatorInput) -> Result<(), UsageError> {
        Delegator::handle(self, now, input)
    }
    fn handle_timeout(&mut self, now: Timestamp) {
        Delegator::handle_timeout(self, now);
    }
    fn poll_output(&mut self) -> Option<DelegatorOutput> {
        Delegator::poll_output(self)
    }
    fn next_deadline(&self) -> Option<Timestamp> {
        self.poll_timeout().map(|(at, _)| at)
    }
}

impl Engine for Executor {
    type Input = ExecutorInput;
    type Output = ExecutorOutput;
    type Time = Timestamp;
    type Refusal = UsageError;
    fn handle(&mut self, now: Timestamp, input: ExecutorInput) -> Result<(), UsageError> {
        Executor::handle(self, now, input)
    }
    fn handle_timeout(&mut self, now: Timestamp) {
        Executor::handle_timeout(self, now);
    }
    fn poll_output(&mut self) -> Option<ExecutorOutput> {
        Executor::poll_output(self)
    }
    fn next_deadline(&self) -> Option<Timestamp> {
        self.poll_timeout().map(|(at, _)| at)
    }
}
