//! The end of a round.

use super::*;

#[test]
fn with_multi_round_a_round_ends_with_its_snapshot_then_round_done_and_the_assignment_waits() {
    let mut r = Run::new(ExecutorConfig::default());
    let accept = r.invited(rounds());
    assert!(accept.features.contains(&Feature::MultiRound), "{accept:?}");
    r.started(archive_handle());
    r.later(ms(500));
    let (kind, out) = r.finish_round(1);
    assert_eq!(
        kind,
        Some(SnapshotKind::Delta),
        "round 1: against what was lent"
    );
    let sid = r.last_snapshot.clone().unwrap();
    let events = on_stream(&out, STREAM);
    assert_eq!(events.len(), 2, "{events:?}");
    match &events[0] {
        TaskEventKind::Snapshot(s) => {
            assert_eq!(s.snapshot_id, sid);
            assert_eq!(s.summary, "did round 1");
            assert_eq!(s.recommended, Some(true));
        }
        other => panic!("not the snapshot: {other:?}"),
    }
    assert_eq!(
        events[1],
        TaskEventKind::RoundDone(RoundDoneEvent {
            round: 1,
            summary: "did round 1".into(),
            highlights: vec!["f1.txt".into()],
            snapshot_ids: vec![sid.clone()],
            recommended_snapshot_id: Some(sid),
        })
    );
    assert_eq!(
        changes(&out),
        [(AssignmentState::Active, AssignmentState::Idle)]
    );
    assert_eq!(releases(&out), 0, "the work directory is kept: {out:?}");
    assert_eq!(closes(&out, STREAM), 0, "the stream goes on");
    assert!(!out
        .iter()
        .any(|o| matches!(o, ExecutorOutput::Event(ExecutorEvent::Ended { .. }))));
    let view = r.ex.assignment(&r.id).unwrap();
    assert_eq!(view.state, AssignmentState::Idle);
    assert!(!view.released);
    // No lease runs between rounds; the idle time does.
    assert_eq!(r.ex.timer_deadline(&r.id, ExecutorTimer::Lease), None);
    let idle_end = r.now.saturating_add(ExecutorConfig::default().idle_timeout);
    assert_eq!(r.ex.poll_timeout(), Some((idle_end, ExecutorTimer::Idle)));
    // `GET …/result` says running between rounds, as the reference does.
    let (answer, _) = r.ask(Request::Result(r.id.clone()));
    match answer {
        Response::Result(body) => assert_eq!(body.status, ResultStatus::Running),
        other => panic!("{other:?}"),
    }
    // An idle assignment still holds its work directory.
    assert_eq!(r.ex.status().active, 1);
    assert_eq!(r.ex.live_count(), 1);
}

#[test]
fn a_read_only_round_ends_with_round_done_without_a_snapshot() {
    let mut r = Run::new(ExecutorConfig::default());
    let mut inv = invite(&r.id);
    inv.features = rounds();
    inv.lease.access_mode = AccessMode::Ro;
    r.invited_with(inv);
    r.started(archive_handle());
    let (kind, out) = r.finish_round(1);
    assert_eq!(kind, None, "nothing to bring back");
    assert_eq!(
        on_stream(&out, STREAM),
        [TaskEventKind::RoundDone(RoundDoneEvent {
            round: 1,
            summary: "did round 1".into(),
            highlights: vec!["f1.txt".into()],
            snapshot_ids: vec![],
            recommended_snapshot_id: None,
        })]
    );
    assert_eq!(r.state(), AssignmentState::Idle);
}

#[test]
fn the_overview_lists_a_running_task_with_its_lease_and_an_idle_one_without() {
    let mut r = Run::new(ExecutorConfig::default());
    r.invited(rounds());
    r.started(archive_handle());
    let all = r.ex.overview();
    assert_eq!(all.len(), 1);
    let s = &all[0];
    assert_eq!(s.id, r.id);
    assert_eq!(s.state, AssignmentState::Active);
    assert_eq!(s.round, 1);
    assert!(!s.work_dir.is_empty());
    assert!(s.started_at.is_some());
    assert_eq!(
        s.expires_at,
        r.ex.timer_deadline(&r.id, ExecutorTimer::Lease),
        "the lease the engine runs"
    );
    assert!(s.expires_at.is_some());
    r.finish_round(1);
    let s = &r.ex.overview()[0];
    assert_eq!(s.state, AssignmentState::Idle);
    assert_eq!(s.expires_at, None, "no lease runs between rounds");
}
