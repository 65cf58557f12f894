//! Winding down: failing an assignment (cancel, ERROR, expiry, failure, shutdown), stopping
//! its task, releasing its work directory, and forgetting it once acknowledged or retained
//! long enough.

use crate::engine::timers::DelegationTimers as _;
use crate::engine::UsageError;
use crate::error::{ErrorCode, ErrorInfo};
use crate::id::DelegationId;
use crate::state::{AssignmentState, AssignmentTransition};
use crate::time::Timestamp;
use crate::wire::TaskEventKind;

use super::assignment::{ExecutorTimer as Timer, Phase};
use super::{Executor, ExecutorEvent, ExecutorOutput};

impl Executor {
    /// Fails every live assignment (e.g. on SIGTERM): subscribers get an error event, tasks are
    /// stopped, resources released. From then on new invitations are declined
    /// ([`policy::shutting_down`](super::policy::shutting_down)).
    pub fn shutdown(&mut self, now: Timestamp) {
        self.tick(now);
        self.shutting_down = true;
        let ids: Vec<_> = self
            .assignments
            .iter()
            .filter(|(_, a)| !a.state().is_terminal())
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            self.terminate(
                now,
                &id,
                AssignmentTransition::Cancel,
                ErrorInfo::new(ErrorCode::Cancelled, "the executor is shutting down"),
            );
        }
    }

    /// [`ExecutorOutput::Release`] (or `RemoveEmptyWorkDir`) finished.
    pub(super) fn on_released(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        result: Result<(), ErrorInfo>,
    ) -> Result<(), UsageError> {
        let Some((a, Phase::Releasing { unstopped })) =
            self.finish(id, |p| matches!(p, Phase::Releasing { .. }))?
        else {
            return Ok(());
        };
        a.phase = Phase::Released { unstopped };
        let id = id.clone();
        if a.state() == AssignmentState::Active && a.outcome.is_some() {
            // A live transport detached before `done`: only now are the delegator's
            // files final, and only if the connection held to the end.
            match result {
                Ok(()) => self.complete(now, &id, None),
                Err(e) => self.terminate(now, &id, AssignmentTransition::TaskFail, e),
            }
        } else if let Err(e) = result {
            tracing::warn!(delegation = %id, code = %e.code, "release failed: {}", e.message);
            a.release_error = Some(e);
        }
        let Some(a) = self.assignments.get_mut(&id) else {
            return Ok(());
        };
        let state = a.state();
        let error = a.error.clone().or_else(|| a.release_error.clone());
        let retention = a.retention;
        let allocated_only = !state.is_terminal();
        if allocated_only {
            // A declined or failed INVITE: nothing to retain.
            self.forget(&id);
            return Ok(());
        }
        let acked = a.acked;
        self.core
            .outputs
            .push_back(ExecutorOutput::Event(ExecutorEvent::Ended {
                id: id.clone(),
                state,
                error,
            }));
        if acked {
            self.forget(&id);
        } else {
            self.core.timers.set(
                (id.clone(), Timer::Retention),
                now.saturating_add(retention),
            );
        }
        Ok(())
    }

    /// Ends an assignment with an error (cancel, ERROR, expiry, failure): emits the error
    /// event, stops the task, releases when nothing is in flight.
    pub(super) fn terminate(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        event: AssignmentTransition,
        error: ErrorInfo,
    ) {
        if !self.transition(now, id, event) {
            return;
        }
        tracing::info!(delegation = %id, code = %error.code, "assignment failed: {}", error.message);
        let Some(a) = self.assignments.get_mut(id) else {
            return;
        };
        a.error = Some(error.clone());
        // INVITE requests still waiting (allocation or decision in progress) get the error.
        let requests = std::mem::take(&mut a.invite_requests);
        let dialect = a.dialect;
        for r in requests {
            self.respond_error(r, id, error.clone(), dialect, 200);
        }
        self.core.timers.cancel(&(id.clone(), Timer::Lease));
        self.core.timers.cancel(&(id.clone(), Timer::StartDeadline));
        self.core.timers.cancel(&(id.clone(), Timer::Idle));
        self.broadcast(now, id, TaskEventKind::Error(error));
        let Some(a) = self.assignments.get_mut(id) else {
            return;
        };
        match &mut a.phase {
            Phase::Running { task } => {
                a.phase = Phase::Stopping {
                    task: task.take(),
                    holds_work_dir: true,
                };
                self.core
                    .outputs
                    .push_back(ExecutorOutput::StopTask { id: id.clone() });
                self.core.timers.set(
                    (id.clone(), Timer::StopGrace),
                    now.saturating_add(self.config.stop_grace),
                );
            }
            Phase::Idle | Phase::AwaitingDecision => self.release(id),
            Phase::Allocating
            | Phase::SettingUp
            | Phase::Capturing { .. }
            | Phase::Stopping { .. }
            | Phase::Releasing { .. }
            | Phase::Released { .. } => {}
        }
    }

    pub(super) fn release(&mut self, id: &DelegationId) {
        let Some(a) = self.assignments.get_mut(id) else {
            return;
        };
        let unstopped = match &mut a.phase {
            Phase::Released { .. } | Phase::Releasing { .. } => return,
            Phase::Stopping { task, .. } => task.take(),
            Phase::Allocating
            | Phase::AwaitingDecision
            | Phase::Idle
            | Phase::SettingUp
            | Phase::Running { .. }
            | Phase::Capturing { .. } => None,
        };
        a.phase = Phase::Releasing { unstopped };
        self.core.timers.cancel(&(id.clone(), Timer::StopGrace));
        self.core.outputs.push_back(ExecutorOutput::Release {
            id: id.clone(),
            work_dir: a.work_dir.clone(),
            transport: a.transport.clone(),
        });
    }

    pub(super) fn forget(&mut self, id: &DelegationId) {
        let Some(a) = self.assignments.remove(id) else {
            return;
        };
        self.core.timers.cancel_all(id);
        self.core
            .outputs
            .push_back(ExecutorOutput::Event(ExecutorEvent::Forgotten {
                id: id.clone(),
            }));
        if let Some(ev) = &a.snapshot {
            if let TaskEventKind::Snapshot(s) = &ev.kind {
                self.core.outputs.push_back(ExecutorOutput::DropSnapshot {
                    id: id.clone(),
                    snapshot_id: s.snapshot_id.clone(),
                });
            }
        }
        for s in a.subscribers {
            self.streams.remove(&s);
            self.core
                .outputs
                .push_back(ExecutorOutput::CloseStream { stream: s });
        }
    }
}
