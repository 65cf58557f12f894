//! Every timer of an assignment ([`ExecutorTimer`]): the START deadline, the lease, the stop
//! grace period and the retention of a finished result.

use crate::error::{ErrorCode, ErrorInfo};
use crate::id::DelegationId;
use crate::state::{AssignmentState, AssignmentTransition};
use crate::time::Timestamp;

use super::assignment::{ExecutorTimer, Phase};
use super::Executor;

impl Executor {
    pub(super) fn on_timer(&mut self, now: Timestamp, id: &DelegationId, timer: ExecutorTimer) {
        let Some(a) = self.assignments.get(id) else {
            return;
        };
        match timer {
            ExecutorTimer::StartDeadline => {
                if a.state() == AssignmentState::Pending {
                    let requests = a.invite_requests.clone();
                    let dialect = a.dialect;
                    let e = if a.accept.is_some() && self.config.start_timeout < a.ttl {
                        ErrorInfo::new(
                            ErrorCode::StartExpired,
                            format!(
                                "no START within {} s of ACCEPT; the assignment was dropped",
                                self.config.start_timeout.as_secs()
                            ),
                        )
                    } else {
                        ErrorInfo::new(
                            ErrorCode::StartExpired,
                            "the lease ran out before START arrived",
                        )
                    };
                    for r in requests {
                        self.respond_error(r, id, e.clone(), dialect, 200);
                    }
                    if let Some(a) = self.assignments.get_mut(id) {
                        a.invite_requests.clear();
                    }
                    self.terminate(now, id, AssignmentTransition::Cancel, e);
                }
            }
            ExecutorTimer::Lease => {
                if a.state() == AssignmentState::Active {
                    self.terminate(
                        now,
                        id,
                        AssignmentTransition::Cancel,
                        ErrorInfo::new(
                            ErrorCode::Expired,
                            "the lease expired while the task was running",
                        ),
                    );
                }
            }
            ExecutorTimer::StopGrace => {
                if let Phase::Stopping {
                    task,
                    holds_work_dir,
                } = &a.phase
                {
                    tracing::warn!(delegation = %id, "task did not stop in time; releasing anyway");
                    if !*holds_work_dir {
                        // Already released (after a restart): keep the task journalled.
                        let unstopped = task.clone();
                        if let Some(a) = self.assignments.get_mut(id) {
                            a.phase = Phase::Released { unstopped };
                        }
                    } else {
                        self.release(id);
                    }
                }
            }
            ExecutorTimer::Idle => {
                if a.state() == AssignmentState::Idle {
                    tracing::info!(delegation = %id, "idle too long: closed");
                    if a.features.contains(&crate::wire::Feature::MultiRound) {
                        // Our delegator reads `done` while idle as the executor's close.
                        self.close_idle(now, id);
                    } else {
                        // A reference `dev` delegator cannot take `done` while idle; `error`
                        // it can (idle → error). Every round so far was delivered.
                        let secs = self.config.idle_timeout.as_secs();
                        self.terminate(
                            now,
                            id,
                            AssignmentTransition::Cancel,
                            ErrorInfo {
                                hint: Some(
                                    "Every round so far was delivered; continue a delegation \
                                     within the executor's idle time, or delegate again."
                                        .into(),
                                ),
                                ..ErrorInfo::bare(
                                    ErrorCode::Expired,
                                    format!(
                                        "closed by the executor after {secs} s without a next \
                                         round"
                                    ),
                                )
                            },
                        );
                    }
                }
            }
            ExecutorTimer::Retention => {
                if a.state().is_terminal() && a.released() {
                    self.forget(id);
                }
            }
            // Never armed: `poll_timeout`'s reason for queued outputs.
            ExecutorTimer::Output => {}
        }
    }
}
