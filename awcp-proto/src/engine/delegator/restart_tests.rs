//! Unit tests of the delegator engine across restarts: an apply or a store interrupted at
//! each point is recovered from the journal as what it was (helpers in `tests.rs`).

use super::tests::*;
use super::*;

#[test]
fn a_restart_mid_apply_leaves_the_snapshot_pending_and_reappliable() {
    let mut d = done_with_snapshot();
    d.handle(t(3), stored("snap_a", Ok(()))).unwrap();
    let out = drain(&mut d);
    assert!(out.iter().any(is_apply));
    // The process dies here; a new one restores from the journal record.
    let rec = d.record(&id()).unwrap();
    let mut d2 = Delegator::new(DelegatorConfig::default());
    assert_eq!(d2.restore(t(10), &[rec], &Default::default()), 1);
    let out = drain(&mut d2);
    assert!(!out.iter().any(is_apply));
    assert!(out.iter().any(is_ack), "stored: the executor may forget it");
    let s = status_of(&d2, "snap_a");
    assert_eq!(s.status, SnapshotStatus::Pending);
    assert!(s.error.unwrap().message.contains("rolled back"));
    d2.apply_snapshot(t(11), &id(), &sid("snap_a")).unwrap();
    assert!(drain(&mut d2).iter().any(is_apply));
}

/// The record of `d` restored with `recovery` reported for its interrupted apply.
fn restored_after(d: &Delegator, recovery: ApplyRecovery) -> (Delegator, Vec<DelegatorOutput>) {
    let rec = d.record(&id()).unwrap();
    let mut d2 = Delegator::new(DelegatorConfig::default());
    let recovered = BTreeMap::from([(id(), recovery)]);
    assert_eq!(d2.restore(t(10), &[rec], &recovered), 1);
    let out = drain(&mut d2);
    (d2, out)
}

/// Where each output of `out` that `f` names comes, in order.
fn positions(out: &[DelegatorOutput], f: impl Fn(&DelegatorOutput) -> bool) -> Vec<usize> {
    out.iter()
        .enumerate()
        .filter(|(_, o)| f(o))
        .map(|(i, _)| i)
        .collect()
}

fn is_close(o: &DelegatorOutput) -> bool {
    matches!(o, DelegatorOutput::CloseApply { .. })
}

fn is_delete(o: &DelegatorOutput) -> bool {
    matches!(o, DelegatorOutput::DeleteStoredSnapshot { .. })
}

fn is_applied_event(o: &DelegatorOutput) -> bool {
    matches!(
        o,
        DelegatorOutput::Event(DelegatorEvent::Snapshot {
            status: SnapshotStatus::Applied,
            ..
        })
    )
}

/// One applied event (it writes the record), then the proof closed and the bytes deleted.
fn assert_journalled_applied_then_closed(out: &[DelegatorOutput]) {
    let event = positions(out, is_applied_event);
    let close = positions(out, is_close);
    let delete = positions(out, is_delete);
    assert_eq!(
        (event.len(), close.len(), delete.len()),
        (1, 1, 1),
        "{out:?}"
    );
    assert!(event[0] < close[0] && event[0] < delete[0], "{out:?}");
}

#[test]
fn an_apply_is_journalled_as_applied_before_its_proof_and_bytes_go() {
    let mut d = done_with_snapshot();
    d.handle(t(3), stored("snap_a", Ok(()))).unwrap();
    drain(&mut d);
    d.handle(t(4), applied("snap_a", Ok(()))).unwrap();
    let out = drain(&mut d);
    assert_journalled_applied_then_closed(&out);
    let close = positions(&out, is_close);
    assert_eq!(out[close[0]].journaling(), Journaling::Sync);
    // A failed apply leaves nothing to close (the workspace was not swapped).
    let mut d = done_with_snapshot();
    d.handle(t(3), stored("snap_a", Ok(()))).unwrap();
    drain(&mut d);
    d.handle(
        t(4),
        applied(
            "snap_a",
            Err(ErrorInfo::bare(ErrorCode::TransportError, "x")),
        ),
    )
    .unwrap();
    assert!(!drain(&mut d).iter().any(is_close));
}

#[test]
fn a_restart_after_the_swap_finished_records_the_snapshot_applied_not_pending() {
    let mut d = done_with_snapshot();
    d.handle(t(3), stored("snap_a", Ok(()))).unwrap();
    assert!(drain(&mut d).iter().any(is_apply));
    // The swap finished, then the process died before the engine heard of it.
    let (d2, out) = restored_after(&d, ApplyRecovery::Finished);
    assert!(!out.iter().any(is_apply), "not applied twice: {out:?}");
    let s = status_of(&d2, "snap_a");
    assert_eq!(s.status, SnapshotStatus::Applied);
    assert_eq!(s.applied_at, Some(t(10)));
    assert_eq!(s.error, None);
    assert_journalled_applied_then_closed(&out);
    assert!(out.iter().any(is_ack), "{out:?}");
    let rec = d2.record(&id()).unwrap();
    assert!(rec.stored.is_empty(), "{:?}", rec.stored);
}

#[test]
fn a_restart_after_a_rolled_back_or_unrecovered_apply_says_which() {
    let mut d = done_with_snapshot();
    d.handle(t(3), stored("snap_a", Ok(()))).unwrap();
    drain(&mut d);
    let (d2, out) = restored_after(&d, ApplyRecovery::RolledBack);
    assert!(!out.iter().any(|o| is_apply(o) || is_close(o)), "{out:?}");
    let s = status_of(&d2, "snap_a");
    assert_eq!(s.status, SnapshotStatus::Pending);
    assert!(s.error.unwrap().message.contains("rolled back"));

    let failed = ErrorInfo::bare(ErrorCode::TransportError, "disk on fire");
    let (d2, out) = restored_after(&d, ApplyRecovery::Failed(failed));
    assert!(!out.iter().any(|o| is_apply(o) || is_close(o)), "{out:?}");
    let s = status_of(&d2, "snap_a");
    assert_eq!(s.status, SnapshotStatus::Pending);
    let e = s.error.unwrap();
    assert!(
        e.message.contains("disk on fire") && e.message.contains("partly applied"),
        "{e:?}"
    );
}

#[test]
fn a_proof_left_after_the_apply_was_recorded_is_closed_at_restart() {
    let mut d = done_with_snapshot();
    d.handle(t(3), stored("snap_a", Ok(()))).unwrap();
    drain(&mut d);
    d.handle(t(4), applied("snap_a", Ok(()))).unwrap();
    drain(&mut d);
    // Recorded as applied; the process died before the proof was closed.
    let (d2, out) = restored_after(&d, ApplyRecovery::Finished);
    assert_eq!(positions(&out, is_close).len(), 1, "{out:?}");
    assert!(!out.iter().any(is_applied_event), "{out:?}");
    assert_eq!(status_of(&d2, "snap_a").status, SnapshotStatus::Applied);
}

#[test]
fn a_restart_while_storing_fetches_the_result_again_before_any_ack() {
    let mut d = done_with_snapshot();
    drain(&mut d);
    let rec = d.record(&id()).unwrap();
    let mut d2 = Delegator::new(DelegatorConfig::default());
    d2.restore(t(10), &[rec], &Default::default());
    let out = drain(&mut d2);
    assert!(!out.iter().any(is_ack), "{out:?}");
    assert!(out
        .iter()
        .any(|o| matches!(o, DelegatorOutput::FetchResult { .. })));
    assert!(d2.get(&id()).unwrap().snapshots.is_empty());
    // The executor hands the result out again: stored, then applied.
    let DelegatorInput::TaskEvent { event, .. } = snapshot("snap_result") else {
        unreachable!()
    };
    let TaskEventKind::Snapshot(snap) = event.kind else {
        unreachable!()
    };
    d2.handle(
        t(11),
        DelegatorInput::ResultFetched {
            id: id(),
            result: Ok(FetchedResult::Completed {
                outcome: TaskOutcome::default(),
                snapshot: Some(Box::new(snap)),
            }),
        },
    )
    .unwrap();
    let out = drain(&mut d2);
    assert!(
        out.iter().any(|o| matches!(
            o,
            DelegatorOutput::StoreSnapshot { snapshot, .. } if snapshot.snapshot_id == sid("snap_a")
        )),
        "{out:?}"
    );
    assert!(!out.iter().any(is_ack));
}

/// Issue 47, item 9: the process stopped while the result was being stored, so the record
/// says `completed` with the snapshot `in_flight`. Restored, the delegation is running (the
/// result is fetched again), never `completed` with nothing applied; it is completed once the
/// result is stored, applied and the transport released.
#[test]
fn a_restart_while_storing_is_running_until_the_result_is_applied() {
    let mut d = done_with_snapshot();
    drain(&mut d);
    let rec = d.record(&id()).unwrap();
    assert_eq!(rec.state, DelegationState::Completed);
    assert!(
        rec.snapshots
            .iter()
            .all(|s| s.status == super::record::StatusEntry::InFlight),
        "{rec:?}"
    );
    let mut d2 = Delegator::new(DelegatorConfig::default());
    d2.restore(t(10), &[rec], &Default::default());
    drain(&mut d2);
    let v = d2.get(&id()).unwrap();
    assert_eq!(v.state, DelegationState::Completed);
    assert_eq!(v.awaiting_snapshot, Some(sid("snap_a")));
    assert_eq!(v.outcome(), Outcome::Running, "being fetched again: {v:?}");

    let DelegatorInput::TaskEvent { event, .. } = snapshot("snap_a") else {
        unreachable!()
    };
    let TaskEventKind::Snapshot(snap) = event.kind else {
        unreachable!()
    };
    let fetched = DelegatorInput::ResultFetched {
        id: id(),
        result: Ok(FetchedResult::Completed {
            outcome: TaskOutcome::default(),
            snapshot: Some(Box::new(snap)),
        }),
    };
    d2.handle(t(11), fetched).unwrap();
    drain(&mut d2);
    let v = d2.get(&id()).unwrap();
    assert_eq!(v.awaiting_snapshot, None);
    assert_eq!(v.outcome(), Outcome::Running, "being stored: {v:?}");
    d2.handle(t(12), stored("snap_a", Ok(()))).unwrap();
    drain(&mut d2);
    assert_eq!(d2.get(&id()).unwrap().outcome(), Outcome::Running);
    d2.handle(t(13), applied("snap_a", Ok(()))).unwrap();
    d2.handle(
        t(14),
        DelegatorInput::TransportReleased {
            id: id(),
            warnings: vec![],
        },
    )
    .unwrap();
    drain(&mut d2);
    let v = d2.get(&id()).unwrap();
    assert!(v.ended, "{v:?}");
    assert_eq!(v.outcome(), Outcome::Completed);
    assert_eq!(status_of(&d2, "snap_a").status, SnapshotStatus::Applied);
}

/// Issue 47 item 7: restored after its lease ended, a running delegation asks the
/// executor first; a result the executor finished within the lease is taken (and the user
/// told), and only silence until the grace period ends expires it.
#[test]
fn restored_after_its_lease_a_delegation_asks_the_executor_before_expiring() {
    let d = running(SnapshotMode::Auto);
    let lease = d.get(&id()).unwrap().expires_at.unwrap();
    let late = lease.saturating_add(std::time::Duration::from_secs(3600));
    let restore = |d: &Delegator| {
        let rec = d.record(&id()).unwrap();
        let mut d2 = Delegator::new(DelegatorConfig::default());
        assert_eq!(d2.restore(late, &[rec], &Default::default()), 1);
        let out = drain(&mut d2);
        (d2, out)
    };
    let (mut d2, out) = restore(&d);
    assert_eq!(d2.get(&id()).unwrap().state, DelegationState::Running);
    assert_eq!(
        count(&out, |o| matches!(
            o,
            DelegatorOutput::OpenEventStream { .. }
        )),
        1
    );
    assert_eq!(
        count(&out, |o| matches!(
            o,
            DelegatorOutput::SendMessage {
                to: Outbound::Error,
                ..
            }
        )),
        0,
        "not expired before the executor was asked"
    );
    // The replay: running, then done within the lease.
    let status = event(TaskEventKind::Status(crate::StatusEvent {
        status: crate::TaskStatus::Running,
        message: None,
        progress: None,
    }));
    d2.handle(late, status).unwrap();
    assert_eq!(d2.get(&id()).unwrap().state, DelegationState::Running);
    d2.handle(late, crate::engine::delegator::tests::done("s1"))
        .unwrap();
    drain(&mut d2);
    let v = d2.get(&id()).unwrap();
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    assert!(
        v.warnings
            .iter()
            .any(|w| w.contains("finished the task within it")),
        "{:?}",
        v.warnings
    );

    // No word from the executor until the grace period ends: expired, and it is told.
    let (mut d3, _) = restore(&d);
    let (at, why) = d3.poll_timeout().unwrap();
    assert_eq!(why, Timer::SetupGrace);
    d3.handle_timeout(at);
    let out = drain(&mut d3);
    let v = d3.get(&id()).unwrap();
    assert_eq!(v.state, DelegationState::Expired);
    assert_eq!(
        count(&out, |o| matches!(
            o,
            DelegatorOutput::SendMessage {
                to: Outbound::Error,
                ..
            }
        )),
        1
    );
}

/// How many of `out` match `f`.
fn count(out: &[DelegatorOutput], f: impl Fn(&DelegatorOutput) -> bool) -> usize {
    out.iter().filter(|o| f(o)).count()
}

/// Issue 48.8: what an apply changed (and left out) is journalled with the snapshot, so a
/// restarted delegator (the daemon after a crash) still says it.
#[test]
fn what_an_apply_changed_survives_a_restart() {
    let mut d = done_with_snapshot();
    d.handle(t(3), stored("snap_a", Ok(()))).unwrap();
    drain(&mut d);
    let changed = vec!["ws/a.txt".to_owned(), "ws/old.txt (deleted)".to_owned()];
    let left_out = vec!["ws/.git/hooks/x (refused)".to_owned()];
    d.handle(
        t(4),
        DelegatorInput::SnapshotApplied {
            id: id(),
            snapshot_id: sid("snap_a"),
            result: Ok(()),
            left_out: left_out.clone(),
            changed: changed.clone(),
        },
    )
    .unwrap();
    drain(&mut d);
    // Through the journal's JSON, as a restarted process reads it.
    let line = d.record(&id()).unwrap().to_json();
    let rec = DelegationRecord::from_json(&line).unwrap();
    let mut d2 = Delegator::new(DelegatorConfig::default());
    assert_eq!(d2.restore(t(10), &[rec], &Default::default()), 1);
    let s = status_of(&d2, "snap_a");
    assert_eq!(s.status, SnapshotStatus::Applied);
    assert_eq!(s.changed, changed);
    assert_eq!(s.left_out, left_out);
}

/// Two staged snapshots applied one after the other, the later one first: the restart finds
/// the running apply finished. The record names which snapshot that apply wrote, so it is the
/// one marked applied; the one queued behind it stays pending (found by the simulation: the
/// first `in_flight` snapshot in record order used to be taken).
#[test]
fn a_restart_mid_apply_marks_the_running_apply_not_the_queued_one() {
    let mut d = running(SnapshotMode::Staged);
    for s in ["snap_a", "snap_b"] {
        d.handle(t(2), snapshot(s)).unwrap();
        d.handle(t(2), stored(s, Ok(()))).unwrap();
    }
    drain(&mut d);
    d.apply_snapshot(t(3), &id(), &sid("snap_b")).unwrap();
    d.apply_snapshot(t(3), &id(), &sid("snap_a")).unwrap();
    let out = drain(&mut d);
    let applying: Vec<_> = out
        .iter()
        .filter_map(|o| {
            if let DelegatorOutput::ApplySnapshot { snapshot_id, .. } = o {
                Some(snapshot_id.clone())
            } else {
                None
            }
        })
        .collect();
    assert_eq!(
        applying,
        [sid("snap_b")],
        "one apply at a time, the first asked"
    );
    let (d2, _) = restored_after(&d, ApplyRecovery::Finished);
    assert_eq!(status_of(&d2, "snap_b").status, SnapshotStatus::Applied);
    assert_eq!(status_of(&d2, "snap_a").status, SnapshotStatus::Pending);
}

/// The start-up sweeps of the driver (a git repository, journalled storage objects) release
/// what the engine says: a live delegation keeps its leftovers; an ended or unknown one's go.
#[test]
fn only_ended_or_unknown_delegations_leftovers_are_released() {
    let stranger = DelegationId::new("dlg_unknown").unwrap();
    let mut d = done_with_snapshot();
    assert_eq!(
        d.leftovers_to_release([id(), stranger.clone()]),
        vec![stranger.clone()],
        "running: kept"
    );
    for input in [
        stored("snap_a", Ok(())),
        applied("snap_a", Ok(())),
        DelegatorInput::TransportReleased {
            id: id(),
            warnings: vec![],
        },
    ] {
        d.handle(t(3), input).unwrap();
    }
    assert!(d.get(&id()).unwrap().ended);
    assert_eq!(
        d.leftovers_to_release([id(), stranger.clone()]),
        vec![id(), stranger]
    );
}

/// A result kept for review past the release (a conflict) settles later: its apply or its
/// discard says so ([`DelegatorOutput::ResultsSettled`]: a git result branch may go), and
/// `results_await_review` holds until then. Applied before the release, nothing extra.
#[test]
fn results_settled_after_the_release_are_announced_once_all_are() {
    let settled = |out: &[DelegatorOutput]| {
        out.iter()
            .filter(|o| matches!(o, DelegatorOutput::ResultsSettled { .. }))
            .count()
    };
    for discard in [false, true] {
        let mut d = done_with_snapshot();
        for input in [
            stored("snap_a", Ok(())),
            applied(
                "snap_a",
                Err(ErrorInfo::new(ErrorCode::TransportError, "conflict: a.txt")),
            ),
            DelegatorInput::TransportReleased {
                id: id(),
                warnings: vec![],
            },
        ] {
            d.handle(t(3), input).unwrap();
        }
        assert_eq!(settled(&drain(&mut d)), 0);
        assert!(d.results_await_review(&id()));
        assert_eq!(d.leftovers_to_release([id()]), vec![id()]);
        // Its repository stays; a stranger's goes.
        let stranger = DelegationId::new("dlg_0123456789abcdef0123456789abcdef").unwrap();
        assert_eq!(
            d.repositories_to_release([id(), stranger.clone()]),
            vec![stranger]
        );
        if discard {
            d.discard_snapshot(t(4), &id(), &sid("snap_a")).unwrap();
        } else {
            d.apply_snapshot(t(4), &id(), &sid("snap_a")).unwrap();
            assert_eq!(settled(&drain(&mut d)), 0, "not before it is applied");
            d.handle(t(5), applied("snap_a", Ok(()))).unwrap();
        }
        assert_eq!(settled(&drain(&mut d)), 1, "discard: {discard}");
        assert!(!d.results_await_review(&id()));
        assert_eq!(d.repositories_to_release([id()]), vec![id()]);
    }
    // Applied while running: the release itself sees the results settled.
    let mut d = done_with_snapshot();
    for input in [
        stored("snap_a", Ok(())),
        applied("snap_a", Ok(())),
        DelegatorInput::TransportReleased {
            id: id(),
            warnings: vec![],
        },
    ] {
        d.handle(t(3), input).unwrap();
    }
    assert_eq!(settled(&drain(&mut d)), 0);
    assert!(d.results_settled(&id()));
}
