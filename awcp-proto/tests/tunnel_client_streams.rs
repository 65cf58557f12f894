//! The executor's tunnel client, its requests: extension streams under flow control, and the
//! reference dialect's whole responses and SSE events.

// Helpers outside #[test] functions unwrap too (a panic there is a failed test), and
// filter outputs with wildcards.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

mod tunnel_common;

use awcp_proto::tunnel::{
    ClientEvent, ClientInput, ClientOutput, DataFrame, LocalRequest, TunnelClientConfig,
    TunnelUsageError, WsFrame,
};
use tunnel_common::client::*;

#[test]
fn extension_requests_stream_both_ways_under_flow_control() {
    let mut config = TunnelClientConfig::new("t", 1);
    config.window = 2048;
    let mut c = ready(config, true);
    let outs = input(
        &mut c,
        1,
        frame(
            r#"{"type":"HTTP_REQUEST_HEAD","stream":3,"method":"POST","path":"/","headers":[["content-type","application/json"]],"end":false}"#,
        ),
    );
    let req = LocalRequest(1);
    assert_eq!(
        outs,
        [ClientOutput::StartLocalRequest {
            request: req,
            method: "POST".into(),
            path: "/".into(),
            headers: vec![("content-type".into(), "application/json".into())],
            body: true
        }]
    );
    let data = |end, payload: Vec<u8>| {
        ClientInput::Frame(WsFrame::Binary(
            DataFrame {
                stream: 3,
                end,
                payload,
            }
            .encode(),
        ))
    };
    assert_eq!(
        input(&mut c, 1, data(false, vec![1; 1500])),
        [ClientOutput::RequestBodyChunk {
            request: req,
            bytes: vec![1; 1500]
        }]
    );
    // Half the window consumed: granted back.
    let outs = input(
        &mut c,
        1,
        ClientInput::RequestBodyConsumed {
            request: req,
            bytes: 1500,
        },
    );
    assert_eq!(
        sent_text(&outs),
        [r#"{"type":"WINDOW","stream":3,"increment":1500}"#]
    );
    let outs = input(&mut c, 1, data(true, vec![2; 10]));
    assert_eq!(
        outs.last(),
        Some(&ClientOutput::RequestBodyEnd { request: req })
    );

    // The response: the head goes out, the driver may feed the relay's window (4096).
    let outs = input(
        &mut c,
        2,
        ClientInput::ResponseHead {
            request: req,
            status: 200,
            headers: vec![
                ("Content-Type".into(), "application/json".into()),
                ("Connection".into(), "close".into()),
            ],
        },
    );
    assert_eq!(
        sent_text(&outs),
        [
            r#"{"type":"HTTP_RESPONSE_HEAD","stream":3,"status":200,"headers":[["content-type","application/json"]],"end":false}"#
        ]
    );
    assert!(outs.contains(&ClientOutput::ResponseCredit {
        request: req,
        bytes: 4096
    }));
    let outs = input(
        &mut c,
        2,
        ClientInput::ResponseChunk {
            request: req,
            bytes: vec![7; 5000],
        },
    );
    assert_eq!(
        sent_data(&outs)
            .iter()
            .map(|d| d.payload.len())
            .sum::<usize>(),
        4096
    );
    assert_eq!(
        c.handle(
            at(2),
            ClientInput::ResponseChunk {
                request: req,
                bytes: vec![7]
            }
        ),
        Err(TunnelUsageError::NoCredit(1))
    );
    input(&mut c, 2, ClientInput::ResponseEnd { request: req });
    let outs = input(
        &mut c,
        3,
        frame(r#"{"type":"WINDOW","stream":3,"increment":4096}"#),
    );
    let frames = sent_data(&outs);
    assert_eq!(frames.iter().map(|d| d.payload.len()).sum::<usize>(), 904);
    assert!(frames.last().unwrap().end);
    assert_eq!(c.open_requests(), 0);

    // A relay overrunning the window gets a RESET, and the local request is cancelled.
    input(
        &mut c,
        4,
        frame(
            r#"{"type":"HTTP_REQUEST_HEAD","stream":4,"method":"POST","path":"/","headers":[],"end":false}"#,
        ),
    );
    let outs = input(
        &mut c,
        4,
        ClientInput::Frame(WsFrame::Binary(
            DataFrame {
                stream: 4,
                end: false,
                payload: vec![0; 2049],
            }
            .encode(),
        )),
    );
    assert!(sent_text(&outs)[0].starts_with(r#"{"type":"RESET","stream":4"#));
    assert!(outs.contains(&ClientOutput::CancelLocalRequest {
        request: LocalRequest(2)
    }));
    // The relay's RESET cancels; a local failure resets.
    input(
        &mut c,
        5,
        frame(
            r#"{"type":"HTTP_REQUEST_HEAD","stream":5,"method":"GET","path":"/status","headers":[],"end":true}"#,
        ),
    );
    assert_eq!(
        input(&mut c, 5, frame(r#"{"type":"RESET","stream":5}"#)),
        [ClientOutput::CancelLocalRequest {
            request: LocalRequest(3)
        }]
    );
    input(
        &mut c,
        6,
        frame(
            r#"{"type":"HTTP_REQUEST_HEAD","stream":6,"method":"GET","path":"/status","headers":[],"end":true}"#,
        ),
    );
    let outs = input(
        &mut c,
        6,
        ClientInput::LocalFailed {
            request: LocalRequest(4),
            reason: "boom".into(),
        },
    );
    assert_eq!(
        sent_text(&outs),
        [r#"{"type":"RESET","stream":6,"reason":"boom"}"#]
    );
}

#[test]
fn a_reference_relay_gets_whole_responses_and_sse_events() {
    let mut c = ready(TunnelClientConfig::new("t", 1), false);
    let outs = input(
        &mut c,
        1,
        frame(
            r#"{"type":"HTTP_REQUEST","requestId":"r-1","method":"POST","path":"/","headers":{"content-type":"application/json"},"body":"{\"type\":\"START\"}"}"#,
        ),
    );
    let req = LocalRequest(1);
    assert_eq!(
        outs,
        [
            ClientOutput::StartLocalRequest {
                request: req,
                method: "POST".into(),
                path: "/".into(),
                headers: vec![("content-type".into(), "application/json".into())],
                body: true
            },
            ClientOutput::RequestBodyChunk {
                request: req,
                bytes: br#"{"type":"START"}"#.to_vec()
            },
            ClientOutput::RequestBodyEnd { request: req },
        ]
    );
    let outs = input(
        &mut c,
        2,
        ClientInput::ResponseHead {
            request: req,
            status: 200,
            headers: vec![
                ("Content-Type".into(), "application/json".into()),
                ("content-length".into(), "11".into()),
            ],
        },
    );
    assert_eq!(
        outs,
        [ClientOutput::ResponseCredit {
            request: req,
            bytes: (8 << 20) + 1
        }]
    );
    input(
        &mut c,
        2,
        ClientInput::ResponseChunk {
            request: req,
            bytes: b"{\"ok\":".to_vec(),
        },
    );
    input(
        &mut c,
        2,
        ClientInput::ResponseChunk {
            request: req,
            bytes: b"true}".to_vec(),
        },
    );
    let outs = input(&mut c, 2, ClientInput::ResponseEnd { request: req });
    assert_eq!(
        sent_text(&outs),
        [
            r#"{"type":"HTTP_RESPONSE","requestId":"r-1","status":200,"headers":{"content-type":"application/json"},"body":"{\"ok\":true}"}"#
        ]
    );

    // SSE_OPEN is a local GET of the event stream; its events go out one by one.
    let outs = input(
        &mut c,
        3,
        frame(r#"{"type":"SSE_OPEN","streamId":"s-1","path":"/tasks/dlg_1/events"}"#),
    );
    let sse = LocalRequest(2);
    assert_eq!(
        outs,
        [ClientOutput::StartLocalRequest {
            request: sse,
            method: "GET".into(),
            path: "/tasks/dlg_1/events".into(),
            headers: vec![("accept".into(), "text/event-stream".into())],
            body: false
        }]
    );
    input(
        &mut c,
        3,
        ClientInput::ResponseHead {
            request: sse,
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
        },
    );
    let outs = input(
        &mut c,
        4,
        ClientInput::ResponseChunk {
            request: sse,
            bytes: b": keepalive\n\nid: 1\ndata: {\"type\":\"status\"}\n\ndata: {\"ty".to_vec(),
        },
    );
    assert_eq!(
        sent_text(&outs),
        [r#"{"type":"SSE_EVENT","streamId":"s-1","data":"{\"type\":\"status\"}"}"#]
    );
    let outs = input(
        &mut c,
        4,
        ClientInput::ResponseChunk {
            request: sse,
            bytes: b"pe\":\"done\"}\n\n".to_vec(),
        },
    );
    assert_eq!(
        sent_text(&outs),
        [r#"{"type":"SSE_EVENT","streamId":"s-1","data":"{\"type\":\"done\"}"}"#]
    );
    let outs = input(&mut c, 5, ClientInput::ResponseEnd { request: sse });
    assert_eq!(sent_text(&outs), [r#"{"type":"SSE_END","streamId":"s-1"}"#]);

    // SSE_CLOSE cancels; an event stream that is not one (404) ends at once.
    input(
        &mut c,
        6,
        frame(r#"{"type":"SSE_OPEN","streamId":"s-2","path":"/tasks/x/events"}"#),
    );
    assert_eq!(
        input(&mut c, 6, frame(r#"{"type":"SSE_CLOSE","streamId":"s-2"}"#)),
        [ClientOutput::CancelLocalRequest {
            request: LocalRequest(3)
        }]
    );
    input(
        &mut c,
        7,
        frame(r#"{"type":"SSE_OPEN","streamId":"s-3","path":"/tasks/y/events"}"#),
    );
    let outs = input(
        &mut c,
        7,
        ClientInput::ResponseHead {
            request: LocalRequest(4),
            status: 404,
            headers: vec![],
        },
    );
    assert_eq!(sent_text(&outs), [r#"{"type":"SSE_END","streamId":"s-3"}"#]);

    // Extension frames from a relay that did not agree to the extension are dropped.
    let outs = input(
        &mut c,
        8,
        frame(r#"{"type":"HTTP_REQUEST_HEAD","stream":1,"method":"GET","path":"/","headers":[]}"#),
    );
    assert!(matches!(
        &outs[..],
        [ClientOutput::Event(ClientEvent::ProtocolViolation { .. })]
    ));
}
