//! The executor's HTTP surface (WIRE.md §1, §4, §5), runtime-neutral: a function from an
//! `http::Request` to an `http::Response`, mounted by awcp-tokio (axum) and awcp-smol (hyper).
//!
//! Routes, relative to the host root:
//! `POST /awcp`, `GET /awcp/tasks/{id}/events`, `GET /awcp/tasks/{id}/result`,
//! `POST /awcp/tasks/{id}/ack`, `POST /awcp/cancel/{id}`, `GET /awcp/status`,
//! `GET /awcp/tasks/{id}/snapshots/{sid}` (URL-mode snapshots of our own peers),
//! `GET /.well-known/agent-card.json` and `/.well-known/agent.json`, and the dashboard under
//! `/ui/` (tasks, leases, agents' output; its own sign-in: [`dashboard`]).
//!
//! With auth on, every request is first judged on its headers alone
//! ([`awcp_proto::engine::auth::check_headers`]): a wrong credential, or an unauthenticated
//! body over the small unauthenticated limit, is answered before a byte of the body is kept.
//! A message (`POST /awcp`) without a credential header that may be larger is the exception:
//! its first bytes are read for the delegation id and the engine chooses its limit
//! ([`awcp_proto::Executor::message_body_limit`]), so a reference delegator's START (its
//! credential was in INVITE's `auth` only) is read whole. A refused body is discarded before
//! the answer ends ([`bodies`]), so a client still sending reads the refusal. Which
//! credential authorises which request is the engine's decision
//! ([`awcp_proto::engine::auth`]). Requests only a web browser would send (an `Origin`
//! header, a body that is not JSON) are refused first ([`wire_http::refuse_browser_request`]).

mod bodies;
mod dashboard;

use std::io::Read;

use awcp_proto::engine::auth::{check_headers, Credential, Endpoint, HeaderVerdict, Presented};
use awcp_proto::engine::executor::Request;
use awcp_proto::http_binding as wire_http;
use awcp_proto::wire::divert::{attach_diverted_archive, ArchiveTextDiverter};
use awcp_proto::ErrorInfo;
use awcp_proto::{decode_message_owned, sse, DelegationId};
use bytes::Bytes;
use futures::StreamExt;
use http::{Method, StatusCode};
use http_body_util::BodyExt;

use self::bodies::BoxBody;
use super::{Cmd, ExecutorHandle};
use crate::incoming::{receive_diverted, ReceiveError};
use crate::net::{json_response, ResponseBody};

pub use awcp_proto::http_binding::SNAPSHOT_ROUTE;

fn reply((status, body): (u16, String)) -> http::Response<ResponseBody> {
    json_response(status, body)
}

fn header<'a, B>(req: &'a http::Request<B>, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// The credential the request's headers present (a header that is not ASCII is unsupported,
/// never ignored).
fn presented<B>(req: &http::Request<B>) -> Presented {
    let opaque = |name| req.headers().get(name).is_some_and(|v| v.to_str().is_err());
    if opaque("authorization") || opaque("x-api-key") {
        return Presented::Unsupported("(not ASCII)".into());
    }
    wire_http::presented_credential(header(req, "authorization"), header(req, "x-api-key"))
}

/// The announced body length (`None` if absent or unreadable: the limit still applies while
/// reading).
fn content_length<B>(req: &http::Request<B>) -> Option<u64> {
    header(req, "content-length").and_then(|v| v.trim().parse().ok())
}

/// Reads a whole request body into one buffer, sized from `Content-Length` when announced
/// (within `limit`): a large body is copied once, as it arrives, instead of being gathered in
/// pieces and then joined (which held it twice).
async fn collect_body<B>(
    body: B,
    announced: Option<u64>,
    limit: u64,
) -> Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut body = std::pin::pin!(body);
    let cap = announced.unwrap_or(0).min(limit);
    let mut out = Vec::with_capacity(usize::try_from(cap).unwrap_or(0));
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.map_err(Into::into)?.into_data() {
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

/// Bodies announced larger than this (or of unknown length) are read through an
/// [`ArchiveTextDiverter`]: START's inline archive goes to a file as it arrives.
const DIVERT_FROM: u64 = 1 << 20;

fn parse_id(s: &str) -> Result<DelegationId, http::Response<ResponseBody>> {
    DelegationId::new(s).map_err(|e| reply(wire_http::reject_invalid_id(e)))
}

impl ExecutorHandle {
    /// Answers one HTTP request. Never panics; malformed input gets an ERROR body with a code
    /// and a hint, never an internal error text.
    pub async fn handle_http<B>(&self, req: http::Request<B>) -> http::Response<ResponseBody>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let public_url = self.public_url();
        let origin = public_url
            .clone()
            .or_else(|| agent_rt::origin::request_origin(&req, self.opts.trust_forwarded_headers));
        let segs: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
        let endpoint = match segs.as_slice() {
            ["awcp"] => Endpoint::Message,
            ["awcp", "status"] => Endpoint::Status,
            ["awcp", ..] => Endpoint::Delegation,
            _ => Endpoint::Public,
        };
        // The dashboard (`/ui/…`) has its own sign-in and browser rules.
        let is_ui = segs.first() == Some(&"ui");
        // Without a credential, a `Host` that names someone else's domain is a DNS-rebinding
        // web page's request (which need not carry an `Origin`).
        if self.opts.auth.is_none() {
            let host = match req.headers().get("host") {
                // Present but not text: no name of ours.
                Some(v) => Some(v.to_str().unwrap_or("\u{0}")),
                None => req.uri().authority().map(|a| a.as_str()),
            };
            if let Some((status, error)) = wire_http::refuse_foreign_host(
                host,
                public_url.as_deref(),
                &self.opts.allowed_hosts,
                endpoint == Endpoint::Public && !is_ui,
            ) {
                return reply(wire_http::reject(status, None, error));
            }
        }
        if is_ui {
            return self.dashboard(req, origin).await;
        }
        let has_body = req.headers().contains_key("transfer-encoding")
            || content_length(&req).is_some_and(|n| n > 0)
            || (req.headers().contains_key("content-length") && content_length(&req).is_none());
        if let Some((status, error)) = wire_http::refuse_browser_request(
            header(&req, "origin"),
            header(&req, "content-type"),
            has_body,
            endpoint == Endpoint::Public,
        ) {
            return reply(wire_http::reject(status, None, error));
        }
        let presented = presented(&req);
        // A request without `Content-Length` or `Transfer-Encoding` has no body.
        let announced = if has_body {
            content_length(&req)
        } else {
            Some(0)
        };
        let verdict = check_headers(
            self.opts.auth.as_ref(),
            endpoint,
            &presented,
            announced,
            self.opts.limits,
        );
        let credential = presented.into_credential();
        // A resuming subscriber's last event (WIRE.md §4.6); not a number of ours: none.
        let last_event_id = header(&req, "last-event-id").and_then(sse::parse_event_id);
        let mut body = bodies::boxed(req.into_body());
        // Past the authenticated limit a refused body is not discarded any more.
        let cap = self.opts.limits.max;
        let body_limit = match verdict {
            HeaderVerdict::Proceed { body_limit } => body_limit,
            HeaderVerdict::Refuse { status, error } => {
                let rejection = wire_http::reject(status, None, error);
                return bodies::refusal(rejection, has_body.then_some(body), announced, cap);
            }
            HeaderVerdict::Peek { peek } => {
                let (prefix, id) = match bodies::peek_delegation(&mut body, peek).await {
                    Ok(p) => p,
                    Err(_) => return reply(wire_http::reject_unreadable_body()),
                };
                match self
                    .message_body_limit(id, credential.clone(), announced)
                    .await
                {
                    Some(Ok(limit)) => {
                        body = bodies::Prefixed::new(prefix, body).boxed_unsync();
                        limit
                    }
                    Some(Err((status, error))) => {
                        let rejection = wire_http::reject(status, None, error);
                        return bodies::refusal(rejection, Some(body), announced, cap);
                    }
                    None => return unavailable(),
                }
            }
        };
        match (method.clone(), segs.as_slice()) {
            (Method::GET, [".well-known", "agent-card.json" | "agent.json"]) => json_response(
                200,
                self.opts
                    .card
                    .to_json(origin.as_deref(), self.opts.auth.is_some())
                    .to_string(),
            ),
            (Method::GET, []) => json_response(
                200,
                self.opts
                    .card
                    .root_document(origin.as_deref(), self.opts.auth.is_some())
                    .to_string(),
            ),
            (Method::POST, ["awcp"]) => {
                self.post_message(body, announced, credential, origin, body_limit)
                    .await
            }
            (Method::GET, ["awcp", "status"]) => match self.status().await {
                Some(s) => json_response(200, wire_http::status_to_value(&s).to_string()),
                None => unavailable(),
            },
            (Method::GET, ["awcp", "tasks", id, "events"]) => match parse_id(id) {
                Ok(id) => self.event_stream(id, credential, last_event_id).await,
                Err(r) => r,
            },
            (Method::GET, ["awcp", "tasks", id, "result"]) => {
                self.simple(id, credential, Request::Result).await
            }
            (Method::POST, ["awcp", "tasks", id, "ack"]) => {
                self.simple(id, credential, Request::Ack).await
            }
            (Method::POST, ["awcp", "cancel", id]) => {
                self.simple(id, credential, Request::Cancel).await
            }
            (Method::GET, ["awcp", "tasks", id, "snapshots", sid]) => {
                self.snapshot_file(id, sid, credential).await
            }
            (_, ["awcp", ..]) | (_, [".well-known", ..]) => {
                reply(wire_http::reject_route(405, method.as_str(), &path))
            }
            _ => reply(wire_http::reject_route(404, method.as_str(), &path)),
        }
    }

    fn public_url(&self) -> Option<String> {
        self.opts
            .public_url
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    async fn simple(
        &self,
        id: &str,
        credential: Option<Credential>,
        make: fn(DelegationId) -> Request,
    ) -> http::Response<ResponseBody> {
        let id = match parse_id(id) {
            Ok(id) => id,
            Err(r) => return r,
        };
        match self.request(credential, make(id)).await {
            Some(resp) => match wire_http::encode_response_split(&resp) {
                // A result whose snapshot is a file: written from it as the body is sent.
                Some((status, split)) => split_response(status, split),
                None => reply(wire_http::encode_response(&resp)),
            },
            None => unavailable(),
        }
    }

    /// Which body limit applies to a message without a credential header whose first bytes
    /// name `id` (the engine's decision: `Err` carries the HTTP status and error).
    async fn message_body_limit(
        &self,
        id: Option<DelegationId>,
        credential: Option<Credential>,
        announced: Option<u64>,
    ) -> Option<Result<u64, (u16, ErrorInfo)>> {
        let (verdict, answer) = futures::channel::oneshot::channel();
        self.tx
            .unbounded_send(Cmd::MessageBodyLimit {
                id,
                credential,
                announced,
                limits: self.opts.limits,
                verdict,
            })
            .ok()?;
        answer.await.ok()
    }

    async fn post_message(
        &self,
        body: BoxBody,
        announced: Option<u64>,
        credential: Option<Credential>,
        origin: Option<String>,
        limit: u64,
    ) -> http::Response<ResponseBody> {
        // Past `limit` the rest is discarded (up to the authenticated limit) before the
        // refusal, so a client still sending reads it.
        let body = bodies::Capped::new(body, limit, self.opts.limits.max);
        let over_limit =
            |e: &(dyn std::error::Error + 'static)| e.downcast_ref::<bodies::TooLarge>().is_some();
        // A limit above the unauthenticated one was granted for a credential: a header, or a
        // delegation whose binding stands for one.
        let unauthenticated = self.opts.limits.unauthenticated.min(self.opts.limits.max);
        let authenticated = credential.is_some() || limit > unauthenticated;
        let refuse_size = || {
            let (status, error) = awcp_proto::engine::auth::body_over_limit(
                self.opts.auth.as_ref(),
                authenticated,
                limit,
            );
            reply(wire_http::reject(status, None, error))
        };
        // A large body (an inline archive) is split as it arrives: the archive to a file, the
        // rest kept. A small one is read whole.
        let (bytes, archive_file) = if announced.is_none_or(|n| n > DIVERT_FROM) {
            let div = ArchiveTextDiverter::new(usize::try_from(limit).unwrap_or(usize::MAX));
            // The body's limit (archive text included) is the `Capped` wrapper's.
            let dir = self.opts.downloads.clone();
            match receive_diverted(body, div, u64::MAX, dir, ".awcp-start-").await {
                Ok(r) => r,
                Err(ReceiveError::Body(e)) if over_limit(&*e) => return refuse_size(),
                Err(ReceiveError::Body(_)) => return reply(wire_http::reject_unreadable_body()),
                Err(ReceiveError::Archive(why)) => {
                    return reply(wire_http::reject_bad_inline_archive(&why))
                }
                Err(ReceiveError::Local(why)) => {
                    tracing::warn!("receiving an inline archive: {why}");
                    return reply(wire_http::reject_archive_not_stored(&why));
                }
            }
        } else {
            match collect_body(body, announced, limit).await {
                Ok(b) => (b, None),
                Err(e) if over_limit(&*e) => return refuse_size(),
                Err(_) => return reply(wire_http::reject_unreadable_body()),
            }
        };
        let discard = |f: &Option<crate::incoming::Received>| {
            if let Some(f) = f {
                let _ = std::fs::remove_file(&f.path);
            }
        };
        // The body can be as large as an inline archive: START's archive text is decoded in
        // the body's own buffer, not copied out of it.
        let (mut msg, dialect) = match decode_message_owned(bytes) {
            Ok(m) => m,
            Err((e, bytes)) => {
                discard(&archive_file);
                return reply(wire_http::reject_malformed_body(&bytes, &e));
            }
        };
        if let Some(f) = &archive_file {
            if !attach_diverted_archive(&mut msg, &f.path.to_string_lossy(), Some(&f.sha256)) {
                discard(&archive_file);
            }
        }
        // The engine binds the origin to the delegation if it accepts the message (a request
        // that fails authentication changes nothing) and prefers a configured public URL. The
        // executor's loop deletes an archive file the engine does not set up from.
        match self
            .request_from(credential, Request::Message(Box::new(msg), dialect), origin)
            .await
        {
            Some(resp) => reply(wire_http::encode_response(&resp)),
            None => {
                discard(&archive_file);
                unavailable()
            }
        }
    }

    async fn event_stream(
        &self,
        id: DelegationId,
        credential: Option<Credential>,
        last_event_id: Option<u64>,
    ) -> http::Response<ResponseBody> {
        let feed = match self.subscribe(id.clone(), credential, last_event_id).await {
            Some(Ok(feed)) => feed,
            Some(Err(e)) => return reply(wire_http::reject(401, Some(&id), e)),
            None => return unavailable(),
        };
        let keepalive = self.opts.keepalive;
        let sleep = self.opts.sleep.clone();
        let ticker = move |d| sleep(d);
        let super::EventFeed { events, cut } = feed;
        // Merge events with keepalive comments: whichever comes first. The queue's end is the
        // stream's: clean, or broken when the loop cut it off.
        let stream = futures::stream::unfold(
            (events, Some(ticker(keepalive))),
            move |(mut events, mut tick)| {
                let ticker = ticker.clone();
                let cut = cut.clone();
                async move {
                    let t = tick.take()?;
                    match futures::future::select(events.next(), t).await {
                        futures::future::Either::Left((Some(b), t)) => {
                            Some((Ok(b), (events, Some(t))))
                        }
                        futures::future::Either::Left((None, _)) => {
                            if cut.load(std::sync::atomic::Ordering::Acquire) {
                                let why: crate::net::BoxError =
                                    "the subscriber stopped reading its event stream".into();
                                Some((Err(why), (events, None)))
                            } else {
                                None
                            }
                        }
                        futures::future::Either::Right((_, _)) => Some((
                            Ok(super::StreamChunk::Text(Bytes::from_static(
                                sse::KEEPALIVE.as_bytes(),
                            ))),
                            (events, Some(ticker(keepalive))),
                        )),
                    }
                }
            },
        );
        // An event whose result is a file is written from it, in its place in the stream,
        // after its `id:` line.
        let stream = stream.flat_map(|chunk| match chunk {
            Ok(super::StreamChunk::Text(b)) => {
                futures::stream::once(std::future::ready(Ok(b))).boxed()
            }
            Ok(super::StreamChunk::Split(split, event_id)) => {
                let before = sse::data_prefix(event_id);
                match crate::outgoing::split_stream(split, &before, "\n\n") {
                    Some(s) => s.map(Ok).boxed(),
                    // The file is gone (dropped after ack or retention): nothing to send.
                    None => futures::stream::empty().boxed(),
                }
            }
            Err(e) => futures::stream::once(std::future::ready(Err(e))).boxed(),
        });
        let body = stream.map(|b| b.map(hyper::body::Frame::data));
        http::Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .header("connection", "keep-alive")
            .header("x-accel-buffering", "no")
            .body(BodyExt::boxed_unsync(http_body_util::StreamBody::new(body)))
            .expect("static headers are valid")
    }

    async fn snapshot_file(
        &self,
        id: &str,
        sid: &str,
        credential: Option<Credential>,
    ) -> http::Response<ResponseBody> {
        let id = match parse_id(id) {
            Ok(id) => id,
            Err(r) => return r,
        };
        // Who may download which snapshot is the engine's decision.
        match self
            .authorize_snapshot(id.clone(), sid.to_owned(), credential)
            .await
        {
            Some(Ok(())) => {}
            Some(Err((status, error))) => {
                return reply(wire_http::reject(status, Some(&id), error))
            }
            None => return unavailable(),
        }
        let path = self
            .snapshots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(id.to_string(), sid.to_owned()))
            .cloned();
        let Some(path) = path else {
            return reply(wire_http::reject_no_snapshot(&id, sid));
        };
        file_response(path)
    }
}

/// A JSON answer around a file's base64 (see [`crate::outgoing::split_stream`]).
fn split_response(status: u16, split: awcp_proto::SplitMessage) -> http::Response<ResponseBody> {
    let Ok(len) = std::fs::metadata(&split.file).map(|m| m.len()) else {
        return reply(wire_http::reject_file_gone());
    };
    let length = split.body_len(len);
    let Some(stream) = crate::outgoing::split_stream(split, "", "") else {
        return reply(wire_http::reject_file_gone());
    };
    let body = stream.map(|b| Ok::<_, crate::net::BoxError>(hyper::body::Frame::data(b)));
    http::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("content-length", length)
        .body(BodyExt::boxed_unsync(http_body_util::StreamBody::new(body)))
        .expect("static headers are valid")
}

/// A file as a response body, with flat memory: a small one whole, a larger one streamed by a
/// thread through a bounded channel.
pub(crate) fn file_response(path: std::path::PathBuf) -> http::Response<ResponseBody> {
    let Ok(mut f) = std::fs::File::open(&path) else {
        return reply(wire_http::reject_file_gone());
    };
    let len = f.metadata().map(|m| m.len()).ok();
    let b = http::Response::builder()
        .status(200)
        .header("content-type", "application/zip");
    // A small file (a tiny workspace's result) is read here in one go: no thread to start,
    // no 256 KiB buffer to zero.
    if let Some(l) = len.filter(|l| *l <= INLINE_FILE_MAX) {
        let mut data = Vec::with_capacity(l as usize);
        if f.read_to_end(&mut data).is_err() {
            return reply(wire_http::reject_file_gone());
        }
        return b
            .header("content-length", data.len())
            .body(crate::net::full(data))
            .expect("static headers are valid");
    }
    let (mut tx, rx) = futures::channel::mpsc::channel::<Bytes>(4);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            match f.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let chunk = Bytes::copy_from_slice(&buf[..n]);
                    if futures::executor::block_on(futures::SinkExt::send(&mut tx, chunk)).is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
    let b = match len {
        Some(l) => b.header("content-length", l),
        None => b,
    };
    b.body(crate::net::channel_body(rx))
        .expect("static headers are valid")
}

/// Files up to this size are answered from one read ([`file_response`]); larger ones are
/// streamed by a thread through a bounded channel (flat memory).
const INLINE_FILE_MAX: u64 = 64 * 1024;

fn unavailable() -> http::Response<ResponseBody> {
    reply(wire_http::reject_shutting_down())
}
