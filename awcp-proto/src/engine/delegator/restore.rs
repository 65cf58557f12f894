//! Writing a delegation's record, and restoring delegations from records after a restart:
//! what each one does next (resume its event stream, fetch an interrupted result, abandon,
//! or only stay listed until its retention).

use super::record::{
    interrupted_apply, DelegationRecord, NotShippedEntry, OutcomeEntry, SnapshotEntry, StatusEntry,
    RECORD_VERSION,
};
use super::*;

/// What the driver's start-up recovery did with an apply a previous process left
/// interrupted, for one delegation (`awcp_transports::snapshot::recover_interrupted` answers
/// it); given to [`Delegator::restore`] for every delegation where it found one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApplyRecovery {
    /// The swap had not begun: the staging was removed, the workspace is as before.
    RolledBack,
    /// The swap finished, before the restart or by the recovery: the workspace holds the
    /// snapshot (and the proof of it stays until [`DelegatorOutput::CloseApply`]).
    Finished,
    /// The recovery failed: the workspace may be partly applied.
    Failed(ErrorInfo),
}

impl Delegator {
    /// The journal record of one delegation (see [`DelegationRecord`]). `None` for unknown
    /// ids.
    pub fn record(&self, id: &DelegationId) -> Option<DelegationRecord> {
        let d = self.delegations.get(id)?;
        let invite = d
            .invite_record
            .get_or_init(|| {
                let invite = super::handshake::invite_of(id, &d.req);
                crate::wire::JsonText::of_message(&Message::Invite(invite), Dialect::Reference)
            })
            .clone();
        Some(DelegationRecord {
            version: RECORD_VERSION,
            id: id.clone(),
            peer: d.req.peer.clone(),
            dialect: d.req.dialect,
            invite,
            snapshot_mode: d.req.snapshot_mode,
            state: d.state(),
            created_at: Some(d.created_at.as_unix_millis()),
            updated_at: Some(d.updated_at.as_unix_millis()),
            expires_at: d.expires_at.map(Timestamp::as_unix_millis),
            access_mode: Some(d.access.as_str().to_owned()),
            features: d.features.clone(),
            executor_work_dir: d.accept.as_ref().map(|a| a.work_dir.clone()),
            start_sent: d.phase.start_sent(),
            heard_terminal: d.phase.heard_terminal(),
            ended: d.phase.is_ended(),
            stored: d.stored.clone(),
            snapshots: d
                .snapshots
                .iter()
                .map(|r| SnapshotEntry {
                    id: r.id.clone(),
                    summary: r.summary.clone(),
                    highlights: r.highlights.clone(),
                    recommended: r.recommended,
                    metadata: r.metadata.clone(),
                    status: StatusEntry::from(&r.status),
                    received_at: Some(r.received_at.as_unix_millis()),
                    applied_at: r.applied_at.map(Timestamp::as_unix_millis),
                    error: r.error.clone(),
                    checksum: r.checksum.clone(),
                    left_out: r.left_out.clone(),
                    changed: r.changed.clone(),
                })
                .collect(),
            result: d.result.as_ref().map(|o| OutcomeEntry {
                summary: o.summary.clone(),
                highlights: o.highlights.clone(),
            }),
            error: d.error.clone(),
            allow_sensitive: d.req.allow_sensitive,
            not_shipped: d
                .not_shipped
                .iter()
                .map(|n| NotShippedEntry {
                    path: n.path.clone(),
                    reason: n.reason.as_str().to_owned(),
                })
                .collect(),
            not_shipped_count: Some(d.not_shipped_count),
            result_error: d.result_error.clone(),
            warnings: d.warnings.clone(),
            sources: Vec::new(),
            round: (d.round > 1).then_some(d.round),
            keep_open: d.req.keep_open,
            applying: match &d.applies {
                Applies::Applying { current, .. } => Some(current.clone()),
                Applies::Idle => None,
            },
        })
    }

    /// Restores delegations from journal records after a restart, and decides what happens to
    /// each: ended ones are kept for listing until their retention; ones that had sent START
    /// reconnect to the executor's event stream (it replays the result of a finished task, or
    /// the delegation expires with its lease); ones that had not are abandoned (`ERROR` to the
    /// executor) because their transport credentials died with the process. Every restored
    /// delegation that was not ended releases its transport (the driver's release is
    /// idempotent and removes leftovers). Returns how many records were restored.
    ///
    /// `recovered` says, per delegation, what the start-up recovery did with an apply the
    /// previous process left interrupted (none listed: nothing was found). A snapshot the
    /// record shows being applied is then recorded as applied if the swap
    /// [finished](ApplyRecovery::Finished) (the workspace holds it), else it is pending again
    /// with an error saying why. The proof of a finished apply is closed
    /// ([`DelegatorOutput::CloseApply`]) once the record says applied.
    pub fn restore(
        &mut self,
        now: Timestamp,
        records: &[DelegationRecord],
        recovered: &BTreeMap<DelegationId, ApplyRecovery>,
    ) -> usize {
        self.tick(now);
        let mut ids = Vec::new();
        for r in records {
            if let Some(id) = self.restore_one(now, r, recovered.get(&r.id), false) {
                ids.push(id);
            }
        }
        let n = ids.len();
        for id in ids {
            self.resume(now, &id);
        }
        n
    }

    /// Restores the records of settled delegations ([`Delegator::is_settled`] said so when
    /// the driver set them aside): listed until their retention, then forgotten. Nothing is
    /// deleted again for them (what a settled delegation stored was deleted before it
    /// settled). A record that is not ended is restored as [`Delegator::restore`] would.
    /// Returns how many records were restored (ids already known are skipped).
    pub fn restore_history(&mut self, now: Timestamp, records: &[DelegationRecord]) -> usize {
        self.tick(now);
        let mut ids = Vec::new();
        for r in records {
            let settled = r.ended && r.stored.is_empty();
            if let Some(id) = self.restore_one(now, r, None, settled) {
                ids.push(id);
            }
        }
        let n = ids.len();
        for id in ids {
            self.resume(now, &id);
        }
        n
    }

    fn restore_one(
        &mut self,
        now: Timestamp,
        r: &DelegationRecord,
        recovered: Option<&ApplyRecovery>,
        settled: bool,
    ) -> Option<DelegationId> {
        let id = r.id.clone();
        if self.delegations.contains_key(&id) {
            return None;
        }
        let (Message::Invite(inv), _) =
            crate::wire::decode_message(r.invite.get().as_bytes()).ok()?
        else {
            return None;
        };
        let ms = |v: Option<u64>| v.map(Timestamp::from_unix_millis);
        let state = r.state;
        let ended = r.ended;
        let mut snapshots = Snapshots::default();
        for s in &r.snapshots {
            if snapshots.contains(&s.id) {
                continue; // a record this engine never writes
            }
            snapshots.push(SnapshotRecord {
                id: s.id.clone(),
                summary: s.summary.clone(),
                highlights: s.highlights.clone(),
                recommended: s.recommended,
                metadata: s.metadata.clone(),
                status: SnapshotStatus::from(s.status.clone()),
                received_at: ms(s.received_at).unwrap_or(now),
                applied_at: ms(s.applied_at),
                error: s.error.clone(),
                checksum: s.checksum.clone(),
                left_out: s.left_out.clone(),
                changed: s.changed.clone(),
            });
        }
        let mut stored = r.stored.clone();
        // Snapshots in flight when the process stopped: one whose bytes are stored was being
        // applied (the driver recovered that apply before restoring: the workspace is all old
        // or all new, as `recovered` says), so it is applied if the swap finished, else
        // pending again; one that was being stored is forgotten and received again (the
        // executor was not acknowledged): replayed on the reconnected event stream, or
        // fetched if `done` had been heard.
        let mut awaiting_snapshot = None;
        let mut forgotten_store = false;
        let mut finished = None;
        snapshots.retain_mut(|rec| {
            if rec.status != SnapshotStatus::InFlight {
                true
            } else if stored.contains(&rec.id) {
                // The apply that ran is the recorded one; others were queued behind it.
                let ran = r.applying.as_ref().is_none_or(|a| *a == rec.id);
                match recovered {
                    // One apply per delegation runs at a time: this one finished.
                    Some(ApplyRecovery::Finished) if finished.is_none() && ran => {
                        rec.status = SnapshotStatus::Applied;
                        rec.applied_at = Some(now);
                        rec.error = None;
                        finished = Some(rec.id.clone());
                    }
                    Some(ApplyRecovery::Failed(e)) => {
                        rec.status = SnapshotStatus::Pending;
                        rec.error = Some(interrupted_apply(Some(e)));
                    }
                    Some(ApplyRecovery::Finished | ApplyRecovery::RolledBack) | None => {
                        rec.status = SnapshotStatus::Pending;
                        rec.error = Some(interrupted_apply(None));
                    }
                }
                true
            } else {
                if state == DelegationState::Completed {
                    awaiting_snapshot = Some(rec.id.clone());
                }
                forgotten_store = true;
                false
            }
        });
        let result = r.result.as_ref().map(|o| TaskOutcome {
            summary: o.summary.clone(),
            highlights: o.highlights.clone(),
        });
        let error = r.error.clone();
        let result_error = r.result_error.clone();
        let snapshot_mode = r.snapshot_mode;
        // A store interrupted by the restart may have left bytes the record does not list, and
        // so may a crash between journalling an apply or a discard and deleting the bytes:
        // delete them (deleting is idempotent; an interrupted store is received again, or lost
        // anyway).
        let interrupted_stores: Vec<SnapshotId> =
            if snapshot_mode != SnapshotMode::Discard && !settled {
                r.snapshots
                    .iter()
                    .filter(|x| {
                        matches!(
                            x.status,
                            StatusEntry::InFlight | StatusEntry::Applied | StatusEntry::Discarded
                        )
                    })
                    .map(|x| x.id.clone())
                    .filter(|sid| !stored.contains(sid))
                    .collect()
            } else {
                Vec::new()
            };
        // Applied: its stored bytes have served their purpose (deleted once journalled).
        if let Some(sid) = &finished {
            stored.retain(|s| s != sid);
        }
        let dialect = r.dialect;
        // Anything past ACCEPT (or terminal but not wound down) may hold an export view: it is
        // released (the driver's release is idempotent). A START handle died with the process.
        let phase = if ended {
            Phase::Ended {
                start_sent: r.start_sent,
                heard_terminal: r.heard_terminal,
            }
        } else {
            match state {
                DelegationState::Created | DelegationState::Invited => {
                    Phase::Inviting { invited_at: None }
                }
                DelegationState::Accepted => Phase::Accepted {
                    transport: Preparation::Stale,
                    stream: Stream::Closed,
                    stream_failures: 0,
                },
                DelegationState::Started | DelegationState::Running | DelegationState::Idle => {
                    Phase::Started {
                        stream: Stream::Closed,
                        stream_failures: 0,
                        heard_terminal: r.heard_terminal,
                    }
                }
                DelegationState::Completed
                | DelegationState::Error
                | DelegationState::Cancelled
                | DelegationState::Expired => Phase::Finishing(Finishing {
                    transport: Release::Held,
                    close_stream: false,
                    start_sent: r.start_sent,
                    heard_terminal: r.heard_terminal,
                    ack_sent: false,
                    awaiting: awaiting_snapshot,
                    closing: false,
                }),
            }
        };
        let req = DelegateRequest {
            id: id.clone(),
            peer: r.peer.clone(),
            dialect,
            task: inv.task,
            ttl_seconds: inv.lease.ttl_seconds,
            access_mode: inv.lease.access_mode,
            resources: inv.resources,
            transport: inv.transport.unwrap_or(TransportKind::Archive),
            snapshot_mode,
            auth: inv.auth,
            allow_sensitive: r.allow_sensitive,
            keep_open: r.keep_open,
        };
        let not_shipped = r
            .not_shipped
            .iter()
            .filter_map(|n| {
                Some(NotShipped {
                    path: n.path.clone(),
                    reason: NotShippedReason::parse(&n.reason)?,
                })
            })
            .collect::<Vec<_>>();
        let not_shipped_count = r.not_shipped_count.unwrap_or(not_shipped.len() as u64);
        let access = r
            .access_mode
            .as_deref()
            .and_then(AccessMode::parse)
            .unwrap_or(req.access_mode);
        self.delegations.insert(
            id.clone(),
            Box::new(Delegation {
                peer: req.peer.as_str().into(),
                req,
                machine: DelegationMachine::restore(state),
                phase,
                created_at: ms(r.created_at).unwrap_or(now),
                updated_at: ms(r.updated_at).unwrap_or(now),
                expires_at: ms(r.expires_at),
                access,
                features: r.features.clone(),
                accept: None,
                snapshots,
                stored,
                applies: Applies::Idle,
                result,
                error,
                result_error,
                warnings: r.warnings.clone(),
                not_shipped,
                not_shipped_count,
                last_progress: None,
                last_event_id: None,
                invite_record: Default::default(),
                asking_after_lease: false,
                round: r.round.unwrap_or(1).max(1),
                replay_awaited: state == DelegationState::Idle && forgotten_store,
            }),
        );
        for snapshot_id in interrupted_stores {
            self.core
                .outputs
                .push_back(DelegatorOutput::DeleteStoredSnapshot {
                    id: id.clone(),
                    snapshot_id,
                });
        }
        match finished {
            // Journalled as applied by the event, then as after any apply.
            Some(sid) => {
                self.snapshot_event(&id, &sid, SnapshotStatus::Applied);
                self.after_applied(&id, &sid);
            }
            // A proof whose apply the record already shows applied (the crash came before
            // the proof was closed): close it now.
            None if recovered == Some(&ApplyRecovery::Finished) => {
                self.core
                    .outputs
                    .push_back(DelegatorOutput::CloseApply { id: id.clone() });
            }
            None => {}
        }
        Some(id)
    }

    /// Decides how a restored delegation continues (see [`Delegator::restore`]).
    pub(super) fn resume(&mut self, now: Timestamp, id: &DelegationId) {
        let Some(d) = self.delegations.get(id) else {
            return;
        };
        let state = d.state();
        if d.phase.is_ended() {
            let at = d.updated_at.saturating_add(self.config.retention).max(now);
            self.core.timers.set((id.clone(), Timer::Forget), at);
            return;
        }
        let restarted = |what: &str| {
            ErrorInfo::new(
                ErrorCode::SetupFailed,
                format!("the delegator restarted {what}; the delegation was abandoned"),
            )
        };
        match state {
            DelegationState::Created => {
                self.transition(
                    now,
                    id,
                    DelegationTransition::SendError,
                    Some(restarted("before the invitation")),
                );
                self.wind_down(now, id);
            }
            DelegationState::Invited | DelegationState::Accepted => {
                self.abandon(now, id, restarted("before START"));
            }
            DelegationState::Idle => {
                // Between rounds: the executor keeps the work directory. Listen again (a
                // close it makes itself arrives as `done`) and give the application the idle
                // time again.
                let peer = d.peer.clone();
                if let Some((stream, _)) = self
                    .delegations
                    .get_mut(id)
                    .and_then(|d| d.phase.stream_mut())
                {
                    *stream = Stream::Opening;
                }
                self.core.timers.set(
                    (id.clone(), Timer::Idle),
                    now.saturating_add(self.config.idle_timeout),
                );
                self.core
                    .outputs
                    .push_back(DelegatorOutput::OpenEventStream {
                        id: id.clone(),
                        peer,
                        last_event_id: None,
                    });
            }
            DelegationState::Started | DelegationState::Running => {
                let exp = d.expires_at;
                let peer = d.peer.clone();
                match exp {
                    Some(e) if now >= e => {
                        // The lease ended while the delegator was down; the executor may have
                        // finished the task within it and still hold the result. Ask it first
                        // (its event stream replays the end), and expire only if it says
                        // nothing of the kind before the setup grace period is over.
                        if let Some(d) = self.delegations.get_mut(id) {
                            d.asking_after_lease = true;
                        }
                        self.core.timers.set(
                            (id.clone(), Timer::SetupGrace),
                            now.saturating_add(self.config.setup_grace),
                        );
                        self.core.outputs.push_back(DelegatorOutput::Event(
                            DelegatorEvent::Progress {
                                id: id.clone(),
                                message: Some(
                                    "the lease ended while the delegator was down: asking the \
                                     executor whether the task finished within it"
                                        .into(),
                                ),
                                progress: None,
                            },
                        ));
                    }
                    Some(e) => self.core.timers.set((id.clone(), Timer::Lease), e),
                    None => {}
                }
                if let Some((stream, _)) = self
                    .delegations
                    .get_mut(id)
                    .and_then(|d| d.phase.stream_mut())
                {
                    *stream = Stream::Opening;
                }
                self.core
                    .outputs
                    .push_back(DelegatorOutput::OpenEventStream {
                        id: id.clone(),
                        peer,
                        last_event_id: None,
                    });
            }
            // Terminal but not ended: fetch a result whose storing was interrupted, then
            // finish winding down (ack, release).
            DelegationState::Completed
            | DelegationState::Error
            | DelegationState::Cancelled
            | DelegationState::Expired => {
                if d.phase.awaiting().is_some() {
                    let peer = d.peer.clone();
                    self.core.outputs.push_back(DelegatorOutput::FetchResult {
                        id: id.clone(),
                        peer,
                    });
                }
                self.wind_down(now, id)
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::wildcard_enum_match_arm)] // tests pick the outputs they look at
mod tests {
    use super::*;
    use crate::engine::delegator::tests::{drain, event, id, running, t};

    fn count(out: &[DelegatorOutput], f: impl Fn(&DelegatorOutput) -> bool) -> usize {
        out.iter().filter(|o| f(o)).count()
    }

    /// A delegator restarted from `d`'s record.
    fn restarted(d: &Delegator) -> (Delegator, Vec<DelegatorOutput>) {
        let rec = d.record(&id()).unwrap();
        let mut d2 = Delegator::new(DelegatorConfig::default());
        assert_eq!(d2.restore(t(10), &[rec], &Default::default()), 1);
        let out = drain(&mut d2);
        (d2, out)
    }

    #[test]
    fn a_restored_running_delegation_reopens_its_stream_and_keeps_its_lease() {
        let d = running(SnapshotMode::Auto);
        let (mut d2, out) = restarted(&d);
        assert!(matches!(
            out.as_slice(),
            [DelegatorOutput::OpenEventStream { .. }]
        ));
        assert_eq!(d2.get(&id()).unwrap().state, DelegationState::Running);
        assert_eq!(d2.poll_timeout().map(|(_, why)| why), Some(Timer::Lease));
        // START went out before the restart: the executor's events count.
        let error = TaskEventKind::Error(ErrorInfo::bare(ErrorCode::TaskFailed, "boom"));
        d2.handle(t(11), event(error)).unwrap();
        assert_eq!(d2.get(&id()).unwrap().state, DelegationState::Error);
        assert!(d2.record(&id()).unwrap().heard_terminal);
    }

    #[test]
    fn a_restored_delegation_that_had_not_sent_start_is_abandoned_and_released_once() {
        // Accepted, transport prepared, START held back (the stream never opened).
        let mut d = Delegator::new(DelegatorConfig::default());
        d.delegate(
            t(0),
            crate::engine::delegator::tests::request(SnapshotMode::Auto),
        )
        .unwrap();
        for input in [
            DelegatorInput::ScanCompleted {
                id: id(),
                result: Ok(WorkspaceStats::default()),
            },
            DelegatorInput::Reply {
                id: id(),
                to: Outbound::Invite,
                reply: Reply::Accept(Box::new(crate::engine::delegator::tests::accept())),
            },
            DelegatorInput::TransportPrepared {
                id: id(),
                result: Ok(Box::new(crate::engine::delegator::tests::archive_handle())),
                archive_token: None,
            },
        ] {
            d.handle(t(1), input).unwrap();
        }
        drain(&mut d);
        assert_eq!(d.get(&id()).unwrap().state, DelegationState::Accepted);
        let (mut d2, out) = restarted(&d);
        assert_eq!(
            count(&out, |o| matches!(
                o,
                DelegatorOutput::SendMessage {
                    to: Outbound::Error,
                    ..
                }
            )),
            1,
            "the executor is told"
        );
        assert!(
            !out.iter().any(|o| matches!(
                o,
                DelegatorOutput::SendMessage {
                    to: Outbound::Start,
                    ..
                }
            )),
            "the handle's credentials died with the process: no START"
        );
        assert_eq!(
            count(&out, |o| matches!(
                o,
                DelegatorOutput::ReleaseTransport { .. }
            )),
            1
        );
        assert!(!d2.get(&id()).unwrap().ended);
        d2.handle(
            t(12),
            DelegatorInput::TransportReleased {
                id: id(),
                warnings: vec![],
            },
        )
        .unwrap();
        let out = drain(&mut d2);
        assert_eq!(
            count(&out, |o| matches!(
                o,
                DelegatorOutput::Event(DelegatorEvent::Ended { .. })
            )),
            1
        );
        let rec = d2.record(&id()).unwrap();
        assert!(rec.ended && !rec.start_sent);
        // An ended record restores as ended: nothing to release, only the retention.
        let (d3, out) = restarted(&d2);
        assert!(out.is_empty());
        assert!(d3.get(&id()).unwrap().ended);
        assert_eq!(d3.poll_timeout().map(|(_, why)| why), Some(Timer::Forget));
    }
}
