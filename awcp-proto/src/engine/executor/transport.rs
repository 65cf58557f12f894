//! The workspace's transport: setting it up after START, and where the task then runs.

use crate::engine::UsageError;
use crate::id::DelegationId;
use crate::state::AssignmentTransition;
use crate::time::Timestamp;
use crate::wire::{StatusEvent, TaskEventKind, TaskStatus};

use super::assignment::Phase;
use super::{Executor, ExecutorOutput, SetupFailure, WorkspaceLayout};
use crate::wire::Resource;

impl Executor {
    pub(super) fn on_setup(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        result: Result<WorkspaceLayout, SetupFailure>,
    ) -> Result<(), UsageError> {
        let Some((a, _)) = self.finish(id, |p| matches!(p, Phase::SettingUp))? else {
            return Ok(());
        };
        if a.state().is_terminal() {
            self.release(id);
            return Ok(());
        }
        match result {
            Err(e) => self.terminate(now, id, AssignmentTransition::TaskFail, e.to_error_info()),
            Ok(layout) => {
                a.phase = Phase::Running { task: None };
                // With rounds, worded as the reference's `dev` executor says it.
                let started = if a.rounds {
                    "Round 1 execution started"
                } else {
                    "workspace ready, task started"
                };
                let dir = task_dir(&a.work_dir, &a.invite.resources, layout);
                a.task_dir = Some(dir.clone());
                let out = ExecutorOutput::RunTask {
                    id: id.clone(),
                    task_dir: dir,
                    task: a.invite.task.clone(),
                    expires_at: a.expires_at.unwrap_or(now),
                    access_mode: a.access,
                    round: 1,
                    earlier: Vec::new(),
                };
                self.broadcast(
                    now,
                    id,
                    TaskEventKind::Status(StatusEvent {
                        status: TaskStatus::Running,
                        message: Some(started.into()),
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
            let root = work_dir.trim_end_matches('/');
            let mut dir = String::with_capacity(root.len() + 1 + only.name.as_str().len());
            dir.push_str(root);
            dir.push('/');
            dir.push_str(only.name.as_str());
            dir
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

#[cfg(test)]
mod setup_failure_tests {
    #![allow(clippy::wildcard_enum_match_arm)]

    use super::*;
    use crate::engine::executor::tests::invite;
    use crate::engine::executor::{ExecutorConfig, ExecutorEvent, ExecutorInput, Request};
    use crate::engine::RequestId;
    use crate::error::{ErrorCode, ErrorInfo};
    use crate::state::AssignmentState;
    use crate::wire::{
        ActiveLease, ArchiveData, ArchiveHandle, Dialect, Message, Start, TransportHandle,
    };

    const T0: Timestamp = Timestamp::from_unix_millis(1_750_000_000_000);

    /// Runs one assignment up to `SetupTransport`, reports `failure`, and returns the error
    /// the assignment ended with.
    fn ended_after(failure: SetupFailure) -> ErrorInfo {
        let mut ex = Executor::new(ExecutorConfig::default());
        let id = DelegationId::new("setup-fail").unwrap();
        let mut request = 0;
        let mut send = |ex: &mut Executor, m: Message| {
            request += 1;
            ex.handle(
                T0,
                ExecutorInput::Request {
                    request: RequestId(request),
                    credential: None,
                    origin: None,
                    body: Request::Message(Box::new(m), Dialect::Reference),
                },
            )
            .unwrap();
        };
        send(&mut ex, Message::Invite(invite(&id)));
        ex.handle(
            T0,
            ExecutorInput::WorkDirAllocated {
                id: id.clone(),
                result: Ok(()),
            },
        )
        .unwrap();
        send(
            &mut ex,
            Message::Start(Start {
                delegation_id: id.clone(),
                lease: ActiveLease {
                    expires_at: T0.saturating_add(std::time::Duration::from_secs(600)),
                    access_mode: crate::wire::AccessMode::Rw,
                },
                handle: TransportHandle::Archive(ArchiveHandle {
                    data: ArchiveData {
                        base64: None,
                        url: Some("http://delegator/archives/t".into()),
                        local_file: None,
                        local_file_sha256: None,
                    },
                    checksum: "0".repeat(64),
                    size_bytes: Some(1),
                }),
            }),
        );
        let outs: Vec<_> = std::iter::from_fn(|| ex.poll_output()).collect();
        assert!(
            outs.iter()
                .any(|o| matches!(o, ExecutorOutput::SetupTransport { .. })),
            "{outs:?}"
        );
        ex.handle(
            T0,
            ExecutorInput::SetupCompleted {
                id: id.clone(),
                result: Err(failure),
            },
        )
        .unwrap();
        // The failure releases the work directory; the assignment ends once it is released.
        let outs: Vec<_> = std::iter::from_fn(|| ex.poll_output()).collect();
        assert!(
            outs.iter()
                .any(|o| matches!(o, ExecutorOutput::Release { .. })),
            "{outs:?}"
        );
        ex.handle(
            T0,
            ExecutorInput::Released {
                id: id.clone(),
                result: Ok(()),
            },
        )
        .unwrap();
        outs.into_iter()
            .chain(std::iter::from_fn(|| ex.poll_output()))
            .find_map(|o| match o {
                ExecutorOutput::Event(ExecutorEvent::Ended { state, error, .. }) => {
                    assert_eq!(state, AssignmentState::Error);
                    error
                }
                _ => None,
            })
            .expect("the assignment ends")
    }

    #[test]
    fn a_failed_archive_fetch_is_the_delegators_transport_error() {
        let e = ended_after(SetupFailure::Fetch("HTTP 503".into()));
        assert_eq!(e.code, ErrorCode::TransportError);
        assert!(e.message.contains("HTTP 503"), "{e:?}");
    }

    #[test]
    fn local_setup_failures_are_setup_failed_and_transport_codes_are_kept() {
        for f in [
            SetupFailure::NoArchiveData,
            SetupFailure::Staging("disk full".into()),
            SetupFailure::UnsupportedTransport(crate::wire::TransportKind::Archive),
        ] {
            assert_eq!(ended_after(f).code, ErrorCode::SetupFailed);
        }
        let e = ended_after(SetupFailure::Transport(ErrorInfo::new(
            ErrorCode::ChecksumMismatch,
            "bad zip",
        )));
        assert_eq!(e.code, ErrorCode::ChecksumMismatch);
    }
}
