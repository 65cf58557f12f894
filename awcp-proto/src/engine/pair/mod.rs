//! Both engines in memory, talking to each other (quinn-proto's `Pair`): a [`Delegator`] and
//! an [`Executor`] whose outputs are executed by a tiny in-memory world. Every message, reply,
//! result body and SSE event crosses as JSON (encoded by one side's encoder, decoded by the
//! other side's decoder), exactly as on the wire; transports and tasks succeed at once unless a
//! test says otherwise. Time moves only when [`Pair::advance`] is called.
//!
//! Used by the unit tests (transcripts, the [`Scenario`](super::scenario::Scenario) builder) and by the engine benchmark
//! (`benches/engines.rs`, feature `_internal-pair`). **Not a stable API.**

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use crate::engine::delegator::{
    DelegateRequest, Delegator, DelegatorConfig, DelegatorEvent, DelegatorInput, DelegatorOutput,
    Outbound,
};
use crate::engine::executor::{
    Executor, ExecutorConfig, ExecutorEvent, ExecutorInput, ExecutorOutput, Request,
    SnapshotDelivery, TaskFailure, WorkspaceLayout,
};
use crate::engine::WorkspaceStats;
use crate::engine::{CapturedSnapshot, Journaling, RequestId, SnapshotMode, StreamId, TaskOutcome};
use crate::id::{DelegationId, ResourceName};
use crate::state::{AssignmentState, DelegationState};
use crate::time::Timestamp;
use crate::wire::{
    AccessMode, ArchiveData, ArchiveHandle, Dialect, Resource, TaskSpec, TransportHandle,
    TransportKind,
};

mod delegator_side;
mod executor_side;

/// The executor's URL as the delegator knows it.
pub const PEER: &str = "http://executor.invalid/awcp";

/// The origin the delegator uses to reach the executor at [`PEER`].
const ORIGIN: &str = "http://executor.invalid";

/// When the pair starts.
pub const T0: Timestamp = Timestamp::from_unix_millis(1_750_000_000_000);

/// An empty ZIP (end-of-central-directory record only), base64.
const EMPTY_ZIP: &str = "UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA==";

/// What the in-memory executor's task does when run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskScript {
    /// Succeeds at once.
    Succeed,
    /// Fails at once with this text.
    Fail(String),
    /// Keeps running until stopped.
    Hang,
}

/// Two engines and the wire between them.
#[derive(Debug)]
pub struct Pair {
    /// Virtual time.
    pub now: Timestamp,
    /// The delegator engine.
    pub delegator: Delegator,
    /// The executor engine.
    pub executor: Executor,
    /// What the next task does.
    pub task: TaskScript,
    /// Drop every request the delegator sends (the executor is unreachable).
    pub unreachable: bool,
    /// Record a transcript (`d>`/`e>` output kinds) in [`Pair::transcript`].
    pub record: bool,
    /// The output kinds both sides produced, in order (when `record`).
    pub transcript: Vec<String>,
    /// Delegator events, in order.
    pub delegator_events: Vec<DelegatorEvent>,
    /// Executor events, in order.
    pub executor_events: Vec<ExecutorEvent>,
    /// Inputs for the executor, delivered by [`Pair::drive`].
    to_executor: VecDeque<ExecutorInput>,
    /// Inputs for the delegator, delivered by [`Pair::drive`].
    to_delegator: VecDeque<DelegatorInput>,
    /// Requests in flight: what the delegator asked, for routing the answer.
    requests: BTreeMap<RequestId, (DelegationId, Asked)>,
    /// Open SSE streams.
    streams: BTreeMap<StreamId, DelegationId>,
    next_handle: u64,
    /// How each snapshot the executor captured was to be delivered, in order.
    pub captures: Vec<SnapshotDelivery>,
    /// For each snapshot the delegator stored: whether from its storage result object.
    pub stored_from: Vec<crate::engine::delegator::ResultSource>,
    /// When a storage handle's URLs expire (`None`: at the lease's end).
    pub storage_urls_expire_at: Option<Timestamp>,
    /// The executor's journal as a driver following [`ExecutorOutput::journaling`] keeps it
    /// (when `record`).
    pub executor_journal: JournalModel,
}

/// A journal kept by the write-ahead rule ([`Journaling`]): what was written for each
/// assignment, what a power loss would leave (`durable`), and how many syncs it took.
#[derive(Clone, Debug, Default)]
pub struct JournalModel {
    /// The record last written, per assignment.
    pub written: BTreeMap<DelegationId, String>,
    /// The record last made durable, per assignment.
    pub durable: BTreeMap<DelegationId, String>,
    /// Written since their last sync.
    pub unsynced: BTreeSet<DelegationId>,
    /// Syncs so far (a new record file, written durably, is not counted).
    pub syncs: usize,
    /// Outputs executed after a sync found a record that differs from the engine's: each
    /// is `(output kind, assignment)`; empty when every change was journalled in time.
    pub stale: Vec<(String, DelegationId)>,
}

#[derive(Clone, Copy, Debug)]
enum Asked {
    Post(Outbound),
    Result,
}

impl Pair {
    /// Two engines with these configurations, at [`T0`].
    pub fn new(delegator: DelegatorConfig, executor: ExecutorConfig) -> Pair {
        Pair {
            now: T0,
            delegator: Delegator::new(delegator),
            executor: Executor::new(executor),
            task: TaskScript::Succeed,
            unreachable: false,
            record: false,
            transcript: Vec::new(),
            delegator_events: Vec::new(),
            executor_events: Vec::new(),
            to_executor: VecDeque::new(),
            to_delegator: VecDeque::new(),
            requests: BTreeMap::new(),
            streams: BTreeMap::new(),
            next_handle: 1,
            captures: Vec::new(),
            stored_from: Vec::new(),
            storage_urls_expire_at: None,
            executor_journal: JournalModel::default(),
        }
    }

    /// Two engines with default configurations.
    pub fn default_pair() -> Pair {
        Pair::new(DelegatorConfig::default(), ExecutorConfig::default())
    }

    /// A plain delegation request: one `rw` resource, archive transport, auto-apply.
    pub fn request(id: &DelegationId, dialect: Dialect) -> DelegateRequest {
        DelegateRequest {
            id: id.clone(),
            peer: PEER.to_owned(),
            dialect,
            task: TaskSpec {
                description: "fix the bug".into(),
                prompt: "make the tests pass".into(),
            },
            ttl_seconds: 600,
            access_mode: AccessMode::Rw,
            resources: vec![Resource {
                name: ResourceName::new("workspace").unwrap_or_else(|_| unreachable!()),
                kind: "fs".into(),
                mode: AccessMode::Rw,
            }],
            transport: TransportKind::Archive,
            snapshot_mode: SnapshotMode::Auto,
            auth: None,
            allow_sensitive: false,
            keep_open: false,
        }
    }

    /// Starts a delegation (see [`Pair::request`]).
    pub fn delegate(&mut self, id: &DelegationId, dialect: Dialect) {
        let r = Pair::request(id, dialect);
        if let Err(e) = self.delegator.delegate(self.now, r) {
            panic!("delegate: {e}");
        }
    }

    fn handle_id(&mut self) -> u64 {
        self.next_handle += 1;
        self.next_handle
    }

    /// Executes outputs and delivers inputs until both engines are idle at the current time.
    /// Returns how many outputs were executed.
    pub fn drive(&mut self) -> usize {
        let mut n = 0;
        loop {
            let mut progressed = false;
            while let Some(out) = self.delegator.poll_output() {
                n += 1;
                progressed = true;
                self.on_delegator_output(out);
            }
            while let Some(out) = self.executor.poll_output() {
                n += 1;
                progressed = true;
                self.on_executor_output(out);
            }
            if let Some(i) = self.to_executor.pop_front() {
                progressed = true;
                let _ = self.executor.handle(self.now, i);
            }
            if let Some(i) = self.to_delegator.pop_front() {
                progressed = true;
                let _ = self.delegator.handle(self.now, i);
            }
            if !progressed {
                return n;
            }
        }
    }

    /// Moves time to the earlier of both engines' next deadlines (never backwards) and fires
    /// what is due, then drives. `false` when neither engine waits for anything.
    pub fn advance(&mut self) -> bool {
        let delegator_next = self.delegator.poll_timeout().map(|(at, _)| at);
        let next = match (
            delegator_next,
            self.executor.poll_timeout().map(|(at, _)| at),
        ) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => return false,
        };
        if next > self.now {
            self.now = next;
        }
        self.delegator.handle_timeout(self.now);
        self.executor.handle_timeout(self.now);
        self.drive();
        true
    }

    /// Moves time forward by `d`, firing everything due on the way.
    pub fn advance_by(&mut self, d: Duration) {
        let until = self.now.saturating_add(d);
        loop {
            let delegator_next = self.delegator.poll_timeout().map(|(at, _)| at);
            let next = [
                delegator_next,
                self.executor.poll_timeout().map(|(at, _)| at),
            ]
            .into_iter()
            .flatten()
            .min();
            match next {
                Some(t) if t <= until => {
                    self.now = self.now.max(t);
                    self.delegator.handle_timeout(self.now);
                    self.executor.handle_timeout(self.now);
                    self.drive();
                }
                Some(_) | None => break,
            }
        }
        self.now = until;
        self.delegator.handle_timeout(self.now);
        self.executor.handle_timeout(self.now);
        self.drive();
    }

    /// Drives, then advances time until neither engine has anything left to do, at most
    /// `max_wakeups` times.
    pub fn run(&mut self, max_wakeups: usize) {
        self.drive();
        for _ in 0..max_wakeups {
            if !self.advance() {
                return;
            }
        }
    }

    /// The executor's spec state of `id`, if it still knows it.
    pub fn assignment_state(&self, id: &DelegationId) -> Option<AssignmentState> {
        self.executor.assignment(id).map(|a| a.state)
    }

    /// The delegator's state of `id`, as its last state change said.
    pub fn delegation_state(&self, id: &DelegationId) -> Option<DelegationState> {
        self.delegator_events.iter().rev().find_map(|e| match e {
            DelegatorEvent::StateChanged { id: i, to, .. } if i == id => Some(*to),
            DelegatorEvent::StateChanged { .. }
            | DelegatorEvent::Progress { .. }
            | DelegatorEvent::Snapshot { .. }
            | DelegatorEvent::Forgotten { .. }
            | DelegatorEvent::PeerMisbehaved { .. }
            | DelegatorEvent::ConnectionLost { .. }
            | DelegatorEvent::Ended { .. } => None,
        })
    }

    /// Records `what()` in the transcript (only built when recording).
    fn note(&mut self, side: &str, what: impl FnOnce() -> String) {
        if self.record {
            let what = what();
            self.transcript.push(format!("{side}> {what}"));
        }
    }

    fn post(&mut self, id: &DelegationId, asked: Outbound, body: Request) {
        if self.unreachable {
            self.to_delegator.push_back(DelegatorInput::Reply {
                id: id.clone(),
                to: asked,
                reply: crate::engine::delegator::Reply::Failed(
                    crate::engine::delegator::RequestFailure::Network("connection refused".into()),
                ),
            });
            return;
        }
        let request = RequestId(self.handle_id());
        self.requests
            .insert(request, (id.clone(), Asked::Post(asked)));
        self.to_executor.push_back(ExecutorInput::Request {
            request,
            credential: None,
            // The delegator reaches the executor at PEER: snapshot URLs start there.
            origin: Some(ORIGIN.to_owned()),
            body,
        });
    }
}
