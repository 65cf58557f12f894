//! The [`TunnelClient`](super::TunnelClient)'s configuration, inputs, outputs and events.

use core::time::Duration;

use crate::time::Timestamp;
use crate::tunnel::codec::WsFrame;
use crate::tunnel::frames::DEFAULT_WINDOW;
use crate::tunnel::headers::Headers;
use crate::tunnel::liveness::{BackoffConfig, KeepaliveConfig};
use crate::tunnel::{FrameError, LocalRequest};

/// How a [`TunnelClient`](super::TunnelClient) behaves.
#[derive(Clone)]
pub struct TunnelClientConfig {
    /// The token the relay's operator issued (sent in `AUTH`; `Debug` hides it).
    pub token: String,
    /// Offer [`EXTENSION_V1`](crate::tunnel::EXTENSION_V1) (default `true`; `false` speaks as a reference client does).
    pub offer_extension: bool,
    /// The window granted to each request body (default [`DEFAULT_WINDOW`]).
    pub window: u32,
    /// Reconnect policy.
    pub backoff: BackoffConfig,
    /// Keepalive timing.
    pub keepalive: KeepaliveConfig,
    /// Dial, WebSocket handshake and `AUTH_OK` must all happen within this (default 15 s).
    pub handshake_timeout: Duration,
    /// Requests served at once; more are answered 503 (default 128).
    pub max_streams: usize,
    /// The largest text frame read (default 16 MiB).
    pub max_frame_bytes: usize,
    /// Reference relays only: the largest response body sent in one `HTTP_RESPONSE`, and
    /// the largest SSE event (default 8 MiB).
    pub reference_body_cap: usize,
    /// Seeds the back-off's jitter (random in a driver, fixed in tests).
    pub seed: u64,
}

impl TunnelClientConfig {
    /// The defaults, with `token` and `seed`.
    pub fn new(token: impl Into<String>, seed: u64) -> Self {
        TunnelClientConfig {
            token: token.into(),
            offer_extension: true,
            window: DEFAULT_WINDOW,
            backoff: BackoffConfig::default(),
            keepalive: KeepaliveConfig::default(),
            handshake_timeout: Duration::from_secs(15),
            max_streams: 128,
            max_frame_bytes: 16 << 20,
            reference_body_cap: 8 << 20,
            seed,
        }
    }
}

impl core::fmt::Debug for TunnelClientConfig {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TunnelClientConfig")
            .field("token", &"<hidden>")
            .field("offer_extension", &self.offer_extension)
            .field("window", &self.window)
            .field("backoff", &self.backoff)
            .field("keepalive", &self.keepalive)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("max_streams", &self.max_streams)
            .finish_non_exhaustive()
    }
}

/// Where the client is ([module diagram](super)). `attempt` counts the consecutive failures
/// before the current try (0: the first dial, or the first after an `AUTH_OK`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientState {
    /// Waiting for the driver to open the WebSocket.
    Connecting {
        /// Consecutive failures so far.
        attempt: u32,
    },
    /// `AUTH` sent, waiting for `AUTH_OK`.
    Authenticating {
        /// Consecutive failures so far.
        attempt: u32,
    },
    /// Serving requests.
    Ready {
        /// Where delegators reach this executor.
        public_url: String,
        /// Whether the extension was agreed.
        extension: bool,
    },
    /// Waiting to dial again.
    BackingOff {
        /// Consecutive failures so far.
        attempt: u32,
        /// When the next dial is due.
        until: Timestamp,
    },
    /// Done; nothing more happens.
    Stopped(StopReason),
}

/// Why a client stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// [`TunnelClient::stop`](super::TunnelClient::stop) was called.
    Requested,
    /// The relay refused the token (`AUTH_ERROR`).
    AuthRejected(String),
    /// [`BackoffConfig::max_attempts`] consecutive attempts failed.
    GaveUp,
}

/// What the driver feeds a [`TunnelClient`](super::TunnelClient).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientInput {
    /// The WebSocket asked for by [`ClientOutput::Connect`] is open.
    Connected,
    /// The WebSocket closed, or the dial failed.
    Disconnected {
        /// Why, for logs.
        reason: String,
    },
    /// A frame arrived.
    Frame(WsFrame),
    /// The local response's status and headers.
    ResponseHead {
        /// The request.
        request: LocalRequest,
        /// HTTP status.
        status: u16,
        /// Response headers.
        headers: Headers,
    },
    /// Bytes of the local response's body (only as far as [`ClientOutput::ResponseCredit`]
    /// allowed; one chunk may overshoot).
    ResponseChunk {
        /// The request.
        request: LocalRequest,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The local response's body is complete.
    ResponseEnd {
        /// The request.
        request: LocalRequest,
    },
    /// The local handler took `bytes` of the request body handed to it.
    RequestBodyConsumed {
        /// The request.
        request: LocalRequest,
        /// How many bytes.
        bytes: u64,
    },
    /// The local request failed (the handler errored or its response body broke off).
    LocalFailed {
        /// The request.
        request: LocalRequest,
        /// Why, for logs (sent to the relay).
        reason: String,
    },
}

/// What a [`TunnelClient`](super::TunnelClient) asks its driver to do, or tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientOutput {
    /// Dial the relay (`wss://…`) now and answer with `Connected` or `Disconnected`.
    Connect {
        /// Consecutive failures before this try.
        attempt: u32,
    },
    /// Write this frame to the WebSocket.
    Send(WsFrame),
    /// Close the WebSocket (or abandon the dial) with this code; no `Disconnected` is needed
    /// afterwards (one is ignored).
    Close {
        /// WebSocket close code ([`close_code`](crate::tunnel::close_code)).
        code: u16,
        /// Close reason.
        reason: String,
    },
    /// Run a request against the executor's local AWCP router.
    StartLocalRequest {
        /// Its handle, named by every later input and output about it.
        request: LocalRequest,
        /// HTTP method.
        method: String,
        /// Path relative to the executor's `/awcp` root, query included (`/`,
        /// `/tasks/<id>/events`, …).
        path: String,
        /// Request headers (hop-by-hop ones removed by the relay).
        headers: Headers,
        /// Whether a body follows (`RequestBodyChunk`s, then `RequestBodyEnd`).
        body: bool,
    },
    /// Bytes of the request body, for the local handler.
    RequestBodyChunk {
        /// The request.
        request: LocalRequest,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The request body is complete.
    RequestBodyEnd {
        /// The request.
        request: LocalRequest,
    },
    /// Abandon the local request (the relay reset it, or the connection is gone).
    CancelLocalRequest {
        /// The request.
        request: LocalRequest,
    },
    /// The driver may feed `bytes` more of the local response body.
    ResponseCredit {
        /// The request.
        request: LocalRequest,
        /// How many more bytes.
        bytes: u64,
    },
    /// Something the application may want to know.
    Event(ClientEvent),
}

/// Notable things that happened to a [`TunnelClient`](super::TunnelClient).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientEvent {
    /// Authenticated: delegators reach this executor at `public_url` (the executor's
    /// advertised URL, e.g. in its agent card and archive URLs).
    Ready {
        /// The public AWCP URL (ends in `/awcp`).
        public_url: String,
        /// Whether the extension was agreed.
        extension: bool,
    },
    /// The connection was lost or given up; its requests were cancelled.
    Disconnected {
        /// Why.
        reason: String,
    },
    /// The next dial is scheduled.
    Reconnecting {
        /// Consecutive failures so far.
        attempt: u32,
        /// When.
        at: Timestamp,
    },
    /// The relay refused the token: the client stopped.
    AuthFailed {
        /// The relay's reason.
        reason: String,
    },
    /// Too many consecutive failures: the client stopped.
    GaveUp {
        /// How many.
        attempts: u32,
    },
    /// A frame could not be read; it was dropped.
    MalformedFrame(FrameError),
    /// The relay broke a rule (the frame was dropped, or its stream reset).
    ProtocolViolation {
        /// Which rule.
        reason: &'static str,
    },
}
