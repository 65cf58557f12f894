//! AIP group mode over RabbitMQ (feature `amqp`): the drivers of
//! [`aip_proto::group::GroupLeader`] and [`aip_proto::group::GroupMember`].
//!
//! - [`GroupLeaderHandle`]: creates the group (exchange, leader queue, leader inbox),
//!   invites partners (JSON-RPC `group` or inbox), publishes task and management commands,
//!   and reports members and results as [`GroupLeaderEvent`]s.
//! - [`GroupPartnerHandle`]: answers `group` invitations ([`GroupPartnerHandle::join_handler`]
//!   for an HTTP server) and inbox invitations ([`GroupPartnerHandle::listen_inbox`]), runs
//!   one member engine per group, and moves tasks for the application.
//!
//! The AMQP client is lapin 3.7 (AMQP 0-9-1, its own I/O thread, so it works under tokio,
//! smol or async-std); the engine loops use [`agent_rt::Runtime`] for timers and tasks.
//! Brokers are reached with `amqp://user:password@…` (PLAIN) or `amqps://` with
//! [`AmqpTls`]: a client certificate logs in with SASL EXTERNAL when the URL names no user
//! (and partners invited without an `accessToken` do the same, see [`server_url`]).
//! Every publish waits for the broker's confirm, every delivery is acked after the engine
//! took it and its answers were confirmed, and a lost connection is re-opened with every
//! exchange, queue and binding declared again (with backoff up to 2 s), without touching
//! the engines' state.

pub mod amqp;
pub use amqp::AmqpTls;
mod leader;
mod partner;
mod run;

pub use leader::{
    GroupLeaderEvent, GroupLeaderEvents, GroupLeaderHandle, GroupLeaderOptions, MemberSnapshot,
};
pub use partner::{
    amqp_url, server_config, server_url, GroupPartnerEvent, GroupPartnerEvents, GroupPartnerHandle,
    GroupPartnerOptions, InvitationPolicy,
};

use aip_proto::UsageError;

/// Why a group call failed.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// The broker could not be reached or refused something.
    #[error(transparent)]
    Amqp(#[from] amqp::AmqpError),
    /// The engine refused the call.
    #[error(transparent)]
    Usage(UsageError),
    /// The partner refused the invitation (its JSON-RPC error).
    #[error("the partner refused the invitation: {0}")]
    Rejected(String),
    /// This partner is not in that group.
    #[error("not in group {0}")]
    NotInGroup(String),
    /// The engine task has stopped (left, disbanded, or every handle dropped).
    #[error("the group has stopped")]
    Stopped,
}
