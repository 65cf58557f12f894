//! The application's tickets and attached tasks.

use std::time::Duration;

use super::*;

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

/// Issue 48.7: `aip continue` without `--session` sent a made-up session. An attached task
/// with an unknown (empty) session sends none until an answer names it, then uses that one.
#[test]
fn an_attached_task_without_a_session_takes_the_partners() {
    let mut l = leader(Dialect::V2);
    l.attach(
        at(0),
        AttachTask {
            partner: "p".into(),
            task_id: "t".into(),
            session_id: String::new(),
            delivery: Delivery::Rpc,
            deadline: None,
        },
    )
    .unwrap();
    l.get(at(1), "t").unwrap();
    let g = sends(&drain(&mut l));
    let cmd = &g[0].2["params"]["command"];
    assert_eq!(cmd["command"], "get");
    assert!(cmd.get("sessionId").is_none(), "{cmd}");
    let mut task = task_json("awaiting-input", 1);
    task["sessionId"] = json!("the-partners-session");
    answer_first(&mut l, at(2), &g, task);
    l.continue_task(at(3), "t", vec![DataItem::text("more")])
        .unwrap();
    let c = sends(&drain(&mut l));
    assert_eq!(c[0].2["params"]["command"]["command"], "continue");
    assert_eq!(
        c[0].2["params"]["command"]["sessionId"],
        "the-partners-session"
    );
}

/// Issue 48.7: a stream start to a partner without a stream endpoint (404) was reported as
/// "the task was abandoned". The start never reached the partner, so the leader starts the
/// task over rpc, says the stream is lost, and follows by polling.
#[test]
fn a_stream_start_without_a_stream_endpoint_starts_over_rpc() {
    for status in [404, 405, 501] {
        let mut l = leader(Dialect::V2);
        let start = StartTask {
            delivery: Delivery::Stream,
            ..StartTask::new("p", "t", "s", "x")
        };
        let t1 = l.start(at(0), start).unwrap();
        let s = sends(&drain(&mut l));
        assert!(s[0].1.url.ends_with("/stream"), "{}", s[0].1.url);
        l.handle(
            at(1),
            LeaderInput::Response {
                call: s[0].0,
                status,
                content_type: Some("text/html".into()),
                body: b"<!DOCTYPE html>\n<html><body>Not Found</body></html>\n".to_vec(),
            },
        );
        let out = drain(&mut l);
        assert!(
            events(&out)
                .iter()
                .any(|e| matches!(e, LeaderEvent::StreamLost { task_id, .. } if task_id == "t")),
            "{out:?}"
        );
        // The page is described in one line, not echoed (as AWCP's PROTOCOL_ERROR does).
        let lost = events(&out).into_iter().find_map(|e| match e {
            LeaderEvent::StreamLost { error, .. } => Some(error.to_string()),
            _ => None,
        });
        let lost = lost.unwrap_or_default();
        assert!(
            lost.contains("not JSON") && !lost.contains("</html>"),
            "{lost}"
        );
        assert!(!events(&out)
            .iter()
            .any(|e| matches!(e, LeaderEvent::TaskAbandoned { .. })));
        let r = sends(&out);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].1.url.ends_with("/rpc"), "{}", r[0].1.url);
        assert_eq!(r[0].2["params"]["command"]["command"], "start");
        let out = answer_first(&mut l, at(2), &r, task_json("accepted", 2));
        assert_eq!(
            answered(&out),
            vec![(t1, CommandKind::Start, Ok(TaskState::Accepted))]
        );
    }
}
