//! Snapshots: stored before anything else happens to them, applied one at a time in arrival
//! order (`auto`), kept pending for the application (`staged`), or recorded only (`discard`).

use super::*;

impl Delegator {
    /// Applies a stored (staged) snapshot.
    pub fn apply_snapshot(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        snapshot_id: &SnapshotId,
    ) -> Result<(), UsageError> {
        self.tick(now);
        // The same conditions as a preview: a pending snapshot of a read-write delegation.
        self.preview_snapshot(id, snapshot_id)?;
        let d = self.get_mut(id)?;
        let Some(rec) = d.snapshots.get_mut(snapshot_id) else {
            return Ok(());
        };
        rec.status = SnapshotStatus::InFlight;
        d.updated_at = now;
        self.start_apply(id, snapshot_id.clone());
        self.core
            .outputs
            .push_back(DelegatorOutput::Event(DelegatorEvent::Snapshot {
                id: id.clone(),
                snapshot_id: snapshot_id.clone(),
                status: SnapshotStatus::InFlight,
            }));
        Ok(())
    }

    /// What a preview of `snapshot_id` (what applying it would do, without doing it) needs:
    /// the same layout and access an apply would get. Only a pending snapshot (stored, not
    /// applied or discarded) of a read-write delegation can be previewed; this changes
    /// nothing.
    pub fn preview_snapshot(
        &self,
        id: &DelegationId,
        snapshot_id: &SnapshotId,
    ) -> Result<ApplyPlan, UsageError> {
        let d = self
            .delegations
            .get(id)
            .ok_or_else(|| UsageError::UnknownDelegation(id.clone()))?;
        if d.req.access_mode == AccessMode::Ro || d.access == AccessMode::Ro {
            return Err(UsageError::InvalidState(
                "read-only delegations never write to the workspace".into(),
            ));
        }
        let rec = d
            .snapshots
            .get(snapshot_id)
            .ok_or_else(|| UsageError::UnknownSnapshot {
                delegation: id.clone(),
                snapshot: snapshot_id.to_string(),
            })?;
        if rec.status != SnapshotStatus::Pending {
            return Err(UsageError::InvalidState(format!(
                "snapshot {snapshot_id} is {}, not pending",
                rec.status.as_str()
            )));
        }
        Ok(ApplyPlan {
            layout: d.layout(),
            access_mode: d.access,
            checksum: rec.checksum.clone(),
        })
    }

    /// Discards a stored snapshot.
    pub fn discard_snapshot(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        snapshot_id: &SnapshotId,
    ) -> Result<(), UsageError> {
        self.tick(now);
        let d = self.get_mut(id)?;
        let rec = d
            .snapshots
            .get_mut(snapshot_id)
            .ok_or_else(|| UsageError::UnknownSnapshot {
                delegation: id.clone(),
                snapshot: snapshot_id.to_string(),
            })?;
        match rec.status {
            SnapshotStatus::Pending => {}
            SnapshotStatus::InFlight => {
                return Err(UsageError::InvalidState(format!(
                    "snapshot {snapshot_id} is being applied or stored"
                )))
            }
            SnapshotStatus::Discarded => return Ok(()),
            SnapshotStatus::Applied | SnapshotStatus::Failed(_) => {
                return Err(UsageError::InvalidState(format!(
                    "snapshot {snapshot_id} is {}, nothing to discard",
                    rec.status.as_str()
                )))
            }
        }
        rec.status = SnapshotStatus::Discarded;
        d.stored.retain(|s| s != snapshot_id);
        d.updated_at = now;
        // Reported (so journalled) before the bytes go: a crash in between leaves bytes the
        // record no longer lists (deleted at restore), never a record naming deleted bytes.
        self.core
            .outputs
            .push_back(DelegatorOutput::Event(DelegatorEvent::Snapshot {
                id: id.clone(),
                snapshot_id: snapshot_id.clone(),
                status: SnapshotStatus::Discarded,
            }));
        self.core
            .outputs
            .push_back(DelegatorOutput::DeleteStoredSnapshot {
                id: id.clone(),
                snapshot_id: snapshot_id.clone(),
            });
        self.settled_after_end(id);
        Ok(())
    }

    pub(super) fn on_snapshot(&mut self, now: Timestamp, id: &DelegationId, snap: SnapshotEvent) {
        let Some(d) = self.delegations.get_mut(id) else {
            return;
        };
        let state = d.state();
        let awaited = d.phase.awaiting() == Some(&snap.snapshot_id);
        // Idle after a restart that interrupted the storing of the round's snapshot: the
        // executor's replay brings it again.
        let replayed = state == DelegationState::Idle && d.replay_awaited;
        if d.snapshots.contains(&snap.snapshot_id)
            || !(state == DelegationState::Running
                || replayed
                || (state == DelegationState::Completed && awaited))
        {
            return; // duplicate (replay) or too late (cancelled/expired: never apply)
        }
        if d.snapshots.is_full() {
            self.peer_misbehaved(
                id,
                PeerMisbehavior::TooManySnapshots {
                    kept: Snapshots::MAX,
                },
            );
            return;
        }
        if awaited {
            d.phase.take_awaiting();
        }
        let live = d.req.transport.is_live();
        let ro = d.access == AccessMode::Ro;
        let mode = if live || ro {
            SnapshotMode::Discard
        } else {
            d.req.snapshot_mode
        };
        let status = match mode {
            SnapshotMode::Discard => SnapshotStatus::Discarded,
            SnapshotMode::Auto | SnapshotMode::Staged => SnapshotStatus::InFlight,
        };
        d.snapshots.push(SnapshotRecord {
            id: snap.snapshot_id.clone(),
            summary: snap.summary.clone(),
            highlights: snap.highlights.clone(),
            recommended: snap.recommended.unwrap_or(false),
            metadata: snap.metadata.clone(),
            status: status.clone(),
            received_at: now,
            applied_at: None,
            error: None,
            checksum: snap.checksum.clone(),
            left_out: Vec::new(),
            changed: Vec::new(),
        });
        d.updated_at = now;
        let sid = snap.snapshot_id.clone();
        // A storage executor uploads its result and names it (WIRE.md §11.4); one without an
        // upload URL sends it inline as usual.
        let text = snap.data.base64.as_deref();
        let source = match d.req.transport {
            TransportKind::Storage if text.and_then(crate::wire::storage_result_url).is_some() => {
                ResultSource::StorageObject
            }
            // A branch named by a well-formed text: the delegation's own, pushed on top of
            // its base (the driver checks the commits themselves).
            TransportKind::Git => match text.and_then(crate::wire::git_result) {
                Some(r) if r.is_well_formed() => ResultSource::GitBranch(r),
                _ => ResultSource::Event,
            },
            TransportKind::Storage
            | TransportKind::Archive
            | TransportKind::Sshfs
            | TransportKind::Other(_) => ResultSource::Event,
        };
        let mut snap = snap;
        if source != ResultSource::Event {
            snap.data = crate::wire::ArchiveData::default();
        }
        match mode {
            // Stored first in both modes: `auto` applies from the store once it is stored, so
            // a result that cannot be applied is never lost.
            SnapshotMode::Auto | SnapshotMode::Staged => {
                self.core.outputs.push_back(DelegatorOutput::StoreSnapshot {
                    id: id.clone(),
                    snapshot: Box::new(snap),
                    source,
                });
            }
            SnapshotMode::Discard => {}
        }
        self.core
            .outputs
            .push_back(DelegatorOutput::Event(DelegatorEvent::Snapshot {
                id: id.clone(),
                snapshot_id: sid,
                status,
            }));
    }

    /// Delegation `id` and its snapshot `sid`, if that snapshot is in flight (`Ok(None)`: it
    /// is not, e.g. a duplicate answer).
    pub(super) fn in_flight(
        &mut self,
        id: &DelegationId,
        sid: &SnapshotId,
    ) -> Result<Option<&mut Delegation>, UsageError> {
        let d = self.get_mut(id)?;
        match d.snapshots.get(sid) {
            None => Err(UsageError::UnknownSnapshot {
                delegation: id.clone(),
                snapshot: sid.to_string(),
            }),
            Some(rec) if rec.status == SnapshotStatus::InFlight => Ok(Some(d)),
            Some(_) => Ok(None),
        }
    }

    /// A stored snapshot is ready: `auto` mode applies it while the delegation is running,
    /// between rounds or completed (a delegation cancelled, expired or failed meanwhile keeps it pending for the
    /// application to decide); `staged` mode keeps it pending.
    pub(super) fn on_stored(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        sid: &SnapshotId,
        result: Result<(), StoreFailure>,
    ) -> Result<(), UsageError> {
        let result = result.map_err(|f| f.to_error_info());
        let Some(d) = self.in_flight(id, sid)? else {
            return Ok(());
        };
        let state = d.state();
        let auto = d.req.snapshot_mode == SnapshotMode::Auto
            && matches!(
                state,
                DelegationState::Running | DelegationState::Idle | DelegationState::Completed
            );
        d.updated_at = now;
        let Some(rec) = d.snapshots.get_mut(sid) else {
            return Ok(());
        };
        let status = match result {
            Ok(()) => {
                if !d.stored.contains(sid) {
                    d.stored.push(sid.clone());
                }
                if auto {
                    // Reported (so journalled) as stored before the apply starts: a crash during
                    // the apply then finds the bytes on restart (the snapshot is pending again)
                    // instead of fetching the result anew from an executor that may be gone.
                    self.snapshot_event(id, sid, SnapshotStatus::InFlight);
                    self.start_apply(id, sid.clone());
                    return Ok(());
                }
                SnapshotStatus::Pending
            }
            Err(e) => {
                tracing::warn!(delegation = %id, snapshot = %sid, "snapshot store failed: {e}");
                SnapshotStatus::Failed(e)
            }
        };
        rec.status = status.clone();
        self.snapshot_event(id, sid, status);
        self.maybe_end(now, id);
        Ok(())
    }

    /// Applies `sid` now, or after the apply in flight for `id`.
    pub(super) fn start_apply(&mut self, id: &DelegationId, sid: SnapshotId) {
        let Some(d) = self.delegations.get_mut(id) else {
            return;
        };
        let Some(sid) = d.applies.push(sid) else {
            return;
        };
        let apply = apply_output(d, id, sid);
        self.core.outputs.push_back(apply);
    }

    pub(super) fn on_applied(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        sid: &SnapshotId,
        result: Result<(), ErrorInfo>,
        left_out: Vec<String>,
        changed: Vec<String>,
    ) -> Result<(), UsageError> {
        let Some(d) = self.in_flight(id, sid)? else {
            return Ok(());
        };
        let next = d.applies.finish(sid).map(|next| apply_output(d, id, next));
        let Some(rec) = d.snapshots.get_mut(sid) else {
            return Ok(());
        };
        let status = match result {
            Ok(()) => {
                rec.applied_at = Some(now);
                rec.error = None;
                if !left_out.is_empty() {
                    tracing::warn!(delegation = %id, snapshot = %sid, "applied without {} entries of the result: {}", left_out.len(), left_out.join(", "));
                }
                rec.left_out = left_out;
                rec.changed = changed;
                // Applied: its stored bytes have served their purpose.
                d.stored.retain(|s| s != sid);
                SnapshotStatus::Applied
            }
            Err(e) => {
                tracing::warn!(delegation = %id, snapshot = %sid, "snapshot not applied, kept pending: {e}");
                rec.error = Some(e);
                SnapshotStatus::Pending
            }
        };
        rec.status = status.clone();
        d.updated_at = now;
        let applied = status == SnapshotStatus::Applied;
        self.snapshot_event(id, sid, status);
        if applied {
            self.after_applied(id, sid);
        }
        if let Some(next) = next {
            self.core.outputs.push_back(next);
        }
        self.maybe_end(now, id);
        Ok(())
    }

    /// What follows the journalling of `sid` as applied (the event that writes the record
    /// comes first): the proof of the finished swap and the stored bytes go. A crash in
    /// between leaves a proof the next start-up reports as finished (the record already says
    /// so) and bytes the record no longer lists (deleted at restore), never a snapshot
    /// recorded as re-appliable whose bytes are gone.
    pub(super) fn after_applied(&mut self, id: &DelegationId, sid: &SnapshotId) {
        self.core
            .outputs
            .push_back(DelegatorOutput::CloseApply { id: id.clone() });
        self.core
            .outputs
            .push_back(DelegatorOutput::DeleteStoredSnapshot {
                id: id.clone(),
                snapshot_id: sid.clone(),
            });
        self.settled_after_end(id);
    }

    /// After a result of `id` was applied or discarded: [`DelegatorOutput::ResultsSettled`]
    /// once the delegation has ended and every result is settled (before it ends, its
    /// release sees them settled).
    fn settled_after_end(&mut self, id: &DelegationId) {
        let ended = self.delegations.get(id).is_some_and(|d| d.phase.is_ended());
        if ended && self.results_settled(id) {
            self.core
                .outputs
                .push_back(DelegatorOutput::ResultsSettled { id: id.clone() });
        }
    }

    pub(super) fn snapshot_event(
        &mut self,
        id: &DelegationId,
        sid: &SnapshotId,
        status: SnapshotStatus,
    ) {
        self.core
            .outputs
            .push_back(DelegatorOutput::Event(DelegatorEvent::Snapshot {
                id: id.clone(),
                snapshot_id: sid.clone(),
                status,
            }));
    }
}

/// The output that applies `sid` of `d`: its layout by the executor's dialect, its access.
/// How a snapshot is applied (or previewed): what [`DelegatorOutput::ApplySnapshot`] says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyPlan {
    /// How the snapshot's root is laid out.
    pub layout: ArchiveLayout,
    /// The delegation's effective access.
    pub access_mode: AccessMode,
    /// The SHA-256 the executor announced for the archive.
    pub checksum: Option<String>,
}

fn apply_output(d: &Delegation, id: &DelegationId, sid: SnapshotId) -> DelegatorOutput {
    DelegatorOutput::ApplySnapshot {
        id: id.clone(),
        checksum: d.snapshots.get(&sid).and_then(|s| s.checksum.clone()),
        snapshot_id: sid,
        layout: d.layout(),
        access_mode: d.access,
        rebaseline: d.req.keep_open,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::delegator::tests::{
        applied, done_with_snapshot, drain, events, id, running, sid, snapshot, stored, t,
    };

    /// The position of the first output matching `f`.
    fn position(out: &[DelegatorOutput], f: impl Fn(&DelegatorOutput) -> bool) -> usize {
        out.iter().position(f).expect("output present")
    }

    fn is_delete(o: &DelegatorOutput) -> bool {
        matches!(o, DelegatorOutput::DeleteStoredSnapshot { .. })
    }

    fn is_status(o: &DelegatorOutput, want: &SnapshotStatus) -> bool {
        matches!(o, DelegatorOutput::Event(DelegatorEvent::Snapshot { status, .. }) if status == want)
    }

    #[test]
    fn an_applied_snapshot_is_reported_before_its_bytes_are_deleted() {
        let mut d = done_with_snapshot();
        d.handle(t(3), stored("snap_a", Ok(()))).unwrap();
        drain(&mut d);
        d.handle(t(4), applied("snap_a", Ok(()))).unwrap();
        let out = drain(&mut d);
        // The driver journals on the event: a crash after it and before the delete leaves
        // unlisted bytes, never a "pending" record whose bytes are gone.
        assert!(
            position(&out, |o| is_status(o, &SnapshotStatus::Applied)) < position(&out, is_delete)
        );
    }

    #[test]
    fn only_a_pending_snapshot_can_be_previewed_and_a_preview_changes_nothing() {
        let mut d = running(SnapshotMode::Staged);
        d.handle(t(2), snapshot("snap_a")).unwrap();
        // Not stored yet: in flight.
        assert!(d.preview_snapshot(&id(), &sid("snap_a")).is_err());
        d.handle(t(3), stored("snap_a", Ok(()))).unwrap();
        drain(&mut d);
        let plan = d.preview_snapshot(&id(), &sid("snap_a")).unwrap();
        assert_eq!(plan.access_mode, AccessMode::Rw);
        assert!(drain(&mut d).is_empty(), "a preview emits nothing");
        assert_eq!(
            d.get(&id()).unwrap().snapshots[0].status,
            SnapshotStatus::Pending
        );
        assert!(matches!(
            d.preview_snapshot(&id(), &sid("snap_nope")),
            Err(UsageError::UnknownSnapshot { .. })
        ));
        // Once applying (or applied, or discarded) there is nothing to preview.
        d.apply_snapshot(t(4), &id(), &sid("snap_a")).unwrap();
        assert!(d.preview_snapshot(&id(), &sid("snap_a")).is_err());
    }

    #[test]
    fn snapshots_beyond_the_cap_are_refused_as_the_executors_fault() {
        let mut d = running(SnapshotMode::Discard);
        let name = |i: usize| format!("snap_{i:06}");
        for i in 0..Snapshots::MAX {
            d.handle(t(2), snapshot(&name(i))).unwrap();
        }
        let kept = drain(&mut d);
        assert!(!events(&kept)
            .iter()
            .any(|e| matches!(e, DelegatorEvent::PeerMisbehaved { .. })));
        // One more: ignored and reported; a replay of a kept one is still only a duplicate.
        d.handle(t(3), snapshot(&name(Snapshots::MAX))).unwrap();
        d.handle(t(3), snapshot(&name(0))).unwrap();
        let out = drain(&mut d);
        assert_eq!(
            events(&out),
            [&DelegatorEvent::PeerMisbehaved {
                id: id(),
                reason: PeerMisbehavior::TooManySnapshots {
                    kept: Snapshots::MAX
                },
            }]
        );
        let view = d.get(&id()).unwrap();
        assert_eq!(view.snapshots.len(), Snapshots::MAX);
        assert_eq!(view.snapshots[0].id, sid(&name(0)), "arrival order");
        assert_eq!(view.state, DelegationState::Running);
    }

    #[test]
    fn a_discarded_snapshot_is_reported_before_its_bytes_are_deleted() {
        let mut d = running(SnapshotMode::Staged);
        d.handle(t(2), snapshot("snap_a")).unwrap();
        d.handle(t(3), stored("snap_a", Ok(()))).unwrap();
        drain(&mut d);
        d.discard_snapshot(t(4), &id(), &sid("snap_a")).unwrap();
        let out = drain(&mut d);
        assert!(
            position(&out, |o| is_status(o, &SnapshotStatus::Discarded))
                < position(&out, is_delete)
        );
    }

    #[test]
    fn a_restart_deletes_bytes_an_applied_snapshot_may_have_left() {
        let mut d = done_with_snapshot();
        d.handle(t(3), stored("snap_a", Ok(()))).unwrap();
        d.handle(t(4), applied("snap_a", Ok(()))).unwrap();
        drain(&mut d);
        // The record as journalled at the event: applied, no longer listed as stored.
        let rec = d.record(&id()).unwrap();
        assert!(rec.stored.is_empty());
        let mut d2 = Delegator::new(DelegatorConfig::default());
        d2.restore(t(10), &[rec], &Default::default());
        let out = drain(&mut d2);
        assert!(out.iter().any(|o| matches!(
            o,
            DelegatorOutput::DeleteStoredSnapshot { snapshot_id, .. } if *snapshot_id == sid("snap_a")
        )));
    }
}
