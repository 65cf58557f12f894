//! The executor engine: every assignment of one executor, from INVITE to cleanup.
//!
//! ## Method groups
//! * **Inputs from the driver**: [`Executor::handle`] with an [`ExecutorInput`] (HTTP requests
//!   with a driver-issued [`RequestId`], SSE subscriptions with a `StreamId`, transport and
//!   task results) and [`Executor::handle_timeout`].
//! * **Application calls**: [`Executor::accept_invite`] / [`Executor::decline_invite`] when
//!   `auto_accept` is off, [`Executor::shutdown`].
//! * **Outputs**: [`Executor::poll_output`] (drain until `None`) and [`Executor::poll_timeout`].
//! * **Getters**: [`Executor::status`], [`Executor::assignment`].
//!
//! ## Flow
//! INVITE → policy (auth, transport, concurrency, TTL cap, access downgrade) →
//! [`ExecutorOutput::AllocateWorkDir`] (`root/{id}`, must be empty; dependency check) → ACCEPT →
//! START (lease checks: `START_EXPIRED`) → `{"ok":true}` → [`ExecutorOutput::SetupTransport`] →
//! SSE `status` → [`ExecutorOutput::RunTask`] → [`ExecutorOutput::CaptureSnapshot`] → SSE
//! `snapshot` + `done` → [`ExecutorOutput::Release`] → [`ExecutorEvent::Ended`] → retained for
//! late subscribers and `GET …/result` until ack or retention → [`ExecutorOutput::DropSnapshot`].
//! A live transport (sshfs) has no snapshot and releases *before* `done`: the task's changes
//! are in the delegator's files only once the mount is detached, and a release that finds the
//! connection lost fails the assignment instead of completing it.
//!
//! Cancel, ERROR from the delegator and lease expiry stop the running task
//! ([`ExecutorOutput::StopTask`]) and release once it stopped (or after a grace period).
//!
//! ## Which directories and processes are the executor's
//! Only what an assignment recorded: its work directory `{work_root}/{id}` once allocated, and
//! the task's OS resources once the driver reported them ([`ExecutorInput::TaskSpawned`]).
//! After a crash, [`Executor::restore`] asks to end recorded tasks
//! ([`ExecutorOutput::EndTask`]) and to release recorded work directories
//! ([`ExecutorOutput::Release`]); nothing else in the work root is ever touched.
//!
//! ## Where things are decided (one file per mechanism)
//! * [`policy`]: whether an INVITE is admitted and on which terms (pure `admit`).
//! * [`auth`]: which credential authorises which request (one check before dispatch).
//! * `handshake`: INVITE → allocation → ACCEPT (or the application's decision) → START.
//! * `transport`: setting up the workspace, and the task's directory.
//! * `task`: the running task, its progress and its outcome.
//! * `snapshots`: capturing the result, `done`, `GET …/result`.
//! * `event_stream`: SSE subscribers, replay for late ones and for resuming ones.
//! * `event_log`: event ids and the bounded replay buffer behind `Last-Event-ID`.
//! * `lease`: every timer ([`ExecutorTimer`]).
//! * `teardown`: failing, stopping, releasing, forgetting.
//! * `record`: the durable journal record and restart recovery.
//! * `assignment`: one assignment's data-carrying `Phase` and the only place its
//!   spec state changes.

mod assignment;
pub mod auth;
mod config;
mod event_log;
mod event_stream;
mod handshake;
mod io;
mod lease;
pub mod policy;
mod record;
mod requests;
mod rounds;
mod snapshots;
mod task;
mod teardown;
mod transport;

#[cfg(test)]
mod rounds_tests;
#[cfg(test)]
mod scenarios;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use engine_basics::ids::SplitMix64;

use crate::engine::timers::Core;
use crate::engine::{RequestId, UsageError};
use crate::error::ErrorInfo;
use crate::id::{DelegationId, SnapshotId};
use crate::state::AssignmentState;
use crate::time::Timestamp;
use crate::wire::{Dialect, ErrorMessage};

pub use self::assignment::ExecutorTimer;
pub use self::auth::{Credential, RequiredAuth};
pub use self::config::{work_root_mode_refusal, work_root_refusal, ExecutorConfig};
pub use self::io::{
    AllocationFailure, AssignmentSummary, AssignmentView, CaptureFailure, ExecutorEvent,
    ExecutorInput, ExecutorOutput, ExecutorStatus, Misbehaviour, Request, Response, ResultBody,
    ResultStatus, SetupFailure, SnapshotDelivery, TaskFailure, WorkspaceLayout,
};
pub use self::record::{
    AssignmentRecord, AssignmentRecordError, RecordedAuth, RecordedOutcome, RECORD_VERSION,
};

use self::assignment::Assignment;

/// The executor engine. See the [module docs](self).
#[derive(Debug)]
pub struct Executor {
    config: ExecutorConfig,
    assignments: BTreeMap<DelegationId, Box<Assignment>>,
    streams: BTreeMap<crate::engine::StreamId, DelegationId>,
    core: Core<ExecutorTimer, ExecutorOutput>,
    /// The seeded generator of snapshot ids ([`ExecutorConfig::id_seed`]).
    ids: SplitMix64,
    /// Acknowledged (forgotten) assignments and when their lease ends: until then a late,
    /// duplicated INVITE for the id is refused instead of starting the task again.
    tombstones: BTreeMap<DelegationId, Timestamp>,
    /// INVITE/START requests not answered yet and the origin they came from: bound to the
    /// delegation once answered without an error.
    pending_origins: BTreeMap<RequestId, (DelegationId, String)>,
    /// Set by [`Executor::shutdown`]: new invitations are declined from then on.
    shutting_down: bool,
}

impl Executor {
    /// An executor with no assignments.
    pub fn new(config: ExecutorConfig) -> Self {
        let ids = SplitMix64::new(config.id_seed);
        Executor {
            config,
            assignments: BTreeMap::new(),
            streams: BTreeMap::new(),
            core: Core::default(),
            ids,
            tombstones: BTreeMap::new(),
            pending_origins: BTreeMap::new(),
            shutting_down: false,
        }
    }

    /// Sets [`ExecutorConfig::public_url`] (e.g. once the listener's port is known).
    pub fn set_public_url(&mut self, url: impl Into<String>) {
        self.config.public_url = Some(url.into());
    }

    /// The configuration.
    pub fn config(&self) -> &ExecutorConfig {
        &self.config
    }

    /// The work directory an assignment gets: `{work_root}/{id}` (the id is validated, so this
    /// never leaves the root).
    pub fn work_dir_for(&self, id: &DelegationId) -> String {
        let root = self.config.work_root.trim_end_matches('/');
        let mut dir = String::with_capacity(root.len() + 1 + id.as_str().len());
        dir.push_str(root);
        dir.push('/');
        dir.push_str(id.as_str());
        dir
    }

    // ----------------------------------------------------------------------------------------
    // Getters

    /// Counts for `GET /awcp/status`.
    pub fn status(&self) -> ExecutorStatus {
        let mut s = ExecutorStatus {
            pending: 0,
            active: 0,
            completed: 0,
            delegations: Vec::new(),
        };
        for (id, a) in &self.assignments {
            match a.state() {
                AssignmentState::Pending => s.pending += 1,
                // Idle between rounds: still holds its work directory.
                AssignmentState::Active | AssignmentState::Idle => {
                    s.active += 1;
                    s.delegations.push((
                        id.clone(),
                        a.work_dir.clone(),
                        a.started_at.unwrap_or(Timestamp::EPOCH),
                    ));
                }
                AssignmentState::Completed | AssignmentState::Error => s.completed += 1,
            }
        }
        s
    }

    /// Every retained assignment, oldest first: what the executor's dashboard lists.
    pub fn overview(&self) -> Vec<AssignmentSummary> {
        let mut all: Vec<AssignmentSummary> = self
            .assignments
            .iter()
            .map(|(id, a)| AssignmentSummary {
                id: id.clone(),
                state: a.state(),
                description: a
                    .round_task
                    .as_ref()
                    .unwrap_or(&a.invite.task)
                    .description
                    .clone(),
                work_dir: a.work_dir.clone(),
                started_at: a.started_at,
                expires_at: a
                    .expires_at
                    .filter(|_| a.state() == AssignmentState::Active),
                round: a.round.max(1),
            })
            .collect();
        all.sort_by_key(|s| (s.started_at.is_none(), s.started_at));
        all
    }

    /// A view of one assignment.
    pub fn assignment(&self, id: &DelegationId) -> Option<AssignmentView> {
        self.assignments.get(id).map(|a| AssignmentView {
            state: a.state(),
            work_dir: a.work_dir.clone(),
            error: a.error.clone(),
            released: a.released(),
            release_error: a.release_error.clone(),
        })
    }

    /// Number of assignments holding resources (pending, active, or not yet released).
    pub fn live_count(&self) -> usize {
        self.assignments.values().filter(|a| !a.released()).count()
    }

    // ----------------------------------------------------------------------------------------
    // Drive contract

    /// Feeds one input.
    pub fn handle(&mut self, now: Timestamp, input: ExecutorInput) -> Result<(), UsageError> {
        self.tick(now);
        match input {
            ExecutorInput::Request {
                request,
                credential,
                origin,
                body,
            } => {
                if let (Some(origin), Request::Message(msg, _)) = (origin, &body) {
                    if matches!(**msg, crate::Message::Invite(_) | crate::Message::Start(_)) {
                        self.pending_origins
                            .insert(request, (msg.delegation_id().clone(), origin));
                    }
                }
                self.on_request(now, request, credential, body);
                Ok(())
            }
            ExecutorInput::Subscribe {
                stream,
                id,
                credential,
                last_event_id,
            } => {
                self.on_subscribe(stream, &id, credential, last_event_id);
                Ok(())
            }
            ExecutorInput::StreamClosed { stream } => {
                self.on_stream_closed(stream);
                Ok(())
            }
            ExecutorInput::WorkDirAllocated { id, result } => self.on_allocated(now, &id, result),
            ExecutorInput::SetupCompleted { id, result } => self.on_setup(now, &id, result),
            ExecutorInput::TaskProgress {
                id,
                message,
                progress,
            } => self.on_progress(now, &id, message, progress),
            ExecutorInput::TaskSpawned { id, handle } => self.on_spawned(id, handle),
            ExecutorInput::TaskFinished { id, result } => self.on_task_finished(now, &id, result),
            ExecutorInput::SnapshotCaptured { id, result } => {
                self.on_captured(now, &id, result.map(|s| *s))
            }
            ExecutorInput::Released { id, result } => self.on_released(now, &id, result),
        }
    }

    /// Fires every timer due at `now`. Early calls do nothing.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.tick(now);
        while let Some((id, timer)) = self.core.timers.pop_due(now) {
            self.on_timer(now, &id, timer);
        }
    }

    /// The next output. Drain until `None` after every call.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<ExecutorOutput> {
        self.core.poll_output()
    }

    /// When to call [`Executor::handle_timeout`] next, and why ([`ExecutorTimer`]). While
    /// outputs are queued this is the last `now` seen ("due now", [`ExecutorTimer::Output`]).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<(Timestamp, ExecutorTimer)> {
        crate::engine::timers::next_wake(&self.core)
    }

    /// When `timer` of `id` fires, if it is armed (for tests and the scenario builder).
    #[cfg(any(test, feature = "_internal-pair"))]
    pub(crate) fn timer_deadline(
        &self,
        id: &DelegationId,
        timer: ExecutorTimer,
    ) -> Option<Timestamp> {
        self.core.timers.deadline(&(id.clone(), timer))
    }

    // ----------------------------------------------------------------------------------------
    // Internals shared by the mechanism files

    fn tick(&mut self, now: Timestamp) {
        self.core.tick(now);
    }

    /// A new snapshot id: six bytes of the seeded generator's next number.
    fn new_snapshot_id(&mut self) -> SnapshotId {
        let b = self.ids.next_u64().to_le_bytes();
        SnapshotId::from_random([b[0], b[1], b[2], b[3], b[4], b[5]])
    }

    fn get_mut(&mut self, id: &DelegationId) -> Result<&mut Assignment, UsageError> {
        self.assignments
            .get_mut(id)
            .map(|a| &mut **a)
            .ok_or_else(|| UsageError::UnknownDelegation(id.clone()))
    }

    fn push(&mut self, out: ExecutorOutput) {
        self.core.outputs.push_back(out);
    }

    fn event(&mut self, ev: ExecutorEvent) {
        self.core.outputs.push_back(ExecutorOutput::Event(ev));
    }

    fn respond(&mut self, request: RequestId, response: Response) {
        // Only the delegator itself, with an INVITE or START it got an answer to, says where
        // its snapshot URLs start.
        if let Some((id, origin)) = self.pending_origins.remove(&request) {
            if !matches!(response, Response::Error { .. }) {
                if let Some(a) = self.assignments.get_mut(&id) {
                    a.origin = Some(origin);
                }
            }
        }
        self.push(ExecutorOutput::Respond { request, response });
    }

    fn respond_error(
        &mut self,
        request: RequestId,
        id: &DelegationId,
        error: ErrorInfo,
        dialect: Dialect,
        status: u16,
    ) {
        self.respond(
            request,
            Response::Error {
                message: ErrorMessage {
                    delegation_id: id.clone(),
                    error,
                },
                dialect,
                status,
            },
        );
    }

    /// Answers 404: the executor does not know delegation `id`.
    fn respond_unknown(&mut self, request: RequestId, id: &DelegationId, dialect: Dialect) {
        let error = ErrorInfo::new(
            crate::error::ErrorCode::NotFound,
            format!("unknown delegation {id}"),
        );
        self.respond_error(request, id, error, dialect, 404);
    }
}
