//! CONTINUE.

use super::*;

#[test]
fn continue_in_idle_runs_the_next_round_in_the_same_directory_under_its_lease() {
    let (mut r, dir) = Run::idle(ExecutorConfig::default(), rounds());
    let first = r.last_snapshot.clone().unwrap();
    r.later(ms(1_000));
    let lease_end = r.now.saturating_add(Duration::from_secs(300));
    let (answer, out) = r.send_continue(2, Some(lease_end));
    assert_eq!(answer, Response::Ok);
    let events = on_stream(&out, STREAM);
    match events.as_slice() {
        [TaskEventKind::Status(s)] => {
            assert_eq!(s.message.as_deref(), Some("Round 2 execution started"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(run_tasks(&out), [(dir.clone(), task(2), lease_end)]);
    assert_eq!(
        changes(&out),
        [(AssignmentState::Idle, AssignmentState::Active)]
    );
    assert_eq!(r.state(), AssignmentState::Active);
    assert_eq!(
        r.ex.timer_deadline(&r.id, ExecutorTimer::Lease),
        Some(lease_end)
    );
    assert_eq!(r.ex.timer_deadline(&r.id, ExecutorTimer::Idle), None);

    // Round 2's result is the whole work directory, not a delta; round 1's snapshot goes.
    r.later(ms(1_000));
    let (kind, out) = r.finish_round(2);
    assert_eq!(kind, Some(SnapshotKind::Full));
    let second = r.last_snapshot.clone().unwrap();
    assert_ne!(first, second, "a fresh id per round");
    assert!(out.iter().any(|o| matches!(
        o,
        ExecutorOutput::DropSnapshot { snapshot_id, .. } if *snapshot_id == first
    )));
    assert!(!out.iter().any(|o| matches!(
        o,
        ExecutorOutput::DropSnapshot { snapshot_id, .. } if *snapshot_id == second
    )));
    let events = on_stream(&out, STREAM);
    assert!(
        matches!(&events[..], [TaskEventKind::Snapshot(s), TaskEventKind::RoundDone(d)]
            if s.snapshot_id == second && d.round == 2 && d.snapshot_ids == [second.clone()]
                && d.summary == "did round 2"),
        "{events:?}"
    );
    assert_eq!(r.state(), AssignmentState::Idle);
    assert_eq!(r.ex.timer_deadline(&r.id, ExecutorTimer::Lease), None);

    // Round 3 without a lease: as long as the first one.
    let (answer, out) = r.send_continue(3, None);
    assert_eq!(answer, Response::Ok);
    let runs = run_tasks(&out);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].0, dir);
    assert_eq!(runs[0].2, r.now.saturating_add(Duration::from_secs(600)));
}

#[test]
fn a_continue_lease_longer_than_the_executor_grants_is_capped() {
    let (mut r, _) = Run::idle(
        ExecutorConfig {
            max_ttl_seconds: 60,
            ..ExecutorConfig::default()
        },
        rounds(),
    );
    let (answer, out) = r.send_continue(2, Some(r.now.saturating_add(Duration::from_secs(3600))));
    assert_eq!(answer, Response::Ok);
    let capped = r.now.saturating_add(Duration::from_secs(60));
    assert_eq!(run_tasks(&out)[0].2, capped);
    assert_eq!(
        r.ex.timer_deadline(&r.id, ExecutorTimer::Lease),
        Some(capped)
    );
}

#[test]
fn continue_is_refused_unless_the_round_ended_and_a_repeat_of_the_running_round_is_ok() {
    let mut r = Run::new(ExecutorConfig::default());
    r.invited(rounds());
    // Pending: no round ran yet.
    let (answer, out) = r.send_continue(2, None);
    assert_eq!(refusal(&answer), (409, ErrorCode::Declined));
    assert!(run_tasks(&out).is_empty());
    assert_eq!(r.state(), AssignmentState::Pending);
    r.started(archive_handle());
    // Round 1 runs: another round is refused.
    let (answer, out) = r.send_continue(2, None);
    assert_eq!(refusal(&answer), (409, ErrorCode::Declined));
    assert!(run_tasks(&out).is_empty());
    assert!(on_stream(&out, STREAM).is_empty());
    assert_eq!(r.state(), AssignmentState::Active);
    r.finish_round(1);
    let (answer, _) = r.send_continue(2, None);
    assert_eq!(answer, Response::Ok);
    // The same CONTINUE again (a retry): answered as the first, nothing started twice.
    let (answer, out) = r.send_continue(2, None);
    assert_eq!(answer, Response::Ok);
    assert!(run_tasks(&out).is_empty(), "{out:?}");
    assert!(on_stream(&out, STREAM).is_empty());
    // Another round while round 2 runs: refused.
    let (answer, out) = r.send_continue(3, None);
    assert_eq!(refusal(&answer), (409, ErrorCode::Declined));
    assert!(run_tasks(&out).is_empty());
    assert_eq!(r.state(), AssignmentState::Active);
}

#[test]
fn a_failed_round_ends_the_session_with_task_failed() {
    let (mut r, _) = Run::idle(ExecutorConfig::default(), rounds());
    r.send_continue(2, None);
    let out = r.input(ExecutorInput::TaskFinished {
        id: r.id.clone(),
        result: Err(TaskFailure::Failed("exit 3".into())),
    });
    let events = on_stream(&out, STREAM);
    assert!(
        matches!(&events[..], [TaskEventKind::Error(e)] if e.code == ErrorCode::TaskFailed),
        "{events:?}"
    );
    assert_eq!(closes(&out, STREAM), 1);
    assert_eq!(releases(&out), 1);
    assert_eq!(r.state(), AssignmentState::Error);
    let (answer, _) = r.send_continue(3, None);
    assert_eq!(refusal(&answer).0, 409);
}

#[test]
fn the_lease_of_a_later_round_stops_it_with_expired() {
    let (mut r, _) = Run::idle(ExecutorConfig::default(), rounds());
    let lease_end = r.now.saturating_add(Duration::from_secs(30));
    r.send_continue(2, Some(lease_end));
    r.ex.handle_timeout(lease_end);
    let out: Vec<_> = std::iter::from_fn(|| r.ex.poll_output()).collect();
    assert!(out
        .iter()
        .any(|o| matches!(o, ExecutorOutput::StopTask { .. })));
    let events = on_stream(&out, STREAM);
    assert!(
        matches!(&events[..], [TaskEventKind::Error(e)] if e.code == ErrorCode::Expired),
        "{events:?}"
    );
    assert_eq!(r.state(), AssignmentState::Error);
}
