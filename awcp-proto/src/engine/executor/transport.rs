//! The workspace's transport: setting it up after START, and where the task then runs.

use crate::engine::UsageError;
use crate::error::ErrorInfo;
use crate::id::DelegationId;
use crate::state::AssignmentTransition;
use crate::time::Timestamp;
use crate::wire::{StatusEvent, TaskEventKind, TaskStatus};

use super::assignment::Phase;
use super::{Executor, ExecutorOutput};

impl Executor {
    pub(super) fn on_setup(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        result: Result<(), ErrorInfo>,
    ) -> Result<(), UsageError> {
        let Some((a, _)) = self.finish(id, |p| matches!(p, Phase::SettingUp))? else {
            return Ok(());
        };
        if a.state().is_terminal() {
            self.release(id);
            return Ok(());
        }
        match result {
            Err(e) => self.terminate(now, id, AssignmentTransition::TaskFail, e),
            Ok(()) => {
                a.phase = Phase::Running { task: None };
                let out = ExecutorOutput::RunTask {
                    id: id.clone(),
                    work_dir: a.work_dir.clone(),
                    task: a.invite.task.clone(),
                    expires_at: a.expires_at.unwrap_or(now),
                    access_mode: a.access,
                };
                self.broadcast(
                    now,
                    id,
                    TaskEventKind::Status(StatusEvent {
                        status: TaskStatus::Running,
                        message: Some("workspace ready, task started".into()),
                        progress: None,
                    }),
                );
                self.core.outputs.push_back(out);
            }
        }
        Ok(())
    }
}
