//! The two state machines of WIRE.md §8, exactly as the spec's tables say.
//!
//! A state can only change through [`DelegationMachine::apply`] or
//! [`AssignmentMachine::apply`]; the fields are private, so no other code can move a
//! delegation or an assignment.

use core::fmt;

/// The delegator's 10 states (WIRE.md §8.1, and `idle` of multi-round delegations, §17).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DelegationState {
    /// Created, INVITE not sent yet.
    Created,
    /// INVITE sent, waiting for ACCEPT.
    Invited,
    /// ACCEPT received, START not sent yet.
    Accepted,
    /// START sent, the executor is setting up.
    Started,
    /// The task is running.
    Running,
    /// Between two rounds of a multi-round delegation: the executor keeps the work directory
    /// and waits for CONTINUE or CLOSE.
    Idle,
    /// Terminal: the task finished.
    Completed,
    /// Terminal: something failed.
    Error,
    /// Terminal: cancelled.
    Cancelled,
    /// Terminal: the lease ran out.
    Expired,
}

impl DelegationState {
    /// Every state, in table order.
    pub const ALL: [DelegationState; 10] = [
        DelegationState::Created,
        DelegationState::Invited,
        DelegationState::Accepted,
        DelegationState::Started,
        DelegationState::Running,
        DelegationState::Idle,
        DelegationState::Completed,
        DelegationState::Error,
        DelegationState::Cancelled,
        DelegationState::Expired,
    ];

    /// Whether no transition leaves this state.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            DelegationState::Completed
                | DelegationState::Error
                | DelegationState::Cancelled
                | DelegationState::Expired
        )
    }

    /// The lowercase name used on the wire and in records.
    pub fn as_str(self) -> &'static str {
        match self {
            DelegationState::Created => "created",
            DelegationState::Invited => "invited",
            DelegationState::Accepted => "accepted",
            DelegationState::Started => "started",
            DelegationState::Running => "running",
            DelegationState::Idle => "idle",
            DelegationState::Completed => "completed",
            DelegationState::Error => "error",
            DelegationState::Cancelled => "cancelled",
            DelegationState::Expired => "expired",
        }
    }

    /// Parses the lowercase name.
    pub fn parse(s: &str) -> Option<DelegationState> {
        DelegationState::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// The allowed targets (WIRE.md §8.1, first table).
    pub fn allowed_targets(self) -> &'static [DelegationState] {
        use DelegationState::*;
        match self {
            Created => &[Invited, Error, Cancelled],
            Invited => &[Accepted, Error, Cancelled, Expired],
            Accepted => &[Started, Error, Cancelled, Expired],
            Started => &[Running, Error, Cancelled],
            Running => &[Idle, Completed, Error, Cancelled, Expired],
            Idle => &[Running, Completed, Error, Cancelled],
            Completed | Error | Cancelled | Expired => &[],
        }
    }
}

impl fmt::Display for DelegationState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The delegator's transitions (WIRE.md §8.1, second table): what moves a delegation from one
/// [`DelegationState`] to the next. Not to be confused with the application events
/// ([`DelegatorEvent`](crate::DelegatorEvent)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DelegationTransition {
    /// created → invited
    SendInvite,
    /// invited → accepted
    ReceiveAccept,
    /// accepted → started
    SendStart,
    /// started → running
    SetupComplete,
    /// running, idle → completed (in `idle`: the executor closed the delegation itself)
    ReceiveDone,
    /// running → idle: `round_done`, a round of a multi-round delegation ended
    ReceiveRoundDone,
    /// idle → running: CONTINUE sent, the next round starts
    SendContinue,
    /// running → idle: the executor refused the CONTINUE just sent (the round did not start)
    ContinueRefused,
    /// idle → completed: CLOSE sent
    SendClose,
    /// any non-terminal → error
    ReceiveError,
    /// any non-terminal → error
    SendError,
    /// any non-terminal → cancelled
    Cancel,
    /// invited, accepted, running → expired (never from created or started)
    Expire,
}

impl DelegationTransition {
    /// Whether a message from the executor causes this transition (as opposed to this side's
    /// own decision): a refused one is the executor's fault.
    pub fn is_received(self) -> bool {
        matches!(
            self,
            DelegationTransition::ReceiveAccept
                | DelegationTransition::SetupComplete
                | DelegationTransition::ReceiveDone
                | DelegationTransition::ReceiveRoundDone
                | DelegationTransition::ReceiveError
        )
    }

    /// Every transition.
    pub const ALL: [DelegationTransition; 13] = [
        DelegationTransition::SendInvite,
        DelegationTransition::ReceiveAccept,
        DelegationTransition::SendStart,
        DelegationTransition::SetupComplete,
        DelegationTransition::ReceiveDone,
        DelegationTransition::ReceiveRoundDone,
        DelegationTransition::SendContinue,
        DelegationTransition::ContinueRefused,
        DelegationTransition::SendClose,
        DelegationTransition::ReceiveError,
        DelegationTransition::SendError,
        DelegationTransition::Cancel,
        DelegationTransition::Expire,
    ];

    /// The target of this event from `from`, if the event is valid there.
    pub fn target(self, from: DelegationState) -> Option<DelegationState> {
        use DelegationState as S;
        use DelegationTransition as E;
        if from.is_terminal() {
            return None;
        }
        match (self, from) {
            (E::SendInvite, S::Created) => Some(S::Invited),
            (E::ReceiveAccept, S::Invited) => Some(S::Accepted),
            (E::SendStart, S::Accepted) => Some(S::Started),
            (E::SetupComplete, S::Started) => Some(S::Running),
            (E::ReceiveDone, S::Running | S::Idle) => Some(S::Completed),
            (E::ReceiveRoundDone | E::ContinueRefused, S::Running) => Some(S::Idle),
            (E::SendContinue, S::Idle) => Some(S::Running),
            (E::SendClose, S::Idle) => Some(S::Completed),
            (E::ReceiveError | E::SendError, _) => Some(S::Error),
            (E::Cancel, _) => Some(S::Cancelled),
            (E::Expire, S::Invited | S::Accepted | S::Running) => Some(S::Expired),
            _ => None,
        }
    }
}

/// An event was applied in a state where it is not valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("illegal transition: {event:?} in state {from}")]
pub struct IllegalTransition<S: fmt::Display + fmt::Debug, E: fmt::Debug> {
    /// The state the machine was in.
    pub from: S,
    /// The event that was refused.
    pub event: E,
}

/// One delegation's state; changes only through [`DelegationMachine::apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegationMachine {
    state: DelegationState,
}

impl Default for DelegationMachine {
    fn default() -> Self {
        Self::new()
    }
}

impl DelegationMachine {
    /// A machine in `created`.
    pub fn new() -> Self {
        DelegationMachine {
            state: DelegationState::Created,
        }
    }

    /// Restores a machine from a persisted state.
    pub fn restore(state: DelegationState) -> Self {
        DelegationMachine { state }
    }

    /// The current state.
    pub fn state(&self) -> DelegationState {
        self.state
    }

    /// Whether `event` is valid now.
    pub fn can(&self, event: DelegationTransition) -> bool {
        event.target(self.state).is_some()
    }

    /// Applies `event`; returns `(from, to)` or refuses without changing anything.
    pub fn apply(
        &mut self,
        event: DelegationTransition,
    ) -> Result<
        (DelegationState, DelegationState),
        IllegalTransition<DelegationState, DelegationTransition>,
    > {
        let from = self.state;
        let to = event
            .target(from)
            .ok_or(IllegalTransition { from, event })?;
        debug_assert!(from.allowed_targets().contains(&to));
        self.state = to;
        Ok((from, to))
    }
}

/// The executor's assignment states (WIRE.md §8.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AssignmentState {
    /// Accepted, waiting for START.
    Pending,
    /// START received: setting up, running or capturing.
    Active,
    /// Between two rounds of a multi-round delegation: the work directory is kept, waiting
    /// for CONTINUE or CLOSE.
    Idle,
    /// Terminal: done.
    Completed,
    /// Terminal: failed, cancelled or expired (the code says which).
    Error,
}

impl AssignmentState {
    /// Whether no transition leaves this state.
    pub fn is_terminal(self) -> bool {
        matches!(self, AssignmentState::Completed | AssignmentState::Error)
    }

    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            AssignmentState::Pending => "pending",
            AssignmentState::Active => "active",
            AssignmentState::Idle => "idle",
            AssignmentState::Completed => "completed",
            AssignmentState::Error => "error",
        }
    }

    /// Parses the lowercase name.
    pub fn parse(s: &str) -> Option<AssignmentState> {
        [
            AssignmentState::Pending,
            AssignmentState::Active,
            AssignmentState::Idle,
            AssignmentState::Completed,
            AssignmentState::Error,
        ]
        .into_iter()
        .find(|st| st.as_str() == s)
    }
}

impl fmt::Display for AssignmentState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The executor's transitions (WIRE.md §8.2): what moves an assignment from one spec state to
/// another. Not to be confused with [`crate::ExecutorEvent`], what the application is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AssignmentTransition {
    /// pending → active
    ReceiveStart,
    /// active → completed
    TaskComplete,
    /// active → idle: a round of a multi-round delegation ended (`round_done`)
    RoundComplete,
    /// idle → active: CONTINUE received, the next round starts
    ReceiveContinue,
    /// idle → completed: CLOSE received, or the idle time ran out
    Close,
    /// active → error
    TaskFail,
    /// pending, active, idle → error
    ReceiveError,
    /// pending, active, idle → error. Also used for system cancellation: lease expiry (stored as
    /// `EXPIRED` / `START_EXPIRED`) and shutdown.
    Cancel,
}

/// The former name of [`AssignmentTransition`], kept while callers move over.
pub type AssignmentEvent = AssignmentTransition;

impl AssignmentTransition {
    /// Every event.
    pub const ALL: [AssignmentTransition; 8] = [
        AssignmentTransition::ReceiveStart,
        AssignmentTransition::TaskComplete,
        AssignmentTransition::RoundComplete,
        AssignmentTransition::ReceiveContinue,
        AssignmentTransition::Close,
        AssignmentTransition::TaskFail,
        AssignmentTransition::ReceiveError,
        AssignmentTransition::Cancel,
    ];

    /// The target of this event from `from`, if valid.
    pub fn target(self, from: AssignmentState) -> Option<AssignmentState> {
        use AssignmentState as S;
        use AssignmentTransition as E;
        match (self, from) {
            (E::ReceiveStart, S::Pending) => Some(S::Active),
            (E::TaskComplete, S::Active) => Some(S::Completed),
            (E::RoundComplete, S::Active) => Some(S::Idle),
            (E::ReceiveContinue, S::Idle) => Some(S::Active),
            (E::Close, S::Idle) => Some(S::Completed),
            (E::TaskFail, S::Active) => Some(S::Error),
            (E::ReceiveError | E::Cancel, S::Pending | S::Active | S::Idle) => Some(S::Error),
            _ => None,
        }
    }
}

/// One assignment's state; changes only through [`AssignmentMachine::apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignmentMachine {
    state: AssignmentState,
}

impl Default for AssignmentMachine {
    fn default() -> Self {
        Self::new()
    }
}

impl AssignmentMachine {
    /// A machine in `pending`.
    pub fn new() -> Self {
        AssignmentMachine {
            state: AssignmentState::Pending,
        }
    }

    /// Restores a machine from a persisted state.
    pub fn restore(state: AssignmentState) -> Self {
        AssignmentMachine { state }
    }

    /// The current state.
    pub fn state(&self) -> AssignmentState {
        self.state
    }

    /// Applies `event`; returns `(from, to)` or refuses without changing anything.
    pub fn apply(
        &mut self,
        event: AssignmentTransition,
    ) -> Result<
        (AssignmentState, AssignmentState),
        IllegalTransition<AssignmentState, AssignmentTransition>,
    > {
        let from = self.state;
        let to = event
            .target(from)
            .ok_or(IllegalTransition { from, event })?;
        self.state = to;
        Ok((from, to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delegation_events_reach_exactly_the_allowed_targets() {
        for from in DelegationState::ALL {
            let mut reached: Vec<_> = DelegationTransition::ALL
                .iter()
                .filter_map(|e| e.target(from))
                .collect();
            reached.sort();
            reached.dedup();
            let mut allowed = from.allowed_targets().to_vec();
            allowed.sort();
            assert_eq!(reached, allowed, "from {from}");
        }
    }

    #[test]
    fn expire_is_never_valid_from_created_or_started() {
        for from in [DelegationState::Created, DelegationState::Started] {
            assert_eq!(DelegationTransition::Expire.target(from), None);
        }
    }

    #[test]
    fn terminal_states_are_final() {
        for st in DelegationState::ALL.into_iter().filter(|s| s.is_terminal()) {
            let mut m = DelegationMachine::restore(st);
            for e in DelegationTransition::ALL {
                assert!(m.apply(e).is_err());
                assert_eq!(m.state(), st);
            }
        }
    }

    #[test]
    fn happy_path_walks_the_table() {
        let mut m = DelegationMachine::new();
        for e in [
            DelegationTransition::SendInvite,
            DelegationTransition::ReceiveAccept,
            DelegationTransition::SendStart,
            DelegationTransition::SetupComplete,
            DelegationTransition::ReceiveDone,
        ] {
            m.apply(e).unwrap();
        }
        assert_eq!(m.state(), DelegationState::Completed);
    }

    #[test]
    fn assignment_table() {
        use AssignmentState as S;
        use AssignmentTransition as E;
        let cases = [
            (E::ReceiveStart, S::Pending, Some(S::Active)),
            (E::ReceiveStart, S::Active, None),
            (E::TaskComplete, S::Active, Some(S::Completed)),
            (E::TaskComplete, S::Pending, None),
            (E::TaskFail, S::Active, Some(S::Error)),
            (E::TaskFail, S::Pending, None),
            (E::ReceiveError, S::Pending, Some(S::Error)),
            (E::Cancel, S::Active, Some(S::Error)),
            (E::Cancel, S::Completed, None),
            (E::ReceiveError, S::Error, None),
            (E::RoundComplete, S::Active, Some(S::Idle)),
            (E::RoundComplete, S::Idle, None),
            (E::ReceiveContinue, S::Idle, Some(S::Active)),
            (E::ReceiveContinue, S::Active, None),
            (E::Close, S::Idle, Some(S::Completed)),
            (E::Close, S::Active, None),
            (E::Cancel, S::Idle, Some(S::Error)),
        ];
        for (e, from, to) in cases {
            assert_eq!(e.target(from), to, "{e:?} from {from}");
        }
    }
}
