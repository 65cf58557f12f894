//! tokio entry points: agent-rt's [`TokioRuntime`], axum routers for the partner and the
//! notification receiver (to merge into your own app) and a server for such an app. The
//! partner or the receiver alone: [`crate::serve_partner`], [`crate::serve_notifications`].

use std::future::Future;
use std::io;

pub use agent_rt::tokio::shutdown_signal;
pub use agent_rt::{ServerOptions, TokioRuntime};

use crate::{LeaderHandle, PartnerHandle};

/// An axum router serving the partner's endpoints under its base path
/// ([`crate::PartnerOptions::base_path`]). Merge it into your app with `Router::merge` (it
/// routes by the full path, so do not `nest` it); axum's body limit is off (the partner
/// enforces its own, `PartnerConfig::max_request_bytes`).
pub fn partner_router(partner: PartnerHandle) -> axum::Router {
    let base = partner.base_path().to_owned();
    let route = |p: &str| {
        if base.is_empty() {
            format!("/{p}")
        } else {
            format!("{base}/{p}")
        }
    };
    let service = move |req: axum::extract::Request| {
        let p = partner.clone();
        async move { p.handle_http(req).await.map(axum::body::Body::new) }
    };
    let mut router = axum::Router::new();
    for p in aip_proto::http::PARTNER_PATHS {
        router = router.route(&route(p), axum::routing::any(service.clone()));
    }
    if !base.is_empty() {
        router = router.route(&base, axum::routing::any(service));
    }
    router.layer(axum::extract::DefaultBodyLimit::disable())
}

/// An axum router taking notification POSTs at `path` for `leader`.
pub fn notification_router(leader: LeaderHandle, path: &str) -> axum::Router {
    axum::Router::new().route(
        path,
        axum::routing::any(move |req: axum::extract::Request| {
            let l = leader.clone();
            async move { l.handle_notification(req).await.map(axum::body::Body::new) }
        }),
    )
}

/// An axum router (any `Router`) as an [`agent_rt::Handler`] for agent-rt's server.
pub fn router_handler(router: axum::Router) -> agent_rt::Handler {
    agent_rt::Handler::new(move |req: http::Request<agent_rt::body::RequestBody>| {
        let router = router.clone();
        async move {
            use tower::ServiceExt;
            match router.oneshot(req.map(axum::body::Body::new)).await {
                Ok(resp) => resp,
                Err(never) => match never {},
            }
        }
    })
}

/// Serves `router` (e.g. your app with [`partner_router`] merged in) on `listener` with
/// `opts` (TLS, mTLS, limits) until `shutdown` resolves.
pub async fn serve_router(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    opts: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    agent_rt::server::serve_on(
        TokioRuntime,
        listener,
        router_handler(router),
        opts,
        shutdown,
    )
    .await
}
