//! The executor engine's security decisions in virtual time: pending assignments that never
//! get a START, and (with auth on) which credential authorises which request.

use std::time::Duration;

use awcp_proto::engine::executor::{Request, Response};
use awcp_proto::engine::RequestId;
use awcp_proto::{
    decode_message, Executor, ExecutorConfig, ExecutorInput, ExecutorOutput, Timestamp,
};

fn t(ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(1_700_000_000_000 + ms)
}

fn invite(id: &str, ttl: u64) -> Request {
    let json = format!(
        r#"{{"version":"1","type":"INVITE","delegationId":"{id}",
        "task":{{"description":"d","prompt":"p"}},"lease":{{"ttlSeconds":{ttl},"accessMode":"rw"}},
        "environment":{{"resources":[{{"name":"workspace","type":"fs","mode":"rw"}}]}}}}"#
    );
    let (m, d) = decode_message(json.as_bytes()).unwrap();
    Request::Message(Box::new(m), d)
}

/// Drains the engine, completing work-directory allocations at once; returns the responses.
fn drain(ex: &mut Executor, now: Timestamp) -> Vec<(RequestId, Response)> {
    let mut out = Vec::new();
    loop {
        let mut inputs = Vec::new();
        while let Some(o) = ex.poll_output() {
            match o {
                ExecutorOutput::Respond { request, response } => out.push((request, response)),
                ExecutorOutput::AllocateWorkDir { id, .. } => {
                    inputs.push(ExecutorInput::WorkDirAllocated { id, result: Ok(()) })
                }
                ExecutorOutput::Release { id, .. } => inputs.push(ExecutorInput::Released { id }),
                _ => {}
            }
        }
        if inputs.is_empty() {
            return out;
        }
        for i in inputs {
            ex.handle(now, i).unwrap();
        }
    }
}

fn ask(ex: &mut Executor, now: Timestamp, n: u64, body: Request) -> Response {
    ex.handle(
        now,
        ExecutorInput::Request {
            request: RequestId(n),
            credential: None,
            body,
        },
    )
    .unwrap();
    drain(ex, now)
        .into_iter()
        .find(|(r, _)| *r == RequestId(n))
        .map(|(_, resp)| resp)
        .expect("the request was answered")
}

fn is_accept(r: &Response) -> bool {
    matches!(r, Response::Accept(..))
}

/// Five accepted INVITEs that never send START hold every slot of a default executor only
/// until the START deadline (60 s by default), not for their hour-long lease.
#[test]
fn stalled_invites_release_their_slots_after_the_start_deadline() {
    let mut ex = Executor::new(ExecutorConfig::default());
    let cap = ExecutorConfig::default().max_concurrent;
    for i in 0..cap {
        let r = ask(
            &mut ex,
            t(0),
            i as u64,
            invite(&format!("dlg_stall{i}"), 3600),
        );
        assert!(is_accept(&r), "{r:?}");
    }
    // Every slot is held: the next one is declined.
    let r = ask(&mut ex, t(1_000), 100, invite("dlg_next", 3600));
    assert!(!is_accept(&r), "{r:?}");
    // Just over a minute later, with no START, the pending assignments are gone...
    let later = t(61_000);
    ex.handle_timeout(later);
    drain(&mut ex, later);
    assert_eq!(ex.status().pending, 0, "{:?}", ex.status());
    // ...and a new delegation gets a slot.
    let r = ask(&mut ex, later, 101, invite("dlg_next2", 3600));
    assert!(is_accept(&r), "{r:?}");
}

/// The START deadline never exceeds the lease: a 10 s lease frees its slot after 10 s.
#[test]
fn start_deadline_is_capped_by_the_lease() {
    let mut ex = Executor::new(ExecutorConfig::default());
    assert!(is_accept(&ask(&mut ex, t(0), 1, invite("dlg_short", 10))));
    ex.handle_timeout(t(10_500));
    drain(&mut ex, t(10_500));
    assert_eq!(ex.status().pending, 0);
    let _ = Duration::ZERO;
}
