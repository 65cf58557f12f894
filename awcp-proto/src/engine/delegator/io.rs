//! The engine's inputs and outputs: what the driver feeds in and what it is told to do.

use super::*;

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
    /// The CONTINUE POST (multi-round).
    Continue,
    /// The CLOSE POST (multi-round).
    Close,
}

impl Outbound {
    /// Whether this request tells the executor something final (ERROR, cancel, ack): a driver
    /// that stops lets it finish first (bounded by its request timeout), so the executor is
    /// not left waiting for a lease to expire.
    pub fn is_farewell(self) -> bool {
        match self {
            Outbound::Error | Outbound::Cancel | Outbound::Ack | Outbound::Close => true,
            Outbound::Invite | Outbound::Start | Outbound::Continue => false,
        }
    }
}

/// The answer to an outbound request.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// An ACCEPT body.
    Accept(Box<Accept>),
    /// An ERROR body (or an error status with code).
    Error(ErrorInfo),
    /// `{"ok":true}` or another success without content.
    Ok,
    /// No usable answer (see [`RequestFailure`] for whose fault).
    Failed(RequestFailure),
}

/// Why a request to the executor brought no usable answer, sorted by who is at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestFailure {
    /// No connection could be made: refused, unknown host, no route, a URL that names no
    /// reachable host. Nobody's fault the engine can tell.
    #[error("{0}")]
    Unreachable(String),
    /// Connected, but no complete answer in time.
    #[error("{0}")]
    TimedOut(String),
    /// The exchange broke another way: reset mid-way, TLS failure, an answer over the size
    /// cap. Nobody's fault the engine can tell.
    #[error("{0}")]
    Network(String),
    /// The executor answered, but not with a usable AWCP answer: not JSON, an HTTP error
    /// without an AWCP error, a message that does not decode or is of the wrong type. The
    /// executor's fault ([`DelegatorEvent::PeerMisbehaved`]).
    #[error("{0}")]
    Unusable(String),
    /// This side could not send the request (e.g. the workspace archive it streams from
    /// became unreadable). Not the executor's fault.
    #[error("{0}")]
    Local(String),
}

impl RequestFailure {
    /// Whether the executor is at fault.
    pub fn is_peer_fault(&self) -> bool {
        matches!(self, RequestFailure::Unusable(_))
    }
}

/// How the executor broke the protocol (see [`DelegatorEvent::PeerMisbehaved`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeerMisbehavior {
    /// It answered `to` with something that is not a usable answer.
    UnusableReply {
        /// The request.
        to: Outbound,
        /// What was wrong with the answer.
        detail: String,
    },
    /// It answered `to` with a valid answer of the wrong kind (e.g. ACCEPT to START, or a
    /// bare success to INVITE).
    UnexpectedReply {
        /// The request.
        to: Outbound,
    },
    /// Its `GET …/result` answer was not usable.
    UnusableResult {
        /// What was wrong with it.
        detail: String,
    },
    /// An event on its stream could not be used: it is skipped and the stream read on.
    UnusableEvent {
        /// What was wrong with it.
        problem: EventProblem,
    },
    /// It announced more snapshots for one delegation than the delegator keeps: the later
    /// ones are ignored.
    TooManySnapshots {
        /// How many are kept.
        kept: usize,
    },
    /// A message it sent asked for a transition the spec table does not allow now.
    IllegalTransition {
        /// The delegation's state.
        state: DelegationState,
        /// The refused transition.
        transition: DelegationTransition,
    },
}

impl core::fmt::Display for Outbound {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Outbound::Invite => "INVITE",
            Outbound::Start => "START",
            Outbound::Error => "ERROR",
            Outbound::Cancel => "cancel",
            Outbound::Ack => "ack",
            Outbound::Continue => "CONTINUE",
            Outbound::Close => "CLOSE",
        })
    }
}

/// For people (logs, progress lines); the variants carry the details for programs.
impl core::fmt::Display for PeerMisbehavior {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PeerMisbehavior::UnusableReply { to, detail } => {
                write!(f, "its answer to {to} is not AWCP: {detail}")
            }
            PeerMisbehavior::UnexpectedReply { to } => {
                write!(f, "it answered {to} with the wrong kind of answer")
            }
            PeerMisbehavior::UnusableResult { detail } => {
                write!(f, "its result answer is not usable: {detail}")
            }
            PeerMisbehavior::UnusableEvent { problem } => write!(f, "{problem} (skipped)"),
            PeerMisbehavior::TooManySnapshots { kept } => {
                write!(f, "it sent more snapshots than the {kept} kept")
            }
            PeerMisbehavior::IllegalTransition { state, transition } => {
                write!(f, "it asked for {transition:?} in state {state}")
            }
        }
    }
}

/// Why an event from a delegation's stream could not be used
/// ([`DelegatorInput::UnusableEvent`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventProblem {
    /// Its JSON did not decode as a task event (the decoder's message).
    Undecodable(String),
    /// It names another delegation than the stream's.
    OtherDelegation(DelegationId),
}

impl core::fmt::Display for EventProblem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            EventProblem::Undecodable(e) => write!(f, "undecodable event: {e}"),
            EventProblem::OtherDelegation(other) => {
                write!(f, "an event for another delegation ({other})")
            }
        }
    }
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
        /// The snapshot (`snapshotBase64`) if present (boxed: it is the largest payload, and
        /// every input moves as big as the largest).
        snapshot: Option<Box<SnapshotEvent>>,
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
        /// What was measured, or what went wrong.
        result: Result<WorkspaceStats, ScanFailure>,
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
        /// The handle for START, or what went wrong (boxed: it is the largest payload, and
        /// every input moves as big as the largest).
        result: Result<Box<TransportHandle>, PrepareFailure>,
        /// With [`ArchiveDelivery::ByUrl`]: the digest of the secret token in the handle's
        /// archive URL, which the engine then grants once, until the lease ends
        /// ([`Delegator::redeem_archive_url`]). `None` for every other delivery.
        archive_token: Option<crate::engine::auth::SecretDigest>,
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
    /// An SSE event on delegation `id`'s stream that the driver could not hand over as a
    /// [`DelegatorInput::TaskEvent`]: the engine skips it (the stream stays open) and reports
    /// [`DelegatorEvent::PeerMisbehaved`] with [`PeerMisbehavior::UnusableEvent`].
    UnusableEvent {
        /// The delegation whose stream carried it.
        id: DelegationId,
        /// What was wrong with it.
        problem: EventProblem,
    },
    /// One decoded SSE task event.
    TaskEvent {
        /// The event (its `delegation_id` routes it; boxed: it is the largest payload, and
        /// every input moves as big as the largest).
        event: Box<TaskEvent>,
        /// The SSE `id:` of the event, if it had a numeric one (WIRE.md §4.6): an event whose
        /// id is not above the last one taken is a duplicate and is skipped.
        event_id: Option<u64>,
    },
    /// [`DelegatorOutput::FetchResult`] finished.
    ResultFetched {
        /// The delegation.
        id: DelegationId,
        /// The result, or why the request failed.
        result: Result<FetchedResult, RequestFailure>,
    },
    /// [`DelegatorOutput::ApplySnapshot`] finished (all-or-nothing).
    SnapshotApplied {
        /// The delegation.
        id: DelegationId,
        /// The snapshot.
        snapshot_id: SnapshotId,
        /// Failure leaves the workspace untouched (the snapshot stays stored and pending).
        result: Result<(), ErrorInfo>,
        /// On success, what of the result the apply did not write, each as `path (reason)`
        /// (entries refused or dropped as hostile or never shipped): kept on the snapshot's
        /// record and shown to the user, so nothing in a result is left out silently.
        left_out: Vec<String>,
        /// On success, what the apply changed, for the user (`path`, `path (deleted)`; the
        /// driver may cap the list): kept on the snapshot's record.
        changed: Vec<String>,
    },
    /// [`DelegatorOutput::StoreSnapshot`] finished.
    SnapshotStored {
        /// The delegation.
        id: DelegationId,
        /// The snapshot.
        snapshot_id: SnapshotId,
        /// Whether it is stored, or what went wrong.
        result: Result<(), StoreFailure>,
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

impl DelegatorInput {
    /// The file on this machine holding a result archive this input carries, if the driver
    /// received an inline result into one (a task event's, see [`TaskEvent::local_file`], or a
    /// `GET …/result` snapshot's [`ArchiveData::local_file`](crate::wire::ArchiveData::local_file)).
    /// The engine takes it over only through a [`DelegatorOutput::StoreSnapshot`] naming it;
    /// otherwise the driver deletes it once the input is handled.
    pub fn received_file(&self) -> Option<&str> {
        match self {
            DelegatorInput::TaskEvent { event, .. } => event.local_file(),
            DelegatorInput::ResultFetched {
                result:
                    Ok(FetchedResult::Completed {
                        snapshot: Some(s), ..
                    }),
                ..
            } => s.data.local_file.as_deref(),
            DelegatorInput::ScanCompleted { .. }
            | DelegatorInput::Reply { .. }
            | DelegatorInput::TransportPrepared { .. }
            | DelegatorInput::EventStreamOpened { .. }
            | DelegatorInput::EventStreamClosed { .. }
            | DelegatorInput::UnusableEvent { .. }
            | DelegatorInput::ResultFetched { .. }
            | DelegatorInput::SnapshotApplied { .. }
            | DelegatorInput::SnapshotStored { .. }
            | DelegatorInput::TransportReleased { .. } => None,
        }
    }
}

/// An output of [`Delegator::poll_output`]: something for the driver to do or to tell.
#[derive(Clone, Debug, PartialEq)]
pub enum DelegatorOutput {
    /// Scan the delegation's resources for admission; answer with `ScanCompleted`.
    ScanWorkspace {
        /// The delegation.
        id: DelegationId,
    },
    /// POST `message` to `peer` in `dialect`; answer with `Reply { to }`.
    SendMessage {
        /// The delegation.
        id: DelegationId,
        /// Which request this is (`Invite`, `Start` or `Error`): what the answer names.
        to: Outbound,
        /// The executor URL.
        peer: std::sync::Arc<str>,
        /// The message (boxed: it is the largest payload, and every output moves as big as the
        /// largest).
        message: Box<Message>,
        /// The dialect to encode it in.
        dialect: Dialect,
    },
    /// POST `…/cancel/{id}`; answer with `Reply { to: Cancel }` (optional).
    SendCancel {
        /// The delegation.
        id: DelegationId,
        /// The executor URL.
        peer: std::sync::Arc<str>,
    },
    /// POST `…/tasks/{id}/ack`; answer with `Reply { to: Ack }` (optional).
    SendAck {
        /// The delegation.
        id: DelegationId,
        /// The executor URL.
        peer: std::sync::Arc<str>,
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
        /// How an archive's root is laid out (by the executor's dialect).
        layout: ArchiveLayout,
        /// How an archive reaches the executor: inline, or by a one-time URL when the
        /// executor agreed to the `archive-url` extension and this delegator serves archives.
        delivery: ArchiveDelivery,
    },
    /// Open `GET …/tasks/{id}/events`; answer with `EventStreamOpened`, then `TaskEvent`s, then
    /// `EventStreamClosed`.
    OpenEventStream {
        /// The delegation.
        id: DelegationId,
        /// The executor URL.
        peer: std::sync::Arc<str>,
        /// Send it as the `Last-Event-ID` header, if `Some` (WIRE.md §4.6): the id of the last
        /// event taken from an earlier stream of this delegation.
        last_event_id: Option<u64>,
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
        peer: std::sync::Arc<str>,
    },
    /// Apply a stored snapshot (from [`DelegatorOutput::StoreSnapshot`]) to the `rw`
    /// resources, all-or-nothing; answer with `SnapshotApplied`. At most one apply per
    /// delegation is in flight.
    ApplySnapshot {
        /// The delegation.
        id: DelegationId,
        /// The snapshot.
        snapshot_id: SnapshotId,
        /// How the snapshot's root is laid out (by the executor's dialect).
        layout: ArchiveLayout,
        /// The delegation's effective access: nothing is written to a read-only resource.
        access_mode: AccessMode,
        /// The SHA-256 the executor announced for the archive: the stored bytes must match it.
        checksum: Option<String>,
        /// A later round may follow (a multi-round delegation): once applied, what the apply
        /// wrote becomes the base the next round's result is compared with (local edits are
        /// those made since), as if it had been lent so.
        rebaseline: bool,
    },
    /// Store a snapshot durably (its bytes, inline or fetched from its URL); answer with
    /// `SnapshotStored`. Every snapshot that is to be applied or staged is stored first.
    StoreSnapshot {
        /// The delegation.
        id: DelegationId,
        /// The snapshot event (bytes inline or by URL).
        snapshot: Box<SnapshotEvent>,
        /// Where the bytes are (see [`ResultSource`]).
        source: ResultSource,
    },
    /// The apply of the delegation's snapshot is journalled as applied: remove what the apply
    /// left beside the workspace as the proof that its swap finished (the apply directory;
    /// see `awcp_transports::snapshot::close_apply`). Idempotent. No answer needed.
    ///
    /// Until this runs, a restarted driver that finds the proof reports
    /// [`ApplyRecovery::Finished`](super::ApplyRecovery::Finished) to
    /// [`Delegator::restore`](super::Delegator::restore), so an apply that finished just
    /// before a crash is recorded as applied, not as pending.
    CloseApply {
        /// The delegation.
        id: DelegationId,
    },
    /// Delete a stored snapshot (discard or forget). No answer needed.
    DeleteStoredSnapshot {
        /// The delegation.
        id: DelegationId,
        /// The snapshot.
        snapshot_id: SnapshotId,
    },
    /// Every result of `id` is settled (applied or discarded) after its transport was
    /// released: what still holds a result for review outside this delegator (a `git`
    /// delegation's branch on the remote, and the repository that names it) may go now. No
    /// answer needed; a crash before it runs is made good at start-up (the repository of an
    /// ended delegation whose results are settled is released).
    ResultsSettled {
        /// The delegation.
        id: DelegationId,
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
    /// The executor broke the protocol: an answer or a message the spec does not allow. The
    /// engine handles it as the spec says (the delegation is abandoned, or the message
    /// ignored); this event lets the application count and report it.
    PeerMisbehaved {
        /// The delegation.
        id: DelegationId,
        /// What the executor did.
        reason: PeerMisbehavior,
    },
    /// The executor's event stream broke (the executor went away, or the network did); the
    /// engine reconnects in `retry_in`. Tell the user: nothing is lost, the task may still be
    /// running on the executor.
    ConnectionLost {
        /// The delegation.
        id: DelegationId,
        /// Why, if known.
        reason: Option<String>,
        /// When the next attempt starts.
        retry_in: std::time::Duration,
    },
    /// The delegation was forgotten after its retention: drop it from any journal.
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
        /// What went wrong, if it did not (boxed: every output moves as big as the largest
        /// event).
        error: Option<Box<ErrorInfo>>,
    },
}

impl DelegatorEvent {
    /// What this event says about whether delegation `id` has started, in the sense a daemon's
    /// `POST /delegate` answers (like the reference daemon): `Some(Ok(()))` once START went out
    /// (the delegation reached `started`, `running` or `completed`) or once it ended without an
    /// error other than a cancel; `Some(Err(error))` if it ended with an error first; `None` if
    /// the event says nothing about it.
    pub fn start_outcome(&self, id: &DelegationId) -> Option<Result<(), ErrorInfo>> {
        match self {
            DelegatorEvent::StateChanged { id: eid, to, .. }
                if eid == id
                    && matches!(
                        to,
                        DelegationState::Started
                            | DelegationState::Running
                            | DelegationState::Completed
                    ) =>
            {
                Some(Ok(()))
            }
            DelegatorEvent::Ended { id: eid, error, .. } if eid == id => match error {
                Some(e) if e.code != ErrorCode::Cancelled => Some(Err((**e).clone())),
                Some(_) | None => Some(Ok(())),
            },
            DelegatorEvent::StateChanged { .. }
            | DelegatorEvent::Ended { .. }
            | DelegatorEvent::Progress { .. }
            | DelegatorEvent::Snapshot { .. }
            | DelegatorEvent::PeerMisbehaved { .. }
            | DelegatorEvent::ConnectionLost { .. }
            | DelegatorEvent::Forgotten { .. } => None,
        }
    }
}

/// Where the bytes of a snapshot to store are ([`DelegatorOutput::StoreSnapshot`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResultSource {
    /// In the snapshot event: inline, at a URL of the executor's, or in the file the event
    /// was received into.
    Event,
    /// The delegation's result object in the storage it was lent through (a `storage`
    /// delegation whose executor uploaded its result and named it with
    /// [`storage_result_text`](crate::wire::storage_result_text)). The driver reads its own
    /// result object, never a URL the executor names; `snapshot.data` is empty.
    StorageObject,
    /// A `git` delegation's branch ([`git_result`](crate::wire::git_result), its form
    /// checked): the driver fetches it from the repository the delegation was lent through
    /// (never a URL the executor names), checks that it descends from the base commit, and
    /// stores the change as a delta snapshot; `snapshot.data` is empty.
    GitBranch(crate::wire::GitResult),
}
