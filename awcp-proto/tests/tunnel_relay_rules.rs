//! The relay machine's rules: a token (or a client certificate) names its executor, the same
//! token replaces the old connection, limits are refusals, offline executors are waited for,
//! silent connections are closed, handshakes are checked.

// Helpers outside #[test] functions unwrap too (a panic there is a failed test), and
// filter outputs with wildcards.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

mod tunnel_common;

use std::time::Duration;

use awcp_proto::tunnel::frames::*;
use awcp_proto::tunnel::registry::CertDigest;
use awcp_proto::tunnel::{
    close_code, ConnectionId, Relay, RelayConfig, RelayEvent, RelayInput, RelayOutput, WsFrame,
};
use awcp_proto::RequestId;
use tunnel_common::relay::*;

#[test]
fn a_token_names_its_executor_and_the_same_token_replaces_the_old_connection() {
    let mut r = relay();
    extension_client(&mut r, C1, "token-a");
    input(
        &mut r,
        1,
        request(1, "GET", "/e/alice/awcp/tasks/d/events", &[], false),
    );
    input(
        &mut r,
        1,
        msg(
            C1,
            &Message::ResponseHead(ResponseHead {
                stream: 1,
                status: 200,
                headers: vec![],
                end: false,
            }),
        ),
    );
    input(
        &mut r,
        1,
        request(2, "GET", "/e/alice/awcp/status", &[], false),
    );

    // Bob's token gets bob, whatever the client says; alice's connection is untouched.
    let outs = reference_client(&mut r, C2, "token-b");
    assert!(sent_text(&outs, C2)[0].contains("/e/bob/awcp"));
    assert_eq!(r.registry().connection(&name("alice")), Some(C1));

    // An unknown token is refused and closed.
    let outs = reference_client(&mut r, C3, "token-x");
    assert_eq!(
        sent_text(&outs, C3),
        [r#"{"type":"AUTH_ERROR","reason":"invalid token"}"#]
    );
    assert!(outs.iter().any(|o| matches!(
        o,
        RelayOutput::Close {
            conn: C3,
            code: close_code::AUTH_FAILED,
            ..
        }
    )));

    // Alice reconnects: the old connection is closed, its requests fail.
    let outs = extension_client(&mut r, ConnectionId(4), "token-a");
    assert!(outs.iter().any(|o| matches!(
        o,
        RelayOutput::Close {
            conn: C1,
            code: close_code::REPLACED,
            ..
        }
    )));
    assert!(outs.contains(&RelayOutput::ResponseAbort {
        request: RequestId(1)
    }));
    assert_eq!(refused(&outs, 2), Some(502));
    assert!(outs.contains(&RelayOutput::Event(RelayEvent::Replaced {
        name: name("alice"),
        old: C1,
        new: ConnectionId(4)
    })));
    assert_eq!(
        r.registry().connection(&name("alice")),
        Some(ConnectionId(4))
    );
    // The old connection's late frames and close are stale, not errors that matter.
    assert!(r.handle(at(5), RelayInput::Closed { conn: C1 }).is_ok());
    assert!(drain(&mut r).is_empty());
}

#[test]
fn limits_are_refusals_not_failures() {
    let mut config = RelayConfig::new("https://relay.example");
    config.max_in_flight = 2;
    config.max_buffered_bytes = 3 * u64::from(DEFAULT_WINDOW);
    config.reference_stream_buffer = 100;
    let mut r = relay_with(config);
    extension_client(&mut r, C1, "token-a");
    input(
        &mut r,
        1,
        request(1, "GET", "/e/alice/awcp/status", &[], false),
    );
    input(
        &mut r,
        1,
        request(2, "GET", "/e/alice/awcp/status", &[], false),
    );
    let outs = input(
        &mut r,
        1,
        request(3, "GET", "/e/alice/awcp/status", &[], false),
    );
    assert_eq!(refused(&outs, 3), Some(503));

    // Bytes: bob (reference) may hold at most 100 unwritten event bytes per stream.
    reference_client(&mut r, C2, "token-b");
    input(
        &mut r,
        1,
        request(4, "GET", "/e/bob/awcp/tasks/d/events", &[], false),
    );
    let event = format!(
        r#"{{"type":"SSE_EVENT","streamId":"1","data":"{}"}}"#,
        "x".repeat(60)
    );
    let outs = input(&mut r, 2, text(C2, &event));
    assert!(matches!(&outs[..], [RelayOutput::ResponseBody { .. }]));
    let outs = input(&mut r, 2, text(C2, &event));
    assert!(outs.contains(&RelayOutput::ResponseAbort {
        request: RequestId(4)
    }));
    assert_eq!(
        sent_text(&outs, C2),
        [r#"{"type":"SSE_CLOSE","streamId":"1"}"#]
    );

    // The per-executor byte budget: two extension streams hold two windows; a third would
    // pass three windows plus what is held.
    let mut config = RelayConfig::new("https://relay.example");
    config.max_buffered_bytes = 2 * u64::from(DEFAULT_WINDOW);
    let mut r = relay_with(config);
    extension_client(&mut r, C1, "token-a");
    for id in 1..=2 {
        let outs = input(
            &mut r,
            1,
            request(id, "GET", "/e/alice/awcp/status", &[], false),
        );
        assert_eq!(refused(&outs, id), None);
    }
    let outs = input(
        &mut r,
        1,
        request(3, "GET", "/e/alice/awcp/status", &[], false),
    );
    assert_eq!(refused(&outs, 3), Some(503));
}

#[test]
fn unknown_and_offline_executors() {
    let mut r = relay();
    let outs = input(
        &mut r,
        0,
        request(1, "GET", "/e/carol/awcp/status", &[], false),
    );
    assert_eq!(refused(&outs, 1), Some(404));
    let outs = input(&mut r, 0, request(2, "GET", "/other", &[], false));
    assert_eq!(refused(&outs, 2), Some(404));

    // Registered but offline: requests wait for the grace period.
    assert!(input(
        &mut r,
        0,
        request(3, "GET", "/e/alice/awcp/status", &[], false)
    )
    .is_empty());
    assert!(input(
        &mut r,
        1000,
        request(4, "GET", "/e/alice/awcp/status", &[], false)
    )
    .is_empty());
    assert_eq!(r.poll_timeout(), Some(at(10_000)));
    r.handle_timeout(at(10_000));
    assert_eq!(refused(&drain(&mut r), 3), Some(503));
    // The executor comes back in time for the other one.
    let outs = extension_client(&mut r, C1, "token-a");
    assert!(sent_text(&outs, C1).iter().any(|t| t
        .starts_with(r#"{"type":"HTTP_REQUEST_HEAD","stream":1,"method":"GET","path":"/status""#)));
    r.handle_timeout(at(11_000));
    assert_eq!(refused(&drain(&mut r), 4), None);

    // A lost connection fails what was in flight and takes the executor offline.
    let outs = input(&mut r, 12_000, RelayInput::Closed { conn: C1 });
    assert_eq!(refused(&outs, 4), Some(502));
    assert!(
        outs.contains(&RelayOutput::Event(RelayEvent::ExecutorOffline {
            name: name("alice"),
            conn: C1
        }))
    );
}

#[test]
fn silent_connections_are_pinged_then_closed() {
    let mut r = relay();
    // No AUTH within 10 s.
    input(
        &mut r,
        0,
        RelayInput::Accepted {
            conn: C3,
            client_cert: None,
        },
    );
    extension_client(&mut r, C1, "token-a");
    reference_client(&mut r, C2, "token-b");
    r.handle_timeout(at(10_000));
    let outs = drain(&mut r);
    assert!(outs.iter().any(|o| matches!(
        o,
        RelayOutput::Close {
            conn: C3,
            code: close_code::HANDSHAKE_TIMEOUT,
            ..
        }
    )));
    // At 15 s: the extension client gets PING{id}, the reference client its PING and a
    // WebSocket ping.
    assert_eq!(r.poll_timeout(), Some(at(15_000)));
    r.handle_timeout(at(15_000));
    let outs = drain(&mut r);
    assert_eq!(sent_text(&outs, C1), [r#"{"type":"PING","id":1}"#]);
    assert_eq!(sent_text(&outs, C2), [r#"{"type":"PING"}"#]);
    assert!(outs.contains(&RelayOutput::Send {
        conn: C2,
        frame: WsFrame::Ping(vec![])
    }));
    // The extension client answers; its RTT is measured. The reference client's library
    // answers the WebSocket ping.
    input(&mut r, 15_040, msg(C1, &Message::Pong(Pong { id: 1 })));
    assert_eq!(r.rtt(C1), Some(Duration::from_millis(40)));
    input(
        &mut r,
        15_050,
        RelayInput::Frame {
            conn: C2,
            frame: WsFrame::Pong(vec![]),
        },
    );
    // C1 falls silent: dead 45 s after it was last heard.
    for t in [30_040, 45_040] {
        r.handle_timeout(at(t));
        drain(&mut r);
    }
    r.handle_timeout(at(60_040));
    let outs = drain(&mut r);
    assert!(outs.iter().any(|o| matches!(
        o,
        RelayOutput::Close {
            conn: C1,
            code: close_code::IDLE,
            ..
        }
    )));
    assert!(
        outs.contains(&RelayOutput::Event(RelayEvent::ExecutorOffline {
            name: name("alice"),
            conn: C1
        }))
    );
}

#[test]
fn handshake_rules() {
    let mut r = relay();
    // Anything but AUTH first is refused.
    input(
        &mut r,
        0,
        RelayInput::Accepted {
            conn: C1,
            client_cert: None,
        },
    );
    let outs = input(&mut r, 0, text(C1, r#"{"type":"PING"}"#));
    assert_eq!(
        sent_text(&outs, C1),
        [r#"{"type":"AUTH_ERROR","reason":"expected AUTH"}"#]
    );
    // A window out of range is refused.
    input(
        &mut r,
        0,
        RelayInput::Accepted {
            conn: C2,
            client_cert: None,
        },
    );
    let outs = input(
        &mut r,
        0,
        text(
            C2,
            r#"{"type":"AUTH","token":"token-a","features":["awcp-tunnel-v1"],"window":1}"#,
        ),
    );
    assert_eq!(
        sent_text(&outs, C2),
        [r#"{"type":"AUTH_ERROR","reason":"invalid window"}"#]
    );
    // A client that offers only features we do not know hears an empty agreement.
    input(
        &mut r,
        0,
        RelayInput::Accepted {
            conn: C3,
            client_cert: None,
        },
    );
    let outs = input(
        &mut r,
        0,
        text(
            C3,
            r#"{"type":"AUTH","token":"token-a","features":["something-else"]}"#,
        ),
    );
    assert_eq!(
        sent_text(&outs, C3),
        [r#"{"type":"AUTH_OK","publicUrl":"https://relay.example/e/alice/awcp","features":[]}"#]
    );
    // Frames for unknown connections are usage errors.
    assert!(r.handle(at(1), text(ConnectionId(99), "{}")).is_err());
    // Binary frames from a reference client are dropped as malformed.
    let outs = input(
        &mut r,
        1,
        RelayInput::Frame {
            conn: C3,
            frame: WsFrame::Binary(vec![1, 0, 0, 0, 0, 1]),
        },
    );
    assert!(matches!(
        &outs[..],
        [RelayOutput::Event(RelayEvent::MalformedFrame {
            conn: C3,
            ..
        })]
    ));
}

#[test]
fn unregistering_an_executor_closes_it() {
    let mut r = relay();
    extension_client(&mut r, C1, "token-a");
    assert!(r.unregister(at(1), &name("alice")));
    let outs = drain(&mut r);
    assert!(outs.iter().any(|o| matches!(
        o,
        RelayOutput::Close {
            conn: C1,
            code: close_code::UNREGISTERED,
            ..
        }
    )));
    let outs = input(
        &mut r,
        2,
        request(1, "GET", "/e/alice/awcp/status", &[], false),
    );
    assert_eq!(refused(&outs, 1), Some(404));
    assert!(!r.unregister(at(3), &name("alice")));
}

/// A reference `AUTH` with `token` on a connection that presented `cert` (or none).
fn cert_client(
    r: &mut Relay,
    conn: ConnectionId,
    cert: Option<CertDigest>,
    token: &str,
) -> Vec<RelayOutput> {
    input(
        r,
        0,
        RelayInput::Accepted {
            conn,
            client_cert: cert,
        },
    );
    input(
        r,
        0,
        text(conn, &format!(r#"{{"type":"AUTH","token":"{token}"}}"#)),
    )
}

fn refused_with(outs: &[RelayOutput], conn: ConnectionId, reason: &str) -> bool {
    sent_text(outs, conn) == [format!(r#"{{"type":"AUTH_ERROR","reason":"{reason}"}}"#)]
        && outs.iter().any(|o| {
            matches!(o, RelayOutput::Close { conn: c, code, .. }
                if *c == conn && *code == close_code::AUTH_FAILED)
        })
}

/// Executors registered by client certificate: the connection's verified certificate picks
/// the name whatever the token says; another certificate is refused; a certificate cannot take
/// a name registered by token, nor a token one registered by certificate.
#[test]
fn a_client_certificate_names_its_executor_and_no_other() {
    let carol_cert = CertDigest::of_der(b"carol's certificate");
    let other_cert = CertDigest::of_der(b"someone else's certificate");
    let mut r = relay();
    r.register_certificate(name("carol"), carol_cert).unwrap();

    // Carol's certificate, an empty token: carol.
    let outs = cert_client(&mut r, C1, Some(carol_cert), "");
    assert!(
        sent_text(&outs, C1)[0].contains(r#""publicUrl":"https://relay.example/e/carol/awcp""#),
        "{outs:?}"
    );
    assert_eq!(r.registry().connection(&name("carol")), Some(C1));

    // Any token with her certificate is still carol (the new connection replaces the old).
    let outs = cert_client(&mut r, C2, Some(carol_cert), "whatever");
    assert!(sent_text(&outs, C2)[0].contains("/e/carol/awcp"));
    assert_eq!(r.registry().connection(&name("carol")), Some(C2));

    // A certificate the TLS verified but nobody registered: refused.
    let outs = cert_client(&mut r, C3, Some(other_cert), "");
    assert!(
        refused_with(&outs, C3, "invalid token or client certificate"),
        "{outs:?}"
    );

    // No certificate: carol's name cannot be taken by a token, or by no token.
    let c4 = ConnectionId(4);
    let outs = cert_client(&mut r, c4, None, "");
    assert!(refused_with(&outs, c4, "invalid token"), "{outs:?}");
    let c5 = ConnectionId(5);
    let outs = cert_client(&mut r, c5, None, &carol_cert.to_hex());
    assert!(refused_with(&outs, c5, "invalid token"), "{outs:?}");

    // Alice is registered by token: an unregistered certificate with no token does not get
    // her; her token with any other certificate does.
    let c6 = ConnectionId(6);
    let outs = cert_client(&mut r, c6, Some(other_cert), "");
    assert!(refused_with(
        &outs,
        c6,
        "invalid token or client certificate"
    ));
    let c7 = ConnectionId(7);
    let outs = cert_client(&mut r, c7, Some(other_cert), "token-a");
    assert!(
        sent_text(&outs, c7)[0].contains("/e/alice/awcp"),
        "{outs:?}"
    );

    // Alice's token with carol's certificate names two executors: refused, and carol's
    // connection is untouched.
    let c8 = ConnectionId(8);
    let outs = cert_client(&mut r, c8, Some(carol_cert), "token-a");
    assert!(
        refused_with(
            &outs,
            c8,
            "token and client certificate name different executors"
        ),
        "{outs:?}"
    );
    assert_eq!(r.registry().connection(&name("carol")), Some(C2));
    assert_eq!(r.registry().connection(&name("alice")), Some(c7));
}
