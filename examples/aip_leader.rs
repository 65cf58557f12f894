//! An AIP leader that starts a task on a partner, follows it live over the task's stream, prints
//! its products and completes it. It runs on smol (the same code runs on tokio with
//! `aip_driver::tokio::TokioRuntime`).
//!
//! With a partner URL (its `rpc` endpoint, e.g. what `aip_partner` or `aip-partner` prints) it
//! talks to that partner; without, it first starts a small partner in this process on a free
//! loopback port, so it runs on its own.
//!
//! ```text
//! cargo run -p awcp-examples --example aip_leader
//! cargo run -p awcp-examples --example aip_leader -- http://127.0.0.1:10300/rpc "plan a trip"
//! ```
//!
//! Exits 0 when the task was completed, 1 otherwise. A partner that asks for input
//! (awaiting-input) gets the task cancelled: this example is not interactive.

use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use aip_driver::aip_proto::leader::{Delivery, LeaderEvent, PartnerEndpoint, StartTask};
use aip_driver::aip_proto::partner::PartnerEvent;
use aip_driver::aip_proto::{DataItem, Dialect, Product, TaskState};
use aip_driver::leader::{LeaderHandle, LeaderOptions};
use aip_driver::partner::{PartnerHandle, PartnerOptions};
use aip_driver::smol::{ServerOptions, SmolRuntime};
use futures::StreamExt;

fn main() -> ExitCode {
    smol::block_on(run())
}

async fn run() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let url = args.next();
    let request = args
        .next()
        .unwrap_or_else(|| "plan a trip to Rome".to_owned());

    // The partner: the given URL, or one in this process (stopped when `_local` is dropped).
    let (url, _local) = match url {
        Some(url) => (url, None),
        None => {
            let (url, stop) = local_partner();
            (url, Some(stop))
        }
    };
    println!("partner: {url}");

    // The leader engine, with the partner registered under a name of our choice. The dialect
    // is the one the partner speaks (v02 is acps-sdk 2.x's; `Dialect::V1` for v01.00).
    let (leader, mut events) = LeaderHandle::spawn(SmolRuntime, LeaderOptions::default());
    let endpoint = PartnerEndpoint {
        url,
        dialect: Dialect::V2,
    };
    if let Err(e) = leader.add_partner("partner", endpoint).await {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }

    // Start the task, followed by its stream (status updates and products as they happen).
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let task_id = format!("task-{millis}");
    let start = StartTask {
        delivery: Delivery::Stream,
        ..StartTask::new("partner", &task_id, "session-1", request.as_str())
    };
    match leader.start(start).await {
        Ok(first) => println!("[{task_id}] started: {}", first.status.state),
        Err(e) => {
            eprintln!("error: the partner did not take the task: {e}");
            return ExitCode::FAILURE;
        }
    }

    // Follow it until the partner has submitted its products, or the task ended.
    let mut ready = false;
    while let Some(event) = events.next().await {
        match event {
            LeaderEvent::StateChanged {
                task_id: t, status, ..
            } if t == task_id => {
                println!(
                    "[{t}] {}{}",
                    status.state,
                    texts(status.data_items.as_deref())
                );
                match status.state {
                    TaskState::AwaitingCompletion => {
                        ready = true;
                        break;
                    }
                    TaskState::AwaitingInput => {
                        println!("[{t}] the partner asks for input; cancelling");
                        let _ = leader.cancel(&t).await;
                        break;
                    }
                    _ => {}
                }
            }
            LeaderEvent::Progress { task_id: t, status } if t == task_id => {
                println!("[{t}] progress{}", texts(status.data_items.as_deref()));
            }
            LeaderEvent::TaskEnded { task_id: t, state } if t == task_id => {
                println!("[{t}] ended: {state}");
                break;
            }
            LeaderEvent::TaskAbandoned { task_id: t, reason } if t == task_id => {
                println!("[{t}] abandoned: {reason:?}");
                break;
            }
            _ => {}
        }
    }
    if !ready {
        return ExitCode::FAILURE;
    }

    // The products, as the leader last received them.
    match leader.task(&task_id).await {
        Ok(Some(task)) => {
            for p in &task.products {
                println!("product {}{}", p.id, texts(Some(&p.data_items)));
            }
        }
        Ok(None) => println!("(the task is no longer known)"),
        Err(e) => eprintln!("error: {e}"),
    }

    // Accept the result: awaiting-completion → completed.
    match leader.complete(&task_id).await {
        Ok(done) if done.status.state == TaskState::Completed => {
            println!("[{task_id}] completed");
            ExitCode::SUCCESS
        }
        Ok(other) => {
            println!("[{task_id}] {}", other.status.state);
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// ` — text1 text2`, or nothing when there is no text.
fn texts(items: Option<&[DataItem]>) -> String {
    let t: Vec<&str> = items
        .unwrap_or_default()
        .iter()
        .filter_map(DataItem::as_text)
        .collect();
    if t.is_empty() {
        String::new()
    } else {
        format!(" — {}", t.join(" "))
    }
}

/// A partner in this process on a free loopback port that answers every task with one product
/// (see the `aip_partner` example for a fuller one). Returns its `rpc` URL and a sender that
/// stops its server when dropped.
fn local_partner() -> (String, futures::channel::oneshot::Sender<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/rpc", listener.local_addr().expect("address"));
    let (partner, mut events) = PartnerHandle::spawn(SmolRuntime, PartnerOptions::default());
    let p = partner.clone();
    smol::spawn(async move {
        while let Some(event) = events.next().await {
            if let PartnerEvent::TaskStarted { task_id, command } = event {
                let request: Vec<&str> = command
                    .items()
                    .iter()
                    .filter_map(DataItem::as_text)
                    .collect();
                let answer = Product::text("answer", format!("a plan for: {}", request.join(" ")));
                if p.start_working(&task_id).await.is_ok() {
                    let _ = p.submit(&task_id, vec![answer], vec![]).await;
                }
            }
        }
    })
    .detach();
    let (stop, stopped) = futures::channel::oneshot::channel::<()>();
    let server = aip_driver::serve_partner(
        SmolRuntime,
        listener,
        &partner,
        ServerOptions::default(),
        async move {
            let _ = stopped.await;
        },
    );
    smol::spawn(server).detach();
    (url, stop)
}
