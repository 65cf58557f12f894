//! The executor engine's security decisions in virtual time: pending assignments that never
//! get a START, and (with auth on) which credential authorises which request.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)] // test code

use std::time::Duration;

use awcp_proto::engine::executor::{Credential, Request, RequiredAuth, Response};
use awcp_proto::engine::RequestId;
use awcp_proto::{
    decode_message, AuthType, DelegationId, ErrorCode, Executor, ExecutorConfig, ExecutorInput,
    ExecutorOutput, Timestamp,
};

fn t(ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(1_700_000_000_000 + ms)
}

fn invite(id: &str, ttl: u64) -> Request {
    invite_with_auth(id, ttl, "")
}

/// An INVITE with `auth` (a JSON fragment such as `,"auth":{…}`, or empty).
fn invite_with_auth(id: &str, ttl: u64, auth: &str) -> Request {
    let json = format!(
        r#"{{"version":"1","type":"INVITE","delegationId":"{id}",
        "task":{{"description":"d","prompt":"p"}},"lease":{{"ttlSeconds":{ttl},"accessMode":"rw"}},
        "environment":{{"resources":[{{"name":"workspace","type":"fs","mode":"rw"}}]}}{auth}}}"#
    );
    message(&json)
}

fn message(json: &str) -> Request {
    let (m, d) = decode_message(json.as_bytes()).unwrap();
    Request::Message(Box::new(m), d)
}

fn start(id: &str) -> Request {
    message(&format!(
        r#"{{"version":"1","type":"START","delegationId":"{id}","lease":{{"expiresAt":"2099-01-01T00:00:00.000Z","accessMode":"rw"}},"transportHandle":{{"transport":"archive","workspaceBase64":"","checksum":"00"}}}}"#
    ))
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
                ExecutorOutput::Release { id, .. } => {
                    inputs.push(ExecutorInput::Released { id, result: Ok(()) })
                }
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
    ask_with(ex, now, n, None, body)
}

fn ask_with(
    ex: &mut Executor,
    now: Timestamp,
    n: u64,
    credential: Option<Credential>,
    body: Request,
) -> Response {
    ex.handle(
        now,
        ExecutorInput::Request {
            request: RequestId(n),
            credential,
            origin: None,
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
}

/// The deadline is configurable and independent of the lease.
#[test]
fn start_deadline_is_configurable() {
    let mut ex = Executor::new(ExecutorConfig {
        start_timeout: Duration::from_secs(5),
        ..ExecutorConfig::default()
    });
    assert!(is_accept(&ask(&mut ex, t(0), 1, invite("dlg_a", 3600))));
    ex.handle_timeout(t(4_000));
    drain(&mut ex, t(4_000));
    assert_eq!(ex.status().pending, 1);
    ex.handle_timeout(t(5_000));
    drain(&mut ex, t(5_000));
    assert_eq!(ex.status().pending, 0);
    // A late START learns why.
    match ask(&mut ex, t(6_000), 2, start("dlg_a")) {
        Response::Error { message, .. } => {
            assert_eq!(message.error.code, ErrorCode::StartExpired);
            assert!(
                message.error.message.contains("no START within 5 s"),
                "{message:?}"
            );
        }
        other => panic!("{other:?}"),
    }
}

const TOKEN: &str = "s3cret-token";
const REF_ID: &str = "dlg_0a1b2c3d4e5f60718293a4b5c6d7e8f9";

fn auth_executor() -> Executor {
    Executor::new(ExecutorConfig {
        auth: Some(RequiredAuth {
            types: vec![AuthType::Bearer],
            credential: TOKEN.into(),
        }),
        ..ExecutorConfig::default()
    })
}

fn auth_field(secret: &str) -> String {
    format!(r#","auth":{{"type":"bearer","credential":"{secret}"}}"#)
}

fn status(r: &Response) -> u16 {
    r.http_status()
}

/// The reference delegator's way: credential in INVITE's `auth` only; START names the
/// delegation and carries no header. A wrong header is still refused; the record keeps a
/// digest, not the secret; a restart restores the binding.
#[test]
fn invite_auth_field_binds_the_delegation_id() {
    let mut ex = auth_executor();
    let r = ask(
        &mut ex,
        t(0),
        1,
        invite_with_auth(REF_ID, 600, &auth_field(TOKEN)),
    );
    assert!(is_accept(&r), "{r:?}");
    let bad = Some(Credential::bearer("nope"));
    assert_eq!(status(&ask_with(&mut ex, t(1), 2, bad, start(REF_ID))), 401);
    assert_eq!(status(&ask(&mut ex, t(2), 3, start(REF_ID))), 200);
    let id = DelegationId::new(REF_ID).unwrap();
    assert!(ex.authorize(Some(&id), None).is_ok());
    assert!(ex.authorize(None, None).is_err(), "status needs the header");
    let other = DelegationId::new("dlg_ffffffffffffffffffffffffffffffff").unwrap();
    assert!(ex.authorize(Some(&other), None).is_err());
    let record = ex.record(&id).unwrap();
    let text = record.to_string();
    assert!(!text.contains(TOKEN), "{text}");
    assert_eq!(record["auth"]["binding"], "delegationId");
    // Restored after a restart: still bound to the id, still refusing a wrong header.
    let mut ex2 = auth_executor();
    assert_eq!(ex2.restore(t(10), &[record]), 1);
    assert!(ex2.authorize(Some(&id), None).is_ok());
    assert!(ex2
        .authorize(Some(&id), Some(&Credential::bearer("nope")))
        .is_err());
    assert!(ex2
        .authorize(Some(&id), Some(&Credential::bearer(TOKEN)))
        .is_ok());
}

/// Our delegator's way: the INVITE carries a header, so every later request must too.
#[test]
fn invite_with_a_header_binds_every_later_request_to_the_header() {
    let mut ex = auth_executor();
    let good = Some(Credential::bearer(TOKEN));
    let r = ask_with(
        &mut ex,
        t(0),
        1,
        good.clone(),
        invite_with_auth(REF_ID, 600, &auth_field(TOKEN)),
    );
    assert!(is_accept(&r), "{r:?}");
    assert_eq!(status(&ask(&mut ex, t(1), 2, start(REF_ID))), 401);
    let api = Some(Credential::api_key(TOKEN));
    assert_eq!(
        status(&ask_with(&mut ex, t(1), 3, api, start(REF_ID))),
        401,
        "bearer only"
    );
    assert_eq!(
        status(&ask_with(&mut ex, t(2), 4, good, start(REF_ID))),
        200
    );
    let id = DelegationId::new(REF_ID).unwrap();
    assert_eq!(ex.record(&id).unwrap()["auth"]["binding"], "header");
}

/// INVITEs with a wrong credential, a wrong type, or a guessable id in the reference mode are
/// refused with AUTH_FAILED, and nothing is allocated for them.
#[test]
fn invites_that_do_not_authenticate_allocate_nothing() {
    let mut ex = auth_executor();
    let cases = [
        invite(REF_ID, 600),
        invite_with_auth(REF_ID, 600, &auth_field("nope")),
        invite_with_auth(
            REF_ID,
            600,
            &format!(r#","auth":{{"type":"api_key","credential":"{TOKEN}"}}"#),
        ),
        invite_with_auth("dlg_a1b2c3d4", 600, &auth_field(TOKEN)),
    ];
    for (n, body) in cases.into_iter().enumerate() {
        match ask(&mut ex, t(0), n as u64, body) {
            Response::Error { message, .. } => {
                assert_eq!(message.error.code, ErrorCode::AuthFailed)
            }
            other => panic!("case {n}: {other:?}"),
        }
    }
    assert_eq!(ex.status().pending, 0);
    assert_eq!(ex.live_count(), 0);
}

/// Journal records written by older versions hold the secret in clear text; restoring one
/// keeps it verifiable (bound to headers), and the record written back holds only a digest.
#[test]
fn legacy_clear_text_records_are_restored_as_digests() {
    let mut ex = Executor::new(ExecutorConfig::default());
    assert!(is_accept(&ask(&mut ex, t(0), 1, invite(REF_ID, 600))));
    let id = DelegationId::new(REF_ID).unwrap();
    let mut record = ex.record(&id).unwrap();
    record["credential"] = TOKEN.into();
    record["state"] = "completed".into();
    let mut ex2 = auth_executor();
    assert_eq!(ex2.restore(t(10), &[record]), 1);
    assert!(ex2.authorize(Some(&id), None).is_err());
    assert!(ex2
        .authorize(Some(&id), Some(&Credential::bearer(TOKEN)))
        .is_ok());
    let again = ex2.record(&id).unwrap().to_string();
    assert!(!again.contains(TOKEN), "{again}");
}

/// Where a delegation's snapshot URLs start is bound by the delegator's own accepted INVITE
/// or START: a START from someone else (wrong credential) naming another origin is refused
/// and changes nothing, so the snapshot still goes to the origin the delegator used.
#[test]
fn a_refused_request_cannot_redirect_snapshot_urls() {
    use awcp_proto::engine::executor::{SnapshotDelivery, WorkspaceLayout};
    use awcp_proto::engine::TaskOutcome;
    let id = "dlg_5a1b2c3d4e5f60718293a4b5c6d7e8f9";
    let mut ex = auth_executor();
    let good = || Some(Credential::bearer(TOKEN));
    let features = r#","features":["archive-url"]"#;
    let send = |ex: &mut Executor, n: u64, cred, origin: &str, body| {
        ex.handle(
            t(n),
            ExecutorInput::Request {
                request: RequestId(n),
                credential: cred,
                origin: Some(origin.to_owned()),
                body,
            },
        )
        .unwrap();
        drain(ex, t(n))
            .into_iter()
            .find(|(r, _)| *r == RequestId(n))
            .map(|(_, resp)| resp)
    };
    let r = send(
        &mut ex,
        1,
        good(),
        "http://delegator-view:10200",
        invite_with_auth(id, 600, features),
    );
    assert!(r.as_ref().is_some_and(is_accept), "{r:?}");
    send(&mut ex, 2, good(), "http://delegator-view:10200", start(id));
    let r = send(
        &mut ex,
        3,
        Some(Credential::bearer("nope")),
        "http://evil.example",
        start(id),
    );
    assert_eq!(r.as_ref().map(status), Some(401), "{r:?}");
    // Set up, run and finish the task; the capture says where the snapshot goes.
    let did = DelegationId::new(id).unwrap();
    ex.handle(
        t(4),
        ExecutorInput::SetupCompleted {
            id: did.clone(),
            result: Ok(WorkspaceLayout::PerResource),
        },
    )
    .unwrap();
    ex.handle(
        t(5),
        ExecutorInput::TaskFinished {
            id: did.clone(),
            result: Ok(TaskOutcome {
                summary: "done".into(),
                highlights: Vec::new(),
            }),
        },
    )
    .unwrap();
    let delivery = std::iter::from_fn(|| ex.poll_output())
        .find_map(|o| match o {
            ExecutorOutput::CaptureSnapshot { delivery, .. } => Some(delivery),
            _ => None,
        })
        .expect("the finished task's snapshot is captured");
    assert_eq!(
        delivery,
        SnapshotDelivery::ByUrl {
            base: "http://delegator-view:10200".into()
        }
    );
}
