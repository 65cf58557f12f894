//! One assignment: what the executor holds for a delegation, and its lifecycle.
//!
//! The spec's state ([`AssignmentState`], WIRE.md §8.2) lives in an [`AssignmentMachine`]: the
//! table there is the only authority on which transitions are legal, and
//! [`Executor::transition`] the only place one is applied. What the executor *holds* and
//! *waits for* is the [`Phase`]: a data-carrying enum, so that for example a running task's
//! OS handle exists only while a task runs or is being stopped, a snapshot id only while it
//! is captured, and "released" cannot be combined with "setting up".

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::{RequestId, StreamId, TaskHandle, TaskOutcome};
use crate::error::ErrorInfo;
use crate::id::{DelegationId, SnapshotId};
use crate::state::{AssignmentMachine, AssignmentState, AssignmentTransition};
use crate::time::Timestamp;
use crate::wire::{Accept, AccessMode, Dialect, Feature, Invite, TaskEvent, TransportKind};

use super::auth::BoundCredential;
use super::{Executor, ExecutorEvent, ExecutorOutput};

/// Why the executor wants to be woken: the reason [`Executor::poll_timeout`] reports with its
/// deadline (log it; the driver does nothing different per reason). One doc line per reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ExecutorTimer {
    /// Outputs are queued: drain [`Executor::poll_output`] now (not an armed timer; keep it
    /// first: the range of one delegation's timers starts at it).
    Output,
    /// A pending assignment got no START (or no decision) in time: drop it, free its slot.
    StartDeadline,
    /// The lease ran out while the task was running: stop it, fail with `EXPIRED`.
    Lease,
    /// A stopped task did not finish within `stop_grace`: release its resources anyway.
    StopGrace,
    /// A terminal, released assignment was retained long enough: forget it.
    Retention,
    /// A multi-round assignment stayed idle (no CONTINUE or CLOSE) too long: close it.
    Idle,
}

impl ExecutorTimer {
    /// A short name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutorTimer::Output => "output",
            ExecutorTimer::StartDeadline => "start deadline",
            ExecutorTimer::Lease => "lease",
            ExecutorTimer::StopGrace => "stop grace",
            ExecutorTimer::Retention => "retention",
            ExecutorTimer::Idle => "idle",
        }
    }
}

impl engine_basics::timers::Reason for ExecutorTimer {
    fn reason(&self) -> &'static str {
        self.as_str()
    }
}

impl crate::engine::timers::TimerKind for ExecutorTimer {
    const OUTPUT: ExecutorTimer = ExecutorTimer::Output;
}

/// What an assignment holds and what it waits for (at most one operation in flight).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Phase {
    /// The work directory is being created ([`ExecutorOutput::AllocateWorkDir`]); nothing is
    /// held yet.
    Allocating,
    /// Allocated; the application decides on the INVITE (`auto_accept` off).
    AwaitingDecision,
    /// The work directory is held and nothing is in flight (waiting for START, or ended and
    /// about to be released).
    Idle,
    /// [`ExecutorOutput::SetupTransport`] is in flight.
    SettingUp,
    /// The task runs; `task` is its OS handle once the driver reported it.
    Running {
        /// What ends the task after a crash.
        task: Option<TaskHandle>,
    },
    /// [`ExecutorOutput::StopTask`] (or, after a restart, `EndTask`) is in flight.
    Stopping {
        /// The task's OS handle, if reported.
        task: Option<TaskHandle>,
        /// Whether the work directory is still to be released once the task is gone.
        holds_work_dir: bool,
    },
    /// [`ExecutorOutput::CaptureSnapshot`] is in flight for this snapshot id.
    Capturing {
        /// The id the snapshot will carry.
        snapshot_id: SnapshotId,
    },
    /// [`ExecutorOutput::Release`] (or `RemoveEmptyWorkDir`) is in flight.
    Releasing {
        /// A task that did not stop within the grace period (still journalled).
        unstopped: Option<TaskHandle>,
    },
    /// Everything is released.
    Released {
        /// A task that did not stop within the grace period (still journalled).
        unstopped: Option<TaskHandle>,
    },
}

impl Phase {
    /// The task's OS handle, while one is known.
    pub(crate) fn task(&self) -> Option<&TaskHandle> {
        match self {
            Phase::Running { task } | Phase::Stopping { task, .. } => task.as_ref(),
            Phase::Releasing { unstopped } | Phase::Released { unstopped } => unstopped.as_ref(),
            Phase::Allocating
            | Phase::AwaitingDecision
            | Phase::Idle
            | Phase::SettingUp
            | Phase::Capturing { .. } => None,
        }
    }

    /// Whether nothing is held any more (the work directory is gone).
    pub(crate) fn is_released(&self) -> bool {
        matches!(
            self,
            Phase::Released { .. }
                | Phase::Stopping {
                    holds_work_dir: false,
                    ..
                }
        )
    }

    /// Whether the work directory was ever allocated (journalled as `allocated`).
    pub(crate) fn allocated(&self) -> bool {
        !matches!(self, Phase::Allocating)
    }
}

/// One assignment of the executor.
#[derive(Debug)]
pub(crate) struct Assignment {
    pub(crate) invite: std::sync::Arc<Invite>,
    /// The INVITE as the journal record holds it, encoded at the first record (it never
    /// changes; the journal asks for the record at every change).
    pub(crate) invite_record: std::sync::OnceLock<crate::wire::JsonText>,
    pub(crate) dialect: Dialect,
    /// The spec state; changes only through [`Executor::transition`].
    pub(crate) machine: AssignmentMachine,
    pub(crate) phase: Phase,
    pub(crate) work_dir: String,
    /// The credential that authenticated the INVITE (digest only), when auth is on.
    pub(crate) auth: Option<BoundCredential>,
    pub(crate) transport: TransportKind,
    pub(crate) access: AccessMode,
    pub(crate) ttl: Duration,
    pub(crate) features: Vec<Feature>,
    pub(crate) retention: Duration,
    /// INVITE requests (the first and any duplicates) waiting for ACCEPT or an error.
    pub(crate) invite_requests: Vec<RequestId>,
    pub(crate) accept: Option<Accept>,
    pub(crate) started_at: Option<Timestamp>,
    pub(crate) expires_at: Option<Timestamp>,
    pub(crate) release_error: Option<ErrorInfo>,
    pub(crate) subscribers: BTreeSet<StreamId>,
    pub(crate) outcome: Option<TaskOutcome>,
    pub(crate) error: Option<ErrorInfo>,
    pub(crate) snapshot: Option<Arc<TaskEvent>>,
    /// The delegator acknowledged the result: forget the record once released.
    pub(crate) acked: bool,
    pub(crate) terminal_event: Option<Arc<TaskEvent>>,
    pub(crate) completed_at: Option<Timestamp>,
    /// The origin the delegator used for its accepted INVITE or START: where this
    /// delegation's snapshot URLs start when no public URL is configured. Not journaled (a
    /// restarted executor learns it again, or sends snapshots inline).
    pub(crate) origin: Option<String>,
    /// Rounds were agreed (WIRE.md §17): a round ends with `round_done` and `idle`.
    pub(crate) rounds: bool,
    /// The round running or last ended (1: the START round).
    pub(crate) round: u64,
    /// The last `round_done`, replayed to a delegator that reconnects while idle.
    pub(crate) round_done: Option<Arc<TaskEvent>>,
    /// Where the task runs, once the workspace is set up (later rounds run there too).
    pub(crate) task_dir: Option<String>,
    /// The running round's task (the INVITE's for round 1).
    pub(crate) round_task: Option<crate::wire::TaskSpec>,
    /// A `storage` START's `uploadUrl`: where the result ZIP goes (WIRE.md §11.4). Not
    /// journaled (a restarted executor does not resume a task).
    pub(crate) upload_url: Option<String>,
    /// A `git` START: the transport pushes the result itself ([`super::SnapshotDelivery::Push`]).
    /// Not journaled either.
    pub(crate) pushes_result: bool,
    /// The rounds that ended, oldest first (the last [`MAX_EARLIER_ROUNDS`]).
    pub(crate) earlier: std::collections::VecDeque<crate::engine::EarlierRound>,
    /// Event ids and the replay buffer (not journaled: a restarted executor starts again).
    pub(crate) events: super::event_log::EventLog,
}

/// How many ended rounds an assignment keeps for the next round's agent.
pub(crate) const MAX_EARLIER_ROUNDS: usize = 32;

/// The snapshot an event carries, if it is a `snapshot` event.
pub(crate) fn snapshot_of(ev: &TaskEvent) -> Option<&crate::wire::SnapshotEvent> {
    if let crate::wire::TaskEventKind::Snapshot(s) = &ev.kind {
        Some(s)
    } else {
        None
    }
}

impl Assignment {
    /// The spec state: a projection of the machine.
    pub(crate) fn state(&self) -> AssignmentState {
        self.machine.state()
    }

    /// Whether its resources are released.
    pub(crate) fn released(&self) -> bool {
        self.phase.is_released()
    }
}

impl Executor {
    /// The only place an assignment's spec state changes (through the spec table).
    pub(crate) fn transition(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        event: AssignmentTransition,
    ) -> bool {
        let Some(a) = self.assignments.get_mut(id) else {
            return false;
        };
        match a.machine.apply(event) {
            Ok((from, to)) => {
                if to.is_terminal() {
                    a.completed_at = Some(now);
                }
                tracing::debug!(delegation = %id, %from, %to, "assignment state changed");
                self.core
                    .outputs
                    .push_back(ExecutorOutput::Event(ExecutorEvent::StateChanged {
                        id: id.clone(),
                        from,
                        to,
                    }));
                true
            }
            Err(e) => {
                tracing::debug!(delegation = %id, "ignored: {e}");
                false
            }
        }
    }

    /// The assignment whose operation (a phase matching `in_flight`) just finished, with its
    /// phase set to [`Phase::Idle`] and the finished phase returned; `None` if that operation
    /// is not the one in flight (a stale or duplicate completion).
    pub(crate) fn finish(
        &mut self,
        id: &DelegationId,
        in_flight: fn(&Phase) -> bool,
    ) -> Result<Option<(&mut Assignment, Phase)>, crate::engine::UsageError> {
        let a = self.get_mut(id)?;
        if !in_flight(&a.phase) {
            return Ok(None);
        }
        let old = std::mem::replace(&mut a.phase, Phase::Idle);
        Ok(Some((a, old)))
    }
}
