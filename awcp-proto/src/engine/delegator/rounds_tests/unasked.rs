//! Rounds a delegation did not ask for (a reference `dev` executor).

use super::*;

#[test]
fn a_round_done_nobody_asked_for_takes_the_round_as_the_result_and_closes() {
    let mut d = running(SnapshotMode::Auto);
    d.handle(t(5), round_done(1, None)).unwrap();
    let out = drain(&mut d);
    assert_eq!(
        changes(&out),
        [
            (DelegationState::Running, DelegationState::Idle),
            (DelegationState::Idle, DelegationState::Completed),
        ]
    );
    assert_eq!(
        sent(&out, Outbound::Close),
        [&Message::Close(crate::wire::Close {
            delegation_id: id()
        })]
    );
    assert!(sent(&out, Outbound::Continue).is_empty());
    assert_eq!(
        count(&out, |o| matches!(
            o,
            DelegatorOutput::CloseEventStream { .. }
        )),
        1
    );
    // The executor is acknowledged (and the transport released) only once it confirmed.
    assert!(
        !out.iter()
            .any(|o| is_ack(o) || is_release(o) || is_ended(o)),
        "{out:?}"
    );
    let v = d.get(&id()).unwrap();
    assert_eq!(v.state, DelegationState::Completed);
    assert_eq!(v.result, Some(outcome(1)));
    assert_eq!(v.round, 1);
    assert!(!v.ended);

    d.handle(t(6), reply(Outbound::Close, Reply::Ok)).unwrap();
    let out = drain(&mut d);
    assert_eq!(count(&out, is_ack), 1, "{out:?}");
    assert_eq!(count(&out, is_release), 1, "{out:?}");
    assert!(!out.iter().any(is_ended), "not before the release");

    // Released (and a duplicate answer): ended exactly once, with the round's result.
    d.handle(t(7), released()).unwrap();
    d.handle(t(7), released()).unwrap();
    let out = drain(&mut d);
    let ended: Vec<_> = events(&out)
        .into_iter()
        .filter(|e| matches!(e, DelegatorEvent::Ended { .. }))
        .collect();
    assert_eq!(
        ended,
        [&DelegatorEvent::Ended {
            id: id(),
            state: DelegationState::Completed,
            result: Some(outcome(1)),
            error: None,
        }]
    );

    // The executor's `done` answering CLOSE comes late: it changes nothing.
    d.handle(t(8), done_saying("Session closed by delegator"))
        .unwrap();
    let out = drain(&mut d);
    assert!(
        !out.iter()
            .any(|o| is_ack(o) || is_release(o) || is_ended(o)),
        "{out:?}"
    );
    let v = d.get(&id()).unwrap();
    assert_eq!(v.result, Some(outcome(1)));
    assert_eq!(v.state, DelegationState::Completed);
    assert!(v.ended);
}

#[test]
fn a_trailing_done_before_the_close_answer_does_not_replace_the_result() {
    let mut d = running(SnapshotMode::Auto);
    d.handle(t(5), round_done(1, None)).unwrap();
    d.handle(t(5), done_saying("Session closed by delegator"))
        .unwrap();
    let out = drain(&mut d);
    assert!(!out.iter().any(is_ack), "CLOSE not confirmed yet: {out:?}");
    assert_eq!(d.get(&id()).unwrap().result, Some(outcome(1)));
    d.handle(t(6), reply(Outbound::Close, Reply::Ok)).unwrap();
    d.handle(t(7), released()).unwrap();
    let out = drain(&mut d);
    assert_eq!(count(&out, is_ack), 1);
    assert_eq!(count(&out, is_ended), 1);
    assert_eq!(d.get(&id()).unwrap().result, Some(outcome(1)));
}

#[test]
fn a_refused_close_still_ends_the_delegation_but_never_acknowledges() {
    let mut d = running(SnapshotMode::Auto);
    d.handle(t(5), round_done(1, None)).unwrap();
    drain(&mut d);
    // A reference `main` executor answers what it does not know with HTTP 500.
    let refusal = ErrorInfo::new(ErrorCode::Declined, "Unexpected message type: CLOSE");
    d.handle(t(6), reply(Outbound::Close, Reply::Error(refusal)))
        .unwrap();
    d.handle(t(7), released()).unwrap();
    let out = drain(&mut d);
    assert!(!out.iter().any(is_ack), "{out:?}");
    assert_eq!(count(&out, is_ended), 1);
    let v = d.get(&id()).unwrap();
    assert_eq!(v.state, DelegationState::Completed);
    assert_eq!(v.result, Some(outcome(1)));
    assert!(
        v.warnings.iter().any(|w| w.contains("refused CLOSE")),
        "{:?}",
        v.warnings
    );
}

#[test]
fn a_round_done_nobody_asked_for_is_acknowledged_only_after_its_snapshot_and_the_close() {
    let mut d = running(SnapshotMode::Auto);
    d.handle(t(2), snapshot("snap_a")).unwrap();
    d.handle(t(3), round_done(1, Some("snap_a"))).unwrap();
    let out = drain(&mut d);
    assert_eq!(sent(&out, Outbound::Close).len(), 1);
    assert_eq!(state(&d), DelegationState::Completed);
    // Stored after the CLOSE: still applied (the delegation completed), not rebaselined.
    d.handle(t(4), stored("snap_a", Ok(()))).unwrap();
    let out = drain(&mut d);
    let applies: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            DelegatorOutput::ApplySnapshot {
                snapshot_id,
                rebaseline,
                ..
            } => Some((snapshot_id.clone(), *rebaseline)),
            _ => None,
        })
        .collect();
    assert_eq!(applies, [(sid("snap_a"), false)]);
    assert!(!out.iter().any(is_ack));
    d.handle(t(5), reply(Outbound::Close, Reply::Ok)).unwrap();
    assert!(!drain(&mut d).iter().any(is_ack), "the apply still runs");
    d.handle(t(6), applied("snap_a", Ok(()))).unwrap();
    let out = drain(&mut d);
    assert_eq!(count(&out, is_ack), 1, "{out:?}");
    assert_eq!(count(&out, is_release), 1, "{out:?}");
    d.handle(t(7), released()).unwrap();
    assert_eq!(d.get(&id()).unwrap().outcome(), Outcome::Completed);
}

#[test]
fn a_repeated_round_done_after_the_close_sends_no_second_close() {
    let mut d = running(SnapshotMode::Auto);
    d.handle(t(5), round_done(1, None)).unwrap();
    drain(&mut d);
    d.handle(t(6), round_done(1, None)).unwrap();
    let out = drain(&mut d);
    assert!(sent(&out, Outbound::Close).is_empty(), "{out:?}");
    assert!(changes(&out).is_empty());
    assert_eq!(state(&d), DelegationState::Completed);
}
