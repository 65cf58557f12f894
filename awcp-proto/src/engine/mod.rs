//! The two engines and what they share.
//!
//! * [`delegator::Delegator`] owns every delegation of one delegator.
//! * [`executor::Executor`] owns every assignment of one executor.
//!
//! Both follow the same drive contract: feed inputs with `handle(now, input)` or application
//! calls, call `handle_timeout(now)` when [`poll_timeout`](delegator::Delegator::poll_timeout)'s
//! deadline is reached, and after every call drain `poll_output()` until it returns `None`.
//! [`drive`] is that loop, written once for every driver and the simulation.

pub mod admission;
pub mod delegator;
pub mod drive;
pub mod executor;

#[cfg(any(test, feature = "_internal-pair"))]
#[doc(hidden)]
pub mod pair;
#[cfg(any(test, feature = "_internal-pair"))]
#[doc(hidden)]
pub mod scenario;
pub mod sensitive;

pub use executor::auth;
pub(crate) mod timers;

use std::collections::BTreeMap;

pub use admission::{
    admission_verdict, holds_private_key, is_sensitive_name, result_verdict, AdmissionLimits,
    NotShipped, NotShippedReason, WorkspaceStats, KEY_SNIFF_HEAD_BYTES, KEY_SNIFF_MAX_FILE_BYTES,
    SENSITIVE_PATTERNS,
};

use crate::id::DelegationId;
use crate::wire::ArchiveData;

/// What the journal does for one output, before the output is executed
/// ([`DelegatorOutput::journaling`](delegator::DelegatorOutput::journaling),
/// [`ExecutorOutput::journaling`](executor::ExecutorOutput::journaling)). The rule is
/// write-ahead: a record may be written without a sync, as long as it is made durable before
/// anything the outside world can see or files change, so that after a power loss the record
/// read back is never older than what the peer, the workspace or the state directory already
/// went through. (A process crash loses nothing written: the kernel still holds it.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Journaling {
    /// Nothing to journal.
    None,
    /// Write the record of the output's delegation
    /// ([`Delegator::record`](delegator::Delegator::record),
    /// [`Executor::assignment_record`](executor::Executor::assignment_record)); no sync
    /// needed yet. The first record of a delegation is the exception: it is written durably
    /// (a delegation the caller has an id for is never lost).
    Write,
    /// Make what was written durable first (a sync, if anything was written since the last
    /// one): this output is seen by the peer or changes files. A delegator output names its
    /// delegation, and its record is the one synced; an executor output does not always name
    /// its assignment (a response, a stream event), and every record written since its last
    /// sync is synced.
    Sync,
    /// Remove the record of the output's delegation: it is forgotten.
    Remove,
}

/// Driver-issued handle of an inbound HTTP request waiting for its response. The engine stores
/// and echoes it, never interprets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// Driver-issued description of the OS resources a running task holds (e.g. its process
/// group), journalled with the assignment so that a restarted executor can end them. The engine
/// stores and echoes it ([`executor::ExecutorOutput::EndTask`]), never interprets it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskHandle(pub String);

/// Driver-issued handle of an open SSE response stream (executor side).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(pub u64);

/// What the delegator does with a snapshot when it arrives (WIRE.md §10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum SnapshotMode {
    /// Apply at once to every `rw` resource.
    #[default]
    Auto,
    /// Store; the application applies or discards later.
    Staged,
    /// Record only; never store or apply.
    Discard,
}

impl SnapshotMode {
    /// `auto`, `staged` or `discard`.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotMode::Auto => "auto",
            SnapshotMode::Staged => "staged",
            SnapshotMode::Discard => "discard",
        }
    }

    /// Parses `auto`/`staged`/`discard`.
    pub fn parse(s: &str) -> Option<SnapshotMode> {
        match s {
            "auto" => Some(SnapshotMode::Auto),
            "staged" => Some(SnapshotMode::Staged),
            "discard" => Some(SnapshotMode::Discard),
            _ => None,
        }
    }
}

/// Whether a captured snapshot holds the whole work directory or only the changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SnapshotKind {
    /// Every file (what reference peers understand).
    Full,
    /// Added/changed files plus the list of deleted paths (our peers, feature
    /// [`crate::wire::feature::DELTA_SNAPSHOTS`]).
    Delta,
}

/// One earlier round of a multi-round delegation (WIRE.md §17), as the agent of a later round
/// is told about it ([`executor::ExecutorOutput::RunTask`]'s `earlier`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct EarlierRound {
    /// Its number (1: the START round).
    pub round: u64,
    /// Its task.
    pub task: crate::wire::TaskSpec,
    /// What the agent said it did.
    pub summary: String,
}

/// What a task runner reports when the task succeeds.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TaskOutcome {
    /// What was done.
    pub summary: String,
    /// Files worth looking at.
    pub highlights: Vec<String>,
}

/// A snapshot the executor's transport captured.
#[derive(Clone, Debug, PartialEq)]
pub struct CapturedSnapshot {
    /// Inline base64 and/or a URL where the driver serves it.
    pub data: ArchiveData,
    /// SHA-256 of the raw bytes, lowercase hex.
    pub checksum: Option<String>,
    /// `fileCount`, `totalBytes`, `changedFiles`, `delta`, ...
    pub metadata: BTreeMap<String, serde_json::Value>,
}

/// Local misuse of an engine API: the call changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UsageError {
    /// No delegation with this id.
    #[error("unknown delegation {0}")]
    UnknownDelegation(DelegationId),
    /// A delegation with this id exists already.
    #[error("delegation {0} exists already")]
    AlreadyExists(DelegationId),
    /// No snapshot with this id in the delegation.
    #[error("unknown snapshot {snapshot} in delegation {delegation}")]
    UnknownSnapshot {
        /// The delegation.
        delegation: DelegationId,
        /// The snapshot id asked for.
        snapshot: String,
    },
    /// The call is not valid in the current state.
    #[error("{0}")]
    InvalidState(String),
    /// The request is malformed.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
}
