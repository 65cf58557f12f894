//! The task state machine, exactly as the spec's transition table (§4.2, unchanged from
//! v01.00 to v02.02), and what a command does in each state.
//!
//! | # | from | cause | to |
//! |---|---|---|---|
//! | 1/2 | (none) | start | accepted / rejected |
//! | 3 | accepted | (partner) | working |
//! | 4 | accepted | cancel | canceled |
//! | 5 | working | (partner) | awaiting-completion |
//! | 6 | working | (partner) | awaiting-input |
//! | 7 | working | (partner) | failed |
//! | 8 | working | cancel | canceled |
//! | 9 | awaiting-input | continue | working |
//! | 10 | awaiting-input | cancel | canceled |
//! | 11 | awaiting-input | timeout | canceled |
//! | 12 | awaiting-completion | complete | completed |
//! | 13 | awaiting-completion | continue | working |
//! | 14 | awaiting-completion | cancel | canceled |
//! | 15 | awaiting-completion | timeout | completed |
//!
//! Completed, canceled, failed and rejected are terminal. A command that has no row for the
//! current state is ignored (the answer is the current task, not an error): see
//! [`command_effect`].

use crate::error::{StateName, UsageError};
use crate::wire::{CommandKind, TaskState};

/// What moves a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cause {
    /// The leader's start command (rows 1/2).
    Start,
    /// The partner's own decision (rows 3, 5, 6, 7).
    Partner,
    /// The leader's cancel (rows 4, 8, 10, 14).
    Cancel,
    /// The leader's continue (rows 9, 13).
    Continue,
    /// The leader's complete (row 12).
    Complete,
    /// An awaiting-input or awaiting-completion timeout (rows 11, 15).
    Timeout,
}

use Cause as C;
use TaskState as S;

/// The spec's table: `(from, cause, to)`; `None` is "no task yet".
pub const TRANSITIONS: [(Option<TaskState>, Cause, TaskState); 15] = [
    (None, C::Start, S::Accepted),
    (None, C::Start, S::Rejected),
    (Some(S::Accepted), C::Partner, S::Working),
    (Some(S::Accepted), C::Cancel, S::Canceled),
    (Some(S::Working), C::Partner, S::AwaitingCompletion),
    (Some(S::Working), C::Partner, S::AwaitingInput),
    (Some(S::Working), C::Partner, S::Failed),
    (Some(S::Working), C::Cancel, S::Canceled),
    (Some(S::AwaitingInput), C::Continue, S::Working),
    (Some(S::AwaitingInput), C::Cancel, S::Canceled),
    (Some(S::AwaitingInput), C::Timeout, S::Canceled),
    (Some(S::AwaitingCompletion), C::Complete, S::Completed),
    (Some(S::AwaitingCompletion), C::Continue, S::Working),
    (Some(S::AwaitingCompletion), C::Cancel, S::Canceled),
    (Some(S::AwaitingCompletion), C::Timeout, S::Completed),
];

/// Whether the table has the row `from --cause--> to`.
pub fn is_allowed(from: Option<TaskState>, cause: Cause, to: TaskState) -> bool {
    TRANSITIONS
        .iter()
        .any(|&(f, c, t)| f == from && c == cause && t == to)
}

/// Whether some cause moves `from` to `to` in one step.
pub fn is_step(from: Option<TaskState>, to: TaskState) -> bool {
    TRANSITIONS.iter().any(|&(f, _, t)| f == from && t == to)
}

/// Whether `to` can follow `from` after one or more steps (what a leader that misses
/// intermediate states may observe). Terminal states reach nothing.
pub fn is_reachable(from: Option<TaskState>, to: TaskState) -> bool {
    let mut seen = [false; 8];
    let mut stack: Vec<Option<TaskState>> = vec![from];
    while let Some(s) = stack.pop() {
        for &(f, _, t) in &TRANSITIONS {
            if f == s {
                if t == to {
                    return true;
                }
                let i = t as usize;
                if !seen[i] {
                    seen[i] = true;
                    stack.push(Some(t));
                }
            }
        }
    }
    false
}

/// What a leader command does in `state`: the cause and the new state, or `None` when the
/// spec says it is ignored (start on an existing task, continue outside the awaiting states,
/// complete outside awaiting-completion, cancel on a terminal task, get, re-stream).
pub fn command_effect(state: TaskState, command: &CommandKind) -> Option<(Cause, TaskState)> {
    match (command, state) {
        (CommandKind::Continue, S::AwaitingInput | S::AwaitingCompletion) => {
            Some((C::Continue, S::Working))
        }
        (
            CommandKind::Cancel,
            S::Accepted | S::Working | S::AwaitingInput | S::AwaitingCompletion,
        ) => Some((C::Cancel, S::Canceled)),
        (CommandKind::Complete, S::AwaitingCompletion) => Some((C::Complete, S::Completed)),
        _ => None,
    }
}

/// One task's state, moved only through the table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskMachine {
    state: Option<TaskState>,
}

impl TaskMachine {
    /// A task not started yet.
    pub fn new() -> Self {
        TaskMachine { state: None }
    }

    /// The state (`None` before the start decision).
    pub fn state(&self) -> Option<TaskState> {
        self.state
    }

    /// Applies `cause → to`, or refuses it (state unchanged) when the table has no such row.
    pub fn apply(
        &mut self,
        task: &str,
        cause: Cause,
        to: TaskState,
    ) -> Result<TaskState, UsageError> {
        if !is_allowed(self.state, cause, to) {
            return Err(UsageError::IllegalTransition {
                task: task.to_owned(),
                from: StateName(self.state),
                to,
            });
        }
        self.state = Some(to);
        Ok(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_row_loops_and_nothing_leaves_a_terminal_state() {
        assert!(TRANSITIONS.iter().all(|(f, _, t)| *f != Some(*t)));
        for from in TaskState::ALL.into_iter().filter(|s| s.is_terminal()) {
            for to in TaskState::ALL {
                assert!(!is_step(Some(from), to));
                assert!(!is_reachable(Some(from), to));
            }
        }
    }

    #[test]
    fn start_goes_only_to_accepted_or_rejected() {
        for to in TaskState::ALL {
            let ok = matches!(to, S::Accepted | S::Rejected);
            assert_eq!(is_allowed(None, C::Start, to), ok, "{to}");
        }
        assert!(!is_allowed(None, C::Partner, S::Working));
    }

    #[test]
    fn accepted_cannot_fail_directly_but_can_via_working() {
        let mut m = TaskMachine::new();
        m.apply("t", C::Start, S::Accepted).unwrap();
        assert!(m.apply("t", C::Partner, S::Failed).is_err());
        assert_eq!(m.state(), Some(S::Accepted));
        m.apply("t", C::Partner, S::Working).unwrap();
        m.apply("t", C::Partner, S::Failed).unwrap();
        assert!(is_reachable(Some(S::Accepted), S::Failed));
    }

    #[test]
    fn timeouts_cancel_input_and_complete_completion() {
        assert!(is_allowed(Some(S::AwaitingInput), C::Timeout, S::Canceled));
        assert!(is_allowed(
            Some(S::AwaitingCompletion),
            C::Timeout,
            S::Completed
        ));
        assert!(!is_allowed(Some(S::Working), C::Timeout, S::Canceled));
    }

    #[test]
    fn commands_in_the_wrong_state_are_ignored() {
        assert_eq!(command_effect(S::Working, &CommandKind::Complete), None);
        assert_eq!(command_effect(S::Accepted, &CommandKind::Continue), None);
        assert_eq!(command_effect(S::Completed, &CommandKind::Cancel), None);
        assert_eq!(command_effect(S::Working, &CommandKind::Get), None);
        assert_eq!(
            command_effect(S::AwaitingCompletion, &CommandKind::Continue),
            Some((C::Continue, S::Working))
        );
        for s in TaskState::ALL {
            for k in [
                CommandKind::Continue,
                CommandKind::Cancel,
                CommandKind::Complete,
            ] {
                if let Some((c, t)) = command_effect(s, &k) {
                    assert!(is_allowed(Some(s), c, t), "{s} {k}");
                }
            }
        }
    }

    #[test]
    fn cycles_between_working_and_the_awaiting_states_are_reachable() {
        assert!(is_reachable(
            Some(S::AwaitingCompletion),
            S::AwaitingCompletion
        ));
        assert!(is_reachable(Some(S::Working), S::Working));
        assert!(!is_reachable(Some(S::Accepted), S::Accepted));
        assert!(is_reachable(None, S::Completed));
    }
}
