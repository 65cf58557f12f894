//! The deterministic simulation.
//!
//! * [`config`]: what a run does ([`SimConfig::random`] draws everything from a seed).
//! * [`world`]: the simulated clock, network, transports and task runners, and the invariants.
//! * [`rng`]: the seeded generator.
//!
//! Replay one seed with a full trace:
//! `AWCP_SIM_SEED=<seed> cargo test -p awcp-tests --test simulation -- --nocapture`.

pub mod config;
pub mod rng;
pub mod world;

pub use config::{Action, DelegationSpec, Faults, SimConfig};
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
