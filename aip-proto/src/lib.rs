//! # aip-proto: the sans-IO engine of AIP direct mode
//!
//! AIP, the ACPs Agent Interaction Protocol, lets a **leader** agent hand tasks to **partner**
//! agents over JSON-RPC 2.0 on HTTP: `rpc` calls, `stream`s of server-sent events, and
//! notifications POSTed back to the leader. This crate is the protocol and nothing else:
//!
//! * **In scope:** wire types for both dialects ([`wire`]: v01.00, the seed, with
//!   `Message`/`Task`; v02.x, what `acps-sdk` 2.x speaks, with `TaskCommand`/`TaskResult`),
//!   lenient decoding and strict encoding, the error codes ([`error`]), the task state
//!   machine exactly as the spec's table ([`state`]), the [`partner::Partner`] and
//!   [`leader::Leader`] engines (many tasks each), SSE framing ([`sse`]), timestamps that keep
//!   their written form ([`time`]), and the HTTP shape as pure functions ([`http`]).
//! * **Out of scope:** sockets, HTTP servers and clients, TLS, files, clocks, threads and
//!   randomness. Time comes in as a [`Timestamp`] argument, ids the engine mints come from a
//!   caller-given seed, and every side effect leaves an engine as an output value that a
//!   driver (or a test) executes. Group mode (RabbitMQ) builds on these types elsewhere.
//!
//! ## The drive contract
//!
//! Both engines have the same verbs: feed an input with `handle(now, input)` (or call an
//! application method), call `handle_timeout(now)` when `poll_timeout()` says so, and after
//! **every** call drain `poll_output()` until it returns `None`. Time must not go backwards
//! between calls (if the wall clock does, the engine keeps its own latest time); an early
//! `handle_timeout` does nothing. `next_timer()` also says why the next wake-up is due.
//!
//! Every engine of this crate (the partner, the leader, and group mode's leader and member) is
//! an [`Engine`](drive::Engine) of the one drive loop both protocols share ([`drive`]): a
//! driver feeds it one wake-up with [`drive::turn`], which drains every output through the
//! driver's [`Host`](drive::Host) and returns the next deadline. The loops below are that
//! loop written out by hand.
//!
//! A partner server's loop (the driver owns the sockets; [`http`] maps requests and outputs):
//!
//! ```no_run
//! use aip_proto::partner::{Partner, PartnerConfig, PartnerEvent, PartnerInput, PartnerOutput};
//! use aip_proto::engine::RequestId;
//! use aip_proto::{Product, Timestamp};
//! # fn now() -> Timestamp { Timestamp::UNIX_EPOCH }
//! # fn next_request() -> (u64, Vec<u8>) { (1, Vec::new()) }
//! # fn send(_: PartnerOutput) {}
//! let mut partner = Partner::new(PartnerConfig { partner_id: "my-aic".into(), ..Default::default() });
//! loop {
//!     // 1. an HTTP POST arrived at /aip/rpc (or /aip/stream, /aip/notification/…)
//!     let (id, body) = next_request();
//!     partner.handle(now(), PartnerInput::Request { request: RequestId(id), body });
//!     // 2. execute every output; the application does the work in between
//!     while let Some(out) = partner.poll_output() {
//!         match out {
//!             PartnerOutput::Event(PartnerEvent::TaskStarted { task_id, .. }) => {
//!                 partner.start_working(now(), &task_id).unwrap();
//!                 let answer = Product::text("answer", "…");
//!                 partner.submit(now(), &task_id, vec![answer], vec![]).unwrap();
//!             }
//!             other => send(other), // Respond / StartStream / StreamData / EndStream / Notify
//!         }
//!     }
//!     // 3. sleep until partner.poll_timeout() or the next request, then handle_timeout(now)
//!     # break;
//! }
//! ```
//!
//! A leader:
//!
//! ```no_run
//! use aip_proto::leader::{Delivery, Leader, LeaderConfig, LeaderOutput, PartnerEndpoint, StartTask};
//! use aip_proto::{Dialect, Timestamp};
//! # fn now() -> Timestamp { Timestamp::UNIX_EPOCH }
//! # fn execute(_: LeaderOutput) {}
//! let mut leader = Leader::new(LeaderConfig { leader_id: "my-aic".into(), ..Default::default() });
//! leader.add_partner("travel", PartnerEndpoint {
//!     url: "https://partner.example/acps-aip-v1/rpc".into(),
//!     dialect: Dialect::from_protocol_version("01.00"),
//! });
//! let task = StartTask { delivery: Delivery::Stream, ..StartTask::new("travel", "task-1", "session-1", "Plan a trip") };
//! leader.start(now(), task).unwrap();
//! while let Some(out) = leader.poll_output() {
//!     execute(out); // Send (POST, then feed Response or StreamChunk/StreamEnded) / Abort / …
//! }
//! ```
//!
//! Determinism: iteration order never depends on hashing (`HashMap` is banned by clippy in
//! this crate, like `Instant::now` and `SystemTime::now`), so the same inputs give the same
//! outputs byte for byte; `tests/src/aip_sim` in the workspace relies on it.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod drive;
pub mod engine;
pub mod error;
pub mod group;
pub mod http;
pub mod leader;
pub mod partner;
pub mod sse;
pub mod state;
pub mod time;
pub mod wire;

pub use error::{DecodeError, ErrorCode, RpcError, UsageError};
pub use time::Timestamp;
pub use wire::*;
