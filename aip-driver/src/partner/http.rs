//! The partner's HTTP surface, runtime-neutral: a function from an `http::Request` to an
//! `http::Response`, served by agent-rt's server loop or mounted in axum.
//!
//! Routes, under [`super::PartnerOptions::base_path`]: `POST rpc`, `POST stream` (answered
//! with server-sent events), `POST notification/{set,get,delete,start}`; the method is read
//! from the JSON-RPC body ([`aip_proto::http`]). Anything else gets a JSON-RPC error body
//! with 404 or 405. What a web page makes a browser send (an `Origin` header, a body that is
//! not JSON, a foreign `Host`) is refused by [`super::PartnerOptions::guard`] before the body
//! is read.

use agent_rt::body::{channel_body, full, BodyError, ResponseBody};
use aip_proto::engine::HttpResponse;
use aip_proto::http::{partner_route, route_error, too_large, Route};
use aip_proto::{encode_error, ErrorCode, RpcError, RpcId};
use bytes::Bytes;

use super::{PartnerHandle, Reply};

fn response(r: HttpResponse) -> http::Response<ResponseBody> {
    http::Response::builder()
        .status(r.status)
        .header("content-type", r.content_type)
        .body(full(r.body))
        .expect("static headers are valid")
}

fn error(status: u16, code: ErrorCode, message: String) -> http::Response<ResponseBody> {
    response(HttpResponse {
        status,
        content_type: "application/json",
        body: encode_error(&RpcId::Null, &RpcError::with_message(code, message)),
    })
}

/// [`aip_proto::http::RequestGuard::refuse`] of a request's headers (a `Host` from the URI's
/// authority when there is no header, as HTTP/2 sends it).
pub(crate) fn refuse_web_request<B>(
    guard: &aip_proto::http::RequestGuard,
    req: &http::Request<B>,
) -> Option<HttpResponse> {
    let header = |name: http::header::HeaderName| {
        req.headers()
            .get(name)
            .map(|v| v.to_str().unwrap_or("\u{fffd}"))
    };
    let host = header(http::header::HOST).or_else(|| req.uri().authority().map(|a| a.as_str()));
    guard.refuse(
        header(http::header::ORIGIN),
        header(http::header::CONTENT_TYPE),
        host,
    )
}

impl PartnerHandle {
    /// The partner's endpoints as an [`agent_rt::Handler`] for agent-rt's server (or any
    /// server: [`PartnerHandle::handle_http`] takes any body).
    pub fn http_handler(&self) -> agent_rt::Handler {
        let p = self.clone();
        agent_rt::Handler::new(move |req| {
            let p = p.clone();
            async move { p.handle_http(req).await }
        })
    }

    /// Answers one HTTP request. Never panics; malformed input gets a JSON-RPC error.
    pub async fn handle_http<B>(&self, req: http::Request<B>) -> http::Response<ResponseBody>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let path = req.uri().path().to_owned();
        match partner_route(&self.base_path, req.method().as_str(), &path) {
            Route::Aip => {}
            other => return response(route_error(other, &path)),
        }
        if let Some(refusal) = refuse_web_request(&self.guard, &req) {
            return response(refusal);
        }
        let limit = self.max_request_bytes;
        let body = match agent_rt::body::read_body(req.into_body(), limit as u64).await {
            Ok(b) => b,
            Err(BodyError::TooLarge(_)) => return response(too_large(limit)),
            Err(e) => return error(400, ErrorCode::ParseError, format!("reading the body: {e}")),
        };
        match self.request(body.to_vec()).await {
            Some(Reply::Full(r)) => response(r),
            Some(Reply::Stream(rx)) => {
                let mut b = http::Response::builder().status(200);
                for (k, v) in aip_proto::sse::STREAM_HEADERS {
                    b = b.header(k, v);
                }
                b.body(channel_body(rx)).expect("static headers are valid")
            }
            None => error(
                503,
                ErrorCode::InternalError,
                "the partner has stopped".into(),
            ),
        }
    }
}
