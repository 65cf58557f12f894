//! [`TunnelClient`]: the executor's side of the tunnel, one connection at a time.
//!
//! ```text
//!            new / back-off over                Connected               AUTH_OK
//!   ┌──────────────────────────► Connecting ─────────────► Authenticating ─────► Ready
//!   │                                │ handshake timeout,        │ AUTH_ERROR        │
//!   │                                │ Disconnected              ▼                   │ Disconnected,
//! BackingOff ◄───────────────────────┴──────────────────── Stopped(AuthRejected)    │ keepalive
//!   ▲  │ max_attempts reached                                                      │ timeout
//!   │  └──────────────────────────────► Stopped(GaveUp)                            │
//!   └──────────────────────────────────────────────────────────────────────────────┘
//! ```
//!
//! * **Dialling:** [`ClientOutput::Connect`] asks the driver to open the WebSocket; it answers
//!   with [`ClientInput::Connected`] or [`ClientInput::Disconnected`]. The whole handshake
//!   (TCP, TLS, WebSocket, `AUTH` → `AUTH_OK`) must finish within
//!   [`TunnelClientConfig::handshake_timeout`].
//! * **Back-off:** every failure (a dial that fails, a handshake that times out, a ready
//!   connection lost) waits [`BackoffConfig`](crate::tunnel::BackoffConfig)'s jittered exponential delay before the next
//!   dial; `AUTH_OK` resets the count. By default the client never gives up.
//! * **A refused token is fatal:** `AUTH_ERROR` stops the client
//!   ([`ClientEvent::AuthFailed`]) instead of retrying. A token the relay does not know will
//!   not become valid by dialling again, and a client hammering a relay with a bad token
//!   looks like guessing; an operator has to fix the configuration. (A relay in trouble
//!   closes the connection without `AUTH_ERROR`, which is retried.)
//! * **Streams:** each tunnelled request becomes a [`LocalRequest`] that the driver runs
//!   against the executor's own router ([`ClientOutput::StartLocalRequest`], path relative
//!   to `/awcp`); its response comes back as [`ClientInput::ResponseHead`],
//!   [`ClientInput::ResponseChunk`] and [`ClientInput::ResponseEnd`]. The driver reads the
//!   local response body only as far as [`ClientOutput::ResponseCredit`] allows (one chunk
//!   may overshoot) and reports request body bytes its handler took with
//!   [`ClientInput::RequestBodyConsumed`]: that is how flow control reaches both ends.
//! * **Disconnect:** every open stream is abandoned: one [`ClientOutput::CancelLocalRequest`]
//!   each. Requests are never replayed over a new connection (a POST may have had its
//!   effect); the delegator sees its request fail at the relay and retries or resumes
//!   (`Last-Event-ID`).
//! * **Reference relays:** if `AUTH_OK` does not agree to the extension, the client speaks
//!   the reference subset: a whole `HTTP_REQUEST` in, a whole `HTTP_RESPONSE` out (at most
//!   [`TunnelClientConfig::reference_body_cap`] bytes of UTF-8), `SSE_OPEN` as a local GET of
//!   the event stream whose events go out one `SSE_EVENT` each.

mod io;
mod streams;

pub use self::io::{
    ClientEvent, ClientInput, ClientOutput, ClientState, StopReason, TunnelClientConfig,
};

use std::collections::{BTreeMap, VecDeque};

use core::time::Duration;

use engine_basics::ids::SplitMix64;

use super::codec::{decode_frame, Incoming, WsFrame};
use super::frames::{Auth, Message, Pong, DEFAULT_WINDOW, EXTENSION_V1, MAX_WINDOW, MIN_WINDOW};
use super::liveness::{Keepalive, Liveness};
use super::{close_code, LocalRequest, TunnelUsageError};
use crate::time::Timestamp;

use self::streams::{Remote, Stream};

/// The executor's side of the tunnel ([module docs](self)).
#[derive(Debug)]
pub struct TunnelClient {
    config: TunnelClientConfig,
    rng: SplitMix64,
    state: ClientState,
    /// Handshake deadline (connecting, authenticating) or the end of the back-off.
    deadline: Option<Timestamp>,
    liveness: Option<Liveness>,
    now: Timestamp,
    outputs: VecDeque<ClientOutput>,
    failures: u32,
    /// Agreed on this connection.
    extension: bool,
    /// The relay's window for each response body.
    peer_window: u32,
    streams: BTreeMap<LocalRequest, Stream>,
    by_remote: BTreeMap<Remote, LocalRequest>,
    next_request: u64,
}

impl TunnelClient {
    /// A client that dials at once ([`ClientOutput::Connect`] is queued).
    pub fn new(config: TunnelClientConfig, now: Timestamp) -> Self {
        let mut client = TunnelClient {
            rng: SplitMix64::new(config.seed),
            config,
            state: ClientState::Stopped(StopReason::Requested),
            deadline: None,
            liveness: None,
            now,
            outputs: VecDeque::new(),
            failures: 0,
            extension: false,
            peer_window: DEFAULT_WINDOW,
            streams: BTreeMap::new(),
            by_remote: BTreeMap::new(),
            next_request: 1,
        };
        client.dial(now);
        client
    }

    /// Where the client is.
    pub fn state(&self) -> &ClientState {
        &self.state
    }

    /// The last keepalive round trip measured (extension only).
    pub fn rtt(&self) -> Option<Duration> {
        self.liveness.as_ref().and_then(Liveness::rtt)
    }

    /// How many tunnelled requests are open.
    pub fn open_requests(&self) -> usize {
        self.streams.len()
    }

    /// Stops for good: cancels every request and closes the connection.
    pub fn stop(&mut self, now: Timestamp) {
        self.tick(now);
        if self.connected() {
            self.push(ClientOutput::Close {
                code: close_code::NORMAL,
                reason: "executor stopping".into(),
            });
        }
        self.abort_streams();
        self.liveness = None;
        self.deadline = None;
        self.state = ClientState::Stopped(StopReason::Requested);
    }

    /// Feeds one input at `now`.
    pub fn handle(&mut self, now: Timestamp, input: ClientInput) -> Result<(), TunnelUsageError> {
        self.tick(now);
        match input {
            ClientInput::Connected => self.on_connected(now),
            ClientInput::Disconnected { reason } => {
                if self.connected() {
                    self.fail(now, reason, None);
                }
                Ok(())
            }
            ClientInput::Frame(frame) => {
                self.on_frame(now, frame);
                Ok(())
            }
            ClientInput::ResponseHead {
                request,
                status,
                headers,
            } => self.response_head(request, status, headers),
            ClientInput::ResponseChunk { request, bytes } => self.response_chunk(request, bytes),
            ClientInput::ResponseEnd { request } => self.response_end(request),
            ClientInput::RequestBodyConsumed { request, bytes } => {
                self.request_consumed(request, bytes)
            }
            ClientInput::LocalFailed { request, reason } => self.local_failed(request, reason),
        }
    }

    /// Fires what is due at `now` (a dial after back-off, a handshake timeout, a keepalive).
    /// Calling it early does nothing.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.tick(now);
        let due = self.deadline.is_some_and(|d| d <= now);
        match &self.state {
            ClientState::BackingOff { .. } if due => self.dial(now),
            ClientState::Connecting { .. } | ClientState::Authenticating { .. } if due => {
                let close = Some((close_code::HANDSHAKE_TIMEOUT, "handshake timeout"));
                self.fail(now, "handshake timed out".into(), close);
            }
            ClientState::Ready { .. } => {
                let Some(liveness) = self.liveness.as_mut() else {
                    return;
                };
                match liveness.poll(now) {
                    Keepalive::Nothing => {}
                    Keepalive::Ping(id) if self.extension => {
                        self.send(&Message::Ping(super::frames::Ping { id: Some(id) }));
                    }
                    Keepalive::Ping(_) => self.push(ClientOutput::Send(WsFrame::Ping(Vec::new()))),
                    Keepalive::Dead => {
                        let close = Some((close_code::IDLE, "nothing heard"));
                        self.fail(now, "keepalive timeout: nothing heard".into(), close);
                    }
                }
            }
            ClientState::BackingOff { .. }
            | ClientState::Connecting { .. }
            | ClientState::Authenticating { .. }
            | ClientState::Stopped(_) => {}
        }
    }

    /// The next output, oldest first.
    pub fn poll_output(&mut self) -> Option<ClientOutput> {
        self.outputs.pop_front()
    }

    /// When to call [`TunnelClient::handle_timeout`] next: now while outputs are queued.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        if !self.outputs.is_empty() {
            return Some(self.now);
        }
        let keepalive = match self.state {
            ClientState::Ready { .. } => self.liveness.as_ref().map(Liveness::deadline),
            ClientState::Connecting { .. }
            | ClientState::Authenticating { .. }
            | ClientState::BackingOff { .. }
            | ClientState::Stopped(_) => None,
        };
        match (self.deadline, keepalive) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn tick(&mut self, now: Timestamp) {
        self.now = self.now.max(now);
    }

    fn push(&mut self, output: ClientOutput) {
        self.outputs.push_back(output);
    }

    fn event(&mut self, event: ClientEvent) {
        self.push(ClientOutput::Event(event));
    }

    fn send(&mut self, message: &Message) {
        self.push(ClientOutput::Send(WsFrame::message(message)));
    }

    fn connected(&self) -> bool {
        match self.state {
            ClientState::Connecting { .. }
            | ClientState::Authenticating { .. }
            | ClientState::Ready { .. } => true,
            ClientState::BackingOff { .. } | ClientState::Stopped(_) => false,
        }
    }

    fn dial(&mut self, now: Timestamp) {
        self.state = ClientState::Connecting {
            attempt: self.failures,
        };
        self.deadline = Some(now.saturating_add(self.config.handshake_timeout));
        self.push(ClientOutput::Connect {
            attempt: self.failures,
        });
    }

    fn on_connected(&mut self, now: Timestamp) -> Result<(), TunnelUsageError> {
        let ClientState::Connecting { attempt } = self.state else {
            return Err(TunnelUsageError::InvalidState(
                "Connected without a Connect",
            ));
        };
        self.state = ClientState::Authenticating { attempt };
        self.liveness = Some(Liveness::new(self.config.keepalive, now));
        self.extension = false;
        let offer = self.config.offer_extension;
        self.send(&Message::Auth(Auth {
            token: self.config.token.clone(),
            features: offer.then(|| vec![EXTENSION_V1.to_string()]),
            window: offer.then_some(self.config.window),
        }));
        Ok(())
    }

    /// The connection failed: cancel its requests, then back off or give up. `close` asks
    /// the driver to close the socket first (the machine noticed, not the driver).
    fn fail(&mut self, now: Timestamp, reason: String, close: Option<(u16, &str)>) {
        if let Some((code, why)) = close {
            self.push(ClientOutput::Close {
                code,
                reason: why.into(),
            });
        }
        self.abort_streams();
        self.liveness = None;
        self.event(ClientEvent::Disconnected { reason });
        self.failures = self.failures.saturating_add(1);
        if self
            .config
            .backoff
            .max_attempts
            .is_some_and(|max| self.failures > max)
        {
            self.deadline = None;
            self.state = ClientState::Stopped(StopReason::GaveUp);
            self.event(ClientEvent::GaveUp {
                attempts: self.failures,
            });
            return;
        }
        let delay = self.config.backoff.delay(self.failures, &mut self.rng);
        let until = now.saturating_add(delay);
        self.deadline = Some(until);
        self.state = ClientState::BackingOff {
            attempt: self.failures,
            until,
        };
        self.event(ClientEvent::Reconnecting {
            attempt: self.failures,
            at: until,
        });
    }

    fn on_frame(&mut self, now: Timestamp, frame: WsFrame) {
        let ready = match self.state {
            ClientState::Ready { .. } => true,
            ClientState::Authenticating { .. } => false,
            // A frame racing the close of its connection.
            ClientState::Connecting { .. }
            | ClientState::BackingOff { .. }
            | ClientState::Stopped(_) => return,
        };
        if let Some(l) = self.liveness.as_mut() {
            l.heard(now);
        }
        let binary_ok = ready && self.extension;
        let message = match decode_frame(frame, self.config.max_frame_bytes, binary_ok) {
            Ok(Incoming::Message(m)) => m,
            Ok(Incoming::Data(data)) => return self.on_data(data),
            Ok(Incoming::Control) => return,
            Err(e) => return self.event(ClientEvent::MalformedFrame(e)),
        };
        if !ready {
            return self.on_handshake(now, message);
        }
        if !message.is_reference() && !self.extension {
            return self.event(ClientEvent::ProtocolViolation {
                reason: "extension frame without the extension",
            });
        }
        match message {
            Message::Ping(p) => {
                if let (Some(id), true) = (p.id, self.extension) {
                    self.send(&Message::Pong(Pong { id }));
                }
            }
            Message::Pong(p) => {
                if let Some(l) = self.liveness.as_mut() {
                    l.pong(p.id, now);
                }
            }
            Message::HttpRequest(r) => self.on_http_request(r),
            Message::SseOpen(o) => self.on_sse_open(o),
            Message::SseClose(c) => self.on_sse_close(c),
            Message::RequestHead(h) => self.on_request_head(h),
            Message::Window(w) => self.on_window(w),
            Message::Reset(r) => self.on_reset(r),
            Message::Auth(_)
            | Message::AuthOk(_)
            | Message::AuthError(_)
            | Message::HttpResponse(_)
            | Message::SseEvent(_)
            | Message::SseEnd(_)
            | Message::ResponseHead(_) => self.event(ClientEvent::ProtocolViolation {
                reason: "frame only an executor sends, or a second handshake",
            }),
        }
    }

    fn on_handshake(&mut self, now: Timestamp, message: Message) {
        match message {
            Message::AuthOk(ok) => {
                let window = ok.window.unwrap_or(DEFAULT_WINDOW);
                if !(MIN_WINDOW..=MAX_WINDOW).contains(&window) {
                    self.event(ClientEvent::ProtocolViolation {
                        reason: "AUTH_OK window out of range",
                    });
                    let close = Some((close_code::PROTOCOL, "invalid window"));
                    return self.fail(now, "relay announced an invalid window".into(), close);
                }
                self.extension = self.config.offer_extension
                    && ok
                        .features
                        .iter()
                        .flatten()
                        .any(|f| f.as_str() == EXTENSION_V1);
                self.peer_window = window;
                self.failures = 0;
                self.deadline = None;
                self.state = ClientState::Ready {
                    public_url: ok.public_url.clone(),
                    extension: self.extension,
                };
                self.event(ClientEvent::Ready {
                    public_url: ok.public_url,
                    extension: self.extension,
                });
            }
            Message::AuthError(e) => {
                self.push(ClientOutput::Close {
                    code: close_code::NORMAL,
                    reason: "authentication failed".into(),
                });
                self.liveness = None;
                self.deadline = None;
                self.state = ClientState::Stopped(StopReason::AuthRejected(e.reason.clone()));
                self.event(ClientEvent::AuthFailed { reason: e.reason });
            }
            // The reference relay's keepalive may come at any time.
            Message::Ping(_) => {}
            Message::Auth(_)
            | Message::HttpRequest(_)
            | Message::HttpResponse(_)
            | Message::SseOpen(_)
            | Message::SseEvent(_)
            | Message::SseEnd(_)
            | Message::SseClose(_)
            | Message::Pong(_)
            | Message::RequestHead(_)
            | Message::ResponseHead(_)
            | Message::Window(_)
            | Message::Reset(_) => self.event(ClientEvent::ProtocolViolation {
                reason: "frame before AUTH_OK",
            }),
        }
    }

    /// Cancels every open local request (the connection is gone).
    fn abort_streams(&mut self) {
        let open = std::mem::take(&mut self.streams);
        self.by_remote.clear();
        for request in open.into_keys() {
            self.push(ClientOutput::CancelLocalRequest { request });
        }
    }

    fn mint(&mut self) -> LocalRequest {
        let id = LocalRequest(self.next_request);
        self.next_request += 1;
        id
    }
}

impl crate::engine::drive::Engine for TunnelClient {
    type Input = ClientInput;
    type Output = ClientOutput;
    type Time = Timestamp;
    type Refusal = TunnelUsageError;
    fn handle(&mut self, now: Timestamp, input: ClientInput) -> Result<(), TunnelUsageError> {
        TunnelClient::handle(self, now, input)
    }
    fn handle_timeout(&mut self, now: Timestamp) {
        TunnelClient::handle_timeout(self, now);
    }
    fn poll_output(&mut self) -> Option<ClientOutput> {
        TunnelClient::poll_output(self)
    }
    fn next_deadline(&self) -> Option<Timestamp> {
        self.poll_timeout()
    }
}
