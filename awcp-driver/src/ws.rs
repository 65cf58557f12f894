//! WebSocket plumbing the tunnel's drivers share ([`crate::executor::tunnel`], [`crate::relay`]):
//! frames between `awcp_proto::tunnel::WsFrame` and tungstenite's messages, the client dial
//! (TCP through the runtime, TLS through agent-rt's rustls settings), and the server side of an
//! HTTP/1.1 upgrade. async-tungstenite runs over `futures-io` streams, so one piece of code
//! serves every runtime.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use async_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use async_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use async_tungstenite::tungstenite::Message as WsMessage;
use async_tungstenite::WebSocketStream;
use awcp_proto::tunnel::WsFrame;
use futures::io::{AsyncRead, AsyncWrite};

use crate::runtime::BoxFuture;

/// A boxed `futures-io` stream (plain TCP, TLS, or an upgraded HTTP connection).
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// A WebSocket over any of our streams.
pub type Socket = WebSocketStream<Box<dyn Io>>;

/// The WebSocket limits: a message is at most one tunnel frame (16 MiB, the machines' own
/// cap on text frames; data frames are 64 KiB).
pub fn config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(16 << 20))
        .max_frame_size(Some(16 << 20))
}

/// What a tungstenite message is to a machine: a frame, a close, or nothing (a raw frame).
pub enum Received {
    /// A frame to feed.
    Frame(WsFrame),
    /// The peer closed.
    Close,
    /// Nothing to feed.
    Nothing,
}

/// A tungstenite message as a machine's frame.
pub fn from_ws(msg: WsMessage) -> Received {
    match msg {
        WsMessage::Text(t) => Received::Frame(WsFrame::Text(t.as_str().to_owned())),
        WsMessage::Binary(b) => Received::Frame(WsFrame::Binary(b.to_vec())),
        WsMessage::Ping(b) => Received::Frame(WsFrame::Ping(b.to_vec())),
        WsMessage::Pong(b) => Received::Frame(WsFrame::Pong(b.to_vec())),
        WsMessage::Close(_) => Received::Close,
        WsMessage::Frame(_) => Received::Nothing,
    }
}

/// A machine's frame as a tungstenite message.
pub fn to_ws(frame: WsFrame) -> WsMessage {
    match frame {
        WsFrame::Text(t) => WsMessage::Text(t.into()),
        WsFrame::Binary(b) => WsMessage::Binary(b.into()),
        WsFrame::Ping(b) => WsMessage::Ping(b.into()),
        WsFrame::Pong(b) => WsMessage::Pong(b.into()),
    }
}

/// A close message with a code and reason.
pub fn close(code: u16, reason: &str) -> WsMessage {
    let mut reason = reason.to_owned();
    // A close reason is at most 123 bytes.
    while reason.len() > 123 {
        reason.pop();
    }
    WsMessage::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: reason.into(),
    }))
}

/// Where a `ws://` / `wss://` URL points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WsTarget {
    /// `wss`.
    pub tls: bool,
    /// Host name or IP address (no brackets).
    pub host: String,
    /// Port.
    pub port: u16,
}

/// Parses a `ws://host[:port]/path` or `wss://…` URL.
pub fn parse_ws_url(url: &str) -> Result<WsTarget, String> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("wss://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("ws://") {
        (false, r)
    } else {
        return Err(format!("{url}: not a ws:// or wss:// URL"));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let uri: http::uri::Authority = authority
        .parse()
        .map_err(|e| format!("{url}: bad host: {e}"))?;
    let host = uri.host().trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("{url}: no host"));
    }
    Ok(WsTarget {
        tls,
        host: host.to_owned(),
        port: uri.port_u16().unwrap_or(if tls { 443 } else { 80 }),
    })
}

/// Dials `url` on `rt`: TCP, TLS for `wss://` with `tls`'s trust settings, the WebSocket
/// handshake.
pub async fn dial<R: crate::Runtime>(
    rt: &R,
    url: &str,
    tls: &agent_rt::tls::ClientTls,
) -> Result<Socket, String> {
    let target = parse_ws_url(url)?;
    let tcp = rt
        .connect(target.host.clone(), target.port)
        .await
        .map_err(|e| format!("connect {}:{}: {e}", target.host, target.port))?;
    let io: Box<dyn Io> = if target.tls {
        let name = rustls_name(&target.host)?;
        let stream = futures_rustls::TlsConnector::from(tls.config())
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS with {}: {e}", target.host))?;
        Box::new(stream)
    } else {
        Box::new(tcp)
    };
    let (socket, _) = async_tungstenite::client_async_with_config(url, io, Some(config()))
        .await
        .map_err(|e| format!("WebSocket handshake with {url}: {e}"))?;
    Ok(socket)
}

fn rustls_name(
    host: &str,
) -> Result<futures_rustls::rustls::pki_types::ServerName<'static>, String> {
    futures_rustls::rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| format!("{host}: {e}"))
}

/// Whether a request asks to be upgraded to a WebSocket; the `Sec-WebSocket-Accept` value if so.
pub fn upgrade_accept_key<B>(req: &http::Request<B>) -> Option<String> {
    let h = req.headers();
    let has = |name: &str, token: &str| {
        h.get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    if req.method() != http::Method::GET
        || !has("connection", "upgrade")
        || !has("upgrade", "websocket")
        || h.get("sec-websocket-version").and_then(|v| v.to_str().ok()) != Some("13")
    {
        return None;
    }
    let key = h.get("sec-websocket-key")?;
    Some(async_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes()))
}

/// The server side of an upgrade: once hyper has sent the 101 answer, the connection as a
/// WebSocket.
pub fn accept_upgraded(on: hyper::upgrade::OnUpgrade) -> BoxFuture<Result<Socket, String>> {
    Box::pin(async move {
        let upgraded = on.await.map_err(|e| format!("upgrade: {e}"))?;
        let io: Box<dyn Io> = Box::new(HyperIo(upgraded));
        Ok(WebSocketStream::from_raw_socket(io, Role::Server, Some(config())).await)
    })
}

/// A hyper I/O object (an upgraded connection) as a `futures-io` stream.
struct HyperIo(hyper::upgrade::Upgraded);

impl AsyncRead for HyperIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let mut rb = hyper::rt::ReadBuf::new(buf);
        match hyper::rt::Read::poll_read(Pin::new(&mut self.get_mut().0), cx, rb.unfilled()) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(rb.filled().len())),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for HyperIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        hyper::rt::Write::poll_write(Pin::new(&mut self.get_mut().0), cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        hyper::rt::Write::poll_flush(Pin::new(&mut self.get_mut().0), cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        hyper::rt::Write::poll_shutdown(Pin::new(&mut self.get_mut().0), cx)
    }
}

/// What a [`ReportingBody`] is fed.
pub(crate) enum Piece {
    /// Body bytes.
    Data(bytes::Bytes),
    /// The body broke off: the reader sees an error.
    Abort,
}

/// A body fed through a channel that reports every chunk its reader takes (the flow-control
/// signal both tunnel machines need: `RequestBodyConsumed` at the executor, `ResponseWritten` at
/// the relay), and, dropped before its end, that its reader went away. The channel holds at
/// most what the machine's credit let through (one window), so it needs no bound of its own.
pub(crate) struct ReportingBody {
    rx: futures::channel::mpsc::UnboundedReceiver<Piece>,
    report: Box<dyn Fn(u64) + Send + Sync>,
    on_drop: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl ReportingBody {
    pub(crate) fn new(
        rx: futures::channel::mpsc::UnboundedReceiver<Piece>,
        report: impl Fn(u64) + Send + Sync + 'static,
        on_drop: Option<Box<dyn FnOnce() + Send + Sync>>,
    ) -> Self {
        ReportingBody {
            rx,
            report: Box::new(report),
            on_drop,
        }
    }
}

impl http_body::Body for ReportingBody {
    type Data = bytes::Bytes;
    type Error = agent_rt::body::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        use futures::StreamExt;
        let this = self.get_mut();
        match this.rx.poll_next_unpin(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Piece::Data(b))) => {
                (this.report)(b.len() as u64);
                Poll::Ready(Some(Ok(http_body::Frame::data(b))))
            }
            Poll::Ready(Some(Piece::Abort)) => {
                this.on_drop = None;
                Poll::Ready(Some(Err("the tunnelled body broke off".into())))
            }
            Poll::Ready(None) => {
                this.on_drop = None;
                Poll::Ready(None)
            }
        }
    }
}

impl Drop for ReportingBody {
    fn drop(&mut self) {
        if let Some(f) = self.on_drop.take() {
            f();
        }
    }
}

/// What a driver's writer task is asked to write.
pub(crate) enum WsMessageOut {
    /// A machine's frame.
    Frame(WsFrame),
    /// A close with this code and reason (the writer stops after it).
    Close(u16, String),
}

/// What [`pump_credited`] hands on: a piece of the body, its end, or its failure.
pub(crate) enum Pumped {
    /// Bytes within the credit granted.
    Chunk(Vec<u8>),
    /// The body ended.
    End,
    /// Reading the body failed.
    Failed(String),
}

/// Reads `body` only as far as the credit granted through `grants` allows (at most one chunk
/// of it held beyond that), handing each piece to `emit`, then its end or failure. Returns
/// then, when `emit` says stop (`false`), or when `grants` closes (the stream was refused,
/// answered or reset: the rest is not wanted). Both tunnel drivers pump bodies this way:
/// the executor its local responses, the relay its public requests.
pub(crate) async fn pump_credited<B>(
    mut body: B,
    mut grants: futures::channel::mpsc::UnboundedReceiver<u64>,
    mut emit: impl FnMut(Pumped) -> bool,
) where
    B: http_body::Body<Data = bytes::Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    use futures::StreamExt;
    use http_body_util::BodyExt;
    let mut credit: u64 = 0;
    let mut pending: Option<bytes::Bytes> = None;
    loop {
        while credit == 0 {
            match grants.next().await {
                Some(n) => credit = credit.saturating_add(n),
                None => return,
            }
        }
        let data = match pending.take() {
            Some(p) => p,
            None => match body.frame().await {
                None => {
                    emit(Pumped::End);
                    return;
                }
                Some(Err(e)) => {
                    emit(Pumped::Failed(e.to_string()));
                    return;
                }
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if !data.is_empty() => data,
                    Ok(_) | Err(_) => continue,
                },
            },
        };
        let now = take_credited(data, &mut credit, &mut pending);
        if !emit(Pumped::Chunk(now.to_vec())) {
            return;
        }
    }
}

/// The part of `data` that `credit` allows, the rest kept in `pending` for the next grant.
/// Feeding a machine exactly what it promised (never a chunk beyond) keeps the driver's count
/// and the machine's equal whatever order grants and chunks cross in.
fn take_credited(
    mut data: bytes::Bytes,
    credit: &mut u64,
    pending: &mut Option<bytes::Bytes>,
) -> bytes::Bytes {
    let n = (*credit).min(data.len() as u64) as usize;
    let now = data.split_to(n);
    if !data.is_empty() {
        *pending = Some(data);
    }
    *credit -= n as u64;
    now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ws_urls_name_their_host_port_and_scheme() {
        let t = parse_ws_url("wss://relay.example/tunnel").unwrap();
        assert_eq!(
            (t.tls, t.host.as_str(), t.port),
            (true, "relay.example", 443)
        );
        let t = parse_ws_url("ws://127.0.0.1:8080/tunnel").unwrap();
        assert_eq!((t.tls, t.host.as_str(), t.port), (false, "127.0.0.1", 8080));
        let t = parse_ws_url("ws://[::1]:9/x").unwrap();
        assert_eq!(t.host, "::1");
        assert!(parse_ws_url("http://x/").is_err());
    }

    #[test]
    fn a_chunk_beyond_the_credit_waits_for_the_next_grant() {
        let (mut credit, mut pending) = (4, None);
        let now = take_credited(
            bytes::Bytes::from_static(b"abcdefg"),
            &mut credit,
            &mut pending,
        );
        assert_eq!((&now[..], credit), (&b"abcd"[..], 0));
        assert_eq!(pending.as_deref(), Some(&b"efg"[..]));
    }
}
