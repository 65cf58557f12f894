//! End-to-end failure scenarios over real HTTP: the SSE connection cut mid-task (through a TCP
//! proxy the test controls), and the executor process killed with SIGKILL mid-task, then
//! restarted on the same port with the same state directory.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use awcp_driver::{
    DelegateParams, DelegatorHandle, DelegatorOptions, ExecutorHandle, ExecutorOptions,
};
use awcp_proto::{DelegationState, DelegatorEvent, ErrorCode, ExecutorConfig};
use awcp_tokio::TokioRuntime;
use awcp_transports::{
    ArchiveDelegator, ArchiveDelegatorConfig, ArchiveExecutor, CancelFlag, TaskContext,
    TaskOutcome, TaskRunner,
};
use futures::StreamExt;
use tokio::io::AsyncReadExt;
use tokio::sync::Notify;

fn delegator(dir: &Path) -> DelegatorHandle {
    let state = dir.join("delegator");
    let transport = ArchiveDelegator::new(ArchiveDelegatorConfig::new(state.join("exports")));
    let mut opts = DelegatorOptions::new(Arc::new(transport), state);
    opts.engine.sse_backoff = Duration::from_millis(50);
    opts.engine.result_poll_interval = Duration::from_millis(100);
    DelegatorHandle::start(TokioRuntime, opts)
}

fn workspace(dir: &Path) -> PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "A\n").unwrap();
    ws
}

// ---------------------------------------------------------------------------------------------
// A TCP proxy that can cut every connection on demand.

#[derive(Clone, Default)]
struct Proxy {
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    event_streams: Arc<Mutex<u32>>,
    stream_opened: Arc<Notify>,
}

impl Proxy {
    async fn start(self, upstream: std::net::SocketAddr) -> std::net::SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut down, _)) = l.accept().await else {
                    return;
                };
                let me = self.clone();
                let h = tokio::spawn(async move {
                    let Ok(mut up) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    // Peek at the request line to count event-stream connections.
                    let mut first = vec![0u8; 256];
                    let n = down.read(&mut first).await.unwrap_or(0);
                    if String::from_utf8_lossy(&first[..n]).contains("/events ") {
                        *me.event_streams.lock().unwrap() += 1;
                        me.stream_opened.notify_one();
                    }
                    use tokio::io::AsyncWriteExt;
                    if up.write_all(&first[..n]).await.is_err() {
                        return;
                    }
                    let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                });
                self.conns.lock().unwrap().push(h.abort_handle());
            }
        });
        addr
    }

    fn cut_all(&self) {
        for h in self.conns.lock().unwrap().drain(..) {
            h.abort();
        }
    }
}

#[derive(Clone, Default)]
struct GateRunner {
    started: Arc<Notify>,
    release: Arc<Notify>,
}

impl TaskRunner for GateRunner {
    fn run(
        &self,
        ctx: &TaskContext,
        progress: &dyn Fn(String),
        cancel: &CancelFlag,
    ) -> Result<TaskOutcome, String> {
        progress("gate: started".into());
        self.started.notify_one();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let released = rt.block_on(async {
            tokio::select! {
                _ = self.release.notified() => true,
                _ = async { while !cancel.is_cancelled() { tokio::time::sleep(Duration::from_millis(5)).await } } => false,
            }
        });
        if !released {
            return Err("stopped".into());
        }
        std::fs::write(
            ctx.work_dir.join("after-cut.txt"),
            "written after the cut\n",
        )
        .map_err(|e| e.to_string())?;
        Ok(TaskOutcome {
            summary: "finished after the cut".into(),
            highlights: vec![],
        })
    }
}

/// An in-process executor with `gate` as its runner, served on a free loopback port.
async fn start_gated_executor(dir: &Path, gate: &GateRunner) -> std::net::SocketAddr {
    let opts = ExecutorOptions::new(
        ExecutorConfig {
            work_root: dir.join("work").to_string_lossy().into_owned(),
            ..ExecutorConfig::default()
        },
        Arc::new(ArchiveExecutor::default()),
        Arc::new(gate.clone()),
    );
    let ex = ExecutorHandle::start(TokioRuntime, opts);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ex_addr = l.local_addr().unwrap();
    ex.set_public_url(format!("http://{ex_addr}"));
    tokio::spawn(awcp_tokio::serve(
        l,
        awcp_tokio::executor_router(ex),
        std::future::pending(),
    ));
    ex_addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_connection_cut_mid_task_is_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let gate = GateRunner::default();
    let ex_addr = start_gated_executor(dir.path(), &gate).await;
    let proxy = Proxy::default();
    let paddr = proxy.clone().start(ex_addr).await;

    let d = delegator(dir.path());
    let ws = workspace(dir.path());
    let id = d
        .delegate(DelegateParams::new(
            format!("http://{paddr}/awcp"),
            &ws,
            "cut",
            "survive a cut",
        ))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(120), gate.started.notified())
        .await
        .expect("the task started");
    tokio::time::timeout(Duration::from_secs(120), proxy.stream_opened.notified())
        .await
        .expect("first stream"); // its permit
    assert_eq!(*proxy.event_streams.lock().unwrap(), 1);
    proxy.cut_all();
    // Wait until the delegator has re-opened its stream (the proxy sees a new connection).
    tokio::time::timeout(Duration::from_secs(120), proxy.stream_opened.notified())
        .await
        .expect("the stream came back");
    assert_eq!(*proxy.event_streams.lock().unwrap(), 2);
    assert!(d.get(&id).await.unwrap().state == DelegationState::Running);
    gate.release.notify_one();
    let v = tokio::time::timeout(Duration::from_secs(60), d.wait(&id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    assert_eq!(
        std::fs::read_to_string(ws.join("after-cut.txt")).unwrap(),
        "written after the cut\n"
    );
}

// ---------------------------------------------------------------------------------------------
// SIGKILL of the executor process.

fn executor_binary() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "-q",
            "-p",
            "awcp-examples",
            "--bin",
            "awcp-executor",
        ])
        .status()
        .expect("cargo build runs");
    assert!(status.success(), "building awcp-executor failed");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("debug/awcp-executor")
}

struct ExecutorProcess {
    child: Child,
    url: String,
}

fn spawn_executor(bin: &Path, listen: &str, dir: &Path, marker: &str) -> ExecutorProcess {
    let mut child = Command::new(bin)
        .args(["--listen", listen, "--quiet"])
        .arg("--work-root")
        .arg(dir.join("work"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--agent-cmd")
        .arg(format!("sh -c 'echo started; exec sleep 120 {marker}'"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("executor starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("executor prints its URL");
    let url = line
        .trim()
        .strip_prefix("awcp-executor listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    ExecutorProcess { child, url }
}

impl Drop for ExecutorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_killed_mid_task_then_restarted() {
    let bin = tokio::task::spawn_blocking(executor_binary).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("awcp-e2e-{}", std::process::id());
    let mut ex = spawn_executor(&bin, "127.0.0.1:0", dir.path(), &marker);
    let peer = ex.url.clone();
    let port = peer
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("/awcp")
        .to_owned();

    let d = delegator(dir.path());
    let ws = workspace(dir.path());
    let before = std::fs::read_to_string(ws.join("a.txt")).unwrap();
    let mut events = d.events();
    let id = d
        .delegate(DelegateParams::new(&peer, &ws, "kill", "long task"))
        .await
        .unwrap();
    // Wait for the agent command to report it started.
    loop {
        let next = tokio::time::timeout(Duration::from_secs(120), events.next())
            .await
            .expect("progress in time");
        match next {
            Some(DelegatorEvent::Progress {
                message: Some(m), ..
            }) if m == "started" => break,
            Some(DelegatorEvent::Ended { .. }) | None => panic!("ended before the task started"),
            _ => {}
        }
    }
    let work_dir = dir.path().join("work").join(id.as_str());
    assert!(work_dir.exists());
    // SIGKILL: no chance to clean up.
    ex.child.kill().unwrap();
    ex.child.wait().unwrap();
    // Kill the orphaned agent too (a real deployment runs agents in a cgroup/pgroup).
    let _ = Command::new("pkill").args(["-f", &marker]).status();
    // Restart on the same port with the same state.
    let ex2 = spawn_executor(&bin, &format!("127.0.0.1:{port}"), dir.path(), &marker);
    assert_eq!(ex2.url, peer);
    let v = tokio::time::timeout(Duration::from_secs(60), d.wait(&id))
        .await
        .unwrap()
        .unwrap();
    // The restarted executor reports the lost work instead of leaving the delegation stuck.
    assert_eq!(v.state, DelegationState::Error, "{v:?}");
    let e = v.error.unwrap();
    assert_eq!(e.code, ErrorCode::TaskFailed);
    assert!(e.message.contains("restarted"), "{e:?}");
    // The stale work directory is gone; the source is untouched.
    assert!(!work_dir.exists(), "stale work dir removed at start-up");
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), before);
    drop(ex2);
    let _ = Command::new("pkill").args(["-f", &marker]).status();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegator_restart_reconnects_and_applies_the_result() {
    let dir = tempfile::tempdir().unwrap();
    let gate = GateRunner::default();
    let ex_addr = start_gated_executor(dir.path(), &gate).await;

    let ws = workspace(dir.path());
    let d1 = delegator(dir.path());
    let id = d1
        .delegate(DelegateParams::new(
            format!("http://{ex_addr}/awcp"),
            &ws,
            "restart",
            "survive a delegator restart",
        ))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(120), gate.started.notified())
        .await
        .expect("the task started");
    d1.stop().await;
    // A new process on the same state directory picks the delegation up from its journal.
    let d2 = delegator(dir.path());
    let v = d2.get(&id).await.expect("restored from the journal");
    assert!(
        matches!(v.state, DelegationState::Running | DelegationState::Started),
        "{v:?}"
    );
    gate.release.notify_one();
    let v = tokio::time::timeout(Duration::from_secs(60), d2.wait(&id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    assert_eq!(
        std::fs::read_to_string(ws.join("after-cut.txt")).unwrap(),
        "written after the cut\n",
        "the result was applied by the restarted delegator"
    );
}
