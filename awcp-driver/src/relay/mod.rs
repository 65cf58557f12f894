//! The relay (issue 51; WIRE.md §18): a thin driver of [`awcp_proto::tunnel::Relay`] on any
//! [`Runtime`], served as one [`agent_rt::Handler`] on agent-rt's hardened server (its
//! timeouts, connection cap and body-read allowance apply to both sides).
//!
//! * `GET <tunnel path>` with `Upgrade: websocket` (default `/tunnel`): an executor's tunnel.
//!   The HTTP connection is upgraded and its frames go to the machine, told with the connection
//!   the digest of the TLS client certificate agent-rt's server verified on it, if any
//!   ([`agent_rt::server::ClientCertificate`]): the machine may authenticate by it.
//! * Every other request is a public request (`/e/<name>/awcp…`), handed to the machine,
//!   which routes it to its executor's connection or refuses it. Its body is read only as far
//!   as the machine's `RequestCredit` allows; its response body is a channel the machine feeds,
//!   and each chunk hyper takes to write is reported as `ResponseWritten`. A client that goes
//!   away is reported as `RequestGone`.
//!
//! All state lives in one loop task that owns the machine; the handler and the per-connection
//! tasks talk to it over a channel.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use agent_rt::body::RequestBody;
use agent_rt::server::ServerBody;
use awcp_proto::engine::RequestId;
use awcp_proto::tunnel::registry::CertDigest;
use awcp_proto::tunnel::{
    ConnectionId, Headers, Registry, Relay, RelayConfig, RelayEvent, RelayInput, RelayOutput,
    WsFrame,
};
use bytes::Bytes;
use futures::channel::{mpsc, oneshot};
use futures::{FutureExt, StreamExt};
use http_body_util::BodyExt;

use crate::runtime::{sleep_until, BoxFuture, Runtime};
use crate::ws::{self, Piece, ReportingBody, Socket, WsMessageOut};

/// How a relay is set up.
#[derive(Clone, Debug)]
pub struct RelayOptions {
    /// The machine's settings (the public origin executors' URLs are built on, limits).
    pub config: RelayConfig,
    /// The registered executors.
    pub registry: Registry,
    /// Where executors dial in (default `/tunnel`).
    pub tunnel_path: String,
}

impl RelayOptions {
    /// Defaults for a relay reached at `public_base` (`https://relay.example`).
    pub fn new(public_base: impl Into<String>, registry: Registry) -> Self {
        RelayOptions {
            config: RelayConfig::new(public_base),
            registry,
            tunnel_path: "/tunnel".into(),
        }
    }
}

/// The prefix of a registry line's credential that names a client certificate.
pub const CERT_PREFIX: &str = "cert-sha256:";

/// Parses a registry file: one credential per line, `name sha256-hex-of-its-token` or
/// `name cert-sha256:<sha256-hex-of-its-client-certificate's-DER>` (a name may have one of
/// each, on two lines); blank lines and lines starting with `#` are skipped.
pub fn parse_registry(text: &str) -> Result<Registry, String> {
    let mut registry = Registry::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.split_whitespace();
        let (Some(name), Some(hex), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!(
                "line {}: expected `name sha256-hex-of-token` or `name {CERT_PREFIX}<hex>`",
                n + 1
            ));
        };
        let name = awcp_proto::tunnel::ExecutorName::new(name)
            .map_err(|e| format!("line {}: {e}", n + 1))?;
        let registered = match hex.strip_prefix(CERT_PREFIX) {
            Some(cert) => {
                let digest = CertDigest::from_hex(cert)
                    .ok_or_else(|| format!("line {}: not a certificate's SHA-256 in hex", n + 1))?;
                registry.register_certificate(name, digest)
            }
            None => {
                let digest = awcp_proto::engine::auth::SecretDigest::from_hex(hex)
                    .ok_or_else(|| format!("line {}: not a SHA-256 digest in hex", n + 1))?;
                registry.register(name, digest)
            }
        };
        registered.map_err(|e| format!("line {}: {e}", n + 1))?;
    }
    Ok(registry)
}

/// The hex SHA-256 of a token, as a registry file names it.
pub fn token_digest(token: &str) -> String {
    awcp_proto::engine::auth::SecretDigest::of(token).to_hex()
}

/// The credential a registry file names a client certificate by: `cert-sha256:<hex>`, the
/// SHA-256 of the leaf (first) certificate of the PEM file at `pem`.
pub fn cert_digest(pem: &std::path::Path) -> Result<String, String> {
    let certs = agent_rt::tls::load_certs(pem).map_err(|e| e.to_string())?;
    let leaf = certs
        .first()
        .ok_or_else(|| format!("{}: no certificate", pem.display()))?;
    Ok(format!(
        "{CERT_PREFIX}{}",
        CertDigest::of_der(leaf.as_ref()).to_hex()
    ))
}

enum Cmd {
    Accepted(ConnectionId, Box<Socket>, Option<CertDigest>),
    Frame(ConnectionId, WsFrame),
    Closed(ConnectionId),
    Request {
        request: RequestId,
        method: String,
        path: String,
        headers: Headers,
        body: Option<RequestBody>,
        respond: oneshot::Sender<http::Response<ServerBody>>,
    },
    Chunk(RequestId, Vec<u8>),
    End(RequestId),
    Written(RequestId, u64),
    Gone(RequestId),
}

/// A running relay: clone it freely; [`RelayHandle::http_handler`] is what its server serves.
#[derive(Clone)]
pub struct RelayHandle {
    tx: mpsc::UnboundedSender<Cmd>,
    ids: Arc<AtomicU64>,
    tunnel_path: Arc<str>,
    rt_spawn: Arc<dyn Fn(BoxFuture<()>) + Send + Sync>,
}

impl std::fmt::Debug for RelayHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayHandle").finish_non_exhaustive()
    }
}

/// Starts a relay's loop on `rt`.
pub fn start<R: Runtime>(rt: R, opts: RelayOptions) -> RelayHandle {
    let (tx, rx) = mpsc::unbounded();
    let relay = Relay::new(opts.config, opts.registry);
    let spawner = rt.clone();
    let handle = RelayHandle {
        tx: tx.clone(),
        ids: Arc::new(AtomicU64::new(1)),
        tunnel_path: opts.tunnel_path.into(),
        rt_spawn: Arc::new(move |f| spawner.spawn(f)),
    };
    let d = Driver {
        rt: rt.clone(),
        tx,
        conns: BTreeMap::new(),
        pubs: BTreeMap::new(),
    };
    rt.spawn(Box::pin(d.run(relay, rx)));
    handle
}

impl RelayHandle {
    /// Both sides of the relay as one handler.
    pub fn http_handler(&self) -> agent_rt::Handler {
        let me = self.clone();
        agent_rt::Handler::new(move |req| {
            let me = me.clone();
            async move { me.handle(req).await }
        })
    }

    fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }

    async fn handle(&self, mut req: http::Request<RequestBody>) -> http::Response<ServerBody> {
        if req.uri().path() == &*self.tunnel_path {
            return self.upgrade(&mut req);
        }
        let request = RequestId(self.next_id());
        let has_body = req.headers().contains_key(http::header::TRANSFER_ENCODING)
            || req
                .headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.trim() != "0");
        let (parts, body) = req.into_parts();
        let headers: Headers = parts
            .headers
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect();
        let path = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_else(|| "/".into());
        let (respond, answer) = oneshot::channel();
        let cmd = Cmd::Request {
            request,
            method: parts.method.as_str().to_owned(),
            path,
            headers,
            body: has_body.then_some(body),
            respond,
        };
        if self.tx.unbounded_send(cmd).is_err() {
            return refusal(503, r#"{"error":"relay stopping"}"#);
        }
        // The client going away before the answer drops this future: tell the machine.
        let mut guard = GoneGuard {
            tx: self.tx.clone(),
            request,
            armed: true,
        };
        let resp = answer.await;
        guard.armed = false;
        resp.unwrap_or_else(|_| refusal(502, r#"{"error":"relay failed"}"#))
    }

    fn upgrade(&self, req: &mut http::Request<RequestBody>) -> http::Response<ServerBody> {
        let Some(key) = ws::upgrade_accept_key(req) else {
            return refusal(426, r#"{"error":"a WebSocket upgrade is required"}"#);
        };
        let Some(on) = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>() else {
            return refusal(500, r#"{"error":"this server cannot upgrade connections"}"#);
        };
        // Verified by the server's TLS against its client CA.
        let cert = req
            .extensions()
            .get::<agent_rt::server::ClientCertificate>()
            .map(|c| CertDigest::from_bytes(c.sha256));
        let conn = ConnectionId(self.next_id());
        let tx = self.tx.clone();
        (self.rt_spawn)(Box::pin(async move {
            match ws::accept_upgraded(on).await {
                Ok(socket) => {
                    let _ = tx.unbounded_send(Cmd::Accepted(conn, Box::new(socket), cert));
                }
                Err(e) => tracing::debug!(error = %e, "tunnel upgrade failed"),
            }
        }));
        let mut resp = http::Response::new(empty());
        *resp.status_mut() = http::StatusCode::SWITCHING_PROTOCOLS;
        let h = resp.headers_mut();
        h.insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("upgrade"),
        );
        h.insert(
            http::header::UPGRADE,
            http::HeaderValue::from_static("websocket"),
        );
        if let Ok(v) = http::HeaderValue::from_str(&key) {
            h.insert(http::header::SEC_WEBSOCKET_ACCEPT, v);
        }
        resp
    }
}

struct GoneGuard {
    tx: mpsc::UnboundedSender<Cmd>,
    request: RequestId,
    armed: bool,
}

impl Drop for GoneGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.tx.unbounded_send(Cmd::Gone(self.request));
        }
    }
}

fn empty() -> ServerBody {
    http_body_util::Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn refusal(status: u16, body: &str) -> http::Response<ServerBody> {
    let mut resp = http::Response::new(
        http_body_util::Full::new(Bytes::from(body.to_owned()))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *resp.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// A public request the machine knows.
struct Public {
    respond: Option<oneshot::Sender<http::Response<ServerBody>>>,
    credit: Option<mpsc::UnboundedSender<u64>>,
    body: Option<mpsc::UnboundedSender<Piece>>,
}

struct Driver<R> {
    rt: R,
    tx: mpsc::UnboundedSender<Cmd>,
    conns: BTreeMap<ConnectionId, mpsc::UnboundedSender<WsMessageOut>>,
    pubs: BTreeMap<RequestId, Public>,
}

impl<R: Runtime> Driver<R> {
    async fn run(mut self, mut relay: Relay, mut rx: mpsc::UnboundedReceiver<Cmd>) {
        loop {
            while let Some(out) = relay.poll_output() {
                self.execute(out);
            }
            let timer: BoxFuture<()> = match relay.poll_timeout() {
                Some(at) => sleep_until(&self.rt, at),
                None => Box::pin(futures::future::pending()),
            };
            futures::select! {
                cmd = rx.next() => match cmd {
                    Some(cmd) => self.feed(&mut relay, cmd),
                    None => return,
                },
                _ = timer.fuse() => relay.handle_timeout(self.rt.now()),
            }
        }
    }

    fn feed(&mut self, relay: &mut Relay, cmd: Cmd) {
        let input = match cmd {
            Cmd::Accepted(conn, socket, client_cert) => {
                self.connected(conn, *socket);
                RelayInput::Accepted { conn, client_cert }
            }
            Cmd::Frame(conn, frame) => RelayInput::Frame { conn, frame },
            Cmd::Closed(conn) => {
                self.conns.remove(&conn);
                RelayInput::Closed { conn }
            }
            Cmd::Request {
                request,
                method,
                path,
                headers,
                body,
                respond,
            } => {
                let has_body = body.is_some();
                let credit = body.map(|b| self.read_body(request, b));
                self.pubs.insert(
                    request,
                    Public {
                        respond: Some(respond),
                        credit,
                        body: None,
                    },
                );
                RelayInput::Request {
                    request,
                    method,
                    path,
                    headers,
                    body: has_body,
                }
            }
            Cmd::Chunk(request, bytes) => RelayInput::RequestChunk { request, bytes },
            Cmd::End(request) => RelayInput::RequestEnd { request },
            Cmd::Written(request, bytes) => RelayInput::ResponseWritten { request, bytes },
            Cmd::Gone(request) => {
                if self.pubs.remove(&request).is_none() {
                    return;
                }
                RelayInput::RequestGone { request }
            }
        };
        if let Err(e) = relay.handle(self.rt.now(), input) {
            tracing::debug!(error = %e, "relay input dropped");
        }
    }

    /// Reads a public request's body as far as credit allows; the returned sender grants it.
    fn read_body(&self, request: RequestId, body: RequestBody) -> mpsc::UnboundedSender<u64> {
        let (credit_tx, credit_rx) = mpsc::unbounded::<u64>();
        let tx = self.tx.clone();
        self.rt
            .spawn(Box::pin(ws::pump_credited(body, credit_rx, move |piece| {
                let cmd = match piece {
                    ws::Pumped::Chunk(bytes) => Cmd::Chunk(request, bytes),
                    ws::Pumped::End => Cmd::End(request),
                    ws::Pumped::Failed(_) => Cmd::Gone(request),
                };
                tx.unbounded_send(cmd).is_ok()
            })));
        credit_tx
    }

    fn connected(&mut self, conn: ConnectionId, socket: Socket) {
        let (mut sink, mut stream) = socket.split();
        let (wtx, mut wrx) = mpsc::unbounded::<WsMessageOut>();
        self.conns.insert(conn, wtx);
        self.rt.spawn(Box::pin(async move {
            while let Some(m) = wrx.next().await {
                let close = matches!(m, WsMessageOut::Close(..));
                let r = match m {
                    WsMessageOut::Frame(f) => sink.send(ws::to_ws(f)).await,
                    WsMessageOut::Close(code, reason) => sink.send(ws::close(code, &reason)).await,
                };
                if r.is_err() || close {
                    break;
                }
            }
            let _ = sink.close(None).await;
        }));
        let tx = self.tx.clone();
        self.rt.spawn(Box::pin(async move {
            while let Some(Ok(m)) = stream.next().await {
                match ws::from_ws(m) {
                    ws::Received::Frame(f) => {
                        if tx.unbounded_send(Cmd::Frame(conn, f)).is_err() {
                            return;
                        }
                    }
                    ws::Received::Close => break,
                    ws::Received::Nothing => {}
                }
            }
            let _ = tx.unbounded_send(Cmd::Closed(conn));
        }));
    }

    fn execute(&mut self, out: RelayOutput) {
        match out {
            RelayOutput::Send { conn, frame } => {
                if let Some(w) = self.conns.get(&conn) {
                    let _ = w.unbounded_send(WsMessageOut::Frame(frame));
                }
            }
            RelayOutput::Close { conn, code, reason } => {
                if let Some(w) = self.conns.remove(&conn) {
                    let _ = w.unbounded_send(WsMessageOut::Close(code, reason));
                }
            }
            RelayOutput::RequestCredit { request, bytes } => {
                if let Some(c) = self.pubs.get(&request).and_then(|p| p.credit.as_ref()) {
                    let _ = c.unbounded_send(bytes);
                }
            }
            RelayOutput::ResponseHead {
                request,
                status,
                headers,
                end,
            } => self.respond(request, status, headers, end),
            RelayOutput::ResponseBody { request, bytes } => {
                if let Some(b) = self.pubs.get(&request).and_then(|p| p.body.as_ref()) {
                    let _ = b.unbounded_send(Piece::Data(Bytes::from(bytes)));
                }
            }
            RelayOutput::ResponseEnd { request } => {
                self.pubs.remove(&request);
            }
            RelayOutput::ResponseAbort { request } => {
                if let Some(b) = self.pubs.remove(&request).and_then(|p| p.body) {
                    let _ = b.unbounded_send(Piece::Abort);
                }
            }
            RelayOutput::Refuse {
                request,
                status,
                body,
            } => {
                if let Some(r) = self.pubs.remove(&request).and_then(|p| p.respond) {
                    let _ = r.send(refusal(status, &body));
                }
            }
            RelayOutput::Event(e) => log_event(e),
        }
    }

    fn respond(&mut self, request: RequestId, status: u16, headers: Headers, end: bool) {
        let Some(p) = self.pubs.get_mut(&request) else {
            return;
        };
        let Some(respond) = p.respond.take() else {
            return;
        };
        let body = if end {
            empty()
        } else {
            let (btx, brx) = mpsc::unbounded::<Piece>();
            p.body = Some(btx);
            let written = {
                let tx = self.tx.clone();
                move |n| {
                    let _ = tx.unbounded_send(Cmd::Written(request, n));
                }
            };
            let gone = {
                let tx = self.tx.clone();
                Box::new(move || {
                    let _ = tx.unbounded_send(Cmd::Gone(request));
                }) as Box<dyn FnOnce() + Send + Sync>
            };
            ReportingBody::new(brx, written, Some(gone)).boxed_unsync()
        };
        let mut resp = http::Response::new(body);
        *resp.status_mut() =
            http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_GATEWAY);
        for (k, v) in headers {
            if let (Ok(k), Ok(v)) = (
                http::HeaderName::from_bytes(k.as_bytes()),
                http::HeaderValue::from_str(&v),
            ) {
                resp.headers_mut().append(k, v);
            }
        }
        if end {
            self.pubs.remove(&request);
        }
        let _ = respond.send(resp);
    }
}

fn log_event(e: RelayEvent) {
    match e {
        RelayEvent::ExecutorOnline {
            name,
            conn,
            extension,
        } => tracing::info!(executor = %name.as_str(), conn = conn.0, extension, "executor online"),
        RelayEvent::ExecutorOffline { name, conn } => {
            tracing::info!(executor = %name.as_str(), conn = conn.0, "executor offline")
        }
        RelayEvent::Replaced { name, old, new } => {
            tracing::info!(executor = %name.as_str(), old = old.0, new = new.0, "executor reconnected")
        }
        RelayEvent::AuthRejected { conn, reason } => {
            tracing::warn!(conn = conn.0, reason = %reason, "tunnel authentication refused")
        }
        RelayEvent::TimedOut { conn } => tracing::info!(conn = conn.0, "tunnel timed out"),
        RelayEvent::MalformedFrame { conn, error } => {
            tracing::warn!(conn = conn.0, error = %error, "malformed tunnel frame")
        }
        RelayEvent::ProtocolViolation { conn, reason } => {
            tracing::warn!(conn = conn.0, reason, "an executor broke a tunnel rule")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registry_file_names_executors_by_token_digest() {
        let text = format!(
            "# executors\n\nalice {}\nbob {}\n",
            token_digest("ta"),
            token_digest("tb")
        );
        let r = parse_registry(&text).unwrap();
        assert_eq!(r.authenticate("ta").map(|n| n.as_str()), Some("alice"));
        assert_eq!(r.authenticate("tb").map(|n| n.as_str()), Some("bob"));
        assert!(parse_registry("alice nothex").is_err());
        assert!(parse_registry("Alice 00").is_err());
        let dup = format!("alice {}\nalice {}\n", token_digest("a"), token_digest("b"));
        assert!(parse_registry(&dup).is_err());
    }

    #[test]
    fn a_registry_file_names_executors_by_certificate_digest() {
        let cert = CertDigest::of_der(b"carol");
        let text = format!(
            "alice {}\ncarol cert-sha256:{}\nalice cert-sha256:{}\n",
            token_digest("ta"),
            cert.to_hex(),
            CertDigest::of_der(b"alice").to_hex()
        );
        let r = parse_registry(&text).unwrap();
        assert!(r.has_certificates());
        let carol = r.authenticate_with("", Some(&cert)).unwrap();
        assert_eq!(carol.as_str(), "carol");
        assert_eq!(r.authenticate("ta").map(|n| n.as_str()), Some("alice"));
        assert!(parse_registry("carol cert-sha256:00").is_err());
        assert!(parse_registry("carol cert-sha256:").is_err());
        let twice = format!("a cert-sha256:{0}\nb cert-sha256:{0}\n", cert.to_hex());
        assert!(parse_registry(&twice).is_err());
    }
}
