//! Cross-crate test support: the deterministic simulation harnesses (AWCP in [`sim`], AIP
//! direct mode in [`aip_sim`], the seed sweep both run in [`sweep`]), the real binaries
//! for tests that run them ([`bins`]), the relay executors dial out to ([`relay`]), and their
//! system calls ([`strace`]).
//!
//! [`sim`] wires one [`awcp_proto::Delegator`] and several [`awcp_proto::Executor`]s through a
//! simulated network and clock, injects faults from a seed and checks invariants after every
//! step. See `tests/tests/simulation.rs` for the seed sweep and the scenario tests.

pub mod aip_sim;
pub mod sim;
pub mod sweep;

pub mod bins;
pub mod files;
pub mod git;
pub mod git_ssh;
pub mod mem;
pub mod relay;
pub mod rng;
pub mod s3;
pub mod strace;
