//! # awcp-smol: the smol driver (and the async-std driver)
//!
//! A thin layer over [`awcp_driver`] and [`agent_rt`], like awcp-tokio: [`SmolRuntime`]
//! (agent-rt's smol runtime) runs the driver, [`executor_service`], [`archive_service`] and
//! [`daemon_service`] are [`Handler`]s for agent-rt's server loop, and [`serve_executor`],
//! [`serve_archives`] and [`serve_daemon`] run standalone servers on smol's I/O. async-std runs on smol's reactor, so async-std
//! programs use this crate as is (tested in `tests/tests/async_std.rs`).
//!
//! ```no_run
//! use std::sync::Arc;
//! use awcp_smol::{awcp_driver::{ExecutorHandle, ExecutorOptions}, SmolRuntime};
//!
//! smol::block_on(async {
//!     let executor = ExecutorHandle::start(SmolRuntime, ExecutorOptions::new(
//!         awcp_proto::ExecutorConfig::default(),
//!         Arc::new(awcp_transports::ArchiveExecutor::default()),
//!         Arc::new(awcp_transports::DemoRunner),
//!     ));
//!     let addr = "127.0.0.1:10200".parse().unwrap();
//!     awcp_smol::serve_executor(addr, executor, awcp_smol::shutdown_signal()).await
//! })
//! # .unwrap();
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::future::Future;
use std::io;
use std::net::SocketAddr;

pub use agent_rt::smol::shutdown_signal;
pub use agent_rt::{Handler, ServerOptions, SmolRuntime};
pub use awcp_driver;
use awcp_driver::delegator::daemon::DaemonApi;
use awcp_driver::{DelegatorHandle, ExecutorHandle};
use smol::net::TcpListener;

/// The executor's endpoints (`/awcp…` and `/.well-known/agent*.json`) as a [`Handler`].
pub fn executor_service(executor: ExecutorHandle) -> Handler {
    executor.http_handler()
}

/// A delegator's one-time archive URLs (`/archives/{token}`), and nothing else, as a
/// [`Handler`] ([`DelegatorHandle::handle_archive_http`]).
pub fn archive_service(delegator: DelegatorHandle) -> Handler {
    delegator.archive_handler()
}

/// The delegator daemon API behind its access checks as a [`Handler`]
/// ([`DaemonApi::handle_http`]).
pub fn daemon_service(api: DaemonApi) -> Handler {
    api.http_handler()
}

/// Serves `handler` on `listener` with the default limits until `shutdown` resolves, then
/// stops accepting, closes idle connections, lets the others finish their request in flight,
/// and returns.
pub async fn serve(
    listener: TcpListener,
    handler: Handler,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_with(listener, handler, ServerOptions::default(), shutdown).await
}

/// [`serve`] with `opts` (TLS, limits).
pub async fn serve_with(
    listener: TcpListener,
    handler: Handler,
    opts: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    agent_rt::server::serve_on(SmolRuntime, listener, handler, opts, shutdown).await
}

/// Binds `addr` and serves the executor until `shutdown`. Snapshot URLs follow the origin
/// each delegator used unless a public URL is set ([`ExecutorHandle::set_public_url`]).
pub async fn serve_executor(
    addr: SocketAddr,
    executor: ExecutorHandle,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    serve(listener, executor_service(executor), shutdown).await
}

/// Binds `addr` and serves the delegator's archive URLs until `shutdown`. Archive URLs are
/// only handed out if `DelegatorOptions::archive_base_url` points here.
pub async fn serve_archives(
    addr: SocketAddr,
    delegator: DelegatorHandle,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    serve(listener, archive_service(delegator), shutdown).await
}

/// Serves the daemon API on `listener` until `shutdown`.
pub async fn serve_daemon(
    listener: TcpListener,
    api: DaemonApi,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve(listener, daemon_service(api), shutdown).await
}
