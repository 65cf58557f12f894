//! SSHFS transport against a real sshd (started by the test on a free loopback port with its
//! own config, host key and CA) and a real FUSE mount.
//!
//! Skipped with a message where /dev/fuse, sshd or sshfs are absent, unless
//! `AWCP_REQUIRE_SSHFS_TEST=1` (set by `.ci/run`, which installs them) makes that a failure.
//! Waits are on events: sshd printing that it listens, the task runner reporting through a
//! channel, a delegation ending.

#[macro_use]
mod sshfs_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use awcp_driver::{
    DelegateParams, DelegatorHandle, DelegatorOptions, ExecutorHandle, ExecutorOptions,
};
use awcp_proto::{
    AccessMode, DelegationId, DelegationState, ExecutorConfig, ResourceName, Timestamp,
    TransportHandle, TransportKind,
};
use awcp_tokio::TokioRuntime;
use awcp_transports::{
    ArchiveDelegator, ArchiveDelegatorConfig, ArchiveExecutor, CancelFlag, DelegatorTransport,
    Delivery, DependencyMissing, ExecutorTransport, ExportViewKind, Layout, PrepareRequest,
    ResourceSpec, SetupReport, SetupRequest, SshfsExecutor, TaskContext, TaskOutcome, TaskRunner,
};
use sshfs_support::{ClientCreds, Sshd, READ, WRITE};

fn now() -> Timestamp {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    Timestamp::from_unix_millis(ms)
}

fn prepare(fx: &Sshd, id: &str, access: AccessMode) -> (DelegationId, awcp_proto::SshfsHandle) {
    prepare_for(fx, id, access, Duration::from_secs(600))
}

/// A delegation of the fixture's workspace with a lease of `lease`.
fn prepare_for(
    fx: &Sshd,
    id: &str,
    access: AccessMode,
    lease: Duration,
) -> (DelegationId, awcp_proto::SshfsHandle) {
    let id = DelegationId::new(id).unwrap();
    let res = [ResourceSpec {
        name: ResourceName::new("workspace").unwrap(),
        source_path: fx.workspace.clone(),
        mode: access,
    }];
    let req = PrepareRequest {
        delegation_id: &id,
        resources: &res,
        access_mode: access,
        export: ExportViewKind::default(),
        delivery: Delivery::Inline,
        layout: Layout::PerResource,
        admission: None,
        allow_sensitive: false,
    };
    let h = fx
        .delegator
        .prepare_live(&req, now().saturating_add(lease), &CancelFlag::new())
        .unwrap_or_else(|e| panic!("prepare: {e}"));
    let TransportHandle::Sshfs(h) = h else {
        panic!("not an sshfs handle")
    };
    (id, h)
}

fn tree(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                walk(root, &p, out);
            } else if ft.is_file() {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read_to_string(&p).unwrap_or_default());
            }
        }
    }
    walk(root, root, &mut out);
    out
}

fn assert_clean(fx: &Sshd) {
    assert!(
        fx.mounts_left().is_empty(),
        "mounts left: {:?}",
        fx.mounts_left()
    );
    assert_eq!(fx.key_files_left(), 0, "credential files left");
    assert!(
        fx.principals().is_empty(),
        "principals left: {:?}",
        fx.principals()
    );
    let jail: Vec<_> = std::fs::read_dir(&fx.jail).unwrap().flatten().collect();
    assert!(jail.is_empty(), "jail not empty: {jail:?}");
}

// ---------------------------------------------------------------------------------------------
// Full delegation over HTTP

/// Edits, creates and deletes through the mount, tells the test, and waits for its go-ahead.
struct LiveRunner {
    edited: Mutex<mpsc::Sender<()>>,
    go: Mutex<mpsc::Receiver<()>>,
}

impl TaskRunner for LiveRunner {
    fn run(
        &self,
        ctx: &TaskContext,
        progress: &dyn Fn(String),
        _c: &CancelFlag,
    ) -> Result<TaskOutcome, awcp_proto::TaskFailure> {
        let w = ctx.work_dir.clone();
        let e = |e: std::io::Error| e.to_string();
        let a = std::fs::read_to_string(w.join("a.txt")).map_err(e)?;
        std::fs::write(w.join("a.txt"), format!("{a}edited\n")).map_err(e)?;
        std::fs::create_dir_all(w.join("new")).map_err(e)?;
        std::fs::write(w.join("new/c.txt"), "C new\n").map_err(e)?;
        std::fs::remove_file(w.join("gone.txt")).map_err(e)?;
        // A link out of the workspace: the user must hear of it, and the absolute one goes.
        std::os::unix::fs::symlink("/etc/passwd", w.join("passwd-link")).map_err(e)?;
        progress("edited through the mount".into());
        let _ = self.edited.lock().unwrap().send(());
        self.go
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(60))
            .map_err(|_| "the test never confirmed".to_string())?;
        Ok(TaskOutcome {
            summary: "edited a, added new/c, deleted gone".into(),
            highlights: vec![],
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sshfs_delegation_over_http_is_live_and_cleans_up() {
    require_sshfs!();
    let fx = Sshd::start();
    let (edited_tx, edited_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let runner = Arc::new(LiveRunner {
        edited: Mutex::new(edited_tx),
        go: Mutex::new(go_rx),
    });

    // Executor and delegator: archive plus sshfs.
    let st = Stack::start(&fx, runner, Arc::new(fx.executor())).await;
    let (ex, dg) = (st.ex.clone(), st.dg.clone());
    let id = dg.delegate(st.params(&fx.workspace, "edit")).await.unwrap();

    // While the task runs: the delegator's workspace already shows the changes.
    tokio::task::spawn_blocking(move || edited_rx.recv_timeout(Duration::from_secs(60)))
        .await
        .unwrap()
        .expect("the runner edited through the mount");
    let t = tree(&fx.workspace);
    assert_eq!(t.get("a.txt").map(String::as_str), Some("A\nedited\n"));
    assert_eq!(t.get("new/c.txt").map(String::as_str), Some("C new\n"));
    assert!(!t.contains_key("gone.txt"), "{t:?}");
    assert_eq!(
        t.get("src/keep.rs").map(String::as_str),
        Some("fn main() {}\n")
    );
    assert_eq!(fx.principals().len(), 1, "one live principal");
    go_tx.send(()).unwrap();

    let v = tokio::time::timeout(Duration::from_secs(60), dg.wait(&id))
        .await
        .expect("delegation ended in time")
        .expect("delegation known");
    assert_eq!(v.state, DelegationState::Completed, "{v:?}\n{}", fx.log());
    assert!(v.snapshots.is_empty(), "live: no snapshot");
    assert!(
        v.warnings.iter().any(
            |w| w.contains("`workspace/passwd-link` → `/etc/passwd`") && w.ends_with("removed")
        ),
        "the user is told of the escaping symlink: {:?}",
        v.warnings
    );
    assert!(std::fs::symlink_metadata(fx.workspace.join("passwd-link")).is_err());
    // Revoked as soon as the delegator released.
    assert!(fx.principals().is_empty());
    ex.shutdown().await;
    assert_clean(&fx);
    let dirs = std::fs::read_dir(&fx.work_root)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != ".awcp")
        .count();
    assert_eq!(dirs, 0, "work directories left");
}

// ---------------------------------------------------------------------------------------------
// Security

#[test]
fn credential_is_sftp_only_jailed_and_revoked_at_release() {
    require_sshfs!();
    let fx = Sshd::start();
    let (id, h) = prepare(&fx, "sec-1", AccessMode::Rw);
    let c = ClientCreds::write(&fx.base.join("client"), &h);
    let target = format!("{}@127.0.0.1", fx.user);

    // No command, no shell.
    let (ok, out, err) = c.ssh(&fx, &[&target, "id"]);
    assert!(!ok && !out.contains("uid="), "exec ran: {out} {err}");
    let (ok, out, err) = c.ssh(&fx, &["-tt", &target]);
    assert!(!ok && !out.contains("uid="), "shell opened: {out} {err}");
    // No forwarding: stdio-forward to sshd itself would print its banner.
    let fwd = format!("127.0.0.1:{}", fx.port);
    let (ok, out, _) = c.ssh(&fx, &["-W", &fwd, &target]);
    assert!(!ok && !out.contains("SSH-2.0"), "forwarding allowed");

    // SFTP works inside the export view…
    let local = fx.base.join("client/a.txt");
    let (ok, out) = c.sftp(
        &fx,
        &format!(
            "get {}workspace/a.txt {}\n",
            h.export_locator,
            local.display()
        ),
    );
    assert!(ok, "sftp inside the export failed: {out}\n{}", fx.log());
    assert_eq!(std::fs::read_to_string(&local).unwrap(), "A\n");
    // …and nowhere else: not /etc, not a symlink out, not the jail's listing.
    let leak = fx.base.join("client/hostname");
    for path in [
        "/etc/hostname".to_string(),
        format!("{}workspace/leak", h.export_locator),
        "../../../../etc/hostname".to_string(),
    ] {
        let (ok, out) = c.sftp(&fx, &format!("get {path} {}\n", leak.display()));
        assert!(!ok && !leak.exists(), "read {path} outside the view: {out}");
    }
    let (ok, out) = c.sftp(&fx, "ls /\n");
    assert!(
        !ok || !out.contains(&h.export_locator[1..33]),
        "jail listable: {out}"
    );

    // Right after the delegation ends, the credential is refused.
    fx.delegator.release(&id).unwrap();
    let (ok, out) = c.sftp(
        &fx,
        &format!(
            "get {}workspace/a.txt {}\n",
            h.export_locator,
            local.display()
        ),
    );
    assert!(!ok, "credential still accepted after release: {out}");
    assert_clean(&fx);
}

#[test]
fn ro_delegation_cannot_write() {
    require_sshfs!();
    let fx = Sshd::start();
    let (id, h) = prepare(&fx, "ro-1", AccessMode::Ro);
    let c = ClientCreds::write(&fx.base.join("client"), &h);
    let src = fx.base.join("client/x.txt");
    std::fs::write(&src, "x").unwrap();
    let (ok, out) = c.sftp(
        &fx,
        &format!(
            "put {} {}workspace/x.txt\n",
            src.display(),
            h.export_locator
        ),
    );
    assert!(!ok, "sftp put succeeded under ro: {out}");
    let (ok, _) = c.sftp(&fx, &format!("rm {}workspace/a.txt\n", h.export_locator));
    assert!(!ok, "sftp rm succeeded under ro");

    // Through the mount as well.
    let x = fx.executor();
    let work = fx.work_root.join("ro-1");
    x.setup_live(
        &work,
        &TransportHandle::Sshfs(h),
        AccessMode::Ro,
        &CancelFlag::new(),
    )
    .unwrap_or_else(|e| panic!("mount: {e}\n{}", fx.log()));
    let w = work.join("workspace");
    assert_eq!(std::fs::read_to_string(w.join("a.txt")).unwrap(), "A\n");
    assert!(std::fs::write(w.join("new.txt"), "x").is_err());
    assert!(std::fs::remove_file(w.join("a.txt")).is_err());
    assert!(fx.workspace.join("a.txt").exists());
    assert!(!fx.workspace.join("new.txt").exists());
    x.release(&work).unwrap();
    fx.delegator.release(&id).unwrap();
    assert_clean(&fx);
}

#[test]
fn wrong_host_key_is_refused() {
    require_sshfs!();
    let fx = Sshd::start();
    let (id, mut h) = prepare(&fx, "hk-1", AccessMode::Rw);
    let other =
        ssh_key::PrivateKey::random(&mut ssh_key::rand_core::OsRng, ssh_key::Algorithm::Ed25519)
            .unwrap();
    h.host_key = Some(other.public_key().to_openssh().unwrap());
    let x = fx.executor();
    let work = fx.work_root.join("hk-1");
    let e = x
        .setup_live(
            &work,
            &TransportHandle::Sshfs(h.clone()),
            AccessMode::Rw,
            &CancelFlag::new(),
        )
        .unwrap_err();
    assert_eq!(e.code(), awcp_proto::ErrorCode::SetupFailed, "{e}");
    assert!(
        e.to_string()
            .contains("the delegator's SSH host key did not match the key pinned in the handle"),
        "the error names the host key mismatch: {e}"
    );
    // The client gave up before authenticating: sshd never accepted the key.
    assert!(
        !fx.log().contains("Accepted publickey"),
        "authenticated despite a wrong host key:\n{}",
        fx.log()
    );
    assert_eq!(fx.mounts_left().len(), 1, "only the delegator's bind mount");
    // No pinning at all is refused too.
    h.host_key = None;
    assert!(x
        .setup_live(
            &work,
            &TransportHandle::Sshfs(h),
            AccessMode::Rw,
            &CancelFlag::new()
        )
        .is_err());
    x.release(&work).unwrap();
    fx.delegator.release(&id).unwrap();
    assert_clean(&fx);
}

#[test]
fn executor_start_up_removes_stale_mounts_and_key_files() {
    require_sshfs!();
    let fx = Sshd::start();
    let (id, h) = prepare(&fx, "crash-1", AccessMode::Rw);
    let x = fx.executor();
    let work = fx.work_root.join("crash-1");
    x.setup_live(
        &work,
        &TransportHandle::Sshfs(h),
        AccessMode::Rw,
        &CancelFlag::new(),
    )
    .unwrap_or_else(|e| panic!("mount: {e}\n{}", fx.log()));
    assert_eq!(fx.mounts_left().len(), 2, "bind + sshfs");
    // A new process would do this at start-up (the executor driver calls it before sweeping).
    fx.executor().recover(&fx.work_root);
    assert_eq!(fx.key_files_left(), 0);
    assert_eq!(fx.mounts_left().len(), 1, "only the delegator's bind mount");
    let left = Sshd::processes_mentioning(&fx.work_root);
    assert!(left.is_empty(), "sshfs processes left: {left:?}");
    assert!(
        fx.workspace.join("a.txt").exists(),
        "delegator files intact"
    );
    fx.delegator.release(&id).unwrap();
    let _ = std::fs::remove_dir(&work);
    assert_clean(&fx);
}

// ---------------------------------------------------------------------------------------------
// Shared pieces of the tests below

/// An executor (archive + the given sshfs transport, `runner`) serving HTTP on loopback, and an
/// in-process delegator with the fixture's sshfs transport.
struct Stack {
    ex: ExecutorHandle,
    dg: DelegatorHandle,
    peer: String,
}

impl Stack {
    async fn start(fx: &Sshd, runner: Arc<dyn TaskRunner>, x: Arc<dyn ExecutorTransport>) -> Stack {
        let engine = ExecutorConfig {
            work_root: fx.work_root.to_string_lossy().into_owned(),
            transports: vec![TransportKind::Archive, TransportKind::Sshfs],
            ..ExecutorConfig::default()
        };
        let mut eopts = ExecutorOptions::new(engine, Arc::new(ArchiveExecutor::default()), runner);
        eopts.extra_transports = vec![x];
        let ex = ExecutorHandle::start(TokioRuntime, eopts);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(awcp_tokio::serve(
            listener,
            awcp_tokio::executor_router(ex.clone()),
            std::future::pending(),
        ));
        let state = fx.base.join("dstate");
        let archive = ArchiveDelegator::new(ArchiveDelegatorConfig::new(state.join("exports")));
        let mut dopts = DelegatorOptions::new(Arc::new(archive), state);
        dopts.extra_transports = vec![fx.delegator.clone()];
        let dg = DelegatorHandle::start(TokioRuntime, dopts);
        Stack {
            ex,
            dg,
            peer: format!("http://{addr}/awcp"),
        }
    }

    /// An sshfs delegation of `ws` whose task is `prompt` (the [`Gates`] key).
    fn params(&self, ws: &Path, prompt: &str) -> DelegateParams {
        let mut p = DelegateParams::new(&self.peer, ws, prompt);
        p.transport = TransportKind::Sshfs;
        p.ttl_seconds = 600;
        p
    }
}

/// A task as the runner saw it start.
#[derive(Clone, Debug)]
struct Started {
    id: DelegationId,
    /// The task's directory: the mounted resource.
    dir: PathBuf,
}

/// A runner whose tasks (keyed by prompt) first write `<prompt>.txt` through the mount, then
/// wait until the test opens their gate (or they are cancelled).
#[derive(Default)]
struct Gates {
    state: Mutex<(BTreeMap<String, Started>, BTreeSet<String>)>,
    changed: Condvar,
}

impl Gates {
    fn lock(&self) -> std::sync::MutexGuard<'_, (BTreeMap<String, Started>, BTreeSet<String>)> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until the task `prompt` has started (60 s at most).
    fn try_started(&self, prompt: &str) -> Option<Started> {
        let (g, _) = self
            .changed
            .wait_timeout_while(self.lock(), Duration::from_secs(60), |s| {
                !s.0.contains_key(prompt)
            })
            .unwrap_or_else(|p| p.into_inner());
        g.0.get(prompt).cloned()
    }

    /// Blocks until the task `prompt` has started (60 s at most).
    fn started(&self, prompt: &str) -> Started {
        self.try_started(prompt)
            .unwrap_or_else(|| panic!("task {prompt} never started"))
    }

    /// Lets the task `prompt` finish.
    fn open(&self, prompt: &str) {
        self.lock().1.insert(prompt.to_owned());
        self.changed.notify_all();
    }

    /// Opens every gate when dropped: a failing test must not leave runners (and so the
    /// runtime's blocking pool) waiting forever.
    fn guard(self: &Arc<Self>) -> impl Drop {
        struct OpenAll(Arc<Gates>);
        impl Drop for OpenAll {
            fn drop(&mut self) {
                self.0.open("*");
            }
        }
        OpenAll(self.clone())
    }
}

impl TaskRunner for Gates {
    fn run(
        &self,
        ctx: &TaskContext,
        _progress: &dyn Fn(String),
        cancel: &CancelFlag,
    ) -> Result<TaskOutcome, awcp_proto::TaskFailure> {
        std::fs::write(
            ctx.work_dir.join(format!("{}.txt", ctx.prompt)),
            "written by the executor\n",
        )
        .map_err(|e| e.to_string())?;
        let mut g = self.lock();
        g.0.insert(
            ctx.prompt.clone(),
            Started {
                id: ctx.delegation_id.clone(),
                dir: ctx.work_dir.clone(),
            },
        );
        self.changed.notify_all();
        // The cancel flag has no wake-up of its own: look at it between waits.
        while !g.1.contains(&ctx.prompt) && !g.1.contains("*") {
            if cancel.is_cancelled() {
                return Err("cancelled".into());
            }
            g = self
                .changed
                .wait_timeout(g, Duration::from_millis(20))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(TaskOutcome {
            summary: format!("{} done", ctx.prompt),
            highlights: vec![],
        })
    }
}

/// The sshfs executor transport, remembering the last handle it mounted (what an executor
/// holds: the test uses it as an attacker would).
struct Capturing {
    inner: SshfsExecutor,
    handle: Mutex<Option<awcp_proto::SshfsHandle>>,
}

impl ExecutorTransport for Capturing {
    fn kind(&self) -> TransportKind {
        self.inner.kind()
    }
    fn check_dependency(&self) -> Result<(), DependencyMissing> {
        self.inner.check_dependency()
    }
    fn setup(
        &self,
        req: SetupRequest<'_>,
        cancel: &CancelFlag,
    ) -> Result<SetupReport, awcp_transports::TransportError> {
        self.inner.setup(req, cancel)
    }
    fn capture(
        &self,
        work_dir: &Path,
        kind: awcp_transports::SnapshotKind,
        delivery: &Delivery,
        cancel: &CancelFlag,
    ) -> Result<awcp_transports::CapturedSnapshot, awcp_transports::TransportError> {
        self.inner.capture(work_dir, kind, delivery, cancel)
    }
    fn release(&self, work_dir: &Path) -> Result<(), awcp_transports::TransportError> {
        self.inner.release(work_dir)
    }
    fn setup_live(
        &self,
        work_dir: &Path,
        handle: &TransportHandle,
        access_mode: AccessMode,
        cancel: &CancelFlag,
    ) -> Result<(), awcp_transports::TransportError> {
        if let TransportHandle::Sshfs(h) = handle {
            *self.handle.lock().unwrap() = Some(h.clone());
        }
        self.inner.setup_live(work_dir, handle, access_mode, cancel)
    }
}

/// What an SFTP client holding a delegation's credential does during the lease: open
/// `workspace/a.txt` (read-write for `rw`) and the `workspace` directory, and read.
fn hold_handles(
    fx: &Sshd,
    h: &awcp_proto::SshfsHandle,
    client: &str,
    rw: bool,
) -> (sshfs_support::Sftp, Vec<u8>, Vec<u8>) {
    let c = ClientCreds::write(&fx.base.join(client), h);
    let mut s = c.session(fx);
    let file = format!("{}workspace/a.txt", h.export_locator);
    let fh = s
        .open_file(&file, if rw { READ | WRITE } else { READ })
        .unwrap_or_else(|e| panic!("open during the lease: {e}\n{}", fx.log()));
    assert!(!s.read(&fh, 0).unwrap().is_empty());
    let dh = s
        .open_dir(&format!("{}workspace", h.export_locator))
        .unwrap();
    (s, fh, dh)
}

/// Every use of the handles fails: the session is over.
fn assert_dead(s: &mut sshfs_support::Sftp, fh: &[u8], dh: &[u8], when: &str) {
    assert!(
        s.ended_by_server(Duration::from_secs(30)),
        "{when}: the session is still open"
    );
    if let Ok(()) = s.write(fh, 0, b"PWNED") {
        panic!("{when}: a write through a handle from the lease succeeded");
    }
    if let Ok(b) = s.read(fh, 0) {
        panic!(
            "{when}: a read through a handle from the lease succeeded: {:?}",
            String::from_utf8_lossy(&b)
        );
    }
    assert!(
        s.read_dir(dh).is_err(),
        "{when}: a directory handle still lists"
    );
}

// ---------------------------------------------------------------------------------------------
// The end of a delegation ends its sessions: release, expiry, cancel (issue 18, finding 1)

#[test]
fn handles_from_the_lease_fail_after_release_and_other_delegations_keep_theirs() {
    require_sshfs!();
    let fx = Sshd::start();
    let (rw_id, rw) = prepare(&fx, "end-rw", AccessMode::Rw);
    let (ro_id, ro) = prepare(&fx, "end-ro", AccessMode::Ro);
    let (mut s_rw, fh_rw, dh_rw) = hold_handles(&fx, &rw, "c-rw", true);
    let (mut s_ro, fh_ro, dh_ro) = hold_handles(&fx, &ro, "c-ro", false);

    let report = fx.delegator.release(&rw_id).unwrap();
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert_dead(&mut s_rw, &fh_rw, &dh_rw, "after release");
    assert_eq!(
        std::fs::read_to_string(fx.workspace.join("a.txt")).unwrap(),
        "A\n",
        "nothing written"
    );
    // The other delegation is not touched by this one's end.
    assert_eq!(s_ro.read(&fh_ro, 0).unwrap(), b"A\n");
    assert_eq!(fx.principals(), [format!("restrict awcp-{ro_id}")]);

    // After a read-only delegation, the owner writes: an old handle must not read it.
    fx.delegator.release(&ro_id).unwrap();
    std::fs::write(fx.workspace.join("a.txt"), "the owner's later text\n").unwrap();
    assert_dead(&mut s_ro, &fh_ro, &dh_ro, "after release (ro)");

    // A session of an ended delegation cannot reach a later export either: it is gone.
    let (later_id, later) = prepare(&fx, "end-later", AccessMode::Rw);
    let path = format!("{}workspace/a.txt", later.export_locator);
    assert!(s_rw.open_file(&path, READ).is_err());
    fx.delegator.release(&later_id).unwrap();
    assert_clean(&fx);
}

/// Issue 47 item 3: a connection opened with a delegation's certificate during its lease and
/// holding no channel (`ssh -M -N`) is ended with the delegation, so no channel can be opened
/// over it afterwards, and it can never reach a later delegation's export; a live
/// delegation's session is not touched.
#[test]
fn an_idle_connection_of_an_ended_delegation_is_ended_with_it() {
    require_sshfs!();
    let fx = Sshd::start();
    let (a_id, a) = prepare(&fx, "idle-a", AccessMode::Rw);
    let (keep_id, keep) = prepare(&fx, "idle-keep", AccessMode::Ro);
    let (mut s_keep, fh_keep, _) = hold_handles(&fx, &keep, "c-keep", false);
    let c = ClientCreds::write(&fx.base.join("c-idle"), &a);
    let ctl = fx.base.join("c-idle/ctl");
    let mut master = c.idle_master(&fx, &ctl);

    fx.delegator.release(&a_id).unwrap();
    let (b_id, b) = prepare(&fx, "idle-b", AccessMode::Rw);
    let steal = format!(
        "get {}workspace/a.txt {}\n",
        b.export_locator,
        fx.base.join("stolen").display()
    );
    let (ok, out) = c.sftp_over(&fx, &ctl, &steal);
    assert!(
        !ok,
        "a channel opened over the ended delegation's connection: {out}"
    );
    assert!(
        !fx.base.join("stolen").exists(),
        "the later export was read: {out}"
    );
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while master.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < until,
            "the idle connection outlived its delegation\n{}",
            fx.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The live delegation's session went on.
    assert_eq!(s_keep.read(&fh_keep, 0).unwrap(), b"A\n");
    fx.delegator.release(&b_id).unwrap();
    fx.delegator.release(&keep_id).unwrap();
    assert_clean(&fx);
}

/// The same at the lease's end, with nobody releasing.
#[test]
fn an_idle_connection_is_ended_when_its_lease_expires() {
    require_sshfs!();
    let fx = Sshd::start();
    let (id, h) = prepare_for(&fx, "idle-exp", AccessMode::Rw, Duration::from_secs(3));
    let c = ClientCreds::write(&fx.base.join("c-idle-exp"), &h);
    let ctl = fx.base.join("c-idle-exp/ctl");
    let mut master = c.idle_master(&fx, &ctl);
    let until = std::time::Instant::now() + Duration::from_secs(60);
    while master.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < until,
            "the idle connection outlived its lease\n{}",
            fx.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (ok, out) = c.sftp_over(&fx, &ctl, "ls /\n");
    assert!(!ok, "a channel opened after the lease: {out}");
    fx.delegator.release(&id).unwrap();
    assert_clean(&fx);
}

#[test]
fn handles_from_the_lease_fail_once_it_expires_without_a_release() {
    require_sshfs!();
    let fx = Sshd::start();
    let before = now();
    let (id, h) = prepare_for(&fx, "exp-1", AccessMode::Rw, Duration::from_secs(3));
    let (mut s, fh, dh) = hold_handles(&fx, &h, "c-exp", true);
    // Nobody releases: the lease's end alone ends the session (sshd checks the certificate's
    // validity only at login).
    assert!(
        s.ended_by_server(Duration::from_secs(60)),
        "the session outlived its lease\n{}",
        fx.log()
    );
    assert!(
        now().as_unix_millis() >= before.as_unix_millis() + 3000,
        "ended before the lease did"
    );
    // Revoked before its sessions were ended.
    assert!(fx.principals().is_empty(), "not revoked at expiry");
    assert_dead(&mut s, &fh, &dh, "after expiry");
    assert_eq!(
        std::fs::read_to_string(fx.workspace.join("a.txt")).unwrap(),
        "A\n"
    );
    // The driver's release afterwards waits for the expiry's cleanup and finds it done.
    let report = fx.delegator.release(&id).unwrap();
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert_clean(&fx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_from_the_lease_fail_after_cancel() {
    require_sshfs!();
    let fx = Sshd::start();
    let gates = Arc::new(Gates::default());
    let _gates = gates.guard();
    let x = Arc::new(Capturing {
        inner: fx.executor(),
        handle: Mutex::new(None),
    });
    let st = Stack::start(&fx, gates.clone(), x.clone()).await;
    let id = st
        .dg
        .delegate(st.params(&fx.workspace, "cancel-me"))
        .await
        .unwrap();
    let g = gates.clone();
    tokio::task::spawn_blocking(move || g.started("cancel-me"))
        .await
        .unwrap();
    let h = x
        .handle
        .lock()
        .unwrap()
        .clone()
        .expect("the executor mounted");
    let (mut s, fh, dh) = tokio::task::block_in_place(|| hold_handles(&fx, &h, "c-cancel", true));

    st.dg.cancel(&id).await.unwrap();
    let v = tokio::time::timeout(Duration::from_secs(60), st.dg.wait(&id))
        .await
        .expect("ended in time")
        .unwrap();
    assert_eq!(v.state, DelegationState::Cancelled, "{v:?}");
    tokio::task::block_in_place(|| assert_dead(&mut s, &fh, &dh, "after cancel"));
    assert_eq!(
        std::fs::read_to_string(fx.workspace.join("a.txt")).unwrap(),
        "A\n"
    );
    st.ex.shutdown().await;
    assert_clean(&fx);
}

// ---------------------------------------------------------------------------------------------
// A dead connection at release (finding 2)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_connection_at_release_fails_the_task_and_leaves_nothing_mounted() {
    require_sshfs!();
    let mut fx = Sshd::start();
    let gates = Arc::new(Gates::default());
    let _gates = gates.guard();
    let st = Stack::start(&fx, gates.clone(), Arc::new(fx.executor())).await;
    let id = st
        .dg
        .delegate(st.params(&fx.workspace, "dead-conn"))
        .await
        .unwrap();
    let g = gates.clone();
    tokio::task::spawn_blocking(move || g.started("dead-conn"))
        .await
        .unwrap();
    assert!(
        fx.workspace.join("dead-conn.txt").exists(),
        "mounted and live"
    );
    // The delegator's sshd and every session go away mid-task.
    fx.kill_server();
    gates.open("dead-conn");
    let v = tokio::time::timeout(Duration::from_secs(90), st.dg.wait(&id))
        .await
        .expect("ended in time")
        .unwrap();
    assert_ne!(v.state, DelegationState::Completed, "{v:?}");
    let e = v.error.expect("an error is reported");
    assert!(
        e.message
            .contains("connection to the delegator's sshd was lost"),
        "{e:?}"
    );
    st.ex.shutdown().await;
    let fuse: Vec<String> = fx
        .mounts_left()
        .into_iter()
        .filter(|l| l.contains("fuse.sshfs"))
        .collect();
    assert!(fuse.is_empty(), "sshfs mounts left: {fuse:?}");
    for dir in [&fx.work_root, &fx.key_dir] {
        let left = Sshd::processes_mentioning(dir);
        assert!(left.is_empty(), "processes left: {left:?}");
    }
    assert_eq!(fx.key_files_left(), 0);
}

// ---------------------------------------------------------------------------------------------
// Many delegations per jail, from a daemon and several processes (finding 3)

/// A child process killed (and reaped) when dropped, so a failing test leaves none behind.
struct Reaped(Option<std::process::Child>);

impl Reaped {
    fn take(&mut self) -> std::process::Child {
        self.0.take().unwrap()
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn principals_of(fx: &Sshd) -> BTreeSet<String> {
    fx.principals()
        .iter()
        .map(|l| l.trim_start_matches("restrict ").to_owned())
        .collect()
}

fn principal(s: &Started) -> String {
    format!("awcp-{}", s.id)
}

/// Writes through the executor's mount of each task: a create has to reach the delegator's
/// sshd, and lands in the owner's workspace.
fn assert_live(tasks: &[(&Started, &Path)], n: usize) {
    for (t, ws) in tasks {
        let name = format!("probe-{n}.txt");
        std::fs::write(t.dir.join(&name), "x")
            .unwrap_or_else(|e| panic!("{}: the mount is dead: {e}", t.id));
        assert!(ws.join(&name).exists(), "{}: not in the workspace", t.id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegations_from_a_daemon_and_cli_processes_share_one_jail() {
    require_sshfs!();
    let fx = Sshd::start();
    let awcp = tokio::task::spawn_blocking(|| awcp_tests::bins::path("awcp"))
        .await
        .unwrap();
    let cfg = fx.base.join("sshfs.json");
    fx.write_cli_config(&cfg);
    let gates = Arc::new(Gates::default());
    let _gates = gates.guard();
    let st = Stack::start(&fx, gates.clone(), Arc::new(fx.executor())).await;
    let logs = fx.base.clone();
    let started = |prompt: &'static str| {
        let g = gates.clone();
        let logs = logs.clone();
        async move {
            let s = tokio::task::spawn_blocking(move || g.try_started(prompt))
                .await
                .unwrap();
            s.unwrap_or_else(|| {
                let log = std::fs::read_to_string(logs.join(format!("{prompt}.log")));
                panic!("task {prompt} never started; its delegator said: {log:?}")
            })
        }
    };
    let cli = |ws: &Path, prompt: &str, state: &str| {
        let log = std::fs::File::create(fx.base.join(format!("{prompt}.log"))).unwrap();
        Reaped(Some(
            Command::new(&awcp)
                .arg("delegate")
                .arg(ws)
                .args(["--peer", &st.peer, "--prompt", prompt, "--json"])
                .arg("--sshfs-config")
                .arg(&cfg)
                .arg("--state-dir")
                .arg(fx.base.join(state))
                .stdout(Stdio::piped())
                .stderr(log)
                .spawn()
                .unwrap(),
        ))
    };
    let exit = |mut p: Reaped| async move {
        let c = p.take();
        let out = tokio::task::spawn_blocking(move || c.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        assert!(
            out.status.success(),
            "awcp delegate: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
        );
    };

    // A: through the daemon (which now serves sshfs).
    let mut daemon = Reaped(Some(
        Command::new(&awcp)
            .args(["daemon", "--listen", "127.0.0.1:0"])
            .arg("--sshfs-config")
            .arg(&cfg)
            .arg("--state-dir")
            .arg(fx.base.join("daemon"))
            .env_remove("AWCP_DAEMON_TOKEN")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(fx.base.join("task-a.log")).unwrap())
            .spawn()
            .unwrap(),
    ));
    let stdout = daemon.0.as_mut().unwrap().stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut l = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut l).map(|_| l)
    })
    .await
    .unwrap()
    .unwrap();
    let url = line
        .trim()
        .strip_prefix("awcp daemon listening on ")
        .unwrap_or_else(|| panic!("daemon said {line:?}"))
        .to_owned();
    let client = awcp_driver::delegator::daemon::DaemonClient::new(TokioRuntime, url).with_token(
        Some(awcp_tests::bins::daemon_token(&fx.base.join("daemon"))),
    );
    let ws_a = fx.workspace("ws-a");
    let a_id = client
        .delegate(&{
            let mut p = awcp_driver::DelegateParams::new(st.peer.clone(), ws_a.clone(), "task-a")
                .description("a");
            p.ttl_seconds = 600;
            p.transport = awcp_proto::TransportKind::Sshfs;
            awcp_driver::delegator::daemon::api::DelegateBody::from_params(&p).unwrap()
        })
        .await
        .unwrap_or_else(|e| panic!("daemon delegate: {e}"));
    let g = gates.clone();
    let a = tokio::task::spawn_blocking(move || g.try_started("task-a"))
        .await
        .unwrap();
    let a = match a {
        Some(a) => a,
        None => panic!("task-a never started: {:?}", client.get(&a_id).await),
    };
    assert_eq!(a.id.as_str(), a_id);

    // B and D: two CLI processes; D is then killed with SIGKILL (it cannot clean up).
    let ws_b = fx.workspace("ws-b");
    let b_proc = cli(&ws_b, "task-b", "cli-b");
    let b = started("task-b").await;
    let ws_d = fx.workspace("ws-d");
    let mut d_proc = cli(&ws_d, "task-d", "cli-d");
    let d = started("task-d").await;
    assert_eq!(
        principals_of(&fx),
        [principal(&a), principal(&b), principal(&d)].into(),
        "each start added exactly its own principal"
    );
    assert_live(&[(&a, &ws_a), (&b, &ws_b), (&d, &ws_d)], 1);
    let mut killed = d_proc.take();
    killed.kill().unwrap();
    killed.wait().unwrap();

    // C: a third process. Its start sweeps only what is provably stale: D's delegation (its
    // process is gone), not A's or B's.
    let ws_c = fx.workspace("ws-c");
    let c_proc = cli(&ws_c, "task-c", "cli-c");
    let c = started("task-c").await;
    assert_eq!(
        principals_of(&fx),
        [principal(&a), principal(&b), principal(&c)].into()
    );
    assert_live(&[(&a, &ws_a), (&b, &ws_b), (&c, &ws_c)], 2);
    assert!(
        std::fs::write(d.dir.join("probe-d.txt"), "x").is_err()
            && !ws_d.join("probe-d.txt").exists(),
        "the swept delegation's mount still reaches the workspace"
    );
    gates.open("task-d");

    // End them in another order than they started: B (completes), A (cancelled through the
    // daemon), C (completes). Each is revoked at its own end, the others keep working.
    gates.open("task-b");
    exit(b_proc).await;
    assert_eq!(principals_of(&fx), [principal(&a), principal(&c)].into());
    assert_live(&[(&a, &ws_a), (&c, &ws_c)], 3);

    client.cancel(a_id.as_str()).await.unwrap();
    let v = client.wait(&a_id, Duration::from_secs(60)).await.unwrap();
    assert_eq!(v.state, "cancelled", "{v:?}");
    assert_eq!(principals_of(&fx), [principal(&c)].into());
    assert_live(&[(&c, &ws_c)], 4);

    gates.open("task-c");
    exit(c_proc).await;
    assert!(principals_of(&fx).is_empty());
    drop(daemon);
    st.ex.shutdown().await;
    assert!(fx.mounts_left().is_empty(), "{:?}", fx.mounts_left());
    let jail: Vec<_> = std::fs::read_dir(&fx.jail).unwrap().flatten().collect();
    assert!(jail.is_empty(), "jail not empty: {jail:?}");
}

// ---------------------------------------------------------------------------------------------
// What a read-write executor leaves behind (finding 4)

#[test]
fn set_id_files_and_escaping_symlinks_are_neutralised_at_release() {
    require_sshfs!();
    use std::os::unix::fs::PermissionsExt;
    let fx = Sshd::start();
    let (id, h) = prepare(&fx, "plant-1", AccessMode::Rw);
    let c = ClientCreds::write(&fx.base.join("client"), &h);
    let w = format!("{}workspace", h.export_locator);
    let (ok, out) = c.sftp(
        &fx,
        &format!(
            "put /usr/bin/id {w}/suid-id\nchmod 4755 {w}/suid-id\n\
             put /usr/bin/id {w}/sgid-id\nchmod 2755 {w}/sgid-id\n\
             symlink / {w}/root\nsymlink /etc/shadow {w}/shadow\n\
             symlink /proc/self/root {w}/proc-root\nsymlink ../../../.. {w}/up\n\
             symlink a.txt {w}/fine\n"
        ),
    );
    assert!(ok, "the executor's uploads failed: {out}\n{}", fx.log());
    let mode = |n: &str| {
        std::fs::metadata(fx.workspace.join(n))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    // SFTP lets the owner of a file set any mode…
    assert_eq!(mode("suid-id"), 0o4755);
    // …but nothing set-id or a device is honoured through the export.
    let binds = fx.mounts_left();
    assert!(
        binds
            .iter()
            .all(|l| l.contains("nosuid") && l.contains("nodev")),
        "{binds:?}"
    );

    let report = fx.delegator.release(&id).unwrap();
    let said = |name: &str, end: &str| {
        report
            .warnings
            .iter()
            .any(|w| w.contains(&format!("`workspace/{name}`")) && w.ends_with(end))
    };
    assert_eq!(mode("suid-id"), 0o755);
    assert_eq!(mode("sgid-id"), 0o755);
    assert!(said("suid-id", "4755 → 0755)"), "{:?}", report.warnings);
    assert!(said("sgid-id", "2755 → 0755)"), "{:?}", report.warnings);
    for n in ["root", "shadow", "proc-root"] {
        assert!(
            std::fs::symlink_metadata(fx.workspace.join(n)).is_err(),
            "{n} kept"
        );
        assert!(said(n, "removed"), "{n}: {:?}", report.warnings);
    }
    // Relative and escaping: reported, kept (the default policy). Inside: fine, unmentioned.
    assert!(std::fs::symlink_metadata(fx.workspace.join("up")).is_ok());
    assert!(said("up", "(kept)"), "{:?}", report.warnings);
    assert!(std::fs::symlink_metadata(fx.workspace.join("fine")).is_ok());
    // The owner's own link from before the lease is not the executor's.
    assert!(std::fs::symlink_metadata(fx.workspace.join("leak")).is_ok());
    assert_eq!(report.warnings.len(), 6, "{:?}", report.warnings);
    assert_clean(&fx);
}

/// Issue 47 item 4: six connections of the executor plant set-id binaries, `/etc/shadow`
/// links and set-gid world-writable directories in a loop (a new SFTP channel per round, over
/// idle `ssh -M` masters), while release scans a workspace of many files. Nothing of it
/// survives live in the delegator's workspace, and every planted entry that is still there is
/// reported.
#[test]
fn what_connections_plant_in_a_loop_during_release_never_survives_it() {
    require_sshfs!();
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let fx = Sshd::start();
    // A slow scan: thousands of files.
    let bulk = fx.workspace.join("bulk");
    std::fs::create_dir_all(&bulk).unwrap();
    for i in 0..4000 {
        std::fs::write(bulk.join(format!("f{i}")), "x").unwrap();
    }
    let (id, h) = prepare(&fx, "race-1", AccessMode::Rw);
    let c = Arc::new(ClientCreds::write(&fx.base.join("c-race"), &h));
    let w = format!("{}workspace", h.export_locator);
    let stop = Arc::new(AtomicBool::new(false));
    let fx = Arc::new(fx);
    let planters: Vec<_> = (0..6)
        .map(|t| {
            let ctl = fx.base.join(format!("c-race/ctl{t}"));
            let master = c.idle_master(&fx, &ctl);
            let (c, fx, stop, w) = (c.clone(), fx.clone(), stop.clone(), w.clone());
            std::thread::spawn(move || {
                let mut rounds = 0u32;
                while !stop.load(Ordering::SeqCst) {
                    let n = format!("{t}-{rounds}");
                    let batch = format!(
                        "put /usr/bin/id {w}/suid-{n}\nchmod 4755 {w}/suid-{n}\n\
                         symlink /etc/shadow {w}/shadow-{n}\n\
                         mkdir {w}/drop-{n}\nchmod 2777 {w}/drop-{n}\n"
                    );
                    let (ok, _) = c.sftp_over(&fx, &ctl, &batch);
                    if !ok {
                        break;
                    }
                    rounds += 1;
                }
                (master, rounds)
            })
        })
        .collect();
    // Release once every planter has planted at least once.
    let until = std::time::Instant::now() + Duration::from_secs(60);
    while (0..6).any(|t| !fx.workspace.join(format!("drop-{t}-0")).exists()) {
        assert!(
            std::time::Instant::now() < until,
            "the planters never planted"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let report = fx.delegator.release(&id).unwrap();
    stop.store(true, Ordering::SeqCst);
    for p in planters {
        let (mut master, rounds) = p.join().unwrap();
        assert!(rounds >= 1);
        let _ = master.kill();
        let _ = master.wait();
    }
    // Nothing planted is live afterwards: no set-id file, no link out, no set-gid or
    // world-writable directory (the scan ran after every connection was gone, so nothing
    // could be planted behind it).
    let mut planted = 0;
    for e in std::fs::read_dir(&fx.workspace).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let md = std::fs::symlink_metadata(e.path()).unwrap();
        let mode = md.permissions().mode() & 0o7777;
        if name.starts_with("suid-") {
            planted += 1;
            assert_eq!(mode & 0o6000, 0, "{name} kept set-id bits ({mode:04o})");
        } else if name.starts_with("shadow-") {
            panic!(
                "{name} → /etc/shadow survived release: {:?}",
                report.warnings
            );
        } else if name.starts_with("drop-") {
            planted += 1;
            assert_eq!(mode & 0o2002, 0, "{name} is still {mode:04o}");
        }
    }
    assert!(planted >= 12, "few entries planted: {planted}");
    // What the scan neutralised is said: at least each planter's first round (a set-id file,
    // a link and a directory each).
    assert!(report.warnings.len() >= 18, "{:?}", report.warnings);
    let fx = Arc::try_unwrap(fx).unwrap_or_else(|_| panic!("planters still hold the fixture"));
    assert_clean(&fx);
}

// ---------------------------------------------------------------------------------------------
// Setup (finding 6)

#[test]
fn sshfs_setup_refuses_a_jail_sshd_would_refuse() {
    let awcp = awcp_tests::bins::path("awcp");
    let state = tempfile::tempdir().unwrap();
    let setup = |jail: &str| {
        Command::new(&awcp)
            .args(["sshfs", "setup", "--jail-root", jail, "--state-dir"])
            .arg(state.path())
            .output()
            .unwrap()
    };
    let out = setup("/tmp/awcp-jail");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("/tmp is writable by group or others") && err.contains("never under /tmp"),
        "{err}"
    );
    let out = setup("/srv/awcp-jail");
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{err}");
    assert!(text.contains("ChrootDirectory /srv/awcp-jail"), "{text}");
    assert!(
        text.contains("root-owned, not group/world-writable"),
        "{text}"
    );
    assert!(err.contains("never under /tmp"), "{err}");
}
