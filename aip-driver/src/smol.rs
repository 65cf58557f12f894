//! smol entry points (also for async-std programs, which run on smol's reactor): agent-rt's
//! [`SmolRuntime`] and servers on smol listeners.

use std::future::Future;
use std::io;

pub use agent_rt::smol::shutdown_signal;
pub use agent_rt::{ServerOptions, SmolRuntime};
use smol::net::TcpListener;

use crate::{LeaderHandle, PartnerHandle};

/// Serves the partner on `listener` with `opts` (TLS, mTLS, limits) until `shutdown`
/// resolves.
pub async fn serve_partner(
    listener: TcpListener,
    partner: &PartnerHandle,
    opts: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    agent_rt::server::serve_on(
        SmolRuntime,
        listener,
        partner.http_handler(),
        opts,
        shutdown,
    )
    .await
}

/// Serves the leader's notification receiver on `listener` until `shutdown` resolves.
pub async fn serve_notifications(
    listener: TcpListener,
    leader: &LeaderHandle,
    opts: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    agent_rt::server::serve_on(
        SmolRuntime,
        listener,
        leader.notification_handler(),
        opts,
        shutdown,
    )
    .await
}
