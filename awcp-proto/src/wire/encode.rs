//! Per-dialect encoder (WIRE.md §2–§4).
//!
//! Keys are camelCase; absent optional fields and empty `highlights`, `features`,
//! `snapshotIds`, `metadata`, `options` and `headers` are omitted (`null` is never written).
//! Every message carries `"version":"1"`; timestamps are written with milliseconds and `Z`.
//!
//! Dialect differences:
//! * [`Dialect::Reference`]: INVITE writes `environment.resources[]` (plus
//!   `workspace.exportName` only when an export name is set, which \[R\] peers ignore); START
//!   writes `transportHandle`; ACCEPT writes `retentionMs` when set; `done` writes
//!   `snapshotIds`/`recommendedSnapshotId` and `resultBase64` when set.
//! * [`Dialect::Seed`]: INVITE writes `workspace.exportName` (the export name or
//!   `awcp/<id>`) and neither `environment` nor `retentionMs`; START writes `workDir`; ACCEPT
//!   never writes `retentionMs`; `done` writes `resultBase64` when set and omits the snapshot
//!   fields.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::types::*;
use crate::error::ErrorInfo;

/// Encodes a message as compact JSON in `dialect`.
pub fn encode_message(msg: &Message, dialect: Dialect) -> String {
    to_json(&message_to_value(msg, dialect))
}

/// Encodes a task event as compact JSON in `dialect`.
pub fn encode_event(ev: &TaskEvent, dialect: Dialect) -> String {
    to_json(&event_to_value(ev, dialect))
}

/// Compact JSON text of `v`, written straight into a byte buffer (`Value`'s `Display` goes
/// through `core::fmt` and is about twice as slow; the text is the same).
pub(crate) fn to_json(v: &Value) -> String {
    // Serialising a `Value` cannot fail: its keys are strings and its numbers finite.
    serde_json::to_string(v).unwrap_or_default()
}

/// A message as a JSON value in `dialect`.
pub fn message_to_value(msg: &Message, dialect: Dialect) -> Value {
    let mut m = Map::new();
    m.insert("version".into(), PROTOCOL_VERSION.into());
    m.insert("type".into(), msg.type_str().into());
    m.insert("delegationId".into(), msg.delegation_id().as_str().into());
    match msg {
        Message::Invite(inv) => encode_invite(&mut m, inv, dialect),
        Message::Accept(acc) => {
            if dialect == Dialect::Reference {
                put_opt(&mut m, "retentionMs", acc.retention_ms);
            }
            m.insert(
                "executorWorkDir".into(),
                obj([("path", acc.work_dir.as_str().into())]),
            );
            if let Some(c) = &acc.constraints {
                let mut cm = Map::new();
                put_opt(
                    &mut cm,
                    "acceptedAccessMode",
                    c.accepted_access_mode.map(AccessMode::as_str),
                );
                put_opt(&mut cm, "maxTtlSeconds", c.max_ttl_seconds);
                if let Some(s) = &c.sandbox_profile {
                    let mut sm = Map::new();
                    put_opt(&mut sm, "cwdOnly", s.cwd_only);
                    put_opt(&mut sm, "allowNetwork", s.allow_network);
                    put_opt(&mut sm, "allowExec", s.allow_exec);
                    cm.insert("sandboxProfile".into(), Value::Object(sm));
                }
                m.insert("executorConstraints".into(), Value::Object(cm));
            }
            put_strings(&mut m, "features", &acc.features);
        }
        Message::Start(st) => {
            m.insert(
                "lease".into(),
                obj([
                    ("expiresAt", st.lease.expires_at.to_rfc3339().into()),
                    ("accessMode", st.lease.access_mode.as_str().into()),
                ]),
            );
            let key = match dialect {
                Dialect::Reference => "transportHandle",
                Dialect::Seed => "workDir",
            };
            m.insert(key.into(), encode_handle(&st.handle));
        }
        Message::Done(d) => {
            m.insert("finalSummary".into(), d.final_summary.as_str().into());
            put_strings(&mut m, "highlights", &d.highlights);
            put_opt(&mut m, "notes", d.notes.as_deref());
        }
        Message::Error(e) => put_error_info(&mut m, &e.error),
    }
    Value::Object(m)
}

fn encode_invite(m: &mut Map<String, Value>, inv: &Invite, dialect: Dialect) {
    m.insert(
        "task".into(),
        obj([
            ("description", inv.task.description.as_str().into()),
            ("prompt", inv.task.prompt.as_str().into()),
        ]),
    );
    m.insert(
        "lease".into(),
        obj([
            ("ttlSeconds", inv.lease.ttl_seconds.into()),
            ("accessMode", inv.lease.access_mode.as_str().into()),
        ]),
    );
    match dialect {
        Dialect::Reference => {
            put_opt(m, "retentionMs", inv.retention_ms);
            let resources: Vec<Value> = inv
                .resources
                .iter()
                .map(|r| {
                    obj([
                        ("name", r.name.as_str().into()),
                        ("type", r.kind.as_str().into()),
                        ("mode", r.mode.as_str().into()),
                    ])
                })
                .collect();
            m.insert(
                "environment".into(),
                obj([("resources", Value::Array(resources))]),
            );
            if let Some(name) = &inv.export_name {
                m.insert(
                    "workspace".into(),
                    obj([("exportName", name.as_str().into())]),
                );
            }
        }
        Dialect::Seed => {
            let name = inv
                .export_name
                .clone()
                .unwrap_or_else(|| format!("awcp/{}", inv.delegation_id));
            m.insert("workspace".into(), obj([("exportName", name.into())]));
        }
    }
    if let Some(t) = &inv.transport {
        m.insert(
            "requirements".into(),
            obj([("transport", t.as_str().into())]),
        );
    }
    if let Some(a) = &inv.auth {
        let mut am = Map::new();
        am.insert("type".into(), a.auth_type.as_str().into());
        am.insert("credential".into(), a.credential.as_str().into());
        put_str_map(&mut am, "metadata", &a.metadata);
        m.insert("auth".into(), Value::Object(am));
    }
    put_strings(m, "features", &inv.features);
}

/// A task event as a JSON value in `dialect`.
pub fn event_to_value(ev: &TaskEvent, dialect: Dialect) -> Value {
    let mut m = Map::new();
    m.insert("delegationId".into(), ev.delegation_id.as_str().into());
    m.insert("type".into(), ev.kind.type_str().into());
    m.insert("timestamp".into(), ev.timestamp.to_rfc3339().into());
    match &ev.kind {
        TaskEventKind::Status(s) => {
            m.insert("status".into(), s.status.as_str().into());
            put_opt(&mut m, "message", s.message.as_deref());
            if let Some(p) = s.progress {
                // Non-finite numbers cannot be written as JSON; they are dropped.
                if let Some(n) = serde_json::Number::from_f64(p) {
                    m.insert("progress".into(), Value::Number(n));
                }
            }
        }
        TaskEventKind::Snapshot(s) => {
            m.insert("snapshotId".into(), s.snapshot_id.as_str().into());
            m.insert("summary".into(), s.summary.as_str().into());
            put_strings(&mut m, "highlights", &s.highlights);
            put_opt(&mut m, "snapshotBase64", s.data.base64.as_deref());
            put_opt(&mut m, "snapshotUrl", s.data.url.as_deref());
            put_opt(&mut m, "checksum", s.checksum.as_deref());
            put_opt(&mut m, "recommended", s.recommended);
            if !s.metadata.is_empty() {
                let md: Map<String, Value> = s
                    .metadata
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                m.insert("metadata".into(), Value::Object(md));
            }
        }
        TaskEventKind::Done(d) => {
            m.insert("summary".into(), d.summary.as_str().into());
            put_strings(&mut m, "highlights", &d.highlights);
            if dialect == Dialect::Reference {
                if !d.snapshot_ids.is_empty() {
                    let ids = d.snapshot_ids.iter().map(|s| s.as_str().into()).collect();
                    m.insert("snapshotIds".into(), Value::Array(ids));
                }
                put_opt(
                    &mut m,
                    "recommendedSnapshotId",
                    d.recommended_snapshot_id.as_ref().map(|s| s.as_str()),
                );
            }
            put_opt(&mut m, "resultBase64", d.result_base64.as_deref());
        }
        TaskEventKind::Error(e) => put_error_info(&mut m, e),
    }
    Value::Object(m)
}

/// A transport handle as a JSON value.
pub fn encode_handle(handle: &TransportHandle) -> Value {
    let mut m = Map::new();
    m.insert("transport".into(), handle.kind().as_str().into());
    match handle {
        TransportHandle::Archive(a) => {
            put_opt(&mut m, "workspaceBase64", a.data.base64.as_deref());
            put_opt(&mut m, "archiveUrl", a.data.url.as_deref());
            m.insert("checksum".into(), a.checksum.as_str().into());
            put_opt(&mut m, "sizeBytes", a.size_bytes);
        }
        TransportHandle::Sshfs(s) => {
            m.insert(
                "endpoint".into(),
                obj([
                    ("host", s.endpoint.host.as_str().into()),
                    ("port", s.endpoint.port.into()),
                    ("user", s.endpoint.user.as_str().into()),
                ]),
            );
            m.insert("exportLocator".into(), s.export_locator.as_str().into());
            let mut cm = Map::new();
            cm.insert(
                "privateKey".into(),
                s.credential.private_key.as_str().into(),
            );
            put_opt(&mut cm, "certificate", s.credential.certificate.as_deref());
            m.insert("credential".into(), Value::Object(cm));
            put_str_map(&mut m, "options", &s.options);
            put_opt(&mut m, "hostKey", s.host_key.as_deref());
        }
        TransportHandle::Storage(s) => {
            m.insert("downloadUrl".into(), s.download_url.as_str().into());
            m.insert("uploadUrl".into(), s.upload_url.as_str().into());
            m.insert("checksum".into(), s.checksum.as_str().into());
            m.insert("expiresAt".into(), s.expires_at.to_rfc3339().into());
            put_str_map(&mut m, "headers", &s.headers);
        }
        TransportHandle::Git(g) => {
            m.insert("repoUrl".into(), g.repo_url.as_str().into());
            m.insert("baseBranch".into(), g.base_branch.as_str().into());
            m.insert("baseCommit".into(), g.base_commit.as_str().into());
            if let Some(auth) = &g.auth {
                let a = match auth {
                    GitAuth::Token(t) => {
                        obj([("type", "token".into()), ("token", t.as_str().into())])
                    }
                    GitAuth::Ssh(key) => {
                        let mut am = Map::new();
                        am.insert("type".into(), "ssh".into());
                        put_opt(&mut am, "privateKey", key.as_deref());
                        Value::Object(am)
                    }
                    GitAuth::None => obj([("type", "none".into())]),
                };
                m.insert("auth".into(), a);
            }
        }
    }
    Value::Object(m)
}

// ---------------------------------------------------------------------------------------------
// Helpers

fn obj<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn put_opt<T: Into<Value>>(m: &mut Map<String, Value>, key: &str, v: Option<T>) {
    if let Some(v) = v {
        m.insert(key.to_owned(), v.into());
    }
}

fn put_strings(m: &mut Map<String, Value>, key: &str, items: &[String]) {
    if !items.is_empty() {
        m.insert(
            key.to_owned(),
            Value::Array(items.iter().map(|s| s.as_str().into()).collect()),
        );
    }
}

fn put_str_map(m: &mut Map<String, Value>, key: &str, map: &BTreeMap<String, String>) {
    if !map.is_empty() {
        let o = map
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect();
        m.insert(key.to_owned(), Value::Object(o));
    }
}

fn put_error_info(m: &mut Map<String, Value>, e: &ErrorInfo) {
    m.insert("code".into(), e.code.as_str().into());
    m.insert("message".into(), e.message.as_str().into());
    put_opt(m, "hint", e.hint.as_deref());
}
