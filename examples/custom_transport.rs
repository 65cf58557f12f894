//! A skeleton of a custom transport: both sides of the transport traits of `awcp-transports`
//! ([`DelegatorTransport`] on the delegator, [`ExecutorTransport`] on the executor), each
//! method with a minimal working body and a comment saying when the driver calls it and what
//! it must guarantee. Start from here to write your own.
//!
//! This one is a *copy-to-local-dir* transport: it keeps a local copy of what crossed it, which
//! a real deployment might want as an audit trail:
//!
//! - the delegator side copies every lent directory into `<copies>/<delegation>/lent/` before
//!   packing it;
//! - the executor side copies the work directory into `<copies>/<work dir>/<kind>/` each time
//!   a snapshot of the agent's work is captured.
//!
//! The bytes themselves still travel in the archive format (ZIP, inline or by URL): both
//! sides hand the packing, extraction, capture and all-or-nothing apply to the stock archive
//! transport, so any AWCP peer can take part. The wire names a fixed set of transport kinds
//! (`archive`, `sshfs`, `storage`, `git`); a transport that moves the bytes another way
//! keeps `kind()` and the handles of one of them.
//!
//! The traits are synchronous and poll-free: drivers call them on their runtime's blocking
//! pool, so one implementation serves tokio, smol and async-std alike. Long work checks the
//! [`CancelFlag`].
//!
//! The example runs on its own: an executor and a delegator in this process, each with its
//! side of the transport, one delegation (the demo agent), then the copies are listed.
//!
//! ```text
//! cargo run -p awcp-examples --example custom_transport
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use awcp::proto::{DelegationId, TransportKind};
use awcp::tokio::TokioRuntime;
use awcp::transports::{
    walk, ApplyReport, ApplyRequest, CancelFlag, CapturedSnapshot, Delivery, DependencyMissing,
    PrepareRequest, Prepared, ReleaseReport, SetupReport, SetupRequest, SnapshotKind,
    TransportError, WalkOptions,
};
use awcp::transports::{DelegatorTransport, ExecutorTransport};
use awcp::{
    ArchiveDelegator, ArchiveDelegatorConfig, ArchiveExecutor, DelegateParams, DelegationState,
    DelegatorHandle, DelegatorOptions, DemoRunner, ExecutorConfig, ExecutorHandle, ExecutorOptions,
};

/// Copies the regular files under `from` to `to` (the walker's rules: symlinks and special
/// files are not followed, the usual ignores apply), checking `cancel` between files.
fn copy_tree(from: &Path, to: &Path, cancel: &CancelFlag) -> Result<u64, TransportError> {
    let w = walk(from, &WalkOptions::default(), cancel)?;
    for f in &w.files {
        cancel.check()?;
        let dst = to.join(&f.rel);
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| TransportError::io("creating the copy", e))?;
        }
        std::fs::copy(&f.path, &dst)
            .map_err(|e| TransportError::io(format!("copying `{}`", f.rel), e))?;
    }
    Ok(w.files.len() as u64)
}

// ---------------------------------------------------------------------------------------------
// Delegator side
// ---------------------------------------------------------------------------------------------

/// The delegator side: keeps a copy of what it lends, packs with the archive transport.
struct CopyingDelegator {
    archive: ArchiveDelegator,
    copies: PathBuf,
}

impl DelegatorTransport for CopyingDelegator {
    /// The kind the delegation asks for; a delegator picks the transport whose kind the
    /// delegation names (`DelegateParams::transport`).
    fn kind(&self) -> TransportKind {
        TransportKind::Archive
    }

    /// After the executor accepted, before START: make the resources available to the
    /// executor and say exactly what was shipped (the baseline used to detect conflicts when
    /// the result is applied). May be called again for the same delegation (a retried
    /// attempt): start from scratch. Refuse with `TransportError::Refused` what exceeds
    /// `req.admission`.
    fn prepare(
        &self,
        req: &PrepareRequest<'_>,
        cancel: &CancelFlag,
    ) -> Result<Prepared, TransportError> {
        let lent = self.copies.join(req.delegation_id.as_str()).join("lent");
        for r in req.resources {
            copy_tree(&r.source_path, &lent.join(r.name.as_str()), cancel)?;
        }
        self.archive.prepare(req, cancel)
    }

    /// A snapshot came back and is to be applied (automatically or after review): write it
    /// into the `rw` resources all-or-nothing, never outside them, and report what changed
    /// and what was refused or in conflict.
    fn apply_snapshot(
        &self,
        req: ApplyRequest<'_>,
        cancel: &CancelFlag,
    ) -> Result<ApplyReport, TransportError> {
        self.archive.apply_snapshot(req, cancel)
    }

    /// What `apply_snapshot` would do, without writing (review before apply). Transports
    /// without snapshots can leave out this method: the default refuses.
    fn preview_snapshot(
        &self,
        req: ApplyRequest<'_>,
        limits: awcp::PreviewLimits,
        cancel: &CancelFlag,
    ) -> Result<awcp::Preview, TransportError> {
        self.archive.preview_snapshot(req, limits, cancel)
    }

    /// The delegation is over (whatever the outcome): remove everything `prepare` made and
    /// end every access it granted. Idempotent, and called for delegations a previous process
    /// prepared too. The copies are kept: they are this transport's point.
    fn release(&self, delegation_id: &DelegationId) -> Result<ReleaseReport, TransportError> {
        self.archive.release(delegation_id)
    }
}

// ---------------------------------------------------------------------------------------------
// Executor side
// ---------------------------------------------------------------------------------------------

/// The executor side: unpacks with the archive transport, keeps a copy of each captured state
/// of the work directory.
struct CopyingExecutor {
    archive: ArchiveExecutor,
    copies: PathBuf,
}

impl ExecutorTransport for CopyingExecutor {
    /// The kind this transport serves; list it in `ExecutorConfig::transports` when it is not
    /// the archive.
    fn kind(&self) -> TransportKind {
        TransportKind::Archive
    }

    /// Asked before an INVITE is accepted: whether this machine has what the transport needs
    /// (a binary, a mount helper, a writable directory). A missing dependency declines the
    /// INVITE with the hint.
    fn check_dependency(&self) -> Result<(), DependencyMissing> {
        std::fs::create_dir_all(&self.copies).map_err(|e| DependencyMissing {
            hint: format!("make {} writable ({e})", self.copies.display()),
        })
    }

    /// START arrived: materialise the workspace in `req.work_dir` (which must not exist or be
    /// empty), verifying the checksum, and record the baseline later captures compare with.
    /// On an error leave nothing half-written.
    fn setup(
        &self,
        req: SetupRequest<'_>,
        cancel: &CancelFlag,
    ) -> Result<SetupReport, TransportError> {
        self.archive.setup(req, cancel)
    }

    /// The agent finished (or a snapshot was asked for): package the work directory's state,
    /// the full tree or the changes since setup (`kind`), inline or as a file (`delivery`).
    fn capture(
        &self,
        work_dir: &Path,
        kind: SnapshotKind,
        delivery: &Delivery,
        cancel: &CancelFlag,
    ) -> Result<CapturedSnapshot, TransportError> {
        let name = work_dir.file_name().unwrap_or(work_dir.as_os_str());
        let kind_dir = format!("{kind:?}").to_lowercase();
        copy_tree(work_dir, &self.copies.join(name).join(kind_dir), cancel)?;
        self.archive.capture(work_dir, kind, delivery, cancel)
    }

    /// The assignment is over: remove the work directory and whatever `capture` left.
    /// Idempotent.
    fn release(&self, work_dir: &Path) -> Result<(), TransportError> {
        self.archive.release(work_dir)
    }
}

// ---------------------------------------------------------------------------------------------
// A delegation across both sides
// ---------------------------------------------------------------------------------------------

#[tokio::main]
async fn main() -> ExitCode {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let base = scratch.path();

    // The executor, with its side of the transport.
    let config = ExecutorConfig {
        work_root: base.join("executor-work").to_string_lossy().into_owned(),
        ..ExecutorConfig::default()
    };
    let executor_side = CopyingExecutor {
        archive: ArchiveExecutor::default(),
        copies: base.join("executor-copies"),
    };
    let executor = ExecutorHandle::start(
        TokioRuntime,
        ExecutorOptions::new(config, Arc::new(executor_side), Arc::new(DemoRunner)),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local address");
    executor.set_public_url(format!("http://{addr}"));
    let (stop, stopped) = futures::channel::oneshot::channel::<()>();
    let router = awcp::tokio::executor_router(executor.clone());
    let server = tokio::spawn(awcp::tokio::serve(listener, router, async move {
        let _ = stopped.await;
    }));

    // The delegator, with its side.
    let state = base.join("delegator");
    let delegator_side = CopyingDelegator {
        archive: ArchiveDelegator::new(ArchiveDelegatorConfig::new(state.join("exports"))),
        copies: base.join("delegator-copies"),
    };
    let delegator = DelegatorHandle::start(
        TokioRuntime,
        DelegatorOptions::new(Arc::new(delegator_side), &state),
    );

    // One delegation of a small project.
    let project = base.join("project");
    std::fs::create_dir_all(&project).expect("project");
    std::fs::write(project.join("data.csv"), "a,b\n1,2\n").expect("file");
    let params = DelegateParams::new(
        format!("http://{addr}/awcp"),
        &project,
        "List the files into AWCP_NOTES.md.",
    );
    let ok = match delegator.delegate(params).await {
        Ok(id) => match delegator.wait(&id).await {
            Ok(v) => {
                println!("delegation {id}: {}", v.state);
                if let Some(e) = &v.error {
                    println!("error: {} {}", e.code, e.message);
                }
                v.state == DelegationState::Completed
            }
            Err(e) => {
                eprintln!("error: {e}");
                false
            }
        },
        Err(e) => {
            eprintln!("error: {e}");
            false
        }
    };
    delegator.stop().await;
    executor.shutdown().await;
    let _ = stop.send(());
    let _ = server.await;

    // What the transport kept, on each side.
    for side in ["delegator-copies", "executor-copies"] {
        println!("\n{side}/:");
        let root = base.join(side);
        match walk(&root, &WalkOptions::default(), &CancelFlag::new()) {
            Ok(w) => {
                for f in &w.files {
                    println!("  {} ({} bytes)", f.rel, f.size);
                }
            }
            Err(e) => println!("  (nothing: {e})"),
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
