//! Finding 9 of issue 12: behind a proxy or NAT. The executor runs behind a reverse proxy on
//! another port; every request of the delegation, the snapshot download included, must go
//! through the proxy: snapshot URLs follow the origin the delegator used (`Host`), the
//! executor's `--public-url`, or (when trusted) the proxy's `X-Forwarded-*` headers — never
//! the executor's own listening address.

#[allow(dead_code, unused_macros)]
mod conformance;
#[allow(dead_code)]
mod net_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_rt::body::RequestBody;
use agent_rt::test_util::TestPki;
use agent_rt::{ClientTls, ClientTlsOptions, Handler, HttpClient, ServerOptions, TokioRuntime};
use awcp_driver::{DelegatorHandle, DelegatorOptions};
use awcp_proto::engine::delegator::SnapshotStatus;
use awcp_proto::DelegationState;
use awcp_transports::{ArchiveDelegator, ArchiveDelegatorConfig};
use conformance::*;
use net_support::executor;

/// How the test proxy forwards.
#[derive(Clone, Copy)]
enum Mode {
    /// Keeps the client's `Host` (nginx `proxy_set_header Host $host`).
    PreserveHost,
    /// Sends the upstream's `Host` and says what the client used in `X-Forwarded-Proto` /
    /// `X-Forwarded-Host` (nginx's default `Host` plus the usual forwarded headers).
    Forwarded,
}

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
];

/// A reverse proxy (agent-rt's server and client) on `l` in front of `upstream`; records
/// every request line it forwards.
fn start_proxy(
    l: std::net::TcpListener,
    upstream: String,
    opts: ServerOptions,
    mode: Mode,
) -> Arc<Mutex<Vec<String>>> {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let client = HttpClient::new(TokioRuntime, ClientTls::default());
    let tls = opts.tls.is_some();
    let log = seen.clone();
    let handler = Handler::new(move |req: http::Request<RequestBody>| {
        let (client, upstream, log) = (client.clone(), upstream.clone(), log.clone());
        async move {
            let method = req.method().clone();
            let path = req
                .uri()
                .path_and_query()
                .map(|p| p.as_str().to_owned())
                .unwrap_or_default();
            log.lock().unwrap().push(format!("{method} {path}"));
            let host = req
                .headers()
                .get("host")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            let mut headers: Vec<(String, String)> = req
                .headers()
                .iter()
                .filter(|(k, _)| !HOP_BY_HOP.contains(&k.as_str()))
                .filter(|(k, _)| matches!(mode, Mode::PreserveHost) || k.as_str() != "host")
                .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
                .collect();
            if matches!(mode, Mode::Forwarded) {
                headers.push((
                    "x-forwarded-proto".into(),
                    if tls { "https" } else { "http" }.into(),
                ));
                headers.push(("x-forwarded-host".into(), host));
            }
            let body = agent_rt::body::read_body(req.into_body(), 1 << 30)
                .await
                .unwrap_or_default();
            let body = (!body.is_empty()).then_some(body);
            let hdrs: Vec<(&str, String)> = headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.clone()))
                .collect();
            match client
                .send(method, &format!("{upstream}{path}"), &hdrs, body)
                .await
            {
                Ok(resp) => {
                    let (mut parts, body) = resp.into_parts();
                    for h in HOP_BY_HOP {
                        parts.headers.remove(h);
                    }
                    http::Response::from_parts(parts, http_body_util::Either::Left(body))
                }
                Err(e) => http::Response::builder()
                    .status(502)
                    .body(http_body_util::Either::Right(agent_rt::body::full(
                        e.to_string(),
                    )))
                    .unwrap(),
            }
        }
    });
    tokio::spawn(agent_rt::serve(
        TokioRuntime,
        l,
        handler,
        opts,
        std::future::pending(),
    ));
    seen
}

/// A delegator with archives by URL (so the executor's snapshot comes back by URL too).
fn delegator(dir: &std::path::Path, tls: ClientTls) -> DelegatorHandle {
    let state = dir.join("state");
    let transport = ArchiveDelegator::new(ArchiveDelegatorConfig::new(state.join("exports")));
    let mut opts = DelegatorOptions::new(Arc::new(transport), state);
    opts.engine.sse_backoff = Duration::from_millis(50);
    let (l, a) = bind();
    opts.archive_base_url = Some(format!("http://{a}"));
    opts.client_tls = tls;
    let d = DelegatorHandle::start(TokioRuntime, opts);
    awcp_driver::Driver::spawn_archive_server(&TokioRuntime, l, d.clone());
    d
}

/// Runs a delegation to `peer` and checks that its snapshot was downloaded through the proxy.
async fn delegate_through(
    dir: &std::path::Path,
    peer: &str,
    tls: ClientTls,
    seen: &Mutex<Vec<String>>,
) {
    let dg = delegator(dir, tls);
    let ws = workspace();
    let mut p = params::<TokioRuntime>(peer, ws.path());
    p.transport = awcp_proto::TransportKind::Archive;
    let v = run_to_end::<TokioRuntime>(&dg, p).await;
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    assert_eq!(v.snapshots[0].status, SnapshotStatus::Applied, "{v:?}");
    assert!(ws.path().join("AWCP_NOTES.md").exists());
    let seen = seen.lock().unwrap().clone();
    let snapshot = format!("GET /awcp/tasks/{}/snapshots/", v.request.id);
    assert!(
        seen.iter().any(|l| l.starts_with(&snapshot)),
        "the snapshot was not fetched through the proxy: {seen:?}"
    );
}

/// A plain proxy that keeps `Host`: no configuration needed, the executor builds snapshot
/// URLs from the origin the delegator used.
#[test]
fn delegation_through_a_proxy_derives_snapshot_urls_from_the_origin() {
    <TokioRuntime as awcp_driver::Driver>::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let ex = executor("tokio", dir.path(), &[], None);
        let upstream = ex.url.trim_end_matches("/awcp").to_owned();
        let (l, a) = bind();
        let seen = start_proxy(l, upstream, ServerOptions::default(), Mode::PreserveHost);
        let port = a.port();
        let peer = format!("http://127.0.0.1:{port}/awcp");
        delegate_through(dir.path(), &peer, ClientTls::default(), &seen).await;
    });
}

/// A TLS-terminating proxy that rewrites `Host`: the executor (plain HTTP behind it) is told
/// its public URL with `--public-url`, or trusts the proxy's forwarded headers.
#[test]
fn delegation_through_a_tls_terminating_proxy() {
    <TokioRuntime as awcp_driver::Driver>::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let pki = TestPki::new(dir.path(), "proxy");
        let cert = pki.server("proxy", &["localhost"]);
        let tls = ServerOptions::with_tls(
            agent_rt::ServerTls::new(&agent_rt::ServerTlsOptions::new(&cert.cert, &cert.key))
                .unwrap(),
        );
        let client = ClientTls::new(&ClientTlsOptions {
            ca_files: vec![pki.ca_file()],
            ..ClientTlsOptions::default()
        })
        .unwrap();

        // --public-url (the proxy's port is known first: it is bound before the executor starts).
        let (l, a) = bind();
        let port = a.port();
        let public = format!("https://localhost:{port}");
        let ex = executor(
            "smol",
            &dir.path().join("a"),
            &["--public-url".into(), public],
            None,
        );
        let upstream = ex.url.trim_end_matches("/awcp").to_owned();
        let seen = start_proxy(l, upstream, tls.clone(), Mode::Forwarded);
        delegate_through(
            &dir.path().join("a"),
            &format!("https://localhost:{port}/awcp"),
            client.clone(),
            &seen,
        )
        .await;

        // --trust-forwarded-headers.
        let ex = executor(
            "tokio",
            &dir.path().join("b"),
            &["--trust-forwarded-headers".into()],
            None,
        );
        let upstream = ex.url.trim_end_matches("/awcp").to_owned();
        let (l, a) = bind();
        let port = a.port();
        let seen = start_proxy(l, upstream, tls, Mode::Forwarded);
        delegate_through(
            &dir.path().join("b"),
            &format!("https://localhost:{port}/awcp"),
            client,
            &seen,
        )
        .await;
    });
}

/// A one-time archive URL (URL delivery) opens once: the executor (the real `awcp-executor`)
/// fetches the workspace through a recording proxy in front of the delegator's archive
/// listener; replaying the very URL it used afterwards is refused (used, and revoked when
/// the transport was released), and the archive file is gone from the state directory. The
/// engine decides each fetch (`Delegator::redeem_archive_url`); this shows the driver obeys.
#[test]
fn an_archive_url_opens_once_and_is_gone_after_release() {
    <TokioRuntime as awcp_driver::Driver>::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let ex = executor("tokio", dir.path(), &[], None);
        let (archives, archives_addr) = bind();
        let (front, front_addr) = bind();
        let seen = start_proxy(
            front,
            format!("http://{archives_addr}"),
            ServerOptions::default(),
            Mode::PreserveHost,
        );
        let state = dir.path().join("delegator");
        let transport = ArchiveDelegator::new(ArchiveDelegatorConfig::new(state.join("exports")));
        let mut opts = DelegatorOptions::new(Arc::new(transport), state.clone());
        opts.archive_base_url = Some(format!("http://{front_addr}"));
        let dg = DelegatorHandle::start(TokioRuntime, opts);
        awcp_driver::Driver::spawn_archive_server(&TokioRuntime, archives, dg.clone());

        let ws = workspace();
        let v = run_to_end::<TokioRuntime>(&dg, params::<TokioRuntime>(&ex.url, ws.path())).await;
        assert_eq!(v.state, DelegationState::Completed, "{v:?}");
        assert!(ws.path().join("AWCP_NOTES.md").exists());

        let fetched: Vec<String> = seen
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| {
                l.strip_prefix("GET ")
                    .filter(|p| p.starts_with("/archives/"))
            })
            .map(str::to_owned)
            .collect();
        assert_eq!(fetched.len(), 1, "one archive fetch: {fetched:?}");
        let client = HttpClient::new(TokioRuntime, ClientTls::default());
        let replay = client
            .send(
                http::Method::GET,
                &format!("http://{archives_addr}{}", fetched[0]),
                &[],
                None,
            )
            .await
            .unwrap();
        assert_eq!(replay.status(), 404, "a used archive URL opened again");
        let left: Vec<_> = std::fs::read_dir(state.join("archives"))
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(
            left.is_empty(),
            "archive files left after release: {left:?}"
        );
        dg.stop().await;
    });
}
