//! The relay's streams: public requests in, onto one executor connection's streams, in both
//! dialects (what comes back is [`super::responses`]'s).

use crate::engine::RequestId;
use crate::time::Timestamp;
use crate::tunnel::codec::WsFrame;
use crate::tunnel::flow::{RecvFlow, SendFlow};
use crate::tunnel::frames::{
    HttpRequest, Message, RequestHead, Reset, SseOpen, SseStream, StreamNo, Window,
};
use crate::tunnel::headers::{self, Headers};
use crate::tunnel::registry::ExecutorName;
use crate::tunnel::{ConnectionId, TunnelUsageError};

use super::public::{self, ReferenceRoute};
use super::{Phase, Relay, RelayOutput, RelayTimer};

/// Where a public request is.
#[derive(Debug)]
pub(crate) enum Route {
    /// Waiting for its executor to come online.
    Waiting(Box<Pending>),
    /// On a connection's stream.
    Live {
        conn: ConnectionId,
        stream: StreamNo,
    },
}

/// A public request not yet sent to its executor.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) name: ExecutorName,
    method: String,
    /// Relative to the executor's AWCP root.
    path: String,
    headers: Headers,
    body: bool,
}

/// One stream of a connection.
#[derive(Debug)]
pub(crate) struct RStream {
    pub(crate) request: RequestId,
    /// A response head went to the public client (a failure now aborts it).
    pub(super) head_out: bool,
    pub(super) kind: RKind,
}

#[derive(Debug)]
pub(super) enum RKind {
    /// Extension: the request body's sending half (until its end went out), the response
    /// body's receiving half.
    Ext {
        send: Option<SendFlow>,
        recv: RecvFlow,
        head_in: bool,
    },
    /// Reference request: its head and body collected until the body is whole (`None` once
    /// sent as `HTTP_REQUEST`).
    RefHttp { collecting: Option<Box<Collecting>> },
    /// Reference event stream: event bytes handed out and not reported written.
    RefSse { unwritten: u64 },
}

/// A reference request whose body is being collected.
#[derive(Debug)]
pub(super) struct Collecting {
    method: String,
    path: String,
    headers: Headers,
    body: Vec<u8>,
}

/// The headers of an event stream opened for a reference client.
fn sse_headers() -> Headers {
    vec![
        ("content-type".into(), "text/event-stream".into()),
        ("cache-control".into(), "no-cache".into()),
    ]
}

impl Relay {
    pub(super) fn on_request(
        &mut self,
        now: Timestamp,
        request: RequestId,
        method: String,
        path: String,
        headers: Headers,
        body: bool,
    ) -> Result<(), TunnelUsageError> {
        if self.requests.contains_key(&request) {
            return Err(TunnelUsageError::Duplicate(request.0));
        }
        let Some((name, path)) = public::split_public_path(&path) else {
            self.refuse(request, 404, "not an executor URL (/e/<name>/awcp)");
            return Ok(());
        };
        if !self.registry().is_registered(&name) {
            self.refuse(request, 404, "unknown executor");
            return Ok(());
        }
        let pending = Pending {
            name,
            method,
            path,
            headers: headers::forwardable(&headers),
            body,
        };
        if let Some(conn) = self.registry().connection(&pending.name) {
            self.dispatch(conn, request, pending);
            return Ok(());
        }
        let waiting = self.waiting_for(&pending.name).len();
        if self.config.offline_grace.is_zero() || waiting >= self.config.max_in_flight {
            self.refuse(request, 503, "executor offline");
            return Ok(());
        }
        let at = now.saturating_add(self.config.offline_grace);
        self.core.timers.set(RelayTimer::Waiting(request), at);
        self.requests
            .insert(request, Route::Waiting(Box::new(pending)));
        Ok(())
    }

    /// What the relay may have to hold for `conn` ([`super::RelayConfig::max_buffered_bytes`]).
    pub(super) fn committed(&self, conn: ConnectionId) -> u64 {
        let Some(c) = self.conns.get(&conn) else {
            return 0;
        };
        c.streams
            .values()
            .map(|s| match &s.kind {
                RKind::Ext { send, recv, .. } => {
                    recv.committed() + send.as_ref().map_or(0, SendFlow::queued_bytes)
                }
                RKind::RefHttp { collecting } => {
                    collecting.as_ref().map_or(0, |c| c.body.len() as u64)
                }
                RKind::RefSse { unwritten } => *unwritten,
            })
            .sum()
    }

    /// Opens a stream for `request` on `conn`, or refuses it.
    pub(super) fn dispatch(&mut self, conn: ConnectionId, request: RequestId, p: Pending) {
        let committed = self.committed(conn);
        let window = self.config.window;
        let (max_in_flight, max_buffered) =
            (self.config.max_in_flight, self.config.max_buffered_bytes);
        let Some(c) = self.conns.get_mut(&conn) else {
            return self.refuse(request, 503, "executor offline");
        };
        let Phase::Ready {
            extension,
            client_window,
            ..
        } = c.phase
        else {
            return self.refuse(request, 503, "executor offline");
        };
        if c.streams.len() >= max_in_flight {
            return self.refuse(
                request,
                503,
                "too many requests in flight for this executor",
            );
        }
        let reserve = if extension { u64::from(window) } else { 0 };
        if committed + reserve > max_buffered {
            return self.refuse(request, 503, "executor's buffer limit reached");
        }
        let stream = c.next_stream;
        if stream == StreamNo::MAX {
            return self.refuse(request, 503, "connection out of stream numbers");
        }
        c.next_stream += 1;
        if extension {
            let kind = RKind::Ext {
                send: p.body.then(|| SendFlow::new(client_window)),
                recv: RecvFlow::new(window),
                head_in: false,
            };
            self.open(conn, stream, request, kind, false);
            let head = RequestHead {
                stream,
                method: p.method,
                path: p.path,
                headers: p.headers,
                end: !p.body,
            };
            self.send(conn, &Message::RequestHead(head));
            return self.flush_request(conn, stream);
        }
        match public::reference_route(&p.method, &p.path) {
            ReferenceRoute::NotServed => self.refuse(request, 404, "Not found"),
            ReferenceRoute::Events => {
                self.open(conn, stream, request, RKind::RefSse { unwritten: 0 }, true);
                let open = SseOpen {
                    stream_id: stream.to_string(),
                    path: public::without_query(&p.path).to_string(),
                };
                self.send(conn, &Message::SseOpen(open));
                self.push(RelayOutput::ResponseHead {
                    request,
                    status: 200,
                    headers: sse_headers(),
                    end: false,
                });
            }
            ReferenceRoute::Http if p.body => {
                // The head waits until the body is whole.
                let collecting = Collecting {
                    method: p.method,
                    path: p.path,
                    headers: p.headers,
                    body: Vec::new(),
                };
                let kind = RKind::RefHttp {
                    collecting: Some(Box::new(collecting)),
                };
                self.open(conn, stream, request, kind, false);
                let bytes = self.config.reference_body_cap as u64 + 1;
                self.push(RelayOutput::RequestCredit { request, bytes });
            }
            ReferenceRoute::Http => {
                let kind = RKind::RefHttp { collecting: None };
                self.open(conn, stream, request, kind, false);
                let c = Collecting {
                    method: p.method,
                    path: p.path,
                    headers: p.headers,
                    body: Vec::new(),
                };
                self.send_http_request(conn, stream, c, None);
            }
        }
    }

    fn open(
        &mut self,
        conn: ConnectionId,
        stream: StreamNo,
        request: RequestId,
        kind: RKind,
        head_out: bool,
    ) {
        if let Some(c) = self.conns.get_mut(&conn) {
            let s = RStream {
                request,
                head_out,
                kind,
            };
            c.streams.insert(stream, s);
            self.requests.insert(request, Route::Live { conn, stream });
        }
    }

    fn send_http_request(
        &mut self,
        conn: ConnectionId,
        stream: StreamNo,
        c: Collecting,
        body: Option<String>,
    ) {
        let headers = c
            .headers
            .into_iter()
            .filter(|(n, _)| n != "content-length")
            .collect();
        let message = HttpRequest {
            request_id: stream.to_string(),
            method: c.method,
            path: public::without_query(&c.path).to_string(),
            headers,
            body,
        };
        self.send(conn, &Message::HttpRequest(message));
    }

    pub(super) fn stream_mut(
        &mut self,
        conn: ConnectionId,
        stream: StreamNo,
    ) -> Option<&mut RStream> {
        self.conns.get_mut(&conn)?.streams.get_mut(&stream)
    }

    fn live(&self, request: RequestId) -> Result<(ConnectionId, StreamNo), TunnelUsageError> {
        match self.requests.get(&request) {
            Some(Route::Live { conn, stream }) => Ok((*conn, *stream)),
            Some(Route::Waiting(_)) => Err(TunnelUsageError::NoCredit(request.0)),
            None => Err(TunnelUsageError::UnknownRequest(request.0)),
        }
    }

    /// Forgets a stream and its request.
    pub(super) fn remove(&mut self, conn: ConnectionId, stream: StreamNo) -> Option<RStream> {
        let s = self.conns.get_mut(&conn)?.streams.remove(&stream)?;
        self.requests.remove(&s.request);
        Some(s)
    }

    /// Tells the public client its request failed: a 502 if nothing was answered yet, else an
    /// abort.
    pub(super) fn fail_public(&mut self, s: &RStream, reason: &str) {
        if s.head_out {
            self.push(RelayOutput::ResponseAbort { request: s.request });
        } else {
            self.refuse(s.request, 502, reason);
        }
    }

    /// Sends what the credit allows of an extension request body, and tells the driver how
    /// much more it may read.
    pub(super) fn flush_request(&mut self, conn: ConnectionId, stream: StreamNo) {
        let Some(RStream {
            request,
            kind: RKind::Ext {
                send: Some(send), ..
            },
            ..
        }) = self.stream_mut(conn, stream)
        else {
            return;
        };
        let request = *request;
        let mut frames = Vec::new();
        while let Some(frame) = send.next_frame(stream) {
            frames.push(frame);
        }
        let credit = send.allowance();
        if send.is_finished() {
            if let Some(RStream {
                kind: RKind::Ext { send, .. },
                ..
            }) = self.stream_mut(conn, stream)
            {
                *send = None;
            }
        }
        for frame in frames {
            self.push(RelayOutput::Send {
                conn,
                frame: WsFrame::Binary(frame),
            });
        }
        if let Some(bytes) = credit {
            self.push(RelayOutput::RequestCredit { request, bytes });
        }
    }

    pub(super) fn on_request_chunk(
        &mut self,
        request: RequestId,
        bytes: Vec<u8>,
    ) -> Result<(), TunnelUsageError> {
        let (conn, stream) = self.live(request)?;
        let cap = self.config.reference_body_cap;
        let s = self
            .stream_mut(conn, stream)
            .ok_or(TunnelUsageError::UnknownRequest(request.0))?;
        match &mut s.kind {
            RKind::Ext {
                send: Some(send), ..
            } => {
                send.push(bytes)
                    .map_err(|_| TunnelUsageError::NoCredit(request.0))?;
                self.flush_request(conn, stream);
            }
            RKind::RefHttp {
                collecting: Some(c),
            } => {
                c.body.extend_from_slice(&bytes);
                let too_large = c.body.len() > cap;
                if too_large {
                    self.remove(conn, stream);
                    self.refuse(
                        request,
                        413,
                        "request body too large for this executor's tunnel",
                    );
                } else if self.committed(conn) > self.config.max_buffered_bytes {
                    self.remove(conn, stream);
                    self.refuse(request, 503, "executor's buffer limit reached");
                }
            }
            RKind::Ext { send: None, .. }
            | RKind::RefHttp { collecting: None }
            | RKind::RefSse { .. } => {
                return Err(TunnelUsageError::InvalidState("no request body expected"));
            }
        }
        Ok(())
    }

    pub(super) fn on_request_end(&mut self, request: RequestId) -> Result<(), TunnelUsageError> {
        let (conn, stream) = self.live(request)?;
        let s = self
            .stream_mut(conn, stream)
            .ok_or(TunnelUsageError::UnknownRequest(request.0))?;
        match &mut s.kind {
            RKind::Ext {
                send: Some(send), ..
            } => {
                send.finish();
                self.flush_request(conn, stream);
            }
            RKind::RefHttp { collecting } if collecting.is_some() => {
                let Some(mut c) = collecting.take() else {
                    return Ok(());
                };
                match String::from_utf8(std::mem::take(&mut c.body)) {
                    Ok(text) => {
                        let body = (!text.is_empty()).then_some(text);
                        self.send_http_request(conn, stream, *c, body);
                    }
                    Err(_) => {
                        self.remove(conn, stream);
                        let reason = "this executor's tunnel carries text bodies only";
                        self.refuse(request, 502, reason);
                    }
                }
            }
            RKind::Ext { send: None, .. } | RKind::RefHttp { .. } | RKind::RefSse { .. } => {
                return Err(TunnelUsageError::InvalidState("no request body expected"));
            }
        }
        Ok(())
    }

    pub(super) fn on_response_written(&mut self, request: RequestId, bytes: u64) {
        let Ok((conn, stream)) = self.live(request) else {
            return;
        };
        let Some(s) = self.stream_mut(conn, stream) else {
            return;
        };
        match &mut s.kind {
            RKind::Ext { recv, .. } => {
                if let Some(increment) = recv.consumed(bytes) {
                    self.send(conn, &Message::Window(Window { stream, increment }));
                }
            }
            RKind::RefSse { unwritten } => *unwritten = unwritten.saturating_sub(bytes),
            RKind::RefHttp { .. } => {}
        }
    }

    pub(super) fn on_request_gone(&mut self, request: RequestId) {
        match self.requests.get(&request) {
            None => {}
            Some(Route::Waiting(_)) => {
                self.requests.remove(&request);
                self.core.timers.cancel(&RelayTimer::Waiting(request));
            }
            Some(Route::Live { conn, stream }) => {
                let (conn, stream) = (*conn, *stream);
                let Some(s) = self.remove(conn, stream) else {
                    return;
                };
                match s.kind {
                    RKind::Ext { .. } => self.send(
                        conn,
                        &Message::Reset(Reset {
                            stream,
                            reason: Some("client went away".into()),
                        }),
                    ),
                    RKind::RefSse { .. } => self.send(
                        conn,
                        &Message::SseClose(SseStream {
                            stream_id: stream.to_string(),
                        }),
                    ),
                    // The reference cannot cancel a request: its answer will be dropped.
                    RKind::RefHttp { .. } => {}
                }
            }
        }
    }
}

/// A reference id the relay issued (a stream number in decimal).
pub(super) fn ref_stream(id: &str) -> Option<StreamNo> {
    if id.is_empty() || id.len() > 10 || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    id.parse().ok()
}
