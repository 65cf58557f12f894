//! The executor's client and the relay wired together in memory, in virtual time, with the
//! public HTTP side and the executor's local router played by simple recorders, and every
//! DATA frame in transit checked against the credit its receiver granted.

use std::collections::{BTreeMap, VecDeque};

use awcp_proto::engine::auth::SecretDigest;
use awcp_proto::tunnel::frames::*;
use awcp_proto::tunnel::{
    decode_frame, ClientEvent, ClientInput, ClientOutput, ConnectionId, ExecutorName, Incoming,
    LocalRequest, Registry, Relay, RelayConfig, RelayEvent, RelayInput, RelayOutput, TunnelClient,
    TunnelClientConfig, WsFrame,
};
use awcp_proto::{RequestId, Timestamp};

/// What the public HTTP side of the relay has seen of one request.
#[derive(Debug, Default)]
pub struct Public {
    pub credit: u64,
    pub status: Option<u16>,
    pub body: Vec<u8>,
    pub unwritten: u64,
    pub ended: bool,
    pub aborted: bool,
    pub refused: Option<u16>,
}

/// What the executor's local router has seen of one request.
#[derive(Debug, Default)]
pub struct Local {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub unconsumed: u64,
    pub body_ended: bool,
    pub credit: u64,
    pub cancelled: bool,
}

/// Per stream and direction: bytes sent in DATA frames and credit granted (initial window
/// plus WINDOW increments), to check the senders.
#[derive(Debug, Default)]
pub struct Ledger {
    pub sent: u64,
    pub granted: u64,
}

pub struct Pair {
    pub now: u64,
    pub relay: Relay,
    pub client: TunnelClient,
    pub conn: Option<ConnectionId>,
    pub next_conn: u64,
    pub to_client: VecDeque<WsFrame>,
    pub to_relay: VecDeque<WsFrame>,
    pub public: BTreeMap<RequestId, Public>,
    pub local: BTreeMap<LocalRequest, Local>,
    pub client_events: Vec<ClientEvent>,
    pub relay_events: Vec<RelayEvent>,
    /// stream → request body ledger (relay → client) and response ledger (client → relay).
    pub requests_ledger: BTreeMap<StreamNo, Ledger>,
    pub responses_ledger: BTreeMap<StreamNo, Ledger>,
    pub client_window: u32,
    pub relay_window: u32,
}

impl Pair {
    pub fn new(extension: bool, client_window: u32, relay_window: u32) -> Pair {
        let mut registry = Registry::new();
        registry
            .register(ExecutorName::new("alice").unwrap(), SecretDigest::of("tok"))
            .unwrap();
        let mut rc = RelayConfig::new("https://relay.example");
        rc.window = relay_window;
        let mut cc = TunnelClientConfig::new("tok", 5);
        cc.window = client_window;
        cc.offer_extension = extension;
        let mut pair = Pair {
            now: 0,
            relay: Relay::new(rc, registry),
            client: TunnelClient::new(cc, Timestamp::EPOCH),
            conn: None,
            next_conn: 1,
            to_client: VecDeque::new(),
            to_relay: VecDeque::new(),
            public: BTreeMap::new(),
            local: BTreeMap::new(),
            client_events: Vec::new(),
            relay_events: Vec::new(),
            requests_ledger: BTreeMap::new(),
            responses_ledger: BTreeMap::new(),
            client_window,
            relay_window,
        };
        pair.pump();
        pair
    }

    pub fn ts(&self) -> Timestamp {
        Timestamp::from_unix_millis(self.now)
    }

    pub fn relay_in(&mut self, input: RelayInput) {
        self.relay.handle(self.ts(), input).unwrap();
        self.pump();
    }

    pub fn client_in(&mut self, input: ClientInput) {
        self.client.handle(self.ts(), input).unwrap();
        self.pump();
    }

    /// Advances virtual time to `ms` and fires both machines' timers.
    pub fn advance(&mut self, ms: u64) {
        self.now = ms;
        self.relay.handle_timeout(self.ts());
        self.client.handle_timeout(self.ts());
        self.pump();
    }

    /// Executes outputs and delivers frames until both sides are quiet.
    pub fn pump(&mut self) {
        loop {
            let mut busy = false;
            while let Some(out) = self.client.poll_output() {
                busy = true;
                self.client_out(out);
            }
            while let Some(out) = self.relay.poll_output() {
                busy = true;
                self.relay_out(out);
            }
            if let Some(frame) = self.to_client.pop_front() {
                busy = true;
                self.check(&frame, true);
                self.client
                    .handle(self.ts(), ClientInput::Frame(frame))
                    .unwrap();
            }
            if let (Some(frame), Some(conn)) = (self.to_relay.pop_front(), self.conn) {
                busy = true;
                self.check(&frame, false);
                self.relay
                    .handle(self.ts(), RelayInput::Frame { conn, frame })
                    .unwrap();
            }
            if !busy {
                return;
            }
        }
    }

    /// Keeps the flow-control ledgers of frames in transit and checks every DATA frame
    /// against its credit.
    pub fn check(&mut self, frame: &WsFrame, to_client: bool) {
        let Ok(incoming) = decode_frame(frame.clone(), usize::MAX, true) else {
            return;
        };
        let (client_window, relay_window) = (self.client_window, self.relay_window);
        match incoming {
            Incoming::Message(Message::RequestHead(h)) if !h.end => {
                self.requests_ledger.insert(
                    h.stream,
                    Ledger {
                        sent: 0,
                        granted: u64::from(client_window),
                    },
                );
            }
            Incoming::Message(Message::ResponseHead(h)) if !h.end => {
                self.responses_ledger.insert(
                    h.stream,
                    Ledger {
                        sent: 0,
                        granted: u64::from(relay_window),
                    },
                );
            }
            Incoming::Message(Message::Window(w)) => {
                // A WINDOW to the client grants response bytes; to the relay, request bytes.
                let ledger = if to_client {
                    &mut self.responses_ledger
                } else {
                    &mut self.requests_ledger
                };
                if let Some(l) = ledger.get_mut(&w.stream) {
                    l.granted += u64::from(w.increment);
                }
            }
            Incoming::Data(d) => {
                let ledger = if to_client {
                    &mut self.requests_ledger
                } else {
                    &mut self.responses_ledger
                };
                let l = ledger
                    .get_mut(&d.stream)
                    .expect("DATA on a stream with a head");
                l.sent += d.payload.len() as u64;
                assert!(
                    l.sent <= l.granted,
                    "sender exceeded its credit: {} > {}",
                    l.sent,
                    l.granted
                );
                assert!(d.payload.len() <= MAX_DATA_PAYLOAD);
            }
            Incoming::Message(_) | Incoming::Control => {}
        }
    }

    pub fn client_out(&mut self, out: ClientOutput) {
        match out {
            ClientOutput::Connect { .. } => {
                let conn = ConnectionId(self.next_conn);
                self.next_conn += 1;
                self.conn = Some(conn);
                self.relay
                    .handle(
                        self.ts(),
                        RelayInput::Accepted {
                            conn,
                            client_cert: None,
                        },
                    )
                    .unwrap();
                self.client
                    .handle(self.ts(), ClientInput::Connected)
                    .unwrap();
            }
            ClientOutput::Send(frame) => self.to_relay.push_back(frame),
            ClientOutput::Close { .. } => {
                if let Some(conn) = self.conn.take() {
                    self.to_client.clear();
                    self.to_relay.clear();
                    self.relay
                        .handle(self.ts(), RelayInput::Closed { conn })
                        .unwrap();
                }
            }
            ClientOutput::StartLocalRequest {
                request,
                method,
                path,
                headers,
                ..
            } => {
                self.local.insert(
                    request,
                    Local {
                        method,
                        path,
                        headers,
                        ..Local::default()
                    },
                );
            }
            ClientOutput::RequestBodyChunk { request, bytes } => {
                let l = self.local.get_mut(&request).unwrap();
                l.unconsumed += bytes.len() as u64;
                assert!(
                    l.unconsumed <= u64::from(self.client_window),
                    "the executor holds more than its window"
                );
                l.body.extend(bytes);
            }
            ClientOutput::RequestBodyEnd { request } => {
                self.local.get_mut(&request).unwrap().body_ended = true;
            }
            ClientOutput::CancelLocalRequest { request } => {
                self.local.get_mut(&request).unwrap().cancelled = true;
            }
            ClientOutput::ResponseCredit { request, bytes } => {
                self.local.get_mut(&request).unwrap().credit += bytes;
            }
            ClientOutput::Event(e) => self.client_events.push(e),
        }
    }

    pub fn relay_out(&mut self, out: RelayOutput) {
        match out {
            RelayOutput::Send { conn, frame } => {
                if Some(conn) == self.conn {
                    self.to_client.push_back(frame);
                }
            }
            RelayOutput::Close { conn, .. } => {
                if Some(conn) == self.conn {
                    self.conn = None;
                    self.to_client.clear();
                    self.to_relay.clear();
                    let reason = "closed by relay".into();
                    self.client
                        .handle(self.ts(), ClientInput::Disconnected { reason })
                        .unwrap();
                }
            }
            RelayOutput::RequestCredit { request, bytes } => {
                self.public.entry(request).or_default().credit += bytes;
            }
            RelayOutput::ResponseHead {
                request,
                status,
                end,
                ..
            } => {
                let p = self.public.entry(request).or_default();
                p.status = Some(status);
                p.ended = end;
            }
            RelayOutput::ResponseBody { request, bytes } => {
                let p = self.public.entry(request).or_default();
                p.unwritten += bytes.len() as u64;
                p.body.extend(bytes);
            }
            RelayOutput::ResponseEnd { request } => {
                self.public.entry(request).or_default().ended = true;
            }
            RelayOutput::ResponseAbort { request } => {
                self.public.entry(request).or_default().aborted = true;
            }
            RelayOutput::Refuse {
                request, status, ..
            } => {
                self.public.entry(request).or_default().refused = Some(status);
            }
            RelayOutput::Event(e) => self.relay_events.push(e),
        }
    }

    pub fn violations(&self) -> usize {
        let c = self
            .client_events
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    ClientEvent::ProtocolViolation { .. } | ClientEvent::MalformedFrame(_)
                )
            })
            .count();
        let r = self
            .relay_events
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    RelayEvent::ProtocolViolation { .. } | RelayEvent::MalformedFrame { .. }
                )
            })
            .count();
        c + r
    }
}

pub fn get(path: &str, headers: &[(&str, &str)], id: u64) -> RelayInput {
    RelayInput::Request {
        request: RequestId(id),
        method: "GET".into(),
        path: path.into(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        body: false,
    }
}

/// A small deterministic generator for the drivers' choices.
pub struct Rng(pub u64);
impl Rng {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if n == 0 {
            0
        } else {
            (self.0 >> 33) % n
        }
    }
}
