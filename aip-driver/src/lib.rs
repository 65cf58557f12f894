//! # aip-driver: AIP direct mode on a real network
//!
//! The engines in [`aip_proto`] decide; this crate moves their bytes, on any runtime that
//! implements [`agent_rt::Runtime`] (tokio and smol, through the features of the same names):
//!
//! - [`partner::PartnerHandle`]: a partner server. The engine runs in one task; its HTTP
//!   surface ([`partner::PartnerHandle::http_handler`]) serves `rpc`, `stream` (SSE) and
//!   `notification/*` under a base path, standalone ([`serve_partner`], TLS and mTLS through
//!   [`agent_rt::ServerOptions`]) or mounted in an axum app (`tokio::partner_router`, feature `tokio`). The
//!   application learns of tasks from [`partner::PartnerEvents`] and moves them with the
//!   handle's methods (`start_working`, `progress`, `request_input`, `submit`, `fail`, …); it
//!   never blocks the engine.
//! - [`leader::LeaderHandle`]: a leader client. Commands (`start`, `continue_task`,
//!   `complete`, `cancel`, `get`) resolve with the partner's answer; streams, re-streams,
//!   polling, retries and deadlines run on their own and surface as
//!   [`leader::LeaderEvents`]; the notification receiver is
//!   [`leader::LeaderHandle::notification_handler`].
//!
//! Runtime glue (client, server loop, TLS) is [`agent_rt`]'s, shared with AWCP; nothing here
//! makes a protocol decision.
//!
//! ```no_run
//! # #[cfg(feature = "tokio")]
//! # async fn demo() -> std::io::Result<()> {
//! use aip_driver::partner::{PartnerHandle, PartnerOptions};
//! use aip_driver::aip_proto::{partner::PartnerEvent, Product};
//! use futures::StreamExt;
//!
//! let (partner, mut events) = PartnerHandle::spawn(aip_driver::tokio::TokioRuntime, PartnerOptions::default());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let app = axum::Router::new().merge(aip_driver::tokio::partner_router(partner.clone()));
//! tokio::spawn(async move { axum::serve(listener, app).await });
//! while let Some(ev) = events.next().await {
//!     if let PartnerEvent::TaskStarted { task_id, .. } = ev {
//!         partner.start_working(&task_id).await.ok();
//!         let answer = Product::text("answer", "42");
//!         partner.submit(&task_id, vec![answer], vec![]).await.ok();
//!     }
//! }
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(feature = "amqp")]
pub mod group;
pub mod leader;
pub mod partner;
#[cfg(feature = "smol")]
pub mod smol;
#[cfg(feature = "tokio")]
pub mod tokio;

use std::future::Future;
use std::io;

pub use agent_rt;
pub use agent_rt::seed_or_random;
pub use aip_proto;
use aip_proto::Timestamp;

pub use leader::{LeaderError, LeaderEvents, LeaderHandle, LeaderOptions};
pub use partner::{PartnerError, PartnerEvents, PartnerHandle, PartnerOptions};

/// The protocol clock as a protocol timestamp (microseconds, UTC):
/// [`agent_rt::clock::protocol_time`], the wall clock followed forward but never backward, so
/// a clock set back stalls no timer.
pub fn now<R: agent_rt::Runtime>(rt: &R) -> Timestamp {
    let us = agent_rt::clock::protocol_time(rt)
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0);
    Timestamp::from_unix_micros(us)
}

/// What an engine task wakes up for (turned into the drive loop's
/// [`Wake`](aip_proto::drive::Wake) by each loop).
enum Woke<C, I> {
    /// A command from a handle.
    Cmd(C),
    /// An input from the task's own I/O (an answer, a delivery outcome).
    Internal(I),
    /// The engine's timer is due.
    Timer,
    /// Every handle is gone.
    Stop,
}

/// Step 4 of the drive loop ([`aip_proto::drive`]): waits for the next thing an engine task
/// handles: its own I/O first, then commands, or the engine's next deadline (`None`: no
/// timer).
async fn next_wake<R: agent_rt::Runtime, C, I>(
    rt: &R,
    deadline: Option<Timestamp>,
    cmds: &mut futures::channel::mpsc::UnboundedReceiver<C>,
    internal: &mut futures::channel::mpsc::UnboundedReceiver<I>,
) -> Woke<C, I> {
    use futures::{FutureExt, StreamExt};
    let mut sleep = match deadline {
        Some(at) => rt.sleep(at.saturating_duration_since(now(rt))),
        None => rt.sleep(std::time::Duration::from_secs(3600)),
    }
    .fuse();
    futures::select_biased! {
        i = internal.next() => i.map_or(Woke::Stop, Woke::Internal),
        c = cmds.next() => c.map_or(Woke::Stop, Woke::Cmd),
        _ = sleep => Woke::Timer,
    }
}

/// Serves a partner on a bound listener with `opts` (TLS, mTLS, limits) until `shutdown`
/// resolves, on runtime `rt` (agent-rt's server loop).
pub fn serve_partner<R: agent_rt::Runtime>(
    rt: R,
    listener: std::net::TcpListener,
    partner: &PartnerHandle,
    opts: agent_rt::ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = io::Result<()>> + Send + 'static {
    agent_rt::serve(rt, listener, partner.http_handler(), opts, shutdown)
}

/// Serves a leader's notification receiver on a bound listener (every path takes
/// notification POSTs) until `shutdown` resolves. Point
/// [`aip_proto::leader::LeaderConfig::notification_url`] (or the task's own URL) here.
pub fn serve_notifications<R: agent_rt::Runtime>(
    rt: R,
    listener: std::net::TcpListener,
    leader: &LeaderHandle,
    opts: agent_rt::ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = io::Result<()>> + Send + 'static {
    agent_rt::serve(rt, listener, leader.notification_handler(), opts, shutdown)
}
