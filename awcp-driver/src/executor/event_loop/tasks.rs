//! Executing the engine's task outputs: run the agent, stop it, end what a restart left.

use super::*;

impl<R: Runtime> Loop<R> {
    /// [`ExecutorOutput::RunTask`].
    pub(super) fn run_task(&mut self, ctx: TaskContext) {
        let id = ctx.delegation_id.clone();
        let runner = self.runner.clone();
        let feed = self.feed();
        let rt = self.rt.clone();
        let cancel = CancelFlag::new();
        self.cancels.insert(id.clone(), cancel.clone());
        let tails = self.tails.clone();
        self.spawn_in(crate::delegation_span(&id), async move {
            let pf = feed.clone();
            let sf = feed.clone();
            let pid = id.clone();
            let sid = id.clone();
            let c2 = cancel.clone();
            let result = blocking(&rt, move || {
                let progress = move |m: String| {
                    {
                        let mut all = tails.lock().unwrap_or_else(|p| p.into_inner());
                        let tail = all.entry(pid.clone()).or_default();
                        if tail.len() == super::super::OUTPUT_TAIL_LINES {
                            tail.pop_front();
                        }
                        tail.push_back(m.clone());
                    }
                    pf(ExecutorInput::TaskProgress {
                        id: pid.clone(),
                        message: Some(m),
                        progress: None,
                    })
                };
                // Journalled, so that a restarted executor can end the group.
                let spawned = move |g: TaskGroup| {
                    sf(ExecutorInput::TaskSpawned {
                        id: sid.clone(),
                        handle: TaskHandle(g.to_handle()),
                    })
                };
                runner.run_tracked(&ctx, &progress, &spawned, &c2)
            })
            .await;
            let result = match result {
                Ok(o) => Ok(TaskOutcome {
                    summary: o.summary,
                    highlights: o.highlights,
                }),
                // What the runner says after it was stopped is not the task's failure.
                Err(_) if cancel.is_cancelled() => Err(TaskFailure::Stopped),
                Err(f) => Err(f),
            };
            feed(ExecutorInput::TaskFinished { id, result });
        });
    }

    /// [`ExecutorOutput::StopTask`].
    pub(super) fn stop_task(&mut self, id: DelegationId) {
        if let Some(c) = self.cancels.get(&id) {
            c.cancel();
        }
    }

    /// [`ExecutorOutput::EndTask`].
    pub(super) fn end_task(&mut self, id: DelegationId, handle: TaskHandle) {
        let feed = self.feed();
        let rt = self.rt.clone();
        self.spawn_in(crate::delegation_span(&id), async move {
            let did = id.clone();
            blocking(&rt, move || end_task(&did, &handle)).await;
            feed(ExecutorInput::TaskFinished {
                id,
                result: Err(TaskFailure::Stopped),
            });
        });
    }
}
