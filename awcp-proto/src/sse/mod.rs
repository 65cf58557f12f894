//! Server-sent events framing (WIRE.md §4.3, §15): pure byte-level code.
//!
//! * [`encode_data`] frames one compact JSON event as `data: <json>\n\n`; [`KEEPALIVE`] is the
//!   comment the executor sends to keep idle connections open.
//! * [`SseDecoder`] is an incremental, lenient (WHATWG-style) decoder: feed it bytes with
//!   [`SseDecoder::push`] in chunks of any size, then call [`SseDecoder::next_event`] until it
//!   returns `None`.
//!
//! Decoder rules:
//! * Lines end in `\n`, `\r\n` or `\r` (a `\r\n` split across two pushes counts once).
//! * `data:` with or without one leading space; several `data` lines join with `\n`.
//! * A blank line dispatches the pending event if at least one `data` line was seen.
//! * Lines starting with `:` are comments (keepalives) and are skipped; `event:` and `id:` are
//!   recorded per event (the id does not carry over to later events), `retry:` and unknown
//!   fields are ignored. A UTF-8 byte-order mark is not stripped.
//! * A line longer than the decoder's limit yields [`SseError::LineTooLong`] once; the rest of
//!   that line is discarded and the event it belonged to is dropped. The decoder stays usable.
//! * A `data` line that is not UTF-8 yields [`SseError::InvalidUtf8`] and its event is dropped.
//! * A stream that ends without a final blank line drops the partial event (there is no
//!   `finish`; this matches browsers).
//!
//! A delegator reading results uses [`DivertingSseDecoder`] instead, which passes a result
//! archive out piece by piece rather than buffering its line: it follows the rules above,
//! except that `event:` and `id:` values are not kept (nothing reads them on that path) and no
//! line is ever buffered, so no line is too long; what is bounded is an event's JSON besides
//! its archive and the archive text, each with its own limit.
//!
//! Scanning is linear in the input: the decoder remembers how far it looked for a line end, so
//! a multi-megabyte line fed in small chunks is scanned once.

mod diverting;

pub use diverting::{DivertingSseDecoder, DropReason, SsePiece};

/// The keepalive comment (plus the blank line that ends it).
pub const KEEPALIVE: &str = ": keepalive\n\n";

/// Default line-length limit of [`SseDecoder::default`]: 256 MiB, because `snapshot` events
/// carry whole archives on one line.
pub const DEFAULT_MAX_LINE_LEN: usize = 256 * 1024 * 1024;

/// Frames `json` as one SSE event: `data: <json>\n\n`.
///
/// Compact JSON is one line. Should `json` contain line breaks (`\n`, `\r\n` or `\r`), each
/// line gets its own `data:` field, so a decoder rebuilds the text with `\n` separators (a
/// carriage return cannot survive SSE framing).
pub fn encode_data(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + 8);
    let bytes = json.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\n' | b'\r' => {
                out.push_str("data: ");
                out.push_str(&json[start..i]);
                out.push('\n');
                if bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                i += 1;
                start = i;
            }
            _ => i += 1,
        }
    }
    out.push_str("data: ");
    out.push_str(&json[start..]);
    out.push_str("\n\n");
    out
}

/// One dispatched event.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field, if the event had one.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The `id:` field, if the event had one.
    pub id: Option<String>,
}

/// A framing error; the decoder stays usable after it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A line exceeded the decoder's limit; the rest of it was discarded.
    #[error("SSE line longer than {limit} bytes")]
    LineTooLong {
        /// The limit in bytes.
        limit: usize,
    },
    /// A `data` line was not valid UTF-8; its event was dropped.
    #[error("SSE data line is not valid UTF-8")]
    InvalidUtf8,
}

/// Incremental SSE decoder with a bounded line length.
#[derive(Debug)]
pub struct SseDecoder {
    max_line_len: usize,
    /// Buffered input; bytes before `start` are consumed.
    buf: Vec<u8>,
    /// Start of the current (unfinished) line in `buf`.
    start: usize,
    /// `buf[start..scan]` is known to hold no line terminator.
    scan: usize,
    /// The previous line ended in `\r`: a leading `\n` belongs to it.
    skip_lf: bool,
    /// Dropping the rest of an overlong line.
    discarding: bool,
    /// The pending event must be dropped at the next blank line.
    poisoned: bool,
    data_seen: bool,
    data: String,
    event: Option<String>,
    id: Option<String>,
}

impl Default for SseDecoder {
    fn default() -> Self {
        SseDecoder::new(DEFAULT_MAX_LINE_LEN)
    }
}

impl SseDecoder {
    /// A decoder refusing lines longer than `max_line_len` bytes (terminator excluded).
    pub fn new(max_line_len: usize) -> Self {
        SseDecoder {
            max_line_len,
            buf: Vec::new(),
            start: 0,
            scan: 0,
            skip_lf: false,
            discarding: false,
            poisoned: false,
            data_seen: false,
            data: String::new(),
            event: None,
            id: None,
        }
    }

    /// Appends received bytes. Call [`SseDecoder::next_event`] until it returns `None`
    /// afterwards; the decoder does no work in `push` beyond buffering.
    pub fn push(&mut self, mut bytes: &[u8]) {
        if self.discarding && self.start == self.buf.len() {
            // Inside an overlong line: drop its bytes at once instead of buffering them. The
            // terminator itself is kept so `next_event` ends the discarded line.
            match memchr::memchr2(b'\n', b'\r', bytes) {
                Some(end) => bytes = &bytes[end..],
                None => return,
            }
        }
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
            self.scan = 0;
        } else if self.start > 0 && self.start >= self.buf.len() / 2 {
            // Amortised compaction: every byte is moved at most a constant number of times.
            self.buf.drain(..self.start);
            self.scan -= self.start;
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete event or framing error, or `None` when more input is needed.
    pub fn next_event(&mut self) -> Option<Result<SseEvent, SseError>> {
        loop {
            if self.skip_lf {
                if self.start >= self.buf.len() {
                    return None;
                }
                if self.buf[self.start] == b'\n' {
                    self.start += 1;
                }
                self.skip_lf = false;
                self.scan = self.scan.max(self.start);
            }
            let from = self.scan.max(self.start);
            let found = memchr::memchr2(b'\n', b'\r', &self.buf[from..]).map(|p| from + p);
            let Some(end) = found else {
                self.scan = self.buf.len();
                if self.discarding {
                    self.buf.clear();
                    self.start = 0;
                    self.scan = 0;
                    return None;
                }
                if self.buf.len() - self.start > self.max_line_len {
                    self.buf.clear();
                    self.start = 0;
                    self.scan = 0;
                    self.discarding = true;
                    self.poisoned = true;
                    return Some(Err(SseError::LineTooLong {
                        limit: self.max_line_len,
                    }));
                }
                return None;
            };
            let line_start = self.start;
            self.start = end + 1;
            self.scan = self.start;
            if self.buf[end] == b'\r' {
                self.skip_lf = true;
            }
            if self.discarding {
                self.discarding = false;
                continue;
            }
            if end - line_start > self.max_line_len {
                self.poisoned = true;
                return Some(Err(SseError::LineTooLong {
                    limit: self.max_line_len,
                }));
            }
            if let Some(out) = self.process_line(line_start, end) {
                return Some(out);
            }
        }
    }

    fn process_line(&mut self, start: usize, end: usize) -> Option<Result<SseEvent, SseError>> {
        let line = &self.buf[start..end];
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] == b':' {
            return None;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                let value = value.strip_prefix(b" ").unwrap_or(value);
                (&line[..colon], value)
            }
            None => (line, &line[line.len()..]),
        };
        match name {
            b"data" => {
                if self.poisoned {
                    return None;
                }
                match core::str::from_utf8(value) {
                    Ok(text) => {
                        if self.data_seen {
                            self.data.push('\n');
                        }
                        self.data.push_str(text);
                        self.data_seen = true;
                    }
                    Err(_) => {
                        self.poisoned = true;
                        return Some(Err(SseError::InvalidUtf8));
                    }
                }
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            b"id" if !value.contains(&0) => {
                self.id = Some(String::from_utf8_lossy(value).into_owned());
            }
            _ => {} // `retry` and unknown fields
        }
        None
    }

    fn dispatch(&mut self) -> Option<Result<SseEvent, SseError>> {
        let poisoned = core::mem::replace(&mut self.poisoned, false);
        let data_seen = core::mem::replace(&mut self.data_seen, false);
        let event = SseEvent {
            event: self.event.take(),
            data: core::mem::take(&mut self.data),
            id: self.id.take(),
        };
        (data_seen && !poisoned).then_some(Ok(event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const STREAM: &str = concat!(
        "data: {\"delegationId\":\"dlg_0a1b2c3d4e5f60718293a4b5c6d7e8f9\",\"type\":\"status\",\"timestamp\":\"2026-03-04T05:06:09.120Z\",\"status\":\"running\",\"message\":\"started\"}\n",
        "\n",
        ": keepalive\n",
        "\n",
        "data: {\"delegationId\":\"dlg_0a1b2c3d4e5f60718293a4b5c6d7e8f9\",\"type\":\"snapshot\",\"timestamp\":\"2026-03-04T05:09:41.002Z\",\"snapshotId\":\"snap_9c2e41d07a3b\",\"summary\":\"Loader skips blank lines; test added\",\"highlights\":[\"loader.py\",\"test_loader.py\"],\"snapshotBase64\":\"UEsDBA==\",\"recommended\":true}\n",
        "\n",
        "data: {\"delegationId\":\"dlg_0a1b2c3d4e5f60718293a4b5c6d7e8f9\",\"type\":\"done\",\"timestamp\":\"2026-03-04T05:09:41.010Z\",\"summary\":\"Loader skips blank lines; test added\",\"highlights\":[\"loader.py\",\"test_loader.py\"],\"snapshotIds\":[\"snap_9c2e41d07a3b\"],\"recommendedSnapshotId\":\"snap_9c2e41d07a3b\"}\n",
        "\n",
    );

    fn decode_chunks<'a>(
        dec: &mut SseDecoder,
        chunks: impl IntoIterator<Item = &'a [u8]>,
    ) -> Vec<Result<SseEvent, SseError>> {
        let mut out = Vec::new();
        for c in chunks {
            dec.push(c);
            while let Some(ev) = dec.next_event() {
                out.push(ev);
            }
        }
        out
    }

    fn decode_all(input: &[u8]) -> Vec<Result<SseEvent, SseError>> {
        decode_chunks(&mut SseDecoder::default(), [input])
    }

    fn data(s: &str) -> Result<SseEvent, SseError> {
        Ok(SseEvent {
            data: s.to_owned(),
            ..SseEvent::default()
        })
    }

    #[test]
    fn example_stream_at_every_split_point() {
        let whole = decode_all(STREAM.as_bytes());
        assert_eq!(whole.len(), 3);
        assert!(whole.iter().all(|e| e.is_ok()));
        for ev in &whole {
            let ev = ev.as_ref().unwrap();
            crate::wire::decode_event(ev.data.as_bytes()).unwrap();
        }
        let b = STREAM.as_bytes();
        for i in 0..=b.len() {
            let got = decode_chunks(&mut SseDecoder::default(), [&b[..i], &b[i..]]);
            assert_eq!(got, whole, "split at {i}");
        }
        // byte by byte
        let got = decode_chunks(&mut SseDecoder::default(), b.chunks(1));
        assert_eq!(got, whole);
    }

    #[test]
    fn crlf_cr_and_no_space() {
        let want = vec![data("a"), data("b"), data("c")];
        assert_eq!(decode_all(b"data:a\r\n\r\ndata: b\r\rdata:c\n\n"), want);
        // CR split across pushes
        let mut dec = SseDecoder::default();
        let got = decode_chunks(
            &mut dec,
            [&b"data: a\r"[..], b"\n\r", b"\ndata: b\r", b"\r"],
        );
        assert_eq!(got, vec![data("a"), data("b")]);
    }

    #[test]
    fn multi_line_data_comments_and_fields() {
        let got = decode_all(
            b": keepalive\n\nevent: msg\nid: 7\nretry: 100\nfoo: bar\ndata: one\ndata\ndata:  three\n\n",
        );
        assert_eq!(
            got,
            vec![Ok(SseEvent {
                event: Some("msg".into()),
                data: "one\n\n three".into(),
                id: Some("7".into()),
            })]
        );
        // blank lines without data dispatch nothing; event/id do not carry over
        assert_eq!(decode_all(b"event: x\n\n\n\ndata: y\n\n"), vec![data("y")]);
    }

    #[test]
    fn overlong_line_recovers() {
        let mut dec = SseDecoder::new(8);
        let got = decode_chunks(
            &mut dec,
            [
                &b"data: 0123"[..],
                b"456789abcdef",
                b"ghij\n\ndata: ok\n\ndata: 0123456789\n\ndata: k2\n\n",
            ],
        );
        assert_eq!(
            got,
            vec![
                Err(SseError::LineTooLong { limit: 8 }),
                data("ok"),
                Err(SseError::LineTooLong { limit: 8 }),
                data("k2"),
            ]
        );
        // exactly at the limit is fine
        assert_eq!(
            decode_chunks(&mut SseDecoder::new(8), [&b"data: 12\n\n"[..]]),
            vec![data("12")]
        );
    }

    #[test]
    fn discarded_bytes_are_not_buffered() {
        let mut dec = SseDecoder::new(8);
        dec.push(b"data: 123456789");
        assert_eq!(
            dec.next_event(),
            Some(Err(SseError::LineTooLong { limit: 8 }))
        );
        for _ in 0..1000 {
            dec.push(&[b'x'; 1000]);
        }
        assert!(dec.buf.len() < 16, "buffered {} bytes", dec.buf.len());
        dec.push(b"yy\r");
        dec.push(b"\n\ndata:ok\n\n");
        assert_eq!(dec.next_event(), Some(data("ok")));
        assert_eq!(dec.next_event(), None);
    }

    #[test]
    fn invalid_utf8_drops_event() {
        let got = decode_all(b"data: a\ndata: \xff\xfe\ndata: b\n\ndata: ok\n\n");
        assert_eq!(got, vec![Err(SseError::InvalidUtf8), data("ok")]);
    }

    #[test]
    fn partial_event_at_end_is_not_dispatched() {
        assert_eq!(decode_all(b"data: a\n"), vec![]);
        assert_eq!(decode_all(b"data: a"), vec![]);
    }

    #[test]
    fn big_line_in_small_chunks() {
        let payload = "x".repeat(4 << 20);
        let framed = encode_data(&payload);
        let mut dec = SseDecoder::default();
        let got = decode_chunks(&mut dec, framed.as_bytes().chunks(1024));
        assert_eq!(got, vec![data(&payload)]);
    }

    #[test]
    fn encoder_shapes() {
        assert_eq!(encode_data("{\"a\":1}"), "data: {\"a\":1}\n\n");
        assert_eq!(encode_data("a\nb"), "data: a\ndata: b\n\n");
        assert_eq!(encode_data(""), "data: \n\n");
        assert_eq!(KEEPALIVE, ": keepalive\n\n");
        assert_eq!(decode_all(KEEPALIVE.as_bytes()), vec![]);
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip(s in "[^\r]*") {
            prop_assert_eq!(decode_all(encode_data(&s).as_bytes()), vec![data(&s)]);
        }

        #[test]
        fn chunking_does_not_matter(
            items in proptest::collection::vec("[^\r]{0,40}", 0..6),
            cuts in proptest::collection::vec(any::<usize>(), 0..12),
            crlf in any::<bool>(),
        ) {
            let mut stream = String::new();
            for (i, s) in items.iter().enumerate() {
                if i % 2 == 1 {
                    stream.push_str(KEEPALIVE);
                }
                stream.push_str(&encode_data(s));
            }
            if crlf {
                stream = stream.replace('\n', "\r\n");
            }
            let bytes = stream.as_bytes();
            let whole = decode_all(bytes);
            let expected: Vec<_> = items.iter().map(|s| data(s)).collect();
            prop_assert_eq!(&whole, &expected);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut prev = 0;
            for c in cuts {
                chunks.push(&bytes[prev..c]);
                prev = c;
            }
            chunks.push(&bytes[prev..]);
            prop_assert_eq!(decode_chunks(&mut SseDecoder::default(), chunks), expected);
        }

        #[test]
        fn never_panics(input in proptest::collection::vec(any::<u8>(), 0..200), limit in 0usize..16) {
            let mut dec = SseDecoder::new(limit);
            let _ = decode_chunks(&mut dec, input.chunks(3));
        }
    }
}
