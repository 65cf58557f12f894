//! Server-sent events, as AIP streams use them (§6.2).
//!
//! The codec is the one both engines share, [`engine_basics::sse`], re-exported here: [`frame`]
//! writes one event as `data: <json>\n\n` (one compact line; should the text hold line breaks,
//! each line gets its own `data:` field) and [`SseDecoder`] reads a stream incrementally,
//! dropping an event larger than its limit with [`SseError::TooLarge`] and carrying on with
//! the next one (the parsing rules are on [`engine_basics::sse`]). AIP defines no `event:`,
//! `id:` or `retry:` lines; the decoder keeps `event:` and `id:` on the event all the same.
//!
//! What is AIP's own: [`KEEPALIVE`] as bytes (a stream's frames are bytes) and the response
//! headers of a stream, [`STREAM_HEADERS`].

pub use engine_basics::sse::{frame, SseDecoder, SseError, SseEvent, DEFAULT_MAX_EVENT_BYTES};

/// A comment frame for idle streams ([`engine_basics::sse::KEEPALIVE`] as bytes).
pub const KEEPALIVE: &[u8] = engine_basics::sse::KEEPALIVE.as_bytes();

/// The HTTP headers of a stream response (§6.2: `text/event-stream`, no caching, keep-alive).
pub const STREAM_HEADERS: [(&str, &str); 3] = [
    ("Content-Type", "text/event-stream"),
    ("Cache-Control", "no-cache"),
    ("Connection", "keep-alive"),
];
