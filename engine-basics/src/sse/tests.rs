#![allow(clippy::unwrap_used)]

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

/// Everything the decoder gives for `chunks`, pushed one after another.
fn decode_chunks<'a>(
    dec: &mut SseDecoder,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Vec<Result<SseEvent, SseError>> {
    let mut out = Vec::new();
    for c in chunks {
        dec.push(c);
        out.extend(all(dec));
    }
    out
}

/// What the decoder gives for the bytes pushed so far.
fn all(dec: &mut SseDecoder) -> Vec<Result<SseEvent, SseError>> {
    std::iter::from_fn(|| dec.next_event()).collect()
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
    let want: Vec<_> = STREAM
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(data)
        .collect();
    assert_eq!(want.len(), 3);
    assert_eq!(whole, want);
    let b = STREAM.as_bytes();
    for i in 0..=b.len() {
        let got = decode_chunks(&mut SseDecoder::default(), [&b[..i], &b[i..]]);
        assert_eq!(got, whole, "split at {i}");
    }
    let got = decode_chunks(&mut SseDecoder::default(), b.chunks(1));
    assert_eq!(got, whole, "byte by byte");
}

#[test]
fn frames_decode_back_at_every_split_point() {
    let mut wire = frame(br#"{"a":1}"#);
    wire.extend_from_slice(KEEPALIVE.as_bytes());
    wire.extend_from_slice(&frame(b"line1\r\nline2\rline3"));
    for split in 0..=wire.len() {
        let got = decode_chunks(&mut SseDecoder::default(), [&wire[..split], &wire[split..]]);
        assert_eq!(
            got,
            vec![data(r#"{"a":1}"#), data("line1\nline2\nline3")],
            "split {split}"
        );
    }
}

#[test]
fn crlf_cr_and_no_space() {
    let want = vec![data("a"), data("b"), data("c")];
    assert_eq!(decode_all(b"data:a\r\n\r\ndata: b\r\rdata:c\n\n"), want);
    // A CR ending one push, its LF starting the next.
    let got = decode_chunks(
        &mut SseDecoder::default(),
        [&b"data: a\r"[..], b"\n\r", b"\ndata: b\r", b"\r"],
    );
    assert_eq!(got, vec![data("a"), data("b")]);
}

#[test]
fn byte_by_byte_with_crlf_and_fields() {
    let wire = b"event: x\r\nid: 7\r\ndata:a\r\ndata: b\r\nretry: 5\r\n\r\n: c\r\n\r\ndata\r\n\r\n";
    let got = decode_chunks(&mut SseDecoder::default(), wire.chunks(1));
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
    // Blank lines without data dispatch nothing; `event` and `id` do not carry over.
    assert_eq!(decode_all(b"event: x\n\n\n\ndata: y\n\n"), vec![data("y")]);
    assert_eq!(decode_all(b"id: 1\ndata: a\n\ndata: b\n\n"), {
        let mut first = data("a");
        if let Ok(ev) = &mut first {
            ev.id = Some("1".into());
        }
        vec![first, data("b")]
    });
    // An id holding a NUL is ignored; `data :` is another field.
    assert_eq!(
        decode_all(b"id: a\0b\ndata : x\ndata: y\n\n"),
        vec![data("y")]
    );
}

#[test]
fn over_limit_events_are_dropped_and_decoding_continues() {
    let too_large = || Err(SseError::TooLarge { limit: 16 });
    let got = decode_chunks(
        &mut SseDecoder::new(16),
        [
            &b"data: 0123"[..],
            b"456789abcdef",
            b"ghij\ndata: rest of the dropped event\n\ndata: ok\n\n",
            // Short lines, one event: `: c\n` and `data: 0123456\n` are 18 bytes.
            b": c\ndata: 0123456\n\ndata: k2\n\n",
        ],
    );
    assert_eq!(got, vec![too_large(), data("ok"), too_large(), data("k2")]);
    // Exactly at the limit is fine: `data: 0123456789\n` is 17 bytes.
    let at = b"data: 0123456789\n\n";
    assert_eq!(decode_all_with(17, at), vec![data("0123456789")]);
    assert_eq!(
        decode_all_with(16, at),
        vec![Err(SseError::TooLarge { limit: 16 })]
    );
    // An event over the limit in total, though each line is under it.
    assert_eq!(
        decode_all_with(16, b"data: 12345\ndata: 67890\n\ndata: z\n\n"),
        vec![Err(SseError::TooLarge { limit: 16 }), data("z")]
    );
}

fn decode_all_with(limit: usize, input: &[u8]) -> Vec<Result<SseEvent, SseError>> {
    decode_chunks(&mut SseDecoder::new(limit), [input])
}

#[test]
fn an_unfinished_line_over_the_limit_is_not_buffered() {
    let mut d = SseDecoder::new(16);
    d.push(&[b'x'; 100]);
    assert_eq!(all(&mut d), vec![Err(SseError::TooLarge { limit: 16 })]);
    assert!(d.buffered() <= 16, "buffered {}", d.buffered());
    d.push(b"yyy\ndata: rest-of-the-dropped-event\n\ndata: ok\n\n");
    assert_eq!(all(&mut d), vec![data("ok")]);
}

#[test]
fn bytes_of_a_discarded_line_are_not_buffered() {
    let mut d = SseDecoder::new(8);
    d.push(b"data: 123456789");
    assert_eq!(d.next_event(), Some(Err(SseError::TooLarge { limit: 8 })));
    for _ in 0..1000 {
        d.push(&[b'x'; 1000]);
        assert_eq!(d.buf.len(), 0, "push skips the line's bytes");
        assert_eq!(d.next_event(), None);
    }
    // The line's end split across pushes: `\r`, then `\n`.
    d.push(b"yy\r");
    d.push(b"\n\ndata:ok\n\n");
    assert_eq!(all(&mut d), vec![data("ok")]);
    assert_eq!(d.buffered(), 0);
}

#[test]
fn invalid_utf8_drops_only_its_event() {
    let got = decode_all(b"data: a\ndata: \xff\xfe\ndata: b\n\ndata: ok\n\n");
    assert_eq!(got, vec![Err(SseError::InvalidUtf8), data("ok")]);
    // Other fields are read with replacement and do not drop the event.
    let got = decode_all(b"event: \xff\ndata: x\n\n");
    assert_eq!(
        got,
        vec![Ok(SseEvent {
            data: "x".into(),
            event: Some("\u{fffd}".into()),
            id: None,
        })]
    );
}

#[test]
fn an_unterminated_event_is_not_dispatched() {
    assert_eq!(decode_all(b"data: a\n"), vec![]);
    assert_eq!(decode_all(b"data: a"), vec![]);
    let mut d = SseDecoder::default();
    d.push(b"data: partial\n");
    assert_eq!(d.next_event(), None);
    assert_eq!(d.buffered(), "partial".len());
}

#[test]
fn big_line_in_small_chunks() {
    let payload = "x".repeat(4 << 20);
    let framed = encode_data(&payload);
    let mut d = SseDecoder::default();
    let got = decode_chunks(&mut d, framed.as_bytes().chunks(1024));
    assert_eq!(got, vec![data(&payload)]);
    // The same line over the limit: dropped, and never held.
    let mut d = SseDecoder::new(1 << 20);
    let mut got = Vec::new();
    for c in framed.as_bytes().chunks(1024) {
        d.push(c);
        if got.is_empty() {
            assert!(d.buf.len() <= (1 << 20) + 1024);
        } else {
            // Once dropped, the line's bytes are skipped: at most its end and the blank line
            // are held.
            assert!(d.buf.len() <= 2, "holds {} bytes", d.buf.len());
        }
        got.extend(all(&mut d));
    }
    assert_eq!(got, vec![Err(SseError::TooLarge { limit: 1 << 20 })]);
}

#[test]
fn encoder_shapes() {
    assert_eq!(encode_data("{\"a\":1}"), "data: {\"a\":1}\n\n");
    assert_eq!(encode_data("a\nb"), "data: a\ndata: b\n\n");
    assert_eq!(
        encode_data("a\r\nb\rc\n"),
        "data: a\ndata: b\ndata: c\ndata: \n\n"
    );
    assert_eq!(encode_data(""), "data: \n\n");
    assert_eq!(frame(b"a\r\nb"), b"data: a\ndata: b\n\n");
    assert_eq!(KEEPALIVE, ": keepalive\n\n");
    assert_eq!(decode_all(KEEPALIVE.as_bytes()), vec![]);
}

proptest! {
    #[test]
    fn encode_decode_round_trip(s in "[^\r]*") {
        prop_assert_eq!(decode_all(encode_data(&s).as_bytes()), vec![data(&s)]);
        prop_assert_eq!(frame(s.as_bytes()), encode_data(&s).into_bytes());
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
        let expected: Vec<_> = items.iter().map(|s| data(s)).collect();
        prop_assert_eq!(&decode_all(bytes), &expected);
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
    fn chunking_does_not_matter_over_the_limit(
        input in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'\r'), Just(b':'), Just(b'd'), Just(b'a'), Just(b't'), Just(b' ')], 0..120),
        size in 1usize..9,
        limit in 0usize..24,
    ) {
        let whole = decode_chunks(&mut SseDecoder::new(limit), [&input[..]]);
        prop_assert_eq!(decode_chunks(&mut SseDecoder::new(limit), input.chunks(size)), whole);
    }

    #[test]
    fn never_panics(input in proptest::collection::vec(any::<u8>(), 0..200), limit in 0usize..16) {
        let mut d = SseDecoder::new(limit);
        let _ = decode_chunks(&mut d, input.chunks(3));
        prop_assert!(d.buffered() <= input.len());
    }
}
