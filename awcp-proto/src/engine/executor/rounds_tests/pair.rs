//! Both engines.

use super::*;
use crate::engine::delegator::{DelegatorEvent, Outcome};
use crate::engine::pair::Pair;
use crate::state::DelegationState;

fn kept_open(p: &mut Pair, id: &DelegationId) {
    let req = crate::engine::delegator::DelegateRequest {
        keep_open: true,
        ..Pair::request(id, Dialect::Reference)
    };
    p.delegator.delegate(p.now, req).unwrap();
}

/// What the pair's executor task reports.
fn pair_outcome() -> TaskOutcome {
    TaskOutcome {
        summary: "done".into(),
        highlights: vec!["src/main.rs".into()],
    }
}

/// The state and result the delegation ended with.
fn ended(p: &Pair, id: &DelegationId) -> Option<(DelegationState, Option<TaskOutcome>)> {
    p.delegator_events.iter().find_map(|e| match e {
        DelegatorEvent::Ended {
            id: i,
            state,
            result,
            ..
        } if i == id => Some((*state, result.clone())),
        _ => None,
    })
}

fn ended_events(p: &Pair, id: &DelegationId) -> usize {
    p.delegator_events
        .iter()
        .filter(|e| matches!(e, DelegatorEvent::Ended { id: i, .. } if i == id))
        .count()
}

#[test]
fn a_kept_open_delegation_runs_three_rounds_and_closes_on_both_sides() {
    let mut p = Pair::default_pair();
    let id = DelegationId::new("dlg_pair_rounds").unwrap();
    kept_open(&mut p, &id);
    p.drive();
    assert_eq!(p.delegation_state(&id), Some(DelegationState::Idle));
    assert_eq!(p.assignment_state(&id), Some(AssignmentState::Idle));
    assert!(p.delegator.round_settled(&id));
    for round in 2..=3 {
        assert_eq!(
            p.delegator.continue_delegation(p.now, &id, task(round)),
            Ok(round)
        );
        p.drive();
        assert_eq!(
            p.delegation_state(&id),
            Some(DelegationState::Idle),
            "{round}"
        );
        assert_eq!(
            p.assignment_state(&id),
            Some(AssignmentState::Idle),
            "{round}"
        );
        assert_eq!(p.delegator.get(&id).unwrap().round, round);
        assert!(p.delegator.round_settled(&id));
    }
    // Every round's snapshot was applied.
    let v = p.delegator.get(&id).unwrap();
    assert_eq!(v.snapshots.len(), 3);
    assert!(v
        .snapshots
        .iter()
        .all(|s| s.status == crate::engine::delegator::SnapshotStatus::Applied));
    p.delegator.close(p.now, &id).unwrap();
    p.drive();
    assert_eq!(p.delegation_state(&id), Some(DelegationState::Completed));
    assert_eq!(p.delegator.get(&id).unwrap().outcome(), Outcome::Completed);
    assert_eq!(
        ended(&p, &id),
        Some((DelegationState::Completed, Some(pair_outcome())))
    );
    p.run(100);
    assert_eq!(ended_events(&p, &id), 1);
    // Acknowledged after the CLOSE: the executor forgot it.
    assert!(p
        .executor_events
        .iter()
        .any(|e| matches!(e, ExecutorEvent::Forgotten { id: i } if *i == id)));
    assert_eq!(p.executor.live_count(), 0);
}

#[test]
fn an_idle_delegation_is_closed_by_the_delegators_idle_timeout_first() {
    let mut p = Pair::default_pair();
    let id = DelegationId::new("dlg_pair_idle").unwrap();
    kept_open(&mut p, &id);
    p.drive();
    assert_eq!(p.assignment_state(&id), Some(AssignmentState::Idle));
    let idle = crate::engine::delegator::DelegatorConfig::default().idle_timeout;
    assert!(idle < ExecutorConfig::default().idle_timeout);
    p.advance_by(idle);
    assert_eq!(p.delegation_state(&id), Some(DelegationState::Completed));
    let v = p.delegator.get(&id).unwrap();
    assert!(
        v.warnings
            .iter()
            .any(|w| w.contains("without a next round")),
        "{:?}",
        v.warnings
    );
    assert_eq!(
        ended(&p, &id),
        Some((DelegationState::Completed, Some(pair_outcome())))
    );
    p.run(100);
    assert_eq!(ended_events(&p, &id), 1);
    assert_eq!(p.executor.live_count(), 0);
    // The executor was closed by the CLOSE, not by its own (longer) idle timeout.
    assert!(p.executor_events.iter().any(|e| matches!(
        e,
        ExecutorEvent::Ended {
            id: i,
            state: AssignmentState::Completed,
            ..
        } if *i == id
    )));
}

#[test]
fn a_kept_open_seed_delegation_gets_its_rounds_result() {
    let mut p = Pair::default_pair();
    let id = DelegationId::new("dlg_pair_seed").unwrap();
    let req = crate::engine::delegator::DelegateRequest {
        keep_open: true,
        ..Pair::request(&id, Dialect::Seed)
    };
    p.delegator.delegate(p.now, req).unwrap();
    p.drive();
    // No rounds with a seed peer (its result rides on `done`): one round, completed.
    assert!(p.delegator.close(p.now, &id).is_err(), "never idle");
    let v = p.delegator.get(&id).unwrap();
    assert_eq!(v.state, DelegationState::Completed);
    assert!(
        v.snapshots
            .iter()
            .any(|s| s.status == crate::engine::delegator::SnapshotStatus::Applied),
        "the round's result was never applied: {v:?}"
    );
}

#[test]
fn a_delegation_not_kept_open_is_single_shot_with_a_multi_round_executor() {
    let mut p = Pair::default_pair();
    let id = DelegationId::new("dlg_pair_plain").unwrap();
    p.delegate(&id, Dialect::Reference);
    p.run(100);
    assert_eq!(p.delegation_state(&id), Some(DelegationState::Completed));
    assert!(!p.delegator_events.iter().any(|e| matches!(
        e,
        DelegatorEvent::StateChanged {
            to: DelegationState::Idle,
            ..
        }
    )));
}

#[test]
fn a_delegation_not_kept_open_closes_after_a_reference_rounds_executors_first_round() {
    // A delegator that negotiates nothing (as the reference does) meets an executor that
    // gives such delegators rounds: it takes round 1 and closes.
    let mut p = Pair::new(
        crate::engine::delegator::DelegatorConfig {
            features: Vec::new(),
            ..Default::default()
        },
        ExecutorConfig {
            reference_rounds: true,
            ..ExecutorConfig::default()
        },
    );
    let id = DelegationId::new("dlg_pair_dev").unwrap();
    p.delegate(&id, Dialect::Reference);
    p.run(100);
    let states: Vec<_> = p
        .delegator_events
        .iter()
        .filter_map(|e| match e {
            DelegatorEvent::StateChanged { id: i, to, .. } if *i == id => Some(*to),
            _ => None,
        })
        .collect();
    assert!(
        states.ends_with(&[
            DelegationState::Running,
            DelegationState::Idle,
            DelegationState::Completed
        ]),
        "{states:?}"
    );
    assert_eq!(
        ended(&p, &id),
        Some((DelegationState::Completed, Some(pair_outcome())))
    );
    assert!(p.executor_events.iter().any(|e| matches!(
        e,
        ExecutorEvent::Ended {
            id: i,
            state: AssignmentState::Completed,
            ..
        } if *i == id
    )));
    assert_eq!(p.executor.live_count(), 0);
}
