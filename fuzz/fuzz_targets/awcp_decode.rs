//! AWCP's decoders on arbitrary bytes, both dialects: none may panic, and whatever decodes
//! must encode (in the dialect it came in) to something that decodes again, and reach a fixed
//! point: after two rounds of encoding and decoding, a third gives the same value (the first
//! rounds may normalise what lenient decoding accepted).
#![no_main]

use awcp_proto::wire::{
    decode_event, decode_handle, decode_message, encode_event, encode_message, Dialect,
};
use libfuzzer_sys::fuzz_target;

/// Three rounds of `enc` then `dec` from `(v, d)`; the second and third must agree.
fn fixed_point<T: PartialEq + std::fmt::Debug>(
    v: T,
    d: Dialect,
    enc: impl Fn(&T, Dialect) -> String,
    dec: impl Fn(&[u8]) -> Option<(T, Dialect)>,
) {
    let mut cur = (v, d);
    let mut rounds = Vec::new();
    for _ in 0..3 {
        let body = enc(&cur.0, cur.1);
        cur = dec(body.as_bytes())
            .unwrap_or_else(|| panic!("an encoded value does not decode: {body}"));
        rounds.push(format!("{:?}", cur.0));
    }
    assert_eq!(rounds[1], rounds[2], "no fixed point after two rounds");
}

fuzz_target!(|data: &[u8]| {
    if let Ok((m, d)) = decode_message(data) {
        fixed_point(m, d, encode_message, |b| decode_message(b).ok());
    }
    if let Ok((e, d)) = decode_event(data) {
        fixed_point(e, d, encode_event, |b| decode_event(b).ok());
    }
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = decode_handle(&v, "transportHandle");
    }
});
