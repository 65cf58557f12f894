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
//!
//! Event ids (WIRE.md §4.6, this implementation): the executor writes `id: <n>` before each
//! event's one `data:` line ([`encode_with_id`], [`data_prefix`]); a delegator reads it back
//! with [`parse_event_id`] and sends the last one as `Last-Event-ID` when it reconnects. A
//! reference delegator counts only lines starting with `data: ` and ignores the `id:` line.

mod diverting;

pub use diverting::{DivertingSseDecoder, DropReason, SsePiece, MAX_ID_BYTES};
pub use engine_basics::sse::{
    encode_data, SseDecoder, SseError, SseEvent, DEFAULT_MAX_EVENT_BYTES, KEEPALIVE,
};

/// One event framed with its id: `id: <id>\n` (when `id` is `Some`), then
/// [`encode_data`]'s `data: <json>\n\n`.
pub fn encode_with_id(id: Option<u64>, json: &str) -> String {
    let mut out = data_prefix(id);
    out.truncate(out.len() - "data: ".len());
    out.push_str(&encode_data(json));
    out
}

/// What is written before an event's JSON when the JSON is streamed in pieces (it must be
/// one line): `id: <id>\n` (when `id` is `Some`) and `data: `.
pub fn data_prefix(id: Option<u64>) -> String {
    match id {
        Some(id) => format!("id: {id}\ndata: "),
        None => "data: ".to_owned(),
    }
}

/// An SSE `id:` value (or a `Last-Event-ID` header) as an event id of this implementation: a
/// decimal number. Anything else (another server's ids) is `None`: treated as no id.
pub fn parse_event_id(value: &str) -> Option<u64> {
    let v = value.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const STATUS: &str = r#"{"delegationId":"dlg_1","type":"status","status":"running"}"#;

    #[test]
    fn an_event_with_an_id_has_its_id_line_then_one_data_line() {
        let framed = encode_with_id(Some(7), STATUS);
        assert_eq!(framed, format!("id: 7\ndata: {STATUS}\n\n"));
        assert_eq!(encode_with_id(None, STATUS), encode_data(STATUS));
        assert_eq!(data_prefix(Some(12)), "id: 12\ndata: ");
        assert_eq!(data_prefix(None), "data: ");
    }

    #[test]
    fn a_reference_style_parser_still_sees_one_data_line_per_event() {
        // WIRE.md §4.4: split on `\n`, count only lines starting with exactly `data: `.
        let stream = [1, 2, 3]
            .map(|i| encode_with_id(Some(i), STATUS))
            .join(KEEPALIVE);
        let data: Vec<&str> = stream
            .split('\n')
            .filter_map(|l| l.strip_prefix("data: "))
            .collect();
        assert_eq!(data, vec![STATUS; 3]);
    }

    #[test]
    fn both_decoders_read_the_id_back() {
        let stream = format!(
            "{}{}",
            encode_with_id(Some(41), STATUS),
            encode_with_id(Some(42), STATUS)
        );
        let mut plain = SseDecoder::default();
        plain.push(stream.as_bytes());
        let ids: Vec<_> = std::iter::from_fn(|| plain.next_event())
            .map(|e| e.unwrap().id.and_then(|i| parse_event_id(&i)))
            .collect();
        assert_eq!(ids, vec![Some(41), Some(42)]);
        for size in 1..stream.len() {
            let mut d = DivertingSseDecoder::new(1 << 10, 1 << 10);
            let mut pieces = Vec::new();
            for c in stream.as_bytes().chunks(size) {
                d.push(c, &mut pieces);
            }
            let ids: Vec<_> = pieces
                .iter()
                .filter_map(|p| match p {
                    SsePiece::Event { data, id, .. } => {
                        assert_eq!(data, STATUS);
                        Some(id.as_deref().and_then(parse_event_id))
                    }
                    SsePiece::ArchiveText(_) | SsePiece::Dropped(_) => None,
                })
                .collect();
            assert_eq!(ids, vec![Some(41), Some(42)], "pieces of {size}");
        }
    }

    #[test]
    fn only_decimal_ids_are_event_ids() {
        assert_eq!(parse_event_id("17"), Some(17));
        assert_eq!(parse_event_id(" 17 "), Some(17));
        assert_eq!(parse_event_id(""), None);
        assert_eq!(parse_event_id("-1"), None);
        assert_eq!(parse_event_id("+1"), None);
        assert_eq!(parse_event_id("abc"), None);
        assert_eq!(parse_event_id("99999999999999999999999"), None);
    }
}
