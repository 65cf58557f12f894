//! A restart between rounds.

use super::*;

/// A kept-open delegation idle after round 2, its record, and a delegator restored from it at
/// `t(100)` with what that restore put out.
fn restored_idle_after_round_2() -> (DelegationRecord, Delegator, Vec<DelegatorOutput>) {
    let mut d = idle_open(SnapshotMode::Auto);
    assert_eq!(d.continue_delegation(t(10), &id(), task(2)), Ok(2));
    d.handle(t(20), round_done(2, None)).unwrap();
    drain(&mut d);
    assert_eq!(state(&d), DelegationState::Idle);
    let rec = d.record(&id()).unwrap();
    // Through the journal's JSON and back.
    let rec = DelegationRecord::from_json(&rec.to_json()).unwrap();
    let mut d2 = Delegator::new(DelegatorConfig::default());
    assert_eq!(
        d2.restore(t(100), std::slice::from_ref(&rec), &Default::default()),
        1
    );
    let out = drain(&mut d2);
    (rec, d2, out)
}

#[test]
fn a_delegation_restored_while_idle_stays_idle_at_its_round_and_listens_again() {
    let (rec, mut d, out) = restored_idle_after_round_2();
    assert_eq!(rec.state, DelegationState::Idle);
    assert_eq!(rec.round, Some(2));
    assert!(rec.keep_open);
    assert!(
        matches!(out.as_slice(), [DelegatorOutput::OpenEventStream { .. }]),
        "{out:?}"
    );
    let v = d.get(&id()).unwrap();
    assert_eq!(v.state, DelegationState::Idle);
    assert_eq!(v.round, 2);
    assert_eq!(v.result, Some(outcome(2)));
    assert!(v.request.keep_open);
    assert_eq!(
        d.poll_timeout(),
        Some((t(100).saturating_add(idle_timeout()), Timer::Idle))
    );
    // The stream opens and the executor replays the round's end: nothing changes.
    d.handle(t(101), DelegatorInput::EventStreamOpened { id: id() })
        .unwrap();
    d.handle(t(101), round_done(2, None)).unwrap();
    assert!(drain(&mut d).is_empty());
    assert_eq!(state(&d), DelegationState::Idle);
    // The next round is round 3.
    assert_eq!(d.continue_delegation(t(102), &id(), task(3)), Ok(3));
    let out = drain(&mut d);
    match sent(&out, Outbound::Continue).as_slice() {
        [Message::Continue(c)] => {
            assert_eq!(c.round, 3);
            assert_eq!(c.task, task(3));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_delegation_restored_while_idle_completes_when_the_executor_closed_meanwhile() {
    let (_, mut d, _) = restored_idle_after_round_2();
    d.handle(t(101), DelegatorInput::EventStreamOpened { id: id() })
        .unwrap();
    // The executor's idle time ran out while this side was down: its replay is `done`.
    d.handle(t(101), done_saying("round 2")).unwrap();
    let out = drain(&mut d);
    assert_eq!(
        changes(&out),
        [(DelegationState::Idle, DelegationState::Completed)]
    );
    assert_eq!(count(&out, is_ack), 1);
    assert_eq!(d.get(&id()).unwrap().result, Some(outcome(2)));
}

#[test]
fn a_delegation_restored_while_idle_closes_at_the_idle_timeout() {
    let (_, mut d, _) = restored_idle_after_round_2();
    d.handle_timeout(t(100).saturating_add(idle_timeout()));
    let out = drain(&mut d);
    assert_eq!(sent(&out, Outbound::Close).len(), 1, "{out:?}");
    assert_eq!(state(&d), DelegationState::Completed);
}
