//! Cross-crate test support: the deterministic simulation harness, and the real binaries for
//! tests that run them ([`bins`]).
//!
//! [`sim`] wires one [`awcp_proto::Delegator`] and several [`awcp_proto::Executor`]s through a
//! simulated network and clock, injects faults from a seed and checks invariants after every
//! step. See `tests/tests/simulation.rs` for the seed sweep and the scenario tests.

pub mod sim;

pub mod bins;
