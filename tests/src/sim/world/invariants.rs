//! The invariants: checked after every step and at the end of a run.

use super::*;

impl World {
    pub(super) fn check_step(&mut self) {
        let now = self.now;
        let mut v = Vec::new();
        for d in &self.dels {
            if d.ended.is_none() && now > d.deadline {
                v.push(format!(
                    "{} has not ended {} ms after ttl + grace (state {})",
                    d.id,
                    now - d.deadline,
                    d.state
                ));
            }
            // The delegator says a snapshot was applied exactly as often as an apply changed
            // the workspace, across crashes too (a swap that finished before a crash is
            // recorded at the restart).
            if let Some(view) = self.delegator.get(&d.id) {
                let recorded = view
                    .snapshots
                    .iter()
                    .filter(|s| s.status == SnapshotStatus::Applied)
                    .count();
                if recorded != d.applied as usize {
                    v.push(format!(
                        "{}: {recorded} snapshots recorded applied, the workspace was applied to {} times",
                        d.id, d.applied
                    ));
                }
                // And exactly the snapshots the applies wrote.
                let wrong: Vec<&SnapshotId> = view
                    .snapshots
                    .iter()
                    .filter(|s| s.status == SnapshotStatus::Applied)
                    .map(|s| &s.id)
                    .filter(|s| !d.applied_ids.contains(*s))
                    .collect();
                if !wrong.is_empty() {
                    v.push(format!(
                        "{}: {wrong:?} recorded applied, but the applies wrote {:?}",
                        d.id, d.applied_ids
                    ));
                }
                // The round counter: never past the CONTINUEs the application made + 1.
                if view.round > u64::from(d.continues) + 1 {
                    v.push(format!(
                        "{}: round {} after {} CONTINUEs",
                        d.id, view.round, d.continues
                    ));
                }
            }
            let untouched = d.ws == d.original;
            if d.access == AccessMode::Ro && !untouched {
                v.push(format!("read-only {} was modified", d.id));
            }
            if !untouched && !d.captured.contains(&d.ws) {
                v.push(format!(
                    "workspace of {} is neither original nor a captured executor state",
                    d.id
                ));
            }
        }
        for (k, deadline) in &self.held {
            if now > *deadline {
                v.push(format!(
                    "{k:?} not released {} ms after its deadline",
                    now - deadline
                ));
            }
        }
        for (i, e) in self.execs.iter().enumerate() {
            self.peak_tasks = self.peak_tasks.max(e.tasks.len());
            if e.tasks.len() > self.cfg.max_concurrent {
                v.push(format!(
                    "exec{i} runs {} tasks, limit {}",
                    e.tasks.len(),
                    self.cfg.max_concurrent
                ));
            }
            if let Some(engine) = &e.engine {
                if engine.live_count() > self.cfg.max_concurrent {
                    v.push(format!(
                        "exec{i} holds {} live assignments, limit {}",
                        engine.live_count(),
                        self.cfg.max_concurrent
                    ));
                }
                if self.cfg.auth.is_some() {
                    // Who may act on each assignment: an intruder never; a caller without a
                    // header only on delegations whose INVITE came without one.
                    if engine.authorize(None, None).is_ok() {
                        v.push(format!("exec{i}: status open without a credential"));
                    }
                    let intruder = Credential::bearer("intruder");
                    for d in &self.dels {
                        if engine.assignment(&d.id).is_none() {
                            continue;
                        }
                        if engine.authorize(Some(&d.id), Some(&intruder)).is_ok() {
                            v.push(format!("exec{i}: a wrong credential may act on {}", d.id));
                        }
                        let anonymous = engine.authorize(Some(&d.id), None).is_ok();
                        if anonymous == self.sends_header(&d.id) {
                            v.push(format!(
                                "exec{i}: {} is {}open without a header (header style: {})",
                                d.id,
                                if anonymous { "" } else { "not " },
                                self.sends_header(&d.id)
                            ));
                        }
                    }
                }
            }
        }
        for m in v {
            self.violate(m);
        }
    }

    pub(super) fn check_end(&mut self) {
        let mut v = Vec::new();
        for d in &self.dels {
            if d.ended.is_none() {
                v.push(format!("{} never ended (state {})", d.id, d.state));
            }
        }
        // Without faults, a completed rw delegation in auto mode ends with exactly the
        // executor's final state.
        let clean = self.cfg.faults == Faults::default() && self.cfg.actions.is_empty();
        for d in &self.dels {
            let auto_rw = d.mode == SnapshotMode::Auto && d.access == AccessMode::Rw;
            // Without faults, every completed delegation lets its executor go (ACK): else the
            // executor keeps the result and its files until its retention runs out.
            if clean && d.ended == Some(DelegationState::Completed) && !d.acked {
                v.push(format!(
                    "{} completed without a fault but was never acknowledged",
                    d.id
                ));
            }
            // A completed kept-open delegation's result is the outcome of a round that
            // finished (on the executor).
            if d.rounds.is_some() && d.ended == Some(DelegationState::Completed) {
                let named = d.result.as_ref().and_then(|r| {
                    d.finished_rounds
                        .iter()
                        .find(|k| r.summary == round_summary(**k, &d.id))
                });
                if named.is_none() {
                    v.push(format!(
                        "{} completed with result {:?}, no finished round's",
                        d.id, d.result
                    ));
                }
            }
            if auto_rw && d.ended == Some(DelegationState::Completed) {
                // Every round's result applied, in order (one round unless kept open).
                let got =
                    d.captured.last() == Some(&d.ws) && d.applied as usize == d.captured.len();
                if clean && !got {
                    v.push(format!(
                        "{} completed without a fault but its workspace is not the executor's final state",
                        d.id
                    ));
                }
                if !got && d.apply_failed == 0 {
                    let k = "completed auto, result not applied";
                    *self.stats.entry(k).or_insert(0) += 1;
                }
            }
        }
        for k in self.held.keys() {
            v.push(format!("leak: {k:?} never released"));
        }
        if !self.store.is_empty() {
            v.push(format!("{} stored snapshots left", self.store.len()));
        }
        if !self.calls.is_empty() {
            v.push(format!("{} HTTP calls never answered", self.calls.len()));
        }
        if !self.streams.is_empty() {
            v.push(format!("{} event streams left open", self.streams.len()));
        }
        if !self.delegator.list().is_empty() {
            v.push(format!(
                "delegator still holds {} delegations after retention",
                self.delegator.list().len()
            ));
        }
        for (i, e) in self.execs.iter().enumerate() {
            if !e.reqs.is_empty() {
                v.push(format!("exec{i} never answered {} requests", e.reqs.len()));
            }
            if !e.tasks.is_empty() {
                v.push(format!("exec{i} still runs {} tasks", e.tasks.len()));
            }
            if !e.orphans.is_empty() {
                v.push(format!(
                    "exec{i}: {} orphaned tasks were never ended",
                    e.orphans.len()
                ));
            }
            if let Some(engine) = &e.engine {
                let s = engine.status();
                if s.pending + s.active + s.completed != 0 || engine.live_count() != 0 {
                    v.push(format!(
                        "exec{i} still holds assignments after retention: {s:?}"
                    ));
                }
            }
            for (id, a) in &e.assigns {
                if a.state.is_terminal() && !a.ended {
                    v.push(format!(
                        "exec{i}: assignment {id} reached {} but never ended",
                        a.state
                    ));
                }
            }
        }
        for m in v {
            self.violate(m);
        }
    }
}

pub(super) fn response_summary(r: &Response) -> String {
    match r {
        Response::Accept(..) => "ACCEPT".into(),
        Response::Error {
            message, status, ..
        } => {
            format!("ERROR {} ({status})", message.error.code.as_str())
        }
        Response::Ok => "ok".into(),
        Response::Cancelled => "cancelled".into(),
        Response::Result(b) => format!("result {}", b.status.as_str()),
    }
}
