//! The application: creating delegations and the actions a run's script takes (cancel,
//! apply, discard, crashes, clock jumps).

use super::*;

impl World {
    pub(super) fn create(&mut self, i: usize) {
        let spec = self.cfg.delegations[i].clone();
        let id = DelegationId::from_random(self.rng.bytes::<16>());
        let mut original = Files::new();
        for f in 0..self.rng.range(1, 4) {
            let v = self.rng.next_u64();
            original.insert(format!("src/file{f}.txt"), format!("v0-{v:x}"));
        }
        self.by_id.insert(id.clone(), i);
        self.dels.push(DelTrack {
            id: id.clone(),
            ws: original.clone(),
            original,
            state: DelegationState::Created,
            ended: None,
            error: None,
            result: None,
            accepted: false,
            handle: None,
            captured: Vec::new(),
            applied: 0,
            applied_ids: Default::default(),
            apply_failed: 0,
            acked: false,
            runs: 0,
            ran_on: None,
            rounds_started: 0,
            ran_rounds: Default::default(),
            finished_rounds: Default::default(),
            continues: 0,
            continue_attempts: 0,
            exec_continues: 0,
            last_from: DelegationState::Created,
            settled: false,
            settle_epoch: 0,
            last_round_done: None,
            snap_files: BTreeMap::new(),
            stale_round_done: false,
            rounds: spec.rounds.clone(),
            prepare_failure: None,
            deadline: self.now + spec.ttl_s * 1000 + GRACE_MS,
            ttl_ms: spec.ttl_s * 1000,
            access: spec.access,
            mode: spec.mode,
            steps: spec.steps,
            step_ms: spec.step_ms,
            task_fails: spec.task_fails,
        });
        debug_assert_eq!(self.dels.len() - 1, i, "delegations are created in order");
        let req = DelegateRequest {
            id: id.clone(),
            peer: peer_of(spec.exec),
            dialect: spec.dialect,
            task: TaskSpec {
                description: format!("task {i}"),
                prompt: "edit the files".into(),
            },
            ttl_seconds: spec.ttl_s,
            access_mode: spec.access,
            resources: vec![Resource {
                name: ResourceName::new("workspace").expect("valid name"),
                kind: "fs".into(),
                mode: spec.access,
            }],
            transport: TransportKind::Archive,
            snapshot_mode: spec.mode,
            auth: self.cfg.auth.as_ref().map(|_| awcp_proto::Auth {
                auth_type: awcp_proto::AuthType::Bearer,
                credential: SIM_TOKEN.into(),
                metadata: Default::default(),
            }),
            allow_sensitive: false,
            keep_open: spec.rounds.is_some(),
        };
        self.log(|| {
            format!(
                "delegate #{i} {id} exec{} ttl={}s {:?} {:?} {:?} steps={}x{}ms fail={}{}",
                spec.exec,
                spec.ttl_s,
                spec.access,
                spec.mode,
                spec.dialect,
                spec.steps,
                spec.step_ms,
                spec.task_fails,
                spec.rounds
                    .as_ref()
                    .map(|r| format!(" kept open: {r:?}"))
                    .unwrap_or_default()
            )
        });
        let now = self.ts();
        if let Err(e) = self.delegator.delegate(now, req) {
            self.violate(format!("delegate refused: {e}"));
        }
        // Journalled at once, as the driver does: a crash never loses a delegation whose id
        // the application has.
        self.persist_del(&id, true);
        self.drain_delegator();
    }

    pub(super) fn app(&mut self, a: Action) {
        self.log(|| format!("action {a:?}"));
        match a {
            Action::Cancel(n) => {
                let Some(d) = self.dels.get(n) else { return };
                let id = d.id.clone();
                if d.rounds.is_some() && d.ended.is_none() {
                    match d.state {
                        DelegationState::Idle => self.bump("cancel while idle"),
                        DelegationState::Running
                            if self.delegator.get(&id).is_some_and(|v| v.round >= 2) =>
                        {
                            self.bump("cancel mid-round (round ≥ 2)");
                        }
                        _ => {}
                    }
                }
                let now = self.ts();
                if let Err(e) = self.delegator.cancel(now, &id) {
                    self.log(|| format!("cancel refused: {e}"));
                }
                self.drain_delegator();
            }
            Action::CutStream(n) => {
                if let Some(s) = self
                    .dels
                    .get(n)
                    .and_then(|d| self.cur_stream.get(&d.id).copied())
                {
                    self.cut(s);
                }
            }
            Action::CutRandomStream => {
                let open: Vec<u64> = self.cur_stream.values().copied().collect();
                if !open.is_empty() {
                    let s = open[self.rng.below(open.len() as u64) as usize];
                    self.cut(s);
                }
            }
            Action::Crash { exec, down_ms } => self.crash(exec, down_ms),
            Action::CrashDelegator => self.crash_delegator(),
            Action::CrashDelegatorDuringApply => self.crash_on_apply = true,
            Action::CrashInRound {
                n,
                round,
                idle,
                executor_down_ms,
            } => self.round_crashes.push(RoundCrash {
                n,
                round,
                idle,
                executor_down_ms,
            }),
            Action::JumpClock(by) => {
                self.bump("clock jump");
                self.now += by;
                let floor = self.now + JUMP_GRACE_MS;
                for d in &mut self.dels {
                    // A delegation not invited yet starts its lease after the jump.
                    let from_now = if d.state == DelegationState::Created {
                        self.now + d.ttl_ms + GRACE_MS
                    } else {
                        floor
                    };
                    d.deadline = d.deadline.max(from_now);
                }
                for v in self.held.values_mut() {
                    *v = (*v).max(floor);
                }
            }
        }
    }

    // ------------------------------------------------------------------------------------
    // Rounds

    /// After each delegator turn, as an application waiting for a round's end does: a
    /// kept-open delegation whose round just settled is checked, and the application decides
    /// what to do with it a little later.
    pub(super) fn watch_rounds(&mut self) {
        for n in 0..self.dels.len() {
            if self.dels[n].rounds.is_none() {
                continue;
            }
            let settled = self.delegator.round_settled(&self.dels[n].id);
            let was = std::mem::replace(&mut self.dels[n].settled, settled);
            if settled && !was {
                self.dels[n].settle_epoch += 1;
                self.round_settled(n);
            }
        }
    }

    /// Kept-open delegation `n`'s round just settled: what that promises, then the
    /// application's decision, `think_ms` later.
    fn round_settled(&mut self, n: usize) {
        let id = self.dels[n].id.clone();
        let Some(view) = self.delegator.get(&id) else {
            return;
        };
        let round = view.round;
        self.bump("round settled");
        self.log(|| format!("round {round} of {id} settled"));
        let d = &self.dels[n];
        let mut v = Vec::new();
        let mut counters = Vec::new();
        if d.stale_round_done && self.cfg.known_bugs.stale_round_done {
            // The known engine bug: the delegator's rounds no longer match the executor's.
            let (epoch, think) = (d.settle_epoch, d.rounds.as_ref().map_or(0, |r| r.think_ms));
            self.schedule(self.now + think, Ev::RoundDecision { n, epoch });
            return;
        }
        if d.state != DelegationState::Idle {
            v.push(format!("{id}: round settled in state {}", d.state));
        }
        // The round counter: at most one more than the CONTINUEs the application made and
        // than those an executor accepted (a round that settled ran).
        if round > u64::from(d.exec_continues) + 1 {
            v.push(format!(
                "{id}: round {round} settled but executors accepted only {} CONTINUEs",
                d.exec_continues
            ));
        }
        // The round's result: the outcome of a round that finished.
        let want = view.result.as_ref().map(|r| r.summary.clone());
        if want != Some(round_summary(round, &id)) {
            v.push(format!("{id}: round {round} settled with result {want:?}"));
        }
        // In `auto` mode a settled round's snapshot is applied (or its store or apply
        // failed), and the workspace is then exactly that round's result.
        if d.mode == SnapshotMode::Auto && d.access == AccessMode::Rw {
            match &d.last_round_done {
                Some((r, Some(sid), inc)) if *r == round => {
                    match view
                        .snapshots
                        .iter()
                        .find(|s| &s.id == sid)
                        .map(|s| &s.status)
                    {
                        Some(SnapshotStatus::Applied) => {
                            counters.push("settled round applied");
                            if d.snap_files.get(sid) != Some(&d.ws) {
                                v.push(format!(
                                    "{id}: round {round}'s snapshot {sid} is applied but the \
                                     workspace is not its result"
                                ));
                            }
                        }
                        // Its store or apply failed (and the application may have discarded
                        // it since).
                        Some(
                            SnapshotStatus::Pending
                            | SnapshotStatus::Failed(_)
                            | SnapshotStatus::Discarded,
                        ) => {
                            counters.push("settled round not applied (store or apply failed)");
                        }
                        // The known engine bug `sim::KNOWN_BUG_RESTORED_IDLE_SETTLED`.
                        None if *inc != self.del_inc
                            && self.cfg.known_bugs.restored_idle_settled =>
                        {
                            counters.push(
                                "settled round's snapshot forgotten by a restart (known bug)",
                            );
                        }
                        other => v.push(format!(
                            "{id}: round {round} settled while its snapshot {sid} is {:?}",
                            other.map(SnapshotStatus::as_str)
                        )),
                    }
                }
                _ => counters.push("settled round's round_done not seen"),
            }
        }
        for c in counters {
            self.bump(c);
        }
        for m in v {
            self.violate(m);
        }
        let (epoch, think) = (
            self.dels[n].settle_epoch,
            self.dels[n].rounds.as_ref().map_or(0, |r| r.think_ms),
        );
        self.schedule(self.now + think, Ev::RoundDecision { n, epoch });
    }

    /// The application acts on kept-open delegation `n` whose round settled: the next round
    /// (a new prompt), or the planned end.
    pub(super) fn round_decision(&mut self, n: usize, epoch: u64) {
        let id = self.dels[n].id.clone();
        let Some(plan) = self.dels[n].rounds.clone() else {
            return;
        };
        if self.dels[n].settle_epoch != epoch || !self.delegator.round_settled(&id) {
            return; // ended, continued or closed meanwhile
        }
        let Some(round) = self.delegator.get(&id).map(|v| v.round) else {
            return;
        };
        let now = self.ts();
        let attempts = self.dels[n].continue_attempts;
        let more = round < plan.total() && (attempts as usize) < plan.later_steps.len() + 2;
        // The known engine bugs `sim::KNOWN_BUG_STALE_ROUND_DONE` (before a CONTINUE) and
        // `sim::KNOWN_BUG_RESTORED_IDLE_SETTLED` (before anything): wait until the executor's
        // replay to a stream that joined while idle has arrived. (With no stream open the
        // replay can still come later, after a reconnect: rarer, and exempted.)
        let bugs = self.cfg.known_bugs;
        if ((more && bugs.stale_round_done) || bugs.restored_idle_settled)
            && !self.stream_quiet(&id)
        {
            self.bump("decision deferred until the stream is quiet (known bugs)");
            self.log(|| format!("app defers deciding on {id} until its stream is quiet"));
            self.schedule(self.now + 500, Ev::RoundDecision { n, epoch });
            return;
        }
        if more {
            self.dels[n].continue_attempts += 1;
            let next = round + 1;
            let task = TaskSpec {
                description: format!("task {n} round {next}"),
                prompt: round_prompt(next),
            };
            self.log(|| format!("app continues {id} with round {next}"));
            match self.delegator.continue_delegation(now, &id, task) {
                Ok(r) => {
                    self.bump("round continued");
                    self.dels[n].continues += 1;
                    if r != next {
                        self.violate(format!("{id}: continued as round {r}, not {next}"));
                    }
                    let at = self.now + self.dels[n].ttl_ms + GRACE_MS;
                    self.extend_deadline(n, at);
                    if let RoundsEnd::CancelMidRound { after_ms } = plan.end {
                        if r == plan.total() {
                            self.schedule(self.now + after_ms, Ev::App(Action::Cancel(n)));
                        }
                    }
                }
                Err(e) => self.violate(format!("{id}: settled but CONTINUE refused: {e}")),
            }
        } else {
            match plan.end {
                RoundsEnd::Close => {
                    self.log(|| format!("app closes {id}"));
                    self.app_closing = true;
                    let r = self.delegator.close(now, &id);
                    self.drain_delegator();
                    self.app_closing = false;
                    match r {
                        Ok(()) => self.bump("round closed"),
                        Err(e) => self.violate(format!("{id}: settled but CLOSE refused: {e}")),
                    }
                    return;
                }
                RoundsEnd::CancelIdle => {
                    self.app(Action::Cancel(n));
                    return;
                }
                RoundsEnd::LeaveIdle | RoundsEnd::CancelMidRound { .. } => {
                    self.log(|| format!("app leaves {id} idle"));
                    self.bump("delegation left idle");
                }
            }
        }
        self.drain_delegator();
    }

    /// Whether `id`'s event stream, if one is open, has been subscribed and everything its
    /// executor sent on it so far has arrived.
    fn stream_quiet(&self, id: &DelegationId) -> bool {
        self.cur_stream
            .get(id)
            .and_then(|s| self.streams.get(s))
            .is_none_or(|st| st.subscribed.is_some() && self.now > st.fifo_at)
    }

    /// Delegation `n` must end, and its export be released, by `at` at the latest (a round
    /// started or an idle time began).
    pub(super) fn extend_deadline(&mut self, n: usize, at: u64) {
        let d = &mut self.dels[n];
        d.deadline = d.deadline.max(at);
        if let Some(v) = self.held.get_mut(&ResKey::Export(d.id.clone())) {
            *v = (*v).max(at);
        }
    }

    /// Fires the crashes armed for delegation `n`, which just went `to` (from `from`).
    pub(super) fn arm_round_crashes(
        &mut self,
        n: usize,
        from: DelegationState,
        to: DelegationState,
    ) {
        let idle = to == DelegationState::Idle;
        let next_round = to == DelegationState::Running && from == DelegationState::Idle;
        if self.round_crashes.is_empty() || !(idle || next_round) {
            return;
        }
        let Some(round) = self.delegator.get(&self.dels[n].id).map(|v| v.round) else {
            return;
        };
        let hit = |c: &RoundCrash| c.n == n && c.idle == idle && c.round == round;
        let Some(k) = self.round_crashes.iter().position(hit) else {
            return;
        };
        let c = self.round_crashes.remove(k);
        let within = if idle {
            // Before the application decides (or an idle timeout ends it).
            self.dels[n]
                .rounds
                .as_ref()
                .map_or(1_000, |r| r.think_ms)
                .max(1_000)
        } else {
            let steps = self.dels[n]
                .rounds
                .as_ref()
                .and_then(|r| r.later_steps.get(round as usize - 2).copied())
                .unwrap_or(self.dels[n].steps);
            u64::from(steps) * self.dels[n].step_ms
        };
        let at = self.now + self.rng.below(within);
        let what = match c.executor_down_ms {
            Some(down_ms) => Action::Crash {
                exec: self.cfg.delegations[n].exec,
                down_ms,
            },
            None => Action::CrashDelegator,
        };
        self.log(|| format!("{what:?} armed for round {round} of #{n} (idle {idle}) at {at}"));
        self.schedule(at, Ev::App(what));
    }
}

/// The prompt of round `round` (≥ 2) the application sends.
pub(super) fn round_prompt(round: u64) -> String {
    format!("round {round}: edit the files again")
}

/// What the simulated agent reports at the end of round `round` of a kept-open delegation.
pub(super) fn round_summary(round: u64, id: &DelegationId) -> String {
    format!("round {round} of {id} done")
}
