//! The JSON shapes of each message, event and handle in each dialect, as `serde` structs that
//! borrow from the canonical types (WIRE.md §2–§4). `serde_json` writes them; field order is
//! declaration order (an archive field always comes before any peer-chosen key, which
//! [`super::split_at_field`] relies on).

use std::collections::BTreeMap;

use serde::ser::{Serialize, Serializer};
use serde::Serialize as Derive;
use serde_json::Value;

use crate::error::ErrorInfo;
use crate::id::{DelegationId, SnapshotId};
use crate::time::Timestamp;
use crate::wire::types::*;

/// A value paired with the dialect to write it in: `serde_json::to_vec(&InDialect(&msg, d))`.
/// A [`Message`] or [`TaskEvent`] serialised on its own is written in
/// [`Dialect::Reference`].
#[derive(Clone, Copy, Debug)]
pub struct InDialect<'a, T: ?Sized>(pub &'a T, pub Dialect);

fn is_empty<T>(items: &[T]) -> bool {
    items.is_empty()
}

fn is_empty_map<V>(map: &BTreeMap<String, V>) -> bool {
    map.is_empty()
}

/// `version`, `type` and `delegationId`, which every message starts with.
#[derive(Derive)]
#[serde(rename_all = "camelCase")]
struct Head<'a> {
    version: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
    delegation_id: &'a DelegationId,
}

#[derive(Derive)]
#[serde(rename_all = "camelCase")]
struct InviteShape<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    task: &'a TaskSpec,
    lease: &'a LeaseRequest,
    #[serde(skip_serializing_if = "Option::is_none")]
    retention_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    environment: Option<Environment<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    workspace: Option<Workspace<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    requirements: Option<Requirements<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    auth: Option<&'a Auth>,
    #[serde(skip_serializing_if = "is_empty")]
    features: &'a [Feature],
}

#[derive(Derive)]
struct Environment<'a> {
    resources: &'a [Resource],
}

#[derive(Derive)]
#[serde(rename_all = "camelCase")]
struct Workspace<'a> {
    export_name: std::borrow::Cow<'a, str>,
}

#[derive(Derive)]
struct Requirements<'a> {
    transport: &'a TransportKind,
}

#[derive(Derive)]
#[serde(rename_all = "camelCase")]
struct AcceptShape<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retention_ms: Option<u64>,
    executor_work_dir: WorkDir<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    executor_constraints: Option<&'a ExecutorConstraints>,
    #[serde(skip_serializing_if = "is_empty")]
    features: &'a [Feature],
}

#[derive(Derive)]
struct WorkDir<'a> {
    path: &'a str,
}

#[derive(Derive)]
#[serde(rename_all = "camelCase")]
struct StartShape<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    lease: &'a ActiveLease,
    #[serde(skip_serializing_if = "Option::is_none")]
    transport_handle: Option<&'a TransportHandle>,
    #[serde(skip_serializing_if = "Option::is_none")]
    work_dir: Option<&'a TransportHandle>,
}

#[derive(Derive)]
#[serde(rename_all = "camelCase")]
struct DoneShape<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    final_summary: &'a str,
    #[serde(skip_serializing_if = "is_empty")]
    highlights: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    notes: Option<&'a str>,
}

#[derive(Derive)]
struct ContinueShape<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    task: &'a TaskSpec,
    round: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease: Option<&'a ActiveLease>,
}

#[derive(Derive)]
struct ErrorShape<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    #[serde(flatten)]
    error: &'a ErrorInfo,
}

/// A message lent rather than owned: what the encoder reads, so that a reply can be written
/// from the ACCEPT or ERROR an engine keeps without copying it into a [`Message`] first.
#[derive(Clone, Copy)]
pub(crate) enum MessageRef<'m> {
    Invite(&'m Invite),
    Accept(&'m Accept),
    Start(&'m Start),
    Done(&'m Done),
    Error(&'m ErrorMessage),
    Continue(&'m Continue),
    Close(&'m Close),
}

impl<'m> From<&'m Message> for MessageRef<'m> {
    fn from(msg: &'m Message) -> Self {
        match msg {
            Message::Invite(m) => MessageRef::Invite(m),
            Message::Accept(m) => MessageRef::Accept(m),
            Message::Start(m) => MessageRef::Start(m),
            Message::Done(m) => MessageRef::Done(m),
            Message::Error(m) => MessageRef::Error(m),
            Message::Continue(m) => MessageRef::Continue(m),
            Message::Close(m) => MessageRef::Close(m),
        }
    }
}

impl Serialize for InDialect<'_, MessageRef<'_>> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let head = |kind, delegation_id| Head {
            version: PROTOCOL_VERSION,
            kind,
            delegation_id,
        };
        let dialect = self.1;
        match *self.0 {
            MessageRef::Invite(inv) => {
                let reference = dialect == Dialect::Reference;
                let export_name = match (&inv.export_name, dialect) {
                    (Some(name), _) => Some(name.as_str().into()),
                    (None, Dialect::Seed) => Some(format!("awcp/{}", inv.delegation_id).into()),
                    (None, Dialect::Reference) => None,
                };
                InviteShape {
                    head: head("INVITE", &inv.delegation_id),
                    task: &inv.task,
                    lease: &inv.lease,
                    retention_ms: inv.retention_ms.filter(|_| reference),
                    environment: reference.then_some(Environment {
                        resources: &inv.resources,
                    }),
                    workspace: export_name.map(|export_name| Workspace { export_name }),
                    requirements: inv
                        .transport
                        .as_ref()
                        .map(|transport| Requirements { transport }),
                    auth: inv.auth.as_ref(),
                    features: &inv.features,
                }
                .serialize(s)
            }
            MessageRef::Accept(acc) => AcceptShape {
                head: head("ACCEPT", &acc.delegation_id),
                retention_ms: acc.retention_ms.filter(|_| dialect == Dialect::Reference),
                executor_work_dir: WorkDir {
                    path: &acc.work_dir,
                },
                executor_constraints: acc.constraints.as_ref(),
                features: &acc.features,
            }
            .serialize(s),
            MessageRef::Start(st) => {
                let (transport_handle, work_dir) = match dialect {
                    Dialect::Reference => (Some(&st.handle), None),
                    Dialect::Seed => (None, Some(&st.handle)),
                };
                StartShape {
                    head: head("START", &st.delegation_id),
                    lease: &st.lease,
                    transport_handle,
                    work_dir,
                }
                .serialize(s)
            }
            MessageRef::Done(d) => DoneShape {
                head: head("DONE", &d.delegation_id),
                final_summary: &d.final_summary,
                highlights: &d.highlights,
                notes: d.notes.as_deref(),
            }
            .serialize(s),
            MessageRef::Error(e) => ErrorShape {
                head: head("ERROR", &e.delegation_id),
                error: &e.error,
            }
            .serialize(s),
            MessageRef::Continue(c) => ContinueShape {
                head: head("CONTINUE", &c.delegation_id),
                task: &c.task,
                round: c.round,
                lease: c.lease.as_ref(),
            }
            .serialize(s),
            MessageRef::Close(c) => head("CLOSE", &c.delegation_id).serialize(s),
        }
    }
}

impl Serialize for InDialect<'_, Message> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        InDialect(&MessageRef::from(self.0), self.1).serialize(s)
    }
}

/// The message in [`Dialect::Reference`] (the same JSON as [`super::encode_message`]).
impl Serialize for Message {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        InDialect(self, Dialect::Reference).serialize(s)
    }
}

// ---------------------------------------------------------------------------------------------
// Events

/// `delegationId`, `type` and `timestamp`, which every event starts with.
#[derive(Derive)]
#[serde(rename_all = "camelCase")]
struct EventHead<'a> {
    delegation_id: &'a DelegationId,
    #[serde(rename = "type")]
    kind: &'static str,
    timestamp: Timestamp,
}

#[derive(Derive)]
struct StatusShape<'a> {
    #[serde(flatten)]
    head: EventHead<'a>,
    status: &'a TaskStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    /// Non-finite numbers cannot be written as JSON; they are dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    progress: Option<f64>,
}

#[derive(Derive)]
#[serde(rename_all = "camelCase")]
struct SnapshotShape<'a> {
    #[serde(flatten)]
    head: EventHead<'a>,
    snapshot_id: &'a SnapshotId,
    summary: &'a str,
    #[serde(skip_serializing_if = "is_empty")]
    highlights: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshot_base64: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshot_url: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    checksum: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    recommended: Option<bool>,
    #[serde(skip_serializing_if = "is_empty_map")]
    metadata: &'a BTreeMap<String, Value>,
}

#[derive(Derive)]
#[serde(rename_all = "camelCase")]
struct DoneEventShape<'a> {
    #[serde(flatten)]
    head: EventHead<'a>,
    summary: &'a str,
    #[serde(skip_serializing_if = "is_empty")]
    highlights: &'a [String],
    #[serde(skip_serializing_if = "is_empty")]
    snapshot_ids: &'a [SnapshotId],
    #[serde(skip_serializing_if = "Option::is_none")]
    recommended_snapshot_id: Option<&'a SnapshotId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result_base64: Option<&'a str>,
}

#[derive(Derive)]
#[serde(rename_all = "camelCase")]
struct RoundDoneShape<'a> {
    #[serde(flatten)]
    head: EventHead<'a>,
    round: u64,
    summary: &'a str,
    #[serde(skip_serializing_if = "is_empty")]
    highlights: &'a [String],
    #[serde(skip_serializing_if = "is_empty")]
    snapshot_ids: &'a [SnapshotId],
    #[serde(skip_serializing_if = "Option::is_none")]
    recommended_snapshot_id: Option<&'a SnapshotId>,
}

#[derive(Derive)]
struct ErrorEventShape<'a> {
    #[serde(flatten)]
    head: EventHead<'a>,
    #[serde(flatten)]
    error: &'a ErrorInfo,
}

impl Serialize for InDialect<'_, TaskEvent> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (ev, dialect) = (self.0, self.1);
        let head = EventHead {
            delegation_id: &ev.delegation_id,
            kind: ev.kind.type_str(),
            timestamp: ev.timestamp,
        };
        match &ev.kind {
            TaskEventKind::Status(st) => StatusShape {
                head,
                status: &st.status,
                message: st.message.as_deref(),
                progress: st.progress.filter(|p| p.is_finite()),
            }
            .serialize(s),
            TaskEventKind::Snapshot(sn) => SnapshotShape {
                head,
                snapshot_id: &sn.snapshot_id,
                summary: &sn.summary,
                highlights: &sn.highlights,
                snapshot_base64: sn.data.base64.as_deref(),
                snapshot_url: sn.data.url.as_deref(),
                checksum: sn.checksum.as_deref(),
                recommended: sn.recommended,
                metadata: &sn.metadata,
            }
            .serialize(s),
            TaskEventKind::Done(d) => {
                // [S] peers know neither field.
                let reference = dialect == Dialect::Reference;
                DoneEventShape {
                    head,
                    summary: &d.summary,
                    highlights: &d.highlights,
                    snapshot_ids: if reference { &d.snapshot_ids } else { &[] },
                    recommended_snapshot_id: d
                        .recommended_snapshot_id
                        .as_ref()
                        .filter(|_| reference),
                    result_base64: d.result_base64.as_deref(),
                }
                .serialize(s)
            }
            TaskEventKind::Error(error) => ErrorEventShape { head, error }.serialize(s),
            TaskEventKind::RoundDone(r) => RoundDoneShape {
                head,
                round: r.round,
                summary: &r.summary,
                highlights: &r.highlights,
                snapshot_ids: &r.snapshot_ids,
                recommended_snapshot_id: r.recommended_snapshot_id.as_ref(),
            }
            .serialize(s),
        }
    }
}

/// The event in [`Dialect::Reference`] (the same JSON as [`super::encode_event`]).
impl Serialize for TaskEvent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        InDialect(self, Dialect::Reference).serialize(s)
    }
}

// ---------------------------------------------------------------------------------------------
// Transport handles (the same in both dialects)

#[derive(Derive)]
#[serde(rename_all = "camelCase")]
struct ArchiveShape<'a> {
    transport: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    workspace_base64: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    archive_url: Option<&'a str>,
    checksum: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    size_bytes: Option<u64>,
}

#[derive(Derive)]
#[serde(rename_all = "camelCase")]
struct SshfsShape<'a> {
    transport: &'static str,
    endpoint: &'a SshEndpoint,
    export_locator: &'a str,
    credential: &'a SshCredential,
    #[serde(skip_serializing_if = "is_empty_map")]
    options: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    host_key: Option<&'a str>,
}

#[derive(Derive)]
#[serde(rename_all = "camelCase")]
struct StorageShape<'a> {
    transport: &'static str,
    download_url: &'a str,
    upload_url: &'a str,
    checksum: &'a str,
    expires_at: Timestamp,
    #[serde(skip_serializing_if = "is_empty_map")]
    headers: &'a BTreeMap<String, String>,
}

#[derive(Derive)]
#[serde(rename_all = "camelCase")]
struct GitShape<'a> {
    transport: &'static str,
    repo_url: &'a str,
    base_branch: &'a str,
    base_commit: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    auth: Option<GitAuthShape<'a>>,
}

#[derive(Derive)]
#[serde(tag = "type", rename_all = "lowercase")]
enum GitAuthShape<'a> {
    Token {
        token: &'a str,
    },
    Ssh {
        #[serde(rename = "privateKey", skip_serializing_if = "Option::is_none")]
        private_key: Option<&'a str>,
        #[serde(rename = "hostKey", skip_serializing_if = "Option::is_none")]
        host_key: Option<&'a str>,
    },
    None,
}

/// The handle as START's `transportHandle` (or \[S\] `workDir`) carries it.
impl Serialize for TransportHandle {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            TransportHandle::Archive(a) => ArchiveShape {
                transport: "archive",
                workspace_base64: a.data.base64.as_deref(),
                archive_url: a.data.url.as_deref(),
                checksum: &a.checksum,
                size_bytes: a.size_bytes,
            }
            .serialize(s),
            TransportHandle::Sshfs(h) => SshfsShape {
                transport: "sshfs",
                endpoint: &h.endpoint,
                export_locator: &h.export_locator,
                credential: &h.credential,
                options: &h.options,
                host_key: h.host_key.as_deref(),
            }
            .serialize(s),
            TransportHandle::Storage(h) => StorageShape {
                transport: "storage",
                download_url: &h.download_url,
                upload_url: &h.upload_url,
                checksum: &h.checksum,
                expires_at: h.expires_at,
                headers: &h.headers,
            }
            .serialize(s),
            TransportHandle::Git(g) => GitShape {
                transport: "git",
                repo_url: &g.repo_url,
                base_branch: &g.base_branch,
                base_commit: &g.base_commit,
                auth: g.auth.as_ref().map(|a| match a {
                    GitAuth::Token(token) => GitAuthShape::Token { token },
                    GitAuth::Ssh {
                        private_key,
                        host_key,
                    } => GitAuthShape::Ssh {
                        private_key: private_key.as_deref(),
                        host_key: host_key.as_deref(),
                    },
                    GitAuth::None => GitAuthShape::None,
                }),
            }
            .serialize(s),
        }
    }
}
