//! What the driver tests share: the echo partner application, a partner server on a free
//! loopback port, a leader, and waits on events (bounded by a deadline never reached when
//! things work).
#![allow(dead_code)]

pub mod rabbit;
pub mod sdk;

use std::time::Duration;

use agent_rt::{ClientTls, Host, Runtime, ServerOptions};
use aip_driver::leader::{LeaderEvents, LeaderHandle, LeaderOptions};
use aip_driver::partner::{PartnerEvents, PartnerHandle, PartnerOptions};
use aip_proto::leader::{AttachTask, Delivery};
use aip_proto::leader::{LeaderConfig, LeaderEvent, PartnerEndpoint};
use aip_proto::partner::PartnerEvent;
use aip_proto::{DataItem, Dialect, Product, TaskState};
use aip_proto::{ErrorCode, TaskResult};
use futures::channel::{mpsc, oneshot};
use futures::StreamExt;

pub const DEADLINE: Duration = Duration::from_secs(60);

/// The partner application: echoes the request as a product; asks a question first when the
/// request says "ask"; streams progress and a chunk first when it says "stream"; only starts
/// working when it says "hold".
pub async fn echo_agent(
    p: PartnerHandle,
    mut events: PartnerEvents,
    seen: mpsc::UnboundedSender<PartnerEvent>,
) {
    fn text(items: &[DataItem]) -> String {
        items
            .iter()
            .filter_map(DataItem::as_text)
            .collect::<Vec<_>>()
            .join(" ")
    }
    while let Some(e) = events.next().await {
        match &e {
            PartnerEvent::TaskStarted { task_id, command } => {
                let t = text(command.items());
                p.start_working(task_id).await.unwrap();
                if t.contains("hold") {
                    // The test drives this task itself.
                } else if t.contains("ask") {
                    p.request_input(task_id, vec![DataItem::text("which city?")])
                        .await
                        .unwrap();
                } else {
                    if t.contains("stream") {
                        for i in 1..=3 {
                            p.progress(task_id, vec![DataItem::text(format!("{i}/3"))])
                                .await
                                .unwrap();
                        }
                        p.product_chunk(task_id, Product::text("draft", "part 1"), false, false)
                            .await
                            .unwrap();
                    }
                    let answer = Product::text("answer", format!("echo: {t}"));
                    p.submit(task_id, vec![answer], vec![]).await.unwrap();
                }
            }
            PartnerEvent::TaskContinued { task_id, command } => {
                let answer = Product::text("answer", format!("echo: {}", text(command.items())));
                p.submit(task_id, vec![answer], vec![]).await.unwrap();
            }
            _ => {}
        }
        let _ = seen.unbounded_send(e);
    }
}

pub struct PartnerServer {
    /// `http(s)://127.0.0.1:port` + base path.
    pub base: String,
    pub handle: PartnerHandle,
    pub seen: mpsc::UnboundedReceiver<PartnerEvent>,
    _stop: oneshot::Sender<()>,
}

pub fn partner_server<R: Host>(server: ServerOptions, opts: PartnerOptions) -> PartnerServer {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let base = format!("{}://{addr}{}", server.scheme(), opts.base_path);
    let (handle, events) = PartnerHandle::spawn(R::default(), opts);
    let (seen_tx, seen) = mpsc::unbounded();
    R::default().spawn(Box::pin(echo_agent(handle.clone(), events, seen_tx)));
    let (stop, rx) = oneshot::channel::<()>();
    let serve = aip_driver::serve_partner(R::default(), l, &handle, server, async move {
        let _ = rx.await;
    });
    R::default().spawn(Box::pin(async move {
        serve.await.unwrap();
    }));
    PartnerServer {
        base,
        handle,
        seen,
        _stop: stop,
    }
}

pub fn leader_config() -> LeaderConfig {
    LeaderConfig {
        leader_id: "leader-1".into(),
        poll_interval: Some(Duration::from_millis(50)),
        ..LeaderConfig::default()
    }
}

pub async fn leader<R: Host>(
    config: LeaderConfig,
    tls: ClientTls,
    rpc_url: &str,
    dialect: Dialect,
) -> (LeaderHandle, LeaderEvents) {
    let (l, events) = LeaderHandle::spawn(
        R::default(),
        LeaderOptions {
            engine: config,
            client_tls: tls,
            ..LeaderOptions::default()
        },
    );
    l.add_partner(
        "p",
        PartnerEndpoint {
            url: rpc_url.to_owned(),
            dialect,
        },
    )
    .await
    .unwrap();
    (l, events)
}

/// The next event `pred` picks (earlier ones are skipped).
pub async fn wait_for<R: Runtime, E: std::fmt::Debug>(
    rt: &R,
    events: &mut mpsc::UnboundedReceiver<E>,
    what: &str,
    mut pred: impl FnMut(&E) -> bool,
) -> E {
    let found = agent_rt::runtime::timeout(rt, DEADLINE, async {
        while let Some(e) = events.next().await {
            if std::env::var_os("AIP_TEST_TRACE").is_some() {
                eprintln!("[{what}] {e:?}");
            }
            if pred(&e) {
                return Some(e);
            }
        }
        None
    })
    .await;
    match found {
        Some(Some(e)) => e,
        Some(None) => panic!("events ended before {what}"),
        None => panic!("timed out waiting for {what}"),
    }
}

pub async fn wait_state<R: Runtime>(
    rt: &R,
    events: &mut LeaderEvents,
    task: &str,
    state: TaskState,
) {
    wait_for(rt, events, &format!("{task} {state}"), |e| {
        matches!(e, LeaderEvent::StateChanged { task_id, status, .. } if task_id == task && status.state == state)
    })
    .await;
}

pub fn product_text(p: &[Product], id: &str) -> Option<String> {
    let p = p.iter().find(|p| p.id == id)?;
    Some(p.data_items.iter().filter_map(DataItem::as_text).collect())
}

/// The status history of a task that asked for input once and was continued.
pub const ASKED_ONCE: [TaskState; 5] = [
    TaskState::Accepted,
    TaskState::Working,
    TaskState::AwaitingInput,
    TaskState::Working,
    TaskState::AwaitingCompletion,
];

/// The states of a task's status history.
pub fn history(t: TaskResult) -> Vec<TaskState> {
    t.status_history
        .unwrap_or_default()
        .iter()
        .map(|s| s.state)
        .collect()
}

/// `get` of a task the partner does not know fails with -32001.
pub async fn assert_unknown_task(l: &LeaderHandle, task: &str) {
    l.attach(AttachTask {
        partner: "p".into(),
        task_id: task.into(),
        session_id: "s".into(),
        delivery: Delivery::Rpc,
        deadline: None,
    })
    .await
    .unwrap();
    let e = l.get(task).await.unwrap_err();
    assert_eq!(
        e.rpc_error().map(|e| e.code),
        Some(ErrorCode::TaskNotFound),
        "{e}"
    );
}
