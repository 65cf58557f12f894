//! Server-sent events, as AIP streams use them (§6.2): pure byte code.
//!
//! * Encoding: [`frame`] writes one event as `data: <json>\n\n` (one compact line; should the
//!   text hold line breaks, each line gets its own `data:` field). [`KEEPALIVE`] is a comment
//!   frame that keeps idle connections open. AIP defines no `event:`, `id:` or `retry:` lines.
//! * Decoding: [`SseDecoder`] is incremental: [`SseDecoder::push`] bytes in chunks of any size,
//!   then call [`SseDecoder::next_event`] until it returns `None`. It follows the SSE parsing
//!   rules: lines end in `\n`, `\r\n` or `\r` (also split across pushes); `data:` with or
//!   without one space; several `data` lines join with `\n`; a blank line dispatches an event
//!   that had data; comments (`:` …) and `retry:`/unknown fields are skipped; `event:` and
//!   `id:` are kept on the event. An event larger than the limit is dropped with
//!   [`SseError::TooLarge`] and the decoder carries on with the next one.

/// A comment frame for idle streams.
pub const KEEPALIVE: &[u8] = b": keepalive\n\n";

/// Default limit of [`SseDecoder::default`] for one event (all its lines): 64 MiB.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 64 * 1024 * 1024;

/// The HTTP headers of a stream response (§6.2: `text/event-stream`, no caching, keep-alive).
pub const STREAM_HEADERS: [(&str, &str); 3] = [
    ("Content-Type", "text/event-stream"),
    ("Cache-Control", "no-cache"),
    ("Connection", "keep-alive"),
];

/// Frames `data` (JSON) as one event: `data: <line>\n` per line, then a blank line.
pub fn frame(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 8);
    for line in split_lines(data) {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out.push(b'\n');
    out
}

fn split_lines(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(data);
    std::iter::from_fn(move || {
        let r = rest?;
        match r.iter().position(|&b| b == b'\n' || b == b'\r') {
            Some(i) => {
                let skip = if r[i] == b'\r' && r.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                rest = Some(&r[i + skip..]);
                Some(&r[..i])
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

/// One decoded event.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `data` lines joined with `\n`.
    pub data: String,
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `id:` field, if any.
    pub id: Option<String>,
}

/// A framing problem; the decoder stays usable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SseError {
    /// An event exceeded the limit; it was dropped.
    #[error("SSE event larger than {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// A `data` line was not UTF-8; its event was dropped.
    #[error("SSE data is not valid UTF-8")]
    InvalidUtf8,
}

/// Incremental SSE decoder with a bounded event size.
#[derive(Debug)]
pub struct SseDecoder {
    limit: usize,
    buf: Vec<u8>,
    /// Start of the unfinished line in `buf`.
    start: usize,
    /// `buf[start..scanned]` holds no line terminator.
    scanned: usize,
    /// The last line ended with `\r`: a `\n` at the start of the next push belongs to it.
    after_cr: bool,
    /// The current event is being dropped (too large or bad UTF-8).
    dropping: bool,
    /// The unfinished line was discarded: the next terminator ends it (it is not blank).
    in_discarded_line: bool,
    /// Bytes of the current event so far.
    size: usize,
    pending: SseEvent,
    has_data: bool,
    error: Option<SseError>,
}

impl Default for SseDecoder {
    fn default() -> Self {
        SseDecoder::new(DEFAULT_MAX_EVENT_BYTES)
    }
}

impl SseDecoder {
    /// A decoder dropping events larger than `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> Self {
        SseDecoder {
            limit: max_event_bytes,
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            after_cr: false,
            dropping: false,
            in_discarded_line: false,
            size: 0,
            pending: SseEvent::default(),
            has_data: false,
            error: None,
        }
    }

    /// Adds received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start * 2 >= self.buf.len() {
            self.buf.drain(..self.start);
            self.scanned -= self.start;
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held for an unfinished line or event.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start + self.pending.data.len()
    }

    /// The next complete event, an error for a dropped one, or `None` until more bytes come.
    pub fn next_event(&mut self) -> Option<Result<SseEvent, SseError>> {
        loop {
            if let Some(e) = self.error.take() {
                return Some(Err(e));
            }
            if self.after_cr && self.start < self.buf.len() {
                if self.buf[self.start] == b'\n' {
                    self.start += 1;
                    self.scanned = self.scanned.max(self.start);
                }
                self.after_cr = false;
            }
            let from = self.scanned.max(self.start);
            let Some(rel) = self.buf[from..]
                .iter()
                .position(|&b| b == b'\n' || b == b'\r')
            else {
                self.scanned = self.buf.len();
                if self.check_size(self.buf.len() - self.start) {
                    // Keep nothing of a line that belongs to a dropped event.
                    self.in_discarded_line |= self.start < self.buf.len();
                    self.start = self.buf.len();
                    self.scanned = self.start;
                }
                return self.error.take().map(Err);
            };
            let end = from + rel;
            let term = self.buf[end];
            let mut next = end + 1;
            if term == b'\r' {
                match self.buf.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            let line_len = end - self.start;
            let line_start = self.start;
            self.start = next;
            self.scanned = next;
            if std::mem::take(&mut self.in_discarded_line) {
                continue;
            }
            if line_len == 0 {
                if let Some(ev) = self.dispatch() {
                    return Some(Ok(ev));
                }
                continue;
            }
            if self.dropping {
                continue;
            }
            self.size += line_len + 1;
            if self.check_size(0) {
                continue;
            }
            let buf = std::mem::take(&mut self.buf);
            self.field(&buf[line_start..end]);
            self.buf = buf;
        }
    }

    /// Starts dropping the current event if it (plus `extra` unfinished bytes) is too large.
    fn check_size(&mut self, extra: usize) -> bool {
        if !self.dropping && self.size + extra > self.limit {
            self.dropping = true;
            self.pending = SseEvent::default();
            self.has_data = false;
            self.error = Some(SseError::TooLarge { limit: self.limit });
        }
        self.dropping
    }

    fn field(&mut self, line: &[u8]) {
        if line[0] == b':' {
            return;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &[][..]),
        };
        let Ok(value) = std::str::from_utf8(value) else {
            if name == b"data" {
                self.dropping = true;
                self.pending = SseEvent::default();
                self.has_data = false;
                self.error = Some(SseError::InvalidUtf8);
            }
            return;
        };
        match name {
            b"data" => {
                if self.has_data {
                    self.pending.data.push('\n');
                }
                self.pending.data.push_str(value);
                self.has_data = true;
            }
            b"event" => self.pending.event = Some(value.to_owned()),
            b"id" => self.pending.id = Some(value.to_owned()),
            _ => {}
        }
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let was_dropping = std::mem::replace(&mut self.dropping, false);
        self.size = 0;
        let ev = std::mem::take(&mut self.pending);
        let had = std::mem::replace(&mut self.has_data, false);
        (had && !was_dropping).then_some(ev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(d: &mut SseDecoder) -> Vec<Result<SseEvent, SseError>> {
        std::iter::from_fn(|| d.next_event()).collect()
    }

    fn data(s: &str) -> Result<SseEvent, SseError> {
        Ok(SseEvent {
            data: s.into(),
            ..SseEvent::default()
        })
    }

    #[test]
    fn frames_decode_back_at_every_split_point() {
        let mut wire = frame(br#"{"a":1}"#);
        wire.extend_from_slice(KEEPALIVE);
        wire.extend_from_slice(&frame(b"line1\r\nline2\rline3"));
        for split in 0..=wire.len() {
            let mut d = SseDecoder::default();
            d.push(&wire[..split]);
            let mut got = all(&mut d);
            d.push(&wire[split..]);
            got.extend(all(&mut d));
            assert_eq!(
                got,
                vec![data(r#"{"a":1}"#), data("line1\nline2\nline3")],
                "split {split}"
            );
        }
    }

    #[test]
    fn byte_by_byte_with_crlf_and_fields() {
        let wire =
            b"event: x\r\nid: 7\r\ndata:a\r\ndata: b\r\nretry: 5\r\n\r\n: c\r\n\r\ndata\r\n\r\n";
        let mut d = SseDecoder::default();
        let mut got = Vec::new();
        for b in wire {
            d.push(&[*b]);
            got.extend(all(&mut d));
        }
        assert_eq!(
            got,
            vec![
                Ok(SseEvent {
                    data: "a\nb".into(),
                    event: Some("x".into()),
                    id: Some("7".into())
                }),
                data(""),
            ]
        );
    }

    #[test]
    fn oversized_events_are_dropped_and_decoding_continues() {
        let mut d = SseDecoder::new(16);
        d.push(b"data: 0123456789abcdefghij\n\ndata: ok\n\n");
        assert_eq!(
            all(&mut d),
            vec![Err(SseError::TooLarge { limit: 16 }), data("ok")]
        );
        // An unfinished line that is already too long is not buffered.
        let mut d = SseDecoder::new(16);
        d.push(&[b'x'; 100]);
        assert_eq!(all(&mut d), vec![Err(SseError::TooLarge { limit: 16 })]);
        assert!(d.buffered() <= 16);
        d.push(b"yyy\ndata: rest-of-the-dropped-event\n\ndata: ok\n\n");
        assert_eq!(all(&mut d), vec![data("ok")]);
    }

    #[test]
    fn invalid_utf8_drops_only_its_event() {
        let mut d = SseDecoder::default();
        d.push(b"data: \xff\n\ndata: ok\n\n");
        assert_eq!(all(&mut d), vec![Err(SseError::InvalidUtf8), data("ok")]);
    }

    #[test]
    fn an_unterminated_event_is_not_dispatched() {
        let mut d = SseDecoder::default();
        d.push(b"data: partial\n");
        assert_eq!(all(&mut d), vec![]);
    }
}
