//! Asking for rounds.

use super::*;

#[test]
fn only_a_delegation_kept_open_offers_multi_round() {
    let invite_features = |keep_open: bool, configured: Vec<Feature>| {
        let mut d = Delegator::new(DelegatorConfig {
            features: configured,
            ..DelegatorConfig::default()
        });
        d.delegate(
            t(0),
            DelegateRequest {
                keep_open,
                ..request(SnapshotMode::Auto)
            },
        )
        .unwrap();
        d.handle(
            t(1),
            DelegatorInput::ScanCompleted {
                id: id(),
                result: Ok(WorkspaceStats::default()),
            },
        )
        .unwrap();
        let out = drain(&mut d);
        match sent(&out, Outbound::Invite).as_slice() {
            [Message::Invite(inv)] => inv.features.clone(),
            other => panic!("no single INVITE: {other:?}"),
        }
    };
    let open = invite_features(true, DelegatorConfig::default().features);
    assert!(open.contains(&Feature::MultiRound), "{open:?}");
    assert!(open.contains(&Feature::DeltaSnapshots), "{open:?}");
    let plain = invite_features(false, DelegatorConfig::default().features);
    assert!(!plain.contains(&Feature::MultiRound), "{plain:?}");
    // Configured, but not asked for by this delegation: not offered.
    let plain = invite_features(false, vec![Feature::MultiRound, Feature::ArchiveUrl]);
    assert_eq!(plain, [Feature::ArchiveUrl]);
    // Asked for, configured too: offered once.
    let open = invite_features(true, vec![Feature::MultiRound]);
    assert_eq!(open, [Feature::MultiRound]);
}

#[test]
fn a_kept_open_delegation_goes_idle_continues_with_a_new_lease_and_closes() {
    let mut d = running_open(SnapshotMode::Auto);
    d.handle(t(5), round_done(1, None)).unwrap();
    let out = drain(&mut d);
    assert_eq!(
        changes(&out),
        [(DelegationState::Running, DelegationState::Idle)]
    );
    assert!(sent(&out, Outbound::Close).is_empty(), "{out:?}");
    assert!(
        !out.iter().any(|o| is_ack(o)
            || is_release(o)
            || matches!(o, DelegatorOutput::CloseEventStream { .. })),
        "the executor keeps the work directory, the stream stays open: {out:?}"
    );
    let v = d.get(&id()).unwrap();
    assert_eq!(v.result, Some(outcome(1)));
    assert_eq!(v.round, 1);
    assert!(!v.ended);
    assert!(d.round_settled(&id()));
    assert_eq!(
        d.poll_timeout(),
        Some((t(5).saturating_add(idle_timeout()), Timer::Idle))
    );

    assert_eq!(d.continue_delegation(t(10), &id(), task(2)), Ok(2));
    let out = drain(&mut d);
    let lease_end = t(10).saturating_add(Duration::from_secs(600));
    assert_eq!(
        sent(&out, Outbound::Continue),
        [&Message::Continue(crate::wire::Continue {
            delegation_id: id(),
            task: task(2),
            round: 2,
            lease: Some(ActiveLease {
                expires_at: lease_end,
                access_mode: AccessMode::Rw,
            }),
        })]
    );
    assert_eq!(
        changes(&out),
        [(DelegationState::Idle, DelegationState::Running)]
    );
    let v = d.get(&id()).unwrap();
    assert_eq!(v.state, DelegationState::Running);
    assert_eq!(v.round, 2);
    assert_eq!(v.expires_at, Some(lease_end));
    assert!(!d.round_settled(&id()));
    assert_eq!(
        d.poll_timeout(),
        Some((lease_end, Timer::Lease)),
        "the idle timer is off, the round's lease on"
    );
    d.handle(t(11), reply(Outbound::Continue, Reply::Ok))
        .unwrap();
    assert!(drain(&mut d).is_empty());
    assert_eq!(state(&d), DelegationState::Running);

    d.handle(t(20), round_done(2, None)).unwrap();
    let out = drain(&mut d);
    assert_eq!(
        changes(&out),
        [(DelegationState::Running, DelegationState::Idle)]
    );
    let v = d.get(&id()).unwrap();
    assert_eq!(v.result, Some(outcome(2)));
    assert_eq!(v.round, 2);

    d.close(t(30), &id()).unwrap();
    let out = drain(&mut d);
    assert_eq!(
        changes(&out),
        [(DelegationState::Idle, DelegationState::Completed)]
    );
    assert_eq!(
        sent(&out, Outbound::Close),
        [&Message::Close(crate::wire::Close {
            delegation_id: id()
        })]
    );
    assert!(!out.iter().any(is_ack));
    d.handle(t(31), reply(Outbound::Close, Reply::Ok)).unwrap();
    let out = drain(&mut d);
    assert_eq!(count(&out, is_ack), 1);
    assert_eq!(count(&out, is_release), 1);
    d.handle(t(32), released()).unwrap();
    let out = drain(&mut d);
    assert_eq!(
        events(&out)
            .into_iter()
            .filter(|e| matches!(e, DelegatorEvent::Ended { .. }))
            .collect::<Vec<_>>(),
        [&DelegatorEvent::Ended {
            id: id(),
            state: DelegationState::Completed,
            result: Some(outcome(2)),
            error: None,
        }]
    );
    assert!(d.close(t(33), &id()).is_err(), "closed once");
}

#[test]
fn an_idle_delegation_never_expires_by_the_lease_of_its_last_round() {
    let config = DelegatorConfig {
        idle_timeout: Duration::from_secs(3 * 3600),
        ..DelegatorConfig::default()
    };
    let mut d = running_open_with(config, SnapshotMode::Auto, accept_rounds());
    let lease_end = d.get(&id()).unwrap().expires_at.unwrap();
    d.handle(t(5), round_done(1, None)).unwrap();
    drain(&mut d);
    d.handle_timeout(lease_end);
    d.handle_timeout(lease_end.saturating_add(Duration::from_secs(3600)));
    assert!(drain(&mut d).is_empty());
    assert_eq!(state(&d), DelegationState::Idle);
}

#[test]
fn a_continue_lease_is_capped_at_the_executors_longest_lease() {
    let capped = Accept {
        constraints: Some(ExecutorConstraints {
            accepted_access_mode: None,
            max_ttl_seconds: Some(120),
            sandbox_profile: None,
        }),
        ..accept_rounds()
    };
    let mut d = running_open_with(DelegatorConfig::default(), SnapshotMode::Auto, capped);
    d.handle(t(5), round_done(1, None)).unwrap();
    drain(&mut d);
    assert_eq!(d.continue_delegation(t(1000), &id(), task(2)), Ok(2));
    let out = drain(&mut d);
    match sent(&out, Outbound::Continue).as_slice() {
        [Message::Continue(c)] => assert_eq!(
            c.lease.map(|l| l.expires_at),
            Some(t(1000).saturating_add(Duration::from_secs(120)))
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_round_done_before_any_status_ends_a_round_that_ran() {
    let mut d = started_open_with(
        DelegatorConfig::default(),
        SnapshotMode::Auto,
        accept_rounds(),
    );
    d.handle(t(5), round_done(1, None)).unwrap();
    let out = drain(&mut d);
    assert_eq!(
        changes(&out),
        [
            (DelegationState::Started, DelegationState::Running),
            (DelegationState::Running, DelegationState::Idle),
        ]
    );
    assert_eq!(d.get(&id()).unwrap().result, Some(outcome(1)));
}

#[test]
fn a_round_naming_a_snapshot_that_never_arrived_is_noted() {
    let mut d = running_open(SnapshotMode::Auto);
    d.handle(t(5), round_done(1, Some("snap_lost"))).unwrap();
    drain(&mut d);
    let v = d.get(&id()).unwrap();
    assert_eq!(v.state, DelegationState::Idle);
    assert!(
        v.warnings
            .iter()
            .any(|w| w.contains("snap_lost") && w.contains("never arrived")),
        "{:?}",
        v.warnings
    );
}
