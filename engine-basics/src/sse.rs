//! Server-sent events framing, the one codec of both engines (AWCP's event streams, AIP's
//! `stream` responses): pure byte-level code.
//!
//! * Encoding: [`frame`] (bytes) and [`encode_data`] (text) write one event as
//!   `data: <line>\n` per line, then a blank line. Compact JSON is one line; should the text
//!   hold line breaks (`\n`, `\r\n` or `\r`), each line gets its own `data:` field, so a decoder
//!   rebuilds it with `\n` separators (a carriage return cannot survive SSE framing).
//!   [`KEEPALIVE`] is the comment frame that keeps idle connections open.
//! * Decoding: [`SseDecoder`] is incremental: [`SseDecoder::push`] bytes in chunks of any size,
//!   then call [`SseDecoder::next_event`] until it returns `None`.
//!
//! Decoder rules (the WHATWG parsing rules, leniently):
//! * Lines end in `\n`, `\r\n` or `\r` (a `\r\n` split across two pushes counts once).
//! * `data:` with or without one leading space; several `data` lines join with `\n`.
//! * A blank line dispatches the pending event if at least one `data` line was seen.
//! * Lines starting with `:` are comments (keepalives) and are skipped; `event:` and `id:` are
//!   kept per event (the id does not carry over to later events; one holding a NUL is
//!   ignored; both are read as UTF-8 with replacement), `retry:` and unknown fields are
//!   skipped. A UTF-8 byte-order mark is not stripped.
//! * An event larger than the decoder's limit (all its lines, each counted with one byte for
//!   its terminator) is dropped with [`SseError::TooLarge`], reported once; decoding goes on
//!   with the next event. Bytes of a line of a dropped event are not buffered.
//! * A `data` line that is not UTF-8 drops its event with [`SseError::InvalidUtf8`].
//! * A stream that ends without a final blank line drops the partial event (there is no
//!   `finish`; this matches browsers).
//!
//! Scanning is linear in the input: the decoder remembers how far it looked for a line end, so
//! a multi-megabyte line fed in small chunks is scanned once.

use std::ops::Range;

/// The keepalive comment (plus the blank line that ends it).
pub const KEEPALIVE: &str = ": keepalive\n\n";

/// Default limit of [`SseDecoder::default`] for one event (all its lines): 64 MiB.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 64 * 1024 * 1024;

/// Frames `data` (JSON) as one event: `data: <line>\n` per line, then a blank line.
pub fn frame(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 8);
    for line in lines(data) {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(&data[line]);
        out.push(b'\n');
    }
    out.push(b'\n');
    out
}

/// Frames `json` as one event, as text: the same bytes as [`frame`].
pub fn encode_data(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + 8);
    for line in lines(json.as_bytes()) {
        out.push_str("data: ");
        // Lines end at an ASCII `\n` or `\r`, so each range lies on character boundaries.
        out.push_str(&json[line]);
        out.push('\n');
    }
    out.push('\n');
    out
}

/// The lines of `data` (at least one, maybe empty), split at `\n`, `\r\n` or `\r`.
fn lines(data: &[u8]) -> impl Iterator<Item = Range<usize>> + '_ {
    let mut start = Some(0);
    std::iter::from_fn(move || {
        let from = start?;
        let rest = &data[from..];
        match memchr::memchr2(b'\n', b'\r', rest) {
            Some(i) => {
                let crlf = rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n');
                start = Some(from + i + 1 + usize::from(crlf));
                Some(from..from + i)
            }
            None => {
                start = None;
                Some(from..data.len())
            }
        }
    })
}

/// One decoded event.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The `event:` field, if the event had one.
    pub event: Option<String>,
    /// The `id:` field, if the event had one.
    pub id: Option<String>,
}

/// A framing problem: the event it names was dropped; the decoder stays usable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SseError {
    /// An event exceeded the decoder's limit; it was dropped.
    #[error("SSE event larger than {limit} bytes")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// A `data` line was not valid UTF-8; its event was dropped.
    #[error("SSE data is not valid UTF-8")]
    InvalidUtf8,
}

/// Incremental SSE decoder with a bounded event size (see the [module rules](self)).
#[derive(Debug)]
pub struct SseDecoder {
    limit: usize,
    /// Buffered input; bytes before `start` are consumed.
    buf: Vec<u8>,
    /// Start of the unfinished line in `buf`.
    start: usize,
    /// `buf[start..scanned]` holds no line terminator.
    scanned: usize,
    /// The last line ended with `\r` at the end of the input: a `\n` next belongs to it.
    after_cr: bool,
    /// The current event is being dropped (too large or bad UTF-8).
    dropping: bool,
    /// The unfinished line was discarded: the next terminator ends it (it is not blank).
    in_discarded_line: bool,
    /// Bytes of the current event's complete lines so far.
    size: usize,
    pending: SseEvent,
    has_data: bool,
    error: Option<SseError>,
}

impl Default for SseDecoder {
    /// A decoder dropping events larger than [`DEFAULT_MAX_EVENT_BYTES`].
    fn default() -> Self {
        SseDecoder::new(DEFAULT_MAX_EVENT_BYTES)
    }
}

impl SseDecoder {
    /// A decoder dropping events larger than `max_event_bytes` (every line of the event,
    /// comments included, counted with one byte for its terminator).
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

    /// Appends received bytes. Call [`SseDecoder::next_event`] until it returns `None`
    /// afterwards; `push` does no decoding beyond skipping the rest of a discarded line.
    pub fn push(&mut self, mut bytes: &[u8]) {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
            self.scanned = 0;
            if self.in_discarded_line {
                // Inside a line of a dropped event: skip its bytes at once instead of
                // buffering them. The terminator is kept: `next_event` ends the line with it.
                match memchr::memchr2(b'\n', b'\r', bytes) {
                    Some(end) => bytes = &bytes[end..],
                    None => return,
                }
            }
        } else if self.start > 0 && self.start * 2 >= self.buf.len() {
            // Amortised compaction: every byte is moved at most a constant number of times.
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
            if self.after_cr {
                if self.start == self.buf.len() {
                    return None;
                }
                if self.buf[self.start] == b'\n' {
                    self.start += 1;
                }
                self.after_cr = false;
            }
            let from = self.scanned.max(self.start);
            let Some(rel) = memchr::memchr2(b'\n', b'\r', &self.buf[from..]) else {
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
            let mut next = end + 1;
            if self.buf[end] == b'\r' {
                match self.buf.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            let line = self.start..end;
            self.start = next;
            self.scanned = next;
            if std::mem::take(&mut self.in_discarded_line) {
                continue;
            }
            if line.is_empty() {
                if let Some(ev) = self.dispatch() {
                    return Some(Ok(ev));
                }
                continue;
            }
            if self.dropping {
                continue;
            }
            self.size = self.size.saturating_add(line.len() + 1);
            if self.check_size(0) {
                continue;
            }
            let buf = std::mem::take(&mut self.buf);
            self.field(&buf[line]);
            self.buf = buf;
        }
    }

    /// Starts dropping the current event if it (plus `extra` unfinished bytes) is too large.
    fn check_size(&mut self, extra: usize) -> bool {
        if !self.dropping && self.size.saturating_add(extra) > self.limit {
            self.drop_event(SseError::TooLarge { limit: self.limit });
        }
        self.dropping
    }

    fn drop_event(&mut self, why: SseError) {
        self.dropping = true;
        self.pending = SseEvent::default();
        self.has_data = false;
        self.error = Some(why);
    }

    /// One complete, non-blank line of the current event.
    fn field(&mut self, line: &[u8]) {
        if line.first() == Some(&b':') {
            return;
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &[][..]),
        };
        match name {
            b"data" => match std::str::from_utf8(value) {
                Ok(text) => {
                    if self.has_data {
                        self.pending.data.push('\n');
                    }
                    self.pending.data.push_str(text);
                    self.has_data = true;
                }
                Err(_) => self.drop_event(SseError::InvalidUtf8),
            },
            b"event" => self.pending.event = Some(String::from_utf8_lossy(value).into_owned()),
            b"id" if !value.contains(&0) => {
                self.pending.id = Some(String::from_utf8_lossy(value).into_owned());
            }
            _ => {} // `retry` and unknown fields
        }
    }

    /// A blank line: the current event, if it had data and was not dropped.
    fn dispatch(&mut self) -> Option<SseEvent> {
        let was_dropping = std::mem::replace(&mut self.dropping, false);
        self.size = 0;
        let ev = std::mem::take(&mut self.pending);
        let had = std::mem::replace(&mut self.has_data, false);
        (had && !was_dropping).then_some(ev)
    }
}

#[cfg(test)]
mod tests;
