//! The executor's client and the relay wired together in memory, in virtual time: bodies
//! stream both ways under flow control (a sender never exceeds its credit, a receiver never
//! holds more than its window), both dialects interoperate, and an event stream survives a
//! reconnect by `Last-Event-ID`.

// Helpers outside #[test] functions unwrap too (a panic there is a failed test), and
// filter outputs with wildcards.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]
mod tunnel_common;

use awcp_proto::tunnel::{
    ClientEvent, ClientInput, ConnectionId, LocalRequest, RelayEvent, RelayInput, WsFrame,
};
use awcp_proto::RequestId;
use proptest::prelude::*;
use tunnel_common::pair::*;

/// POSTs `request_len` bytes through the tunnel and answers with `response_len` bytes, the
/// public client and the local handler reading and writing in random steps.
fn transfer(request_len: usize, response_len: usize, seed: u64, max_chunk: u64) -> Pair {
    let mut pair = Pair::new(true, 4096, 8192);
    assert!(pair.client_events.iter().any(|e| matches!(
        e,
        ClientEvent::Ready {
            extension: true,
            ..
        }
    )));
    let request_body: Vec<u8> = (0..request_len).map(|i| (i % 251) as u8).collect();
    let response_body: Vec<u8> = (0..response_len).map(|i| (i % 241) as u8).collect();
    let id = RequestId(1);
    pair.relay_in(RelayInput::Request {
        request: id,
        method: "POST".into(),
        path: "/e/alice/awcp".into(),
        headers: vec![],
        body: true,
    });
    let mut rng = Rng(seed);
    let (mut fed, mut request_ended) = (0usize, false);
    let (mut produced, mut head_sent, mut response_ended) = (0usize, false, false);
    for _ in 0..1_000_000 {
        if pair.public.get(&id).is_some_and(|p| p.ended) {
            break;
        }
        // The public client sends its body as far as its credit goes (one chunk may overshoot).
        let credit = pair.public.get(&id).map_or(0, |p| p.credit);
        if !request_ended && credit > 0 {
            if fed < request_len {
                let n = (1 + rng.below(max_chunk)) as usize;
                let n = n.min(request_len - fed);
                let bytes = request_body[fed..fed + n].to_vec();
                fed += n;
                pair.public.get_mut(&id).unwrap().credit = credit.saturating_sub(n as u64);
                pair.relay_in(RelayInput::RequestChunk { request: id, bytes });
            } else {
                request_ended = true;
                pair.relay_in(RelayInput::RequestEnd { request: id });
            }
        } else if !request_ended && fed == request_len && credit == 0 && request_len == 0 {
            request_ended = true;
            pair.relay_in(RelayInput::RequestEnd { request: id });
        }
        // The local handler takes some of what it holds.
        let local = LocalRequest(1);
        if let Some(l) = pair.local.get_mut(&local) {
            if l.unconsumed > 0 {
                let n = 1 + rng.below(l.unconsumed);
                l.unconsumed -= n;
                pair.client_in(ClientInput::RequestBodyConsumed {
                    request: local,
                    bytes: n,
                });
            }
        }
        // Once the request is whole, it answers, as far as its credit goes.
        let l = pair.local.get(&local);
        if l.is_some_and(|l| l.body_ended && l.unconsumed == 0) && !head_sent {
            head_sent = true;
            pair.client_in(ClientInput::ResponseHead {
                request: local,
                status: 200,
                headers: vec![("content-type".into(), "application/octet-stream".into())],
            });
        }
        let credit = pair.local.get(&local).map_or(0, |l| l.credit);
        if head_sent && !response_ended && credit > 0 {
            if produced < response_len {
                let n = ((1 + rng.below(max_chunk)) as usize).min(response_len - produced);
                let bytes = response_body[produced..produced + n].to_vec();
                produced += n;
                pair.local.get_mut(&local).unwrap().credit = credit.saturating_sub(n as u64);
                pair.client_in(ClientInput::ResponseChunk {
                    request: local,
                    bytes,
                });
            } else {
                response_ended = true;
                pair.client_in(ClientInput::ResponseEnd { request: local });
            }
        } else if head_sent && !response_ended && produced == response_len {
            response_ended = true;
            pair.client_in(ClientInput::ResponseEnd { request: local });
        }
        // The public client reads some of the response.
        if let Some(p) = pair.public.get_mut(&id) {
            assert!(
                p.unwritten <= u64::from(pair.relay_window),
                "the relay holds more than its window"
            );
            if p.unwritten > 0 {
                let n = 1 + rng.below(p.unwritten);
                p.unwritten -= n;
                pair.relay_in(RelayInput::ResponseWritten {
                    request: id,
                    bytes: n,
                });
            }
        }
    }
    let p = &pair.public[&id];
    assert!(p.ended, "the transfer finished");
    assert_eq!(p.status, Some(200));
    assert_eq!(p.body, response_body);
    assert_eq!(pair.local[&LocalRequest(1)].body, request_body);
    assert_eq!(pair.violations(), 0);
    assert_eq!(pair.relay.open_requests(), 0);
    assert_eq!(pair.client.open_requests(), 0);
    pair
}

#[test]
fn a_large_body_streams_both_ways_within_the_windows() {
    transfer(300_000, 500_000, 1, 70_000);
    transfer(0, 0, 2, 10);
    transfer(1, 1, 3, 10);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn senders_never_exceed_their_credit(
        request_len in 0usize..40_000,
        response_len in 0usize..40_000,
        seed in any::<u64>(),
        max_chunk in 1u64..20_000,
    ) {
        transfer(request_len, response_len, seed, max_chunk);
    }
}

#[test]
fn an_event_stream_resumes_by_last_event_id_after_a_reconnect() {
    let mut pair = Pair::new(true, 4096, 4096);
    pair.relay_in(get("/e/alice/awcp/tasks/dlg_1/events", &[], 1));
    let first = LocalRequest(1);
    assert_eq!(pair.local[&first].path, "/tasks/dlg_1/events");
    pair.client_in(ClientInput::ResponseHead {
        request: first,
        status: 200,
        headers: vec![("content-type".into(), "text/event-stream".into())],
    });
    let event = b"id: 1\ndata: {\"type\":\"status\"}\n\n".to_vec();
    pair.client_in(ClientInput::ResponseChunk {
        request: first,
        bytes: event.clone(),
    });
    assert_eq!(pair.public[&RequestId(1)].body, event);

    // The tunnel breaks: the public stream is cut, the local one cancelled.
    pair.client_in(ClientInput::Disconnected {
        reason: "network".into(),
    });
    if let Some(conn) = pair.conn.take() {
        pair.relay_in(RelayInput::Closed { conn });
    }
    assert!(pair.public[&RequestId(1)].aborted);
    assert!(pair.local[&first].cancelled);

    // The delegator comes back with Last-Event-ID while the executor is still away: the
    // request waits; the executor reconnects after its back-off and gets it.
    pair.relay_in(get(
        "/e/alice/awcp/tasks/dlg_1/events",
        &[("Last-Event-ID", "1")],
        2,
    ));
    assert!(!pair.local.contains_key(&LocalRequest(2)));
    let retry = pair.client.poll_timeout().unwrap().as_unix_millis();
    assert!((500..=1000).contains(&retry));
    pair.advance(retry);
    let resumed = &pair.local[&LocalRequest(2)];
    assert_eq!(resumed.path, "/tasks/dlg_1/events");
    assert_eq!(
        resumed.headers,
        vec![("last-event-id".to_string(), "1".to_string())]
    );
    assert!(pair.relay_events.iter().any(|e| matches!(
        e,
        RelayEvent::ExecutorOnline {
            conn: ConnectionId(2),
            ..
        }
    )));
    assert_eq!(pair.violations(), 0);
}

#[test]
fn a_reference_client_and_the_relay_interoperate() {
    let mut pair = Pair::new(false, 4096, 4096);
    assert!(pair.client_events.iter().any(|e| matches!(
        e,
        ClientEvent::Ready {
            extension: false,
            ..
        }
    )));
    // A START through the reference subset.
    pair.relay_in(RelayInput::Request {
        request: RequestId(1),
        method: "POST".into(),
        path: "/e/alice/awcp".into(),
        headers: vec![("content-type".into(), "application/json".into())],
        body: true,
    });
    pair.relay_in(RelayInput::RequestChunk {
        request: RequestId(1),
        bytes: br#"{"type":"START"}"#.to_vec(),
    });
    pair.relay_in(RelayInput::RequestEnd {
        request: RequestId(1),
    });
    let local = &pair.local[&LocalRequest(1)];
    assert_eq!((local.method.as_str(), local.path.as_str()), ("POST", "/"));
    assert_eq!(local.body, br#"{"type":"START"}"#);
    pair.client_in(ClientInput::ResponseHead {
        request: LocalRequest(1),
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
    });
    pair.client_in(ClientInput::ResponseChunk {
        request: LocalRequest(1),
        bytes: br#"{"ok":true}"#.to_vec(),
    });
    pair.client_in(ClientInput::ResponseEnd {
        request: LocalRequest(1),
    });
    let public = &pair.public[&RequestId(1)];
    assert_eq!((public.status, public.ended), (Some(200), true));
    assert_eq!(public.body, br#"{"ok":true}"#);

    // Events: SSE_OPEN → local GET; SSE bytes → SSE_EVENT → SSE bytes again.
    pair.relay_in(get("/e/alice/awcp/tasks/dlg_1/events", &[], 2));
    pair.client_in(ClientInput::ResponseHead {
        request: LocalRequest(2),
        status: 200,
        headers: vec![],
    });
    pair.client_in(ClientInput::ResponseChunk {
        request: LocalRequest(2),
        bytes: b"data: {\"type\":\"done\"}\n\n".to_vec(),
    });
    pair.client_in(ClientInput::ResponseEnd {
        request: LocalRequest(2),
    });
    let public = &pair.public[&RequestId(2)];
    assert_eq!(public.body, b"data: {\"type\":\"done\"}\n\n");
    assert!(public.ended);

    // What the reference does not route is refused by the relay.
    pair.relay_in(get("/e/alice/awcp/tasks/dlg_1/result", &[], 3));
    assert_eq!(pair.public[&RequestId(3)].refused, Some(404));
    assert_eq!(pair.violations(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Random frames, valid or not, from a peer never panic either machine.
    #[test]
    fn random_frames_never_panic_the_machines(
        frames in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..40).prop_map(WsFrame::Binary),
                proptest::collection::vec(any::<u8>(), 0..40)
                    .prop_map(|b| WsFrame::Text(String::from_utf8_lossy(&b).into_owned())),
                (0u32..4, any::<bool>(), proptest::collection::vec(any::<u8>(), 0..20))
                    .prop_map(|(stream, end, payload)| WsFrame::Binary(
                        awcp_proto::tunnel::DataFrame { stream, end, payload }.encode())),
                proptest::sample::select(vec![
                    r#"{"type":"HTTP_REQUEST_HEAD","stream":1,"method":"GET","path":"/","headers":[],"end":false}"#,
                    r#"{"type":"HTTP_RESPONSE_HEAD","stream":1,"status":200,"headers":[]}"#,
                    r#"{"type":"HTTP_RESPONSE_HEAD","stream":1,"status":99,"headers":[],"end":true}"#,
                    r#"{"type":"WINDOW","stream":1,"increment":4294967295}"#,
                    r#"{"type":"WINDOW","stream":1,"increment":0}"#,
                    r#"{"type":"RESET","stream":1}"#,
                    r#"{"type":"HTTP_REQUEST","requestId":"1","method":"GET","path":"/status","headers":{}}"#,
                    r#"{"type":"HTTP_RESPONSE","requestId":"1","status":200,"headers":{},"body":"x"}"#,
                    r#"{"type":"SSE_OPEN","streamId":"1","path":"/tasks/x/events"}"#,
                    r#"{"type":"SSE_EVENT","streamId":"1","data":"{}"}"#,
                    r#"{"type":"SSE_END","streamId":"1"}"#,
                    r#"{"type":"SSE_CLOSE","streamId":"1"}"#,
                    r#"{"type":"AUTH","token":"tok","features":["awcp-tunnel-v1"]}"#,
                    r#"{"type":"AUTH_OK","publicUrl":"x","features":["awcp-tunnel-v1"]}"#,
                    r#"{"type":"AUTH_ERROR","reason":"x"}"#,
                    r#"{"type":"PING","id":1}"#,
                    r#"{"type":"PONG","id":1}"#,
                ]).prop_map(|t| WsFrame::Text(t.to_string())),
            ],
            0..30,
        ),
        extension in any::<bool>(),
    ) {
        let mut pair = Pair::new(extension, 4096, 4096);
        // Open a request or two so frames can hit live streams.
        pair.relay_in(get("/e/alice/awcp/tasks/x/events", &[], 1));
        pair.relay_in(get("/e/alice/awcp/status", &[], 2));
        let conn = pair.conn.unwrap();
        for (i, frame) in frames.into_iter().enumerate() {
            pair.now += 1;
            let now = pair.ts();
            if i % 2 == 0 {
                let _ = pair.relay.handle(now, RelayInput::Frame { conn, frame });
                while pair.relay.poll_output().is_some() {}
            } else {
                let _ = pair.client.handle(now, ClientInput::Frame(frame));
                while pair.client.poll_output().is_some() {}
            }
        }
    }
}
