//! # awcp-tokio: the tokio driver
//!
//! A thin layer over [`awcp_driver`] and [`agent_rt`]: [`TokioRuntime`] (agent-rt's tokio
//! runtime) runs the driver, [`executor_router`] gives an axum `Router` to mount in your own
//! app, and [`serve_executor`], [`serve_archives`] and [`serve_daemon`] run standalone servers (agent-rt's
//! server loop: TLS, timeouts, connection cap; see [`agent_rt::server`]).
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use std::sync::Arc;
//! use awcp_tokio::{awcp_driver::{ExecutorHandle, ExecutorOptions}, TokioRuntime};
//! let opts = ExecutorOptions::new(
//!     awcp_proto::ExecutorConfig::default(),
//!     Arc::new(awcp_transports::ArchiveExecutor::default()),
//!     Arc::new(awcp_transports::DemoRunner),
//! );
//! let executor = ExecutorHandle::start(TokioRuntime, opts);
//! let app = axum::Router::new().merge(awcp_tokio::executor_router(executor));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! axum::serve(listener, app).await
//! # }
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::future::Future;
use std::io;
use std::net::SocketAddr;

pub use agent_rt::tokio::shutdown_signal;
pub use agent_rt::{ServerOptions, TokioRuntime};
pub use awcp_driver;
use awcp_driver::delegator::daemon::DaemonApi;
use awcp_driver::{DelegatorHandle, ExecutorHandle};

/// An axum router serving the executor's endpoints (`/awcp…` and `/.well-known/agent*.json`)
/// with no body limit of axum's own (the executor enforces its admission limit).
pub fn executor_router(executor: ExecutorHandle) -> axum::Router {
    axum::Router::new()
        .fallback(move |req: axum::extract::Request| {
            let ex = executor.clone();
            async move { ex.handle_http(req).await.map(axum::body::Body::new) }
        })
        .layer(axum::extract::DefaultBodyLimit::disable())
}

/// An axum router (any `Router`) as an [`agent_rt::Handler`] for agent-rt's server.
pub fn router_handler(router: axum::Router) -> agent_rt::Handler {
    agent_rt::Handler::new(move |req: http::Request<agent_rt::body::RequestBody>| {
        let router = router.clone();
        async move {
            use tower::ServiceExt;
            match router.oneshot(req.map(axum::body::Body::new)).await {
                Ok(resp) => resp,
                Err(never) => match never {},
            }
        }
    })
}

/// Serves `router` on `listener` with the default limits until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_with(listener, router, ServerOptions::default(), shutdown).await
}

/// Serves `router` on `listener` with `opts` (TLS, limits) until `shutdown` resolves.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    opts: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    agent_rt::server::serve_on(
        TokioRuntime,
        listener,
        router_handler(router),
        opts,
        shutdown,
    )
    .await
}

/// Binds `addr` and serves the executor until `shutdown`. Snapshot URLs follow the origin
/// each delegator used unless a public URL is set ([`ExecutorHandle::set_public_url`]).
pub async fn serve_executor(
    addr: SocketAddr,
    executor: ExecutorHandle,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    serve(listener, executor_router(executor), shutdown).await
}

/// A router serving a delegator's one-time archive URLs (`/archives/{token}`) and nothing
/// else ([`DelegatorHandle::handle_archive_http`]).
pub fn archive_router(delegator: DelegatorHandle) -> axum::Router {
    axum::Router::new().fallback(move |req: axum::extract::Request| {
        let answer = delegator.handle_archive_http(req);
        async move { answer.await.map(axum::body::Body::new) }
    })
}

/// A router serving the delegator daemon API behind its access checks
/// ([`DaemonApi::handle_http`]).
pub fn daemon_router(api: DaemonApi) -> axum::Router {
    axum::Router::new()
        .fallback(move |req: axum::extract::Request| {
            let api = api.clone();
            async move { api.handle_http(req).await.map(axum::body::Body::new) }
        })
        .layer(axum::extract::DefaultBodyLimit::max(16 * 1024 * 1024))
}

/// Binds `addr` and serves the delegator's archive URLs until `shutdown`. Archive URLs are
/// only handed out if `DelegatorOptions::archive_base_url` points here.
pub async fn serve_archives(
    addr: SocketAddr,
    delegator: DelegatorHandle,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    serve(listener, archive_router(delegator), shutdown).await
}

/// Serves the daemon API on `listener` until `shutdown`.
pub async fn serve_daemon(
    listener: tokio::net::TcpListener,
    api: DaemonApi,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve(listener, daemon_router(api), shutdown).await
}
