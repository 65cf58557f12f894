//! The executor ends the session while idle.

use super::*;

#[test]
fn a_done_while_idle_completes_with_the_last_rounds_result() {
    let mut d = idle_open(SnapshotMode::Auto);
    d.handle(t(50), done_saying("Session closed by delegator"))
        .unwrap();
    let out = drain(&mut d);
    assert_eq!(
        changes(&out),
        [(DelegationState::Idle, DelegationState::Completed)]
    );
    assert!(
        sent(&out, Outbound::Close).is_empty(),
        "already closed: {out:?}"
    );
    assert_eq!(count(&out, is_ack), 1, "the executor said its last word");
    assert_eq!(count(&out, is_release), 1);
    assert_eq!(d.get(&id()).unwrap().result, Some(outcome(1)));
    d.handle(t(51), released()).unwrap();
    let out = drain(&mut d);
    assert!(events(&out).contains(&&DelegatorEvent::Ended {
        id: id(),
        state: DelegationState::Completed,
        result: Some(outcome(1)),
        error: None,
    }));
    assert_ne!(
        d.poll_timeout().map(|(_, why)| why),
        Some(Timer::Idle),
        "the idle timer is off"
    );
}

#[test]
fn an_error_event_while_idle_fails_the_delegation() {
    let mut d = idle_open(SnapshotMode::Auto);
    let e = ErrorInfo::new(ErrorCode::Cancelled, "cancelled by the executor's operator");
    d.handle(t(50), event(TaskEventKind::Error(e.clone())))
        .unwrap();
    let out = drain(&mut d);
    assert_eq!(
        changes(&out),
        [(DelegationState::Idle, DelegationState::Error)]
    );
    assert!(sent(&out, Outbound::Close).is_empty());
    assert_eq!(count(&out, is_release), 1);
    let v = d.get(&id()).unwrap();
    assert_eq!(v.state, DelegationState::Error);
    assert_eq!(v.error, Some(e.clone()));
    d.handle(t(51), released()).unwrap();
    let out = drain(&mut d);
    assert!(events(&out).iter().any(|ev| matches!(
        ev,
        DelegatorEvent::Ended { state: DelegationState::Error, error: Some(err), .. } if **err == e
    )));
    // An expiry reported while idle is an error too (`idle` cannot expire).
    let mut d = idle_open(SnapshotMode::Auto);
    let expired = ErrorInfo::new(ErrorCode::Expired, "lease over");
    d.handle(t(50), event(TaskEventKind::Error(expired)))
        .unwrap();
    assert_eq!(state(&d), DelegationState::Error);
}

#[test]
fn an_idle_delegation_that_ends_otherwise_disarms_its_idle_timer() {
    for end in ["cancel", "error"] {
        let mut d = idle_open(SnapshotMode::Auto);
        if end == "cancel" {
            d.cancel(t(50), &id()).unwrap();
        } else {
            let e = ErrorInfo::new(ErrorCode::TaskFailed, "boom");
            d.handle(t(50), event(TaskEventKind::Error(e))).unwrap();
        }
        d.handle(t(51), released()).unwrap();
        drain(&mut d);
        assert!(d.get(&id()).unwrap().ended, "{end}");
        assert_eq!(
            d.poll_timeout().map(|(_, why)| why),
            Some(Timer::Forget),
            "{end}: only the retention is left to wait for"
        );
    }
}

#[test]
fn a_cancel_while_idle_tells_the_executor_and_sends_no_close() {
    let mut d = idle_open(SnapshotMode::Auto);
    d.cancel(t(50), &id()).unwrap();
    let out = drain(&mut d);
    assert_eq!(
        changes(&out),
        [(DelegationState::Idle, DelegationState::Cancelled)]
    );
    assert_eq!(
        count(&out, |o| matches!(o, DelegatorOutput::SendCancel { .. })),
        1
    );
    assert!(sent(&out, Outbound::Close).is_empty());
    // A late idle timer does nothing.
    d.handle_timeout(t(50).saturating_add(idle_timeout()));
    assert!(sent(&drain(&mut d), Outbound::Close).is_empty());
    assert_eq!(state(&d), DelegationState::Cancelled);
}

#[test]
fn a_repeated_round_done_while_idle_is_ignored() {
    let mut d = idle_open(SnapshotMode::Auto);
    let idle_at = d.poll_timeout();
    // A replay of the same round, and one that claims another.
    d.handle(t(20), round_done(1, None)).unwrap();
    d.handle(t(21), round_done(2, None)).unwrap();
    let out = drain(&mut d);
    assert!(out.is_empty(), "{out:?}");
    let v = d.get(&id()).unwrap();
    assert_eq!(v.state, DelegationState::Idle);
    assert_eq!(v.result, Some(outcome(1)));
    assert_eq!(v.round, 1);
    assert_eq!(d.poll_timeout(), idle_at, "the idle time is not restarted");
}
