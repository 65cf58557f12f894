//! AWCP transports: the archive transport, export views, the admission scanner, snapshot
//! capture and all-or-nothing apply.
//!
//! Everything here is synchronous and poll-free: drivers run these functions on their
//! runtime's blocking pool and pass a [`CancelFlag`] for long work.
//!
//! Map:
//! - [`traits`]: [`DelegatorTransport`], [`ExecutorTransport`], [`TaskRunner`];
//! - [`archive`]: ZIP pack / hardened extract, base64 and checksums,
//!   [`ArchiveDelegator`] / [`ArchiveExecutor`];
//! - [`mod@walk`]: the one walker shared by admission, packing and capture; [`mod@scan`]: admission;
//! - [`manifest`]: file manifests for deltas and conflict detection;
//! - [`snapshot`]: capture, apply, and the apply journal with [`snapshot::recover`];
//! - [`export`]: export views (symlink, copy, git worktree);
//! - [`mod@git`]: the git transport's mechanisms (base commit, result branch, executor checkout,
//!   smart HTTP through `git http-backend`);
//! - [`sshfs`]: the live SSHFS transport ([`SshfsDelegator`] / [`SshfsExecutor`]) and the sshd
//!   configuration it needs;
//! - [`runner`]: a demo task runner; [`command`]: any command-line agent, each task in its own
//!   process group ([`process`]).

#![warn(missing_docs)]

pub mod archive;
pub(crate) mod buf;
pub mod cancel;
pub mod command;
pub mod contain;
pub mod durable;
pub mod error;
pub mod export;
pub mod git;
pub mod manifest;
pub mod process;
pub mod runner;
pub mod scan;
pub mod snapshot;
pub mod spawn;
pub mod sshfs;
pub mod storage;
pub mod traits;
pub mod walk;
mod walk_error;

pub use archive::transport::{ArchiveDelegatorConfig, ArchiveExecutorConfig};
pub use archive::{
    ArchiveDelegator, ArchiveExecutor, ArchiveFile, ArchiveOutput, ArchiveSource, Delivery,
    ExtractLimits, Layout,
};
pub use cancel::CancelFlag;
pub use command::{agent_environment, parse_agent_env, AgentEnvSpec, CommandRunner, AGENT_ENV};
pub use error::TransportError;
pub use export::{ExportView, ExportViewKind};
pub use manifest::{Baseline, FileRecord, Manifest};
pub use process::{Orphans, TaskGroup};
pub use runner::DemoRunner;
pub use scan::{scan, ResourceSpec};
pub use snapshot::{
    apply_snapshot, capture, recover, ApplyOptions, ApplyReport, ApplyRequest, CapturedSnapshot,
    ConflictPolicy, SnapshotKind,
};
pub use sshfs::{
    EscapingSymlinks, SshfsDelegator, SshfsDelegatorConfig, SshfsExecutor, SshfsExecutorConfig,
};
pub use traits::{
    DelegatorTransport, DependencyMissing, ExecutorTransport, PrepareRequest, Prepared,
    ReleaseReport, SetupReport, SetupRequest, TaskContext, TaskOutcome, TaskRunner,
};
pub use walk::{walk, SymlinkPolicy, WalkOptions};

/// Whether a delegation id is unfit as a path component.
pub(crate) fn id_is_unsafe(id: &str) -> bool {
    awcp_proto::id::validate_id(id).is_err()
}
