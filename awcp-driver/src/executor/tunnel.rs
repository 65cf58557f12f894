//! The executor's end of the WebSocket tunnel (issue 51; WIRE.md §18): a thin driver of
//! [`awcp_proto::tunnel::TunnelClient`] on any [`Runtime`].
//!
//! It dials the relay when the machine says `Connect` (TCP through the runtime, TLS for
//! `wss://` with agent-rt's rustls settings, then the WebSocket handshake), feeds every frame to
//! the machine, and runs every tunnelled request against the executor's own endpoints
//! ([`ExecutorHandle::handle_http`], what the executor's HTTP listener serves) under `/awcp`.
//! Bodies stream both ways: the request body reaches the handler chunk by chunk and each chunk
//! it takes is reported (`RequestBodyConsumed`); the response body is read only as far as the
//! machine's `ResponseCredit` allows. On `Ready` the relay's public URL becomes the executor's
//! public URL.
//!
//! The relay drops `Host`; a tunnelled request is given the public URL's host, the one name the
//! executor's DNS-rebinding check always accepts, so nothing in the router is loosened for it.

use std::collections::BTreeMap;
use std::future::Future;

use awcp_proto::tunnel::{
    ClientEvent, ClientInput, ClientOutput, ClientState, Headers, LocalRequest, StopReason,
    TunnelClient, TunnelClientConfig, WsFrame,
};
use bytes::Bytes;
use futures::channel::{mpsc, oneshot};
use futures::{FutureExt, StreamExt};

use super::ExecutorHandle;
use crate::runtime::{sleep_until, BoxFuture, Runtime};
use crate::ws::{self, Piece, ReportingBody, Socket};

/// Where and how the executor dials its relay.
#[derive(Clone)]
pub struct TunnelOptions {
    /// The relay's tunnel endpoint, `ws://…` or `wss://…` (e.g. `wss://relay.example/tunnel`).
    pub url: String,
    /// The token the relay's operator registered for this executor.
    pub token: String,
    /// Trust settings for `wss://`.
    pub tls: agent_rt::tls::ClientTls,
}

impl std::fmt::Debug for TunnelOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunnelOptions")
            .field("url", &self.url)
            .field("token", &"<hidden>")
            .finish()
    }
}

/// Why the tunnel stopped by itself.
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    /// The relay refused the token.
    #[error("the relay refused the tunnel token: {0}")]
    AuthRejected(String),
    /// Too many consecutive failures (only with a configured limit).
    #[error("gave up reconnecting to the relay")]
    GaveUp,
    /// The URL cannot be dialled.
    #[error("{0}")]
    BadUrl(String),
}

enum Ev {
    Dialled(u64, Result<Box<Socket>, String>),
    Frame(u64, WsFrame),
    Closed(u64, String),
    Head(LocalRequest, u16, Headers),
    Chunk(LocalRequest, Vec<u8>),
    End(LocalRequest),
    Failed(LocalRequest, String),
    Consumed(LocalRequest, u64),
}

struct Local {
    body: Option<mpsc::UnboundedSender<Piece>>,
    credit: mpsc::UnboundedSender<u64>,
    _cancel: oneshot::Sender<()>,
}

/// Runs the tunnel until `shutdown` resolves (then `Ok`), or until the machine stops by itself
/// (a refused token: `Err`).
pub async fn run_tunnel<R: Runtime>(
    rt: R,
    executor: ExecutorHandle,
    opts: TunnelOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), TunnelError> {
    ws::parse_ws_url(&opts.url).map_err(TunnelError::BadUrl)?;
    let seed = crate::security::random_bytes::<8>()
        .map(u64::from_le_bytes)
        .unwrap_or(0x5eed);
    let mut client = TunnelClient::new(TunnelClientConfig::new(opts.token.clone(), seed), rt.now());
    let (tx, mut rx) = mpsc::unbounded::<Ev>();
    let mut d = Driver {
        rt,
        executor,
        opts,
        tx,
        generation: 0,
        writer: None,
        locals: BTreeMap::new(),
        public_host: None,
    };
    let mut shutdown = std::pin::pin!(shutdown.fuse());
    loop {
        while let Some(out) = client.poll_output() {
            d.execute(out);
        }
        match client.state() {
            ClientState::Stopped(StopReason::AuthRejected(r)) => {
                return Err(TunnelError::AuthRejected(r.clone()))
            }
            ClientState::Stopped(StopReason::GaveUp) => return Err(TunnelError::GaveUp),
            ClientState::Stopped(StopReason::Requested) => return Ok(()),
            ClientState::Connecting { .. }
            | ClientState::Authenticating { .. }
            | ClientState::Ready { .. }
            | ClientState::BackingOff { .. } => {}
        }
        let timer: BoxFuture<()> = match client.poll_timeout() {
            Some(at) => sleep_until(&d.rt, at),
            None => Box::pin(futures::future::pending()),
        };
        futures::select! {
            ev = rx.next() => {
                if let Some(ev) = ev {
                    d.feed(&mut client, ev);
                }
            }
            _ = timer.fuse() => client.handle_timeout(d.rt.now()),
            _ = shutdown => {
                client.stop(d.rt.now());
                while let Some(out) = client.poll_output() {
                    d.execute(out);
                }
                return Ok(());
            }
        }
    }
}

struct Driver<R> {
    rt: R,
    executor: ExecutorHandle,
    opts: TunnelOptions,
    tx: mpsc::UnboundedSender<Ev>,
    /// Counts connections; events of an older one are stale.
    generation: u64,
    writer: Option<mpsc::UnboundedSender<ws::WsMessageOut>>,
    locals: BTreeMap<LocalRequest, Local>,
    public_host: Option<String>,
}

impl<R: Runtime> Driver<R> {
    fn feed(&mut self, client: &mut TunnelClient, ev: Ev) {
        let now = self.rt.now();
        let input = match ev {
            Ev::Dialled(g, r) if g == self.generation => match r {
                Ok(socket) => {
                    self.connected(*socket);
                    ClientInput::Connected
                }
                Err(reason) => ClientInput::Disconnected { reason },
            },
            Ev::Frame(g, frame) if g == self.generation => ClientInput::Frame(frame),
            Ev::Closed(g, reason) if g == self.generation => {
                self.writer = None;
                ClientInput::Disconnected { reason }
            }
            Ev::Dialled(..) | Ev::Frame(..) | Ev::Closed(..) => return,
            Ev::Head(request, status, headers) => ClientInput::ResponseHead {
                request,
                status,
                headers,
            },
            Ev::Chunk(request, bytes) => ClientInput::ResponseChunk { request, bytes },
            Ev::End(request) => {
                self.locals.remove(&request);
                ClientInput::ResponseEnd { request }
            }
            Ev::Failed(request, reason) => {
                self.locals.remove(&request);
                ClientInput::LocalFailed { request, reason }
            }
            Ev::Consumed(request, bytes) => ClientInput::RequestBodyConsumed { request, bytes },
        };
        // A refusal is a stale input (a request that ended while this was on its way).
        if let Err(e) = client.handle(now, input) {
            tracing::debug!(error = %e, "tunnel input dropped");
        }
    }

    fn connected(&mut self, socket: Socket) {
        let g = self.generation;
        let (mut sink, mut stream) = socket.split();
        let (wtx, mut wrx) = mpsc::unbounded::<ws::WsMessageOut>();
        self.writer = Some(wtx);
        self.rt.spawn(Box::pin(async move {
            while let Some(m) = wrx.next().await {
                let close = matches!(m, ws::WsMessageOut::Close(..));
                let r = match m {
                    ws::WsMessageOut::Frame(f) => sink.send(ws::to_ws(f)).await,
                    ws::WsMessageOut::Close(code, reason) => {
                        sink.send(ws::close(code, &reason)).await
                    }
                };
                if r.is_err() || close {
                    break;
                }
            }
            let _ = sink.close(None).await;
        }));
        let tx = self.tx.clone();
        self.rt.spawn(Box::pin(async move {
            let reason = loop {
                match stream.next().await {
                    Some(Ok(m)) => match ws::from_ws(m) {
                        ws::Received::Frame(f) => {
                            if tx.unbounded_send(Ev::Frame(g, f)).is_err() {
                                return;
                            }
                        }
                        ws::Received::Close => break "the relay closed the tunnel".to_owned(),
                        ws::Received::Nothing => {}
                    },
                    Some(Err(e)) => break format!("tunnel connection failed: {e}"),
                    None => break "tunnel connection ended".to_owned(),
                }
            };
            let _ = tx.unbounded_send(Ev::Closed(g, reason));
        }));
    }

    fn send(&mut self, m: ws::WsMessageOut) {
        if let Some(w) = &self.writer {
            let _ = w.unbounded_send(m);
        }
    }

    fn execute(&mut self, out: ClientOutput) {
        match out {
            ClientOutput::Connect { attempt } => {
                self.generation += 1;
                self.writer = None;
                let g = self.generation;
                let (rt, url, tls, tx) = (
                    self.rt.clone(),
                    self.opts.url.clone(),
                    self.opts.tls.clone(),
                    self.tx.clone(),
                );
                tracing::debug!(url = %url, attempt, "dialling the relay");
                self.rt.spawn(Box::pin(async move {
                    let r = ws::dial(&rt, &url, &tls).await;
                    let _ = tx.unbounded_send(Ev::Dialled(g, r.map(Box::new)));
                }));
            }
            ClientOutput::Send(frame) => self.send(ws::WsMessageOut::Frame(frame)),
            ClientOutput::Close { code, reason } => {
                self.send(ws::WsMessageOut::Close(code, reason));
                self.writer = None;
                // Whatever the old connection still reports is stale.
                self.generation += 1;
            }
            ClientOutput::StartLocalRequest {
                request,
                method,
                path,
                headers,
                body,
            } => self.start(request, method, path, headers, body),
            ClientOutput::RequestBodyChunk { request, bytes } => {
                if let Some(tx) = self.locals.get(&request).and_then(|l| l.body.as_ref()) {
                    let _ = tx.unbounded_send(Piece::Data(Bytes::from(bytes)));
                }
            }
            ClientOutput::RequestBodyEnd { request } => {
                if let Some(l) = self.locals.get_mut(&request) {
                    l.body = None;
                }
            }
            ClientOutput::CancelLocalRequest { request } => {
                if let Some(l) = self.locals.remove(&request) {
                    if let Some(b) = l.body {
                        let _ = b.unbounded_send(Piece::Abort);
                    }
                }
            }
            ClientOutput::ResponseCredit { request, bytes } => {
                if let Some(l) = self.locals.get(&request) {
                    let _ = l.credit.unbounded_send(bytes);
                }
            }
            ClientOutput::Event(e) => self.event(e),
        }
    }

    fn event(&mut self, e: ClientEvent) {
        match e {
            ClientEvent::Ready {
                public_url,
                extension,
            } => {
                tracing::info!(public_url = %public_url, extension, "tunnel ready");
                let base = public_url
                    .trim_end_matches('/')
                    .strip_suffix("/awcp")
                    .unwrap_or(&public_url)
                    .to_owned();
                self.public_host = base
                    .parse::<http::Uri>()
                    .ok()
                    .and_then(|u| u.authority().map(|a| a.as_str().to_owned()));
                self.executor.set_public_url(base);
            }
            ClientEvent::Disconnected { reason } => {
                tracing::warn!(reason = %reason, "tunnel disconnected")
            }
            ClientEvent::Reconnecting { attempt, at } => {
                tracing::info!(attempt, at = %at.to_rfc3339(), "tunnel reconnecting")
            }
            ClientEvent::AuthFailed { reason } => {
                tracing::error!(reason = %reason, "the relay refused the tunnel token")
            }
            ClientEvent::GaveUp { attempts } => {
                tracing::error!(attempts, "gave up reconnecting to the relay")
            }
            ClientEvent::MalformedFrame(e) => tracing::warn!(error = %e, "malformed tunnel frame"),
            ClientEvent::ProtocolViolation { reason } => {
                tracing::warn!(reason, "the relay broke a tunnel rule")
            }
        }
    }

    fn start(
        &mut self,
        request: LocalRequest,
        method: String,
        path: String,
        headers: Headers,
        body: bool,
    ) {
        let (credit_tx, credit_rx) = mpsc::unbounded::<u64>();
        let (cancel_tx, cancel_rx) = oneshot::channel::<()>();
        let (body_tx, body_rx) = mpsc::unbounded::<Piece>();
        let tx = self.tx.clone();
        let consumed = {
            let tx = tx.clone();
            move |n| {
                let _ = tx.unbounded_send(Ev::Consumed(request, n));
            }
        };
        let req_body = ReportingBody::new(body_rx, consumed, None);
        self.locals.insert(
            request,
            Local {
                body: body.then_some(body_tx),
                credit: credit_tx,
                _cancel: cancel_tx,
            },
        );
        let req = match local_request(&method, &path, &headers, self.public_host.as_deref()) {
            Ok(b) => b.body(req_body).map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        let req = match req {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.unbounded_send(Ev::Failed(request, format!("bad request: {e}")));
                return;
            }
        };
        let executor = self.executor.clone();
        self.rt.spawn(Box::pin(async move {
            let work = async {
                let resp = executor.handle_http(req).await;
                let (parts, body) = resp.into_parts();
                let headers: Headers = parts
                    .headers
                    .iter()
                    .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
                    .collect();
                if tx
                    .unbounded_send(Ev::Head(request, parts.status.as_u16(), headers))
                    .is_err()
                {
                    return;
                }
                ws::pump_credited(body, credit_rx, |piece| {
                    let ev = match piece {
                        ws::Pumped::Chunk(bytes) => Ev::Chunk(request, bytes),
                        ws::Pumped::End => Ev::End(request),
                        ws::Pumped::Failed(e) => {
                            Ev::Failed(request, format!("response body failed: {e}"))
                        }
                    };
                    tx.unbounded_send(ev).is_ok()
                })
                .await;
            };
            let work = std::pin::pin!(work);
            // A cancelled request: its handler future and body are dropped.
            let _ = futures::future::select(work, cancel_rx).await;
        }));
    }
}

/// The local request for a tunnelled one: the path under `/awcp`, the headers as sent, and
/// `Host` set to the public URL's host.
fn local_request(
    method: &str,
    path: &str,
    headers: &[(String, String)],
    public_host: Option<&str>,
) -> Result<http::request::Builder, String> {
    let rest = path.strip_prefix('/').unwrap_or(path);
    let uri = if rest.is_empty() || rest.starts_with('?') {
        format!("/awcp{rest}")
    } else {
        format!("/awcp/{rest}")
    };
    let method = http::Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
    let mut b = http::Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        if k.eq_ignore_ascii_case("host") {
            continue;
        }
        b = b.header(k.as_str(), v.as_str());
    }
    if let Some(h) = public_host {
        b = b.header(http::header::HOST, h);
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tunnelled_paths_land_under_awcp_with_the_public_host() {
        let h = vec![("host".to_owned(), "evil.example".to_owned())];
        let r = local_request("GET", "/status", &h, Some("relay.example"))
            .unwrap()
            .body(())
            .unwrap();
        assert_eq!(r.uri(), "/awcp/status");
        assert_eq!(r.headers()["host"], "relay.example");
        assert_eq!(r.headers().get_all("host").iter().count(), 1);
        let r = local_request("POST", "/", &[], None)
            .unwrap()
            .body(())
            .unwrap();
        assert_eq!(r.uri(), "/awcp");
        let r = local_request("GET", "/?x=1", &[], None)
            .unwrap()
            .body(())
            .unwrap();
        assert_eq!(r.uri(), "/awcp?x=1");
    }
}
