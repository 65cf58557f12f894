//! # agent-rt: the protocol-neutral runtime layer
//!
//! What an agent-protocol driver (AWCP, AIP) needs from the outside world, written once:
//!
//! - [`Runtime`]: a small trait over an async runtime (spawn, blocking pool, sleep, TCP
//!   connect/listen/accept, wall clock), implemented by [`TokioRuntime`] (feature `tokio`)
//!   and [`SmolRuntime`] (feature `smol`, also for async-std programs); [`Host`] adds what a
//!   whole program needs (`block_on`, a shutdown signal);
//! - [`client`]: an HTTP/1.1 client with `https` through rustls ([`tls::ClientTls`]: public
//!   roots, a private CA, a client certificate);
//! - [`server`]: one hyper server loop for every runtime with TLS and mTLS
//!   ([`tls::ServerTls`]) and the limits a server on a network needs (header-read, idle and
//!   body-read timeouts, a connection cap);
//! - [`clock`]: the protocol clock drivers hand their engines (wall time that never runs
//!   backwards or stalls when the wall clock is set back);
//! - [`body`]: body types and helpers; [`origin`]: which URL a client used to reach us.
//!
//! Nothing here knows a protocol: protocol crates build their handlers on [`server::Handler`]
//! and their clients on [`client::HttpClient`].
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod body;
pub mod client;
pub mod clock;
pub mod io;
pub mod origin;
pub mod runtime;
mod seed;
pub mod server;
#[cfg(feature = "test-util")]
pub mod test_util;
pub mod tls;

#[cfg(feature = "smol")]
mod smol_rt;
#[cfg(feature = "tokio")]
mod tokio_rt;

pub use client::{ClientBody, HttpClient, NetError};
pub use runtime::{blocking, BoxFuture, Host, Runtime};
pub use seed::seed_or_random;
pub use server::{serve, ConnInfo, Handler, ServerOptions};
pub use tls::{ClientTls, ClientTlsOptions, ServerTls, ServerTlsOptions, TlsError};

#[cfg(feature = "smol")]
pub use smol_rt::SmolRuntime;
#[cfg(feature = "tokio")]
pub use tokio_rt::TokioRuntime;

/// smol-specific helpers.
#[cfg(feature = "smol")]
pub mod smol {
    pub use crate::smol_rt::shutdown_signal;
}

/// tokio-specific helpers.
#[cfg(feature = "tokio")]
pub mod tokio {
    pub use crate::tokio_rt::shutdown_signal;
}

// Keep the re-export of the `rustls` version in use, so callers can build their own configs.
pub use rustls;
