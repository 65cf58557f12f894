//! The executor's tunnel client, its connection: handshake, back-off and its reset,
//! keepalive, a refused token, lost connections.

// Helpers outside #[test] functions unwrap too (a panic there is a failed test), and
// filter outputs with wildcards.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)]

mod tunnel_common;

use std::time::Duration;

use awcp_proto::tunnel::client::StopReason;
use awcp_proto::tunnel::{
    close_code, BackoffConfig, ClientEvent, ClientInput, ClientOutput, ClientState, LocalRequest,
    TunnelClient, TunnelClientConfig, TunnelUsageError, WsFrame,
};
use tunnel_common::client::*;

#[test]
fn auth_offers_the_extension_or_speaks_as_the_reference() {
    let mut c = TunnelClient::new(TunnelClientConfig::new("t", 1), at(0));
    drain(&mut c);
    assert_eq!(
        sent_text(&input(&mut c, 0, ClientInput::Connected)),
        [r#"{"type":"AUTH","token":"t","features":["awcp-tunnel-v1"],"window":262144}"#]
    );
    let mut config = TunnelClientConfig::new("t", 1);
    config.offer_extension = false;
    let mut c = TunnelClient::new(config, at(0));
    drain(&mut c);
    assert_eq!(
        sent_text(&input(&mut c, 0, ClientInput::Connected)),
        [r#"{"type":"AUTH","token":"t"}"#]
    );
    // The token never shows in logs.
    assert!(!format!("{:?}", TunnelClientConfig::new("s3cret", 1)).contains("s3cret"));
}

#[test]
fn back_off_grows_with_jitter_and_resets_on_auth_ok() {
    let run = |seed| {
        let mut c = TunnelClient::new(TunnelClientConfig::new("t", seed), at(0));
        drain(&mut c);
        let mut now = 0;
        let mut delays = Vec::new();
        for attempt in 1..=9u32 {
            let outs = input(
                &mut c,
                now,
                ClientInput::Disconnected {
                    reason: "refused".into(),
                },
            );
            let next = reconnect_at(&outs).unwrap().as_unix_millis();
            assert_eq!(
                c.state(),
                &ClientState::BackingOff {
                    attempt,
                    until: at(next)
                }
            );
            delays.push(next - now);
            // Early: nothing; due: dial.
            c.handle_timeout(at(next - 1));
            assert!(drain(&mut c).is_empty());
            assert_eq!(c.poll_timeout(), Some(at(next)));
            c.handle_timeout(at(next));
            assert_eq!(drain(&mut c), [ClientOutput::Connect { attempt }]);
            now = next;
        }
        (c, now, delays)
    };
    let (mut c, now, delays) = run(7);
    for (i, d) in delays.iter().enumerate() {
        let full = (1000u64 << i).min(60_000);
        assert!(*d >= full / 2 && *d <= full, "retry {}: {d} ms", i + 1);
    }
    // Same seed, same delays; another seed, other delays.
    assert_eq!(run(7).2, delays);
    assert_ne!(run(8).2, delays);

    // AUTH_OK resets the count: the next loss waits the first delay again.
    input(&mut c, now, ClientInput::Connected);
    input(
        &mut c,
        now,
        frame(r#"{"type":"AUTH_OK","publicUrl":"https://r/e/a/awcp"}"#),
    );
    let outs = input(
        &mut c,
        now + 5,
        ClientInput::Disconnected {
            reason: "lost".into(),
        },
    );
    let wait = reconnect_at(&outs).unwrap().as_unix_millis() - (now + 5);
    assert!((500..=1000).contains(&wait), "{wait}");
}

#[test]
fn a_refused_token_stops_the_client_for_good() {
    let mut c = TunnelClient::new(TunnelClientConfig::new("bad", 1), at(0));
    drain(&mut c);
    input(&mut c, 0, ClientInput::Connected);
    let outs = input(
        &mut c,
        10,
        frame(r#"{"type":"AUTH_ERROR","reason":"invalid token"}"#),
    );
    assert!(outs.contains(&ClientOutput::Event(ClientEvent::AuthFailed {
        reason: "invalid token".into()
    })));
    assert!(matches!(outs[0], ClientOutput::Close { .. }));
    assert_eq!(
        c.state(),
        &ClientState::Stopped(StopReason::AuthRejected("invalid token".into()))
    );
    assert_eq!(c.poll_timeout(), None);
    // The relay closing afterwards changes nothing.
    assert!(input(
        &mut c,
        20,
        ClientInput::Disconnected {
            reason: "closed".into()
        }
    )
    .is_empty());
}

#[test]
fn a_client_with_max_attempts_gives_up() {
    let mut config = TunnelClientConfig::new("t", 1);
    config.backoff = BackoffConfig {
        max_attempts: Some(2),
        ..BackoffConfig::default()
    };
    let mut c = TunnelClient::new(config, at(0));
    drain(&mut c);
    let mut now = 0;
    for _ in 0..2 {
        let outs = input(
            &mut c,
            now,
            ClientInput::Disconnected { reason: "x".into() },
        );
        now = reconnect_at(&outs).unwrap().as_unix_millis();
        c.handle_timeout(at(now));
        drain(&mut c);
    }
    let outs = input(
        &mut c,
        now,
        ClientInput::Disconnected { reason: "x".into() },
    );
    assert!(outs.contains(&ClientOutput::Event(ClientEvent::GaveUp { attempts: 3 })));
    assert_eq!(c.state(), &ClientState::Stopped(StopReason::GaveUp));
}

#[test]
fn a_slow_handshake_is_abandoned_and_retried() {
    let mut c = TunnelClient::new(TunnelClientConfig::new("t", 1), at(0));
    drain(&mut c);
    input(&mut c, 1000, ClientInput::Connected);
    assert_eq!(c.poll_timeout(), Some(at(15_000)));
    c.handle_timeout(at(15_000));
    let outs = drain(&mut c);
    assert!(matches!(
        outs[0],
        ClientOutput::Close {
            code: close_code::HANDSHAKE_TIMEOUT,
            ..
        }
    ));
    assert!(reconnect_at(&outs).is_some());
    // A frame racing the close is ignored.
    assert!(input(
        &mut c,
        15_001,
        frame(r#"{"type":"AUTH_OK","publicUrl":"x"}"#)
    )
    .is_empty());
    assert!(matches!(
        c.state(),
        ClientState::BackingOff { attempt: 1, .. }
    ));
}

#[test]
fn keepalive_pings_answers_and_declares_a_silent_relay_dead() {
    let mut c = ready(TunnelClientConfig::new("t", 1), true);
    // The relay's PING{id} is answered.
    assert_eq!(
        sent_text(&input(&mut c, 1000, frame(r#"{"type":"PING","id":9}"#))),
        [r#"{"type":"PONG","id":9}"#]
    );
    // Silent for 15 s: PING{1}; the PONG measures the round trip.
    assert_eq!(c.poll_timeout(), Some(at(16_000)));
    c.handle_timeout(at(16_000));
    assert_eq!(sent_text(&drain(&mut c)), [r#"{"type":"PING","id":1}"#]);
    input(&mut c, 16_100, frame(r#"{"type":"PONG","id":1}"#));
    assert_eq!(c.rtt(), Some(Duration::from_millis(100)));
    // Then silence: pings at 31.1 s and 46.1 s, dead at 61.1 s.
    for t in [31_100, 46_100] {
        c.handle_timeout(at(t));
        assert_eq!(sent_text(&drain(&mut c)).len(), 1);
    }
    c.handle_timeout(at(61_100));
    let outs = drain(&mut c);
    assert!(matches!(
        outs[0],
        ClientOutput::Close {
            code: close_code::IDLE,
            ..
        }
    ));
    assert!(reconnect_at(&outs).is_some());

    // A reference relay is pinged with WebSocket pings (its library answers), and its PING
    // frame is not answered (the reference expects nothing).
    let mut c = ready(TunnelClientConfig::new("t", 1), false);
    assert!(input(&mut c, 1, frame(r#"{"type":"PING"}"#)).is_empty());
    c.handle_timeout(at(16_000));
    assert_eq!(drain(&mut c), [ClientOutput::Send(WsFrame::Ping(vec![]))]);
}

#[test]
fn a_lost_connection_cancels_every_local_request() {
    let mut c = ready(TunnelClientConfig::new("t", 1), true);
    input(
        &mut c,
        1,
        frame(
            r#"{"type":"HTTP_REQUEST_HEAD","stream":1,"method":"GET","path":"/tasks/d/events","headers":[],"end":true}"#,
        ),
    );
    input(
        &mut c,
        1,
        frame(
            r#"{"type":"HTTP_REQUEST","requestId":"abc","method":"GET","path":"/status","headers":{}}"#,
        ),
    );
    assert_eq!(c.open_requests(), 2);
    let outs = input(
        &mut c,
        2,
        ClientInput::Disconnected {
            reason: "reset".into(),
        },
    );
    assert_eq!(
        &outs[..2],
        [
            ClientOutput::CancelLocalRequest {
                request: LocalRequest(1)
            },
            ClientOutput::CancelLocalRequest {
                request: LocalRequest(2)
            }
        ]
    );
    assert_eq!(c.open_requests(), 0);
    // The driver's late answers for them are stale.
    assert_eq!(
        c.handle(
            at(3),
            ClientInput::ResponseHead {
                request: LocalRequest(1),
                status: 200,
                headers: vec![]
            }
        ),
        Err(TunnelUsageError::UnknownRequest(1))
    );
}
