//! Unit tests of the leader engine: answers are written by hand, time moves by hand.

use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use crate::engine::{CallId, RequestId};
use crate::sse::frame;
use crate::wire::{CommandKind, TaskStatus};

fn at(ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(1_756_699_080_000 + ms)
}

fn drain(l: &mut Leader) -> Vec<LeaderOutput> {
    std::iter::from_fn(|| l.poll_output()).collect()
}

fn leader(dialect: Dialect) -> Leader {
    let mut l = Leader::new(LeaderConfig {
        leader_id: "L".into(),
        poll_interval: None,
        ..LeaderConfig::default()
    });
    l.add_partner(
        "p",
        PartnerEndpoint {
            url: "http://p/aip/rpc".into(),
            dialect,
        },
    );
    l
}

fn sends(out: &[LeaderOutput]) -> Vec<(CallId, HttpRequest, Value)> {
    out.iter()
        .filter_map(|o| match o {
            LeaderOutput::Send { call, request } => Some((
                *call,
                request.clone(),
                serde_json::from_slice(&request.body).unwrap(),
            )),
            _ => None,
        })
        .collect()
}

/// The events, without [`LeaderEvent::Answered`] (see `answered`).
fn events(out: &[LeaderOutput]) -> Vec<LeaderEvent> {
    all_events(out)
        .into_iter()
        .filter(|e| !matches!(e, LeaderEvent::Answered { .. }))
        .collect()
}

fn all_events(out: &[LeaderOutput]) -> Vec<LeaderEvent> {
    out.iter()
        .filter_map(|o| match o {
            LeaderOutput::Event(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

fn task_json(state: &str, ms: u64) -> Value {
    json!({"type":"task-result","id":"r","sentAt":at(ms).to_rfc3339(),"senderRole":"partner","senderId":"P",
           "taskId":"t","status":{"state":state,"stateChangedAt":at(ms).to_rfc3339()},"products":[]})
}

fn answer(
    l: &mut Leader,
    now: Timestamp,
    call: CallId,
    rpc_id: &Value,
    result: Value,
) -> Vec<LeaderOutput> {
    let body = json!({"jsonrpc":"2.0","id":rpc_id,"result":result})
        .to_string()
        .into_bytes();
    l.handle(
        now,
        LeaderInput::Response {
            call,
            status: 200,
            content_type: Some("application/json".into()),
            body,
        },
    );
    drain(l)
}

/// Answers the first request in `sent` with `result`.
fn answer_first(
    l: &mut Leader,
    now: Timestamp,
    sent: &[(CallId, HttpRequest, Value)],
    result: Value,
) -> Vec<LeaderOutput> {
    answer(l, now, sent[0].0, &sent[0].2["id"], result)
}

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

fn sse_event(id: &Value, seq: u64, data: Value) -> Vec<u8> {
    frame(
        json!({"jsonrpc":"2.0","id":id,"result":{"eventSeq":seq,"eventData":data}})
            .to_string()
            .as_bytes(),
    )
}

fn status_update(state: &str, ms: u64) -> Value {
    json!({"type":"status-update","taskId":"t","status":{"state":state,"stateChangedAt":at(ms).to_rfc3339()},"sessionId":"s"})
}

#[test]
fn a_dropped_stream_is_resumed_after_the_last_event_and_replays_are_dropped() {
    let mut l = leader(Dialect::V1);
    l.start(
        at(0),
        StartTask {
            delivery: Delivery::Stream,
            ..StartTask::new("p", "t", "s", "x")
        },
    )
    .unwrap();
    let s = sends(&drain(&mut l));
    let (call, req, v) = &s[0];
    assert_eq!(
        (req.url.as_str(), req.event_stream),
        ("http://p/aip/stream", true)
    );
    assert_eq!(v["method"], "stream");
    let mut bytes = sse_event(
        &v["id"],
        1,
        json!({"type":"task","id":"t","status":{"state":"accepted","stateChangedAt":at(1).to_rfc3339()},"sessionId":"s"}),
    );
    bytes.extend(sse_event(&v["id"], 2, status_update("working", 2)));
    // Delivered in two odd pieces.
    l.handle(
        at(3),
        LeaderInput::StreamChunk {
            call: *call,
            data: bytes[..7].to_vec(),
        },
    );
    l.handle(
        at(3),
        LeaderInput::StreamChunk {
            call: *call,
            data: bytes[7..].to_vec(),
        },
    );
    l.handle(at(4), LeaderInput::StreamEnded { call: *call });
    let ev = events(&drain(&mut l));
    assert!(
        ev.contains(&LeaderEvent::StreamDropped {
            task_id: "t".into(),
            will_retry: true
        }),
        "{ev:?}"
    );
    assert_eq!(l.task("t").unwrap().state, Some(TaskState::Working));
    l.handle_timeout(at(1004));
    let r = sends(&drain(&mut l));
    assert_eq!(r[0].2["params"]["message"]["command"], "re-stream");
    assert_eq!(
        r[0].2["params"]["message"]["commandParams"]["lastEventSeq"],
        2
    );
    // The partner replays 2 (a duplicate) and sends 3.
    let mut bytes = sse_event(&r[0].2["id"], 2, status_update("working", 2));
    bytes.extend(sse_event(
        &r[0].2["id"],
        3,
        status_update("awaiting-completion", 5),
    ));
    l.handle(
        at(1005),
        LeaderInput::StreamChunk {
            call: r[0].0,
            data: bytes,
        },
    );
    let ev = events(&drain(&mut l));
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(l.task("t").unwrap().event_seqs, &[1, 2, 3]);
    // Going backwards on one connection is a protocol violation.
    l.handle(
        at(1006),
        LeaderInput::StreamChunk {
            call: r[0].0,
            data: sse_event(&r[0].2["id"], 1, status_update("working", 6)),
        },
    );
    assert!(matches!(
        &events(&drain(&mut l))[..],
        [LeaderEvent::PeerMisbehaved { .. }]
    ));
}

#[test]
fn expired_stream_events_fall_back_to_polling() {
    let mut l = leader(Dialect::V2);
    l.start(
        at(0),
        StartTask {
            delivery: Delivery::Stream,
            ..StartTask::new("p", "t", "s", "x")
        },
    )
    .unwrap();
    let s = sends(&drain(&mut l));
    let err = frame(br#"{"jsonrpc":"2.0","id":"1","error":{"code":-32002,"message":"Cannot re-stream: buffer overflow"}}"#);
    l.handle(
        at(1),
        LeaderInput::StreamChunk {
            call: s[0].0,
            data: err,
        },
    );
    let out = drain(&mut l);
    assert!(out.contains(&LeaderOutput::Abort { call: s[0].0 }));
    assert!(events(&out)
        .iter()
        .any(|e| matches!(e, LeaderEvent::StreamLost { .. })));
    let g = sends(&out);
    assert_eq!(g[0].2["params"]["command"]["command"], "get");
    assert!(l.task("t").unwrap().stream_lost);
}

#[test]
fn notifications_need_the_right_token() {
    let mut l = leader(Dialect::V1);
    let delivery = Delivery::Notification {
        url: Some("http://l/n".into()),
        token: Some("tok".into()),
        states: vec![],
    };
    l.start(
        at(0),
        StartTask {
            delivery,
            ..StartTask::new("p", "t", "s", "x")
        },
    )
    .unwrap();
    let s = sends(&drain(&mut l));
    assert_eq!(s[0].1.url, "http://p/aip/notification/set");
    assert_eq!(
        s[0].2["params"],
        json!({"url":"http://l/n","token":"tok","taskId":"t"})
    );
    let out = answer_first(
        &mut l,
        at(1),
        &s,
        json!({"id":"n-1","url":"http://l/n","token":"tok","taskId":"t"}),
    );
    let st = sends(&out);
    assert_eq!(st[0].1.url, "http://p/aip/notification/start");
    assert_eq!(
        st[0].2["params"]["message"]["commandParams"]["notificationConfigId"],
        "n-1"
    );
    let body = json!({"type":"task","id":"t","status":{"state":"working","stateChangedAt":at(2).to_rfc3339()},"sessionId":"s"}).to_string().into_bytes();
    for (token, status) in [(None, 401), (Some("bad"), 401), (Some("tok"), 200)] {
        l.handle(
            at(3),
            LeaderInput::Notification {
                request: RequestId(7),
                token: token.map(Into::into),
                body: body.clone(),
            },
        );
        let out = drain(&mut l);
        assert!(
            out.contains(&LeaderOutput::RespondNotification {
                request: RequestId(7),
                status
            }),
            "{token:?}"
        );
    }
    l.handle(
        at(3),
        LeaderInput::Notification {
            request: RequestId(8),
            token: Some("tok".into()),
            body: b"{}".to_vec(),
        },
    );
    assert!(drain(&mut l).contains(&LeaderOutput::RespondNotification {
        request: RequestId(8),
        status: 400
    }));
    assert_eq!(l.task("t").unwrap().state, Some(TaskState::Working));
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

fn answered(out: &[LeaderOutput]) -> Vec<(Ticket, CommandKind, Result<TaskState, String>)> {
    all_events(out)
        .into_iter()
        .filter_map(|e| match e {
            LeaderEvent::Answered {
                ticket,
                command,
                outcome,
                ..
            } => Some((
                ticket,
                command,
                match outcome {
                    Ok(crate::wire::RpcResult::Task(t)) => Ok(t.status.state),
                    Ok(crate::wire::RpcResult::Message(_)) => Err("message".into()),
                    Err(e) => Err(e.to_string()),
                },
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn every_command_of_the_application_is_answered_once_under_its_ticket() {
    let mut l = leader(Dialect::V2);
    let t1 = l.start(at(0), StartTask::new("p", "t", "s", "x")).unwrap();
    let s = sends(&drain(&mut l));
    let out = answer_first(&mut l, at(1), &s, task_json("awaiting-completion", 1));
    assert_eq!(
        answered(&out),
        vec![(t1, CommandKind::Start, Ok(TaskState::AwaitingCompletion))]
    );
    // A get whose answer is older than what was seen is still answered (as received).
    let t2 = l.get(at(2), "t").unwrap();
    let g = sends(&drain(&mut l));
    let out = answer_first(&mut l, at(3), &g, task_json("working", 0));
    assert_eq!(
        answered(&out),
        vec![(t2, CommandKind::Get, Ok(TaskState::Working))]
    );
    assert_eq!(
        l.task("t").unwrap().state,
        Some(TaskState::AwaitingCompletion)
    );
    // A command that fails for good is answered with the error.
    let t3 = l.complete(at(4), "t").unwrap();
    let c = sends(&drain(&mut l));
    let body = json!({"jsonrpc":"2.0","id":c[0].2["id"],"error":{"code":-32603,"message":"boom"}});
    l.handle(
        at(5),
        LeaderInput::Response {
            call: c[0].0,
            status: 200,
            content_type: None,
            body: body.to_string().into_bytes(),
        },
    );
    let got = answered(&drain(&mut l));
    assert!(
        matches!(&got[..], [(t, CommandKind::Complete, Err(e))] if *t == t3 && e.contains("boom")),
        "{got:?}"
    );
    assert!(t1 < t2 && t2 < t3);
}

#[test]
fn a_stream_start_is_answered_by_its_first_event_and_an_abandoned_one_with_the_reason() {
    let mut l = leader(Dialect::V2);
    let start = StartTask {
        delivery: Delivery::Stream,
        ..StartTask::new("p", "t", "s", "x")
    };
    let t1 = l.start(at(0), start).unwrap();
    let s = sends(&drain(&mut l));
    l.handle(
        at(1),
        LeaderInput::StreamChunk {
            call: s[0].0,
            data: sse_event(&s[0].2["id"], 1, task_json("accepted", 1)),
        },
    );
    let out = drain(&mut l);
    assert_eq!(
        answered(&out),
        vec![(t1, CommandKind::Start, Ok(TaskState::Accepted))]
    );
    // A start the partner never answers, whose deadline passes and whose cancel fails too.
    let mut l = leader(Dialect::V2);
    let start = StartTask {
        deadline: Some(Duration::from_secs(1)),
        ..StartTask::new("p", "u", "s", "x")
    };
    let t = l.start(at(0), start).unwrap();
    drain(&mut l);
    let mut got = Vec::new();
    for ms in (0..400_000).step_by(500) {
        l.handle_timeout(at(ms));
        let out = drain(&mut l);
        for o in &out {
            if let LeaderOutput::Send { call, .. } = o {
                l.handle(
                    at(ms),
                    LeaderInput::Failed {
                        call: *call,
                        reason: "refused".into(),
                    },
                );
            }
        }
        got.extend(answered(&out));
        got.extend(answered(&drain(&mut l)));
    }
    let starts: Vec<_> = got.iter().filter(|a| a.0 == t).collect();
    assert_eq!(starts.len(), 1, "{got:?}");
    assert!(l.task("u").unwrap().ended);
}

#[test]
fn an_attached_task_is_followed_from_its_first_answer() {
    let mut l = leader(Dialect::V2);
    l.attach(
        at(0),
        AttachTask {
            partner: "p".into(),
            task_id: "t".into(),
            session_id: "s".into(),
            delivery: Delivery::Rpc,
            deadline: None,
        },
    )
    .unwrap();
    assert!(drain(&mut l).is_empty(), "attaching sends nothing");
    assert_eq!(l.task("t").unwrap().state, None);
    let tk = l.get(at(1), "t").unwrap();
    let g = sends(&drain(&mut l));
    assert_eq!(g[0].2["params"]["command"]["command"], "get");
    let out = answer_first(&mut l, at(2), &g, task_json("awaiting-input", 1));
    assert_eq!(
        answered(&out),
        vec![(tk, CommandKind::Get, Ok(TaskState::AwaitingInput))]
    );
    assert_eq!(l.task("t").unwrap().state, Some(TaskState::AwaitingInput));
    // A stream attach re-streams from the first event; notifications cannot be attached.
    l.attach(
        at(3),
        AttachTask {
            partner: "p".into(),
            task_id: "u".into(),
            session_id: "s".into(),
            delivery: Delivery::Stream,
            deadline: None,
        },
    )
    .unwrap();
    let s = sends(&drain(&mut l));
    let c = &s[0].2["params"]["message"];
    assert_eq!(
        (c["command"].as_str(), &c["commandParams"]["lastEventSeq"]),
        (Some("re-stream"), &Value::Null)
    );
    let r = l.attach(
        at(4),
        AttachTask {
            partner: "p".into(),
            task_id: "v".into(),
            session_id: "s".into(),
            delivery: Delivery::Notification {
                url: None,
                token: None,
                states: vec![],
            },
            deadline: None,
        },
    );
    assert!(matches!(r, Err(UsageError::Unsupported(_))));
    assert!(matches!(
        l.attach(
            at(4),
            AttachTask {
                partner: "p".into(),
                task_id: "t".into(),
                session_id: "s".into(),
                delivery: Delivery::Rpc,
                deadline: None
            }
        ),
        Err(UsageError::TaskExists(_))
    ));
}

/// Found by the simulation (seed 5046, with the awaiting-completion products invariant): a
/// reply sent before newer stream events (same state, same `stateChangedAt`) was taken as
/// progress and wiped the products the stream had delivered.
#[test]
fn a_reply_sent_before_newer_stream_events_changes_nothing() {
    let mut l = leader(Dialect::V2);
    let start = StartTask {
        delivery: Delivery::Stream,
        ..StartTask::new("p", "t", "s", "x")
    };
    l.start(at(0), start).unwrap();
    let s = sends(&drain(&mut l));
    let id = &s[0].2["id"];
    let ev = |seq: u64, data: Value| LeaderInput::StreamChunk {
        call: s[0].0,
        data: sse_event(id, seq, data),
    };
    let status = |state: &str, changed: u64, sent: u64, text: Option<&str>| {
        let mut st = json!({"state":state,"stateChangedAt":at(changed).to_rfc3339()});
        if let Some(t) = text {
            st["dataItems"] = json!([{"type":"text","text":t}]);
        }
        json!({"type":"task-status-update","id":format!("e{sent}"),"sentAt":at(sent).to_rfc3339(),
               "senderRole":"partner","senderId":"P","taskId":"t","status":st})
    };
    l.handle(at(1), ev(1, task_json("accepted", 1)));
    l.handle(at(2), ev(2, status("working", 2, 2, None)));
    l.handle(at(5), ev(3, status("working", 2, 5, Some("half way"))));
    let chunk = json!({"type":"product-chunk","id":"e6","sentAt":at(6).to_rfc3339(),"senderRole":"partner",
        "senderId":"P","taskId":"t","product":{"id":"answer","dataItems":[{"type":"text","text":"42"}]},
        "append":false,"lastChunk":true});
    l.handle(at(6), ev(4, chunk));
    drain(&mut l);
    l.get(at(7), "t").unwrap();
    let g = sends(&drain(&mut l));
    let mut old = task_json("working", 2);
    old["sentAt"] = json!(at(3).to_rfc3339());
    let ev = events(&answer_first(&mut l, at(8), &g, old));
    assert!(
        !ev.iter().any(|e| matches!(e, LeaderEvent::Progress { .. })),
        "{ev:?}"
    );
    let v = l.task("t").unwrap();
    assert_eq!(v.products.len(), 1, "the streamed product stays");
    assert_eq!(
        v.status.unwrap().data_items.as_ref().unwrap()[0].as_text(),
        Some("half way")
    );
}
