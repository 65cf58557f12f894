//! `POST /delegate`'s body.

use std::path::PathBuf;

use awcp_proto::engine::SnapshotMode;
use awcp_proto::{
    AccessMode, Auth, AuthType, DelegationId, Dialect, ResourceName, TaskSpec, TransportKind,
};
use awcp_transports::ResourceSpec;
use serde::{Deserialize, Serialize};

use crate::delegator::DelegateParams;

/// `POST /delegate`'s body: the reference daemon's fields and ours (`transport`, `dialect`,
/// `allowSensitive`, `delegationId`). Build it with [`DelegateBody::from_params`]; the daemon
/// reads it with [`DelegateBody::into_params`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DelegateBody {
    /// The executor's AWCP URL.
    #[serde(default)]
    pub executor_url: Option<String>,
    /// The executor's AWCP URL under the reference's other name, read when `executorUrl` is
    /// absent (never written).
    #[serde(default, skip_serializing)]
    pub peer_url: Option<String>,
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
    /// Keep the delegation open for more rounds (`POST /delegation/{id}/continue`, `…/close`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_open: Option<bool>,
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
    #[serde(deserialize_with = "super::nullable")]
    pub description: String,
    /// The full instructions.
    #[serde(deserialize_with = "super::nullable")]
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
            peer_url: None,
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
            keep_open: p.keep_open.then_some(true),
        })
    }

    /// The delegation this body asks for, or what is wrong with it (naming the field).
    pub fn into_params(self) -> Result<DelegateParams, String> {
        let peer = self
            .executor_url
            .or(self.peer_url)
            .ok_or("executorUrl is required")?;
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
            keep_open: self.keep_open.unwrap_or(false),
        })
    }
}
