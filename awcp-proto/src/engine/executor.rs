//! The executor engine: every assignment of one executor, from INVITE to cleanup.
//!
//! ## Method groups
//! * **Inputs from the driver**: [`Executor::handle`] with an [`ExecutorInput`] (HTTP requests
//!   with a driver-issued [`RequestId`], SSE subscriptions with a [`StreamId`], transport and
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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::engine::timers::Core;
use crate::engine::{
    CapturedSnapshot, IdSource, RequestId, SnapshotKind, StreamId, TaskHandle, TaskOutcome,
    UsageError,
};
use crate::error::{ErrorCode, ErrorInfo};
use crate::id::{DelegationId, SnapshotId};
use crate::state::{AssignmentEvent, AssignmentMachine, AssignmentState};
use crate::time::Timestamp;
use crate::wire::{
    feature, Accept, AccessMode, Dialect, DoneEvent, ErrorMessage, ExecutorConstraints, Invite,
    Message, Resource, SandboxProfile, SnapshotEvent, StatusEvent, TaskEvent, TaskEventKind,
    TaskSpec, TaskStatus, TransportHandle, TransportKind,
};

use crate::engine::auth::{self, BoundCredential};
pub use crate::engine::auth::{Credential, RequiredAuth};

/// Executor policy. `Default` gives the reference's defaults (WIRE.md §9).
#[derive(Clone, Debug)]
pub struct ExecutorConfig {
    /// Root of all work directories; an assignment's is `{work_root}/{delegationId}`.
    pub work_root: String,
    /// Most assignments alive at once (pending, active, or still releasing); more → `DECLINED`.
    pub max_concurrent: usize,
    /// Longest lease granted; longer requests are capped (ACCEPT `maxTtlSeconds`).
    pub max_ttl_seconds: u64,
    /// Whether `ro` delegations are allowed.
    pub allow_ro: bool,
    /// Whether `rw` delegations are allowed (if not, `rw` requests are downgraded to `ro`).
    pub allow_rw: bool,
    /// Retention used when the INVITE names none.
    pub default_retention: Duration,
    /// Cap on the retention a delegator may ask for.
    pub max_retention: Duration,
    /// Declared sandbox (all `true` by default, like the reference).
    pub sandbox: SandboxProfile,
    /// Accept every INVITE that passes policy; otherwise the application decides through
    /// [`ExecutorEvent::InviteReceived`].
    pub auto_accept: bool,
    /// Credential required from delegators (see [`crate::engine::auth`] for which credential
    /// authorises which request).
    pub auth: Option<RequiredAuth>,
    /// How long an accepted assignment waits for START before it is dropped and its slot
    /// freed (never longer than its lease). Pending assignments hold slots, so this keeps
    /// stalled or abandoned INVITEs from exhausting `max_concurrent`.
    pub start_timeout: Duration,
    /// Transports this executor serves; the first is used when INVITE names none.
    pub transports: Vec<TransportKind>,
    /// Protocol extensions this executor supports.
    pub features: Vec<String>,
    /// How long a task may take to stop after [`ExecutorOutput::StopTask`] before its
    /// resources are released anyway.
    pub stop_grace: Duration,
    /// Seed for snapshot ids.
    pub id_seed: u64,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            work_root: "/tmp/awcp/workspaces".to_owned(),
            max_concurrent: 5,
            max_ttl_seconds: 3600,
            allow_ro: true,
            allow_rw: true,
            default_retention: Duration::from_millis(604_800_000),
            max_retention: Duration::from_millis(604_800_000),
            sandbox: SandboxProfile {
                cwd_only: Some(true),
                allow_network: Some(true),
                allow_exec: Some(true),
            },
            auto_accept: true,
            auth: None,
            start_timeout: Duration::from_secs(60),
            transports: vec![TransportKind::Archive],
            features: vec![
                feature::DELTA_SNAPSHOTS.to_owned(),
                feature::ARCHIVE_URL.to_owned(),
            ],
            stop_grace: Duration::from_secs(10),
            id_seed: 0,
        }
    }
}

/// What an inbound HTTP request asks.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    /// `POST /awcp` with a decoded message.
    Message(Box<Message>, Dialect),
    /// `POST /awcp/cancel/{id}`.
    Cancel(DelegationId),
    /// `POST /awcp/tasks/{id}/ack`.
    Ack(DelegationId),
    /// `GET /awcp/tasks/{id}/result`.
    Result(DelegationId),
}

/// An input for [`Executor::handle`].
#[derive(Clone, Debug, PartialEq)]
pub enum ExecutorInput {
    /// An HTTP request; answer it when [`ExecutorOutput::Respond`] names `request`.
    Request {
        /// Driver-issued handle.
        request: RequestId,
        /// The credential presented in a header (bearer token or API key), if any.
        credential: Option<Credential>,
        /// What is asked.
        body: Request,
    },
    /// `GET /awcp/tasks/{id}/events` opened; the engine sends events to `stream`.
    Subscribe {
        /// Driver-issued stream handle.
        stream: StreamId,
        /// The delegation.
        id: DelegationId,
        /// The credential presented in a header, if any.
        credential: Option<Credential>,
    },
    /// The subscriber went away.
    StreamClosed {
        /// The stream.
        stream: StreamId,
    },
    /// [`ExecutorOutput::AllocateWorkDir`] finished (`DEP_MISSING`, `WORKDIR_DENIED` on
    /// failure, with nothing left behind).
    WorkDirAllocated {
        /// The delegation.
        id: DelegationId,
        /// Outcome.
        result: Result<(), ErrorInfo>,
    },
    /// [`ExecutorOutput::SetupTransport`] finished.
    SetupCompleted {
        /// The delegation.
        id: DelegationId,
        /// Outcome (`SETUP_FAILED`, `CHECKSUM_MISMATCH`, …).
        result: Result<(), ErrorInfo>,
    },
    /// The task's OS resources exist (e.g. its process group): journal them (the engine emits
    /// [`ExecutorEvent::RecordChanged`]) so a restarted executor can end them.
    TaskSpawned {
        /// The delegation.
        id: DelegationId,
        /// What the driver needs to end the task after a crash.
        handle: TaskHandle,
    },
    /// The running task reported progress.
    TaskProgress {
        /// The delegation.
        id: DelegationId,
        /// Text.
        message: Option<String>,
        /// Figure.
        progress: Option<f64>,
    },
    /// The task ended (also after [`ExecutorOutput::StopTask`]).
    TaskFinished {
        /// The delegation.
        id: DelegationId,
        /// Outcome.
        result: Result<TaskOutcome, ErrorInfo>,
    },
    /// [`ExecutorOutput::CaptureSnapshot`] finished.
    SnapshotCaptured {
        /// The delegation.
        id: DelegationId,
        /// The snapshot.
        result: Result<CapturedSnapshot, ErrorInfo>,
    },
    /// [`ExecutorOutput::Release`] finished (everything is removed either way).
    Released {
        /// The delegation.
        id: DelegationId,
        /// `Err`: the release found a problem. For a live transport, whose release comes
        /// before `done`, a lost connection or a mount that had to be detached lazily means
        /// what the task wrote may be incomplete: the assignment fails with this error
        /// instead of completing. Otherwise it is kept in [`AssignmentView::release_error`].
        result: Result<(), ErrorInfo>,
    },
}

/// The answer to an inbound request.
#[derive(Clone, Debug, PartialEq)]
pub enum Response {
    /// ACCEPT (HTTP 200).
    Accept(Accept, Dialect),
    /// An ERROR message body with the HTTP status to use (200 for declined INVITEs, as the
    /// reference does; 401/404/409/400 otherwise).
    Error {
        /// The message.
        message: ErrorMessage,
        /// Dialect.
        dialect: Dialect,
        /// HTTP status.
        status: u16,
    },
    /// `{"ok":true}` (HTTP 200).
    Ok,
    /// `{"ok":true,"cancelled":true}` (HTTP 200).
    Cancelled,
    /// The body of `GET …/result`.
    Result(Box<ResultBody>),
}

impl Response {
    /// The HTTP status code to answer with.
    pub fn http_status(&self) -> u16 {
        match self {
            Response::Error { status, .. } => *status,
            Response::Result(r) if r.status == ResultStatus::NotFound => 404,
            _ => 200,
        }
    }
}

/// `status` of `GET …/result`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResultStatus {
    /// Not terminal yet.
    Running,
    /// Completed.
    Completed,
    /// Failed, cancelled or expired.
    Error,
    /// Unknown id (HTTP 404).
    NotFound,
}

impl ResultStatus {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            ResultStatus::Running => "running",
            ResultStatus::Completed => "completed",
            ResultStatus::Error => "error",
            ResultStatus::NotFound => "not_found",
        }
    }
}

/// The body of `GET …/result` (WIRE.md §5).
#[derive(Clone, Debug, PartialEq)]
pub struct ResultBody {
    /// Status.
    pub status: ResultStatus,
    /// Completion time.
    pub completed_at: Option<Timestamp>,
    /// Summary and highlights.
    pub outcome: Option<TaskOutcome>,
    /// The recommended snapshot.
    pub snapshot: Option<SnapshotEvent>,
    /// The error.
    pub error: Option<ErrorInfo>,
}

/// An output of [`Executor::poll_output`].
#[derive(Clone, Debug, PartialEq)]
pub enum ExecutorOutput {
    /// Answer an inbound request.
    Respond {
        /// The request.
        request: RequestId,
        /// The answer.
        response: Response,
    },
    /// Write one event to an SSE stream.
    StreamEvent {
        /// The stream.
        stream: StreamId,
        /// The event (shared: snapshot events can be large).
        event: Arc<TaskEvent>,
        /// Dialect to encode it in.
        dialect: Dialect,
    },
    /// End an SSE stream (after a terminal event).
    CloseStream {
        /// The stream.
        stream: StreamId,
    },
    /// Create the (empty) work directory and check the transport's dependency; answer with
    /// `WorkDirAllocated`.
    AllocateWorkDir {
        /// The delegation.
        id: DelegationId,
        /// `{work_root}/{id}`.
        work_dir: String,
        /// The transport that will set it up.
        transport: TransportKind,
    },
    /// Materialise the workspace in the work directory; answer with `SetupCompleted`.
    SetupTransport {
        /// The delegation.
        id: DelegationId,
        /// Where.
        work_dir: String,
        /// START's handle.
        handle: Box<TransportHandle>,
        /// Effective access (`ro` must be enforced where the transport can).
        access_mode: AccessMode,
        /// The resources (for the per-resource layout).
        resources: Vec<Resource>,
        /// Peer dialect ([S] peers send a flat archive).
        dialect: Dialect,
    },
    /// Run the task; answer with `TaskProgress`* and then `TaskFinished`.
    RunTask {
        /// The delegation.
        id: DelegationId,
        /// Where.
        work_dir: String,
        /// What.
        task: TaskSpec,
        /// Lease end.
        expires_at: Timestamp,
        /// Effective access.
        access_mode: AccessMode,
    },
    /// Stop the running task (cancel, ERROR, expiry); it answers with `TaskFinished`.
    StopTask {
        /// The delegation.
        id: DelegationId,
    },
    /// Capture the result; answer with `SnapshotCaptured`.
    CaptureSnapshot {
        /// The delegation.
        id: DelegationId,
        /// Where.
        work_dir: String,
        /// The id the snapshot will carry.
        snapshot_id: SnapshotId,
        /// Full or delta.
        kind: SnapshotKind,
        /// Whether the bytes must be inline base64 (peer cannot fetch by URL).
        inline: bool,
    },
    /// Detach the transport and remove the work directory; answer with `Released`.
    Release {
        /// The delegation.
        id: DelegationId,
        /// The work directory.
        work_dir: String,
        /// The transport that set it up (never recurse into a live mount as if it were an
        /// extracted archive).
        transport: TransportKind,
    },
    /// After a restart: a work-directory allocation was interrupted by the crash. Remove the
    /// directory if it exists and is empty (an allocation that failed may have found someone
    /// else's non-empty directory there: never remove anything inside); answer with
    /// `Released`.
    RemoveEmptyWorkDir {
        /// The delegation.
        id: DelegationId,
        /// The work directory.
        work_dir: String,
    },
    /// After a restart: end the task a crashed predecessor left running (described by the
    /// handle it reported); answer with `TaskFinished` once it is gone.
    EndTask {
        /// The delegation.
        id: DelegationId,
        /// What [`ExecutorInput::TaskSpawned`] reported.
        handle: TaskHandle,
    },
    /// A retained snapshot is no longer needed (ack or retention); free its bytes.
    DropSnapshot {
        /// The delegation.
        id: DelegationId,
        /// The snapshot.
        snapshot_id: SnapshotId,
    },
    /// Tell the application.
    Event(ExecutorEvent),
}

/// Something the application may want to know.
#[derive(Clone, Debug, PartialEq)]
pub enum ExecutorEvent {
    /// An INVITE passed policy. If `needs_decision`, call
    /// [`Executor::accept_invite`] or [`Executor::decline_invite`].
    InviteReceived {
        /// The delegation.
        id: DelegationId,
        /// The invitation.
        invite: Box<Invite>,
        /// Whether the application must decide.
        needs_decision: bool,
    },
    /// An assignment changed state.
    StateChanged {
        /// The delegation.
        id: DelegationId,
        /// Old state.
        from: AssignmentState,
        /// New state.
        to: AssignmentState,
    },
    /// The assignment's record is gone (acknowledged, retention over, or never accepted):
    /// drop it from any journal.
    Forgotten {
        /// The delegation.
        id: DelegationId,
    },
    /// The assignment's durable record changed without a state change (task resources
    /// reported or gone): write [`Executor::record`] again.
    RecordChanged {
        /// The delegation.
        id: DelegationId,
    },
    /// The assignment is over and its resources are released. Emitted exactly once.
    Ended {
        /// The delegation.
        id: DelegationId,
        /// Terminal state.
        state: AssignmentState,
        /// The error, if it failed.
        error: Option<ErrorInfo>,
    },
}

/// Counts for `GET /awcp/status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutorStatus {
    /// Pending assignments (accepted, waiting for START).
    pub pending: usize,
    /// Active assignments.
    pub active: usize,
    /// Terminal assignments still retained.
    pub completed: usize,
    /// Active assignments: id, work dir, start time.
    pub delegations: Vec<(DelegationId, String, Timestamp)>,
}

/// A read-only view of one assignment.
#[derive(Clone, Debug, PartialEq)]
pub struct AssignmentView {
    /// State.
    pub state: AssignmentState,
    /// Work directory.
    pub work_dir: String,
    /// The error, if any.
    pub error: Option<ErrorInfo>,
    /// Whether its resources are released.
    pub released: bool,
    /// What went wrong releasing them, if anything (see [`ExecutorInput::Released`]).
    pub release_error: Option<ErrorInfo>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    StartDeadline,
    Lease,
    StopGrace,
    Retention,
}

/// What is in flight for an assignment (at most one operation at a time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    None,
    Allocating,
    AwaitingDecision,
    SettingUp,
    Running,
    Stopping,
    Capturing,
    Releasing,
}

#[derive(Debug)]
struct Assignment {
    invite: Invite,
    dialect: Dialect,
    machine: AssignmentMachine,
    work_dir: String,
    /// The credential that authenticated the INVITE (digest only), when auth is on.
    auth: Option<BoundCredential>,
    transport: TransportKind,
    access: AccessMode,
    ttl: Duration,
    features: Vec<String>,
    retention: Duration,
    invite_requests: Vec<RequestId>,
    accept: Option<Accept>,
    started_at: Option<Timestamp>,
    expires_at: Option<Timestamp>,
    op: Op,
    allocated: bool,
    released: bool,
    release_error: Option<ErrorInfo>,
    subscribers: BTreeSet<StreamId>,
    outcome: Option<TaskOutcome>,
    error: Option<ErrorInfo>,
    snapshot: Option<Arc<TaskEvent>>,
    capture_id: Option<SnapshotId>,
    /// The delegator acknowledged the result: forget the record once released.
    acked: bool,
    terminal_event: Option<Arc<TaskEvent>>,
    completed_at: Option<Timestamp>,
    /// The running task's OS resources, while they exist.
    task: Option<TaskHandle>,
}

impl Assignment {
    fn state(&self) -> AssignmentState {
        self.machine.state()
    }
}

/// The executor engine. See the [module docs](self).
#[derive(Debug)]
pub struct Executor {
    config: ExecutorConfig,
    assignments: BTreeMap<DelegationId, Assignment>,
    streams: BTreeMap<StreamId, DelegationId>,
    core: Core<Timer, ExecutorOutput>,
    ids: IdSource,
    /// Acknowledged (forgotten) assignments and when their lease ends: until then a late,
    /// duplicated INVITE for the id is refused instead of starting the task again.
    tombstones: BTreeMap<DelegationId, Timestamp>,
}

impl Executor {
    /// An executor with no assignments.
    pub fn new(config: ExecutorConfig) -> Self {
        let ids = IdSource::new(config.id_seed);
        Executor {
            config,
            assignments: BTreeMap::new(),
            streams: BTreeMap::new(),
            core: Core::default(),
            ids,
            tombstones: BTreeMap::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ExecutorConfig {
        &self.config
    }

    /// The work directory an assignment gets: `{work_root}/{id}` (the id is validated, so this
    /// never leaves the root).
    pub fn work_dir_for(&self, id: &DelegationId) -> String {
        format!("{}/{}", self.config.work_root.trim_end_matches('/'), id)
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
                AssignmentState::Active => {
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

    /// A view of one assignment.
    pub fn assignment(&self, id: &DelegationId) -> Option<AssignmentView> {
        self.assignments.get(id).map(|a| AssignmentView {
            state: a.state(),
            work_dir: a.work_dir.clone(),
            error: a.error.clone(),
            released: a.released,
            release_error: a.release_error.clone(),
        })
    }

    /// Number of assignments holding resources (pending, active, or not yet released).
    pub fn live_count(&self) -> usize {
        self.assignments.values().filter(|a| !a.released).count()
    }

    // ----------------------------------------------------------------------------------------
    // Application calls

    /// Accepts an INVITE that waits for a decision.
    pub fn accept_invite(&mut self, now: Timestamp, id: &DelegationId) -> Result<(), UsageError> {
        self.tick(now);
        if self.finish_op(id, Op::AwaitingDecision)?.is_none() {
            return Err(UsageError::InvalidState(format!(
                "{id} is not waiting for a decision"
            )));
        }
        self.send_accept(now, id);
        Ok(())
    }

    /// Declines an INVITE that waits for a decision.
    pub fn decline_invite(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        reason: ErrorInfo,
    ) -> Result<(), UsageError> {
        self.tick(now);
        let Some(a) = self.finish_op(id, Op::AwaitingDecision)? else {
            return Err(UsageError::InvalidState(format!(
                "{id} is not waiting for a decision"
            )));
        };
        let requests = std::mem::take(&mut a.invite_requests);
        let dialect = a.dialect;
        for r in requests {
            self.respond_error(r, id, reason.clone(), dialect, 200);
        }
        self.terminate(now, id, AssignmentEvent::ReceiveError, reason);
        Ok(())
    }

    /// Fails every live assignment (e.g. on SIGTERM): subscribers get an error event, tasks are
    /// stopped, resources released.
    pub fn shutdown(&mut self, now: Timestamp) {
        self.tick(now);
        let ids: Vec<_> = self
            .assignments
            .iter()
            .filter(|(_, a)| !a.state().is_terminal())
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            self.terminate(
                now,
                &id,
                AssignmentEvent::Cancel,
                ErrorInfo::new(ErrorCode::Cancelled, "the executor is shutting down"),
            );
        }
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
                body,
            } => {
                self.on_request(now, request, credential, body);
                Ok(())
            }
            ExecutorInput::Subscribe {
                stream,
                id,
                credential,
            } => {
                self.on_subscribe(stream, &id, credential);
                Ok(())
            }
            ExecutorInput::StreamClosed { stream } => {
                if let Some(id) = self.streams.remove(&stream) {
                    if let Some(a) = self.assignments.get_mut(&id) {
                        a.subscribers.remove(&stream);
                    }
                }
                Ok(())
            }
            ExecutorInput::WorkDirAllocated { id, result } => self.on_allocated(now, &id, result),
            ExecutorInput::SetupCompleted { id, result } => self.on_setup(now, &id, result),
            ExecutorInput::TaskProgress {
                id,
                message,
                progress,
            } => {
                let a = self.get_mut(&id)?;
                if a.op == Op::Running && a.state() == AssignmentState::Active {
                    self.broadcast(
                        now,
                        &id,
                        TaskEventKind::Status(StatusEvent {
                            status: TaskStatus::Progress,
                            message,
                            progress,
                        }),
                    );
                }
                Ok(())
            }
            ExecutorInput::TaskSpawned { id, handle } => {
                let a = self.get_mut(&id)?;
                if matches!(a.op, Op::Running | Op::Stopping) {
                    a.task = Some(handle);
                    self.core
                        .outputs
                        .push_back(ExecutorOutput::Event(ExecutorEvent::RecordChanged { id }));
                }
                Ok(())
            }
            ExecutorInput::TaskFinished { id, result } => self.on_task_finished(now, &id, result),
            ExecutorInput::SnapshotCaptured { id, result } => self.on_captured(now, &id, result),
            ExecutorInput::Released { id, result } => {
                let Some(a) = self.finish_op(&id, Op::Releasing)? else {
                    return Ok(());
                };
                a.released = true;
                if a.state() == AssignmentState::Active && a.outcome.is_some() {
                    // A live transport detached before `done`: only now are the delegator's
                    // files final, and only if the connection held to the end.
                    match result {
                        Ok(()) => self.complete(now, &id, None),
                        Err(e) => self.terminate(now, &id, AssignmentEvent::TaskFail, e),
                    }
                } else if let Err(e) = result {
                    tracing::warn!(delegation = %id, code = %e.code, "release failed: {}", e.message);
                    a.release_error = Some(e);
                }
                let a = self.assignments.get_mut(&id).expect("exists");
                let state = a.state();
                let error = a.error.clone().or_else(|| a.release_error.clone());
                let retention = a.retention;
                let allocated_only = !state.is_terminal();
                if allocated_only {
                    // A declined or failed INVITE: nothing to retain.
                    self.forget(&id);
                    return Ok(());
                }
                let acked = a.acked;
                self.core
                    .outputs
                    .push_back(ExecutorOutput::Event(ExecutorEvent::Ended {
                        id: id.clone(),
                        state,
                        error,
                    }));
                if acked {
                    self.forget(&id);
                } else {
                    self.core
                        .timers
                        .set(&id, Timer::Retention, now.saturating_add(retention));
                }
                Ok(())
            }
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

    /// When to call [`Executor::handle_timeout`] next (the last `now` while outputs are queued).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.core.poll_timeout()
    }

    // ----------------------------------------------------------------------------------------
    // Internals

    fn tick(&mut self, now: Timestamp) {
        self.core.tick(now);
    }

    fn get_mut(&mut self, id: &DelegationId) -> Result<&mut Assignment, UsageError> {
        self.assignments
            .get_mut(id)
            .ok_or_else(|| UsageError::UnknownDelegation(id.clone()))
    }

    /// The assignment whose operation `op` just finished, with that operation cleared; `None`
    /// if it is not the operation in flight (a stale or duplicate completion).
    fn finish_op(
        &mut self,
        id: &DelegationId,
        op: Op,
    ) -> Result<Option<&mut Assignment>, UsageError> {
        let a = self.get_mut(id)?;
        if a.op != op {
            return Ok(None);
        }
        a.op = Op::None;
        Ok(Some(a))
    }

    fn respond(&mut self, request: RequestId, response: Response) {
        self.core
            .outputs
            .push_back(ExecutorOutput::Respond { request, response });
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

    fn auth_error() -> ErrorInfo {
        auth::auth_failed()
    }

    fn on_request(
        &mut self,
        now: Timestamp,
        request: RequestId,
        credential: Option<Credential>,
        body: Request,
    ) {
        let body = match body {
            Request::Message(msg, dialect) => Req::Message(*msg, dialect),
            Request::Cancel(id) => Req::Cancel(id),
            Request::Ack(id) => Req::Ack(id),
            Request::Result(id) => Req::Result(id),
        };
        match body {
            Req::Message(Message::Invite(invite), dialect) => {
                self.on_invite(now, request, invite, dialect, credential.as_ref())
            }
            Req::Message(Message::Start(start), dialect) => {
                let id = start.delegation_id.clone();
                if !self.authorized(&id, credential.as_ref()) {
                    return self.respond_error(request, &id, Self::auth_error(), dialect, 401);
                }
                self.on_start(now, request, start, dialect)
            }
            Req::Message(Message::Error(msg), dialect) => {
                let id = msg.delegation_id.clone();
                if !self.authorized(&id, credential.as_ref()) {
                    return self.respond_error(request, &id, Self::auth_error(), dialect, 401);
                }
                match self.assignments.get(&id).map(|a| a.state()) {
                    None => self.respond_error(
                        request,
                        &id,
                        ErrorInfo::new(ErrorCode::NotFound, format!("unknown delegation {id}")),
                        dialect,
                        404,
                    ),
                    Some(st) if st.is_terminal() => self.respond(request, Response::Ok),
                    Some(_) => {
                        self.respond(request, Response::Ok);
                        self.terminate(now, &id, AssignmentEvent::ReceiveError, msg.error);
                    }
                }
            }
            Req::Message(other, dialect) => {
                let id = other.delegation_id().clone();
                self.respond_error(
                    request,
                    &id,
                    ErrorInfo::new(
                        ErrorCode::Declined,
                        format!("an executor does not accept {} messages", other.type_str()),
                    ),
                    dialect,
                    400,
                );
            }
            Req::Cancel(id) => {
                if !self.authorized(&id, credential.as_ref()) {
                    return self.respond_error(
                        request,
                        &id,
                        Self::auth_error(),
                        Dialect::Reference,
                        401,
                    );
                }
                match self.assignments.get(&id).map(|a| a.state()) {
                    None => self.respond_error(
                        request,
                        &id,
                        ErrorInfo::new(ErrorCode::NotFound, format!("unknown delegation {id}")),
                        Dialect::Reference,
                        404,
                    ),
                    Some(st) if st.is_terminal() => self.respond_error(
                        request,
                        &id,
                        ErrorInfo::bare(
                            ErrorCode::Declined,
                            format!("delegation {id} is already {st}"),
                        ),
                        Dialect::Reference,
                        409,
                    ),
                    Some(_) => {
                        self.respond(request, Response::Cancelled);
                        self.terminate(
                            now,
                            &id,
                            AssignmentEvent::Cancel,
                            ErrorInfo::bare(ErrorCode::Cancelled, "cancelled by the delegator"),
                        );
                    }
                }
            }
            Req::Ack(id) => {
                if !self.authorized(&id, credential.as_ref()) {
                    return self.respond_error(
                        request,
                        &id,
                        Self::auth_error(),
                        Dialect::Reference,
                        401,
                    );
                }
                self.respond(request, Response::Ok);
                if let Some(a) = self.assignments.get_mut(&id) {
                    if a.state().is_terminal() {
                        let lease_end = a.expires_at.unwrap_or(now.saturating_add(a.ttl));
                        let released = a.released;
                        if !released {
                            // Still releasing: forget as soon as that is done.
                            a.acked = true;
                        }
                        if lease_end > now {
                            self.tombstones.insert(id.clone(), lease_end);
                        }
                        if released {
                            self.forget(&id);
                        }
                    }
                }
            }
            Req::Result(id) => {
                if !self.authorized(&id, credential.as_ref()) {
                    return self.respond_error(
                        request,
                        &id,
                        Self::auth_error(),
                        Dialect::Reference,
                        401,
                    );
                }
                let body = self.result_body(&id);
                self.respond(request, Response::Result(Box::new(body)));
            }
        }
    }

    /// Whether `presented` may act on `id` (rules: [`crate::engine::auth`]).
    fn authorized(&self, id: &DelegationId, presented: Option<&Credential>) -> bool {
        self.authorize(Some(id), presented).is_ok()
    }

    /// Whether a request presenting `presented` (a header credential, if any) may act on
    /// delegation `id`, or on the whole executor (`None`: status). Drivers ask this before
    /// answering with a stream, so a refused subscription gets HTTP 401; every request is
    /// checked again when it reaches the engine.
    pub fn authorize(
        &self,
        id: Option<&DelegationId>,
        presented: Option<&Credential>,
    ) -> Result<(), ErrorInfo> {
        let bound = id
            .and_then(|id| self.assignments.get(id))
            .and_then(|a| a.auth.as_ref());
        match (id, bound) {
            // Executor-wide requests always need the configured credential.
            (None, _) => auth::authorize(self.config.auth.as_ref(), None, presented),
            (Some(_), b) => auth::authorize(self.config.auth.as_ref(), b, presented),
        }
    }

    fn result_body(&self, id: &DelegationId) -> ResultBody {
        let Some(a) = self.assignments.get(id).filter(|a| !a.acked) else {
            return ResultBody {
                status: ResultStatus::NotFound,
                completed_at: None,
                outcome: None,
                snapshot: None,
                error: Some(ErrorInfo::new(
                    ErrorCode::NotFound,
                    format!("unknown delegation {id}"),
                )),
            };
        };
        let snapshot = a.snapshot.as_ref().and_then(|e| match &e.kind {
            TaskEventKind::Snapshot(s) => Some(s.clone()),
            _ => None,
        });
        match a.state() {
            AssignmentState::Pending | AssignmentState::Active => ResultBody {
                status: ResultStatus::Running,
                completed_at: None,
                outcome: None,
                snapshot: None,
                error: None,
            },
            AssignmentState::Completed => ResultBody {
                status: ResultStatus::Completed,
                completed_at: a.completed_at,
                outcome: a.outcome.clone(),
                snapshot,
                error: None,
            },
            AssignmentState::Error => ResultBody {
                status: ResultStatus::Error,
                completed_at: a.completed_at,
                outcome: None,
                snapshot: None,
                error: a.error.clone(),
            },
        }
    }

    fn on_invite(
        &mut self,
        now: Timestamp,
        request: RequestId,
        mut invite: Invite,
        dialect: Dialect,
        header: Option<&Credential>,
    ) {
        let id = invite.delegation_id.clone();
        let declined = |msg: String| ErrorInfo::new(ErrorCode::Declined, msg);
        // Authentication first: nothing else is revealed to an unauthenticated caller.
        let bound = match auth::authenticate_invite(
            self.config.auth.as_ref(),
            &id,
            header,
            invite.auth.as_ref(),
        ) {
            Ok(b) => b,
            Err(e) => return self.respond_error(request, &id, e, dialect, 200),
        };
        // The secret is not kept (nor journalled, nor handed to the application): only its
        // digest, in `bound`.
        invite.auth = None;
        // A duplicate INVITE arriving after the assignment was acknowledged and forgotten
        // must not start the task again while its lease (and a duplicate START) is valid.
        self.tombstones.retain(|_, until| *until > now);
        if self.tombstones.contains_key(&id) {
            return self.respond_error(
                request,
                &id,
                declined(format!("delegation {id} is already finished")),
                dialect,
                200,
            );
        }
        // A repeated INVITE (retry, duplicate delivery) is answered idempotently.
        if let Some(a) = self.assignments.get_mut(&id) {
            if a.invite != invite {
                return self.respond_error(
                    request,
                    &id,
                    declined(format!(
                        "delegation {id} exists with a different invitation"
                    )),
                    dialect,
                    200,
                );
            }
            match (a.state(), a.op, a.accept.clone()) {
                (AssignmentState::Pending, _, Some(accept)) => {
                    return self.respond(request, Response::Accept(accept, dialect));
                }
                (AssignmentState::Pending, Op::Allocating | Op::AwaitingDecision, None) => {
                    a.invite_requests.push(request);
                    return;
                }
                (st, _, _) => {
                    return self.respond_error(
                        request,
                        &id,
                        declined(format!("delegation {id} is already {st}")),
                        dialect,
                        200,
                    );
                }
            }
        }
        let transport = match &invite.transport {
            None => self
                .config
                .transports
                .first()
                .cloned()
                .unwrap_or(TransportKind::Archive),
            Some(t) if self.config.transports.contains(t) => t.clone(),
            Some(t) => {
                return self.respond_error(
                    request,
                    &id,
                    declined(format!(
                        "transport {} is not served here (available: {})",
                        t.as_str(),
                        self.config
                            .transports
                            .iter()
                            .map(TransportKind::as_str)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                    dialect,
                    200,
                );
            }
        };
        if self.live_count() >= self.config.max_concurrent {
            return self.respond_error(
                request,
                &id,
                ErrorInfo {
                    code: ErrorCode::Declined,
                    message: "Maximum concurrent delegations reached".into(),
                    hint: Some("Try again later when current tasks complete".into()),
                },
                dialect,
                200,
            );
        }
        if invite.lease.ttl_seconds == 0 {
            return self.respond_error(
                request,
                &id,
                declined("lease.ttlSeconds must be positive".into()),
                dialect,
                200,
            );
        }
        let access = match invite.lease.access_mode {
            AccessMode::Rw if self.config.allow_rw => AccessMode::Rw,
            AccessMode::Rw | AccessMode::Ro if self.config.allow_ro => AccessMode::Ro,
            m => {
                return self.respond_error(
                    request,
                    &id,
                    declined(format!("access mode {} is not allowed here", m.as_str())),
                    dialect,
                    200,
                )
            }
        };
        if invite.resources.is_empty() {
            return self.respond_error(
                request,
                &id,
                declined("the invitation exports no resource".into()),
                dialect,
                200,
            );
        }
        let mut names: Vec<_> = invite.resources.iter().map(|r| &r.name).collect();
        names.sort();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return self.respond_error(
                request,
                &id,
                declined("resource names must be unique".into()),
                dialect,
                200,
            );
        }
        let ttl = Duration::from_secs(invite.lease.ttl_seconds.min(self.config.max_ttl_seconds));
        let retention = invite
            .retention_ms
            .map(Duration::from_millis)
            .unwrap_or(self.config.default_retention)
            .min(self.config.max_retention);
        let features = invite
            .features
            .iter()
            .filter(|f| self.config.features.contains(f))
            .cloned()
            .collect();
        let work_dir = self.work_dir_for(&id);
        tracing::debug!(delegation = %id, "invitation passed policy");
        self.assignments.insert(
            id.clone(),
            Assignment {
                invite,
                dialect,
                machine: AssignmentMachine::new(),
                work_dir: work_dir.clone(),
                auth: bound,
                transport: transport.clone(),
                access,
                ttl,
                features,
                retention,
                invite_requests: vec![request],
                accept: None,
                started_at: None,
                expires_at: None,
                op: Op::Allocating,
                allocated: false,
                released: false,
                release_error: None,
                subscribers: BTreeSet::new(),
                outcome: None,
                error: None,
                snapshot: None,
                capture_id: None,
                acked: false,
                terminal_event: None,
                completed_at: None,
                task: None,
            },
        );
        let _ = now;
        // Journalled before the directory exists: after a crash mid-allocation the restarted
        // executor knows the directory may be its own.
        self.core
            .outputs
            .push_back(ExecutorOutput::Event(ExecutorEvent::RecordChanged {
                id: id.clone(),
            }));
        self.core
            .outputs
            .push_back(ExecutorOutput::AllocateWorkDir {
                id,
                work_dir,
                transport,
            });
    }

    fn on_allocated(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        result: Result<(), ErrorInfo>,
    ) -> Result<(), UsageError> {
        let Some(a) = self.finish_op(id, Op::Allocating)? else {
            return Ok(());
        };
        if a.state().is_terminal() {
            // Ended (ERROR, cancel, shutdown) while the work directory was being allocated:
            // release what was allocated instead of accepting.
            match result {
                Ok(()) => {
                    a.allocated = true;
                    self.release(id);
                }
                Err(_) => {
                    a.released = true;
                    let (state, error, retention) = (a.state(), a.error.clone(), a.retention);
                    self.core
                        .outputs
                        .push_back(ExecutorOutput::Event(ExecutorEvent::Ended {
                            id: id.clone(),
                            state,
                            error,
                        }));
                    self.core
                        .timers
                        .set(id, Timer::Retention, now.saturating_add(retention));
                }
            }
            return Ok(());
        }
        match result {
            Err(e) => {
                let requests = std::mem::take(&mut a.invite_requests);
                let dialect = a.dialect;
                for r in requests {
                    self.respond_error(r, id, e.clone(), dialect, 200);
                }
                // Nothing was left behind: forget the record.
                self.assignments.remove(id);
                self.core.timers.cancel_all(id);
                self.core
                    .outputs
                    .push_back(ExecutorOutput::Event(ExecutorEvent::Forgotten {
                        id: id.clone(),
                    }));
            }
            Ok(()) => {
                a.allocated = true;
                let invite = Box::new(a.invite.clone());
                if self.config.auto_accept {
                    self.core.outputs.push_back(ExecutorOutput::Event(
                        ExecutorEvent::InviteReceived {
                            id: id.clone(),
                            invite,
                            needs_decision: false,
                        },
                    ));
                    self.send_accept(now, id);
                } else {
                    let a = self.assignments.get_mut(id).expect("exists");
                    a.op = Op::AwaitingDecision;
                    self.core.outputs.push_back(ExecutorOutput::Event(
                        ExecutorEvent::InviteReceived {
                            id: id.clone(),
                            invite,
                            needs_decision: true,
                        },
                    ));
                    let at = now.saturating_add(a.ttl);
                    self.core.timers.set(id, Timer::StartDeadline, at);
                }
            }
        }
        Ok(())
    }

    fn send_accept(&mut self, now: Timestamp, id: &DelegationId) {
        let a = self.assignments.get_mut(id).expect("caller checked");
        let accept = Accept {
            delegation_id: id.clone(),
            work_dir: a.work_dir.clone(),
            constraints: Some(ExecutorConstraints {
                accepted_access_mode: Some(a.access),
                max_ttl_seconds: Some(a.ttl.as_secs()),
                sandbox_profile: Some(self.config.sandbox),
            }),
            retention_ms: (a.dialect == Dialect::Reference)
                .then(|| u64::try_from(a.retention.as_millis()).unwrap_or(u64::MAX)),
            features: a.features.clone(),
        };
        a.accept = Some(accept.clone());
        let requests = std::mem::take(&mut a.invite_requests);
        let dialect = a.dialect;
        // START must come soon: a pending assignment holds a slot (and a work directory).
        let at = now.saturating_add(a.ttl.min(self.config.start_timeout));
        for r in requests {
            self.respond(r, Response::Accept(accept.clone(), dialect));
        }
        self.core.timers.set(id, Timer::StartDeadline, at);
    }

    fn on_start(
        &mut self,
        now: Timestamp,
        request: RequestId,
        start: crate::wire::Start,
        dialect: Dialect,
    ) {
        let id = start.delegation_id.clone();
        let Some(a) = self.assignments.get_mut(&id) else {
            return self.respond_error(
                request,
                &id,
                ErrorInfo::new(ErrorCode::NotFound, format!("unknown delegation {id}")),
                dialect,
                404,
            );
        };
        match a.state() {
            AssignmentState::Active => return self.respond(request, Response::Ok),
            st if st.is_terminal() => {
                let e = a.error.clone().unwrap_or_else(|| {
                    ErrorInfo::bare(
                        ErrorCode::Declined,
                        format!("delegation {id} is already {st}"),
                    )
                });
                return self.respond_error(request, &id, e, dialect, 409);
            }
            _ => {}
        }
        if a.accept.is_none() {
            return self.respond_error(
                request,
                &id,
                ErrorInfo::new(ErrorCode::Declined, "the invitation has not been accepted"),
                dialect,
                409,
            );
        }
        if start.handle.kind() != a.transport {
            let e = ErrorInfo::new(
                ErrorCode::SetupFailed,
                format!(
                    "START carries a {} handle but {} was agreed",
                    start.handle.kind().as_str(),
                    a.transport.as_str()
                ),
            );
            self.respond_error(request, &id, e.clone(), dialect, 400);
            self.terminate(now, &id, AssignmentEvent::ReceiveError, e);
            return;
        }
        if start.lease.expires_at <= now {
            let e = ErrorInfo::new(
                ErrorCode::StartExpired,
                "the lease had expired when START arrived",
            );
            self.respond_error(request, &id, e.clone(), dialect, 200);
            self.terminate(now, &id, AssignmentEvent::Cancel, e);
            return;
        }
        let expires_at = start.lease.expires_at.min(now.saturating_add(a.ttl));
        a.access = a.access.min(start.lease.access_mode);
        a.started_at = Some(now);
        a.expires_at = Some(expires_at);
        a.op = Op::SettingUp;
        let out = ExecutorOutput::SetupTransport {
            id: id.clone(),
            work_dir: a.work_dir.clone(),
            handle: Box::new(start.handle),
            access_mode: a.access,
            resources: a.invite.resources.clone(),
            dialect: a.dialect,
        };
        self.apply(now, &id, AssignmentEvent::ReceiveStart);
        self.core.timers.cancel(&id, Timer::StartDeadline);
        self.core.timers.set(&id, Timer::Lease, expires_at);
        self.respond(request, Response::Ok);
        self.core.outputs.push_back(out);
    }

    fn on_subscribe(
        &mut self,
        stream: StreamId,
        id: &DelegationId,
        credential: Option<Credential>,
    ) {
        let dialect = self
            .assignments
            .get(id)
            .map(|a| a.dialect)
            .unwrap_or_default();
        let refuse = |this: &mut Self, error: ErrorInfo| {
            let ev = Arc::new(TaskEvent {
                delegation_id: id.clone(),
                timestamp: this.core.last_now,
                kind: TaskEventKind::Error(error),
            });
            this.core.outputs.push_back(ExecutorOutput::StreamEvent {
                stream,
                event: ev,
                dialect,
            });
            this.core
                .outputs
                .push_back(ExecutorOutput::CloseStream { stream });
        };
        if !self.authorized(id, credential.as_ref()) {
            return refuse(self, Self::auth_error());
        }
        let Some(a) = self.assignments.get_mut(id).filter(|a| !a.acked) else {
            return refuse(
                self,
                ErrorInfo::new(ErrorCode::NotFound, format!("unknown delegation {id}")),
            );
        };
        if let Some(term) = a.terminal_event.clone() {
            // Replay for late subscribers: the snapshot (if any) and the terminal event.
            if let Some(snap) = a.snapshot.clone() {
                if dialect == Dialect::Reference {
                    self.core.outputs.push_back(ExecutorOutput::StreamEvent {
                        stream,
                        event: snap,
                        dialect,
                    });
                }
            }
            self.core.outputs.push_back(ExecutorOutput::StreamEvent {
                stream,
                event: term,
                dialect,
            });
            self.core
                .outputs
                .push_back(ExecutorOutput::CloseStream { stream });
            return;
        }
        a.subscribers.insert(stream);
        self.streams.insert(stream, id.clone());
    }

    /// The only place an assignment's state changes.
    fn apply(&mut self, now: Timestamp, id: &DelegationId, event: AssignmentEvent) -> bool {
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

    /// Sends an event to every live subscriber; a terminal event also closes them and is
    /// retained for replay.
    fn broadcast(&mut self, now: Timestamp, id: &DelegationId, kind: TaskEventKind) {
        let Some(a) = self.assignments.get_mut(id) else {
            return;
        };
        let terminal = kind.is_terminal();
        let is_snapshot = matches!(kind, TaskEventKind::Snapshot(_));
        let ev = Arc::new(TaskEvent {
            delegation_id: id.clone(),
            timestamp: now,
            kind,
        });
        let dialect = a.dialect;
        let subs: Vec<StreamId> = a.subscribers.iter().copied().collect();
        if is_snapshot {
            a.snapshot = Some(ev.clone());
        }
        if terminal {
            a.terminal_event = Some(ev.clone());
            a.subscribers.clear();
        }
        let send = !(is_snapshot && dialect == Dialect::Seed);
        for s in subs {
            if send {
                self.core.outputs.push_back(ExecutorOutput::StreamEvent {
                    stream: s,
                    event: ev.clone(),
                    dialect,
                });
            }
            if terminal {
                self.core
                    .outputs
                    .push_back(ExecutorOutput::CloseStream { stream: s });
                self.streams.remove(&s);
            }
        }
    }

    /// Ends an assignment with an error (cancel, ERROR, expiry, failure): emits the error
    /// event, stops the task, releases when nothing is in flight.
    fn terminate(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        event: AssignmentEvent,
        error: ErrorInfo,
    ) {
        if !self.apply(now, id, event) {
            return;
        }
        tracing::info!(delegation = %id, code = %error.code, "assignment failed: {}", error.message);
        let a = self.assignments.get_mut(id).expect("exists");
        a.error = Some(error.clone());
        // INVITE requests still waiting (allocation or decision in progress) get the error.
        let requests = std::mem::take(&mut a.invite_requests);
        let dialect = a.dialect;
        for r in requests {
            self.respond_error(r, id, error.clone(), dialect, 200);
        }
        self.core.timers.cancel(id, Timer::Lease);
        self.core.timers.cancel(id, Timer::StartDeadline);
        self.broadcast(now, id, TaskEventKind::Error(error));
        let a = self.assignments.get_mut(id).expect("exists");
        match a.op {
            Op::Running => {
                a.op = Op::Stopping;
                self.core
                    .outputs
                    .push_back(ExecutorOutput::StopTask { id: id.clone() });
                self.core.timers.set(
                    id,
                    Timer::StopGrace,
                    now.saturating_add(self.config.stop_grace),
                );
            }
            Op::None | Op::AwaitingDecision => self.release(id),
            Op::Allocating | Op::SettingUp | Op::Capturing | Op::Stopping | Op::Releasing => {}
        }
    }

    fn release(&mut self, id: &DelegationId) {
        let Some(a) = self.assignments.get_mut(id) else {
            return;
        };
        if a.released || a.op == Op::Releasing {
            return;
        }
        a.op = Op::Releasing;
        self.core.timers.cancel(id, Timer::StopGrace);
        self.core.outputs.push_back(ExecutorOutput::Release {
            id: id.clone(),
            work_dir: a.work_dir.clone(),
            transport: a.transport.clone(),
        });
    }

    fn forget(&mut self, id: &DelegationId) {
        let Some(a) = self.assignments.remove(id) else {
            return;
        };
        self.core.timers.cancel_all(id);
        self.core
            .outputs
            .push_back(ExecutorOutput::Event(ExecutorEvent::Forgotten {
                id: id.clone(),
            }));
        if let Some(ev) = &a.snapshot {
            if let TaskEventKind::Snapshot(s) = &ev.kind {
                self.core.outputs.push_back(ExecutorOutput::DropSnapshot {
                    id: id.clone(),
                    snapshot_id: s.snapshot_id.clone(),
                });
            }
        }
        for s in a.subscribers {
            self.streams.remove(&s);
            self.core
                .outputs
                .push_back(ExecutorOutput::CloseStream { stream: s });
        }
    }

    fn on_setup(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        result: Result<(), ErrorInfo>,
    ) -> Result<(), UsageError> {
        let Some(a) = self.finish_op(id, Op::SettingUp)? else {
            return Ok(());
        };
        if a.state().is_terminal() {
            self.release(id);
            return Ok(());
        }
        match result {
            Err(e) => self.terminate(now, id, AssignmentEvent::TaskFail, e),
            Ok(()) => {
                a.op = Op::Running;
                let out = ExecutorOutput::RunTask {
                    id: id.clone(),
                    work_dir: a.work_dir.clone(),
                    task: a.invite.task.clone(),
                    expires_at: a.expires_at.unwrap_or(now),
                    access_mode: a.access,
                };
                self.broadcast(
                    now,
                    id,
                    TaskEventKind::Status(StatusEvent {
                        status: TaskStatus::Running,
                        message: Some("workspace ready, task started".into()),
                        progress: None,
                    }),
                );
                self.core.outputs.push_back(out);
            }
        }
        Ok(())
    }

    fn on_task_finished(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        result: Result<TaskOutcome, ErrorInfo>,
    ) -> Result<(), UsageError> {
        let a = self.get_mut(id)?;
        match a.op {
            Op::Stopping => {
                a.op = Op::None;
                a.task = None;
                self.release(id);
                return Ok(());
            }
            Op::Running => {}
            _ => return Ok(()),
        }
        a.task = None;
        a.op = Op::None;
        match result {
            Err(e) => self.terminate(now, id, AssignmentEvent::TaskFail, e),
            Ok(outcome) => {
                a.outcome = Some(outcome);
                let needs_snapshot = !a.transport.is_live() && a.access == AccessMode::Rw;
                if a.transport.is_live() {
                    // Detach before `done` (see `ExecutorInput::Released`).
                    self.release(id);
                } else if needs_snapshot {
                    a.op = Op::Capturing;
                    let kind = if a.features.iter().any(|f| f == feature::DELTA_SNAPSHOTS) {
                        SnapshotKind::Delta
                    } else {
                        SnapshotKind::Full
                    };
                    let inline = a.dialect == Dialect::Seed
                        || !a.features.iter().any(|f| f == feature::ARCHIVE_URL);
                    let work_dir = a.work_dir.clone();
                    let snapshot_id = self.ids.snapshot_id();
                    if let Some(a) = self.assignments.get_mut(id) {
                        a.capture_id = Some(snapshot_id.clone());
                    }
                    self.core
                        .outputs
                        .push_back(ExecutorOutput::CaptureSnapshot {
                            id: id.clone(),
                            work_dir,
                            snapshot_id,
                            kind,
                            inline,
                        });
                } else {
                    self.complete(now, id, None);
                }
            }
        }
        Ok(())
    }

    fn on_captured(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        result: Result<CapturedSnapshot, ErrorInfo>,
    ) -> Result<(), UsageError> {
        let Some(a) = self.finish_op(id, Op::Capturing)? else {
            return Ok(());
        };
        let Some(snapshot_id) = a.capture_id.take() else {
            return Ok(());
        };
        if a.state().is_terminal() {
            // Expired or cancelled during capture: the bytes are not needed.
            if result.is_ok() {
                self.core.outputs.push_back(ExecutorOutput::DropSnapshot {
                    id: id.clone(),
                    snapshot_id,
                });
            }
            self.release(id);
            return Ok(());
        }
        match result {
            Err(e) => self.terminate(now, id, AssignmentEvent::TaskFail, e),
            Ok(snap) => self.complete(now, id, Some((snapshot_id, snap))),
        }
        Ok(())
    }

    fn complete(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        snapshot: Option<(SnapshotId, CapturedSnapshot)>,
    ) {
        let a = self.assignments.get_mut(id).expect("caller checked");
        let outcome = a.outcome.clone().unwrap_or_default();
        let dialect = a.dialect;
        let mut done = DoneEvent {
            summary: outcome.summary.clone(),
            highlights: outcome.highlights.clone(),
            snapshot_ids: Vec::new(),
            recommended_snapshot_id: None,
            result_base64: None,
        };
        if let Some((sid, snap)) = snapshot {
            if dialect == Dialect::Seed {
                done.result_base64 = snap.data.base64.clone();
            } else {
                done.snapshot_ids = vec![sid.clone()];
                done.recommended_snapshot_id = Some(sid.clone());
            }
            self.broadcast(
                now,
                id,
                TaskEventKind::Snapshot(SnapshotEvent {
                    snapshot_id: sid,
                    summary: outcome.summary.clone(),
                    highlights: outcome.highlights.clone(),
                    data: snap.data,
                    checksum: snap.checksum,
                    recommended: Some(true),
                    metadata: snap.metadata,
                }),
            );
        }
        self.apply(now, id, AssignmentEvent::TaskComplete);
        self.core.timers.cancel(id, Timer::Lease);
        self.broadcast(now, id, TaskEventKind::Done(done));
        self.release(id);
    }

    fn on_timer(&mut self, now: Timestamp, id: &DelegationId, timer: Timer) {
        let Some(a) = self.assignments.get(id) else {
            return;
        };
        match timer {
            Timer::StartDeadline => {
                if a.state() == AssignmentState::Pending {
                    let requests = a.invite_requests.clone();
                    let dialect = a.dialect;
                    let e = if a.accept.is_some() && self.config.start_timeout < a.ttl {
                        ErrorInfo::new(
                            ErrorCode::StartExpired,
                            format!(
                                "no START within {} s of ACCEPT; the assignment was dropped",
                                self.config.start_timeout.as_secs()
                            ),
                        )
                    } else {
                        ErrorInfo::new(
                            ErrorCode::StartExpired,
                            "the lease ran out before START arrived",
                        )
                    };
                    for r in requests {
                        self.respond_error(r, id, e.clone(), dialect, 200);
                    }
                    if let Some(a) = self.assignments.get_mut(id) {
                        a.invite_requests.clear();
                    }
                    self.terminate(now, id, AssignmentEvent::Cancel, e);
                }
            }
            Timer::Lease => {
                if a.state() == AssignmentState::Active {
                    self.terminate(
                        now,
                        id,
                        AssignmentEvent::Cancel,
                        ErrorInfo::new(
                            ErrorCode::Expired,
                            "the lease expired while the task was running",
                        ),
                    );
                }
            }
            Timer::StopGrace => {
                if a.op == Op::Stopping {
                    tracing::warn!(delegation = %id, "task did not stop in time; releasing anyway");
                    self.assignments.get_mut(id).expect("exists").op = Op::None;
                    self.release(id);
                }
            }
            Timer::Retention => {
                if a.state().is_terminal() && a.released {
                    self.forget(id);
                }
            }
        }
    }
}

/// Directories that must never be an executor's work root (AWCP v1 §7.1: "never accept a
/// system-sensitive path such as /home, /etc or ~").
const SYSTEM_DIRS: &[&str] = &[
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt", "/proc", "/root",
    "/run", "/sbin", "/srv", "/sys", "/usr", "/var",
];

/// Why `work_root` (absolute, with symlinks resolved) must not be an executor's work root, if
/// it must not: the file-system root, a system directory, or the user's `home`.
pub fn work_root_refusal(work_root: &str, home: Option<&str>) -> Option<String> {
    let norm = |p: &str| {
        let t = p.trim_end_matches('/');
        if t.is_empty() {
            "/".to_owned()
        } else {
            t.to_owned()
        }
    };
    let root = norm(work_root);
    if SYSTEM_DIRS.contains(&root.as_str()) {
        return Some(format!(
            "{root} is a system directory; give the executor a directory of its own"
        ));
    }
    if home.map(norm).is_some_and(|h| h == root) {
        return Some(format!(
            "{root} is the home directory; give the executor a directory of its own"
        ));
    }
    None
}

/// [`Request`] with the message unboxed, for matching (short-lived, on the stack).
#[allow(clippy::large_enum_variant)]
enum Req {
    Message(Message, Dialect),
    Cancel(DelegationId),
    Ack(DelegationId),
    Result(DelegationId),
}

// ---------------------------------------------------------------------------------------------
// Durable records

impl Executor {
    /// A JSON record of one assignment for a journal (atomic write-then-rename is the driver's
    /// job). `None` for unknown ids. Inline snapshot bytes are not recorded (they can be many
    /// MB); URL-mode snapshot events are.
    pub fn record(&self, id: &DelegationId) -> Option<serde_json::Value> {
        use serde_json::json;
        let a = self.assignments.get(id)?;
        let snapshot = a.snapshot.as_ref().and_then(|ev| match &ev.kind {
            TaskEventKind::Snapshot(s) if s.data.base64.is_none() => {
                Some(crate::wire::event_to_value(ev, Dialect::Reference))
            }
            _ => None,
        });
        Some(json!({
            "id": id.as_str(),
            "invite": crate::wire::message_to_value(&Message::Invite(a.invite.clone()), a.dialect),
            "dialect": if a.dialect == Dialect::Seed { "seed" } else { "reference" },
            "state": a.state().as_str(),
            "workDir": a.work_dir,
            // What verifies the bound credential later; never the secret itself.
            "auth": a.auth.map(|b| json!({"sha256": b.digest.to_hex(), "binding": b.binding.as_str()})),
            "retentionMs": u64::try_from(a.retention.as_millis()).unwrap_or(u64::MAX),
            "expiresAt": a.expires_at.map(Timestamp::as_unix_millis),
            "completedAt": a.completed_at.map(Timestamp::as_unix_millis),
            "allocated": a.allocated,
            "released": a.released,
            "transport": a.transport.as_str(),
            "task": a.task.as_ref().map(|t| t.0.clone()),
            "error": a.error,
            "outcome": a.outcome.as_ref().map(|o| json!({"summary": o.summary, "highlights": o.highlights})),
            "snapshotEvent": snapshot,
        }))
    }

    /// Restores assignments from journal records after a restart. Terminal ones are kept for
    /// late subscribers and `GET …/result` until ack or retention; ones that were pending or
    /// active are failed cleanly (`TASK_FAILED`, "the executor restarted") so a reconnecting
    /// delegator learns what happened instead of `NOT_FOUND`. What a record says the crashed
    /// predecessor still held is cleaned up through the usual outputs: a recorded task is ended
    /// ([`ExecutorOutput::EndTask`], answered with `TaskFinished`), then a recorded work
    /// directory (`{work_root}/{id}` of this configuration only) is released
    /// ([`ExecutorOutput::Release`]); each ends with [`ExecutorEvent::Ended`]. Returns how many
    /// records were restored; records that do not decode are skipped.
    pub fn restore(&mut self, now: Timestamp, records: &[serde_json::Value]) -> usize {
        self.tick(now);
        let mut n = 0;
        for r in records {
            if self.restore_one(now, r).is_some() {
                n += 1;
            }
        }
        n
    }

    fn restore_one(&mut self, now: Timestamp, r: &serde_json::Value) -> Option<()> {
        let id = DelegationId::new(r.get("id")?.as_str()?).ok()?;
        let invite_json = serde_json::to_vec(r.get("invite")?).ok()?;
        let (Message::Invite(invite), dialect) = crate::wire::decode_message(&invite_json).ok()?
        else {
            return None;
        };
        let state = AssignmentState::parse(r.get("state")?.as_str()?)?;
        let ms = |k: &str| {
            r.get(k)
                .and_then(serde_json::Value::as_u64)
                .map(Timestamp::from_unix_millis)
        };
        let error: Option<ErrorInfo> = r
            .get("error")
            .filter(|e| !e.is_null())
            .and_then(|e| serde_json::from_value(e.clone()).ok());
        let outcome = crate::engine::record_outcome(r, "outcome");
        let snapshot = r
            .get("snapshotEvent")
            .filter(|s| !s.is_null())
            .and_then(|s| serde_json::to_vec(s).ok())
            .and_then(|b| crate::wire::decode_event(&b).ok())
            .map(|(ev, _)| Arc::new(ev));
        let retention = Duration::from_millis(
            r.get("retentionMs")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(604_800_000),
        );
        let mut machine = AssignmentMachine::restore(state);
        let mut error = error;
        let mut completed_at = ms("completedAt");
        if !state.is_terminal() {
            let event = if state == AssignmentState::Active {
                AssignmentEvent::TaskFail
            } else {
                AssignmentEvent::Cancel
            };
            machine.apply(event).ok()?;
            error = Some(ErrorInfo::new(
                ErrorCode::TaskFailed,
                "the executor restarted while the delegation was in flight; its work is lost",
            ));
            completed_at = Some(now);
        }
        let terminal_kind = match machine.state() {
            AssignmentState::Completed => {
                let o = outcome.clone().unwrap_or_default();
                let sid = snapshot.as_ref().and_then(|e| match &e.kind {
                    TaskEventKind::Snapshot(s) => Some(s.snapshot_id.clone()),
                    _ => None,
                });
                TaskEventKind::Done(DoneEvent {
                    summary: o.summary,
                    highlights: o.highlights,
                    snapshot_ids: sid.iter().cloned().collect(),
                    recommended_snapshot_id: sid,
                    result_base64: None,
                })
            }
            _ => TaskEventKind::Error(
                error
                    .clone()
                    .unwrap_or_else(|| ErrorInfo::new(ErrorCode::TaskFailed, "the task failed")),
            ),
        };
        let terminal_event = Arc::new(TaskEvent {
            delegation_id: id.clone(),
            timestamp: completed_at.unwrap_or(now),
            kind: terminal_kind,
        });
        let transport = r
            .get("transport")
            .and_then(|t| t.as_str())
            .map(TransportKind::parse)
            .or_else(|| invite.transport.clone())
            .unwrap_or(TransportKind::Archive);
        let access = invite.lease.access_mode;
        let ttl = Duration::from_secs(invite.lease.ttl_seconds.min(self.config.max_ttl_seconds));
        let work_dir = r
            .get("workDir")
            .and_then(|w| w.as_str())
            .unwrap_or("")
            .to_owned();
        // Records from before `allocated` was journalled were written after allocation.
        let allocated = r.get("allocated").and_then(|v| v.as_bool()).unwrap_or(true);
        let mut released = r.get("released").and_then(|v| v.as_bool()).unwrap_or(true);
        if !released && work_dir != self.work_dir_for(&id) {
            // Only `{work_root}/{id}` of this configuration is ours to remove.
            tracing::warn!(delegation = %id, work_dir, "recorded work directory is outside the work root; left in place");
            released = true;
        }
        // An allocation in flight at the crash: the directory may exist, empty.
        let interrupted_allocation = !released && !allocated;
        let released = released || !allocated;
        let task = r
            .get("task")
            .and_then(|t| t.as_str())
            .map(|t| TaskHandle(t.to_owned()));
        self.assignments.insert(
            id.clone(),
            Assignment {
                features: invite.features.clone(),
                invite,
                dialect,
                machine,
                work_dir,
                auth: restore_auth(r),
                transport,
                access,
                ttl,
                retention,
                invite_requests: Vec::new(),
                accept: None,
                started_at: None,
                expires_at: ms("expiresAt"),
                op: Op::None,
                allocated,
                released,
                release_error: None,
                subscribers: BTreeSet::new(),
                outcome,
                error,
                snapshot,
                capture_id: None,
                acked: false,
                terminal_event: Some(terminal_event),
                completed_at,
                task: task.clone(),
            },
        );
        // What the crashed predecessor held: its task first, then its work directory.
        if let Some(handle) = task {
            self.assignments.get_mut(&id).expect("inserted").op = Op::Stopping;
            self.core.outputs.push_back(ExecutorOutput::EndTask {
                id: id.clone(),
                handle,
            });
            self.core.timers.set(
                &id,
                Timer::StopGrace,
                now.saturating_add(self.config.stop_grace),
            );
        } else if !released {
            self.release(&id);
        } else if interrupted_allocation {
            let a = self.assignments.get_mut(&id).expect("inserted");
            a.released = false;
            a.op = Op::Releasing;
            self.core
                .outputs
                .push_back(ExecutorOutput::RemoveEmptyWorkDir {
                    id: id.clone(),
                    work_dir: a.work_dir.clone(),
                });
            return Some(());
        }
        if !released {
            // The retention starts once the release is done (see `Released`).
            return Some(());
        }
        let until = completed_at
            .unwrap_or(now)
            .saturating_add(retention)
            .max(now);
        self.core.timers.set(&id, Timer::Retention, until);
        Some(())
    }
}

/// The bound credential of a journal record: `auth` (digest and binding), or the clear-text
/// `credential` older versions wrote (bound to headers, as they required one on every request).
fn restore_auth(r: &serde_json::Value) -> Option<BoundCredential> {
    use crate::engine::auth::{Binding, SecretDigest};
    if let Some(a) = r.get("auth").filter(|a| !a.is_null()) {
        return Some(BoundCredential {
            digest: SecretDigest::from_hex(a.get("sha256")?.as_str()?)?,
            binding: Binding::parse(a.get("binding")?.as_str()?)?,
        });
    }
    let legacy = r.get("credential")?.as_str()?;
    Some(BoundCredential {
        digest: SecretDigest::of(legacy),
        binding: Binding::Header,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::ResourceName;
    use crate::wire::LeaseRequest;

    fn invite(id: &DelegationId) -> Invite {
        Invite {
            delegation_id: id.clone(),
            task: TaskSpec {
                description: "d".into(),
                prompt: "p".into(),
            },
            lease: LeaseRequest {
                ttl_seconds: 600,
                access_mode: AccessMode::Rw,
            },
            resources: vec![Resource {
                name: ResourceName::new("workspace").unwrap(),
                kind: "fs".into(),
                mode: AccessMode::Rw,
            }],
            export_name: None,
            retention_ms: None,
            transport: Some(TransportKind::Archive),
            auth: None,
            features: Vec::new(),
        }
    }

    /// A journal record of an assignment that was running when the executor crashed.
    fn running_record(ex: &Executor, id: &DelegationId, task: Option<&str>) -> serde_json::Value {
        serde_json::json!({
            "id": id.as_str(),
            "invite": crate::wire::message_to_value(&Message::Invite(invite(id)), Dialect::Reference),
            "dialect": "reference",
            "state": "active",
            "workDir": ex.work_dir_for(id),
            "allocated": true,
            "released": false,
            "transport": "archive",
            "task": task,
            "retentionMs": 60_000,
        })
    }

    fn drain(ex: &mut Executor) -> Vec<ExecutorOutput> {
        std::iter::from_fn(|| ex.poll_output()).collect()
    }

    const T0: Timestamp = Timestamp::from_unix_millis(1_750_000_000_000);

    #[test]
    fn a_restart_ends_the_recorded_task_then_releases_the_recorded_work_dir() {
        let mut ex = Executor::new(ExecutorConfig {
            work_root: "/w".into(),
            ..ExecutorConfig::default()
        });
        let id = DelegationId::new("dlg_a").unwrap();
        let rec = running_record(&ex, &id, Some("123:456:boot"));
        assert_eq!(ex.restore(T0, &[rec]), 1);
        let out = drain(&mut ex);
        assert_eq!(
            out,
            vec![ExecutorOutput::EndTask {
                id: id.clone(),
                handle: TaskHandle("123:456:boot".into())
            }]
        );
        assert_eq!(ex.live_count(), 1, "held until cleaned up");
        ex.handle(
            T0,
            ExecutorInput::TaskFinished {
                id: id.clone(),
                result: Err(ErrorInfo::bare(ErrorCode::Cancelled, "ended")),
            },
        )
        .unwrap();
        let out = drain(&mut ex);
        assert!(
            matches!(&out[..], [ExecutorOutput::Release { id: i, work_dir, transport }]
                if *i == id && work_dir == "/w/dlg_a" && *transport == TransportKind::Archive),
            "{out:?}"
        );
        ex.handle(
            T0,
            ExecutorInput::Released {
                id: id.clone(),
                result: Ok(()),
            },
        )
        .unwrap();
        let out = drain(&mut ex);
        assert!(out.iter().any(|o| matches!(o,
            ExecutorOutput::Event(ExecutorEvent::Ended { state: AssignmentState::Error, error: Some(e), .. })
                if e.code == ErrorCode::TaskFailed)));
        assert_eq!(ex.live_count(), 0);
        let rec = ex.record(&id).unwrap();
        assert_eq!(rec["released"], true);
        assert!(rec["task"].is_null());
    }

    #[test]
    fn a_restart_never_releases_a_work_dir_outside_its_work_root() {
        let mut ex = Executor::new(ExecutorConfig {
            work_root: "/w".into(),
            ..ExecutorConfig::default()
        });
        let id = DelegationId::new("dlg_b").unwrap();
        let mut rec = running_record(&ex, &id, None);
        rec["workDir"] = "/home/someone".into();
        assert_eq!(ex.restore(T0, &[rec]), 1);
        assert!(
            drain(&mut ex).is_empty(),
            "nothing of /home/someone is touched"
        );
        assert_eq!(ex.live_count(), 0);
        // Not allocated: nothing to release either.
        let mut ex = Executor::new(ExecutorConfig {
            work_root: "/w".into(),
            ..ExecutorConfig::default()
        });
        let mut rec = running_record(&ex, &id, None);
        rec["allocated"] = false.into();
        ex.restore(T0, &[rec]);
        // An interrupted allocation: at most an empty directory is removed.
        assert_eq!(
            drain(&mut ex),
            vec![ExecutorOutput::RemoveEmptyWorkDir {
                id: id.clone(),
                work_dir: "/w/dlg_b".into()
            }]
        );
        ex.handle(T0, ExecutorInput::Released { id, result: Ok(()) })
            .unwrap();
        assert_eq!(ex.live_count(), 0);
    }

    #[test]
    fn a_task_handle_for_an_unknown_assignment_is_refused() {
        let mut ex = Executor::new(ExecutorConfig {
            work_root: "/w".into(),
            ..ExecutorConfig::default()
        });
        let id = DelegationId::new("dlg_c").unwrap();
        // Not running: the handle is ignored.
        assert!(ex
            .handle(
                T0,
                ExecutorInput::TaskSpawned {
                    id: id.clone(),
                    handle: TaskHandle("1".into())
                }
            )
            .is_err());
    }

    #[test]
    fn system_and_home_directories_are_refused_as_work_roots() {
        for bad in ["/", "/home", "/etc/", "/usr", "/var"] {
            assert!(work_root_refusal(bad, None).is_some(), "{bad}");
        }
        assert!(work_root_refusal("/home/ann", Some("/home/ann/")).is_some());
        assert!(work_root_refusal("/home/ann/.awcp/executor/work", Some("/home/ann")).is_none());
        assert!(work_root_refusal("/tmp/x", Some("/home/ann")).is_none());
    }
}
