//! A minimal HTTP/1.1 client over hyper and [`Runtime::connect`], with `https` through rustls.
//! Connections can be kept alive between requests to the same peer (see
//! [`HttpClient::keep_alive`]).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use futures::future::Either;
use http::{Method, Request, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use rustls::pki_types::ServerName;

use crate::body::BodyError;
use crate::io::MaybeTls;
use crate::runtime::{blocking, Runtime};
use crate::tls::ClientTls;

/// Why a client request failed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// The URL is not `http(s)://host[:port]/path`.
    #[error("bad URL {0:?}: {1}")]
    BadUrl(String, String),
    /// No connection could be made (refused, unknown host, no route).
    #[error("{0}")]
    Connect(String),
    /// Talking failed after connecting (reset, closed early, a local file error).
    #[error("{0}")]
    Io(String),
    /// The TLS handshake failed (untrusted, expired or mismatched certificate, refused client
    /// certificate).
    #[error("{0}")]
    Tls(String),
    /// No answer in time.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The body exceeded the limit.
    #[error("response body exceeds {0} bytes")]
    TooLarge(u64),
}

impl From<BodyError> for NetError {
    fn from(e: BodyError) -> Self {
        match e {
            BodyError::TooLarge(n) => NetError::TooLarge(n),
            other => NetError::Io(other.to_string()),
        }
    }
}

/// The parts of a URL a request needs.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    pub path: String,
}

impl Target {
    /// `host:port` as a `Host` header spells it (IPv6 in brackets).
    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

pub(crate) fn split_url(url: &str) -> Result<Target, NetError> {
    let bad = |m: &str| NetError::BadUrl(url.into(), m.into());
    let uri: Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
    let tls = match uri.scheme_str() {
        Some(s) if s.eq_ignore_ascii_case("http") => false,
        Some(s) if s.eq_ignore_ascii_case("https") => true,
        Some(s) => {
            return Err(bad(&format!(
                "scheme {s} is not supported (use http or https)"
            )))
        }
        None => return Err(bad("missing scheme")),
    };
    let host = uri
        .host()
        .ok_or_else(|| bad("missing host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    Ok(Target {
        tls,
        host,
        port,
        path,
    })
}

/// An HTTP/1.1 client on runtime `R` with TLS settings for `https` URLs.
///
/// By default every request has a connection of its own. With [`HttpClient::keep_alive`], a
/// connection whose response has been read to its end is kept for the next request to the
/// same scheme, host and port ([`MAX_IDLE_PER_PEER`] of them, reused for
/// [`IDLE_FOR_AT_MOST`]); clones of a client share them. A request a kept connection could not
/// take (the peer had closed it) goes out on a new one; a request that was sent and then lost
/// its connection fails as on a fresh connection: nothing is sent twice. Bodies over 64 KiB
/// always get a connection of their own, written without copying (vectored writes).
///
/// With [`HttpClient::max_requests_per_peer`], at most that many [`HttpClient::request`]s
/// are in flight to one peer; the others wait for one to finish (within their own timeout).
#[derive(Clone, Debug)]
pub struct HttpClient<R> {
    rt: R,
    tls: ClientTls,
    pool: std::sync::Arc<Pool>,
    keep_alive: bool,
    max_requests_per_peer: Option<usize>,
}

/// Idle connections kept per peer (scheme, host and port).
pub const MAX_IDLE_PER_PEER: usize = 8;

/// How long a connection is reused after its last request was sent: below the 5 s a Node.js
/// server (the TypeScript reference) keeps an idle connection open, so a kept connection is
/// hardly ever one the peer is closing as the next request goes out.
pub const IDLE_FOR_AT_MOST: Duration = Duration::from_secs(2);

/// A download is written to its file in batches of at least this many bytes (one hand-off to
/// the blocking pool each; memory stays bounded by a batch and one chunk).
pub const WRITE_BATCH: usize = 256 * 1024;

/// Which connections may serve a request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Peer {
    tls: bool,
    host: String,
    port: u16,
}

/// The sending half of one HTTP/1.1 client connection.
type Sender = hyper::client::conn::http1::SendRequest<ClientBody>;

/// Kept connections, newest last per peer.
#[derive(Default)]
struct Pool {
    peers: std::sync::Mutex<std::collections::HashMap<Peer, Vec<Kept>>>,
    /// With a request cap, the slots of each peer a request is waiting for or holds (entries
    /// nobody uses are dropped whenever a slot is taken).
    slots: std::sync::Mutex<std::collections::HashMap<Peer, std::sync::Arc<async_lock::Semaphore>>>,
}

struct Kept {
    sender: hyper::client::conn::http1::SendRequest<ClientBody>,
    since: std::time::Instant,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept: usize = self.lock().values().map(Vec::len).sum();
        write!(f, "Pool({kept} kept)")
    }
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<Peer, Vec<Kept>>> {
        self.peers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The newest kept connection to `peer` that is idle now; closed and expired ones are
    /// dropped on the way, busy ones (a response still being read) stay.
    fn checkout(&self, peer: &Peer) -> Option<hyper::client::conn::http1::SendRequest<ClientBody>> {
        let mut peers = self.lock();
        let kept = peers.get_mut(peer)?;
        kept.retain(|k| !k.sender.is_closed() && k.since.elapsed() <= IDLE_FOR_AT_MOST);
        let i = kept.iter().rposition(|k| k.sender.is_ready())?;
        let k = kept.remove(i);
        if kept.is_empty() {
            peers.remove(peer);
        }
        Some(k.sender)
    }

    /// Keeps `sender` for later requests to `peer` (it serves one once its response is read).
    fn checkin(&self, peer: Peer, sender: hyper::client::conn::http1::SendRequest<ClientBody>) {
        let mut peers = self.lock();
        let kept = peers.entry(peer).or_default();
        if kept.len() >= MAX_IDLE_PER_PEER {
            kept.remove(0);
        }
        kept.push(Kept {
            sender,
            since: std::time::Instant::now(),
        });
    }
}

impl<R: Runtime> HttpClient<R> {
    /// A client trusting what `tls` says.
    pub fn new(rt: R, tls: ClientTls) -> Self {
        HttpClient {
            rt,
            tls,
            pool: std::sync::Arc::default(),
            keep_alive: false,
            max_requests_per_peer: None,
        }
    }

    /// At most `n` (at least 1) [`HttpClient::request`]s to one peer (scheme, host and port)
    /// in flight at once; the others wait for one to finish, and the wait counts against
    /// their timeout. Streamed requests ([`HttpClient::send`], downloads) are not counted.
    ///
    /// Over HTTP/1.1 each request in flight is a connection, and each connection costs
    /// buffers at both ends (40-50 KiB with hyper): without a cap, a thousand requests at
    /// once are a thousand connections. With [`HttpClient::keep_alive`] the requests that
    /// waited reuse the connections of those before them. Clones share the slots: set it
    /// before cloning.
    pub fn max_requests_per_peer(mut self, n: usize) -> Self {
        self.max_requests_per_peer = Some(n.max(1));
        self
    }

    /// Keeps connections alive between requests to the same peer (see [`HttpClient`]).
    ///
    /// Worth it against a peer that sends each response without waiting (this project's
    /// servers; Node.js 18 and later, whose HTTP server disables Nagle's algorithm by
    /// default): 2–4× the request rate on loopback. Not against one that writes a
    /// response's head and body separately with Nagle's algorithm on, as uvicorn does (the
    /// Python ACPs SDK's partners): on a kept connection each response then waits for the
    /// client's delayed ACK, about 40 ms, where a new connection answers in 4 ms.
    pub fn keep_alive(mut self, on: bool) -> Self {
        self.keep_alive = on;
        self
    }

    /// How many kept connections could take a request now (open, idle, not expired).
    pub fn idle_connections(&self) -> usize {
        let peers = self.pool.lock();
        let idle = |k: &&Kept| {
            k.sender.is_ready() && !k.sender.is_closed() && k.since.elapsed() <= IDLE_FOR_AT_MOST
        };
        peers
            .values()
            .map(|kept| kept.iter().filter(idle).count())
            .sum()
    }

    /// The runtime the client runs on.
    pub fn runtime(&self) -> &R {
        &self.rt
    }

    /// The client's TLS settings.
    pub fn tls(&self) -> &ClientTls {
        &self.tls
    }

    async fn connect(&self, t: &Target) -> Result<MaybeTls<R::Io>, NetError> {
        let io = self
            .rt
            .connect(t.host.clone(), t.port)
            .await
            .map_err(|e| NetError::Connect(format!("connect {}: {e}", t.authority())))?;
        if !t.tls {
            return Ok(MaybeTls::Plain(io));
        }
        let name = ServerName::try_from(t.host.clone())
            .map_err(|e| NetError::Tls(format!("{}: not a valid TLS server name: {e}", t.host)))?;
        let stream = futures_rustls::TlsConnector::from(self.tls.config())
            .connect(name, io)
            .await
            .map_err(|e| NetError::Tls(format!("TLS handshake with {}: {e}", t.authority())))?;
        Ok(MaybeTls::Tls(Box::new(stream.into())))
    }

    /// A new connection to `t`, handshaken, its driving task spawned: the sender, a channel
    /// that says why the connection failed (e.g. the TLS alert of a server refusing our
    /// certificate), and whether it is TLS.
    async fn open(
        &self,
        t: &Target,
        writev: bool,
    ) -> Result<(Sender, futures::channel::oneshot::Receiver<String>, bool), NetError> {
        let io = self.connect(t).await?;
        let tls = io.is_tls();
        let (sender, conn) = hyper::client::conn::http1::Builder::new()
            .writev(writev)
            .handshake(smol_hyper::rt::FuturesIo::new(io))
            .await
            .map_err(|e| NetError::Io(format!("handshake: {e}")))?;
        let (cause_tx, cause_rx) = futures::channel::oneshot::channel::<String>();
        self.rt.spawn(Box::pin(async move {
            if let Err(e) = conn.await {
                let _ = cause_tx.send(error_chain(&e));
            }
        }));
        Ok((sender, cause_rx, tls))
    }

    /// Sends one request and returns the response head with a streaming body. `Host` is the
    /// URL's authority and a body is sent as `application/json`, unless `headers` say
    /// otherwise.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
        body: Option<Bytes>,
    ) -> Result<http::Response<Incoming>, NetError> {
        let body = match body {
            Some(b) => ClientBody::full(b),
            None => ClientBody::empty(),
        };
        self.send_body(method, url, headers, body).await
    }

    /// [`HttpClient::send`] with any [`ClientBody`] (e.g. one streamed from a file).
    pub async fn send_body(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
        body: ClientBody,
    ) -> Result<http::Response<Incoming>, NetError> {
        let t = split_url(url)?;
        // A large body is queued and written from its own buffer (vectored writes) on a
        // connection of its own. Otherwise hyper, seeing an I/O type that does not announce
        // vectored writes, copies the body into its write buffer first: a second copy of an
        // inline archive. Small bodies are still joined with the head, one write for both.
        let large_body = body.len() > 64 * 1024;
        let has_body = !body.is_empty() || matches!(body.0, BodyInner::Stream { .. });
        let given = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
        let mut req = Request::builder().method(method).uri(&t.path);
        if !given("host") {
            req = req.header("host", t.authority());
        }
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        if has_body && !given("content-type") {
            req = req.header("content-type", "application/json");
        }
        let mut req = req.body(body).map_err(|e| NetError::Io(e.to_string()))?;
        let peer = Peer {
            tls: t.tls,
            host: t.host.clone(),
            port: t.port,
        };
        let reuse = self.keep_alive && !large_body;
        while let Some(mut sender) = reuse.then(|| self.pool.checkout(&peer)).flatten() {
            match sender.try_send_request(req).await {
                Ok(resp) => {
                    self.pool.checkin(peer, sender);
                    return Ok(resp);
                }
                Err(mut e) => match e.take_message() {
                    // Not sent: the peer had closed that connection. Try the next one.
                    Some(back) => req = back,
                    None => {
                        let msg = error_chain(e.error());
                        return Err(request_failed(t.tls, &t, msg));
                    }
                },
            }
        }
        // Boxed: the connect, TLS and handshake futures are large and short-lived; inline,
        // their space would stay in every request's future until its response arrived.
        let (mut sender, cause_rx, tls) = Box::pin(self.open(&t, large_body)).await?;
        match sender.send_request(req).await {
            Ok(resp) => {
                if reuse {
                    self.pool.checkin(peer, sender);
                }
                Ok(resp)
            }
            Err(e) => {
                let mut msg = error_chain(&e);
                if let Ok(cause) = cause_rx.await {
                    if !msg.contains(&cause) {
                        msg = format!("{msg}: {cause}");
                    }
                }
                Err(request_failed(tls, &t, msg))
            }
        }
    }

    /// A request with a whole response body: `(status, body)`.
    pub async fn request(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
        body: Option<Bytes>,
        timeout: Duration,
        limit: u64,
    ) -> Result<(u16, Bytes), NetError> {
        let body = match body {
            Some(b) => ClientBody::full(b),
            None => ClientBody::empty(),
        };
        self.request_body(method, url, headers, body, timeout, limit)
            .await
    }

    /// [`HttpClient::request`] with any [`ClientBody`].
    pub async fn request_body(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
        body: ClientBody,
        timeout: Duration,
        limit: u64,
    ) -> Result<(u16, Bytes), NetError> {
        with_timeout(&self.rt, timeout, async {
            let _slot = self.slot(url).await;
            let resp = self.send_body(method, url, headers, body).await?;
            let status = resp.status().as_u16();
            let body = crate::body::read_body(resp.into_body(), limit).await?;
            Ok((status, body))
        })
        .await
    }

    /// A request slot of `url`'s peer, held until dropped, once one is free; none without a
    /// cap (or for a URL that cannot be sent to: the request fails on it).
    async fn slot(&self, url: &str) -> Option<async_lock::SemaphoreGuardArc> {
        let max = self.max_requests_per_peer?;
        let t = split_url(url).ok()?;
        let peer = Peer {
            tls: t.tls,
            host: t.host,
            port: t.port,
        };
        let slots = {
            let mut all = self.pool.slots.lock().unwrap_or_else(|e| e.into_inner());
            // Peers nobody holds or waits for a slot of (only the map refers to them).
            all.retain(|_, s| std::sync::Arc::strong_count(s) > 1);
            all.entry(peer)
                .or_insert_with(|| std::sync::Arc::new(async_lock::Semaphore::new(max)))
                .clone()
        };
        Some(slots.acquire_arc().await)
    }

    /// Streams a GET into `dest` with flat memory and makes it durable; returns the byte
    /// count. `dest` is created (or truncated) with the first batch of
    /// [`WRITE_BATCH`] bytes or at the end of a smaller body; a failure before that leaves
    /// it untouched.
    pub async fn download(
        &self,
        url: &str,
        headers: &[(&str, String)],
        dest: PathBuf,
        limit: u64,
        timeout: Duration,
    ) -> Result<u64, NetError> {
        fn nothing(_: &mut (), _: &[u8]) {}
        let (n, ()) = self
            .download_folding(url, headers, dest, limit, timeout, (), nothing)
            .await?;
        Ok(n)
    }

    /// [`HttpClient::download`] that also folds every byte written into `state` with `fold`,
    /// on the thread that writes them (e.g. a hash of the file, computed as it is written, so
    /// that no one reads it again to check it); returns the byte count and the state.
    #[allow(clippy::too_many_arguments)]
    pub async fn download_folding<S: Send + 'static>(
        &self,
        url: &str,
        headers: &[(&str, String)],
        dest: PathBuf,
        limit: u64,
        timeout: Duration,
        state: S,
        fold: fn(&mut S, &[u8]),
    ) -> Result<(u64, S), NetError> {
        let rt = &self.rt;
        let mut state = Some(state);
        with_timeout(rt, timeout, async {
            let resp = self.send(Method::GET, url, headers, None).await?;
            if !resp.status().is_success() {
                return Err(NetError::Io(format!("GET {url}: HTTP {}", resp.status())));
            }
            // Written in batches of at least WRITE_BATCH bytes, each one hand-off to the
            // blocking pool (a small body: one for create, write and sync together).
            let mut file: Option<std::fs::File> = None;
            let mut batch: Vec<Bytes> = Vec::new();
            let mut batched = 0usize;
            let mut body = resp.into_body();
            let mut total = 0u64;
            loop {
                let frame = body.frame().await;
                let last = frame.is_none();
                if let Some(frame) = frame {
                    let frame = frame.map_err(|e| NetError::Io(e.to_string()))?;
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    total += data.len() as u64;
                    if total > limit {
                        return Err(NetError::TooLarge(limit));
                    }
                    batched += data.len();
                    batch.push(data);
                    if batched < WRITE_BATCH {
                        continue;
                    }
                }
                let (chunks, open, d2) = (std::mem::take(&mut batch), file.take(), dest.clone());
                let mut folded = state.take();
                batched = 0;
                let (written, folded) = blocking(rt, move || {
                    let mut f = match open {
                        Some(f) => f,
                        None => std::fs::File::create(&d2)
                            .map_err(|e| format!("create {}: {e}", d2.display()))?,
                    };
                    for c in &chunks {
                        f.write_all(c).map_err(|e| format!("write: {e}"))?;
                        if let Some(s) = &mut folded {
                            fold(s, c);
                        }
                    }
                    if last {
                        f.sync_all().map_err(|e| format!("sync: {e}"))?;
                    }
                    Ok::<_, String>((f, folded))
                })
                .await
                .map_err(NetError::Io)?;
                state = folded;
                if last {
                    break;
                }
                file = Some(written);
            }
            let state = state.ok_or_else(|| NetError::Io("download state lost".into()))?;
            Ok((total, state))
        })
        .await
    }
}

/// A request to `t` that failed after its connection was made. A server refusing our
/// certificate (mTLS) says so in an alert after the handshake: over TLS, the failure is a TLS
/// one.
fn request_failed(tls: bool, t: &Target, msg: String) -> NetError {
    if tls {
        NetError::Tls(format!("request to {}: {msg}", t.authority()))
    } else {
        NetError::Io(format!("request to {}: {msg}", t.authority()))
    }
}

/// A request body: whole, or streamed through a channel with its length known up front
/// (sent with `Content-Length`; memory stays bounded by the channel).
pub struct ClientBody(BodyInner);

enum BodyInner {
    Full(Option<Bytes>, u64),
    Stream {
        rx: futures::channel::mpsc::Receiver<std::io::Result<Bytes>>,
        len: u64,
        left: u64,
    },
}

impl ClientBody {
    /// No body.
    pub fn empty() -> Self {
        ClientBody(BodyInner::Full(None, 0))
    }

    /// A whole body.
    pub fn full(b: Bytes) -> Self {
        let len = b.len() as u64;
        ClientBody(BodyInner::Full(Some(b).filter(|b| !b.is_empty()), len))
    }

    /// Exactly `len` bytes, as the chunks `rx` yields. Fewer or more, or an error from the
    /// channel, fail the request (the server sees a truncated body, never a wrong one).
    pub fn streamed(
        len: u64,
        rx: futures::channel::mpsc::Receiver<std::io::Result<Bytes>>,
    ) -> Self {
        ClientBody(BodyInner::Stream { rx, len, left: len })
    }

    /// The body's length in bytes.
    pub fn len(&self) -> u64 {
        match &self.0 {
            BodyInner::Full(_, len) | BodyInner::Stream { len, .. } => *len,
        }
    }

    /// Whether the body is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for ClientBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClientBody(len {})", self.len())
    }
}

impl http_body::Body for ClientBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        use futures::StreamExt;
        use std::task::Poll;
        match &mut self.get_mut().0 {
            BodyInner::Full(b, _) => Poll::Ready(b.take().map(|b| Ok(http_body::Frame::data(b)))),
            BodyInner::Stream { rx, left, .. } => match rx.poll_next_unpin(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Some(Ok(b))) => {
                    let n = b.len() as u64;
                    if n > *left {
                        *left = 0;
                        return Poll::Ready(Some(Err(std::io::Error::other(
                            "request body longer than announced",
                        ))));
                    }
                    *left -= n;
                    Poll::Ready(Some(Ok(http_body::Frame::data(b))))
                }
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
                Poll::Ready(None) if *left > 0 => Poll::Ready(Some(Err(std::io::Error::other(
                    "request body shorter than announced",
                )))),
                Poll::Ready(None) => Poll::Ready(None),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            BodyInner::Full(b, _) => b.is_none(),
            BodyInner::Stream { .. } => false,
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.len())
    }
}

/// An error and its sources, `outer: inner: …`.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s = format!("{s}: {t}");
        }
        cur = c.source();
    }
    s
}

/// Sends one request with the default TLS settings (public roots, no client certificate).
pub async fn send<R: Runtime>(
    rt: &R,
    method: Method,
    url: &str,
    headers: &[(&str, String)],
    body: Option<Bytes>,
) -> Result<http::Response<Incoming>, NetError> {
    HttpClient::new(rt.clone(), ClientTls::default())
        .send(method, url, headers, body)
        .await
}

/// [`HttpClient::request`] with the default TLS settings.
pub async fn request<R: Runtime>(
    rt: &R,
    method: Method,
    url: &str,
    headers: &[(&str, String)],
    body: Option<Bytes>,
    timeout: Duration,
    limit: u64,
) -> Result<(u16, Bytes), NetError> {
    HttpClient::new(rt.clone(), ClientTls::default())
        .request(method, url, headers, body, timeout, limit)
        .await
}

/// [`HttpClient::download`] with the default TLS settings.
pub async fn download<R: Runtime>(
    rt: &R,
    url: &str,
    headers: &[(&str, String)],
    dest: PathBuf,
    limit: u64,
    timeout: Duration,
) -> Result<u64, NetError> {
    HttpClient::new(rt.clone(), ClientTls::default())
        .download(url, headers, dest, limit, timeout)
        .await
}

/// Reads a whole response body, refusing more than `limit` bytes.
pub async fn read_body<B>(body: B, limit: u64) -> Result<Bytes, NetError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<crate::body::BoxError>,
{
    Ok(crate::body::read_body(body, limit).await?)
}

/// Runs `fut` with a deadline.
pub async fn with_timeout<R: Runtime, T>(
    rt: &R,
    d: Duration,
    fut: impl std::future::Future<Output = Result<T, NetError>>,
) -> Result<T, NetError> {
    let fut = std::pin::pin!(fut);
    match futures::future::select(fut, rt.sleep(d)).await {
        Either::Left((r, _)) => r,
        Either::Right(_) => Err(NetError::Timeout(d)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split() {
        let t = split_url("http://127.0.0.1:8080/awcp").unwrap();
        assert_eq!(
            (t.tls, t.host.as_str(), t.port, t.path.as_str()),
            (false, "127.0.0.1", 8080, "/awcp")
        );
        assert_eq!(split_url("http://h/").unwrap().port, 80);
        let t = split_url("https://h/x?y=1").unwrap();
        assert_eq!((t.tls, t.port, t.path.as_str()), (true, 443, "/x?y=1"));
        let t = split_url("https://[::1]:9/").unwrap();
        assert_eq!(
            (t.host.as_str(), t.authority()),
            ("::1", "[::1]:9".to_owned())
        );
        assert!(split_url("ftp://h/").is_err());
        assert!(split_url("nonsense").is_err());
    }
}
