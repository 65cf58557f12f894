//! The client's streams: tunnelled requests in, local responses out, in both dialects.

use engine_basics::sse::SseDecoder;

use super::{ClientEvent, ClientOutput, TunnelClient};
use crate::tunnel::codec::DataFrame;
use crate::tunnel::flow::{RecvFlow, SendFlow};
use crate::tunnel::frames::{
    HttpRequest, HttpResponse, Message, RequestHead, Reset, ResponseHead, SseEvent, SseOpen,
    SseStream, StreamNo, Window,
};
use crate::tunnel::headers::{self, Headers};
use crate::tunnel::{LocalRequest, TunnelUsageError};

/// How much of a reference event stream's local body the driver may hold unread by the
/// machine: it is decoded and sent on as it comes, so this is re-granted chunk by chunk.
const SSE_CREDIT: u64 = 64 * 1024;

/// A stream's name on the wire.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Remote {
    /// An extension stream.
    Ext(StreamNo),
    /// A reference `HTTP_REQUEST`'s `requestId`.
    Request(String),
    /// A reference `SSE_OPEN`'s `streamId`.
    Sse(String),
}

/// One open tunnelled request.
#[derive(Debug)]
pub(super) struct Stream {
    remote: Remote,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// Extension: the request body's receiving half (until it ends), the response body's
    /// sending half.
    Ext {
        stream: StreamNo,
        recv: Option<RecvFlow>,
        send: SendFlow,
        head_sent: bool,
    },
    /// Reference request: the response is collected whole.
    RefHttp {
        head: Option<(u16, Headers)>,
        body: Vec<u8>,
    },
    /// Reference event stream: the local SSE body is decoded into `SSE_EVENT`s.
    RefSse { decoder: Option<SseDecoder> },
}

impl TunnelClient {
    fn open(&mut self, remote: Remote, kind: Kind) -> Option<LocalRequest> {
        if self.by_remote.contains_key(&remote) {
            self.event(ClientEvent::ProtocolViolation {
                reason: "a stream id already open",
            });
            return None;
        }
        let request = self.mint();
        self.by_remote.insert(remote.clone(), request);
        self.streams.insert(request, Stream { remote, kind });
        Some(request)
    }

    fn close_stream(&mut self, request: LocalRequest) {
        if let Some(s) = self.streams.remove(&request) {
            self.by_remote.remove(&s.remote);
        }
    }

    fn full(&self) -> bool {
        self.streams.len() >= self.config.max_streams
    }

    // ---- extension frames ----

    pub(super) fn on_request_head(&mut self, h: RequestHead) {
        if self.full() || !h.path.starts_with('/') {
            let status = if self.full() { 503 } else { 400 };
            return self.send(&Message::ResponseHead(ResponseHead {
                stream: h.stream,
                status,
                headers: Vec::new(),
                end: true,
            }));
        }
        let kind = Kind::Ext {
            stream: h.stream,
            recv: (!h.end).then(|| RecvFlow::new(self.config.window)),
            send: SendFlow::new(self.peer_window),
            head_sent: false,
        };
        if let Some(request) = self.open(Remote::Ext(h.stream), kind) {
            self.push(ClientOutput::StartLocalRequest {
                request,
                method: h.method,
                path: h.path,
                headers: h.headers,
                body: !h.end,
            });
        }
    }

    pub(super) fn on_data(&mut self, data: DataFrame) {
        // A frame for a stream that ended or was reset crossed our RESET: dropped.
        let Some(&request) = self.by_remote.get(&Remote::Ext(data.stream)) else {
            return;
        };
        let Some(Stream {
            kind: Kind::Ext { recv, .. },
            ..
        }) = self.streams.get_mut(&request)
        else {
            return;
        };
        let verdict = match recv.as_mut() {
            None => Err("request body after its end"),
            Some(flow) => flow.receive(data.payload.len()).map_err(|v| v.reason()),
        };
        if data.end {
            *recv = None;
        }
        if let Err(reason) = verdict {
            return self.reset(request, data.stream, reason);
        }
        if !data.payload.is_empty() {
            self.push(ClientOutput::RequestBodyChunk {
                request,
                bytes: data.payload,
            });
        }
        if data.end {
            self.push(ClientOutput::RequestBodyEnd { request });
        }
    }

    pub(super) fn on_window(&mut self, w: Window) {
        let Some(&request) = self.by_remote.get(&Remote::Ext(w.stream)) else {
            return;
        };
        let Some(Stream {
            kind: Kind::Ext { send, .. },
            ..
        }) = self.streams.get_mut(&request)
        else {
            return;
        };
        match send.grant(w.increment) {
            Ok(()) => self.flush(request),
            Err(v) => self.reset(request, w.stream, v.reason()),
        }
    }

    pub(super) fn on_reset(&mut self, r: Reset) {
        if let Some(&request) = self.by_remote.get(&Remote::Ext(r.stream)) {
            self.close_stream(request);
            self.push(ClientOutput::CancelLocalRequest { request });
        }
    }

    /// Resets an extension stream for a rule the relay broke.
    fn reset(&mut self, request: LocalRequest, stream: StreamNo, reason: &'static str) {
        self.event(ClientEvent::ProtocolViolation { reason });
        self.send(&Message::Reset(Reset {
            stream,
            reason: Some(reason.into()),
        }));
        self.close_stream(request);
        self.push(ClientOutput::CancelLocalRequest { request });
    }

    /// Sends what the credit allows of an extension response, tells the driver how much more
    /// it may feed, and forgets the stream once the body's end is out.
    fn flush(&mut self, request: LocalRequest) {
        let Some(Stream {
            kind:
                Kind::Ext {
                    stream,
                    send,
                    head_sent: true,
                    ..
                },
            ..
        }) = self.streams.get_mut(&request)
        else {
            return;
        };
        let stream = *stream;
        let mut frames = Vec::new();
        while let Some(frame) = send.next_frame(stream) {
            frames.push(frame);
        }
        let credit = send.allowance();
        let finished = send.is_finished();
        for frame in frames {
            self.push(ClientOutput::Send(crate::tunnel::WsFrame::Binary(frame)));
        }
        if finished {
            self.close_stream(request);
        } else if let Some(bytes) = credit {
            self.push(ClientOutput::ResponseCredit { request, bytes });
        }
    }

    // ---- reference frames ----

    pub(super) fn on_http_request(&mut self, r: HttpRequest) {
        if self.full() {
            return self.send(&error_response(r.request_id, 503, "too many requests"));
        }
        let kind = Kind::RefHttp {
            head: None,
            body: Vec::new(),
        };
        let Some(request) = self.open(Remote::Request(r.request_id), kind) else {
            return;
        };
        self.push(ClientOutput::StartLocalRequest {
            request,
            method: r.method,
            path: if r.path.is_empty() {
                "/".into()
            } else {
                r.path
            },
            headers: r.headers,
            body: r.body.is_some(),
        });
        if let Some(body) = r.body {
            if !body.is_empty() {
                self.push(ClientOutput::RequestBodyChunk {
                    request,
                    bytes: body.into_bytes(),
                });
            }
            self.push(ClientOutput::RequestBodyEnd { request });
        }
    }

    pub(super) fn on_sse_open(&mut self, o: SseOpen) {
        if self.full() {
            return self.send(&Message::SseEnd(SseStream {
                stream_id: o.stream_id,
            }));
        }
        let kind = Kind::RefSse { decoder: None };
        if let Some(request) = self.open(Remote::Sse(o.stream_id), kind) {
            self.push(ClientOutput::StartLocalRequest {
                request,
                method: "GET".into(),
                path: o.path,
                headers: vec![("accept".into(), "text/event-stream".into())],
                body: false,
            });
        }
    }

    pub(super) fn on_sse_close(&mut self, c: SseStream) {
        if let Some(&request) = self.by_remote.get(&Remote::Sse(c.stream_id)) {
            self.close_stream(request);
            self.push(ClientOutput::CancelLocalRequest { request });
        }
    }

    // ---- local inputs ----

    fn stream_mut(&mut self, request: LocalRequest) -> Result<&mut Stream, TunnelUsageError> {
        self.streams
            .get_mut(&request)
            .ok_or(TunnelUsageError::UnknownRequest(request.0))
    }

    pub(super) fn response_head(
        &mut self,
        request: LocalRequest,
        status: u16,
        headers: Headers,
    ) -> Result<(), TunnelUsageError> {
        let cap = self.config.reference_body_cap as u64;
        let max_event = self.config.reference_body_cap;
        let s = self.stream_mut(request)?;
        match (&mut s.kind, &s.remote) {
            (
                Kind::Ext {
                    head_sent: true, ..
                },
                _,
            )
            | (Kind::RefHttp { head: Some(_), .. }, _)
            | (Kind::RefSse { decoder: Some(_) }, _) => {
                Err(TunnelUsageError::InvalidState("a second response head"))
            }
            (
                Kind::Ext {
                    stream, head_sent, ..
                },
                _,
            ) => {
                *head_sent = true;
                let head = ResponseHead {
                    stream: *stream,
                    status,
                    headers: headers::forwardable(&headers),
                    end: false,
                };
                self.send(&Message::ResponseHead(head));
                self.flush(request);
                Ok(())
            }
            (Kind::RefHttp { head, .. }, _) => {
                *head = Some((status, headers));
                self.push(ClientOutput::ResponseCredit {
                    request,
                    bytes: cap + 1,
                });
                Ok(())
            }
            (Kind::RefSse { decoder }, _) if status == 200 => {
                *decoder = Some(SseDecoder::new(max_event));
                self.push(ClientOutput::ResponseCredit {
                    request,
                    bytes: SSE_CREDIT,
                });
                Ok(())
            }
            (Kind::RefSse { .. }, remote) => {
                // Not an event stream (an unknown task: 404): the subscription ends.
                let stream_id = remote_id(remote);
                self.close_stream(request);
                self.push(ClientOutput::CancelLocalRequest { request });
                self.send(&Message::SseEnd(SseStream { stream_id }));
                Ok(())
            }
        }
    }

    pub(super) fn response_chunk(
        &mut self,
        request: LocalRequest,
        bytes: Vec<u8>,
    ) -> Result<(), TunnelUsageError> {
        let cap = self.config.reference_body_cap;
        let s = self.stream_mut(request)?;
        match &mut s.kind {
            Kind::Ext {
                head_sent: false, ..
            }
            | Kind::RefHttp { head: None, .. }
            | Kind::RefSse { decoder: None } => Err(TunnelUsageError::InvalidState(
                "response body before its head",
            )),
            Kind::Ext { send, .. } => {
                send.push(bytes)
                    .map_err(|_| TunnelUsageError::NoCredit(request.0))?;
                self.flush(request);
                Ok(())
            }
            Kind::RefHttp { body, .. } => {
                body.extend_from_slice(&bytes);
                if body.len() > cap {
                    let id = remote_id(&s.remote);
                    self.close_stream(request);
                    self.push(ClientOutput::CancelLocalRequest { request });
                    let reason = "response too large for the reference tunnel";
                    self.send(&error_response(id, 502, reason));
                }
                Ok(())
            }
            Kind::RefSse {
                decoder: Some(decoder),
            } => {
                decoder.push(&bytes);
                let mut events = Vec::new();
                while let Some(event) = decoder.next_event() {
                    // An event over the cap is dropped by the decoder, as a delegator would.
                    if let Ok(event) = event {
                        events.push(event.data);
                    }
                }
                let stream_id = remote_id(&s.remote);
                for data in events {
                    self.send(&Message::SseEvent(SseEvent {
                        stream_id: stream_id.clone(),
                        data,
                    }));
                }
                if !bytes.is_empty() {
                    self.push(ClientOutput::ResponseCredit {
                        request,
                        bytes: bytes.len() as u64,
                    });
                }
                Ok(())
            }
        }
    }

    pub(super) fn response_end(&mut self, request: LocalRequest) -> Result<(), TunnelUsageError> {
        let s = self.stream_mut(request)?;
        match &mut s.kind {
            Kind::Ext {
                head_sent: false, ..
            }
            | Kind::RefHttp { head: None, .. }
            | Kind::RefSse { decoder: None } => Err(TunnelUsageError::InvalidState(
                "response end before its head",
            )),
            Kind::Ext { send, .. } => {
                send.finish();
                self.flush(request);
                Ok(())
            }
            Kind::RefHttp {
                head: Some((status, headers)),
                body,
            } => {
                let request_id = remote_id(&s.remote);
                let message = match String::from_utf8(std::mem::take(body)) {
                    Ok(text) => Message::HttpResponse(HttpResponse {
                        request_id,
                        status: *status,
                        headers: headers::forwardable(headers)
                            .into_iter()
                            .filter(|(n, _)| n != "content-length")
                            .collect(),
                        body: text,
                    }),
                    Err(_) => error_response(
                        request_id,
                        502,
                        "binary response through the reference tunnel",
                    ),
                };
                self.close_stream(request);
                self.send(&message);
                Ok(())
            }
            Kind::RefSse { .. } => {
                let stream_id = remote_id(&s.remote);
                self.close_stream(request);
                self.send(&Message::SseEnd(SseStream { stream_id }));
                Ok(())
            }
        }
    }

    pub(super) fn request_consumed(
        &mut self,
        request: LocalRequest,
        bytes: u64,
    ) -> Result<(), TunnelUsageError> {
        let s = self.stream_mut(request)?;
        if let Kind::Ext {
            stream,
            recv: Some(flow),
            ..
        } = &mut s.kind
        {
            if let Some(increment) = flow.consumed(bytes) {
                let stream = *stream;
                self.send(&Message::Window(Window { stream, increment }));
            }
        }
        Ok(())
    }

    pub(super) fn local_failed(
        &mut self,
        request: LocalRequest,
        reason: String,
    ) -> Result<(), TunnelUsageError> {
        let s = self.stream_mut(request)?;
        let message = match &s.kind {
            Kind::Ext { stream, .. } => Message::Reset(Reset {
                stream: *stream,
                reason: Some(reason),
            }),
            Kind::RefHttp { .. } => error_response(remote_id(&s.remote), 500, &reason),
            Kind::RefSse { .. } => Message::SseEnd(SseStream {
                stream_id: remote_id(&s.remote),
            }),
        };
        self.close_stream(request);
        self.send(&message);
        Ok(())
    }
}

/// A reference stream's id (the extension's number in decimal).
fn remote_id(remote: &Remote) -> String {
    match remote {
        Remote::Ext(n) => n.to_string(),
        Remote::Request(id) | Remote::Sse(id) => id.clone(),
    }
}

/// An `HTTP_RESPONSE` with `{"error": reason}`, as the reference answers its failures.
fn error_response(request_id: String, status: u16, reason: &str) -> Message {
    Message::HttpResponse(HttpResponse {
        request_id,
        status,
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: serde_json::json!({ "error": reason }).to_string(),
    })
}
