//! SSE task events (WIRE.md §4): what an executor reports on `GET /awcp/tasks/{id}/events`.

use std::collections::BTreeMap;

use crate::error::ErrorInfo;
use crate::id::{DelegationId, SnapshotId};
use crate::time::Timestamp;

use super::ArchiveData;

/// One event on `GET /awcp/tasks/{id}/events`.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskEvent {
    /// The delegation.
    pub delegation_id: DelegationId,
    /// When the executor emitted it.
    pub timestamp: Timestamp,
    /// What happened.
    pub kind: TaskEventKind,
}

impl TaskEvent {
    /// The file on this machine holding the event's result archive (see
    /// [`ArchiveData::local_file`] and [`DoneEvent::result_local_file`]), if a driver received
    /// it into one.
    pub fn local_file(&self) -> Option<&str> {
        match &self.kind {
            TaskEventKind::Snapshot(s) => s.data.local_file.as_deref(),
            TaskEventKind::Done(d) => d.result_local_file.as_deref(),
            TaskEventKind::Status(_) | TaskEventKind::Error(_) | TaskEventKind::RoundDone(_) => {
                None
            }
        }
    }
}

/// The `type`-specific part of a [`TaskEvent`].
#[derive(Clone, Debug, PartialEq)]
pub enum TaskEventKind {
    /// `status`
    Status(StatusEvent),
    /// `snapshot` (\[R\])
    Snapshot(SnapshotEvent),
    /// `done`
    Done(DoneEvent),
    /// `error`
    Error(ErrorInfo),
    /// `round_done` (multi-round delegations, WIRE.md §17): the end of one round; the
    /// assignment stays open for CONTINUE or CLOSE and the stream goes on.
    RoundDone(RoundDoneEvent),
}

impl TaskEventKind {
    /// The `type` string.
    pub fn type_str(&self) -> &'static str {
        match self {
            TaskEventKind::Status(_) => "status",
            TaskEventKind::Snapshot(_) => "snapshot",
            TaskEventKind::Done(_) => "done",
            TaskEventKind::Error(_) => "error",
            TaskEventKind::RoundDone(_) => "round_done",
        }
    }

    /// `done` and `error` end a stream.
    pub fn is_terminal(&self) -> bool {
        matches!(self, TaskEventKind::Done(_) | TaskEventKind::Error(_))
    }
}

/// `status.status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskStatus {
    /// `running`
    Running,
    /// `progress`
    Progress,
    /// Anything else, kept verbatim (\[C\] `working`).
    Other(String),
}

impl serde::Serialize for TaskStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl TaskStatus {
    /// The wire string.
    pub fn as_str(&self) -> &str {
        match self {
            TaskStatus::Running => "running",
            TaskStatus::Progress => "progress",
            TaskStatus::Other(s) => s,
        }
    }

    /// Parses a wire string.
    pub fn parse(s: &str) -> TaskStatus {
        match s {
            "running" => TaskStatus::Running,
            "progress" => TaskStatus::Progress,
            other => TaskStatus::Other(other.to_owned()),
        }
    }
}

/// `status` event.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusEvent {
    /// `running` or `progress`.
    pub status: TaskStatus,
    /// Human-readable progress text.
    pub message: Option<String>,
    /// Fraction or percentage, as the executor chooses.
    pub progress: Option<f64>,
}

/// `snapshot` event.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotEvent {
    /// Snapshot id.
    pub snapshot_id: SnapshotId,
    /// What changed.
    pub summary: String,
    /// Files worth looking at.
    pub highlights: Vec<String>,
    /// The snapshot bytes: `snapshotBase64` or our `snapshotUrl`.
    pub data: ArchiveData,
    /// SHA-256 of the raw snapshot bytes (our extension `checksum`).
    pub checksum: Option<String>,
    /// Whether the executor recommends applying it.
    pub recommended: Option<bool>,
    /// Free-form metadata (`fileCount`, `totalBytes`, `changedFiles`, `delta`, ...).
    pub metadata: BTreeMap<String, serde_json::Value>,
}

/// `done` event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DoneEvent {
    /// What was done.
    pub summary: String,
    /// Files worth looking at.
    pub highlights: Vec<String>,
    /// \[R\] ids of the snapshots sent before.
    pub snapshot_ids: Vec<SnapshotId>,
    /// \[R\] the snapshot the executor recommends.
    pub recommended_snapshot_id: Option<SnapshotId>,
    /// \[S\] base64 ZIP of the executor's work dir (archive transport).
    pub result_base64: Option<String>,
    /// Never on the wire itself: the raw ZIP of `resultBase64` in a file on this machine,
    /// standing in for `result_base64` so that a large result is never held in memory (a
    /// driver receiving `done` may decode `resultBase64` into a file as it arrives and set
    /// this instead, see [`crate::wire::divert`]). The encoders ignore it.
    pub result_local_file: Option<String>,
}

/// `round_done` event (WIRE.md §17): one round of a multi-round delegation ended; the
/// executor keeps the work directory and waits for CONTINUE or CLOSE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoundDoneEvent {
    /// The round that ended (1 for the START round, then CONTINUE's number).
    pub round: u64,
    /// What was done in it.
    pub summary: String,
    /// Files worth looking at.
    pub highlights: Vec<String>,
    /// The snapshots sent for this round (its `snapshot` events).
    pub snapshot_ids: Vec<SnapshotId>,
    /// The snapshot the executor recommends.
    pub recommended_snapshot_id: Option<SnapshotId>,
}

/// Marker so `ErrorInfo` can be used as an event payload.
pub type ErrorEvent = ErrorInfo;
