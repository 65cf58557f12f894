//! An AWCP executor mounted inside your own axum app, beside the app's own routes.
//!
//! The app answers `/` and `/healthz` itself; `awcp::tokio::executor_router` serves the
//! executor's endpoints (`/awcp…` and the agent card at `/.well-known/agent-card.json`) in the
//! same server. The executor runs the built-in demo agent (`DemoRunner`, which writes an
//! inventory of the lent files into `AWCP_NOTES.md`); its work directories live in a temporary
//! directory removed at exit. It serves until Ctrl-C (SIGINT) or SIGTERM, then shuts down.
//!
//! ```text
//! cargo run -p awcp-examples --example executor_in_axum            # a free port on 127.0.0.1
//! cargo run -p awcp-examples --example executor_in_axum -- 10200   # 127.0.0.1:10200
//! ```
//!
//! Then, in another terminal, delegate a directory to the URL it prints:
//!
//! ```text
//! cargo run -p awcp-examples --example delegator_tokio -- --executor http://127.0.0.1:10200/awcp
//! ```

use std::sync::Arc;

use awcp::tokio::TokioRuntime;
use awcp::{ArchiveExecutor, DemoRunner, ExecutorConfig, ExecutorHandle, ExecutorOptions};
use axum::routing::get;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port: u16 = match std::env::args().nth(1) {
        None => 0,
        Some(p) => p.parse().map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("usage: executor_in_axum [PORT] (not a port: {p:?})"),
            )
        })?,
    };

    // The executor: policy (where work directories go), the archive transport, the agent.
    let work_root = tempfile::tempdir()?;
    let config = ExecutorConfig {
        work_root: work_root.path().to_string_lossy().into_owned(),
        ..ExecutorConfig::default()
    };
    let executor = ExecutorHandle::start(
        TokioRuntime,
        ExecutorOptions::new(
            config,
            Arc::new(ArchiveExecutor::default()),
            Arc::new(DemoRunner),
        ),
    );

    // Your app's own routes, with the executor's merged in (it routes by the full path, as
    // its fallback: merge it, do not nest it).
    let app = axum::Router::new()
        .route(
            "/",
            get(|| async { "my app; the AWCP executor is at /awcp\n" }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .merge(awcp::tokio::executor_router(executor.clone()));

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    // The URL delegators reach us at, used in the snapshot URLs the executor hands out.
    executor.set_public_url(format!("http://{addr}"));
    println!("app:        http://{addr}/");
    println!("executor:   http://{addr}/awcp");
    println!("agent card: http://{addr}/.well-known/agent-card.json");
    println!("(Ctrl-C to stop)");

    axum::serve(listener, app)
        .with_graceful_shutdown(awcp::tokio::shutdown_signal())
        .await?;
    // Cancels what is still running and releases every work directory.
    executor.shutdown().await;
    println!("stopped");
    Ok(())
}
