//! Request bodies of the executor's HTTP surface: the first bytes of a message looked at for
//! its delegation id (the engine then chooses its limit), the limit enforced while reading,
//! and refusals that discard what the client is still sending.
//!
//! A client that writes its whole body before reading (Node's fetch, so the reference
//! delegator) sees a connection closed under an upload as a reset and never reads the answer
//! ("fetch failed"). So a refused body is read and dropped, up to the authenticated limit and
//! within the server's body-read allowance, before the answer ends: a refusal from the
//! headers sends its status at once and ends its body once the upload is discarded
//! ([`refusal`]); a body found too long while it is read is discarded before the reader sees
//! the error ([`Capped`]). Past the authenticated limit nothing is discarded any more: the
//! connection is closed.

use std::pin::Pin;
use std::task::{Context, Poll};

use awcp_proto::engine::auth::{DelegationIdScanner, Scan};
use awcp_proto::DelegationId;
use bytes::Bytes;
use futures::StreamExt;
use http_body::{Body, Frame};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::BodyExt;

use crate::net::{BoxError, ResponseBody};

/// A request body, boxed once (every body of the surface is read through it).
pub(super) type BoxBody = UnsyncBoxBody<Bytes, BoxError>;

/// Boxes a request body.
pub(super) fn boxed<B>(body: B) -> BoxBody
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

fn data_len(frame: &Frame<Bytes>) -> u64 {
    frame.data_ref().map_or(0, |d| d.len() as u64)
}

/// Reads the first bytes of `body` until they name a delegation or cannot (at most `peek`
/// bytes are looked at; the last piece read may go past them). Returns what was read, to be
/// put back in front of the rest ([`Prefixed`]), and the delegation id found.
pub(super) async fn peek_delegation(
    body: &mut BoxBody,
    peek: u64,
) -> Result<(Bytes, Option<DelegationId>), BoxError> {
    let mut scanner = DelegationIdScanner::new(peek);
    let mut read = Vec::new();
    let found = loop {
        let Some(frame) = body.frame().await else {
            break scanner.finish();
        };
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        read.extend_from_slice(&data);
        match scanner.feed(&data) {
            Scan::More => {}
            decided @ (Scan::Found(_) | Scan::Absent) => break decided,
        }
    };
    let id = match found {
        Scan::Found(id) => Some(id),
        Scan::Absent | Scan::More => None,
    };
    Ok((Bytes::from(read), id))
}

/// A body whose first bytes were already read: they come first, then the rest.
pub(super) struct Prefixed {
    prefix: Option<Bytes>,
    rest: BoxBody,
}

impl Prefixed {
    pub(super) fn new(prefix: Bytes, rest: BoxBody) -> Self {
        Prefixed {
            prefix: (!prefix.is_empty()).then_some(prefix),
            rest,
        }
    }
}

impl Body for Prefixed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Some(p) = this.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(p))));
        }
        Pin::new(&mut this.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.rest.is_end_stream()
    }
}

/// The error a [`Capped`] body ends with once it ran over its limit.
#[derive(Debug, thiserror::Error)]
#[error("the body exceeds its limit of {0} bytes")]
pub(super) struct TooLarge(pub(super) u64);

/// A body read up to `limit` bytes. Past it, the rest is read and dropped (up to `cap` bytes
/// in all) before the reader gets [`TooLarge`], so the refusal it answers with reaches a
/// client that is still sending.
pub(super) struct Capped {
    inner: BoxBody,
    limit: u64,
    cap: u64,
    read: u64,
    over: bool,
    ended: bool,
}

impl Capped {
    pub(super) fn new(inner: BoxBody, limit: u64, cap: u64) -> Self {
        Capped {
            inner,
            limit,
            cap: cap.max(limit),
            read: 0,
            over: false,
            ended: false,
        }
    }
}

impl Body for Capped {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        loop {
            // Past the limit: discard until the body ends (or fails, or passes the cap).
            if this.over && this.read > this.cap {
                this.ended = true;
                return Poll::Ready(Some(Err(TooLarge(this.limit).into())));
            }
            let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) if this.over => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(TooLarge(this.limit).into())));
                }
                Poll::Ready(None) => {
                    this.ended = true;
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(e))) => {
                    this.ended = true;
                    let e = if this.over {
                        TooLarge(this.limit).into()
                    } else {
                        e
                    };
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(Some(Ok(frame))) => frame,
            };
            this.read = this.read.saturating_add(data_len(&frame));
            if this.read > this.limit {
                this.over = true;
                continue;
            }
            return Poll::Ready(Some(Ok(frame)));
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || (!self.over && self.inner.is_end_stream())
    }
}

/// Reads `body` to its end and drops it, stopping after `cap` bytes (or when it fails: the
/// server's body-read allowance ends a stalled one).
async fn discard(mut body: BoxBody, cap: u64) {
    let mut read = 0u64;
    while let Some(Ok(frame)) = body.frame().await {
        read = read.saturating_add(data_len(&frame));
        if read > cap {
            break;
        }
    }
}

/// A refusal `(status, JSON)` of a request whose body (`None`: it has none) is not wanted.
/// The status and the JSON are sent at once; the response ends once the body, announced as
/// `announced` bytes, has been read and dropped (up to `cap`: a body announced larger is not
/// waited for, and its connection is closed under it).
pub(super) fn refusal(
    (status, text): (u16, String),
    body: Option<BoxBody>,
    announced: Option<u64>,
    cap: u64,
) -> http::Response<ResponseBody> {
    let body = match body {
        Some(b) if announced.is_none_or(|n| n <= cap) => b,
        Some(_) | None => return crate::net::json_response(status, text),
    };
    let answer = futures::stream::once(std::future::ready(Ok::<_, BoxError>(Frame::data(
        Bytes::from(text),
    ))));
    let drained = futures::stream::once(discard(body, cap))
        .filter_map(|()| std::future::ready(None::<Result<Frame<Bytes>, BoxError>>));
    http::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(BodyExt::boxed_unsync(http_body_util::StreamBody::new(
            answer.chain(drained),
        )))
        .expect("static headers are valid")
}
