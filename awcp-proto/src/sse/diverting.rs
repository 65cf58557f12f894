//! An SSE decoder for a delegator's event stream that never holds a result archive.
//!
//! A reference executor sends its result inline: a `snapshot` event's `snapshotBase64` (or a
//! seed executor's `done.resultBase64`) is the whole work directory as base64 on one `data:`
//! line. [`SseDecoder`](super::SseDecoder) buffers that line, so a delegator would hold the
//! archive several times over (and refuse one over its event limit). [`DivertingSseDecoder`]
//! reads the stream as it arrives instead: the archive text of each event is passed out in
//! pieces ([`SsePiece::ArchiveText`]) for the caller to decode into a file, and the rest of the
//! event's JSON, with that field `""`, comes at the end of the event ([`SsePiece::Event`]).
//! Memory stays bounded by the pushed chunk and the event's JSON without its archive.
//!
//! Framing follows the rules of [`super`] (line ends `\n`, `\r\n` or `\r`, `data:` with or
//! without one space, several `data` lines joined with `\n`, comments and other fields
//! skipped, a blank line dispatching an event that had data, a stream ending mid-event
//! dropping it), except that `event:` values are not kept (nothing reads them on this path),
//! an `id:` value longer than [`MAX_ID_BYTES`] is ignored, and no other line is ever
//! buffered, so no line is too long: what is bounded is the event's JSON besides the archive
//! and the archive text, each with its own limit. An event's `id` is the value of the last
//! `id:` line of its own block (WIRE.md §4.6: a resuming delegator skips what it already has).

use crate::wire::divert::{ArchiveTextDiverter, DivertError};

/// The longest `id:` value kept; a longer one is ignored (event ids are decimal numbers).
pub const MAX_ID_BYTES: usize = 64;

/// What [`DivertingSseDecoder::push`] found, in stream order. Every piece belongs to the
/// current event; after an [`SsePiece::Event`] or [`SsePiece::Dropped`] the next pieces belong
/// to the next one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SsePiece {
    /// More archive text (base64, unescaped) of the current event's `snapshotBase64` or
    /// `resultBase64`.
    ArchiveText(Vec<u8>),
    /// The current event is complete: its data (the `data:` lines joined with `\n`), with the
    /// archive field's value `""` when `diverted`, in which case all of its text came before
    /// as [`SsePiece::ArchiveText`]. When not `diverted`, text passed out for this event (a
    /// string the JSON never closed) is to be discarded.
    Event {
        /// The event's JSON without its archive text.
        data: String,
        /// Whether the archive field was diverted, completely.
        diverted: bool,
        /// The event's `id:` value, if its block had one (the last one of the block).
        id: Option<String>,
    },
    /// The current event is dropped: archive text passed out for it is to be discarded. The
    /// decoder goes on with the next event.
    Dropped(DropReason),
}

/// Why an event was dropped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DropReason {
    /// The event's JSON besides the archive text is over the limit.
    #[error("SSE event larger than {limit} bytes besides its archive")]
    EventTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The archive text is over the limit.
    #[error("inline archive of an SSE event larger than {limit} bytes of text")]
    ArchiveTooLarge {
        /// The limit in bytes of base64 text.
        limit: u64,
    },
    /// The archive text holds an escape base64 cannot contain, or the field appears twice.
    #[error("{0}")]
    BadArchiveText(DivertError),
    /// The event's data is not UTF-8.
    #[error("SSE data is not valid UTF-8")]
    InvalidUtf8,
}

/// Where in the current line the decoder is.
#[derive(Debug)]
enum Line {
    /// Reading the field name: `len` bytes so far, all a prefix of `data` or of `id`
    /// (`id_name`).
    Name { len: usize, id_name: bool },
    /// Just after `data:`: one space may follow.
    ValueStart,
    /// In a `data` value.
    Value,
    /// Just after `id:`: one space may follow.
    IdStart,
    /// In an `id` value.
    Id,
    /// In a line that is skipped: a comment, another field, or data of a dropped event.
    Skip,
}

/// The incremental decoder (see [`crate::sse`] and the rules there).
#[derive(Debug)]
pub struct DivertingSseDecoder {
    max_kept: usize,
    max_archive_text: u64,
    line: Line,
    /// The previous line ended in `\r`: a leading `\n` belongs to it.
    skip_lf: bool,
    /// The current event's JSON, once it has a `data` line.
    event: Option<ArchiveTextDiverter>,
    /// Archive text passed out for the current event.
    archive_text: u64,
    /// The current event was dropped: skip it up to its blank line.
    dropped: bool,
    /// The `id:` line being read (`None` once it is too long).
    id_line: Option<Vec<u8>>,
    /// The current block's id.
    id: Option<String>,
}

impl DivertingSseDecoder {
    /// A decoder keeping at most `max_kept` bytes of an event's JSON besides its archive, and
    /// passing out at most `max_archive_text` bytes of archive text per event.
    pub fn new(max_kept: usize, max_archive_text: u64) -> Self {
        DivertingSseDecoder {
            max_kept,
            max_archive_text,
            line: NAME,
            skip_lf: false,
            event: None,
            archive_text: 0,
            dropped: false,
            id_line: None,
            id: None,
        }
    }

    /// Reads the next bytes of the stream, appending what they complete to `out`.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<SsePiece>) {
        let mut text = Vec::new();
        while let Some(&b) = bytes.first() {
            if std::mem::take(&mut self.skip_lf) && b == b'\n' {
                bytes = &bytes[1..];
                continue;
            }
            match self.line {
                Line::Name { len, id_name } => {
                    bytes = &bytes[1..];
                    let data = !id_name && len == 4;
                    let id = id_name && len == 2;
                    match b {
                        b'\n' | b'\r' => {
                            self.skip_lf = b == b'\r';
                            if len == 0 {
                                self.dispatch(&mut text, out);
                            } else if data {
                                // `data` alone: a data line with an empty value.
                                self.begin_data(&mut text, out);
                            } else if id {
                                self.id = Some(String::new());
                            }
                            self.line = NAME;
                        }
                        b':' if data => {
                            self.line = Line::ValueStart;
                            self.begin_data(&mut text, out);
                        }
                        b':' if id => {
                            self.line = Line::IdStart;
                            self.id_line = Some(Vec::new());
                        }
                        _ if !id_name && len < 4 && b == b"data"[len] => {
                            self.line = Line::Name {
                                len: len + 1,
                                id_name,
                            }
                        }
                        _ if (id_name || len == 0) && len < 2 && b == b"id"[len] => {
                            self.line = Line::Name {
                                len: len + 1,
                                id_name: true,
                            }
                        }
                        _ => self.line = Line::Skip,
                    }
                }
                Line::ValueStart => {
                    if b == b' ' {
                        bytes = &bytes[1..];
                    }
                    self.line = Line::Value;
                }
                Line::IdStart => {
                    if b == b' ' {
                        bytes = &bytes[1..];
                    }
                    self.line = Line::Id;
                }
                Line::Value | Line::Id | Line::Skip => {
                    let end = bytes
                        .iter()
                        .position(|&c| c == b'\n' || c == b'\r')
                        .unwrap_or(bytes.len());
                    match self.line {
                        Line::Value => self.data(&bytes[..end], &mut text, out),
                        Line::Id => self.id_value(&bytes[..end]),
                        Line::Name { .. } | Line::ValueStart | Line::IdStart | Line::Skip => {}
                    }
                    bytes = &bytes[end..];
                    if let Some(&eol) = bytes.first() {
                        bytes = &bytes[1..];
                        self.skip_lf = eol == b'\r';
                        if matches!(self.line, Line::Id) {
                            self.end_id();
                        }
                        self.line = NAME;
                    }
                }
            }
        }
        flush(&mut text, out);
    }

    /// More of an `id:` line's value.
    fn id_value(&mut self, bytes: &[u8]) {
        if let Some(v) = &mut self.id_line {
            if v.len() + bytes.len() > MAX_ID_BYTES {
                self.id_line = None;
            } else {
                v.extend_from_slice(bytes);
            }
        }
    }

    /// An `id:` line ended: its value is the block's id (unless too long or holding NUL).
    fn end_id(&mut self) {
        if let Some(v) = self.id_line.take() {
            if !v.contains(&0) {
                self.id = Some(String::from_utf8_lossy(&v).into_owned());
            }
        }
    }

    /// A `data` line of the current event begins.
    fn begin_data(&mut self, text: &mut Vec<u8>, out: &mut Vec<SsePiece>) {
        if self.dropped {
            self.line = Line::Skip;
            return;
        }
        match &mut self.event {
            // Lines of one event's data are joined with `\n`.
            Some(_) => self.data(b"\n", text, out),
            None => self.event = Some(ArchiveTextDiverter::for_results(self.max_kept)),
        }
    }

    /// More of the current event's data.
    fn data(&mut self, bytes: &[u8], text: &mut Vec<u8>, out: &mut Vec<SsePiece>) {
        let Some(div) = &mut self.event else {
            return;
        };
        let before = text.len();
        let result = div.push(bytes, text);
        self.archive_text += (text.len() - before) as u64;
        let reason = match result {
            Err(DivertError::TooLarge(limit)) => Some(DropReason::EventTooLarge { limit }),
            Err(e) => Some(DropReason::BadArchiveText(e)),
            Ok(()) if self.archive_text > self.max_archive_text => {
                Some(DropReason::ArchiveTooLarge {
                    limit: self.max_archive_text,
                })
            }
            Ok(()) => None,
        };
        if let Some(reason) = reason {
            flush(text, out);
            out.push(SsePiece::Dropped(reason));
            self.event = None;
            self.archive_text = 0;
            self.dropped = true;
            self.line = Line::Skip;
        }
    }

    /// A blank line: the current event, if it had data and was not dropped, is complete.
    fn dispatch(&mut self, text: &mut Vec<u8>, out: &mut Vec<SsePiece>) {
        self.dropped = false;
        self.archive_text = 0;
        let id = self.id.take();
        let Some(div) = self.event.take() else {
            return;
        };
        flush(text, out);
        let diverted = div.diverted();
        out.push(match String::from_utf8(div.finish()) {
            Ok(data) => SsePiece::Event { data, diverted, id },
            Err(_) => SsePiece::Dropped(DropReason::InvalidUtf8),
        });
    }
}

/// The start of a line.
const NAME: Line = Line::Name {
    len: 0,
    id_name: false,
};

/// Passes out the archive text gathered so far.
fn flush(text: &mut Vec<u8>, out: &mut Vec<SsePiece>) {
    if !text.is_empty() {
        out.push(SsePiece::ArchiveText(std::mem::take(text)));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::sse::{SseDecoder, SseEvent};
    use proptest::prelude::*;

    /// Everything `stream` gives when pushed in pieces of `size`, archive text joined per event.
    fn decode(
        stream: &[u8],
        size: usize,
        limits: (usize, u64),
    ) -> Vec<(Result<String, DropReason>, Vec<u8>, bool)> {
        let mut d = DivertingSseDecoder::new(limits.0, limits.1);
        let mut pieces = Vec::new();
        for c in stream.chunks(size.max(1)) {
            d.push(c, &mut pieces);
        }
        let mut events = Vec::new();
        let mut text = Vec::new();
        for p in pieces {
            match p {
                SsePiece::ArchiveText(t) => text.extend_from_slice(&t),
                SsePiece::Event { data, diverted, .. } => {
                    events.push((Ok(data), std::mem::take(&mut text), diverted))
                }
                SsePiece::Dropped(r) => events.push((Err(r), std::mem::take(&mut text), false)),
            }
        }
        events
    }

    const SNAPSHOT: &str = r#"{"delegationId":"dlg_1","type":"snapshot","timestamp":"2026-03-04T05:09:41.002Z","snapshotId":"snap_9c2e41d07a3b","summary":"s","highlights":["a"],"snapshotBase64":"UEsD\/BA==","recommended":true}"#;
    const DONE_S: &str =
        r#"{"delegationId":"dlg_1","type":"done","summary":"s","resultBase64":"QUJD"}"#;
    const STATUS: &str = r#"{"delegationId":"dlg_1","type":"status","status":"running"}"#;

    #[test]
    fn result_archives_are_passed_out_and_the_rest_kept_in_any_piece_sizes() {
        let stream = format!(
            "data: {STATUS}\n\n: keepalive\n\nevent: x\nid: 7\ndata:{SNAPSHOT}\r\n\r\ndata: {DONE_S}\r\r"
        );
        for size in 1..stream.len() {
            let got = decode(stream.as_bytes(), size, (1 << 16, 1 << 20));
            assert_eq!(
                got,
                vec![
                    (Ok(STATUS.to_owned()), vec![], false),
                    (
                        Ok(SNAPSHOT.replace(r#""UEsD\/BA==""#, r#""""#)),
                        b"UEsD/BA==".to_vec(),
                        true
                    ),
                    (Ok(DONE_S.replace("QUJD", "")), b"QUJD".to_vec(), true),
                ],
                "pieces of {size}"
            );
        }
    }

    #[test]
    fn without_an_archive_it_decodes_what_the_buffering_decoder_decodes() {
        let stream = "data\n\ndata: a\ndata:b\n\nretry: 5\ndat: x\ndata : y\n\n:c\r\ndata:  two spaces\n\ndata: cut";
        let mut plain = SseDecoder::default();
        plain.push(stream.as_bytes());
        let mut want = Vec::new();
        while let Some(e) = plain.next_event() {
            let SseEvent { data, .. } = e.unwrap();
            want.push((Ok(data), vec![], false));
        }
        for size in 1..stream.len() {
            assert_eq!(decode(stream.as_bytes(), size, (1 << 10, 1 << 10)), want);
        }
    }

    #[test]
    fn events_over_either_limit_or_with_bad_text_are_dropped_and_the_next_one_decodes() {
        let big_json = format!(r#"{{"type":"status","message":"{}"}}"#, "x".repeat(400));
        let stream = format!(
            "data: {big_json}\n\ndata: {SNAPSHOT}\n\ndata: {}\n\ndata: {}\n\ndata: {STATUS}\n\n",
            SNAPSHOT.replace("UEsD", "UEsDUEsDUEsDUEsD"),
            SNAPSHOT.replace("UEsD", "UE\\u0041"),
        );
        for size in [1, 3, 64, 4096] {
            let got = decode(stream.as_bytes(), size, (256, 12));
            let reasons: Vec<_> = got.iter().map(|(r, _, _)| r.clone()).collect();
            assert_eq!(
                reasons,
                vec![
                    Err(DropReason::EventTooLarge { limit: 256 }),
                    Ok(SNAPSHOT.replace(r#""UEsD\/BA==""#, r#""""#)),
                    Err(DropReason::ArchiveTooLarge { limit: 12 }),
                    Err(DropReason::BadArchiveText(DivertError::BadEscape)),
                    Ok(STATUS.to_owned()),
                ],
                "pieces of {size}"
            );
        }
    }

    /// The ids of the events `stream` gives, pushed in pieces of `size`.
    fn ids(stream: &[u8], size: usize) -> Vec<Option<String>> {
        let mut d = DivertingSseDecoder::new(1 << 10, 1 << 10);
        let mut pieces = Vec::new();
        for c in stream.chunks(size.max(1)) {
            d.push(c, &mut pieces);
        }
        pieces
            .into_iter()
            .filter_map(|p| match p {
                SsePiece::Event { id, .. } => Some(id),
                SsePiece::ArchiveText(_) | SsePiece::Dropped(_) => None,
            })
            .collect()
    }

    #[test]
    fn an_events_id_is_the_last_id_line_of_its_block_only() {
        let long = "9".repeat(MAX_ID_BYTES + 1);
        let stream = format!(
            "id: 1\ndata: {STATUS}\n\ndata: {STATUS}\n\nid:2\nid: 3\r\ndata: {STATUS}\n\n\
             id\ndata: {STATUS}\n\nid: 5\n\ndata: {STATUS}\n\nid: {long}\ndata: {STATUS}\n\n\
             idx: 6\ndata: {STATUS}\n\ndata: {SNAPSHOT}\nid: 7\n\n"
        );
        for size in 1..stream.len() {
            assert_eq!(
                ids(stream.as_bytes(), size),
                vec![
                    Some("1".to_owned()),
                    None,
                    Some("3".to_owned()),
                    Some(String::new()),
                    None, // `id: 5`'s block had no data; it does not carry over
                    None, // too long
                    None, // not an `id` field
                    Some("7".to_owned()),
                ],
                "pieces of {size}"
            );
        }
    }

    #[test]
    fn data_that_is_not_utf8_drops_its_event() {
        let mut stream = b"data: {\"type\":\"status\",\"message\":\"".to_vec();
        stream.extend_from_slice(&[0xff, 0xfe]);
        stream.extend_from_slice(b"\"}\n\ndata: ");
        stream.extend_from_slice(STATUS.as_bytes());
        stream.extend_from_slice(b"\n\n");
        let got = decode(&stream, 2, (1 << 10, 1 << 10));
        assert_eq!(got[0].0, Err(DropReason::InvalidUtf8));
        assert_eq!(got[1].0, Ok(STATUS.to_owned()));
    }

    proptest! {
        #[test]
        fn random_streams_decode_as_the_buffering_decoder_decodes(
            lines in proptest::collection::vec("(data|data:|data: |:|event: |id:|id: |id|x: )?[a-z{}\" ]{0,6}", 0..12),
            ends in proptest::collection::vec(prop_oneof!["\n", "\r", "\r\n", "\n\n"], 12),
            size in 1usize..9,
        ) {
            let mut stream = String::new();
            for (l, e) in lines.iter().zip(&ends) {
                stream.push_str(l);
                stream.push_str(e);
            }
            let mut plain = SseDecoder::default();
            plain.push(stream.as_bytes());
            let mut want = Vec::new();
            let mut want_ids = Vec::new();
            while let Some(e) = plain.next_event() {
                let e = e.unwrap();
                want.push((Ok(e.data), vec![], false));
                want_ids.push(e.id);
            }
            prop_assert_eq!(decode(stream.as_bytes(), size, (1 << 10, 1 << 10)), want);
            prop_assert_eq!(ids(stream.as_bytes(), size), want_ids);
        }
    }
}
