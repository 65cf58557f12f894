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
    AccessMode, AdmissionLimits, Auth, AuthType, DelegationState, DelegatorConfig, Dialect,
    ErrorCode, ErrorInfo, ExecutorConfig,
};
use awcp_transports::{
    ArchiveDelegator, ArchiveDelegatorConfig, ArchiveExecutor, CancelFlag, TaskContext,
    TaskOutcome, TaskRunner,
};
use std::future::Future;
use std::net::SocketAddr;

use awcp_driver::Runtime;

mod data_safety;
#[allow(unused_imports)]
pub use data_safety::*;
pub mod security;
#[allow(unused_imports)]
pub use security::*;
#[path = "../zip_support/mod.rs"]
pub mod zip_support;

// ---------------------------------------------------------------------------------------------
mod runtimes;
pub use runtimes::*;

/// The credential headers of `R`'s run (empty without authentication).
pub fn auth_headers<R: TestRuntime>() -> Vec<(&'static str, String)> {
    R::TOKEN
        .map(|t| vec![("authorization", format!("Bearer {t}"))])
        .unwrap_or_default()
}

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

/// Instantiates every scenario of the suite as a `#[test]` running on the given runtime (use
/// `WithAuth<R>` for the same scenarios with authentication on).
macro_rules! conformance_suite {
    ($rt:ty) => {
        conformance_suite!(@ $rt:
            archive_inline_delegation_applies_edits_new_files_and_deletions,
            archive_url_mode_delegation_applies_the_result,
            read_only_delegation_leaves_the_source_untouched,
            staged_snapshot_can_be_applied_later,
            a_stored_snapshot_changed_while_stopped_is_refused_at_apply,
            staged_snapshot_can_be_discarded,
            admission_rejects_a_too_large_workspace_with_a_hint,
            executor_declines_at_its_concurrency_limit,
            cancel_from_the_delegator_stops_the_runner,
            lease_expiry_mid_task_expires_both_sides_and_cleans_up,
            a_wall_clock_set_back_mid_task_does_not_hold_the_lease,
            wait_tells_an_unknown_id_from_a_stopped_delegator,
            executors_with_the_default_seed_draw_their_own_snapshot_ids,
            auth_is_required_when_configured,
            malformed_requests_get_documented_errors,
            reference_dialect_exchange_from_wire_md,
            sse_stream_cut_mid_task_is_resumed,
            delegator_restart_reconnects_and_applies_the_result,
            executor_killed_mid_task_then_restarted,
            executor_start_up_leaves_foreign_files_in_its_work_root,
            a_second_executor_on_the_same_work_root_or_state_dir_refuses,
            executors_with_default_settings_leave_each_others_work_alone,
            cancel_ends_the_whole_task_tree,
            lease_expiry_ends_the_whole_task_tree,
            a_failed_task_leaves_no_process_behind,
            executor_shutdown_ends_the_whole_task_tree,
            executor_sigkill_restart_ends_the_orphaned_task_tree,
            an_inline_result_lost_to_an_executor_restart_is_reported_not_dropped,
            an_upgraded_executor_ends_the_task_an_older_release_journaled,
            a_downgraded_executor_leaves_a_newer_releases_record_alone,
            raising_the_one_admission_limit_is_enough,
            a_result_over_the_admission_limits_is_not_applied,
            sensitive_files_are_refused_unless_allowed_or_ignored,
            well_known_credential_files_are_refused,
            every_executor_endpoint_needs_the_credential,
            unauthenticated_huge_body_is_refused_before_it_is_read,
            reference_delegator_drives_an_authenticated_executor,
            executor_journal_holds_no_clear_text_credential,
            archive_listener_answers_nothing_but_archive_urls,
            hostile_archive_in_start_is_refused_without_escaping,
            a_large_start_whose_archive_does_not_match_its_checksum_is_refused,
            stalled_invites_do_not_hold_executor_slots,
            web_page_cannot_drive_a_local_executor,
            hostile_result_from_an_executor_is_refused,
            entries_an_apply_leaves_out_are_reported_not_dropped_silently,
            unusable_events_are_reported_and_the_stream_reads_on,
            type_changes_apply_both_ways,
            type_change_over_local_edits_is_a_conflict_named_as_such,
            file_modes_round_trip_and_unchanged_files_keep_their_mtime,
            the_application_accepts_or_declines_through_the_handle,
            a_large_inline_archive_is_streamed_and_leaves_no_file,
            a_large_inline_result_is_received_into_a_file_in_both_dialects,
            a_large_inline_result_fetched_by_polling_is_received_into_a_file,
            inline_results_a_stopped_executor_left_are_removed_at_start,
            results_a_stopped_delegator_was_receiving_are_removed_at_start,
            more_delegations_than_half_the_connection_cap_all_complete,
            requests_to_one_executor_beyond_the_cap_wait_for_a_slot,
            a_subscriber_that_stops_reading_is_cut_off_and_loses_nothing_essential,
        );
    };
    (@ $rt:ty: $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                <$rt as awcp_driver::Driver>::block_on(crate::conformance::$name::<$rt>());
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
    ) -> Result<TaskOutcome, awcp_proto::TaskFailure> {
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

/// A runner that changes types: the directory `src/` becomes a file, the file `b.txt` becomes
/// a directory. With `hold`, it first reports it started and waits to be released.
#[derive(Clone, Default)]
pub struct TypeChangeRunner {
    /// Wait for this gate's release first.
    pub hold: Option<GateRunner>,
}

impl TaskRunner for TypeChangeRunner {
    fn run(
        &self,
        ctx: &TaskContext,
        _progress: &dyn Fn(String),
        cancel: &CancelFlag,
    ) -> Result<TaskOutcome, awcp_proto::TaskFailure> {
        if let Some(g) = &self.hold {
            let _ = g.started_tx.try_send(());
            while !g.release.load(std::sync::atomic::Ordering::SeqCst) {
                if cancel.is_cancelled() {
                    return Err("stopped".into());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let w = &ctx.work_dir;
        let e = |e: std::io::Error| e.to_string();
        std::fs::remove_dir_all(w.join("src")).map_err(e)?;
        std::fs::write(w.join("src"), "src is a file now\n").map_err(e)?;
        std::fs::remove_file(w.join("b.txt")).map_err(e)?;
        std::fs::create_dir(w.join("b.txt")).map_err(e)?;
        std::fs::write(w.join("b.txt/inner.txt"), "inside\n").map_err(e)?;
        Ok(TaskOutcome {
            summary: "src/ -> file, b.txt -> dir/".into(),
            highlights: vec![],
        })
    }
}

/// A runner that checks the modes it received (`ro.txt` 0444, `run.sh` 0755), edits the
/// read-only `ro.txt` (keeping it read-only), creates `tool.sh` with mode 0750 and edits `a.txt`.
pub struct ModeRunner;

impl TaskRunner for ModeRunner {
    fn run(
        &self,
        ctx: &TaskContext,
        _progress: &dyn Fn(String),
        _c: &CancelFlag,
    ) -> Result<TaskOutcome, awcp_proto::TaskFailure> {
        use std::os::unix::fs::PermissionsExt;
        let w = &ctx.work_dir;
        let e = |e: std::io::Error| e.to_string();
        let mode = |p: &str| -> Result<u32, String> {
            Ok(std::fs::metadata(w.join(p))
                .map_err(e)?
                .permissions()
                .mode()
                & 0o7777)
        };
        for (p, want) in [("ro.txt", 0o444), ("run.sh", 0o755), ("b.txt", 0o644)] {
            let got = mode(p)?;
            if got != want {
                return Err(format!("{p} arrived as {got:o}, not {want:o}").into());
            }
        }
        let set = |p: &str, m: u32| {
            std::fs::set_permissions(w.join(p), std::fs::Permissions::from_mode(m)).map_err(e)
        };
        set("ro.txt", 0o644)?;
        std::fs::write(w.join("ro.txt"), "RO edited\n").map_err(e)?;
        set("ro.txt", 0o444)?;
        std::fs::write(w.join("tool.sh"), "#!/bin/sh\n").map_err(e)?;
        set("tool.sh", 0o750)?;
        std::fs::write(w.join("a.txt"), "A edited\n").map_err(e)?;
        Ok(TaskOutcome {
            summary: "modes kept".into(),
            highlights: vec![],
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
    ) -> Result<TaskOutcome, awcp_proto::TaskFailure> {
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
    start_executor_journalled::<R>(runner, None, tweak)
}

/// [`start_executor`], journalling its assignments under `state` if given.
pub fn start_executor_journalled<R: TestRuntime>(
    runner: Arc<dyn TaskRunner>,
    state: Option<&Path>,
    tweak: impl FnOnce(&mut ExecutorConfig),
) -> Exec {
    let dir = tempfile::tempdir().unwrap();
    let work_root = dir.path().join("work");
    let mut engine = ExecutorConfig {
        work_root: work_root.to_string_lossy().into_owned(),
        stop_grace: Duration::from_secs(5),
        ..ExecutorConfig::default()
    };
    engine.auth = R::TOKEN.map(|t| RequiredAuth {
        types: vec![],
        credential: t.into(),
    });
    tweak(&mut engine);
    let mut opts = ExecutorOptions::new(engine, Arc::new(ArchiveExecutor::default()), runner);
    opts.state_dir = state.map(Path::to_path_buf);
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

/// An executor running [`EditRunner`] and a delegator that sends archives inline (it does not
/// offer the `archive-url` feature).
async fn start_inline_pair<R: TestRuntime>() -> (Exec, Deleg) {
    let ex = start_executor::<R>(Arc::new(EditRunner), |_| {}).await;
    let dg = start_delegator::<R>(false, |c| {
        c.features.retain(|f| f != awcp_proto::feature::ARCHIVE_URL)
    })
    .await;
    (ex, dg)
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

/// A delegation of `dir` to `peer`, presenting `R`'s credential if the run has one.
pub fn params<R: TestRuntime>(peer: &str, dir: &Path) -> DelegateParams {
    let mut p = DelegateParams::new(peer, dir, "edit files").description("e2e");
    p.auth = R::TOKEN.map(bearer);
    p
}

/// A bearer credential.
pub fn bearer(credential: &str) -> Auth {
    Auth {
        auth_type: AuthType::Bearer,
        credential: credential.into(),
        metadata: Default::default(),
    }
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
    let (ex, dg) = start_inline_pair::<R>().await;
    let ws = workspace();
    let v = run_to_end::<R>(&dg.handle, params::<R>(&ex.peer, ws.path())).await;
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

/// A workspace whose inline archive is well over the 1 MiB in-memory limit (incompressible):
/// the delegator streams START from its archive file, the executor decodes the text into a
/// file as it arrives; the result is applied as with a small one, and neither side keeps an
/// archive file afterwards. A large START whose text is not base64 is refused while it is
/// received, and one the engine refuses has its file deleted: nothing is left on disk. One the
/// executor cannot store is answered as such.
pub async fn a_large_inline_archive_is_streamed_and_leaves_no_file<R: TestRuntime>() {
    let (ex, dg) = start_inline_pair::<R>().await;
    let ws = workspace();
    let big = random_bytes(7);
    std::fs::write(ws.path().join("big.bin"), &big).unwrap();
    let v = run_to_end::<R>(&dg.handle, params::<R>(&ex.peer, ws.path())).await;
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    assert_edited(ws.path());
    assert_eq!(std::fs::read(ws.path().join("big.bin")).unwrap(), big);
    wait_released::<R>(&ex).await;
    let files_in = |d: &Path| {
        std::fs::read_dir(d)
            .map(|r| r.flatten().map(|e| e.path()).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let downloads = ex.work_root.join(".awcp/downloads");
    assert_eq!(files_in(&downloads), Vec::<std::path::PathBuf>::new());
    let archives = dg.dir.path().join("state/archives");
    assert_eq!(files_in(&archives), Vec::<std::path::PathBuf>::new());

    let id = "dlg_0123456789abcdef0123456789abcdef";
    let body = format!(
        r#"{{"version":"1","type":"START","delegationId":"{id}","lease":{{"expiresAt":"2030-01-01T00:00:00Z","accessMode":"rw"}},"transportHandle":{{"transport":"archive","workspaceBase64":"{}!","checksum":"{}"}}}}"#,
        "QUJD".repeat(1 << 19),
        "0".repeat(64)
    );
    let (status, err) = http_post::<R>(&ex.peer, &body).await;
    assert_eq!(status, 400, "{err}");
    assert_eq!(err["code"], "TRANSPORT_ERROR", "{err}");
    assert_eq!(files_in(&downloads), Vec::<std::path::PathBuf>::new());

    // Valid text for a delegation the executor does not know: refused by the engine, and the
    // file it was received into is deleted by the executor's loop right after.
    let body = body.replace("QUJD!", "QUJD");
    let (status, err) = http_post::<R>(&ex.peer, &body).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (404, Some("NOT_FOUND")),
        "{err}"
    );
    let mut gone = false;
    for _ in 0..2000 {
        if files_in(&downloads).is_empty() {
            gone = true;
            break;
        }
        R::default().sleep(Duration::from_millis(5)).await;
    }
    assert!(
        gone,
        "the unclaimed archive file stayed: {:?}",
        files_in(&downloads)
    );

    // The executor cannot store the archive (its downloads directory is a file here, as a
    // full disk would fail it): 503 TRANSPORT_ERROR saying so, not "shutting down".
    let _ = std::fs::remove_dir_all(&downloads);
    std::fs::write(&downloads, b"").unwrap();
    let (status, err) = http_post::<R>(&ex.peer, &body).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (503, Some("TRANSPORT_ERROR")),
        "{err}"
    );
    assert!(
        err["message"]
            .as_str()
            .unwrap_or("")
            .contains("could not store"),
        "{err}"
    );
}

/// A runner that writes `out.bin` (3 MiB of random bytes) into the work dir, so the result
/// archive is large.
pub struct BigResultRunner;

/// What [`BigResultRunner`] writes.
fn big_result() -> Vec<u8> {
    random_bytes(11)
}

/// 3 MiB of bytes drawn from `seed` (an archive of them is as large: they do not compress).
fn random_bytes(seed: u64) -> Vec<u8> {
    let mut rng = awcp_tests::rng::Rng(seed);
    (0..3 << 20).map(|_| rng.next_u64() as u8).collect()
}

impl TaskRunner for BigResultRunner {
    fn run(
        &self,
        ctx: &TaskContext,
        _progress: &dyn Fn(String),
        _c: &CancelFlag,
    ) -> Result<TaskOutcome, awcp_proto::TaskFailure> {
        std::fs::write(ctx.work_dir.join("out.bin"), big_result()).map_err(|e| e.to_string())?;
        Ok(TaskOutcome {
            summary: "wrote out.bin".into(),
            highlights: vec!["out.bin".into()],
        })
    }
}

/// A result sent inline (`snapshotBase64` in a `snapshot` event for the reference dialect,
/// `resultBase64` in `done` for the seed dialect) far larger than the largest event the
/// delegator keeps in memory: received into a file as it arrives, stored, applied, and no
/// received file is left.
pub async fn a_large_inline_result_is_received_into_a_file_in_both_dialects<R: TestRuntime>() {
    let ex = start_executor::<R>(Arc::new(BigResultRunner), |_| {}).await;
    let dg = start_delegator::<R>(false, |c| {
        c.features.retain(|f| f != awcp_proto::feature::ARCHIVE_URL);
        // An event's JSON besides its archive: 64 KiB at most (the result is 4 MiB of text);
        // the `GET …/result` fallback cannot carry it either.
        c.max_reply_bytes = 64 << 10;
        c.max_result_bytes = 64 << 10;
        c.sse_reconnect_attempts = 1;
    })
    .await;
    for dialect in [Dialect::Reference, Dialect::Seed] {
        let ws = workspace();
        let mut p = params::<R>(&ex.peer, ws.path());
        p.dialect = dialect;
        let v = run_to_end::<R>(&dg.handle, p).await;
        assert_eq!(v.state, DelegationState::Completed, "{dialect:?}: {v:?}");
        assert_eq!(
            std::fs::read(ws.path().join("out.bin")).unwrap(),
            big_result(),
            "{dialect:?}"
        );
        wait_released::<R>(&ex).await;
    }
    assert_nothing_incoming(&dg);
    // The executor sent each result from a file, dropped once acknowledged.
    assert_no_snapshot_files::<R>(&ex).await;
}

/// A result captured to be sent inline is never journaled: what a stopped executor left of
/// one is removed when the next one starts (URL-mode snapshots, which are journaled, stay).
pub async fn inline_results_a_stopped_executor_left_are_removed_at_start<R: TestRuntime>() {
    let dir = tempfile::tempdir().unwrap();
    let work_root = dir.path().join("work");
    let scratch = work_root.join(".awcp");
    let left = scratch.join("inline-results/dlg_gone/snap_0123456789ab.zip");
    let kept = scratch.join("snapshots/dlg_kept/snap_0123456789ab.zip");
    for f in [&left, &kept] {
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, b"PK\x05\x06").unwrap();
    }
    let _ex = start_executor::<R>(Arc::new(EditRunner), |c| {
        c.work_root = work_root.to_string_lossy().into_owned();
    })
    .await;
    assert!(!left.exists(), "{} stayed", left.display());
    assert!(kept.exists(), "{} was removed", kept.display());
}

/// What a stopped delegator was receiving (a result cut by the stop, or by a crash) is removed
/// when the next one starts on the same state directory: the stream is replayed.
pub async fn results_a_stopped_delegator_was_receiving_are_removed_at_start<R: TestRuntime>() {
    let dir = tempfile::tempdir().unwrap();
    let partial = dir.path().join("state/incoming/.awcp-result-x.zip");
    std::fs::create_dir_all(partial.parent().unwrap()).unwrap();
    std::fs::write(&partial, b"PK").unwrap();
    let dg = start_delegator_in::<R>(dir, false, |_| {});
    assert!(!partial.exists(), "{} stayed", partial.display());
    assert_nothing_incoming(&dg);
}

/// The delegator holds no result file it received and did not store.
fn assert_nothing_incoming(dg: &Deleg) {
    let incoming = dg.dir.path().join("state/incoming");
    let left: Vec<_> = std::fs::read_dir(&incoming)
        .map(|r| r.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert_eq!(left, Vec::<PathBuf>::new());
}

/// Waits until the executor holds no captured snapshot file (they go at ack or retention).
async fn assert_no_snapshot_files<R: TestRuntime>(ex: &Exec) {
    let files = || {
        let mut out = Vec::new();
        for dir in ["snapshots", "inline-results"] {
            let dir = ex.work_root.join(".awcp").join(dir);
            for d in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                for f in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
                    out.push(f.path());
                }
            }
        }
        out
    };
    for _ in 0..2000 {
        if files().is_empty() {
            return;
        }
        R::default().sleep(Duration::from_millis(5)).await;
    }
    panic!("snapshot files left: {:?}", files());
}

/// The event stream never gets through (a proxy cuts every one just after it opens): the
/// delegator falls back to `GET …/result`, whose large inline `snapshotBase64` is received
/// into a file as it arrives (the body is far over the largest JSON the delegator keeps),
/// stored and applied; no received file is left.
pub async fn a_large_inline_result_fetched_by_polling_is_received_into_a_file<R: TestRuntime>() {
    let ex = start_executor::<R>(Arc::new(BigResultRunner), |_| {}).await;
    let proxy = CutProxy::start(ex.base.trim_start_matches("http://").parse().unwrap());
    proxy.refuse_event_streams();
    ex.handle.set_public_url(format!("http://{}", proxy.addr));
    let dg = start_delegator::<R>(false, |c| {
        c.features.retain(|f| f != awcp_proto::feature::ARCHIVE_URL);
        c.max_reply_bytes = 64 << 10;
        c.sse_reconnect_attempts = 1;
    })
    .await;
    let ws = workspace();
    let peer = format!("http://{}/awcp", proxy.addr);
    let v = run_to_end::<R>(&dg.handle, params::<R>(&peer, ws.path())).await;
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    assert_eq!(
        std::fs::read(ws.path().join("out.bin")).unwrap(),
        big_result()
    );
    assert!(proxy.count("/result ") >= 1, "the result was polled for");
    assert_nothing_incoming(&dg);
    wait_released::<R>(&ex).await;
}

/// More delegations at once than half the executor server's connection cap: each holds its
/// event stream open while it sends START, so a cap that were not raised to what the
/// executor's concurrency needs would lock them out (streams fill it, their STARTs wait behind
/// them until they time out). All complete.
pub async fn more_delegations_than_half_the_connection_cap_all_complete<R: TestRuntime>() {
    let dir = tempfile::tempdir().unwrap();
    let mut engine = ExecutorConfig {
        work_root: dir.path().join("work").to_string_lossy().into_owned(),
        max_concurrent: 12,
        ..ExecutorConfig::default()
    };
    engine.auth = R::TOKEN.map(|t| RequiredAuth {
        types: vec![],
        credential: t.into(),
    });
    let opts = ExecutorOptions::new(
        engine,
        Arc::new(ArchiveExecutor::default()),
        Arc::new(EditRunner),
    );
    let handle = ExecutorHandle::start(R::default(), opts);
    let (listener, addr) = bind();
    handle.set_public_url(format!("http://{addr}"));
    let server = R::serve_executor_with(
        listener,
        handle.clone(),
        agent_rt::ServerOptions {
            max_connections: 4,
            ..agent_rt::ServerOptions::default()
        },
        Box::pin(std::future::pending()),
    );
    R::default().spawn(Box::pin(async move {
        let _ = server.await;
    }));
    let peer = format!("http://{addr}/awcp");
    let dg = start_delegator::<R>(false, |_| {}).await;
    let spaces: Vec<_> = (0..12).map(|_| workspace()).collect();
    let mut ids = Vec::new();
    for ws in &spaces {
        ids.push(
            dg.handle
                .delegate(params::<R>(&peer, ws.path()))
                .await
                .unwrap(),
        );
    }
    for id in &ids {
        let v = timeout::<R, _>(Duration::from_secs(60), dg.handle.wait(id))
            .await
            .expect("delegation ended in time")
            .expect("delegation known");
        assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    }
    for ws in &spaces {
        assert_edited(ws.path());
    }
}

/// Requests to one executor beyond the delegator's `max_requests_per_executor` wait for a
/// free slot: an executor that holds every request sees two at a time from six delegations
/// started at once, a third only once it answers one, and every delegation ends.
pub async fn requests_to_one_executor_beyond_the_cap_wait_for_a_slot<R: TestRuntime>() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let (release_tx, release) = async_channel::unbounded::<()>();
    let (seen_tx, seen) = async_channel::unbounded::<()>();
    let (now, most, all): (Arc<AtomicUsize>, Arc<AtomicUsize>, Arc<AtomicUsize>) =
        Default::default();
    let (n, m, a) = (now.clone(), most.clone(), all.clone());
    let handler =
        agent_rt::Handler::new(move |_req: http::Request<agent_rt::body::RequestBody>| {
            let (release, seen_tx) = (release.clone(), seen_tx.clone());
            let (now, most, all) = (n.clone(), m.clone(), a.clone());
            async move {
                most.fetch_max(now.fetch_add(1, SeqCst) + 1, SeqCst);
                all.fetch_add(1, SeqCst);
                let _ = seen_tx.send(()).await;
                let _ = release.recv().await;
                now.fetch_sub(1, SeqCst);
                agent_rt::body::json_response(503, "\"busy\"".into())
            }
        });
    let (listener, addr) = bind();
    R::default().spawn(Box::pin(async move {
        let opts = agent_rt::ServerOptions::default();
        let _ = agent_rt::serve(
            R::default(),
            listener,
            handler,
            opts,
            std::future::pending(),
        )
        .await;
    }));
    let dg = start_delegator::<R>(false, |c| c.max_requests_per_executor = 2).await;
    let peer = format!("http://{addr}/awcp");
    let spaces: Vec<_> = (0..6).map(|_| workspace()).collect();
    let mut ids = Vec::new();
    for ws in &spaces {
        let id = dg.handle.delegate(params::<R>(&peer, ws.path())).await;
        ids.push(id.unwrap());
    }
    let long = Duration::from_secs(60);
    for _ in 0..2 {
        timeout::<R, _>(long, seen.recv())
            .await
            .expect("a request arrives")
            .unwrap();
    }
    // A third would arrive now if the cap let it through.
    let third = timeout::<R, _>(Duration::from_millis(300), seen.recv()).await;
    assert!(third.is_none(), "a third request in flight");
    assert_eq!(now.load(SeqCst), 2);
    release_tx.send(()).await.unwrap();
    timeout::<R, _>(long, seen.recv())
        .await
        .expect("a waiting request goes out once one is answered")
        .unwrap();
    for _ in 0..100 {
        release_tx.send(()).await.unwrap();
    }
    for id in &ids {
        let v = timeout::<R, _>(long, dg.handle.wait(id))
            .await
            .expect("delegation ended in time")
            .expect("delegation known");
        assert!(v.state.is_terminal(), "{v:?}");
    }
    assert_eq!(most.load(SeqCst), 2);
    assert!(all.load(SeqCst) >= 6, "{} requests", all.load(SeqCst));
}

pub async fn archive_url_mode_delegation_applies_the_result<R: TestRuntime>() {
    let ex = start_executor::<R>(Arc::new(EditRunner), |_| {}).await;
    let dg = start_delegator::<R>(true, |_| {}).await;
    let ws = workspace();
    let v = run_to_end::<R>(&dg.handle, params::<R>(&ex.peer, ws.path())).await;
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
    let mut p = params::<R>(&ex.peer, ws.path());
    p.access_mode = AccessMode::Ro;
    p.resources[0].mode = AccessMode::Ro;
    let v = run_to_end::<R>(&dg.handle, p).await;
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    assert_eq!(tree(ws.path()), before);
}

/// A finished delegation in `staged` mode (the executor edits the workspace): what it ran on,
/// its workspace as it was before (nothing applied yet), and its view.
struct Staged {
    _ex: Exec,
    dg: Deleg,
    ws: tempfile::TempDir,
    before: BTreeMap<String, String>,
    v: awcp_proto::engine::delegator::DelegationView,
}

async fn staged<R: TestRuntime>() -> Staged {
    let ex = start_executor::<R>(Arc::new(EditRunner), |_| {}).await;
    let dg = start_delegator::<R>(false, |_| {}).await;
    let ws = workspace();
    let before = tree(ws.path());
    let mut p = params::<R>(&ex.peer, ws.path());
    p.snapshot_mode = SnapshotMode::Staged;
    let v = run_to_end::<R>(&dg.handle, p).await;
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    assert_eq!(tree(ws.path()), before, "staged: nothing applied yet");
    Staged {
        _ex: ex,
        dg,
        ws,
        before,
        v,
    }
}

pub async fn staged_snapshot_can_be_applied_later<R: TestRuntime>() {
    let Staged { dg, ws, v, .. } = staged::<R>().await;
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

/// A stored snapshot is verified against the checksum its executor announced, which the
/// delegator's record keeps (the store holds only the bytes): bytes that changed in the store
/// while the delegator was stopped are refused at apply with `CHECKSUM_MISMATCH`, the workspace
/// untouched, the snapshot still pending. (Bytes appended after a ZIP's end still read as the
/// same archive: only the checksum tells.)
pub async fn a_stored_snapshot_changed_while_stopped_is_refused_at_apply<R: TestRuntime>() {
    let Staged {
        dg, ws, before, v, ..
    } = staged::<R>().await;
    let (id, sid) = (v.request.id.clone(), v.snapshots[0].id.clone());
    let dg = dg.restart::<R>().await;
    let v = dg.handle.get(&id).await.unwrap();
    assert!(
        v.snapshots[0].checksum.is_some(),
        "kept across the restart: {v:?}"
    );
    let zip = dg
        .dir
        .path()
        .join("state/snapshots")
        .join(id.as_str())
        .join(format!("{sid}.zip"));
    let mut f = std::fs::OpenOptions::new().append(true).open(&zip).unwrap();
    std::io::Write::write_all(&mut f, b"changed").unwrap();
    drop(f);
    match dg.handle.apply_snapshot_and_wait(&id, &sid).await {
        Err(awcp_driver::DelegatorError::Protocol(e)) => {
            assert_eq!(e.code, ErrorCode::ChecksumMismatch, "{e:?}")
        }
        other => panic!("applied or failed otherwise: {other:?}"),
    }
    assert_eq!(tree(ws.path()), before, "nothing applied");
    let v = dg.handle.get(&id).await.unwrap();
    assert_eq!(
        v.snapshots[0].status,
        awcp_proto::engine::delegator::SnapshotStatus::Pending
    );
}

pub async fn staged_snapshot_can_be_discarded<R: TestRuntime>() {
    let Staged {
        dg, ws, before, v, ..
    } = staged::<R>().await;
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
    let v = run_to_end::<R>(&dg.handle, params::<R>(&ex.peer, ws.path())).await;
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
        .delegate(params::<R>(&ex.peer, ws1.path()))
        .await
        .unwrap();
    gate.started().await;
    let v2 = run_to_end::<R>(&dg.handle, params::<R>(&ex.peer, ws2.path())).await;
    assert_eq!(v2.state, DelegationState::Error);
    assert_eq!(v2.error.unwrap().code, ErrorCode::Declined);
    gate.release
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let v1 = dg.handle.wait(&id1).await.unwrap();
    assert_eq!(v1.state, DelegationState::Completed);
}

/// The next INVITE the executor tells the application about: its id and whether it needs a
/// decision.
async fn next_invite(
    events: &mut futures::channel::mpsc::UnboundedReceiver<awcp_proto::ExecutorEvent>,
) -> (awcp_proto::DelegationId, bool) {
    use futures::StreamExt;
    loop {
        if let awcp_proto::ExecutorEvent::InviteReceived {
            id, needs_decision, ..
        } = events.next().await.expect("executor running")
        {
            return (id, needs_decision);
        }
    }
}

/// With `auto_accept` off, the application learns of each INVITE from
/// `ExecutorHandle::events` and decides through `accept_invite` / `decline_invite`.
pub async fn the_application_accepts_or_declines_through_the_handle<R: TestRuntime>() {
    let ex = start_executor::<R>(Arc::new(EditRunner), |c| c.auto_accept = false).await;
    let mut events = ex.handle.events().expect("running");
    let dg = start_delegator::<R>(false, |_| {}).await;
    // Accepted: the delegation runs to its end.
    let ws = workspace();
    let id = dg
        .handle
        .delegate(params::<R>(&ex.peer, ws.path()))
        .await
        .unwrap();
    let (seen, needs_decision) = timeout::<R, _>(Duration::from_secs(30), next_invite(&mut events))
        .await
        .expect("invite seen");
    assert_eq!(seen, id);
    assert!(needs_decision);
    ex.handle.accept_invite(&id).await.unwrap();
    assert!(
        ex.handle.accept_invite(&id).await.is_err(),
        "an INVITE is decided once"
    );
    let v = timeout::<R, _>(Duration::from_secs(60), dg.handle.wait(&id))
        .await
        .expect("ended in time")
        .unwrap();
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    assert_edited(ws.path());
    // Declined: the delegator gets the application's reason.
    let ws = workspace();
    let id = dg
        .handle
        .delegate(params::<R>(&ex.peer, ws.path()))
        .await
        .unwrap();
    let (seen, _) = timeout::<R, _>(Duration::from_secs(30), next_invite(&mut events))
        .await
        .expect("invite seen");
    assert_eq!(seen, id);
    ex.handle
        .decline_invite(&id, ErrorInfo::new(ErrorCode::Declined, "not this one"))
        .await
        .unwrap();
    let v = timeout::<R, _>(Duration::from_secs(60), dg.handle.wait(&id))
        .await
        .expect("ended in time")
        .unwrap();
    assert_eq!(v.state, DelegationState::Error);
    let e = v.error.unwrap();
    assert_eq!(e.code, ErrorCode::Declined);
    assert!(e.message.contains("not this one"), "{e:?}");
}

pub async fn cancel_from_the_delegator_stops_the_runner<R: TestRuntime>() {
    let gate = GateRunner::default();
    let ex = start_executor::<R>(Arc::new(gate.clone()), |_| {}).await;
    let dg = start_delegator::<R>(false, |_| {}).await;
    let ws = workspace();
    let before = tree(ws.path());
    let id = dg
        .handle
        .delegate(params::<R>(&ex.peer, ws.path()))
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
    let mut p = params::<R>(&ex.peer, ws.path());
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

/// The wall clock set back by an hour mid-task (on both sides) holds no deadline: the lease
/// still ends on time, because drivers hand their engines the protocol clock
/// (`agent_rt::clock`), which does not follow a clock set back. Fed the wall clock, both
/// sides would wait an hour and two seconds.
pub async fn a_wall_clock_set_back_mid_task_does_not_hold_the_lease<
    R: TestRuntime + agent_rt::Host,
>() {
    type SetBack<R> = Variant<R, ClockSetBack>;
    let gate = GateRunner::default();
    let ex = start_executor::<SetBack<R>>(Arc::new(gate.clone()), |_| {}).await;
    let dg = start_delegator::<SetBack<R>>(false, |_| {}).await;
    let ws = workspace();
    let mut p = params::<R>(&ex.peer, ws.path());
    p.ttl_seconds = 2;
    let id = dg.handle.delegate(p).await.unwrap();
    gate.started().await;
    // Both sides now hold a lease deadline and the executor a running task.
    ClockSetBack::set_back();
    let v = timeout::<R, _>(Duration::from_secs(30), dg.handle.wait(&id))
        .await
        .expect("the lease did not end within 30 s of a 2 s lease: the clock set back held it")
        .unwrap();
    assert_eq!(v.state, DelegationState::Expired, "{v:?}");
    wait_released::<SetBack<R>>(&ex).await;
    assert!(
        gate.saw_cancel.load(std::sync::atomic::Ordering::SeqCst),
        "the executor stopped the task"
    );
}

/// `wait` tells an id the delegator does not know from a delegator that stopped while the
/// delegation ran (which a new handle resumes).
pub async fn wait_tells_an_unknown_id_from_a_stopped_delegator<R: TestRuntime>() {
    let gate = GateRunner::default();
    let ex = start_executor::<R>(Arc::new(gate.clone()), |_| {}).await;
    let dg = start_delegator::<R>(false, |_| {}).await;
    let unknown = awcp_proto::DelegationId::new("dlg_nobody").unwrap();
    assert!(matches!(
        dg.handle.wait(&unknown).await,
        Err(awcp_driver::DelegatorError::Usage(
            awcp_proto::engine::UsageError::UnknownDelegation(_)
        ))
    ));
    let ws = workspace();
    let id = dg
        .handle
        .delegate(params::<R>(&ex.peer, ws.path()))
        .await
        .unwrap();
    gate.started().await;
    let waiting = spawn::<R, _>({
        let h = dg.handle.clone();
        let id = id.clone();
        async move { h.wait(&id).await }
    });
    dg.handle.stop().await;
    assert!(matches!(
        waiting.await,
        Err(awcp_driver::DelegatorError::Closed)
    ));
    gate.release
        .store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Two executors left at the default `id_seed` (0) name their snapshots differently: the
/// driver draws a seed at start (the engine draws no randomness).
pub async fn executors_with_the_default_seed_draw_their_own_snapshot_ids<R: TestRuntime>() {
    let dg = start_delegator::<R>(false, |_| {}).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let ex = start_executor::<R>(Arc::new(EditRunner), |c| c.id_seed = 0).await;
        let ws = workspace();
        let v = run_to_end::<R>(&dg.handle, params::<R>(&ex.peer, ws.path())).await;
        assert_eq!(v.state, DelegationState::Completed, "{v:?}");
        ids.push(v.snapshots[0].id.clone());
    }
    assert_ne!(ids[0], ids[1], "both executors drew the same snapshot id");
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
    let mut p = params::<R>(&ex.peer, ws.path());
    p.auth = None;
    let v = run_to_end::<R>(&dg.handle, p).await;
    assert_eq!(v.error.unwrap().code, ErrorCode::AuthFailed);
    let with_bearer = |credential: &str| {
        let mut p = params::<R>(&ex.peer, ws.path());
        p.auth = Some(bearer(credential));
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
    refuse_events: Arc<std::sync::atomic::AtomicBool>,
}

impl CutProxy {
    /// Forwards connections on a new loopback port to `upstream`.
    pub fn start(upstream: SocketAddr) -> CutProxy {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let conns: Arc<std::sync::Mutex<Vec<std::net::TcpStream>>> = Default::default();
        let requests: Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let (tx, seen) = async_channel::unbounded();
        let refuse_events: Arc<std::sync::atomic::AtomicBool> = Default::default();
        let (c, r, f) = (conns.clone(), requests.clone(), refuse_events.clone());
        std::thread::spawn(move || {
            for down in l.incoming().flatten() {
                let (conns, requests, tx) = (c.clone(), r.clone(), tx.clone());
                let refuse_events = f.clone();
                std::thread::spawn(move || {
                    let Ok(up) = std::net::TcpStream::connect(upstream) else {
                        return;
                    };
                    {
                        let mut g = conns.lock().unwrap();
                        g.push(down.try_clone().unwrap());
                        g.push(up.try_clone().unwrap());
                    }
                    let (d2, u2) = (down.try_clone().unwrap(), up.try_clone().unwrap());
                    // Set once this connection asked for an event stream the proxy refuses:
                    // the answer's first piece (its head) gets through, then it is cut.
                    let cut_after_head: Arc<std::sync::atomic::AtomicBool> = Default::default();
                    let cut = cut_after_head.clone();
                    std::thread::spawn(move || {
                        let (d3, u3) = (d2.try_clone().unwrap(), u2.try_clone().unwrap());
                        forward(u2, d2, |_| {
                            let go_on = !cut.load(std::sync::atomic::Ordering::SeqCst);
                            if !go_on {
                                let _ = d3.shutdown(std::net::Shutdown::Both);
                                let _ = u3.shutdown(std::net::Shutdown::Both);
                            }
                            go_on
                        })
                    });
                    // Forward the client's bytes, noting every request line on the way (a
                    // kept-alive connection carries several requests).
                    let mut partial = Vec::new();
                    forward(down, up, |piece| {
                        partial.extend_from_slice(piece);
                        while let Some(end) = partial.windows(2).position(|w| w == b"\r\n") {
                            let line = String::from_utf8_lossy(&partial[..end]).into_owned();
                            partial.drain(..end + 2);
                            // A request line may follow the previous body on the same line
                            // (bodies end without a line break).
                            let start = ["GET /", "POST /", "PUT /", "DELETE /"]
                                .iter()
                                .filter_map(|m| line.rfind(m))
                                .max();
                            if let (Some(start), true) = (start, line.ends_with(" HTTP/1.1")) {
                                requests.lock().unwrap().push(line[start..].to_owned());
                                let _ = tx.try_send(());
                                if line.contains("/events ")
                                    && refuse_events.load(std::sync::atomic::Ordering::SeqCst)
                                {
                                    cut_after_head.store(true, std::sync::atomic::Ordering::SeqCst);
                                }
                            }
                        }
                        // A body without line breaks (an archive) is not kept whole.
                        if partial.len() > 4096 {
                            let keep = partial.len() - 512;
                            partial.drain(..keep);
                        }
                        true
                    });
                });
            }
        });
        CutProxy {
            addr,
            conns,
            requests,
            seen,
            refuse_events,
        }
    }

    /// From now on, cuts every connection that asks for an event stream once the first piece
    /// of its answer (the head) went through: each stream opens, then breaks.
    pub fn refuse_event_streams(&self) {
        self.refuse_events
            .store(true, std::sync::atomic::Ordering::SeqCst);
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

/// Copies `from` to `to` in pieces of up to 64 KiB, calling `each` with every piece once it
/// is written; stops at the end, on an error, or when `each` says no.
fn forward(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    mut each: impl FnMut(&[u8]) -> bool,
) {
    use std::io::{Read, Write};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).is_err() || !each(&buf[..n]) {
            return;
        }
    }
}

/// The event stream is cut mid-task (every connection through the proxy is shut down); the
/// delegator re-opens it and the task's result arrives over the new stream, not by polling.
pub async fn sse_stream_cut_mid_task_is_resumed<R: TestRuntime>() {
    let gate = GateRunner::default();
    let ex = start_executor::<R>(Arc::new(gate.clone()), |_| {}).await;
    let proxy = CutProxy::start(ex.base.trim_start_matches("http://").parse().unwrap());
    // Behind a proxy the executor's public URL is the proxy's: the snapshot URLs it hands out
    // are on the origin the delegator talks to (the only origin it sends its credential to).
    ex.handle.set_public_url(format!("http://{}", proxy.addr));
    let dg = start_delegator::<R>(false, |_| {}).await;
    let mut events = dg.handle.events();
    let ws = workspace();
    let peer = format!("http://{}/awcp", proxy.addr);
    let id = dg
        .handle
        .delegate(params::<R>(&peer, ws.path()))
        .await
        .unwrap();
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
        .delegate(params::<R>(&ex.peer, ws.path()))
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

/// `awcp-executor`, built once per test process (see `awcp_tests::bins`).
fn executor_binary() -> PathBuf {
    example_binary("awcp-executor")
}

/// Binary `bin` of awcp-aip-cli (`awcp` or `awcp-executor`), built once per test process
/// with the running test's profile (see `awcp_tests::bins`).
pub fn example_binary(bin: &str) -> PathBuf {
    awcp_tests::bins::path(bin)
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
    fn spawn(
        bin: &Path,
        runtime: &str,
        token: Option<&str>,
        listen: &str,
        dir: &Path,
        marker: &str,
    ) -> Self {
        let mut cmd = std::process::Command::new(bin);
        if let Some(t) = token {
            cmd.args(["--auth-token", t]);
        }
        cmd.args(["--listen", listen, "--quiet", "--runtime", runtime])
            .arg("--work-root")
            .arg(dir.join("work"))
            .arg("--state-dir")
            .arg(dir.join("state"))
            .arg("--agent-cmd")
            .arg(format!("sh -c 'echo started; exec sleep 120 {marker}'"));
        let (child, url) =
            awcp_tests::bins::spawn_announcing(&mut cmd, awcp_tests::bins::EXECUTOR_ANNOUNCES);
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
        ExecutorProcess::spawn(&b, R::NAME, R::TOKEN, "127.0.0.1:0", &d, &m)
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
    let id = dg
        .handle
        .delegate(params::<R>(&peer, ws.path()))
        .await
        .unwrap();
    // Wait for the agent command to report it started.
    progress_seen::<R>(&mut events, "started").await;
    let work_dir = dir.path().join("work").join(id.as_str());
    assert!(work_dir.exists());
    // SIGKILL: no chance to clean up. The agent's process group is orphaned; the restarted
    // executor ends it (see `executor_sigkill_restart_ends_the_orphaned_task_tree`).
    ex.child.kill().unwrap();
    ex.child.wait().unwrap();
    // A safety net only (the marker is unique to this test run).
    let pkill = |m: String| {
        let _ = std::process::Command::new("pkill")
            .args(["-f", &format!("^sleep 120 {m}$")])
            .status();
    };
    // Restart on the same port with the same state.
    let (d, m) = (dir.path().to_owned(), marker.clone());
    let ex2 = awcp_driver::runtime::blocking(&rt, move || {
        ExecutorProcess::spawn(&bin, R::NAME, R::TOKEN, &listen, &d, &m)
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

/// A directory replaced by a file and a file replaced by a directory apply (both snapshot
/// kinds: delta from our executor, and the full snapshot a reference peer sends), with no
/// local edit: nothing conflicts, and nothing is left behind.
pub async fn type_changes_apply_both_ways<R: TestRuntime>() {
    let ex = start_executor::<R>(Arc::new(TypeChangeRunner::default()), |_| {}).await;
    for delta in [true, false] {
        let dg = start_delegator::<R>(false, |c| {
            if !delta {
                c.features
                    .retain(|f| f != awcp_proto::feature::DELTA_SNAPSHOTS)
            }
        })
        .await;
        let ws = workspace();
        let v = run_to_end::<R>(&dg.handle, params::<R>(&ex.peer, ws.path())).await;
        assert_eq!(v.state, DelegationState::Completed, "{v:?}");
        assert_eq!(
            v.snapshots[0].status,
            awcp_proto::engine::delegator::SnapshotStatus::Applied,
            "delta={delta}: {v:?}"
        );
        let t = tree(ws.path());
        assert_eq!(
            t.get("src").map(String::as_str),
            Some("src is a file now\n")
        );
        assert_eq!(
            t.get("b.txt/inner.txt").map(String::as_str),
            Some("inside\n")
        );
        assert_eq!(t.get("a.txt").map(String::as_str), Some("A\n"));
        assert!(!ws.path().join("src/keep.rs").exists());
        let parent = ws.path().parent().unwrap();
        let leftovers: Vec<_> = std::fs::read_dir(parent)
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .contains(v.request.id.as_str())
            })
            .collect();
        assert!(leftovers.is_empty(), "staging left: {leftovers:?}");
        wait_released::<R>(&ex).await;
    }
}

/// The same type changes over real local edits (a file edited and a file added under the
/// directory that becomes a file): a conflict naming those files, with a hint about local
/// edits (not about storage connectivity); the workspace is untouched and the snapshot stays
/// pending.
pub async fn type_change_over_local_edits_is_a_conflict_named_as_such<R: TestRuntime>() {
    let gate = GateRunner::default();
    let runner = TypeChangeRunner {
        hold: Some(gate.clone()),
    };
    let ex = start_executor::<R>(Arc::new(runner), |_| {}).await;
    let dg = start_delegator::<R>(false, |_| {}).await;
    let ws = workspace();
    let id = dg
        .handle
        .delegate(params::<R>(&ex.peer, ws.path()))
        .await
        .unwrap();
    // While the task runs, the user edits a file under src/ and adds one.
    gate.started().await;
    std::fs::write(ws.path().join("src/keep.rs"), "fn main() { edited(); }\n").unwrap();
    std::fs::write(ws.path().join("src/local_only.rs"), "// mine\n").unwrap();
    let before = tree(ws.path());
    gate.release
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let v = timeout::<R, _>(Duration::from_secs(60), dg.handle.wait(&id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    let snap = &v.snapshots[0];
    assert_eq!(
        snap.status,
        awcp_proto::engine::delegator::SnapshotStatus::Pending,
        "{v:?}"
    );
    let e = snap.error.as_ref().expect("the reason is kept");
    assert!(
        e.message.contains("src/keep.rs") && e.message.contains("src/local_only.rs"),
        "{e:?}"
    );
    let hint = e.hint.as_deref().unwrap_or("");
    assert!(hint.contains("local"), "{e:?}");
    assert!(!hint.contains("storage"), "{e:?}");
    assert_eq!(tree(ws.path()), before, "nothing written");
    wait_released::<R>(&ex).await;
}

/// Permission bits travel both ways: a 0444 file arrives read-only on the executor and stays
/// read-only when the result (which edits it) is applied; a new 0750 file arrives 0750; an
/// executable keeps its mode. Files the task did not change are not rewritten, so they keep
/// their mtime.
pub async fn file_modes_round_trip_and_unchanged_files_keep_their_mtime<R: TestRuntime>() {
    use std::os::unix::fs::PermissionsExt;
    let ex = start_executor::<R>(Arc::new(ModeRunner), |_| {}).await;
    let dg = start_delegator::<R>(false, |_| {}).await;
    let ws = workspace();
    let p = |n: &str| ws.path().join(n);
    let set = |n: &str, m: u32| {
        std::fs::set_permissions(p(n), std::fs::Permissions::from_mode(m)).unwrap()
    };
    std::fs::write(p("ro.txt"), "RO\n").unwrap();
    set("ro.txt", 0o444);
    std::fs::write(p("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    set("run.sh", 0o755);
    set("b.txt", 0o644);
    let old = std::time::UNIX_EPOCH + Duration::from_secs(978_307_200); // 2001-01-01
    std::fs::File::options()
        .write(true)
        .open(p("b.txt"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    let v = run_to_end::<R>(&dg.handle, params::<R>(&ex.peer, ws.path())).await;
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    assert_eq!(
        v.snapshots[0].status,
        awcp_proto::engine::delegator::SnapshotStatus::Applied,
        "{v:?}"
    );
    let mode = |n: &str| std::fs::metadata(p(n)).unwrap().permissions().mode() & 0o7777;
    assert_eq!(std::fs::read_to_string(p("ro.txt")).unwrap(), "RO edited\n");
    assert_eq!(mode("ro.txt"), 0o444, "read-only kept");
    assert_eq!(mode("tool.sh"), 0o750);
    assert_eq!(mode("run.sh"), 0o755);
    assert_eq!(mode("a.txt") & 0o600, 0o600);
    assert_eq!(std::fs::read_to_string(p("a.txt")).unwrap(), "A edited\n");
    assert_eq!(
        std::fs::metadata(p("b.txt")).unwrap().modified().unwrap(),
        old,
        "an unchanged file keeps its mtime"
    );
    wait_released::<R>(&ex).await;
}

// ---------------------------------------------------------------------------------------------
// Raw HTTP: malformed requests and the [R] dialect composed from WIRE.md

/// The given headers, plus the run's credential unless they carry one.
fn with_credential<R: TestRuntime>(
    headers: &[(&'static str, String)],
) -> Vec<(&'static str, String)> {
    let mut all = headers.to_vec();
    if !all.iter().any(|(k, _)| *k == "authorization") {
        all.extend(auth_headers::<R>());
    }
    all
}

async fn http_get<R: TestRuntime>(
    url: &str,
    headers: &[(&'static str, String)],
) -> (u16, serde_json::Value) {
    let (s, b) = awcp_driver::net::request(
        &R::default(),
        http::Method::GET,
        url,
        &with_credential::<R>(headers),
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
        &auth_headers::<R>(),
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
    // An executor shutting down declines new invitations and says why.
    ex.handle.shutdown().await;
    let ws = workspace();
    let p = params::<R>(&ex.peer, ws.path());
    let dg = start_delegator::<R>(false, |_| {}).await;
    let v = run_to_end::<R>(&dg.handle, p).await;
    let e = v.error.expect("declined");
    assert_eq!(e.code, ErrorCode::Declined, "{e:?}");
    assert!(e.message.contains("shutting down"), "{e:?}");
}

pub async fn reference_dialect_exchange_from_wire_md<R: TestRuntime>() {
    let ex = start_executor::<R>(Arc::new(EditRunner), |_| {}).await;
    // §2.7 INVITE, verbatim shape.
    let invite = r#"{"version":"1","type":"INVITE","delegationId":"dlg_0a1b2c3d4e5f60718293a4b5c6d7e8f9",
 "task":{"description":"Tidy CSV loader","prompt":"Make loader.py tolerate blank lines; add a test."},
 "lease":{"ttlSeconds":1800,"accessMode":"rw"},"retentionMs":604800000,
 "environment":{"resources":[{"name":"workspace","type":"fs","mode":"rw"}]},
 "requirements":{"transport":"archive"}}"#;
    // With authentication on, INVITE carries the credential in its `auth` field (WIRE.md §2.7).
    let mut invite: serde_json::Value = serde_json::from_str(invite).unwrap();
    if let Some(t) = R::TOKEN {
        invite["auth"] = serde_json::json!({"type": "bearer", "credential": t});
    }
    let (s, accept) = http_post::<R>(&ex.peer, &invite.to_string()).await;
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
    let id = "dlg_0a1b2c3d4e5f60718293a4b5c6d7e8f9";
    // Subscribe before START, as the [R] delegator does; read the raw stream.
    let events_url = format!("{}/awcp/tasks/{id}/events", ex.base);
    let stream = spawn::<R, _>(async move {
        let resp = awcp_driver::net::send(
            &R::default(),
            http::Method::GET,
            &events_url,
            &auth_headers::<R>(),
            None,
        )
        .await
        .unwrap();
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let body = awcp_driver::net::read_body(resp.into_body(), 1 << 30)
            .await
            .unwrap();
        String::from_utf8(body.to_vec()).unwrap()
    });
    let start = reference_start(id, src.path());
    // The SSE stream must be open before START: retry START until the subscription exists is
    // not needed — the executor replays the terminal events to late subscribers anyway.
    let (s, ok) = http_post::<R>(&ex.peer, &start).await;
    assert_eq!((s, &ok), (200, &serde_json::json!({"ok": true})));
    let text = timeout::<R, _>(Duration::from_secs(30), stream)
        .await
        .unwrap();
    // `data: <json>\n\n` framing (each after its `id:` line, WIRE.md §4.6), read as the [R]
    // delegator reads it (§4.4: lines starting with `data: `); snapshot then done (or the
    // replay of them), reference shape.
    let events: Vec<serde_json::Value> = text
        .split('\n')
        .filter_map(|line| line.strip_prefix("data: "))
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
