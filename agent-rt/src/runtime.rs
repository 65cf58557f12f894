//! The small runtime trait every driver implements: spawn, blocking pool, sleep, TCP connect,
//! listen and accept, and the wall clock. Everything else in this crate (client, server, TLS)
//! is written once against it.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A boxed, sendable future borrowing from its caller.
pub type BorrowedFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the protocol drivers need from an async runtime.
///
/// Streams are `futures-io` streams: TLS (rustls through futures-rustls) and hyper's I/O
/// adapter are layered on top once, for every runtime.
pub trait Runtime: Clone + Send + Sync + 'static {
    /// A connected TCP stream.
    type Io: futures::io::AsyncRead + futures::io::AsyncWrite + Send + Unpin + 'static;
    /// A listening TCP socket registered with the runtime (its descriptor reachable, so that
    /// [`crate::server::serve_on`] can raise its backlog).
    type Listener: std::os::fd::AsFd + Send + Sync + 'static;

    /// Runs a future in the background.
    fn spawn(&self, fut: BoxFuture<()>);

    /// Runs blocking work (file system, transports, task runners) off the async threads.
    fn spawn_blocking<T: Send + 'static>(
        &self,
        f: Box<dyn FnOnce() -> T + Send + 'static>,
    ) -> BoxFuture<T>;

    /// Completes after `d`.
    fn sleep(&self, d: Duration) -> BoxFuture<()>;

    /// Opens a TCP connection (`host` is a name or an IP address without brackets).
    fn connect(&self, host: String, port: u16) -> BoxFuture<io::Result<Self::Io>>;

    /// Registers a bound (and listening) standard listener with the runtime.
    fn listen(&self, listener: std::net::TcpListener) -> io::Result<Self::Listener>;

    /// Accepts the next connection: the stream and the peer's address.
    fn accept<'a>(
        &self,
        listener: &'a Self::Listener,
    ) -> BorrowedFuture<'a, io::Result<(Self::Io, SocketAddr)>>;

    /// The address a listener is bound to.
    fn listener_addr(listener: &Self::Listener) -> io::Result<SocketAddr>;

    /// The wall clock. Protocol drivers do not read it directly: they read the protocol clock
    /// ([`crate::clock::protocol_time`]), which follows this clock forward but not backward.
    fn wall_clock(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A runtime that can run a whole program: what a binary or a test needs beyond [`Runtime`],
/// so it can be written once and run on either runtime.
pub trait Host: Runtime + Default {
    /// The runtime's name as a `--runtime` flag spells it (`"tokio"`, `"smol"`).
    const NAME: &'static str;

    /// Runs `main` to completion on a fresh runtime. Work still running in the background
    /// when `main` returns (or panics) is abandoned, not waited for.
    fn block_on<F: Future>(main: F) -> F::Output;

    /// Resolves on SIGINT or SIGTERM (never, where the platform has neither). Call it inside
    /// the runtime and before announcing readiness: the handlers are installed by the call,
    /// so a signal that arrives before the future is polled still ends it.
    fn shutdown_signal() -> BoxFuture<()>;
}

/// Runs a closure on the runtime's blocking pool, inside the caller's current tracing span
/// (so what it logs carries the same fields, e.g. the delegation id).
pub fn blocking<R: Runtime, T: Send + 'static>(
    rt: &R,
    f: impl FnOnce() -> T + Send + 'static,
) -> BoxFuture<T> {
    let span = tracing::Span::current();
    rt.spawn_blocking(Box::new(move || span.in_scope(f)))
}

/// `Some(output)` if `fut` finishes within `d`, else `None` (and `fut` is dropped).
pub async fn timeout<R: Runtime, T>(
    rt: &R,
    d: Duration,
    fut: impl Future<Output = T>,
) -> Option<T> {
    let fut = std::pin::pin!(fut);
    match futures::future::select(fut, rt.sleep(d)).await {
        futures::future::Either::Left((v, _)) => Some(v),
        futures::future::Either::Right(_) => None,
    }
}
