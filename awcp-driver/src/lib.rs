//! # awcp-driver: the runtime-neutral driver core
//!
//! The engines in awcp-proto decide; the transports in awcp-transports do the blocking work;
//! this crate connects them to the network: an engine task per role that executes outputs and
//! feeds inputs, HTTP handlers (executor router, delegator archive URLs, daemon API) over
//! `http`/`hyper` 1.x types, and an HTTP client. It is generic over a small [`Runtime`] trait;
//! awcp-tokio and awcp-smol implement it in a few dozen lines each.
#![deny(missing_docs)]
#![forbid(unsafe_code)]
// HTTP handlers return a ready response as their error value; boxing it buys nothing.
#![allow(clippy::result_large_err)]

pub mod card;
pub mod dashboard;
pub mod delegator;
pub mod executor;
pub mod host;
mod incoming;
mod lockfile;
pub mod net;
mod objects;
mod outgoing;
pub mod relay;
pub mod runtime;
pub mod security;
pub mod ws;

pub use card::AgentCard;
pub use delegator::{
    ChangeKind, DelegateParams, DelegatorError, DelegatorHandle, DelegatorOptions, FileChange,
    Preview, PreviewLimits,
};
pub use executor::{ExecutorHandle, ExecutorOptions};
pub use host::Driver;
pub use runtime::Runtime;

/// The span every log line about one delegation is emitted in (`delegation{id=…}`): the
/// drivers run each delegation's background work (transport, task, requests, streams)
/// inside it, and blocking work inherits it ([`agent_rt::runtime::blocking`]).
pub(crate) fn delegation_span(id: &awcp_proto::DelegationId) -> tracing::Span {
    tracing::info_span!("delegation", id = %id)
}

/// Logs the end of a delegation or assignment: a failure (any error but a cancel) at WARN
/// with its code and message, anything else at INFO.
pub(crate) fn log_ended(
    id: &awcp_proto::DelegationId,
    state: impl std::fmt::Display,
    error: Option<&awcp_proto::ErrorInfo>,
    what: &'static str,
) {
    match error {
        Some(e) if e.code != awcp_proto::ErrorCode::Cancelled => {
            tracing::warn!(delegation = %id, %state, error = e.code.as_str(), reason = %e.message, "{what}");
        }
        Some(e) => tracing::info!(delegation = %id, %state, error = e.code.as_str(), "{what}"),
        None => tracing::info!(delegation = %id, %state, "{what}"),
    }
}
