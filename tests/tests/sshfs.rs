//! SSHFS transport against a real sshd (started by the test on a free loopback port with its
//! own config, host key and CA) and a real FUSE mount.
//!
//! Skipped with a message where /dev/fuse, sshd or sshfs are absent (`.ci/run` installs them).
//! Waits are on events: sshd printing that it listens, the task runner reporting through a
//! channel, a delegation ending.

#[macro_use]
mod sshfs_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
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
    Delivery, ExecutorTransport, ExportViewKind, Layout, PrepareRequest, ResourceSpec, TaskContext,
    TaskOutcome, TaskRunner,
};
use sshfs_support::{ClientCreds, Sshd};

fn now() -> Timestamp {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    Timestamp::from_unix_millis(ms)
}

fn prepare(fx: &Sshd, id: &str, access: AccessMode) -> (DelegationId, awcp_proto::SshfsHandle) {
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
        .prepare_live(
            &req,
            now().saturating_add(Duration::from_secs(600)),
            &CancelFlag::new(),
        )
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
    ) -> Result<TaskOutcome, String> {
        let w = ctx.work_dir.clone();
        let e = |e: std::io::Error| e.to_string();
        let a = std::fs::read_to_string(w.join("a.txt")).map_err(e)?;
        std::fs::write(w.join("a.txt"), format!("{a}edited\n")).map_err(e)?;
        std::fs::create_dir_all(w.join("new")).map_err(e)?;
        std::fs::write(w.join("new/c.txt"), "C new\n").map_err(e)?;
        std::fs::remove_file(w.join("gone.txt")).map_err(e)?;
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

    // Executor: archive plus sshfs.
    let engine = ExecutorConfig {
        work_root: fx.work_root.to_string_lossy().into_owned(),
        transports: vec![TransportKind::Archive, TransportKind::Sshfs],
        ..ExecutorConfig::default()
    };
    let mut eopts = ExecutorOptions::new(engine, Arc::new(ArchiveExecutor::default()), runner);
    eopts.extra_transports = vec![Arc::new(fx.executor())];
    let ex = ExecutorHandle::start(TokioRuntime, eopts);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(awcp_tokio::serve(
        listener,
        awcp_tokio::executor_router(ex.clone()),
        std::future::pending(),
    ));

    // Delegator: archive plus sshfs.
    let state = fx.base.join("dstate");
    let archive = ArchiveDelegator::new(ArchiveDelegatorConfig::new(state.join("exports")));
    let mut dopts = DelegatorOptions::new(Arc::new(archive), state);
    dopts.extra_transports = vec![fx.delegator.clone()];
    let dg = DelegatorHandle::start(TokioRuntime, dopts);

    let mut p = DelegateParams::new(
        format!("http://{addr}/awcp"),
        &fx.workspace,
        "sshfs e2e",
        "edit",
    );
    p.transport = TransportKind::Sshfs;
    p.ttl_seconds = 600;
    let id = dg.delegate(p).await.unwrap();

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
    assert!(
        fx.workspace.join("a.txt").exists(),
        "delegator files intact"
    );
    fx.delegator.release(&id).unwrap();
    let _ = std::fs::remove_dir(&work);
    assert_clean(&fx);
}
