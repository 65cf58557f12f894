//! A minimal HTTP/1.1 client over hyper and [`Runtime::connect`], and body helpers shared by
//! the servers. One connection per request: AWCP traffic is a handful of requests per
//! delegation, and it keeps the client runtime-neutral.

use std::convert::Infallible;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use futures::future::Either;
use http::{Method, Request, Uri};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

use crate::runtime::{blocking, Runtime};

/// The body type of every response this crate serves.
pub type ResponseBody = UnsyncBoxBody<Bytes, Infallible>;

/// A full body from bytes.
pub fn full(b: impl Into<Bytes>) -> ResponseBody {
    Full::new(b.into()).boxed_unsync()
}

/// A JSON response.
pub fn json_response(status: u16, body: String) -> http::Response<ResponseBody> {
    http::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(full(body))
        .expect("static headers are valid")
}

/// Why a client request failed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// The URL is not `http://host[:port]/path`.
    #[error("bad URL {0:?}: {1}")]
    BadUrl(String, String),
    /// Connecting or talking failed.
    #[error("{0}")]
    Io(String),
    /// No answer in time.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The body exceeded the limit.
    #[error("response body exceeds {0} bytes")]
    TooLarge(u64),
}

fn split_url(url: &str) -> Result<(String, u16, String), NetError> {
    let uri: Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| NetError::BadUrl(url.into(), e.to_string()))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(s) => {
            return Err(NetError::BadUrl(
                url.into(),
                format!("scheme {s} is not supported (use http, or a TLS-terminating proxy)"),
            ))
        }
        None => return Err(NetError::BadUrl(url.into(), "missing scheme".into())),
    }
    let host = uri
        .host()
        .ok_or_else(|| NetError::BadUrl(url.into(), "missing host".into()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(80);
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    Ok((host, port, path))
}

/// Sends one request and returns the response head with a streaming body.
pub async fn send<R: Runtime>(
    rt: &R,
    method: Method,
    url: &str,
    headers: &[(&str, String)],
    body: Option<Bytes>,
) -> Result<http::Response<Incoming>, NetError> {
    let (host, port, path) = split_url(url)?;
    let io = rt
        .connect(host.clone(), port)
        .await
        .map_err(|e| NetError::Io(format!("connect {host}:{port}: {e}")))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| NetError::Io(format!("handshake: {e}")))?;
    rt.spawn(Box::pin(async move {
        let _ = conn.await;
    }));
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", format!("{host}:{port}"));
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let typed = headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"));
    if body.is_some() && !typed {
        req = req.header("content-type", "application/json");
    }
    let req = req
        .body(Full::new(body.unwrap_or_default()))
        .map_err(|e| NetError::Io(e.to_string()))?;
    sender
        .send_request(req)
        .await
        .map_err(|e| NetError::Io(format!("request: {e}")))
}

/// Reads a whole body, refusing more than `limit` bytes.
pub async fn read_body(body: Incoming, limit: u64) -> Result<Bytes, NetError> {
    let limited = http_body_util::Limited::new(body, limit as usize);
    match limited.collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Err(NetError::TooLarge(limit))
            } else {
                Err(NetError::Io(e.to_string()))
            }
        }
    }
}

/// Runs `fut` with a deadline.
pub async fn with_timeout<R: Runtime, T>(
    rt: &R,
    d: Duration,
    fut: impl std::future::Future<Output = Result<T, NetError>>,
) -> Result<T, NetError> {
    let fut = std::pin::pin!(fut);
    match futures::future::select(fut, rt.sleep(d)).await {
        Either::Left((r, _)) => r,
        Either::Right(_) => Err(NetError::Timeout(d)),
    }
}

/// A request with a whole response body: `(status, body)`.
pub async fn request<R: Runtime>(
    rt: &R,
    method: Method,
    url: &str,
    headers: &[(&str, String)],
    body: Option<Bytes>,
    timeout: Duration,
    limit: u64,
) -> Result<(u16, Bytes), NetError> {
    with_timeout(rt, timeout, async {
        let resp = send(rt, method, url, headers, body).await?;
        let status = resp.status().as_u16();
        let body = read_body(resp.into_body(), limit).await?;
        Ok((status, body))
    })
    .await
}

/// Streams a GET into `dest` (created or truncated) with flat memory; returns the byte count.
pub async fn download<R: Runtime>(
    rt: &R,
    url: &str,
    headers: &[(&str, String)],
    dest: PathBuf,
    limit: u64,
    timeout: Duration,
) -> Result<u64, NetError> {
    with_timeout(rt, timeout, async {
        let resp = send(rt, Method::GET, url, headers, None).await?;
        if !resp.status().is_success() {
            return Err(NetError::Io(format!("GET {url}: HTTP {}", resp.status())));
        }
        let d2 = dest.clone();
        let mut file = blocking(rt, move || std::fs::File::create(d2))
            .await
            .map_err(|e| NetError::Io(format!("create {}: {e}", dest.display())))?;
        let mut body = resp.into_body();
        let mut total = 0u64;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| NetError::Io(e.to_string()))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            total += data.len() as u64;
            if total > limit {
                return Err(NetError::TooLarge(limit));
            }
            file = blocking(rt, move || file.write_all(&data).map(|_| file))
                .await
                .map_err(|e| NetError::Io(format!("write: {e}")))?;
        }
        blocking(rt, move || file.sync_all())
            .await
            .map_err(|e| NetError::Io(format!("sync: {e}")))?;
        Ok(total)
    })
    .await
}

/// A streaming body fed from a channel (SSE, file downloads).
pub fn channel_body(rx: futures::channel::mpsc::Receiver<Bytes>) -> ResponseBody {
    use futures::StreamExt;
    let stream = rx.map(|b| Ok::<_, Infallible>(hyper::body::Frame::data(b)));
    BodyExt::boxed_unsync(http_body_util::StreamBody::new(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split() {
        assert_eq!(
            split_url("http://127.0.0.1:8080/awcp").unwrap(),
            ("127.0.0.1".into(), 8080, "/awcp".into())
        );
        assert_eq!(split_url("http://h/").unwrap().1, 80);
        assert!(split_url("https://h/").is_err());
        assert!(split_url("nonsense").is_err());
    }
}
