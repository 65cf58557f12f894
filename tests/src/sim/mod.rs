//! The deterministic simulation.
//!
//! * [`config`]: what a run does ([`SimConfig::random`] draws everything from a seed).
//! * [`world`]: the simulated clock, network, transports and task runners, and the invariants.
//! * [`rng`]: the seeded generator (splitmix64; no other randomness, no wall clock, no
//!   hash-map iteration).
//!
//! One Delegator and 2–3 Executors (`max_concurrent` 1–2) exchange canonical Rust values (no
//! JSON) through one event queue ordered by `(time, sequence)`.
//!
//! **Faults** (rates drawn per seed; one seed in five is fault-free, one faulty seed in ten is
//! a storm): HTTP request loss, response loss, duplication and multi-second delays
//! (reordering); SSE disconnects; executor crash and restart (new memory restored from the
//! assignment journal the engine's records make, as the driver does; in-flight requests and
//! streams dropped; work dirs stay on disk and tasks whose process group was journalled keep
//! running until the restarted executor ends and releases what its journal records); delegator
//! crash and immediate restart from its delegation journal (requests, streams and local results
//! of the old process lost), also in the middle of a snapshot apply (finished all-or-nothing);
//! task failure; slow task stop (longer than the stop grace); setup, prepare, allocation,
//! capture, store and apply failures; oversized workspaces; cancels at random moments and
//! right after `delegate`; clock jumps past the lease; executors with a small max TTL.
//!
//! **Invariants**, checked after every step and at quiescence (the run continues past the
//! 7-day retention so purges happen):
//! 1. every `StateChanged` on both sides starts from the last observed state and is allowed by
//!    the tables of `awcp_proto::state`; `Ended` comes exactly once, in the current terminal
//!    state;
//! 2. every delegation ends, and every executor work dir is released, within `ttl` +
//!    [`GRACE_MS`] (after a clock jump: the new now + the grace);
//! 3. every export view, stored snapshot, work dir, captured snapshot and task process is
//!    released exactly once (a second release fails at once, a leak at the end; after a
//!    restart the first release of what a record says may still exist is idempotent); every
//!    HTTP request is answered; no stream is left open; no orphaned task is left; both engines
//!    are empty after retention;
//! 4. `PrepareTransport` only after ACCEPT (state `accepted`), and START only carries the
//!    prepared handle, in state `started`;
//! 5. per executor, running tasks ≤ `max_concurrent` and `live_count()` ≤ `max_concurrent`;
//!    a task runs at most once per executor memory;
//! 6. a delegation's workspace always equals the original or a state its executor captured
//!    (applies are atomic); `ro` workspaces never change; no snapshot is applied after a
//!    delegation became cancelled, expired or error; in fault-free runs a completed `auto`
//!    `rw` delegation ends with exactly the executor's final state.
//!
//! Replay one seed with a full trace:
//! `AWCP_SIM_SEED=<seed> cargo test -p awcp-tests --test simulation -- --nocapture`.

pub mod config;
pub mod rng;
pub mod world;

pub use config::{Action, DelegationSpec, Faults, SimAuth, SimConfig};
pub use world::{Failure, Summary, World, GRACE_MS, HTTP_TIMEOUT_MS};

/// The command that replays `seed` with a full trace.
pub fn replay_command(seed: u64) -> String {
    format!("AWCP_SIM_SEED={seed} cargo test -p awcp-tests --test simulation -- --nocapture")
}

/// Runs the random scenario of `seed`. On failure the run is repeated with a trace so the
/// report carries the last steps (the run is deterministic, so it fails the same way).
pub fn run_seed(seed: u64) -> Result<Summary, Box<Failure>> {
    match World::new(SimConfig::random(seed)).run() {
        Ok(s) => Ok(s),
        Err(_) => {
            let mut cfg = SimConfig::random(seed);
            cfg.trace = true;
            World::new(cfg).run()
        }
    }
}

/// Runs `seed` with a full trace.
pub fn run_seed_traced(seed: u64) -> Result<Summary, Box<Failure>> {
    let mut cfg = SimConfig::random(seed);
    cfg.trace = true;
    World::new(cfg).run()
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "simulation seed {} failed at t={} ms: {}",
            self.seed, self.at_ms, self.message
        )?;
        writeln!(f, "last steps:")?;
        for l in &self.trace_tail {
            writeln!(f, "  {l}")?;
        }
        write!(f, "replay: {}", replay_command(self.seed))
    }
}
