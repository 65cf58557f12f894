//! The world's own loop: building it, its clock and event queue, one turn of each engine
//! (the canonical drive loop of `awcp_proto::engine::drive`), and the small helpers every
//! other part uses.

use super::*;

impl World {
    /// A world ready to [`run`](World::run) `cfg`.
    pub fn new(mut cfg: SimConfig) -> Self {
        // Creation order is time order (stable for equal times): `Action::Cancel(n)` and
        // `World::dels[n]` refer to it.
        cfg.delegations.sort_by_key(|d| d.at_ms);
        let mut rng = Rng::new(cfg.seed);
        let execs = (0..cfg.executors)
            .map(|_| ExecNode {
                engine: Some(Executor::new(exec_config(&cfg, rng.next_u64()))),
                inc: 0,
                reqs: BTreeMap::new(),
                work: BTreeMap::new(),
                tasks: BTreeMap::new(),
                orphans: BTreeMap::new(),
                assigns: BTreeMap::new(),
                journal: BTreeMap::new(),
                restored_unreleased: Default::default(),
            })
            .collect();
        let mut w = World {
            rng,
            now: 0,
            seq: 0,
            queue: BTreeMap::new(),
            delegator: Delegator::new(del_config(&cfg)),
            execs,
            dels: Vec::new(),
            by_id: BTreeMap::new(),
            calls: BTreeMap::new(),
            next_call: 0,
            next_req: 0,
            next_stream: 0,
            streams: BTreeMap::new(),
            cur_stream: BTreeMap::new(),
            held: BTreeMap::new(),
            store: BTreeMap::new(),
            stored_checksums: BTreeMap::new(),
            del_inc: 0,
            del_journal: BTreeMap::new(),
            del_durable: BTreeMap::new(),
            del_history: BTreeMap::new(),
            del_history_durable: BTreeMap::new(),
            archive_urls: BTreeMap::new(),
            archive_fetched: Default::default(),
            round_crashes: Vec::new(),
            app_closing: false,
            exec_timer_turn: None,
            restored: Default::default(),
            pending_applies: BTreeMap::new(),
            apply_proofs: Default::default(),
            next_apply: 0,
            crash_on_apply: false,
            next_task_gen: 0,
            trace: Vec::new(),
            violations: Vec::new(),
            steps: 0,
            exec_endings: Vec::new(),
            peak_tasks: 0,
            declined: 0,
            stopped_tasks: 0,
            finished_tasks: 0,
            streams_opened: 0,
            stats: BTreeMap::new(),
            cfg,
        };
        for i in 0..w.cfg.delegations.len() {
            let at = w.cfg.delegations[i].at_ms;
            w.schedule(at, Ev::Create(i));
        }
        for (at, a) in w.cfg.actions.clone() {
            w.schedule(at, Ev::App(a));
        }
        w
    }

    // ------------------------------------------------------------------------------------
    // Plumbing

    pub(super) fn ts(&self) -> Timestamp {
        Timestamp::from_unix_millis(BASE_MS + self.now)
    }

    pub(super) fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at, self.seq), ev);
    }

    /// Network latency: milliseconds, occasionally seconds (reordering).
    pub(super) fn latency(&mut self) -> u64 {
        if self.rng.chance(self.cfg.faults.slow) {
            self.rng.range(1_000, 8_000)
        } else {
            self.rng.range(1, 200)
        }
    }

    /// Latency of a local operation (disk, transport).
    pub(super) fn local(&mut self) -> u64 {
        self.rng.range(0, 50)
    }

    /// Schedules a local operation's result for the delegator, a local delay from now.
    pub(super) fn del_local(&mut self, input: DelegatorInput) {
        let at = self.now + self.local();
        let inc = self.del_inc;
        self.schedule(at, Ev::DelIn { inc, input });
    }

    /// Schedules a local operation's result for executor `exec` (incarnation `inc`), a local
    /// delay from now.
    pub(super) fn exec_local(&mut self, exec: usize, inc: u32, input: ExecutorInput) {
        let at = self.now + self.local();
        self.schedule(at, Ev::ExecIn { exec, inc, input });
    }

    pub(super) fn log(&mut self, line: impl FnOnce() -> String) {
        if self.cfg.trace {
            let l = format!("{:>9} {}", self.now, line());
            self.trace.push(l);
        }
    }

    pub(super) fn bump(&mut self, what: &'static str) {
        *self.stats.entry(what).or_insert(0) += 1;
    }

    pub(super) fn violate(&mut self, msg: String) {
        self.log(|| format!("VIOLATION {msg}"));
        self.violations.push(msg);
    }

    pub(super) fn idx(&self, id: &DelegationId) -> usize {
        self.by_id[id]
    }

    /// Whether delegation `id`'s requests carry the credential in a header (auth on, our
    /// delegator's style) rather than only in INVITE (the reference's).
    pub(super) fn sends_header(&self, id: &DelegationId) -> bool {
        match (&self.cfg.auth, self.by_id.get(id)) {
            (Some(a), Some(i)) => a.header[*i],
            _ => false,
        }
    }

    /// The header credential a request about `id` carries.
    pub(super) fn credential_for(&self, id: &DelegationId) -> Option<Credential> {
        self.sends_header(id).then(|| Credential::bearer(SIM_TOKEN))
    }

    pub(super) fn acquire(&mut self, key: ResKey, deadline: u64) {
        if self.held.contains_key(&key) {
            self.violate(format!("{key:?} acquired while already held"));
        }
        self.held.insert(key, deadline);
    }

    pub(super) fn release(&mut self, key: ResKey) {
        if self.held.remove(&key).is_none() {
            self.violate(format!(
                "{key:?} released but not held (double release or never acquired)"
            ));
        }
    }

    // ------------------------------------------------------------------------------------
    // Running

    /// Runs to quiescence (every timer fired, nothing in flight) and checks the end state.
    pub fn run(&mut self) -> Result<Summary, Box<Failure>> {
        loop {
            self.steps += 1;
            if self.steps > MAX_STEPS {
                self.violate(format!("no quiescence after {MAX_STEPS} steps (livelock)"));
                return Err(self.failure());
            }
            if !self.step() {
                break;
            }
            self.check_step();
            if !self.violations.is_empty() {
                return Err(self.failure());
            }
        }
        self.check_end();
        if !self.violations.is_empty() {
            return Err(self.failure());
        }
        Ok(Summary {
            steps: self.steps,
            end_ms: self.now,
            states: self
                .dels
                .iter()
                .map(|d| d.ended.unwrap_or(d.state))
                .collect(),
            trace: self.trace.join("\n"),
            stats: self.stats.clone(),
        })
    }

    /// The trace so far (empty unless [`SimConfig::trace`] is set).
    pub fn trace_text(&self) -> String {
        self.trace.join("\n")
    }

    pub(super) fn failure(&self) -> Box<Failure> {
        let n = self.trace.len();
        Box::new(Failure {
            seed: self.cfg.seed,
            message: self.violations.join("; "),
            at_ms: self.now,
            trace_tail: self.trace[n.saturating_sub(60)..].to_vec(),
        })
    }

    /// Processes the earliest thing due; `false` when nothing is left.
    pub(super) fn step(&mut self) -> bool {
        #[derive(Clone, Copy)]
        enum Src {
            Queue,
            Del,
            Exec(usize),
        }
        let mut best: Option<(u64, Src)> = None;
        let mut consider = |t: u64, s: Src| {
            if best.is_none_or(|(b, _)| t < b) {
                best = Some((t, s));
            }
        };
        let rel = |t: Timestamp| t.as_unix_millis().saturating_sub(BASE_MS);
        if let Some((t, _)) = self.delegator.poll_timeout() {
            consider(rel(t), Src::Del);
        }
        for (i, e) in self.execs.iter().enumerate() {
            if let Some((t, _)) = e.engine.as_ref().and_then(|e| e.poll_timeout()) {
                consider(rel(t), Src::Exec(i));
            }
        }
        if let Some(((t, _), _)) = self.queue.first_key_value() {
            consider(*t, Src::Queue);
        }
        let Some((t, src)) = best else {
            return false;
        };
        self.now = self.now.max(t);
        match src {
            Src::Del => self.del_turn(Wake::Timeout),
            Src::Exec(i) => self.exec_turn(i, Wake::Timeout),
            Src::Queue => {
                let (_, ev) = self.queue.pop_first().expect("peeked");
                self.process(ev);
            }
        }
        true
    }

    /// One turn of the canonical drive loop (`awcp_proto::engine::drive`) on the delegator.
    pub(super) fn del_turn(&mut self, wake: Wake<DelegatorInput>) {
        let now = self.ts();
        drive::turn(&mut DelHost(self), now, wake);
        self.retire_settled();
        self.watch_rounds();
    }

    /// What the driver does after each turn: the records of delegations the engine says are
    /// settled move to the history (synced first).
    fn retire_settled(&mut self) {
        let settled: Vec<DelegationId> = self
            .del_journal
            .keys()
            .filter(|id| self.delegator.is_settled(id))
            .cloned()
            .collect();
        for id in settled {
            if let Some(v) = self.del_journal.remove(&id) {
                self.bump("settled record moved to the history");
                self.del_durable.insert(id.clone(), v.clone());
                self.del_history.insert(id.clone(), v.clone());
                self.del_history_durable.insert(id, v);
            }
        }
    }

    /// One turn of the canonical drive loop on executor `exec` (nothing while it is down).
    pub(super) fn exec_turn(&mut self, exec: usize, wake: Wake<ExecutorInput>) {
        let now = self.ts();
        let timers = matches!(wake, Wake::Timeout);
        if timers {
            self.exec_timer_turn = Some(exec);
        }
        drive::turn(&mut ExecHost { world: self, exec }, now, wake);
        if timers {
            self.exec_timer_turn = None;
        }
    }

    pub(super) fn del_input(&mut self, input: DelegatorInput) {
        self.del_turn(Wake::Input(input));
    }

    pub(super) fn exec_input(&mut self, exec: usize, input: ExecutorInput) {
        self.exec_turn(exec, Wake::Input(input));
    }

    /// A CONTINUE or CLOSE reaches executor `exec`: a CLOSE never finds a round running.
    fn check_round_request(&mut self, exec: usize, body: &Request) {
        let (close, id) = match body {
            Request::Message(m, _) => match &**m {
                Message::Close(c) => (true, &c.delegation_id),
                Message::Continue(c) => (false, &c.delegation_id),
                _ => return,
            },
            _ => return,
        };
        let state = self.execs[exec]
            .engine
            .as_ref()
            .and_then(|e| e.assignment(id))
            .map(|a| a.state);
        self.log(|| {
            format!(
                "{} for {id} reaches exec{exec} in {state:?}",
                if close { "CLOSE" } else { "CONTINUE" }
            )
        });
        let stale = self.dels[self.idx(id)].stale_round_done;
        match (close, state) {
            (true, Some(AssignmentState::Active))
                if stale && self.cfg.known_bugs.stale_round_done =>
            {
                self.bump("CLOSE reached a running round after a stale round_done (known bug)");
            }
            (true, Some(s @ (AssignmentState::Active | AssignmentState::Pending))) => {
                self.violate(format!("CLOSE of {id} reached exec{exec} while it is {s}"));
            }
            (true, Some(AssignmentState::Idle)) => {}
            (true, _) => self.bump("CLOSE reached an assignment no longer idle"),
            (false, Some(AssignmentState::Idle)) => {}
            (false, _) => self.bump("CONTINUE reached an assignment not idle"),
        }
    }

    pub(super) fn process(&mut self, ev: Ev) {
        match ev {
            Ev::Create(i) => self.create(i),
            Ev::App(a) => self.app(a),
            Ev::StagedDecision(id, sid) => {
                let now = self.ts();
                // Applied once the delegation completed, or between rounds the last round's
                // (a kept-open delegation's staged result becomes the next round's base).
                let last_round = self
                    .dels
                    .get(self.idx(&id))
                    .and_then(|d| d.last_round_done.as_ref())
                    .is_some_and(|(_, s, _)| s.as_ref() == Some(&sid));
                let view = self.delegator.get(&id);
                let completed = view.as_ref().is_some_and(|v| {
                    v.state == DelegationState::Completed
                        || (last_round && v.state == DelegationState::Idle)
                });
                // The known engine bug `sim::KNOWN_BUG_QUEUED_APPLY_RECOVERY`: no apply queued
                // behind another.
                let busy = view.is_some_and(|v| {
                    v.snapshots
                        .iter()
                        .any(|s| s.status == SnapshotStatus::InFlight && s.id != sid)
                });
                if completed && busy && self.cfg.known_bugs.queued_apply_recovery {
                    self.bump("staged apply deferred behind another (known bug)");
                    self.schedule(self.now + 2_000, Ev::StagedDecision(id, sid));
                    return;
                }
                let apply = completed && self.rng.chance(self.cfg.staged_apply);
                self.log(|| {
                    format!(
                        "app {} staged {sid} of {id}",
                        if apply { "applies" } else { "discards" }
                    )
                });
                let r = if apply {
                    self.delegator.apply_snapshot(now, &id, &sid)
                } else {
                    self.delegator.discard_snapshot(now, &id, &sid)
                };
                if let Err(e) = r {
                    self.log(|| format!("app call refused: {e}"));
                }
                self.drain_delegator();
            }
            Ev::CallArrive { call, exec, body } => {
                if self.execs[exec].engine.is_none() {
                    self.log(|| format!("call {call} refused: exec{exec} is down"));
                    self.bump("request to a down executor");
                    let at = self.now + self.latency();
                    self.schedule(
                        at,
                        Ev::CallFail {
                            call,
                            why: "connection refused",
                        },
                    );
                    return;
                }
                self.next_req += 1;
                let rid = self.next_req;
                self.execs[exec].reqs.insert(rid, call);
                let about = match &body {
                    Request::Message(m, _) => m.delegation_id().clone(),
                    Request::Cancel(id) | Request::Ack(id) | Request::Result(id) => id.clone(),
                };
                self.check_round_request(exec, &body);
                let credential = self.credential_for(&about);
                self.exec_input(
                    exec,
                    ExecutorInput::Request {
                        request: RequestId(rid),
                        credential,
                        origin: None,
                        body,
                    },
                );
            }
            Ev::CallReply { call, resp } => self.answer(call, Ok(resp)),
            Ev::CallFail { call, why } => self.answer(call, Err(why)),
            Ev::StreamArrive(s) => self.stream_arrive(s),
            Ev::StreamDeliver(s, item) => self.stream_deliver(s, item),
            Ev::ExecIn { exec, inc, input } => {
                if self.execs[exec].inc == inc {
                    self.exec_input(exec, input);
                }
            }
            Ev::DelIn { inc, input } => {
                if inc == self.del_inc {
                    self.del_input(input);
                }
            }
            Ev::ApplyCommit(n) => self.apply_commit(n),
            Ev::TaskStep { exec, inc, id, gen } => self.task_step(exec, inc, id, gen),
            Ev::Restart(exec) => self.restart(exec),
            Ev::RoundDecision { n, epoch } => self.round_decision(n, epoch),
        }
    }
}
