//! Unit tests of the partner engine: requests in, outputs out, time moved by hand.

use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use crate::sse::SseDecoder;
use crate::wire::Dialect;
use crate::wire::Product;

fn at(ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(1_756_699_080_000 + ms)
}

fn drain(p: &mut Partner) -> Vec<PartnerOutput> {
    std::iter::from_fn(|| p.poll_output()).collect()
}

fn cmd(dialect: Dialect, command: &str, task: Option<&str>, params: Value) -> Value {
    let (ty, _) = match dialect {
        Dialect::V1 => ("message", ()),
        Dialect::V2 => ("task-command", ()),
    };
    let mut c = json!({
        "type": ty, "id": format!("m-{command}-{}", params.to_string().len()),
        "sentAt": "2025-09-01T11:58:00+08:00", "senderRole": "leader", "senderId": "L",
        "command": command, "dataItems": [{"type": "text", "text": "hi"}], "sessionId": "s-1",
    });
    if let Some(t) = task {
        c["taskId"] = json!(t);
    }
    if !params.is_null() {
        c["commandParams"] = params;
    }
    c
}

fn request(method: &str, id: u64, dialect: Dialect, c: Value) -> Vec<u8> {
    let key = if dialect == Dialect::V2 && method == "rpc" {
        "command"
    } else {
        "message"
    };
    json!({"jsonrpc": "2.0", "method": method, "id": id, "params": {key: c}})
        .to_string()
        .into_bytes()
}

fn send(p: &mut Partner, now: Timestamp, r: u64, body: Vec<u8>) -> Vec<PartnerOutput> {
    p.handle(
        now,
        PartnerInput::Request {
            request: RequestId(r),
            body,
        },
    );
    drain(p)
}

fn rpc(p: &mut Partner, now: Timestamp, r: u64, command: &str, task: &str) -> Value {
    let out = send(
        p,
        now,
        r,
        request(
            "rpc",
            r,
            Dialect::V2,
            cmd(Dialect::V2, command, Some(task), Value::Null),
        ),
    );
    reply(&out, r)
}

fn reply(out: &[PartnerOutput], r: u64) -> Value {
    out.iter()
        .find_map(|o| match o {
            PartnerOutput::Respond { request, response } if *request == RequestId(r) => {
                assert_eq!(response.status, 200);
                Some(serde_json::from_slice(&response.body).unwrap())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no reply to {r} in {out:?}"))
}

fn state_of(v: &Value) -> &str {
    v["result"]["status"]["state"]
        .as_str()
        .unwrap_or_else(|| panic!("no state in {v}"))
}

fn changes(out: &[PartnerOutput]) -> Vec<(Option<TaskState>, TaskState)> {
    out.iter()
        .filter_map(|o| match o {
            PartnerOutput::Event(PartnerEvent::StateChanged { from, to, .. }) => Some((*from, *to)),
            _ => None,
        })
        .collect()
}

fn partner() -> Partner {
    Partner::new(PartnerConfig {
        partner_id: "P".into(),
        keepalive: None,
        ..PartnerConfig::default()
    })
}

#[test]
fn a_v2_start_is_accepted_answered_and_handed_to_the_application() {
    let mut p = partner();
    let out = send(
        &mut p,
        at(0),
        1,
        request(
            "rpc",
            1,
            Dialect::V2,
            cmd(Dialect::V2, "start", Some("t-1"), Value::Null),
        ),
    );
    assert_eq!(changes(&out), vec![(None, TaskState::Accepted)]);
    assert!(out.iter().any(|o| matches!(o, PartnerOutput::Event(PartnerEvent::TaskStarted { task_id, .. }) if task_id == "t-1")));
    let v = reply(&out, 1);
    assert_eq!(v["id"], json!(1));
    assert_eq!(v["result"]["type"], "task-result");
    assert_eq!(v["result"]["senderId"], "P");
    assert_eq!(v["result"]["taskId"], "t-1");
    assert_eq!(v["result"]["sessionId"], "s-1");
    assert_eq!(state_of(&v), "accepted");
    assert!(v.get("error").is_none());
}

#[test]
fn a_reply_shows_the_task_as_it_is_when_polled() {
    let mut p = partner();
    p.handle(
        at(0),
        PartnerInput::Request {
            request: RequestId(1),
            body: request(
                "rpc",
                1,
                Dialect::V1,
                cmd(Dialect::V1, "start", Some("t-1"), Value::Null),
            ),
        },
    );
    p.start_working(at(1), "t-1").unwrap();
    p.submit(at(2), "t-1", vec![Product::text("p-1", "done")], vec![])
        .unwrap();
    let v = reply(&drain(&mut p), 1);
    assert_eq!(v["result"]["type"], "task");
    assert_eq!(v["result"]["id"], "t-1");
    assert_eq!(state_of(&v), "awaiting-completion");
    assert_eq!(v["result"]["products"][0]["dataItems"][0]["text"], "done");
}

#[test]
fn commands_in_the_wrong_state_answer_the_current_task() {
    let mut p = partner();
    rpc(&mut p, at(0), 1, "start", "t-1");
    p.start_working(at(1), "t-1").unwrap();
    drain(&mut p);
    for (r, c) in [(2, "complete"), (3, "continue"), (4, "start")] {
        let out = send(
            &mut p,
            at(2),
            r,
            request(
                "rpc",
                r,
                Dialect::V2,
                cmd(Dialect::V2, c, Some("t-1"), Value::Null),
            ),
        );
        assert_eq!(changes(&out), vec![], "{c}");
        assert_eq!(state_of(&reply(&out, r)), "working", "{c}");
    }
    assert_eq!(
        state_of(&rpc(&mut p, at(3), 5, "cancel", "t-1")),
        "canceled"
    );
    // cancel on a terminal task returns it unchanged, not -32002
    assert_eq!(
        state_of(&rpc(&mut p, at(4), 6, "cancel", "t-1")),
        "canceled"
    );
}

#[test]
fn a_resent_continue_is_applied_once() {
    let mut p = partner();
    rpc(&mut p, at(0), 1, "start", "t-1");
    p.start_working(at(1), "t-1").unwrap();
    p.request_input(at(2), "t-1", vec![DataItem::text("which city?")])
        .unwrap();
    drain(&mut p);
    let body = request(
        "rpc",
        2,
        Dialect::V2,
        cmd(Dialect::V2, "continue", Some("t-1"), Value::Null),
    );
    let first = send(&mut p, at(3), 2, body.clone());
    assert_eq!(
        changes(&first),
        vec![(Some(TaskState::AwaitingInput), TaskState::Working)]
    );
    assert!(first
        .iter()
        .any(|o| matches!(o, PartnerOutput::Event(PartnerEvent::TaskContinued { .. }))));
    p.request_input(at(4), "t-1", vec![]).unwrap();
    drain(&mut p);
    let again = send(&mut p, at(5), 3, body);
    assert_eq!(changes(&again), vec![]);
    assert_eq!(state_of(&reply(&again, 3)), "awaiting-input");
}

#[test]
fn errors_are_json_rpc_errors_with_the_right_codes() {
    let mut p = partner();
    let code = |out: &[PartnerOutput], r: u64| reply(out, r)["error"]["code"].as_i64().unwrap();
    let out = send(&mut p, at(0), 1, b"{not json".to_vec());
    assert_eq!(code(&out, 1), -32700);
    assert_eq!(reply(&out, 1)["id"], Value::Null);
    let out = send(
        &mut p,
        at(0),
        2,
        br#"{"jsonrpc":"2.0","id":"x","params":{}}"#.to_vec(),
    );
    assert_eq!(
        (code(&out, 2), reply(&out, 2)["id"].clone()),
        (-32600, json!("x"))
    );
    let out = send(
        &mut p,
        at(0),
        3,
        br#"{"jsonrpc":"2.0","id":3,"method":"tasks/send","params":{}}"#.to_vec(),
    );
    assert_eq!(code(&out, 3), -32601);
    let out = send(
        &mut p,
        at(0),
        4,
        request(
            "rpc",
            4,
            Dialect::V2,
            cmd(Dialect::V2, "get", Some("nope"), Value::Null),
        ),
    );
    assert_eq!(code(&out, 4), -32001);
    assert_eq!(reply(&out, 4)["error"]["data"]["taskId"], "nope");
    let out = send(
        &mut p,
        at(0),
        5,
        request(
            "rpc",
            5,
            Dialect::V2,
            cmd(Dialect::V2, "get", None, Value::Null),
        ),
    );
    assert_eq!(code(&out, 5), -32602);
    let out = send(
        &mut p,
        at(0),
        6,
        br#"{"jsonrpc":"2.0","id":6,"method":"group","params":{}}"#.to_vec(),
    );
    assert_eq!(code(&out, 6), -32007);
    let out = send(
        &mut p,
        at(0),
        7,
        request(
            "rpc",
            7,
            Dialect::V2,
            cmd(Dialect::V2, "fly", Some("t"), Value::Null),
        ),
    );
    assert_eq!(code(&out, 7), -32602);
}

#[test]
fn a_start_without_task_id_gets_one_from_the_partner() {
    let mut p = partner();
    let out = send(
        &mut p,
        at(0),
        1,
        request(
            "rpc",
            1,
            Dialect::V2,
            cmd(Dialect::V2, "start", None, Value::Null),
        ),
    );
    let v = reply(&out, 1);
    let id = v["result"]["taskId"].as_str().unwrap();
    assert!(id.starts_with("task-"), "{id}");
    assert!(p.task(id).is_some());
}

#[test]
fn awaiting_timeouts_cancel_input_and_complete_completion() {
    let mut p = partner();
    let params = json!({"awaitingInputTimeout": 1000, "awaitingCompletionTimeout": 2000});
    for t in ["a", "b"] {
        send(
            &mut p,
            at(0),
            1,
            request(
                "rpc",
                1,
                Dialect::V2,
                cmd(Dialect::V2, "start", Some(t), params.clone()),
            ),
        );
        p.start_working(at(0), t).unwrap();
    }
    p.request_input(at(10), "a", vec![]).unwrap();
    p.submit(at(10), "b", vec![], vec![]).unwrap();
    drain(&mut p);
    p.handle_timeout(at(1009));
    assert_eq!(changes(&drain(&mut p)), vec![]);
    assert_eq!(p.poll_timeout(), Some(at(1010)));
    assert_eq!(
        p.next_timer().map(|(_, t)| t.reason()),
        Some("awaiting-input timeout")
    );
    p.handle_timeout(at(1010));
    assert_eq!(
        changes(&drain(&mut p)),
        vec![(Some(TaskState::AwaitingInput), TaskState::Canceled)]
    );
    p.handle_timeout(at(2010));
    assert_eq!(
        changes(&drain(&mut p)),
        vec![(Some(TaskState::AwaitingCompletion), TaskState::Completed)]
    );
}

#[test]
fn an_undecided_start_is_rejected_after_the_response_timeout_and_held_requests_answered() {
    let mut p = Partner::new(PartnerConfig {
        auto_accept: false,
        keepalive: None,
        ..PartnerConfig::default()
    });
    let out = send(
        &mut p,
        at(0),
        1,
        request(
            "rpc",
            1,
            Dialect::V2,
            cmd(
                Dialect::V2,
                "start",
                Some("t"),
                json!({"responseTimeout": 500}),
            ),
        ),
    );
    assert!(matches!(
        &out[..],
        [PartnerOutput::Event(PartnerEvent::StartRequested { .. })]
    ));
    assert!(send(
        &mut p,
        at(1),
        2,
        request(
            "rpc",
            2,
            Dialect::V2,
            cmd(Dialect::V2, "get", Some("t"), Value::Null)
        )
    )
    .is_empty());
    p.handle_timeout(at(500));
    let out = drain(&mut p);
    assert_eq!(changes(&out), vec![(None, TaskState::Rejected)]);
    assert_eq!(state_of(&reply(&out, 1)), "rejected");
    assert_eq!(state_of(&reply(&out, 2)), "rejected");
    assert_eq!(
        p.accept(at(501), "t"),
        Err(UsageError::AlreadyDecided("t".into()))
    );
}

#[test]
fn the_application_may_only_move_a_task_through_the_table() {
    let mut p = partner();
    rpc(&mut p, at(0), 1, "start", "t");
    assert!(matches!(
        p.fail(at(1), "t", vec![]),
        Err(UsageError::IllegalTransition { .. })
    ));
    assert!(matches!(
        p.submit(at(1), "t", vec![], vec![]),
        Err(UsageError::IllegalTransition { .. })
    ));
    assert_eq!(p.task("t").unwrap().state, Some(TaskState::Accepted));
    assert_eq!(
        p.start_working(at(1), "nope"),
        Err(UsageError::UnknownTask("nope".into()))
    );
}

#[test]
fn products_over_max_products_bytes_fail_the_task() {
    let mut p = partner();
    send(
        &mut p,
        at(0),
        1,
        request(
            "rpc",
            1,
            Dialect::V2,
            cmd(
                Dialect::V2,
                "start",
                Some("t"),
                json!({"maxProductsBytes": 64}),
            ),
        ),
    );
    p.start_working(at(1), "t").unwrap();
    let big = Product::text("p", "x".repeat(100));
    assert_eq!(
        p.submit(at(2), "t", vec![big], vec![]),
        Ok(TaskState::Failed)
    );
    let v = p.task("t").unwrap();
    assert_eq!(v.state, Some(TaskState::Failed));
    assert!(v.products.is_empty());
    let reason = v.status.unwrap().data_items.as_ref().unwrap()[0]
        .as_text()
        .unwrap();
    assert!(reason.contains("maxProductsBytes=64"), "{reason}");
}

fn frames(out: &[PartnerOutput], r: u64) -> Vec<Value> {
    let mut d = SseDecoder::default();
    for o in out {
        if let PartnerOutput::StreamData { request, data } = o {
            if *request == RequestId(r) {
                d.push(data);
            }
        }
    }
    std::iter::from_fn(|| d.next_event())
        .map(|e| serde_json::from_str(&e.unwrap().data).unwrap())
        .collect()
}

fn ended(out: &[PartnerOutput], r: u64) -> bool {
    out.iter()
        .any(|o| matches!(o, PartnerOutput::EndStream { request } if *request == RequestId(r)))
}

#[test]
fn a_stream_carries_every_change_with_increasing_seq_and_closes_at_the_end() {
    let mut p = partner();
    let mut out = send(
        &mut p,
        at(0),
        1,
        request(
            "stream",
            1,
            Dialect::V1,
            cmd(Dialect::V1, "start", Some("t"), Value::Null),
        ),
    );
    assert!(matches!(
        out.iter()
            .find(|o| matches!(o, PartnerOutput::StartStream { .. })),
        Some(_)
    ));
    p.start_working(at(1), "t").unwrap();
    p.product_chunk(at(2), "t", Product::text("p", "a"), false, false)
        .unwrap();
    p.product_chunk(at(3), "t", Product::text("p", "b"), true, true)
        .unwrap();
    p.submit(at(4), "t", vec![], vec![]).unwrap();
    out.extend(drain(&mut p));
    assert!(!ended(&out, 1));
    out.extend(send(
        &mut p,
        at(5),
        2,
        request(
            "rpc",
            2,
            Dialect::V1,
            cmd(Dialect::V1, "complete", Some("t"), Value::Null),
        ),
    ));
    let f = frames(&out, 1);
    let seqs: Vec<u64> = f
        .iter()
        .map(|e| e["result"]["eventSeq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5, 6]);
    let types: Vec<&str> = f
        .iter()
        .map(|e| e["result"]["eventData"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        vec![
            "task",
            "status-update",
            "product-chunk",
            "product-chunk",
            "status-update",
            "status-update"
        ]
    );
    assert_eq!(f[5]["result"]["eventData"]["status"]["state"], "completed");
    assert!(ended(&out, 1));
    assert_eq!(state_of(&reply(&out, 2)), "completed");
    let v = p.task("t").unwrap();
    assert_eq!(v.products[0].data_items.len(), 2, "chunks were appended");
    assert_eq!(p.open_streams(), 0);
}

#[test]
fn re_stream_replays_what_followed_and_reports_expired_events() {
    let mut p = Partner::new(PartnerConfig {
        stream_buffer: 3,
        keepalive: None,
        ..PartnerConfig::default()
    });
    send(
        &mut p,
        at(0),
        1,
        request(
            "stream",
            1,
            Dialect::V2,
            cmd(Dialect::V2, "start", Some("t"), Value::Null),
        ),
    );
    p.handle(
        at(0),
        PartnerInput::StreamClosed {
            request: RequestId(1),
        },
    );
    p.start_working(at(1), "t").unwrap();
    p.progress(at(2), "t", vec![DataItem::text("half way")])
        .unwrap();
    drain(&mut p);
    let restream = |last: Value| {
        request(
            "stream",
            9,
            Dialect::V2,
            cmd(
                Dialect::V2,
                "re-stream",
                Some("t"),
                json!({"lastEventSeq": last}),
            ),
        )
    };
    let out = send(&mut p, at(3), 2, restream(json!(1)));
    let seqs: Vec<u64> = frames(&out, 2)
        .iter()
        .map(|e| e["result"]["eventSeq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![2, 3]);
    assert!(!ended(&out, 2));
    p.handle(
        at(3),
        PartnerInput::StreamClosed {
            request: RequestId(2),
        },
    );
    p.progress(at(4), "t", vec![]).unwrap(); // seq 4: event 1 expires
    drain(&mut p);
    let out = send(&mut p, at(5), 3, restream(json!(0)));
    let f = frames(&out, 3);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0]["error"]["code"], -32001);
    assert_eq!(f[0]["error"]["data"]["lastAvailableSeq"], 4);
    assert!(ended(&out, 3));
    let out = send(&mut p, at(5), 4, restream(Value::Null));
    assert_eq!(
        frames(&out, 4)[0]["error"]["message"],
        "Stream events expired"
    );
}

fn notify_outputs(out: &[PartnerOutput]) -> Vec<(DeliveryId, String, Value)> {
    out.iter()
        .filter_map(|o| match o {
            PartnerOutput::Notify {
                delivery,
                token,
                body,
                ..
            } => Some((
                *delivery,
                token.clone(),
                serde_json::from_slice(body).unwrap(),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn notifications_follow_notify_on_states_and_retry_until_given_up() {
    let mut p = Partner::new(PartnerConfig {
        notification_retry: RetryPolicy {
            attempts: 3,
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            attempt_timeout: Duration::from_secs(5),
        },
        keepalive: None,
        ..PartnerConfig::default()
    });
    let set = json!({"jsonrpc":"2.0","id":1,"method":"notification/set","params":{"url":"http://l/n","token":"tok","taskId":"t"}});
    let v = reply(&send(&mut p, at(0), 1, set.to_string().into_bytes()), 1);
    let cid = v["result"]["id"].as_str().unwrap().to_owned();
    let start = cmd(
        Dialect::V1,
        "start",
        Some("t"),
        json!({"notificationConfigId": cid, "notifyOnStates": ["working", "completed"]}),
    );
    let out = send(
        &mut p,
        at(1),
        2,
        request("notification/start", 2, Dialect::V1, start),
    );
    assert_eq!(state_of(&reply(&out, 2)), "accepted");
    assert!(
        notify_outputs(&out).is_empty(),
        "accepted is not in notifyOnStates"
    );
    p.start_working(at(2), "t").unwrap();
    let n = notify_outputs(&drain(&mut p));
    assert_eq!(n.len(), 1);
    let (d, token, body) = &n[0];
    assert_eq!(token, "tok");
    assert_eq!(
        (body["type"].as_str(), body["status"]["state"].as_str()),
        (Some("task"), Some("working"))
    );
    // Fails: retried after 1 s, then 2 s; the third failure gives up.
    p.handle(
        at(3),
        PartnerInput::NotificationResult {
            delivery: *d,
            outcome: DeliveryOutcome::Status(503),
        },
    );
    assert!(drain(&mut p).is_empty());
    p.handle_timeout(at(1003));
    let n = notify_outputs(&drain(&mut p));
    p.handle(
        at(1004),
        PartnerInput::NotificationResult {
            delivery: n[0].0,
            outcome: DeliveryOutcome::Failed("refused".into()),
        },
    );
    p.handle_timeout(at(3004));
    let n = notify_outputs(&drain(&mut p));
    assert_eq!(n.len(), 1);
    // No outcome: the attempt timeout counts as the last failure.
    p.handle_timeout(at(8004));
    let out = drain(&mut p);
    assert!(
        out.iter().any(|o| matches!(
            o,
            PartnerOutput::Event(PartnerEvent::NotificationGaveUp {
                attempts: 3,
                reason: GiveUpReason::Exhausted,
                state: TaskState::Working,
                ..
            })
        )),
        "{out:?}"
    );
    assert_eq!(p.pending_notifications(), 0);
    // A late outcome of a given-up attempt is ignored.
    p.handle(
        at(8005),
        PartnerInput::NotificationResult {
            delivery: n[0].0,
            outcome: DeliveryOutcome::Status(200),
        },
    );
    assert!(drain(&mut p).is_empty());
}

#[test]
fn notification_configs_are_listed_and_deleted() {
    let mut p = partner();
    for i in 1..=2 {
        let set = json!({"jsonrpc":"2.0","id":i,"method":"notification/set","params":{"url":"https://l/n","token":"t","taskId":"t"}});
        send(&mut p, at(0), i, set.to_string().into_bytes());
    }
    let get = json!({"jsonrpc":"2.0","id":3,"method":"notification/get","params":{"taskId":"t"}});
    let v = reply(&send(&mut p, at(0), 3, get.to_string().into_bytes()), 3);
    assert_eq!(v["result"].as_array().unwrap().len(), 2);
    let del =
        json!({"jsonrpc":"2.0","id":4,"method":"notification/delete","params":{"taskId":"t"}});
    let v = reply(&send(&mut p, at(0), 4, del.to_string().into_bytes()), 4);
    assert_eq!(v["result"], json!({"success": true}));
    let v = reply(&send(&mut p, at(0), 5, get.to_string().into_bytes()), 5);
    assert_eq!(v["result"], json!([]));
    let bad = json!({"jsonrpc":"2.0","id":6,"method":"notification/set","params":{"url":"file:///x","token":"t","taskId":"t"}});
    assert_eq!(
        reply(&send(&mut p, at(0), 6, bad.to_string().into_bytes()), 6)["error"]["code"],
        -32602
    );
}

#[test]
fn ended_tasks_are_purged_after_retention() {
    let mut p = partner();
    rpc(&mut p, at(0), 1, "start", "t");
    rpc(&mut p, at(1), 2, "cancel", "t");
    assert_eq!(state_of(&rpc(&mut p, at(2), 3, "get", "t")), "canceled");
    p.handle_timeout(at(1 + 3_600_000));
    let out = drain(&mut p);
    assert!(out
        .iter()
        .any(|o| matches!(o, PartnerOutput::Event(PartnerEvent::TaskPurged { .. }))));
    assert_eq!(
        rpc(&mut p, at(3_700_000), 4, "get", "t")["error"]["code"],
        -32001
    );
    assert_eq!(p.task_count(), 0);
    assert_eq!(p.poll_timeout(), None);
}

#[test]
fn get_filters_histories_by_time() {
    let mut p = partner();
    rpc(&mut p, at(0), 1, "start", "t");
    p.start_working(at(1000), "t").unwrap();
    drain(&mut p);
    let since = at(500).to_rfc3339();
    let get = cmd(
        Dialect::V2,
        "get",
        Some("t"),
        json!({"lastStateChangedAt": since}),
    );
    let v = reply(
        &send(&mut p, at(2000), 2, request("rpc", 2, Dialect::V2, get)),
        2,
    );
    let states: Vec<&str> = v["result"]["statusHistory"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, vec!["working"]);
    assert_eq!(v["result"]["commandHistory"].as_array().unwrap().len(), 1);
}
