//! The [`Relay`](super::Relay)'s configuration, inputs, outputs and events.

use core::time::Duration;

use crate::engine::RequestId;
use crate::tunnel::codec::WsFrame;
use crate::tunnel::frames::DEFAULT_WINDOW;
use crate::tunnel::headers::Headers;
use crate::tunnel::liveness::KeepaliveConfig;
use crate::tunnel::registry::{CertDigest, ExecutorName};
use crate::tunnel::{ConnectionId, FrameError};

/// How a [`Relay`](super::Relay) behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayConfig {
    /// The relay's public origin (`https://relay.example`): executors' URLs are
    /// `<public_base>/e/<name>/awcp`.
    pub public_base: String,
    /// The window granted to each response body (default [`DEFAULT_WINDOW`]).
    pub window: u32,
    /// Requests in flight per executor (default 64).
    pub max_in_flight: usize,
    /// Bytes the relay may have to hold per executor (default 16 MiB, i.e. 64 streams of a
    /// default window).
    pub max_buffered_bytes: u64,
    /// Reference clients only: the largest request body sent in one `HTTP_REQUEST`
    /// (default 8 MiB; larger ones are refused 413).
    pub reference_body_cap: usize,
    /// Reference clients only: event bytes held for a slow subscriber before its stream is
    /// cut (default 1 MiB).
    pub reference_stream_buffer: u64,
    /// Keepalive timing.
    pub keepalive: KeepaliveConfig,
    /// A connection must send `AUTH` within this (default 10 s).
    pub auth_timeout: Duration,
    /// How long a request to a registered executor that is offline waits for it (default
    /// 10 s; zero refuses at once).
    pub offline_grace: Duration,
    /// The largest text frame read (default 16 MiB).
    pub max_frame_bytes: usize,
}

impl RelayConfig {
    /// The defaults, with the relay's public origin.
    pub fn new(public_base: impl Into<String>) -> Self {
        RelayConfig {
            public_base: public_base.into(),
            window: DEFAULT_WINDOW,
            max_in_flight: 64,
            max_buffered_bytes: 16 << 20,
            reference_body_cap: 8 << 20,
            reference_stream_buffer: 1 << 20,
            keepalive: KeepaliveConfig::default(),
            auth_timeout: Duration::from_secs(10),
            offline_grace: Duration::from_secs(10),
            max_frame_bytes: 16 << 20,
        }
    }
}

/// What the driver feeds a [`Relay`](super::Relay).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayInput {
    /// A WebSocket connection was accepted on the tunnel endpoint.
    Accepted {
        /// Its handle.
        conn: ConnectionId,
        /// The digest of the TLS client certificate its connection presented and the
        /// driver's TLS verified (against the relay's client CA), if any: a credential
        /// `AUTH` may rely on instead of a token ([`Registry::authenticate_with`]).
        ///
        /// [`Registry::authenticate_with`]: crate::tunnel::Registry::authenticate_with
        client_cert: Option<CertDigest>,
    },
    /// A frame arrived on a connection.
    Frame {
        /// The connection.
        conn: ConnectionId,
        /// The frame.
        frame: WsFrame,
    },
    /// A connection closed (either side closed it, or it broke).
    Closed {
        /// The connection.
        conn: ConnectionId,
    },
    /// A public HTTP request arrived.
    Request {
        /// Its handle, named by every later input and output about it.
        request: RequestId,
        /// HTTP method.
        method: String,
        /// The public path, query included (`/e/<name>/awcp/…`).
        path: String,
        /// Request headers.
        headers: Headers,
        /// Whether it has a body (read it only as [`RelayOutput::RequestCredit`] allows).
        body: bool,
    },
    /// Bytes of a public request's body (one chunk may overshoot the credit).
    RequestChunk {
        /// The request.
        request: RequestId,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// A public request's body is complete.
    RequestEnd {
        /// The request.
        request: RequestId,
    },
    /// `bytes` of the response body were written to the public client (what frees the
    /// executor to send more).
    ResponseWritten {
        /// The request.
        request: RequestId,
        /// How many bytes.
        bytes: u64,
    },
    /// The public client went away (or its response could not be written).
    RequestGone {
        /// The request.
        request: RequestId,
    },
}

/// What a [`Relay`](super::Relay) asks its driver to do, or tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayOutput {
    /// Write this frame to a connection.
    Send {
        /// The connection.
        conn: ConnectionId,
        /// The frame.
        frame: WsFrame,
    },
    /// Close a connection with this code. The relay has already forgotten it; a later
    /// `Closed` for it is ignored.
    Close {
        /// The connection.
        conn: ConnectionId,
        /// WebSocket close code ([`close_code`](crate::tunnel::close_code)).
        code: u16,
        /// Close reason.
        reason: String,
    },
    /// The driver may read `bytes` more of a public request's body.
    RequestCredit {
        /// The request.
        request: RequestId,
        /// How many more bytes.
        bytes: u64,
    },
    /// Answer a public request: status and headers.
    ResponseHead {
        /// The request.
        request: RequestId,
        /// HTTP status.
        status: u16,
        /// Response headers (hop-by-hop ones removed).
        headers: Headers,
        /// `true`: the response has no body (nothing more comes for this request).
        end: bool,
    },
    /// Bytes of a public response's body (for an event stream, whole SSE events).
    ResponseBody {
        /// The request.
        request: RequestId,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// A public response's body is complete.
    ResponseEnd {
        /// The request.
        request: RequestId,
    },
    /// Break off a public response whose head was sent (close its HTTP connection or reset
    /// its HTTP/2 stream), so the client sees it incomplete.
    ResponseAbort {
        /// The request.
        request: RequestId,
    },
    /// Answer a public request with the relay's own refusal: `status` and the JSON `body`
    /// `{"error": "…"}` (`Content-Type: application/json`). Nothing more comes for it; stop
    /// reading its body.
    Refuse {
        /// The request.
        request: RequestId,
        /// HTTP status (404 unknown executor or route, 413 body too large, 502 the executor
        /// failed or went away, 503 offline or over a limit).
        status: u16,
        /// The JSON body.
        body: String,
    },
    /// Something the operator may want to know.
    Event(RelayEvent),
}

/// Notable things that happened in a [`Relay`](super::Relay).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayEvent {
    /// An executor authenticated and is served on `conn`.
    ExecutorOnline {
        /// Its name.
        name: ExecutorName,
        /// Its connection.
        conn: ConnectionId,
        /// Whether it speaks the extension.
        extension: bool,
    },
    /// An executor's connection ended.
    ExecutorOffline {
        /// Its name.
        name: ExecutorName,
        /// The connection that ended.
        conn: ConnectionId,
    },
    /// A newer connection with the same token replaced an executor's connection.
    Replaced {
        /// Its name.
        name: ExecutorName,
        /// The connection closed.
        old: ConnectionId,
        /// The connection serving it now.
        new: ConnectionId,
    },
    /// A connection's authentication failed; it was closed.
    AuthRejected {
        /// The connection.
        conn: ConnectionId,
        /// Why.
        reason: String,
    },
    /// A connection was closed by the relay for silence (keepalive) or a slow handshake.
    TimedOut {
        /// The connection.
        conn: ConnectionId,
    },
    /// A frame could not be read; it was dropped.
    MalformedFrame {
        /// The connection.
        conn: ConnectionId,
        /// What was wrong.
        error: FrameError,
    },
    /// An executor broke a rule (the frame was dropped, or its stream reset).
    ProtocolViolation {
        /// The connection.
        conn: ConnectionId,
        /// Which rule.
        reason: &'static str,
    },
}
