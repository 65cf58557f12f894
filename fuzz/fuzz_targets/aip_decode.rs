//! AIP's decoders on arbitrary bytes, both dialects: none may panic, and whatever decodes
//! must encode (in the dialect it came in) to something that decodes again, and reach a fixed
//! point: after two rounds of encoding and decoding, a third gives the same value.
//!
//! Why not after one: decoding is lenient, so the first round may change the dialect (a v02
//! `task-command` without its `command` decodes, and a command without one is written as a
//! `message`, which reads as v01.00), and the second may fill in what that dialect requires
//! (v01.00 always writes `dataItems`, so an absent list comes back as `[]`).
#![no_main]

use aip_proto::{
    decode_command, decode_event_data, decode_request, decode_rpc_response, decode_stream_event,
    decode_task, encode_command, encode_command_request, encode_task, Dialect, Params,
};
use libfuzzer_sys::fuzz_target;

/// Three rounds of `enc` then `dec` from `(v, d)`; the second and third must agree.
fn fixed_point<T: PartialEq + std::fmt::Debug>(
    v: T,
    d: Dialect,
    enc: impl Fn(&T, Dialect) -> Vec<u8>,
    dec: impl Fn(&[u8]) -> Option<(T, Dialect)>,
) {
    let mut cur = (v, d);
    let mut rounds = Vec::new();
    for _ in 0..3 {
        let body = enc(&cur.0, cur.1);
        cur = dec(&body).unwrap_or_else(|| {
            panic!("an encoded value does not decode: {}", String::from_utf8_lossy(&body))
        });
        rounds.push(format!("{:?}", cur.0));
    }
    assert_eq!(rounds[1], rounds[2], "no fixed point after two rounds");
}

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = decode_request(data) {
        if let Params::Command(c) = &req.params {
            let (id, method) = (req.id.clone(), req.method.clone());
            fixed_point(
                (**c).clone(),
                req.dialect,
                |c, d| encode_command_request(&id, &method, c, d),
                |b| match decode_request(b).ok()? {
                    aip_proto::Request {
                        params: Params::Command(c),
                        dialect,
                        ..
                    } => Some(((*c).clone(), dialect)),
                    _ => None,
                },
            );
        }
    }
    if let Ok((c, d)) = decode_command(data) {
        fixed_point(c, d, encode_command, |b| decode_command(b).ok());
    }
    if let Ok((t, d)) = decode_task(data) {
        fixed_point(t, d, encode_task, |b| decode_task(b).ok());
    }
    let _ = decode_event_data(data);
    let _ = decode_rpc_response(data);
    let _ = decode_stream_event(data);
});
