//! The event stream breaks between rounds.

use super::*;

/// [`idle_open`] whose event stream broke more often than it is reopened: the delegator asked
/// `GET …/result`.
fn idle_asking_for_the_result() -> Delegator {
    let mut d = idle_open(SnapshotMode::Auto);
    let attempts = DelegatorConfig::default().sse_reconnect_attempts;
    let mut now = t(10);
    for _ in 0..attempts {
        d.handle(
            now,
            DelegatorInput::EventStreamClosed {
                id: id(),
                reason: Some("reset".into()),
            },
        )
        .unwrap();
        let out = drain(&mut d);
        assert!(
            events(&out)
                .iter()
                .any(|e| matches!(e, DelegatorEvent::ConnectionLost { .. })),
            "{out:?}"
        );
        let (at, why) = d.poll_timeout().unwrap();
        assert_eq!(why, Timer::Reconnect);
        d.handle_timeout(at);
        assert!(drain(&mut d)
            .iter()
            .any(|o| matches!(o, DelegatorOutput::OpenEventStream { .. })));
        now = at;
    }
    d.handle(
        now,
        DelegatorInput::EventStreamClosed {
            id: id(),
            reason: Some("reset".into()),
        },
    )
    .unwrap();
    let out = drain(&mut d);
    assert!(
        matches!(out.as_slice(), [DelegatorOutput::FetchResult { .. }]),
        "{out:?}"
    );
    assert_eq!(state(&d), DelegationState::Idle);
    d
}

#[test]
fn an_idle_delegation_whose_result_says_running_listens_again() {
    let mut d = idle_asking_for_the_result();
    d.handle(
        t(100),
        DelegatorInput::ResultFetched {
            id: id(),
            result: Ok(FetchedResult::Running),
        },
    )
    .unwrap();
    drain(&mut d);
    assert_eq!(state(&d), DelegationState::Idle);
    let at = t(100).saturating_add(DelegatorConfig::default().result_poll_interval);
    assert_eq!(d.poll_timeout(), Some((at, Timer::Reconnect)));
    d.handle_timeout(at);
    assert!(drain(&mut d)
        .iter()
        .any(|o| matches!(o, DelegatorOutput::OpenEventStream { .. })));
}

#[test]
fn an_idle_delegation_whose_result_says_error_fails() {
    let mut d = idle_asking_for_the_result();
    let e = ErrorInfo::new(ErrorCode::Cancelled, "cancelled on the executor");
    d.handle(
        t(100),
        DelegatorInput::ResultFetched {
            id: id(),
            result: Ok(FetchedResult::Error(e.clone())),
        },
    )
    .unwrap();
    drain(&mut d);
    let v = d.get(&id()).unwrap();
    assert_eq!(v.state, DelegationState::Error);
    assert_eq!(v.error, Some(e));
}

#[test]
fn an_idle_delegation_whose_result_says_completed_completes_with_the_last_round() {
    let mut d = idle_asking_for_the_result();
    d.handle(
        t(100),
        DelegatorInput::ResultFetched {
            id: id(),
            result: Ok(FetchedResult::Completed {
                outcome: outcome(1),
                snapshot: None,
            }),
        },
    )
    .unwrap();
    let out = drain(&mut d);
    assert_eq!(
        changes(&out),
        [(DelegationState::Idle, DelegationState::Completed)]
    );
    assert_eq!(d.get(&id()).unwrap().result, Some(outcome(1)));
}

#[test]
fn an_idle_delegation_whose_executor_forgot_it_fails_with_not_found() {
    let mut d = idle_asking_for_the_result();
    d.handle(
        t(100),
        DelegatorInput::ResultFetched {
            id: id(),
            result: Ok(FetchedResult::NotFound),
        },
    )
    .unwrap();
    drain(&mut d);
    let v = d.get(&id()).unwrap();
    assert_eq!(v.state, DelegationState::Error);
    assert_eq!(v.error.map(|e| e.code), Some(ErrorCode::NotFound));
}

#[test]
fn an_agreed_multi_round_is_recorded_as_agreed() {
    let d = running_open(SnapshotMode::Auto);
    let rec = d.record(&id()).unwrap();
    assert!(rec.features.contains(&Feature::MultiRound), "{rec:?}");
}
