//! rpc: start, commands, errors, timeouts, products.

use super::*;

#[test]
fn a_v2_start_is_accepted_answered_and_handed_to_the_application() {
    let mut p = partner();
    let out = send_v2(&mut p, at(0), 1, "start", Some("t-1"), Value::Null);
    assert_eq!(changes(&out), vec![(None, TaskState::Accepted)]);
    assert!(out.iter().any(|o| matches!(o, PartnerOutput::Event(PartnerEvent::TaskStarted { task_id, .. }) if &**task_id == "t-1")));
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
        let out = send_v2(&mut p, at(2), r, c, Some("t-1"), Value::Null);
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
    let out = send_v2(&mut p, at(0), 4, "get", Some("nope"), Value::Null);
    assert_eq!(code(&out, 4), -32001);
    assert_eq!(reply(&out, 4)["error"]["data"]["taskId"], "nope");
    let out = send_v2(&mut p, at(0), 5, "get", None, Value::Null);
    assert_eq!(code(&out, 5), -32602);
    let out = send(
        &mut p,
        at(0),
        6,
        br#"{"jsonrpc":"2.0","id":6,"method":"group","params":{}}"#.to_vec(),
    );
    assert_eq!(code(&out, 6), -32007);
    let out = send_v2(&mut p, at(0), 7, "fly", Some("t"), Value::Null);
    assert_eq!(code(&out, 7), -32602);
}

#[test]
fn a_start_without_task_id_gets_one_from_the_partner() {
    let mut p = partner();
    let out = send_v2(&mut p, at(0), 1, "start", None, Value::Null);
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
        send_v2(&mut p, at(0), 1, "start", Some(t), params.clone());
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
    let out = send_v2(
        &mut p,
        at(0),
        1,
        "start",
        Some("t"),
        json!({"responseTimeout": 500}),
    );
    assert!(matches!(
        &out[..],
        [PartnerOutput::Event(PartnerEvent::StartRequested { .. })]
    ));
    assert!(send_v2(&mut p, at(1), 2, "get", Some("t"), Value::Null).is_empty());
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
    send_v2(
        &mut p,
        at(0),
        1,
        "start",
        Some("t"),
        json!({"maxProductsBytes": 64}),
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

/// The limit is checked against the JSON of the products as they would be after the merge
/// (kept ones, replaced ones, the last of a repeated id), counted without building it: a limit
/// of exactly that size passes, one byte less fails and leaves the products as they were.
#[test]
fn the_product_limit_counts_the_json_of_the_merged_products_exactly() {
    let merged = vec![Product::text("a", "new a"), Product::text("b", "b2")];
    let exact = serde_json::to_vec(&merged).unwrap().len() as u64;
    for (limit, fails) in [(exact, false), (exact - 1, true)] {
        let mut p = partner();
        send_v2(
            &mut p,
            at(0),
            1,
            "start",
            Some("t"),
            json!({"maxProductsBytes": limit}),
        );
        p.start_working(at(1), "t").unwrap();
        assert_eq!(
            p.add_products("t", vec![Product::text("a", "old a")], None),
            None
        );
        let more = vec![
            Product::text("b", "b1"),
            Product::text("a", "new a"),
            Product::text("b", "b2"),
        ];
        assert_eq!(
            p.add_products("t", more, None),
            fails.then_some(TaskState::Failed),
            "limit {limit}"
        );
        let kept = if fails {
            vec![Product::text("a", "old a")]
        } else {
            merged.clone()
        };
        assert_eq!(p.task("t").unwrap().products, &kept[..]);
    }
}

/// A task purged to make room takes its timers with it: a retention timer left behind
/// would later purge whatever task holds the same id by then.
#[test]
fn a_task_purged_at_capacity_leaves_no_timer_behind() {
    let mut p = Partner::new(PartnerConfig {
        partner_id: "P".into(),
        keepalive: None,
        max_tasks: 1,
        retention: std::time::Duration::from_secs(3600),
        ..PartnerConfig::default()
    });
    assert_eq!(state_of(&rpc(&mut p, at(0), 1, "start", "A")), "accepted");
    assert_eq!(state_of(&rpc(&mut p, at(1), 2, "cancel", "A")), "canceled");
    let (_, timer) = p.next_timer().expect("the ended task's retention");
    assert_eq!(timer, PartnerTimer::Retention("A".into()));
    assert_eq!(state_of(&rpc(&mut p, at(2), 3, "start", "B")), "accepted");
    assert!(p.task("A").is_none(), "A was purged to make room");
    assert_eq!(p.next_timer(), None, "nothing of A is left to fire");
}
