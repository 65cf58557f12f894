//! Start-up recovery: what a crashed predecessor left (its tasks, its work directories) is
//! cleaned up before anything is served.

use std::sync::Arc;

use awcp_proto::engine::TaskHandle;
use awcp_proto::{DelegationId, Executor, ExecutorInput, ExecutorOutput, TaskFailure};
use awcp_transports::{ExecutorTransport, Orphans, TaskGroup};

use crate::runtime::Runtime;

#[allow(unused_imports)]
use super::workspace::*;
#[allow(unused_imports)]
use super::*;

/// Start-up recovery: executes what [`Executor::restore`] asked for about a crashed
/// predecessor's assignments, before anything is served: ends recorded task groups, releases
/// recorded work directories, journals the outcome. Other outputs are returned for the loop.
pub(super) fn recover<R: Runtime>(
    rt: &R,
    engine: &mut Executor,
    journal: &journal::Journal,
    transports: &[Arc<dyn ExecutorTransport>],
) -> Vec<ExecutorOutput> {
    let mut deferred = Vec::new();
    let mut inputs = Vec::new();
    loop {
        while let Some(out) = engine.poll_output() {
            // Recovery writes durably: nothing it answers waits for a later sync.
            if let Some(id) = out.journaled() {
                match engine.record(id) {
                    Some(rec) => journal.write(id, &rec),
                    None => journal.remove(id),
                }
            }
            match out {
                ExecutorOutput::EndTask { id, handle } => {
                    end_task(&id, &handle);
                    inputs.push(ExecutorInput::TaskFinished {
                        id,
                        result: Err(TaskFailure::Stopped),
                    });
                }
                ExecutorOutput::Release {
                    id,
                    work_dir,
                    transport,
                } => {
                    let t = transport_for(transports, &transport);
                    let result = release_work_dir(&*t, &transport, &work_dir);
                    inputs.push(ExecutorInput::Released { id, result });
                }
                ExecutorOutput::RemoveEmptyWorkDir { id, work_dir } => {
                    // Never anything inside: it may be someone else's directory.
                    let _ = std::fs::remove_dir(&work_dir);
                    inputs.push(ExecutorInput::Released { id, result: Ok(()) });
                }
                // Journaled above.
                ExecutorOutput::Event(_) => {}
                other => deferred.push(other),
            }
        }
        if inputs.is_empty() {
            return deferred;
        }
        for i in inputs.drain(..) {
            if let Err(e) = engine.handle(rt.now(), i) {
                tracing::debug!("recovery input ignored: {e}");
            }
        }
    }
}

/// Ends the process group a crashed predecessor recorded for `id`, if it is verifiably the
/// task's (see [`TaskGroup::end_orphaned`]).
pub(super) fn end_task(id: &DelegationId, handle: &TaskHandle) {
    let Some(group) = TaskGroup::from_handle(&handle.0) else {
        tracing::warn!(delegation = %id, handle = %handle.0, "unreadable task record; nothing ended");
        return;
    };
    match group.end_orphaned(id.as_str()) {
        Orphans::Ended(n) => {
            tracing::info!(delegation = %id, pgid = group.pgid, processes = n, "ended the task a crash left running")
        }
        Orphans::Gone => {}
        Orphans::NotOurs => {
            tracing::warn!(delegation = %id, pgid = group.pgid, "recorded process group now belongs to someone else; left alone")
        }
        Orphans::Unverifiable => {
            tracing::warn!(delegation = %id, pgid = group.pgid, "cannot verify the recorded process group on this platform; left alone")
        }
    }
}
