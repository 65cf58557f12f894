//! Body types and helpers shared by the client, the server and protocol handlers.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

use crate::runtime::BoxFuture;

/// A boxed error, as hyper and tower use.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body type of the responses protocol handlers build. A body that fails ends its
/// response without the end a complete one has (no terminating chunk, or short of its
/// `Content-Length`): the peer sees a broken response, never a clean end.
pub type ResponseBody = UnsyncBoxBody<Bytes, BoxError>;

/// A full body from bytes.
pub fn full(b: impl Into<Bytes>) -> ResponseBody {
    Full::new(b.into())
        .map_err(|never: Infallible| match never {})
        .boxed_unsync()
}

/// A JSON response.
pub fn json_response(status: u16, body: String) -> http::Response<ResponseBody> {
    http::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(full(body))
        .expect("static headers are valid")
}

/// A streaming body fed from a channel (SSE, file downloads).
pub fn channel_body(rx: futures::channel::mpsc::Receiver<Bytes>) -> ResponseBody {
    use futures::StreamExt;
    let stream = rx.map(|b| Ok::<_, BoxError>(Frame::data(b)));
    BodyExt::boxed_unsync(http_body_util::StreamBody::new(stream))
}

/// Why reading a body failed.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The connection failed or the peer sent a malformed body.
    #[error("{0}")]
    Hyper(#[from] hyper::Error),
    /// The body did not arrive within the server's body-read allowance
    /// ([`crate::server::ServerOptions::body_read_timeout`]).
    #[error("the request body did not arrive in time (allowance {0:?})")]
    Timeout(Duration),
    /// The body exceeded the reader's limit.
    #[error("the body exceeds {0} bytes")]
    TooLarge(u64),
    /// Another body error.
    #[error("{0}")]
    Other(String),
}

/// Reads a whole body, refusing more than `limit` bytes. A body that says it is larger (a
/// `Content-Length` over the limit, which hyper reports as the body's size hint) is refused
/// before a byte of it is read.
pub async fn read_body<B>(body: B, limit: u64) -> Result<Bytes, BodyError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    if body.size_hint().lower() > limit {
        return Err(BodyError::TooLarge(limit));
    }
    let limited = http_body_util::Limited::new(body, usize::try_from(limit).unwrap_or(usize::MAX));
    match limited.collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => Err(match e.downcast::<http_body_util::LengthLimitError>() {
            Ok(_) => BodyError::TooLarge(limit),
            Err(e) => match e.downcast::<BodyError>() {
                Ok(b) => *b,
                Err(e) => match e.downcast::<hyper::Error>() {
                    Ok(h) => BodyError::Hyper(*h),
                    Err(e) => BodyError::Other(e.to_string()),
                },
            },
        }),
    }
}

pub(crate) type SleepFn = Arc<dyn Fn(Duration) -> BoxFuture<()> + Send + Sync>;

/// How long a request body may take: `timeout` plus one second per `min_rate` bytes received.
#[derive(Clone)]
pub(crate) struct BodyAllowance {
    pub sleep: SleepFn,
    pub timeout: Duration,
    pub min_rate: u64,
}

/// The body of a request the [server](crate::server) hands to a handler: hyper's body with the
/// server's body-read allowance. A handler that rejects a request without reading its body
/// leaves it unread: hyper then drains what is already buffered or closes the connection,
/// so an unread body costs no memory.
pub struct RequestBody {
    inner: Incoming,
    allowance: Option<Allowance>,
    expired: bool,
}

struct Allowance {
    limits: BodyAllowance,
    started: Option<Instant>,
    received: u64,
    timer: Option<BoxFuture<()>>,
}

impl RequestBody {
    pub(crate) fn new(inner: Incoming, limits: Option<BodyAllowance>) -> Self {
        RequestBody {
            inner,
            allowance: limits.map(|limits| Allowance {
                limits,
                started: None,
                received: 0,
                timer: None,
            }),
            expired: false,
        }
    }
}

impl From<Incoming> for RequestBody {
    /// A body without a read allowance.
    fn from(inner: Incoming) -> Self {
        RequestBody::new(inner, None)
    }
}

impl std::fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestBody").finish_non_exhaustive()
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if this.expired {
            return Poll::Ready(None);
        }
        if let Some(a) = &mut this.allowance {
            a.started.get_or_insert_with(Instant::now);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(a), Some(d)) = (&mut this.allowance, frame.data_ref()) {
                    a.received += d.len() as u64;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(BodyError::Hyper(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let Some(a) = &mut this.allowance else {
                    return Poll::Pending;
                };
                loop {
                    let mut allowed = a.limits.timeout;
                    if a.limits.min_rate > 0 {
                        allowed +=
                            Duration::from_secs_f64(a.received as f64 / a.limits.min_rate as f64);
                    }
                    let elapsed = a.started.map(|s| s.elapsed()).unwrap_or_default();
                    if elapsed >= allowed {
                        this.expired = true;
                        return Poll::Ready(Some(Err(BodyError::Timeout(allowed))));
                    }
                    // The allowance only grows, so a timer set for an earlier allowance fires
                    // early at worst and is re-armed here.
                    let timer = a
                        .timer
                        .get_or_insert_with(|| (a.limits.sleep)(allowed - elapsed));
                    match timer.as_mut().poll(cx) {
                        Poll::Ready(()) => a.timer = None,
                        Poll::Pending => return Poll::Pending,
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.expired || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
