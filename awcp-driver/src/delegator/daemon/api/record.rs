//! A delegation's record, its snapshots, the list of delegations.

use std::collections::BTreeMap;

use awcp_proto::engine::delegator::{self as engine, DelegationView, SnapshotStatus};
use awcp_proto::{DelegationState, ErrorInfo};
use serde::{Deserialize, Serialize};

use super::{nullable, Task};

/// `POST /delegate`'s answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Delegated {
    /// The new delegation's id.
    #[serde(deserialize_with = "nullable")]
    pub delegation_id: String,
}

/// `POST /delegation/{id}/continue`'s body (as the reference's `dev` daemon reads it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContinueBody {
    /// The next round's task.
    pub task: Task,
}

/// `POST /delegation/{id}/continue`'s answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Continued {
    /// Always true.
    #[serde(deserialize_with = "nullable")]
    pub ok: bool,
    /// The round that started.
    #[serde(deserialize_with = "nullable")]
    pub round: u64,
}

/// A delegation's record (`GET /delegation/{id}`, `…/wait`), in the reference daemon's shape
/// with our additions (`outcome`, `ended`, `warnings`, `notShipped`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Record {
    /// The delegation id.
    #[serde(deserialize_with = "nullable")]
    pub id: String,
    /// Its state (WIRE.md §8.1: `created` … `completed`, `error`, `cancelled`, `expired`).
    #[serde(deserialize_with = "nullable")]
    pub state: String,
    /// The executor (the reference's name).
    #[serde(deserialize_with = "nullable")]
    pub peer_url: String,
    /// The executor.
    #[serde(deserialize_with = "nullable")]
    pub executor_url: String,
    /// What was lent.
    #[serde(deserialize_with = "nullable")]
    pub environment: Environment,
    /// The task.
    #[serde(deserialize_with = "nullable")]
    pub task: Task,
    /// The lease asked for.
    #[serde(deserialize_with = "nullable")]
    pub lease_config: LeaseConfig,
    /// The lease granted, once there is one.
    pub active_lease: Option<ActiveLease>,
    /// Where the executor works, if it said.
    pub executor_work_dir: Option<WorkDir>,
    /// What the executor allowed, if it said.
    pub executor_constraints: Option<Constraints>,
    /// What happens to a snapshot when it arrives.
    #[serde(deserialize_with = "nullable")]
    pub snapshot_policy: SnapshotPolicy,
    /// The snapshots received.
    #[serde(deserialize_with = "nullable")]
    pub snapshots: Vec<Snapshot>,
    /// The snapshot written into the workspace, if one was.
    pub applied_snapshot_id: Option<String>,
    /// The executor's summary of its work.
    pub result: Option<TaskResult>,
    /// Why it failed, if it did.
    pub error: Option<ErrorInfo>,
    /// How it turned out, in one place.
    #[serde(deserialize_with = "nullable")]
    pub outcome: Outcome,
    /// Whether it has ended (the record no longer changes but through apply/discard).
    #[serde(deserialize_with = "nullable")]
    pub ended: bool,
    /// Warnings for the user (a shortened lease, files not lent).
    #[serde(deserialize_with = "nullable")]
    pub warnings: Vec<String>,
    /// Files that were not lent, and why (at most 100 listed).
    #[serde(deserialize_with = "nullable")]
    pub not_shipped: Vec<NotShipped>,
    /// How many files were not lent in all.
    #[serde(deserialize_with = "nullable")]
    pub not_shipped_count: u64,
    /// The executor's latest progress message, if it sent one.
    pub last_progress: Option<String>,
    /// The round running or last ended (1: the first; more in a multi-round delegation,
    /// whose `state` is `idle` between rounds).
    #[serde(deserialize_with = "nullable")]
    pub round: u64,
    /// RFC 3339.
    #[serde(deserialize_with = "nullable")]
    pub created_at: String,
    /// RFC 3339.
    #[serde(deserialize_with = "nullable")]
    pub updated_at: String,
}

/// `environment` of a [`Record`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Environment {
    /// The resources lent.
    #[serde(deserialize_with = "nullable")]
    pub resources: Vec<Resource>,
}

/// One resource of a [`Record`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Resource {
    /// Its name at the executor.
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    /// `fs`.
    #[serde(rename = "type")]
    #[serde(deserialize_with = "nullable")]
    pub kind: String,
    /// `ro` or `rw`.
    #[serde(deserialize_with = "nullable")]
    pub mode: String,
}

/// `leaseConfig` of a [`Record`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LeaseConfig {
    /// The lease asked for, in seconds.
    #[serde(deserialize_with = "nullable")]
    pub ttl_seconds: u64,
    /// `ro` or `rw`.
    #[serde(deserialize_with = "nullable")]
    pub access_mode: String,
}

/// `activeLease` of a [`Record`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ActiveLease {
    /// RFC 3339.
    #[serde(deserialize_with = "nullable")]
    pub expires_at: String,
    /// `ro` or `rw`.
    #[serde(deserialize_with = "nullable")]
    pub access_mode: String,
}

/// `executorWorkDir` of a [`Record`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkDir {
    /// The executor's path.
    #[serde(deserialize_with = "nullable")]
    pub path: String,
}

/// `executorConstraints` of a [`Record`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Constraints {
    /// The longest lease the executor grants.
    pub max_ttl_seconds: Option<u64>,
    /// The access mode it accepted.
    pub accepted_access_mode: Option<String>,
}

/// `snapshotPolicy` of a [`Record`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SnapshotPolicy {
    /// `auto`, `staged` or `discard`.
    #[serde(deserialize_with = "nullable")]
    pub mode: String,
}

/// `result` of a [`Record`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskResult {
    /// The executor's summary.
    #[serde(deserialize_with = "nullable")]
    pub summary: String,
    /// Points it highlighted.
    #[serde(deserialize_with = "nullable")]
    pub highlights: Vec<String>,
}

/// One file not lent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NotShipped {
    /// `resource/path`.
    #[serde(deserialize_with = "nullable")]
    pub path: String,
    /// Why (`symlink`, `special file`, `ignored`, `skipped directory`).
    #[serde(deserialize_with = "nullable")]
    pub reason: String,
}

/// `outcome` of a [`Record`]: how the delegation turned out.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Outcome {
    /// `completed`, `staged`, `not_applied`, `unreachable`, `failed` or `running`.
    #[serde(deserialize_with = "nullable")]
    pub status: String,
    /// One sentence for a person.
    #[serde(deserialize_with = "nullable")]
    pub message: String,
    /// The snapshot kept when the result was not applied.
    pub snapshot_id: Option<String>,
    /// The error behind a `not_applied`, `unreachable` or `failed`.
    pub error: Option<ErrorInfo>,
}

impl Outcome {
    /// `completed` or `staged`: the work is done and its result is where it should be.
    pub fn is_success(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "staged")
    }
}

/// A snapshot of a delegation (`GET /delegation/{id}/snapshots`, and in a [`Record`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Snapshot {
    /// The snapshot id.
    #[serde(deserialize_with = "nullable")]
    pub id: String,
    /// The delegation it belongs to.
    #[serde(deserialize_with = "nullable")]
    pub delegation_id: String,
    /// The executor's summary.
    #[serde(deserialize_with = "nullable")]
    pub summary: String,
    /// Points it highlighted.
    #[serde(deserialize_with = "nullable")]
    pub highlights: Vec<String>,
    /// `pending`, `in_flight`, `applied`, `discarded` or `failed`.
    #[serde(deserialize_with = "nullable")]
    pub status: String,
    /// Why it failed or was not applied.
    pub error: Option<ErrorInfo>,
    /// Whether the executor recommends it.
    #[serde(deserialize_with = "nullable")]
    pub recommended: bool,
    /// The executor's metadata (`changedFiles`, sizes…).
    #[serde(deserialize_with = "nullable")]
    pub metadata: BTreeMap<String, serde_json::Value>,
    /// RFC 3339.
    #[serde(deserialize_with = "nullable")]
    pub created_at: String,
    /// RFC 3339, once applied.
    pub applied_at: Option<String>,
    /// What of the result its apply did not write, each as `path (reason)` (refused or
    /// dropped entries; absent when none).
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
    /// What its apply changed in the workspace: `resource/path` of each file written and
    /// `resource/path (deleted)` of each deleted, at most 500 (then `… and N more`); absent
    /// until applied, and when nothing changed.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
}

/// `GET /delegation/{id}/snapshots`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Snapshots {
    /// Oldest first.
    #[serde(deserialize_with = "nullable")]
    pub snapshots: Vec<Snapshot>,
}

/// `GET /delegations`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Delegations {
    /// How many have not reached a terminal state.
    #[serde(deserialize_with = "nullable")]
    pub active_delegations: usize,
    /// All the daemon knows.
    #[serde(deserialize_with = "nullable")]
    pub delegations: Vec<Summary>,
}

/// One delegation in [`Delegations`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Summary {
    /// The delegation id.
    #[serde(deserialize_with = "nullable")]
    pub id: String,
    /// Its state.
    #[serde(deserialize_with = "nullable")]
    pub state: String,
    /// The executor.
    #[serde(deserialize_with = "nullable")]
    pub executor_url: String,
    /// RFC 3339.
    #[serde(deserialize_with = "nullable")]
    pub created_at: String,
    /// The task's description.
    #[serde(deserialize_with = "nullable")]
    pub description: String,
}

impl Record {
    /// The record of a delegation.
    pub fn of(v: &DelegationView) -> Self {
        let o = v.outcome();
        Record {
            id: v.request.id.as_str().into(),
            state: v.state.as_str().into(),
            peer_url: v.request.peer.clone(),
            executor_url: v.request.peer.clone(),
            environment: Environment {
                resources: v
                    .request
                    .resources
                    .iter()
                    .map(|r| Resource {
                        name: r.name.as_str().into(),
                        kind: r.kind.clone(),
                        mode: r.mode.as_str().into(),
                    })
                    .collect(),
            },
            task: Task {
                description: v.request.task.description.clone(),
                prompt: v.request.task.prompt.clone(),
            },
            lease_config: LeaseConfig {
                ttl_seconds: v.request.ttl_seconds,
                access_mode: v.request.access_mode.as_str().into(),
            },
            active_lease: v.expires_at.map(|e| ActiveLease {
                expires_at: e.to_rfc3339(),
                access_mode: v.access_mode.as_str().into(),
            }),
            executor_work_dir: v
                .executor_work_dir
                .as_ref()
                .map(|p| WorkDir { path: p.clone() }),
            executor_constraints: v.executor_constraints.as_ref().map(|c| Constraints {
                max_ttl_seconds: c.max_ttl_seconds,
                accepted_access_mode: c.accepted_access_mode.map(|m| m.as_str().into()),
            }),
            snapshot_policy: SnapshotPolicy {
                mode: v.request.snapshot_mode.as_str().into(),
            },
            snapshots: v.snapshots.iter().map(|s| Snapshot::of(v, s)).collect(),
            applied_snapshot_id: v
                .snapshots
                .iter()
                .rev()
                .find(|s| s.status == SnapshotStatus::Applied)
                .map(|s| s.id.as_str().into()),
            result: v.result.as_ref().map(|r| TaskResult {
                summary: r.summary.clone(),
                highlights: r.highlights.clone(),
            }),
            error: v.error.clone(),
            outcome: Outcome::of(&o),
            ended: v.ended,
            warnings: v.warnings.clone(),
            not_shipped: v
                .not_shipped
                .iter()
                .map(|n| NotShipped {
                    path: n.path.clone(),
                    reason: n.reason.as_str().into(),
                })
                .collect(),
            not_shipped_count: v.not_shipped_count,
            last_progress: v.last_progress.clone(),
            round: v.round,
            created_at: v.created_at.to_rfc3339(),
            updated_at: v.updated_at.to_rfc3339(),
        }
    }

    /// [`Self::state`] as a [`DelegationState`] (`None` for a state this version does not
    /// know).
    pub fn delegation_state(&self) -> Option<DelegationState> {
        DelegationState::parse(&self.state)
    }
}

impl Outcome {
    /// The outcome of an engine [`engine::Outcome`], with its sentence.
    pub fn of(o: &engine::Outcome) -> Self {
        use engine::Outcome as O;
        let (message, snapshot, error) = match o {
            O::Running => ("still running".to_owned(), None, None),
            O::Completed => ("completed".to_owned(), None, None),
            O::Staged => (
                "completed; the result is staged: apply or discard it".to_owned(),
                None,
                None,
            ),
            O::NotApplied { snapshot, reason } => (
                match snapshot {
                    Some(s) => format!(
                        "the result was NOT applied ({}); snapshot {s} is kept: fix the cause, then apply it again or discard it",
                        reason.message
                    ),
                    None => format!(
                        "the result was NOT applied ({}); the executor was not acknowledged and keeps it",
                        reason.message
                    ),
                },
                snapshot.as_ref(),
                Some(reason),
            ),
            O::Unreachable(e) => ("the executor could not be reached".to_owned(), None, Some(e)),
            O::Failed { state, error } => (
                match state {
                    DelegationState::Cancelled => "the delegation was cancelled".to_owned(),
                    DelegationState::Expired => "the lease expired".to_owned(),
                    _ => "the delegation failed".to_owned(),
                },
                None,
                error.as_ref(),
            ),
        };
        Outcome {
            status: o.as_str().into(),
            message,
            snapshot_id: snapshot.map(|s| s.as_str().into()),
            error: error.cloned(),
        }
    }
}

impl Snapshot {
    /// The entry of snapshot `s` of delegation `v`.
    pub fn of(v: &DelegationView, s: &engine::SnapshotRecord) -> Self {
        Snapshot {
            id: s.id.as_str().into(),
            delegation_id: v.request.id.as_str().into(),
            summary: s.summary.clone(),
            highlights: s.highlights.clone(),
            status: s.status.as_str().into(),
            error: match &s.status {
                SnapshotStatus::Failed(e) => Some(e.clone()),
                _ => s.error.clone(),
            },
            recommended: s.recommended,
            metadata: s.metadata.clone(),
            created_at: s.received_at.to_rfc3339(),
            applied_at: s.applied_at.map(|t| t.to_rfc3339()),
            left_out: s.left_out.clone(),
            changed: s.changed.clone(),
        }
    }
}
