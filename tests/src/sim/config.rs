//! What a run does: the cast, the delegations, the scripted actions and the fault rates.

use awcp_proto::{AccessMode, Dialect, SnapshotMode};

use super::rng::Rng;

/// Fault rates, in per mille.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// An HTTP request never reaches the executor (the client times out).
    pub req_loss: u32,
    /// The executor processed a request but its response is lost (the client times out).
    pub resp_loss: u32,
    /// A request is delivered twice (the client sees the first answer).
    pub dup: u32,
    /// A message is delayed by seconds instead of milliseconds (reordering).
    pub slow: u32,
    /// The executor's transport setup fails (`SETUP_FAILED`).
    pub setup_fail: u32,
    /// The delegator's transport preparation fails.
    pub prepare_fail: u32,
    /// Applying a snapshot fails (the workspace stays untouched).
    pub apply_fail: u32,
    /// Storing a staged snapshot fails.
    pub store_fail: u32,
    /// The admission scan reports an oversized workspace.
    pub oversize: u32,
    /// A stopped task takes longer than the executor's stop grace to report.
    pub stop_slow: u32,
    /// The executor cannot create the work directory (`WORKDIR_DENIED`).
    pub alloc_fail: u32,
    /// Capturing the snapshot fails.
    pub capture_fail: u32,
}

/// One delegation the application will create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelegationSpec {
    /// When (ms of simulated time) the application calls `delegate`.
    pub at_ms: u64,
    /// Which executor it goes to.
    pub exec: usize,
    /// Requested lease.
    pub ttl_s: u64,
    /// Requested access.
    pub access: AccessMode,
    /// Snapshot handling.
    pub mode: SnapshotMode,
    /// Dialect of the executor.
    pub dialect: Dialect,
    /// Steps the task runs (each edits the work dir and reports progress).
    pub steps: u32,
    /// Time between steps.
    pub step_ms: u64,
    /// Whether the task fails (`TASK_FAILED`) at its last step (of the last planned round,
    /// when kept open).
    pub task_fails: bool,
    /// Kept open for more rounds (WIRE.md §17; `keep_open`, reference dialect only), and how
    /// the application drives them. `None`: a single-round delegation.
    pub rounds: Option<RoundsPlan>,
}

/// How the application drives a kept-open delegation's rounds: once a round has settled
/// (`Delegator::round_settled`) it continues (a new prompt each time) until the planned rounds
/// ran, then ends as planned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoundsPlan {
    /// The steps of each round after the first (round 2 on): one CONTINUE each.
    pub later_steps: Vec<u32>,
    /// What the application does once the last planned round has settled.
    pub end: RoundsEnd,
    /// How long the application takes to decide once a round has settled (ms).
    pub think_ms: u64,
}

impl RoundsPlan {
    /// Rounds in all, the START round included.
    pub fn total(&self) -> u64 {
        1 + self.later_steps.len() as u64
    }
}

/// How a kept-open delegation ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoundsEnd {
    /// The application closes it (CLOSE) once the last round settled.
    Close,
    /// The application leaves it idle: the idle timeouts (delegator's or executor's) end it.
    LeaveIdle,
    /// The application cancels it while it is idle.
    CancelIdle,
    /// The application cancels the last planned round `after_ms` after its CONTINUE (mid-round
    /// when the round runs longer).
    CancelMidRound {
        /// Time from the CONTINUE to the cancel.
        after_ms: u64,
    },
}

impl DelegationSpec {
    /// A simple delegation: rw, auto, reference dialect, 3 steps of 5 s, succeeds.
    pub fn simple(at_ms: u64, exec: usize, ttl_s: u64) -> Self {
        DelegationSpec {
            at_ms,
            exec,
            ttl_s,
            access: AccessMode::Rw,
            mode: SnapshotMode::Auto,
            dialect: Dialect::Reference,
            steps: 3,
            step_ms: 5_000,
            task_fails: false,
            rounds: None,
        }
    }

    /// [`DelegationSpec::simple`] kept open: rounds 2.. run `later_steps`, then `end`.
    pub fn rounds(
        at_ms: u64,
        exec: usize,
        ttl_s: u64,
        later_steps: Vec<u32>,
        end: RoundsEnd,
    ) -> Self {
        DelegationSpec {
            rounds: Some(RoundsPlan {
                later_steps,
                end,
                think_ms: 1_000,
            }),
            ..DelegationSpec::simple(at_ms, exec, ttl_s)
        }
    }
}

/// Something the application or the environment does at a given time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// The application cancels delegation `n` (by creation order).
    Cancel(usize),
    /// The SSE connection of delegation `n` breaks (both sides notice).
    CutStream(usize),
    /// Some open SSE connection (chosen by the run's generator) breaks.
    CutRandomStream,
    /// Executor `exec` crashes and restarts `down_ms` later with an empty memory.
    Crash {
        /// Which executor.
        exec: usize,
        /// How long it stays down.
        down_ms: u64,
    },
    /// The clock jumps forward.
    JumpClock(u64),
    /// The delegator crashes and a new process restores from its journal at once.
    CrashDelegator,
    /// The delegator crashes in the middle of its next snapshot apply.
    CrashDelegatorDuringApply,
    /// Arms a crash for kept-open delegation `n`: once it is idle after round `round`
    /// (`idle`), or once its round `round` (≥ 2) runs, the delegator (`executor_down_ms`
    /// `None`) or the delegation's executor (down that long) crashes, at a random moment of
    /// the idle time or of the round.
    CrashInRound {
        /// The delegation (creation order).
        n: usize,
        /// The round.
        round: u64,
        /// While idle after the round, or while it runs.
        idle: bool,
        /// The executor crashes (and stays down this long) instead of the delegator.
        executor_down_ms: Option<u64>,
    },
}

/// Executors require a credential (`--auth-token`); each delegation's delegator presents it
/// either in a header on every request (ours) or only in INVITE's `auth` (the reference's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimAuth {
    /// Per delegation (creation order): `true` sends the header on every request.
    pub header: Vec<bool>,
}

/// A whole run.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The seed of every random choice made during the run.
    pub seed: u64,
    /// Number of executors.
    pub executors: usize,
    /// `max_concurrent` of every executor.
    pub max_concurrent: usize,
    /// Fault rates.
    pub faults: Faults,
    /// Delegations to create.
    pub delegations: Vec<DelegationSpec>,
    /// Scripted actions at simulated times (ms).
    pub actions: Vec<(u64, Action)>,
    /// Record a full trace (replay, determinism test).
    pub trace: bool,
    /// Chance (per mille) that the application applies a pending staged snapshot of a
    /// completed delegation rather than discarding it.
    pub staged_apply: u32,
    /// `max_ttl_seconds` of every executor (longer leases are capped in ACCEPT).
    pub exec_max_ttl_s: u64,
    /// Whether executors require a credential, and how each delegation presents it.
    pub auth: Option<SimAuth>,
    /// Whether the delegator serves archives by one-time URL (`--serve-archives`): executors
    /// then fetch each workspace archive from it, and the engine decides every fetch.
    pub serve_archives: bool,
    /// The delegator's idle timeout (`DelegatorConfig::idle_timeout`), ms: short, so that it
    /// fires within a run.
    pub del_idle_timeout_ms: u64,
    /// The executors' idle timeout (`ExecutorConfig::idle_timeout`), ms.
    pub exec_idle_timeout_ms: u64,
    /// Which known engine bugs the run works around.
    pub known_bugs: KnownBugs,
}

/// Workarounds for the engine bugs the simulation found (see [`super::known_bugs`]): each on
/// in every generated run until its bug is fixed; a scenario test turns one off to reproduce
/// the bug.
/// Every bug listed is fixed: the default turns every workaround off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KnownBugs {
    /// [`KNOWN_BUG_STALE_ROUND_DONE`](super::KNOWN_BUG_STALE_ROUND_DONE): the application
    /// continues only once its stream is quiet, and a delegation the bug hits anyway is exempt
    /// from the round checks it breaks.
    pub stale_round_done: bool,
    /// [`KNOWN_BUG_LATE_DUPLICATE_CONTINUE`](super::KNOWN_BUG_LATE_DUPLICATE_CONTINUE): no
    /// CONTINUE is delivered twice.
    pub late_duplicate_continue: bool,
    /// [`KNOWN_BUG_RESTORED_IDLE_SETTLED`](super::KNOWN_BUG_RESTORED_IDLE_SETTLED): the
    /// application decides only once its stream is quiet, and a settled round whose snapshot
    /// a restart forgot is counted, not reported.
    pub restored_idle_settled: bool,
    /// [`KNOWN_BUG_QUEUED_APPLY_RECOVERY`](super::KNOWN_BUG_QUEUED_APPLY_RECOVERY): the
    /// application applies a staged snapshot only while no other snapshot of the delegation
    /// is in flight (no apply is queued behind another).
    pub queued_apply_recovery: bool,
}

impl SimConfig {
    /// A fault-free run with `executors` executors and no delegations yet.
    pub fn quiet(seed: u64, executors: usize, max_concurrent: usize) -> Self {
        SimConfig {
            seed,
            executors,
            max_concurrent,
            faults: Faults::default(),
            delegations: Vec::new(),
            actions: Vec::new(),
            trace: true,
            staged_apply: 1000,
            exec_max_ttl_s: 3600,
            auth: None,
            serve_archives: false,
            del_idle_timeout_ms: 60_000,
            exec_idle_timeout_ms: 90_000,
            known_bugs: KnownBugs::default(),
        }
    }

    /// The same run without multi-round delegations (what [`SimConfig::random`] drew before
    /// rounds existed: the regression seeds replay their original scenarios).
    pub fn single_round(mut self) -> Self {
        for d in &mut self.delegations {
            d.rounds = None;
        }
        self.actions
            .retain(|(_, a)| !matches!(a, Action::CrashInRound { .. }));
        self
    }

    /// Everything drawn from `seed`: the cast, the delegations, the faults and the actions.
    pub fn random(seed: u64) -> Self {
        let mut r = Rng::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0xA5A5);
        let executors = r.range(2, 3) as usize;
        let max_concurrent = r.range(1, 2) as usize;
        let faulty = !r.chance(200);
        // One faulty seed in ten is a storm: every rate up to four times higher.
        let storm = if faulty && r.chance(100) { 4 } else { 1 };
        let rate = |r: &mut Rng, max: u64| {
            if faulty {
                r.below((max * storm).min(500) + 1) as u32
            } else {
                0
            }
        };
        let faults = Faults {
            req_loss: rate(&mut r, 100),
            resp_loss: rate(&mut r, 100),
            dup: rate(&mut r, 150),
            slow: rate(&mut r, 150),
            setup_fail: rate(&mut r, 50),
            prepare_fail: rate(&mut r, 50),
            apply_fail: rate(&mut r, 150),
            store_fail: rate(&mut r, 100),
            oversize: rate(&mut r, 50),
            stop_slow: rate(&mut r, 300),
            alloc_fail: rate(&mut r, 30),
            capture_fail: rate(&mut r, 50),
        };
        let task_fail = rate(&mut r, 300);
        let n = r.range(1, 5) as usize;
        let mut delegations: Vec<DelegationSpec> = (0..n)
            .map(|_| DelegationSpec {
                at_ms: r.below(120_000),
                exec: r.below(executors as u64) as usize,
                ttl_s: r.range(30, 600),
                access: if r.chance(200) {
                    AccessMode::Ro
                } else {
                    AccessMode::Rw
                },
                mode: match r.below(3) {
                    0 => SnapshotMode::Auto,
                    1 => SnapshotMode::Staged,
                    _ => SnapshotMode::Discard,
                },
                dialect: if r.chance(200) {
                    Dialect::Seed
                } else {
                    Dialect::Reference
                },
                steps: r.range(1, 5) as u32,
                step_ms: r.range(500, 40_000),
                task_fails: r.chance(task_fail),
                rounds: None,
            })
            .collect();
        delegations.sort_by_key(|d| d.at_ms);
        let mut actions = Vec::new();
        if faulty {
            // Cancels soon after `delegate`: while scanning, invited, accepted or starting.
            for (k, d) in delegations.iter().enumerate() {
                if r.chance(100) {
                    actions.push((d.at_ms + r.below(3_000), Action::Cancel(k)));
                }
            }
            for _ in 0..r.below(3) {
                actions.push((r.below(400_000), Action::Cancel(r.below(n as u64) as usize)));
            }
            for _ in 0..r.below(4) {
                actions.push((r.below(400_000), Action::CutRandomStream));
            }
            for _ in 0..r.below(3) {
                if r.chance(300) {
                    let exec = r.below(executors as u64) as usize;
                    let down_ms = r.range(1_000, 120_000);
                    actions.push((r.below(400_000), Action::Crash { exec, down_ms }));
                }
            }
            if r.chance(150) {
                actions.push((
                    r.below(400_000),
                    Action::JumpClock(r.range(300_000, 1_200_000)),
                ));
            }
        }
        // Drawn last so that adding it kept every earlier seed's scenario.
        let exec_max_ttl_s = if r.chance(200) {
            r.range(20, 300)
        } else {
            3600
        };
        // Delegator crashes (restored from the journal), some in the middle of an apply.
        if faulty {
            for _ in 0..r.below(3) {
                if r.chance(250) {
                    actions.push((r.below(400_000), Action::CrashDelegator));
                }
            }
            if r.chance(250) {
                actions.push((r.below(300_000), Action::CrashDelegatorDuringApply));
            }
        }
        // Drawn after everything else, for the same reason.
        let auth = r.chance(300).then(|| SimAuth {
            header: (0..n).map(|_| r.chance(500)).collect(),
        });
        // Drawn after everything else, for the same reason.
        let serve_archives = r.chance(500);
        // Multi-round delegations (WIRE.md §17), drawn last for the same reason: some
        // reference-dialect delegations are kept open, with short idle timeouts on both sides
        // (either may fire first), and faulty seeds crash a host in or between their rounds.
        let del_idle_timeout_ms = r.range(10_000, 120_000);
        let exec_idle_timeout_ms = r.range(10_000, 150_000);
        for d in &mut delegations {
            if d.dialect != Dialect::Reference || !r.chance(400) {
                continue;
            }
            let later_steps: Vec<u32> = (0..r.range(0, 3)).map(|_| r.range(1, 4) as u32).collect();
            let end = match r.below(20) {
                0..=7 => RoundsEnd::Close,
                8..=12 => RoundsEnd::LeaveIdle,
                13..=14 => RoundsEnd::CancelIdle,
                _ if later_steps.is_empty() => RoundsEnd::Close,
                _ => RoundsEnd::CancelMidRound {
                    after_ms: r.range(100, 60_000),
                },
            };
            d.rounds = Some(RoundsPlan {
                later_steps,
                end,
                think_ms: r.range(0, 15_000),
            });
        }
        if faulty {
            for (n, d) in delegations.iter().enumerate() {
                let Some(plan) = &d.rounds else { continue };
                if !r.chance(400) {
                    continue;
                }
                let idle = plan.total() < 2 || r.chance(500);
                let round = if idle {
                    r.range(1, plan.total())
                } else {
                    r.range(2, plan.total())
                };
                let executor_down_ms = r.chance(500).then(|| r.range(1_000, 60_000));
                actions.push((
                    0,
                    Action::CrashInRound {
                        n,
                        round,
                        idle,
                        executor_down_ms,
                    },
                ));
            }
        }
        SimConfig {
            seed,
            executors,
            max_concurrent,
            faults,
            delegations,
            actions,
            trace: false,
            staged_apply: 600,
            exec_max_ttl_s,
            auth,
            serve_archives,
            del_idle_timeout_ms,
            exec_idle_timeout_ms,
            known_bugs: KnownBugs::default(),
        }
    }
}
