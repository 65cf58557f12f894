//! Unit tests of the partner engine: requests in, outputs out, time moved by hand.

mod rpc;
mod stream_notify;

use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use crate::engine::DeliveryId;
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

/// A v02 `rpc` request with one command, sent.
fn send_v2(
    p: &mut Partner,
    now: Timestamp,
    r: u64,
    command: &str,
    task: Option<&str>,
    params: Value,
) -> Vec<PartnerOutput> {
    send(
        p,
        now,
        r,
        request(
            "rpc",
            r,
            Dialect::V2,
            cmd(Dialect::V2, command, task, params),
        ),
    )
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
