//! The running task: its OS handle, its progress, and what its outcome leads to (a snapshot,
//! a live transport's release before `done`, or `done` at once).

use crate::engine::{SnapshotKind, TaskHandle, TaskOutcome, UsageError};
use crate::id::DelegationId;
use crate::state::{AssignmentState, AssignmentTransition};
use crate::time::Timestamp;
use crate::wire::{AccessMode, Dialect, Feature, StatusEvent, TaskEventKind, TaskStatus};

use super::assignment::Phase;
use super::{Executor, ExecutorEvent, ExecutorOutput, TaskFailure};

impl Executor {
    pub(super) fn on_progress(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        message: Option<String>,
        progress: Option<f64>,
    ) -> Result<(), UsageError> {
        let a = self.get_mut(id)?;
        if matches!(a.phase, Phase::Running { .. }) && a.state() == AssignmentState::Active {
            self.broadcast(
                now,
                id,
                TaskEventKind::Status(StatusEvent {
                    status: TaskStatus::Progress,
                    message,
                    progress,
                }),
            );
        }
        Ok(())
    }

    pub(super) fn on_spawned(
        &mut self,
        id: DelegationId,
        handle: TaskHandle,
    ) -> Result<(), UsageError> {
        let a = self.get_mut(&id)?;
        if let Phase::Running { task } | Phase::Stopping { task, .. } = &mut a.phase {
            *task = Some(handle);
            self.event(ExecutorEvent::RecordChanged { id });
        }
        Ok(())
    }

    pub(super) fn on_task_finished(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        result: Result<TaskOutcome, TaskFailure>,
    ) -> Result<(), UsageError> {
        let public_url = self.config.public_url.clone();
        let a = self.get_mut(id)?;
        match &a.phase {
            Phase::Stopping { holds_work_dir, .. } => {
                if *holds_work_dir {
                    a.phase = Phase::Idle;
                    self.release(id);
                } else {
                    a.phase = Phase::Released { unstopped: None };
                }
                return Ok(());
            }
            Phase::Running { .. } => {}
            Phase::Allocating
            | Phase::AwaitingDecision
            | Phase::Idle
            | Phase::SettingUp
            | Phase::Capturing { .. }
            | Phase::Releasing { .. }
            | Phase::Released { .. } => return Ok(()),
        }
        a.phase = Phase::Idle;
        match result {
            Err(f) => self.terminate(now, id, AssignmentTransition::TaskFail, f.to_error_info()),
            Ok(outcome) => {
                a.outcome = Some(outcome);
                let needs_snapshot = !a.transport.is_live() && a.access == AccessMode::Rw;
                if a.transport.is_live() {
                    // Detach before `done` (see `ExecutorInput::Released`).
                    self.release(id);
                } else if needs_snapshot {
                    // A delta is taken against what was lent: only the first round's result
                    // is one (a file a later round deletes may not have been lent at all).
                    let kind = if a.round <= 1 && a.features.contains(&Feature::DeltaSnapshots) {
                        SnapshotKind::Delta
                    } else {
                        SnapshotKind::Full
                    };
                    let by_url =
                        a.dialect != Dialect::Seed && a.features.contains(&Feature::ArchiveUrl);
                    let base = public_url.or_else(|| a.origin.clone());
                    let delivery = match (a.upload_url.clone(), base) {
                        // Git: the transport pushes the result to the delegation's branch.
                        _ if a.pushes_result => super::SnapshotDelivery::Push,
                        // Storage: the result goes where the delegator said (the reference's
                        // only way; our delegator reads it back from its own object).
                        (Some(url), _) => super::SnapshotDelivery::Upload { url },
                        (None, Some(base)) if by_url => super::SnapshotDelivery::ByUrl { base },
                        (None, Some(_) | None) => super::SnapshotDelivery::Inline,
                    };
                    let work_dir = a.work_dir.clone();
                    let snapshot_id = self.new_snapshot_id();
                    if let Some(a) = self.assignments.get_mut(id) {
                        a.phase = Phase::Capturing {
                            snapshot_id: snapshot_id.clone(),
                        };
                    }
                    self.core
                        .outputs
                        .push_back(ExecutorOutput::CaptureSnapshot {
                            id: id.clone(),
                            work_dir,
                            snapshot_id,
                            kind,
                            delivery,
                        });
                } else {
                    self.complete(now, id, None);
                }
            }
        }
        Ok(())
    }
}
