//! Commands, their attempts and answers, the deadline and polling.

use std::time::Duration;

use super::*;
use crate::wire::TaskStatus;

#[test]
fn a_start_is_sent_in_the_partners_dialect_to_its_rpc_url() {
    for (d, key, ty) in [
        (Dialect::V2, "command", "task-command"),
        (Dialect::V1, "message", "message"),
    ] {
        let mut l = leader(d);
        l.start(at(0), StartTask::new("p", "t", "s", "hello"))
            .unwrap();
        let s = sends(&drain(&mut l));
        assert_eq!(s.len(), 1);
        let (_, req, v) = &s[0];
        assert_eq!(req.url, "http://p/aip/rpc");
        assert!(!req.event_stream);
        assert_eq!(v["method"], "rpc");
        assert_eq!(v["params"][key]["type"], ty);
        assert_eq!(v["params"][key]["command"], "start");
        assert_eq!(v["params"][key]["senderId"], "L");
        assert_eq!(v["params"][key]["taskId"], "t");
    }
    let mut l = leader(Dialect::V2);
    assert_eq!(
        l.start(at(0), StartTask::new("nope", "t", "s", "x")),
        Err(UsageError::UnknownPartner("nope".into()))
    );
    l.start(at(0), StartTask::new("p", "t", "s", "x")).unwrap();
    assert_eq!(
        l.start(at(0), StartTask::new("p", "t", "s", "x")),
        Err(UsageError::TaskExists("t".into()))
    );
}

#[test]
fn a_lost_attempt_is_resent_with_the_same_message_id_then_given_up() {
    let mut l = leader(Dialect::V2);
    l.start(at(0), StartTask::new("p", "t", "s", "hello"))
        .unwrap();
    let first = sends(&drain(&mut l));
    l.handle(
        at(10),
        LeaderInput::Failed {
            call: first[0].0,
            reason: "refused".into(),
        },
    );
    assert!(sends(&drain(&mut l)).is_empty());
    l.handle_timeout(at(1010));
    let second = sends(&drain(&mut l));
    assert_eq!(
        second[0].2["params"]["command"]["id"],
        first[0].2["params"]["command"]["id"]
    );
    assert_ne!(second[0].0, first[0].0);
    // The second attempt times out (an Abort for it), the third fails: CallFailed.
    l.handle_timeout(at(1010 + 30_000));
    let out = drain(&mut l);
    assert!(out.contains(&LeaderOutput::Abort { call: second[0].0 }));
    l.handle_timeout(at(1010 + 30_000 + 2000));
    let third = sends(&drain(&mut l));
    l.handle(
        at(40_000),
        LeaderInput::Failed {
            call: third[0].0,
            reason: "reset".into(),
        },
    );
    let ev = events(&drain(&mut l));
    assert!(
        matches!(&ev[..], [LeaderEvent::CallFailed { error: CallError::Transport(r), command: Some(CommandKind::Start), .. }] if r == "reset"),
        "{ev:?}"
    );
}

#[test]
fn answers_move_the_view_forward_only() {
    let mut l = leader(Dialect::V2);
    l.start(at(0), StartTask::new("p", "t", "s", "hello"))
        .unwrap();
    let s = sends(&drain(&mut l));
    let ev = events(&answer_first(&mut l, at(5), &s, task_json("working", 3)));
    assert!(
        matches!(&ev[0], LeaderEvent::StateChanged { from: None, status, .. } if status.state == TaskState::Working)
    );
    // An older answer (a get that crossed a newer reply) is ignored.
    l.get(at(6), "t").unwrap();
    let g = sends(&drain(&mut l));
    assert!(events(&answer_first(&mut l, at(7), &g, task_json("accepted", 1))).is_empty());
    // An impossible one is reported and ignored.
    l.get(at(8), "t").unwrap();
    let g = sends(&drain(&mut l));
    let ev = events(&answer_first(&mut l, at(9), &g, task_json("accepted", 9)));
    assert!(
        matches!(&ev[..], [LeaderEvent::PeerMisbehaved { .. }]),
        "{ev:?}"
    );
    assert_eq!(l.task("t").unwrap().state, Some(TaskState::Working));
    // A terminal one ends the task; commands are refused afterwards.
    l.complete(at(10), "t").unwrap();
    let c = sends(&drain(&mut l));
    let ev = events(&answer_first(
        &mut l,
        at(11),
        &c,
        task_json("completed", 10),
    ));
    assert!(ev.iter().any(|e| matches!(
        e,
        LeaderEvent::TaskEnded {
            state: TaskState::Completed,
            ..
        }
    )));
    assert!(l.cancel(at(12), "t").is_err());
}

#[test]
fn an_answer_with_another_id_is_refused() {
    let mut l = leader(Dialect::V2);
    l.start(at(0), StartTask::new("p", "t", "s", "x")).unwrap();
    let s = sends(&drain(&mut l));
    let ev = events(&answer(
        &mut l,
        at(1),
        s[0].0,
        &json!("other"),
        task_json("working", 1),
    ));
    assert!(
        matches!(
            &ev[..],
            [LeaderEvent::CallFailed {
                error: CallError::Mismatch(_),
                ..
            }]
        ),
        "{ev:?}"
    );
}

#[test]
fn a_partner_that_does_not_know_the_task_ends_it_as_abandoned() {
    let mut l = leader(Dialect::V2);
    l.start(at(0), StartTask::new("p", "t", "s", "x")).unwrap();
    let s = sends(&drain(&mut l));
    answer_first(&mut l, at(1), &s, task_json("working", 1));
    l.get(at(2), "t").unwrap();
    let g = sends(&drain(&mut l));
    let body = json!({"jsonrpc":"2.0","id":null,"result":null,"error":{"code":-32001,"message":"Task not found"}});
    l.handle(
        at(3),
        LeaderInput::Response {
            call: g[0].0,
            status: 200,
            content_type: None,
            body: body.to_string().into_bytes(),
        },
    );
    let ev = events(&drain(&mut l));
    assert!(
        ev.iter().any(|e| matches!(
            e,
            LeaderEvent::TaskAbandoned {
                reason: AbandonReason::UnknownAtPartner,
                ..
            }
        )),
        "{ev:?}"
    );
    assert!(l.task("t").unwrap().ended);
}

#[test]
fn the_deadline_cancels_and_abandons_if_the_cancel_fails() {
    let mut l = Leader::new(LeaderConfig {
        calls: RetryPolicy {
            attempts: 1,
            ..LeaderConfig::default().calls
        },
        poll_interval: None,
        ..LeaderConfig::default()
    });
    l.add_partner(
        "p",
        PartnerEndpoint {
            url: "http://p/rpc".into(),
            dialect: Dialect::V2,
        },
    );
    l.start(
        at(0),
        StartTask {
            deadline: Some(Duration::from_secs(5)),
            ..StartTask::new("p", "t", "s", "x")
        },
    )
    .unwrap();
    let s = sends(&drain(&mut l));
    answer_first(&mut l, at(1), &s, task_json("working", 1));
    assert_eq!(
        l.next_timer().map(|(t, r)| (t, r.reason())),
        Some((at(5000), "task deadline"))
    );
    l.handle_timeout(at(5000));
    let c = sends(&drain(&mut l));
    assert_eq!(c[0].2["params"]["command"]["command"], "cancel");
    l.handle(
        at(5001),
        LeaderInput::Failed {
            call: c[0].0,
            reason: "down".into(),
        },
    );
    let ev = events(&drain(&mut l));
    assert!(
        ev.iter().any(|e| matches!(
            e,
            LeaderEvent::TaskAbandoned {
                reason: AbandonReason::Deadline,
                ..
            }
        )),
        "{ev:?}"
    );
}

#[test]
fn rpc_tasks_are_polled_until_they_end() {
    let mut l = Leader::new(LeaderConfig {
        poll_interval: Some(Duration::from_secs(2)),
        ..LeaderConfig::default()
    });
    l.add_partner(
        "p",
        PartnerEndpoint {
            url: "http://p/rpc".into(),
            dialect: Dialect::V2,
        },
    );
    l.start(at(0), StartTask::new("p", "t", "s", "x")).unwrap();
    let s = sends(&drain(&mut l));
    answer_first(&mut l, at(1), &s, task_json("working", 1));
    l.handle_timeout(at(2000));
    let g = sends(&drain(&mut l));
    let get = &g[0].2["params"]["command"];
    assert_eq!(get["command"], "get");
    assert_eq!(
        get["commandParams"]["lastStateChangedAt"],
        at(1).to_rfc3339()
    );
    answer_first(&mut l, at(2001), &g, task_json("completed", 1500));
    assert!(l.task("t").unwrap().ended);
    assert_eq!(
        l.next_timer().map(|(_, r)| r.reason()),
        Some("ended task retention")
    );
}

#[test]
fn a_status_with_new_items_and_the_same_state_is_progress() {
    let mut l = leader(Dialect::V2);
    l.start(at(0), StartTask::new("p", "t", "s", "x")).unwrap();
    let s = sends(&drain(&mut l));
    answer_first(&mut l, at(1), &s, task_json("working", 1));
    let mut t = task_json("working", 1);
    t["status"]["dataItems"] = json!([{"type":"text","text":"50%"}]);
    l.get(at(2), "t").unwrap();
    let g = sends(&drain(&mut l));
    let ev = events(&answer_first(&mut l, at(3), &g, t));
    assert!(
        matches!(
            &ev[0],
            LeaderEvent::Progress {
                status: TaskStatus {
                    data_items: Some(_),
                    ..
                },
                ..
            }
        ),
        "{ev:?}"
    );
}
