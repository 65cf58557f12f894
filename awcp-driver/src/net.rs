//! The HTTP client and body helpers, from the protocol-neutral [`agent_rt`] (this module keeps
//! the paths the driver had before they moved there).

pub use agent_rt::body::{
    channel_body, full, json_response, BodyError, BoxError, RequestBody, ResponseBody,
};
pub use agent_rt::client::{
    download, read_body, request, send, with_timeout, HttpClient, NetError,
};
pub use agent_rt::tls::{ClientTls, ClientTlsOptions};

/// What a failed request to an executor was, for the engine: no connection at all, no answer
/// in time, or another breakage (it picks the error code, e.g. `UNREACHABLE` vs `TIMEOUT`).
pub fn request_failure(e: &NetError) -> awcp_proto::engine::delegator::RequestFailure {
    use awcp_proto::engine::delegator::RequestFailure;
    match e {
        NetError::Connect(_) | NetError::BadUrl(..) => RequestFailure::Unreachable(e.to_string()),
        NetError::Timeout(_) => RequestFailure::TimedOut(e.to_string()),
        NetError::Io(_) | NetError::Tls(_) | NetError::TooLarge(_) => {
            RequestFailure::Network(e.to_string())
        }
    }
}
