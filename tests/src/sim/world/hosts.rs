//! The hosts: executor and delegator crashes and restarts, what their journals hold, the
//! all-or-nothing snapshot apply, and the simulated task runner.

use super::*;

impl World {
    pub(super) fn crash(&mut self, exec: usize, down_ms: u64) {
        if self.execs[exec].engine.is_none() {
            return;
        }
        self.bump("executor crash");
        let idle = self.execs[exec]
            .assigns
            .values()
            .filter(|a| a.state == AssignmentState::Idle)
            .count();
        let later = self.execs[exec]
            .tasks
            .values()
            .filter(|t| t.round >= 2)
            .count();
        for _ in 0..idle {
            self.bump("executor crash while idle");
        }
        for _ in 0..later {
            self.bump("executor crash mid-round (round ≥ 2)");
        }
        let back = self.now + down_ms + GRACE_MS;
        let node = &mut self.execs[exec];
        node.engine = None;
        let old = node.inc;
        node.inc += 1;
        node.reqs.clear(); // their clients time out
                           // Tasks whose process group was journalled keep running; the others are assumed to die
                           // with the executor (the driver's window between spawning and journalling).
        let tasks = std::mem::take(&mut node.tasks);
        let mut died = Vec::new();
        for (id, t) in tasks {
            let recorded = node
                .journal
                .get(&id)
                .and_then(|r| r.get("task"))
                .and_then(Value::as_str)
                == Some(task_handle(t.gen).0.as_str());
            if recorded {
                node.orphans.insert(id, t);
            } else {
                died.push(id);
            }
        }
        let orphaned = self.execs[exec].orphans.len();
        for _ in 0..orphaned {
            self.bump("task orphaned by a crash");
        }
        for id in died {
            self.bump("unjournalled task died with the executor");
            self.release(ResKey::Task(exec, id));
        }
        // Inline snapshots lived in the process's memory.
        let captured: Vec<ResKey> = self
            .held
            .keys()
            .filter(|k| matches!(k, ResKey::Captured(e, i, _, _) if *e == exec && *i == old))
            .cloned()
            .collect();
        for k in captured {
            self.release(k);
        }
        // Work directories and orphaned tasks stay until the restarted executor cleans up
        // what its journal records.
        for (k, deadline) in self.held.iter_mut() {
            if matches!(k, ResKey::WorkDir(e, _) | ResKey::Task(e, _) if *e == exec) {
                *deadline = (*deadline).max(back);
            }
        }
        let conns: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, st)| st.exec == exec)
            .map(|(s, _)| *s)
            .collect();
        for s in conns {
            self.cut(s);
        }
        self.schedule(self.now + down_ms, Ev::Restart(exec));
    }

    /// A new executor process on the same state: it restores its journal, as the driver does,
    /// and cleans up what the journal says its predecessor held.
    pub(super) fn restart(&mut self, exec: usize) {
        let seed = self.rng.next_u64();
        self.log(|| format!("exec{exec} restarts"));
        let mut engine = Executor::new(exec_config(&self.cfg, seed));
        let records: Vec<Value> = self.execs[exec].journal.values().cloned().collect();
        let restored: Vec<DelegationId> = engine
            .restore_records(self.ts(), &records)
            .into_iter()
            .filter_map(Result::ok)
            .collect();
        if !restored.is_empty() {
            self.bump("executor restored from its journal");
        }
        let node = &mut self.execs[exec];
        let mut closed_idle = 0;
        for (id, a) in node.assigns.iter_mut() {
            if let Some(v) = engine.assignment(id) {
                // Between rounds every round was delivered: the restarted executor closes it.
                if a.state == AssignmentState::Idle && v.state == AssignmentState::Completed {
                    closed_idle += 1;
                }
                a.state = v.state;
                if !v.released {
                    node.restored_unreleased.insert(id.clone());
                }
            }
        }
        node.engine = Some(engine);
        for _ in 0..closed_idle {
            self.bump("restarted executor closed an idle assignment");
        }
        // What restoring changed is journalled, as the driver does: only restored records.
        for id in restored {
            self.persist_exec(exec, &id);
        }
        self.drain_exec(exec);
    }

    pub(super) fn persist_exec(&mut self, exec: usize, id: &DelegationId) {
        let node = &mut self.execs[exec];
        match node.engine.as_ref().and_then(|e| e.record(id)) {
            Some(r) => {
                node.journal.insert(id.clone(), r);
            }
            None => {
                node.journal.remove(id);
            }
        }
    }

    // ------------------------------------------------------------------------------------
    // Delegator crash

    /// The delegator process dies and a new one starts at once on the same state directory:
    /// everything in memory is lost (requests in flight, event streams, local results); an
    /// apply in flight is finished all-or-nothing by the apply journal; the new engine is
    /// restored from the delegation journal, as the driver does.
    pub(super) fn crash_delegator(&mut self) {
        self.bump("delegator crash");
        for n in 0..self.dels.len() {
            let d = &self.dels[n];
            if d.rounds.is_none() || d.ended.is_some() {
                continue;
            }
            match d.state {
                DelegationState::Idle => self.bump("delegator crash while idle"),
                DelegationState::Running
                    if self.delegator.get(&d.id).is_some_and(|v| v.round >= 2) =>
                {
                    self.bump("delegator crash mid-round (round ≥ 2)");
                }
                _ => {}
            }
        }
        self.log(|| "delegator crashes and restarts".to_owned());
        self.del_inc += 1;
        self.calls.clear();
        for (s, st) in std::mem::take(&mut self.streams) {
            self.exec_notices_cut(s, &st);
        }
        self.cur_stream.clear();
        let mut rolled_back = Vec::new();
        for (_, p) in std::mem::take(&mut self.pending_applies) {
            let Some(files) = p.files else { continue };
            let i = self.idx(&p.id);
            if self.rng.chance(500) {
                self.bump("interrupted apply rolled forward");
                self.dels[i].ws = files;
                self.dels[i].applied += 1;
                self.dels[i].applied_ids.insert(p.snapshot_id.clone());
                self.apply_proofs
                    .insert(p.id.clone(), p.snapshot_id.clone());
            } else {
                self.bump("interrupted apply rolled back");
                rolled_back.push(p.id.clone());
            }
            let sid = p.snapshot_id;
            self.log(|| format!("apply {sid} of {} interrupted by the crash", p.id));
        }
        let power_lost = self.rng.chance(500);
        if power_lost {
            // The machine lost power: what was written and not yet synced is gone.
            self.bump("delegator power loss");
            self.del_journal = self.del_durable.clone();
            self.del_history = self.del_history_durable.clone();
        }
        let mut d = Delegator::new(del_config(&self.cfg));
        // Read back as the driver does: from the JSON the journal holds.
        let records: Vec<DelegationRecord> = self
            .del_journal
            .values()
            .map(|v| DelegationRecord::from_json(v).expect("the delegator reads its own records"))
            .collect();
        // What the start-up recovery reports, as the driver does: a proof found means the
        // swap finished; a staging found without one was rolled back.
        let mut recovered: BTreeMap<DelegationId, ApplyRecovery> = rolled_back
            .into_iter()
            .map(|id| (id, ApplyRecovery::RolledBack))
            .collect();
        for id in self.apply_proofs.keys() {
            recovered.insert(id.clone(), ApplyRecovery::Finished);
        }
        if !self.apply_proofs.is_empty() {
            self.bump("restart found the proof of a finished apply");
        }
        let now = self.ts();
        if d.restore(now, &records, &recovered) > 0 {
            self.bump("delegator restored from its journal");
        }
        for r in &records {
            if r.state == DelegationState::Idle && !r.ended {
                self.bump("delegator restored an idle delegation");
            }
        }
        // The history, as the driver reads it on the first request that may need it (here at
        // once): ids the journal restored are skipped.
        let history: Vec<DelegationRecord> = self
            .del_history
            .iter()
            .filter(|(id, _)| !self.del_journal.contains_key(*id))
            .map(|(_, v)| {
                DelegationRecord::from_json(v).expect("the delegator reads its own records")
            })
            .collect();
        if d.restore_history(now, &history) > 0 {
            self.bump("delegator restored its history");
        }
        self.restored.extend(history.iter().map(|r| r.id.clone()));
        self.delegator = d;
        if power_lost {
            // The application died with the machine: what it knows of each delegation is
            // what the journal kept (the states after the last sync are undone).
            for r in &records {
                let i = self.idx(&r.id);
                if self.dels[i].state != r.state {
                    self.bump("power loss undid a state the application saw");
                }
                let d = &mut self.dels[i];
                d.state = r.state;
                if !r.ended {
                    d.ended = None;
                    d.result = None;
                    d.error = None;
                    // Ending it again (the undone steps redone) takes from now.
                    d.deadline = d.deadline.max(self.now + GRACE_MS);
                }
            }
            let floor = self.now + GRACE_MS;
            for v in self.held.values_mut() {
                *v = (*v).max(floor);
            }
        }
        self.restored.extend(self.del_journal.keys().cloned());
        let ids: Vec<DelegationId> = self.del_journal.keys().cloned().collect();
        // Records read back are synced before the new process acts on them.
        self.del_durable = self.del_journal.clone();
        for id in ids {
            self.persist_del(&id, true);
        }
        self.drain_delegator();
    }

    /// Writes the record of `id` as the driver does: synced if `durable` or the first one.
    pub(super) fn persist_del(&mut self, id: &DelegationId, durable: bool) {
        match self.delegator.record(id) {
            Some(r) => {
                let r = r.to_json();
                if durable || !self.del_journal.contains_key(id) {
                    self.del_durable.insert(id.clone(), r.clone());
                }
                self.del_journal.insert(id.clone(), r);
            }
            // Unlinked, not durably (see `Journaling::Remove` in `on_del_out`).
            None => {
                self.del_journal.remove(id);
                self.del_history.remove(id);
            }
        }
    }

    /// An apply reaches its commit: all at once.
    pub(super) fn apply_commit(&mut self, n: u64) {
        let Some(p) = self.pending_applies.remove(&n) else {
            return; // finished by the crash recovery
        };
        if p.inc != self.del_inc {
            return;
        }
        let i = self.idx(&p.id);
        let ok = p.files.is_some();
        match p.files {
            Some(files) => {
                self.bump("snapshot applied");
                self.dels[i].ws = files;
                self.dels[i].applied += 1;
                self.dels[i].applied_ids.insert(p.snapshot_id.clone());
                self.apply_proofs
                    .insert(p.id.clone(), p.snapshot_id.clone());
            }
            None => {
                self.bump("snapshot apply failed");
                self.dels[i].apply_failed += 1;
            }
        }
        let (id, snapshot_id) = (p.id, p.snapshot_id);
        self.log(|| format!("apply {snapshot_id} to {id} committed ok={ok}"));
        self.del_input(DelegatorInput::SnapshotApplied {
            id,
            snapshot_id,
            result: if ok {
                Ok(())
            } else {
                Err(ErrorInfo::new(ErrorCode::SetupFailed, "sim: apply"))
            },
            left_out: Vec::new(),
            changed: Vec::new(),
        });
    }

    // ------------------------------------------------------------------------------------
    // Tasks

    pub(super) fn task_step(&mut self, exec: usize, inc: u32, id: DelegationId, gen: u64) {
        let node = &mut self.execs[exec];
        let orphan = node.orphans.get(&id).is_some_and(|t| t.gen == gen);
        let current = node.inc == inc && node.tasks.get(&id).is_some_and(|t| t.gen == gen);
        if !orphan && !current {
            return;
        }
        // Edit the work directory: change, create or delete a file.
        let choice = self.rng.below(3);
        let v = self.rng.next_u64();
        let node = &mut self.execs[exec];
        if let Some(files) = node.work.get_mut(&id) {
            match choice {
                0 => {
                    let n = files.len() as u64;
                    if let Some(k) = files.keys().nth((v % n.max(1)) as usize).cloned() {
                        files.insert(k, format!("edit-{v:x}"));
                    }
                }
                1 => {
                    files.insert(format!("out/new{}.txt", v % 7), format!("new-{v:x}"));
                }
                _ => {
                    let n = files.len() as u64;
                    if n > 1 {
                        if let Some(k) = files.keys().nth((v % n) as usize).cloned() {
                            files.remove(&k);
                        }
                    }
                }
            }
        }
        if orphan {
            // Nobody listens any more; it runs until ended or done.
            let t = node.orphans.get_mut(&id).expect("checked");
            t.steps_left = t.steps_left.saturating_sub(1);
            if t.steps_left == 0 {
                node.orphans.remove(&id);
                self.bump("orphaned task finished by itself");
                self.release(ResKey::Task(exec, id));
            } else {
                let at = self.now + self.dels[self.by_id[&id]].step_ms;
                self.schedule(at, Ev::TaskStep { exec, inc, id, gen });
            }
            return;
        }
        let task = node.tasks.get_mut(&id).expect("checked");
        task.steps_left = task.steps_left.saturating_sub(1);
        let (left, round) = (task.steps_left, task.round);
        let i = self.by_id[&id];
        if left == 0 {
            let node = &mut self.execs[exec];
            node.tasks.remove(&id);
            self.release(ResKey::Task(exec, id.clone()));
            self.finished_tasks += 1;
            let d = &self.dels[i];
            // Kept open: the last planned round fails, if any; each round reports its own
            // outcome.
            let fails = d.task_fails && d.rounds.as_ref().is_none_or(|p| round == p.total());
            let result = if fails {
                Err(TaskFailure::Failed("the task failed".into()))
            } else if d.rounds.is_some() {
                Ok(TaskOutcome {
                    summary: round_summary(round, &id),
                    highlights: vec![format!("round{round}.txt")],
                })
            } else {
                Ok(TaskOutcome {
                    summary: format!("task of {id} done"),
                    highlights: vec!["src/file0.txt".into()],
                })
            };
            if result.is_ok() {
                self.dels[i].finished_rounds.insert(round);
            }
            let kept_open = self.dels[i].rounds.is_some();
            self.log(|| {
                if kept_open {
                    format!(
                        "exec{exec} task {id} round {round} finished ok={}",
                        result.is_ok()
                    )
                } else {
                    format!("exec{exec} task {id} finished ok={}", result.is_ok())
                }
            });
            self.exec_input(exec, ExecutorInput::TaskFinished { id, result });
        } else {
            self.exec_input(
                exec,
                ExecutorInput::TaskProgress {
                    id: id.clone(),
                    message: Some(format!("{left} steps left")),
                    progress: None,
                },
            );
            let at = self.now + self.dels[i].step_ms;
            self.schedule(at, Ev::TaskStep { exec, inc, id, gen });
        }
    }

    // ------------------------------------------------------------------------------------
    // Delegator outputs
}
