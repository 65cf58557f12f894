//! [`Driver`]: what a runtime offers beyond [`Runtime`] so a whole program (the `awcp-executor`
//! and `awcp` binaries, the conformance suite) can be written once and run on either runtime.
//! Every [`agent_rt::Host`] (tokio, smol) is a `Driver`: the servers are agent-rt's one server
//! loop with the executor's handler, a delegator's archive handler or the daemon API.

use std::future::Future;
use std::io;

use agent_rt::server::ServerOptions;

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

    /// Resolves on SIGINT or SIGTERM (never, where the platform has neither).
    fn shutdown_signal() -> BoxFuture<()>;

    /// Serves the executor's endpoints on `listener` with `opts` (TLS, limits) until
    /// `shutdown` resolves, then finishes the requests in flight. Without a public URL
    /// ([`ExecutorHandle::set_public_url`]) snapshot URLs follow the origin each delegator
    /// used. A connection cap below [`ExecutorHandle::connections_needed`] is raised to it,
    /// so admitted delegations cannot lock each other out.
    fn serve_executor_with(
        listener: std::net::TcpListener,
        executor: ExecutorHandle,
        mut opts: ServerOptions,
        shutdown: BoxFuture<()>,
    ) -> BoxFuture<io::Result<()>> {
        let needed = executor.connections_needed();
        if opts.max_connections < needed {
            tracing::info!(
                from = opts.max_connections,
                to = needed,
                "connection cap raised to fit the executor's concurrency limit"
            );
            opts.max_connections = needed;
        }
        serve::<Self>(listener, executor.http_handler(), opts, shutdown)
    }

    /// Serves a delegator's one-time archive URLs, and nothing else, on `listener` with `opts`
    /// until `shutdown` resolves: where executors fetch URL-mode workspaces.
    fn serve_archives_with(
        listener: std::net::TcpListener,
        delegator: DelegatorHandle,
        opts: ServerOptions,
        shutdown: BoxFuture<()>,
    ) -> BoxFuture<io::Result<()>> {
        serve::<Self>(listener, delegator.archive_handler(), opts, shutdown)
    }

    /// Serves the delegator daemon API (behind its access checks) on `listener` with `opts`
    /// until `shutdown` resolves. Never the same listener as the archive URLs.
    fn serve_daemon_with(
        listener: std::net::TcpListener,
        api: DaemonApi,
        opts: ServerOptions,
        shutdown: BoxFuture<()>,
    ) -> BoxFuture<io::Result<()>> {
        serve::<Self>(listener, api.http_handler(), opts, shutdown)
    }

    /// [`Driver::serve_executor_with`] in clear text with the default limits.
    fn serve_executor_on(
        listener: std::net::TcpListener,
        executor: ExecutorHandle,
        shutdown: BoxFuture<()>,
    ) -> BoxFuture<io::Result<()>> {
        Self::serve_executor_with(listener, executor, ServerOptions::default(), shutdown)
    }

    /// [`Driver::serve_archives_with`] in clear text with the default limits.
    fn serve_archives_on(
        listener: std::net::TcpListener,
        delegator: DelegatorHandle,
        shutdown: BoxFuture<()>,
    ) -> BoxFuture<io::Result<()>> {
        Self::serve_archives_with(listener, delegator, ServerOptions::default(), shutdown)
    }

    /// [`Driver::serve_daemon_with`] in clear text with the default limits.
    fn serve_daemon_on(
        listener: std::net::TcpListener,
        api: DaemonApi,
        shutdown: BoxFuture<()>,
    ) -> BoxFuture<io::Result<()>> {
        Self::serve_daemon_with(listener, api, ServerOptions::default(), shutdown)
    }

    /// Serves the executor's endpoints on `listener` in the background for the rest of the
    /// program (a server error is logged). Call inside [`Driver::block_on`].
    fn spawn_executor_server(&self, listener: std::net::TcpListener, executor: ExecutorHandle) {
        let server = Self::serve_executor_on(listener, executor, Box::pin(std::future::pending()));
        spawn_server(self, "executor", server);
    }

    /// Serves a delegator's archive URLs on `listener` in the background for the rest of the
    /// program (a server error is logged). Call inside [`Driver::block_on`].
    fn spawn_archive_server(&self, listener: std::net::TcpListener, delegator: DelegatorHandle) {
        self.spawn_archive_server_with(listener, delegator, ServerOptions::default());
    }

    /// [`Driver::spawn_archive_server`] with TLS and limits.
    fn spawn_archive_server_with(
        &self,
        listener: std::net::TcpListener,
        delegator: DelegatorHandle,
        opts: ServerOptions,
    ) {
        let server =
            Self::serve_archives_with(listener, delegator, opts, Box::pin(std::future::pending()));
        spawn_server(self, "archive", server);
    }

    /// Serves the daemon API on `listener` in the background for the rest of the program (a
    /// server error is logged). Call inside [`Driver::block_on`].
    fn spawn_daemon_server_with(
        &self,
        listener: std::net::TcpListener,
        api: DaemonApi,
        opts: ServerOptions,
    ) {
        let server = Self::serve_daemon_with(listener, api, opts, Box::pin(std::future::pending()));
        spawn_server(self, "daemon", server);
    }
}

impl<T: agent_rt::Host> Driver for T {
    const NAME: &'static str = <T as agent_rt::Host>::NAME;

    fn block_on<F: Future>(main: F) -> F::Output {
        <T as agent_rt::Host>::block_on(main)
    }

    fn shutdown_signal() -> BoxFuture<()> {
        <T as agent_rt::Host>::shutdown_signal()
    }
}

/// agent-rt's server loop for `handler` on runtime `R`.
fn serve<R: Runtime + Default>(
    listener: std::net::TcpListener,
    handler: agent_rt::Handler,
    opts: ServerOptions,
    shutdown: BoxFuture<()>,
) -> BoxFuture<io::Result<()>> {
    Box::pin(agent_rt::serve(
        R::default(),
        listener,
        handler,
        opts,
        shutdown,
    ))
}

fn spawn_server<R: Runtime>(rt: &R, what: &'static str, server: BoxFuture<io::Result<()>>) {
    rt.spawn(Box::pin(async move {
        if let Err(e) = server.await {
            tracing::warn!(error = %e, "{what} server stopped");
        }
    }));
}
