//! Canonical, dialect-neutral wire types (WIRE.md §2–§4).
//!
//! These are what the engines work with. [`super::decode`] builds them from either dialect and
//! [`super::encode`] writes them in the dialect the peer speaks.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::ErrorInfo;
use crate::id::{DelegationId, ResourceName};
use crate::time::Timestamp;

mod event;
mod handle;

pub use self::event::*;
pub use self::handle::*;

/// The protocol version string every message carries.
pub const PROTOCOL_VERSION: &str = "1";

/// Which shape of the protocol a peer speaks (WIRE.md §0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Dialect {
    /// The seed v1 spec: INVITE `workspace`, START `workDir`, `done.resultBase64`, flat ZIP.
    Seed,
    /// The live TypeScript reference: INVITE `environment`, START `transportHandle`,
    /// `snapshot` events, per-resource ZIP.
    #[default]
    Reference,
}

/// Read-only or read-write access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum AccessMode {
    /// Read-only: the executor must not change the delegator's files.
    Ro,
    /// Read-write (the default).
    #[default]
    Rw,
}

impl AccessMode {
    /// `"ro"` or `"rw"`.
    pub fn as_str(self) -> &'static str {
        match self {
            AccessMode::Ro => "ro",
            AccessMode::Rw => "rw",
        }
    }

    /// Parses `"ro"`/`"rw"`.
    pub fn parse(s: &str) -> Option<AccessMode> {
        match s {
            "ro" => Some(AccessMode::Ro),
            "rw" => Some(AccessMode::Rw),
            _ => None,
        }
    }

    /// The more restrictive of the two.
    pub fn min(self, other: AccessMode) -> AccessMode {
        if self == AccessMode::Ro || other == AccessMode::Ro {
            AccessMode::Ro
        } else {
            AccessMode::Rw
        }
    }
}

impl Serialize for AccessMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The data-plane transport of a delegation.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TransportKind {
    /// ZIP archive, inline base64 or fetched by URL.
    Archive,
    /// SSHFS mount of the delegator's export view.
    Sshfs,
    /// Pre-signed download/upload URLs.
    Storage,
    /// Git clone and push.
    Git,
    /// A transport this crate does not know, kept verbatim.
    Other(String),
}

impl TransportKind {
    /// The wire string.
    pub fn as_str(&self) -> &str {
        match self {
            TransportKind::Archive => "archive",
            TransportKind::Sshfs => "sshfs",
            TransportKind::Storage => "storage",
            TransportKind::Git => "git",
            TransportKind::Other(s) => s,
        }
    }

    /// Parses a wire string; unknown names become [`TransportKind::Other`].
    pub fn parse(s: &str) -> TransportKind {
        match s {
            "archive" => TransportKind::Archive,
            "sshfs" => TransportKind::Sshfs,
            "storage" => TransportKind::Storage,
            "git" => TransportKind::Git,
            other => TransportKind::Other(other.to_owned()),
        }
    }

    /// Whether results flow back live (no snapshot transfer is needed).
    pub fn is_live(&self) -> bool {
        matches!(self, TransportKind::Sshfs)
    }
}

impl Serialize for TransportKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What the delegator asks the executor to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TaskSpec {
    /// Short label for logs and lists.
    pub description: String,
    /// Full instructions.
    pub prompt: String,
}

/// The lease the delegator requests in INVITE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRequest {
    /// Requested lease length in seconds.
    pub ttl_seconds: u64,
    /// Requested access.
    pub access_mode: AccessMode,
}

/// One exported directory (INVITE `environment.resources[]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Resource {
    /// Directory name on the executor.
    pub name: ResourceName,
    /// Resource type; `"fs"` is the only one defined.
    #[serde(rename = "type")]
    pub kind: String,
    /// Access to this resource.
    pub mode: AccessMode,
}

/// The credential type of INVITE `auth`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AuthType {
    /// `api_key`
    ApiKey,
    /// `bearer`
    Bearer,
    /// `oauth2`
    OAuth2,
    /// `custom`
    Custom,
    /// Anything else, kept verbatim.
    Other(String),
}

impl AuthType {
    /// The wire string.
    pub fn as_str(&self) -> &str {
        match self {
            AuthType::ApiKey => "api_key",
            AuthType::Bearer => "bearer",
            AuthType::OAuth2 => "oauth2",
            AuthType::Custom => "custom",
            AuthType::Other(s) => s,
        }
    }

    /// Parses a wire string.
    pub fn parse(s: &str) -> AuthType {
        match s {
            "api_key" => AuthType::ApiKey,
            "bearer" => AuthType::Bearer,
            "oauth2" => AuthType::OAuth2,
            "custom" => AuthType::Custom,
            other => AuthType::Other(other.to_owned()),
        }
    }
}

impl Serialize for AuthType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// INVITE `auth`: a credential for the executor. `Debug` never prints the credential.
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct Auth {
    /// Credential type.
    #[serde(rename = "type")]
    pub auth_type: AuthType,
    /// The secret.
    pub credential: String,
    /// Extra key/value pairs.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

impl core::fmt::Debug for Auth {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Auth")
            .field("auth_type", &self.auth_type)
            .field("credential", &"<redacted>")
            .field("metadata", &self.metadata)
            .finish()
    }
}

/// Protocol extensions this implementation understands, announced in INVITE and agreed in
/// ACCEPT under the extra key `features` (ignored by reference peers), by their wire names
/// (see [`Feature`] for the typed form).
pub mod feature {
    /// Snapshots may carry only changed files plus a list of deleted paths.
    pub const DELTA_SNAPSHOTS: &str = "delta-snapshots";
    /// Archives and snapshots may be fetched by URL instead of inline base64.
    pub const ARCHIVE_URL: &str = "archive-url";
    /// The delegation may go on for more rounds (CONTINUE, CLOSE, `round_done`; WIRE.md
    /// §17): offered by a delegator that wants to keep the delegation open, agreed by an
    /// executor that keeps the work directory between rounds.
    pub const MULTI_ROUND: &str = "multi-round";
    /// A `git` delegation of one resource is laid out at the repository's root (the
    /// resource's files, not `<name>/…`), so its branch reads like the repository it may come
    /// from (WIRE.md §11.6). Without it, the dialect's layout (a reference executor tells its
    /// agent to work in `<workPath>/<name>`).
    pub const GIT_ROOT_LAYOUT: &str = "git-root-layout";
}

/// One protocol extension of the `features` lists of INVITE and ACCEPT: one this
/// implementation knows, or any other name a peer sent (kept as it came, so a list survives a
/// decode and encode unchanged). Two features are equal, ordered and hashed by their wire
/// names (so `Feature::Other("archive-url".into()) == Feature::ArchiveUrl`), compare equal to
/// that name (`f == "archive-url"`), and are written and read as it (also in records).
#[derive(Clone, Debug)]
pub enum Feature {
    /// [`feature::DELTA_SNAPSHOTS`]: snapshots may carry only changed files plus a list of
    /// deleted paths.
    DeltaSnapshots,
    /// [`feature::ARCHIVE_URL`]: archives and snapshots may be fetched by URL instead of
    /// inline base64.
    ArchiveUrl,
    /// [`feature::MULTI_ROUND`]: the delegation may go on for more rounds.
    MultiRound,
    /// [`feature::GIT_ROOT_LAYOUT`]: a one-resource git delegation's files are at the root.
    GitRootLayout,
    /// An extension this implementation does not know, by its wire name.
    Other(String),
}

impl Feature {
    /// The feature of this wire name.
    pub fn new(name: &str) -> Feature {
        Feature::new_known(name).unwrap_or_else(|| Feature::Other(name.to_owned()))
    }

    /// The features of `offered` that are also in `supported`, in `offered`'s order: what
    /// the two sides agree to use (the executor's admission of an INVITE, the delegator's
    /// reading of an ACCEPT).
    pub fn agreed(offered: &[Feature], supported: &[Feature]) -> Vec<Feature> {
        offered
            .iter()
            .filter(|f| supported.contains(f))
            .cloned()
            .collect()
    }

    fn new_known(name: &str) -> Option<Feature> {
        match name {
            feature::DELTA_SNAPSHOTS => Some(Feature::DeltaSnapshots),
            feature::ARCHIVE_URL => Some(Feature::ArchiveUrl),
            feature::MULTI_ROUND => Some(Feature::MultiRound),
            feature::GIT_ROOT_LAYOUT => Some(Feature::GitRootLayout),
            _ => None,
        }
    }

    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Feature::DeltaSnapshots => feature::DELTA_SNAPSHOTS,
            Feature::ArchiveUrl => feature::ARCHIVE_URL,
            Feature::MultiRound => feature::MULTI_ROUND,
            Feature::GitRootLayout => feature::GIT_ROOT_LAYOUT,
            Feature::Other(name) => name,
        }
    }
}

impl From<&str> for Feature {
    fn from(name: &str) -> Feature {
        Feature::new(name)
    }
}

impl From<String> for Feature {
    fn from(name: String) -> Feature {
        match Feature::new_known(&name) {
            Some(known) => known,
            None => Feature::Other(name),
        }
    }
}

impl PartialEq<str> for Feature {
    fn eq(&self, name: &str) -> bool {
        self.as_str() == name
    }
}

impl PartialEq<&str> for Feature {
    fn eq(&self, name: &&str) -> bool {
        self.as_str() == *name
    }
}

impl PartialEq for Feature {
    fn eq(&self, other: &Feature) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Feature {}

impl std::hash::Hash for Feature {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialOrd for Feature {
    fn partial_cmp(&self, other: &Feature) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Feature {
    fn cmp(&self, other: &Feature) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl AsRef<str> for Feature {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for Feature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Feature {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Feature {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Feature, D::Error> {
        String::deserialize(d).map(Feature::from)
    }
}

/// INVITE (delegator → executor).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invite {
    /// The delegation id.
    pub delegation_id: DelegationId,
    /// The task.
    pub task: TaskSpec,
    /// The requested lease.
    pub lease: LeaseRequest,
    /// Exported resources. An \[S\] INVITE decodes to one resource named `workspace` with the
    /// lease's access mode.
    pub resources: Vec<Resource>,
    /// \[S\] `workspace.exportName` (informational).
    pub export_name: Option<String>,
    /// \[R\] requested retention of the finished assignment, in milliseconds.
    pub retention_ms: Option<u64>,
    /// `requirements.transport`.
    pub transport: Option<TransportKind>,
    /// `auth`.
    pub auth: Option<Auth>,
    /// Protocol extensions the delegator supports.
    pub features: Vec<Feature>,
}

/// `executorConstraints.sandboxProfile`: self-declared limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxProfile {
    /// Tools are restricted to the work directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd_only: Option<bool>,
    /// Network access allowed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_network: Option<bool>,
    /// Command execution allowed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_exec: Option<bool>,
}

/// `executorConstraints`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorConstraints {
    /// The access mode the executor accepted (may be a downgrade).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted_access_mode: Option<AccessMode>,
    /// The longest lease the executor allows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ttl_seconds: Option<u64>,
    /// Self-declared sandbox.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox_profile: Option<SandboxProfile>,
}

/// ACCEPT (executor → delegator).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accept {
    /// The delegation id.
    pub delegation_id: DelegationId,
    /// `executorWorkDir.path` (informational).
    pub work_dir: String,
    /// `executorConstraints`.
    pub constraints: Option<ExecutorConstraints>,
    /// \[R\] `retentionMs`.
    pub retention_ms: Option<u64>,
    /// Extensions the executor agreed to use (subset of the INVITE's).
    pub features: Vec<Feature>,
}

/// START `lease`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActiveLease {
    /// Absolute lease end.
    pub expires_at: Timestamp,
    /// Effective access.
    pub access_mode: AccessMode,
}

/// START (delegator → executor).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Start {
    /// The delegation id.
    pub delegation_id: DelegationId,
    /// The lease.
    pub lease: ActiveLease,
    /// Transport data and credentials (`transportHandle` \[R\] / `workDir` \[S\]).
    pub handle: TransportHandle,
}

/// DONE (internal; on the wire only in \[L\]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Done {
    /// The delegation id.
    pub delegation_id: DelegationId,
    /// What was done.
    pub final_summary: String,
    /// Files worth looking at.
    pub highlights: Vec<String>,
    /// Extra notes.
    pub notes: Option<String>,
}

/// ERROR (either direction).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorMessage {
    /// The delegation id.
    pub delegation_id: DelegationId,
    /// Code, message, hint.
    pub error: ErrorInfo,
}

/// CONTINUE (delegator → executor; WIRE.md §17): the next round of a multi-round
/// delegation, in the same work directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Continue {
    /// The delegation id.
    pub delegation_id: DelegationId,
    /// The round's instructions (the full prompt, not a delta).
    pub task: TaskSpec,
    /// The round's number (2 for the first CONTINUE).
    pub round: u64,
    /// The round's lease (absent from the reference's delegator: the lease goes on).
    pub lease: Option<ActiveLease>,
}

/// CLOSE (delegator → executor; WIRE.md §17): ends a multi-round delegation between rounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Close {
    /// The delegation id.
    pub delegation_id: DelegationId,
}

/// A control-plane message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// INVITE
    Invite(Invite),
    /// ACCEPT
    Accept(Accept),
    /// START
    Start(Start),
    /// DONE (\[L\] only on the wire)
    Done(Done),
    /// ERROR
    Error(ErrorMessage),
    /// CONTINUE (multi-round)
    Continue(Continue),
    /// CLOSE (multi-round)
    Close(Close),
}

impl Message {
    /// The archive a START carries (inline text, URL or local file), if it is a START with
    /// an archive handle.
    pub fn start_archive(&self) -> Option<&ArchiveData> {
        match self {
            Message::Start(st) => match &st.handle {
                TransportHandle::Archive(a) => Some(&a.data),
                TransportHandle::Sshfs(_)
                | TransportHandle::Storage(_)
                | TransportHandle::Git(_) => None,
            },
            Message::Invite(_)
            | Message::Accept(_)
            | Message::Done(_)
            | Message::Error(_)
            | Message::Continue(_)
            | Message::Close(_) => None,
        }
    }

    /// [`Message::start_archive`], to change.
    pub fn start_archive_mut(&mut self) -> Option<&mut ArchiveData> {
        match self {
            Message::Start(st) => match &mut st.handle {
                TransportHandle::Archive(a) => Some(&mut a.data),
                TransportHandle::Sshfs(_)
                | TransportHandle::Storage(_)
                | TransportHandle::Git(_) => None,
            },
            Message::Invite(_)
            | Message::Accept(_)
            | Message::Done(_)
            | Message::Error(_)
            | Message::Continue(_)
            | Message::Close(_) => None,
        }
    }

    /// The delegation the message is about.
    pub fn delegation_id(&self) -> &DelegationId {
        match self {
            Message::Invite(m) => &m.delegation_id,
            Message::Accept(m) => &m.delegation_id,
            Message::Start(m) => &m.delegation_id,
            Message::Done(m) => &m.delegation_id,
            Message::Error(m) => &m.delegation_id,
            Message::Continue(m) => &m.delegation_id,
            Message::Close(m) => &m.delegation_id,
        }
    }

    /// The `type` string.
    pub fn type_str(&self) -> &'static str {
        match self {
            Message::Invite(_) => "INVITE",
            Message::Accept(_) => "ACCEPT",
            Message::Start(_) => "START",
            Message::Done(_) => "DONE",
            Message::Error(_) => "ERROR",
            Message::Continue(_) => "CONTINUE",
            Message::Close(_) => "CLOSE",
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_feature_is_its_wire_name_known_or_not() {
        for (name, typed) in [
            ("delta-snapshots", Feature::DeltaSnapshots),
            ("archive-url", Feature::ArchiveUrl),
            ("multi-round", Feature::MultiRound),
            ("zstd-archives", Feature::Other("zstd-archives".into())),
            ("", Feature::Other(String::new())),
        ] {
            assert_eq!(Feature::new(name), typed);
            assert_eq!(Feature::from(name.to_owned()), typed);
            assert_eq!(typed.as_str(), name);
            assert_eq!(typed, name);
            assert_eq!(typed.to_string(), name);
            // Records write and read it as the bare name.
            let json = serde_json::to_string(&typed).unwrap();
            assert_eq!(json, serde_json::to_string(name).unwrap());
            assert_eq!(serde_json::from_str::<Feature>(&json).unwrap(), typed);
        }
        assert!(serde_json::from_str::<Feature>("1").is_err());
        // Built around `new`, a known name is still that feature.
        assert_eq!(Feature::Other("archive-url".into()), Feature::ArchiveUrl);
        assert!(Feature::ArchiveUrl < Feature::DeltaSnapshots);
    }
}
