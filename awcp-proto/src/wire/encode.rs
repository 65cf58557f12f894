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

use serde_json::Value;

use super::types::*;
use super::writer::ObjectWriter;
use crate::error::ErrorInfo;

/// Encodes a message as compact JSON in `dialect`.
pub fn encode_message(msg: &Message, dialect: Dialect) -> String {
    encode_message_ref(msg.into(), dialect)
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
}

impl<'m> From<&'m Message> for MessageRef<'m> {
    fn from(msg: &'m Message) -> Self {
        match msg {
            Message::Invite(m) => MessageRef::Invite(m),
            Message::Accept(m) => MessageRef::Accept(m),
            Message::Start(m) => MessageRef::Start(m),
            Message::Done(m) => MessageRef::Done(m),
            Message::Error(m) => MessageRef::Error(m),
        }
    }
}

/// [`encode_message`] of a lent message.
pub(crate) fn encode_message_ref(msg: MessageRef<'_>, dialect: Dialect) -> String {
    ObjectWriter::text(|w| write_message(w, msg, dialect))
}

/// [`encode_message`] of a message the caller gives up: when it is a START carrying an inline
/// archive, the archive's base64 text becomes the output's buffer (the JSON around it is
/// written into that buffer), so a large archive is never held twice. The text is the same
/// as [`encode_message`]'s.
pub fn encode_message_owned(mut msg: Message, dialect: Dialect) -> String {
    /// Below this, copying costs less than moving the text to make room for the JSON.
    const REUSE_FROM: usize = 64 * 1024;
    // Base64 needs no JSON escaping; anything else goes the ordinary way.
    let plain = |t: &str| {
        t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=')
    };
    let text = match inline_archive(&mut msg).map(Option::take) {
        Some(Some(t)) if t.len() >= REUSE_FROM && plain(&t) => t,
        Some(other) => {
            if let Some(slot) = inline_archive(&mut msg) {
                *slot = other;
            }
            return encode_message(&msg, dialect);
        }
        None => return encode_message(&msg, dialect),
    };
    if let Some(slot) = inline_archive(&mut msg) {
        *slot = Some(String::new());
    }
    let around = encode_message(&msg, dialect);
    let Some((before, after)) = split_at_empty(&around, START_ARCHIVE) else {
        // Unreachable: the writer always writes the field when it is set.
        if let Some(slot) = inline_archive(&mut msg) {
            *slot = Some(text);
        }
        return encode_message(&msg, dialect);
    };
    let mut out = text;
    out.reserve_exact(around.len());
    out.insert_str(0, before);
    out.push_str(after);
    out
}

/// A START, event or `GET …/result` body whose inline archive is in a local file
/// ([`ArchiveData::local_file`]), encoded around it: the text is `head`, the file's bytes as
/// standard base64, then `tail`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMessage {
    /// The JSON up to and including the opening quote of the archive field
    /// (`workspaceBase64`, `snapshotBase64` or `resultBase64`).
    pub head: String,
    /// The ZIP file whose base64 goes between `head` and `tail`.
    pub file: String,
    /// The JSON from the closing quote of the archive field to the end.
    pub tail: String,
}

impl SplitMessage {
    /// The body's length in bytes when the file holds `file_len` bytes.
    pub fn body_len(&self, file_len: u64) -> u64 {
        let b64 = file_len.div_ceil(3).saturating_mul(4);
        (self.head.len() as u64)
            .saturating_add(b64)
            .saturating_add(self.tail.len() as u64)
    }
}

/// [`encode_message`] for a START whose archive is a local file and not inline text: the
/// JSON before and after the `workspaceBase64` text, which the caller writes from the file
/// (the same bytes [`encode_message`] would give with the file's base64 in `base64`).
/// `None` for any other message.
pub fn encode_message_split(msg: &Message, dialect: Dialect) -> Option<SplitMessage> {
    let Message::Start(st) = msg else {
        return None;
    };
    let TransportHandle::Archive(a) = &st.handle else {
        return None;
    };
    if a.data.base64.is_some() {
        return None;
    }
    let file = a.data.local_file.clone()?;
    let mut st = st.clone();
    if let TransportHandle::Archive(a) = &mut st.handle {
        a.data.base64 = Some(String::new());
        a.data.local_file = None;
    }
    split_at_field(
        &encode_message(&Message::Start(st), dialect),
        START_ARCHIVE,
        file,
    )
}

/// START's inline archive text, if the message is a START with an archive handle.
fn inline_archive(msg: &mut Message) -> Option<&mut Option<String>> {
    msg.start_archive_mut().map(|a| &mut a.base64)
}

/// Encodes a task event as compact JSON in `dialect`.
pub fn encode_event(ev: &TaskEvent, dialect: Dialect) -> String {
    ObjectWriter::text(|w| write_event(w, ev, dialect))
}

/// [`encode_event`] for a `snapshot` or `done` event whose result archive is a local file
/// ([`ArchiveData::local_file`], [`DoneEvent::result_local_file`](super::DoneEvent::result_local_file))
/// and not inline text: the JSON before and after the `snapshotBase64` or `resultBase64` text,
/// which the caller writes from the file (the same bytes [`encode_event`] would give with the
/// file's base64 inline). `None` for any other event, or if `dialect` writes no such field.
pub fn encode_event_split(ev: &TaskEvent, dialect: Dialect) -> Option<SplitMessage> {
    let mut ev = ev.clone();
    let (file, field) = match &mut ev.kind {
        TaskEventKind::Snapshot(s) if s.data.base64.is_none() => {
            let file = s.data.local_file.take()?;
            s.data.base64 = Some(String::new());
            (file, r#""snapshotBase64":"""#)
        }
        TaskEventKind::Done(d) if d.result_base64.is_none() => {
            let file = d.result_local_file.take()?;
            d.result_base64 = Some(String::new());
            (file, r#""resultBase64":"""#)
        }
        TaskEventKind::Snapshot(_)
        | TaskEventKind::Done(_)
        | TaskEventKind::Status(_)
        | TaskEventKind::Error(_) => return None,
    };
    split_at_field(&encode_event(&ev, dialect), field, file)
}

/// START's archive field as written empty.
const START_ARCHIVE: &str = r#""workspaceBase64":"""#;

/// `around` split just after the opening quote of the empty archive `field` (written as
/// `"name":""`): its first occurrence, as every text written before it is an escaped string
/// value (a quote inside one is `\"`) and the field comes before any key data could name (in
/// START the handle follows only the lease; in events and result bodies `metadata` follows).
fn split_at_empty<'a>(around: &'a str, field: &str) -> Option<(&'a str, &'a str)> {
    let at = around.find(field)?;
    Some(around.split_at(at + field.len() - 1))
}

/// [`split_at_empty`] as a [`SplitMessage`] around `file`.
pub(crate) fn split_at_field(around: &str, field: &str, file: String) -> Option<SplitMessage> {
    let (head, tail) = split_at_empty(around, field)?;
    Some(SplitMessage {
        head: head.to_owned(),
        file,
        tail: tail.to_owned(),
    })
}

/// Compact JSON text of `v`, written straight into a byte buffer (`Value`'s `Display` goes
/// through `core::fmt` and is about twice as slow; the text is the same).
pub(crate) fn to_json(v: &Value) -> String {
    // Serialising a `Value` cannot fail: its keys are strings and its numbers finite.
    serde_json::to_string(v).unwrap_or_default()
}

/// A message as a JSON value in `dialect` (the same JSON as [`encode_message`]).
pub fn message_to_value(msg: &Message, dialect: Dialect) -> Value {
    ObjectWriter::value(|w| write_message(w, msg.into(), dialect))
}

/// A task event as a JSON value in `dialect` (the same JSON as [`encode_event`]).
pub fn event_to_value(ev: &TaskEvent, dialect: Dialect) -> Value {
    ObjectWriter::value(|w| write_event(w, ev, dialect))
}

/// A transport handle as a JSON value.
pub fn encode_handle(handle: &TransportHandle) -> Value {
    ObjectWriter::value(|w| write_handle(w, handle))
}

fn write_message(m: &mut ObjectWriter<'_>, msg: MessageRef<'_>, dialect: Dialect) {
    let (kind, id) = match msg {
        MessageRef::Invite(x) => ("INVITE", &x.delegation_id),
        MessageRef::Accept(x) => ("ACCEPT", &x.delegation_id),
        MessageRef::Start(x) => ("START", &x.delegation_id),
        MessageRef::Done(x) => ("DONE", &x.delegation_id),
        MessageRef::Error(x) => ("ERROR", &x.delegation_id),
    };
    m.str("version", PROTOCOL_VERSION);
    m.str("type", kind);
    m.str("delegationId", id.as_str());
    match msg {
        MessageRef::Invite(inv) => write_invite(m, inv, dialect),
        MessageRef::Accept(acc) => {
            if dialect == Dialect::Reference {
                m.opt_u64("retentionMs", acc.retention_ms);
            }
            m.object("executorWorkDir", |w| w.str("path", &acc.work_dir));
            if let Some(c) = &acc.constraints {
                m.object("executorConstraints", |cm| {
                    cm.opt_str(
                        "acceptedAccessMode",
                        c.accepted_access_mode.map(AccessMode::as_str),
                    );
                    cm.opt_u64("maxTtlSeconds", c.max_ttl_seconds);
                    if let Some(s) = &c.sandbox_profile {
                        cm.object("sandboxProfile", |sm| {
                            sm.opt_bool("cwdOnly", s.cwd_only);
                            sm.opt_bool("allowNetwork", s.allow_network);
                            sm.opt_bool("allowExec", s.allow_exec);
                        });
                    }
                });
            }
            m.strings("features", &acc.features);
        }
        MessageRef::Start(st) => {
            m.object("lease", |w| {
                w.timestamp("expiresAt", st.lease.expires_at);
                w.str("accessMode", st.lease.access_mode.as_str());
            });
            let key = match dialect {
                Dialect::Reference => "transportHandle",
                Dialect::Seed => "workDir",
            };
            m.object(key, |w| write_handle(w, &st.handle));
        }
        MessageRef::Done(d) => {
            m.str("finalSummary", &d.final_summary);
            m.strings("highlights", &d.highlights);
            m.opt_str("notes", d.notes.as_deref());
        }
        MessageRef::Error(e) => write_error_info(m, &e.error),
    }
}

fn write_invite(m: &mut ObjectWriter<'_>, inv: &Invite, dialect: Dialect) {
    m.object("task", |w| {
        w.str("description", &inv.task.description);
        w.str("prompt", &inv.task.prompt);
    });
    m.object("lease", |w| {
        w.u64("ttlSeconds", inv.lease.ttl_seconds);
        w.str("accessMode", inv.lease.access_mode.as_str());
    });
    match dialect {
        Dialect::Reference => {
            m.opt_u64("retentionMs", inv.retention_ms);
            m.object("environment", |w| {
                w.array("resources", |a| {
                    for r in &inv.resources {
                        a.object(|o| {
                            o.str("name", r.name.as_str());
                            o.str("type", r.kind.as_str());
                            o.str("mode", r.mode.as_str());
                        });
                    }
                });
            });
            if let Some(name) = &inv.export_name {
                m.object("workspace", |w| w.str("exportName", name));
            }
        }
        Dialect::Seed => match &inv.export_name {
            Some(name) => m.object("workspace", |w| w.str("exportName", name)),
            None => m.object("workspace", |w| {
                w.str("exportName", &format!("awcp/{}", inv.delegation_id));
            }),
        },
    }
    if let Some(t) = &inv.transport {
        m.object("requirements", |w| w.str("transport", t.as_str()));
    }
    if let Some(a) = &inv.auth {
        m.object("auth", |w| {
            w.str("type", a.auth_type.as_str());
            w.str("credential", &a.credential);
            w.str_map("metadata", &a.metadata);
        });
    }
    m.strings("features", &inv.features);
}

fn write_event(m: &mut ObjectWriter<'_>, ev: &TaskEvent, dialect: Dialect) {
    m.str("delegationId", ev.delegation_id.as_str());
    m.str("type", ev.kind.type_str());
    m.timestamp("timestamp", ev.timestamp);
    match &ev.kind {
        TaskEventKind::Status(s) => {
            m.str("status", s.status.as_str());
            m.opt_str("message", s.message.as_deref());
            if let Some(p) = s.progress {
                // Non-finite numbers cannot be written as JSON; they are dropped.
                m.finite_f64("progress", p);
            }
        }
        TaskEventKind::Snapshot(s) => {
            m.str("snapshotId", s.snapshot_id.as_str());
            m.str("summary", &s.summary);
            m.strings("highlights", &s.highlights);
            m.opt_str("snapshotBase64", s.data.base64.as_deref());
            m.opt_str("snapshotUrl", s.data.url.as_deref());
            m.opt_str("checksum", s.checksum.as_deref());
            m.opt_bool("recommended", s.recommended);
            if !s.metadata.is_empty() {
                m.serialize("metadata", &s.metadata);
            }
        }
        TaskEventKind::Done(d) => {
            m.str("summary", &d.summary);
            m.strings("highlights", &d.highlights);
            if dialect == Dialect::Reference {
                if !d.snapshot_ids.is_empty() {
                    m.array("snapshotIds", |a| {
                        for id in &d.snapshot_ids {
                            a.str(id.as_str());
                        }
                    });
                }
                m.opt_str(
                    "recommendedSnapshotId",
                    d.recommended_snapshot_id.as_ref().map(|s| s.as_str()),
                );
            }
            m.opt_str("resultBase64", d.result_base64.as_deref());
        }
        TaskEventKind::Error(e) => write_error_info(m, e),
    }
}

fn write_handle(m: &mut ObjectWriter<'_>, handle: &TransportHandle) {
    m.str("transport", handle.kind().as_str());
    match handle {
        TransportHandle::Archive(a) => {
            m.opt_str("workspaceBase64", a.data.base64.as_deref());
            m.opt_str("archiveUrl", a.data.url.as_deref());
            m.str("checksum", &a.checksum);
            m.opt_u64("sizeBytes", a.size_bytes);
        }
        TransportHandle::Sshfs(s) => {
            m.object("endpoint", |w| {
                w.str("host", &s.endpoint.host);
                w.u64("port", u64::from(s.endpoint.port));
                w.str("user", &s.endpoint.user);
            });
            m.str("exportLocator", &s.export_locator);
            m.object("credential", |w| {
                w.str("privateKey", &s.credential.private_key);
                w.opt_str("certificate", s.credential.certificate.as_deref());
            });
            m.str_map("options", &s.options);
            m.opt_str("hostKey", s.host_key.as_deref());
        }
        TransportHandle::Storage(s) => {
            m.str("downloadUrl", &s.download_url);
            m.str("uploadUrl", &s.upload_url);
            m.str("checksum", &s.checksum);
            m.timestamp("expiresAt", s.expires_at);
            m.str_map("headers", &s.headers);
        }
        TransportHandle::Git(g) => {
            m.str("repoUrl", &g.repo_url);
            m.str("baseBranch", &g.base_branch);
            m.str("baseCommit", &g.base_commit);
            if let Some(auth) = &g.auth {
                m.object("auth", |w| match auth {
                    GitAuth::Token(t) => {
                        w.str("type", "token");
                        w.str("token", t);
                    }
                    GitAuth::Ssh(key) => {
                        w.str("type", "ssh");
                        w.opt_str("privateKey", key.as_deref());
                    }
                    GitAuth::None => w.str("type", "none"),
                });
            }
        }
    }
}

/// `code`, `message` and `hint` of an ERROR message or `error` event.
pub(crate) fn write_error_info(m: &mut ObjectWriter<'_>, e: &ErrorInfo) {
    m.str("code", e.code.as_str());
    m.str("message", &e.message);
    m.opt_str("hint", e.hint.as_deref());
}
