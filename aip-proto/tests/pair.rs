//! A leader and a partner in memory (tests/common): whole tasks over rpc, stream and
//! notification, with the faults a network brings.

mod common;

use std::time::Duration;

use aip_proto::leader::{Delivery, LeaderConfig, LeaderEvent, StartTask};
use aip_proto::partner::{PartnerConfig, PartnerEvent};
use aip_proto::{DataItem, Dialect, Product, TaskState};
use common::Pair;

fn configs() -> (LeaderConfig, PartnerConfig) {
    (
        LeaderConfig {
            leader_id: "L".into(),
            poll_interval: Some(Duration::from_millis(200)),
            fallback_poll_interval: Duration::from_secs(5),
            ..LeaderConfig::default()
        },
        PartnerConfig {
            partner_id: "P".into(),
            ..PartnerConfig::default()
        },
    )
}

/// The partner's application: starts work at once; answers a continue with products.
fn app(pair: &mut Pair, products_on_start: bool) {
    for e in pair.take_partner_events() {
        let now = pair.now;
        match e {
            PartnerEvent::TaskStarted { task_id, .. } => {
                pair.partner.start_working(now, &task_id).unwrap();
                if products_on_start {
                    pair.partner
                        .submit(now, &task_id, vec![Product::text("p-1", "result")], vec![])
                        .unwrap();
                } else {
                    pair.partner
                        .request_input(now, &task_id, vec![DataItem::text("which city?")])
                        .unwrap();
                }
            }
            PartnerEvent::TaskContinued { task_id, command } => {
                let answer = format!("plan for {}", command.items()[0].as_text().unwrap_or(""));
                pair.partner
                    .submit(now, &task_id, vec![Product::text("p-1", answer)], vec![])
                    .unwrap();
            }
            _ => {}
        }
    }
}

fn leader_state(pair: &Pair, task: &str) -> Option<TaskState> {
    pair.leader.task(task).and_then(|t| t.state)
}

fn run_app_until(pair: &mut Pair, products_on_start: bool, mut done: impl FnMut(&Pair) -> bool) {
    for _ in 0..10_000 {
        app(pair, products_on_start);
        if done(pair) {
            return;
        }
        if !pair.step() {
            break;
        }
    }
    assert!(done(pair), "not reached by {:?}", pair.now);
}

#[test]
fn rpc_start_poll_and_complete_in_both_dialects() {
    for dialect in [Dialect::V1, Dialect::V2] {
        let (l, p) = configs();
        let mut pair = Pair::new(l, p, dialect);
        pair.leader
            .start(pair.now, StartTask::new("p", "t", "s", "hi"))
            .unwrap();
        run_app_until(&mut pair, true, |p| {
            leader_state(p, "t") == Some(TaskState::AwaitingCompletion)
        });
        assert_eq!(
            pair.leader.task("t").unwrap().products[0].data_items[0].as_text(),
            Some("result")
        );
        pair.leader.complete(pair.now, "t").unwrap();
        run_app_until(&mut pair, true, |p| {
            leader_state(p, "t") == Some(TaskState::Completed)
        });
        assert_eq!(
            pair.partner.task("t").unwrap().state,
            Some(TaskState::Completed)
        );
        assert!(pair.leader_events.iter().any(|e| matches!(
            e,
            LeaderEvent::TaskEnded {
                state: TaskState::Completed,
                ..
            }
        )));
    }
}

#[test]
fn awaiting_input_then_continue_then_complete() {
    let (l, p) = configs();
    let mut pair = Pair::new(l, p, Dialect::V2);
    pair.leader
        .start(pair.now, StartTask::new("p", "t", "s", "plan a trip"))
        .unwrap();
    run_app_until(&mut pair, false, |p| {
        leader_state(p, "t") == Some(TaskState::AwaitingInput)
    });
    pair.leader
        .continue_task(pair.now, "t", vec![DataItem::text("Beijing")])
        .unwrap();
    run_app_until(&mut pair, false, |p| {
        leader_state(p, "t") == Some(TaskState::AwaitingCompletion)
    });
    assert_eq!(
        pair.leader.task("t").unwrap().products[0].data_items[0].as_text(),
        Some("plan for Beijing")
    );
    pair.leader.complete(pair.now, "t").unwrap();
    run_app_until(&mut pair, false, |p| {
        leader_state(p, "t") == Some(TaskState::Completed)
    });
}

#[test]
fn a_stream_cut_mid_task_is_resumed_without_losing_events() {
    let (l, p) = configs();
    let mut pair = Pair::new(l, p, Dialect::V1);
    let start = StartTask {
        delivery: Delivery::Stream,
        ..StartTask::new("p", "t", "s", "hi")
    };
    pair.leader.start(pair.now, start).unwrap();
    run_app_until(&mut pair, false, |p| {
        leader_state(p, "t") == Some(TaskState::AwaitingInput)
    });
    // Events while the stream is cut: two chunks after a continue.
    pair.cut_streams();
    pair.leader
        .continue_task(pair.now, "t", vec![DataItem::text("x")])
        .unwrap();
    pair.run_until(100, |p| {
        p.partner.task("t").unwrap().state == Some(TaskState::Working)
    });
    let now = pair.now;
    pair.take_partner_events();
    pair.partner
        .product_chunk(now, "t", Product::text("p", "a"), false, false)
        .unwrap();
    pair.partner
        .product_chunk(now, "t", Product::text("p", "b"), true, true)
        .unwrap();
    pair.partner.submit(now, "t", vec![], vec![]).unwrap();
    pair.run_until(1000, |p| {
        leader_state(p, "t") == Some(TaskState::AwaitingCompletion)
    });
    let view = pair.leader.task("t").unwrap();
    let last = pair.partner.task("t").unwrap().last_event_seq;
    assert_eq!(
        view.event_seqs,
        (1..=last).collect::<Vec<_>>().as_slice(),
        "no gap, no duplicate"
    );
    assert_eq!(view.products[0].data_items.len(), 2);
    assert!(pair.leader_events.iter().any(|e| matches!(
        e,
        LeaderEvent::StreamDropped {
            will_retry: true,
            ..
        }
    )));
    pair.leader.complete(pair.now, "t").unwrap();
    run_app_until(&mut pair, false, |p| {
        leader_state(p, "t") == Some(TaskState::Completed)
    });
    pair.run_until(100, |p| {
        p.partner.open_streams() == 0 && p.leader.calls_in_flight() == 0
    });
}

#[test]
fn notifications_reach_the_leader_after_the_receiver_comes_back() {
    let (mut l, p) = configs();
    l.fallback_poll_interval = Duration::from_secs(3600);
    let mut pair = Pair::new(l, p, Dialect::V2);
    pair.receiver_down = true;
    let delivery = Delivery::Notification {
        url: Some("http://leader/n".into()),
        token: None,
        states: vec![],
    };
    pair.leader
        .start(
            pair.now,
            StartTask {
                delivery,
                ..StartTask::new("p", "t", "s", "hi")
            },
        )
        .unwrap();
    run_app_until(&mut pair, true, |p| {
        p.partner
            .task("t")
            .is_some_and(|t| t.state == Some(TaskState::AwaitingCompletion))
    });
    // The start reply told the leader "accepted"; later states wait in the partner's queue.
    assert_ne!(
        leader_state(&pair, "t"),
        Some(TaskState::AwaitingCompletion)
    );
    pair.receiver_down = false;
    run_app_until(&mut pair, true, |p| {
        leader_state(p, "t") == Some(TaskState::AwaitingCompletion)
    });
    assert!(pair.notifications.iter().all(|s| *s == 200));
    pair.run_until(1000, |p| p.partner.pending_notifications() == 0);
}

#[test]
fn a_lost_request_is_retried_and_applied_once() {
    let (mut l, p) = configs();
    l.calls.attempt_timeout = Duration::from_secs(2);
    let mut pair = Pair::new(l, p, Dialect::V2);
    pair.leader
        .start(pair.now, StartTask::new("p", "t", "s", "hi"))
        .unwrap();
    run_app_until(&mut pair, false, |p| {
        leader_state(p, "t") == Some(TaskState::AwaitingInput)
    });
    pair.lose_requests = 1;
    pair.leader
        .continue_task(pair.now, "t", vec![DataItem::text("Rome")])
        .unwrap();
    run_app_until(&mut pair, false, |p| {
        leader_state(p, "t") == Some(TaskState::AwaitingCompletion)
    });
    let continued = pair
        .partner_events
        .iter()
        .filter(|e| {
            matches!(
                e,
                PartnerEvent::StateChanged {
                    to: TaskState::Working,
                    ..
                }
            )
        })
        .count();
    assert!(continued <= 1);
}

#[test]
fn the_leaders_deadline_cancels_a_task_that_never_finishes() {
    let (l, p) = configs();
    let mut pair = Pair::new(l, p, Dialect::V2);
    let start = StartTask {
        deadline: Some(Duration::from_secs(30)),
        ..StartTask::new("p", "t", "s", "hi")
    };
    pair.leader.start(pair.now, start).unwrap();
    // The partner's application never moves the task.
    pair.run_until(100_000, |p| {
        leader_state(p, "t") == Some(TaskState::Canceled)
    });
    assert_eq!(
        pair.partner.task("t").unwrap().state,
        Some(TaskState::Canceled)
    );
}
