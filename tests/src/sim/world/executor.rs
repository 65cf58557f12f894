//! The executor hosts: executing each executor engine's outputs (work directories,
//! transports, tasks, snapshots, responses and streams) and checking its events.

use super::*;

impl World {
    pub(super) fn drain_exec(&mut self, exec: usize) {
        self.exec_turn(exec, Wake::Drained);
    }

    pub(super) fn on_exec_out(&mut self, exec: usize, out: ExecutorOutput) {
        let inc = self.execs[exec].inc;
        match out {
            ExecutorOutput::Respond { request, response } => {
                let Some(call) = self.execs[exec].reqs.remove(&request.0) else {
                    self.violate(format!("exec{exec} answered request {} twice", request.0));
                    return;
                };
                if self.rng.chance(self.cfg.faults.resp_loss) {
                    self.log(|| format!("response to call {call} lost"));
                    self.bump("response lost");
                    return;
                }
                let at = self.now + self.latency();
                self.schedule(
                    at,
                    Ev::CallReply {
                        call,
                        resp: response,
                    },
                );
            }
            ExecutorOutput::StreamEvent {
                stream,
                event,
                event_id,
                ..
            } => {
                let ok = self
                    .streams
                    .get(&stream.0)
                    .is_some_and(|st| st.exec == exec && st.subscribed == Some(inc));
                if ok {
                    self.push_stream(
                        stream.0,
                        StreamItem::Event(Box::new((*event).clone()), event_id),
                    );
                }
            }
            ExecutorOutput::CloseStream { stream } => {
                let ok = self
                    .streams
                    .get(&stream.0)
                    .is_some_and(|st| st.exec == exec && st.subscribed == Some(inc));
                if ok {
                    self.push_stream(stream.0, StreamItem::Closed("end of stream"));
                }
            }
            ExecutorOutput::AllocateWorkDir { id, .. } => {
                // A new assignment (pending) exists from here on.
                self.execs[exec].assigns.insert(
                    id.clone(),
                    AssignTrack {
                        state: AssignmentState::Pending,
                        ended: false,
                        setup_code: None,
                    },
                );
                if self.rng.chance(self.cfg.faults.alloc_fail) {
                    self.bump("work dir allocation failed");
                    let e = AllocationFailure::CannotCreate("sim: allocation".into());
                    self.exec_local(
                        exec,
                        inc,
                        ExecutorInput::WorkDirAllocated { id, result: Err(e) },
                    );
                    return;
                }
                let i = self.idx(&id);
                let deadline = self.now + self.dels[i].ttl_ms + GRACE_MS;
                self.acquire(ResKey::WorkDir(exec, id.clone()), deadline);
                let node = &mut self.execs[exec];
                node.work.insert(id.clone(), Files::new());
                self.exec_local(
                    exec,
                    inc,
                    ExecutorInput::WorkDirAllocated { id, result: Ok(()) },
                );
            }
            ExecutorOutput::SetupTransport { id, handle, .. } => {
                if !self.held.contains_key(&ResKey::WorkDir(exec, id.clone())) {
                    self.violate(format!("exec{exec} sets up {id} without a work dir"));
                }
                let (body, checksum_wanted) = match *handle {
                    TransportHandle::Archive(h) => match (h.data.base64, h.data.url) {
                        (Some(b), _) => (Ok(Some(b)), h.checksum),
                        (None, Some(url)) => (self.fetch_archive(exec, &id, &url), h.checksum),
                        (None, None) => (Ok(None), h.checksum),
                    },
                    _ => (Ok(None), String::new()),
                };
                let files = body.map(|b| {
                    b.filter(|b| checksum(b) == checksum_wanted)
                        .and_then(|b| decode_files(&b))
                });
                let result = match files {
                    Err(failure) => {
                        self.bump("setup failed fetching");
                        if let Some(a) = self.execs[exec].assigns.get_mut(&id) {
                            a.setup_code = Some(ErrorCode::TransportError);
                        }
                        Err(failure)
                    }
                    Ok(None) => Err(SetupFailure::Transport(ErrorInfo::new(
                        ErrorCode::ChecksumMismatch,
                        "sim: bad archive",
                    ))),
                    Ok(Some(_)) if self.rng.chance(self.cfg.faults.setup_fail) => {
                        // What a driver can find; the engine picks the code, the world knows
                        // which one each fact must give (fetch: the delegator's side).
                        let (failure, code) = match self.rng.below(3) {
                            0 => (
                                SetupFailure::Fetch("sim: 503".into()),
                                ErrorCode::TransportError,
                            ),
                            1 => (
                                SetupFailure::Staging("sim: disk full".into()),
                                ErrorCode::SetupFailed,
                            ),
                            _ => (SetupFailure::NoArchiveData, ErrorCode::SetupFailed),
                        };
                        self.bump(match code {
                            ErrorCode::TransportError => "setup failed fetching",
                            _ => "setup failed locally",
                        });
                        if let Some(a) = self.execs[exec].assigns.get_mut(&id) {
                            a.setup_code = Some(code);
                        }
                        Err(failure)
                    }
                    Ok(Some(f)) => {
                        self.execs[exec].work.insert(id.clone(), f);
                        Ok(WorkspaceLayout::PerResource)
                    }
                };
                self.exec_local(exec, inc, ExecutorInput::SetupCompleted { id, result });
            }
            ExecutorOutput::RunTask {
                id,
                task,
                round,
                earlier,
                ..
            } => {
                if !self.held.contains_key(&ResKey::WorkDir(exec, id.clone())) {
                    self.violate(format!("exec{exec} runs {id} without a work dir"));
                }
                self.next_task_gen += 1;
                let gen = self.next_task_gen;
                let i = self.idx(&id);
                self.dels[i].rounds_started += 1;
                if round == 1 {
                    self.dels[i].runs += 1;
                    // Once per executor memory: a restarted executor cannot recognise a late
                    // duplicate of INVITE and START.
                    match self.dels[i].ran_on.replace((exec, inc)) {
                        Some(prev) if prev == (exec, inc) => {
                            self.violate(format!("the task of {id} runs a second time"));
                        }
                        Some(_) => self.bump("task re-run by a restarted executor"),
                        None => {}
                    }
                } else {
                    self.check_later_round(exec, inc, &id, round, &task, &earlier);
                }
                if !self.dels[i].ran_rounds.insert((exec, inc, round)) {
                    self.violate(format!("round {round} of {id} runs twice on exec{exec}"));
                }
                let step_ms = self.dels[i].step_ms;
                let steps = match (&self.dels[i].rounds, round) {
                    (Some(plan), 2..) => plan
                        .later_steps
                        .get(round as usize - 2)
                        .copied()
                        .unwrap_or(self.dels[i].steps),
                    _ => self.dels[i].steps,
                };
                if self.execs[exec].tasks.contains_key(&id)
                    || self.execs[exec].orphans.contains_key(&id)
                {
                    self.violate(format!("exec{exec} runs {id} twice at once"));
                }
                self.execs[exec].tasks.insert(
                    id.clone(),
                    SimTask {
                        gen,
                        steps_left: steps,
                        round,
                    },
                );
                let deadline = self.dels[i].deadline;
                self.acquire(ResKey::Task(exec, id.clone()), deadline);
                if round >= 2 {
                    // The round has a lease as long as the first: the work dir stays for it.
                    let at = self.now + self.dels[i].ttl_ms + GRACE_MS;
                    if let Some(v) = self.held.get_mut(&ResKey::WorkDir(exec, id.clone())) {
                        *v = (*v).max(at);
                    }
                }
                let kept_open = self.dels[i].rounds.is_some();
                self.log(|| {
                    if kept_open {
                        format!("exec{exec} runs {id} (round {round})")
                    } else {
                        format!("exec{exec} runs {id}")
                    }
                });
                // The driver reports the task's process group once it exists.
                self.exec_local(
                    exec,
                    inc,
                    ExecutorInput::TaskSpawned {
                        id: id.clone(),
                        handle: task_handle(gen),
                    },
                );
                self.schedule(self.now + step_ms, Ev::TaskStep { exec, inc, id, gen });
            }
            ExecutorOutput::StopTask { id } => {
                if self.execs[exec].tasks.remove(&id).is_some() {
                    // The runner ends the task's whole process group.
                    self.release(ResKey::Task(exec, id.clone()));
                    self.stopped_tasks += 1;
                    self.bump("task stopped");
                    let delay = if self.rng.chance(self.cfg.faults.stop_slow) {
                        self.rng.range(11_000, 30_000)
                    } else {
                        self.rng.range(10, 2_000)
                    };
                    self.log(|| format!("exec{exec} stops {id} (reports in {delay} ms)"));
                    self.schedule(
                        self.now + delay,
                        Ev::ExecIn {
                            exec,
                            inc,
                            input: ExecutorInput::TaskFinished {
                                id,
                                result: Err(TaskFailure::Stopped),
                            },
                        },
                    );
                }
            }
            ExecutorOutput::CaptureSnapshot {
                id, snapshot_id, ..
            } => {
                let Some(files) = self.execs[exec].work.get(&id).cloned() else {
                    self.violate(format!("exec{exec} captures {id} without a work dir"));
                    return;
                };
                if self.rng.chance(self.cfg.faults.capture_fail) {
                    self.bump("capture failed");
                    let e = if self.rng.chance(500) {
                        CaptureFailure::Local("sim: snapshot dir".into())
                    } else {
                        CaptureFailure::Transport(ErrorInfo::new(
                            ErrorCode::TaskFailed,
                            "sim: capture",
                        ))
                    };
                    self.exec_local(
                        exec,
                        inc,
                        ExecutorInput::SnapshotCaptured { id, result: Err(e) },
                    );
                    return;
                }
                let i = self.idx(&id);
                self.dels[i].captured.push(files.clone());
                self.dels[i]
                    .snap_files
                    .insert(snapshot_id.clone(), files.clone());
                self.acquire(
                    ResKey::Captured(exec, inc, id.clone(), snapshot_id.clone()),
                    u64::MAX,
                );
                let body = encode_files(&files);
                let snap = CapturedSnapshot {
                    checksum: Some(checksum(&body)),
                    data: ArchiveData {
                        base64: Some(body),
                        url: None,
                        local_file: None,
                        local_file_sha256: None,
                    },
                    metadata: BTreeMap::from([(
                        "fileCount".to_owned(),
                        serde_json::Value::from(files.len()),
                    )]),
                };
                self.exec_local(
                    exec,
                    inc,
                    ExecutorInput::SnapshotCaptured {
                        id,
                        result: Ok(Box::new(snap)),
                    },
                );
            }
            ExecutorOutput::Release { id, work_dir, .. } => {
                if self.execs[exec].tasks.contains_key(&id)
                    || self.execs[exec].orphans.contains_key(&id)
                {
                    self.violate(format!("exec{exec} releases {id} while its task runs"));
                }
                if work_dir != format!("/sim/work/{id}") {
                    self.violate(format!("exec{exec} releases {work_dir}, not its work dir"));
                }
                self.execs[exec].work.remove(&id);
                let key = ResKey::WorkDir(exec, id.clone());
                let idempotent = self.execs[exec].restored_unreleased.remove(&id);
                if !idempotent || self.held.contains_key(&key) {
                    self.release(key);
                }
                self.exec_local(exec, inc, ExecutorInput::Released { id, result: Ok(()) });
            }
            ExecutorOutput::RemoveEmptyWorkDir { id, .. } => {
                // An allocation the crash interrupted: the directory exists only if the
                // allocation had run (and it is empty: setup never started).
                self.bump("interrupted allocation cleaned up");
                if self.held.contains_key(&ResKey::WorkDir(exec, id.clone())) {
                    if self.execs[exec]
                        .work
                        .get(&id)
                        .is_some_and(|f| !f.is_empty())
                    {
                        self.violate(format!(
                            "exec{exec}: {id} was set up but is removed as empty"
                        ));
                    }
                    self.execs[exec].work.remove(&id);
                    self.release(ResKey::WorkDir(exec, id.clone()));
                }
                self.exec_local(exec, inc, ExecutorInput::Released { id, result: Ok(()) });
            }
            ExecutorOutput::DropSnapshot { id, snapshot_id } => {
                self.release(ResKey::Captured(exec, inc, id, snapshot_id));
            }
            ExecutorOutput::EndTask { id, handle } => {
                // The restarted executor ends what its journal recorded.
                match self.execs[exec].orphans.remove(&id) {
                    Some(t) if task_handle(t.gen) == handle => {
                        self.bump("orphaned task ended after a restart");
                        self.log(|| format!("exec{exec} ends orphaned task {id}"));
                        self.release(ResKey::Task(exec, id.clone()));
                    }
                    Some(t) => {
                        self.violate(format!(
                            "exec{exec} ends {id} with a handle of another task"
                        ));
                        self.execs[exec].orphans.insert(id.clone(), t);
                    }
                    None => self.bump("recorded task already gone"),
                }
                self.exec_local(
                    exec,
                    inc,
                    ExecutorInput::TaskFinished {
                        id,
                        result: Err(TaskFailure::Stopped),
                    },
                );
            }
            ExecutorOutput::Event(ev) => self.on_exec_event(exec, ev),
        }
    }

    pub(super) fn on_exec_event(&mut self, exec: usize, ev: ExecutorEvent) {
        // The journal, as the driver writes it.
        let recorded = match &ev {
            ExecutorEvent::InviteReceived { id, .. }
            | ExecutorEvent::StateChanged { id, .. }
            | ExecutorEvent::RecordChanged { id }
            | ExecutorEvent::Ended { id, .. }
            | ExecutorEvent::Forgotten { id }
            | ExecutorEvent::PeerMisbehaved { id, .. } => id.clone(),
        };
        self.persist_exec(exec, &recorded);
        match ev {
            ExecutorEvent::StateChanged { id, from, to } => {
                self.log(|| format!("exec{exec} assignment {id}: {from} -> {to}"));
                let Some(a) = self.execs[exec].assigns.get_mut(&id) else {
                    self.violate(format!("exec{exec}: transition of unknown assignment {id}"));
                    return;
                };
                let last = a.state;
                a.state = to;
                let legal = AssignmentEvent::ALL
                    .iter()
                    .any(|e| e.target(from) == Some(to));
                self.on_assignment_round(exec, &id, from, to);
                if last != from {
                    self.violate(format!(
                        "exec{exec} {id}: transition from {from} but the last state was {last}"
                    ));
                } else if !legal {
                    self.violate(format!(
                        "exec{exec} {id}: illegal transition {from} -> {to}"
                    ));
                }
            }
            ExecutorEvent::Ended { id, state, error } => {
                self.log(|| format!("exec{exec} assignment {id} ended {state}"));
                let Some(a) = self.execs[exec].assigns.get_mut(&id) else {
                    self.violate(format!("exec{exec}: unknown assignment {id} ended"));
                    return;
                };
                let twice = a.ended;
                a.ended = true;
                let last = a.state;
                let setup_code = a.setup_code.take();
                if twice {
                    self.violate(format!("exec{exec}: assignment {id} ended twice"));
                }
                if last != state || !state.is_terminal() {
                    self.violate(format!(
                        "exec{exec}: assignment {id} ended {state} but its state is {last}"
                    ));
                }
                let code = error.as_ref().map(|e| e.code.clone());
                if let (
                    Some(want),
                    Some(got @ (ErrorCode::SetupFailed | ErrorCode::TransportError)),
                ) = (setup_code, code)
                {
                    if want != got {
                        self.violate(format!(
                            "exec{exec}: assignment {id} failed setup with {} but the failure \
                             calls for {}",
                            got.as_str(),
                            want.as_str()
                        ));
                    }
                }
                self.bump(match (state, error.as_ref().map(|e| &e.code)) {
                    (AssignmentState::Completed, _) => "assignment completed",
                    (_, Some(ErrorCode::Expired)) => "assignment expired",
                    (_, Some(ErrorCode::StartExpired)) => "assignment start expired",
                    (_, Some(ErrorCode::Cancelled)) => "assignment cancelled",
                    (_, Some(ErrorCode::TaskFailed)) => "assignment task failed",
                    _ => "assignment other error",
                });
                self.exec_endings
                    .push((exec, id, state, error.map(|e| e.code)));
            }
            ExecutorEvent::PeerMisbehaved { .. } => self.bump("executor saw a misbehaving peer"),
            ExecutorEvent::InviteReceived { .. }
            | ExecutorEvent::Forgotten { .. }
            | ExecutorEvent::RecordChanged { .. } => {}
        }
    }

    /// An assignment went `from -> to`: the rounds' side of it.
    fn on_assignment_round(
        &mut self,
        exec: usize,
        id: &DelegationId,
        from: AssignmentState,
        to: AssignmentState,
    ) {
        match (from, to) {
            (_, AssignmentState::Idle) => {
                let i = self.idx(id);
                if self.dels[i].rounds.is_none() {
                    self.violate(format!("exec{exec}: {id} went idle but was not kept open"));
                }
                // Nobody may continue it: the idle timeout ends it and releases the work dir.
                let at = self.now + self.cfg.exec_idle_timeout_ms + GRACE_MS;
                if let Some(v) = self.held.get_mut(&ResKey::WorkDir(exec, id.clone())) {
                    *v = (*v).max(at);
                }
            }
            (AssignmentState::Idle, AssignmentState::Active) => {
                let i = self.idx(id);
                self.dels[i].exec_continues += 1;
            }
            (AssignmentState::Idle, AssignmentState::Completed) => {
                if self.exec_timer_turn == Some(exec) {
                    self.bump("executor idle timeout closed an assignment");
                } else {
                    self.bump("executor closed an assignment on CLOSE");
                }
            }
            (AssignmentState::Idle, _) => self.bump("idle assignment failed or cancelled"),
            _ => {}
        }
    }

    /// A later round (`round` ≥ 2) of `id` starts on executor `exec` (incarnation `inc`): only
    /// after the previous one on the same memory (an executor restarted between rounds closed
    /// the delegation), with the application's prompt, and every earlier round's result as
    /// the agent's history.
    fn check_later_round(
        &mut self,
        exec: usize,
        inc: u32,
        id: &DelegationId,
        round: u64,
        task: &TaskSpec,
        earlier: &[awcp_proto::engine::EarlierRound],
    ) {
        let i = self.idx(id);
        let d = &self.dels[i];
        let mut v = Vec::new();
        if d.rounds.is_none() {
            v.push(format!(
                "exec{exec} runs round {round} of {id}, not kept open"
            ));
        }
        if task.prompt != round_prompt(round) {
            v.push(format!(
                "exec{exec} runs round {round} of {id} with prompt {:?}",
                task.prompt
            ));
        }
        // The known engine bug skips rounds (`sim::KNOWN_BUG_STALE_ROUND_DONE`).
        let skipped = d.stale_round_done && self.cfg.known_bugs.stale_round_done;
        if !skipped && !d.ran_rounds.contains(&(exec, inc, round - 1)) {
            v.push(format!(
                "exec{exec} runs round {round} of {id} without having run round {} (same memory)",
                round - 1
            ));
        }
        let history: Vec<(u64, String)> = earlier
            .iter()
            .map(|e| (e.round, e.summary.clone()))
            .collect();
        let want: Vec<(u64, String)> = (1..round).map(|r| (r, round_summary(r, id))).collect();
        if !skipped && history != want {
            v.push(format!(
                "exec{exec} runs round {round} of {id} with history {history:?}"
            ));
        }
        if !skipped && !d.finished_rounds.contains(&(round - 1)) {
            v.push(format!(
                "exec{exec} runs round {round} of {id} before round {} finished",
                round - 1
            ));
        }
        self.bump(if round == 2 {
            "round 2 ran"
        } else {
            "round ≥ 3 ran"
        });
        for m in v {
            self.violate(m);
        }
    }

    // ------------------------------------------------------------------------------------
    // Invariants

    /// Executor `exec` fetches `id`'s archive from the delegator's archive server at `url`:
    /// the delegator's engine decides ([`Delegator::redeem_archive_url`]). A refusal is a
    /// failed fetch (the delegator's side: `TRANSPORT_ERROR`). Checks that a granted fetch
    /// opens this delegation's archive, while its export is still held, and only once.
    fn fetch_archive(
        &mut self,
        exec: usize,
        id: &DelegationId,
        url: &str,
    ) -> Result<Option<String>, SetupFailure> {
        let token = url.rsplit('/').next().unwrap_or_default().to_owned();
        let now = self.ts();
        match self
            .delegator
            .redeem_archive_url(now, &SecretDigest::of(&token))
        {
            Ok(granted) => {
                self.bump("archive fetched by URL");
                let Some((owner, body)) = self.archive_urls.get(&token).cloned() else {
                    self.violate(format!("exec{exec}: a token never issued opened {granted}"));
                    return Ok(None);
                };
                if granted != owner || granted != *id {
                    self.violate(format!(
                        "exec{exec}: {id}'s archive URL opened {granted}'s archive (issued for {owner})"
                    ));
                }
                if !self.held.contains_key(&ResKey::Export(granted.clone())) {
                    self.violate(format!("{granted}'s archive URL opened after its release"));
                }
                if !self.archive_fetched.insert(token) {
                    self.violate(format!("{granted}'s one-time archive URL opened twice"));
                }
                Ok(Some(body))
            }
            Err(why) => {
                self.bump("archive URL refused");
                self.log(|| format!("exec{exec} fetching {id}'s archive: {why}"));
                Err(SetupFailure::Fetch(format!("sim: 404 ({why})")))
            }
        }
    }
}

/// Executor host `exec`, as the canonical drive loop sees it (no engine while it is down).
pub(super) struct ExecHost<'a> {
    pub(super) world: &'a mut World,
    pub(super) exec: usize,
}

impl drive::Host for ExecHost<'_> {
    type Engine = Executor;
    fn engine(&mut self) -> Option<&mut Executor> {
        self.world.execs[self.exec].engine.as_mut()
    }
    fn execute(&mut self, output: ExecutorOutput) {
        self.world.on_exec_out(self.exec, output);
    }
    fn refused(&mut self, e: awcp_proto::UsageError) {
        let exec = self.exec;
        self.world.log(|| format!("exec{exec} refused input: {e}"));
    }
}
