//! A minimal HTTP/1.1 client over hyper and [`Runtime::connect`], with `https` through rustls.
//! Connections can be kept alive between requests to the same peer (see
//! [`HttpClient::keep_alive`]).

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use futures::future::Either;
use http::{Method, Request, Uri};
use hyper::body::Incoming;

use crate::body::BodyError;
use crate::runtime::Runtime;
use crate::tls::ClientTls;

mod body;
mod connect;
mod download;
mod pool;
#[cfg(test)]
mod tests;

use body::BodyInner;
pub use body::ClientBody;
use connect::{error_chain, request_failed};
pub use download::WRITE_BATCH;
use pool::{Peer, Pool};

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

    /// The runtime the client runs on.
    pub fn runtime(&self) -> &R {
        &self.rt
    }

    /// The client's TLS settings.
    pub fn tls(&self) -> &ClientTls {
        &self.tls
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
