//! Following a task by stream (resumption, de-duplication, fallback to polling) and by
//! notification.

use super::*;
use crate::engine::RequestId;

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

/// Found by the simulation (seed 72681): in v01.00 nothing carries `sentAt`, so a `continue`
/// reply written before a product chunk the stream had already delivered (same state, same
/// `stateChangedAt`) put the older product back, and the task reached `awaiting-completion`
/// with less than the partner had. While the stream is live, an unordered reply with the same
/// status leaves the products to the stream.
#[test]
fn an_unordered_reply_does_not_undo_a_streamed_product_chunk() {
    let mut l = leader(Dialect::V1);
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
    let product = |text: &str| json!({"id":"answer","dataItems":[{"type":"text","text":text}]});
    let task = |text: &str| {
        json!({"type":"task","id":"t","senderId":"P","status":{"state":"working",
               "stateChangedAt":at(2).to_rfc3339()},"products":[product(text)],"sessionId":"s"})
    };
    l.handle(at(1), ev(1, status_update("accepted", 1)));
    l.handle(at(2), ev(2, task("short")));
    let chunk = json!({"type":"product-chunk","taskId":"t","product":product("the longer one"),
        "append":false,"lastChunk":true,"sessionId":"s"});
    l.handle(at(3), ev(3, chunk));
    drain(&mut l);
    assert_eq!(
        l.task("t").unwrap().products[0].data_items[0].as_text(),
        Some("the longer one")
    );
    l.get(at(4), "t").unwrap();
    let g = sends(&drain(&mut l));
    answer_first(&mut l, at(5), &g, task("short"));
    let v = l.task("t").unwrap();
    assert_eq!(
        v.products[0].data_items[0].as_text(),
        Some("the longer one"),
        "the reply from before the chunk does not put the old product back"
    );
    l.handle(at(6), ev(4, status_update("awaiting-completion", 6)));
    drain(&mut l);
    let v = l.task("t").unwrap();
    assert_eq!(v.state, Some(TaskState::AwaitingCompletion));
    assert_eq!(
        v.products[0].data_items[0].as_text(),
        Some("the longer one")
    );
}
