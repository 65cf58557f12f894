//! [`Relay`]: the relay's side of the tunnel, one machine for every executor connection and
//! every public request.
//!
//! * **Connections** ([`RelayInput::Accepted`]) must send `AUTH` within
//!   [`RelayConfig::auth_timeout`]. The token's digest, or the digest of the TLS client
//!   certificate the driver verified on the connection, names the executor
//!   ([`Registry::authenticate_with`]); unknown credentials get `AUTH_ERROR` and a close. A
//!   client offering [`EXTENSION_V1`] gets it (`AUTH_OK.features`); one that offers nothing
//!   is a reference client and hears only the reference subset. A second connection for the
//!   same executor replaces the first: the old one is closed ([`close_code::REPLACED`]) and
//!   its requests fail.
//! * **Public requests** ([`RelayInput::Request`], path `/e/<name>/awcp…`) go to the
//!   executor's connection as a new stream. While a registered executor is offline (between
//!   a lost connection and the next), its requests wait up to [`RelayConfig::offline_grace`]
//!   for it, headers only (no body byte is read), then are refused 503.
//! * **Limits**, per executor: at most [`RelayConfig::max_in_flight`] streams, and at most
//!   [`RelayConfig::max_buffered_bytes`] the relay may have to hold for it (for an extension
//!   stream, the window it granted, as the executor may fill it; for a reference stream, the
//!   bytes held). A request over either limit is refused 503 ([`RelayOutput::Refuse`]).
//!   Bodies stream through: the public request body is read only as far as the executor
//!   granted ([`RelayOutput::RequestCredit`]), and the executor may send only as much of a
//!   response as the driver reported written ([`RelayInput::ResponseWritten`]) plus one
//!   window. A relay never holds a workspace.
//! * **Lost connections:** every request in flight on it fails: refused 502 if its response
//!   had not started, aborted ([`RelayOutput::ResponseAbort`]) if it had, so that a
//!   delegator's event stream ends and it re-issues its GET with `Last-Event-ID`.
//! * **Keepalive:** as the client's ([`KeepaliveConfig`](crate::tunnel::KeepaliveConfig)); a reference client is pinged with
//!   its own `PING` frame and a WebSocket ping, which its WebSocket library answers.

mod io;
mod public;
mod responses;
mod streams;

use std::collections::BTreeMap;

use core::time::Duration;

use engine_basics::timers::{Core, Reason};

pub use self::io::{RelayConfig, RelayEvent, RelayInput, RelayOutput};
pub use self::public::{
    public_url, reference_route, split_public_path, ReferenceRoute, PUBLIC_PREFIX,
};
use self::streams::{RStream, Route};
use super::codec::{decode_frame, Incoming, WsFrame};
use super::frames::{
    Auth, AuthError, AuthOk, Message, Ping, StreamNo, DEFAULT_WINDOW, EXTENSION_V1, MAX_WINDOW,
    MIN_WINDOW,
};
use super::liveness::{Keepalive, Liveness};
use super::registry::{CertDigest, ExecutorName, Registry, RegistryError};
use super::{close_code, ConnectionId, TunnelUsageError};
use crate::engine::auth::SecretDigest;
use crate::engine::RequestId;
use crate::time::Timestamp;

/// Why a relay wakes up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum RelayTimer {
    /// A connection's handshake deadline or keepalive (re-armed lazily when it fires).
    Conn(ConnectionId),
    /// A request waiting for its executor to come online.
    Waiting(RequestId),
}

impl Reason for RelayTimer {
    fn reason(&self) -> &'static str {
        match self {
            RelayTimer::Conn(_) => "tunnel keepalive or handshake",
            RelayTimer::Waiting(_) => "request waiting for its executor",
        }
    }
}

/// One executor connection.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) phase: Phase,
    liveness: Liveness,
    auth_deadline: Timestamp,
    /// The verified TLS client certificate's digest, if the connection presented one.
    client_cert: Option<CertDigest>,
    pub(crate) next_stream: StreamNo,
    pub(crate) streams: BTreeMap<StreamNo, RStream>,
}

#[derive(Debug)]
pub(crate) enum Phase {
    Authenticating,
    Ready {
        name: ExecutorName,
        extension: bool,
        client_window: u32,
    },
}

/// The relay machine ([module docs](self)).
#[derive(Debug)]
pub struct Relay {
    pub(crate) config: RelayConfig,
    registry: Registry,
    pub(crate) conns: BTreeMap<ConnectionId, Conn>,
    pub(crate) requests: BTreeMap<RequestId, Route>,
    pub(crate) core: Core<RelayTimer, RelayOutput, Timestamp>,
}

impl Relay {
    /// A relay serving the executors of `registry`.
    pub fn new(config: RelayConfig, registry: Registry) -> Self {
        Relay {
            config,
            registry,
            conns: BTreeMap::new(),
            requests: BTreeMap::new(),
            core: Core::default(),
        }
    }

    /// The registrations and who is online.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Registers an executor (see [`Registry::register`]).
    pub fn register(
        &mut self,
        name: ExecutorName,
        digest: SecretDigest,
    ) -> Result<(), RegistryError> {
        self.registry.register(name, digest)
    }

    /// Registers an executor by its TLS client certificate (see
    /// [`Registry::register_certificate`]).
    pub fn register_certificate(
        &mut self,
        name: ExecutorName,
        cert: CertDigest,
    ) -> Result<(), RegistryError> {
        self.registry.register_certificate(name, cert)
    }

    /// Removes an executor's registration: its connection is closed
    /// ([`close_code::UNREGISTERED`]), its requests fail, its waiting requests are refused.
    /// `false` if it was not registered.
    pub fn unregister(&mut self, now: Timestamp, name: &ExecutorName) -> bool {
        self.core.tick(now);
        let Some(conn) = self.registry.unregister(name) else {
            return false;
        };
        if let Some(conn) = conn {
            let close = (close_code::UNREGISTERED, "executor unregistered");
            self.teardown(conn, Some(close));
            self.event(RelayEvent::ExecutorOffline {
                name: name.clone(),
                conn,
            });
        }
        let waiting: Vec<RequestId> = self.waiting_for(name);
        for request in waiting {
            self.requests.remove(&request);
            self.core.timers.cancel(&RelayTimer::Waiting(request));
            self.refuse(request, 404, "unknown executor");
        }
        true
    }

    /// Closes every connection ([`close_code::GOING_AWAY`]) and fails every request.
    pub fn shutdown(&mut self, now: Timestamp) {
        self.core.tick(now);
        let conns: Vec<ConnectionId> = self.conns.keys().copied().collect();
        for conn in conns {
            self.teardown(conn, Some((close_code::GOING_AWAY, "relay shutting down")));
        }
        let waiting: Vec<RequestId> = self.requests.keys().copied().collect();
        for request in waiting {
            self.requests.remove(&request);
            self.core.timers.cancel(&RelayTimer::Waiting(request));
            self.refuse(request, 503, "relay shutting down");
        }
    }

    /// How many requests are in flight or waiting.
    pub fn open_requests(&self) -> usize {
        self.requests.len()
    }

    /// The last keepalive round trip measured on `conn` (extension only).
    pub fn rtt(&self, conn: ConnectionId) -> Option<Duration> {
        self.conns.get(&conn).and_then(|c| c.liveness.rtt())
    }

    /// Feeds one input at `now`.
    pub fn handle(&mut self, now: Timestamp, input: RelayInput) -> Result<(), TunnelUsageError> {
        self.core.tick(now);
        match input {
            RelayInput::Accepted { conn, client_cert } => {
                if self.conns.contains_key(&conn) {
                    return Err(TunnelUsageError::Duplicate(conn.0));
                }
                let c = Conn {
                    phase: Phase::Authenticating,
                    liveness: Liveness::new(self.config.keepalive, now),
                    auth_deadline: now.saturating_add(self.config.auth_timeout),
                    client_cert,
                    next_stream: 1,
                    streams: BTreeMap::new(),
                };
                self.conns.insert(conn, c);
                self.arm(conn);
                Ok(())
            }
            RelayInput::Frame { conn, frame } => self.on_frame(now, conn, frame),
            RelayInput::Closed { conn } => {
                self.teardown(conn, None);
                Ok(())
            }
            RelayInput::Request {
                request,
                method,
                path,
                headers,
                body,
            } => self.on_request(now, request, method, path, headers, body),
            RelayInput::RequestChunk { request, bytes } => self.on_request_chunk(request, bytes),
            RelayInput::RequestEnd { request } => self.on_request_end(request),
            RelayInput::ResponseWritten { request, bytes } => {
                self.on_response_written(request, bytes);
                Ok(())
            }
            RelayInput::RequestGone { request } => {
                self.on_request_gone(request);
                Ok(())
            }
        }
    }

    /// Fires what is due at `now` (handshake deadlines, keepalives, waiting requests).
    /// Calling it early does nothing.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.core.tick(now);
        while let Some(timer) = self.core.timers.pop_due(now) {
            match timer {
                RelayTimer::Conn(conn) => self.on_conn_timer(now, conn),
                RelayTimer::Waiting(request) => {
                    if let Some(Route::Waiting(_)) = self.requests.get(&request) {
                        self.requests.remove(&request);
                        self.refuse(request, 503, "executor offline");
                    }
                }
            }
        }
    }

    /// The next output, oldest first.
    pub fn poll_output(&mut self) -> Option<RelayOutput> {
        self.core.poll_output()
    }

    /// When to call [`Relay::handle_timeout`] next: now while outputs are queued.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.core.poll_timeout()
    }

    pub(crate) fn push(&mut self, output: RelayOutput) {
        self.core.outputs.push_back(output);
    }

    pub(crate) fn event(&mut self, event: RelayEvent) {
        self.push(RelayOutput::Event(event));
    }

    pub(crate) fn send(&mut self, conn: ConnectionId, message: &Message) {
        self.push(RelayOutput::Send {
            conn,
            frame: WsFrame::message(message),
        });
    }

    pub(crate) fn refuse(&mut self, request: RequestId, status: u16, reason: &str) {
        self.push(RelayOutput::Refuse {
            request,
            status,
            body: public::error_body(reason),
        });
    }

    /// Arms `conn`'s timer at its next deadline.
    fn arm(&mut self, conn: ConnectionId) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let at = match c.phase {
            Phase::Authenticating => c.auth_deadline.min(c.liveness.deadline()),
            Phase::Ready { .. } => c.liveness.deadline(),
        };
        self.core.timers.set(RelayTimer::Conn(conn), at);
    }

    fn on_conn_timer(&mut self, now: Timestamp, conn: ConnectionId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let extension = match c.phase {
            Phase::Authenticating if now >= c.auth_deadline => {
                self.teardown(conn, Some((close_code::HANDSHAKE_TIMEOUT, "no AUTH")));
                return self.event(RelayEvent::TimedOut { conn });
            }
            Phase::Authenticating => false,
            Phase::Ready { extension, .. } => extension,
        };
        match c.liveness.poll(now) {
            Keepalive::Nothing => {}
            Keepalive::Ping(id) if extension => {
                self.send(conn, &Message::Ping(Ping { id: Some(id) }))
            }
            Keepalive::Ping(_) => {
                self.send(conn, &Message::Ping(Ping::default()));
                self.push(RelayOutput::Send {
                    conn,
                    frame: WsFrame::Ping(Vec::new()),
                });
            }
            Keepalive::Dead => {
                self.teardown(conn, Some((close_code::IDLE, "nothing heard")));
                return self.event(RelayEvent::TimedOut { conn });
            }
        }
        self.arm(conn);
    }

    fn on_frame(
        &mut self,
        now: Timestamp,
        conn: ConnectionId,
        frame: WsFrame,
    ) -> Result<(), TunnelUsageError> {
        let c = self
            .conns
            .get_mut(&conn)
            .ok_or(TunnelUsageError::UnknownConnection(conn.0))?;
        c.liveness.heard(now);
        let extension = match c.phase {
            Phase::Authenticating => None,
            Phase::Ready { extension, .. } => Some(extension),
        };
        let binary_ok = extension == Some(true);
        let incoming = match decode_frame(frame, self.config.max_frame_bytes, binary_ok) {
            Ok(incoming) => incoming,
            Err(error) => {
                if extension.is_none() {
                    self.reject(conn, "malformed AUTH frame");
                }
                self.event(RelayEvent::MalformedFrame { conn, error });
                return Ok(());
            }
        };
        match (extension, incoming) {
            (_, Incoming::Control) => {}
            (None, Incoming::Message(Message::Auth(auth))) => self.authenticate(conn, auth),
            (None, Incoming::Message(_) | Incoming::Data(_)) => {
                self.reject(conn, "expected AUTH");
            }
            (Some(_), Incoming::Data(data)) => self.on_data(conn, data),
            (Some(extension), Incoming::Message(m)) => self.on_message(now, conn, extension, m),
        }
        Ok(())
    }

    /// Refuses a connection's handshake: `AUTH_ERROR`, then a close.
    fn reject(&mut self, conn: ConnectionId, reason: &str) {
        self.send(
            conn,
            &Message::AuthError(AuthError {
                reason: reason.into(),
            }),
        );
        self.teardown(conn, Some((close_code::AUTH_FAILED, reason)));
        self.event(RelayEvent::AuthRejected {
            conn,
            reason: reason.into(),
        });
    }

    fn authenticate(&mut self, conn: ConnectionId, auth: Auth) {
        let client_window = auth.window.unwrap_or(DEFAULT_WINDOW);
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&client_window) {
            return self.reject(conn, "invalid window");
        }
        let cert = self.conns.get(&conn).and_then(|c| c.client_cert);
        let name = match self.registry.authenticate_with(&auth.token, cert.as_ref()) {
            Ok(name) => name.clone(),
            Err(refusal) => return self.reject(conn, &refusal.to_string()),
        };
        let extension = auth
            .features
            .iter()
            .flatten()
            .any(|f| f.as_str() == EXTENSION_V1);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.phase = Phase::Ready {
                name: name.clone(),
                extension,
                client_window,
            };
        }
        let agreed = extension.then(|| vec![EXTENSION_V1.to_string()]);
        self.send(
            conn,
            &Message::AuthOk(AuthOk {
                public_url: public_url(&self.config.public_base, &name),
                // A client that offered features hears which were agreed (maybe none); a
                // reference client hears the reference's AUTH_OK.
                features: auth.features.map(|_| agreed.unwrap_or_default()),
                window: extension.then_some(self.config.window),
            }),
        );
        self.arm(conn);
        if let Some(old) = self.registry.bind(name.clone(), conn) {
            self.teardown(
                old,
                Some((close_code::REPLACED, "replaced by a newer connection")),
            );
            self.event(RelayEvent::Replaced {
                name: name.clone(),
                old,
                new: conn,
            });
        }
        self.event(RelayEvent::ExecutorOnline {
            name: name.clone(),
            conn,
            extension,
        });
        for request in self.waiting_for(&name) {
            self.core.timers.cancel(&RelayTimer::Waiting(request));
            if let Some(Route::Waiting(pending)) = self.requests.remove(&request) {
                self.dispatch(conn, request, *pending);
            }
        }
    }

    /// The requests waiting for `name`, oldest handle first.
    pub(crate) fn waiting_for(&self, name: &ExecutorName) -> Vec<RequestId> {
        self.requests
            .iter()
            .filter(|(_, route)| matches!(route, Route::Waiting(p) if p.name == *name))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Forgets a connection: closes it (if `close`), fails its requests, unbinds its name.
    pub(crate) fn teardown(&mut self, conn: ConnectionId, close: Option<(u16, &str)>) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        self.core.timers.cancel(&RelayTimer::Conn(conn));
        if let Some((code, reason)) = close {
            self.push(RelayOutput::Close {
                conn,
                code,
                reason: reason.into(),
            });
        }
        for (_, stream) in c.streams {
            self.requests.remove(&stream.request);
            self.fail_public(&stream, "executor disconnected");
        }
        if let Phase::Ready { name, .. } = c.phase {
            if self.registry.unbind(&name, conn) {
                self.event(RelayEvent::ExecutorOffline { name, conn });
            }
        }
    }
}

impl crate::engine::drive::Engine for Relay {
    type Input = RelayInput;
    type Output = RelayOutput;
    type Time = Timestamp;
    type Refusal = TunnelUsageError;
    fn handle(&mut self, now: Timestamp, input: RelayInput) -> Result<(), TunnelUsageError> {
        Relay::handle(self, now, input)
    }
    fn handle_timeout(&mut self, now: Timestamp) {
        Relay::handle_timeout(self, now);
    }
    fn poll_output(&mut self) -> Option<RelayOutput> {
        Relay::poll_output(self)
    }
    fn next_deadline(&self) -> Option<Timestamp> {
        self.poll_timeout()
    }
}
