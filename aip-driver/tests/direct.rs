//! AIP direct mode over real loopback HTTP on both runtimes: our leader drives our partner
//! through rpc (both dialects), stream and notification deliveries, over TLS and mTLS, and
//! mounted in an axum app. Every wait is on an event, bounded by a generous deadline that is
//! never reached when things work.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use agent_rt::test_util::TestPki;
use agent_rt::{ClientTls, Host, HttpClient, ServerOptions};
use aip_driver::leader::{LeaderEvents, LeaderHandle};
use aip_driver::partner::{PartnerHandle, PartnerOptions};
use aip_proto::leader::{CallError, Delivery, LeaderEvent, StartTask};
use aip_proto::partner::{PartnerConfig, PartnerEvent};
use aip_proto::{DataItem, Dialect, TaskState};
use common::*;
use futures::channel::{mpsc, oneshot};

/// start → awaiting-completion → complete; start → awaiting-input → continue → cancel; get;
/// an unknown task (-32001); in one dialect.
async fn rpc_lifecycles<R: Host>(dialect: Dialect) {
    let rt = R::default();
    let s = partner_server::<R>(ServerOptions::default(), PartnerOptions::default());
    let (l, mut ev) = leader::<R>(
        leader_config(),
        ClientTls::default(),
        &format!("{}/rpc", s.base),
        dialect,
    )
    .await;

    let first = l
        .start(StartTask::new("p", "t-1", "s-1", "hello"))
        .await
        .unwrap();
    assert_eq!(first.task_id, "t-1");
    wait_state(&rt, &mut ev, "t-1", TaskState::AwaitingCompletion).await;
    let snap = l.task("t-1").await.unwrap().unwrap();
    assert_eq!(
        product_text(&snap.products, "answer").as_deref(),
        Some("echo: hello")
    );
    let done = l.complete("t-1").await.unwrap();
    assert_eq!(done.status.state, TaskState::Completed);
    wait_for(&rt, &mut ev, "t-1 ended", |e| {
        matches!(e, LeaderEvent::TaskEnded { task_id, state: TaskState::Completed } if task_id == "t-1")
    })
    .await;
    // The leader follows it no more: a second complete is refused locally.
    assert!(l.complete("t-1").await.is_err());

    l.start(StartTask::new("p", "t-2", "s-1", "ask me"))
        .await
        .unwrap();
    wait_state(&rt, &mut ev, "t-2", TaskState::AwaitingInput).await;
    let r = l
        .continue_task("t-2", vec![DataItem::text("Rome")])
        .await
        .unwrap();
    assert!(
        matches!(
            r.status.state,
            TaskState::Working | TaskState::AwaitingCompletion
        ),
        "{r:?}"
    );
    wait_state(&rt, &mut ev, "t-2", TaskState::AwaitingCompletion).await;
    let got = l.get("t-2").await.unwrap();
    assert_eq!(
        product_text(got.products.as_deref().unwrap(), "answer").as_deref(),
        Some("echo: Rome")
    );
    assert_eq!(history(got), ASKED_ONCE);
    let c = l.cancel("t-2").await.unwrap();
    assert_eq!(c.status.state, TaskState::Canceled);

    // A task the partner does not know.
    assert_unknown_task(&l, "nope").await;
    let snap = l.task("nope").await.unwrap().unwrap();
    assert!(snap.ended && snap.abandoned.is_some());

    // The partner held both tasks and saw each end.
    let mut seen = s.seen;
    for t in ["t-1", "t-2"] {
        wait_for(
            &rt,
            &mut seen,
            "partner task end",
            |e| matches!(e, PartnerEvent::TaskEnded { task_id, .. } if &**task_id == t),
        )
        .await;
    }
}

/// A stream delivers progress, a chunk and the states in order; a notification receiver gets
/// the states of a notification task.
async fn stream_and_notification<R: Host>() {
    let rt = R::default();
    let s = partner_server::<R>(
        ServerOptions::default(),
        PartnerOptions {
            base_path: "/aip".into(),
            ..PartnerOptions::default()
        },
    );
    // The receiver: a server of its own.
    let rl = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let receiver_url = format!("http://{}/notify", rl.local_addr().unwrap());
    let mut config = leader_config();
    config.notification_url = Some(receiver_url);
    config.poll_interval = None;
    let (l, mut ev) = leader::<R>(
        config,
        ClientTls::default(),
        &format!("{}/rpc", s.base),
        Dialect::V2,
    )
    .await;
    let (_stop_receiver, stop) = oneshot::channel::<()>();
    let serve = aip_driver::serve_notifications(
        R::default(),
        rl,
        &l,
        ServerOptions::default(),
        async move {
            let _ = stop.await;
        },
    );
    rt.spawn(Box::pin(async move {
        serve.await.unwrap();
    }));

    let start = StartTask {
        delivery: Delivery::Stream,
        ..StartTask::new("p", "t-s", "s", "stream please")
    };
    let first = l.start(start).await.unwrap();
    assert_eq!(first.task_id, "t-s");
    let mut progress = Vec::new();
    let mut chunk = false;
    wait_for(&rt, &mut ev, "streamed awaiting-completion", |e| match e {
        LeaderEvent::Progress { status, .. } => {
            progress.extend(
                status
                    .data_items
                    .iter()
                    .flatten()
                    .filter_map(DataItem::as_text)
                    .map(str::to_owned),
            );
            false
        }
        LeaderEvent::ProductChunk { .. } => {
            chunk = true;
            false
        }
        LeaderEvent::StateChanged {
            task_id, status, ..
        } => task_id == "t-s" && status.state == TaskState::AwaitingCompletion,
        _ => false,
    })
    .await;
    assert_eq!(progress, ["1/3", "2/3", "3/3"]);
    assert!(chunk, "the product chunk came on the stream");
    let snap = l.task("t-s").await.unwrap().unwrap();
    assert!(snap.last_event_seq >= 6, "{snap:?}");
    assert_eq!(
        product_text(&snap.products, "answer").as_deref(),
        Some("echo: stream please")
    );
    assert_eq!(
        l.complete("t-s").await.unwrap().status.state,
        TaskState::Completed
    );

    let start = StartTask {
        delivery: Delivery::Notification {
            url: None,
            token: None,
            states: vec![],
        },
        ..StartTask::new("p", "t-n", "s", "notify me")
    };
    l.start(start).await.unwrap();
    // Polling is off and the fallback poll is 30 s away: the state comes by notification.
    wait_state(&rt, &mut ev, "t-n", TaskState::AwaitingCompletion).await;
    let mut seen = s.seen;
    wait_for(&rt, &mut seen, "a notification delivered", |e| {
        matches!(e, PartnerEvent::NotificationDelivered { task_id, state: TaskState::AwaitingCompletion, .. } if &**task_id == "t-n")
    })
    .await;
    assert_eq!(
        l.complete("t-n").await.unwrap().status.state,
        TaskState::Completed
    );
    // Every stream closed at the partner once its task ended.
    assert_eq!(s.handle.status().await.unwrap().open_streams, 0);
}

/// mTLS: a leader with a certificate from the partner's CA gets through; one without is
/// refused in the handshake.
async fn tls_and_mtls<R: Host>() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "aip");
    let cert = pki.server("partner", &["localhost", "127.0.0.1"]);
    let client = pki.client("leader", "leader-1");
    let s = partner_server::<R>(pki.server_options(&cert, true), PartnerOptions::default());
    assert!(s.base.starts_with("https://"));
    let url = format!("{}/rpc", s.base);
    let (l, _ev) = leader::<R>(
        leader_config(),
        pki.client_tls(Some(&client)),
        &url,
        Dialect::V1,
    )
    .await;
    let r = l
        .start(StartTask::new("p", "t-tls", "s", "over mtls"))
        .await
        .unwrap();
    assert_eq!(r.task_id, "t-tls");

    let mut config = leader_config();
    config.calls.attempts = 1;
    let (l, _ev) = leader::<R>(config, pki.client_tls(None), &url, Dialect::V1).await;
    let e = l
        .start(StartTask::new("p", "t-no", "s", "no certificate"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, aip_driver::LeaderError::Call(CallError::Transport(m)) if m.to_lowercase().contains("certificate")),
        "{e}"
    );
    assert!(s.handle.task("t-no").await.unwrap().is_none());
}

/// Requests that are not AIP calls get JSON-RPC errors with the right HTTP status.
async fn http_refusals<R: Host>() {
    let s = partner_server::<R>(
        ServerOptions::default(),
        PartnerOptions {
            engine: PartnerConfig {
                max_request_bytes: 1024,
                ..PartnerConfig::default()
            },
            ..PartnerOptions::default()
        },
    );
    let c = HttpClient::new(R::default(), ClientTls::default());
    let send = |method: http::Method, path: &str, body: Option<Vec<u8>>| {
        let url = format!("{}{path}", s.base);
        let c = c.clone();
        async move {
            let (st, b) = c
                .request(method, &url, &[], body.map(Into::into), DEADLINE, 1 << 20)
                .await
                .unwrap();
            (st, serde_json::from_slice::<serde_json::Value>(&b).unwrap())
        }
    };
    let (st, v) = send(http::Method::GET, "/rpc", None).await;
    assert_eq!((st, v["error"]["code"].as_i64()), (405, Some(-32601)));
    let (st, _) = send(http::Method::POST, "/nope", Some(b"{}".to_vec())).await;
    assert_eq!(st, 404);
    let (st, v) = send(http::Method::POST, "/rpc", Some(vec![b' '; 4096])).await;
    assert_eq!((st, v["error"]["code"].as_i64()), (413, Some(-32600)));
    let (st, v) = send(http::Method::POST, "/rpc", Some(b"{not json".to_vec())).await;
    assert_eq!((st, v["error"]["code"].as_i64()), (200, Some(-32700)));
    // A hostile command nested deeper than a JSON reader should follow (within the size
    // limit), in an unknown field and in `dataItems`: an invalid-params answer to the right
    // id, and the server goes on serving.
    for field in ["x", "dataItems"] {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","method":"rpc","id":1,"params":{{"command":{{"id":"c","{field}":{}{}}}}}}}"#,
            "[".repeat(450),
            "]".repeat(450)
        );
        let (st, v) = send(http::Method::POST, "/rpc", Some(deep.into_bytes())).await;
        assert_eq!(
            (st, v["error"]["code"].as_i64()),
            (200, Some(-32602)),
            "{v}"
        );
        assert_eq!(v["id"], 1, "{v}");
    }
    let (st, v) = send(http::Method::POST, "/rpc", Some(b"{not json".to_vec())).await;
    assert_eq!((st, v["error"]["code"].as_i64()), (200, Some(-32700)));
}

/// A client that cannot keep up is cut off (the partner holds a bounded queue per stream) and
/// resumes with `re-stream` from the last event it saw: every event arrives, once, in order.
/// A partner whose streams queue 4 events, a leader that re-streams 20 ms after a cut, and
/// `task` started on a stream and working.
async fn a_working_streamed_task<R: Host>(
    rt: &R,
    task: &str,
) -> (PartnerServer, LeaderHandle, LeaderEvents) {
    let s = partner_server::<R>(
        ServerOptions::default(),
        PartnerOptions {
            stream_queue: 4,
            ..PartnerOptions::default()
        },
    );
    let mut config = leader_config();
    config.restream.first_backoff = Duration::from_millis(20);
    let (l, mut ev) = leader::<R>(
        config,
        ClientTls::default(),
        &format!("{}/rpc", s.base),
        Dialect::V2,
    )
    .await;
    let start = StartTask {
        delivery: Delivery::Stream,
        ..StartTask::new("p", task, "s", "hold")
    };
    l.start(start).await.unwrap();
    wait_state(rt, &mut ev, task, TaskState::Working).await;
    (s, l, ev)
}

/// The texts the leader's events carry (`texts` reads them from one event), until `n` have
/// come; how many times the stream was dropped (and resumed) meanwhile.
async fn texts_until<R: Host>(
    rt: &R,
    ev: &mut LeaderEvents,
    n: usize,
    texts: impl Fn(&LeaderEvent) -> Vec<String>,
) -> (Vec<String>, usize) {
    let (mut got, mut drops) = (Vec::new(), 0);
    wait_for(rt, ev, &format!("{n} texts"), |e| {
        match e {
            LeaderEvent::StreamDropped { .. } => drops += 1,
            LeaderEvent::StreamLost { .. } => panic!("the stream could not be resumed"),
            e => got.extend(texts(e)),
        }
        got.len() >= n
    })
    .await;
    (got, drops)
}

/// The plain texts of some data items.
fn item_texts<'a>(items: impl IntoIterator<Item = &'a DataItem>) -> Vec<String> {
    items
        .into_iter()
        .filter_map(DataItem::as_text)
        .map(str::to_owned)
        .collect()
}

async fn a_cut_stream_resumes_without_loss<R: Host>() {
    let rt = R::default();
    let (s, l, mut ev) = a_working_streamed_task(&rt, "t-cut").await;
    // 100 events in one burst: far more than the stream's queue of 4.
    s.handle
        .with_engine(|e, now| {
            for i in 0..100 {
                e.progress(now, "t-cut", vec![DataItem::text(i.to_string())])
                    .unwrap();
            }
        })
        .await
        .unwrap();
    let (got, drops) = texts_until(&rt, &mut ev, 100, |e| match e {
        LeaderEvent::Progress { status, .. } => item_texts(status.data_items.iter().flatten()),
        _ => Vec::new(),
    })
    .await;
    let want: Vec<String> = (0..100).map(|i| i.to_string()).collect();
    assert_eq!(got, want, "every event once, in order");
    assert!(drops >= 1, "the slow stream was cut and resumed");
    let v = l.task("t-cut").await.unwrap().unwrap();
    assert!(!v.stream_lost);
    assert_eq!(
        l.cancel("t-cut").await.unwrap().status.state,
        TaskState::Canceled
    );
}

/// A stream cut while product chunks replace one product is resumed with `re-stream`, and
/// the replayed chunks come from the partner's log, which points at the stored product
/// instead of copying it (`aip_proto` `stream::Shown`): each replayed chunk must still show
/// the product as it was when sent, not the version that replaced it.
async fn replayed_chunks_show_each_version_sent<R: Host>() {
    let rt = R::default();
    let (s, l, mut ev) = a_working_streamed_task(&rt, "t-rep").await;
    // 30 versions of one product in one burst, each replacing the last: far more than the
    // stream's queue of 4, so most reach the leader replayed from the log.
    s.handle
        .with_engine(|e, now| {
            for i in 0..30 {
                let v = aip_proto::Product::text("p", format!("v{i}"));
                e.product_chunk(now, "t-rep", v, false, i == 29).unwrap();
            }
        })
        .await
        .unwrap();
    let (got, drops) = texts_until(&rt, &mut ev, 30, |e| match e {
        LeaderEvent::ProductChunk { chunk, .. } => item_texts(&chunk.product.data_items),
        _ => Vec::new(),
    })
    .await;
    let want: Vec<String> = (0..30).map(|i| format!("v{i}")).collect();
    assert_eq!(got, want, "each chunk as it was sent, once, in order");
    assert!(drops >= 1, "the stream was cut and resumed from the log");
    assert_eq!(
        l.cancel("t-rep").await.unwrap().status.state,
        TaskState::Canceled
    );
}

/// An ended task is purged when its retention is over, by the partner's own loop (no request
/// comes in to wake it): the retention deadline is not a timer of the engine's index but read
/// from its ended tasks, so this is what shows the driver sleeps until it.
async fn ended_tasks_are_purged_after_retention<R: Host>() {
    let rt = R::default();
    let s = partner_server::<R>(
        ServerOptions::default(),
        PartnerOptions {
            engine: PartnerConfig {
                retention: Duration::from_millis(300),
                keepalive: None,
                ..PartnerConfig::default()
            },
            ..PartnerOptions::default()
        },
    );
    let (l, mut ev) = leader::<R>(
        leader_config(),
        ClientTls::default(),
        &format!("{}/rpc", s.base),
        Dialect::V2,
    )
    .await;
    l.start(StartTask::new("p", "t-r", "s-1", "hello"))
        .await
        .unwrap();
    wait_state(&rt, &mut ev, "t-r", TaskState::AwaitingCompletion).await;
    assert_eq!(
        l.complete("t-r").await.unwrap().status.state,
        TaskState::Completed
    );
    let mut seen = s.seen;
    wait_for(
        &rt,
        &mut seen,
        "t-r purged",
        |e| matches!(e, PartnerEvent::TaskPurged { task_id } if &**task_id == "t-r"),
    )
    .await;
    // A leader that never saw it asks: the partner no longer knows the task.
    let (other, _ev) = leader::<R>(
        leader_config(),
        ClientTls::default(),
        &format!("{}/rpc", s.base),
        Dialect::V2,
    )
    .await;
    assert_unknown_task(&other, "t-r").await;
}

/// A receiver that records each notification POST as `(token header, body)` and answers 200.
fn capture_notifications() -> (String, mpsc::UnboundedReceiver<(String, String)>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/notify", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::unbounded();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let (mut token, mut len) = (String::new(), 0usize);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((k, v)) = line.split_once(':') {
                    let v = v.trim().to_owned();
                    if k.eq_ignore_ascii_case(aip_proto::http::NOTIFICATION_TOKEN_HEADER) {
                        token = v;
                    } else if k.eq_ignore_ascii_case("content-length") {
                        len = v.parse().unwrap_or(0);
                    }
                }
            }
            let mut body = vec![0; len];
            let _ = reader.read_exact(&mut body);
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            if tx
                .unbounded_send((token, String::from_utf8_lossy(&body).into_owned()))
                .is_err()
            {
                break;
            }
        }
    });
    (url, rx)
}

/// Two leaders left at the default `id_seed` (0) mint different notification tokens: the
/// driver draws a seed from the OS. With the engine's fixed default, both would mint the same
/// first token, and anyone who knew it could forge notifications to either.
async fn default_leaders_mint_unguessable_tokens<R: Host>() {
    let rt = R::default();
    let s = partner_server::<R>(ServerOptions::default(), PartnerOptions::default());
    let (receiver, mut posts) = capture_notifications();
    let mut tokens = Vec::new();
    for task in ["t-one", "t-two"] {
        let mut config = leader_config();
        assert_eq!(config.id_seed, 0, "the engine's default");
        config.notification_url = Some(receiver.clone());
        config.poll_interval = None;
        let (l, _ev) = leader::<R>(
            config,
            ClientTls::default(),
            &format!("{}/rpc", s.base),
            Dialect::V2,
        )
        .await;
        let start = StartTask {
            delivery: Delivery::Notification {
                url: None,
                token: None,
                states: vec![],
            },
            ..StartTask::new("p", task, "s", "notify me")
        };
        l.start(start).await.unwrap();
        let (token, _) = wait_for(
            &rt,
            &mut posts,
            &format!("a notification of {task}"),
            |(_, body)| body.contains(&format!("\"{task}\"")),
        )
        .await;
        assert!(token.len() >= 16, "a token of some length: {token:?}");
        tokens.push(token);
    }
    assert_ne!(tokens[0], tokens[1], "two leaders minted the same token");
}

fn tokens<R: Host>(_: R) -> impl std::future::Future<Output = ()> {
    default_leaders_mint_unguessable_tokens::<R>()
}

fn purged<R: Host>(_: R) -> impl std::future::Future<Output = ()> {
    ended_tasks_are_purged_after_retention::<R>()
}

fn cut<R: Host>(_: R) -> impl std::future::Future<Output = ()> {
    a_cut_stream_resumes_without_loss::<R>()
}

fn replayed_chunks<R: Host>(_: R) -> impl std::future::Future<Output = ()> {
    replayed_chunks_show_each_version_sent::<R>()
}

macro_rules! on_both_runtimes {
    ($($name:ident => $body:expr;)*) => {
        mod tokio_rt {
            use super::*;
            $(#[test] fn $name() { <agent_rt::TokioRuntime as Host>::block_on($body(agent_rt::TokioRuntime)) })*
        }
        mod smol_rt {
            use super::*;
            $(#[test] fn $name() { <agent_rt::SmolRuntime as Host>::block_on($body(agent_rt::SmolRuntime)) })*
        }
    };
}

fn rpc_v2<R: Host>(_: R) -> impl std::future::Future<Output = ()> {
    rpc_lifecycles::<R>(Dialect::V2)
}
fn rpc_v1<R: Host>(_: R) -> impl std::future::Future<Output = ()> {
    rpc_lifecycles::<R>(Dialect::V1)
}
fn streams<R: Host>(_: R) -> impl std::future::Future<Output = ()> {
    stream_and_notification::<R>()
}
fn tls<R: Host>(_: R) -> impl std::future::Future<Output = ()> {
    tls_and_mtls::<R>()
}
fn refusals<R: Host>(_: R) -> impl std::future::Future<Output = ()> {
    http_refusals::<R>()
}

on_both_runtimes! {
    rpc_lifecycles_v2 => rpc_v2;
    rpc_lifecycles_v1 => rpc_v1;
    stream_and_notification_deliver_every_state => streams;
    mtls_admits_the_right_client_only => tls;
    non_aip_requests_get_json_rpc_errors => refusals;
    a_cut_stream_resumes_without_loss => cut;
    replayed_chunks_show_each_version_sent => replayed_chunks;
    ended_tasks_are_purged_after_retention_by_the_partner_loop => purged;
    leaders_at_the_default_seed_mint_different_notification_tokens => tokens;
}

/// The partner mounted in an axum app beside the app's own routes.
#[test]
fn the_partner_mounts_in_an_axum_app() {
    <agent_rt::TokioRuntime as Host>::block_on(async {
        let (p, events) = PartnerHandle::spawn(
            agent_rt::TokioRuntime,
            PartnerOptions {
                base_path: "/agents/echo".into(),
                ..PartnerOptions::default()
            },
        );
        let (seen, _seen_rx) = mpsc::unbounded();
        tokio::spawn(echo_agent(p.clone(), events, seen));
        let app = axum::Router::new()
            .route("/health", axum::routing::get(|| async { "ok" }))
            .merge(aip_driver::tokio::partner_router(p));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let url = format!("http://{addr}/agents/echo/rpc");
        let (l, mut ev) = leader::<agent_rt::TokioRuntime>(
            leader_config(),
            ClientTls::default(),
            &url,
            Dialect::V2,
        )
        .await;
        l.start(StartTask::new("p", "t-ax", "s", "from axum"))
            .await
            .unwrap();
        wait_state(
            &agent_rt::TokioRuntime,
            &mut ev,
            "t-ax",
            TaskState::AwaitingCompletion,
        )
        .await;
        assert_eq!(
            l.complete("t-ax").await.unwrap().status.state,
            TaskState::Completed
        );
        let c = HttpClient::new(agent_rt::TokioRuntime, ClientTls::default());
        let (st, b) = c
            .request(
                http::Method::GET,
                &format!("http://{addr}/health"),
                &[],
                None,
                DEADLINE,
                1024,
            )
            .await
            .unwrap();
        assert_eq!((st, &b[..]), (200, &b"ok"[..]));
    })
}
