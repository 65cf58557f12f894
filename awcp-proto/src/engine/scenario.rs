//! The scenario builder (ureq-proto's): one delegation on a [`Pair`], fast-forwarded to a
//! named point of its life. **Not a stable API** (feature `_internal-pair`).

use crate::engine::executor::ExecutorTimer;
use crate::engine::pair::{Pair, TaskScript};
use crate::id::DelegationId;
use crate::state::AssignmentState;
use crate::wire::Dialect;

/// Fast-forwards one delegation to a named point of its life (ureq-proto's scenario builder):
/// `Scenario::new().to_running().fire(ExecutorTimer::Lease)`.
#[derive(Debug)]
pub struct Scenario {
    /// The pair.
    pub pair: Pair,
    /// The delegation.
    pub id: DelegationId,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario::new()
    }
}

impl Scenario {
    /// A pair with default configurations and one delegation, not started yet.
    pub fn new() -> Scenario {
        Scenario::with(Pair::default_pair())
    }

    /// One delegation on `pair`, not started yet.
    pub fn with(pair: Pair) -> Scenario {
        Scenario {
            pair,
            id: DelegationId::new("dlg_scenario").unwrap_or_else(|_| unreachable!()),
        }
    }

    /// Records a transcript from here on.
    pub fn recording(mut self) -> Scenario {
        self.pair.record = true;
        self
    }

    /// The executor's task hangs until stopped.
    pub fn hanging_task(mut self) -> Scenario {
        self.pair.task = TaskScript::Hang;
        self
    }

    /// Delegated and accepted: the executor's assignment is pending and waits for START.
    /// (The START is held back: the delegator's requests are dropped from here on until
    /// [`Scenario::to_running`].)
    pub fn to_pending(mut self) -> Scenario {
        let task = std::mem::replace(&mut self.pair.task, TaskScript::Hang);
        self.pair.delegate(&self.id, Dialect::Reference);
        self.pair.drive();
        self.pair.task = task;
        self
    }

    /// The task runs on the executor (it hangs there until something ends it).
    pub fn to_running(mut self) -> Scenario {
        self.pair.task = TaskScript::Hang;
        if self.pair.assignment_state(&self.id).is_none() {
            self.pair.delegate(&self.id, Dialect::Reference);
        }
        self.pair.drive();
        assert_eq!(
            self.pair.assignment_state(&self.id),
            Some(AssignmentState::Active),
            "the scenario reached the running task"
        );
        self
    }

    /// Runs the whole lifecycle to its end (both sides done, nothing left to wake for).
    pub fn to_end(mut self) -> Scenario {
        if self.pair.assignment_state(&self.id).is_none() {
            self.pair.delegate(&self.id, Dialect::Reference);
        }
        self.pair.run(1_000);
        self
    }

    /// Fires the executor's `timer` for the delegation now (moving time to its deadline),
    /// then drives both sides.
    pub fn fire(mut self, timer: ExecutorTimer) -> Scenario {
        let at = self
            .pair
            .executor
            .timer_deadline(&self.id, timer)
            .unwrap_or_else(|| panic!("{timer:?} is not armed"));
        self.pair.now = self.pair.now.max(at);
        self.pair.executor.handle_timeout(self.pair.now);
        self.pair.drive();
        self
    }
}
