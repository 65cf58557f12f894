//! The WebSocket tunnel: an executor behind NAT dials out to a relay, and the relay serves
//! the executor's AWCP endpoints at a stable public URL (`https://relay/e/<name>/awcp`) by
//! forwarding every request through the tunnel (WIRE.md §16 for the reference, §18 for this
//! implementation).
//!
//! Like the engines, everything here is sans-IO: no sockets, no clock, no randomness. Two
//! machines, one per side:
//!
//! * [`TunnelClient`] (the executor's side, one per tunnel): dials, authenticates, keeps the
//!   connection alive, reconnects with jittered exponential back-off, and turns tunnelled
//!   requests into local requests to the executor's own HTTP router
//!   ([`ClientOutput::StartLocalRequest`]) and their responses back into frames.
//! * [`Relay`] (the relay's side, one for all executors): authenticates connections against
//!   a [`Registry`] of hashed tokens, routes each public HTTP request to the connection of
//!   the executor it names, and streams bodies both ways with bounded memory.
//!
//! ## The protocol in one screen
//!
//! Each WebSocket text frame is one JSON object ([`Message`]); the executor speaks first with
//! `AUTH{token}`. The reference's message set (`AUTH`, `AUTH_OK`, `AUTH_ERROR`,
//! `HTTP_REQUEST`, `HTTP_RESPONSE`, `SSE_OPEN`, `SSE_EVENT`, `SSE_END`, `SSE_CLOSE`, `PING`)
//! carries whole JSON bodies and SSE events as text, for three routes and the event stream.
//!
//! Our extension, [`EXTENSION_V1`] (`"awcp-tunnel-v1"`), is offered in `AUTH.features` and
//! agreed in `AUTH_OK.features`; a client that does not offer it is a reference client, and
//! the relay speaks only the reference subset to it. Under the extension every request, of
//! any method and path under the executor's AWCP root, is a **stream** the relay opens:
//!
//! ```text
//! relay → executor   HTTP_REQUEST_HEAD{stream, method, path, headers, end}
//! relay → executor   [binary DATA frames: the request body]        (unless end)
//! executor → relay   HTTP_RESPONSE_HEAD{stream, status, headers, end}
//! executor → relay   [binary DATA frames: the response body]       (unless end)
//! either way         WINDOW{stream, increment}   more credit for the body sent the other way
//! either way         RESET{stream, reason?}      the stream is abandoned
//! either way         PING{id} / PONG{id}         keepalive
//! ```
//!
//! A body is sent only as far as the receiver granted ([`flow`](self#flow-control)), so a
//! slow delegator cannot make the relay buffer a workspace. An event stream is an ordinary
//! streamed response (`text/event-stream`), so resuming one after a reconnect is the
//! delegator re-issuing its GET with `Last-Event-ID`, a header like any other.
//!
//! ## Flow control
//!
//! Each side announces the window it grants every stream (`AUTH.window`, `AUTH_OK.window`,
//! default [`DEFAULT_WINDOW`]); a sender may have at most that many bytes unacknowledged, and
//! the receiver sends `WINDOW` once its consumer has taken half a window. Bodies travel in
//! binary frames of at most [`MAX_DATA_PAYLOAD`] bytes ([`codec`]'s layout).
//!
//! ## Driving a machine
//!
//! Both machines follow the engines' drive contract ([`crate::engine::drive`]): feed one input
//! with `handle(now, input)` (or `handle_timeout(now)` at the deadline), drain
//! `poll_output()` until `None`, executing each output, then sleep until `poll_timeout()` or
//! the next input. Both implement [`crate::engine::drive::Engine`].
//!
//! ```no_run
//! # use awcp_proto::tunnel::*;
//! # use awcp_proto::Timestamp;
//! # fn now() -> Timestamp { Timestamp::EPOCH }
//! let config = TunnelClientConfig::new("token from the relay's operator", 42);
//! let mut client = TunnelClient::new(config, now());
//! while let Some(out) = client.poll_output() {
//!     match out {
//!         ClientOutput::Connect { .. } => { /* dial wss://relay/tunnel, then feed Connected */ }
//!         ClientOutput::Send(_frame) => { /* write the frame */ }
//!         _ => { /* … */ }
//!     }
//! }
//! ```

pub mod client;
pub mod codec;
mod flow;
pub mod frames;
pub mod headers;
mod liveness;
pub mod registry;
pub mod relay;

pub use client::{
    ClientEvent, ClientInput, ClientOutput, ClientState, StopReason, TunnelClient,
    TunnelClientConfig,
};
pub use codec::{decode_frame, decode_text, DataFrame, FrameError, Incoming, WsFrame};
pub use frames::{
    Message, StreamNo, DEFAULT_WINDOW, EXTENSION_V1, MAX_DATA_PAYLOAD, MAX_WINDOW, MIN_WINDOW,
};
pub use headers::Headers;
pub use liveness::{BackoffConfig, KeepaliveConfig};
pub use registry::{ExecutorName, InvalidName, Registry, RegistryError};
pub use relay::{Relay, RelayConfig, RelayEvent, RelayInput, RelayOutput};

/// Driver-issued handle of one WebSocket connection accepted by a relay. The relay stores and
/// echoes it, never interprets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionId(pub u64);

/// The executor's handle of one tunnelled request, minted by [`TunnelClient`] (from 1,
/// never reused, across reconnects too: an input naming a request of an earlier connection is
/// recognised as stale).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LocalRequest(pub u64);

/// WebSocket close codes the machines use (RFC 6455 §7.4; 4000–4999 are for applications).
pub mod close_code {
    /// Normal closure (the executor stops).
    pub const NORMAL: u16 = 1000;
    /// Going away (the relay shuts down).
    pub const GOING_AWAY: u16 = 1001;
    /// Protocol error (a frame that breaks the handshake).
    pub const PROTOCOL: u16 = 1002;
    /// Policy violation: authentication failed.
    pub const AUTH_FAILED: u16 = 1008;
    /// A newer connection with the same token replaced this one.
    pub const REPLACED: u16 = 4001;
    /// Nothing heard for the keepalive's idle timeout.
    pub const IDLE: u16 = 4002;
    /// The handshake (connect and `AUTH`) took too long.
    pub const HANDSHAKE_TIMEOUT: u16 = 4003;
    /// The executor's registration was removed.
    pub const UNREGISTERED: u16 = 4004;
}

/// An input a machine refuses: a driver bug or a stale input (a request that ended while the
/// input was on its way). The machine's state is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TunnelUsageError {
    /// No open request with this handle (it ended, or never existed).
    #[error("unknown tunnelled request {0}")]
    UnknownRequest(u64),
    /// No connection with this handle.
    #[error("unknown tunnel connection {0}")]
    UnknownConnection(u64),
    /// The handle is in use already.
    #[error("handle {0} is in use already")]
    Duplicate(u64),
    /// A body chunk was fed with no allowance left: wait for the next credit output.
    #[error("body chunk for request {0} fed without credit")]
    NoCredit(u64),
    /// The input does not fit the machine's state.
    #[error("{0}")]
    InvalidState(&'static str),
}
