//! Helpers for the relay tests: a relay with two registered executors, clients that
//! connect to it, and filters over its outputs.

use awcp_proto::engine::auth::SecretDigest;
use awcp_proto::tunnel::frames::*;
use awcp_proto::tunnel::{
    ConnectionId, DataFrame, ExecutorName, Registry, Relay, RelayConfig, RelayInput, RelayOutput,
    WsFrame,
};
use awcp_proto::{RequestId, Timestamp};

pub const C1: ConnectionId = ConnectionId(1);
pub const C2: ConnectionId = ConnectionId(2);
pub const C3: ConnectionId = ConnectionId(3);

pub fn at(ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(ms)
}

pub fn name(s: &str) -> ExecutorName {
    ExecutorName::new(s).unwrap()
}

pub fn relay_with(config: RelayConfig) -> Relay {
    let mut registry = Registry::new();
    registry
        .register(name("alice"), SecretDigest::of("token-a"))
        .unwrap();
    registry
        .register(name("bob"), SecretDigest::of("token-b"))
        .unwrap();
    Relay::new(config, registry)
}

pub fn relay() -> Relay {
    relay_with(RelayConfig::new("https://relay.example"))
}

pub fn drain(r: &mut Relay) -> Vec<RelayOutput> {
    std::iter::from_fn(|| r.poll_output()).collect()
}

pub fn input(r: &mut Relay, now: u64, i: RelayInput) -> Vec<RelayOutput> {
    r.handle(at(now), i).unwrap();
    drain(r)
}

pub fn text(conn: ConnectionId, json: &str) -> RelayInput {
    RelayInput::Frame {
        conn,
        frame: WsFrame::Text(json.into()),
    }
}

pub fn msg(conn: ConnectionId, m: &Message) -> RelayInput {
    text(conn, &m.to_json())
}

pub fn sent_text(outs: &[RelayOutput], to: ConnectionId) -> Vec<String> {
    outs.iter()
        .filter_map(|o| match o {
            RelayOutput::Send {
                conn,
                frame: WsFrame::Text(t),
            } if *conn == to => Some(t.clone()),
            _ => None,
        })
        .collect()
}

pub fn sent_data(outs: &[RelayOutput], to: ConnectionId) -> Vec<DataFrame> {
    outs.iter()
        .filter_map(|o| match o {
            RelayOutput::Send {
                conn,
                frame: WsFrame::Binary(b),
            } if *conn == to => Some(DataFrame::decode(b.clone()).unwrap()),
            _ => None,
        })
        .collect()
}

pub fn request(
    id: u64,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: bool,
) -> RelayInput {
    RelayInput::Request {
        request: RequestId(id),
        method: method.into(),
        path: path.into(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        body,
    }
}

pub fn refused(outs: &[RelayOutput], id: u64) -> Option<u16> {
    outs.iter().find_map(|o| match o {
        RelayOutput::Refuse {
            request, status, ..
        } if *request == RequestId(id) => Some(*status),
        _ => None,
    })
}

/// Connects `conn` as a reference client with `token`.
pub fn reference_client(r: &mut Relay, conn: ConnectionId, token: &str) -> Vec<RelayOutput> {
    input(
        r,
        0,
        RelayInput::Accepted {
            conn,
            client_cert: None,
        },
    );
    input(
        r,
        0,
        text(conn, &format!(r#"{{"type":"AUTH","token":"{token}"}}"#)),
    )
}

/// Connects `conn` as an extension client with `token` and a 1 KiB window.
pub fn extension_client(r: &mut Relay, conn: ConnectionId, token: &str) -> Vec<RelayOutput> {
    input(
        r,
        0,
        RelayInput::Accepted {
            conn,
            client_cert: None,
        },
    );
    let auth = Auth {
        token: token.into(),
        features: Some(vec![EXTENSION_V1.into()]),
        window: Some(1024),
    };
    input(r, 0, msg(conn, &Message::Auth(auth)))
}
