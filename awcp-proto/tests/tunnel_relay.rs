//! The relay machine serving its two kinds of clients: a reference client (the reference's
//! message set, whole bodies, SSE events) and an extension client (streams, flow control).

// Helpers outside #[test] functions unwrap too (a panic there is a failed test), and
// filter outputs with wildcards.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

mod tunnel_common;

use awcp_proto::tunnel::frames::*;
use awcp_proto::tunnel::{DataFrame, RelayConfig, RelayEvent, RelayInput, RelayOutput, WsFrame};
use awcp_proto::RequestId;
use tunnel_common::relay::*;

#[test]
fn a_reference_client_is_served_the_reference_subset() {
    let mut r = relay();
    let outs = reference_client(&mut r, C1, "token-a");
    assert_eq!(
        sent_text(&outs, C1),
        [r#"{"type":"AUTH_OK","publicUrl":"https://relay.example/e/alice/awcp"}"#]
    );
    assert!(
        outs.contains(&RelayOutput::Event(RelayEvent::ExecutorOnline {
            name: name("alice"),
            conn: C1,
            extension: false
        }))
    );

    // POST /awcp: the body is collected whole, then sent as one HTTP_REQUEST.
    let outs = input(
        &mut r,
        1,
        request(
            10,
            "POST",
            "/e/alice/awcp",
            &[
                ("Content-Type", "application/json"),
                ("Content-Length", "17"),
                ("Connection", "keep-alive"),
            ],
            true,
        ),
    );
    assert_eq!(
        outs,
        [RelayOutput::RequestCredit {
            request: RequestId(10),
            bytes: (8 << 20) + 1
        }]
    );
    let invite = br#"{"type":"INVITE"}"#;
    for part in invite.chunks(5) {
        let outs = input(
            &mut r,
            1,
            RelayInput::RequestChunk {
                request: RequestId(10),
                bytes: part.to_vec(),
            },
        );
        assert!(outs.is_empty());
    }
    let outs = input(
        &mut r,
        1,
        RelayInput::RequestEnd {
            request: RequestId(10),
        },
    );
    assert_eq!(
        sent_text(&outs, C1),
        [
            r#"{"type":"HTTP_REQUEST","requestId":"1","method":"POST","path":"/","headers":{"content-type":"application/json"},"body":"{\"type\":\"INVITE\"}"}"#
        ]
    );

    // The reference client's answer, byte for byte as it writes it.
    let outs = input(
        &mut r,
        2,
        text(
            C1,
            r#"{"type":"HTTP_RESPONSE","requestId":"1","status":200,"headers":{"Content-Type":"application/json"},"body":"{\"type\":\"ACCEPT\"}"}"#,
        ),
    );
    assert_eq!(
        outs,
        [
            RelayOutput::ResponseHead {
                request: RequestId(10),
                status: 200,
                headers: vec![("content-type".into(), "application/json".into())],
                end: false
            },
            RelayOutput::ResponseBody {
                request: RequestId(10),
                bytes: br#"{"type":"ACCEPT"}"#.to_vec()
            },
            RelayOutput::ResponseEnd {
                request: RequestId(10)
            },
        ]
    );

    // GET /status has no body: sent at once, without `body`.
    let outs = input(
        &mut r,
        3,
        request(11, "GET", "/e/alice/awcp/status?x=1", &[], false),
    );
    assert_eq!(
        sent_text(&outs, C1),
        [r#"{"type":"HTTP_REQUEST","requestId":"2","method":"GET","path":"/status","headers":{}}"#]
    );

    // Routes the reference does not serve are answered by the relay.
    let outs = input(
        &mut r,
        3,
        request(12, "GET", "/e/alice/awcp/tasks/dlg_1/result", &[], false),
    );
    assert_eq!(refused(&outs, 12), Some(404));
    assert!(sent_text(&outs, C1).is_empty());
}

#[test]
fn a_reference_client_streams_events_and_hears_when_the_subscriber_leaves() {
    let mut r = relay();
    reference_client(&mut r, C1, "token-a");
    let outs = input(
        &mut r,
        1,
        request(
            20,
            "GET",
            "/e/alice/awcp/tasks/dlg_1/events",
            &[("Last-Event-ID", "4")],
            false,
        ),
    );
    assert_eq!(
        sent_text(&outs, C1),
        [r#"{"type":"SSE_OPEN","streamId":"1","path":"/tasks/dlg_1/events"}"#]
    );
    assert!(matches!(
        &outs[1],
        RelayOutput::ResponseHead { status: 200, headers, end: false, .. }
            if headers[0] == ("content-type".to_string(), "text/event-stream".to_string())
    ));
    let outs = input(
        &mut r,
        2,
        text(
            C1,
            r#"{"type":"SSE_EVENT","streamId":"1","data":"{\"type\":\"status\"}"}"#,
        ),
    );
    assert_eq!(
        outs,
        [RelayOutput::ResponseBody {
            request: RequestId(20),
            bytes: b"data: {\"type\":\"status\"}\n\n".to_vec()
        }]
    );
    let outs = input(&mut r, 3, text(C1, r#"{"type":"SSE_END","streamId":"1"}"#));
    assert_eq!(
        outs,
        [RelayOutput::ResponseEnd {
            request: RequestId(20)
        }]
    );

    input(
        &mut r,
        4,
        request(21, "GET", "/e/alice/awcp/tasks/dlg_2/events", &[], false),
    );
    let outs = input(
        &mut r,
        5,
        RelayInput::RequestGone {
            request: RequestId(21),
        },
    );
    assert_eq!(
        sent_text(&outs, C1),
        [r#"{"type":"SSE_CLOSE","streamId":"2"}"#]
    );
    // A late event for it is dropped.
    let outs = input(
        &mut r,
        6,
        text(C1, r#"{"type":"SSE_EVENT","streamId":"2","data":"{}"}"#),
    );
    assert!(outs.is_empty());
    assert_eq!(r.open_requests(), 0);
}

#[test]
fn a_reference_client_cannot_take_bodies_it_cannot_carry() {
    let mut config = RelayConfig::new("https://relay.example");
    config.reference_body_cap = 10;
    let mut r = relay_with(config);
    reference_client(&mut r, C1, "token-a");
    input(&mut r, 1, request(1, "POST", "/e/alice/awcp", &[], true));
    let outs = input(
        &mut r,
        1,
        RelayInput::RequestChunk {
            request: RequestId(1),
            bytes: vec![b'x'; 11],
        },
    );
    assert_eq!(refused(&outs, 1), Some(413));
    input(
        &mut r,
        1,
        request(2, "POST", "/e/alice/awcp/cancel/dlg_1", &[], true),
    );
    input(
        &mut r,
        1,
        RelayInput::RequestChunk {
            request: RequestId(2),
            bytes: vec![0xff, 0xfe],
        },
    );
    let outs = input(
        &mut r,
        1,
        RelayInput::RequestEnd {
            request: RequestId(2),
        },
    );
    assert_eq!(refused(&outs, 2), Some(502));
    assert!(sent_text(&outs, C1).is_empty());
    // Feeding a request that was refused is a usage error, not a panic.
    assert!(r
        .handle(
            at(2),
            RelayInput::RequestChunk {
                request: RequestId(1),
                bytes: vec![1]
            }
        )
        .is_err());
}

#[test]
fn an_extension_client_streams_bodies_within_the_granted_windows() {
    let mut r = relay();
    let outs = extension_client(&mut r, C1, "token-a");
    assert_eq!(
        sent_text(&outs, C1),
        [
            r#"{"type":"AUTH_OK","publicUrl":"https://relay.example/e/alice/awcp","features":["awcp-tunnel-v1"],"window":262144}"#
        ]
    );
    // Any route, with its headers (hop-by-hop ones dropped) and a streamed body.
    let outs = input(
        &mut r,
        1,
        request(
            7,
            "POST",
            "/e/alice/awcp/tasks/dlg_1/ack",
            &[("Host", "relay.example"), ("Authorization", "Bearer s")],
            true,
        ),
    );
    assert_eq!(
        sent_text(&outs, C1),
        [
            r#"{"type":"HTTP_REQUEST_HEAD","stream":1,"method":"POST","path":"/tasks/dlg_1/ack","headers":[["authorization","Bearer s"]],"end":false}"#
        ]
    );
    assert!(outs.contains(&RelayOutput::RequestCredit {
        request: RequestId(7),
        bytes: 1024
    }));
    // The driver overshoots its credit with one chunk: only the credit goes out.
    let outs = input(
        &mut r,
        1,
        RelayInput::RequestChunk {
            request: RequestId(7),
            bytes: vec![1; 3000],
        },
    );
    let data = sent_data(&outs, C1);
    assert_eq!(data.iter().map(|d| d.payload.len()).sum::<usize>(), 1024);
    // And may not feed more until the executor grants more.
    assert!(r
        .handle(
            at(1),
            RelayInput::RequestChunk {
                request: RequestId(7),
                bytes: vec![1]
            }
        )
        .is_err());
    let outs = input(
        &mut r,
        2,
        msg(
            C1,
            &Message::Window(Window {
                stream: 1,
                increment: 4000,
            }),
        ),
    );
    assert_eq!(
        sent_data(&outs, C1)
            .iter()
            .map(|d| d.payload.len())
            .sum::<usize>(),
        1976
    );
    assert!(outs.contains(&RelayOutput::RequestCredit {
        request: RequestId(7),
        bytes: 4000 - 1976
    }));
    let outs = input(
        &mut r,
        2,
        RelayInput::RequestEnd {
            request: RequestId(7),
        },
    );
    let end = sent_data(&outs, C1);
    assert!(end.len() == 1 && end[0].end && end[0].payload.is_empty());

    // The response: head, then body frames the relay passes on.
    let head = ResponseHead {
        stream: 1,
        status: 200,
        headers: vec![
            ("Content-Type".into(), "application/json".into()),
            ("Transfer-Encoding".into(), "chunked".into()),
        ],
        end: false,
    };
    let outs = input(&mut r, 3, msg(C1, &Message::ResponseHead(head)));
    assert_eq!(
        outs,
        [RelayOutput::ResponseHead {
            request: RequestId(7),
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            end: false
        }]
    );
    let frame = DataFrame {
        stream: 1,
        end: false,
        payload: vec![9; 200_000],
    };
    let outs = input(
        &mut r,
        3,
        RelayInput::Frame {
            conn: C1,
            frame: WsFrame::Binary(frame.encode()),
        },
    );
    assert!(
        matches!(&outs[..], [RelayOutput::ResponseBody { bytes, .. }] if bytes.len() == 200_000)
    );
    // Written to the public client: half a window or more is granted back.
    let outs = input(
        &mut r,
        4,
        RelayInput::ResponseWritten {
            request: RequestId(7),
            bytes: 200_000,
        },
    );
    assert_eq!(
        sent_text(&outs, C1),
        [r#"{"type":"WINDOW","stream":1,"increment":200000}"#]
    );
    let end = DataFrame {
        stream: 1,
        end: true,
        payload: vec![],
    };
    let outs = input(
        &mut r,
        5,
        RelayInput::Frame {
            conn: C1,
            frame: WsFrame::Binary(end.encode()),
        },
    );
    assert_eq!(
        outs,
        [RelayOutput::ResponseEnd {
            request: RequestId(7)
        }]
    );
    assert_eq!(r.open_requests(), 0);
}

#[test]
fn an_executor_that_overruns_its_window_is_reset() {
    let mut r = relay();
    extension_client(&mut r, C1, "token-a");
    input(
        &mut r,
        1,
        request(1, "GET", "/e/alice/awcp/tasks/d/result", &[], false),
    );
    // Body before head: reset, the public client gets a 502.
    let early = DataFrame {
        stream: 1,
        end: false,
        payload: vec![1],
    };
    let outs = input(
        &mut r,
        1,
        RelayInput::Frame {
            conn: C1,
            frame: WsFrame::Binary(early.encode()),
        },
    );
    assert_eq!(refused(&outs, 1), Some(502));
    assert!(sent_text(&outs, C1)[0].starts_with(r#"{"type":"RESET","stream":1"#));

    input(
        &mut r,
        2,
        request(2, "GET", "/e/alice/awcp/tasks/d/result", &[], false),
    );
    let head = ResponseHead {
        stream: 2,
        status: 200,
        headers: vec![],
        end: false,
    };
    input(&mut r, 2, msg(C1, &Message::ResponseHead(head)));
    let too_much = DataFrame {
        stream: 2,
        end: false,
        payload: vec![0; DEFAULT_WINDOW as usize + 1],
    };
    let outs = input(
        &mut r,
        2,
        RelayInput::Frame {
            conn: C1,
            frame: WsFrame::Binary(too_much.encode()),
        },
    );
    assert!(outs.contains(&RelayOutput::ResponseAbort {
        request: RequestId(2)
    }));
    assert!(outs.iter().any(|o| matches!(
        o,
        RelayOutput::Event(RelayEvent::ProtocolViolation { reason, .. }) if reason.contains("flow control")
    )));
    assert_eq!(r.open_requests(), 0);
}
