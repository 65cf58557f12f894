//! Multi-round delegations on the delegator side (WIRE.md §17), driven by hand: `round_done`
//! → `idle`, CONTINUE / CLOSE, the idle timeout, refusals, the executor closing by itself,
//! snapshots of a round applied between rounds, and a restart between rounds (helpers in
//! `tests.rs`).

// Tests pick the outputs they look at out of the rest.
#![allow(clippy::wildcard_enum_match_arm)]

use super::tests::*;
use super::*;
use crate::wire::{RoundDoneEvent, StatusEvent, TaskStatus};

/// The idle timeout of [`DelegatorConfig::default`].
fn idle_timeout() -> Duration {
    DelegatorConfig::default().idle_timeout
}

/// A `round_done` for round `round` (summary `round <n>`), naming `snapshot` if given.
fn round_done(round: u64, snapshot: Option<&str>) -> DelegatorInput {
    event(TaskEventKind::RoundDone(RoundDoneEvent {
        round,
        summary: format!("round {round}"),
        highlights: vec![format!("file{round}.txt")],
        snapshot_ids: snapshot.map(sid).into_iter().collect(),
        recommended_snapshot_id: snapshot.map(sid),
    }))
}

/// A `done` event with this summary and no snapshot.
fn done_saying(summary: &str) -> DelegatorInput {
    event(TaskEventKind::Done(DoneEvent {
        summary: summary.into(),
        highlights: vec![],
        snapshot_ids: vec![],
        recommended_snapshot_id: None,
        result_base64: None,
        result_local_file: None,
    }))
}

fn status() -> DelegatorInput {
    event(TaskEventKind::Status(StatusEvent {
        status: TaskStatus::Running,
        message: Some("working".into()),
        progress: None,
    }))
}

fn reply(to: Outbound, reply: Reply) -> DelegatorInput {
    DelegatorInput::Reply {
        id: id(),
        to,
        reply,
    }
}

fn released() -> DelegatorInput {
    DelegatorInput::TransportReleased {
        id: id(),
        warnings: vec![],
    }
}

/// The outcome a `round_done` of [`round_done`] reports.
fn outcome(round: u64) -> TaskOutcome {
    TaskOutcome {
        summary: format!("round {round}"),
        highlights: vec![format!("file{round}.txt")],
    }
}

fn task(n: u64) -> TaskSpec {
    TaskSpec {
        description: format!("r{n}"),
        prompt: format!("round {n} prompt"),
    }
}

/// The messages sent to the executor as `to`, in order.
fn sent(out: &[DelegatorOutput], to: Outbound) -> Vec<&Message> {
    out.iter()
        .filter_map(|o| match o {
            DelegatorOutput::SendMessage { to: t, message, .. } if *t == to => Some(&**message),
            _ => None,
        })
        .collect()
}

fn count(out: &[DelegatorOutput], f: impl Fn(&DelegatorOutput) -> bool) -> usize {
    out.iter().filter(|o| f(o)).count()
}

fn is_release(o: &DelegatorOutput) -> bool {
    matches!(o, DelegatorOutput::ReleaseTransport { .. })
}

fn is_ended(o: &DelegatorOutput) -> bool {
    matches!(o, DelegatorOutput::Event(DelegatorEvent::Ended { .. }))
}

/// The state changes among `out`, as `(from, to)`.
fn changes(out: &[DelegatorOutput]) -> Vec<(DelegationState, DelegationState)> {
    events(out)
        .into_iter()
        .filter_map(|e| match e {
            DelegatorEvent::StateChanged { from, to, .. } => Some((*from, *to)),
            _ => None,
        })
        .collect()
}

fn state(d: &Delegator) -> DelegationState {
    d.get(&id()).unwrap().state
}

/// The ACCEPT of an executor that agreed to rounds.
fn accept_rounds() -> Accept {
    Accept {
        features: vec![Feature::MultiRound],
        ..accept()
    }
}

/// A delegation that asked for rounds (`keep_open`), in `started`, on a delegator with
/// `config`, accepted with `acc`; outputs drained.
fn started_open_with(config: DelegatorConfig, mode: SnapshotMode, acc: Accept) -> Delegator {
    let mut d = Delegator::new(config);
    d.delegate(
        t(0),
        DelegateRequest {
            keep_open: true,
            ..request(mode)
        },
    )
    .unwrap();
    let steps = [
        DelegatorInput::ScanCompleted {
            id: id(),
            result: Ok(WorkspaceStats::default()),
        },
        reply(Outbound::Invite, Reply::Accept(Box::new(acc))),
        DelegatorInput::TransportPrepared {
            id: id(),
            result: Ok(Box::new(archive_handle())),
            archive_token: None,
        },
        DelegatorInput::EventStreamOpened { id: id() },
    ];
    for s in steps {
        d.handle(t(1), s).unwrap();
    }
    drain(&mut d);
    assert_eq!(state(&d), DelegationState::Started);
    d
}

/// [`started_open_with`], then the executor's first `status`: `running`.
fn running_open_with(config: DelegatorConfig, mode: SnapshotMode, acc: Accept) -> Delegator {
    let mut d = started_open_with(config, mode, acc);
    d.handle(t(1), status()).unwrap();
    drain(&mut d);
    assert_eq!(state(&d), DelegationState::Running);
    d
}

/// A running delegation that asked for rounds, default configuration.
fn running_open(mode: SnapshotMode) -> Delegator {
    running_open_with(DelegatorConfig::default(), mode, accept_rounds())
}

/// [`running_open`] whose first round ended at `t(5)`: `idle`.
fn idle_open(mode: SnapshotMode) -> Delegator {
    let mut d = running_open(mode);
    d.handle(t(5), round_done(1, None)).unwrap();
    drain(&mut d);
    assert_eq!(state(&d), DelegationState::Idle);
    d
}

// ---------------------------------------------------------------------------------------------
// Rounds a delegation did not ask for (a reference `dev` executor)

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

// ---------------------------------------------------------------------------------------------
// Asking for rounds

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

// ---------------------------------------------------------------------------------------------
// Refusals

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

// ---------------------------------------------------------------------------------------------
// The executor ends the session while idle

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

// ---------------------------------------------------------------------------------------------
// Snapshots of a round

#[test]
fn a_rounds_snapshot_stored_while_idle_is_applied_as_a_new_base_and_the_round_then_settles() {
    let mut d = running_open(SnapshotMode::Auto);
    d.handle(t(2), snapshot("snap_a")).unwrap();
    d.handle(t(3), round_done(1, Some("snap_a"))).unwrap();
    let out = drain(&mut d);
    assert!(out
        .iter()
        .any(|o| matches!(o, DelegatorOutput::StoreSnapshot { .. })));
    assert_eq!(state(&d), DelegationState::Idle);
    assert!(!d.round_settled(&id()), "its snapshot is being stored");
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
    assert_eq!(applies, [(sid("snap_a"), true)]);
    assert!(!d.round_settled(&id()), "its snapshot is being applied");
    d.handle(t(5), applied("snap_a", Ok(()))).unwrap();
    let out = drain(&mut d);
    assert!(d.round_settled(&id()));
    assert_eq!(status_of(&d, "snap_a").status, SnapshotStatus::Applied);
    // Applying does not end the session (unlike the reference's `ps_dev`): still idle, the
    // executor not acknowledged, nothing released.
    assert_eq!(state(&d), DelegationState::Idle);
    assert!(
        !out.iter().any(|o| is_ack(o) || is_release(o)) && sent(&out, Outbound::Close).is_empty(),
        "{out:?}"
    );
    // The next round's snapshot is applied in its turn.
    assert_eq!(d.continue_delegation(t(10), &id(), task(2)), Ok(2));
    d.handle(t(11), snapshot("snap_b")).unwrap();
    d.handle(t(12), round_done(2, Some("snap_b"))).unwrap();
    d.handle(t(13), stored("snap_b", Ok(()))).unwrap();
    assert!(!d.round_settled(&id()));
    d.handle(t(14), applied("snap_b", Ok(()))).unwrap();
    drain(&mut d);
    assert!(d.round_settled(&id()));
    assert_eq!(status_of(&d, "snap_b").status, SnapshotStatus::Applied);
}

#[test]
fn a_staged_rounds_snapshot_settles_once_stored_and_applies_as_a_new_base_on_request() {
    let mut d = running_open(SnapshotMode::Staged);
    d.handle(t(2), snapshot("snap_a")).unwrap();
    d.handle(t(3), round_done(1, Some("snap_a"))).unwrap();
    assert!(!d.round_settled(&id()));
    d.handle(t(4), stored("snap_a", Ok(()))).unwrap();
    let out = drain(&mut d);
    assert!(
        !out.iter().any(is_apply),
        "staged: kept for the application"
    );
    assert!(d.round_settled(&id()));
    assert_eq!(status_of(&d, "snap_a").status, SnapshotStatus::Pending);
    d.apply_snapshot(t(5), &id(), &sid("snap_a")).unwrap();
    let out = drain(&mut d);
    assert!(out.iter().any(|o| matches!(
        o,
        DelegatorOutput::ApplySnapshot {
            rebaseline: true,
            ..
        }
    )));
    assert!(!d.round_settled(&id()));
}

#[test]
fn a_round_is_not_settled_while_its_delegation_runs_or_after_it_ended() {
    let d = running_open(SnapshotMode::Auto);
    assert!(!d.round_settled(&id()));
    let mut d = idle_open(SnapshotMode::Auto);
    assert!(d.round_settled(&id()));
    d.close(t(10), &id()).unwrap();
    assert!(!d.round_settled(&id()));
    assert!(!d.round_settled(&DelegationId::new("dlg_nobody").unwrap()));
}

// ---------------------------------------------------------------------------------------------
// A restart between rounds

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

// ---------------------------------------------------------------------------------------------
// The event stream breaks between rounds

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
