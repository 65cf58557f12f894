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
            apply_failed: 0,
            acked: false,
            runs: 0,
            ran_on: None,
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
            keep_open: false,
        };
        self.log(|| {
            format!(
                "delegate #{i} {id} exec{} ttl={}s {:?} {:?} {:?} steps={}x{}ms fail={}",
                spec.exec,
                spec.ttl_s,
                spec.access,
                spec.mode,
                spec.dialect,
                spec.steps,
                spec.step_ms,
                spec.task_fails
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
    // HTTP
}
