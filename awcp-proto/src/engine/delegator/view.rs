//! What the application sees of a delegation: snapshot records, the view, the outcome.

use super::*;

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
    /// The archive's SHA-256 as the executor announced it (hex): what its stored bytes are
    /// verified against when they are applied.
    pub checksum: Option<String>,
    /// What of the result its apply did not write, each as `path (reason)` (entries refused
    /// or dropped as hostile or never shipped; empty until applied).
    pub left_out: Vec<String>,
    /// What its apply changed (`path`, `path (deleted)`; empty until applied).
    pub changed: Vec<String>,
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
    /// The executor's latest progress message (at most 1 KiB), if it sent one.
    pub last_progress: Option<String>,
    /// The snapshot the executor announced in `done` that has not arrived yet: the engine is
    /// fetching it (also after a restart interrupted its storing). It is not in
    /// [`Self::snapshots`] until it arrives.
    pub awaiting_snapshot: Option<SnapshotId>,
    /// The round running or last ended (1: the START round; more in a multi-round
    /// delegation, WIRE.md §17).
    pub round: u64,
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
    /// How the delegation turned out (see [`Outcome`]). A completed delegation whose result
    /// the engine is still fetching ([`DelegationView::awaiting_snapshot`]), storing or
    /// applying (not [`DelegationView::ended`]) is [`Outcome::Running`]: reading it as
    /// completed, staged or "stored but not applied" would be a race.
    pub fn outcome(&self) -> Outcome {
        match (self.state, &self.error) {
            (DelegationState::Completed, _) => {}
            (
                DelegationState::Created
                | DelegationState::Invited
                | DelegationState::Accepted
                | DelegationState::Started
                | DelegationState::Running
                | DelegationState::Idle,
                _,
            ) => return Outcome::Running,
            (DelegationState::Error, Some(e))
                if matches!(
                    e.code,
                    ErrorCode::Timeout | ErrorCode::Unreachable | ErrorCode::SseFailed
                ) =>
            {
                return Outcome::Unreachable(e.clone())
            }
            (
                state @ (DelegationState::Error
                | DelegationState::Cancelled
                | DelegationState::Expired),
                error,
            ) => {
                return Outcome::Failed {
                    state,
                    error: error.clone(),
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
        // The result is still on its way (being fetched, e.g. after a restart): not over yet.
        if self.awaiting_snapshot.is_some() {
            return Outcome::Running;
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
                // The engine is still storing or applying it: not over yet (in `staged` mode
                // too: a snapshot being stored cannot be applied yet).
                None if (auto || snap.status == SnapshotStatus::InFlight) && !self.ended => {
                    return Outcome::Running
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::delegator::tests::{request, sid, t};

    fn view(state: DelegationState, error: Option<ErrorInfo>) -> DelegationView {
        DelegationView {
            request: request(SnapshotMode::Auto),
            state,
            created_at: t(0),
            updated_at: t(0),
            expires_at: None,
            access_mode: AccessMode::Rw,
            executor_work_dir: None,
            executor_constraints: None,
            snapshots: Vec::new(),
            result: None,
            error,
            result_error: None,
            ended: state.is_terminal(),
            warnings: Vec::new(),
            not_shipped: Vec::new(),
            not_shipped_count: 0,
            last_progress: None,
            awaiting_snapshot: None,
            round: 1,
        }
    }

    fn snapshot(status: SnapshotStatus, error: Option<ErrorInfo>) -> SnapshotRecord {
        SnapshotRecord {
            id: sid("snap_a"),
            summary: String::new(),
            highlights: Vec::new(),
            recommended: true,
            metadata: BTreeMap::new(),
            status,
            received_at: t(1),
            applied_at: None,
            error,
            checksum: None,
            left_out: Vec::new(),
            changed: Vec::new(),
        }
    }

    #[test]
    fn the_outcome_names_what_the_application_must_know() {
        for s in DelegationState::ALL
            .into_iter()
            .filter(|s| !s.is_terminal())
        {
            assert_eq!(view(s, None).outcome(), Outcome::Running, "{s}");
        }
        let timeout = ErrorInfo::bare(ErrorCode::Timeout, "INVITE failed");
        assert_eq!(
            view(DelegationState::Error, Some(timeout.clone())).outcome(),
            Outcome::Unreachable(timeout)
        );
        let failed = ErrorInfo::bare(ErrorCode::TaskFailed, "exit 3");
        assert_eq!(
            view(DelegationState::Error, Some(failed))
                .outcome()
                .as_str(),
            "failed"
        );
        assert_eq!(
            view(DelegationState::Cancelled, None).outcome(),
            Outcome::Failed {
                state: DelegationState::Cancelled,
                error: None
            }
        );
        assert_eq!(
            view(DelegationState::Completed, None).outcome(),
            Outcome::Completed
        );
    }

    #[test]
    fn a_completed_delegation_whose_result_was_not_applied_says_so() {
        let mut v = view(DelegationState::Completed, None);
        v.snapshots = vec![snapshot(SnapshotStatus::Pending, None)];
        assert!(
            matches!(v.outcome(), Outcome::NotApplied { snapshot: Some(s), .. } if s == sid("snap_a")),
            "auto mode: stored but not applied"
        );
        v.request.snapshot_mode = SnapshotMode::Staged;
        assert_eq!(v.outcome(), Outcome::Staged);
        let why = ErrorInfo::bare(ErrorCode::TransportError, "disk full");
        v.snapshots = vec![snapshot(SnapshotStatus::Failed(why.clone()), None)];
        assert_eq!(
            v.outcome(),
            Outcome::NotApplied {
                snapshot: None,
                reason: why
            },
            "not stored: nothing kept to retry"
        );
        v.snapshots = vec![snapshot(SnapshotStatus::Applied, None)];
        assert_eq!(v.outcome(), Outcome::Completed);
    }

    #[test]
    fn a_completed_delegation_still_applying_is_running() {
        for status in [SnapshotStatus::InFlight, SnapshotStatus::Pending] {
            let mut v = view(DelegationState::Completed, None);
            v.ended = false;
            v.snapshots = vec![snapshot(status.clone(), None)];
            assert_eq!(v.outcome(), Outcome::Running, "{status:?}, not ended");
            v.ended = true;
            assert!(
                matches!(v.outcome(), Outcome::NotApplied { .. }),
                "{status:?}, ended: not applied"
            );
        }
    }

    #[test]
    fn a_result_still_being_fetched_or_stored_is_running_in_every_mode() {
        for mode in [SnapshotMode::Auto, SnapshotMode::Staged] {
            let mut v = view(DelegationState::Completed, None);
            v.request.snapshot_mode = mode;
            v.ended = false;
            v.awaiting_snapshot = Some(sid("snap_a"));
            assert_eq!(v.outcome(), Outcome::Running, "{mode:?}: being fetched");
            v.awaiting_snapshot = None;
            v.snapshots = vec![snapshot(SnapshotStatus::InFlight, None)];
            assert_eq!(v.outcome(), Outcome::Running, "{mode:?}: being stored");
        }
    }
}
