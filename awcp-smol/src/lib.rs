//! # awcp-smol: the smol driver (and the async-std driver)
//!
//! A thin layer over [`awcp_driver`], like awcp-tokio: [`SmolRuntime`] implements the driver's
//! runtime trait with smol, [`executor_service`], [`archive_service`] and [`daemon_service`]
//! are hyper services to embed in your own hyper server, and [`serve_executor`],
//! [`serve_archives`] and [`serve_daemon`] run standalone servers on smol's I/O. async-std runs on smol's reactor, so async-std programs use this
//! crate as is (tested in `tests/tests/async_std.rs`).
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

// The README's embedding examples (tokio, smol, async-std) are compiled as doc-tests here.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

pub use awcp_driver;
use awcp_driver::delegator::daemon::DaemonApi;
use awcp_driver::net::ResponseBody;
use awcp_driver::runtime::BoxFuture;
use awcp_driver::{DelegatorHandle, Driver, ExecutorHandle, Runtime};
use hyper::body::Incoming;
use hyper::service::service_fn;
use smol::future::FutureExt as _;
use smol::net::{TcpListener, TcpStream};
use smol_hyper::rt::FuturesIo;

/// The smol implementation of [`Runtime`]: tasks on smol's global executor, blocking work on
/// the `blocking` pool, timers and sockets on `async-io`. Works under async-std too.
#[derive(Clone, Copy, Debug, Default)]
pub struct SmolRuntime;

impl Runtime for SmolRuntime {
    type Io = FuturesIo<TcpStream>;

    fn spawn(&self, fut: BoxFuture<()>) {
        smol::spawn(fut).detach();
    }

    fn spawn_blocking<T: Send + 'static>(
        &self,
        f: Box<dyn FnOnce() -> T + Send + 'static>,
    ) -> BoxFuture<T> {
        Box::pin(smol::unblock(f))
    }

    fn sleep(&self, d: Duration) -> BoxFuture<()> {
        Box::pin(async move {
            smol::Timer::after(d).await;
        })
    }

    fn connect(&self, host: String, port: u16) -> BoxFuture<io::Result<Self::Io>> {
        Box::pin(async move {
            let s = TcpStream::connect((host.as_str(), port)).await?;
            let _ = s.set_nodelay(true);
            Ok(FuturesIo::new(s))
        })
    }
}

impl Driver for SmolRuntime {
    const NAME: &'static str = "smol";

    /// Runs `main` with [`smol::block_on`]; spawned tasks run on smol's global executor.
    fn block_on<F: Future>(main: F) -> F::Output {
        smol::block_on(main)
    }

    fn serve_executor_on(
        listener: std::net::TcpListener,
        executor: ExecutorHandle,
        shutdown: BoxFuture<()>,
    ) -> BoxFuture<io::Result<()>> {
        Box::pin(async move {
            serve(
                TcpListener::try_from(listener)?,
                executor_service(executor),
                shutdown,
            )
            .await
        })
    }

    fn serve_archives_on(
        listener: std::net::TcpListener,
        delegator: DelegatorHandle,
        shutdown: BoxFuture<()>,
    ) -> BoxFuture<io::Result<()>> {
        Box::pin(async move {
            serve(
                TcpListener::try_from(listener)?,
                archive_service(delegator),
                shutdown,
            )
            .await
        })
    }

    fn serve_daemon_on(
        listener: std::net::TcpListener,
        api: DaemonApi,
        shutdown: BoxFuture<()>,
    ) -> BoxFuture<io::Result<()>> {
        Box::pin(async move {
            serve(
                TcpListener::try_from(listener)?,
                daemon_service(api),
                shutdown,
            )
            .await
        })
    }

    fn shutdown_signal() -> BoxFuture<()> {
        Box::pin(shutdown_signal())
    }
}

/// A request handler: what [`serve`] runs for every request.
pub type Handler = std::sync::Arc<
    dyn Fn(http::Request<Incoming>) -> BoxFuture<http::Response<ResponseBody>> + Send + Sync,
>;

/// The executor's endpoints (`/awcp…` and `/.well-known/agent*.json`) as a [`Handler`].
pub fn executor_service(executor: ExecutorHandle) -> Handler {
    std::sync::Arc::new(move |req| {
        let ex = executor.clone();
        Box::pin(async move { ex.handle_http(req).await })
    })
}

/// A delegator's one-time archive URLs (`/archives/{token}`), and nothing else, as a
/// [`Handler`] ([`DelegatorHandle::handle_archive_http`]).
pub fn archive_service(delegator: DelegatorHandle) -> Handler {
    std::sync::Arc::new(move |req| {
        let r = delegator.handle_archive_http(&req);
        Box::pin(async move { r })
    })
}

/// The delegator daemon API behind its access checks as a [`Handler`]
/// ([`DaemonApi::handle_http`]).
pub fn daemon_service(api: DaemonApi) -> Handler {
    std::sync::Arc::new(move |req| {
        let api = api.clone();
        Box::pin(async move { api.handle_http(req).await })
    })
}

/// Serves one accepted connection with hyper's HTTP/1.1 server until it closes, or until
/// `stop` resolves, after which it finishes the request in flight and closes.
pub async fn serve_connection(
    stream: TcpStream,
    handler: Handler,
    stop: impl Future<Output = ()>,
) -> hyper::Result<()> {
    let _ = stream.set_nodelay(true);
    let svc = service_fn(move |req| {
        let h = handler.clone();
        async move { Ok::<_, Infallible>(h(req).await) }
    });
    let conn =
        hyper::server::conn::http1::Builder::new().serve_connection(FuturesIo::new(stream), svc);
    let mut conn = std::pin::pin!(conn);
    let stopped = async {
        stop.await;
        None
    };
    let serving = async { Some(conn.as_mut().await) };
    match serving.or(stopped).await {
        Some(r) => r,
        None => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    }
}

/// Serves `handler` on `listener` until `shutdown` resolves, then stops accepting, lets every
/// open connection finish its request in flight, and returns.
pub async fn serve(
    listener: TcpListener,
    handler: Handler,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    // Dropping `stop_tx` closes the channel: every connection sees `stop_rx.recv()` end.
    // Every connection holds a clone of `open_tx`; `open_rx.recv()` ends when all are gone.
    let (stop_tx, stop_rx) = smol::channel::bounded::<()>(1);
    let (open_tx, open_rx) = smol::channel::bounded::<()>(1);
    let mut shutdown = std::pin::pin!(async {
        shutdown.await;
        None
    });
    loop {
        let accepted = async { Some(listener.accept().await) }
            .or(shutdown.as_mut())
            .await;
        let (stream, peer) = match accepted {
            None => break,
            Some(Ok(a)) => a,
            Some(Err(e)) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                smol::Timer::after(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (handler, stop_rx, open_tx) = (handler.clone(), stop_rx.clone(), open_tx.clone());
        smol::spawn(async move {
            let stop = async move {
                let _ = stop_rx.recv().await;
            };
            if let Err(e) = serve_connection(stream, handler, stop).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(open_tx);
        })
        .detach();
    }
    drop((stop_tx, open_tx));
    let _ = open_rx.recv().await;
    Ok(())
}

/// Binds `addr`, tells the executor its public URL, and serves it until `shutdown`.
pub async fn serve_executor(
    addr: SocketAddr,
    executor: ExecutorHandle,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    executor.set_public_url(format!("http://{local}"));
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

/// Resolves on SIGINT or SIGTERM (on non-Unix platforms, never).
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use async_signal::{Signal, Signals};
        use smol::stream::StreamExt as _;
        match Signals::new([Signal::Int, Signal::Term]) {
            Ok(mut s) => {
                s.next().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    }
    #[cfg(not(unix))]
    std::future::pending::<()>().await
}
