//! The result: a captured snapshot, `done`, and `GET …/result`.

use crate::engine::{CapturedSnapshot, UsageError};
use crate::error::{ErrorCode, ErrorInfo};
use crate::id::{DelegationId, SnapshotId};
use crate::state::{AssignmentState, AssignmentTransition};
use crate::time::Timestamp;
use crate::wire::{Dialect, DoneEvent, SnapshotEvent, TaskEventKind};

use super::assignment::{ExecutorTimer as Timer, Phase};
use super::{Executor, ExecutorOutput, ResultBody, ResultStatus};

impl Executor {
    pub(super) fn on_captured(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        result: Result<CapturedSnapshot, super::CaptureFailure>,
    ) -> Result<(), UsageError> {
        let result = result.map_err(|f| f.to_error_info());
        let Some((a, Phase::Capturing { snapshot_id })) =
            self.finish(id, |p| matches!(p, Phase::Capturing { .. }))?
        else {
            return Ok(());
        };
        if a.state().is_terminal() {
            // Expired or cancelled during capture: the bytes are not needed.
            if result.is_ok() {
                self.core.outputs.push_back(ExecutorOutput::DropSnapshot {
                    id: id.clone(),
                    snapshot_id,
                });
            }
            self.release(id);
            return Ok(());
        }
        match result {
            Err(e) => self.terminate(now, id, AssignmentTransition::TaskFail, e),
            Ok(snap) => self.complete(now, id, Some((snapshot_id, snap))),
        }
        Ok(())
    }

    pub(super) fn complete(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        snapshot: Option<(SnapshotId, CapturedSnapshot)>,
    ) {
        let Some(a) = self.assignments.get_mut(id) else {
            return;
        };
        if a.rounds && a.state() == AssignmentState::Active {
            return self.end_round(now, id, snapshot);
        }
        let (summary, highlights) = a
            .outcome
            .as_ref()
            .map(|o| (o.summary.clone(), o.highlights.clone()))
            .unwrap_or_default();
        let dialect = a.dialect;
        let mut done = DoneEvent {
            summary,
            highlights,
            snapshot_ids: Vec::new(),
            recommended_snapshot_id: None,
            result_base64: None,
            result_local_file: None,
        };
        // Completed first: the record a driver writes for this change (read after the turn)
        // holds the snapshot event too, and is durable before the event goes out
        // (`ExecutorOutput::journaling`), so a restarted executor still serves what the
        // delegator was told about.
        self.transition(now, id, AssignmentTransition::TaskComplete);
        self.core.timers.cancel(&(id.clone(), Timer::Lease));
        if let Some((sid, snap)) = snapshot {
            if dialect == Dialect::Seed {
                // The archive inline, or the file the driver streams it from.
                done.result_base64 = snap.data.base64.clone();
                done.result_local_file = snap.data.local_file.clone();
            } else {
                done.snapshot_ids = vec![sid.clone()];
                done.recommended_snapshot_id = Some(sid.clone());
            }
            self.broadcast(
                now,
                id,
                TaskEventKind::Snapshot(SnapshotEvent {
                    snapshot_id: sid,
                    summary: done.summary.clone(),
                    highlights: done.highlights.clone(),
                    data: snap.data,
                    checksum: snap.checksum,
                    recommended: Some(true),
                    metadata: snap.metadata,
                }),
            );
        }
        self.broadcast(now, id, TaskEventKind::Done(done));
        self.release(id);
    }

    pub(super) fn result_body(&self, id: &DelegationId) -> ResultBody {
        let Some(a) = self.assignments.get(id).filter(|a| !a.acked) else {
            return ResultBody {
                status: ResultStatus::NotFound,
                completed_at: None,
                outcome: None,
                snapshot: None,
                error: Some(ErrorInfo::new(
                    ErrorCode::NotFound,
                    format!("unknown delegation {id}"),
                )),
            };
        };
        let snapshot = a
            .snapshot
            .as_deref()
            .and_then(super::assignment::snapshot_of)
            .cloned();
        match a.state() {
            // Idle: between rounds, as the reference answers.
            AssignmentState::Pending | AssignmentState::Active | AssignmentState::Idle => {
                ResultBody {
                    status: ResultStatus::Running,
                    completed_at: None,
                    outcome: None,
                    snapshot: None,
                    error: None,
                }
            }
            AssignmentState::Completed => ResultBody {
                status: ResultStatus::Completed,
                completed_at: a.completed_at,
                outcome: a.outcome.clone(),
                snapshot,
                error: None,
            },
            AssignmentState::Error => ResultBody {
                status: ResultStatus::Error,
                completed_at: a.completed_at,
                outcome: None,
                snapshot: None,
                error: a.error.clone(),
            },
        }
    }
}

impl Executor {
    /// Whether a request presenting `credential` may download snapshot `snapshot_id` of `id`
    /// where the driver serves it by URL: it needs the rights of `GET …/result`, and the
    /// snapshot must be the one the assignment reported and still retains (not acknowledged).
    /// `Err` carries the HTTP status to answer with (401 or 404) and the error.
    pub fn authorize_snapshot_download(
        &self,
        id: &DelegationId,
        snapshot_id: &str,
        credential: Option<&super::Credential>,
    ) -> Result<(), (u16, ErrorInfo)> {
        if !self.authorized(id, credential) {
            return Err((401, super::auth::auth_failed()));
        }
        let retained = self
            .assignments
            .get(id)
            .filter(|a| !a.acked)
            .and_then(|a| a.snapshot.as_ref())
            .is_some_and(|ev| {
                matches!(&ev.kind, TaskEventKind::Snapshot(s) if s.snapshot_id.as_str() == snapshot_id)
            });
        if !retained {
            return Err((
                404,
                ErrorInfo::new(ErrorCode::NotFound, format!("no snapshot {snapshot_id}")),
            ));
        }
        Ok(())
    }
}
