//! The relay's side of responses: what an executor sends on its streams, in both dialects,
//! turned into the public responses.

use crate::sse;
use crate::time::Timestamp;
use crate::tunnel::codec::DataFrame;
use crate::tunnel::frames::{
    HttpResponse, Message, Pong, Reset, ResponseHead, SseEvent, SseStream, StreamNo, Window,
};
use crate::tunnel::headers;
use crate::tunnel::ConnectionId;

use super::streams::{ref_stream, RKind, RStream};
use super::{Relay, RelayEvent, RelayOutput};

impl Relay {
    pub(super) fn on_message(
        &mut self,
        now: Timestamp,
        conn: ConnectionId,
        extension: bool,
        message: Message,
    ) {
        if !extension && !message.is_reference() {
            return self.event(RelayEvent::ProtocolViolation {
                conn,
                reason: "extension frame without the extension",
            });
        }
        match message {
            Message::Ping(p) => {
                if let (Some(id), true) = (p.id, extension) {
                    self.send(conn, &Message::Pong(Pong { id }));
                }
            }
            Message::Pong(p) => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.liveness.pong(p.id, now);
                }
            }
            Message::ResponseHead(h) => self.on_response_head(conn, h),
            Message::Window(w) => self.on_window(conn, w),
            Message::Reset(r) => {
                if let Some(s) = self.remove(conn, r.stream) {
                    self.fail_public(&s, "the executor reset the request");
                }
            }
            Message::HttpResponse(r) => self.on_http_response(conn, r),
            Message::SseEvent(e) => self.on_sse_event(conn, e),
            Message::SseEnd(e) => {
                let Some(stream) = ref_stream(&e.stream_id) else {
                    return;
                };
                if let Some(RStream {
                    kind: RKind::RefSse { .. },
                    ..
                }) = self.stream_mut(conn, stream)
                {
                    if let Some(s) = self.remove(conn, stream) {
                        self.push(RelayOutput::ResponseEnd { request: s.request });
                    }
                }
            }
            Message::Auth(_)
            | Message::AuthOk(_)
            | Message::AuthError(_)
            | Message::HttpRequest(_)
            | Message::SseOpen(_)
            | Message::SseClose(_)
            | Message::RequestHead(_) => self.event(RelayEvent::ProtocolViolation {
                conn,
                reason: "frame only a relay sends, or a second AUTH",
            }),
        }
    }

    /// Resets a stream for a rule the executor broke; its public request fails.
    fn violation(&mut self, conn: ConnectionId, stream: StreamNo, reason: &'static str) {
        self.event(RelayEvent::ProtocolViolation { conn, reason });
        self.send(
            conn,
            &Message::Reset(Reset {
                stream,
                reason: Some(reason.into()),
            }),
        );
        if let Some(s) = self.remove(conn, stream) {
            self.fail_public(&s, reason);
        }
    }

    /// The response of an extension stream is complete: the stream ends (a request body
    /// still open is reset: nobody reads it any more).
    fn response_done(&mut self, conn: ConnectionId, stream: StreamNo) {
        let Some(s) = self.remove(conn, stream) else {
            return;
        };
        if let RKind::Ext { send: Some(_), .. } = s.kind {
            self.send(
                conn,
                &Message::Reset(Reset {
                    stream,
                    reason: Some("response complete".into()),
                }),
            );
        }
    }

    fn on_response_head(&mut self, conn: ConnectionId, h: ResponseHead) {
        let Some(s) = self.stream_mut(conn, h.stream) else {
            return;
        };
        let RKind::Ext { head_in, .. } = &mut s.kind else {
            return self.violation(conn, h.stream, "HTTP_RESPONSE_HEAD on a reference stream");
        };
        if *head_in {
            return self.violation(conn, h.stream, "a second HTTP_RESPONSE_HEAD");
        }
        if !(200..=599).contains(&h.status) {
            return self.violation(conn, h.stream, "response status out of range");
        }
        *head_in = true;
        s.head_out = true;
        let request = s.request;
        self.push(RelayOutput::ResponseHead {
            request,
            status: h.status,
            headers: headers::forwardable(&h.headers),
            end: h.end,
        });
        if h.end {
            self.response_done(conn, h.stream);
        }
    }

    pub(super) fn on_data(&mut self, conn: ConnectionId, data: DataFrame) {
        // A frame for a stream that ended crossed our RESET: dropped.
        let Some(s) = self.stream_mut(conn, data.stream) else {
            return;
        };
        let request = s.request;
        let verdict = match &mut s.kind {
            RKind::Ext { head_in: false, .. } | RKind::RefHttp { .. } | RKind::RefSse { .. } => {
                Err("response body before its head")
            }
            RKind::Ext { recv, .. } => recv.receive(data.payload.len()).map_err(|v| v.reason()),
        };
        if let Err(reason) = verdict {
            return self.violation(conn, data.stream, reason);
        }
        if !data.payload.is_empty() {
            self.push(RelayOutput::ResponseBody {
                request,
                bytes: data.payload,
            });
        }
        if data.end {
            self.push(RelayOutput::ResponseEnd { request });
            self.response_done(conn, data.stream);
        }
    }

    fn on_window(&mut self, conn: ConnectionId, w: Window) {
        let Some(s) = self.stream_mut(conn, w.stream) else {
            return;
        };
        let verdict = match &mut s.kind {
            RKind::Ext {
                send: Some(send), ..
            } => send.grant(w.increment).map_err(|v| v.reason()),
            // The body ended: a late grant is harmless.
            RKind::Ext { send: None, .. } => return,
            RKind::RefHttp { .. } | RKind::RefSse { .. } => Err("WINDOW on a reference stream"),
        };
        match verdict {
            Ok(()) => self.flush_request(conn, w.stream),
            Err(reason) => self.violation(conn, w.stream, reason),
        }
    }

    fn on_http_response(&mut self, conn: ConnectionId, r: HttpResponse) {
        let Some(stream) = ref_stream(&r.request_id) else {
            return;
        };
        let max_buffered = self.config.max_buffered_bytes;
        let committed = self.committed(conn);
        let Some(s) = self.stream_mut(conn, stream) else {
            // The public client went away: the answer is dropped.
            return;
        };
        if !matches!(s.kind, RKind::RefHttp { collecting: None }) {
            return self.event(RelayEvent::ProtocolViolation {
                conn,
                reason: "HTTP_RESPONSE for a request not sent",
            });
        }
        let Some(s) = self.remove(conn, stream) else {
            return;
        };
        let request = s.request;
        if !(200..=599).contains(&r.status) {
            return self.refuse(request, 502, "the executor answered an invalid status");
        }
        if committed + r.body.len() as u64 > max_buffered {
            return self.refuse(
                request,
                502,
                "the executor's response is over the buffer limit",
            );
        }
        let headers = headers::forwardable(&r.headers)
            .into_iter()
            .filter(|(n, _)| n != "content-length")
            .collect();
        let end = r.body.is_empty();
        self.push(RelayOutput::ResponseHead {
            request,
            status: r.status,
            headers,
            end,
        });
        if !end {
            self.push(RelayOutput::ResponseBody {
                request,
                bytes: r.body.into_bytes(),
            });
            self.push(RelayOutput::ResponseEnd { request });
        }
    }

    fn on_sse_event(&mut self, conn: ConnectionId, e: SseEvent) {
        let Some(stream) = ref_stream(&e.stream_id) else {
            return;
        };
        let (per_stream, max_buffered) = (
            self.config.reference_stream_buffer,
            self.config.max_buffered_bytes,
        );
        let bytes = sse::encode_data(&e.data).into_bytes();
        let committed = self.committed(conn) + bytes.len() as u64;
        let Some(s) = self.stream_mut(conn, stream) else {
            return;
        };
        let RKind::RefSse { unwritten } = &mut s.kind else {
            return self.event(RelayEvent::ProtocolViolation {
                conn,
                reason: "SSE_EVENT for a request that is not an event stream",
            });
        };
        *unwritten += bytes.len() as u64;
        let request = s.request;
        if *unwritten > per_stream || committed > max_buffered {
            // A subscriber too slow to keep up: cut it off; it reconnects and resumes.
            self.remove(conn, stream);
            self.push(RelayOutput::ResponseAbort { request });
            return self.send(
                conn,
                &Message::SseClose(SseStream {
                    stream_id: stream.to_string(),
                }),
            );
        }
        self.push(RelayOutput::ResponseBody { request, bytes });
    }
}
