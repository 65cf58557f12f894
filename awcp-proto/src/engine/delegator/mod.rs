//! The delegator engine: every delegation of one delegator, from admission to cleanup.
//!
//! ## Method groups
//! * **Application calls**: [`Delegator::delegate`], [`Delegator::cancel`],
//!   [`Delegator::apply_snapshot`], [`Delegator::discard_snapshot`].
//! * **Inputs from the driver**: [`Delegator::handle`] with a [`DelegatorInput`] (HTTP replies,
//!   SSE events and stream state, transport results), and [`Delegator::handle_timeout`].
//! * **Outputs**: [`Delegator::poll_output`] (drain until `None` after every call) and
//!   [`Delegator::poll_timeout`].
//! * **Getters**: [`Delegator::get`], [`Delegator::list`].
//!
//! ## Flow (archive)
//! `delegate` → [`DelegatorOutput::ScanWorkspace`] → `ScanCompleted` (admission verdict) →
//! `SendMessage(INVITE)` → `Reply(ACCEPT)` → [`DelegatorOutput::PrepareTransport`] and
//! [`DelegatorOutput::OpenEventStream`] → `TransportPrepared` + `EventStreamOpened` →
//! `SendMessage(START)` → SSE `status` / `snapshot` / `done` → store the snapshot (and, in
//! `auto` mode, apply it from the store) → `SendAck` → [`DelegatorOutput::ReleaseTransport`] →
//! `TransportReleased` → [`DelegatorEvent::Ended`]. Credentials are produced by
//! `PrepareTransport`, which is only emitted after ACCEPT.
//!
//! ## Results are never lost
//! A snapshot is stored locally before anything else happens to it, and the executor is
//! acknowledged (`SendAck`, after which it may forget the result) only once every snapshot is
//! stored (or deliberately discarded by policy). A snapshot whose apply fails stays stored and
//! `pending`, with the reason in [`SnapshotRecord::error`], so it can be applied again or
//! discarded; one that could not be stored is `failed` and the executor is not acknowledged.
//! Applies of one delegation run one at a time, in arrival order. [`DelegationView::outcome`]
//! sums this up for the application (completed, staged, not applied, failed, unreachable).
//!
//! Every terminal path (done, error, cancel, expiry, executor loss) releases what was prepared
//! exactly once and ends with exactly one `Ended` event.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::engine::admission::{
    admission_verdict, AdmissionLimits, NotShipped, NotShippedReason, WorkspaceStats,
};
use crate::engine::timers::{Core, DelegationTimers as _};
use crate::engine::{SnapshotMode, TaskOutcome, UsageError};
use crate::error::{ErrorCode, ErrorInfo};
use crate::id::{DelegationId, SnapshotId};
use crate::state::{DelegationMachine, DelegationState, DelegationTransition};
use crate::time::Timestamp;
use crate::wire::{
    Accept, AccessMode, ActiveLease, ArchiveData, Auth, Dialect, DoneEvent, ErrorMessage,
    ExecutorConstraints, Feature, Invite, LeaseRequest, Message, Resource, SnapshotEvent, Start,
    TaskEvent, TaskEventKind, TaskSpec, TransportHandle, TransportKind,
};

mod archive_grants;
mod config;
mod delegation;
mod event_stream;
mod failures;
mod handshake;
mod io;
mod lease;
mod record;
mod restore;
mod rounds;
mod snapshots;
pub use snapshots::ApplyPlan;
#[cfg(test)]
mod restart_tests;
#[cfg(test)]
mod rounds_tests;
mod teardown;
#[cfg(test)]
mod tests;
mod view;

/// Re-exported from [`crate::wire`], where it lives beside the wire format.
pub use crate::wire::ArchiveLayout;
use archive_grants::ArchiveGrants;
pub use archive_grants::{ArchiveDelivery, ArchiveUrlRefused, ObjectUse, RepositoryUse};
pub use config::{DelegateRequest, DelegatorConfig};
use delegation::*;
pub use failures::{PrepareFailure, ScanFailure, StoreFailure};
pub use io::{
    DelegatorEvent, DelegatorInput, DelegatorOutput, EventProblem, FetchedResult, Outbound,
    PeerMisbehavior, Reply, RequestFailure, ResultSource,
};
pub use lease::Timer;
pub use record::{
    DelegationRecord, Journaling, NotShippedEntry, OutcomeEntry, RecordError, SnapshotEntry,
    SourceEntry, StatusEntry, RECORD_VERSION,
};
pub use restore::ApplyRecovery;
pub use view::{DelegationView, Outcome, SnapshotRecord, SnapshotStatus};

/// The delegator engine. See the [module docs](self).
#[derive(Debug)]
pub struct Delegator {
    config: DelegatorConfig,
    delegations: BTreeMap<DelegationId, Box<Delegation>>,
    core: Core<Timer, DelegatorOutput>,
    /// One-time archive URLs (URL delivery).
    archive_grants: ArchiveGrants,
}

/// The id of the result archive an [S] executor sends on `done`.
fn result_snapshot_id() -> SnapshotId {
    SnapshotId::of_done_result()
}

impl Delegator {
    /// A delegator with no delegations.
    pub fn new(config: DelegatorConfig) -> Self {
        Delegator {
            config,
            delegations: BTreeMap::new(),
            core: Core::default(),
            archive_grants: ArchiveGrants::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DelegatorConfig {
        &self.config
    }

    /// Whether `id` is settled: ended, with no snapshot stored, in flight or being applied, so
    /// nothing of it can change again but its being forgotten at the end of its retention.
    /// A driver may then move its record out of what it reads at start-up (a history it
    /// restores on demand with [`Delegator::restore_history`]): start-up then costs what is
    /// live, not every delegation of the retention period. Asked once the outputs that led
    /// here were executed (a settled delegation's last deletes and apply proof are done).
    pub fn is_settled(&self, id: &DelegationId) -> bool {
        self.delegations.get(id).is_some_and(|d| {
            d.phase.is_ended()
                && d.stored.is_empty()
                && matches!(d.applies, Applies::Idle)
                && d.snapshots
                    .iter()
                    .all(|s| s.status != SnapshotStatus::InFlight)
        })
    }

    /// Of the delegations `found` holds something of outside the engine (after a restart:
    /// a repository, a journalled storage object), those whose leftovers may go: the ones
    /// this delegator does not know, or that ended. A live delegation keeps what it has.
    pub fn leftovers_to_release<I: IntoIterator<Item = DelegationId>>(
        &self,
        found: I,
    ) -> Vec<DelegationId> {
        found
            .into_iter()
            .filter(|id| self.delegations.get(id).is_none_or(|d| d.phase.is_ended()))
            .collect()
    }

    /// Of the delegations whose `git` repositories `found` lists (after a restart), those
    /// whose repository may go: [`Delegator::leftovers_to_release`], except a delegation
    /// whose result waits for review ([`Delegator::results_await_review`]): its repository
    /// (which names the remote of the result branch) stays until the result is applied or
    /// discarded.
    pub fn repositories_to_release<I: IntoIterator<Item = DelegationId>>(
        &self,
        found: I,
    ) -> Vec<DelegationId> {
        let mut over = self.leftovers_to_release(found);
        over.retain(|id| !self.results_await_review(id));
        over
    }

    /// Whether `id` is known and has a result that is not settled (waiting for review:
    /// staged, not applied on a conflict, not stored): what holds it outside this delegator
    /// (a `git` result branch) stays, even after the delegation ended.
    pub fn results_await_review(&self, id: &DelegationId) -> bool {
        self.delegations.contains_key(id) && !self.results_settled(id)
    }

    /// Whether the results of `id` are all settled, so that what holds them outside this
    /// delegator (a `git` delegation's branch on the remote) may go at release: each was
    /// applied or discarded. A result that waits for review (staged, or whose apply failed,
    /// e.g. on a conflict with local edits) or that could not be stored keeps it. Unknown
    /// delegations: `false` (nothing is known to be settled).
    pub fn results_settled(&self, id: &DelegationId) -> bool {
        self.delegations.get(id).is_some_and(|d| {
            d.snapshots.iter().all(|s| {
                matches!(
                    s.status,
                    SnapshotStatus::Applied | SnapshotStatus::Discarded
                )
            })
        })
    }

    /// How `id`'s workspace is laid out at the root of its archives and results: what an
    /// apply of its snapshots is told ([`DelegatorOutput::ApplySnapshot`]'s `layout`), and
    /// how the driver maps a result's paths onto the workspace before (a `git` result's
    /// local edits are merged when it is stored). `None`: unknown delegation.
    pub fn layout(&self, id: &DelegationId) -> Option<ArchiveLayout> {
        self.delegations.get(id).map(|d| d.layout())
    }

    /// A view of one delegation.
    pub fn get(&self, id: &DelegationId) -> Option<DelegationView> {
        self.delegations.get(id).map(|d| DelegationView {
            request: d.req.clone(),
            state: d.state(),
            created_at: d.created_at,
            updated_at: d.updated_at,
            expires_at: d.expires_at,
            access_mode: d.access,
            executor_work_dir: d.accept.as_ref().map(|a| a.work_dir.clone()),
            executor_constraints: d.accept.as_ref().and_then(|a| a.constraints),
            snapshots: d.snapshots.iter().cloned().collect(),
            result: d.result.clone(),
            error: d.error.clone(),
            result_error: d.result_error.clone(),
            ended: d.phase.is_ended(),
            warnings: d.warnings.clone(),
            not_shipped: d.not_shipped.clone(),
            not_shipped_count: d.not_shipped_count,
            last_progress: d.last_progress.clone(),
            awaiting_snapshot: d.phase.awaiting().cloned(),
            round: d.round,
        })
    }

    /// The credential a request to `url` on behalf of delegation `id` presents: the
    /// delegation's credential when `url` is on the executor's origin (INVITE, START, events,
    /// result, snapshot downloads, ack, cancel, ERROR), and nothing for any other origin (a
    /// credential is never handed to a third party, e.g. a storage URL the executor names).
    /// The binding turns it into a header
    /// ([`http_binding::credential_header`](crate::http_binding::credential_header)).
    pub fn credential_for(&self, id: &DelegationId, url: &str) -> Option<&Auth> {
        let d = self.delegations.get(id)?;
        let auth = d.req.auth.as_ref()?;
        crate::origin::same_origin(&d.req.peer, url).then_some(auth)
    }

    /// Ids and states of every delegation, in id order.
    pub fn list(&self) -> Vec<(DelegationId, DelegationState)> {
        self.delegations
            .iter()
            .map(|(id, d)| (id.clone(), d.state()))
            .collect()
    }

    /// Feeds one input. Unknown delegations are a [`UsageError`] (e.g. a late reply after it
    /// was forgotten) and change nothing.
    pub fn handle(&mut self, now: Timestamp, input: DelegatorInput) -> Result<(), UsageError> {
        self.tick(now);
        match input {
            DelegatorInput::ScanCompleted { id, result } => self.on_scan(now, &id, result),
            DelegatorInput::Reply { id, to, reply } => self.on_reply(now, &id, to, reply),
            DelegatorInput::TransportPrepared {
                id,
                result,
                archive_token,
            } => self.on_prepared(now, &id, result.map(|h| *h), archive_token),
            DelegatorInput::EventStreamOpened { id } => {
                let d = self.get_mut(&id)?;
                if let Some((stream @ Stream::Opening, _)) = d.phase.stream_mut() {
                    *stream = Stream::Open;
                }
                self.maybe_send_start(now, &id);
                Ok(())
            }
            DelegatorInput::EventStreamClosed { id, reason } => {
                self.on_stream_closed(now, &id, reason)
            }
            DelegatorInput::TaskEvent { event, event_id } => {
                self.on_task_event(now, *event, event_id)
            }
            DelegatorInput::UnusableEvent { id, problem } => {
                self.get_mut(&id)?;
                self.peer_misbehaved(&id, PeerMisbehavior::UnusableEvent { problem });
                Ok(())
            }
            DelegatorInput::ResultFetched { id, result } => self.on_result(now, &id, result),
            DelegatorInput::SnapshotApplied {
                id,
                snapshot_id,
                result,
                left_out,
                changed,
            } => self.on_applied(now, &id, &snapshot_id, result, left_out, changed),
            DelegatorInput::SnapshotStored {
                id,
                snapshot_id,
                result,
            } => self.on_stored(now, &id, &snapshot_id, result),
            DelegatorInput::TransportReleased { id, warnings } => {
                let d = self.get_mut(&id)?;
                d.warnings.extend(warnings);
                if let Phase::Finishing(f) = &mut d.phase {
                    if f.transport == Release::Releasing {
                        f.transport = Release::Free;
                    }
                }
                self.maybe_end(now, &id);
                Ok(())
            }
        }
    }

    /// Fires every timer due at `now`. Early calls do nothing.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.tick(now);
        while let Some((id, timer)) = self.core.timers.pop_due(now) {
            self.on_timer(now, &id, timer);
        }
    }

    /// The next output, if any. Drain until `None` after every call.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<DelegatorOutput> {
        self.core.poll_output()
    }

    /// When to call [`Delegator::handle_timeout`] next, and why ([`Timer`]). While outputs are
    /// queued this is the last `now` seen ("due now", [`Timer::Output`]).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<(Timestamp, Timer)> {
        crate::engine::timers::next_wake(&self.core)
    }

    fn tick(&mut self, now: Timestamp) {
        self.core.tick(now);
    }

    fn get_mut(&mut self, id: &DelegationId) -> Result<&mut Delegation, UsageError> {
        self.delegations
            .get_mut(id)
            .map(|d| &mut **d)
            .ok_or_else(|| UsageError::UnknownDelegation(id.clone()))
    }

    fn state(&self, id: &DelegationId) -> Option<DelegationState> {
        self.delegations.get(id).map(|d| d.state())
    }

    /// The only place a delegation's spec state changes (through the spec table). A terminal
    /// transition moves the delegation into [`Phase::Finishing`]; the other phase changes are
    /// made by the caller before the transition they go with.
    fn transition(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        event: DelegationTransition,
        error: Option<ErrorInfo>,
    ) -> bool {
        let Some(d) = self.delegations.get_mut(id) else {
            return false;
        };
        match d.machine.apply(event) {
            Ok((from, to)) => {
                d.updated_at = now;
                if to.is_terminal() {
                    let phase =
                        std::mem::replace(&mut d.phase, Phase::Inviting { invited_at: None });
                    d.phase = phase.finish();
                    if d.error.is_none() {
                        d.error = error;
                    }
                    if d.asking_after_lease && to == DelegationState::Completed {
                        d.warnings.push(
                            "the lease ended while the delegator was down; the executor had \
                             finished the task within it, and its result was taken"
                                .into(),
                        );
                    }
                }
                debug_assert!(d.phase.fits(to), "phase {:?} in state {to}", d.phase);
                tracing::debug!(delegation = %id, %from, %to, "state changed");
                self.core
                    .outputs
                    .push_back(DelegatorOutput::Event(DelegatorEvent::StateChanged {
                        id: id.clone(),
                        from,
                        to,
                    }));
                if to.is_terminal() {
                    self.core.timers.cancel(&(id.clone(), Timer::Lease));
                    self.core.timers.cancel(&(id.clone(), Timer::SetupGrace));
                    self.core.timers.cancel(&(id.clone(), Timer::Reconnect));
                    self.core.timers.cancel(&(id.clone(), Timer::Idle));
                }
                true
            }
            Err(e) => {
                tracing::debug!(delegation = %id, "ignored: {e}");
                if event.is_received() {
                    let state = d.machine.state();
                    self.peer_misbehaved(
                        id,
                        PeerMisbehavior::IllegalTransition {
                            state,
                            transition: event,
                        },
                    );
                }
                false
            }
        }
    }

    /// Reports that the executor broke the protocol (the caller handles the consequence).
    fn peer_misbehaved(&mut self, id: &DelegationId, reason: PeerMisbehavior) {
        tracing::info!(delegation = %id, %reason, "the executor misbehaved");
        self.core
            .outputs
            .push_back(DelegatorOutput::Event(DelegatorEvent::PeerMisbehaved {
                id: id.clone(),
                reason,
            }));
    }

    /// Sends ERROR to the executor: we abandon an accepted (or possibly accepted) delegation.
    fn send_error(&mut self, id: &DelegationId, error: ErrorInfo) {
        let Some(d) = self.delegations.get(id) else {
            return;
        };
        self.core.outputs.push_back(DelegatorOutput::SendMessage {
            id: id.clone(),
            to: Outbound::Error,
            peer: d.peer.clone(),
            message: Box::new(Message::Error(ErrorMessage {
                delegation_id: id.clone(),
                error,
            })),
            dialect: d.req.dialect,
        });
    }
}
