//! The delegator engine: every delegation of one delegator, from admission to cleanup.
//!
//! ## Method groups
//! * **Application calls**: [`Delegator::delegate`], [`Delegator::cancel`],
//!   [`Delegator::apply_snapshot`], [`Delegator::discard_snapshot`].
//! * **Inputs from the driver**: [`Delegator::handle`] with a [`DelegatorInput`] (HTTP replies,
//!   SSE events and stream state, transport results), and [`Delegator::handle_timeout`].
//! * **Outputs**: [`Delegator::poll_output`] (drain until `None` after every call) and
//!   [`Delegator::poll_timeout`].
//! * **Getters**: [`Delegator::get`], [`Delegator::list`].
//!
//! ## Flow (archive)
//! `delegate` → [`DelegatorOutput::ScanWorkspace`] → `ScanCompleted` (admission verdict) →
//! `SendMessage(INVITE)` → `Reply(ACCEPT)` → [`DelegatorOutput::PrepareTransport`] and
//! [`DelegatorOutput::OpenEventStream`] → `TransportPrepared` + `EventStreamOpened` →
//! `SendMessage(START)` → SSE `status` / `snapshot` / `done` → store the snapshot (and, in
//! `auto` mode, apply it from the store) → `SendAck` → [`DelegatorOutput::ReleaseTransport`] →
//! `TransportReleased` → [`DelegatorEvent::Ended`]. Credentials are produced by
//! `PrepareTransport`, which is only emitted after ACCEPT.
//!
//! ## Results are never lost
//! A snapshot is stored locally before anything else happens to it, and the executor is
//! acknowledged (`SendAck`, after which it may forget the result) only once every snapshot is
//! stored (or deliberately discarded by policy). A snapshot whose apply fails stays stored and
//! `pending`, with the reason in [`SnapshotRecord::error`], so it can be applied again or
//! discarded; one that could not be stored is `failed` and the executor is not acknowledged.
//! Applies of one delegation run one at a time, in arrival order. [`DelegationView::outcome`]
//! sums this up for the application (completed, staged, not applied, failed, unreachable).
//!
//! Every terminal path (done, error, cancel, expiry, executor loss) releases what was prepared
//! exactly once and ends with exactly one `Ended` event.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::engine::admission::{
    admission_verdict, AdmissionLimits, NotShipped, NotShippedReason, WorkspaceStats,
};
use crate::engine::timers::Core;
use crate::engine::{SnapshotMode, TaskOutcome, UsageError};
use crate::error::{ErrorCode, ErrorInfo};
use crate::id::{DelegationId, SnapshotId};
use crate::state::{DelegationEvent, DelegationMachine, DelegationState};
use crate::time::Timestamp;
use crate::wire::{
    feature, Accept, AccessMode, ActiveLease, ArchiveData, Auth, Dialect, DoneEvent, ErrorMessage,
    ExecutorConstraints, Invite, LeaseRequest, Message, Resource, SnapshotEvent, Start, TaskEvent,
    TaskEventKind, TaskSpec, TransportHandle, TransportKind,
};

/// Delegator settings. `Default` gives the reference's defaults (WIRE.md §9).
#[derive(Clone, Debug)]
pub struct DelegatorConfig {
    /// Admission limits.
    pub admission: AdmissionLimits,
    /// How long the executor is asked to keep a finished assignment, and how long this engine
    /// keeps an ended delegation before purging it (7 days).
    pub retention: Duration,
    /// Extra time after lease expiry a delegation in `started` (executor still setting up) is
    /// given before it is abandoned with `EXPIRED`.
    pub setup_grace: Duration,
    /// SSE reconnect attempts before falling back to polling `GET …/result`.
    pub sse_reconnect_attempts: u32,
    /// Back-off unit between reconnect attempts (attempt n waits n × this).
    pub sse_backoff: Duration,
    /// Interval of `GET …/result` polling once reconnects are exhausted.
    pub result_poll_interval: Duration,
    /// Protocol extensions this delegator offers in INVITE.
    pub features: Vec<String>,
}

impl Default for DelegatorConfig {
    fn default() -> Self {
        DelegatorConfig {
            admission: AdmissionLimits::default(),
            retention: Duration::from_millis(604_800_000),
            setup_grace: Duration::from_secs(60),
            sse_reconnect_attempts: 3,
            sse_backoff: Duration::from_secs(2),
            result_poll_interval: Duration::from_secs(5),
            features: vec![
                feature::DELTA_SNAPSHOTS.to_owned(),
                feature::ARCHIVE_URL.to_owned(),
            ],
        }
    }
}

/// A request to delegate a workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelegateRequest {
    /// The delegation id (the caller mints it, e.g. [`DelegationId::from_random`]).
    pub id: DelegationId,
    /// The executor's AWCP URL (`http://host:port/awcp`), opaque to the engine.
    pub peer: String,
    /// The dialect the executor speaks.
    pub dialect: Dialect,
    /// The task.
    pub task: TaskSpec,
    /// Requested lease length.
    pub ttl_seconds: u64,
    /// Requested access.
    pub access_mode: AccessMode,
    /// Exported resources (names and modes; the sources stay with the driver).
    pub resources: Vec<Resource>,
    /// Data-plane transport.
    pub transport: TransportKind,
    /// What to do with snapshots.
    pub snapshot_mode: SnapshotMode,
    /// Credential for the executor.
    pub auth: Option<Auth>,
    /// Lend secret-looking files (`.env`, private keys, …; WIRE.md §9) instead of refusing
    /// the delegation with `SENSITIVE_FILES`.
    pub allow_sensitive: bool,
}

/// A request this engine sent, named in [`DelegatorInput::Reply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outbound {
    /// The INVITE POST.
    Invite,
    /// The START POST.
    Start,
    /// An ERROR POST.
    Error,
    /// `POST …/cancel/{id}`.
    Cancel,
    /// `POST …/tasks/{id}/ack`.
    Ack,
}

/// The answer to an outbound request.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// An ACCEPT body.
    Accept(Accept),
    /// An ERROR body (or an error status with code).
    Error(ErrorInfo),
    /// `{"ok":true}` or another success without content.
    Ok,
    /// The request failed: connection refused, timeout, unparsable body…
    Failed(String),
}

/// `GET …/tasks/{id}/result` as the driver decoded it.
#[derive(Clone, Debug, PartialEq)]
pub enum FetchedResult {
    /// The assignment is still running.
    Running,
    /// Completed; the snapshot if the executor still had it.
    Completed {
        /// Summary and highlights.
        outcome: TaskOutcome,
        /// The snapshot (`snapshotBase64`) if present.
        snapshot: Option<SnapshotEvent>,
    },
    /// Failed.
    Error(ErrorInfo),
    /// The executor does not know the delegation.
    NotFound,
    /// The transport needs no result transfer (sshfs).
    NotApplicable,
}

/// An input for [`Delegator::handle`].
#[derive(Clone, Debug, PartialEq)]
pub enum DelegatorInput {
    /// The admission scan finished (or failed: `WORKSPACE_NOT_FOUND`, `WORKSPACE_INVALID`…).
    ScanCompleted {
        /// The delegation.
        id: DelegationId,
        /// What was measured.
        result: Result<WorkspaceStats, ErrorInfo>,
    },
    /// The answer to a request from [`DelegatorOutput::SendMessage`], `SendCancel` or `SendAck`.
    Reply {
        /// The delegation.
        id: DelegationId,
        /// Which request this answers.
        to: Outbound,
        /// The answer.
        reply: Reply,
    },
    /// [`DelegatorOutput::PrepareTransport`] finished. On failure the transport has already
    /// cleaned up its partial work (nothing to release).
    TransportPrepared {
        /// The delegation.
        id: DelegationId,
        /// The handle for START.
        result: Result<TransportHandle, ErrorInfo>,
    },
    /// The SSE response headers arrived (2xx).
    EventStreamOpened {
        /// The delegation.
        id: DelegationId,
    },
    /// The SSE stream failed to open or ended.
    EventStreamClosed {
        /// The delegation.
        id: DelegationId,
        /// Why, if known.
        reason: Option<String>,
    },
    /// One decoded SSE task event.
    TaskEvent {
        /// The event (its `delegation_id` routes it).
        event: TaskEvent,
    },
    /// [`DelegatorOutput::FetchResult`] finished.
    ResultFetched {
        /// The delegation.
        id: DelegationId,
        /// The result, or why the request failed.
        result: Result<FetchedResult, String>,
    },
    /// [`DelegatorOutput::ApplySnapshot`] finished (all-or-nothing).
    SnapshotApplied {
        /// The delegation.
        id: DelegationId,
        /// The snapshot.
        snapshot_id: SnapshotId,
        /// Failure leaves the workspace untouched (the snapshot stays stored and pending).
        result: Result<(), ErrorInfo>,
    },
    /// [`DelegatorOutput::StoreSnapshot`] finished.
    SnapshotStored {
        /// The delegation.
        id: DelegationId,
        /// The snapshot.
        snapshot_id: SnapshotId,
        /// Whether it is stored.
        result: Result<(), ErrorInfo>,
    },
    /// [`DelegatorOutput::ReleaseTransport`] finished.
    TransportReleased {
        /// The delegation.
        id: DelegationId,
        /// What the release found that the user should be told (what the executor left in
        /// the workspace and was neutralised, what could not be removed cleanly); shown in
        /// [`DelegationView::warnings`].
        warnings: Vec<String>,
    },
}

/// An output of [`Delegator::poll_output`]: something for the driver to do or to tell.
#[derive(Clone, Debug, PartialEq)]
pub enum DelegatorOutput {
    /// Scan the delegation's resources for admission; answer with `ScanCompleted`.
    ScanWorkspace {
        /// The delegation.
        id: DelegationId,
    },
    /// POST `message` to `peer` in `dialect`; answer with `Reply { to: Invite | Start | Error }`.
    SendMessage {
        /// The delegation.
        id: DelegationId,
        /// The executor URL.
        peer: String,
        /// The message.
        message: Message,
        /// The dialect to encode it in.
        dialect: Dialect,
    },
    /// POST `…/cancel/{id}`; answer with `Reply { to: Cancel }` (optional).
    SendCancel {
        /// The delegation.
        id: DelegationId,
        /// The executor URL.
        peer: String,
    },
    /// POST `…/tasks/{id}/ack`; answer with `Reply { to: Ack }` (optional).
    SendAck {
        /// The delegation.
        id: DelegationId,
        /// The executor URL.
        peer: String,
    },
    /// Build the export view and the transport handle (credentials); answer with
    /// `TransportPrepared`.
    PrepareTransport {
        /// The delegation.
        id: DelegationId,
        /// Which transport.
        transport: TransportKind,
        /// Effective access.
        access_mode: AccessMode,
        /// Lease end (certificates must not outlive it).
        expires_at: Timestamp,
        /// Dialect of the executor (archive layout).
        dialect: Dialect,
        /// Extensions agreed in ACCEPT (e.g. archive by URL).
        features: Vec<String>,
    },
    /// Open `GET …/tasks/{id}/events`; answer with `EventStreamOpened`, then `TaskEvent`s, then
    /// `EventStreamClosed`.
    OpenEventStream {
        /// The delegation.
        id: DelegationId,
        /// The executor URL.
        peer: String,
    },
    /// Close the event stream (no `EventStreamClosed` needed).
    CloseEventStream {
        /// The delegation.
        id: DelegationId,
    },
    /// GET `…/tasks/{id}/result`; answer with `ResultFetched`.
    FetchResult {
        /// The delegation.
        id: DelegationId,
        /// The executor URL.
        peer: String,
    },
    /// Apply a stored snapshot (from [`DelegatorOutput::StoreSnapshot`]) to the `rw`
    /// resources, all-or-nothing; answer with `SnapshotApplied`. At most one apply per
    /// delegation is in flight.
    ApplySnapshot {
        /// The delegation.
        id: DelegationId,
        /// The snapshot.
        snapshot_id: SnapshotId,
    },
    /// Store a snapshot durably (its bytes, inline or fetched from its URL); answer with
    /// `SnapshotStored`. Every snapshot that is to be applied or staged is stored first.
    StoreSnapshot {
        /// The delegation.
        id: DelegationId,
        /// The snapshot event (bytes inline or by URL).
        snapshot: Box<SnapshotEvent>,
    },
    /// Delete a stored snapshot (discard or purge). No answer needed.
    DeleteStoredSnapshot {
        /// The delegation.
        id: DelegationId,
        /// The snapshot.
        snapshot_id: SnapshotId,
    },
    /// Release the transport (export view, archives, credentials); answer with
    /// `TransportReleased`.
    ReleaseTransport {
        /// The delegation.
        id: DelegationId,
    },
    /// Tell the application.
    Event(DelegatorEvent),
}

/// Something the application may want to know.
#[derive(Clone, Debug, PartialEq)]
pub enum DelegatorEvent {
    /// A delegation changed state.
    StateChanged {
        /// The delegation.
        id: DelegationId,
        /// Old state.
        from: DelegationState,
        /// New state.
        to: DelegationState,
    },
    /// A `status` event arrived.
    Progress {
        /// The delegation.
        id: DelegationId,
        /// The status message.
        message: Option<String>,
        /// The progress figure.
        progress: Option<f64>,
    },
    /// A snapshot changed status.
    Snapshot {
        /// The delegation.
        id: DelegationId,
        /// The snapshot.
        snapshot_id: SnapshotId,
        /// Its new status.
        status: SnapshotStatus,
    },
    /// The delegation was purged after its retention: drop it from any journal.
    Forgotten {
        /// The delegation.
        id: DelegationId,
    },
    /// The delegation is over and everything it held is released. Emitted exactly once.
    Ended {
        /// The delegation.
        id: DelegationId,
        /// Its terminal state.
        state: DelegationState,
        /// The executor's summary, if it completed.
        result: Option<TaskOutcome>,
        /// What went wrong, if it did not.
        error: Option<ErrorInfo>,
    },
}

/// Status of a snapshot on the delegator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotStatus {
    /// Being stored, or applied.
    InFlight,
    /// Stored, waiting for the application to apply or discard it. Also the status of a
    /// snapshot whose apply failed ([`SnapshotRecord::error`] says why): it can be applied
    /// again or discarded.
    Pending,
    /// Applied to the workspace.
    Applied,
    /// Discarded.
    Discarded,
    /// Storing failed: the bytes are not kept and the executor was not acknowledged (it still
    /// holds the result). The workspace is untouched.
    Failed(ErrorInfo),
}

impl SnapshotStatus {
    /// `in_flight`, `pending`, `applied`, `discarded` or `failed`.
    pub fn as_str(&self) -> &'static str {
        match self {
            SnapshotStatus::InFlight => "in_flight",
            SnapshotStatus::Pending => "pending",
            SnapshotStatus::Applied => "applied",
            SnapshotStatus::Discarded => "discarded",
            SnapshotStatus::Failed(_) => "failed",
        }
    }
}

/// A snapshot as the delegator records it.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotRecord {
    /// Snapshot id.
    pub id: SnapshotId,
    /// Summary.
    pub summary: String,
    /// Highlights.
    pub highlights: Vec<String>,
    /// Recommended by the executor.
    pub recommended: bool,
    /// Metadata from the event.
    pub metadata: BTreeMap<String, serde_json::Value>,
    /// Status.
    pub status: SnapshotStatus,
    /// When it arrived.
    pub received_at: Timestamp,
    /// When it was applied.
    pub applied_at: Option<Timestamp>,
    /// Why the last apply of this snapshot failed (it stays `pending`, stored, re-appliable);
    /// `None` once applied.
    pub error: Option<ErrorInfo>,
}

/// A read-only view of one delegation.
#[derive(Clone, Debug, PartialEq)]
pub struct DelegationView {
    /// The request it was created from.
    pub request: DelegateRequest,
    /// Current state.
    pub state: DelegationState,
    /// Created.
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Timestamp,
    /// Lease end, once invited.
    pub expires_at: Option<Timestamp>,
    /// Effective access after the executor's answer.
    pub access_mode: AccessMode,
    /// The executor's work directory (informational).
    pub executor_work_dir: Option<String>,
    /// The executor's constraints.
    pub executor_constraints: Option<ExecutorConstraints>,
    /// Snapshots in arrival order.
    pub snapshots: Vec<SnapshotRecord>,
    /// The executor's summary.
    pub result: Option<TaskOutcome>,
    /// The error.
    pub error: Option<ErrorInfo>,
    /// Why the result the executor announced never arrived (it could not be fetched), if so.
    pub result_error: Option<ErrorInfo>,
    /// Whether everything is released and the delegation is over.
    pub ended: bool,
    /// What releasing the transport found that the user should know (see
    /// [`DelegatorInput::TransportReleased`]).
    pub warnings: Vec<String>,
    /// Workspace entries the admission scan found that are not shipped (symlinks, special
    /// files, ignored paths), the first [`MAX_NOT_SHIPPED_LISTED`](crate::engine::admission::MAX_NOT_SHIPPED_LISTED).
    pub not_shipped: Vec<NotShipped>,
    /// How many entries are not shipped in all.
    pub not_shipped_count: u64,
}

/// How a delegation turned out, for the application: what a CLI's exit code, an MCP tool's
/// `isError` and the daemon's record report. See [`DelegationView::outcome`].
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Not over yet.
    Running,
    /// Completed, and every result the snapshot policy applies was applied (or there was
    /// nothing to apply: read-only, `discard`, a live transport).
    Completed,
    /// Completed; the result waits, stored, for the application to apply or discard it
    /// (`staged` mode).
    Staged,
    /// Completed, but the result was NOT applied: it is kept stored and pending (`snapshot`),
    /// or could not be stored or fetched (the executor was not acknowledged and still holds
    /// it). `reason` says why.
    NotApplied {
        /// The snapshot kept for a retry, if its bytes are stored.
        snapshot: Option<SnapshotId>,
        /// Why it was not applied.
        reason: ErrorInfo,
    },
    /// The executor could not be reached (or did not answer usably).
    Unreachable(ErrorInfo),
    /// The delegation failed, expired or was cancelled.
    Failed {
        /// Its terminal state.
        state: DelegationState,
        /// What went wrong.
        error: Option<ErrorInfo>,
    },
}

impl Outcome {
    /// `running`, `completed`, `staged`, `not_applied`, `unreachable` or `failed`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Running => "running",
            Outcome::Completed => "completed",
            Outcome::Staged => "staged",
            Outcome::NotApplied { .. } => "not_applied",
            Outcome::Unreachable(_) => "unreachable",
            Outcome::Failed { .. } => "failed",
        }
    }
}

impl DelegationView {
    /// How the delegation turned out (see [`Outcome`]).
    pub fn outcome(&self) -> Outcome {
        match self.state {
            DelegationState::Completed => {}
            s if !s.is_terminal() => return Outcome::Running,
            DelegationState::Error
                if self.error.as_ref().is_some_and(|e| {
                    matches!(e.code, ErrorCode::Timeout | ErrorCode::SseFailed)
                }) =>
            {
                return Outcome::Unreachable(self.error.clone().expect("checked"))
            }
            state => {
                return Outcome::Failed {
                    state,
                    error: self.error.clone(),
                }
            }
        }
        for snap in &self.snapshots {
            if let SnapshotStatus::Failed(e) = &snap.status {
                return Outcome::NotApplied {
                    snapshot: None,
                    reason: e.clone(),
                };
            }
        }
        if let Some(e) = &self.result_error {
            return Outcome::NotApplied {
                snapshot: None,
                reason: e.clone(),
            };
        }
        let auto = self.request.snapshot_mode == SnapshotMode::Auto;
        let mut staged = false;
        for snap in &self.snapshots {
            if snap.status != SnapshotStatus::Pending && snap.status != SnapshotStatus::InFlight {
                continue;
            }
            match &snap.error {
                Some(e) => {
                    return Outcome::NotApplied {
                        snapshot: Some(snap.id.clone()),
                        reason: e.clone(),
                    }
                }
                None if auto => {
                    return Outcome::NotApplied {
                        snapshot: Some(snap.id.clone()),
                        reason: ErrorInfo::bare(
                            ErrorCode::TransportError,
                            "the snapshot was stored but not applied",
                        ),
                    }
                }
                None => staged = true,
            }
        }
        if staged {
            Outcome::Staged
        } else {
            Outcome::Completed
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Lease,
    SetupGrace,
    Reconnect,
    ResultPoll,
    Purge,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Res {
    /// Nothing prepared.
    None,
    Preparing,
    Prepared,
    Releasing,
    Released,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    Closed,
    Opening,
    Open,
}

#[derive(Debug)]
struct Delegation {
    req: DelegateRequest,
    machine: DelegationMachine,
    created_at: Timestamp,
    updated_at: Timestamp,
    expires_at: Option<Timestamp>,
    invited_at: Option<Timestamp>,
    access: AccessMode,
    features: Vec<String>,
    accept: Option<Accept>,
    transport: Res,
    handle: Option<TransportHandle>,
    stream: Stream,
    stream_failures: u32,
    start_sent: bool,
    snapshots: BTreeMap<SnapshotId, SnapshotRecord>,
    snapshot_order: Vec<SnapshotId>,
    /// Snapshots whose bytes are in the driver's store (stored, not yet deleted).
    stored: Vec<SnapshotId>,
    ops_in_flight: u32,
    /// Snapshot the executor announced in `done` that has not arrived (fetch it).
    awaiting_snapshot: Option<SnapshotId>,
    /// The snapshot being applied (one at a time).
    applying: Option<SnapshotId>,
    /// Stored snapshots waiting to be applied, in order.
    apply_queue: Vec<SnapshotId>,
    /// Why the announced result could not be fetched.
    result_error: Option<ErrorInfo>,
    heard_terminal: bool,
    ack_sent: bool,
    result: Option<TaskOutcome>,
    error: Option<ErrorInfo>,
    ended: bool,
    warnings: Vec<String>,
    not_shipped: Vec<NotShipped>,
    not_shipped_count: u64,
}

/// The delegator engine. See the [module docs](self).
#[derive(Debug)]
pub struct Delegator {
    config: DelegatorConfig,
    delegations: BTreeMap<DelegationId, Delegation>,
    core: Core<Timer, DelegatorOutput>,
}

const RESULT_SNAPSHOT_ID: &str = "snap_result";

impl Delegator {
    /// A delegator with no delegations.
    pub fn new(config: DelegatorConfig) -> Self {
        Delegator {
            config,
            delegations: BTreeMap::new(),
            core: Core::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DelegatorConfig {
        &self.config
    }

    // ----------------------------------------------------------------------------------------
    // Application calls

    /// Creates a delegation in `created` and asks for the admission scan.
    pub fn delegate(&mut self, now: Timestamp, req: DelegateRequest) -> Result<(), UsageError> {
        self.tick(now);
        if self.delegations.contains_key(&req.id) {
            return Err(UsageError::AlreadyExists(req.id));
        }
        if req.ttl_seconds == 0 {
            return Err(UsageError::InvalidRequest(
                "ttl_seconds must be positive".into(),
            ));
        }
        if req.resources.is_empty() {
            return Err(UsageError::InvalidRequest(
                "at least one resource is required".into(),
            ));
        }
        let mut names: Vec<_> = req.resources.iter().map(|r| &r.name).collect();
        names.sort();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err(UsageError::InvalidRequest(
                "resource names must be unique".into(),
            ));
        }
        let id = req.id.clone();
        tracing::debug!(delegation = %id, "delegation created");
        let access = req.access_mode;
        self.delegations.insert(
            id.clone(),
            Delegation {
                req,
                machine: DelegationMachine::new(),
                created_at: now,
                updated_at: now,
                expires_at: None,
                invited_at: None,
                access,
                features: Vec::new(),
                accept: None,
                transport: Res::None,
                handle: None,
                stream: Stream::Closed,
                stream_failures: 0,
                start_sent: false,
                snapshots: BTreeMap::new(),
                snapshot_order: Vec::new(),
                stored: Vec::new(),
                ops_in_flight: 0,
                awaiting_snapshot: None,
                applying: None,
                apply_queue: Vec::new(),
                result_error: None,
                heard_terminal: false,
                ack_sent: false,
                result: None,
                error: None,
                ended: false,
                warnings: Vec::new(),
                not_shipped: Vec::new(),
                not_shipped_count: 0,
            },
        );
        self.core
            .outputs
            .push_back(DelegatorOutput::ScanWorkspace { id });
        Ok(())
    }

    /// Cancels a delegation: the executor is told, resources are released.
    pub fn cancel(&mut self, now: Timestamp, id: &DelegationId) -> Result<(), UsageError> {
        self.tick(now);
        let d = self.get_mut(id)?;
        if d.machine.state().is_terminal() {
            return Err(UsageError::InvalidState(format!(
                "delegation {id} is already {}",
                d.machine.state()
            )));
        }
        let tell_executor = d.machine.state() != DelegationState::Created;
        let peer = d.req.peer.clone();
        self.transition(
            now,
            id,
            DelegationEvent::Cancel,
            Some(ErrorInfo::bare(
                ErrorCode::Cancelled,
                "cancelled by the delegator",
            )),
        );
        if tell_executor {
            self.core.outputs.push_back(DelegatorOutput::SendCancel {
                id: id.clone(),
                peer,
            });
        }
        self.wind_down(now, id);
        Ok(())
    }

    /// Applies a stored (staged) snapshot.
    pub fn apply_snapshot(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        snapshot_id: &SnapshotId,
    ) -> Result<(), UsageError> {
        self.tick(now);
        let d = self.get_mut(id)?;
        if d.req.access_mode == AccessMode::Ro || d.access == AccessMode::Ro {
            return Err(UsageError::InvalidState(
                "read-only delegations never write to the workspace".into(),
            ));
        }
        let rec = d
            .snapshots
            .get_mut(snapshot_id)
            .ok_or_else(|| UsageError::UnknownSnapshot {
                delegation: id.clone(),
                snapshot: snapshot_id.to_string(),
            })?;
        if rec.status != SnapshotStatus::Pending {
            return Err(UsageError::InvalidState(format!(
                "snapshot {snapshot_id} is {}, not pending",
                rec.status.as_str()
            )));
        }
        rec.status = SnapshotStatus::InFlight;
        d.ops_in_flight += 1;
        d.updated_at = now;
        self.start_apply(id, snapshot_id.clone());
        self.core
            .outputs
            .push_back(DelegatorOutput::Event(DelegatorEvent::Snapshot {
                id: id.clone(),
                snapshot_id: snapshot_id.clone(),
                status: SnapshotStatus::InFlight,
            }));
        Ok(())
    }

    /// Discards a stored snapshot.
    pub fn discard_snapshot(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        snapshot_id: &SnapshotId,
    ) -> Result<(), UsageError> {
        self.tick(now);
        let d = self.get_mut(id)?;
        let rec = d
            .snapshots
            .get_mut(snapshot_id)
            .ok_or_else(|| UsageError::UnknownSnapshot {
                delegation: id.clone(),
                snapshot: snapshot_id.to_string(),
            })?;
        match rec.status {
            SnapshotStatus::Pending => {}
            SnapshotStatus::InFlight => {
                return Err(UsageError::InvalidState(format!(
                    "snapshot {snapshot_id} is being applied or stored"
                )))
            }
            SnapshotStatus::Discarded => return Ok(()),
            SnapshotStatus::Applied | SnapshotStatus::Failed(_) => {
                return Err(UsageError::InvalidState(format!(
                    "snapshot {snapshot_id} is {}, nothing to discard",
                    rec.status.as_str()
                )))
            }
        }
        rec.status = SnapshotStatus::Discarded;
        d.stored.retain(|s| s != snapshot_id);
        d.updated_at = now;
        self.core
            .outputs
            .push_back(DelegatorOutput::DeleteStoredSnapshot {
                id: id.clone(),
                snapshot_id: snapshot_id.clone(),
            });
        self.core
            .outputs
            .push_back(DelegatorOutput::Event(DelegatorEvent::Snapshot {
                id: id.clone(),
                snapshot_id: snapshot_id.clone(),
                status: SnapshotStatus::Discarded,
            }));
        Ok(())
    }

    // ----------------------------------------------------------------------------------------
    // Getters

    /// A view of one delegation.
    pub fn get(&self, id: &DelegationId) -> Option<DelegationView> {
        self.delegations.get(id).map(|d| DelegationView {
            request: d.req.clone(),
            state: d.machine.state(),
            created_at: d.created_at,
            updated_at: d.updated_at,
            expires_at: d.expires_at,
            access_mode: d.access,
            executor_work_dir: d.accept.as_ref().map(|a| a.work_dir.clone()),
            executor_constraints: d.accept.as_ref().and_then(|a| a.constraints),
            snapshots: d
                .snapshot_order
                .iter()
                .filter_map(|s| d.snapshots.get(s).cloned())
                .collect(),
            result: d.result.clone(),
            error: d.error.clone(),
            result_error: d.result_error.clone(),
            ended: d.ended,
            warnings: d.warnings.clone(),
            not_shipped: d.not_shipped.clone(),
            not_shipped_count: d.not_shipped_count,
        })
    }

    /// The credential header a request to `url` on behalf of delegation `id` presents: the
    /// delegation's credential when `url` is on the executor's origin (INVITE, START, events,
    /// result, snapshot downloads, ack, cancel, ERROR), and nothing for any other origin (a
    /// credential is never handed to a third party, e.g. a storage URL the executor names).
    pub fn credential_header(
        &self,
        id: &DelegationId,
        url: &str,
    ) -> Option<(&'static str, String)> {
        let d = self.delegations.get(id)?;
        let auth = d.req.auth.as_ref()?;
        crate::http::same_origin(&d.req.peer, url).then(|| crate::http::credential_header(auth))
    }

    /// Ids and states of every delegation, in id order.
    pub fn list(&self) -> Vec<(DelegationId, DelegationState)> {
        self.delegations
            .iter()
            .map(|(id, d)| (id.clone(), d.machine.state()))
            .collect()
    }

    // ----------------------------------------------------------------------------------------
    // Drive contract

    /// Feeds one input. Unknown delegations are a [`UsageError`] (e.g. a late reply after a
    /// purge) and change nothing.
    pub fn handle(&mut self, now: Timestamp, input: DelegatorInput) -> Result<(), UsageError> {
        self.tick(now);
        match input {
            DelegatorInput::ScanCompleted { id, result } => self.on_scan(now, &id, result),
            DelegatorInput::Reply { id, to, reply } => self.on_reply(now, &id, to, reply),
            DelegatorInput::TransportPrepared { id, result } => self.on_prepared(now, &id, result),
            DelegatorInput::EventStreamOpened { id } => {
                let d = self.get_mut(&id)?;
                if d.stream == Stream::Opening {
                    d.stream = Stream::Open;
                }
                self.maybe_send_start(now, &id);
                Ok(())
            }
            DelegatorInput::EventStreamClosed { id, reason } => {
                self.on_stream_closed(now, &id, reason)
            }
            DelegatorInput::TaskEvent { event } => self.on_task_event(now, event),
            DelegatorInput::ResultFetched { id, result } => self.on_result(now, &id, result),
            DelegatorInput::SnapshotApplied {
                id,
                snapshot_id,
                result,
            } => self.on_applied(now, &id, &snapshot_id, result),
            DelegatorInput::SnapshotStored {
                id,
                snapshot_id,
                result,
            } => self.on_stored(now, &id, &snapshot_id, result),
            DelegatorInput::TransportReleased { id, warnings } => {
                let d = self.get_mut(&id)?;
                d.warnings.extend(warnings);
                if d.transport == Res::Releasing {
                    d.transport = Res::Released;
                }
                self.maybe_end(now, &id);
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

    /// The next output, if any. Drain until `None` after every call.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<DelegatorOutput> {
        self.core.poll_output()
    }

    /// When to call [`Delegator::handle_timeout`] next. While outputs are queued this is the
    /// last `now` seen ("due now").
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.core.poll_timeout()
    }

    // ----------------------------------------------------------------------------------------
    // Internals

    fn tick(&mut self, now: Timestamp) {
        self.core.tick(now);
    }

    fn get_mut(&mut self, id: &DelegationId) -> Result<&mut Delegation, UsageError> {
        self.delegations
            .get_mut(id)
            .ok_or_else(|| UsageError::UnknownDelegation(id.clone()))
    }

    fn state(&self, id: &DelegationId) -> Option<DelegationState> {
        self.delegations.get(id).map(|d| d.machine.state())
    }

    /// The only place a delegation's state changes.
    fn transition(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        event: DelegationEvent,
        error: Option<ErrorInfo>,
    ) -> bool {
        let Some(d) = self.delegations.get_mut(id) else {
            return false;
        };
        match d.machine.apply(event) {
            Ok((from, to)) => {
                d.updated_at = now;
                if to.is_terminal() && d.error.is_none() {
                    d.error = error;
                }
                tracing::debug!(delegation = %id, %from, %to, "state changed");
                self.core
                    .outputs
                    .push_back(DelegatorOutput::Event(DelegatorEvent::StateChanged {
                        id: id.clone(),
                        from,
                        to,
                    }));
                if to.is_terminal() {
                    self.core.timers.cancel(id, Timer::Lease);
                    self.core.timers.cancel(id, Timer::SetupGrace);
                    self.core.timers.cancel(id, Timer::Reconnect);
                    self.core.timers.cancel(id, Timer::ResultPoll);
                }
                true
            }
            Err(e) => {
                tracing::debug!(delegation = %id, "ignored: {e}");
                false
            }
        }
    }

    /// Sends ERROR to the executor: we abandon an accepted (or possibly accepted) delegation.
    fn send_error(&mut self, id: &DelegationId, error: ErrorInfo) {
        let Some(d) = self.delegations.get(id) else {
            return;
        };
        self.core.outputs.push_back(DelegatorOutput::SendMessage {
            id: id.clone(),
            peer: d.req.peer.clone(),
            message: Message::Error(ErrorMessage {
                delegation_id: id.clone(),
                error,
            }),
            dialect: d.req.dialect,
        });
    }

    /// Fails a delegation from our side, telling the executor if it may know about it.
    fn abandon(&mut self, now: Timestamp, id: &DelegationId, error: ErrorInfo) {
        let tell = matches!(
            self.state(id),
            Some(
                DelegationState::Invited
                    | DelegationState::Accepted
                    | DelegationState::Started
                    | DelegationState::Running
            )
        );
        if self.transition(now, id, DelegationEvent::SendError, Some(error.clone())) && tell {
            self.send_error(id, error);
        }
        self.wind_down(now, id);
    }

    fn on_scan(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        result: Result<WorkspaceStats, ErrorInfo>,
    ) -> Result<(), UsageError> {
        let d = self.get_mut(id)?;
        if d.machine.state() != DelegationState::Created {
            return Ok(());
        }
        let allow_sensitive = d.req.allow_sensitive;
        if let Ok(stats) = &result {
            d.not_shipped = stats.not_shipped.clone();
            d.not_shipped_count = stats.not_shipped_count;
        }
        let verdict = result
            .and_then(|stats| admission_verdict(&stats, &self.config.admission, allow_sensitive));
        if let Err(e) = verdict {
            tracing::info!(delegation = %id, code = %e.code, "admission refused: {}", e.message);
            self.transition(now, id, DelegationEvent::SendError, Some(e));
            self.wind_down(now, id);
            return Ok(());
        }
        let d = self.delegations.get_mut(id).expect("checked above");
        let expires_at = now.saturating_add(Duration::from_secs(d.req.ttl_seconds));
        d.expires_at = Some(expires_at);
        d.invited_at = Some(now);
        let invite = Invite {
            delegation_id: id.clone(),
            task: d.req.task.clone(),
            lease: LeaseRequest {
                ttl_seconds: d.req.ttl_seconds,
                access_mode: d.req.access_mode,
            },
            resources: d.req.resources.clone(),
            export_name: (d.req.dialect == Dialect::Seed).then(|| format!("awcp/{id}")),
            retention_ms: Some(
                u64::try_from(self.config.retention.as_millis()).unwrap_or(u64::MAX),
            ),
            transport: Some(d.req.transport.clone()),
            auth: d.req.auth.clone(),
            features: self.config.features.clone(),
        };
        let peer = d.req.peer.clone();
        let dialect = d.req.dialect;
        self.transition(now, id, DelegationEvent::SendInvite, None);
        self.core.timers.set(id, Timer::Lease, expires_at);
        self.core.outputs.push_back(DelegatorOutput::SendMessage {
            id: id.clone(),
            peer,
            message: Message::Invite(invite),
            dialect,
        });
        Ok(())
    }

    fn on_reply(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        to: Outbound,
        reply: Reply,
    ) -> Result<(), UsageError> {
        let d = self.get_mut(id)?;
        let state = d.machine.state();
        match (to, reply) {
            (Outbound::Invite, Reply::Accept(accept)) => {
                if state != DelegationState::Invited {
                    // We gave up meanwhile (cancel, expiry): free the executor's assignment.
                    if state.is_terminal() {
                        self.send_error(
                            id,
                            ErrorInfo::bare(
                                ErrorCode::Cancelled,
                                format!("delegation already {state}"),
                            ),
                        );
                    }
                    return Ok(());
                }
                self.on_accept(now, id, accept);
            }
            (Outbound::Invite, Reply::Error(e)) => {
                if state == DelegationState::Invited {
                    self.transition(now, id, DelegationEvent::ReceiveError, Some(e));
                    self.wind_down(now, id);
                }
            }
            (Outbound::Invite, other) => {
                if state == DelegationState::Invited {
                    self.request_failed(now, id, "INVITE", other);
                }
            }
            (Outbound::Start, Reply::Ok) => {}
            (Outbound::Start, Reply::Error(e)) => {
                if matches!(state, DelegationState::Started | DelegationState::Running) {
                    self.transition(now, id, DelegationEvent::ReceiveError, Some(e));
                    self.wind_down(now, id);
                }
            }
            (Outbound::Start, other) => {
                if state == DelegationState::Started {
                    self.request_failed(now, id, "START", other);
                }
            }
            (Outbound::Error | Outbound::Cancel | Outbound::Ack, _) => {}
        }
        Ok(())
    }

    /// INVITE or START got no usable answer (network failure or an unexpected body): the
    /// executor may have it, so abandon with ERROR.
    fn request_failed(&mut self, now: Timestamp, id: &DelegationId, what: &str, reply: Reply) {
        let why = match reply {
            Reply::Failed(why) => why,
            _ => format!("unexpected answer to {what}"),
        };
        self.abandon(
            now,
            id,
            ErrorInfo::new(ErrorCode::Timeout, format!("{what} failed: {why}")),
        );
    }

    fn on_accept(&mut self, now: Timestamp, id: &DelegationId, accept: Accept) {
        let d = self.delegations.get_mut(id).expect("caller checked");
        if let Some(c) = accept.constraints {
            if let Some(mode) = c.accepted_access_mode {
                d.access = d.req.access_mode.min(mode);
            }
            if let (Some(max), Some(invited)) = (c.max_ttl_seconds, d.invited_at) {
                let capped = invited.saturating_add(Duration::from_secs(max));
                if d.expires_at.is_none_or(|e| capped < e) {
                    d.expires_at = Some(capped);
                }
            }
        }
        d.features = accept
            .features
            .iter()
            .filter(|f| self.config.features.contains(f))
            .cloned()
            .collect();
        let expires_at = d.expires_at.unwrap_or(now);
        d.accept = Some(accept);
        d.transport = Res::Preparing;
        d.stream = Stream::Opening;
        let out_prepare = DelegatorOutput::PrepareTransport {
            id: id.clone(),
            transport: d.req.transport.clone(),
            access_mode: d.access,
            expires_at,
            dialect: d.req.dialect,
            features: d.features.clone(),
        };
        let out_stream = DelegatorOutput::OpenEventStream {
            id: id.clone(),
            peer: d.req.peer.clone(),
        };
        self.transition(now, id, DelegationEvent::ReceiveAccept, None);
        self.core.timers.set(id, Timer::Lease, expires_at);
        self.core.outputs.push_back(out_prepare);
        self.core.outputs.push_back(out_stream);
    }

    fn on_prepared(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        result: Result<TransportHandle, ErrorInfo>,
    ) -> Result<(), UsageError> {
        let d = self.get_mut(id)?;
        if d.transport != Res::Preparing {
            return Ok(());
        }
        match result {
            Ok(handle) => {
                d.transport = Res::Prepared;
                if d.machine.state().is_terminal() {
                    self.wind_down(now, id);
                } else {
                    d.handle = Some(handle);
                    self.maybe_send_start(now, id);
                }
            }
            Err(e) => {
                d.transport = Res::None;
                if d.machine.state().is_terminal() {
                    self.maybe_end(now, id);
                } else {
                    self.abandon(now, id, e);
                }
            }
        }
        Ok(())
    }

    fn maybe_send_start(&mut self, now: Timestamp, id: &DelegationId) {
        let Some(d) = self.delegations.get_mut(id) else {
            return;
        };
        if d.machine.state() != DelegationState::Accepted
            || d.transport != Res::Prepared
            || d.stream != Stream::Open
            || d.start_sent
        {
            return;
        }
        let Some(handle) = d.handle.take() else {
            return;
        };
        let expires_at = d.expires_at.unwrap_or(now);
        d.start_sent = true;
        let out = DelegatorOutput::SendMessage {
            id: id.clone(),
            peer: d.req.peer.clone(),
            message: Message::Start(Start {
                delegation_id: id.clone(),
                lease: ActiveLease {
                    expires_at,
                    access_mode: d.access,
                },
                handle,
            }),
            dialect: d.req.dialect,
        };
        self.transition(now, id, DelegationEvent::SendStart, None);
        self.core.outputs.push_back(out);
    }

    fn on_stream_closed(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        reason: Option<String>,
    ) -> Result<(), UsageError> {
        let attempts = self.config.sse_reconnect_attempts;
        let backoff = self.config.sse_backoff;
        let d = self.get_mut(id)?;
        if d.stream == Stream::Closed {
            return Ok(());
        }
        d.stream = Stream::Closed;
        let state = d.machine.state();
        if state.is_terminal() || d.heard_terminal {
            return Ok(());
        }
        d.stream_failures += 1;
        let failures = d.stream_failures;
        tracing::debug!(delegation = %id, failures, reason = reason.as_deref().unwrap_or(""), "event stream closed");
        if failures <= attempts {
            let wait = backoff * failures;
            self.core
                .timers
                .set(id, Timer::Reconnect, now.saturating_add(wait));
        } else if state == DelegationState::Accepted {
            self.abandon(
                now,
                id,
                ErrorInfo::new(
                    ErrorCode::SseFailed,
                    format!(
                        "could not open the event stream: {}",
                        reason.unwrap_or_else(|| "closed".into())
                    ),
                ),
            );
        } else {
            let peer = d.req.peer.clone();
            self.core.outputs.push_back(DelegatorOutput::FetchResult {
                id: id.clone(),
                peer,
            });
        }
        Ok(())
    }

    fn on_task_event(&mut self, now: Timestamp, event: TaskEvent) -> Result<(), UsageError> {
        let id = event.delegation_id.clone();
        let d = self.get_mut(&id)?;
        if d.stream == Stream::Opening {
            d.stream = Stream::Open;
        }
        let state = d.machine.state();
        if !d.start_sent {
            return Ok(()); // events before START are noise (or a previous incarnation)
        }
        match event.kind {
            TaskEventKind::Status(s) => {
                d.stream_failures = 0;
                if state == DelegationState::Started {
                    self.setup_complete(now, &id);
                }
                self.core
                    .outputs
                    .push_back(DelegatorOutput::Event(DelegatorEvent::Progress {
                        id: id.clone(),
                        message: s.message,
                        progress: s.progress,
                    }));
            }
            TaskEventKind::Snapshot(snap) => {
                if state == DelegationState::Started {
                    self.setup_complete(now, &id);
                }
                self.on_snapshot(now, &id, snap);
            }
            TaskEventKind::Done(done) => self.on_done(now, &id, done),
            TaskEventKind::Error(e) => {
                let d = self.get_mut(&id)?;
                d.heard_terminal = true;
                if matches!(state, DelegationState::Started | DelegationState::Running) {
                    self.receive_error(now, &id, e);
                }
                self.wind_down(now, &id);
            }
        }
        Ok(())
    }

    /// An error from the executor. Its own lease expiry (`EXPIRED`) expires the delegation
    /// where the table allows it, so both sides agree on `expired`.
    fn receive_error(&mut self, now: Timestamp, id: &DelegationId, e: ErrorInfo) {
        let can_expire = self
            .delegations
            .get(id)
            .is_some_and(|d| d.machine.can(DelegationEvent::Expire));
        let event = if e.code == ErrorCode::Expired && can_expire {
            DelegationEvent::Expire
        } else {
            DelegationEvent::ReceiveError
        };
        self.transition(now, id, event, Some(e));
    }

    fn setup_complete(&mut self, now: Timestamp, id: &DelegationId) {
        self.transition(now, id, DelegationEvent::SetupComplete, None);
        self.core.timers.cancel(id, Timer::SetupGrace);
        if let Some(exp) = self.delegations.get(id).and_then(|d| d.expires_at) {
            if now >= exp {
                self.expire(now, id);
            } else {
                self.core.timers.set(id, Timer::Lease, exp);
            }
        }
    }

    fn on_snapshot(&mut self, now: Timestamp, id: &DelegationId, snap: SnapshotEvent) {
        let Some(d) = self.delegations.get_mut(id) else {
            return;
        };
        let state = d.machine.state();
        let awaited = d.awaiting_snapshot.as_ref() == Some(&snap.snapshot_id);
        if d.snapshots.contains_key(&snap.snapshot_id)
            || !(state == DelegationState::Running
                || (state == DelegationState::Completed && awaited))
        {
            return; // duplicate (replay) or too late (cancelled/expired: never apply)
        }
        if awaited {
            d.awaiting_snapshot = None;
        }
        let live = d.req.transport.is_live();
        let ro = d.access == AccessMode::Ro;
        let mode = if live || ro {
            SnapshotMode::Discard
        } else {
            d.req.snapshot_mode
        };
        let status = match mode {
            SnapshotMode::Discard => SnapshotStatus::Discarded,
            SnapshotMode::Auto | SnapshotMode::Staged => SnapshotStatus::InFlight,
        };
        d.snapshot_order.push(snap.snapshot_id.clone());
        d.snapshots.insert(
            snap.snapshot_id.clone(),
            SnapshotRecord {
                id: snap.snapshot_id.clone(),
                summary: snap.summary.clone(),
                highlights: snap.highlights.clone(),
                recommended: snap.recommended.unwrap_or(false),
                metadata: snap.metadata.clone(),
                status: status.clone(),
                received_at: now,
                applied_at: None,
                error: None,
            },
        );
        d.updated_at = now;
        let sid = snap.snapshot_id.clone();
        match mode {
            // Stored first in both modes: `auto` applies from the store once it is stored, so
            // a result that cannot be applied is never lost.
            SnapshotMode::Auto | SnapshotMode::Staged => {
                d.ops_in_flight += 1;
                self.core.outputs.push_back(DelegatorOutput::StoreSnapshot {
                    id: id.clone(),
                    snapshot: Box::new(snap),
                });
            }
            SnapshotMode::Discard => {}
        }
        self.core
            .outputs
            .push_back(DelegatorOutput::Event(DelegatorEvent::Snapshot {
                id: id.clone(),
                snapshot_id: sid,
                status,
            }));
    }

    fn on_done(&mut self, now: Timestamp, id: &DelegationId, done: DoneEvent) {
        let Some(d) = self.delegations.get_mut(id) else {
            return;
        };
        d.heard_terminal = true;
        let state = d.machine.state();
        if state == DelegationState::Started {
            self.setup_complete(now, id);
        }
        if self.state(id) != Some(DelegationState::Running) {
            self.wind_down(now, id);
            return;
        }
        // [S]: the result archive rides on `done`; treat it as a recommended snapshot.
        if let Some(b64) = done.result_base64.clone() {
            let sid = SnapshotId::new(RESULT_SNAPSHOT_ID).expect("valid constant id");
            self.on_snapshot(
                now,
                id,
                SnapshotEvent {
                    snapshot_id: sid,
                    summary: done.summary.clone(),
                    highlights: done.highlights.clone(),
                    data: ArchiveData {
                        base64: Some(b64),
                        url: None,
                    },
                    checksum: None,
                    recommended: Some(true),
                    metadata: BTreeMap::new(),
                },
            );
        }
        let d = self.delegations.get_mut(id).expect("exists");
        d.result = Some(TaskOutcome {
            summary: done.summary.clone(),
            highlights: done.highlights.clone(),
        });
        let wanted = done
            .recommended_snapshot_id
            .clone()
            .or_else(|| done.snapshot_ids.last().cloned());
        let live = d.req.transport.is_live();
        let need_fetch = match &wanted {
            Some(s) => {
                !live
                    && d.access == AccessMode::Rw
                    && d.req.snapshot_mode != SnapshotMode::Discard
                    && !d.snapshots.contains_key(s)
            }
            None => false,
        };
        if need_fetch {
            d.awaiting_snapshot = wanted;
        }
        self.transition(now, id, DelegationEvent::ReceiveDone, None);
        if need_fetch {
            let peer = self.delegations[id].req.peer.clone();
            self.core.outputs.push_back(DelegatorOutput::FetchResult {
                id: id.clone(),
                peer,
            });
        }
        self.wind_down(now, id);
    }

    fn on_result(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        result: Result<FetchedResult, String>,
    ) -> Result<(), UsageError> {
        let d = self.get_mut(id)?;
        let state = d.machine.state();
        match result {
            Ok(FetchedResult::Completed { outcome, snapshot }) => {
                if let Some(snap) = snapshot {
                    if state == DelegationState::Started {
                        self.setup_complete(now, id);
                    }
                    // When re-fetching an announced snapshot, adopt the announced id.
                    let mut snap = snap;
                    if let Some(awaited) = self.delegations[id].awaiting_snapshot.clone() {
                        snap.snapshot_id = awaited;
                    }
                    self.on_snapshot(now, id, snap);
                }
                if matches!(
                    self.state(id),
                    Some(DelegationState::Started | DelegationState::Running)
                ) {
                    self.on_done(
                        now,
                        id,
                        DoneEvent {
                            summary: outcome.summary,
                            highlights: outcome.highlights,
                            snapshot_ids: Vec::new(),
                            recommended_snapshot_id: None,
                            result_base64: None,
                        },
                    );
                } else {
                    let d = self.get_mut(id)?;
                    if let Some(sid) = d.awaiting_snapshot.take() {
                        d.result_error = Some(ErrorInfo::new(
                            ErrorCode::TransportError,
                            format!("the executor's result no longer carries snapshot {sid}"),
                        ));
                    }
                    self.wind_down(now, id);
                }
            }
            Ok(FetchedResult::Error(e)) => {
                d.heard_terminal = true;
                if let Some(sid) = d.awaiting_snapshot.take() {
                    d.result_error = Some(ErrorInfo::new(
                        ErrorCode::TransportError,
                        format!(
                            "the executor announced snapshot {sid} but then reported an error: {e}"
                        ),
                    ));
                }
                if matches!(state, DelegationState::Started | DelegationState::Running) {
                    self.receive_error(now, id, e);
                }
                self.wind_down(now, id);
            }
            Ok(FetchedResult::NotFound) => {
                if let Some(sid) = d.awaiting_snapshot.take() {
                    d.result_error = Some(ErrorInfo::new(
                        ErrorCode::NotFound,
                        format!("the executor announced snapshot {sid} but no longer has it"),
                    ));
                }
                if matches!(state, DelegationState::Started | DelegationState::Running) {
                    d.heard_terminal = true;
                    self.transition(
                        now,
                        id,
                        DelegationEvent::ReceiveError,
                        Some(ErrorInfo::new(
                            ErrorCode::NotFound,
                            "the executor no longer knows this delegation (restarted or purged)",
                        )),
                    );
                }
                self.wind_down(now, id);
            }
            Ok(FetchedResult::Running) | Ok(FetchedResult::NotApplicable) | Err(_) => {
                if d.awaiting_snapshot.is_some() && state.is_terminal() {
                    // Could not get the announced snapshot; give up on it (without an ack, so
                    // the executor keeps it).
                    let sid = d.awaiting_snapshot.take().expect("checked");
                    let why = match result {
                        Err(e) => e,
                        Ok(_) => "the executor did not hand it out".into(),
                    };
                    d.result_error = Some(ErrorInfo::new(
                        ErrorCode::TransportError,
                        format!("could not fetch the announced snapshot {sid}: {why}"),
                    ));
                    self.wind_down(now, id);
                } else if !state.is_terminal() {
                    // Try the stream again after a while.
                    d.stream_failures = 0;
                    let at = now.saturating_add(self.config.result_poll_interval);
                    self.core.timers.set(id, Timer::Reconnect, at);
                }
            }
        }
        Ok(())
    }

    /// The snapshot record `sid` of `id`, if it is in flight.
    fn in_flight(&mut self, id: &DelegationId, sid: &SnapshotId) -> Result<bool, UsageError> {
        let d = self.get_mut(id)?;
        match d.snapshots.get(sid) {
            None => Err(UsageError::UnknownSnapshot {
                delegation: id.clone(),
                snapshot: sid.to_string(),
            }),
            Some(rec) => Ok(rec.status == SnapshotStatus::InFlight),
        }
    }

    /// A stored snapshot is ready: `auto` mode applies it while the delegation is running or
    /// completed (a delegation cancelled, expired or failed meanwhile keeps it pending for the
    /// application to decide); `staged` mode keeps it pending.
    fn on_stored(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        sid: &SnapshotId,
        result: Result<(), ErrorInfo>,
    ) -> Result<(), UsageError> {
        if !self.in_flight(id, sid)? {
            return Ok(());
        }
        let d = self.delegations.get_mut(id).expect("checked");
        let state = d.machine.state();
        let rec = d.snapshots.get_mut(sid).expect("checked");
        d.updated_at = now;
        let status = match result {
            Ok(()) => {
                if !d.stored.contains(sid) {
                    d.stored.push(sid.clone());
                }
                let auto = d.req.snapshot_mode == SnapshotMode::Auto
                    && matches!(state, DelegationState::Running | DelegationState::Completed);
                if auto {
                    // Reported (so journalled) as stored before the apply starts: a crash during
                    // the apply then finds the bytes on restart (the snapshot is pending again)
                    // instead of fetching the result anew from an executor that may be gone.
                    self.snapshot_event(id, sid, SnapshotStatus::InFlight);
                    self.start_apply(id, sid.clone());
                    return Ok(());
                }
                rec.status = SnapshotStatus::Pending;
                SnapshotStatus::Pending
            }
            Err(e) => {
                tracing::warn!(delegation = %id, snapshot = %sid, "snapshot store failed: {e}");
                rec.status = SnapshotStatus::Failed(e.clone());
                SnapshotStatus::Failed(e)
            }
        };
        d.ops_in_flight = d.ops_in_flight.saturating_sub(1);
        self.snapshot_event(id, sid, status);
        self.maybe_end(now, id);
        Ok(())
    }

    /// Applies `sid` now, or after the apply in flight for `id`.
    fn start_apply(&mut self, id: &DelegationId, sid: SnapshotId) {
        let Some(d) = self.delegations.get_mut(id) else {
            return;
        };
        if d.applying.is_some() {
            d.apply_queue.push(sid);
            return;
        }
        d.applying = Some(sid.clone());
        self.core.outputs.push_back(DelegatorOutput::ApplySnapshot {
            id: id.clone(),
            snapshot_id: sid,
        });
    }

    fn on_applied(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        sid: &SnapshotId,
        result: Result<(), ErrorInfo>,
    ) -> Result<(), UsageError> {
        if !self.in_flight(id, sid)? {
            return Ok(());
        }
        let d = self.delegations.get_mut(id).expect("checked");
        if d.applying.as_ref() == Some(sid) {
            d.applying = None;
        }
        let rec = d.snapshots.get_mut(sid).expect("checked");
        let status = match result {
            Ok(()) => {
                rec.applied_at = Some(now);
                rec.error = None;
                // Applied: its stored bytes have served their purpose.
                d.stored.retain(|s| s != sid);
                self.core
                    .outputs
                    .push_back(DelegatorOutput::DeleteStoredSnapshot {
                        id: id.clone(),
                        snapshot_id: sid.clone(),
                    });
                SnapshotStatus::Applied
            }
            Err(e) => {
                tracing::warn!(delegation = %id, snapshot = %sid, "snapshot not applied, kept pending: {e}");
                rec.error = Some(e);
                SnapshotStatus::Pending
            }
        };
        rec.status = status.clone();
        d.ops_in_flight = d.ops_in_flight.saturating_sub(1);
        d.updated_at = now;
        let next = (!d.apply_queue.is_empty()).then(|| d.apply_queue.remove(0));
        self.snapshot_event(id, sid, status);
        if let Some(next) = next {
            self.start_apply(id, next);
        }
        self.maybe_end(now, id);
        Ok(())
    }

    fn snapshot_event(&mut self, id: &DelegationId, sid: &SnapshotId, status: SnapshotStatus) {
        self.core
            .outputs
            .push_back(DelegatorOutput::Event(DelegatorEvent::Snapshot {
                id: id.clone(),
                snapshot_id: sid.clone(),
                status,
            }));
    }

    fn expire(&mut self, now: Timestamp, id: &DelegationId) {
        let err = ErrorInfo::new(ErrorCode::Expired, "the lease expired");
        let tell = self.state(id) != Some(DelegationState::Invited)
            || self
                .delegations
                .get(id)
                .is_some_and(|d| d.invited_at.is_some());
        if self.transition(now, id, DelegationEvent::Expire, Some(err.clone())) && tell {
            self.send_error(id, err);
        }
        self.wind_down(now, id);
    }

    fn on_timer(&mut self, now: Timestamp, id: &DelegationId, timer: Timer) {
        let Some(state) = self.state(id) else {
            return;
        };
        match timer {
            Timer::Lease => match state {
                DelegationState::Invited | DelegationState::Accepted | DelegationState::Running => {
                    self.expire(now, id)
                }
                DelegationState::Started => {
                    // Cannot expire while the executor sets up: give it a grace period.
                    let at = now.saturating_add(self.config.setup_grace);
                    self.core.timers.set(id, Timer::SetupGrace, at);
                }
                _ => {}
            },
            Timer::SetupGrace => {
                if state == DelegationState::Started {
                    self.abandon(
                        now,
                        id,
                        ErrorInfo::new(
                            ErrorCode::Expired,
                            "the lease expired before the executor finished setting up",
                        ),
                    );
                }
            }
            Timer::Reconnect => {
                let d = self.delegations.get_mut(id).expect("state exists");
                if !state.is_terminal() && d.stream == Stream::Closed && !d.heard_terminal {
                    d.stream = Stream::Opening;
                    let peer = d.req.peer.clone();
                    self.core
                        .outputs
                        .push_back(DelegatorOutput::OpenEventStream {
                            id: id.clone(),
                            peer,
                        });
                }
            }
            Timer::ResultPoll => {
                if !state.is_terminal() {
                    let peer = self.delegations[id].req.peer.clone();
                    self.core.outputs.push_back(DelegatorOutput::FetchResult {
                        id: id.clone(),
                        peer,
                    });
                }
            }
            Timer::Purge => self.purge(id),
        }
    }

    /// After a terminal transition: close the stream, release the transport, end when idle.
    fn wind_down(&mut self, now: Timestamp, id: &DelegationId) {
        let Some(d) = self.delegations.get_mut(id) else {
            return;
        };
        if !d.machine.state().is_terminal() {
            return;
        }
        d.handle = None; // never keep credentials of a finished delegation
        if d.stream != Stream::Closed {
            d.stream = Stream::Closed;
            self.core
                .outputs
                .push_back(DelegatorOutput::CloseEventStream { id: id.clone() });
        }
        self.maybe_end(now, id);
    }

    fn maybe_end(&mut self, now: Timestamp, id: &DelegationId) {
        let Some(d) = self.delegations.get_mut(id) else {
            return;
        };
        if d.ended
            || !d.machine.state().is_terminal()
            || d.ops_in_flight > 0
            || d.awaiting_snapshot.is_some()
        {
            return;
        }
        // The ack lets the executor forget the result: only once every snapshot is stored
        // (or applied, or discarded by policy) and nothing announced is missing.
        let result_safe = d.result_error.is_none()
            && !d
                .snapshots
                .values()
                .any(|r| matches!(r.status, SnapshotStatus::Failed(_)));
        if d.heard_terminal && !d.ack_sent && result_safe {
            d.ack_sent = true;
            self.core.outputs.push_back(DelegatorOutput::SendAck {
                id: id.clone(),
                peer: d.req.peer.clone(),
            });
        }
        match d.transport {
            Res::Prepared => {
                d.transport = Res::Releasing;
                self.core
                    .outputs
                    .push_back(DelegatorOutput::ReleaseTransport { id: id.clone() });
                return;
            }
            Res::Preparing | Res::Releasing => return,
            Res::None | Res::Released => {}
        }
        d.ended = true;
        d.updated_at = now;
        let ev = DelegatorEvent::Ended {
            id: id.clone(),
            state: d.machine.state(),
            result: d.result.clone(),
            error: d.error.clone(),
        };
        tracing::debug!(delegation = %id, state = %d.machine.state(), "delegation ended");
        self.core.outputs.push_back(DelegatorOutput::Event(ev));
        self.core
            .timers
            .set(id, Timer::Purge, now.saturating_add(self.config.retention));
    }

    fn purge(&mut self, id: &DelegationId) {
        let Some(d) = self.delegations.remove(id) else {
            return;
        };
        self.core.timers.cancel_all(id);
        self.core
            .outputs
            .push_back(DelegatorOutput::Event(DelegatorEvent::Forgotten {
                id: id.clone(),
            }));
        // Everything still in the store goes: pending snapshots, and also those applied from
        // the store or whose apply failed (their bytes stay stored until the purge).
        for sid in d.stored {
            self.core
                .outputs
                .push_back(DelegatorOutput::DeleteStoredSnapshot {
                    id: id.clone(),
                    snapshot_id: sid,
                });
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Durable records

fn status_to_json(s: &SnapshotStatus) -> serde_json::Value {
    match s {
        SnapshotStatus::Failed(e) => serde_json::json!({"status": "failed", "error": e}),
        other => serde_json::json!({"status": other.as_str()}),
    }
}

fn status_from_json(v: &serde_json::Value) -> SnapshotStatus {
    match v.get("status").and_then(|s| s.as_str()) {
        Some("pending") => SnapshotStatus::Pending,
        Some("applied") => SnapshotStatus::Applied,
        Some("discarded") => SnapshotStatus::Discarded,
        Some("failed") => SnapshotStatus::Failed(
            v.get("error")
                .and_then(|e| serde_json::from_value(e.clone()).ok())
                .unwrap_or_else(|| ErrorInfo::new(ErrorCode::TransportError, "failed")),
        ),
        // An operation in flight when the process stopped: see `restore_one`.
        _ => SnapshotStatus::InFlight,
    }
}

/// Why a snapshot whose apply was interrupted by a restart is pending again.
fn interrupted_apply() -> ErrorInfo {
    ErrorInfo {
        code: ErrorCode::TransportError,
        message: "the delegator stopped while applying this snapshot; at start-up the \
                  interrupted apply was rolled back or finished, so the workspace is entirely \
                  old or entirely new"
            .into(),
        hint: Some(
            "Apply the snapshot again (a no-op if it had been finished) or discard it.".into(),
        ),
    }
}

impl Delegator {
    /// A JSON record of one delegation for a journal (the driver writes it atomically on every
    /// event and removes it on [`DelegatorEvent::Forgotten`]). It holds the INVITE (with the
    /// credential, so the state directory must be private), the state, the lease and the
    /// snapshots. `None` for unknown ids.
    pub fn record(&self, id: &DelegationId) -> Option<serde_json::Value> {
        use serde_json::json;
        let d = self.delegations.get(id)?;
        let invite = Invite {
            delegation_id: id.clone(),
            task: d.req.task.clone(),
            lease: LeaseRequest {
                ttl_seconds: d.req.ttl_seconds,
                access_mode: d.req.access_mode,
            },
            resources: d.req.resources.clone(),
            export_name: None,
            retention_ms: None,
            transport: Some(d.req.transport.clone()),
            auth: d.req.auth.clone(),
            features: Vec::new(),
        };
        Some(json!({
            "id": id.as_str(),
            "peer": d.req.peer,
            "dialect": if d.req.dialect == Dialect::Seed { "seed" } else { "reference" },
            "invite": crate::wire::message_to_value(&Message::Invite(invite), Dialect::Reference),
            "snapshotMode": d.req.snapshot_mode.as_str(),
            "state": d.machine.state().as_str(),
            "createdAt": d.created_at.as_unix_millis(),
            "updatedAt": d.updated_at.as_unix_millis(),
            "expiresAt": d.expires_at.map(Timestamp::as_unix_millis),
            "accessMode": d.access.as_str(),
            "features": d.features,
            "executorWorkDir": d.accept.as_ref().map(|a| a.work_dir.clone()),
            "startSent": d.start_sent,
            "heardTerminal": d.heard_terminal,
            "ended": d.ended,
            "stored": d.stored.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            "snapshots": d.snapshot_order.iter().filter_map(|sid| d.snapshots.get(sid)).map(|r| json!({
                "id": r.id.as_str(),
                "summary": r.summary,
                "highlights": r.highlights,
                "recommended": r.recommended,
                "metadata": r.metadata,
                "status": status_to_json(&r.status),
                "receivedAt": r.received_at.as_unix_millis(),
                "appliedAt": r.applied_at.map(Timestamp::as_unix_millis),
                "error": r.error,
            })).collect::<Vec<_>>(),
            "result": d.result.as_ref().map(|o| json!({"summary": o.summary, "highlights": o.highlights})),
            "error": d.error,
            "allowSensitive": d.req.allow_sensitive,
            "notShipped": d.not_shipped.iter().map(|n| json!({"path": n.path, "reason": n.reason.as_str()})).collect::<Vec<_>>(),
            "notShippedCount": d.not_shipped_count,
            "resultError": d.result_error,
            "warnings": d.warnings,
        }))
    }

    /// Restores delegations from journal records after a restart, and decides what happens to
    /// each: ended ones are kept for listing until their retention; ones that had sent START
    /// reconnect to the executor's event stream (it replays the result of a finished task, or
    /// the delegation expires with its lease); ones that had not are abandoned (`ERROR` to the
    /// executor) because their transport credentials died with the process. Every restored
    /// delegation that was not ended releases its transport (the driver's release is
    /// idempotent and removes leftovers). Returns how many records were restored.
    pub fn restore(&mut self, now: Timestamp, records: &[serde_json::Value]) -> usize {
        self.tick(now);
        let mut ids = Vec::new();
        for r in records {
            if let Some(id) = self.restore_one(now, r) {
                ids.push(id);
            }
        }
        let n = ids.len();
        for id in ids {
            self.resume(now, &id);
        }
        n
    }

    fn restore_one(&mut self, now: Timestamp, r: &serde_json::Value) -> Option<DelegationId> {
        let id = DelegationId::new(r.get("id")?.as_str()?).ok()?;
        if self.delegations.contains_key(&id) {
            return None;
        }
        let bytes = serde_json::to_vec(r.get("invite")?).ok()?;
        let (Message::Invite(inv), _) = crate::wire::decode_message(&bytes).ok()? else {
            return None;
        };
        let ms = |k: &str| {
            r.get(k)
                .and_then(serde_json::Value::as_u64)
                .map(Timestamp::from_unix_millis)
        };
        let state = DelegationState::parse(r.get("state")?.as_str()?)?;
        let ended = r.get("ended").and_then(|v| v.as_bool()).unwrap_or(false);
        let mut snapshots = BTreeMap::new();
        let mut order = Vec::new();
        for s in r
            .get("snapshots")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
        {
            let Some(sid) = s
                .get("id")
                .and_then(|v| v.as_str())
                .and_then(|v| SnapshotId::new(v).ok())
            else {
                continue;
            };
            order.push(sid.clone());
            snapshots.insert(
                sid.clone(),
                SnapshotRecord {
                    id: sid,
                    summary: s
                        .get("summary")
                        .and_then(|v| v.as_str())
                        .unwrap_or("")
                        .to_owned(),
                    highlights: crate::engine::record_strings(s, "highlights"),
                    recommended: s
                        .get("recommended")
                        .and_then(|v| v.as_bool())
                        .unwrap_or(false),
                    metadata: s
                        .get("metadata")
                        .and_then(|v| v.as_object())
                        .map(|m| m.clone().into_iter().collect())
                        .unwrap_or_default(),
                    status: status_from_json(s.get("status").unwrap_or(&serde_json::Value::Null)),
                    received_at: s
                        .get("receivedAt")
                        .and_then(|v| v.as_u64())
                        .map(Timestamp::from_unix_millis)
                        .unwrap_or(now),
                    applied_at: s
                        .get("appliedAt")
                        .and_then(|v| v.as_u64())
                        .map(Timestamp::from_unix_millis),
                    error: s
                        .get("error")
                        .filter(|e| !e.is_null())
                        .and_then(|e| serde_json::from_value(e.clone()).ok()),
                },
            );
        }
        let stored: Vec<SnapshotId> = r
            .get("stored")
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().and_then(|s| SnapshotId::new(s).ok()))
                    .collect()
            })
            .unwrap_or_default();
        // Snapshots in flight when the process stopped: one whose bytes are stored was being
        // applied (the driver recovered that apply before restoring: the workspace is all old
        // or all new), so it is pending again; one that was being stored is forgotten and
        // received again (the executor was not acknowledged): replayed on the reconnected
        // event stream, or fetched if `done` had been heard.
        let mut awaiting_snapshot = None;
        for sid in order.clone() {
            let Some(rec) = snapshots.get_mut(&sid) else {
                continue;
            };
            if rec.status != SnapshotStatus::InFlight {
                continue;
            }
            if stored.contains(&sid) {
                rec.status = SnapshotStatus::Pending;
                rec.error = Some(interrupted_apply());
            } else {
                snapshots.remove(&sid);
                order.retain(|s| s != &sid);
                if state == DelegationState::Completed {
                    awaiting_snapshot = Some(sid);
                }
            }
        }
        let result = crate::engine::record_outcome(r, "result");
        let error = r
            .get("error")
            .filter(|v| !v.is_null())
            .and_then(|e| serde_json::from_value(e.clone()).ok());
        let result_error = r
            .get("resultError")
            .filter(|v| !v.is_null())
            .and_then(|e| serde_json::from_value(e.clone()).ok());
        let snapshot_mode = r
            .get("snapshotMode")
            .and_then(|v| v.as_str())
            .and_then(SnapshotMode::parse)
            .unwrap_or_default();
        // A store interrupted by the restart may have left bytes the record does not list:
        // delete them (deleting is idempotent; the snapshot is received again, or lost anyway).
        let interrupted_stores: Vec<SnapshotId> = if snapshot_mode != SnapshotMode::Discard {
            r.get("snapshots")
                .and_then(|v| v.as_array())
                .into_iter()
                .flatten()
                .filter(|x| {
                    x.pointer("/status/status").and_then(|v| v.as_str()) == Some("in_flight")
                })
                .filter_map(|x| {
                    x.get("id")
                        .and_then(|v| v.as_str())
                        .and_then(|v| SnapshotId::new(v).ok())
                })
                .filter(|sid| !stored.contains(sid))
                .collect()
        } else {
            Vec::new()
        };
        let dialect = if r.get("dialect").and_then(|v| v.as_str()) == Some("seed") {
            Dialect::Seed
        } else {
            Dialect::Reference
        };
        let start_sent = r
            .get("startSent")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        // Anything past ACCEPT (or terminal but not wound down) may hold an export view.
        let prepared = !ended
            && (state.is_terminal()
                || matches!(
                    state,
                    DelegationState::Accepted | DelegationState::Started | DelegationState::Running
                ));
        let req = DelegateRequest {
            id: id.clone(),
            peer: r.get("peer")?.as_str()?.to_owned(),
            dialect,
            task: inv.task,
            ttl_seconds: inv.lease.ttl_seconds,
            access_mode: inv.lease.access_mode,
            resources: inv.resources,
            transport: inv.transport.unwrap_or(TransportKind::Archive),
            snapshot_mode,
            auth: inv.auth,
            allow_sensitive: r
                .get("allowSensitive")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
        };
        let not_shipped = r
            .get("notShipped")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
            .filter_map(|n| {
                Some(NotShipped {
                    path: n.get("path")?.as_str()?.to_owned(),
                    reason: NotShippedReason::parse(n.get("reason")?.as_str()?)?,
                })
            })
            .collect::<Vec<_>>();
        let not_shipped_count = r
            .get("notShippedCount")
            .and_then(|v| v.as_u64())
            .unwrap_or(not_shipped.len() as u64);
        let access = r
            .get("accessMode")
            .and_then(|v| v.as_str())
            .and_then(AccessMode::parse)
            .unwrap_or(req.access_mode);
        self.delegations.insert(
            id.clone(),
            Delegation {
                req,
                machine: DelegationMachine::restore(state),
                created_at: ms("createdAt").unwrap_or(now),
                updated_at: ms("updatedAt").unwrap_or(now),
                expires_at: ms("expiresAt"),
                invited_at: None,
                access,
                features: crate::engine::record_strings(r, "features"),
                accept: None,
                transport: if prepared { Res::Prepared } else { Res::None },
                handle: None,
                stream: Stream::Closed,
                stream_failures: 0,
                start_sent,
                snapshots,
                snapshot_order: order,
                stored,
                ops_in_flight: 0,
                awaiting_snapshot,
                applying: None,
                apply_queue: Vec::new(),
                result_error,
                heard_terminal: r
                    .get("heardTerminal")
                    .and_then(|v| v.as_bool())
                    .unwrap_or(false),
                ack_sent: false,
                result,
                error,
                ended,
                warnings: crate::engine::record_strings(r, "warnings"),
                not_shipped,
                not_shipped_count,
            },
        );
        for snapshot_id in interrupted_stores {
            self.core
                .outputs
                .push_back(DelegatorOutput::DeleteStoredSnapshot {
                    id: id.clone(),
                    snapshot_id,
                });
        }
        Some(id)
    }

    /// Decides how a restored delegation continues (see [`Delegator::restore`]).
    fn resume(&mut self, now: Timestamp, id: &DelegationId) {
        let Some(d) = self.delegations.get(id) else {
            return;
        };
        let state = d.machine.state();
        if d.ended {
            let at = d.updated_at.saturating_add(self.config.retention).max(now);
            self.core.timers.set(id, Timer::Purge, at);
            return;
        }
        let restarted = |what: &str| {
            ErrorInfo::new(
                ErrorCode::SetupFailed,
                format!("the delegator restarted {what}; the delegation was abandoned"),
            )
        };
        match state {
            DelegationState::Created => {
                self.transition(
                    now,
                    id,
                    DelegationEvent::SendError,
                    Some(restarted("before the invitation")),
                );
                self.wind_down(now, id);
            }
            DelegationState::Invited | DelegationState::Accepted => {
                self.abandon(now, id, restarted("before START"));
            }
            DelegationState::Started | DelegationState::Running => {
                let exp = d.expires_at;
                let peer = d.req.peer.clone();
                match exp {
                    Some(e) if now >= e && state == DelegationState::Running => {
                        self.expire(now, id);
                        return;
                    }
                    Some(e) if now >= e => {
                        self.core.timers.set(
                            id,
                            Timer::SetupGrace,
                            now.saturating_add(self.config.setup_grace),
                        );
                    }
                    Some(e) => self.core.timers.set(id, Timer::Lease, e),
                    None => {}
                }
                let d = self.delegations.get_mut(id).expect("exists");
                d.stream = Stream::Opening;
                self.core
                    .outputs
                    .push_back(DelegatorOutput::OpenEventStream {
                        id: id.clone(),
                        peer,
                    });
            }
            // Terminal but not ended: fetch a result whose storing was interrupted, then
            // finish winding down (ack, release).
            _ => {
                if d.awaiting_snapshot.is_some() {
                    let peer = d.req.peer.clone();
                    self.core.outputs.push_back(DelegatorOutput::FetchResult {
                        id: id.clone(),
                        peer,
                    });
                }
                self.wind_down(now, id)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The result-safety rules of the engine, driven by hand: store before apply, ack only
    //! after stored, failed applies stay pending, one apply at a time, restarts mid-apply.
    use super::*;
    use crate::wire::{ArchiveHandle, StatusEvent, TaskStatus};

    const PEER: &str = "http://127.0.0.1:10200/awcp";

    pub(super) fn t(ms: u64) -> Timestamp {
        Timestamp::from_unix_millis(1_700_000_000_000 + ms)
    }

    pub(super) fn id() -> DelegationId {
        DelegationId::new("dlg_engine_test").unwrap()
    }

    pub(super) fn sid(s: &str) -> SnapshotId {
        SnapshotId::new(s).unwrap()
    }

    pub(super) fn drain(d: &mut Delegator) -> Vec<DelegatorOutput> {
        std::iter::from_fn(|| d.poll_output()).collect()
    }

    pub(super) fn event(kind: TaskEventKind) -> DelegatorInput {
        DelegatorInput::TaskEvent {
            event: TaskEvent {
                delegation_id: id(),
                timestamp: t(0),
                kind,
            },
        }
    }

    pub(super) fn snapshot(s: &str) -> DelegatorInput {
        event(TaskEventKind::Snapshot(SnapshotEvent {
            snapshot_id: sid(s),
            summary: "edited".into(),
            highlights: vec![],
            data: ArchiveData {
                base64: Some("UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA==".into()),
                url: None,
            },
            checksum: None,
            recommended: Some(true),
            metadata: BTreeMap::new(),
        }))
    }

    pub(super) fn done(s: &str) -> DelegatorInput {
        event(TaskEventKind::Done(DoneEvent {
            summary: "done".into(),
            highlights: vec![],
            snapshot_ids: vec![sid(s)],
            recommended_snapshot_id: Some(sid(s)),
            result_base64: None,
        }))
    }

    fn is_ack(o: &DelegatorOutput) -> bool {
        matches!(o, DelegatorOutput::SendAck { .. })
    }

    fn is_apply(o: &DelegatorOutput) -> bool {
        matches!(o, DelegatorOutput::ApplySnapshot { .. })
    }

    pub(super) fn stored(s: &str, result: Result<(), ErrorInfo>) -> DelegatorInput {
        DelegatorInput::SnapshotStored {
            id: id(),
            snapshot_id: sid(s),
            result,
        }
    }

    pub(super) fn applied(s: &str, result: Result<(), ErrorInfo>) -> DelegatorInput {
        DelegatorInput::SnapshotApplied {
            id: id(),
            snapshot_id: sid(s),
            result,
        }
    }

    /// A running `auto` delegation that received `snap_a` and `done`.
    pub(super) fn done_with_snapshot() -> Delegator {
        let mut d = running(SnapshotMode::Auto);
        d.handle(t(2), snapshot("snap_a")).unwrap();
        d.handle(t(2), done("snap_a")).unwrap();
        d
    }

    pub(super) fn request(mode: SnapshotMode) -> DelegateRequest {
        DelegateRequest {
            id: id(),
            peer: PEER.into(),
            dialect: Dialect::Reference,
            task: TaskSpec {
                description: "d".into(),
                prompt: "p".into(),
            },
            ttl_seconds: 600,
            access_mode: AccessMode::Rw,
            resources: vec![Resource {
                name: crate::ResourceName::new("workspace").unwrap(),
                kind: "fs".into(),
                mode: AccessMode::Rw,
            }],
            transport: TransportKind::Archive,
            snapshot_mode: mode,
            auth: Some(Auth {
                auth_type: crate::wire::AuthType::Bearer,
                credential: "tok".into(),
                metadata: Default::default(),
            }),
            allow_sensitive: false,
        }
    }

    /// A delegation in `running`, with `auth` and `mode`.
    pub(super) fn running(mode: SnapshotMode) -> Delegator {
        let mut d = Delegator::new(DelegatorConfig::default());
        d.delegate(t(0), request(mode))
        .unwrap();
        let steps = [
            DelegatorInput::ScanCompleted {
                id: id(),
                result: Ok(WorkspaceStats::default()),
            },
            DelegatorInput::Reply {
                id: id(),
                to: Outbound::Invite,
                reply: Reply::Accept(Accept {
                    delegation_id: id(),
                    work_dir: "/w".into(),
                    constraints: None,
                    retention_ms: None,
                    features: vec![],
                }),
            },
            DelegatorInput::TransportPrepared {
                id: id(),
                result: Ok(TransportHandle::Archive(ArchiveHandle {
                    data: ArchiveData {
                        base64: Some(String::new()),
                        url: None,
                    },
                    checksum: "00".into(),
                    size_bytes: None,
                })),
            },
            DelegatorInput::EventStreamOpened { id: id() },
            event(TaskEventKind::Status(StatusEvent {
                status: TaskStatus::Running,
                message: None,
                progress: None,
            })),
        ];
        for s in steps {
            d.handle(t(1), s).unwrap();
        }
        drain(&mut d);
        assert_eq!(d.get(&id()).unwrap().state, DelegationState::Running);
        d
    }

    fn status_of(d: &Delegator, s: &str) -> SnapshotRecord {
        d.get(&id())
            .unwrap()
            .snapshots
            .into_iter()
            .find(|r| r.id == sid(s))
            .unwrap()
    }

    #[test]
    fn auto_snapshots_are_stored_then_applied_and_acked_only_after() {
        let mut d = done_with_snapshot();
        let out = drain(&mut d);
        assert!(out
            .iter()
            .any(|o| matches!(o, DelegatorOutput::StoreSnapshot { .. })));
        assert!(!out.iter().any(|o| is_apply(o) || is_ack(o)));
        d.handle(t(3), stored("snap_a", Ok(()))).unwrap();
        let out = drain(&mut d);
        assert!(out.iter().any(is_apply));
        assert!(!out.iter().any(is_ack), "no ack while the apply runs");
        d.handle(t(4), applied("snap_a", Ok(()))).unwrap();
        let out = drain(&mut d);
        assert!(out.iter().any(is_ack));
        assert!(out
            .iter()
            .any(|o| matches!(o, DelegatorOutput::DeleteStoredSnapshot { .. })));
        assert_eq!(status_of(&d, "snap_a").status, SnapshotStatus::Applied);
        d.handle(
            t(5),
            DelegatorInput::TransportReleased {
                id: id(),
                warnings: vec![],
            },
        )
        .unwrap();
        assert_eq!(d.get(&id()).unwrap().outcome(), Outcome::Completed);
    }

    #[test]
    fn failed_auto_apply_keeps_the_snapshot_pending_with_its_reason() {
        let mut d = done_with_snapshot();
        for input in [
            stored("snap_a", Ok(())),
            applied(
                "snap_a",
                Err(ErrorInfo::new(ErrorCode::TransportError, "conflict: a.txt")),
            ),
            DelegatorInput::TransportReleased {
                id: id(),
                warnings: vec![],
            },
        ] {
            d.handle(t(3), input).unwrap();
        }
        let out = drain(&mut d);
        assert!(out.iter().any(is_ack), "the result is stored: ack");
        assert!(!out
            .iter()
            .any(|o| matches!(o, DelegatorOutput::DeleteStoredSnapshot { .. })));
        let rec = status_of(&d, "snap_a");
        assert_eq!(rec.status, SnapshotStatus::Pending);
        assert!(rec.error.as_ref().unwrap().message.contains("a.txt"));
        let v = d.get(&id()).unwrap();
        assert!(v.ended);
        assert!(
            matches!(&v.outcome(), Outcome::NotApplied { snapshot: Some(s), .. } if *s == sid("snap_a")),
            "{:?}",
            v.outcome()
        );
        // Re-appliable.
        d.apply_snapshot(t(4), &id(), &sid("snap_a")).unwrap();
        assert!(drain(&mut d).iter().any(is_apply));
        d.handle(t(5), applied("snap_a", Ok(()))).unwrap();
        assert_eq!(d.get(&id()).unwrap().outcome(), Outcome::Completed);
    }

    #[test]
    fn a_snapshot_that_cannot_be_stored_is_never_acknowledged() {
        let mut d = done_with_snapshot();
        d.handle(
            t(3),
            stored(
                "snap_a",
                Err(ErrorInfo::new(ErrorCode::TransportError, "disk full")),
            ),
        )
        .unwrap();
        d.handle(
            t(4),
            DelegatorInput::TransportReleased {
                id: id(),
                warnings: vec![],
            },
        )
        .unwrap();
        let out = drain(&mut d);
        assert!(!out.iter().any(is_ack), "{out:?}");
        assert!(!out.iter().any(is_apply));
        let v = d.get(&id()).unwrap();
        assert!(v.ended);
        assert!(matches!(
            v.outcome(),
            Outcome::NotApplied { snapshot: None, .. }
        ));
    }

    #[test]
    fn applies_of_one_delegation_run_one_at_a_time_in_order() {
        let mut d = running(SnapshotMode::Auto);
        d.handle(t(2), snapshot("snap_a")).unwrap();
        d.handle(t(2), snapshot("snap_b")).unwrap();
        drain(&mut d);
        for s in ["snap_b", "snap_a"] {
            d.handle(t(3), stored(s, Ok(()))).unwrap();
        }
        let applies = |out: &[DelegatorOutput]| -> Vec<SnapshotId> {
            out.iter()
                .filter_map(|o| match o {
                    DelegatorOutput::ApplySnapshot { snapshot_id, .. } => Some(snapshot_id.clone()),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(applies(&drain(&mut d)), vec![sid("snap_b")]);
        d.handle(t(4), applied("snap_b", Ok(()))).unwrap();
        assert_eq!(applies(&drain(&mut d)), vec![sid("snap_a")]);
    }

    #[test]
    fn a_restart_mid_apply_leaves_the_snapshot_pending_and_reappliable() {
        let mut d = done_with_snapshot();
        d.handle(t(3), stored("snap_a", Ok(()))).unwrap();
        let out = drain(&mut d);
        assert!(out.iter().any(is_apply));
        // The process dies here; a new one restores from the journal record.
        let rec = d.record(&id()).unwrap();
        let mut d2 = Delegator::new(DelegatorConfig::default());
        assert_eq!(d2.restore(t(10), &[rec]), 1);
        let out = drain(&mut d2);
        assert!(!out.iter().any(is_apply));
        assert!(out.iter().any(is_ack), "stored: the executor may forget it");
        let s = status_of(&d2, "snap_a");
        assert_eq!(s.status, SnapshotStatus::Pending);
        assert!(s.error.unwrap().message.contains("stopped while applying"));
        d2.apply_snapshot(t(11), &id(), &sid("snap_a")).unwrap();
        assert!(drain(&mut d2).iter().any(is_apply));
    }

    #[test]
    fn a_restart_while_storing_fetches_the_result_again_before_any_ack() {
        let mut d = done_with_snapshot();
        drain(&mut d);
        let rec = d.record(&id()).unwrap();
        let mut d2 = Delegator::new(DelegatorConfig::default());
        d2.restore(t(10), &[rec]);
        let out = drain(&mut d2);
        assert!(!out.iter().any(is_ack), "{out:?}");
        assert!(out
            .iter()
            .any(|o| matches!(o, DelegatorOutput::FetchResult { .. })));
        assert!(d2.get(&id()).unwrap().snapshots.is_empty());
        // The executor hands the result out again: stored, then applied.
        let DelegatorInput::TaskEvent { event } = snapshot("snap_result") else {
            unreachable!()
        };
        let TaskEventKind::Snapshot(snap) = event.kind else {
            unreachable!()
        };
        d2.handle(
            t(11),
            DelegatorInput::ResultFetched {
                id: id(),
                result: Ok(FetchedResult::Completed {
                    outcome: TaskOutcome::default(),
                    snapshot: Some(snap),
                }),
            },
        )
        .unwrap();
        let out = drain(&mut d2);
        assert!(
            out.iter().any(|o| matches!(
                o,
                DelegatorOutput::StoreSnapshot { snapshot, .. } if snapshot.snapshot_id == sid("snap_a")
            )),
            "{out:?}"
        );
        assert!(!out.iter().any(is_ack));
    }

    #[test]
    fn the_credential_goes_only_to_the_executor_origin() {
        let d = running(SnapshotMode::Auto);
        let h = d
            .credential_header(&id(), "http://127.0.0.1:10200/awcp/tasks/x/snapshots/y")
            .unwrap();
        assert_eq!(h, ("authorization", "Bearer tok".to_owned()));
        assert_eq!(
            d.credential_header(&id(), "http://storage.example/bucket/y"),
            None
        );
        assert_eq!(
            d.credential_header(&id(), "http://127.0.0.1:10201/awcp"),
            None
        );
    }
}

