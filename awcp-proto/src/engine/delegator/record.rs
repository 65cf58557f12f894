//! Durable records: the typed journal record of one delegation, its format versions and the
//! migration from older ones. [`Delegator::record`](super::Delegator::record) writes it,
//! [`Delegator::restore`](super::Delegator::restore) reads it (see `restore.rs`).
//!
//! ## Versions
//! * **0**: the unversioned JSON object written before records were types (no `version`
//!   field). Same fields as version 1.
//! * **1**: adds `version`. Later, still version 1 (readers ignore it, absent reads as
//!   before): a snapshot's optional `checksum`, the SHA-256 its executor announced, which
//!   earlier releases kept beside the stored bytes (`<sid>.json`, still read for them);
//!   `round` and `keepOpen` of multi-round delegations; `applying`, the snapshot whose apply
//!   runs (absent: the first stored `in_flight` one, as before).
//!
//! A record newer than [`RECORD_VERSION`] is refused ([`RecordError::TooNew`]) rather than
//! half understood.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::*;

/// The record version this engine writes.
pub const RECORD_VERSION: u32 = 1;

pub use crate::engine::Journaling;

impl DelegatorOutput {
    /// What the journal does for this output before it is executed (see [`Journaling`]).
    pub fn journaling(&self) -> Journaling {
        match self {
            DelegatorOutput::Event(DelegatorEvent::StateChanged { .. })
            | DelegatorOutput::Event(DelegatorEvent::Snapshot { .. })
            | DelegatorOutput::Event(DelegatorEvent::Ended { .. }) => Journaling::Write,
            DelegatorOutput::Event(DelegatorEvent::Forgotten { .. }) => Journaling::Remove,
            // Seen by the executor.
            DelegatorOutput::SendMessage { .. }
            | DelegatorOutput::SendCancel { .. }
            | DelegatorOutput::SendAck { .. }
            // Changes the user's files.
            | DelegatorOutput::ApplySnapshot { .. }
            // Creates what a restarted delegator finds and releases only through the record
            // that led to it (an export, credentials, a stored snapshot), or deletes what an
            // older record still names.
            | DelegatorOutput::PrepareTransport { .. }
            | DelegatorOutput::StoreSnapshot { .. }
            | DelegatorOutput::DeleteStoredSnapshot { .. }
            // Removes the proof of a finished apply: only once the record says applied.
            | DelegatorOutput::CloseApply { .. }
            // Deletes a result branch: only once the record says every result is settled.
            | DelegatorOutput::ResultsSettled { .. }
            | DelegatorOutput::ReleaseTransport { .. } => Journaling::Sync,
            // Reads, and what only this process holds (a stream, the fetched result).
            DelegatorOutput::ScanWorkspace { .. }
            | DelegatorOutput::OpenEventStream { .. }
            | DelegatorOutput::CloseEventStream { .. }
            | DelegatorOutput::FetchResult { .. }
            | DelegatorOutput::Event(DelegatorEvent::Progress { .. })
            | DelegatorOutput::Event(DelegatorEvent::PeerMisbehaved { .. })
            | DelegatorOutput::Event(DelegatorEvent::ConnectionLost { .. }) => Journaling::None,
        }
    }

    /// The delegation this output is about.
    pub fn delegation_id(&self) -> &DelegationId {
        match self {
            DelegatorOutput::ScanWorkspace { id }
            | DelegatorOutput::SendMessage { id, .. }
            | DelegatorOutput::SendCancel { id, .. }
            | DelegatorOutput::SendAck { id, .. }
            | DelegatorOutput::PrepareTransport { id, .. }
            | DelegatorOutput::OpenEventStream { id, .. }
            | DelegatorOutput::CloseEventStream { id }
            | DelegatorOutput::FetchResult { id, .. }
            | DelegatorOutput::ApplySnapshot { id, .. }
            | DelegatorOutput::StoreSnapshot { id, .. }
            | DelegatorOutput::DeleteStoredSnapshot { id, .. }
            | DelegatorOutput::CloseApply { id }
            | DelegatorOutput::ResultsSettled { id }
            | DelegatorOutput::ReleaseTransport { id } => id,
            DelegatorOutput::Event(ev) => ev.delegation_id(),
        }
    }
}

impl DelegatorEvent {
    /// The delegation this event is about.
    pub fn delegation_id(&self) -> &DelegationId {
        match self {
            DelegatorEvent::StateChanged { id, .. }
            | DelegatorEvent::Progress { id, .. }
            | DelegatorEvent::Snapshot { id, .. }
            | DelegatorEvent::PeerMisbehaved { id, .. }
            | DelegatorEvent::ConnectionLost { id, .. }
            | DelegatorEvent::Forgotten { id }
            | DelegatorEvent::Ended { id, .. } => id,
        }
    }
}

/// Why a journal record cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// Not a delegation record (a required field is missing or has the wrong type).
    #[error("malformed delegation record: {0}")]
    Malformed(String),
    /// Written by a newer delegator.
    #[error("delegation record version {0} is newer than this delegator understands")]
    TooNew(u32),
}

/// The journal record of one delegation. The driver writes it and syncs it as
/// [`DelegatorOutput::journaling`] says, and removes it on [`DelegatorEvent::Forgotten`]. It holds the INVITE with the credential, so
/// the state directory must be private.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DelegationRecord {
    /// Format version ([`RECORD_VERSION`]; absent: 0).
    #[serde(default)]
    pub version: u32,
    /// The delegation.
    pub id: DelegationId,
    /// The executor URL.
    pub peer: String,
    /// The executor's dialect.
    #[serde(default, with = "dialect")]
    pub dialect: Dialect,
    /// The INVITE (task, lease request, resources, transport, auth) in the reference dialect.
    /// Shared: it never changes, and a record is taken at every journaled step.
    pub invite: crate::wire::JsonText,
    /// The snapshot policy (unknown or absent: the default).
    #[serde(default, with = "snapshot_mode")]
    pub snapshot_mode: SnapshotMode,
    /// The spec state.
    #[serde(with = "state")]
    pub state: DelegationState,
    /// Created (Unix ms).
    #[serde(default)]
    pub created_at: Option<u64>,
    /// Last change (Unix ms).
    #[serde(default)]
    pub updated_at: Option<u64>,
    /// Lease end (Unix ms).
    #[serde(default)]
    pub expires_at: Option<u64>,
    /// Effective access after the executor's answer (`ro`/`rw`).
    #[serde(default)]
    pub access_mode: Option<String>,
    /// Extensions agreed in ACCEPT.
    #[serde(default)]
    pub features: Vec<Feature>,
    /// The executor's work directory (informational).
    #[serde(default)]
    pub executor_work_dir: Option<String>,
    /// Whether START was sent.
    #[serde(default)]
    pub start_sent: bool,
    /// Whether the executor's `done` or `error` was heard.
    #[serde(default)]
    pub heard_terminal: bool,
    /// Whether everything was released and `Ended` emitted.
    #[serde(default)]
    pub ended: bool,
    /// Snapshots whose bytes are in the driver's store.
    #[serde(default)]
    pub stored: Vec<SnapshotId>,
    /// Snapshots in arrival order.
    #[serde(default)]
    pub snapshots: Vec<SnapshotEntry>,
    /// The executor's summary.
    #[serde(default)]
    pub result: Option<OutcomeEntry>,
    /// What went wrong.
    #[serde(default)]
    pub error: Option<ErrorInfo>,
    /// Whether secret-looking files may be lent.
    #[serde(default)]
    pub allow_sensitive: bool,
    /// Entries the admission scan did not ship (the first few).
    #[serde(default)]
    pub not_shipped: Vec<NotShippedEntry>,
    /// How many entries were not shipped in all (absent: the listed ones).
    #[serde(default)]
    pub not_shipped_count: Option<u64>,
    /// Why the announced result could not be fetched.
    #[serde(default)]
    pub result_error: Option<ErrorInfo>,
    /// What releasing the transport found.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Where the lent resources live on the delegator's disk. The engine never sees paths and
    /// leaves this empty; the driver fills it before writing the record and reads it back
    /// with [`DelegationRecord::sources_of`] (also from a record it cannot otherwise read),
    /// so a restarted delegator can finish an interrupted apply. An entry it cannot read is
    /// skipped, not fatal.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "lenient_sources"
    )]
    pub sources: Vec<SourceEntry>,
    /// The round running or last ended (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u64>,
    /// The delegation asked to be kept open for more rounds.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_open: bool,
    /// The snapshot whose apply is running (others may be queued behind it, also `in_flight`):
    /// the one a finished apply found at restart wrote. Absent: the first stored `in_flight`
    /// one (records of earlier releases, which never queued applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applying: Option<SnapshotId>,
}

/// One lent resource's place on the delegator's disk, in a [`DelegationRecord`]:
/// `{"name": "workspace", "path": "/home/me/project", "mode": "rw"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceEntry {
    /// The resource's name in the INVITE.
    pub name: crate::id::ResourceName,
    /// Its source directory (written lossily if the path is not UTF-8).
    pub path: String,
    /// How it was lent.
    #[serde(with = "access_mode")]
    pub mode: AccessMode,
}

/// The readable entries of a `sources` list.
fn lenient_sources<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<SourceEntry>, D::Error> {
    let raw = Option::<Vec<serde_json::Value>>::deserialize(d)?.unwrap_or_default();
    Ok(raw
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect())
}

/// One snapshot in a [`DelegationRecord`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotEntry {
    /// Snapshot id.
    pub id: SnapshotId,
    /// Summary.
    #[serde(default)]
    pub summary: String,
    /// Highlights.
    #[serde(default)]
    pub highlights: Vec<String>,
    /// Recommended by the executor.
    #[serde(default)]
    pub recommended: bool,
    /// Metadata from the event.
    #[serde(default)]
    pub metadata: BTreeMap<String, serde_json::Value>,
    /// Status (absent: in flight).
    #[serde(default)]
    pub status: StatusEntry,
    /// When it arrived (Unix ms).
    #[serde(default)]
    pub received_at: Option<u64>,
    /// When it was applied (Unix ms).
    #[serde(default)]
    pub applied_at: Option<u64>,
    /// Why its last apply failed.
    #[serde(default)]
    pub error: Option<ErrorInfo>,
    /// The archive's SHA-256 as the executor announced it (absent in records written before
    /// it was recorded: the driver then reads it from the store, where they kept it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
    /// What of the result its apply did not write (`path (reason)`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
    /// What its apply changed (`path`, `path (deleted)`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
}

/// A snapshot's status in a record: `{"status": "pending"}`, `{"status": "failed", "error": …}`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum StatusEntry {
    /// Stored, waiting for the application.
    Pending,
    /// Applied.
    Applied,
    /// Discarded.
    Discarded,
    /// Storing failed.
    Failed {
        /// Why.
        #[serde(default)]
        error: Option<ErrorInfo>,
    },
    /// Being stored or applied when the record was written (an unknown status reads as this).
    #[default]
    #[serde(other)]
    InFlight,
}

/// The executor's summary in a record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutcomeEntry {
    /// What was done.
    #[serde(default)]
    pub summary: String,
    /// Files worth looking at.
    #[serde(default)]
    pub highlights: Vec<String>,
}

/// A workspace entry that was not shipped, in a record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotShippedEntry {
    /// Path relative to its resource.
    pub path: String,
    /// Why (see [`NotShippedReason::as_str`]).
    pub reason: String,
}

impl DelegationRecord {
    /// Reads a record of any known version (see the module docs).
    pub fn from_json(value: &serde_json::Value) -> Result<DelegationRecord, RecordError> {
        let version = value
            .get("version")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        if version > u64::from(RECORD_VERSION) {
            return Err(RecordError::TooNew(
                u32::try_from(version).unwrap_or(u32::MAX),
            ));
        }
        let mut record: DelegationRecord = serde_json::from_value(value.clone())
            .map_err(|e| RecordError::Malformed(e.to_string()))?;
        // Version 0 → 1: only the version field is new.
        record.version = RECORD_VERSION;
        Ok(record)
    }

    /// The delegation id and the [`sources`](DelegationRecord::sources) of a journal record,
    /// also when the rest of it cannot be read (written by a newer delegator, or damaged):
    /// what a restarted driver needs to finish an interrupted apply. `None` without a valid
    /// id.
    pub fn sources_of(value: &serde_json::Value) -> Option<(DelegationId, Vec<SourceEntry>)> {
        #[derive(Deserialize)]
        struct Partial {
            id: DelegationId,
            #[serde(default, deserialize_with = "lenient_sources")]
            sources: Vec<SourceEntry>,
        }
        let p = Partial::deserialize(value).ok()?;
        Some((p.id, p.sources))
    }

    /// The record as JSON (what a journal stores).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// The record as one line of compact JSON, written straight from the typed record (no
    /// [`serde_json::Value`] tree in between: what the journal writes on every change). Its
    /// fields come in declaration order rather than [`DelegationRecord::to_json`]'s sorted
    /// order; [`DelegationRecord::from_json`] reads either.
    pub fn to_json_string(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }
}

impl From<&SnapshotStatus> for StatusEntry {
    fn from(s: &SnapshotStatus) -> Self {
        match s {
            SnapshotStatus::InFlight => StatusEntry::InFlight,
            SnapshotStatus::Pending => StatusEntry::Pending,
            SnapshotStatus::Applied => StatusEntry::Applied,
            SnapshotStatus::Discarded => StatusEntry::Discarded,
            SnapshotStatus::Failed(e) => StatusEntry::Failed {
                error: Some(e.clone()),
            },
        }
    }
}

impl From<StatusEntry> for SnapshotStatus {
    fn from(s: StatusEntry) -> Self {
        match s {
            StatusEntry::InFlight => SnapshotStatus::InFlight,
            StatusEntry::Pending => SnapshotStatus::Pending,
            StatusEntry::Applied => SnapshotStatus::Applied,
            StatusEntry::Discarded => SnapshotStatus::Discarded,
            StatusEntry::Failed { error } => SnapshotStatus::Failed(
                error.unwrap_or_else(|| ErrorInfo::new(ErrorCode::TransportError, "failed")),
            ),
        }
    }
}

/// Why a snapshot whose apply was interrupted by a restart is pending again: the start-up
/// recovery rolled it back (`None`), or could not recover it (`Some(why)`).
pub(super) fn interrupted_apply(unrecovered: Option<&ErrorInfo>) -> ErrorInfo {
    match unrecovered {
        None => ErrorInfo {
            code: ErrorCode::TransportError,
            message: "the delegator stopped while applying this snapshot; the interrupted \
                      apply was rolled back at start-up, so the workspace is as it was before"
                .into(),
            hint: Some("Apply the snapshot again, or discard it.".into()),
        },
        Some(e) => ErrorInfo {
            code: ErrorCode::TransportError,
            message: format!(
                "the delegator stopped while applying this snapshot, and at start-up the \
                 interrupted apply could be neither finished nor rolled back ({}); the \
                 workspace may be partly applied",
                e.message
            ),
            hint: Some("Apply the snapshot again: the apply first retries the recovery.".into()),
        },
    }
}

/// `"ro"` or `"rw"`.
mod access_mode {
    use super::AccessMode;

    pub(super) fn serialize<S: serde::Serializer>(m: &AccessMode, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(m.as_str())
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<AccessMode, D::Error> {
        let s: String = serde::Deserialize::deserialize(d)?;
        AccessMode::parse(&s).ok_or_else(|| serde::de::Error::custom("mode is not ro or rw"))
    }
}

/// `"seed"` or `"reference"` (anything else: reference).
mod dialect {
    use super::Dialect;

    pub(super) fn serialize<S: serde::Serializer>(d: &Dialect, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if *d == Dialect::Seed {
            "seed"
        } else {
            "reference"
        })
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Dialect, D::Error> {
        let v: Option<String> = serde::Deserialize::deserialize(d)?;
        Ok(if v.as_deref() == Some("seed") {
            Dialect::Seed
        } else {
            Dialect::Reference
        })
    }
}

/// `auto`/`staged`/`discard` (anything else: the default).
mod snapshot_mode {
    use super::SnapshotMode;

    pub(super) fn serialize<S: serde::Serializer>(
        m: &SnapshotMode,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_str(m.as_str())
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<SnapshotMode, D::Error> {
        let v: Option<String> = serde::Deserialize::deserialize(d)?;
        Ok(v.as_deref()
            .and_then(SnapshotMode::parse)
            .unwrap_or_default())
    }
}

/// The spec state's name (required, must be known).
mod state {
    use super::DelegationState;

    pub(super) fn serialize<S: serde::Serializer>(
        st: &DelegationState,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_str(st.as_str())
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<DelegationState, D::Error> {
        let v: String = serde::Deserialize::deserialize(d)?;
        DelegationState::parse(&v)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown delegation state {v:?}")))
    }
}
