//! One HTTP/1.1 server loop for every runtime and protocol: accept, TLS (optionally requiring
//! or asking for client certificates, handed to handlers as [`ClientCertificate`]), a hyper
//! connection per socket, graceful shutdown, and the limits a server on a real network needs.
//!
//! Limits ([`ServerOptions`], all on by default):
//! - **header-read timeout**: a request's head must arrive within it (from the connection's
//!   start for the first request, from its first byte for later ones; the TLS handshake
//!   counts too), so a slowloris connection is closed;
//! - **idle timeout**: a kept-alive connection with no request in flight is closed after it;
//! - **body-read allowance**: a request body must arrive within `body_read_timeout` plus one
//!   second per `body_min_rate` bytes received, or the handler's read fails;
//! - **connection cap**: at `max_connections` open connections (or when the process runs out
//!   of file descriptors) the oldest idle connection is closed to make room: one with no
//!   request in flight, no response still being written and nothing unread in its socket,
//!   that has been quiet for a second or stuck that long in a request head or TLS handshake.
//!   A client that sends its request at once is never cut off by the cap; if no connection
//!   is idle, accepting waits.
//!
//! A handler that answers without reading the request body (e.g. to refuse a credential
//! before a large upload) leaves the body unread: hyper drains what is already buffered or
//! closes the connection, so the refused upload costs no memory.

mod conn;

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::channel::{mpsc, oneshot};
use futures::{FutureExt, StreamExt};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::BodyExt;

use crate::body::{BoxError, RequestBody};
use crate::runtime::{BoxFuture, Runtime};
use crate::tls::ServerTls;

pub use conn::{ClientCertificate, ConnInfo};

/// The response body type a [`Handler`] returns.
pub type ServerBody = UnsyncBoxBody<Bytes, BoxError>;

/// Settings of a server: TLS and limits. The defaults are safe for a server on a network.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Serve TLS with these settings (`None`: clear text).
    pub tls: Option<ServerTls>,
    /// Longest wait for a request's head (and the TLS handshake). Default 30 s.
    pub header_read_timeout: Option<Duration>,
    /// Longest a kept-alive connection may sit between requests. Default 60 s.
    pub idle_timeout: Option<Duration>,
    /// Base allowance for receiving a request body. Default 60 s.
    pub body_read_timeout: Option<Duration>,
    /// Bytes per second that extend the body allowance by one second each (0: a fixed
    /// allowance). Default 16 KiB/s.
    pub body_min_rate: u64,
    /// Most connections open at once. Default 512.
    pub max_connections: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            tls: None,
            header_read_timeout: Some(Duration::from_secs(30)),
            idle_timeout: Some(Duration::from_secs(60)),
            body_read_timeout: Some(Duration::from_secs(60)),
            body_min_rate: 16 * 1024,
            max_connections: 512,
        }
    }
}

impl ServerOptions {
    /// Default limits with TLS.
    pub fn with_tls(tls: ServerTls) -> Self {
        ServerOptions {
            tls: Some(tls),
            ..ServerOptions::default()
        }
    }

    /// The URL scheme clients use for this server.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }
}

type HandlerFn =
    dyn Fn(http::Request<RequestBody>) -> BoxFuture<http::Response<ServerBody>> + Send + Sync;

/// What a server runs for every request, cheap to clone. Each request carries a [`ConnInfo`]
/// in its extensions, and a [`ClientCertificate`] if its TLS connection presented one.
#[derive(Clone)]
pub struct Handler(Arc<HandlerFn>);

impl Handler {
    /// A handler from an async function.
    pub fn new<F, Fut, B>(f: F) -> Handler
    where
        F: Fn(http::Request<RequestBody>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = http::Response<B>> + Send + 'static,
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        Handler(Arc::new(move |req| {
            let fut = f(req);
            Box::pin(async move { fut.await.map(|b| b.map_err(Into::into).boxed_unsync()) })
        }))
    }

    /// Answers one request.
    pub fn call(&self, req: http::Request<RequestBody>) -> BoxFuture<http::Response<ServerBody>> {
        (self.0)(req)
    }
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Handler")
    }
}

/// Serves `handler` on a bound standard listener until `shutdown` resolves, then stops
/// accepting, closes idle connections, lets the others finish their request in flight, and
/// returns.
pub async fn serve<R: Runtime>(
    rt: R,
    listener: std::net::TcpListener,
    handler: Handler,
    opts: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = rt.listen(listener)?;
    serve_on(rt, listener, handler, opts, shutdown).await
}

/// Connections the kernel completes and queues for a listener before it is accepted: see
/// [`raise_backlog`].
pub const LISTEN_BACKLOG: i32 = 4096;

/// Listens again with [`LISTEN_BACKLOG`] (the kernel caps it at `net.core.somaxconn`). The
/// standard library's `TcpListener::bind` listens with a backlog of 128: a burst of more
/// simultaneous connections than that (a daemon starting a thousand delegations at once)
/// overflowed the queue, and every connection attempt the kernel dropped waited a second
/// for its SYN to be sent again (`nstat TcpExtListenOverflows`). A listener that cannot be
/// changed keeps its backlog: it still works. [`serve_on`] (and so [`serve`]) does it to
/// every listener it serves.
pub fn raise_backlog(listener: &impl std::os::fd::AsFd) {
    if let Err(e) = socket2::SockRef::from(listener).listen(LISTEN_BACKLOG) {
        tracing::debug!("listen backlog left as it was: {e}");
    }
}

struct Entry {
    state: Arc<conn::ConnState>,
    kill: Option<oneshot::Sender<()>>,
    stop: Option<oneshot::Sender<()>>,
}

/// [`serve`] on a listener already registered with the runtime.
pub async fn serve_on<R: Runtime>(
    rt: R,
    listener: R::Listener,
    handler: Handler,
    opts: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    raise_backlog(&listener);
    let local = R::listener_addr(&listener)?;
    let opts = Arc::new(opts);
    let (done_tx, mut done_rx) = mpsc::unbounded::<u64>();
    let mut open: BTreeMap<u64, Entry> = BTreeMap::new();
    let mut next_id = 0u64;
    let mut shutdown = std::pin::pin!(shutdown.fuse());
    let cap = opts.max_connections.max(1);
    loop {
        // Reap ended connections.
        while let Ok(id) = done_rx.try_recv() {
            open.remove(&id);
        }
        if open.len() >= cap {
            // Wait for a connection to end, or for one to become idle (the flags it is judged
            // by change without telling this loop, hence the tick).
            let wait = match evict_idle(&mut open) {
                Ok(()) => EVICTION_TICK,
                Err(left) => left.unwrap_or(EVICTION_TICK).min(EVICTION_TICK),
            };
            futures::select! {
                id = done_rx.next() => { if let Some(id) = id { open.remove(&id); } }
                _ = rt.sleep(wait).fuse() => {}
                _ = shutdown => break,
            }
            continue;
        }
        let accepted = futures::select! {
            a = rt.accept(&listener).fuse() => a,
            id = done_rx.next() => { if let Some(id) = id { open.remove(&id); } continue; }
            _ = shutdown => break,
        };
        let (io, remote) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors: make room by closing an idle connection; otherwise
                // back off instead of spinning.
                let out_of_fds = matches!(e.raw_os_error(), Some(23 | 24));
                tracing::warn!(error = %e, "accept failed");
                if !(out_of_fds && evict_idle(&mut open).is_ok()) {
                    rt.sleep(Duration::from_millis(50)).await;
                }
                continue;
            }
        };
        next_id += 1;
        let id = next_id;
        let state = Arc::new(conn::ConnState::new());
        let (kill_tx, kill_rx) = oneshot::channel();
        let (stop_tx, stop_rx) = oneshot::channel();
        open.insert(
            id,
            Entry {
                state: state.clone(),
                kill: Some(kill_tx),
                stop: Some(stop_tx),
            },
        );
        let info = ConnInfo {
            remote_addr: remote,
            local_addr: local,
            tls: opts.tls.is_some(),
        };
        let task = conn::serve_connection(
            rt.clone(),
            io,
            info,
            handler.clone(),
            opts.clone(),
            state,
            kill_rx,
            stop_rx,
        );
        let done = done_tx.clone();
        rt.spawn(Box::pin(async move {
            task.await;
            let _ = done.unbounded_send(id);
        }));
    }
    // Shutdown: idle connections close now, busy ones after their request in flight.
    for e in open.values_mut() {
        if e.state.in_flight.load(Ordering::SeqCst) == 0 {
            e.kill.take();
        } else {
            e.stop.take();
        }
    }
    drop(done_tx);
    while !open.is_empty() {
        match done_rx.next().await {
            Some(id) => {
                open.remove(&id);
            }
            None => break,
        }
    }
    Ok(())
}

/// How long a connection must have been quiet before the cap may close it.
const EVICTION_GRACE: Duration = Duration::from_secs(1);
/// How often a server at its cap looks for an idle connection again.
const EVICTION_TICK: Duration = Duration::from_millis(100);

/// Closes the oldest idle connection ([`conn::ConnState::evictable`]). `Err` when there is
/// none, with the shortest wait until one may become idle, if known.
fn evict_idle(open: &mut BTreeMap<u64, Entry>) -> Result<(), Option<Duration>> {
    let mut soonest: Option<Duration> = None;
    for (id, e) in open.iter_mut().filter(|(_, e)| e.kill.is_some()) {
        match e.state.evictable(EVICTION_GRACE) {
            Ok(()) => {
                tracing::debug!(connection = id, "closing an idle connection to make room");
                e.kill.take();
                return Ok(());
            }
            Err(Some(left)) => soonest = Some(soonest.map_or(left, |s| s.min(left))),
            Err(None) => {}
        }
    }
    Err(soonest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    /// Connections the kernel queues while nobody accepts, each with 500 ms to be made.
    fn queued(listener: &TcpListener, n: usize) -> usize {
        let addr = listener.local_addr().unwrap();
        let mut held = Vec::new();
        for _ in 0..n {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
                Ok(s) => held.push(s),
                Err(_) => break,
            }
        }
        held.len()
    }

    /// The standard library's listener queues 128 connections; a burst beyond that had its
    /// connection attempts dropped (each retried a second later). After `raise_backlog`, 600
    /// unaccepted connections are all made. (Checked only where `net.core.somaxconn` allows
    /// more than 600.)
    #[test]
    fn a_raised_backlog_queues_a_burst_of_connections() {
        let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        if somaxconn <= 600 {
            eprintln!("net.core.somaxconn is {somaxconn}: not checked");
            return;
        }
        let plain = TcpListener::bind("127.0.0.1:0").unwrap();
        let before = queued(&plain, 600);
        assert!(
            before < 600,
            "the default backlog queued {before}: nothing to show"
        );
        let raised = TcpListener::bind("127.0.0.1:0").unwrap();
        raise_backlog(&raised);
        assert_eq!(queued(&raised, 600), 600);
    }
}
