//! One accepted connection: TLS handshake, hyper, and the timers that close it.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::channel::oneshot;
use futures::future::{select, Either};
use futures::io::{AsyncRead, AsyncWrite};
use futures::FutureExt;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::{Handler, ServerBody, ServerOptions};
use crate::body::{BodyAllowance, BoxError, RequestBody};
use crate::io::MaybeTls;
use crate::runtime::Runtime;

/// Where a request came from; in every request's extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnInfo {
    /// The peer's address (a proxy's, behind one).
    pub remote_addr: SocketAddr,
    /// The listener's address.
    pub local_addr: SocketAddr,
    /// Whether the connection is TLS.
    pub tls: bool,
}

/// The client certificate a TLS connection presented, verified by the server (it chains to
/// the server's [`client_ca`](crate::tls::ServerTlsOptions::client_ca)). It is in the
/// extensions of every request on that connection, and absent when none was presented (clear
/// text, no `client_ca`, or an [optional](crate::tls::ServerTlsOptions::client_cert_optional)
/// certificate not given). Handlers that authorise by certificate compare [`Self::sha256`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientCertificate {
    /// The leaf certificate, DER.
    pub der: Bytes,
    /// The SHA-256 of `der` (what `openssl x509 -outform DER | sha256sum` prints).
    pub sha256: [u8; 32],
}

impl ClientCertificate {
    /// A certificate from its DER bytes.
    pub fn from_der(der: &[u8]) -> Self {
        use sha2::Digest;
        ClientCertificate {
            der: Bytes::copy_from_slice(der),
            sha256: sha2::Sha256::digest(der).into(),
        }
    }

    /// [`Self::sha256`] in lowercase hex (64 characters).
    pub fn sha256_hex(&self) -> String {
        hex::encode(self.sha256)
    }
}

/// What the accept loop and the timers know about a connection. Times are nanoseconds since
/// the connection was accepted.
pub(crate) struct ConnState {
    started: Instant,
    /// Requests whose response has not been sent completely.
    pub in_flight: AtomicUsize,
    /// Requests started on this connection.
    requests: AtomicU64,
    /// When the connection last became free of requests.
    idle_since: AtomicU64,
    /// When the first byte after that arrived (+1; 0: none yet).
    first_byte: AtomicU64,
    /// The last read found nothing: hyper is waiting for the peer's next bytes (false until
    /// the connection is first polled).
    read_waiting: AtomicBool,
    /// A write or flush is waiting for the peer to read (a response may still be on its way).
    write_waiting: AtomicBool,
}

impl ConnState {
    pub fn new() -> Self {
        ConnState {
            started: Instant::now(),
            in_flight: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            first_byte: AtomicU64::new(0),
            read_waiting: AtomicBool::new(false),
            write_waiting: AtomicBool::new(false),
        }
    }

    /// Whether the connection may be closed to make room: no request in flight, nothing
    /// waiting in the socket as far as the last read saw, no response still being written,
    /// and for at least `grace` either quiet since connecting or since the last answer, or
    /// stuck in a request head (or TLS handshake) begun that long ago. A client that sends its
    /// request at once is never cut off. `Err` holds how long until the grace has passed,
    /// when only the grace stands in the way.
    pub fn evictable(&self, grace: Duration) -> Result<(), Option<Duration>> {
        if self.in_flight.load(Ordering::SeqCst) > 0
            || !self.read_waiting.load(Ordering::SeqCst)
            || self.write_waiting.load(Ordering::SeqCst)
        {
            return Err(None);
        }
        let first = self.first_byte.load(Ordering::SeqCst);
        let since = if first != 0 {
            first - 1
        } else if self.requests.load(Ordering::SeqCst) == 0 {
            0
        } else {
            self.idle_since.load(Ordering::SeqCst)
        };
        let quiet = Duration::from_nanos(self.now().saturating_sub(since));
        match grace.checked_sub(quiet) {
            Some(left) if !left.is_zero() => Err(Some(left)),
            _ => Ok(()),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn on_read(&self) {
        self.read_waiting.store(false, Ordering::SeqCst);
        if self.in_flight.load(Ordering::SeqCst) == 0 && self.first_byte.load(Ordering::SeqCst) == 0
        {
            self.first_byte.store(self.now() + 1, Ordering::SeqCst);
        }
    }

    /// How long until the connection must be closed (`None`: not now; check again later).
    fn remaining(&self, opts: &ServerOptions) -> Option<Duration> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let first = self.first_byte.load(Ordering::SeqCst);
        let (from, limit) = if first != 0 {
            (first - 1, opts.header_read_timeout)
        } else if self.requests.load(Ordering::SeqCst) == 0 {
            (0, opts.header_read_timeout.or(opts.idle_timeout))
        } else {
            (self.idle_since.load(Ordering::SeqCst), opts.idle_timeout)
        };
        let deadline = Duration::from_nanos(from) + limit?;
        Some(deadline.saturating_sub(Duration::from_nanos(self.now())))
    }
}

/// Counts a request in flight until its response body is finished or dropped.
struct InFlight(Arc<ConnState>);

impl InFlight {
    fn enter(state: Arc<ConnState>) -> Self {
        state.in_flight.fetch_add(1, Ordering::SeqCst);
        state.requests.fetch_add(1, Ordering::SeqCst);
        InFlight(state)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let s = &self.0;
        s.first_byte.store(0, Ordering::SeqCst);
        s.idle_since.store(s.now(), Ordering::SeqCst);
        s.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that ends its request's [`InFlight`] when it ends.
struct Tracked {
    inner: ServerBody,
    guard: Option<InFlight>,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(None) = r {
            this.guard.take();
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The connection's stream, reporting to its [`ConnState`]: bytes read (the idle and header
/// timers), and whether reads and writes are waiting for the peer (eviction).
struct Watched<S> {
    inner: S,
    state: Arc<ConnState>,
}

impl<S> Watched<S> {
    fn wrote<T>(&self, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        self.state
            .write_waiting
            .store(r.is_pending(), Ordering::SeqCst);
        r
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        match &r {
            Poll::Ready(Ok(n)) if *n > 0 => this.state.on_read(),
            Poll::Pending => this.state.read_waiting.store(true, Ordering::SeqCst),
            Poll::Ready(_) => this.state.read_waiting.store(false, Ordering::SeqCst),
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.wrote(r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.wrote(r)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.wrote(r)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }
}

/// Resolves when the connection has outlived its header-read or idle allowance.
async fn expired<R: Runtime>(rt: &R, state: &ConnState, opts: &ServerOptions) {
    let Some(tick) = [opts.header_read_timeout, opts.idle_timeout]
        .into_iter()
        .flatten()
        .min()
    else {
        return std::future::pending().await;
    };
    loop {
        let wait = match state.remaining(opts) {
            Some(d) if d.is_zero() => return,
            Some(d) => d,
            None => tick,
        };
        rt.sleep(wait).await;
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve_connection<R: Runtime>(
    rt: R,
    io: R::Io,
    info: ConnInfo,
    handler: Handler,
    opts: Arc<ServerOptions>,
    state: Arc<ConnState>,
    kill: oneshot::Receiver<()>,
    stop: oneshot::Receiver<()>,
) {
    // Either the timers or the accept loop (eviction, shutdown of an idle connection) end the
    // connection by dropping it.
    let closed = {
        let (rt, state, opts) = (rt.clone(), state.clone(), opts.clone());
        async move {
            let timers = std::pin::pin!(async { expired(&rt, &state, &opts).await });
            let _ = select(timers, kill).await;
        }
    };
    let mut closed = std::pin::pin!(closed.fuse());
    let io = Watched {
        inner: io,
        state: state.clone(),
    };
    let mut client_cert: Option<ClientCertificate> = None;
    let io = match &opts.tls {
        None => MaybeTls::Plain(io),
        Some(tls) => {
            let accept = futures_rustls::TlsAcceptor::from(tls.config().clone()).accept(io);
            match select(std::pin::pin!(accept), closed.as_mut()).await {
                Either::Left((Ok(s), _)) => {
                    // rustls verified it against the client CA during the handshake.
                    client_cert = s
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|chain| chain.first())
                        .map(|leaf| ClientCertificate::from_der(leaf.as_ref()));
                    MaybeTls::Tls(Box::new(s.into()))
                }
                Either::Left((Err(e), _)) => {
                    tracing::debug!(peer = %info.remote_addr, error = %e, "TLS handshake failed");
                    return;
                }
                Either::Right(_) => {
                    tracing::debug!(peer = %info.remote_addr, "TLS handshake timed out");
                    return;
                }
            }
        }
    };
    let allowance = opts.body_read_timeout.map(|timeout| {
        let rt = rt.clone();
        BodyAllowance {
            sleep: Arc::new(move |d| rt.sleep(d)),
            timeout,
            min_rate: opts.body_min_rate,
        }
    });
    let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
        let guard = InFlight::enter(state.clone());
        let (mut parts, body) = req.into_parts();
        parts.extensions.insert(info);
        if let Some(cert) = &client_cert {
            parts.extensions.insert(cert.clone());
        }
        let req = http::Request::from_parts(parts, RequestBody::new(body, allowance.clone()));
        let answer = handler.call(req);
        async move {
            let resp = answer.await;
            Ok::<_, Infallible>(resp.map(|inner| Tracked {
                inner,
                guard: Some(guard),
            }))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(smol_hyper::rt::FuturesIo::new(io), svc)
        // A handler may take a connection over (`hyper::upgrade::on`: the relay's WebSocket
        // tunnel); the connection then leaves this loop's timers and cap.
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    let r = match select(conn.as_mut(), select(closed.as_mut(), stop)).await {
        Either::Left((r, _)) => r,
        Either::Right((Either::Left(_), _)) => return,
        Either::Right((Either::Right(_), _)) => {
            // Graceful: finish the request in flight, then close.
            conn.as_mut().graceful_shutdown();
            match select(conn.as_mut(), closed.as_mut()).await {
                Either::Left((r, _)) => r,
                Either::Right(_) => return,
            }
        }
    };
    if let Err(e) = r {
        tracing::debug!(peer = %info.remote_addr, error = %e, "connection ended with an error");
    }
}
