//! The poll-free transport traits the drivers call on their blocking pools. They mirror the
//! engine's transport outputs: prepare / apply / release on the delegator, check_dependency /
//! setup / capture / release on the executor, and the task runner that does the work.

use std::path::{Path, PathBuf};

use awcp_proto::{
    AccessMode, AdmissionLimits, ArchiveHandle, DelegationId, ResourceName, Timestamp,
    TransportHandle, TransportKind, WorkspaceStats,
};

use crate::archive::{ArchiveOutput, ArchiveSource, Delivery, Layout};
use crate::cancel::CancelFlag;
use crate::error::TransportError;
use crate::export::ExportViewKind;
use crate::manifest::Baseline;
use crate::process::TaskGroup;
use crate::scan::ResourceSpec;
use crate::snapshot::{ApplyReport, ApplyRequest, CapturedSnapshot, SnapshotKind};

/// What the delegator asks a transport to prepare.
#[derive(Clone, Debug)]
pub struct PrepareRequest<'a> {
    /// The delegation.
    pub delegation_id: &'a DelegationId,
    /// Its resources.
    pub resources: &'a [ResourceSpec],
    /// The effective access mode.
    pub access_mode: AccessMode,
    /// How to expose the resources.
    pub export: ExportViewKind,
    /// Inline base64 or a file for URL mode.
    pub delivery: Delivery,
    /// ZIP root layout the peer expects (\[R\] per-resource, \[S\] flat).
    pub layout: Layout,
    /// The delegator's admission limits (the engine's, configured once): the transport
    /// refuses with [`TransportError::Refused`] if what it actually packs exceeds them (a
    /// workspace that grew after the admission scan is not lent anyway). `None`: no check.
    pub admission: Option<AdmissionLimits>,
    /// Whether secret-looking files may be packed (the delegation's `allow_sensitive`).
    pub allow_sensitive: bool,
}

/// A prepared delegation.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The archive: an inline handle, or a file for the driver to serve (then build the handle
    /// with [`crate::archive::ArchiveFile::handle_for_url`]).
    pub archive: ArchiveOutput,
    /// What was shipped, for conflict detection at apply.
    pub baseline: Baseline,
    /// Statistics of exactly what was shipped.
    pub stats: WorkspaceStats,
}

impl Prepared {
    /// The START transport handle, if the archive is inline.
    pub fn inline_handle(&self) -> Option<TransportHandle> {
        match &self.archive {
            ArchiveOutput::Inline(h) => Some(TransportHandle::Archive(h.clone())),
            ArchiveOutput::File(_) => None,
        }
    }
}

/// What releasing a delegation's transport found that the user should be told (files the
/// executor left that were neutralised or look dangerous, resources that could not be removed
/// cleanly). Empty for a clean release.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReleaseReport {
    /// One sentence each, naming paths relative to the workspace (`resource/path`).
    pub warnings: Vec<String>,
}

/// Delegator side of a transport.
pub trait DelegatorTransport: Send + Sync {
    /// Which transport this is.
    fn kind(&self) -> TransportKind;
    /// Builds the export view and the transport handle data.
    fn prepare(
        &self,
        req: &PrepareRequest<'_>,
        cancel: &CancelFlag,
    ) -> Result<Prepared, TransportError>;
    /// Applies a snapshot to the `rw` resources, all-or-nothing.
    fn apply_snapshot(
        &self,
        req: ApplyRequest<'_>,
        cancel: &CancelFlag,
    ) -> Result<ApplyReport, TransportError>;
    /// What [`Self::apply_snapshot`] would do with `req`, without changing the workspace
    /// (review before apply, see [`crate::snapshot::preview`]). Transports without
    /// snapshots keep the default, which refuses.
    fn preview_snapshot(
        &self,
        req: ApplyRequest<'_>,
        limits: crate::snapshot::PreviewLimits,
        cancel: &CancelFlag,
    ) -> Result<crate::snapshot::Preview, TransportError> {
        let _ = (req, limits, cancel);
        Err(TransportError::Unsupported(
            "this transport has no snapshots to preview".into(),
        ))
    }
    /// Removes the export view and temporary archives, ends every access the delegation
    /// granted, and says what the user should know. Idempotent.
    fn release(&self, delegation_id: &DelegationId) -> Result<ReleaseReport, TransportError>;
    /// Prepares a live transport (one where [`TransportKind::is_live`] holds: no archive, no
    /// snapshot) and returns the START handle directly. Credentials in the handle must not
    /// outlive `expires_at`. Archive-shaped transports keep the default, which refuses.
    fn prepare_live(
        &self,
        req: &PrepareRequest<'_>,
        expires_at: Timestamp,
        cancel: &CancelFlag,
    ) -> Result<TransportHandle, TransportError> {
        let _ = (req, expires_at, cancel);
        Err(TransportError::Unsupported(format!(
            "transport {} is not a live transport",
            self.kind().as_str()
        )))
    }
}

/// A missing executor dependency, with a hint for the operator.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("missing dependency: {hint}")]
pub struct DependencyMissing {
    /// What to install.
    pub hint: String,
}

/// What the executor sets up.
#[derive(Debug)]
pub struct SetupRequest<'a> {
    /// The work directory (must not exist or be empty).
    pub work_dir: &'a Path,
    /// Archive bytes.
    pub source: ArchiveSource<'a>,
    /// The handle's checksum.
    pub expected_checksum: Option<&'a str>,
    /// The effective access mode.
    pub access_mode: AccessMode,
    /// The INVITE's resource names (for layout detection).
    pub resources: &'a [ResourceName],
}

impl<'a> SetupRequest<'a> {
    /// A setup request from an inline archive handle; `None` if the handle only has a URL
    /// (fetch it and use [`ArchiveSource::Reader`]).
    pub fn from_inline_handle(
        work_dir: &'a Path,
        handle: &'a ArchiveHandle,
        access_mode: AccessMode,
        resources: &'a [ResourceName],
    ) -> Option<Self> {
        let b64 = handle.data.base64.as_deref()?;
        Some(SetupRequest {
            work_dir,
            source: ArchiveSource::Base64(b64),
            expected_checksum: Some(&handle.checksum),
            access_mode,
            resources,
        })
    }
}

/// What setup did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetupReport {
    /// Layout of the received archive.
    pub layout: Layout,
    /// Files extracted.
    pub file_count: u64,
    /// Bytes extracted.
    pub total_bytes: u64,
}

/// Executor side of a transport.
pub trait ExecutorTransport: Send + Sync {
    /// Which transport this is.
    fn kind(&self) -> TransportKind;
    /// Whether this machine has what the transport needs.
    fn check_dependency(&self) -> Result<(), DependencyMissing>;
    /// Materialises the workspace in the work directory and records the baseline.
    fn setup(
        &self,
        req: SetupRequest<'_>,
        cancel: &CancelFlag,
    ) -> Result<SetupReport, TransportError>;
    /// Captures a snapshot of the work directory.
    fn capture(
        &self,
        work_dir: &Path,
        kind: SnapshotKind,
        delivery: &Delivery,
        cancel: &CancelFlag,
    ) -> Result<CapturedSnapshot, TransportError>;
    /// Removes the work directory and captured files. Idempotent.
    fn release(&self, work_dir: &Path) -> Result<(), TransportError>;
    /// Sets up a live transport from its START handle (a mount rather than an extraction).
    /// Archive-shaped transports keep the default, which refuses.
    fn setup_live(
        &self,
        work_dir: &Path,
        handle: &TransportHandle,
        access_mode: AccessMode,
        cancel: &CancelFlag,
    ) -> Result<(), TransportError> {
        let _ = (work_dir, handle, access_mode, cancel);
        Err(TransportError::Unsupported(format!(
            "transport {} is not a live transport",
            self.kind().as_str()
        )))
    }
    /// Start-up sweep: removes what a crashed process left under `work_root` (mounts, key
    /// files). Called by drivers before they delete stale work directories. Default: nothing.
    fn recover(&self, work_root: &Path) {
        let _ = work_root;
    }
}

/// What a task runner gets.
#[derive(Clone, Debug)]
pub struct TaskContext {
    /// The delegation.
    pub delegation_id: DelegationId,
    /// Where the workspace is.
    pub work_dir: PathBuf,
    /// Short description.
    pub description: String,
    /// Full instructions.
    pub prompt: String,
    /// Lease end.
    pub expires_at: Timestamp,
    /// Effective access (a runner must not write under `ro`).
    pub access_mode: AccessMode,
    /// The round (1: the first; more in a multi-round delegation, which runs each round in
    /// the same work directory).
    pub round: u64,
    /// The rounds before this one, oldest first: their tasks and what the agent said it did.
    pub earlier: Vec<awcp_proto::engine::EarlierRound>,
}

/// What a task produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskOutcome {
    /// Final summary.
    pub summary: String,
    /// Files worth looking at.
    pub highlights: Vec<String>,
}

/// The agent that does the work on the executor. Synchronous and cancellable; progress
/// messages flow back to the engine as inputs.
pub trait TaskRunner: Send + Sync {
    /// Runs the task. `Err` says why it produced no outcome (a `String` converts into
    /// [`TaskFailure::Failed`](awcp_proto::TaskFailure::Failed), so `?` on text errors works).
    fn run(
        &self,
        ctx: &TaskContext,
        progress: &dyn Fn(String),
        cancel: &CancelFlag,
    ) -> Result<TaskOutcome, awcp_proto::TaskFailure>;

    /// Runs the task like [`TaskRunner::run`] and reports through `spawned`, as soon as it
    /// exists, each OS process group the task runs in: the executor journals it so that a
    /// restarted executor can end what a crash orphaned ([`TaskGroup::end_orphaned`]). A runner
    /// that starts processes must end their whole groups before it returns. Runners that
    /// start no process keep the default, which calls `run`. Drivers call this method.
    fn run_tracked(
        &self,
        ctx: &TaskContext,
        progress: &dyn Fn(String),
        spawned: &dyn Fn(TaskGroup),
        cancel: &CancelFlag,
    ) -> Result<TaskOutcome, awcp_proto::TaskFailure> {
        let _ = spawned;
        self.run(ctx, progress, cancel)
    }
}
