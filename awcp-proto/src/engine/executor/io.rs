//! What goes in and out of the executor engine: inputs, responses, outputs, events, views.

use std::sync::Arc;

use crate::engine::{CapturedSnapshot, RequestId, StreamId, TaskHandle, TaskOutcome};
use crate::error::{ErrorCode, ErrorInfo};
use crate::id::{DelegationId, SnapshotId};
use crate::state::AssignmentState;
use crate::time::Timestamp;
use crate::wire::{
    Accept, AccessMode, Dialect, ErrorMessage, Invite, Message, Resource, SnapshotEvent, TaskEvent,
    TaskSpec, TransportHandle, TransportKind,
};

use super::auth::Credential;
#[allow(unused_imports)]
use super::Executor;
use crate::engine::SnapshotKind;

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
        /// The origin (`scheme://host[:port]`) the client used, as the HTTP layer derives it
        /// (the connection's scheme and `Host`, or forwarded headers where trusted). When an
        /// INVITE or START is answered without an error, its delegation's snapshot URLs start
        /// there (unless [`ExecutorConfig::public_url`](super::ExecutorConfig::public_url) is set).
        origin: Option<String>,
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
        /// The `Last-Event-ID` header as a number, if one was sent (a value that is not a
        /// number is ignored by the driver): the subscriber resumes after that event
        /// (WIRE.md §4.6). `None`: only live events (and the replay a late subscriber gets).
        last_event_id: Option<u64>,
    },
    /// The subscriber went away.
    StreamClosed {
        /// The stream.
        stream: StreamId,
    },
    /// [`ExecutorOutput::AllocateWorkDir`] finished (on failure with nothing left behind; the
    /// engine turns the failure into `DEP_MISSING` or `WORKDIR_DENIED`).
    WorkDirAllocated {
        /// The delegation.
        id: DelegationId,
        /// Outcome.
        result: Result<(), AllocationFailure>,
    },
    /// [`ExecutorOutput::SetupTransport`] finished.
    SetupCompleted {
        /// The delegation.
        id: DelegationId,
        /// How the workspace is laid out in the work directory (the engine picks the task's
        /// directory from it), or what went wrong (the engine picks the error code:
        /// [`SetupFailure::to_error_info`]).
        result: Result<WorkspaceLayout, SetupFailure>,
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
        /// Outcome (the engine turns a failure into the protocol's error code).
        result: Result<TaskOutcome, TaskFailure>,
    },
    /// [`ExecutorOutput::CaptureSnapshot`] finished.
    SnapshotCaptured {
        /// The delegation.
        id: DelegationId,
        /// The snapshot, or what went wrong (boxed: it is the largest payload, and every
        /// input moves as big as the largest).
        result: Result<Box<CapturedSnapshot>, CaptureFailure>,
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
            Response::Accept(..) | Response::Ok | Response::Cancelled | Response::Result(_) => 200,
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
        /// Its id in the assignment's sequence: write it as an `id:` line before `data:`
        /// (WIRE.md §4.6). `None` for an answer outside any sequence (a refused subscription).
        event_id: Option<u64>,
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
    },
    /// Run the task; answer with `TaskProgress`* and then `TaskFinished`.
    RunTask {
        /// The delegation.
        id: DelegationId,
        /// The task's working directory: the single resource's directory when the workspace
        /// has one per resource, else the work directory itself.
        task_dir: String,
        /// What.
        task: TaskSpec,
        /// Lease end.
        expires_at: Timestamp,
        /// Effective access.
        access_mode: AccessMode,
        /// The round (1: the START round; more in a multi-round delegation, WIRE.md §17).
        round: u64,
        /// The rounds before this one, oldest first (at most
        /// [`EarlierRound`](crate::engine::EarlierRound)s of the last 32): the agent's history.
        earlier: Vec<crate::engine::EarlierRound>,
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
        /// Inline, or as a file served at a URL under a base.
        delivery: SnapshotDelivery,
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
        /// The invitation (shared with the engine's copy: no clone per event).
        invite: std::sync::Arc<Invite>,
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
    /// A peer broke the protocol (the request was refused, or the assignment failed, as the
    /// spec says): an event the application can count, not just a log line.
    PeerMisbehaved {
        /// The delegation the request named.
        id: DelegationId,
        /// What it did.
        reason: Misbehaviour,
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

/// How a delegator broke the protocol ([`ExecutorEvent::PeerMisbehaved`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Misbehaviour {
    /// START for an invitation that was not accepted (yet).
    StartBeforeAccept,
    /// START carries a handle of another transport than the one agreed.
    StartWithOtherTransport {
        /// What ACCEPT agreed.
        agreed: TransportKind,
        /// What START carried.
        got: TransportKind,
    },
    /// A second INVITE with the same id but different content.
    ConflictingInvite,
    /// A message only an executor sends (ACCEPT, DONE) was sent to the executor.
    UnexpectedMessage(&'static str),
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

/// One assignment as a dashboard lists it ([`Executor::overview`]).
#[derive(Clone, Debug, PartialEq)]
pub struct AssignmentSummary {
    /// The delegation.
    pub id: DelegationId,
    /// State.
    pub state: AssignmentState,
    /// The task's description (the running round's, with rounds).
    pub description: String,
    /// Work directory (empty before one is allocated).
    pub work_dir: String,
    /// When the task started, if it did.
    pub started_at: Option<Timestamp>,
    /// When its lease ends, while it runs.
    pub expires_at: Option<Timestamp>,
    /// The round running or last ended (1 without rounds).
    pub round: u64,
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

/// Why a work directory could not be allocated (facts the driver found; the engine decides the
/// error code).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AllocationFailure {
    /// The transport needs something this machine lacks (e.g. the `sshfs` binary).
    DependencyMissing {
        /// What is missing.
        message: String,
        /// How to install it.
        hint: String,
    },
    /// The work directory exists and is not empty (never reused).
    NotEmpty,
    /// The work directory could not be created.
    CannotCreate(String),
}

impl AllocationFailure {
    /// The protocol error: `DEP_MISSING` or `WORKDIR_DENIED`.
    pub fn to_error_info(&self) -> ErrorInfo {
        match self {
            AllocationFailure::DependencyMissing { message, hint } => ErrorInfo {
                code: ErrorCode::DepMissing,
                message: message.clone(),
                hint: Some(hint.clone()),
            },
            AllocationFailure::NotEmpty => ErrorInfo::new(
                ErrorCode::WorkdirDenied,
                "the work directory exists and is not empty",
            ),
            AllocationFailure::CannotCreate(why) => ErrorInfo::new(
                ErrorCode::WorkdirDenied,
                format!("cannot create the work directory: {why}"),
            ),
        }
    }
}

/// Why [`ExecutorOutput::SetupTransport`] failed: what the driver found; the engine decides the
/// error code ([`Self::to_error_info`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SetupFailure {
    /// START's handle names a transport this executor does not serve.
    UnsupportedTransport(TransportKind),
    /// An archive handle with neither inline data nor a URL.
    NoArchiveData,
    /// Local staging for the download failed (e.g. the downloads directory).
    Staging(String),
    /// Fetching the archive from the URL the delegator named failed (network, status, size).
    Fetch(String),
    /// The transport itself failed and said with which protocol error (`CHECKSUM_MISMATCH`,
    /// `SETUP_FAILED`, …).
    Transport(ErrorInfo),
}

impl SetupFailure {
    /// The protocol error: `TRANSPORT_ERROR` when the archive could not be fetched from the
    /// delegator, `SETUP_FAILED` for what went wrong here, the transport's own code otherwise.
    pub fn to_error_info(&self) -> ErrorInfo {
        match self {
            SetupFailure::UnsupportedTransport(kind) => ErrorInfo::new(
                ErrorCode::SetupFailed,
                format!("transport {} is not served by this executor", kind.as_str()),
            ),
            SetupFailure::NoArchiveData => {
                ErrorInfo::new(ErrorCode::SetupFailed, "archive handle carries no data")
            }
            SetupFailure::Staging(why) => {
                ErrorInfo::new(ErrorCode::SetupFailed, format!("downloads dir: {why}"))
            }
            SetupFailure::Fetch(why) => ErrorInfo::new(
                ErrorCode::TransportError,
                format!("fetching the archive: {why}"),
            ),
            SetupFailure::Transport(e) => e.clone(),
        }
    }
}

/// How a set-up workspace is laid out in the work directory (a fact of what arrived).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkspaceLayout {
    /// One directory per resource, named after it (reference archives, live mounts).
    PerResource,
    /// The single resource's files at the root (\[S\] archives).
    Flat,
}

/// Why a task did not produce an outcome (what the runner reports; the engine decides the
/// error code).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TaskFailure {
    /// The task ran and failed; the text is the agent's.
    #[error("{0}")]
    Failed(String),
    /// The task could not be started (missing command, bad command line).
    #[error("the task could not be started: {0}")]
    CannotStart(String),
    /// The task was stopped ([`ExecutorOutput::StopTask`] or `EndTask`) before it finished.
    #[error("the task was stopped")]
    Stopped,
}

impl TaskFailure {
    /// The protocol error: `TASK_FAILED`, or `CANCELLED` for a stopped task.
    pub fn to_error_info(&self) -> ErrorInfo {
        match self {
            TaskFailure::Failed(m) => ErrorInfo::new(ErrorCode::TaskFailed, m.clone()),
            TaskFailure::CannotStart(_) => ErrorInfo::new(ErrorCode::TaskFailed, self.to_string()),
            TaskFailure::Stopped => ErrorInfo::bare(ErrorCode::Cancelled, "the task was stopped"),
        }
    }
}

impl From<String> for TaskFailure {
    fn from(m: String) -> Self {
        TaskFailure::Failed(m)
    }
}

impl From<&str> for TaskFailure {
    fn from(m: &str) -> Self {
        TaskFailure::Failed(m.to_owned())
    }
}

/// What went wrong capturing a snapshot: a fact the driver found. The protocol error is the
/// engine's choice ([`CaptureFailure::to_error_info`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaptureFailure {
    /// A local step around the capture failed (e.g. the snapshot directory).
    Local(String),
    /// The transport's capture failed and said with which protocol error.
    Transport(ErrorInfo),
}

impl CaptureFailure {
    /// `TASK_FAILED` for what failed here (the task's result cannot be delivered), the
    /// transport's own code otherwise.
    pub fn to_error_info(&self) -> ErrorInfo {
        match self {
            CaptureFailure::Local(why) => ErrorInfo::new(ErrorCode::TaskFailed, why.clone()),
            CaptureFailure::Transport(e) => e.clone(),
        }
    }
}

/// How a captured snapshot reaches the delegator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotDelivery {
    /// Base64 in the event (\[S\] peers, peers without the `archive-url` extension, or no
    /// base URL known).
    Inline,
    /// A file the executor serves at
    /// [`snapshot_url`](crate::http_binding::snapshot_url)`(base, id, snapshot)`.
    ByUrl {
        /// The executor's base URL as the delegator reaches it (the public URL, or the origin
        /// the delegator used), `…/awcp` route not included.
        base: String,
    },
    /// A `storage` delegation's result: the ZIP is PUT to the handle's `uploadUrl` and the
    /// snapshot's `snapshotBase64` is [`storage_result_text`](crate::wire::storage_result_text)
    /// of it (WIRE.md §11.4).
    Upload {
        /// The START handle's `uploadUrl`.
        url: String,
    },
    /// A `git` delegation's result: the transport commits the work directory and pushes it
    /// to the delegation's branch of the handle's `repoUrl`; the snapshot's `snapshotBase64`
    /// is [`git_result_text`](crate::wire::git_result_text) of it (WIRE.md §11.3).
    Push,
}

#[cfg(test)]
mod capture_failure_tests {
    use super::*;

    #[test]
    fn a_local_capture_failure_fails_the_task_and_transport_codes_are_kept() {
        let local = CaptureFailure::Local("snapshot dir: EACCES".into()).to_error_info();
        assert_eq!(local.code, ErrorCode::TaskFailed);
        assert!(local.message.contains("EACCES"));
        let own = ErrorInfo::new(ErrorCode::WorkspaceTooLarge, "too big");
        assert_eq!(CaptureFailure::Transport(own.clone()).to_error_info(), own);
    }
}
