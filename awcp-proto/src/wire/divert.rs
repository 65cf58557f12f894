//! Receiving a large inline archive without holding it: [`ArchiveTextDiverter`] reads a JSON
//! body piece by piece, passes the text of its archive field out as it arrives (for the caller
//! to decode into a file) and keeps the rest of the JSON, with that field left as `""`, for the
//! ordinary decoder. Two fields are diverted: START's `workspaceBase64` (an executor receiving
//! a workspace, [`ArchiveTextDiverter::new`]) and the result a delegator receives, a `snapshot`
//! event's or a `GET …/result` body's `snapshotBase64` or a `done` event's `resultBase64`
//! ([`ArchiveTextDiverter::for_results`]).

/// The keys START's transport handle may sit under (as the decoder looks for it).
const HANDLE_KEYS: [&[u8]; 4] = [b"transportHandle", b"transport", b"workDir", b"mount"];
/// START's diverted field.
const FIELD: &[u8] = b"workspaceBase64";
/// The top-level fields that carry a result archive.
const RESULT_KEYS: [&[u8]; 2] = [b"snapshotBase64", b"resultBase64"];
/// Keys longer than any of the above are not remembered.
const KEY_CAP: usize = 32;

/// Why a body could not be split.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DivertError {
    /// The JSON besides the archive text is larger than allowed.
    #[error("message body larger than {0} bytes")]
    TooLarge(usize),
    /// The archive text holds an escape base64 cannot contain.
    #[error("the inline archive holds an escape sequence base64 cannot contain")]
    BadEscape,
    /// The archive field appears twice.
    #[error("the inline archive field appears twice")]
    Duplicate,
}

#[derive(Debug)]
enum Container {
    Object {
        /// The key whose value is being read (or was last read); `None` if longer than
        /// `KEY_CAP`.
        key: Option<Vec<u8>>,
        expecting_key: bool,
    },
    Array,
}

#[derive(Debug)]
enum State {
    /// Between tokens (or inside a number or literal).
    Structural,
    /// Inside a string; `key` collects an object key's text.
    Str {
        key: Option<Vec<u8>>,
        is_key: bool,
        escape: bool,
    },
    /// At the first byte of the diverted field's string: archive text (diverted), unless it
    /// starts with `{`, a storage result's JSON text (kept; [`super::storage_result_url`]).
    DivertFirst,
    /// Inside the diverted string.
    Divert { escape: bool },
}

/// Splits a JSON body as it arrives: the text of its archive field (unescaped; JSON allows
/// `\/` and whitespace escapes in it) is passed out, everything else is kept. Works on any
/// JSON; only a string value of the field, where its message has it, is diverted (see
/// [`ArchiveTextDiverter::new`] and [`ArchiveTextDiverter::for_results`]), so the kept text
/// decodes to the same message with that field empty. A body that is not JSON is kept as it is
/// (within the limit) for the decoder to refuse.
#[derive(Debug)]
pub struct ArchiveTextDiverter {
    target: Target,
    stack: Vec<Container>,
    state: State,
    kept: Vec<u8>,
    max_kept: usize,
    diverted: bool,
}

/// Which field a diverter takes out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// `workspaceBase64` directly inside START's top-level transport handle.
    Start,
    /// A top-level `snapshotBase64` or `resultBase64`.
    Result,
}

impl ArchiveTextDiverter {
    /// A diverter of START's `workspaceBase64` (directly inside a top-level `transportHandle`,
    /// `transport`, `workDir` or `mount` object), keeping at most `max_kept` bytes of JSON
    /// besides the archive text.
    pub fn new(max_kept: usize) -> Self {
        ArchiveTextDiverter::with_target(Target::Start, max_kept)
    }

    /// A diverter of a result archive: a top-level `snapshotBase64` (a `snapshot` event, a
    /// `GET …/result` body) or `resultBase64` (a `done` event), keeping at most `max_kept`
    /// bytes of JSON besides the archive text.
    pub fn for_results(max_kept: usize) -> Self {
        ArchiveTextDiverter::with_target(Target::Result, max_kept)
    }

    fn with_target(target: Target, max_kept: usize) -> Self {
        ArchiveTextDiverter {
            target,
            stack: Vec::new(),
            state: State::Structural,
            kept: Vec::new(),
            max_kept,
            diverted: false,
        }
    }

    /// Whether an archive text was diverted (completely).
    pub fn diverted(&self) -> bool {
        self.diverted
    }

    /// Reads the next piece of the body: archive text is appended to `text`, the rest kept.
    pub fn push(&mut self, mut chunk: &[u8], text: &mut Vec<u8>) -> Result<(), DivertError> {
        while !chunk.is_empty() {
            if matches!(self.state, State::DivertFirst) {
                if chunk[0] == b'{' {
                    // Not base64: kept in the JSON as an ordinary string.
                    self.state = State::Str {
                        key: None,
                        is_key: false,
                        escape: false,
                    };
                } else {
                    self.state = State::Divert { escape: false };
                }
            }
            if let State::Divert { escape } = &mut self.state {
                if *escape {
                    *escape = false;
                    match chunk[0] {
                        b'/' => text.push(b'/'),
                        b'n' | b'r' | b't' => {}
                        _ => return Err(DivertError::BadEscape),
                    }
                    chunk = &chunk[1..];
                    continue;
                }
                let end = memchr::memchr2(b'"', b'\\', chunk).unwrap_or(chunk.len());
                text.extend_from_slice(&chunk[..end]);
                chunk = &chunk[end..];
                match chunk.first() {
                    Some(b'\\') => *escape = true,
                    Some(_) => {
                        self.keep(b'"')?;
                        self.state = State::Structural;
                        self.diverted = true;
                    }
                    None => break,
                }
                chunk = &chunk[1..];
                continue;
            }
            let b = chunk[0];
            chunk = &chunk[1..];
            self.keep(b)?;
            self.step(b)?;
        }
        Ok(())
    }

    /// The kept JSON (the whole body when nothing was diverted).
    pub fn finish(self) -> Vec<u8> {
        self.kept
    }

    fn keep(&mut self, b: u8) -> Result<(), DivertError> {
        if self.kept.len() >= self.max_kept {
            return Err(DivertError::TooLarge(self.max_kept));
        }
        self.kept.push(b);
        Ok(())
    }

    fn step(&mut self, b: u8) -> Result<(), DivertError> {
        match &mut self.state {
            State::Divert { .. } | State::DivertFirst => {}
            State::Str {
                key,
                is_key,
                escape,
            } => {
                if *escape {
                    *escape = false;
                    key.take();
                } else if b == b'\\' {
                    *escape = true;
                } else if b == b'"' {
                    let done = key.take();
                    let is_key = *is_key;
                    self.state = State::Structural;
                    if is_key {
                        if let Some(Container::Object { key, .. }) = self.stack.last_mut() {
                            *key = done;
                        }
                    }
                } else if let Some(k) = key {
                    if k.len() < KEY_CAP {
                        k.push(b);
                    } else {
                        *key = None;
                    }
                }
            }
            State::Structural => match b {
                b'{' => self.stack.push(Container::Object {
                    key: None,
                    expecting_key: true,
                }),
                b'[' => self.stack.push(Container::Array),
                b'}' | b']' => {
                    self.stack.pop();
                }
                b':' => {
                    if let Some(Container::Object { expecting_key, .. }) = self.stack.last_mut() {
                        *expecting_key = false;
                    }
                }
                b',' => {
                    if let Some(Container::Object { expecting_key, .. }) = self.stack.last_mut() {
                        *expecting_key = true;
                    }
                }
                b'"' => {
                    let is_key = matches!(
                        self.stack.last(),
                        Some(Container::Object {
                            expecting_key: true,
                            ..
                        })
                    );
                    if !is_key && self.at_archive_text() {
                        if self.diverted {
                            return Err(DivertError::Duplicate);
                        }
                        self.state = State::DivertFirst;
                    } else {
                        self.state = State::Str {
                            key: is_key.then(Vec::new),
                            is_key,
                            escape: false,
                        };
                    }
                }
                _ => {}
            },
        }
        Ok(())
    }

    /// Whether a string value starting now is the archive text.
    fn at_archive_text(&self) -> bool {
        if self.target == Target::Result {
            return matches!(
                self.stack.as_slice(),
                [Container::Object { key: Some(k), .. }] if RESULT_KEYS.contains(&k.as_slice())
            );
        }
        let [Container::Object {
            key: Some(outer), ..
        }, Container::Object {
            key: Some(inner), ..
        }] = self.stack.as_slice()
        else {
            return false;
        };
        inner.as_slice() == FIELD && HANDLE_KEYS.contains(&outer.as_slice())
    }
}

/// Puts the file a diverted archive was decoded into in place of START's (now empty) inline
/// text, as [`ArchiveData::local_file`](super::ArchiveData::local_file), with the SHA-256 the
/// driver computed of it as it wrote it, if it did
/// ([`ArchiveData::local_file_sha256`](super::ArchiveData::local_file_sha256)). `false` when
/// `msg` is not a START with an archive handle: nothing was diverted from it, and the caller
/// deletes the file.
pub fn attach_diverted_archive(msg: &mut super::Message, file: &str, sha256: Option<&str>) -> bool {
    match msg.start_archive_mut() {
        Some(a) => {
            a.base64 = None;
            a.local_file = Some(file.to_owned());
            a.local_file_sha256 = sha256.map(str::to_owned);
            true
        }
        None => false,
    }
}

/// Puts the file a diverted result archive was decoded into in place of the event's (now
/// empty) inline text: a `snapshot` event's [`ArchiveData::local_file`](super::ArchiveData::local_file)
/// or a `done` event's [`DoneEvent::result_local_file`](super::DoneEvent::result_local_file).
/// `false` when `event` carries no inline result: nothing was diverted from it, and the caller
/// deletes the file.
pub fn attach_diverted_result(event: &mut super::TaskEvent, file: &str) -> bool {
    match &mut event.kind {
        super::TaskEventKind::Snapshot(s) if s.data.base64.is_some() => {
            s.data.base64 = None;
            s.data.local_file = Some(file.to_owned());
            true
        }
        super::TaskEventKind::Done(d) if d.result_base64.is_some() => {
            d.result_base64 = None;
            d.result_local_file = Some(file.to_owned());
            true
        }
        super::TaskEventKind::Snapshot(_)
        | super::TaskEventKind::Done(_)
        | super::TaskEventKind::Status(_)
        | super::TaskEventKind::Error(_)
        | super::TaskEventKind::RoundDone(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(body: &[u8], piece: usize) -> Result<(Vec<u8>, Vec<u8>, bool), DivertError> {
        let mut d = ArchiveTextDiverter::new(1 << 20);
        let mut text = Vec::new();
        for c in body.chunks(piece.max(1)) {
            d.push(c, &mut text)?;
        }
        let diverted = d.diverted();
        Ok((d.finish(), text, diverted))
    }

    #[test]
    fn the_handles_archive_text_is_diverted_in_any_piece_sizes() {
        let body = br#"{"version":"1","type":"START","delegationId":"d","lease":{"expiresAt":"x"},"transportHandle":{"transport":"archive","workspaceBase64":"QUJD\/REVG\n","checksum":"00"}}"#;
        for piece in 1..body.len() {
            let (kept, text, diverted) = split(body, piece).unwrap();
            assert!(diverted, "piece {piece}");
            assert_eq!(text, b"QUJD/REVG", "piece {piece}");
            assert_eq!(
                kept,
                br#"{"version":"1","type":"START","delegationId":"d","lease":{"expiresAt":"x"},"transportHandle":{"transport":"archive","workspaceBase64":"","checksum":"00"}}"#,
                "piece {piece}"
            );
        }
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn only_a_start_with_an_archive_handle_takes_the_diverted_file() {
        let body = br#"{"version":"1","type":"START","delegationId":"d","lease":{"expiresAt":"2026-01-01T00:00:00.000Z","accessMode":"rw"},"transportHandle":{"transport":"archive","workspaceBase64":"QUJD","checksum":"00"}}"#;
        let (kept, _, _) = split(body, 7).unwrap();
        let (mut start, _) = crate::wire::decode_message(&kept).unwrap();
        assert!(attach_diverted_archive(
            &mut start,
            "/tmp/a.zip",
            Some("ab")
        ));
        let crate::wire::Message::Start(st) = &start else {
            panic!("{start:?}")
        };
        let crate::wire::TransportHandle::Archive(a) = &st.handle else {
            panic!("{st:?}")
        };
        assert_eq!(a.data.base64, None);
        assert_eq!(a.data.local_file.as_deref(), Some("/tmp/a.zip"));
        assert_eq!(a.data.local_file_sha256.as_deref(), Some("ab"));
        let ack = br#"{"version":"1","type":"ERROR","delegationId":"d","code":"CANCELLED","message":"x"}"#;
        let (mut other, _) = crate::wire::decode_message(ack).unwrap();
        let before = other.clone();
        assert!(!attach_diverted_archive(&mut other, "/tmp/a.zip", None));
        assert_eq!(other, before);
    }

    #[test]
    fn the_field_elsewhere_or_as_text_is_kept() {
        for body in [
            &br#"{"task":{"workspaceBase64":"AAAA"},"transportHandle":{"x":"workspaceBase64"}}"#[..],
            br#"{"transportHandle":{"a":{"workspaceBase64":"AAAA"}}}"#,
            br#"{"transportHandle":["workspaceBase64","AAAA"]}"#,
            br#"{"transportHandle":{"workspace\u0042ase64":"AAAA"}}"#,
            br#"{"transportHandle":{"workspaceBase64":12}}"#,
            b"not json at all \"",
        ] {
            let (kept, text, diverted) = split(body, 3).unwrap();
            assert!(!diverted, "{}", String::from_utf8_lossy(body));
            assert!(text.is_empty());
            assert_eq!(kept, body);
        }
    }

    #[test]
    #[allow(clippy::unwrap_used, clippy::wildcard_enum_match_arm)]
    fn a_result_is_diverted_only_at_the_top_level_and_attached_to_its_event() {
        let split_results = |body: &[u8]| {
            let mut d = ArchiveTextDiverter::for_results(1 << 20);
            let mut text = Vec::new();
            for c in body.chunks(3) {
                d.push(c, &mut text).unwrap();
            }
            let diverted = d.diverted();
            (d.finish(), text, diverted)
        };
        for body in [
            &br#"{"metadata":{"snapshotBase64":"AAAA"},"x":"resultBase64"}"#[..],
            br#"{"transportHandle":{"workspaceBase64":"AAAA"}}"#,
            br#"["snapshotBase64","AAAA"]"#,
        ] {
            let (kept, text, diverted) = split_results(body);
            assert!(
                !diverted && text.is_empty(),
                "{}",
                String::from_utf8_lossy(body)
            );
            assert_eq!(kept, body);
        }
        let snapshot = br#"{"delegationId":"dlg_1","type":"snapshot","snapshotId":"snap_000000000001","summary":"s","snapshotBase64":"QUJD"}"#;
        let done = br#"{"delegationId":"dlg_1","type":"done","summary":"s","resultBase64":"QUJD"}"#;
        let status = br#"{"delegationId":"dlg_1","type":"status","status":"running"}"#;
        for body in [&snapshot[..], done] {
            let (kept, text, diverted) = split_results(body);
            assert!(diverted);
            assert_eq!(text, b"QUJD");
            let (mut ev, _) = crate::wire::decode_event(&kept).unwrap();
            assert!(attach_diverted_result(&mut ev, "/tmp/r.zip"));
            assert_eq!(ev.local_file(), Some("/tmp/r.zip"));
            match &ev.kind {
                crate::wire::TaskEventKind::Snapshot(s) => assert_eq!(s.data.base64, None),
                crate::wire::TaskEventKind::Done(d) => assert_eq!(d.result_base64, None),
                other => panic!("{other:?}"),
            }
        }
        let (mut ev, _) = crate::wire::decode_event(status).unwrap();
        assert!(!attach_diverted_result(&mut ev, "/tmp/r.zip"));
        assert_eq!(ev.local_file(), None);
    }

    #[test]
    fn a_storage_result_text_is_kept_not_diverted() {
        let text = crate::wire::storage_result_text(
            "http://s3.lan/b/workspaces/dlg_1-result.zip?X-Amz-Signature=ab",
        );
        let body = serde_json::json!({
            "delegationId": "dlg_1", "type": "snapshot", "snapshotId": "snap_000000000001",
            "summary": "s", "snapshotBase64": text,
        })
        .to_string();
        for piece in [1, 2, 7, 4096] {
            let mut d = ArchiveTextDiverter::for_results(1 << 20);
            let mut out = Vec::new();
            for c in body.as_bytes().chunks(piece) {
                d.push(c, &mut out).unwrap();
            }
            assert!(!d.diverted() && out.is_empty());
            let kept = d.finish();
            assert_eq!(kept, body.as_bytes());
            let (ev, _) = crate::wire::decode_event(&kept).unwrap();
            let crate::wire::TaskEventKind::Snapshot(s) = &ev.kind else {
                panic!("{ev:?}")
            };
            let url = crate::wire::storage_result_url(s.data.base64.as_deref().unwrap());
            assert_eq!(
                url.as_deref(),
                Some("http://s3.lan/b/workspaces/dlg_1-result.zip?X-Amz-Signature=ab")
            );
        }
        assert_eq!(crate::wire::storage_result_url("UEsDBA=="), None);
        assert_eq!(crate::wire::storage_result_url("{\"other\":1}"), None);
    }

    #[test]
    fn bad_escapes_duplicates_and_oversize_are_refused() {
        let bad = br#"{"transportHandle":{"workspaceBase64":"QU\u0042"}}"#;
        assert_eq!(split(bad, 4).unwrap_err(), DivertError::BadEscape);
        let twice = br#"{"transportHandle":{"workspaceBase64":"QQ==","workspaceBase64":"QQ=="}}"#;
        assert_eq!(split(twice, 4).unwrap_err(), DivertError::Duplicate);
        let mut d = ArchiveTextDiverter::new(8);
        let mut text = Vec::new();
        let big = br#"{"transportHandle":{"workspaceBase64":"QQ=="}}"#;
        assert_eq!(
            d.push(big, &mut text).unwrap_err(),
            DivertError::TooLarge(8)
        );
    }
}
