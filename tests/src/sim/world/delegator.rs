//! The delegator host: executing the delegator engine's outputs (scan, prepare, HTTP,
//! streams, snapshot store and apply, release) and checking its events.

use super::*;

impl World {
    pub(super) fn drain_delegator(&mut self) {
        self.del_turn(Wake::Drained);
    }

    pub(super) fn on_del_out(&mut self, out: DelegatorOutput) {
        // The journal, as the driver keeps it, before the output is executed.
        let id = out.delegation_id().clone();
        match out.journaling() {
            Journaling::Write => self.persist_del(&id, false),
            Journaling::Sync => self.persist_del(&id, true),
            Journaling::Remove => {
                // The driver unlinks the file without syncing the directory: after a power
                // loss the record may come back as last synced (kept in `del_durable`), and
                // the restored delegator must end that delegation again, harmlessly.
                self.del_journal.remove(&id);
                self.del_history.remove(&id);
            }
            Journaling::None => {}
        }
        match out {
            DelegatorOutput::ScanWorkspace { id } => {
                let i = self.idx(&id);
                let ws = &self.dels[i].ws;
                let mut stats = WorkspaceStats {
                    total_bytes: ws.values().map(|v| v.len() as u64).sum(),
                    file_count: ws.len() as u64,
                    largest_file_bytes: ws.values().map(|v| v.len() as u64).max().unwrap_or(0),
                    largest_file: ws.keys().next().cloned(),
                    ..WorkspaceStats::default()
                };
                if self.rng.chance(self.cfg.faults.oversize) {
                    stats.total_bytes = 1 << 40;
                }
                self.del_local(DelegatorInput::ScanCompleted {
                    id,
                    result: Ok(stats),
                });
            }
            DelegatorOutput::SendMessage {
                id,
                to,
                peer,
                message,
                dialect,
            } => {
                let i = self.idx(&id);
                let kind = match &*message {
                    Message::Invite(_) => Outbound::Invite,
                    Message::Start(start) => {
                        let (accepted, state) = (self.dels[i].accepted, self.dels[i].state);
                        if !accepted || state != DelegationState::Started {
                            self.violate(format!(
                                "START for {id} (state {state}, accepted {accepted}) carries credentials"
                            ));
                        }
                        if self.dels[i].handle.as_ref() != Some(&start.handle)
                            || !self.held.contains_key(&ResKey::Export(id.clone()))
                        {
                            self.violate(format!(
                                "START for {id} carries a handle that is not the prepared one"
                            ));
                        }
                        Outbound::Start
                    }
                    Message::Error(_) => Outbound::Error,
                    Message::Continue(c) => {
                        // Only the application's CONTINUE of an idle delegation, as the round
                        // it just started, with the prompt it gave.
                        let d = &self.dels[i];
                        let round = self.delegator.get(&id).map(|v| v.round);
                        if d.rounds.is_none()
                            || d.state != DelegationState::Running
                            || d.last_from != DelegationState::Idle
                            || round != Some(c.round)
                            || c.task.prompt != round_prompt(c.round)
                        {
                            self.violate(format!(
                                "{id}: CONTINUE round {} (engine round {round:?}) in state {} \
                                 (from {}), prompt {:?}",
                                c.round, d.state, d.last_from, c.task.prompt
                            ));
                        }
                        Outbound::Continue
                    }
                    Message::Close(_) => {
                        // Only what ends an idle delegation: its last transition was
                        // `idle -> completed`.
                        let d = &self.dels[i];
                        if d.state != DelegationState::Completed
                            || d.last_from != DelegationState::Idle
                        {
                            self.violate(format!(
                                "{id}: CLOSE sent in state {} (from {})",
                                d.state, d.last_from
                            ));
                        }
                        if !self.app_closing {
                            self.bump("idle timeout closed a delegation");
                        }
                        Outbound::Close
                    }
                    other => {
                        self.violate(format!("delegator sent {}", other.type_str()));
                        return;
                    }
                };
                if kind != to {
                    self.violate(format!("{id}: {} sent as {to:?}", message.type_str()));
                }
                // The engine names the request; its answer goes back under that name.
                self.send_call(
                    exec_of(&peer),
                    id,
                    CallKind::Out(to),
                    Request::Message(message, dialect),
                );
            }
            DelegatorOutput::SendCancel { id, peer } => {
                let body = Request::Cancel(id.clone());
                self.send_call(exec_of(&peer), id, CallKind::Out(Outbound::Cancel), body);
            }
            DelegatorOutput::SendAck { id, peer } => {
                // The ack lets the executor forget the result: every snapshot must be safely
                // stored (or applied, or discarded by policy) by then.
                for snap in self
                    .delegator
                    .get(&id)
                    .map(|v| v.snapshots)
                    .unwrap_or_default()
                {
                    let stored = self.store.contains_key(&(id.clone(), snap.id.clone()));
                    if matches!(snap.status, SnapshotStatus::Failed(_))
                        || (snap.status == SnapshotStatus::InFlight && !stored)
                    {
                        self.violate(format!(
                            "{id} acknowledged while snapshot {} is {} and not stored",
                            snap.id,
                            snap.status.as_str()
                        ));
                    }
                }
                let i = self.idx(&id);
                self.dels[i].acked = true;
                let body = Request::Ack(id.clone());
                self.send_call(exec_of(&peer), id, CallKind::Out(Outbound::Ack), body);
            }
            DelegatorOutput::FetchResult { id, peer } => {
                self.bump("result fetched");
                let body = Request::Result(id.clone());
                self.send_call(exec_of(&peer), id, CallKind::Fetch, body);
            }
            DelegatorOutput::PrepareTransport {
                id,
                transport,
                delivery,
                layout,
                ..
            } => {
                let dialect = self.delegator.get(&id).map(|v| v.request.dialect);
                if Some(layout) != dialect.map(ArchiveLayout::for_dialect) {
                    self.violate(format!("{id}: archive layout {layout:?} for its dialect"));
                }
                if (delivery == ArchiveDelivery::ByUrl) != self.cfg.serve_archives {
                    self.violate(format!(
                        "{id}: {delivery:?} delivery with serve_archives {}",
                        self.cfg.serve_archives
                    ));
                }
                let i = self.idx(&id);
                if !self.dels[i].accepted || self.dels[i].state != DelegationState::Accepted {
                    self.violate(format!(
                        "credentials prepared for {id} before ACCEPT (state {})",
                        self.dels[i].state
                    ));
                }
                if transport != TransportKind::Archive {
                    self.violate(format!("unexpected transport {}", transport.as_str()));
                }
                let at = self.now + self.local();
                if self.rng.chance(self.cfg.faults.prepare_fail) {
                    self.log(|| format!("prepare of {id} fails"));
                    // What a driver can find; the engine picks the code.
                    let (failure, message, code) = if self.rng.chance(500) {
                        let m = "sim: archive dir: disk full".to_owned();
                        (
                            PrepareFailure::Local(m.clone()),
                            m,
                            ErrorCode::TransportError,
                        )
                    } else {
                        let m = "sim: prepare".to_owned();
                        let e = ErrorInfo::new(ErrorCode::SetupFailed, m.clone());
                        (PrepareFailure::Transport(e), m, ErrorCode::SetupFailed)
                    };
                    let i = self.idx(&id);
                    self.dels[i].prepare_failure = Some((message, code));
                    let inc = self.del_inc;
                    self.schedule(
                        at,
                        Ev::DelIn {
                            inc,
                            input: DelegatorInput::TransportPrepared {
                                id,
                                result: Err(failure),
                                archive_token: None,
                            },
                        },
                    );
                    return;
                }
                let deadline = self.dels[i].deadline;
                self.acquire(ResKey::Export(id.clone()), deadline);
                let body = encode_files(&self.dels[i].ws);
                let (data, archive_token) = match delivery {
                    ArchiveDelivery::Inline => (
                        ArchiveData {
                            base64: Some(body.clone()),
                            url: None,
                            local_file: None,
                            local_file_sha256: None,
                        },
                        None,
                    ),
                    ArchiveDelivery::ByUrl => {
                        // The driver mints a token per prepare and hands back its digest.
                        let token = format!("tok{}-{}", self.del_inc, self.archive_urls.len());
                        let digest = SecretDigest::of(&token);
                        let url = format!("sim://delegator/archives/{token}");
                        self.archive_urls.insert(token, (id.clone(), body.clone()));
                        (
                            ArchiveData {
                                base64: None,
                                url: Some(url),
                                local_file: None,
                                local_file_sha256: None,
                            },
                            Some(digest),
                        )
                    }
                };
                let handle = TransportHandle::Archive(ArchiveHandle {
                    checksum: checksum(&body),
                    size_bytes: Some(body.len() as u64),
                    data,
                });
                self.dels[i].handle = Some(handle.clone());
                let inc = self.del_inc;
                self.schedule(
                    at,
                    Ev::DelIn {
                        inc,
                        input: DelegatorInput::TransportPrepared {
                            id,
                            result: Ok(Box::new(handle)),
                            archive_token,
                        },
                    },
                );
            }
            DelegatorOutput::OpenEventStream {
                id,
                peer,
                last_event_id,
            } => {
                if let Some(old) = self.cur_stream.get(&id).copied() {
                    self.violate(format!(
                        "stream for {id} opened while stream {old} is current"
                    ));
                    self.cut(old);
                }
                self.next_stream += 1;
                let s = self.next_stream;
                self.streams_opened += 1;
                self.bump("sse opened");
                self.log(|| format!("sse {s} opening for {id}"));
                self.streams.insert(
                    s,
                    SimStream {
                        exec: exec_of(&peer),
                        id: id.clone(),
                        subscribed: None,
                        fifo_at: self.now,
                        resume_after: last_event_id,
                    },
                );
                self.cur_stream.insert(id, s);
                let at = self.now + self.latency();
                self.schedule(at, Ev::StreamArrive(s));
            }
            DelegatorOutput::CloseEventStream { id } => {
                if let Some(s) = self.cur_stream.remove(&id) {
                    if let Some(st) = self.streams.remove(&s) {
                        if let Some(inc) = st.subscribed {
                            let at = self.now + self.latency();
                            self.schedule(
                                at,
                                Ev::ExecIn {
                                    exec: st.exec,
                                    inc,
                                    input: ExecutorInput::StreamClosed {
                                        stream: StreamId(s),
                                    },
                                },
                            );
                        }
                    }
                }
            }
            DelegatorOutput::ApplySnapshot {
                id,
                snapshot_id,
                layout,
                access_mode,
                checksum,
                ..
            } => {
                let i = self.idx(&id);
                let key = (id.clone(), snapshot_id.clone());
                if let Some(stored) = self.stored_checksums.get(&key) {
                    if checksum.as_ref() != Some(stored) {
                        self.violate(format!(
                            "snapshot {snapshot_id} of {id} applied with checksum {checksum:?}, \
                             announced with {stored}"
                        ));
                    }
                }
                if self.dels[i].access == AccessMode::Ro || access_mode != self.dels[i].access {
                    self.violate(format!(
                        "snapshot of {id} applied with access {} (delegated {})",
                        access_mode.as_str(),
                        self.dels[i].access.as_str()
                    ));
                }
                let dialect = self.delegator.get(&id).map(|v| v.request.dialect);
                if Some(layout) != dialect.map(ArchiveLayout::for_dialect) {
                    self.violate(format!("{id}: snapshot applied with layout {layout:?}"));
                }
                // Every apply is from the store: a result is stored before it is applied.
                let files = self.store.get(&(id.clone(), snapshot_id.clone())).cloned();
                let Some(files) = files else {
                    self.violate(format!(
                        "snapshot {snapshot_id} of {id} applied without being stored"
                    ));
                    return;
                };
                // An apply first recovers and closes what an earlier one left.
                self.apply_proofs.remove(&id);
                let ok = !self.rng.chance(self.cfg.faults.apply_fail);
                self.next_apply += 1;
                let n = self.next_apply;
                self.log(|| format!("apply {snapshot_id} to {id} starts (apply {n}, ok={ok})"));
                self.pending_applies.insert(
                    n,
                    PendingApply {
                        inc: self.del_inc,
                        id,
                        snapshot_id,
                        files: ok.then_some(files),
                    },
                );
                let at = self.now + self.local() + 1;
                self.schedule(at, Ev::ApplyCommit(n));
                if std::mem::take(&mut self.crash_on_apply) {
                    // Before the commit: the crash interrupts this apply.
                    self.schedule(self.now, Ev::App(Action::CrashDelegator));
                }
            }
            DelegatorOutput::StoreSnapshot { id, snapshot, .. } => {
                let sid = snapshot.snapshot_id.clone();
                let ok = !self.rng.chance(self.cfg.faults.store_fail);
                if ok {
                    match snapshot.data.base64.as_deref().and_then(decode_files) {
                        Some(files) => {
                            let key = ResKey::Stored(id.clone(), sid.clone());
                            // After a restart the engine may fetch and store again a snapshot
                            // whose earlier store finished unrecorded (the crash came first):
                            // the driver writes `.part` and renames over it, so that replaces.
                            if !(self.restored.contains(&id) && self.held.contains_key(&key)) {
                                self.acquire(key, u64::MAX);
                            }
                            self.store.insert((id.clone(), sid.clone()), files);
                            if let Some(c) = &snapshot.checksum {
                                self.stored_checksums
                                    .insert((id.clone(), sid.clone()), c.clone());
                            }
                        }
                        None => self.violate(format!("snapshot {sid} of {id} has no bytes")),
                    }
                }
                self.del_local(DelegatorInput::SnapshotStored {
                    id,
                    snapshot_id: sid,
                    result: if ok {
                        Ok(())
                    } else {
                        Err(StoreFailure::Local("sim: store".into()))
                    },
                });
            }
            DelegatorOutput::ResultsSettled { id } => {
                // Journaling::Sync: a result branch goes only once the synced record says
                // every result was applied or discarded.
                let unsettled = self.del_durable.get(&id).is_none_or(|v| {
                    DelegationRecord::from_json(v).map_or(true, |r| {
                        r.snapshots.iter().any(|s| {
                            !matches!(
                                s.status,
                                awcp_proto::engine::delegator::StatusEntry::Applied
                                    | awcp_proto::engine::delegator::StatusEntry::Discarded
                            )
                        })
                    })
                });
                if unsettled {
                    self.violate(format!(
                        "{id}: results announced settled before the record says so"
                    ));
                }
            }
            DelegatorOutput::CloseApply { id } => {
                // Journaling::Sync: the synced record must already say the apply happened (the
                // snapshot it wrote is not still being applied), or a crash now would lose it.
                // (Another stored snapshot may be in flight: an apply queued behind this one.)
                let proof = self.apply_proofs.get(&id);
                let unrecorded = self.del_durable.get(&id).is_some_and(|v| {
                    DelegationRecord::from_json(v).is_ok_and(|r| {
                        r.snapshots.iter().any(|s| {
                            matches!(
                                s.status,
                                awcp_proto::engine::delegator::StatusEntry::InFlight
                            ) && r.stored.contains(&s.id)
                                && proof.is_none_or(|p| *p == s.id)
                        })
                    })
                });
                if unrecorded {
                    self.violate(format!(
                        "{id}: the proof of a finished apply closed before the record says applied"
                    ));
                }
                self.apply_proofs.remove(&id);
            }
            DelegatorOutput::DeleteStoredSnapshot { id, snapshot_id } => {
                self.store.remove(&(id.clone(), snapshot_id.clone()));
                let key = ResKey::Stored(id.clone(), snapshot_id);
                // After a restart, deleting what may exist is an idempotent cleanup.
                if !self.restored.contains(&id) || self.held.contains_key(&key) {
                    self.release(key);
                }
            }
            DelegatorOutput::ReleaseTransport { id } => {
                let i = self.idx(&id);
                self.dels[i].handle = None;
                let key = ResKey::Export(id.clone());
                // After a restart the engine releases whatever may be prepared (idempotent).
                if !self.restored.contains(&id) || self.held.contains_key(&key) {
                    self.release(key);
                }
                self.del_local(DelegatorInput::TransportReleased {
                    id,
                    warnings: Vec::new(),
                });
            }
            DelegatorOutput::Event(ev) => self.on_del_event(ev),
        }
    }

    pub(super) fn on_del_event(&mut self, ev: DelegatorEvent) {
        match ev {
            DelegatorEvent::PeerMisbehaved { id, reason } => {
                // The executors here are this project's engine: they never break the protocol.
                self.violate(format!("{id}: the executor misbehaved: {reason:?}"));
            }
            DelegatorEvent::StateChanged { id, from, to } => {
                let i = self.idx(&id);
                self.log(|| format!("delegation {id}: {from} -> {to}"));
                let d = &mut self.dels[i];
                if d.state != from {
                    let last = d.state;
                    self.violate(format!(
                        "{id}: transition from {from} but the last state was {last}"
                    ));
                } else if !from.allowed_targets().contains(&to) {
                    self.violate(format!("{id}: illegal transition {from} -> {to}"));
                }
                self.dels[i].state = to;
                self.dels[i].last_from = from;
                if to == DelegationState::Idle {
                    if self.dels[i].rounds.is_none() {
                        // Our executor gives rounds only where they were asked for.
                        self.violate(format!("{id} went idle but was not kept open"));
                    }
                    // Nobody may continue it: the idle timeout ends it.
                    let at = self.now + self.cfg.del_idle_timeout_ms + GRACE_MS;
                    self.extend_deadline(i, at);
                }
                self.arm_round_crashes(i, from, to);
            }
            DelegatorEvent::Ended {
                id,
                state,
                result,
                error,
            } => {
                let i = self.idx(&id);
                self.bump(match state {
                    DelegationState::Completed => "delegation completed",
                    DelegationState::Cancelled => "delegation cancelled",
                    DelegationState::Expired => "delegation expired",
                    _ => "delegation error",
                });
                self.log(|| {
                    format!(
                        "delegation {id} ended {state} {}",
                        error
                            .as_ref()
                            .map(|e| e.code.as_str().to_owned())
                            .unwrap_or_default()
                    )
                });
                if error
                    .as_ref()
                    .is_some_and(|e| e.code == ErrorCode::AuthFailed)
                {
                    // Only a reference-style delegation (no header) can be refused, and only
                    // by an executor that restarted and forgot the INVITE that bound its id.
                    let crashed = self
                        .cfg
                        .actions
                        .iter()
                        .any(|(_, a)| matches!(a, Action::Crash { .. }));
                    if self.sends_header(&id) || !crashed {
                        self.violate(format!(
                            "{id} was refused as unauthenticated although it presented the credential"
                        ));
                    } else {
                        self.bump("reference-style delegation refused by a restarted executor");
                    }
                }
                if let (Some(e), Some((message, code))) =
                    (&error, self.dels[i].prepare_failure.clone())
                {
                    if e.message == message && e.code != code {
                        self.violate(format!(
                            "{id}: failed prepare ended with {} but the failure calls for {}",
                            e.code.as_str(),
                            code.as_str()
                        ));
                    }
                }
                let d = &mut self.dels[i];
                if d.ended.is_some() {
                    self.violate(format!("{id} ended twice"));
                    return;
                }
                d.ended = Some(state);
                d.result = result;
                d.error = error.map(|e| *e);
                let last = d.state;
                let has_handle = d.handle.is_some();
                if state != last || !state.is_terminal() {
                    self.violate(format!("{id} ended in {state} but its state is {last}"));
                }
                if has_handle || self.held.contains_key(&ResKey::Export(id.clone())) {
                    self.violate(format!("{id} ended with its export still prepared"));
                }
            }
            DelegatorEvent::Snapshot {
                id,
                snapshot_id,
                status,
            } => {
                self.log(|| format!("snapshot {snapshot_id} of {id}: {}", status.as_str()));
                if status == SnapshotStatus::Pending {
                    let at = self.now + self.rng.range(1_000, 100_000);
                    self.schedule(at, Ev::StagedDecision(id, snapshot_id));
                }
            }
            DelegatorEvent::ConnectionLost { id, .. } => {
                // Reported only while the delegation still listens to its executor.
                let i = self.idx(&id);
                let st = self.dels[i].state;
                if st.is_terminal() {
                    self.violate(format!(
                        "{id}: connection loss reported after it ended ({st})"
                    ));
                }
                self.bump("connection loss reported");
            }
            DelegatorEvent::Progress { .. } | DelegatorEvent::Forgotten { .. } => {}
        }
    }

    // ------------------------------------------------------------------------------------
    // Executor outputs
}

/// The delegator host, as the canonical drive loop sees it.
pub(super) struct DelHost<'a>(pub(super) &'a mut World);

impl drive::Host for DelHost<'_> {
    type Engine = Delegator;
    fn engine(&mut self) -> Option<&mut Delegator> {
        Some(&mut self.0.delegator)
    }
    fn execute(&mut self, output: DelegatorOutput) {
        self.0.on_del_out(output);
    }
    fn refused(&mut self, e: awcp_proto::UsageError) {
        self.0.log(|| format!("delegator refused input: {e}"));
    }
}
