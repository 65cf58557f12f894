//! An AIP partner that answers tasks: for each task a leader starts it reports progress, then
//! submits two products (an answer and a word count) and waits for the leader to complete it.
//! A task the leader continues is answered again with the new input.
//!
//! The partner engine ([`PartnerHandle`]) holds the tasks, speaks both dialects (v01.00 and
//! v02) and serves `rpc`, `stream` (SSE) and notifications; the application reads its events
//! and moves each task with the handle's calls. It serves until Ctrl-C (SIGINT) or SIGTERM.
//!
//! ```text
//! cargo run -p awcp-examples --example aip_partner              # a free port on 127.0.0.1
//! cargo run -p awcp-examples --example aip_partner -- 10300     # 127.0.0.1:10300
//! ```
//!
//! Then start a task on it with the leader example (or the `aip` CLI):
//!
//! ```text
//! cargo run -p awcp-examples --example aip_leader -- http://127.0.0.1:10300/rpc "plan a trip"
//! ```

use aip_driver::aip_proto::partner::PartnerEvent;
use aip_driver::aip_proto::{DataItem, Product};
use aip_driver::partner::{PartnerEvents, PartnerHandle, PartnerOptions};
use aip_driver::tokio::{ServerOptions, TokioRuntime};
use futures::StreamExt;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port: u16 = match std::env::args().nth(1) {
        None => 0,
        Some(p) => p.parse().map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("usage: aip_partner [PORT] (not a port: {p:?})"),
            )
        })?,
    };
    let (partner, events) = PartnerHandle::spawn(TokioRuntime, PartnerOptions::default());
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
    println!(
        "partner: http://{}/rpc\n(Ctrl-C to stop)",
        listener.local_addr()?
    );

    // The application: answers every task, in a task of its own.
    tokio::spawn(answer_tasks(partner.clone(), events));

    // The partner's endpoints on agent-rt's server loop (TLS and mTLS through ServerOptions).
    // To serve them inside an axum app instead, merge `aip_driver::tokio::partner_router`.
    aip_driver::serve_partner(
        TokioRuntime,
        listener,
        &partner,
        ServerOptions::default(),
        aip_driver::tokio::shutdown_signal(),
    )
    .await?;
    println!("stopped");
    Ok(())
}

/// Reads the partner's events and does the work of each task.
async fn answer_tasks(partner: PartnerHandle, mut events: PartnerEvents) {
    while let Some(event) = events.next().await {
        match event {
            PartnerEvent::TaskStarted { task_id, command } => {
                let request = text_of(command.items());
                println!("[{task_id}] started: {request}");
                if let Err(e) = partner.start_working(&task_id).await {
                    eprintln!("[{task_id}] {e}");
                    continue;
                }
                answer(&partner, &task_id, &request).await;
            }
            PartnerEvent::TaskContinued { task_id, command } => {
                let more = text_of(command.items());
                println!("[{task_id}] continued: {more}");
                answer(&partner, &task_id, &more).await;
            }
            PartnerEvent::TaskEnded { task_id, state } => println!("[{task_id}] ended: {state}"),
            _ => {}
        }
    }
}

/// Progress, then the products: working → awaiting-completion (the leader completes it).
async fn answer(partner: &PartnerHandle, task_id: &str, request: &str) {
    let progress = vec![DataItem::text("reading the request")];
    if let Err(e) = partner.progress(task_id, progress).await {
        eprintln!("[{task_id}] {e}");
        return;
    }
    let words = request.split_whitespace().count();
    let products = vec![
        Product::text("answer", format!("You asked: {request}")),
        Product::text("word-count", words.to_string()),
    ];
    match partner.submit(task_id, products, vec![]).await {
        Ok(state) => println!("[{task_id}] submitted, now {state}"),
        Err(e) => eprintln!("[{task_id}] {e}"),
    }
}

/// The text items of a command, joined by spaces.
fn text_of(items: &[DataItem]) -> String {
    items
        .iter()
        .filter_map(DataItem::as_text)
        .collect::<Vec<_>>()
        .join(" ")
}
