//! The daemon API's JSON as types: what the daemon serves, what [`super::DaemonClient`]
//! returns, and the `POST /delegate` body both sides read and write. One definition for the
//! server and the client, so the two cannot drift apart.
//!
//! Enumerations (states, modes, outcome statuses) are kept as the strings the API carries, so
//! a client reads the records of a newer daemon too; [`Record::delegation_state`] and
//! [`Outcome::is_success`] interpret the common ones. Every response type reads missing
//! fields as their defaults and ignores unknown ones.

use std::collections::BTreeMap;
use std::path::PathBuf;

use awcp_proto::engine::delegator::{self as engine, DelegationView, SnapshotStatus};
use awcp_proto::engine::SnapshotMode;
use awcp_proto::{
    AccessMode, Auth, AuthType, DelegationId, DelegationState, DelegatorEvent, Dialect, ErrorInfo,
    ResourceName, TaskSpec, TransportKind,
};
use awcp_transports::ResourceSpec;
use serde::{Deserialize, Serialize};

use crate::delegator::{DelegateParams, Transfer};

/// `POST /delegate`'s body: the reference daemon's fields and ours (`transport`, `dialect`,
/// `allowSensitive`, `delegationId`). Build it with [`DelegateBody::from_params`]; the daemon
/// reads it with [`DelegateBody::into_params`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DelegateBody {
    /// The executor's AWCP URL (the reference also says `peerUrl`).
    #[serde(alias = "peerUrl", default)]
    pub executor_url: Option<String>,
    /// The directories lent.
    #[serde(default)]
    pub environment: Option<DelegateEnvironment>,
    /// What the executor is asked to do.
    #[serde(default)]
    pub task: Option<Task>,
    /// The lease, in seconds (default 3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
    /// `ro` or `rw` (default `rw`): the mode of resources that give none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_mode: Option<String>,
    /// `auto`, `staged` or `discard` (default `auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_mode: Option<String>,
    /// `archive` (default) or `sshfs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// `seed` for a peer speaking the seed dialect; anything else is the reference's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dialect: Option<String>,
    /// Credentials for the executor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<DelegateAuth>,
    /// Lend files that look like secrets (`.env`, keys) too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_sensitive: Option<bool>,
    /// A delegation id chosen by the caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation_id: Option<String>,
}

/// `environment` of a [`DelegateBody`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelegateEnvironment {
    /// The resources lent.
    #[serde(default)]
    pub resources: Vec<DelegateResource>,
}

/// One resource of a [`DelegateBody`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelegateResource {
    /// Its name at the executor.
    #[serde(default)]
    pub name: Option<String>,
    /// `fs` (the only kind).
    #[serde(rename = "type", default = "fs")]
    pub kind: String,
    /// The local directory.
    #[serde(default)]
    pub source: Option<String>,
    /// `ro` or `rw`; the body's `accessMode` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

fn fs() -> String {
    "fs".into()
}

/// `auth` of a [`DelegateBody`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelegateAuth {
    /// `bearer` (default) or `api-key`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub auth_type: Option<String>,
    /// The credential.
    #[serde(default)]
    pub credential: Option<String>,
}

/// A task: what the executor is asked to do.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Task {
    /// One line for people and logs.
    pub description: String,
    /// The full instructions.
    pub prompt: String,
}

impl DelegateBody {
    /// The body that asks the daemon for `p`. A resource directory that is not valid UTF-8
    /// cannot travel in JSON: that is an error naming it.
    pub fn from_params(p: &DelegateParams) -> Result<Self, String> {
        let mut resources = Vec::with_capacity(p.resources.len());
        for r in &p.resources {
            let source = r.source_path.to_str().ok_or_else(|| {
                format!(
                    "{}: the daemon API carries paths as UTF-8 text",
                    r.source_path.display()
                )
            })?;
            resources.push(DelegateResource {
                name: Some(r.name.as_str().to_owned()),
                kind: fs(),
                source: Some(source.to_owned()),
                mode: Some(r.mode.as_str().to_owned()),
            });
        }
        Ok(DelegateBody {
            executor_url: Some(p.peer.clone()),
            environment: Some(DelegateEnvironment { resources }),
            task: Some(Task {
                description: p.task.description.clone(),
                prompt: p.task.prompt.clone(),
            }),
            ttl_seconds: Some(p.ttl_seconds),
            access_mode: Some(p.access_mode.as_str().to_owned()),
            snapshot_mode: Some(p.snapshot_mode.as_str().to_owned()),
            transport: Some(p.transport.as_str().to_owned()),
            dialect: (p.dialect == Dialect::Seed).then(|| "seed".to_owned()),
            auth: p.auth.as_ref().map(|a| DelegateAuth {
                auth_type: Some(a.auth_type.as_str().to_owned()),
                credential: Some(a.credential.clone()),
            }),
            allow_sensitive: Some(p.allow_sensitive),
            delegation_id: p.id.as_ref().map(|i| i.as_str().to_owned()),
        })
    }

    /// The delegation this body asks for, or what is wrong with it (naming the field).
    pub fn into_params(self) -> Result<DelegateParams, String> {
        let peer = self.executor_url.ok_or("executorUrl is required")?;
        let task = self.task.ok_or("task is required")?;
        if task.description.is_empty() {
            return Err("task.description is required".into());
        }
        if task.prompt.is_empty() {
            return Err("task.prompt is required".into());
        }
        let access_mode = match self.access_mode.as_deref() {
            None => AccessMode::Rw,
            Some(s) => AccessMode::parse(s).ok_or("accessMode must be ro or rw")?,
        };
        let list = self
            .environment
            .ok_or("environment.resources is required")?
            .resources;
        let mut resources = Vec::with_capacity(list.len());
        for (i, r) in list.into_iter().enumerate() {
            let name = r
                .name
                .ok_or(format!("environment.resources[{i}].name is required"))?;
            let name = ResourceName::new(name)
                .map_err(|e| format!("environment.resources[{i}].name: {e}"))?;
            let source = r
                .source
                .ok_or(format!("environment.resources[{i}].source is required"))?;
            let mode = match r.mode.as_deref() {
                None => access_mode,
                Some(s) => AccessMode::parse(s)
                    .ok_or(format!("environment.resources[{i}].mode must be ro or rw"))?,
            };
            resources.push(ResourceSpec {
                name,
                source_path: PathBuf::from(source),
                mode,
            });
        }
        if resources.is_empty() {
            return Err("environment.resources must not be empty".into());
        }
        let snapshot_mode = match self.snapshot_mode.as_deref() {
            None => SnapshotMode::Auto,
            Some(s) => {
                SnapshotMode::parse(s).ok_or("snapshotMode must be auto, staged or discard")?
            }
        };
        let ttl_seconds = match self.ttl_seconds {
            None => 3600,
            Some(0) => return Err("ttlSeconds must be a positive integer".into()),
            Some(t) => t,
        };
        let auth = match self.auth {
            Some(a) => Some(Auth {
                auth_type: AuthType::parse(a.auth_type.as_deref().unwrap_or("bearer")),
                credential: a.credential.ok_or("auth.credential is required")?,
                metadata: Default::default(),
            }),
            None => None,
        };
        let id = match self.delegation_id {
            Some(s) => Some(DelegationId::new(s).map_err(|e| format!("delegationId: {e}"))?),
            None => None,
        };
        Ok(DelegateParams {
            peer,
            task: TaskSpec {
                description: task.description,
                prompt: task.prompt,
            },
            resources,
            ttl_seconds,
            access_mode,
            snapshot_mode,
            auth,
            dialect: match self.dialect.as_deref() {
                Some("seed") => Dialect::Seed,
                _ => Dialect::Reference,
            },
            transport: self
                .transport
                .as_deref()
                .map(TransportKind::parse)
                .unwrap_or(TransportKind::Archive),
            id,
            allow_sensitive: self.allow_sensitive.unwrap_or(false),
        })
    }
}

/// `POST /delegate`'s answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Delegated {
    /// The new delegation's id.
    pub delegation_id: String,
}

/// A delegation's record (`GET /delegation/{id}`, `…/wait`), in the reference daemon's shape
/// with our additions (`outcome`, `ended`, `warnings`, `notShipped`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Record {
    /// The delegation id.
    pub id: String,
    /// Its state (WIRE.md §8.1: `created` … `completed`, `error`, `cancelled`, `expired`).
    pub state: String,
    /// The executor (the reference's name).
    pub peer_url: String,
    /// The executor.
    pub executor_url: String,
    /// What was lent.
    pub environment: Environment,
    /// The task.
    pub task: Task,
    /// The lease asked for.
    pub lease_config: LeaseConfig,
    /// The lease granted, once there is one.
    pub active_lease: Option<ActiveLease>,
    /// Where the executor works, if it said.
    pub executor_work_dir: Option<WorkDir>,
    /// What the executor allowed, if it said.
    pub executor_constraints: Option<Constraints>,
    /// What happens to a snapshot when it arrives.
    pub snapshot_policy: SnapshotPolicy,
    /// The snapshots received.
    pub snapshots: Vec<Snapshot>,
    /// The snapshot written into the workspace, if one was.
    pub applied_snapshot_id: Option<String>,
    /// The executor's summary of its work.
    pub result: Option<TaskResult>,
    /// Why it failed, if it did.
    pub error: Option<ErrorInfo>,
    /// How it turned out, in one place.
    pub outcome: Outcome,
    /// Whether it has ended (the record no longer changes but through apply/discard).
    pub ended: bool,
    /// Warnings for the user (a shortened lease, files not lent).
    pub warnings: Vec<String>,
    /// Files that were not lent, and why (at most 100 listed).
    pub not_shipped: Vec<NotShipped>,
    /// How many files were not lent in all.
    pub not_shipped_count: u64,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
}

/// `environment` of a [`Record`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Environment {
    /// The resources lent.
    pub resources: Vec<Resource>,
}

/// One resource of a [`Record`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Resource {
    /// Its name at the executor.
    pub name: String,
    /// `fs`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `ro` or `rw`.
    pub mode: String,
}

/// `leaseConfig` of a [`Record`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LeaseConfig {
    /// The lease asked for, in seconds.
    pub ttl_seconds: u64,
    /// `ro` or `rw`.
    pub access_mode: String,
}

/// `activeLease` of a [`Record`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ActiveLease {
    /// RFC 3339.
    pub expires_at: String,
    /// `ro` or `rw`.
    pub access_mode: String,
}

/// `executorWorkDir` of a [`Record`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkDir {
    /// The executor's path.
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
    pub mode: String,
}

/// `result` of a [`Record`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskResult {
    /// The executor's summary.
    pub summary: String,
    /// Points it highlighted.
    pub highlights: Vec<String>,
}

/// One file not lent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NotShipped {
    /// `resource/path`.
    pub path: String,
    /// Why (`symlink`, `special file`, `ignored`, `skipped directory`).
    pub reason: String,
}

/// `outcome` of a [`Record`]: how the delegation turned out.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Outcome {
    /// `completed`, `staged`, `not_applied`, `unreachable`, `failed` or `running`.
    pub status: String,
    /// One sentence for a person.
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
    pub id: String,
    /// The delegation it belongs to.
    pub delegation_id: String,
    /// The executor's summary.
    pub summary: String,
    /// Points it highlighted.
    pub highlights: Vec<String>,
    /// `pending`, `in_flight`, `applied`, `discarded` or `failed`.
    pub status: String,
    /// Why it failed or was not applied.
    pub error: Option<ErrorInfo>,
    /// Whether the executor recommends it.
    pub recommended: bool,
    /// The executor's metadata (`changedFiles`, sizes…).
    pub metadata: BTreeMap<String, serde_json::Value>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339, once applied.
    pub applied_at: Option<String>,
}

/// `GET /delegation/{id}/snapshots`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Snapshots {
    /// Oldest first.
    pub snapshots: Vec<Snapshot>,
}

/// `GET /delegations`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Delegations {
    /// How many have not reached a terminal state.
    pub active_delegations: usize,
    /// All the daemon knows.
    pub delegations: Vec<Summary>,
}

/// One delegation in [`Delegations`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Summary {
    /// The delegation id.
    pub id: String,
    /// Its state.
    pub state: String,
    /// The executor.
    pub executor_url: String,
    /// RFC 3339.
    pub created_at: String,
    /// The task's description.
    pub description: String,
}

/// One live event of a delegation (`GET /delegation/{id}/events`, one SSE `data:` object
/// each), as `awcp` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LiveEvent {
    /// The delegation entered `state`.
    State {
        /// The new state.
        state: String,
    },
    /// The executor reported progress.
    Progress {
        /// What it said.
        #[serde(default)]
        message: Option<String>,
        /// Its progress figure, if any.
        #[serde(default)]
        progress: Option<f64>,
    },
    /// A snapshot arrived or changed status.
    Snapshot {
        /// Which.
        #[serde(rename = "snapshotId")]
        snapshot_id: String,
        /// Its status.
        status: String,
    },
    /// Bytes moved (an archive sent, a snapshot received).
    Transfer {
        /// What moved.
        what: String,
        /// How many bytes.
        bytes: u64,
    },
    /// The executor's event stream broke; the delegator reconnects.
    ConnectionLost {
        /// Why it broke.
        #[serde(default)]
        reason: Option<String>,
        /// When the next attempt is, in milliseconds.
        #[serde(rename = "retryInMs", default)]
        retry_in_ms: u64,
    },
    /// The executor broke the protocol.
    PeerMisbehaved {
        /// What it did.
        reason: String,
    },
    /// The delegation ended (the last event of a stream).
    Ended {
        /// Its final state.
        state: String,
        /// Why it failed, if it did.
        #[serde(default)]
        error: Option<ErrorInfo>,
    },
    /// An event a newer daemon sends that this client does not know.
    #[serde(other)]
    Unknown,
}

impl LiveEvent {
    /// The live event of an engine event, with the delegation it is about; `None` for what
    /// is not news to a person (a forgotten record).
    pub fn of(ev: &DelegatorEvent) -> Option<(&DelegationId, LiveEvent)> {
        Some(match ev {
            DelegatorEvent::StateChanged { id, to, .. } => (
                id,
                LiveEvent::State {
                    state: to.as_str().into(),
                },
            ),
            DelegatorEvent::Progress {
                id,
                message,
                progress,
            } => (
                id,
                LiveEvent::Progress {
                    message: message.clone(),
                    progress: *progress,
                },
            ),
            DelegatorEvent::Snapshot {
                id,
                snapshot_id,
                status,
            } => (
                id,
                LiveEvent::Snapshot {
                    snapshot_id: snapshot_id.as_str().into(),
                    status: status.as_str().into(),
                },
            ),
            DelegatorEvent::ConnectionLost {
                id,
                reason,
                retry_in,
            } => (
                id,
                LiveEvent::ConnectionLost {
                    reason: reason.clone(),
                    retry_in_ms: u64::try_from(retry_in.as_millis()).unwrap_or(u64::MAX),
                },
            ),
            DelegatorEvent::PeerMisbehaved { id, reason } => (
                id,
                LiveEvent::PeerMisbehaved {
                    reason: format!("{reason:?}"),
                },
            ),
            DelegatorEvent::Ended {
                id, state, error, ..
            } => (id, LiveEvent::ended(*state, error.as_ref())),
            DelegatorEvent::Forgotten { .. } => return None,
        })
    }

    /// The end of a delegation in `state`.
    pub fn ended(state: DelegationState, error: Option<&ErrorInfo>) -> Self {
        LiveEvent::Ended {
            state: state.as_str().into(),
            error: error.cloned(),
        }
    }

    /// A transfer as a live event.
    pub fn transfer(t: &Transfer) -> Self {
        LiveEvent::Transfer {
            what: t.what.to_string(),
            bytes: t.bytes,
        }
    }
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What the CLI and MCP send is what the daemon reads back, field for field.
    #[test]
    fn a_delegate_body_carries_every_parameter_to_the_daemon() {
        let mut p = DelegateParams::new("http://127.0.0.1:1/awcp", "/tmp/ws", "do it")
            .description("one line");
        p.ttl_seconds = 77;
        p.access_mode = AccessMode::Ro;
        p.resources[0].mode = AccessMode::Ro;
        p.snapshot_mode = SnapshotMode::Staged;
        p.transport = TransportKind::Sshfs;
        p.dialect = Dialect::Seed;
        p.allow_sensitive = true;
        p.id = Some(DelegationId::new("dlg_fixed").unwrap());
        p.auth = Some(Auth {
            auth_type: AuthType::ApiKey,
            credential: "k".into(),
            metadata: Default::default(),
        });
        let text = serde_json::to_string(&DelegateBody::from_params(&p).unwrap()).unwrap();
        let back = serde_json::from_str::<DelegateBody>(&text)
            .unwrap()
            .into_params()
            .unwrap();
        assert_eq!(format!("{back:?}"), format!("{p:?}"));
    }

    /// The reference daemon's body (its `peerUrl`, no optional fields) is read with the
    /// defaults; what is missing or wrong is named.
    #[test]
    fn a_reference_body_gets_the_defaults_and_bad_fields_are_named() {
        let v = json!({"peerUrl": "http://e/awcp", "task": {"description": "d", "prompt": "p"},
            "environment": {"resources": [{"name": "w", "type": "fs", "source": "/w"}]},
            "unknownField": 1, "auth": null});
        let p = serde_json::from_value::<DelegateBody>(v.clone())
            .unwrap()
            .into_params()
            .unwrap();
        assert_eq!(
            (
                p.peer.as_str(),
                p.ttl_seconds,
                p.access_mode,
                p.snapshot_mode
            ),
            ("http://e/awcp", 3600, AccessMode::Rw, SnapshotMode::Auto)
        );
        assert!(p.auth.is_none() && !p.allow_sensitive);
        let err = |patch: serde_json::Value| {
            let mut b = v.clone();
            for (k, x) in patch.as_object().unwrap() {
                b[k] = x.clone();
            }
            serde_json::from_value::<DelegateBody>(b)
                .map_err(|e| e.to_string())
                .and_then(DelegateBody::into_params)
                .unwrap_err()
        };
        assert_eq!(
            err(json!({"ttlSeconds": 0})),
            "ttlSeconds must be a positive integer"
        );
        assert_eq!(
            err(json!({"accessMode": "x"})),
            "accessMode must be ro or rw"
        );
        assert_eq!(
            err(json!({"environment": {"resources": []}})),
            "environment.resources must not be empty"
        );
        assert_eq!(
            err(json!({"auth": {"type": "bearer"}})),
            "auth.credential is required"
        );
        assert!(err(json!({"ttlSeconds": "soon"})).contains("invalid type"));
    }

    /// A record, list or event from another version of the daemon still reads: missing fields
    /// take their defaults, unknown ones and unknown event types are skipped.
    #[test]
    fn answers_of_another_daemon_version_still_read() {
        let r: Record = serde_json::from_value(json!({"id": "dlg_1", "state": "running",
            "outcome": {"status": "running"}, "somethingNew": [1, 2]}))
        .unwrap();
        assert_eq!(r.delegation_state(), Some(DelegationState::Running));
        assert!(!r.outcome.is_success() && r.snapshots.is_empty());
        let e: LiveEvent = serde_json::from_value(json!({"type": "teleported", "x": 1})).unwrap();
        assert_eq!(e, LiveEvent::Unknown);
        let e: LiveEvent =
            serde_json::from_value(json!({"type": "connection_lost", "retryInMs": 1500})).unwrap();
        assert_eq!(
            e,
            LiveEvent::ConnectionLost {
                reason: None,
                retry_in_ms: 1500
            }
        );
    }

    /// The events keep the wire names `awcp` and older clients read.
    #[test]
    fn live_events_keep_their_wire_names() {
        let v = serde_json::to_value(LiveEvent::Snapshot {
            snapshot_id: "snap_1".into(),
            status: "pending".into(),
        })
        .unwrap();
        assert_eq!(
            v,
            json!({"type": "snapshot", "snapshotId": "snap_1", "status": "pending"})
        );
        let v = serde_json::to_value(LiveEvent::ConnectionLost {
            reason: Some("reset".into()),
            retry_in_ms: 2000,
        })
        .unwrap();
        assert_eq!(
            v,
            json!({"type": "connection_lost", "reason": "reset", "retryInMs": 2000})
        );
    }
}
