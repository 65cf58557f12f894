//! Whether rounds happen.

use super::*;

#[test]
fn without_multi_round_a_task_completes_with_done_as_before() {
    let mut r = Run::new(ExecutorConfig::default());
    let accept = r.invited(vec![Feature::DeltaSnapshots]);
    assert!(!accept.features.contains(&Feature::MultiRound));
    r.started(archive_handle());
    let (kind, out) = r.finish_round(1);
    assert_eq!(kind, Some(SnapshotKind::Delta));
    let events = on_stream(&out, STREAM);
    assert!(
        matches!(&events[..], [TaskEventKind::Snapshot(_), TaskEventKind::Done(d)] if d.summary == "did round 1"),
        "{events:?}"
    );
    assert!(!events.iter().any(is_round_done));
    assert_eq!(closes(&out, STREAM), 1);
    assert_eq!(releases(&out), 1);
    assert_eq!(r.state(), AssignmentState::Completed);
    for (answer, _) in [r.send_continue(2, None), r.send_close()] {
        assert_eq!(refusal(&answer), (409, ErrorCode::Declined));
    }
}

#[test]
fn an_executor_not_supporting_multi_round_does_not_agree_to_it() {
    let config = ExecutorConfig {
        features: vec![Feature::DeltaSnapshots],
        ..ExecutorConfig::default()
    };
    let mut r = Run::new(config);
    let accept = r.invited(rounds());
    assert_eq!(accept.features, [Feature::DeltaSnapshots]);
    r.started(archive_handle());
    let (_, out) = r.finish_round(1);
    assert!(on_stream(&out, STREAM).iter().any(is_done));
    assert_eq!(r.state(), AssignmentState::Completed);
}

#[test]
fn with_reference_rounds_a_delegator_that_negotiates_nothing_gets_rounds() {
    let config = ExecutorConfig {
        reference_rounds: true,
        ..ExecutorConfig::default()
    };
    let mut r = Run::new(config.clone());
    let accept = r.invited(Vec::new());
    assert!(accept.features.is_empty(), "nothing was agreed: {accept:?}");
    let dir = r.started(archive_handle());
    let (kind, out) = r.finish_round(1);
    assert_eq!(
        kind,
        Some(SnapshotKind::Full),
        "no delta for a reference peer"
    );
    let events = on_stream(&out, STREAM);
    assert!(
        matches!(&events[..], [TaskEventKind::Snapshot(_), TaskEventKind::RoundDone(d)] if d.round == 1),
        "{events:?}"
    );
    assert_eq!(r.state(), AssignmentState::Idle);
    assert_eq!(releases(&out), 0);
    // The reference delegator's CONTINUE: no lease.
    let (answer, out) = r.send_continue(2, None);
    assert_eq!(answer, Response::Ok);
    assert_eq!(run_tasks(&out)[0].0, dir);

    // A delegator that negotiates something, but not rounds, is single-shot.
    let mut r = Run::new(config.clone());
    r.invited(vec![Feature::ArchiveUrl]);
    r.started(archive_handle());
    let (_, out) = r.finish_round(1);
    assert!(on_stream(&out, STREAM).iter().any(is_done));
    assert_eq!(r.state(), AssignmentState::Completed);

    // So is a seed-dialect delegator.
    let mut r = Run::new(config);
    r.dialect = Dialect::Seed;
    r.invited(Vec::new());
    r.started(archive_handle());
    let (_, out) = r.finish_round(1);
    assert!(on_stream(&out, STREAM).iter().any(is_done));
    assert_eq!(r.state(), AssignmentState::Completed);
}

#[test]
fn a_live_transport_never_agrees_to_rounds() {
    let config = ExecutorConfig {
        transports: vec![TransportKind::Archive, TransportKind::Sshfs],
        reference_rounds: true,
        ..ExecutorConfig::default()
    };
    for offered in [rounds(), Vec::new()] {
        let mut r = Run::new(config.clone());
        let mut inv = invite(&r.id);
        inv.transport = Some(TransportKind::Sshfs);
        inv.features = offered.clone();
        let accept = r.invited_with(inv);
        assert!(
            !accept.features.contains(&Feature::MultiRound),
            "offered {offered:?}: {accept:?}"
        );
        r.started(sshfs_handle());
        // The task ends: detached first (no snapshot), then `done`; never `round_done`.
        let (kind, out) = r.finish_round(1);
        assert_eq!(kind, None);
        assert_eq!(releases(&out), 1, "{out:?}");
        assert!(on_stream(&out, STREAM).is_empty(), "{out:?}");
        let out = r.input(ExecutorInput::Released {
            id: r.id.clone(),
            result: Ok(()),
        });
        let events = on_stream(&out, STREAM);
        assert!(
            matches!(&events[..], [TaskEventKind::Done(_)]),
            "offered {offered:?}: {events:?}"
        );
        assert_eq!(r.state(), AssignmentState::Completed);
    }
}

#[test]
fn a_seed_delegator_with_multi_round_still_gets_each_rounds_result() {
    let mut r = Run::new(ExecutorConfig::default());
    r.dialect = Dialect::Seed;
    r.invited(rounds());
    r.started(archive_handle());
    let (kind, out) = r.finish_round(1);
    assert!(kind.is_some(), "a result was captured");
    let events = on_stream(&out, STREAM);
    let delivered = events.iter().any(|k| match k {
        TaskEventKind::Snapshot(_) => true,
        TaskEventKind::Done(d) => d.result_base64.is_some() || d.result_local_file.is_some(),
        _ => false,
    });
    // Either the round's result reaches the seed delegator now, or rounds were not agreed
    // and `done` carries it.
    assert!(
        delivered,
        "the seed delegator never sees the result: {events:?}"
    );
}
