//! [`ClientBody`]: the body of a client request.

use bytes::Bytes;

/// A request body: whole, or streamed through a channel with its length known up front
/// (sent with `Content-Length`; memory stays bounded by the channel).
pub struct ClientBody(pub(super) BodyInner);

pub(super) enum BodyInner {
    Full(Option<Bytes>, u64),
    Stream {
        rx: futures::channel::mpsc::Receiver<std::io::Result<Bytes>>,
        len: u64,
        left: u64,
    },
}

impl ClientBody {
    /// No body.
    pub fn empty() -> Self {
        ClientBody(BodyInner::Full(None, 0))
    }

    /// A whole body.
    pub fn full(b: Bytes) -> Self {
        let len = b.len() as u64;
        ClientBody(BodyInner::Full(Some(b).filter(|b| !b.is_empty()), len))
    }

    /// Exactly `len` bytes, as the chunks `rx` yields. Fewer or more, or an error from the
    /// channel, fail the request (the server sees a truncated body, never a wrong one).
    pub fn streamed(
        len: u64,
        rx: futures::channel::mpsc::Receiver<std::io::Result<Bytes>>,
    ) -> Self {
        ClientBody(BodyInner::Stream { rx, len, left: len })
    }

    /// The body's length in bytes.
    pub fn len(&self) -> u64 {
        match &self.0 {
            BodyInner::Full(_, len) | BodyInner::Stream { len, .. } => *len,
        }
    }

    /// Whether the body is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for ClientBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClientBody(len {})", self.len())
    }
}

impl http_body::Body for ClientBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        use futures::StreamExt;
        use std::task::Poll;
        match &mut self.get_mut().0 {
            BodyInner::Full(b, _) => Poll::Ready(b.take().map(|b| Ok(http_body::Frame::data(b)))),
            BodyInner::Stream { rx, left, .. } => match rx.poll_next_unpin(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Some(Ok(b))) => {
                    let n = b.len() as u64;
                    if n > *left {
                        *left = 0;
                        return Poll::Ready(Some(Err(std::io::Error::other(
                            "request body longer than announced",
                        ))));
                    }
                    *left -= n;
                    Poll::Ready(Some(Ok(http_body::Frame::data(b))))
                }
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
                Poll::Ready(None) if *left > 0 => Poll::Ready(Some(Err(std::io::Error::other(
                    "request body shorter than announced",
                )))),
                Poll::Ready(None) => Poll::Ready(None),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            BodyInner::Full(b, _) => b.is_none(),
            BodyInner::Stream { .. } => false,
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.len())
    }
}
