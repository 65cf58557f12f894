//! The HTTP client and body helpers, from the protocol-neutral [`agent_rt`] (this module keeps
//! the paths the driver had before they moved there).

pub use agent_rt::body::{channel_body, full, json_response, BodyError, RequestBody, ResponseBody};
pub use agent_rt::client::{
    download, read_body, request, send, with_timeout, HttpClient, NetError,
};
pub use agent_rt::tls::{ClientTls, ClientTlsOptions};
