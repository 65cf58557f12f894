//! Helpers for the client tests: inputs, output filters, and a client made ready.

use awcp_proto::tunnel::{
    ClientEvent, ClientInput, ClientOutput, DataFrame, TunnelClient, TunnelClientConfig, WsFrame,
};
use awcp_proto::Timestamp;

pub fn at(ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(ms)
}

pub fn drain(c: &mut TunnelClient) -> Vec<ClientOutput> {
    std::iter::from_fn(|| c.poll_output()).collect()
}

pub fn input(c: &mut TunnelClient, now: u64, i: ClientInput) -> Vec<ClientOutput> {
    c.handle(at(now), i).unwrap();
    drain(c)
}

pub fn frame(json: &str) -> ClientInput {
    ClientInput::Frame(WsFrame::Text(json.into()))
}

pub fn sent_text(outs: &[ClientOutput]) -> Vec<String> {
    outs.iter()
        .filter_map(|o| match o {
            ClientOutput::Send(WsFrame::Text(t)) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

pub fn sent_data(outs: &[ClientOutput]) -> Vec<DataFrame> {
    outs.iter()
        .filter_map(|o| match o {
            ClientOutput::Send(WsFrame::Binary(b)) => Some(DataFrame::decode(b.clone()).unwrap()),
            _ => None,
        })
        .collect()
}

pub fn reconnect_at(outs: &[ClientOutput]) -> Option<Timestamp> {
    outs.iter().find_map(|o| match o {
        ClientOutput::Event(ClientEvent::Reconnecting { at, .. }) => Some(*at),
        _ => None,
    })
}

/// A client connected and authenticated at `now` (`extension`: the relay agreed to it).
pub fn ready(config: TunnelClientConfig, extension: bool) -> TunnelClient {
    let mut c = TunnelClient::new(config, at(0));
    assert_eq!(drain(&mut c), [ClientOutput::Connect { attempt: 0 }]);
    input(&mut c, 0, ClientInput::Connected);
    let ok = if extension {
        r#"{"type":"AUTH_OK","publicUrl":"https://r/e/a/awcp","features":["awcp-tunnel-v1"],"window":4096}"#
    } else {
        r#"{"type":"AUTH_OK","publicUrl":"https://r/e/a/awcp"}"#
    };
    let outs = input(&mut c, 0, frame(ok));
    assert_eq!(
        outs,
        [ClientOutput::Event(ClientEvent::Ready {
            public_url: "https://r/e/a/awcp".into(),
            extension
        })]
    );
    c
}
