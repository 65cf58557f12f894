//! The simulated world: clock, network, transports, task runners, and the invariant checks.
//!
//! Everything happens through one event queue ordered by `(time, sequence)`. Engines are only
//! called while an event is processed; their outputs are executed by scheduling further events
//! (never by calling an engine re-entrantly), so a run is a pure function of its
//! [`SimConfig`].

use std::collections::BTreeMap;
use std::time::Duration;

use awcp_proto::engine::delegator::{
    DelegateRequest, DelegationRecord, FetchedResult, Outbound, Reply, RequestFailure,
    SnapshotStatus,
};
use awcp_proto::engine::executor::{Credential, Request, RequiredAuth, Response, ResultStatus};
use awcp_proto::{
    AccessMode, AllocationFailure, ArchiveData, ArchiveHandle, AssignmentEvent, AssignmentState,
    CapturedSnapshot, DelegationId, DelegationState, Delegator, DelegatorConfig, DelegatorEvent,
    DelegatorInput, DelegatorOutput, ErrorCode, ErrorInfo, Executor, ExecutorConfig, ExecutorEvent,
    ExecutorInput, ExecutorOutput, Message, RequestId, Resource, ResourceName, SnapshotId,
    SnapshotMode, StreamId, TaskEvent, TaskFailure, TaskHandle, TaskOutcome, TaskSpec, Timestamp,
    TransportHandle, TransportKind, WorkspaceLayout, WorkspaceStats,
};
use serde_json::Value;

use super::config::{Action, Faults, SimConfig};
use super::rng::Rng;

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
    Event(Box<TaskEvent>),
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
    /// Failed applies.
    pub apply_failed: u32,
    /// How often an executor started its task.
    pub runs: u32,
    /// Executor and incarnation of the last run.
    ran_on: Option<(usize, u32)>,
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
    /// Incarnation of the delegator (bumped by a crash).
    del_inc: u32,
    /// The delegation journal, written as the driver writes it.
    del_journal: BTreeMap<DelegationId, Value>,
    /// Delegations a restarted delegator restored: their releases are idempotent cleanups.
    restored: std::collections::BTreeSet<DelegationId>,
    pending_applies: BTreeMap<u64, PendingApply>,
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
}

fn exec_config(cfg: &SimConfig, id_seed: u64) -> ExecutorConfig {
    ExecutorConfig {
        work_root: "/sim/work".to_owned(),
        max_concurrent: cfg.max_concurrent,
        max_ttl_seconds: cfg.exec_max_ttl_s,
        id_seed,
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

impl World {
    /// A world ready to [`run`](World::run) `cfg`.
    pub fn new(mut cfg: SimConfig) -> Self {
        // Creation order is time order (stable for equal times): `Action::Cancel(n)` and
        // `World::dels[n]` refer to it.
        cfg.delegations.sort_by_key(|d| d.at_ms);
        let mut rng = Rng::new(cfg.seed);
        let execs = (0..cfg.executors)
            .map(|_| ExecNode {
                engine: Some(Executor::new(exec_config(&cfg, rng.next_u64()))),
                inc: 0,
                reqs: BTreeMap::new(),
                work: BTreeMap::new(),
                tasks: BTreeMap::new(),
                orphans: BTreeMap::new(),
                assigns: BTreeMap::new(),
                journal: BTreeMap::new(),
                restored_unreleased: Default::default(),
            })
            .collect();
        let mut w = World {
            rng,
            now: 0,
            seq: 0,
            queue: BTreeMap::new(),
            delegator: Delegator::new(DelegatorConfig::default()),
            execs,
            dels: Vec::new(),
            by_id: BTreeMap::new(),
            calls: BTreeMap::new(),
            next_call: 0,
            next_req: 0,
            next_stream: 0,
            streams: BTreeMap::new(),
            cur_stream: BTreeMap::new(),
            held: BTreeMap::new(),
            store: BTreeMap::new(),
            del_inc: 0,
            del_journal: BTreeMap::new(),
            restored: Default::default(),
            pending_applies: BTreeMap::new(),
            next_apply: 0,
            crash_on_apply: false,
            next_task_gen: 0,
            trace: Vec::new(),
            violations: Vec::new(),
            steps: 0,
            exec_endings: Vec::new(),
            peak_tasks: 0,
            declined: 0,
            stopped_tasks: 0,
            finished_tasks: 0,
            streams_opened: 0,
            stats: BTreeMap::new(),
            cfg,
        };
        for i in 0..w.cfg.delegations.len() {
            let at = w.cfg.delegations[i].at_ms;
            w.schedule(at, Ev::Create(i));
        }
        for (at, a) in w.cfg.actions.clone() {
            w.schedule(at, Ev::App(a));
        }
        w
    }

    // ------------------------------------------------------------------------------------
    // Plumbing

    fn ts(&self) -> Timestamp {
        Timestamp::from_unix_millis(BASE_MS + self.now)
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at, self.seq), ev);
    }

    /// Network latency: milliseconds, occasionally seconds (reordering).
    fn latency(&mut self) -> u64 {
        if self.rng.chance(self.cfg.faults.slow) {
            self.rng.range(1_000, 8_000)
        } else {
            self.rng.range(1, 200)
        }
    }

    /// Latency of a local operation (disk, transport).
    fn local(&mut self) -> u64 {
        self.rng.range(0, 50)
    }

    /// Schedules a local operation's result for the delegator, a local delay from now.
    fn del_local(&mut self, input: DelegatorInput) {
        let at = self.now + self.local();
        let inc = self.del_inc;
        self.schedule(at, Ev::DelIn { inc, input });
    }

    /// Schedules a local operation's result for executor `exec` (incarnation `inc`), a local
    /// delay from now.
    fn exec_local(&mut self, exec: usize, inc: u32, input: ExecutorInput) {
        let at = self.now + self.local();
        self.schedule(at, Ev::ExecIn { exec, inc, input });
    }

    fn log(&mut self, line: impl FnOnce() -> String) {
        if self.cfg.trace {
            let l = format!("{:>9} {}", self.now, line());
            self.trace.push(l);
        }
    }

    fn bump(&mut self, what: &'static str) {
        *self.stats.entry(what).or_insert(0) += 1;
    }

    fn violate(&mut self, msg: String) {
        self.log(|| format!("VIOLATION {msg}"));
        self.violations.push(msg);
    }

    fn idx(&self, id: &DelegationId) -> usize {
        self.by_id[id]
    }

    /// Whether delegation `id`'s requests carry the credential in a header (auth on, our
    /// delegator's style) rather than only in INVITE (the reference's).
    fn sends_header(&self, id: &DelegationId) -> bool {
        match (&self.cfg.auth, self.by_id.get(id)) {
            (Some(a), Some(i)) => a.header[*i],
            _ => false,
        }
    }

    /// The header credential a request about `id` carries.
    fn credential_for(&self, id: &DelegationId) -> Option<Credential> {
        self.sends_header(id).then(|| Credential::bearer(SIM_TOKEN))
    }

    fn acquire(&mut self, key: ResKey, deadline: u64) {
        if self.held.contains_key(&key) {
            self.violate(format!("{key:?} acquired while already held"));
        }
        self.held.insert(key, deadline);
    }

    fn release(&mut self, key: ResKey) {
        if self.held.remove(&key).is_none() {
            self.violate(format!(
                "{key:?} released but not held (double release or never acquired)"
            ));
        }
    }

    // ------------------------------------------------------------------------------------
    // Running

    /// Runs to quiescence (every timer fired, nothing in flight) and checks the end state.
    pub fn run(&mut self) -> Result<Summary, Box<Failure>> {
        loop {
            self.steps += 1;
            if self.steps > MAX_STEPS {
                self.violate(format!("no quiescence after {MAX_STEPS} steps (livelock)"));
                return Err(self.failure());
            }
            if !self.step() {
                break;
            }
            self.check_step();
            if !self.violations.is_empty() {
                return Err(self.failure());
            }
        }
        self.check_end();
        if !self.violations.is_empty() {
            return Err(self.failure());
        }
        Ok(Summary {
            steps: self.steps,
            end_ms: self.now,
            states: self
                .dels
                .iter()
                .map(|d| d.ended.unwrap_or(d.state))
                .collect(),
            trace: self.trace.join("\n"),
            stats: self.stats.clone(),
        })
    }

    /// The trace so far (empty unless [`SimConfig::trace`] is set).
    pub fn trace_text(&self) -> String {
        self.trace.join("\n")
    }

    fn failure(&self) -> Box<Failure> {
        let n = self.trace.len();
        Box::new(Failure {
            seed: self.cfg.seed,
            message: self.violations.join("; "),
            at_ms: self.now,
            trace_tail: self.trace[n.saturating_sub(60)..].to_vec(),
        })
    }

    /// Processes the earliest thing due; `false` when nothing is left.
    fn step(&mut self) -> bool {
        #[derive(Clone, Copy)]
        enum Src {
            Queue,
            Del,
            Exec(usize),
        }
        let mut best: Option<(u64, Src)> = None;
        let mut consider = |t: u64, s: Src| {
            if best.is_none_or(|(b, _)| t < b) {
                best = Some((t, s));
            }
        };
        let rel = |t: Timestamp| t.as_unix_millis().saturating_sub(BASE_MS);
        if let Some((t, _)) = self.delegator.poll_timeout() {
            consider(rel(t), Src::Del);
        }
        for (i, e) in self.execs.iter().enumerate() {
            if let Some((t, _)) = e.engine.as_ref().and_then(|e| e.poll_timeout()) {
                consider(rel(t), Src::Exec(i));
            }
        }
        if let Some(((t, _), _)) = self.queue.first_key_value() {
            consider(*t, Src::Queue);
        }
        let Some((t, src)) = best else {
            return false;
        };
        self.now = self.now.max(t);
        let now = self.ts();
        match src {
            Src::Del => {
                self.delegator.handle_timeout(now);
                self.drain_delegator();
            }
            Src::Exec(i) => {
                if let Some(e) = self.execs[i].engine.as_mut() {
                    e.handle_timeout(now);
                }
                self.drain_exec(i);
            }
            Src::Queue => {
                let (_, ev) = self.queue.pop_first().expect("peeked");
                self.process(ev);
            }
        }
        true
    }

    fn del_input(&mut self, input: DelegatorInput) {
        let now = self.ts();
        if let Err(e) = self.delegator.handle(now, input) {
            self.log(|| format!("delegator refused input: {e}"));
        }
        self.drain_delegator();
    }

    fn exec_input(&mut self, exec: usize, input: ExecutorInput) {
        let now = self.ts();
        let Some(engine) = self.execs[exec].engine.as_mut() else {
            return;
        };
        if let Err(e) = engine.handle(now, input) {
            self.log(|| format!("exec{exec} refused input: {e}"));
        }
        self.drain_exec(exec);
    }

    fn process(&mut self, ev: Ev) {
        match ev {
            Ev::Create(i) => self.create(i),
            Ev::App(a) => self.app(a),
            Ev::StagedDecision(id, sid) => {
                let now = self.ts();
                let completed = self
                    .delegator
                    .get(&id)
                    .is_some_and(|v| v.state == DelegationState::Completed);
                let apply = completed && self.rng.chance(self.cfg.staged_apply);
                self.log(|| {
                    format!(
                        "app {} staged {sid} of {id}",
                        if apply { "applies" } else { "discards" }
                    )
                });
                let r = if apply {
                    self.delegator.apply_snapshot(now, &id, &sid)
                } else {
                    self.delegator.discard_snapshot(now, &id, &sid)
                };
                if let Err(e) = r {
                    self.log(|| format!("app call refused: {e}"));
                }
                self.drain_delegator();
            }
            Ev::CallArrive { call, exec, body } => {
                if self.execs[exec].engine.is_none() {
                    self.log(|| format!("call {call} refused: exec{exec} is down"));
                    self.bump("request to a down executor");
                    let at = self.now + self.latency();
                    self.schedule(
                        at,
                        Ev::CallFail {
                            call,
                            why: "connection refused",
                        },
                    );
                    return;
                }
                self.next_req += 1;
                let rid = self.next_req;
                self.execs[exec].reqs.insert(rid, call);
                let about = match &body {
                    Request::Message(m, _) => m.delegation_id().clone(),
                    Request::Cancel(id) | Request::Ack(id) | Request::Result(id) => id.clone(),
                };
                let credential = self.credential_for(&about);
                self.exec_input(
                    exec,
                    ExecutorInput::Request {
                        request: RequestId(rid),
                        credential,
                        body,
                    },
                );
            }
            Ev::CallReply { call, resp } => self.answer(call, Ok(resp)),
            Ev::CallFail { call, why } => self.answer(call, Err(why)),
            Ev::StreamArrive(s) => self.stream_arrive(s),
            Ev::StreamDeliver(s, item) => self.stream_deliver(s, item),
            Ev::ExecIn { exec, inc, input } => {
                if self.execs[exec].inc == inc {
                    self.exec_input(exec, input);
                }
            }
            Ev::DelIn { inc, input } => {
                if inc == self.del_inc {
                    self.del_input(input);
                }
            }
            Ev::ApplyCommit(n) => self.apply_commit(n),
            Ev::TaskStep { exec, inc, id, gen } => self.task_step(exec, inc, id, gen),
            Ev::Restart(exec) => self.restart(exec),
        }
    }

    fn create(&mut self, i: usize) {
        let spec = self.cfg.delegations[i].clone();
        let id = DelegationId::from_random(self.rng.bytes::<16>());
        let mut original = Files::new();
        for f in 0..self.rng.range(1, 4) {
            let v = self.rng.next_u64();
            original.insert(format!("src/file{f}.txt"), format!("v0-{v:x}"));
        }
        self.by_id.insert(id.clone(), i);
        self.dels.push(DelTrack {
            id: id.clone(),
            ws: original.clone(),
            original,
            state: DelegationState::Created,
            ended: None,
            error: None,
            result: None,
            accepted: false,
            handle: None,
            captured: Vec::new(),
            applied: 0,
            apply_failed: 0,
            runs: 0,
            ran_on: None,
            deadline: self.now + spec.ttl_s * 1000 + GRACE_MS,
            ttl_ms: spec.ttl_s * 1000,
            access: spec.access,
            mode: spec.mode,
            steps: spec.steps,
            step_ms: spec.step_ms,
            task_fails: spec.task_fails,
        });
        debug_assert_eq!(self.dels.len() - 1, i, "delegations are created in order");
        let req = DelegateRequest {
            id: id.clone(),
            peer: peer_of(spec.exec),
            dialect: spec.dialect,
            task: TaskSpec {
                description: format!("task {i}"),
                prompt: "edit the files".into(),
            },
            ttl_seconds: spec.ttl_s,
            access_mode: spec.access,
            resources: vec![Resource {
                name: ResourceName::new("workspace").expect("valid name"),
                kind: "fs".into(),
                mode: spec.access,
            }],
            transport: TransportKind::Archive,
            snapshot_mode: spec.mode,
            auth: self.cfg.auth.as_ref().map(|_| awcp_proto::Auth {
                auth_type: awcp_proto::AuthType::Bearer,
                credential: SIM_TOKEN.into(),
                metadata: Default::default(),
            }),
            allow_sensitive: false,
        };
        self.log(|| {
            format!(
                "delegate #{i} {id} exec{} ttl={}s {:?} {:?} {:?} steps={}x{}ms fail={}",
                spec.exec,
                spec.ttl_s,
                spec.access,
                spec.mode,
                spec.dialect,
                spec.steps,
                spec.step_ms,
                spec.task_fails
            )
        });
        let now = self.ts();
        if let Err(e) = self.delegator.delegate(now, req) {
            self.violate(format!("delegate refused: {e}"));
        }
        // Journalled at once, as the driver does: a crash never loses a delegation whose id
        // the application has.
        self.persist_del(&id);
        self.drain_delegator();
    }

    fn app(&mut self, a: Action) {
        self.log(|| format!("action {a:?}"));
        match a {
            Action::Cancel(n) => {
                let Some(d) = self.dels.get(n) else { return };
                let id = d.id.clone();
                let now = self.ts();
                if let Err(e) = self.delegator.cancel(now, &id) {
                    self.log(|| format!("cancel refused: {e}"));
                }
                self.drain_delegator();
            }
            Action::CutStream(n) => {
                if let Some(s) = self
                    .dels
                    .get(n)
                    .and_then(|d| self.cur_stream.get(&d.id).copied())
                {
                    self.cut(s);
                }
            }
            Action::CutRandomStream => {
                let open: Vec<u64> = self.cur_stream.values().copied().collect();
                if !open.is_empty() {
                    let s = open[self.rng.below(open.len() as u64) as usize];
                    self.cut(s);
                }
            }
            Action::Crash { exec, down_ms } => self.crash(exec, down_ms),
            Action::CrashDelegator => self.crash_delegator(),
            Action::CrashDelegatorDuringApply => self.crash_on_apply = true,
            Action::JumpClock(by) => {
                self.bump("clock jump");
                self.now += by;
                let floor = self.now + JUMP_GRACE_MS;
                for d in &mut self.dels {
                    // A delegation not invited yet starts its lease after the jump.
                    let from_now = if d.state == DelegationState::Created {
                        self.now + d.ttl_ms + GRACE_MS
                    } else {
                        floor
                    };
                    d.deadline = d.deadline.max(from_now);
                }
                for v in self.held.values_mut() {
                    *v = (*v).max(floor);
                }
            }
        }
    }

    // ------------------------------------------------------------------------------------
    // HTTP

    fn send_call(&mut self, exec: usize, id: DelegationId, kind: CallKind, body: Request) {
        self.next_call += 1;
        let call = self.next_call;
        self.log(|| format!("call {call} {kind:?} {id} -> exec{exec}"));
        self.calls.insert(call, Call { exec, id, kind });
        let f = self.cfg.faults.clone();
        if self.rng.chance(f.req_loss) {
            self.log(|| format!("call {call} lost"));
            self.bump("request lost");
        } else {
            let copies = if self.rng.chance(f.dup) {
                self.bump("request duplicated");
                2
            } else {
                1
            };
            for _ in 0..copies {
                let at = self.now + self.latency();
                self.schedule(
                    at,
                    Ev::CallArrive {
                        call,
                        exec,
                        body: body.clone(),
                    },
                );
            }
        }
        self.schedule(
            self.now + HTTP_TIMEOUT_MS,
            Ev::CallFail {
                call,
                why: "timeout",
            },
        );
    }

    fn answer(&mut self, call: u64, resp: Result<Response, &'static str>) {
        let Some(c) = self.calls.remove(&call) else {
            return; // answered already (duplicate, or the timeout won)
        };
        self.log(|| {
            format!(
                "call {call} answered: {}",
                match &resp {
                    Ok(r) => response_summary(r),
                    Err(w) => format!("failed ({w})"),
                }
            )
        });
        let _ = c.exec;
        match c.kind {
            CallKind::Out(to) => {
                let reply = match resp {
                    Ok(Response::Accept(a, _)) => Reply::Accept(a),
                    Ok(Response::Error { message, .. }) => Reply::Error(message.error),
                    Ok(Response::Ok | Response::Cancelled) => Reply::Ok,
                    Ok(Response::Result(_)) => {
                        Reply::Failed(RequestFailure::Unusable("unexpected result body".into()))
                    }
                    Err(w) => Reply::Failed(RequestFailure::Network(w.into())),
                };
                if let Reply::Error(e) = &reply {
                    if e.code == ErrorCode::Declined && to == Outbound::Invite {
                        self.declined += 1;
                        self.bump("invite declined");
                    }
                }
                if to == Outbound::Invite && matches!(reply, Reply::Accept(_)) {
                    let i = self.idx(&c.id);
                    self.dels[i].accepted = true;
                }
                self.del_input(DelegatorInput::Reply {
                    id: c.id,
                    to,
                    reply,
                });
            }
            CallKind::Fetch => {
                let result = match resp {
                    Ok(Response::Result(b)) => Ok(match b.status {
                        ResultStatus::Running => FetchedResult::Running,
                        ResultStatus::Completed => FetchedResult::Completed {
                            outcome: b.outcome.unwrap_or_default(),
                            snapshot: b.snapshot,
                        },
                        ResultStatus::Error => FetchedResult::Error(
                            b.error
                                .unwrap_or_else(|| ErrorInfo::new(ErrorCode::TaskFailed, "failed")),
                        ),
                        ResultStatus::NotFound => FetchedResult::NotFound,
                    }),
                    Ok(Response::Error { status: 404, .. }) => Ok(FetchedResult::NotFound),
                    Ok(r) => Err(RequestFailure::Unusable(format!(
                        "unexpected answer {}",
                        response_summary(&r)
                    ))),
                    Err(w) => Err(RequestFailure::Network(w.to_owned())),
                };
                self.del_input(DelegatorInput::ResultFetched { id: c.id, result });
            }
        }
    }

    // ------------------------------------------------------------------------------------
    // SSE

    fn stream_arrive(&mut self, s: u64) {
        let Some(st) = self.streams.get(&s) else {
            return; // the delegator closed it meanwhile
        };
        let (exec, id) = (st.exec, st.id.clone());
        if self.execs[exec].engine.is_none() {
            self.push_stream(s, StreamItem::Closed("connection refused"));
            return;
        }
        let inc = self.execs[exec].inc;
        self.streams.get_mut(&s).expect("exists").subscribed = Some(inc);
        self.push_stream(s, StreamItem::Opened);
        self.exec_input(
            exec,
            ExecutorInput::Subscribe {
                stream: StreamId(s),
                credential: self.credential_for(&id),
                id,
            },
        );
    }

    /// Schedules `item` on connection `s`, after everything already sent on it.
    fn push_stream(&mut self, s: u64, item: StreamItem) {
        let lat = self.latency().min(2_000);
        let Some(st) = self.streams.get_mut(&s) else {
            return;
        };
        let at = (self.now + lat).max(st.fifo_at);
        st.fifo_at = at;
        self.schedule(at, Ev::StreamDeliver(s, item));
    }

    fn stream_deliver(&mut self, s: u64, item: StreamItem) {
        let Some(st) = self.streams.get(&s) else {
            return;
        };
        let id = st.id.clone();
        if self.cur_stream.get(&id) != Some(&s) {
            return;
        }
        match item {
            StreamItem::Opened => self.del_input(DelegatorInput::EventStreamOpened { id }),
            StreamItem::Event(ev) => {
                self.log(|| format!("sse {s} {} for {id}", ev.kind.type_str()));
                self.del_input(DelegatorInput::TaskEvent { event: *ev });
            }
            StreamItem::Closed(why) => {
                self.cur_stream.remove(&id);
                self.streams.remove(&s);
                self.log(|| format!("sse {s} closed ({why})"));
                self.del_input(DelegatorInput::EventStreamClosed {
                    id,
                    reason: Some(why.to_owned()),
                });
            }
        }
    }

    /// The executor side of stream `s` notices its connection is gone (if it had accepted it).
    fn exec_notices_cut(&mut self, s: u64, st: &SimStream) {
        if let Some(inc) = st.subscribed {
            self.exec_local(
                st.exec,
                inc,
                ExecutorInput::StreamClosed {
                    stream: StreamId(s),
                },
            );
        }
    }

    /// The connection breaks: both sides notice, whatever was in flight is lost.
    fn cut(&mut self, s: u64) {
        let Some(st) = self.streams.remove(&s) else {
            return;
        };
        self.bump("sse cut");
        self.log(|| format!("sse {s} of {} cut", st.id));
        self.exec_notices_cut(s, &st);
        if self.cur_stream.get(&st.id) == Some(&s) {
            self.cur_stream.remove(&st.id);
            self.del_input(DelegatorInput::EventStreamClosed {
                id: st.id,
                reason: Some("connection reset".into()),
            });
        }
    }

    // ------------------------------------------------------------------------------------
    // Executor crash

    fn crash(&mut self, exec: usize, down_ms: u64) {
        if self.execs[exec].engine.is_none() {
            return;
        }
        self.bump("executor crash");
        let back = self.now + down_ms + GRACE_MS;
        let node = &mut self.execs[exec];
        node.engine = None;
        let old = node.inc;
        node.inc += 1;
        node.reqs.clear(); // their clients time out
                           // Tasks whose process group was journalled keep running; the others are assumed to die
                           // with the executor (the driver's window between spawning and journalling).
        let tasks = std::mem::take(&mut node.tasks);
        let mut died = Vec::new();
        for (id, t) in tasks {
            let recorded = node
                .journal
                .get(&id)
                .and_then(|r| r.get("task"))
                .and_then(Value::as_str)
                == Some(task_handle(t.gen).0.as_str());
            if recorded {
                node.orphans.insert(id, t);
            } else {
                died.push(id);
            }
        }
        let orphaned = self.execs[exec].orphans.len();
        for _ in 0..orphaned {
            self.bump("task orphaned by a crash");
        }
        for id in died {
            self.bump("unjournalled task died with the executor");
            self.release(ResKey::Task(exec, id));
        }
        // Inline snapshots lived in the process's memory.
        let captured: Vec<ResKey> = self
            .held
            .keys()
            .filter(|k| matches!(k, ResKey::Captured(e, i, _, _) if *e == exec && *i == old))
            .cloned()
            .collect();
        for k in captured {
            self.release(k);
        }
        // Work directories and orphaned tasks stay until the restarted executor cleans up
        // what its journal records.
        for (k, deadline) in self.held.iter_mut() {
            if matches!(k, ResKey::WorkDir(e, _) | ResKey::Task(e, _) if *e == exec) {
                *deadline = (*deadline).max(back);
            }
        }
        let conns: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, st)| st.exec == exec)
            .map(|(s, _)| *s)
            .collect();
        for s in conns {
            self.cut(s);
        }
        self.schedule(self.now + down_ms, Ev::Restart(exec));
    }

    /// A new executor process on the same state: it restores its journal, as the driver does,
    /// and cleans up what the journal says its predecessor held.
    fn restart(&mut self, exec: usize) {
        let seed = self.rng.next_u64();
        self.log(|| format!("exec{exec} restarts"));
        let mut engine = Executor::new(exec_config(&self.cfg, seed));
        let records: Vec<Value> = self.execs[exec].journal.values().cloned().collect();
        let n = engine.restore(self.ts(), &records);
        if n > 0 {
            self.bump("executor restored from its journal");
        }
        let node = &mut self.execs[exec];
        for (id, a) in node.assigns.iter_mut() {
            if let Some(v) = engine.assignment(id) {
                a.state = v.state;
                if !v.released {
                    node.restored_unreleased.insert(id.clone());
                }
            }
        }
        node.engine = Some(engine);
        // What restoring changed is journalled, as the driver does.
        let ids: Vec<DelegationId> = self.execs[exec].journal.keys().cloned().collect();
        for id in ids {
            self.persist_exec(exec, &id);
        }
        self.drain_exec(exec);
    }

    fn persist_exec(&mut self, exec: usize, id: &DelegationId) {
        let node = &mut self.execs[exec];
        match node.engine.as_ref().and_then(|e| e.record(id)) {
            Some(r) => {
                node.journal.insert(id.clone(), r);
            }
            None => {
                node.journal.remove(id);
            }
        }
    }

    // ------------------------------------------------------------------------------------
    // Delegator crash

    /// The delegator process dies and a new one starts at once on the same state directory:
    /// everything in memory is lost (requests in flight, event streams, local results); an
    /// apply in flight is finished all-or-nothing by the apply journal; the new engine is
    /// restored from the delegation journal, as the driver does.
    fn crash_delegator(&mut self) {
        self.bump("delegator crash");
        self.log(|| "delegator crashes and restarts".to_owned());
        self.del_inc += 1;
        self.calls.clear();
        for (s, st) in std::mem::take(&mut self.streams) {
            self.exec_notices_cut(s, &st);
        }
        self.cur_stream.clear();
        for (_, p) in std::mem::take(&mut self.pending_applies) {
            let Some(files) = p.files else { continue };
            let i = self.idx(&p.id);
            if self.rng.chance(500) {
                self.bump("interrupted apply rolled forward");
                self.dels[i].ws = files;
                self.dels[i].applied += 1;
            } else {
                self.bump("interrupted apply rolled back");
            }
            let sid = p.snapshot_id;
            self.log(|| format!("apply {sid} of {} interrupted by the crash", p.id));
        }
        let mut d = Delegator::new(DelegatorConfig::default());
        // Read back as the driver does: from the JSON the journal holds.
        let records: Vec<DelegationRecord> = self
            .del_journal
            .values()
            .map(|v| DelegationRecord::from_json(v).expect("the delegator reads its own records"))
            .collect();
        let now = self.ts();
        if d.restore(now, &records) > 0 {
            self.bump("delegator restored from its journal");
        }
        self.delegator = d;
        self.restored.extend(self.del_journal.keys().cloned());
        let ids: Vec<DelegationId> = self.del_journal.keys().cloned().collect();
        for id in ids {
            self.persist_del(&id);
        }
        self.drain_delegator();
    }

    fn persist_del(&mut self, id: &DelegationId) {
        match self.delegator.record(id) {
            Some(r) => {
                self.del_journal.insert(id.clone(), r.to_json());
            }
            None => {
                self.del_journal.remove(id);
            }
        }
    }

    /// An apply reaches its commit: all at once.
    fn apply_commit(&mut self, n: u64) {
        let Some(p) = self.pending_applies.remove(&n) else {
            return; // finished by the crash recovery
        };
        if p.inc != self.del_inc {
            return;
        }
        let i = self.idx(&p.id);
        let ok = p.files.is_some();
        match p.files {
            Some(files) => {
                self.bump("snapshot applied");
                self.dels[i].ws = files;
                self.dels[i].applied += 1;
            }
            None => {
                self.bump("snapshot apply failed");
                self.dels[i].apply_failed += 1;
            }
        }
        let (id, snapshot_id) = (p.id, p.snapshot_id);
        self.log(|| format!("apply {snapshot_id} to {id} committed ok={ok}"));
        self.del_input(DelegatorInput::SnapshotApplied {
            id,
            snapshot_id,
            result: if ok {
                Ok(())
            } else {
                Err(ErrorInfo::new(ErrorCode::SetupFailed, "sim: apply"))
            },
        });
    }

    // ------------------------------------------------------------------------------------
    // Tasks

    fn task_step(&mut self, exec: usize, inc: u32, id: DelegationId, gen: u64) {
        let node = &mut self.execs[exec];
        let orphan = node.orphans.get(&id).is_some_and(|t| t.gen == gen);
        let current = node.inc == inc && node.tasks.get(&id).is_some_and(|t| t.gen == gen);
        if !orphan && !current {
            return;
        }
        // Edit the work directory: change, create or delete a file.
        let choice = self.rng.below(3);
        let v = self.rng.next_u64();
        let node = &mut self.execs[exec];
        if let Some(files) = node.work.get_mut(&id) {
            match choice {
                0 => {
                    let n = files.len() as u64;
                    if let Some(k) = files.keys().nth((v % n.max(1)) as usize).cloned() {
                        files.insert(k, format!("edit-{v:x}"));
                    }
                }
                1 => {
                    files.insert(format!("out/new{}.txt", v % 7), format!("new-{v:x}"));
                }
                _ => {
                    let n = files.len() as u64;
                    if n > 1 {
                        if let Some(k) = files.keys().nth((v % n) as usize).cloned() {
                            files.remove(&k);
                        }
                    }
                }
            }
        }
        if orphan {
            // Nobody listens any more; it runs until ended or done.
            let t = node.orphans.get_mut(&id).expect("checked");
            t.steps_left = t.steps_left.saturating_sub(1);
            if t.steps_left == 0 {
                node.orphans.remove(&id);
                self.bump("orphaned task finished by itself");
                self.release(ResKey::Task(exec, id));
            } else {
                let at = self.now + self.dels[self.by_id[&id]].step_ms;
                self.schedule(at, Ev::TaskStep { exec, inc, id, gen });
            }
            return;
        }
        let task = node.tasks.get_mut(&id).expect("checked");
        task.steps_left = task.steps_left.saturating_sub(1);
        let left = task.steps_left;
        let i = self.by_id[&id];
        if left == 0 {
            let node = &mut self.execs[exec];
            node.tasks.remove(&id);
            self.release(ResKey::Task(exec, id.clone()));
            self.finished_tasks += 1;
            let result = if self.dels[i].task_fails {
                Err(TaskFailure::Failed("the task failed".into()))
            } else {
                Ok(TaskOutcome {
                    summary: format!("task of {id} done"),
                    highlights: vec!["src/file0.txt".into()],
                })
            };
            self.log(|| format!("exec{exec} task {id} finished ok={}", result.is_ok()));
            self.exec_input(exec, ExecutorInput::TaskFinished { id, result });
        } else {
            self.exec_input(
                exec,
                ExecutorInput::TaskProgress {
                    id: id.clone(),
                    message: Some(format!("{left} steps left")),
                    progress: None,
                },
            );
            let at = self.now + self.dels[i].step_ms;
            self.schedule(at, Ev::TaskStep { exec, inc, id, gen });
        }
    }

    // ------------------------------------------------------------------------------------
    // Delegator outputs

    fn drain_delegator(&mut self) {
        while let Some(out) = self.delegator.poll_output() {
            self.on_del_out(out);
        }
    }

    fn on_del_out(&mut self, out: DelegatorOutput) {
        match out {
            DelegatorOutput::ScanWorkspace { id } => {
                let i = self.idx(&id);
                let ws = &self.dels[i].ws;
                let mut stats = WorkspaceStats {
                    total_bytes: ws.values().map(|v| v.len() as u64).sum(),
                    file_count: ws.len() as u64,
                    largest_file_bytes: ws.values().map(|v| v.len() as u64).max().unwrap_or(0),
                    largest_file: ws.keys().next().cloned(),
                    ..WorkspaceStats::default()
                };
                if self.rng.chance(self.cfg.faults.oversize) {
                    stats.total_bytes = 1 << 40;
                }
                self.del_local(DelegatorInput::ScanCompleted {
                    id,
                    result: Ok(stats),
                });
            }
            DelegatorOutput::SendMessage {
                id,
                to,
                peer,
                message,
                dialect,
            } => {
                let i = self.idx(&id);
                let kind = match &message {
                    Message::Invite(_) => Outbound::Invite,
                    Message::Start(start) => {
                        let (accepted, state) = (self.dels[i].accepted, self.dels[i].state);
                        if !accepted || state != DelegationState::Started {
                            self.violate(format!(
                                "START for {id} (state {state}, accepted {accepted}) carries credentials"
                            ));
                        }
                        if self.dels[i].handle.as_ref() != Some(&start.handle)
                            || !self.held.contains_key(&ResKey::Export(id.clone()))
                        {
                            self.violate(format!(
                                "START for {id} carries a handle that is not the prepared one"
                            ));
                        }
                        Outbound::Start
                    }
                    Message::Error(_) => Outbound::Error,
                    other => {
                        self.violate(format!("delegator sent {}", other.type_str()));
                        return;
                    }
                };
                if kind != to {
                    self.violate(format!("{id}: {} sent as {to:?}", message.type_str()));
                }
                // The engine names the request; its answer goes back under that name.
                self.send_call(
                    exec_of(&peer),
                    id,
                    CallKind::Out(to),
                    Request::Message(Box::new(message), dialect),
                );
            }
            DelegatorOutput::SendCancel { id, peer } => {
                let body = Request::Cancel(id.clone());
                self.send_call(exec_of(&peer), id, CallKind::Out(Outbound::Cancel), body);
            }
            DelegatorOutput::SendAck { id, peer } => {
                // The ack lets the executor forget the result: every snapshot must be safely
                // stored (or applied, or discarded by policy) by then.
                for snap in self
                    .delegator
                    .get(&id)
                    .map(|v| v.snapshots)
                    .unwrap_or_default()
                {
                    let stored = self.store.contains_key(&(id.clone(), snap.id.clone()));
                    if matches!(snap.status, SnapshotStatus::Failed(_))
                        || (snap.status == SnapshotStatus::InFlight && !stored)
                    {
                        self.violate(format!(
                            "{id} acknowledged while snapshot {} is {} and not stored",
                            snap.id,
                            snap.status.as_str()
                        ));
                    }
                }
                let body = Request::Ack(id.clone());
                self.send_call(exec_of(&peer), id, CallKind::Out(Outbound::Ack), body);
            }
            DelegatorOutput::FetchResult { id, peer } => {
                self.bump("result fetched");
                let body = Request::Result(id.clone());
                self.send_call(exec_of(&peer), id, CallKind::Fetch, body);
            }
            DelegatorOutput::PrepareTransport { id, transport, .. } => {
                let i = self.idx(&id);
                if !self.dels[i].accepted || self.dels[i].state != DelegationState::Accepted {
                    self.violate(format!(
                        "credentials prepared for {id} before ACCEPT (state {})",
                        self.dels[i].state
                    ));
                }
                if transport != TransportKind::Archive {
                    self.violate(format!("unexpected transport {}", transport.as_str()));
                }
                let at = self.now + self.local();
                if self.rng.chance(self.cfg.faults.prepare_fail) {
                    self.log(|| format!("prepare of {id} fails"));
                    let inc = self.del_inc;
                    self.schedule(
                        at,
                        Ev::DelIn {
                            inc,
                            input: DelegatorInput::TransportPrepared {
                                id,
                                result: Err(ErrorInfo::new(ErrorCode::SetupFailed, "sim: prepare")),
                            },
                        },
                    );
                    return;
                }
                let deadline = self.dels[i].deadline;
                self.acquire(ResKey::Export(id.clone()), deadline);
                let body = encode_files(&self.dels[i].ws);
                let handle = TransportHandle::Archive(ArchiveHandle {
                    checksum: checksum(&body),
                    size_bytes: Some(body.len() as u64),
                    data: ArchiveData {
                        base64: Some(body),
                        url: None,
                    },
                });
                self.dels[i].handle = Some(handle.clone());
                let inc = self.del_inc;
                self.schedule(
                    at,
                    Ev::DelIn {
                        inc,
                        input: DelegatorInput::TransportPrepared {
                            id,
                            result: Ok(handle),
                        },
                    },
                );
            }
            DelegatorOutput::OpenEventStream { id, peer } => {
                if let Some(old) = self.cur_stream.get(&id).copied() {
                    self.violate(format!(
                        "stream for {id} opened while stream {old} is current"
                    ));
                    self.cut(old);
                }
                self.next_stream += 1;
                let s = self.next_stream;
                self.streams_opened += 1;
                self.bump("sse opened");
                self.log(|| format!("sse {s} opening for {id}"));
                self.streams.insert(
                    s,
                    SimStream {
                        exec: exec_of(&peer),
                        id: id.clone(),
                        subscribed: None,
                        fifo_at: self.now,
                    },
                );
                self.cur_stream.insert(id, s);
                let at = self.now + self.latency();
                self.schedule(at, Ev::StreamArrive(s));
            }
            DelegatorOutput::CloseEventStream { id } => {
                if let Some(s) = self.cur_stream.remove(&id) {
                    if let Some(st) = self.streams.remove(&s) {
                        if let Some(inc) = st.subscribed {
                            let at = self.now + self.latency();
                            self.schedule(
                                at,
                                Ev::ExecIn {
                                    exec: st.exec,
                                    inc,
                                    input: ExecutorInput::StreamClosed {
                                        stream: StreamId(s),
                                    },
                                },
                            );
                        }
                    }
                }
            }
            DelegatorOutput::ApplySnapshot { id, snapshot_id } => {
                let i = self.idx(&id);
                if self.dels[i].access == AccessMode::Ro {
                    self.violate(format!("snapshot applied to read-only {id}"));
                }
                // Every apply is from the store: a result is stored before it is applied.
                let files = self.store.get(&(id.clone(), snapshot_id.clone())).cloned();
                let Some(files) = files else {
                    self.violate(format!(
                        "snapshot {snapshot_id} of {id} applied without being stored"
                    ));
                    return;
                };
                let ok = !self.rng.chance(self.cfg.faults.apply_fail);
                self.next_apply += 1;
                let n = self.next_apply;
                self.log(|| format!("apply {snapshot_id} to {id} starts (apply {n}, ok={ok})"));
                self.pending_applies.insert(
                    n,
                    PendingApply {
                        inc: self.del_inc,
                        id,
                        snapshot_id,
                        files: ok.then_some(files),
                    },
                );
                let at = self.now + self.local() + 1;
                self.schedule(at, Ev::ApplyCommit(n));
                if std::mem::take(&mut self.crash_on_apply) {
                    // Before the commit: the crash interrupts this apply.
                    self.schedule(self.now, Ev::App(Action::CrashDelegator));
                }
            }
            DelegatorOutput::StoreSnapshot { id, snapshot } => {
                let sid = snapshot.snapshot_id.clone();
                let ok = !self.rng.chance(self.cfg.faults.store_fail);
                if ok {
                    match snapshot.data.base64.as_deref().and_then(decode_files) {
                        Some(files) => {
                            let key = ResKey::Stored(id.clone(), sid.clone());
                            // After a restart the engine may fetch and store again a snapshot
                            // whose earlier store finished unrecorded (the crash came first):
                            // the driver writes `.part` and renames over it, so that replaces.
                            if !(self.restored.contains(&id) && self.held.contains_key(&key)) {
                                self.acquire(key, u64::MAX);
                            }
                            self.store.insert((id.clone(), sid.clone()), files);
                        }
                        None => self.violate(format!("snapshot {sid} of {id} has no bytes")),
                    }
                }
                self.del_local(DelegatorInput::SnapshotStored {
                    id,
                    snapshot_id: sid,
                    result: if ok {
                        Ok(())
                    } else {
                        Err(ErrorInfo::new(ErrorCode::SetupFailed, "sim: store"))
                    },
                });
            }
            DelegatorOutput::DeleteStoredSnapshot { id, snapshot_id } => {
                self.store.remove(&(id.clone(), snapshot_id.clone()));
                let key = ResKey::Stored(id.clone(), snapshot_id);
                // After a restart, deleting what may exist is an idempotent cleanup.
                if !self.restored.contains(&id) || self.held.contains_key(&key) {
                    self.release(key);
                }
            }
            DelegatorOutput::ReleaseTransport { id } => {
                let i = self.idx(&id);
                self.dels[i].handle = None;
                let key = ResKey::Export(id.clone());
                // After a restart the engine releases whatever may be prepared (idempotent).
                if !self.restored.contains(&id) || self.held.contains_key(&key) {
                    self.release(key);
                }
                self.del_local(DelegatorInput::TransportReleased {
                    id,
                    warnings: Vec::new(),
                });
            }
            DelegatorOutput::Event(ev) => self.on_del_event(ev),
        }
    }

    fn on_del_event(&mut self, ev: DelegatorEvent) {
        // The journal, as the driver writes it.
        match &ev {
            DelegatorEvent::StateChanged { id, .. }
            | DelegatorEvent::Snapshot { id, .. }
            | DelegatorEvent::Ended { id, .. } => self.persist_del(id),
            DelegatorEvent::Forgotten { id } => {
                self.del_journal.remove(id);
            }
            DelegatorEvent::Progress { .. } | DelegatorEvent::PeerMisbehaved { .. } => {}
        }
        match ev {
            DelegatorEvent::PeerMisbehaved { id, reason } => {
                // The executors here are this project's engine: they never break the protocol.
                self.violate(format!("{id}: the executor misbehaved: {reason:?}"));
            }
            DelegatorEvent::StateChanged { id, from, to } => {
                let i = self.idx(&id);
                self.log(|| format!("delegation {id}: {from} -> {to}"));
                let d = &mut self.dels[i];
                if d.state != from {
                    let last = d.state;
                    self.violate(format!(
                        "{id}: transition from {from} but the last state was {last}"
                    ));
                } else if !from.allowed_targets().contains(&to) {
                    self.violate(format!("{id}: illegal transition {from} -> {to}"));
                }
                self.dels[i].state = to;
            }
            DelegatorEvent::Ended {
                id,
                state,
                result,
                error,
            } => {
                let i = self.idx(&id);
                self.bump(match state {
                    DelegationState::Completed => "delegation completed",
                    DelegationState::Cancelled => "delegation cancelled",
                    DelegationState::Expired => "delegation expired",
                    _ => "delegation error",
                });
                self.log(|| {
                    format!(
                        "delegation {id} ended {state} {}",
                        error
                            .as_ref()
                            .map(|e| e.code.as_str().to_owned())
                            .unwrap_or_default()
                    )
                });
                if error
                    .as_ref()
                    .is_some_and(|e| e.code == ErrorCode::AuthFailed)
                {
                    // Only a reference-style delegation (no header) can be refused, and only
                    // by an executor that restarted and forgot the INVITE that bound its id.
                    let crashed = self
                        .cfg
                        .actions
                        .iter()
                        .any(|(_, a)| matches!(a, Action::Crash { .. }));
                    if self.sends_header(&id) || !crashed {
                        self.violate(format!(
                            "{id} was refused as unauthenticated although it presented the credential"
                        ));
                    } else {
                        self.bump("reference-style delegation refused by a restarted executor");
                    }
                }
                let d = &mut self.dels[i];
                if d.ended.is_some() {
                    self.violate(format!("{id} ended twice"));
                    return;
                }
                d.ended = Some(state);
                d.result = result;
                d.error = error;
                let last = d.state;
                let has_handle = d.handle.is_some();
                if state != last || !state.is_terminal() {
                    self.violate(format!("{id} ended in {state} but its state is {last}"));
                }
                if has_handle || self.held.contains_key(&ResKey::Export(id.clone())) {
                    self.violate(format!("{id} ended with its export still prepared"));
                }
            }
            DelegatorEvent::Snapshot {
                id,
                snapshot_id,
                status,
            } => {
                self.log(|| format!("snapshot {snapshot_id} of {id}: {}", status.as_str()));
                if status == SnapshotStatus::Pending {
                    let at = self.now + self.rng.range(1_000, 100_000);
                    self.schedule(at, Ev::StagedDecision(id, snapshot_id));
                }
            }
            DelegatorEvent::Progress { .. } | DelegatorEvent::Forgotten { .. } => {}
        }
    }

    // ------------------------------------------------------------------------------------
    // Executor outputs

    fn drain_exec(&mut self, exec: usize) {
        while let Some(out) = self.execs[exec]
            .engine
            .as_mut()
            .and_then(|e| e.poll_output())
        {
            self.on_exec_out(exec, out);
        }
    }

    fn on_exec_out(&mut self, exec: usize, out: ExecutorOutput) {
        let inc = self.execs[exec].inc;
        match out {
            ExecutorOutput::Respond { request, response } => {
                let Some(call) = self.execs[exec].reqs.remove(&request.0) else {
                    self.violate(format!("exec{exec} answered request {} twice", request.0));
                    return;
                };
                if self.rng.chance(self.cfg.faults.resp_loss) {
                    self.log(|| format!("response to call {call} lost"));
                    self.bump("response lost");
                    return;
                }
                let at = self.now + self.latency();
                self.schedule(
                    at,
                    Ev::CallReply {
                        call,
                        resp: response,
                    },
                );
            }
            ExecutorOutput::StreamEvent { stream, event, .. } => {
                let ok = self
                    .streams
                    .get(&stream.0)
                    .is_some_and(|st| st.exec == exec && st.subscribed == Some(inc));
                if ok {
                    self.push_stream(stream.0, StreamItem::Event(Box::new((*event).clone())));
                }
            }
            ExecutorOutput::CloseStream { stream } => {
                let ok = self
                    .streams
                    .get(&stream.0)
                    .is_some_and(|st| st.exec == exec && st.subscribed == Some(inc));
                if ok {
                    self.push_stream(stream.0, StreamItem::Closed("end of stream"));
                }
            }
            ExecutorOutput::AllocateWorkDir { id, .. } => {
                // A new assignment (pending) exists from here on.
                self.execs[exec].assigns.insert(
                    id.clone(),
                    AssignTrack {
                        state: AssignmentState::Pending,
                        ended: false,
                    },
                );
                if self.rng.chance(self.cfg.faults.alloc_fail) {
                    self.bump("work dir allocation failed");
                    let e = AllocationFailure::CannotCreate("sim: allocation".into());
                    self.exec_local(
                        exec,
                        inc,
                        ExecutorInput::WorkDirAllocated { id, result: Err(e) },
                    );
                    return;
                }
                let i = self.idx(&id);
                let deadline = self.now + self.dels[i].ttl_ms + GRACE_MS;
                self.acquire(ResKey::WorkDir(exec, id.clone()), deadline);
                let node = &mut self.execs[exec];
                node.work.insert(id.clone(), Files::new());
                self.exec_local(
                    exec,
                    inc,
                    ExecutorInput::WorkDirAllocated { id, result: Ok(()) },
                );
            }
            ExecutorOutput::SetupTransport { id, handle, .. } => {
                if !self.held.contains_key(&ResKey::WorkDir(exec, id.clone())) {
                    self.violate(format!("exec{exec} sets up {id} without a work dir"));
                }
                let files = match *handle {
                    TransportHandle::Archive(h) => h
                        .data
                        .base64
                        .filter(|b| checksum(b) == h.checksum)
                        .and_then(|b| decode_files(&b)),
                    _ => None,
                };
                let result = match files {
                    None => Err(ErrorInfo::new(
                        ErrorCode::ChecksumMismatch,
                        "sim: bad archive",
                    )),
                    Some(_) if self.rng.chance(self.cfg.faults.setup_fail) => {
                        Err(ErrorInfo::new(ErrorCode::SetupFailed, "sim: setup"))
                    }
                    Some(f) => {
                        self.execs[exec].work.insert(id.clone(), f);
                        Ok(WorkspaceLayout::PerResource)
                    }
                };
                self.exec_local(exec, inc, ExecutorInput::SetupCompleted { id, result });
            }
            ExecutorOutput::RunTask { id, .. } => {
                if !self.held.contains_key(&ResKey::WorkDir(exec, id.clone())) {
                    self.violate(format!("exec{exec} runs {id} without a work dir"));
                }
                self.next_task_gen += 1;
                let gen = self.next_task_gen;
                let i = self.idx(&id);
                self.dels[i].runs += 1;
                // Once per executor memory: a restarted executor cannot recognise a late
                // duplicate of INVITE and START.
                match self.dels[i].ran_on.replace((exec, inc)) {
                    Some(prev) if prev == (exec, inc) => {
                        self.violate(format!("the task of {id} runs a second time"));
                    }
                    Some(_) => self.bump("task re-run by a restarted executor"),
                    None => {}
                }
                let (steps, step_ms) = (self.dels[i].steps, self.dels[i].step_ms);
                if self.execs[exec].tasks.contains_key(&id) {
                    self.violate(format!("exec{exec} runs {id} twice"));
                }
                self.execs[exec].tasks.insert(
                    id.clone(),
                    SimTask {
                        gen,
                        steps_left: steps,
                    },
                );
                let deadline = self.dels[i].deadline;
                self.acquire(ResKey::Task(exec, id.clone()), deadline);
                self.log(|| format!("exec{exec} runs {id}"));
                // The driver reports the task's process group once it exists.
                self.exec_local(
                    exec,
                    inc,
                    ExecutorInput::TaskSpawned {
                        id: id.clone(),
                        handle: task_handle(gen),
                    },
                );
                self.schedule(self.now + step_ms, Ev::TaskStep { exec, inc, id, gen });
            }
            ExecutorOutput::StopTask { id } => {
                if self.execs[exec].tasks.remove(&id).is_some() {
                    // The runner ends the task's whole process group.
                    self.release(ResKey::Task(exec, id.clone()));
                    self.stopped_tasks += 1;
                    self.bump("task stopped");
                    let delay = if self.rng.chance(self.cfg.faults.stop_slow) {
                        self.rng.range(11_000, 30_000)
                    } else {
                        self.rng.range(10, 2_000)
                    };
                    self.log(|| format!("exec{exec} stops {id} (reports in {delay} ms)"));
                    self.schedule(
                        self.now + delay,
                        Ev::ExecIn {
                            exec,
                            inc,
                            input: ExecutorInput::TaskFinished {
                                id,
                                result: Err(TaskFailure::Stopped),
                            },
                        },
                    );
                }
            }
            ExecutorOutput::CaptureSnapshot {
                id, snapshot_id, ..
            } => {
                let Some(files) = self.execs[exec].work.get(&id).cloned() else {
                    self.violate(format!("exec{exec} captures {id} without a work dir"));
                    return;
                };
                if self.rng.chance(self.cfg.faults.capture_fail) {
                    self.bump("capture failed");
                    let e = ErrorInfo::new(ErrorCode::TaskFailed, "sim: capture");
                    self.exec_local(
                        exec,
                        inc,
                        ExecutorInput::SnapshotCaptured { id, result: Err(e) },
                    );
                    return;
                }
                let i = self.idx(&id);
                self.dels[i].captured.push(files.clone());
                self.acquire(
                    ResKey::Captured(exec, inc, id.clone(), snapshot_id.clone()),
                    u64::MAX,
                );
                let body = encode_files(&files);
                let snap = CapturedSnapshot {
                    checksum: Some(checksum(&body)),
                    data: ArchiveData {
                        base64: Some(body),
                        url: None,
                    },
                    metadata: BTreeMap::from([(
                        "fileCount".to_owned(),
                        serde_json::Value::from(files.len()),
                    )]),
                };
                self.exec_local(
                    exec,
                    inc,
                    ExecutorInput::SnapshotCaptured {
                        id,
                        result: Ok(snap),
                    },
                );
            }
            ExecutorOutput::Release { id, work_dir, .. } => {
                if self.execs[exec].tasks.contains_key(&id)
                    || self.execs[exec].orphans.contains_key(&id)
                {
                    self.violate(format!("exec{exec} releases {id} while its task runs"));
                }
                if work_dir != format!("/sim/work/{id}") {
                    self.violate(format!("exec{exec} releases {work_dir}, not its work dir"));
                }
                self.execs[exec].work.remove(&id);
                let key = ResKey::WorkDir(exec, id.clone());
                let idempotent = self.execs[exec].restored_unreleased.remove(&id);
                if !idempotent || self.held.contains_key(&key) {
                    self.release(key);
                }
                self.exec_local(exec, inc, ExecutorInput::Released { id, result: Ok(()) });
            }
            ExecutorOutput::RemoveEmptyWorkDir { id, .. } => {
                // An allocation the crash interrupted: the directory exists only if the
                // allocation had run (and it is empty: setup never started).
                self.bump("interrupted allocation cleaned up");
                if self.held.contains_key(&ResKey::WorkDir(exec, id.clone())) {
                    if self.execs[exec]
                        .work
                        .get(&id)
                        .is_some_and(|f| !f.is_empty())
                    {
                        self.violate(format!(
                            "exec{exec}: {id} was set up but is removed as empty"
                        ));
                    }
                    self.execs[exec].work.remove(&id);
                    self.release(ResKey::WorkDir(exec, id.clone()));
                }
                self.exec_local(exec, inc, ExecutorInput::Released { id, result: Ok(()) });
            }
            ExecutorOutput::DropSnapshot { id, snapshot_id } => {
                self.release(ResKey::Captured(exec, inc, id, snapshot_id));
            }
            ExecutorOutput::EndTask { id, handle } => {
                // The restarted executor ends what its journal recorded.
                match self.execs[exec].orphans.remove(&id) {
                    Some(t) if task_handle(t.gen) == handle => {
                        self.bump("orphaned task ended after a restart");
                        self.log(|| format!("exec{exec} ends orphaned task {id}"));
                        self.release(ResKey::Task(exec, id.clone()));
                    }
                    Some(t) => {
                        self.violate(format!(
                            "exec{exec} ends {id} with a handle of another task"
                        ));
                        self.execs[exec].orphans.insert(id.clone(), t);
                    }
                    None => self.bump("recorded task already gone"),
                }
                self.exec_local(
                    exec,
                    inc,
                    ExecutorInput::TaskFinished {
                        id,
                        result: Err(TaskFailure::Stopped),
                    },
                );
            }
            ExecutorOutput::Event(ev) => self.on_exec_event(exec, ev),
        }
    }

    fn on_exec_event(&mut self, exec: usize, ev: ExecutorEvent) {
        // The journal, as the driver writes it.
        let recorded = match &ev {
            ExecutorEvent::InviteReceived { id, .. }
            | ExecutorEvent::StateChanged { id, .. }
            | ExecutorEvent::RecordChanged { id }
            | ExecutorEvent::Ended { id, .. }
            | ExecutorEvent::Forgotten { id }
            | ExecutorEvent::PeerMisbehaved { id, .. } => id.clone(),
        };
        self.persist_exec(exec, &recorded);
        match ev {
            ExecutorEvent::StateChanged { id, from, to } => {
                self.log(|| format!("exec{exec} assignment {id}: {from} -> {to}"));
                let Some(a) = self.execs[exec].assigns.get_mut(&id) else {
                    self.violate(format!("exec{exec}: transition of unknown assignment {id}"));
                    return;
                };
                let last = a.state;
                a.state = to;
                let legal = AssignmentEvent::ALL
                    .iter()
                    .any(|e| e.target(from) == Some(to));
                if last != from {
                    self.violate(format!(
                        "exec{exec} {id}: transition from {from} but the last state was {last}"
                    ));
                } else if !legal {
                    self.violate(format!(
                        "exec{exec} {id}: illegal transition {from} -> {to}"
                    ));
                }
            }
            ExecutorEvent::Ended { id, state, error } => {
                self.log(|| format!("exec{exec} assignment {id} ended {state}"));
                let Some(a) = self.execs[exec].assigns.get_mut(&id) else {
                    self.violate(format!("exec{exec}: unknown assignment {id} ended"));
                    return;
                };
                let twice = a.ended;
                a.ended = true;
                let last = a.state;
                if twice {
                    self.violate(format!("exec{exec}: assignment {id} ended twice"));
                }
                if last != state || !state.is_terminal() {
                    self.violate(format!(
                        "exec{exec}: assignment {id} ended {state} but its state is {last}"
                    ));
                }
                self.bump(match (state, error.as_ref().map(|e| &e.code)) {
                    (AssignmentState::Completed, _) => "assignment completed",
                    (_, Some(ErrorCode::Expired)) => "assignment expired",
                    (_, Some(ErrorCode::StartExpired)) => "assignment start expired",
                    (_, Some(ErrorCode::Cancelled)) => "assignment cancelled",
                    (_, Some(ErrorCode::TaskFailed)) => "assignment task failed",
                    _ => "assignment other error",
                });
                self.exec_endings
                    .push((exec, id, state, error.map(|e| e.code)));
            }
            ExecutorEvent::PeerMisbehaved { .. } => self.bump("executor saw a misbehaving peer"),
            ExecutorEvent::InviteReceived { .. }
            | ExecutorEvent::Forgotten { .. }
            | ExecutorEvent::RecordChanged { .. } => {}
        }
    }

    // ------------------------------------------------------------------------------------
    // Invariants

    fn check_step(&mut self) {
        let now = self.now;
        let mut v = Vec::new();
        for d in &self.dels {
            if d.ended.is_none() && now > d.deadline {
                v.push(format!(
                    "{} has not ended {} ms after ttl + grace (state {})",
                    d.id,
                    now - d.deadline,
                    d.state
                ));
            }
            let untouched = d.ws == d.original;
            if d.access == AccessMode::Ro && !untouched {
                v.push(format!("read-only {} was modified", d.id));
            }
            if !untouched && !d.captured.contains(&d.ws) {
                v.push(format!(
                    "workspace of {} is neither original nor a captured executor state",
                    d.id
                ));
            }
        }
        for (k, deadline) in &self.held {
            if now > *deadline {
                v.push(format!(
                    "{k:?} not released {} ms after its deadline",
                    now - deadline
                ));
            }
        }
        for (i, e) in self.execs.iter().enumerate() {
            self.peak_tasks = self.peak_tasks.max(e.tasks.len());
            if e.tasks.len() > self.cfg.max_concurrent {
                v.push(format!(
                    "exec{i} runs {} tasks, limit {}",
                    e.tasks.len(),
                    self.cfg.max_concurrent
                ));
            }
            if let Some(engine) = &e.engine {
                if engine.live_count() > self.cfg.max_concurrent {
                    v.push(format!(
                        "exec{i} holds {} live assignments, limit {}",
                        engine.live_count(),
                        self.cfg.max_concurrent
                    ));
                }
                if self.cfg.auth.is_some() {
                    // Who may act on each assignment: an intruder never; a caller without a
                    // header only on delegations whose INVITE came without one.
                    if engine.authorize(None, None).is_ok() {
                        v.push(format!("exec{i}: status open without a credential"));
                    }
                    let intruder = Credential::bearer("intruder");
                    for d in &self.dels {
                        if engine.assignment(&d.id).is_none() {
                            continue;
                        }
                        if engine.authorize(Some(&d.id), Some(&intruder)).is_ok() {
                            v.push(format!("exec{i}: a wrong credential may act on {}", d.id));
                        }
                        let anonymous = engine.authorize(Some(&d.id), None).is_ok();
                        if anonymous == self.sends_header(&d.id) {
                            v.push(format!(
                                "exec{i}: {} is {}open without a header (header style: {})",
                                d.id,
                                if anonymous { "" } else { "not " },
                                self.sends_header(&d.id)
                            ));
                        }
                    }
                }
            }
        }
        for m in v {
            self.violate(m);
        }
    }

    fn check_end(&mut self) {
        let mut v = Vec::new();
        for d in &self.dels {
            if d.ended.is_none() {
                v.push(format!("{} never ended (state {})", d.id, d.state));
            }
        }
        // Without faults, a completed rw delegation in auto mode ends with exactly the
        // executor's final state.
        let clean = self.cfg.faults == Faults::default() && self.cfg.actions.is_empty();
        for d in &self.dels {
            let auto_rw = d.mode == SnapshotMode::Auto && d.access == AccessMode::Rw;
            if auto_rw && d.ended == Some(DelegationState::Completed) {
                let got = d.captured.last() == Some(&d.ws) && d.applied == 1;
                if clean && !got {
                    v.push(format!(
                        "{} completed without a fault but its workspace is not the executor's final state",
                        d.id
                    ));
                }
                if !got && d.apply_failed == 0 {
                    let k = "completed auto, result not applied";
                    *self.stats.entry(k).or_insert(0) += 1;
                }
            }
        }
        for k in self.held.keys() {
            v.push(format!("leak: {k:?} never released"));
        }
        if !self.store.is_empty() {
            v.push(format!("{} stored snapshots left", self.store.len()));
        }
        if !self.calls.is_empty() {
            v.push(format!("{} HTTP calls never answered", self.calls.len()));
        }
        if !self.streams.is_empty() {
            v.push(format!("{} event streams left open", self.streams.len()));
        }
        if !self.delegator.list().is_empty() {
            v.push(format!(
                "delegator still holds {} delegations after retention",
                self.delegator.list().len()
            ));
        }
        for (i, e) in self.execs.iter().enumerate() {
            if !e.reqs.is_empty() {
                v.push(format!("exec{i} never answered {} requests", e.reqs.len()));
            }
            if !e.tasks.is_empty() {
                v.push(format!("exec{i} still runs {} tasks", e.tasks.len()));
            }
            if !e.orphans.is_empty() {
                v.push(format!(
                    "exec{i}: {} orphaned tasks were never ended",
                    e.orphans.len()
                ));
            }
            if let Some(engine) = &e.engine {
                let s = engine.status();
                if s.pending + s.active + s.completed != 0 || engine.live_count() != 0 {
                    v.push(format!(
                        "exec{i} still holds assignments after retention: {s:?}"
                    ));
                }
            }
            for (id, a) in &e.assigns {
                if a.state.is_terminal() && !a.ended {
                    v.push(format!(
                        "exec{i}: assignment {id} reached {} but never ended",
                        a.state
                    ));
                }
            }
        }
        for m in v {
            self.violate(m);
        }
    }
}

fn response_summary(r: &Response) -> String {
    match r {
        Response::Accept(..) => "ACCEPT".into(),
        Response::Error {
            message, status, ..
        } => {
            format!("ERROR {} ({status})", message.error.code.as_str())
        }
        Response::Ok => "ok".into(),
        Response::Cancelled => "cancelled".into(),
        Response::Result(b) => format!("result {}", b.status.as_str()),
    }
}

/// Used by scenario tests: how long a spec's task runs.
pub fn task_duration(steps: u32, step_ms: u64) -> Duration {
    Duration::from_millis(u64::from(steps) * step_ms)
}
