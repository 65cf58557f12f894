//! Unit tests of the leader engine: answers are written by hand, time moves by hand.

mod commands;
mod delivery;
mod tickets;

use serde_json::{json, Value};

use super::*;
use crate::engine::CallId;
use crate::sse::frame;
use crate::wire::CommandKind;

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
