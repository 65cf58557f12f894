//! Property tests: every value encodes and decodes back in both dialects (up to what a dialect
//! cannot carry), and no byte string makes a decoder panic.

use aip_proto::sse::{frame, SseDecoder};
use aip_proto::*;
use proptest::prelude::*;
use serde_json::json;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9-]{1,12}",
        "\\PC{0,20}",
        Just("line\nbreak \"quoted\" \\ \u{0}".to_owned()),
    ]
}

fn time() -> impl Strategy<Value = Timestamp> {
    (0u64..4_102_444_800_000_000).prop_map(Timestamp::from_unix_micros)
}

fn metadata() -> impl Strategy<Value = Option<JsonObject>> {
    proptest::option::of(
        proptest::collection::btree_map("[a-z]{1,5}", any::<i32>(), 0..3)
            .prop_map(|m| m.into_iter().map(|(k, v)| (k, json!(v))).collect()),
    )
}

fn item() -> impl Strategy<Value = DataItem> {
    prop_oneof![
        (text(), metadata()).prop_map(|(text, metadata)| DataItem::Text { text, metadata }),
        (
            proptest::option::of(text()),
            proptest::option::of(text()),
            proptest::option::of(text()),
            proptest::option::of("[A-Za-z0-9+/]{0,16}"),
            metadata()
        )
            .prop_map(|(name, mime_type, uri, bytes, metadata)| DataItem::File {
                name,
                mime_type,
                uri,
                bytes,
                metadata
            }),
        (any::<i64>(), metadata()).prop_map(|(n, metadata)| DataItem::Data {
            data: json!({"n": n, "l": [1, "x", null]}),
            metadata
        }),
    ]
}

fn items() -> impl Strategy<Value = Option<Vec<DataItem>>> {
    proptest::option::of(proptest::collection::vec(item(), 0..3))
}

fn state() -> impl Strategy<Value = TaskState> {
    proptest::sample::select(TaskState::ALL.to_vec())
}

fn status() -> impl Strategy<Value = TaskStatus> {
    (state(), time(), items()).prop_map(|(state, state_changed_at, data_items)| TaskStatus {
        state,
        state_changed_at,
        data_items,
    })
}

fn product() -> impl Strategy<Value = Product> {
    (
        text(),
        proptest::option::of(text()),
        proptest::option::of(text()),
        proptest::collection::vec(item(), 0..3),
    )
        .prop_map(|(id, name, description, data_items)| Product {
            id,
            name,
            description,
            data_items,
        })
}

fn kind() -> impl Strategy<Value = CommandKind> {
    prop_oneof![
        Just(CommandKind::Get),
        Just(CommandKind::Start),
        Just(CommandKind::Continue),
        Just(CommandKind::Cancel),
        Just(CommandKind::Complete),
        Just(CommandKind::ReStream),
    ]
}

fn mentions() -> impl Strategy<Value = Option<Mentions>> {
    proptest::option::of(prop_oneof![
        Just(Mentions::All),
        proptest::collection::vec("[a-z]{1,4}", 0..3).prop_map(Mentions::List)
    ])
}

prop_compose! {
    fn command()(id in text(), sent_at in time(), sender_id in text(), mentions in mentions(),
                 command in proptest::option::of(kind()), n in proptest::option::of(0u64..1000),
                 data_items in items(), task_id in proptest::option::of(text()),
                 group_id in proptest::option::of(text()), session_id in proptest::option::of(text()))
        -> TaskCommand {
        TaskCommand {
            id, sent_at, sender_role: SenderRole::Leader, sender_id, mentions, command,
            command_params: n.map(|n| [("lastEventSeq".to_owned(), json!(n)), ("x".to_owned(), json!(null))].into_iter().collect()),
            data_items, task_id, group_id, session_id,
        }
    }
}

prop_compose! {
    fn header()(id in proptest::option::of(text()), sent_at in proptest::option::of(time()),
                sender_id in proptest::option::of(text()), mentions in mentions(), data_items in items(),
                group_id in proptest::option::of(text()), session_id in proptest::option::of(text())) -> Header {
        Header { id, sent_at, sender_role: sent_at.map(|_| SenderRole::Partner), sender_id, mentions, data_items, group_id, session_id }
    }
}

prop_compose! {
    fn result()(header in header(), task_id in text(), status in status(),
                products in proptest::option::of(proptest::collection::vec(product(), 0..3)),
                history in proptest::option::of(proptest::collection::vec(command(), 0..2)),
                status_history in proptest::option::of(proptest::collection::vec(status(), 0..3))) -> TaskResult {
        TaskResult { header, task_id, status, products, command_history: history, status_history }
    }
}

/// What survives a trip through `d`.
fn command_in(mut c: TaskCommand, d: Dialect) -> TaskCommand {
    if d == Dialect::V1 && c.data_items.is_none() {
        c.data_items = Some(Vec::new());
    }
    c
}

fn result_in(mut r: TaskResult, d: Dialect) -> TaskResult {
    match d {
        Dialect::V1 => {
            let h = r.header;
            r.header = Header {
                sender_id: h.sender_id,
                group_id: h.group_id,
                session_id: Some(h.session_id.unwrap_or_default()),
                ..Header::default()
            };
        }
        Dialect::V2 => {
            r.header.id = Some(
                r.header
                    .id
                    .unwrap_or_else(|| format!("result-{}", r.task_id)),
            );
            r.header.sent_at = Some(r.header.sent_at.unwrap_or(r.status.state_changed_at));
            r.header.sender_role = Some(SenderRole::Partner);
            r.header.sender_id = Some(r.header.sender_id.unwrap_or_default());
        }
    }
    r.command_history = r
        .command_history
        .map(|h| h.into_iter().map(|c| command_in(c, d)).collect());
    r
}

fn rpc_id() -> impl Strategy<Value = RpcId> {
    prop_oneof![
        Just(RpcId::Null),
        "[0-9a-f-]{1,12}".prop_map(RpcId::Str),
        text().prop_map(RpcId::Str),
        any::<i64>().prop_map(|n| RpcId::Num(n.into())),
    ]
}

/// Any id, fractional numbers included (which serde_json does not read back to the same
/// `f64` in every case, so only for encoding).
fn any_rpc_id() -> impl Strategy<Value = RpcId> {
    prop_oneof![
        rpc_id(),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| RpcId::Num(serde_json::Number::from_f64(f).unwrap())),
    ]
}

fn dialect() -> impl Strategy<Value = Dialect> {
    prop_oneof![Just(Dialect::V1), Just(Dialect::V2)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn commands_round_trip(c in command(), d in dialect()) {
        let (back, found) = decode_command(&encode_command(&c, d)).unwrap();
        // A plain message (no command) is `type:"message"` in both dialects; it reads as v01.00.
        prop_assert_eq!(found, if c.command.is_some() { d } else { Dialect::V1 });
        prop_assert_eq!(back, command_in(c, d));
    }

    #[test]
    fn requests_round_trip(c in command(), d in dialect(), id in rpc_id()) {
        for m in [Method::Rpc, Method::Stream, Method::NotificationStart] {
            let req = decode_request(&encode_command_request(&id, &m, &c, d)).unwrap();
            prop_assert_eq!(&req.id, &id);
            if c.command.is_some() {
                prop_assert_eq!(req.dialect, d);
            }
            prop_assert_eq!(req.params, Params::Command(std::sync::Arc::new(command_in(c.clone(), d))));
        }
    }

    #[test]
    fn results_round_trip(r in result(), d in dialect()) {
        let (back, found) = decode_task(&encode_task(&r, d)).unwrap();
        prop_assert_eq!(found, d);
        prop_assert_eq!(back, result_in(r.clone(), d));
        let resp = decode_rpc_response(&encode_task_response(&RpcId::Str("1".into()), &r, d)).unwrap();
        let Ok((RpcResult::Task(t), _)) = resp.outcome else { panic!() };
        prop_assert_eq!(*t, result_in(r, d));
    }

    /// `encode_task` and `encode_task_response` (which a partner writes from its task's parts,
    /// without building a result) are exactly serde_json's bytes of the `Serialize` form, the
    /// latter inside a JSON-RPC envelope.
    #[test]
    fn encoded_results_are_what_serde_writes(r in result(), d in dialect(), id in any_rpc_id()) {
        let serde = serde_json::to_string(&InDialect(&r, d)).unwrap();
        prop_assert_eq!(String::from_utf8(encode_task(&r, d)).unwrap(), serde.clone());
        let envelope = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{serde}}}"#, serde_json::to_string(&id).unwrap());
        prop_assert_eq!(String::from_utf8(encode_task_response(&id, &r, d)).unwrap(), envelope);
    }

    #[test]
    fn stream_events_round_trip_through_sse(r in result(), s in status(), p in product(), seq in 1u64..1_000_000, d in dialect(), append: bool, last: bool) {
        let events = [
            EventData::Task(r.clone()),
            EventData::StatusUpdate(StatusUpdate { header: Header::default(), task_id: r.task_id.clone(), status: s }),
            EventData::ProductChunk(ProductChunk { header: Header::default(), task_id: r.task_id.clone(), product: p, append, last_chunk: last }),
        ];
        let mut wire = Vec::new();
        for data in &events {
            wire.extend(frame(&encode_stream_event(&RpcId::Num(7.into()), &StreamEvent { seq, data: data.clone() }, d)));
        }
        let mut dec = SseDecoder::default();
        dec.push(&wire);
        let mut n = 0;
        while let Some(ev) = dec.next_event() {
            let resp = decode_stream_event(ev.unwrap().data.as_bytes()).unwrap();
            prop_assert_eq!(&resp.id, &RpcId::Num(7.into()));
            let (back, _) = resp.outcome.unwrap();
            prop_assert_eq!(back.seq, seq);
            prop_assert_eq!(back.data.task_id(), Some(r.task_id.as_str()));
            prop_assert_eq!(back.data.status().map(|s| s.state), events[n].status().map(|s| s.state));
            n += 1;
        }
        prop_assert_eq!(n, 3);
    }

    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = decode_request(&bytes);
        let _ = decode_rpc_response(&bytes);
        let _ = decode_stream_event(&bytes);
        let _ = decode_task(&bytes);
        let _ = decode_command(&bytes);
        let mut d = SseDecoder::new(64);
        d.push(&bytes);
        while d.next_event().is_some() {}
    }

    #[test]
    fn json_shaped_garbage_never_panics(v in proptest::arbitrary::any::<(Option<String>, Option<i64>, bool)>()) {
        let body = json!({"jsonrpc": "2.0", "id": v.1, "method": v.0, "params": {"command": {"type": "task-command", "id": v.0, "command": if v.2 { json!("start") } else { json!(5) }}}});
        let _ = decode_request(body.to_string().as_bytes());
    }
}
