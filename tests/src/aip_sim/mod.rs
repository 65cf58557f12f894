//! The deterministic simulation of AIP direct mode (issue 13 item 5).
//!
//! One [`aip_proto::leader::Leader`] and 2–3 [`aip_proto::partner::Partner`]s exchange real
//! JSON-RPC bytes and SSE frames through one event queue ordered by `(time, sequence)`; each
//! node has its own clock. The partners' application works on every task it gets (working,
//! product chunks, awaiting-input or awaiting-completion, sometimes failed; with `auto_accept`
//! off it decides, sometimes too late). The leader's application starts tasks over `rpc`,
//! `stream` or notifications, answers awaiting-input with `continue`, accepts or refines
//! products, and cancels now and then.
//!
//! **Faults** (rates drawn per seed; one seed in five is fault-free): lost requests, lost
//! responses, duplicated requests, multi-second delays (reordering), streams cut mid-task,
//! the notification receiver down for a while, lost notification answers, clock jumps
//! (forward by up to a minute, backward by up to 5 s, per node), small stream buffers (so
//! re-streams expire) and tiny `maxProductsBytes`.
//!
//! **Invariants** ([`check`]):
//! 1. every partner transition is a row of the spec's table and starts from the last state;
//!    nothing follows a terminal state; every task ends exactly once;
//! 2. the leader's view only moves to states reachable from the last one it saw, and ends
//!    once; when it sees a terminal state, the partner is in that state;
//! 3. every leader task ends (terminal, or abandoned) by its deadline plus the retry budget;
//!    every partner task reaches a terminal state (through its own timeouts if nobody acts);
//! 4. on every stream, `eventSeq` increases, and across re-streams no event is lost: the
//!    events a leader accepted for a task are consecutive numbers unless the stream could not
//!    be resumed (the spec's expiry error);
//! 5. every notification ends delivered or given up after its retries (nothing pending at
//!    the end), and deliveries never exceed what the receiver took;
//! 6. the partners never see a protocol violation from the leader and vice versa
//!    (`PeerMisbehaved` never happens); at the end no call, stream or task is left.
//!
//! Replay one seed with a full trace:
//! `AIP_SIM_SEED=<seed> cargo test -p awcp-tests --test aip_simulation -- --nocapture`.

pub mod apps;
pub mod check;
pub mod world;

use std::fmt;

use crate::sim::rng::Rng;

pub use world::{Summary, World};

/// Fault rates, in per mille.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// A request never reaches the partner.
    pub req_loss: u32,
    /// A response never reaches the leader.
    pub resp_loss: u32,
    /// A request arrives twice.
    pub dup: u32,
    /// A message takes seconds instead of milliseconds.
    pub slow: u32,
    /// Per second of simulated time: an open stream is cut.
    pub stream_cut: u32,
    /// Per second: the notification receiver goes down for a while.
    pub receiver_down: u32,
    /// A notification's answer is lost.
    pub notify_resp_loss: u32,
    /// Per second: a node's clock jumps.
    pub clock_jump: u32,
}

/// One task the leader's application starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskPlan {
    /// When (ms).
    pub at_ms: u64,
    /// Which partner.
    pub partner: usize,
    /// 0 rpc, 1 stream, 2 notification.
    pub delivery: u8,
    /// The leader's deadline (ms).
    pub deadline_ms: u64,
    /// awaiting-input / awaiting-completion timeouts asked of the partner (ms).
    pub awaiting_ms: u64,
    /// `maxProductsBytes`, if any.
    pub max_bytes: Option<u64>,
    /// Notify on these states only (indexes into `TaskState::ALL`; empty: all).
    pub notify_on: Vec<usize>,
}

/// What one run does.
#[derive(Clone, Debug)]
pub struct AipSimConfig {
    /// The seed (everything else derives from it).
    pub seed: u64,
    /// Partners: (v01.00 dialect?, auto_accept?, stream buffer).
    pub partners: Vec<(bool, bool, usize)>,
    /// The tasks.
    pub tasks: Vec<TaskPlan>,
    /// Fault rates.
    pub faults: Faults,
    /// Keep a full trace.
    pub trace: bool,
}

impl AipSimConfig {
    /// Everything drawn from `seed`.
    pub fn random(seed: u64) -> Self {
        let mut r = Rng::new(seed ^ 0xA1B2);
        let partners = (0..r.range(2, 3))
            .map(|_| {
                (
                    r.chance(300),
                    !r.chance(200),
                    if r.chance(200) { 3 } else { 200 },
                )
            })
            .collect::<Vec<_>>();
        let tasks = (0..r.range(1, 6))
            .map(|_| TaskPlan {
                at_ms: r.below(5_000),
                partner: r.below(partners.len() as u64) as usize,
                delivery: r.below(3) as u8,
                deadline_ms: r.range(20_000, 60_000),
                awaiting_ms: r.range(1_000, 10_000),
                max_bytes: r.chance(100).then(|| r.range(50, 400)),
                notify_on: if r.chance(300) {
                    (0..8).filter(|_| r.chance(500)).collect()
                } else {
                    Vec::new()
                },
            })
            .collect();
        let faults = if r.chance(200) {
            Faults::default()
        } else {
            let mut rate = |max: u64| r.below(max + 1) as u32;
            Faults {
                req_loss: rate(100),
                resp_loss: rate(100),
                dup: rate(100),
                slow: rate(60),
                stream_cut: rate(150),
                receiver_down: rate(100),
                notify_resp_loss: rate(150),
                clock_jump: rate(30),
            }
        };
        AipSimConfig {
            seed,
            partners,
            tasks,
            faults,
            trace: false,
        }
    }

    /// No faults, `n` rpc tasks to partner 0, for scenario tests.
    pub fn quiet(seed: u64, n: usize, delivery: u8) -> Self {
        AipSimConfig {
            seed,
            partners: vec![(false, true, 200), (true, true, 200)],
            tasks: (0..n)
                .map(|i| TaskPlan {
                    at_ms: 100 * i as u64,
                    partner: i % 2,
                    delivery,
                    deadline_ms: 60_000,
                    awaiting_ms: 5_000,
                    max_bytes: None,
                    notify_on: Vec::new(),
                })
                .collect(),
            faults: Faults::default(),
            trace: false,
        }
    }
}

/// A broken invariant.
#[derive(Debug)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// Simulated time of the failure (ms).
    pub at_ms: u64,
    /// What broke.
    pub message: String,
    /// The last trace lines (if traced).
    pub trace_tail: Vec<String>,
}

/// The command that replays `seed` with a full trace.
pub fn replay_command(seed: u64) -> String {
    format!("AIP_SIM_SEED={seed} cargo test -p awcp-tests --test aip_simulation -- --nocapture")
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "AIP simulation seed {} failed at t={} ms: {}",
            self.seed, self.at_ms, self.message
        )?;
        for l in &self.trace_tail {
            writeln!(f, "  {l}")?;
        }
        write!(f, "replay: {}", replay_command(self.seed))
    }
}

/// Runs `seed`; a failing run is repeated with a trace, so the report has the last steps.
pub fn run_seed(seed: u64) -> Result<Summary, Box<Failure>> {
    match World::new(AipSimConfig::random(seed)).run() {
        Ok(s) => Ok(s),
        Err(_) => {
            let mut cfg = AipSimConfig::random(seed);
            cfg.trace = true;
            World::new(cfg).run()
        }
    }
}
