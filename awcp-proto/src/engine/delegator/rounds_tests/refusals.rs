//! Refusals.

use super::*;

#[test]
fn continue_and_close_are_refused_unless_the_delegation_is_idle() {
    let refused = |d: &mut Delegator| {
        let before = d.get(&id()).unwrap();
        assert!(matches!(
            d.continue_delegation(t(50), &id(), task(2)),
            Err(UsageError::InvalidState(_))
        ));
        assert!(matches!(
            d.close(t(50), &id()),
            Err(UsageError::InvalidState(_))
        ));
        assert!(drain(d).is_empty(), "a refused call sends nothing");
        let after = d.get(&id()).unwrap();
        assert_eq!(
            (after.state, after.round, after.expires_at),
            (before.state, before.round, before.expires_at)
        );
    };
    // Running (the round has not ended).
    let mut d = running_open(SnapshotMode::Auto);
    refused(&mut d);
    // Still setting up.
    let mut d = started_open_with(
        DelegatorConfig::default(),
        SnapshotMode::Auto,
        accept_rounds(),
    );
    refused(&mut d);
    // Completed by a single-round executor's `done`.
    let mut d = running_open(SnapshotMode::Auto);
    d.handle(t(5), done_saying("all done")).unwrap();
    drain(&mut d);
    assert_eq!(state(&d), DelegationState::Completed);
    refused(&mut d);
    // Closed already.
    let mut d = idle_open(SnapshotMode::Auto);
    d.close(t(6), &id()).unwrap();
    drain(&mut d);
    refused(&mut d);
    // Unknown.
    let other = DelegationId::new("dlg_nobody").unwrap();
    assert_eq!(
        d.continue_delegation(t(7), &other, task(2)),
        Err(UsageError::UnknownDelegation(other.clone()))
    );
    assert_eq!(
        d.close(t(7), &other),
        Err(UsageError::UnknownDelegation(other))
    );
}

#[test]
fn the_idle_timeout_closes_an_idle_delegation_and_says_so() {
    let config = DelegatorConfig {
        idle_timeout: Duration::from_secs(7),
        ..DelegatorConfig::default()
    };
    let mut d = running_open_with(config, SnapshotMode::Auto, accept_rounds());
    d.handle(t(5), round_done(1, None)).unwrap();
    drain(&mut d);
    let at = t(5).saturating_add(Duration::from_secs(7));
    assert_eq!(d.poll_timeout(), Some((at, Timer::Idle)));
    // Early: nothing.
    d.handle_timeout(at.saturating_sub(Duration::from_millis(1)));
    assert!(drain(&mut d).is_empty());
    assert_eq!(state(&d), DelegationState::Idle);
    d.handle_timeout(at);
    let out = drain(&mut d);
    assert_eq!(sent(&out, Outbound::Close).len(), 1, "{out:?}");
    assert_eq!(
        changes(&out),
        [(DelegationState::Idle, DelegationState::Completed)]
    );
    let v = d.get(&id()).unwrap();
    assert_eq!(v.state, DelegationState::Completed);
    assert_eq!(v.result, Some(outcome(1)));
    assert!(
        v.warnings
            .iter()
            .any(|w| w.contains("7 s") && w.contains("without a next round")),
        "{:?}",
        v.warnings
    );
    // Fired once.
    d.handle_timeout(at.saturating_add(Duration::from_secs(7)));
    assert!(sent(&drain(&mut d), Outbound::Close).is_empty());
}

#[test]
fn a_refused_continue_leaves_the_delegation_idle_at_its_round() {
    let mut d = idle_open(SnapshotMode::Auto);
    assert_eq!(d.continue_delegation(t(10), &id(), task(2)), Ok(2));
    drain(&mut d);
    let refusal = ErrorInfo::bare(ErrorCode::Declined, "delegation is active");
    d.handle(t(11), reply(Outbound::Continue, Reply::Error(refusal)))
        .unwrap();
    let out = drain(&mut d);
    assert_eq!(
        changes(&out),
        [(DelegationState::Running, DelegationState::Idle)]
    );
    let v = d.get(&id()).unwrap();
    assert_eq!(v.state, DelegationState::Idle);
    assert_eq!(v.round, 1);
    assert_eq!(v.result, Some(outcome(1)));
    assert!(
        v.warnings
            .iter()
            .any(|w| w.contains("refused round 2") && w.contains("delegation is active")),
        "{:?}",
        v.warnings
    );
    assert_eq!(
        d.poll_timeout(),
        Some((t(11).saturating_add(idle_timeout()), Timer::Idle)),
        "the idle time starts again; no lease runs"
    );
    // It can be continued again, as round 2 again.
    assert_eq!(d.continue_delegation(t(12), &id(), task(2)), Ok(2));
    // A CONTINUE that never reached the executor is a refusal too.
    d.handle(
        t(13),
        reply(
            Outbound::Continue,
            Reply::Failed(RequestFailure::Unreachable("connection refused".into())),
        ),
    )
    .unwrap();
    assert_eq!(state(&d), DelegationState::Idle);
    assert_eq!(d.get(&id()).unwrap().round, 1);
}

#[test]
fn a_continue_without_an_answer_may_have_started_the_round_so_it_stays_running() {
    let mut d = idle_open(SnapshotMode::Auto);
    assert_eq!(d.continue_delegation(t(10), &id(), task(2)), Ok(2));
    drain(&mut d);
    let lease_end = t(10).saturating_add(Duration::from_secs(600));
    d.handle(
        t(11),
        reply(
            Outbound::Continue,
            Reply::Failed(RequestFailure::TimedOut("no answer in 30 s".into())),
        ),
    )
    .unwrap();
    let out = drain(&mut d);
    assert!(changes(&out).is_empty(), "{out:?}");
    let v = d.get(&id()).unwrap();
    assert_eq!(v.state, DelegationState::Running);
    assert_eq!(v.round, 2);
    assert_eq!(d.poll_timeout(), Some((lease_end, Timer::Lease)));
    // The round did start: its end arrives.
    d.handle(t(20), round_done(2, None)).unwrap();
    drain(&mut d);
    assert_eq!(state(&d), DelegationState::Idle);
    assert_eq!(d.get(&id()).unwrap().result, Some(outcome(2)));
}
