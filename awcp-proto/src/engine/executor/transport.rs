//! The workspace's transport: setting it up after START, and where the task then runs.

use crate::engine::UsageError;
use crate::error::ErrorInfo;
use crate::id::DelegationId;
use crate::state::AssignmentTransition;
use crate::time::Timestamp;
use crate::wire::{StatusEvent, TaskEventKind, TaskStatus};

use super::assignment::Phase;
use super::{Executor, ExecutorOutput, WorkspaceLayout};
use crate::wire::Resource;

impl Executor {
    pub(super) fn on_setup(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        result: Result<WorkspaceLayout, ErrorInfo>,
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
            Ok(layout) => {
                a.phase = Phase::Running { task: None };
                let out = ExecutorOutput::RunTask {
                    id: id.clone(),
                    task_dir: task_dir(&a.work_dir, &a.invite.resources, layout),
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

/// Where the task runs: a single exported directory is the task's working directory (as the
/// reference hands `<work>/<name>` to its agent) when the workspace has one directory per
/// resource; several resources stay side by side in the work directory.
pub(crate) fn task_dir(work_dir: &str, resources: &[Resource], layout: WorkspaceLayout) -> String {
    match (resources, layout) {
        ([only], WorkspaceLayout::PerResource) => {
            format!("{}/{}", work_dir.trim_end_matches('/'), only.name)
        }
        (_, WorkspaceLayout::PerResource | WorkspaceLayout::Flat) => work_dir.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::ResourceName;
    use crate::wire::AccessMode;

    fn res(name: &str) -> Resource {
        Resource {
            name: ResourceName::new(name).unwrap(),
            kind: "fs".into(),
            mode: AccessMode::Rw,
        }
    }

    #[test]
    fn a_single_resource_laid_out_per_resource_is_the_task_dir() {
        let one = [res("app")];
        assert_eq!(
            task_dir("/w/d", &one, WorkspaceLayout::PerResource),
            "/w/d/app"
        );
        assert_eq!(task_dir("/w/d", &one, WorkspaceLayout::Flat), "/w/d");
        let two = [res("app"), res("lib")];
        assert_eq!(task_dir("/w/d", &two, WorkspaceLayout::PerResource), "/w/d");
    }
}
