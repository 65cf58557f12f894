//! # awcp-proto: the sans-IO AWCP protocol engine
//!
//! AWCP (Agent Workspace Collaboration Protocol) lets a **Delegator** lend a local directory to
//! a remote **Executor** for one task under a time-limited **lease**. This crate is the whole
//! protocol brain and nothing else:
//!
//! * **In scope:** wire types for both dialects ([`wire`]), error codes ([`error`]), the two
//!   state machines ([`state`]), the [`Delegator`] and [`Executor`] engines that own many
//!   delegations each, admission and executor policy decisions, SSE framing ([`sse`]), and the
//!   WebSocket tunnel's machines for executors behind NAT ([`tunnel`]).
//! * **Out of scope:** sockets, HTTP, files, clocks, threads and randomness. Time comes in as a
//!   [`Timestamp`] argument, ids come from the caller, and every side effect leaves the engine
//!   as an output value that a driver (awcp-tokio, awcp-smol, or a test simulation) executes.
//!
//! ## Driving an engine
//!
//! ```no_run
//! # use awcp_proto::*;
//! # fn now() -> Timestamp { Timestamp::EPOCH }
//! # fn execute(_: DelegatorOutput) {}
//! let mut delegator = Delegator::new(DelegatorConfig::default());
//! loop {
//!     // 1. feed one input (an HTTP reply, an SSE event, a transport result) or a timeout
//!     delegator.handle_timeout(now());
//!     // 2. drain every output and execute it
//!     while let Some(out) = delegator.poll_output() {
//!         execute(out);
//!     }
//!     // 3. sleep until the next deadline or the next input
//!     // (the deadline, and why: a lease, a reconnect back-off, queued output…)
//!     let _wake = delegator.poll_timeout();
//!     # break;
//! }
//! ```
//!
//! Time must not go backwards between calls; an early `handle_timeout` does nothing.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod engine;
pub mod error;
pub mod http_binding;
pub mod id;
/// URL origins (from `engine-basics`): the engine decides by them which requests may carry a
/// delegation's credential; the HTTP binding re-exports them.
pub use engine_basics::origin;
pub mod sse;
pub mod state;
pub mod time;
pub mod tunnel;
pub mod wire;

pub use engine::delegator::{
    Delegator, DelegatorConfig, DelegatorEvent, DelegatorInput, DelegatorOutput,
};
pub use engine::executor::{
    AllocationFailure, Executor, ExecutorConfig, ExecutorEvent, ExecutorInput, ExecutorOutput,
    SetupFailure, TaskFailure, WorkspaceLayout,
};
pub use engine::*;
pub use error::{ErrorCode, ErrorInfo};
pub use id::{DelegationId, IdError, ResourceName, SnapshotId};
pub use state::{
    AssignmentEvent, AssignmentMachine, AssignmentState, AssignmentTransition, DelegationMachine,
    DelegationState, DelegationTransition,
};
pub use time::Timestamp;
pub use tunnel::{Relay, RelayConfig, TunnelClient, TunnelClientConfig};
pub use wire::*;
