//! agent-rt's server and client on both runtimes: TLS and mTLS, the refusals that must
//! happen, and the limits that keep a server alive on a hostile network (slowloris, idle
//! connections, slow bodies, connection floods, refused uploads). Every wait is bounded by a
//! generous deadline; nothing asserts on timing.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use agent_rt::body::{read_body, BodyError, RequestBody};
use agent_rt::test_util::{self, TestPki};
use agent_rt::{blocking, ClientTls, ConnInfo, Handler, Host, HttpClient, NetError, ServerOptions};
use futures::channel::oneshot;

/// Longest any single step may take before the test fails (never reached when things work).
const DEADLINE: Duration = Duration::from_secs(60);

struct Server {
    addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

fn start<R: Host>(opts: ServerOptions, handler: Handler) -> Server {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    R::default().spawn(Box::pin(async move {
        let stop = async move {
            let _ = rx.await;
        };
        agent_rt::serve(R::default(), l, handler, opts, stop)
            .await
            .unwrap();
    }));
    Server { addr, _stop: tx }
}

/// Answers 200 with "tls" or "plain" (from the request's ConnInfo).
fn hello() -> Handler {
    Handler::new(|req: http::Request<RequestBody>| async move {
        let tls = req.extensions().get::<ConnInfo>().map(|c| c.tls);
        agent_rt::body::json_response(200, format!("{tls:?}"))
    })
}

/// Reads the whole body: 200 with its length, or 408 if it did not arrive in time.
fn reader() -> Handler {
    Handler::new(|req: http::Request<RequestBody>| async move {
        match read_body(req.into_body(), 1 << 30).await {
            Ok(b) => agent_rt::body::json_response(200, b.len().to_string()),
            Err(BodyError::Timeout(_)) => agent_rt::body::json_response(408, "slow".into()),
            Err(e) => agent_rt::body::json_response(400, e.to_string()),
        }
    })
}

/// Refuses every request without reading its body.
fn refuser() -> Handler {
    Handler::new(|_req: http::Request<RequestBody>| async move {
        agent_rt::body::json_response(401, "no".into())
    })
}

async fn get<R: Host>(tls: ClientTls, url: &str) -> Result<(u16, String), NetError> {
    let c = HttpClient::new(R::default(), tls);
    let (s, b) = c
        .request(http::Method::GET, url, &[], None, DEADLINE, 1 << 20)
        .await?;
    Ok((s, String::from_utf8_lossy(&b).into_owned()))
}

async fn tls_and_mtls<R: Host>() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "good");
    let other = TestPki::new(dir.path(), "other");
    let server_cert = pki.server("server", &["localhost", "127.0.0.1"]);
    let client_cert = pki.client("client", "delegator-1");

    // mTLS: the right CA and a client certificate get through, over TLS.
    let s = start::<R>(pki.server_options(&server_cert, true), hello());
    let url = format!("https://localhost:{}/", s.addr.port());
    let ok = get::<R>(pki.client_tls(Some(&client_cert)), &url).await;
    assert_eq!(ok.unwrap(), (200, "Some(true)".into()));
    let by_ip = format!("https://127.0.0.1:{}/", s.addr.port());
    let ok = get::<R>(pki.client_tls(Some(&client_cert)), &by_ip).await;
    assert_eq!(ok.unwrap().0, 200);

    // mTLS without a client certificate: refused.
    let e = get::<R>(pki.client_tls(None), &url).await.unwrap_err();
    assert!(matches!(e, NetError::Tls(_)), "{e:?}");

    // A client certificate from another CA: refused.
    let stranger = other.client("stranger", "mallory");
    let e = get::<R>(pki.client_tls(Some(&stranger)), &url)
        .await
        .unwrap_err();
    assert!(matches!(e, NetError::Tls(_)), "{e:?}");

    // A client that trusts another CA refuses the server.
    let e = get::<R>(other.client_tls(Some(&client_cert)), &url)
        .await
        .unwrap_err();
    assert!(matches!(e, NetError::Tls(_)), "{e:?}");
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");

    // The default client (public roots only) refuses a private CA too.
    let e = get::<R>(ClientTls::default(), &url).await.unwrap_err();
    assert!(matches!(e, NetError::Tls(_)), "{e:?}");

    // An expired server certificate: refused.
    let expired = pki.expired_server("expired", &["localhost"]);
    let s2 = start::<R>(pki.server_options(&expired, false), hello());
    let url2 = format!("https://localhost:{}/", s2.addr.port());
    let e = get::<R>(pki.client_tls(None), &url2).await.unwrap_err();
    assert!(e.to_string().contains("expired"), "{e}");

    // A certificate for another name: refused.
    let s3 = start::<R>(
        pki.server_options(&pki.server("elsewhere", &["elsewhere.example"]), false),
        hello(),
    );
    let url3 = format!("https://localhost:{}/", s3.addr.port());
    let e = get::<R>(pki.client_tls(None), &url3).await.unwrap_err();
    assert!(matches!(e, NetError::Tls(_)), "{e:?}");

    // Plain HTTP still works, and says so.
    let s4 = start::<R>(ServerOptions::default(), hello());
    let ok = get::<R>(ClientTls::default(), &format!("http://{}/", s4.addr)).await;
    assert_eq!(ok.unwrap(), (200, "Some(false)".into()));
}

fn closed_by_server(s: TcpStream, trickle: Option<&[u8]>) -> bool {
    test_util::closed_by_server(
        s,
        trickle,
        Duration::from_millis(50),
        DEADLINE,
        &mut Vec::new(),
    )
}

/// Answers 200 with the hex SHA-256 of the verified client certificate, or "none".
fn whoami() -> Handler {
    Handler::new(|req: http::Request<RequestBody>| async move {
        let cert = req
            .extensions()
            .get::<agent_rt::server::ClientCertificate>()
            .map(|c| c.sha256_hex())
            .unwrap_or_else(|| "none".into());
        agent_rt::body::json_response(200, cert)
    })
}

/// The SHA-256 of the first certificate of a PEM file, in hex.
fn leaf_sha256(pem: &std::path::Path) -> String {
    let certs = agent_rt::tls::load_certs(pem).unwrap();
    agent_rt::server::ClientCertificate::from_der(certs[0].as_ref()).sha256_hex()
}

/// An optional client certificate: a client without one is served (and the handler sees
/// none), a client with one from the CA is served and the handler sees its digest, one from
/// another CA is still refused in the handshake.
async fn optional_client_certificates_reach_the_handler<R: Host>() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "good");
    let other = TestPki::new(dir.path(), "other");
    let server_cert = pki.server("server", &["localhost"]);
    let client_cert = pki.client("client", "executor-1");
    let opts = ServerOptions::with_tls(
        agent_rt::ServerTls::new(&agent_rt::ServerTlsOptions {
            client_ca: Some(pki.ca_file()),
            client_cert_optional: true,
            ..agent_rt::ServerTlsOptions::new(&server_cert.cert, &server_cert.key)
        })
        .unwrap(),
    );
    let s = start::<R>(opts, whoami());
    let url = format!("https://localhost:{}/", s.addr.port());
    let ok = get::<R>(pki.client_tls(None), &url).await.unwrap();
    assert_eq!(ok, (200, "none".into()));
    let ok = get::<R>(pki.client_tls(Some(&client_cert)), &url)
        .await
        .unwrap();
    assert_eq!(ok, (200, leaf_sha256(&client_cert.cert)));
    let stranger = other.client("stranger", "mallory");
    let e = get::<R>(pki.client_tls(Some(&stranger)), &url)
        .await
        .unwrap_err();
    assert!(matches!(e, NetError::Tls(_)), "{e:?}");
}

async fn slowloris_and_idle_connections_are_closed<R: Host>() {
    let opts = ServerOptions {
        header_read_timeout: Some(Duration::from_millis(300)),
        idle_timeout: Some(Duration::from_millis(300)),
        ..ServerOptions::default()
    };
    let s = start::<R>(opts, hello());
    let addr = s.addr;
    let rt = R::default();
    let (slowloris, silent, idle) = blocking(&rt, move || {
        // A head trickled one header line at a time, forever.
        let mut a = TcpStream::connect(addr).unwrap();
        a.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
        let slowloris = closed_by_server(a, Some(b"X-Slow: 1\r\n"));
        // A connection that never says anything.
        let silent = closed_by_server(TcpStream::connect(addr).unwrap(), None);
        // A kept-alive connection after one complete exchange.
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let idle = closed_by_server(c, None);
        (slowloris, silent, idle)
    })
    .await;
    assert!(slowloris, "a slowloris head must be cut off");
    assert!(silent, "a silent connection must be closed");
    assert!(idle, "an idle kept-alive connection must be closed");
}

async fn slow_body_is_cut_off<R: Host>() {
    let opts = ServerOptions {
        body_read_timeout: Some(Duration::from_millis(300)),
        body_min_rate: 1024 * 1024,
        ..ServerOptions::default()
    };
    let s = start::<R>(opts, reader());
    let addr = s.addr;
    let answer = blocking(&R::default(), move || {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 209715200\r\n\r\n")
            .unwrap();
        // 16 bytes per tick: far below the minimum rate.
        let mut got = Vec::new();
        let closed = test_util::closed_by_server(
            c,
            Some(&[b'x'; 16]),
            Duration::from_millis(50),
            DEADLINE,
            &mut got,
        );
        assert!(closed, "the slow upload's connection must be closed");
        String::from_utf8_lossy(&got).into_owned()
    })
    .await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
}

async fn refused_upload_is_not_read<R: Host>() {
    let s = start::<R>(ServerOptions::default(), refuser());
    let addr = s.addr;
    let (status, sent) = blocking(&R::default(), move || {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 209715200\r\n\r\n")
            .unwrap();
        let mut head = [0u8; 12];
        c.read_exact(&mut head).unwrap();
        // The server answered before the body; now it must not swallow 200 MB.
        let chunk = vec![0u8; 1 << 20];
        let mut sent = 0usize;
        while sent < 200 << 20 {
            match c.write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        (String::from_utf8_lossy(&head).into_owned(), sent)
    })
    .await;
    assert_eq!(status, "HTTP/1.1 401");
    assert!(
        sent < 100 << 20,
        "the server read {sent} bytes of a refused upload"
    );
}

async fn connection_flood_does_not_block_new_requests<R: Host>() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "flood");
    let cert = pki.server("server", &["localhost"]);
    for tls in [false, true] {
        let base = if tls {
            pki.server_options(&cert, false)
        } else {
            ServerOptions::default()
        };
        let opts = ServerOptions {
            max_connections: 16,
            header_read_timeout: Some(Duration::from_secs(3600)),
            idle_timeout: Some(Duration::from_secs(3600)),
            ..base
        };
        let s = start::<R>(opts, hello());
        let addr = s.addr;
        // Silent connections, and connections stuck in a request head.
        let idle: Vec<TcpStream> = blocking(&R::default(), move || {
            (0..100)
                .map(|i| {
                    let mut c = TcpStream::connect(addr).unwrap();
                    if i % 2 == 0 {
                        c.write_all(b"GET / HTTP/1.1\r\nHost:").unwrap();
                    }
                    c
                })
                .collect()
        })
        .await;
        let (url, client) = if tls {
            (
                format!("https://localhost:{}/", addr.port()),
                pki.client_tls(None),
            )
        } else {
            (format!("http://{addr}/"), ClientTls::default())
        };
        let r = agent_rt::runtime::timeout(&R::default(), DEADLINE, get::<R>(client, &url))
            .await
            .expect("served while 100 idle connections are open");
        assert_eq!(r.unwrap().0, 200, "tls: {tls}");
        drop(idle);
    }
}

/// A streamed request body arrives whole, announced by its length; a stream that ends
/// early fails the request instead of sending a short body as if it were complete.
async fn streamed_request_bodies<R: Host>() {
    let s = start::<R>(ServerOptions::default(), reader());
    let url = format!("http://{}/", s.addr);
    let c = HttpClient::new(R::default(), ClientTls::default());
    // POSTs `pieces` as a body announced as `len` bytes.
    let post = |pieces: Vec<bytes::Bytes>, len: u64| {
        let (mut tx, rx) = futures::channel::mpsc::channel(2);
        let feed = async move {
            use futures::SinkExt;
            for p in pieces {
                tx.send(Ok(p)).await.unwrap();
            }
        };
        let req = c.request_body(
            http::Method::POST,
            &url,
            &[],
            agent_rt::ClientBody::streamed(len, rx),
            DEADLINE,
            1 << 20,
        );
        async move { futures::join!(req, feed).0 }
    };
    let whole = vec![bytes::Bytes::from(vec![b'x'; 16 * 1024]); 64];
    let r = post(whole, 64 * 16 * 1024).await;
    assert_eq!(
        r.unwrap(),
        (200, bytes::Bytes::from((64 * 16 * 1024).to_string()))
    );
    let r = post(vec![bytes::Bytes::from_static(b"short")], 100).await;
    assert!(r.is_err(), "{r:?}");
}

/// Answers 200 after a short pause, so requests pile up behind the connection cap.
fn slow_hello<R: Host>() -> Handler {
    Handler::new(|_req: http::Request<RequestBody>| async move {
        R::default().sleep(Duration::from_millis(20)).await;
        agent_rt::body::json_response(200, "ok".into())
    })
}

/// More clients than `max_connections`, each sending its request at once: the cap makes them
/// wait, but none of them is closed with its request unread (eviction is for idle
/// connections only).
async fn requests_over_the_connection_cap_are_all_answered<R: Host>() {
    let opts = ServerOptions {
        max_connections: 4,
        ..ServerOptions::default()
    };
    let s = start::<R>(opts, slow_hello::<R>());
    let addr = s.addr;
    let answers: Vec<String> = blocking(&R::default(), move || {
        let clients: Vec<_> = (0..64)
            .map(|_| {
                std::thread::spawn(move || {
                    let mut c = TcpStream::connect(addr).unwrap();
                    c.set_read_timeout(Some(DEADLINE)).unwrap();
                    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                        .unwrap();
                    let mut out = Vec::new();
                    let _ = c.read_to_end(&mut out);
                    String::from_utf8_lossy(&out).into_owned()
                })
            })
            .collect();
        clients.into_iter().map(|t| t.join().unwrap()).collect()
    })
    .await;
    let lost = answers
        .iter()
        .filter(|a| !a.starts_with("HTTP/1.1 200"))
        .count();
    assert_eq!(lost, 0, "{lost} of 64 requests got no answer");
    drop(s);
}

/// Answers 200 with the client's port: one port, one connection.
fn port_echo() -> Handler {
    Handler::new(|req: http::Request<RequestBody>| async move {
        let port = req
            .extensions()
            .get::<ConnInfo>()
            .map(|c| c.remote_addr.port());
        agent_rt::body::json_response(200, format!("{port:?}"))
    })
}

/// `GET url` through `c`: status and body (the client's port, from [`port_echo`]).
async fn get_on<R: Host>(c: &HttpClient<R>, url: &str) -> (u16, String) {
    let (status, body) = c
        .request(http::Method::GET, url, &[], None, DEADLINE, 1 << 20)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Waits (bounded by [`DEADLINE`]) until `c` has `n` idle kept connections.
async fn until_idle<R: Host>(c: &HttpClient<R>, n: usize) {
    let rt = R::default();
    let start = std::time::Instant::now();
    while c.idle_connections() != n {
        assert!(start.elapsed() < DEADLINE, "never {n} idle connections");
        rt.sleep(Duration::from_millis(2)).await;
    }
}

async fn requests_to_one_peer_share_a_kept_connection<R: Host>() {
    let s = start::<R>(ServerOptions::default(), port_echo());
    let url = format!("http://{}/", s.addr);
    let c = HttpClient::new(R::default(), ClientTls::default()).keep_alive(true);
    let mut ports = Vec::new();
    for _ in 0..3 {
        let (status, port) = get_on(&c, &url).await;
        assert_eq!(status, 200);
        ports.push(port);
        until_idle(&c, 1).await;
    }
    assert!(ports.iter().all(|p| *p == ports[0]), "{ports:?}");
    // A clone shares the kept connection.
    let (_, again) = get_on(&c.clone(), &url).await;
    assert_eq!(again, ports[0]);
}

async fn a_kept_connection_the_server_closed_is_not_used<R: Host>() {
    let opts = ServerOptions {
        idle_timeout: Some(Duration::from_millis(300)),
        ..ServerOptions::default()
    };
    let s = start::<R>(opts, port_echo());
    let url = format!("http://{}/", s.addr);
    let c = HttpClient::new(R::default(), ClientTls::default()).keep_alive(true);
    let first = get_on(&c, &url).await;
    until_idle(&c, 1).await;
    // The server closes the idle connection; the client notices and does not offer it again.
    until_idle(&c, 0).await;
    let second = get_on(&c, &url).await;
    assert_eq!((first.0, second.0), (200, 200));
    assert_ne!(first.1, second.1, "a new connection");
}

async fn without_keep_alive_every_request_has_its_own_connection<R: Host>() {
    let s = start::<R>(ServerOptions::default(), port_echo());
    let url = format!("http://{}/", s.addr);
    let c = HttpClient::new(R::default(), ClientTls::default());
    let mut ports = Vec::new();
    for _ in 0..2 {
        ports.push(get_on(&c, &url).await.1);
    }
    assert_ne!(ports[0], ports[1]);
    assert_eq!(c.idle_connections(), 0);
}

/// Holds every request until `gate` gives a permit, then answers 200; counts the requests in
/// flight (`now`), the most at once (`most`) and all (`all`), and says each arrival on `seen`.
#[derive(Clone)]
struct Holder {
    gate: std::sync::Arc<async_lock::Semaphore>,
    now: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    most: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    all: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Holder {
    fn start<R: Host>() -> (
        Holder,
        Server,
        futures::channel::mpsc::UnboundedReceiver<()>,
    ) {
        use std::sync::atomic::Ordering::SeqCst;
        let h = Holder {
            gate: std::sync::Arc::new(async_lock::Semaphore::new(0)),
            now: Default::default(),
            most: Default::default(),
            all: Default::default(),
        };
        let (tx, seen) = futures::channel::mpsc::unbounded();
        let held = h.clone();
        let handler = Handler::new(move |_req: http::Request<RequestBody>| {
            let (h, tx) = (held.clone(), tx.clone());
            async move {
                let n = h.now.fetch_add(1, SeqCst) + 1;
                h.most.fetch_max(n, SeqCst);
                h.all.fetch_add(1, SeqCst);
                let _ = tx.unbounded_send(());
                std::mem::forget(h.gate.acquire().await);
                h.now.fetch_sub(1, SeqCst);
                agent_rt::body::json_response(200, "ok".into())
            }
        });
        let s = start::<R>(ServerOptions::default(), handler);
        (h, s, seen)
    }
}

/// The next arrival on `seen`, or `None` if none comes within `d`.
async fn arrival<R: Host>(
    seen: &mut futures::channel::mpsc::UnboundedReceiver<()>,
    d: Duration,
) -> Option<()> {
    use futures::StreamExt;
    let next = std::pin::pin!(seen.next());
    match futures::future::select(next, R::default().sleep(d)).await {
        futures::future::Either::Left((v, _)) => v,
        futures::future::Either::Right(_) => None,
    }
}

/// With a cap of two requests per peer, six at once reach the server two at a time: a third
/// arrives only when one of the first two is answered, and all six are answered.
async fn requests_over_the_per_peer_cap_wait_for_a_free_slot<R: Host>() {
    use std::sync::atomic::Ordering::SeqCst;
    let (h, s, mut seen) = Holder::start::<R>();
    let url = format!("http://{}/", s.addr);
    let c = HttpClient::new(R::default(), ClientTls::default())
        .keep_alive(true)
        .max_requests_per_peer(2);
    let requests = futures::future::join_all(
        (0..6).map(|_| c.request(http::Method::GET, &url, &[], None, DEADLINE, 1 << 20)),
    );
    let control = async {
        for _ in 0..2 {
            arrival::<R>(&mut seen, DEADLINE)
                .await
                .expect("a request arrives");
        }
        // A third would arrive now if the cap let it through.
        let third = arrival::<R>(&mut seen, Duration::from_millis(300)).await;
        assert!(third.is_none(), "a third request in flight");
        assert_eq!(h.now.load(SeqCst), 2);
        h.gate.add_permits(1);
        arrival::<R>(&mut seen, DEADLINE)
            .await
            .expect("a waiting request goes out once one is answered");
        h.gate.add_permits(100);
    };
    let (answers, ()) = futures::future::join(requests, control).await;
    for a in answers {
        assert_eq!(a.unwrap().0, 200);
    }
    assert_eq!(h.most.load(SeqCst), 2);
    assert_eq!(h.all.load(SeqCst), 6);
}

/// A request waiting for a slot fails with its own timeout, never having been sent; the one
/// holding the slot is answered when the server answers.
async fn waiting_for_a_slot_counts_against_the_timeout<R: Host>() {
    use std::sync::atomic::Ordering::SeqCst;
    let (h, s, mut seen) = Holder::start::<R>();
    let url = format!("http://{}/", s.addr);
    let c = HttpClient::new(R::default(), ClientTls::default()).max_requests_per_peer(1);
    let first = c.request(http::Method::GET, &url, &[], None, DEADLINE, 1 << 20);
    let second = async {
        arrival::<R>(&mut seen, DEADLINE)
            .await
            .expect("the first arrives");
        let r = c
            .request(
                http::Method::GET,
                &url,
                &[],
                None,
                Duration::from_millis(200),
                1 << 20,
            )
            .await;
        assert!(matches!(r, Err(NetError::Timeout(_))), "{r:?}");
        assert_eq!(h.all.load(SeqCst), 1, "the waiting request was sent");
        h.gate.add_permits(1);
    };
    let (first, ()) = futures::future::join(first, second).await;
    assert_eq!(first.unwrap().0, 200);
    assert_eq!(h.all.load(SeqCst), 1);
}

/// `GET /<len>`: `len` bytes of a known pattern, in frames of 10,000 bytes; anything else 404.
fn pattern_server() -> Handler {
    Handler::new(|req: http::Request<RequestBody>| async move {
        let Ok(len) = req.uri().path().trim_start_matches('/').parse::<usize>() else {
            return agent_rt::body::json_response(404, "no".into());
        };
        let data = pattern(len);
        let frames: Vec<Result<hyper::body::Frame<bytes::Bytes>, agent_rt::body::BoxError>> = data
            .chunks(10_000)
            .map(|c| Ok(hyper::body::Frame::data(bytes::Bytes::copy_from_slice(c))))
            .collect();
        let body = http_body_util::StreamBody::new(futures::stream::iter(frames));
        http::Response::builder()
            .status(200)
            .body(http_body_util::BodyExt::boxed_unsync(body))
            .unwrap()
    })
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// Downloads arrive whole whatever their size (nothing, one small frame, several batches of
/// the client's writes); too large a body and a failed request are errors, and a failed
/// request leaves no file.
async fn downloads_arrive_whole<R: Host>() {
    let dir = tempfile::tempdir().unwrap();
    let s = start::<R>(ServerOptions::default(), pattern_server());
    let c = HttpClient::new(R::default(), ClientTls::default());
    for len in [0usize, 7, 10_000, 300_000, 1_000_001] {
        let dest = dir.path().join(format!("got-{len}"));
        let url = format!("http://{}/{len}", s.addr);
        let n = c
            .download(&url, &[], dest.clone(), 1 << 30, DEADLINE)
            .await
            .unwrap();
        assert_eq!(n, len as u64);
        assert!(
            std::fs::read(&dest).unwrap() == pattern(len),
            "{len} bytes differ"
        );
        // Folding sees every byte written, in order: the same sum as the file's.
        let fold = |s: &mut (u64, u64), c: &[u8]| {
            for &b in c {
                s.0 += 1;
                s.1 = s.1.wrapping_mul(31).wrapping_add(u64::from(b));
            }
        };
        let (n, folded) = c
            .download_folding(&url, &[], dest.clone(), 1 << 30, DEADLINE, (0, 0), fold)
            .await
            .unwrap();
        let want = pattern(len)
            .iter()
            .fold(0u64, |h, &b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        assert_eq!((n, folded), (len as u64, (len as u64, want)), "{len}");
    }
    let dest = dir.path().join("too-large");
    let url = format!("http://{}/600000", s.addr);
    let e = c
        .download(&url, &[], dest, 100_000, DEADLINE)
        .await
        .unwrap_err();
    assert!(matches!(e, NetError::TooLarge(100_000)), "{e:?}");
    let dest = dir.path().join("missing");
    let url = format!("http://{}/none", s.addr);
    let e = c
        .download(&url, &[], dest.clone(), 1 << 20, DEADLINE)
        .await
        .unwrap_err();
    assert!(matches!(e, NetError::Io(_)), "{e:?}");
    assert!(!dest.exists());
}

macro_rules! on_both_runtimes {
    ($($name:ident),* $(,)?) => {
        mod tokio_runtime {
            $( #[test] fn $name() { <agent_rt::TokioRuntime as agent_rt::Host>::block_on(super::$name::<agent_rt::TokioRuntime>()); } )*
        }
        mod smol_runtime {
            $( #[test] fn $name() { <agent_rt::SmolRuntime as agent_rt::Host>::block_on(super::$name::<agent_rt::SmolRuntime>()); } )*
        }
    };
}

on_both_runtimes!(
    tls_and_mtls,
    optional_client_certificates_reach_the_handler,
    slowloris_and_idle_connections_are_closed,
    slow_body_is_cut_off,
    refused_upload_is_not_read,
    connection_flood_does_not_block_new_requests,
    requests_over_the_connection_cap_are_all_answered,
    streamed_request_bodies,
    requests_to_one_peer_share_a_kept_connection,
    a_kept_connection_the_server_closed_is_not_used,
    without_keep_alive_every_request_has_its_own_connection,
    requests_over_the_per_peer_cap_wait_for_a_free_slot,
    waiting_for_a_slot_counts_against_the_timeout,
    downloads_arrive_whole,
);
