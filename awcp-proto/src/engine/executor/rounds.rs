//! Multi-round delegations (WIRE.md §17): a round that ends sends `round_done` instead of
//! `done` and leaves the assignment `idle` with its work directory; CONTINUE runs the next
//! round there, CLOSE (or the idle time running out) completes and releases it.
//!
//! Rounds happen only where they were agreed: the `multi-round` extension of INVITE and
//! ACCEPT, or, with [`ExecutorConfig::reference_rounds`](super::ExecutorConfig), for a
//! delegator that negotiates nothing (the reference's `dev` branch, which expects rounds from
//! every executor). A live transport (sshfs) never has rounds.

use std::sync::Arc;

use crate::engine::{CapturedSnapshot, RequestId};
use crate::error::{ErrorCode, ErrorInfo};
use crate::id::{DelegationId, SnapshotId};
use crate::state::{AssignmentState, AssignmentTransition};
use crate::time::Timestamp;
use crate::wire::{
    Close, Continue, Dialect, DoneEvent, RoundDoneEvent, SnapshotEvent, StatusEvent, TaskEvent,
    TaskEventKind, TaskStatus,
};

use super::assignment::{ExecutorTimer as Timer, Phase};
use super::{Executor, ExecutorOutput, Response};

impl Executor {
    /// The end of a round of an assignment with rounds: its snapshot (if any), then
    /// `round_done`; `idle` until CONTINUE, CLOSE or the idle timeout.
    pub(super) fn end_round(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        snapshot: Option<(SnapshotId, CapturedSnapshot)>,
    ) {
        let idle_timeout = self.config.idle_timeout;
        let Some(a) = self.assignments.get_mut(id) else {
            return;
        };
        let (summary, highlights) = a
            .outcome
            .as_ref()
            .map(|o| (o.summary.clone(), o.highlights.clone()))
            .unwrap_or_default();
        let round = a.round;
        let task = a.round_task.take().unwrap_or_else(|| a.invite.task.clone());
        if a.earlier.len() >= super::assignment::MAX_EARLIER_ROUNDS {
            a.earlier.pop_front();
        }
        a.earlier.push_back(crate::engine::EarlierRound {
            round,
            task,
            summary: summary.clone(),
        });
        // The previous round's snapshot is replaced by this one (each is the whole result).
        let previous = a
            .snapshot
            .as_deref()
            .and_then(super::assignment::snapshot_of)
            .map(|s| s.snapshot_id.clone());
        self.transition(now, id, AssignmentTransition::RoundComplete);
        self.core.timers.cancel(&(id.clone(), Timer::Lease));
        self.core
            .timers
            .set((id.clone(), Timer::Idle), now.saturating_add(idle_timeout));
        let mut snapshot_ids = Vec::new();
        if let Some((sid, snap)) = snapshot {
            if let Some(old) = previous.filter(|old| *old != sid) {
                self.core.outputs.push_back(ExecutorOutput::DropSnapshot {
                    id: id.clone(),
                    snapshot_id: old,
                });
            }
            snapshot_ids.push(sid.clone());
            self.broadcast(
                now,
                id,
                TaskEventKind::Snapshot(SnapshotEvent {
                    snapshot_id: sid,
                    summary: summary.clone(),
                    highlights: highlights.clone(),
                    data: snap.data,
                    checksum: snap.checksum,
                    recommended: Some(true),
                    metadata: snap.metadata,
                }),
            );
        }
        let recommended_snapshot_id = snapshot_ids.first().cloned();
        self.broadcast(
            now,
            id,
            TaskEventKind::RoundDone(RoundDoneEvent {
                round,
                summary,
                highlights,
                snapshot_ids,
                recommended_snapshot_id,
            }),
        );
    }

    /// CONTINUE: the next round in the same work directory, under the lease it carries
    /// (capped at this executor's longest lease; without one, a lease as long as the first).
    pub(super) fn on_continue(
        &mut self,
        now: Timestamp,
        request: RequestId,
        c: Continue,
        dialect: Dialect,
    ) {
        let id = c.delegation_id.clone();
        let Some(a) = self.assignments.get_mut(&id) else {
            return self.respond_unknown(request, &id, dialect);
        };
        let state = a.state();
        if c.round <= a.round && matches!(state, AssignmentState::Active | AssignmentState::Idle) {
            // A repeated CONTINUE (retry, duplicate delivery) of a round that runs or ran:
            // nothing starts again.
            return self.respond(request, Response::Ok);
        }
        let ready = state == AssignmentState::Idle && matches!(a.phase, Phase::Idle);
        let Some(task_dir) = a.task_dir.clone().filter(|_| ready) else {
            return self.respond_error(
                request,
                &id,
                ErrorInfo::bare(
                    ErrorCode::Declined,
                    format!(
                        "delegation {id} is {state}; CONTINUE needs one whose round ended (idle)"
                    ),
                ),
                dialect,
                409,
            );
        };
        let longest = now.saturating_add(a.ttl);
        let expires_at = c
            .lease
            .map_or(longest, |l| l.expires_at.min(longest))
            .max(now);
        a.round = c.round;
        a.expires_at = Some(expires_at);
        a.outcome = None;
        a.phase = Phase::Running { task: None };
        a.round_task = Some(c.task.clone());
        let round = a.round;
        let access_mode = a.access;
        let earlier: Vec<_> = a.earlier.iter().cloned().collect();
        self.core.timers.cancel(&(id.clone(), Timer::Idle));
        self.transition(now, &id, AssignmentTransition::ReceiveContinue);
        self.core.timers.set((id.clone(), Timer::Lease), expires_at);
        self.respond(request, Response::Ok);
        self.broadcast(
            now,
            &id,
            TaskEventKind::Status(StatusEvent {
                status: TaskStatus::Running,
                message: Some(format!("Round {round} execution started")),
                progress: None,
            }),
        );
        self.core.outputs.push_back(ExecutorOutput::RunTask {
            id,
            task_dir,
            task: c.task,
            expires_at,
            access_mode,
            round,
            earlier,
        });
    }

    /// CLOSE: completes an idle assignment and releases its work directory. A repeated CLOSE
    /// is answered as the first; a running round is cancelled, not closed.
    pub(super) fn on_close(
        &mut self,
        now: Timestamp,
        request: RequestId,
        c: Close,
        dialect: Dialect,
    ) {
        let id = c.delegation_id;
        let Some(a) = self.assignments.get(&id) else {
            return self.respond_unknown(request, &id, dialect);
        };
        match a.state() {
            AssignmentState::Idle => {
                self.respond(request, Response::Ok);
                self.close_idle(now, &id);
            }
            AssignmentState::Completed if a.rounds => self.respond(request, Response::Ok),
            st @ (AssignmentState::Pending
            | AssignmentState::Active
            | AssignmentState::Completed
            | AssignmentState::Error) => self.respond_error(
                request,
                &id,
                ErrorInfo::bare(
                    ErrorCode::Declined,
                    format!("delegation {id} is {st}; CLOSE ends one whose round ended (idle)"),
                ),
                dialect,
                409,
            ),
        }
    }

    /// Completes an idle assignment: `done` with the last round's outcome, then release.
    pub(super) fn close_idle(&mut self, now: Timestamp, id: &DelegationId) {
        if !self.transition(now, id, AssignmentTransition::Close) {
            return;
        }
        self.core.timers.cancel(&(id.clone(), Timer::Idle));
        let Some(a) = self.assignments.get(id) else {
            return;
        };
        let (summary, highlights) = a
            .outcome
            .as_ref()
            .map(|o| (o.summary.clone(), o.highlights.clone()))
            .unwrap_or_default();
        let sid = a
            .snapshot
            .as_deref()
            .and_then(super::assignment::snapshot_of)
            .map(|s| s.snapshot_id.clone());
        self.broadcast(
            now,
            id,
            TaskEventKind::Done(DoneEvent {
                summary,
                highlights,
                snapshot_ids: sid.iter().cloned().collect(),
                recommended_snapshot_id: sid,
                result_base64: None,
                result_local_file: None,
            }),
        );
        self.release(id);
    }

    /// What a subscriber joining an idle assignment is told first: the last round's snapshot
    /// and `round_done`, when the delegator negotiated rounds (a reference delegator reads a
    /// second `round_done` as an error).
    pub(super) fn round_replay(&self, id: &DelegationId) -> Vec<Arc<TaskEvent>> {
        let Some(a) = self.assignments.get(id) else {
            return Vec::new();
        };
        if a.state() != AssignmentState::Idle
            || !a.features.contains(&crate::wire::Feature::MultiRound)
        {
            return Vec::new();
        }
        a.snapshot
            .iter()
            .chain(a.round_done.iter())
            .cloned()
            .collect()
    }
}
