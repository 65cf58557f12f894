//! Tunnel frames on the wire: every reference message decodes from the exact JSON the
//! reference sends and encodes to the exact JSON it reads; the extension's frames are pinned
//! the same way; malformed frames are typed errors, never panics.

// Helpers outside #[test] functions unwrap too (a panic there is a failed test), and
// filter outputs with wildcards.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

use awcp_proto::tunnel::frames::*;
use awcp_proto::tunnel::{decode_frame, decode_text, DataFrame, FrameError, Incoming, WsFrame};
use proptest::prelude::*;

fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// `text` decodes to `message`, and `message` encodes to exactly `text`.
fn golden(text: &str, message: Message) {
    assert_eq!(decode_text(text).unwrap(), message, "decoding {text}");
    assert_eq!(message.to_json(), text, "encoding {message:?}");
}

// ---- what a reference client (the executor) sends: `JSON.stringify` of its object literals ----

#[test]
fn reference_client_auth() {
    golden(
        r#"{"type":"AUTH","token":"tok-123"}"#,
        Message::Auth(Auth {
            token: "tok-123".into(),
            features: None,
            window: None,
        }),
    );
}

#[test]
fn reference_client_http_response() {
    golden(
        r#"{"type":"HTTP_RESPONSE","requestId":"7","status":200,"headers":{"Content-Type":"application/json"},"body":"{\"ok\":true}"}"#,
        Message::HttpResponse(HttpResponse {
            request_id: "7".into(),
            status: 200,
            headers: h(&[("Content-Type", "application/json")]),
            body: r#"{"ok":true}"#.into(),
        }),
    );
}

#[test]
fn reference_client_sse_event_and_end() {
    golden(
        r#"{"type":"SSE_EVENT","streamId":"9","data":"{\"type\":\"status\",\"delegationId\":\"dlg_1\"}"}"#,
        Message::SseEvent(SseEvent {
            stream_id: "9".into(),
            data: r#"{"type":"status","delegationId":"dlg_1"}"#.into(),
        }),
    );
    golden(
        r#"{"type":"SSE_END","streamId":"9"}"#,
        Message::SseEnd(SseStream {
            stream_id: "9".into(),
        }),
    );
}

// ---- what a reference client reads (the relay sends) ----

#[test]
fn relay_auth_ok_and_error_for_a_reference_client() {
    golden(
        r#"{"type":"AUTH_OK","publicUrl":"https://relay.example/e/alice/awcp"}"#,
        Message::AuthOk(AuthOk {
            public_url: "https://relay.example/e/alice/awcp".into(),
            features: None,
            window: None,
        }),
    );
    golden(
        r#"{"type":"AUTH_ERROR","reason":"invalid token"}"#,
        Message::AuthError(AuthError {
            reason: "invalid token".into(),
        }),
    );
}

#[test]
fn relay_http_request_with_and_without_body() {
    golden(
        r#"{"type":"HTTP_REQUEST","requestId":"1","method":"POST","path":"/","headers":{"content-type":"application/json"},"body":"{\"type\":\"INVITE\"}"}"#,
        Message::HttpRequest(HttpRequest {
            request_id: "1".into(),
            method: "POST".into(),
            path: "/".into(),
            headers: h(&[("content-type", "application/json")]),
            body: Some(r#"{"type":"INVITE"}"#.into()),
        }),
    );
    golden(
        r#"{"type":"HTTP_REQUEST","requestId":"2","method":"GET","path":"/status","headers":{}}"#,
        Message::HttpRequest(HttpRequest {
            request_id: "2".into(),
            method: "GET".into(),
            path: "/status".into(),
            headers: vec![],
            body: None,
        }),
    );
}

#[test]
fn relay_sse_open_close_and_ping() {
    golden(
        r#"{"type":"SSE_OPEN","streamId":"3","path":"/tasks/dlg_1/events"}"#,
        Message::SseOpen(SseOpen {
            stream_id: "3".into(),
            path: "/tasks/dlg_1/events".into(),
        }),
    );
    golden(
        r#"{"type":"SSE_CLOSE","streamId":"3"}"#,
        Message::SseClose(SseStream {
            stream_id: "3".into(),
        }),
    );
    golden(r#"{"type":"PING"}"#, Message::Ping(Ping { id: None }));
}

// ---- reading leniently, as a JavaScript peer would ----

#[test]
fn unknown_fields_numeric_ids_and_missing_optional_fields_are_accepted() {
    let m = decode_text(
        r#"{"extra":1,"type":"HTTP_RESPONSE","requestId":7,"status":404,"body":null,"more":{"a":[1]}}"#,
    )
    .unwrap();
    assert_eq!(
        m,
        Message::HttpResponse(HttpResponse {
            request_id: "7".into(),
            status: 404,
            headers: vec![],
            body: String::new(),
        })
    );
    let m = decode_text(r#"{"type":"AUTH_ERROR"}"#).unwrap();
    assert_eq!(m, Message::AuthError(AuthError { reason: "".into() }));
    let m = decode_text(r#"{"type":"PING","ts":123}"#).unwrap();
    assert_eq!(m, Message::Ping(Ping { id: None }));
    // Features that are not strings are skipped; null is absent.
    let m =
        decode_text(r#"{"type":"AUTH","token":"t","features":["awcp-tunnel-v1",3,null]}"#).unwrap();
    assert_eq!(
        m,
        Message::Auth(Auth {
            token: "t".into(),
            features: Some(vec![EXTENSION_V1.into()]),
            window: None
        })
    );
}

// ---- our extension ----

#[test]
fn extension_handshake_frames() {
    golden(
        r#"{"type":"AUTH","token":"t","features":["awcp-tunnel-v1"],"window":262144}"#,
        Message::Auth(Auth {
            token: "t".into(),
            features: Some(vec![EXTENSION_V1.into()]),
            window: Some(DEFAULT_WINDOW),
        }),
    );
    golden(
        r#"{"type":"AUTH_OK","publicUrl":"https://r/e/a/awcp","features":["awcp-tunnel-v1"],"window":65536}"#,
        Message::AuthOk(AuthOk {
            public_url: "https://r/e/a/awcp".into(),
            features: Some(vec![EXTENSION_V1.into()]),
            window: Some(65536),
        }),
    );
}

#[test]
fn extension_stream_frames() {
    golden(
        r#"{"type":"HTTP_REQUEST_HEAD","stream":5,"method":"GET","path":"/tasks/dlg_1/events","headers":[["last-event-id","12"]],"end":true}"#,
        Message::RequestHead(RequestHead {
            stream: 5,
            method: "GET".into(),
            path: "/tasks/dlg_1/events".into(),
            headers: h(&[("last-event-id", "12")]),
            end: true,
        }),
    );
    golden(
        r#"{"type":"HTTP_RESPONSE_HEAD","stream":5,"status":200,"headers":[["content-type","text/event-stream"]],"end":false}"#,
        Message::ResponseHead(ResponseHead {
            stream: 5,
            status: 200,
            headers: h(&[("content-type", "text/event-stream")]),
            end: false,
        }),
    );
    golden(
        r#"{"type":"WINDOW","stream":5,"increment":131072}"#,
        Message::Window(Window {
            stream: 5,
            increment: 131072,
        }),
    );
    golden(
        r#"{"type":"RESET","stream":5,"reason":"client went away"}"#,
        Message::Reset(Reset {
            stream: 5,
            reason: Some("client went away".into()),
        }),
    );
    golden(
        r#"{"type":"PING","id":4}"#,
        Message::Ping(Ping { id: Some(4) }),
    );
    golden(r#"{"type":"PONG","id":4}"#, Message::Pong(Pong { id: 4 }));
}

#[test]
fn data_frame_layout_is_pinned() {
    let f = DataFrame {
        stream: 258,
        end: true,
        payload: b"hi".to_vec(),
    };
    assert_eq!(f.encode(), vec![0x01, 0x01, 0, 0, 1, 2, b'h', b'i']);
    let bytes = DataFrame::encode_parts(1, false, b"");
    assert_eq!(bytes, vec![0x01, 0x00, 0, 0, 0, 1]);
}

// ---- malformed frames ----

#[test]
fn malformed_text_frames_are_typed_errors() {
    type Check = fn(&FrameError) -> bool;
    let cases: &[(&str, Check)] = &[
        ("", |e| matches!(e, FrameError::InvalidJson(_))),
        ("{", |e| matches!(e, FrameError::InvalidJson(_))),
        (r#"["AUTH","x"]"#, |e| {
            matches!(e, FrameError::InvalidJson(_))
        }),
        (r#"{"token":"x"}"#, |e| *e == FrameError::MissingType),
        (r#"{"type":7}"#, |e| matches!(e, FrameError::InvalidJson(_))),
        (r#"{"type":"NOPE"}"#, |e| {
            *e == FrameError::UnknownType("NOPE".into())
        }),
        (r#"{"type":"AUTH"}"#, |e| {
            matches!(
                e,
                FrameError::InvalidFields {
                    frame_type: "AUTH",
                    ..
                }
            )
        }),
        (
            r#"{"type":"HTTP_RESPONSE","requestId":"1","status":70000}"#,
            |e| matches!(e, FrameError::InvalidFields { .. }),
        ),
        (
            r#"{"type":"WINDOW","stream":4294967296,"increment":1}"#,
            |e| matches!(e, FrameError::InvalidFields { .. }),
        ),
        (r#"{"type":"WINDOW","stream":-1,"increment":1}"#, |e| {
            matches!(e, FrameError::InvalidFields { .. })
        }),
        (r#"{"type":"PONG","id":1e400}"#, |e| {
            matches!(
                e,
                FrameError::InvalidJson(_) | FrameError::InvalidFields { .. }
            )
        }),
    ];
    for (text, check) in cases {
        let err = decode_text(text).unwrap_err();
        assert!(check(&err), "{text}: {err:?}");
    }
    // Huge ids and tokens are refused, not stored.
    let long_id = format!(
        r#"{{"type":"SSE_END","streamId":"{}"}}"#,
        "x".repeat(MAX_ID_LEN + 1)
    );
    assert!(matches!(
        decode_text(&long_id),
        Err(FrameError::InvalidFields { .. })
    ));
    let long_token = format!(
        r#"{{"type":"AUTH","token":"{}"}}"#,
        "x".repeat(MAX_TOKEN_LEN + 1)
    );
    assert!(matches!(
        decode_text(&long_token),
        Err(FrameError::InvalidFields { .. })
    ));
    // An unknown type is cut short in the error.
    let long_type = format!(r#"{{"type":"{}"}}"#, "T".repeat(10_000));
    match decode_text(&long_type) {
        Err(FrameError::UnknownType(t)) => assert_eq!(t.len(), 64),
        other => panic!("{other:?}"),
    }
}

#[test]
fn short_or_unknown_binary_frames_are_typed_errors() {
    for n in 0..6 {
        assert_eq!(
            decode_frame(WsFrame::Binary(vec![1; n]), 1 << 20, true),
            Err(FrameError::ShortHeader { len: n })
        );
    }
    assert_eq!(
        decode_frame(WsFrame::Binary(vec![0, 0, 0, 0, 0, 1]), 1 << 20, true),
        Err(FrameError::UnknownKind(0))
    );
    assert_eq!(
        decode_frame(WsFrame::Binary(vec![1, 0, 0, 0, 0, 1]), 1 << 20, false),
        Err(FrameError::UnexpectedBinary)
    );
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let _ = decode_frame(WsFrame::Text(text), 1 << 20, true);
        let _ = decode_frame(WsFrame::Binary(bytes), 1 << 20, true);
    }

    #[test]
    fn random_json_objects_never_panic(
        ty in prop_oneof![
            proptest::sample::select(&[
                "AUTH", "AUTH_OK", "HTTP_REQUEST", "HTTP_RESPONSE", "SSE_OPEN", "SSE_EVENT",
                "SSE_END", "PING", "PONG", "HTTP_REQUEST_HEAD", "HTTP_RESPONSE_HEAD", "WINDOW",
                "RESET",
            ][..]).prop_map(String::from),
            "[A-Z_]{0,12}",
        ],
        fields in proptest::collection::vec(
            (
                prop_oneof![
                    Just("token"), Just("requestId"), Just("streamId"), Just("stream"),
                    Just("status"), Just("headers"), Just("body"), Just("data"), Just("id"),
                    Just("increment"), Just("features"), Just("window"), Just("end"),
                    Just("method"), Just("path"), Just("publicUrl"),
                ],
                prop_oneof![
                    Just("null".to_string()), Just("true".to_string()),
                    any::<i64>().prop_map(|n| n.to_string()),
                    any::<u64>().prop_map(|n| n.to_string()),
                    "[a-z]{0,8}".prop_map(|s| format!("\"{s}\"")),
                    Just("[]".to_string()), Just("{}".to_string()),
                    Just("[[\"a\",\"b\"]]".to_string()), Just("{\"a\":[1,null]}".to_string()),
                    Just("1.5".to_string()), Just("-0".to_string()),
                ],
            ),
            0..8,
        ),
    ) {
        let mut text = format!("{{\"type\":\"{ty}\"");
        for (k, v) in &fields {
            text.push_str(&format!(",\"{k}\":{v}"));
        }
        text.push('}');
        // Whatever comes out, a message that decodes encodes and decodes to itself.
        if let Ok(Incoming::Message(m)) = decode_frame(WsFrame::Text(text), 1 << 20, true) {
            prop_assert_eq!(decode_text(&m.to_json()).unwrap(), m);
        }
    }
}
