//! Per-dialect encoder (WIRE.md §2–§4): `serde_json` writes the `serde` shapes of
//! `encode/shapes.rs`, which borrow from the canonical types; [`InDialect`] picks the dialect.
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

use serde::Serialize;
use serde_json::Value;

use super::types::*;

mod shapes;

pub use self::shapes::InDialect;
pub(crate) use self::shapes::MessageRef;

/// Encodes a message as compact JSON in `dialect`.
pub fn encode_message(msg: &Message, dialect: Dialect) -> String {
    encode_message_ref(msg.into(), dialect)
}

/// [`encode_message`] of a lent message.
pub(crate) fn encode_message_ref(msg: MessageRef<'_>, dialect: Dialect) -> String {
    to_text(&InDialect(&msg, dialect))
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
    to_text(&InDialect(ev, dialect))
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
        | TaskEventKind::Error(_)
        | TaskEventKind::RoundDone(_) => return None,
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

/// Compact JSON text of `v`.
pub(crate) fn to_json(v: &Value) -> String {
    to_text(v)
}

/// Compact JSON text of one of the wire shapes (or a [`Value`]).
pub(crate) fn to_text<T: Serialize + ?Sized>(v: &T) -> String {
    // The shapes cannot fail to serialise: their keys are strings, their numbers integers or
    // finite floats, and their maps keyed by strings.
    serde_json::to_string(v).unwrap_or_default()
}

/// [`to_text`] as a [`Value`].
pub(crate) fn to_value<T: Serialize + ?Sized>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A message as a JSON value in `dialect` (the same JSON as [`encode_message`]).
pub fn message_to_value(msg: &Message, dialect: Dialect) -> Value {
    to_value(&InDialect(msg, dialect))
}

/// A task event as a JSON value in `dialect` (the same JSON as [`encode_event`]).
pub fn event_to_value(ev: &TaskEvent, dialect: Dialect) -> Value {
    to_value(&InDialect(ev, dialect))
}

/// A transport handle as a JSON value.
pub fn encode_handle(handle: &TransportHandle) -> Value {
    to_value(handle)
}
