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
//! **Rounds** (WIRE.md §17): some reference-dialect delegations are kept open. Once a round
//! has settled the application continues them (a new prompt each round, up to three times),
//! then closes them, leaves them idle until an idle timeout (the delegator's or the
//! executor's, both short) ends them, cancels them while idle, or cancels their last round
//! while it runs. Each round runs the simulated agent again in the same work dir. Faulty seeds
//! also crash the delegator or the executor at a random moment of a round (≥ 2) or of an idle
//! time.
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
//!    `rw` delegation ends with exactly the executor's final state;
//! 7. rounds: a kept-open delegation ends too (within its idle timeout + grace when nobody
//!    continues it); the delegator's round is at most one more than the CONTINUEs the
//!    application made and, once a round settled, than those an executor accepted; CONTINUE
//!    only leaves `idle`, CLOSE only ends `idle` and never reaches an executor while a round
//!    runs; an executor runs one round of a delegation at a time, each at most once per
//!    memory, in the same work dir, with the prompt the application gave and every earlier
//!    round's result as history; a settled `auto` `rw` round's snapshot is applied (or its
//!    apply or store failed), and then the workspace is exactly that round's result; the
//!    snapshots recorded applied are exactly those whose apply wrote the workspace; a
//!    completed delegation's result is the outcome of a round that finished. Engine bugs
//!    found this way and worked around until fixed: [`known_bugs`].
//!
//! Replay one seed with a full trace:
//! `AWCP_SIM_SEED=<seed> cargo test -p awcp-tests --test simulation -- --nocapture`.

pub mod config;
pub mod known_bugs;
pub mod rng;
pub mod world;

pub use config::{
    Action, DelegationSpec, Faults, KnownBugs, RoundsEnd, RoundsPlan, SimAuth, SimConfig,
};
pub use known_bugs::{
    KNOWN_BUG_LATE_DUPLICATE_CONTINUE, KNOWN_BUG_QUEUED_APPLY_RECOVERY,
    KNOWN_BUG_RESTORED_IDLE_SETTLED, KNOWN_BUG_STALE_ROUND_DONE,
};
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
