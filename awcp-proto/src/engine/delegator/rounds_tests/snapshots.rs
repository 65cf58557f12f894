//! Snapshots of a round.

use super::*;

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
