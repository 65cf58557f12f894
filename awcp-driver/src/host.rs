//! [`Driver`]: what a thin runtime driver (awcp-tokio, awcp-smol) offers beyond [`Runtime`], so
//! a whole program (the `awcp-executor` and `awcp` binaries, the conformance suite) can be
//! written once and run on either runtime.

use std::future::Future;
use std::io;

use crate::delegator::daemon::DaemonApi;
use crate::runtime::{BoxFuture, Runtime};
use crate::{DelegatorHandle, ExecutorHandle};

/// A runtime that can run a program and serve AWCP on a listening socket.
///
/// Listeners are plain [`std::net::TcpListener`]s, bound by the caller, so the caller knows
/// the port before anything is served. The futures returned by the `serve_*` methods must be
/// polled inside [`Driver::block_on`] (or a runtime of the same kind).
pub trait Driver: Runtime + Default {
    /// The runtime's name as a `--runtime` flag spells it (`"tokio"`, `"smol"`).
    const NAME: &'static str;

    /// Runs `main` to completion on a fresh runtime. Work still running in the background
    /// when `main` returns (or panics) is abandoned, not waited for: `main` is expected to
    /// shut down what it started (e.g. [`ExecutorHandle::shutdown`]).
    fn block_on<F: Future>(main: F) -> F::Output;

    /// Serves the executor's endpoints on `listener` until `shutdown` resolves, then finishes
    /// the requests in flight. The executor's public URL is the caller's to set
    /// ([`ExecutorHandle::set_public_url`]).
    fn serve_executor_on(
        listener: std::net::TcpListener,
        executor: ExecutorHandle,
        shutdown: BoxFuture<()>,
    ) -> BoxFuture<io::Result<()>>;

    /// Serves a delegator's one-time archive URLs (and nothing else) on `listener` until
    /// `shutdown` resolves: where executors fetch URL-mode workspaces.
    fn serve_archives_on(
        listener: std::net::TcpListener,
        delegator: DelegatorHandle,
        shutdown: BoxFuture<()>,
    ) -> BoxFuture<io::Result<()>>;

    /// Serves the delegator daemon API (behind its access checks) on `listener` until
    /// `shutdown` resolves. Never the same listener as the archive URLs.
    fn serve_daemon_on(
        listener: std::net::TcpListener,
        api: DaemonApi,
        shutdown: BoxFuture<()>,
    ) -> BoxFuture<io::Result<()>>;

    /// Resolves on SIGINT or SIGTERM (never, where the platform has neither).
    fn shutdown_signal() -> BoxFuture<()>;

    /// Serves the executor's endpoints on `listener` in the background for the rest of the
    /// program (a server error is logged). Call inside [`Driver::block_on`].
    fn spawn_executor_server(&self, listener: std::net::TcpListener, executor: ExecutorHandle) {
        let server = Self::serve_executor_on(listener, executor, Box::pin(std::future::pending()));
        spawn_server(self, "executor", server);
    }

    /// Serves a delegator's archive URLs on `listener` in the background for the rest of the
    /// program (a server error is logged). Call inside [`Driver::block_on`].
    fn spawn_archive_server(&self, listener: std::net::TcpListener, delegator: DelegatorHandle) {
        let server = Self::serve_archives_on(listener, delegator, Box::pin(std::future::pending()));
        spawn_server(self, "archive", server);
    }

    /// Serves the daemon API on `listener` in the background for the rest of the program (a
    /// server error is logged). Call inside [`Driver::block_on`].
    fn spawn_daemon_server(&self, listener: std::net::TcpListener, api: DaemonApi) {
        let server = Self::serve_daemon_on(listener, api, Box::pin(std::future::pending()));
        spawn_server(self, "daemon", server);
    }
}

fn spawn_server<R: Runtime>(rt: &R, what: &'static str, server: BoxFuture<io::Result<()>>) {
    rt.spawn(Box::pin(async move {
        if let Err(e) = server.await {
            tracing::warn!(error = %e, "{what} server stopped");
        }
    }));
}
