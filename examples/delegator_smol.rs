//! A delegator inside a smol program (the same program as `delegator_smol`, on smol; async-std
//! programs use it the same way, as async-std runs on smol's reactor): lends a directory to an
//! executor, prints the delegation's events as they come, then the result.
//!
//! With `--executor URL` it delegates to that executor (e.g. the one `executor_in_axum` or
//! `awcp-executor` prints); without, it starts an in-process executor (demo agent) on a free
//! loopback port first, so it runs on its own. Without `DIR` it lends a sample project it
//! creates in a temporary directory.
//!
//! ```text
//! cargo run -p awcp-examples --example delegator_smol
//! cargo run -p awcp-examples --example delegator_smol -- --executor http://127.0.0.1:10200/awcp ./project
//! ```
//!
//! The result is applied to `DIR` when the delegation completes (the demo agent writes
//! `AWCP_NOTES.md` there). Exits 0 when the delegation completed, 1 otherwise.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use awcp::proto::DelegatorEvent;
use awcp::smol::SmolRuntime;
use awcp::{
    ArchiveDelegator, ArchiveDelegatorConfig, ArchiveExecutor, DelegateParams, DelegatorHandle,
    DelegatorOptions, DemoRunner, ExecutorConfig, ExecutorHandle, ExecutorOptions,
};
use futures::channel::oneshot;
use futures::StreamExt;

const USAGE: &str = "usage: delegator_smol [--executor URL] [DIR]";

fn main() -> ExitCode {
    smol::block_on(run())
}

async fn run() -> ExitCode {
    let (executor_url, dir) = match awcp_examples::parse_args("a delegator on smol") {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    // Everything this program creates (sample project, state, executor work directories) goes
    // here and is removed at exit.
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let dir = dir.unwrap_or_else(|| awcp_examples::sample_project(scratch.path()));

    // The executor: the given URL, or one in this process.
    let local = match executor_url {
        Some(_) => None,
        None => Some(LocalExecutor::start(&scratch.path().join("executor-work")).await),
    };
    let peer = match (&local, executor_url) {
        (Some(l), _) => l.url.clone(),
        (None, Some(url)) => url,
        (None, None) => unreachable!("one of the two is set"),
    };
    println!("executor:  {peer}");
    println!("workspace: {}", dir.display());

    // The delegator: the archive transport, and a state directory it owns (staged snapshots,
    // the journal that lets a restarted delegator resume its delegations).
    let state = scratch.path().join("delegator");
    let transport = ArchiveDelegator::new(ArchiveDelegatorConfig::new(state.join("exports")));
    let delegator = DelegatorHandle::start(
        SmolRuntime,
        DelegatorOptions::new(Arc::new(transport), &state),
    );

    // Subscribe before delegating, so no early event is missed.
    let mut events = delegator.events();
    let params = DelegateParams::new(
        peer,
        &dir,
        "Write an inventory of the files into AWCP_NOTES.md.",
    )
    .description("List the project");
    let id = match delegator.delegate(params).await {
        Ok(id) => id,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("delegation {id} started");

    // Every event of this delegation until its end (`Ended` comes once everything is released).
    while let Some(ev) = events.next().await {
        awcp_examples::show(&ev);
        if matches!(&ev, DelegatorEvent::Ended { id: ended, .. } if *ended == id) {
            break;
        }
    }

    // The final view: state, the executor's summary, the snapshots and what became of them.
    let completed = match delegator.wait(&id).await {
        Ok(view) => awcp_examples::print_outcome(&view, &dir),
        Err(e) => {
            eprintln!("error: {e}");
            false
        }
    };

    delegator.stop().await;
    if let Some(l) = local {
        l.stop().await;
    }
    if completed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// An executor served by this process on a free loopback port.
struct LocalExecutor {
    url: String,
    executor: ExecutorHandle,
    stop: oneshot::Sender<()>,
    server: smol::Task<std::io::Result<()>>,
}

impl LocalExecutor {
    async fn start(work_root: &Path) -> LocalExecutor {
        let config = ExecutorConfig {
            work_root: work_root.to_string_lossy().into_owned(),
            ..ExecutorConfig::default()
        };
        let executor = ExecutorHandle::start(
            SmolRuntime,
            ExecutorOptions::new(
                config,
                Arc::new(ArchiveExecutor::default()),
                Arc::new(DemoRunner),
            ),
        );
        let listener = smol::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        executor.set_public_url(format!("http://{addr}"));
        let (stop, stopped) = oneshot::channel::<()>();
        // The executor's endpoints as a handler for agent-rt's server loop, on smol's I/O.
        let handler = awcp::smol::executor_service(executor.clone());
        let server = smol::spawn(awcp::smol::serve(listener, handler, async move {
            let _ = stopped.await;
        }));
        LocalExecutor {
            url: format!("http://{addr}/awcp"),
            executor,
            stop,
            server,
        }
    }

    async fn stop(self) {
        self.executor.shutdown().await;
        let _ = self.stop.send(());
        let _ = self.server.await;
    }
}
