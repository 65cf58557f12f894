//! Streams, re-stream, notifications, retention and get filters.

use super::*;

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

/// A v02 `stream` request (number 1) that starts task `t`.
fn stream_start(p: &mut Partner) -> Vec<PartnerOutput> {
    let start = cmd(Dialect::V2, "start", Some("t"), Value::Null);
    send(p, at(0), 1, request("stream", 1, Dialect::V2, start))
}

/// A v02 `re-stream` of task `t` after event `last`.
fn restream_body(id: u64, last: Value) -> Vec<u8> {
    let c = cmd(
        Dialect::V2,
        "re-stream",
        Some("t"),
        json!({"lastEventSeq": last}),
    );
    request("stream", id, Dialect::V2, c)
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
    assert!(out
        .iter()
        .any(|o| matches!(o, PartnerOutput::StartStream { .. })));
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
    let restream = |last: Value| restream_body(9, last);
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

#[test]
fn a_resent_stream_start_replays_from_the_first_event() {
    let mut p = partner();
    let body = request(
        "stream",
        1,
        Dialect::V2,
        cmd(Dialect::V2, "start", Some("t"), Value::Null),
    );
    send(&mut p, at(0), 1, body.clone());
    p.handle(
        at(0),
        PartnerInput::StreamClosed {
            request: RequestId(1),
        },
    );
    p.start_working(at(1), "t").unwrap();
    drain(&mut p);
    let out = send(&mut p, at(2), 2, body);
    let seqs: Vec<u64> = frames(&out, 2)
        .iter()
        .map(|e| e["result"]["eventSeq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![1, 2]);
    // Another start (new message id) on the stream gets a fresh snapshot instead.
    let other = request(
        "stream",
        3,
        Dialect::V2,
        cmd(Dialect::V2, "start", Some("t"), json!({"x": 1})),
    );
    let out = send(&mut p, at(3), 3, other);
    let f = frames(&out, 3);
    assert_eq!(f.len(), 1);
    assert_eq!(
        (
            f[0]["result"]["eventSeq"].as_u64(),
            f[0]["result"]["eventData"]["type"].as_str()
        ),
        (Some(3), Some("task-result"))
    );
}

#[test]
fn a_start_resent_after_the_purge_does_not_create_the_task_again() {
    let mut p = partner();
    let body = request(
        "rpc",
        1,
        Dialect::V2,
        cmd(Dialect::V2, "start", Some("t"), Value::Null),
    );
    send(&mut p, at(0), 1, body.clone());
    rpc(&mut p, at(1), 2, "cancel", "t");
    p.handle_timeout(at(1 + 3_600_000));
    drain(&mut p);
    let v = reply(&send(&mut p, at(3_700_000), 3, body), 3);
    assert_eq!(v["error"]["code"], -32001);
    assert_eq!(p.task_count(), 0);
    // A new start (another message id) for the same task id is a new task.
    let fresh = request(
        "rpc",
        4,
        Dialect::V2,
        cmd(Dialect::V2, "start", Some("t"), json!({"n": 1})),
    );
    assert_eq!(
        state_of(&reply(&send(&mut p, at(3_700_001), 4, fresh), 4)),
        "accepted"
    );
}

/// Found by the driver test over real HTTP: products given to `submit` never reached a
/// stream subscriber (only chunks did), so a streaming leader saw awaiting-completion with no
/// products. They now go out as product chunks before the status, as the spec's example.
#[test]
fn submitted_products_reach_the_stream_before_awaiting_completion() {
    let mut p = partner();
    let mut out = stream_start(&mut p);
    p.start_working(at(1), "t").unwrap();
    p.submit(at(2), "t", vec![Product::text("answer", "42")], vec![])
        .unwrap();
    out.extend(drain(&mut p));
    let f = frames(&out, 1);
    let kinds: Vec<&str> = f
        .iter()
        .map(|v| v["result"]["eventData"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "task-result",
            "task-status-update",
            "product-chunk",
            "task-status-update"
        ]
    );
    let chunk = &f[2]["result"]["eventData"];
    assert_eq!(
        (
            chunk["product"]["id"].as_str(),
            chunk["append"].as_bool(),
            chunk["lastChunk"].as_bool()
        ),
        (Some("answer"), Some(false), Some(true))
    );
    assert_eq!(
        f[3]["result"]["eventData"]["status"]["state"],
        "awaiting-completion"
    );
}

/// Chunks are logged as pointers to the task's stored products (no copy per chunk, see
/// `stream::Shown`): a product replaced later (by a later chunk, a later submit, or a second
/// product with its id in the same submit) must not change what an earlier chunk showed,
/// live or replayed after the task ended.
#[test]
fn a_replayed_chunk_shows_the_product_as_it_was_sent() {
    let mut p = partner();
    let mut out = stream_start(&mut p);
    p.start_working(at(1), "t").unwrap();
    p.product_chunk(at(2), "t", Product::text("p", "a"), false, false)
        .unwrap();
    p.product_chunk(at(3), "t", Product::text("p", "b"), true, true)
        .unwrap();
    p.product_chunk(at(4), "t", Product::text("r", "r1"), false, true)
        .unwrap();
    let submitted = vec![
        Product::text("p", "c"),
        Product::text("q", "x"),
        Product::text("q", "y"),
    ];
    p.submit(at(5), "t", submitted, vec![]).unwrap();
    out.extend(drain(&mut p));
    rpc(&mut p, at(6), 2, "complete", "t");
    let chunks = |f: &[Value]| -> Vec<(String, Vec<String>, bool)> {
        f.iter()
            .map(|v| &v["result"]["eventData"])
            .filter(|d| d["type"] == "product-chunk")
            .map(|d| {
                let texts = d["product"]["dataItems"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|i| i["text"].as_str().unwrap().to_owned())
                    .collect();
                let id = d["product"]["id"].as_str().unwrap().to_owned();
                (id, texts, d["append"].as_bool().unwrap())
            })
            .collect()
    };
    let s = |v: &str| v.to_owned();
    let expected = vec![
        (s("p"), vec![s("a")], false),
        (s("p"), vec![s("b")], true),
        (s("r"), vec![s("r1")], false),
        (s("p"), vec![s("c")], false),
        (s("q"), vec![s("x")], false),
        (s("q"), vec![s("y")], false),
    ];
    assert_eq!(chunks(&frames(&out, 1)), expected, "live");
    let replay = send(&mut p, at(7), 3, restream_body(3, json!(0)));
    assert!(ended(&replay, 3));
    assert_eq!(chunks(&frames(&replay, 3)), expected, "replayed");
    let v = p.task("t").unwrap();
    let stored: Vec<(&str, &str)> = v
        .products
        .iter()
        .map(|p| (p.id.as_str(), p.data_items[0].as_text().unwrap()))
        .collect();
    assert_eq!(stored, [("p", "c"), ("r", "r1"), ("q", "y")]);
}
