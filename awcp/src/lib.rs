//! # awcp: the Agent Workspace Collaboration Protocol in one dependency
//!
//! A **delegator** lends a local directory to a remote **executor** for one task under a
//! time-limited lease; the executor works on the files with its own tools, streams progress
//! and returns the result as a snapshot, which the delegator applies (or stages for review).
//!
//! ```toml
//! awcp = "0.1"                                                     # tokio (default)
//! awcp = { version = "0.1", default-features = false, features = ["smol"] }  # smol, async-std
//! ```
//!
//! - Delegator: [`DelegatorHandle`] with [`DelegatorOptions`], one [`DelegateParams`] per
//!   delegation; [`DelegatorHandle::preview_snapshot`] shows what a staged result would do.
//! - Executor: [`ExecutorHandle`] with [`ExecutorOptions`] ([`ExecutorConfig`] for policy, a
//!   [`TaskRunner`] for the work: [`CommandRunner`] runs any command-line agent).
//! - Transports: [`ArchiveDelegator`]/[`ArchiveExecutor`] (the default), SSHFS in
//!   [`transports`].
//! - Runtimes: `awcp::tokio` (feature `tokio`: `TokioRuntime`, `executor_router` for axum,
//!   standalone servers) and `awcp::smol` (feature `smol`: `SmolRuntime`, hyper services).
//!
//! The layers stay reachable: [`proto`] (the sans-IO engines and wire types), [`transports`],
//! [`driver`] (the runtime-neutral drivers).
//!
//! ```rust,no_run
//! # #[cfg(feature = "tokio")]
//! # async fn run() -> std::io::Result<()> {
//! use std::sync::Arc;
//! use awcp::{ExecutorConfig, ExecutorHandle, ExecutorOptions};
//!
//! let executor = ExecutorHandle::start(awcp::tokio::TokioRuntime, ExecutorOptions::new(
//!     ExecutorConfig::default(),
//!     Arc::new(awcp::ArchiveExecutor::default()),
//!     Arc::new(awcp::DemoRunner),
//! ));
//! let app = axum::Router::new().merge(awcp::tokio::executor_router(executor));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:10200").await?;
//! axum::serve(listener, app).await
//! # }
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

// The README's embedding examples are compiled as doc-tests here.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

pub use awcp_driver as driver;
pub use awcp_proto as proto;
pub use awcp_transports as transports;

pub use awcp_driver::{
    AgentCard, ChangeKind, DelegateParams, DelegatorError, DelegatorHandle, DelegatorOptions,
    Driver, ExecutorHandle, ExecutorOptions, FileChange, Preview, PreviewLimits,
};
pub use awcp_proto::engine::executor::RequiredAuth;
pub use awcp_proto::engine::SnapshotMode;
pub use awcp_proto::{
    AccessMode, AdmissionLimits, Auth, AuthType, DelegationId, DelegationState, DelegatorConfig,
    ErrorCode, ErrorInfo, ExecutorConfig, SnapshotId,
};
pub use awcp_transports::{
    ArchiveDelegator, ArchiveDelegatorConfig, ArchiveExecutor, ArchiveExecutorConfig,
    CommandRunner, DemoRunner, TaskContext, TaskOutcome, TaskRunner,
};

/// The tokio driver (feature `tokio`): `TokioRuntime`, `executor_router` (axum), standalone
/// servers (`serve_executor`, `serve_archives`, `serve_daemon`).
#[cfg(feature = "tokio")]
pub mod tokio {
    pub use awcp_tokio::*;
}

/// The smol driver (feature `smol`, also for async-std programs): `SmolRuntime`, hyper
/// services (`executor_service`), standalone servers.
#[cfg(feature = "smol")]
pub mod smol {
    pub use awcp_smol::*;
}
