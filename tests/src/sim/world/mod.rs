//! The simulated world: clock, network, transports, task runners, and the invariant checks.
//!
//! Everything happens through one event queue ordered by `(time, sequence)`. Engines are only
//! called while an event is processed; their outputs are executed by scheduling further events
//! (never by calling an engine re-entrantly), so a run is a pure function of its
//! [`SimConfig`].

use std::collections::BTreeMap;
use std::time::Duration;

use awcp_proto::engine::auth::SecretDigest;
use awcp_proto::engine::delegator::{
    ApplyRecovery, ArchiveDelivery, ArchiveLayout, DelegateRequest, DelegationRecord,
    FetchedResult, Journaling, Outbound, PrepareFailure, Reply, RequestFailure, SnapshotStatus,
    StoreFailure,
};
use awcp_proto::engine::drive::{self, Wake};
use awcp_proto::engine::executor::{
    CaptureFailure, Credential, Request, RequiredAuth, Response, ResultStatus,
};
use awcp_proto::{
    AccessMode, AllocationFailure, ArchiveData, ArchiveHandle, AssignmentEvent, AssignmentState,
    CapturedSnapshot, DelegationId, DelegationState, Delegator, DelegatorConfig, DelegatorEvent,
    DelegatorInput, DelegatorOutput, ErrorCode, ErrorInfo, Executor, ExecutorConfig, ExecutorEvent,
    ExecutorInput, ExecutorOutput, Message, RequestId, Resource, ResourceName, SetupFailure,
    SnapshotId, SnapshotMode, StreamId, TaskEvent, TaskFailure, TaskHandle, TaskOutcome, TaskSpec,
    Timestamp, TransportHandle, TransportKind, WorkspaceLayout, WorkspaceStats,
};
use serde_json::Value;

use super::config::{Action, Faults, RoundsEnd, RoundsPlan, SimConfig};
use super::rng::Rng;

mod application;
mod delegator;
mod executor;
mod hosts;
mod invariants;
mod network;
mod run;

use self::application::{round_prompt, round_summary};
use self::delegator::DelHost;
use self::executor::ExecHost;
use self::invariants::response_summary;

/// Files of a directory: path → content.
pub type Files = BTreeMap<String, String>;

/// Simulated time 0 (ms since the Unix epoch): 2025-06-15.
const BASE_MS: u64 = 1_750_000_000_000;
/// The credential executors require when the run has auth on.
const SIM_TOKEN: &str = "sim-token";
/// The client-side timeout of every HTTP request.
pub const HTTP_TIMEOUT_MS: u64 = 10_000;
/// Slack after `ttl` within which every delegation must end and every executor resource must
/// be released: setup grace (60 s) + stop grace (10 s) + an HTTP timeout + reconnect back-off
/// and polling + latencies.
pub const GRACE_MS: u64 = 150_000;
/// After a clock jump, time everything gets to wind down from the new now (a delegation in
/// `started` still gets its setup grace after the jump).
const JUMP_GRACE_MS: u64 = GRACE_MS;
/// A run that has not gone quiet after this many steps is livelocked.
const MAX_STEPS: u64 = 50_000;

/// Serialises a directory (the sim's "archive" format).
pub fn encode_files(f: &Files) -> String {
    serde_json::to_string(f).expect("a map of strings serialises")
}

/// Parses [`encode_files`]' output.
pub fn decode_files(s: &str) -> Option<Files> {
    serde_json::from_str(s).ok()
}

/// FNV-1a of `s`, hex (the sim's checksum).
pub fn checksum(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum CallKind {
    Out(Outbound),
    Fetch,
}

#[derive(Debug)]
struct Call {
    exec: usize,
    id: DelegationId,
    kind: CallKind,
}

#[derive(Clone, Debug)]
enum StreamItem {
    Opened,
    /// An event and its SSE id.
    Event(Box<TaskEvent>, Option<u64>),
    Closed(&'static str),
}

#[derive(Debug)]
struct SimStream {
    exec: usize,
    id: DelegationId,
    /// Incarnation of the executor that accepted the subscription, once it did.
    subscribed: Option<u32>,
    /// Time of the last delivery scheduled on this connection (TCP keeps order).
    fifo_at: u64,
    /// The `Last-Event-ID` it was opened with: every event on it must have a larger id.
    resume_after: Option<u64>,
}

#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
enum Ev {
    Create(usize),
    App(Action),
    StagedDecision(DelegationId, SnapshotId),
    CallArrive {
        call: u64,
        exec: usize,
        body: Request,
    },
    CallReply {
        call: u64,
        resp: Response,
    },
    CallFail {
        call: u64,
        why: &'static str,
    },
    StreamArrive(u64),
    StreamDeliver(u64, StreamItem),
    ExecIn {
        exec: usize,
        inc: u32,
        input: ExecutorInput,
    },
    /// A local operation's result for incarnation `inc` of the delegator.
    DelIn {
        inc: u32,
        input: DelegatorInput,
    },
    /// An apply reaches its commit (see [`PendingApply`]).
    ApplyCommit(u64),
    TaskStep {
        exec: usize,
        inc: u32,
        id: DelegationId,
        gen: u64,
    },
    Restart(usize),
    /// The application decides what to do with kept-open delegation `n` whose round settled
    /// (if it is still settled since: `epoch`).
    RoundDecision {
        n: usize,
        epoch: u64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum ResKey {
    Export(DelegationId),
    Stored(DelegationId, SnapshotId),
    /// A work directory (on disk: it survives executor crashes).
    WorkDir(usize, DelegationId),
    /// A captured inline snapshot (in the memory of one executor incarnation).
    Captured(usize, u32, DelegationId, SnapshotId),
    /// A running task's processes (they survive an executor crash once journalled).
    Task(usize, DelegationId),
}

#[derive(Debug)]
struct SimTask {
    gen: u64,
    steps_left: u32,
    /// The round it runs (1: the START round).
    round: u64,
}

/// The handle a simulated task's "process group" is journalled with.
fn task_handle(gen: u64) -> TaskHandle {
    TaskHandle(format!("sim-task-{gen}"))
}

/// A snapshot apply between its start and its commit: a delegator crash in between is
/// recovered all-or-nothing (rolled forward or back).
#[derive(Debug)]
struct PendingApply {
    inc: u32,
    id: DelegationId,
    snapshot_id: SnapshotId,
    /// The result's files, or `None` if the apply fails.
    files: Option<Files>,
}

#[derive(Debug)]
struct AssignTrack {
    state: AssignmentState,
    ended: bool,
    /// The error code a setup failure the world injected must end it with (if it ends on
    /// that failure rather than on a race such as expiry or cancel).
    setup_code: Option<ErrorCode>,
}

struct ExecNode {
    engine: Option<Executor>,
    inc: u32,
    /// Open HTTP requests: request id → call.
    reqs: BTreeMap<u64, u64>,
    /// Work directories on disk (they survive a crash until released).
    work: BTreeMap<DelegationId, Files>,
    tasks: BTreeMap<DelegationId, SimTask>,
    /// Tasks of a crashed incarnation whose process group was journalled: they keep running
    /// until the restarted executor ends them (or they finish by themselves).
    orphans: BTreeMap<DelegationId, SimTask>,
    assigns: BTreeMap<DelegationId, AssignTrack>,
    /// The assignment journal, written as the driver writes it.
    journal: BTreeMap<DelegationId, Value>,
    /// Assignments restored unreleased: their first release may find the directory gone
    /// already (the predecessor removed it but crashed before recording that): idempotent.
    restored_unreleased: std::collections::BTreeSet<DelegationId>,
}

/// What the world knows about one delegation (by creation order).
#[derive(Debug)]
pub struct DelTrack {
    /// Its id.
    pub id: DelegationId,
    /// The workspace as it was at `delegate`.
    pub original: Files,
    /// The workspace now.
    pub ws: Files,
    /// Last state reported by the engine.
    pub state: DelegationState,
    /// Terminal state reported by `Ended`.
    pub ended: Option<DelegationState>,
    /// Error reported by `Ended`.
    pub error: Option<ErrorInfo>,
    /// Result reported by `Ended`.
    pub result: Option<TaskOutcome>,
    /// Whether the delegator has received an ACCEPT for it.
    pub accepted: bool,
    /// The handle `PrepareTransport` produced and not yet released.
    pub handle: Option<TransportHandle>,
    /// Every snapshot its executor captured (the executor's final states).
    pub captured: Vec<Files>,
    /// Successful applies.
    pub applied: u32,
    /// The snapshots those applies wrote.
    applied_ids: std::collections::BTreeSet<SnapshotId>,
    /// Failed applies.
    pub apply_failed: u32,
    /// Whether the delegator sent ACK (letting the executor forget the result).
    pub acked: bool,
    /// How often an executor started its task (its first round).
    pub runs: u32,
    /// Executor and incarnation of the last run.
    ran_on: Option<(usize, u32)>,
    /// How often an executor started a round (the first included).
    pub rounds_started: u32,
    /// Every round started, with the executor and incarnation that ran it.
    ran_rounds: std::collections::BTreeSet<(usize, u32, u64)>,
    /// Rounds whose task finished successfully (on any executor memory).
    finished_rounds: std::collections::BTreeSet<u64>,
    /// CONTINUEs the application made (accepted by the delegator engine).
    pub continues: u32,
    /// CONTINUEs the application tried (the planned ones, and again after a refusal).
    continue_attempts: u32,
    /// CONTINUEs an executor accepted (its assignment went from `idle` to `active`).
    pub exec_continues: u32,
    /// The state the delegation's last transition left.
    last_from: DelegationState,
    /// Whether the engine said its round was settled after the last delegator turn.
    settled: bool,
    /// How often its round became settled (the application's decision is for one of them).
    settle_epoch: u64,
    /// The last `round_done` the delegator was given: its round, its snapshot, and the
    /// delegator's incarnation then.
    last_round_done: Option<(u64, Option<SnapshotId>, u32)>,
    /// Every snapshot its executors captured, by id.
    snap_files: BTreeMap<SnapshotId, Files>,
    /// A `round_done` of an earlier round reached it while a later round ran
    /// (`sim::KNOWN_BUG_STALE_ROUND_DONE`).
    pub stale_round_done: bool,
    /// How the application drives its rounds (kept open), or `None`.
    rounds: Option<RoundsPlan>,
    /// A failed prepare's message and the code the engine must give it (`TRANSPORT_ERROR`
    /// for a local failure, the transport's own code otherwise).
    prepare_failure: Option<(String, ErrorCode)>,
    /// Must be `Ended` by then.
    pub deadline: u64,
    ttl_ms: u64,
    access: AccessMode,
    mode: SnapshotMode,
    steps: u32,
    step_ms: u64,
    task_fails: bool,
}

/// Why a run failed.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// The violated invariant.
    pub message: String,
    /// Simulated time of the failure (ms).
    pub at_ms: u64,
    /// The last trace lines (if the run kept a trace).
    pub trace_tail: Vec<String>,
}

/// What a finished run reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Steps processed.
    pub steps: u64,
    /// Simulated end time (ms).
    pub end_ms: u64,
    /// Terminal state of every delegation (by creation order).
    pub states: Vec<DelegationState>,
    /// The full trace, if kept.
    pub trace: String,
    /// How often each interesting thing happened (coverage of the fault paths).
    pub stats: BTreeMap<&'static str, u64>,
}

/// The simulation.
pub struct World {
    cfg: SimConfig,
    rng: Rng,
    now: u64,
    seq: u64,
    queue: BTreeMap<(u64, u64), Ev>,
    delegator: Delegator,
    execs: Vec<ExecNode>,
    /// Delegations by creation order.
    pub dels: Vec<DelTrack>,
    by_id: BTreeMap<DelegationId, usize>,
    calls: BTreeMap<u64, Call>,
    next_call: u64,
    next_req: u64,
    next_stream: u64,
    streams: BTreeMap<u64, SimStream>,
    cur_stream: BTreeMap<DelegationId, u64>,
    held: BTreeMap<ResKey, u64>,
    store: BTreeMap<(DelegationId, SnapshotId), Files>,
    /// The checksum each stored snapshot was announced with (what its apply must carry, even
    /// after the delegator restarted).
    stored_checksums: BTreeMap<(DelegationId, SnapshotId), String>,
    /// Incarnation of the delegator (bumped by a crash).
    del_inc: u32,
    /// The delegation journal, written as the driver writes it.
    del_journal: BTreeMap<DelegationId, Value>,
    /// What of it a power loss leaves: the records as last synced (the engine says when,
    /// `DelegatorOutput::journaling`).
    del_durable: BTreeMap<DelegationId, Value>,
    /// The records the driver moved out of the start-up path (`<state>/ended`): delegations
    /// the engine said were settled (`Delegator::is_settled`) after a turn. The move is made
    /// durable (the record synced, then the new name); the old name's removal may be undone
    /// by a power loss (the record then also stays in `del_durable`).
    del_history: BTreeMap<DelegationId, Value>,
    /// What of the history a power loss leaves (a removal is not synced).
    del_history_durable: BTreeMap<DelegationId, Value>,
    /// Delegations a restarted delegator restored: their releases are idempotent cleanups.
    restored: std::collections::BTreeSet<DelegationId>,
    pending_applies: BTreeMap<u64, PendingApply>,
    /// Delegations whose last apply's swap finished and whose proof of it (the apply
    /// directory with its `committed` journal) was not closed yet: a restart reports them
    /// `ApplyRecovery::Finished`. With the snapshot that apply wrote.
    apply_proofs: BTreeMap<DelegationId, SnapshotId>,
    next_apply: u64,
    /// Crash the delegator right after its next `ApplySnapshot` starts.
    crash_on_apply: bool,
    next_task_gen: u64,
    trace: Vec<String>,
    violations: Vec<String>,
    steps: u64,
    /// Executor-side assignment endings seen: (exec, delegation, state, error code).
    pub exec_endings: Vec<(usize, DelegationId, AssignmentState, Option<ErrorCode>)>,
    /// Most tasks ever running at once on one executor.
    pub peak_tasks: usize,
    /// INVITEs answered with `DECLINED`.
    pub declined: u32,
    /// Tasks stopped by `StopTask`.
    pub stopped_tasks: u32,
    /// Tasks that ran to their last step.
    pub finished_tasks: u32,
    /// Event streams opened.
    pub streams_opened: u32,
    /// Coverage counters.
    pub stats: BTreeMap<&'static str, u64>,
    /// Crashes armed for a moment of a delegation's rounds (`Action::CrashInRound`).
    round_crashes: Vec<RoundCrash>,
    /// The application is closing a delegation (a CLOSE it did not ask for is the idle
    /// timeout's).
    app_closing: bool,
    /// The executor whose timers are being handled (an `idle → completed` then is its idle
    /// timeout's).
    exec_timer_turn: Option<usize>,
    /// Archives the delegator serves by URL: token → (delegation, archive body).
    archive_urls: BTreeMap<String, (DelegationId, String)>,
    /// Tokens an executor fetched with: a second successful fetch is a violation.
    archive_fetched: std::collections::BTreeSet<String>,
}

/// An armed `Action::CrashInRound`.
#[derive(Clone, Copy, Debug)]
struct RoundCrash {
    n: usize,
    round: u64,
    idle: bool,
    executor_down_ms: Option<u64>,
}

/// The delegator's engine settings in a run.
fn del_config(cfg: &SimConfig) -> DelegatorConfig {
    DelegatorConfig {
        serve_archives: cfg.serve_archives,
        idle_timeout: Duration::from_millis(cfg.del_idle_timeout_ms),
        ..DelegatorConfig::default()
    }
}

fn exec_config(cfg: &SimConfig, id_seed: u64) -> ExecutorConfig {
    ExecutorConfig {
        work_root: "/sim/work".to_owned(),
        max_concurrent: cfg.max_concurrent,
        max_ttl_seconds: cfg.exec_max_ttl_s,
        id_seed,
        idle_timeout: Duration::from_millis(cfg.exec_idle_timeout_ms),
        auth: cfg.auth.as_ref().map(|_| RequiredAuth {
            types: Vec::new(),
            credential: SIM_TOKEN.into(),
        }),
        ..ExecutorConfig::default()
    }
}

fn peer_of(exec: usize) -> String {
    format!("http://exec{exec}.sim/awcp")
}

fn exec_of(peer: &str) -> usize {
    peer.trim_start_matches("http://exec")
        .split('.')
        .next()
        .and_then(|s| s.parse().ok())
        .expect("sim peer url")
}

/// Used by scenario tests: how long a spec's task runs.
pub fn task_duration(steps: u32, step_ms: u64) -> Duration {
    Duration::from_millis(u64::from(steps) * step_ms)
}
