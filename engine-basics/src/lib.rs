//! Sans-IO basics shared by the AWCP and AIP engines (`awcp-proto`, `aip-proto`): no I/O, no
//! clock, no threads; pure code whose only dependencies are `memchr`, `thiserror` and
//! `tracing`.
//!
//! - [`drive`]: the canonical drive loop ([`drive::turn`]) every driver and simulation runs
//!   its engine through: feed one wake-up, drain every output, ask for the next deadline.
//! - [`body`]: a peer's non-protocol answer (a web page) described in one line for errors.
//! - [`origin`]: URL origins (scheme, host, port), by which an engine decides where a
//!   credential may be sent.
//! - [`guard`]: the rules by which a server that runs agents on this machine tells a request
//!   from a program (a delegator, a leader) from one a web page made the browser send: a
//!   cross-site request (`Origin`, a body that is not JSON) or a DNS-rebinding one (a `Host`
//!   the server is not reached by). Each protocol turns a refusal into its own error body.
//! - [`time`]: the civil-date arithmetic and the RFC 3339 grammar both engines' timestamp
//!   types are built on.
//! - [`sse`]: the server-sent events codec: the event encoder ([`sse::frame`],
//!   [`sse::encode_data`]) and the incremental decoder ([`sse::SseDecoder`], bounded by event
//!   size) both engines' streams use. `awcp_proto::sse` and `aip_proto::sse` re-export it and
//!   add what only their protocol has.
//! - [`timers`]: named timers in one deadline table ([`timers::TimerTable`], each timer's key
//!   saying what it is for and, through [`timers::Reason`], why the engine wakes) and the
//!   [`timers::Core`] every engine answers the drive contract from (outputs, clock, timers).
//! - [`ids`]: the seeded generator ([`ids::SplitMix64`]) and the id source
//!   ([`ids::IdSource`]: `kind-<prefix><counter>` ids and secrets) both engines mint from.

pub mod body;
pub mod drive;
pub mod guard;
pub mod ids;
pub mod origin;
pub mod sse;
pub mod time;
pub mod timers;
