//! # awcp-tokio: the tokio driver
//!
//! A thin layer over [`awcp_driver`]: [`TokioRuntime`] implements the driver's runtime trait
//! with tokio, [`executor_router`] gives an axum `Router` to mount in your own app, and
//! [`serve_executor`], [`serve_archives`] and [`serve_daemon`] run standalone servers.
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
use std::time::Duration;

pub use awcp_driver;
use awcp_driver::delegator::daemon::DaemonApi;
use awcp_driver::runtime::BoxFuture;
use awcp_driver::{DelegatorHandle, Driver, ExecutorHandle, Runtime};
use hyper_util::rt::TokioIo;

/// The tokio implementation of [`Runtime`]. Use it inside a tokio runtime.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioRuntime;

impl Runtime for TokioRuntime {
    type Io = TokioIo<tokio::net::TcpStream>;

    fn spawn(&self, fut: BoxFuture<()>) {
        tokio::spawn(fut);
    }

    fn spawn_blocking<T: Send + 'static>(
        &self,
        f: Box<dyn FnOnce() -> T + Send + 'static>,
    ) -> BoxFuture<T> {
        let h = tokio::task::spawn_blocking(f);
        Box::pin(async move {
            match h.await {
                Ok(v) => v,
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        })
    }

    fn sleep(&self, d: Duration) -> BoxFuture<()> {
        Box::pin(tokio::time::sleep(d))
    }

    fn connect(&self, host: String, port: u16) -> BoxFuture<io::Result<Self::Io>> {
        Box::pin(async move {
            let s = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
            let _ = s.set_nodelay(true);
            Ok(TokioIo::new(s))
        })
    }
}

impl Driver for TokioRuntime {
    const NAME: &'static str = "tokio";

    /// Runs `main` on a new multi-threaded runtime (one worker per core). A panic in `main`
    /// propagates; blocking tasks still running are not waited for.
    fn block_on<F: Future>(main: F) -> F::Output {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("the tokio runtime starts");
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.block_on(main)));
        // Dropping the runtime would wait for every blocking task (a task runner that never
        // finishes would hang the program, or a failed test).
        rt.shutdown_background();
        out.unwrap_or_else(|p| std::panic::resume_unwind(p))
    }

    fn serve_executor_on(
        listener: std::net::TcpListener,
        executor: ExecutorHandle,
        shutdown: BoxFuture<()>,
    ) -> BoxFuture<io::Result<()>> {
        Box::pin(
            async move { serve(from_std(listener)?, executor_router(executor), shutdown).await },
        )
    }

    fn serve_archives_on(
        listener: std::net::TcpListener,
        delegator: DelegatorHandle,
        shutdown: BoxFuture<()>,
    ) -> BoxFuture<io::Result<()>> {
        Box::pin(
            async move { serve(from_std(listener)?, archive_router(delegator), shutdown).await },
        )
    }

    fn serve_daemon_on(
        listener: std::net::TcpListener,
        api: DaemonApi,
        shutdown: BoxFuture<()>,
    ) -> BoxFuture<io::Result<()>> {
        Box::pin(async move { serve(from_std(listener)?, daemon_router(api), shutdown).await })
    }

    fn shutdown_signal() -> BoxFuture<()> {
        Box::pin(shutdown_signal())
    }
}

fn from_std(listener: std::net::TcpListener) -> io::Result<tokio::net::TcpListener> {
    listener.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(listener)
}

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

/// Serves `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Binds `addr`, tells the executor its public URL, and serves it until `shutdown`.
pub async fn serve_executor(
    addr: SocketAddr,
    executor: ExecutorHandle,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    executor.set_public_url(format!("http://{local}"));
    serve(listener, executor_router(executor), shutdown).await
}

/// A router serving a delegator's one-time archive URLs (`/archives/{token}`) and nothing
/// else ([`DelegatorHandle::handle_archive_http`]).
pub fn archive_router(delegator: DelegatorHandle) -> axum::Router {
    axum::Router::new().fallback(move |req: axum::extract::Request| {
        let d = delegator.clone();
        async move { d.handle_archive_http(&req).map(axum::body::Body::new) }
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

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
