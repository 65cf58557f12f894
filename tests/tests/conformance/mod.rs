//! The conformance suite: end-to-end delegations over real HTTP on 127.0.0.1 with real files,
//! written once against [`TestRuntime`] (a driver's `awcp_driver::Driver`) and instantiated per driver by [`conformance_suite!`]
//! (`conformance_tokio.rs`, `conformance_smol.rs`). The cross-runtime and async-std tests reuse
//! its harness.
//!
//! Every wait is on an event (a delegation ending, a runner reporting it started, a process
//! printing its URL); nothing sleeps to let time pass.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use awcp_driver::{
    DelegateParams, DelegatorHandle, DelegatorOptions, ExecutorHandle, ExecutorOptions,
};
use awcp_proto::engine::executor::RequiredAuth;
use awcp_proto::engine::SnapshotMode;
use awcp_proto::{
    AccessMode, AdmissionLimits, Auth, AuthType, DelegationState, DelegatorConfig, ErrorCode,
    ExecutorConfig,
};
use awcp_transports::{
    ArchiveDelegator, ArchiveDelegatorConfig, ArchiveExecutor, CancelFlag, TaskContext,
    TaskOutcome, TaskRunner,
};
use std::future::Future;
use std::net::SocketAddr;

use awcp_driver::Runtime;

pub mod security;
#[allow(unused_imports)]
pub use security::*;

// ---------------------------------------------------------------------------------------------
// Runtimes: every scenario is generic over the driver's [`Driver`] (block_on, serve_*_on).

pub use awcp_driver::Driver as TestRuntime;

/// Binds 127.0.0.1 on a free port.
pub fn bind() -> (std::net::TcpListener, SocketAddr) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    (l, a)
}

/// Runs `fut` on `R` in the background; the returned future yields its output.
pub fn spawn<R: Runtime + Default, T: Send + 'static>(
    fut: impl Future<Output = T> + Send + 'static,
) -> impl Future<Output = T> {
    let (tx, rx) = futures::channel::oneshot::channel();
    R::default().spawn(Box::pin(async move {
        let _ = tx.send(fut.await);
    }));
    async move { rx.await.expect("spawned task finished") }
}

/// `Some(output)` if `fut` finishes within `d`, timed by `R`.
pub async fn timeout<R: Runtime + Default, T>(
    d: Duration,
    fut: impl Future<Output = T>,
) -> Option<T> {
    let fut = std::pin::pin!(fut);
    match futures::future::select(fut, R::default().sleep(d)).await {
        futures::future::Either::Left((v, _)) => Some(v),
        futures::future::Either::Right(_) => None,
    }
}

/// Instantiates every scenario of the suite as a `#[test]` running on the given runtime.
macro_rules! conformance_suite {
    ($rt:ty) => {
        conformance_suite!(@ $rt:
            archive_inline_delegation_applies_edits_new_files_and_deletions,
            archive_url_mode_delegation_applies_the_result,
            read_only_delegation_leaves_the_source_untouched,
            staged_snapshot_can_be_applied_later,
            staged_snapshot_can_be_discarded,
            admission_rejects_a_too_large_workspace_with_a_hint,
            executor_declines_at_its_concurrency_limit,
            cancel_from_the_delegator_stops_the_runner,
            lease_expiry_mid_task_expires_both_sides_and_cleans_up,
            auth_is_required_when_configured,
            malformed_requests_get_documented_errors,
            reference_dialect_exchange_from_wire_md,
            sse_stream_cut_mid_task_is_resumed,
            delegator_restart_reconnects_and_applies_the_result,
            executor_killed_mid_task_then_restarted,
            every_executor_endpoint_needs_the_credential,
            unauthenticated_huge_body_is_refused_before_it_is_read,
            reference_delegator_drives_an_authenticated_executor,
            executor_journal_holds_no_clear_text_credential,
            archive_listener_answers_nothing_but_archive_urls,
            hostile_archive_in_start_is_refused_without_escaping,
            stalled_invites_do_not_hold_executor_slots,
            web_page_cannot_drive_a_local_executor,
            hostile_result_from_an_executor_is_refused,
        );
    };
    (@ $rt:ty: $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                <$rt as conformance::TestRuntime>::block_on(conformance::$name::<$rt>());
            }
        )*
    };
}

// ---------------------------------------------------------------------------------------------
// Harness

/// A runner that applies edits to the work dir's `workspace/` resource.
pub struct EditRunner;

impl TaskRunner for EditRunner {
    fn run(
        &self,
        ctx: &TaskContext,
        progress: &dyn Fn(String),
        _c: &CancelFlag,
    ) -> Result<TaskOutcome, String> {
        let w = ctx.work_dir.clone();
        progress("editing".into());
        if ctx.access_mode == AccessMode::Rw {
            std::fs::write(w.join("a.txt"), "A edited\n").map_err(|e| e.to_string())?;
            std::fs::write(w.join("b.txt"), "B edited\n").map_err(|e| e.to_string())?;
            std::fs::create_dir_all(w.join("new")).map_err(|e| e.to_string())?;
            std::fs::write(w.join("new/c.txt"), "C new\n").map_err(|e| e.to_string())?;
            std::fs::remove_file(w.join("gone.txt")).map_err(|e| e.to_string())?;
        }
        Ok(TaskOutcome {
            summary: "edited a, b; added new/c; deleted gone".into(),
            highlights: vec!["a.txt".into()],
        })
    }
}

/// A runner that reports it started, then blocks until released (then writes `gate.txt` in
/// `rw` mode) or cancelled.
#[derive(Clone)]
pub struct GateRunner {
    started_tx: async_channel::Sender<()>,
    started_rx: async_channel::Receiver<()>,
    /// Set to let the task finish.
    pub release: Arc<std::sync::atomic::AtomicBool>,
    /// Whether the task saw its cancel flag.
    pub saw_cancel: Arc<std::sync::atomic::AtomicBool>,
}

impl Default for GateRunner {
    fn default() -> Self {
        let (started_tx, started_rx) = async_channel::unbounded();
        GateRunner {
            started_tx,
            started_rx,
            release: Default::default(),
            saw_cancel: Default::default(),
        }
    }
}

impl GateRunner {
    /// Resolves once a task has started (one call per started task).
    pub async fn started(&self) {
        self.started_rx.recv().await.expect("runner alive");
    }
}

impl TaskRunner for GateRunner {
    fn run(
        &self,
        ctx: &TaskContext,
        progress: &dyn Fn(String),
        cancel: &CancelFlag,
    ) -> Result<TaskOutcome, String> {
        use std::sync::atomic::Ordering;
        progress("gate: started".into());
        let _ = self.started_tx.try_send(());
        loop {
            if cancel.is_cancelled() {
                self.saw_cancel.store(true, Ordering::SeqCst);
                return Err("stopped".into());
            }
            if self.release.load(Ordering::SeqCst) {
                if ctx.access_mode == AccessMode::Rw {
                    std::fs::write(ctx.work_dir.join("gate.txt"), "released\n")
                        .map_err(|e| e.to_string())?;
                }
                return Ok(TaskOutcome {
                    summary: "released".into(),
                    highlights: vec![],
                });
            }
            // The runner polls its cancel flag like a real agent process would.
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

pub struct Exec {
    pub handle: ExecutorHandle,
    pub peer: String,
    pub base: String,
    pub work_root: PathBuf,
    _dir: tempfile::TempDir,
}

pub async fn start_executor<R: TestRuntime>(
    runner: Arc<dyn TaskRunner>,
    tweak: impl FnOnce(&mut ExecutorConfig),
) -> Exec {
    let dir = tempfile::tempdir().unwrap();
    let work_root = dir.path().join("work");
    let mut engine = ExecutorConfig {
        work_root: work_root.to_string_lossy().into_owned(),
        stop_grace: Duration::from_secs(5),
        ..ExecutorConfig::default()
    };
    tweak(&mut engine);
    let opts = ExecutorOptions::new(engine, Arc::new(ArchiveExecutor::default()), runner);
    let handle = ExecutorHandle::start(R::default(), opts);
    let (listener, addr) = bind();
    handle.set_public_url(format!("http://{addr}"));
    R::default().spawn_executor_server(listener, handle.clone());
    Exec {
        handle,
        peer: format!("http://{addr}/awcp"),
        base: format!("http://{addr}"),
        work_root,
        _dir: dir,
    }
}

pub struct Deleg {
    pub handle: DelegatorHandle,
    dir: tempfile::TempDir,
}

pub async fn start_delegator<R: TestRuntime>(
    url_mode: bool,
    tweak: impl FnOnce(&mut DelegatorConfig),
) -> Deleg {
    start_delegator_in::<R>(tempfile::tempdir().unwrap(), url_mode, tweak)
}

/// A delegator whose state (journal, exports) lives under `dir`.
fn start_delegator_in<R: TestRuntime>(
    dir: tempfile::TempDir,
    url_mode: bool,
    tweak: impl FnOnce(&mut DelegatorConfig),
) -> Deleg {
    let state = dir.path().join("state");
    let transport = ArchiveDelegator::new(ArchiveDelegatorConfig::new(state.join("exports")));
    let mut opts = DelegatorOptions::new(Arc::new(transport), state);
    opts.engine.sse_backoff = Duration::from_millis(50);
    opts.engine.result_poll_interval = Duration::from_millis(100);
    tweak(&mut opts.engine);
    let listener = if url_mode {
        let (l, a) = bind();
        opts.archive_base_url = Some(format!("http://{a}"));
        Some(l)
    } else {
        None
    };
    let handle = DelegatorHandle::start(R::default(), opts);
    if let Some(l) = listener {
        R::default().spawn_archive_server(l, handle.clone());
    }
    Deleg { handle, dir }
}

impl Deleg {
    /// Stops this delegator (as a process exit would) and starts a new one on the same state
    /// directory, which resumes from the journal.
    pub async fn restart<R: TestRuntime>(self) -> Deleg {
        self.handle.stop().await;
        start_delegator_in::<R>(self.dir, false, |_| {})
    }
}

pub fn workspace() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.txt"), "A\n").unwrap();
    std::fs::write(d.path().join("b.txt"), "B\n").unwrap();
    std::fs::write(d.path().join("gone.txt"), "to be deleted\n").unwrap();
    std::fs::create_dir_all(d.path().join("src")).unwrap();
    std::fs::write(d.path().join("src/keep.rs"), "fn main() {}\n").unwrap();
    d
}

pub fn tree(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read_to_string(&p).unwrap_or_default());
            }
        }
    }
    walk(root, root, &mut out);
    out
}

pub fn params(peer: &str, dir: &Path) -> DelegateParams {
    DelegateParams::new(peer, dir, "e2e", "edit files")
}

pub async fn run_to_end<R: TestRuntime>(
    d: &DelegatorHandle,
    p: DelegateParams,
) -> awcp_proto::engine::delegator::DelegationView {
    let id = d.delegate(p).await.unwrap();
    timeout::<R, _>(Duration::from_secs(60), d.wait(&id))
        .await
        .expect("delegation ended in time")
        .expect("delegation known")
}

pub fn assert_edited(dir: &Path) {
    let t = tree(dir);
    assert_eq!(t.get("a.txt").map(String::as_str), Some("A edited\n"));
    assert_eq!(t.get("b.txt").map(String::as_str), Some("B edited\n"));
    assert_eq!(t.get("new/c.txt").map(String::as_str), Some("C new\n"));
    assert_eq!(
        t.get("src/keep.rs").map(String::as_str),
        Some("fn main() {}\n")
    );
    assert!(!t.contains_key("gone.txt"), "deletion propagated: {t:?}");
}

pub async fn wait_released<R: TestRuntime>(ex: &Exec) {
    wait_idle::<R>(&ex.handle, &ex.work_root).await
}

/// Waits until the executor has no assignment and its work root holds no work directory.
/// Waits (up to 60 s) for a `status` event with `message` from the delegator's event stream;
/// panics if the delegation ends first.
pub async fn progress_seen<R: TestRuntime>(
    events: &mut futures::channel::mpsc::UnboundedReceiver<awcp_proto::DelegatorEvent>,
    message: &str,
) {
    use futures::StreamExt;
    let seen = async {
        loop {
            match events.next().await {
                Some(awcp_proto::DelegatorEvent::Progress {
                    message: Some(m), ..
                }) if m == message => {
                    return;
                }
                Some(awcp_proto::DelegatorEvent::Ended { .. }) | None => {
                    panic!("the delegation ended before status {message:?}")
                }
                _ => {}
            }
        }
    };
    timeout::<R, _>(Duration::from_secs(60), seen)
        .await
        .unwrap_or_else(|| panic!("status {message:?} arrived in time"));
}

pub async fn wait_idle<R: Runtime + Default>(handle: &ExecutorHandle, work_root: &Path) {
    // The executor releases asynchronously after `done`; wait for its status to show no
    // active assignment and the work root to be empty of work dirs.
    for _ in 0..2000 {
        let s = handle.status().await.unwrap();
        let dirs = std::fs::read_dir(work_root)
            .map(|rd| rd.flatten().filter(|e| e.file_name() != ".awcp").count())
            .unwrap_or(0);
        if s.active == 0 && s.pending == 0 && dirs == 0 {
            return;
        }
        R::default().sleep(Duration::from_millis(5)).await;
    }
    panic!("executor did not release its work directories");
}

// ---------------------------------------------------------------------------------------------
// Scenarios

pub async fn archive_inline_delegation_applies_edits_new_files_and_deletions<R: TestRuntime>() {
    let ex = start_executor::<R>(Arc::new(EditRunner), |_| {}).await;
    let dg = start_delegator::<R>(false, |c| {
        c.features.retain(|f| f != awcp_proto::feature::ARCHIVE_URL)
    })
    .await;
    let ws = workspace();
    let v = run_to_end::<R>(&dg.handle, params(&ex.peer, ws.path())).await;
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    assert_eq!(
        v.result.as_ref().unwrap().summary,
        "edited a, b; added new/c; deleted gone"
    );
    assert_eq!(v.snapshots.len(), 1);
    assert_eq!(
        v.snapshots[0].status,
        awcp_proto::engine::delegator::SnapshotStatus::Applied
    );
    assert_edited(ws.path());
    wait_released::<R>(&ex).await;
}

pub async fn archive_url_mode_delegation_applies_the_result<R: TestRuntime>() {
    let ex = start_executor::<R>(Arc::new(EditRunner), |_| {}).await;
    let dg = start_delegator::<R>(true, |_| {}).await;
    let ws = workspace();
    let v = run_to_end::<R>(&dg.handle, params(&ex.peer, ws.path())).await;
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    assert_edited(ws.path());
    // The snapshot was a delta fetched by URL.
    assert_eq!(
        v.snapshots[0].metadata.get("delta"),
        Some(&serde_json::json!(true))
    );
    wait_released::<R>(&ex).await;
}

pub async fn read_only_delegation_leaves_the_source_untouched<R: TestRuntime>() {
    let ex = start_executor::<R>(Arc::new(EditRunner), |_| {}).await;
    let dg = start_delegator::<R>(false, |_| {}).await;
    let ws = workspace();
    let before = tree(ws.path());
    let mut p = params(&ex.peer, ws.path());
    p.access_mode = AccessMode::Ro;
    p.resources[0].mode = AccessMode::Ro;
    let v = run_to_end::<R>(&dg.handle, p).await;
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    assert_eq!(tree(ws.path()), before);
}

pub async fn staged_snapshot_can_be_applied_later<R: TestRuntime>() {
    let ex = start_executor::<R>(Arc::new(EditRunner), |_| {}).await;
    let dg = start_delegator::<R>(false, |_| {}).await;
    let ws = workspace();
    let before = tree(ws.path());
    let mut p = params(&ex.peer, ws.path());
    p.snapshot_mode = SnapshotMode::Staged;
    let v = run_to_end::<R>(&dg.handle, p).await;
    assert_eq!(v.state, DelegationState::Completed);
    assert_eq!(tree(ws.path()), before, "staged: nothing applied yet");
    let sid = v.snapshots[0].id.clone();
    assert_eq!(
        v.snapshots[0].status,
        awcp_proto::engine::delegator::SnapshotStatus::Pending
    );
    dg.handle
        .apply_snapshot_and_wait(&v.request.id, &sid)
        .await
        .unwrap();
    assert_edited(ws.path());
    // Re-applying is refused.
    assert!(dg.handle.apply_snapshot(&v.request.id, &sid).await.is_err());
}

pub async fn staged_snapshot_can_be_discarded<R: TestRuntime>() {
    let ex = start_executor::<R>(Arc::new(EditRunner), |_| {}).await;
    let dg = start_delegator::<R>(false, |_| {}).await;
    let ws = workspace();
    let before = tree(ws.path());
    let mut p = params(&ex.peer, ws.path());
    p.snapshot_mode = SnapshotMode::Staged;
    let v = run_to_end::<R>(&dg.handle, p).await;
    let sid = v.snapshots[0].id.clone();
    dg.handle
        .discard_snapshot(&v.request.id, &sid)
        .await
        .unwrap();
    let v = dg.handle.get(&v.request.id).await.unwrap();
    assert_eq!(
        v.snapshots[0].status,
        awcp_proto::engine::delegator::SnapshotStatus::Discarded
    );
    assert_eq!(tree(ws.path()), before);
    assert!(dg.handle.apply_snapshot(&v.request.id, &sid).await.is_err());
}

pub async fn admission_rejects_a_too_large_workspace_with_a_hint<R: TestRuntime>() {
    let ex = start_executor::<R>(Arc::new(EditRunner), |_| {}).await;
    let dg = start_delegator::<R>(false, |c| {
        c.admission = AdmissionLimits {
            max_total_bytes: 10,
            ..AdmissionLimits::default()
        }
    })
    .await;
    let ws = workspace();
    let v = run_to_end::<R>(&dg.handle, params(&ex.peer, ws.path())).await;
    assert_eq!(v.state, DelegationState::Error);
    let e = v.error.unwrap();
    assert_eq!(e.code, ErrorCode::WorkspaceTooLarge);
    assert!(e.hint.unwrap().contains("limit"), "hint names the limit");
    // Nothing reached the executor.
    assert_eq!(ex.handle.status().await.unwrap().pending, 0);
}

pub async fn executor_declines_at_its_concurrency_limit<R: TestRuntime>() {
    let gate = GateRunner::default();
    let ex = start_executor::<R>(Arc::new(gate.clone()), |c| c.max_concurrent = 1).await;
    let dg = start_delegator::<R>(false, |_| {}).await;
    let ws1 = workspace();
    let ws2 = workspace();
    let id1 = dg
        .handle
        .delegate(params(&ex.peer, ws1.path()))
        .await
        .unwrap();
    gate.started().await;
    let v2 = run_to_end::<R>(&dg.handle, params(&ex.peer, ws2.path())).await;
    assert_eq!(v2.state, DelegationState::Error);
    assert_eq!(v2.error.unwrap().code, ErrorCode::Declined);
    gate.release
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let v1 = dg.handle.wait(&id1).await.unwrap();
    assert_eq!(v1.state, DelegationState::Completed);
}

pub async fn cancel_from_the_delegator_stops_the_runner<R: TestRuntime>() {
    let gate = GateRunner::default();
    let ex = start_executor::<R>(Arc::new(gate.clone()), |_| {}).await;
    let dg = start_delegator::<R>(false, |_| {}).await;
    let ws = workspace();
    let before = tree(ws.path());
    let id = dg
        .handle
        .delegate(params(&ex.peer, ws.path()))
        .await
        .unwrap();
    gate.started().await;
    dg.handle.cancel(&id).await.unwrap();
    let v = dg.handle.wait(&id).await.unwrap();
    assert_eq!(v.state, DelegationState::Cancelled);
    wait_released::<R>(&ex).await;
    assert!(
        gate.saw_cancel.load(std::sync::atomic::Ordering::SeqCst),
        "runner was told to stop"
    );
    assert_eq!(tree(ws.path()), before);
}

pub async fn lease_expiry_mid_task_expires_both_sides_and_cleans_up<R: TestRuntime>() {
    let gate = GateRunner::default();
    let ex = start_executor::<R>(Arc::new(gate.clone()), |_| {}).await;
    let dg = start_delegator::<R>(false, |_| {}).await;
    let ws = workspace();
    let mut p = params(&ex.peer, ws.path());
    p.ttl_seconds = 2;
    let id = dg.handle.delegate(p).await.unwrap();
    gate.started().await;
    let v = timeout::<R, _>(Duration::from_secs(30), dg.handle.wait(&id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(v.state, DelegationState::Expired, "{v:?}");
    wait_released::<R>(&ex).await;
    assert!(
        gate.saw_cancel.load(std::sync::atomic::Ordering::SeqCst),
        "the executor stopped the task"
    );
}

pub async fn auth_is_required_when_configured<R: TestRuntime>() {
    let ex = start_executor::<R>(Arc::new(EditRunner), |c| {
        c.auth = Some(RequiredAuth {
            types: vec![],
            credential: "s3cret".into(),
        })
    })
    .await;
    let dg = start_delegator::<R>(false, |_| {}).await;
    // No credential.
    let ws = workspace();
    let v = run_to_end::<R>(&dg.handle, params(&ex.peer, ws.path())).await;
    assert_eq!(v.error.unwrap().code, ErrorCode::AuthFailed);
    let with_bearer = |credential: &str| {
        let mut p = params(&ex.peer, ws.path());
        p.auth = Some(Auth {
            auth_type: AuthType::Bearer,
            credential: credential.into(),
            metadata: Default::default(),
        });
        p
    };
    // Wrong credential.
    let v = run_to_end::<R>(&dg.handle, with_bearer("nope")).await;
    assert_eq!(v.error.unwrap().code, ErrorCode::AuthFailed);
    // Right credential.
    let v = run_to_end::<R>(&dg.handle, with_bearer("s3cret")).await;
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    // Other endpoints of that delegation need the credential too.
    let url = format!("{}/awcp/tasks/{}/result", ex.base, v.request.id);
    let (status, _) = http_get::<R>(&url, &[]).await;
    assert_eq!(status, 401);
    let (status, _) = http_get::<R>(&url, &[("authorization", "Bearer s3cret".into())]).await;
    assert_ne!(status, 401);
}

/// A TCP proxy on plain threads (so it is no runtime's) that can cut every connection. It
/// records the request line of each connection (the driver's client opens one connection per
/// request).
pub struct CutProxy {
    /// Where it listens.
    pub addr: SocketAddr,
    conns: Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
    requests: Arc<std::sync::Mutex<Vec<String>>>,
    seen: async_channel::Receiver<()>,
}

impl CutProxy {
    /// Forwards connections on a new loopback port to `upstream`.
    pub fn start(upstream: SocketAddr) -> CutProxy {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let conns: Arc<std::sync::Mutex<Vec<std::net::TcpStream>>> = Default::default();
        let requests: Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let (tx, seen) = async_channel::unbounded();
        let (c, r) = (conns.clone(), requests.clone());
        std::thread::spawn(move || {
            for down in l.incoming().flatten() {
                let (conns, requests, tx) = (c.clone(), r.clone(), tx.clone());
                std::thread::spawn(move || {
                    let Ok(mut up) = std::net::TcpStream::connect(upstream) else {
                        return;
                    };
                    let mut down = down;
                    {
                        let mut g = conns.lock().unwrap();
                        g.push(down.try_clone().unwrap());
                        g.push(up.try_clone().unwrap());
                    }
                    // Peek at the request line.
                    let mut first = [0u8; 512];
                    let n = down.read(&mut first).unwrap_or(0);
                    let line = String::from_utf8_lossy(&first[..n]);
                    let line = line.lines().next().unwrap_or("").to_string();
                    requests.lock().unwrap().push(line);
                    let _ = tx.try_send(());
                    if up.write_all(&first[..n]).is_err() {
                        return;
                    }
                    let (mut d2, mut u2) = (down.try_clone().unwrap(), up.try_clone().unwrap());
                    std::thread::spawn(move || std::io::copy(&mut u2, &mut d2));
                    let _ = std::io::copy(&mut down, &mut up);
                });
            }
        });
        CutProxy {
            addr,
            conns,
            requests,
            seen,
        }
    }

    /// Requests seen so far whose request line contains `needle`.
    pub fn count(&self, needle: &str) -> usize {
        let g = self.requests.lock().unwrap();
        g.iter().filter(|l| l.contains(needle)).count()
    }

    /// Resolves once `n` requests containing `needle` have been seen.
    pub async fn seen(&self, needle: &str, n: usize) {
        while self.count(needle) < n {
            self.seen.recv().await.unwrap();
        }
    }

    /// Cuts every connection made so far.
    pub fn cut_all(&self) {
        for s in self.conns.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// The event stream is cut mid-task (every connection through the proxy is shut down); the
/// delegator re-opens it and the task's result arrives over the new stream, not by polling.
pub async fn sse_stream_cut_mid_task_is_resumed<R: TestRuntime>() {
    let gate = GateRunner::default();
    let ex = start_executor::<R>(Arc::new(gate.clone()), |_| {}).await;
    let proxy = CutProxy::start(ex.base.trim_start_matches("http://").parse().unwrap());
    let dg = start_delegator::<R>(false, |_| {}).await;
    let mut events = dg.handle.events();
    let ws = workspace();
    let peer = format!("http://{}/awcp", proxy.addr);
    let id = dg.handle.delegate(params(&peer, ws.path())).await.unwrap();
    // Wait until the runner's first status event has reached the delegator over the stream.
    progress_seen::<R>(&mut events, "gate: started").await;
    assert_eq!(proxy.count("/events "), 1);
    assert_eq!(
        dg.handle.get(&id).await.unwrap().state,
        DelegationState::Running
    );
    proxy.cut_all();
    // The delegator re-opens its stream (the proxy sees a new event-stream connection).
    timeout::<R, _>(Duration::from_secs(60), proxy.seen("/events ", 2))
        .await
        .expect("the delegator re-opened its event stream (it did not fall back to polling)");
    assert_eq!(
        dg.handle.get(&id).await.unwrap().state,
        DelegationState::Running
    );
    gate.release
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let v = timeout::<R, _>(Duration::from_secs(60), dg.handle.wait(&id))
        .await
        .expect("delegation ended in time")
        .unwrap();
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    assert_eq!(
        tree(ws.path()).get("gate.txt").map(String::as_str),
        Some("released\n")
    );
    // The result came over the re-opened stream: the delegator never fell back to polling.
    assert_eq!(proxy.count("/result "), 0);
    wait_released::<R>(&ex).await;
}

/// The delegator process stops mid-task and a new one starts on the same state directory: it
/// resumes from its journal, reconnects to the executor and applies the result.
pub async fn delegator_restart_reconnects_and_applies_the_result<R: TestRuntime>() {
    let gate = GateRunner::default();
    let ex = start_executor::<R>(Arc::new(gate.clone()), |_| {}).await;
    let dg = start_delegator::<R>(false, |_| {}).await;
    let ws = workspace();
    let id = dg
        .handle
        .delegate(params(&ex.peer, ws.path()))
        .await
        .unwrap();
    gate.started().await;
    let dg = dg.restart::<R>().await;
    let v = dg.handle.get(&id).await.expect("restored from the journal");
    assert!(
        matches!(v.state, DelegationState::Running | DelegationState::Started),
        "{v:?}"
    );
    gate.release
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let v = timeout::<R, _>(Duration::from_secs(60), dg.handle.wait(&id))
        .await
        .expect("delegation ended in time")
        .unwrap();
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    assert_eq!(
        tree(ws.path()).get("gate.txt").map(String::as_str),
        Some("released\n"),
        "the result was applied by the restarted delegator"
    );
    wait_released::<R>(&ex).await;
}

/// Builds `awcp-executor` (a no-op when it is up to date) and returns its path.
fn executor_binary() -> PathBuf {
    example_binary("awcp-executor")
}

/// Builds binary `bin` of awcp-examples (a no-op when it is up to date) and returns its path.
pub fn example_binary(bin: &str) -> PathBuf {
    let status = std::process::Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "awcp-examples", "--bin", bin])
        .status()
        .expect("cargo build runs");
    assert!(status.success(), "building {bin} failed");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("debug").join(bin)
}

/// An `awcp-executor` process on runtime `runtime`, killed when dropped.
struct ExecutorProcess {
    child: std::process::Child,
    url: String,
}

impl ExecutorProcess {
    /// Starts the binary with an agent command that prints `started` and sleeps for 120 s plus
    /// `marker` (a number, so the test can find the process by its command line), and waits
    /// for the URL it prints.
    fn spawn(bin: &Path, runtime: &str, listen: &str, dir: &Path, marker: &str) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new(bin)
            .args(["--listen", listen, "--quiet", "--runtime", runtime])
            .arg("--work-root")
            .arg(dir.join("work"))
            .arg("--state-dir")
            .arg(dir.join("state"))
            .arg("--agent-cmd")
            .arg(format!("sh -c 'echo started; exec sleep 120 {marker}'"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("executor starts");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("executor prints its URL");
        let url = line
            .trim()
            .strip_prefix("awcp-executor listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        ExecutorProcess { child, url }
    }
}

impl Drop for ExecutorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The executor process (running on `R`) is killed with SIGKILL mid-task and restarted on the
/// same port and state directory: it fails the lost work cleanly (TASK_FAILED "restarted"),
/// removes the stale work directory, and the source stays untouched.
pub async fn executor_killed_mid_task_then_restarted<R: TestRuntime>() {
    let rt = R::default();
    let bin = awcp_driver::runtime::blocking(&rt, executor_binary).await;
    let dir = tempfile::tempdir().unwrap();
    // `sleep` sums its arguments, so a unique fraction of a second marks the agent process.
    let marker = format!("0.{}{}", std::process::id(), R::NAME.len());
    let (b, d, m) = (bin.clone(), dir.path().to_owned(), marker.clone());
    let mut ex = awcp_driver::runtime::blocking(&rt, move || {
        ExecutorProcess::spawn(&b, R::NAME, "127.0.0.1:0", &d, &m)
    })
    .await;
    let peer = ex.url.clone();
    let listen = peer
        .trim_start_matches("http://")
        .trim_end_matches("/awcp")
        .to_owned();

    let dg = start_delegator::<R>(false, |_| {}).await;
    let ws = workspace();
    let before = tree(ws.path());
    let mut events = dg.handle.events();
    let id = dg.handle.delegate(params(&peer, ws.path())).await.unwrap();
    // Wait for the agent command to report it started.
    progress_seen::<R>(&mut events, "started").await;
    let work_dir = dir.path().join("work").join(id.as_str());
    assert!(work_dir.exists());
    // SIGKILL: no chance to clean up.
    ex.child.kill().unwrap();
    ex.child.wait().unwrap();
    // Kill the orphaned agent too (a real deployment runs agents in a cgroup or process group).
    let pkill = |m: String| {
        let _ = std::process::Command::new("pkill")
            .args(["-f", &format!("^sleep 120 {m}$")])
            .status();
    };
    pkill(marker.clone());
    // Restart on the same port with the same state.
    let (d, m) = (dir.path().to_owned(), marker.clone());
    let ex2 = awcp_driver::runtime::blocking(&rt, move || {
        ExecutorProcess::spawn(&bin, R::NAME, &listen, &d, &m)
    })
    .await;
    assert_eq!(ex2.url, peer);
    let v = timeout::<R, _>(Duration::from_secs(60), dg.handle.wait(&id))
        .await
        .expect("delegation ended in time")
        .unwrap();
    // The restarted executor reports the lost work instead of leaving the delegation stuck.
    assert_eq!(v.state, DelegationState::Error, "{v:?}");
    let e = v.error.unwrap();
    assert_eq!(e.code, ErrorCode::TaskFailed);
    assert!(e.message.contains("restarted"), "{e:?}");
    // The stale work directory is gone; the source is untouched.
    assert!(!work_dir.exists(), "stale work dir removed at start-up");
    assert_eq!(tree(ws.path()), before);
    drop(ex2);
    pkill(marker);
}

// ---------------------------------------------------------------------------------------------
// Raw HTTP: malformed requests and the [R] dialect composed from WIRE.md

async fn http_get<R: TestRuntime>(
    url: &str,
    headers: &[(&str, String)],
) -> (u16, serde_json::Value) {
    let (s, b) = awcp_driver::net::request(
        &R::default(),
        http::Method::GET,
        url,
        headers,
        None,
        Duration::from_secs(10),
        1 << 30,
    )
    .await
    .unwrap();
    (
        s,
        serde_json::from_slice(&b).unwrap_or(serde_json::Value::Null),
    )
}

async fn http_post<R: TestRuntime>(url: &str, body: &str) -> (u16, serde_json::Value) {
    let (s, b) = awcp_driver::net::request(
        &R::default(),
        http::Method::POST,
        url,
        &[],
        Some(bytes::Bytes::from(body.to_owned())),
        Duration::from_secs(10),
        1 << 30,
    )
    .await
    .unwrap();
    (
        s,
        serde_json::from_slice(&b).unwrap_or(serde_json::Value::Null),
    )
}

pub async fn malformed_requests_get_documented_errors<R: TestRuntime>() {
    let ex = start_executor::<R>(Arc::new(EditRunner), |_| {}).await;
    let cases: Vec<(&str, u16, &str)> = vec![
        ("{not json", 400, "DECLINED"),
        (
            r#"{"version":"2","type":"INVITE","delegationId":"dlg_1"}"#,
            400,
            "DECLINED",
        ),
        (
            r#"{"version":"1","type":"INVITE","delegationId":"../etc","task":{"description":"d","prompt":"p"},"lease":{"ttlSeconds":60,"accessMode":"rw"},"environment":{"resources":[{"name":"w","type":"fs","mode":"rw"}]}}"#,
            400,
            "DECLINED",
        ),
        (
            r#"{"version":"1","type":"INVITE","delegationId":"dlg_1","task":{"description":"d"},"lease":{"ttlSeconds":60,"accessMode":"rw"},"environment":{"resources":[]}}"#,
            400,
            "DECLINED",
        ),
        (
            r#"{"version":"1","type":"START","delegationId":"dlg_unknown","lease":{"expiresAt":"2099-01-01T00:00:00.000Z","accessMode":"rw"},"transportHandle":{"transport":"archive","workspaceBase64":"","checksum":"00"}}"#,
            404,
            "NOT_FOUND",
        ),
    ];
    for (body, status, code) in cases {
        let (s, v) = http_post::<R>(&ex.peer, body).await;
        assert_eq!(s, status, "{body} → {v}");
        assert_eq!(v["type"], "ERROR", "{v}");
        assert_eq!(v["code"], code, "{v}");
        assert!(v["hint"].is_string() || status == 404, "hint present: {v}");
    }
    // The missing field is named.
    let (_, v) = http_post::<R>(&ex.peer, r#"{"version":"1","type":"INVITE","delegationId":"dlg_1","task":{"description":"d"},"lease":{"ttlSeconds":60,"accessMode":"rw"},"environment":{"resources":[]}}"#).await;
    assert!(
        v["message"].as_str().unwrap().contains("task.prompt"),
        "{v}"
    );
    // Invalid id in a path.
    let (s, v) = http_get::<R>(&format!("{}/awcp/tasks/..%2Fetc/result", ex.base), &[]).await;
    assert_eq!(s, 400, "{v}");
    // Unknown delegation endpoints.
    let (s, v) = http_get::<R>(&format!("{}/awcp/tasks/dlg_nope/result", ex.base), &[]).await;
    assert_eq!((s, v["status"].as_str()), (404, Some("not_found")));
    let (s, v) = http_post::<R>(&format!("{}/awcp/cancel/dlg_nope", ex.base), "").await;
    assert_eq!((s, v["code"].as_str()), (404, Some("NOT_FOUND")));
    // Oversized body.
    let big = "x".repeat(300 * 1024); // 300 KiB, over the 100 KiB limit below
    let ex2 = {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = ExecutorOptions::new(
            ExecutorConfig {
                work_root: dir.path().to_string_lossy().into_owned(),
                ..ExecutorConfig::default()
            },
            Arc::new(ArchiveExecutor::default()),
            Arc::new(EditRunner),
        );
        opts.max_body_bytes = 100 * 1024;
        let h = ExecutorHandle::start(R::default(), opts);
        let (l, a) = bind();
        R::default().spawn_executor_server(l, h);
        (format!("http://{a}/awcp"), dir)
    };
    let (s, v) = http_post::<R>(&ex2.0, &big).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (413, Some("WORKSPACE_TOO_LARGE")),
        "{v}"
    );
    // Status and the agent card still answer.
    let (s, v) = http_get::<R>(&format!("{}/awcp/status", ex.base), &[]).await;
    assert_eq!(s, 200);
    assert!(v["activeDelegations"].is_number());
    let (s, v) = http_get::<R>(&format!("{}/.well-known/agent-card.json", ex.base), &[]).await;
    assert_eq!(s, 200);
    assert_eq!(
        v["capabilities"]["extensions"][0]["uri"],
        awcp_driver::card::AWCP_EXTENSION_URI
    );
}

pub async fn reference_dialect_exchange_from_wire_md<R: TestRuntime>() {
    let ex = start_executor::<R>(Arc::new(EditRunner), |_| {}).await;
    // §2.7 INVITE, verbatim shape.
    let invite = r#"{"version":"1","type":"INVITE","delegationId":"dlg_0a1b2c3d4e5f60718293a4b5c6d7e8f9",
 "task":{"description":"Tidy CSV loader","prompt":"Make loader.py tolerate blank lines; add a test."},
 "lease":{"ttlSeconds":1800,"accessMode":"rw"},"retentionMs":604800000,
 "environment":{"resources":[{"name":"workspace","type":"fs","mode":"rw"}]},
 "requirements":{"transport":"archive"}}"#;
    let (s, accept) = http_post::<R>(&ex.peer, invite).await;
    assert_eq!(s, 200);
    assert_eq!(accept["type"], "ACCEPT");
    assert_eq!(accept["retentionMs"], 604800000);
    assert!(accept["executorWorkDir"]["path"]
        .as_str()
        .unwrap()
        .ends_with("/dlg_0a1b2c3d4e5f60718293a4b5c6d7e8f9"));
    assert_eq!(accept["executorConstraints"]["acceptedAccessMode"], "rw");
    assert_eq!(accept["executorConstraints"]["maxTtlSeconds"], 1800);
    // A START with a real per-resource archive, as an [R] delegator builds it.
    let src = workspace();
    let d = awcp_transports::ArchiveDelegator::new(ArchiveDelegatorConfig::new(
        tempfile::tempdir().unwrap().keep(),
    ));
    let id = awcp_proto::DelegationId::new("dlg_0a1b2c3d4e5f60718293a4b5c6d7e8f9").unwrap();
    let spec = awcp_transports::ResourceSpec {
        name: awcp_proto::ResourceName::new("workspace").unwrap(),
        source_path: src.path().to_path_buf(),
        mode: AccessMode::Rw,
    };
    use awcp_transports::DelegatorTransport;
    let prepared = d
        .prepare(
            &awcp_transports::PrepareRequest {
                delegation_id: &id,
                resources: std::slice::from_ref(&spec),
                access_mode: AccessMode::Rw,
                export: Default::default(),
                delivery: awcp_transports::Delivery::Inline,
                layout: awcp_transports::Layout::PerResource,
            },
            &CancelFlag::new(),
        )
        .unwrap();
    let handle = prepared.inline_handle().unwrap();
    let awcp_proto::TransportHandle::Archive(h) = &handle else {
        panic!()
    };
    // Subscribe before START, as the [R] delegator does; read the raw stream.
    let events_url = format!("{}/awcp/tasks/{id}/events", ex.base);
    let stream = spawn::<R, _>(async move {
        let resp = awcp_driver::net::send(&R::default(), http::Method::GET, &events_url, &[], None)
            .await
            .unwrap();
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let body = awcp_driver::net::read_body(resp.into_body(), 1 << 30)
            .await
            .unwrap();
        String::from_utf8(body.to_vec()).unwrap()
    });
    let expires = awcp_proto::Timestamp::from_unix_millis(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
            + 600_000,
    );
    let start = format!(
        r#"{{"version":"1","type":"START","delegationId":"{id}","lease":{{"expiresAt":"{}","accessMode":"rw"}},"transportHandle":{{"transport":"archive","workspaceBase64":"{}","checksum":"{}"}}}}"#,
        expires.to_rfc3339(),
        h.data.base64.as_ref().unwrap(),
        h.checksum
    );
    // The SSE stream must be open before START: retry START until the subscription exists is
    // not needed — the executor replays the terminal events to late subscribers anyway.
    let (s, ok) = http_post::<R>(&ex.peer, &start).await;
    assert_eq!((s, &ok), (200, &serde_json::json!({"ok": true})));
    let text = timeout::<R, _>(Duration::from_secs(30), stream)
        .await
        .unwrap();
    // `data: <json>\n\n` framing; snapshot then done (or the replay of them), reference shape.
    let events: Vec<serde_json::Value> = text
        .split("\n\n")
        .filter_map(|chunk| chunk.strip_prefix("data: "))
        .map(|j| serde_json::from_str(j).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.last(), Some(&"done"), "{text}");
    let snap = events
        .iter()
        .find(|e| e["type"] == "snapshot")
        .expect("a snapshot event");
    assert!(
        snap["snapshotBase64"].as_str().is_some(),
        "inline for a reference peer"
    );
    let done = events.last().unwrap();
    assert_eq!(done["recommendedSnapshotId"], snap["snapshotId"]);
    assert_eq!(done["snapshotIds"][0], snap["snapshotId"]);
    assert!(done["timestamp"].as_str().unwrap().ends_with('Z'));
    // The full snapshot contains the edited workspace in the per-resource layout.
    let zip =
        awcp_transports::archive::decode_base64(snap["snapshotBase64"].as_str().unwrap()).unwrap();
    let out = tempfile::tempdir().unwrap();
    let report = awcp_transports::archive::extract(
        std::io::Cursor::new(zip),
        out.path(),
        &Default::default(),
        &CancelFlag::new(),
    )
    .unwrap();
    assert!(report.top_level.contains("workspace"));
    assert_edited(&out.path().join("workspace"));
    // /result keeps the result until ack; ack forgets it.
    let (s, r) = http_get::<R>(&format!("{}/awcp/tasks/{id}/result", ex.base), &[]).await;
    assert_eq!((s, r["status"].as_str()), (200, Some("completed")));
    let (s, _) = http_post::<R>(&format!("{}/awcp/tasks/{id}/ack", ex.base), "").await;
    assert_eq!(s, 200);
    let (s, _) = http_get::<R>(&format!("{}/awcp/tasks/{id}/result", ex.base), &[]).await;
    assert_eq!(s, 404);
}
