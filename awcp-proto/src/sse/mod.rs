//! Server-sent events framing (WIRE.md §4.3, §15): pure byte-level code.
//!
//! The codec is the one both engines share, [`engine_basics::sse`], re-exported here:
//! * [`encode_data`] frames one compact JSON event as `data: <json>\n\n`; [`KEEPALIVE`] is the
//!   comment the executor sends to keep idle connections open.
//! * [`SseDecoder`] is an incremental, lenient (WHATWG-style) decoder: feed it bytes with
//!   [`SseDecoder::push`] in chunks of any size, then call [`SseDecoder::next_event`] until it
//!   returns `None`. It bounds an event, not a line: an event larger than its limit (all its
//!   lines; [`DEFAULT_MAX_EVENT_BYTES`] by default) is dropped with [`SseError::TooLarge`] and
//!   decoding goes on with the next one; the bytes of a line of a dropped event are skipped,
//!   not buffered. The parsing rules are on [`engine_basics::sse`].
//!
//! What is AWCP's own: a delegator reading results uses [`DivertingSseDecoder`] instead, which
//! passes a result archive out piece by piece rather than buffering its event: it follows the
//! same rules, except that `event:` and `id:` values are not kept (nothing reads them on that
//! path) and no line is ever buffered; what is bounded is an event's JSON besides its archive
//! and the archive text, each with its own limit.

mod diverting;

pub use diverting::{DivertingSseDecoder, DropReason, SsePiece};
pub use engine_basics::sse::{
    encode_data, SseDecoder, SseError, SseEvent, DEFAULT_MAX_EVENT_BYTES, KEEPALIVE,
};
