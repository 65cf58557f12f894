//! An executor with an agent of its own: a [`TaskRunner`] that counts the lines of every lent
//! file and writes a report, `LINE_COUNT.md`, into the work directory. What the agent writes
//! there goes back to the delegator as the delegation's result.
//!
//! The executor calls [`TaskRunner::run`] on its runtime's blocking pool once the workspace is
//! in the work directory. The runner reports progress through `progress`, checks `cancel` (a
//! cancelled delegation or an expiring lease sets it) and must not write under a read-only
//! (`ro`) delegation. A runner that starts processes implements `run_tracked` too (see
//! `awcp::CommandRunner`, which runs any command-line agent).
//!
//! By default the example runs on its own: it serves the executor on a free loopback port,
//! delegates a sample project to it in-process and prints the report that came back. With
//! `--serve [PORT]` it only serves the executor until Ctrl-C, for any delegator to use.
//!
//! ```text
//! cargo run -p awcp-examples --example custom_agent_runner
//! cargo run -p awcp-examples --example custom_agent_runner -- --serve 10200
//! ```

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use awcp::proto::TaskFailure;
use awcp::tokio::TokioRuntime;
use awcp::transports::{walk, CancelFlag, WalkOptions};
use awcp::{
    AccessMode, ArchiveDelegator, ArchiveDelegatorConfig, ArchiveExecutor, DelegateParams,
    DelegationState, DelegatorHandle, DelegatorOptions, ExecutorConfig, ExecutorHandle,
    ExecutorOptions, TaskContext, TaskOutcome, TaskRunner,
};

/// The file the agent writes.
const REPORT: &str = "LINE_COUNT.md";

/// The agent: counts lines per file and writes [`REPORT`] at the workspace root.
struct LineCountRunner;

impl TaskRunner for LineCountRunner {
    fn run(
        &self,
        ctx: &TaskContext,
        progress: &dyn Fn(String),
        cancel: &CancelFlag,
    ) -> Result<TaskOutcome, TaskFailure> {
        progress(format!("counting lines for: {}", ctx.description));
        // The same walker the transports use: regular files only, symlinks never followed.
        let files = walk(&ctx.work_dir, &WalkOptions::default(), cancel)
            .map_err(|e| e.to_string())?
            .files;
        let mut report = format!("# Lines per file\n\nTask: {}\n\n", ctx.prompt.trim());
        let mut total = 0;
        for f in files.iter().filter(|f| f.rel != REPORT) {
            // Stop promptly when the delegation is cancelled or its lease runs out.
            cancel.check().map_err(|e| e.to_string())?;
            let lines = std::fs::read(&f.path)
                .map(|b| b.iter().filter(|&&c| c == b'\n').count())
                .map_err(|e| format!("reading {}: {e}", f.rel))?;
            total += lines;
            report.push_str(&format!("- {}: {lines}\n", f.rel));
            progress(format!("{}: {lines}", f.rel));
        }
        report.push_str(&format!("\nTotal: {total} lines\n"));
        let summary = format!("{total} lines in {} files.", files.len());
        // Under `ro` the agent may look but not touch: answer with the summary only.
        if ctx.access_mode != AccessMode::Rw {
            return Ok(TaskOutcome {
                summary,
                highlights: Vec::new(),
            });
        }
        std::fs::write(ctx.work_dir.join(REPORT), report).map_err(|e| e.to_string())?;
        Ok(TaskOutcome {
            summary,
            highlights: vec![REPORT.to_owned()],
        })
    }
}

/// An executor whose agent is [`LineCountRunner`].
fn executor(work_root: &Path) -> ExecutorHandle {
    let config = ExecutorConfig {
        work_root: work_root.to_string_lossy().into_owned(),
        ..ExecutorConfig::default()
    };
    ExecutorHandle::start(
        TokioRuntime,
        ExecutorOptions::new(
            config,
            Arc::new(ArchiveExecutor::default()),
            Arc::new(LineCountRunner),
        ),
    )
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let serve_only = args.first().map(String::as_str) == Some("--serve");
    let port: u16 = match args.get(1).map(|p| p.parse()) {
        None => 0,
        Some(Ok(p)) if serve_only => p,
        _ => {
            eprintln!("usage: custom_agent_runner [--serve [PORT]]");
            return ExitCode::from(2);
        }
    };
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let executor = executor(&scratch.path().join("executor-work"));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local address");
    executor.set_public_url(format!("http://{addr}"));
    let url = format!("http://{addr}/awcp");
    let router = awcp::tokio::executor_router(executor.clone());

    if serve_only {
        println!("executor (line-count agent): {url}\n(Ctrl-C to stop)");
        let served = awcp::tokio::serve(listener, router, awcp::tokio::shutdown_signal()).await;
        executor.shutdown().await;
        return match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }

    // Self-contained: serve in the background and delegate a sample project to ourselves.
    let (stop, stopped) = futures::channel::oneshot::channel::<()>();
    let server = tokio::spawn(awcp::tokio::serve(listener, router, async move {
        let _ = stopped.await;
    }));
    let project = scratch.path().join("project");
    std::fs::create_dir_all(project.join("src")).expect("sample project");
    std::fs::write(project.join("README.md"), "# Demo\n\nTwo lines above.\n").expect("file");
    std::fs::write(project.join("src/lib.rs"), "pub fn f() {}\n").expect("file");

    let state = scratch.path().join("delegator");
    let transport = ArchiveDelegator::new(ArchiveDelegatorConfig::new(state.join("exports")));
    let delegator = DelegatorHandle::start(
        TokioRuntime,
        DelegatorOptions::new(Arc::new(transport), &state),
    );
    let params = DelegateParams::new(&url, &project, "Count the lines of every file.");
    let view = match delegator.delegate(params).await {
        Ok(id) => delegator.wait(&id).await,
        Err(e) => Err(e),
    };
    let ok = match view {
        Ok(v) => {
            println!("delegation {}: {}", v.request.id, v.state);
            if let Some(r) = &v.result {
                println!("summary: {}", r.summary);
            }
            if let Some(e) = &v.error {
                println!("error: {} {}", e.code, e.message);
            }
            v.state == DelegationState::Completed
        }
        Err(e) => {
            eprintln!("error: {e}");
            false
        }
    };
    match std::fs::read_to_string(project.join(REPORT)) {
        Ok(report) => {
            println!("\n--- {REPORT}, written by the agent, applied locally ---\n{report}")
        }
        Err(_) => println!("(no {REPORT} came back)"),
    }

    delegator.stop().await;
    executor.shutdown().await;
    let _ = stop.send(());
    let _ = server.await;
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
