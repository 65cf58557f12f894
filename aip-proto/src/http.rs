//! The HTTP shape of AIP direct mode, as pure functions, so a driver only moves bytes.
//!
//! **Partner server.** Mount the partner at a base path (e.g. `/aip`); [`partner_route`] tells
//! what a request is. For [`Route::Aip`], read the body (refuse bodies over
//! [`crate::partner::PartnerConfig::max_request_bytes`] with [`too_large`]) and feed
//! [`crate::partner::PartnerInput::Request`]; the engine reads the method from the body, so a
//! client posting everything to `…/rpc` works too. Execute the outputs:
//! `Respond` → write the [`HttpResponse`]; `StartStream` → `200` with
//! [`crate::sse::STREAM_HEADERS`], then write each `StreamData` and close on `EndStream`
//! (report a client that went away with `StreamClosed`); `Notify` → `POST` the body with
//! [`notification_headers`] and report [`delivery_outcome`] of the status (or `Failed`).
//! Other routes answer [`route_error`].
//!
//! **Leader client.** For `Send`, `POST` the body to the URL with [`request_headers`]. If the
//! answer [`is_event_stream`] with status 200, feed each chunk as `StreamChunk` and the end as
//! `StreamEnded`; otherwise read the whole body and feed `Response`. No answer: `Failed`.
//! `Abort`: drop that request. **Notification receiver**: feed a `POST` as
//! `Notification` with [`notification_token`] of its headers, answer with the status of
//! `RespondNotification` and an empty body.

use crate::engine::HttpResponse;
use crate::error::{ErrorCode, RpcError};
use crate::leader::HttpRequest;
use crate::partner::DeliveryOutcome;
use crate::wire::{encode_error, Method, RpcId};

/// The notification token header (v01.00–v02.01 spelling; matched case-insensitively, so
/// v02.02's `X-ACPs-AIP-Notification-Token` is the same header).
pub const NOTIFICATION_TOKEN_HEADER: &str = "X-ACPS-AIP-Notification-Token";

/// The relative URLs of the AIP methods a partner serves.
pub const PARTNER_PATHS: [&str; 6] = [
    "rpc",
    "stream",
    "notification/set",
    "notification/get",
    "notification/delete",
    "notification/start",
];

/// The URL of `method` at a partner whose ACS endpoint is `endpoint`: methods are relative
/// URLs, so `…/x/rpc` gives `…/x/stream`, and a base `…/x` or `…/x/` gives `…/x/stream`.
pub fn method_url(endpoint: &str, method: &Method) -> String {
    let e = endpoint.trim_end_matches('/');
    let base = e
        .strip_suffix("/rpc")
        .or_else(|| {
            PARTNER_PATHS
                .iter()
                .find_map(|p| e.strip_suffix(&format!("/{p}")[..]))
        })
        .unwrap_or(e);
    format!("{base}/{}", method.as_str())
}

/// What a request to the partner server is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// A POST to an AIP endpoint (the base itself or one of [`PARTNER_PATHS`] under it).
    Aip,
    /// An AIP endpoint with a method other than POST (answer 405).
    MethodNotAllowed,
    /// Not an AIP endpoint (answer 404).
    NotFound,
}

/// Classifies `method path` for a partner mounted at `base` (`""` or `/aip`; a query string
/// is ignored).
pub fn partner_route(base: &str, http_method: &str, path: &str) -> Route {
    let path = path.split('?').next().unwrap_or(path).trim_end_matches('/');
    let base = base.trim_end_matches('/');
    let Some(rest) = path.strip_prefix(base) else {
        return Route::NotFound;
    };
    let rest = rest.trim_start_matches('/');
    let known = rest.is_empty() && !base.is_empty() || PARTNER_PATHS.contains(&rest);
    match (known, http_method.eq_ignore_ascii_case("POST")) {
        (true, true) => Route::Aip,
        (true, false) => Route::MethodNotAllowed,
        (false, _) => Route::NotFound,
    }
}

/// The answer for [`Route::MethodNotAllowed`] (405) or [`Route::NotFound`] (404): a JSON-RPC
/// error body naming the endpoints. `Route::Aip` has no error and gives a 500.
pub fn route_error(route: Route, path: &str) -> HttpResponse {
    let (status, msg) = match route {
        Route::MethodNotAllowed => (405, format!("{path} takes POST with a JSON-RPC request")),
        Route::NotFound => (404, format!("no AIP endpoint at {path}")),
        Route::Aip => (500, "not an error route".to_owned()),
    };
    let e = RpcError::with_message(ErrorCode::MethodNotFound, msg)
        .with_data(serde_json::json!({ "endpoints": PARTNER_PATHS }));
    HttpResponse {
        status,
        content_type: "application/json",
        body: encode_error(&RpcId::Null, &e),
    }
}

/// The answer for a body over `limit` bytes (413, JSON-RPC -32600).
pub fn too_large(limit: usize) -> HttpResponse {
    let e = RpcError::with_message(
        ErrorCode::InvalidRequest,
        format!("request body exceeds {limit} bytes"),
    );
    HttpResponse {
        status: 413,
        content_type: "application/json",
        body: encode_error(&RpcId::Null, &e),
    }
}

/// Which requests a partner's HTTP server refuses as ones a web page made a browser send
/// (the rules of `engine_basics::guard`): a partner runs an agent on its machine, and a page
/// the user opens can reach a partner listening on a loopback or private address. Every
/// request with an `Origin` header (403) or a body that is not `application/json` (415) is
/// refused; with [`RequestGuard::check_host`], also one whose `Host` is not an IP address,
/// `localhost` or one of [`RequestGuard::allowed_hosts`] (421, DNS rebinding). The default
/// checks `Host`; turn it off only where every client must present a certificate (mTLS),
/// which a web page cannot.
#[derive(Clone, Debug)]
pub struct RequestGuard {
    /// Refuse a `Host` the partner is not reached by.
    pub check_host: bool,
    /// Host names (`name` or `name:port`) the partner is reached by, besides IP addresses and
    /// `localhost`.
    pub allowed_hosts: Vec<String>,
}

impl Default for RequestGuard {
    fn default() -> Self {
        RequestGuard {
            check_host: true,
            allowed_hosts: Vec::new(),
        }
    }
}

impl RequestGuard {
    /// The answer to a request with these headers that a partner must not serve (`None`:
    /// serve it). Every AIP request is a `POST` with a JSON-RPC body.
    pub fn refuse(
        &self,
        origin: Option<&str>,
        content_type: Option<&str>,
        host: Option<&str>,
    ) -> Option<HttpResponse> {
        use engine_basics::guard::{refuse_browser_request, refuse_foreign_host};
        let refusal = refuse_browser_request(origin, content_type, true).or_else(|| {
            self.check_host
                .then(|| refuse_foreign_host(host, None, &self.allowed_hosts))
                .flatten()
        })?;
        let e = RpcError::with_message(ErrorCode::InvalidRequest, refusal.message());
        Some(HttpResponse {
            status: refusal.status(),
            content_type: "application/json",
            body: encode_error(&RpcId::Null, &e),
        })
    }
}

/// Headers of a leader request.
pub fn request_headers(r: &HttpRequest) -> [(&'static str, &'static str); 2] {
    [
        ("Content-Type", "application/json"),
        (
            "Accept",
            if r.event_stream {
                "text/event-stream"
            } else {
                "application/json"
            },
        ),
    ]
}

/// Headers of a notification POST.
pub fn notification_headers(token: &str) -> [(&'static str, String); 2] {
    [
        ("Content-Type", "application/json".to_owned()),
        (NOTIFICATION_TOKEN_HEADER, token.to_owned()),
    ]
}

/// The notification token among `headers` (name matched case-insensitively).
pub fn notification_token<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Option<String> {
    headers
        .into_iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(NOTIFICATION_TOKEN_HEADER))
        .map(|(_, v)| v.trim().to_owned())
}

/// Whether a response is an SSE stream (`text/event-stream`, any parameters).
pub fn is_event_stream(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|c| {
        c.split(';')
            .next()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("text/event-stream"))
    })
}

/// The outcome of a notification POST answered with `status`.
pub fn delivery_outcome(status: u16) -> DeliveryOutcome {
    DeliveryOutcome::Status(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_urls_are_relative_to_the_endpoint() {
        for (endpoint, method, want) in [
            (
                "http://h/acps-aip-v1/rpc",
                Method::Stream,
                "http://h/acps-aip-v1/stream",
            ),
            (
                "http://h/acps-aip-v1/rpc",
                Method::Rpc,
                "http://h/acps-aip-v1/rpc",
            ),
            (
                "http://h/aip",
                Method::NotificationSet,
                "http://h/aip/notification/set",
            ),
            ("http://h/aip/", Method::Rpc, "http://h/aip/rpc"),
            ("http://h:1", Method::Stream, "http://h:1/stream"),
            (
                "http://h/x/stream",
                Method::NotificationStart,
                "http://h/x/notification/start",
            ),
        ] {
            assert_eq!(method_url(endpoint, &method), want, "{endpoint}");
        }
    }

    #[test]
    fn web_pages_cannot_drive_a_partner() {
        let guard = RequestGuard::default();
        let json = Some("application/json");
        assert!(guard.refuse(None, json, Some("127.0.0.1:10300")).is_none());
        assert!(guard.refuse(None, json, Some("localhost")).is_none());
        for (origin, ctype, host, status) in [
            (Some("https://evil.example"), json, Some("127.0.0.1"), 403),
            (None, Some("text/plain"), Some("127.0.0.1"), 415),
            (None, json, Some("evil.example"), 421),
        ] {
            let r = guard.refuse(origin, ctype, host).expect("refused");
            assert_eq!(r.status, status);
            let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            assert_eq!(body["error"]["code"], -32600, "{body}");
        }
        let named = RequestGuard {
            allowed_hosts: vec!["agents.lan".into()],
            ..RequestGuard::default()
        };
        assert!(named.refuse(None, json, Some("agents.lan:10300")).is_none());
        let mtls = RequestGuard {
            check_host: false,
            ..RequestGuard::default()
        };
        assert!(mtls.refuse(None, json, Some("evil.example")).is_none());
        assert!(mtls.refuse(Some("null"), json, None).is_some());
    }

    #[test]
    fn routes_are_classified() {
        assert_eq!(partner_route("/aip", "POST", "/aip/rpc"), Route::Aip);
        assert_eq!(
            partner_route("/aip", "POST", "/aip/notification/set?x=1"),
            Route::Aip
        );
        assert_eq!(partner_route("/aip", "post", "/aip"), Route::Aip);
        assert_eq!(partner_route("", "POST", "/stream"), Route::Aip);
        assert_eq!(partner_route("", "POST", "/"), Route::NotFound);
        assert_eq!(
            partner_route("/aip", "GET", "/aip/rpc"),
            Route::MethodNotAllowed
        );
        assert_eq!(partner_route("/aip", "POST", "/aip/nope"), Route::NotFound);
        assert_eq!(partner_route("/aip", "POST", "/other/rpc"), Route::NotFound);
        assert_eq!(route_error(Route::NotFound, "/x").status, 404);
    }

    #[test]
    fn headers_are_matched_case_insensitively() {
        let h = [
            ("content-type", "application/json"),
            ("x-acps-aip-notification-token", " tok "),
        ];
        assert_eq!(notification_token(h).as_deref(), Some("tok"));
        assert_eq!(
            notification_token([("X-ACPs-AIP-Notification-Token", "t")]).as_deref(),
            Some("t")
        );
        assert!(is_event_stream(Some("text/event-stream; charset=utf-8")));
        assert!(!is_event_stream(Some("application/json")));
        assert!(!is_event_stream(None));
    }
}
