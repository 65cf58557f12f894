//! Both engines in memory ([`crate::engine::pair`]): whole lifecycles, transcripts of the
//! \[R\] and \[S\] exchanges, and mechanisms reached through the scenario builder.

#![allow(clippy::wildcard_enum_match_arm)]

use crate::engine::pair::{Pair, TaskScript};
use crate::engine::scenario::Scenario;
use crate::error::ErrorCode;
use crate::id::DelegationId;
use crate::state::{AssignmentState, DelegationState};
use crate::wire::Dialect;

use super::{ExecutorConfig, ExecutorEvent, ExecutorTimer};

fn ended(p: &Pair, id: &DelegationId) -> Option<(AssignmentState, Option<ErrorCode>)> {
    p.executor_events.iter().find_map(|e| match e {
        ExecutorEvent::Ended {
            id: i,
            state,
            error,
        } if i == id => Some((*state, error.as_ref().map(|e| e.code.clone()))),
        _ => None,
    })
}

fn forgotten(p: &Pair, id: &DelegationId) -> bool {
    p.executor_events
        .iter()
        .any(|e| matches!(e, ExecutorEvent::Forgotten { id: i } if i == id))
}

#[test]
fn a_whole_lifecycle_completes_on_both_sides_and_the_executor_forgets_after_the_ack() {
    let s = Scenario::new().to_end();
    let (p, id) = (&s.pair, &s.id);
    assert_eq!(ended(p, id), Some((AssignmentState::Completed, None)));
    assert_eq!(p.delegation_state(id), Some(DelegationState::Completed));
    assert!(forgotten(p, id), "acknowledged, so forgotten");
    assert_eq!(p.executor.live_count(), 0);
}

/// The order of what both sides do, for one \[R\] delegation: a change in emission order shows
/// as a readable diff.
const REFERENCE_TRANSCRIPT: &[&str] = &[
    "d> ScanWorkspace",
    "d> Event StateChanged invited",
    "d> Send INVITE",
    "e> Event RecordChanged",
    "e> AllocateWorkDir",
    "e> Event InviteReceived",
    "e> Respond",
    "d> Event StateChanged accepted",
    "d> PrepareTransport",
    "d> OpenEventStream",
    "d> Event StateChanged started",
    "d> Send START",
    "e> Event StateChanged active",
    "e> Respond",
    "e> SetupTransport",
    "e> StreamEvent status",
    "e> RunTask",
    "d> Event StateChanged running",
    "d> Event Progress",
    "e> CaptureSnapshot",
    "e> Event StateChanged completed",
    "e> StreamEvent snapshot",
    "e> StreamEvent done",
    "e> CloseStream",
    "e> Release",
    "d> StoreSnapshot",
    "d> Event Snapshot",
    "e> Event Ended completed",
    "d> Event StateChanged completed",
    "d> CloseEventStream",
    "d> Event Snapshot",
    "d> ApplySnapshot",
    "d> Event Snapshot",
    "d> CloseApply",
    "d> DeleteStoredSnapshot",
    "d> SendAck",
    "d> ReleaseTransport",
    "d> Event Ended completed",
    "e> Respond",
    "e> Event Forgotten",
    "e> DropSnapshot",
    "d> Event Forgotten",
];

#[test]
fn the_reference_exchange_follows_its_transcript() {
    let mut s = Scenario::new().recording();
    s.pair.delegate(&s.id, Dialect::Reference);
    s.pair.run(1_000);
    let got: Vec<&str> = s.pair.transcript.iter().map(String::as_str).collect();
    assert_eq!(
        got,
        REFERENCE_TRANSCRIPT,
        "full transcript:\n{}",
        got.join("\n")
    );
}

/// The executor's journal, kept by the write-ahead rule of `ExecutorOutput::journaling`:
/// every output the delegator sees or that changes files goes out with the engine's current
/// record durable (a change the engine made without an event, or announced after such an
/// output, shows as stale: the snapshot event once went out before the record holding it).
#[test]
fn the_executor_journal_is_durable_before_anything_it_leads_to() {
    for dialect in [Dialect::Reference, Dialect::Seed] {
        let mut s = Scenario::new().recording();
        s.pair.delegate(&s.id, dialect);
        s.pair.run(1_000);
        let j = &s.pair.executor_journal;
        assert!(
            j.stale.is_empty(),
            "{dialect:?}: stale records {:?}",
            j.stale
        );
        assert!(forgotten(&s.pair, &s.id), "{dialect:?}");
        assert!(
            j.written.is_empty() && j.unsynced.is_empty(),
            "{dialect:?}: {j:?}"
        );
        // The first record is created durably; then one sync each before ACCEPT, START's
        // answer, the snapshot (or done) event and the ACK's answer.
        assert!(j.syncs <= 4, "{dialect:?}: {} syncs", j.syncs);
    }
}

#[test]
fn the_seed_exchange_sends_the_result_inline_with_done_and_no_snapshot_event() {
    let mut s = Scenario::new().recording();
    s.pair.delegate(&s.id, Dialect::Seed);
    s.pair.run(1_000);
    let got: Vec<&str> = s.pair.transcript.iter().map(String::as_str).collect();
    let all = got.join("\n");
    assert!(!all.contains("StreamEvent snapshot"), "{all}");
    let capture = got.iter().position(|l| *l == "e> CaptureSnapshot");
    let done = got.iter().position(|l| *l == "e> StreamEvent done");
    assert!(capture.is_some() && capture < done, "{all}");
    assert_eq!(
        ended(&s.pair, &s.id),
        Some((AssignmentState::Completed, None))
    );
    assert_eq!(
        s.pair.delegation_state(&s.id),
        Some(DelegationState::Completed)
    );
}

#[test]
fn the_lease_timer_stops_a_running_task_and_fails_both_sides_with_expired() {
    let s = Scenario::new().to_running().fire(ExecutorTimer::Lease);
    let (p, id) = (&s.pair, &s.id);
    assert_eq!(
        ended(p, id),
        Some((AssignmentState::Error, Some(ErrorCode::Expired)))
    );
    assert_eq!(
        p.executor.live_count(),
        0,
        "released after the task stopped"
    );
}

#[test]
fn poll_timeout_names_queued_output_then_the_timer_that_is_due() {
    let mut s = Scenario::new().to_running();
    let lease = s.pair.executor.timer_deadline(&s.id, ExecutorTimer::Lease);
    assert!(lease.is_some(), "a running task's lease is armed");
    assert_eq!(
        s.pair.executor.poll_timeout(),
        lease.map(|at| (at, ExecutorTimer::Lease)),
        "running: the lease is the next reason to wake"
    );
    s.pair.executor.shutdown(s.pair.now);
    assert_eq!(
        s.pair.executor.poll_timeout(),
        Some((s.pair.now, ExecutorTimer::Output)),
        "outputs are queued: due now"
    );
    s.pair.drive();
}

#[test]
fn the_stop_grace_timer_releases_a_task_that_does_not_stop() {
    let mut s = Scenario::new().to_running();
    // The task ignores StopTask: nothing answers it.
    s.pair.task = TaskScript::Hang;
    let handle = crate::engine::TaskHandle("4242:4242:boot".into());
    s.pair
        .executor
        .handle(
            s.pair.now,
            super::ExecutorInput::TaskSpawned {
                id: s.id.clone(),
                handle: handle.clone(),
            },
        )
        .unwrap();
    s.pair.executor.shutdown(s.pair.now);
    // Swallow the StopTask answer the pair would give: drive only the delegator side.
    while let Some(out) = s.pair.executor.poll_output() {
        if let super::ExecutorOutput::Event(ev) = out {
            s.pair.executor_events.push(ev);
        }
    }
    assert_eq!(s.pair.executor.live_count(), 1, "held while the task runs");
    let s = s.fire(ExecutorTimer::StopGrace);
    assert_eq!(s.pair.executor.live_count(), 0);
    assert_eq!(
        ended(&s.pair, &s.id),
        Some((AssignmentState::Error, Some(ErrorCode::Cancelled)))
    );
    // Released, but the task that did not stop stays journalled: an executor restarted from
    // this record ends it.
    let record = s.pair.executor.record(&s.id).unwrap();
    assert_eq!(record["task"], handle.0.as_str());
    let mut restarted = super::Executor::new(super::ExecutorConfig::default());
    assert_eq!(restarted.restore(s.pair.now, &[record]), 1);
    let outputs: Vec<_> = std::iter::from_fn(|| restarted.poll_output()).collect();
    assert!(
        outputs.iter().any(|o| matches!(o,
            super::ExecutorOutput::EndTask { id, handle: h } if *id == s.id && *h == handle)),
        "{outputs:?}"
    );
}

#[test]
fn a_task_failure_fails_both_sides_with_task_failed() {
    let mut s = Scenario::new();
    s.pair.task = TaskScript::Fail("exit 3".into());
    let s = s.to_end();
    assert_eq!(
        ended(&s.pair, &s.id),
        Some((AssignmentState::Error, Some(ErrorCode::TaskFailed)))
    );
    assert_eq!(s.pair.delegation_state(&s.id), Some(DelegationState::Error));
}

#[test]
fn a_cancel_from_the_delegator_stops_the_task_and_releases() {
    let mut s = Scenario::new().to_running();
    s.pair.delegator.cancel(s.pair.now, &s.id).unwrap();
    s.pair.run(100);
    assert_eq!(
        ended(&s.pair, &s.id),
        Some((AssignmentState::Error, Some(ErrorCode::Cancelled)))
    );
    assert_eq!(
        s.pair.delegation_state(&s.id),
        Some(DelegationState::Cancelled)
    );
    assert_eq!(s.pair.executor.live_count(), 0);
}

#[test]
fn without_auto_accept_the_application_accepts_or_declines() {
    let manual = || {
        Pair::new(
            Default::default(),
            ExecutorConfig {
                auto_accept: false,
                ..ExecutorConfig::default()
            },
        )
    };
    // Accepted by the application: the lifecycle completes.
    let mut p = manual();
    let id = DelegationId::new("dlg_manual").unwrap();
    p.delegate(&id, Dialect::Reference);
    p.drive();
    assert!(p.executor_events.iter().any(|e| matches!(
        e,
        ExecutorEvent::InviteReceived {
            needs_decision: true,
            ..
        }
    )));
    assert_eq!(p.assignment_state(&id), Some(AssignmentState::Pending));
    p.executor.accept_invite(p.now, &id).unwrap();
    assert!(
        p.executor.accept_invite(p.now, &id).is_err(),
        "decided once"
    );
    p.run(1_000);
    assert_eq!(ended(&p, &id), Some((AssignmentState::Completed, None)));
    // Declined: the delegator learns why.
    let mut p = manual();
    p.delegate(&id, Dialect::Reference);
    p.drive();
    p.executor
        .decline_invite(
            p.now,
            &id,
            crate::error::ErrorInfo::new(ErrorCode::Declined, "not today"),
        )
        .unwrap();
    p.run(100);
    assert_eq!(p.delegation_state(&id), Some(DelegationState::Error));
    assert_eq!(p.executor.live_count(), 0);
}

#[test]
fn a_shutting_down_executor_declines_new_invitations_and_allocates_nothing() {
    let mut p = Pair::default_pair();
    p.executor.shutdown(p.now);
    let id = DelegationId::new("dlg_late").unwrap();
    p.delegate(&id, Dialect::Reference);
    p.run(100);
    assert_eq!(p.delegation_state(&id), Some(DelegationState::Error));
    assert!(p.executor.assignment(&id).is_none(), "nothing allocated");
    let error = p
        .delegator_events
        .iter()
        .find_map(|e| match e {
            crate::engine::delegator::DelegatorEvent::Ended { id: i, error, .. } if *i == id => {
                error.clone()
            }
            _ => None,
        })
        .expect("the delegation ended with an error");
    assert_eq!(error.code, ErrorCode::Declined);
    assert!(error.message.contains("shutting down"), "{error:?}");
}

#[test]
fn an_unreachable_executor_fails_the_delegation_and_holds_nothing() {
    let mut s = Scenario::new();
    s.pair.unreachable = true;
    let s = s.to_end();
    assert_eq!(s.pair.delegation_state(&s.id), Some(DelegationState::Error));
    assert_eq!(s.pair.executor.live_count(), 0);
}

#[test]
fn protocol_violations_by_the_delegator_are_events_the_application_can_count() {
    use crate::engine::executor::{ExecutorInput, Misbehaviour, Request};
    use crate::engine::RequestId;
    use crate::wire::{Accept, ActiveLease, Message, Start};
    let mut p = Pair::new(
        Default::default(),
        ExecutorConfig {
            auto_accept: false,
            ..ExecutorConfig::default()
        },
    );
    let id = DelegationId::new("dlg_misbehaving").unwrap();
    p.delegate(&id, Dialect::Reference);
    p.drive();
    let send = |p: &mut Pair, m: Message| {
        p.executor
            .handle(
                p.now,
                ExecutorInput::Request {
                    request: RequestId(9_000),
                    credential: None,
                    origin: None,
                    body: Request::Message(Box::new(m), Dialect::Reference),
                },
            )
            .unwrap();
        p.drive();
    };
    // An ACCEPT sent to the executor.
    send(
        &mut p,
        Message::Accept(Accept {
            delegation_id: id.clone(),
            work_dir: "/w".into(),
            constraints: None,
            retention_ms: None,
            features: Vec::new(),
        }),
    );
    // START while the application has not accepted yet.
    let handle = crate::wire::decode_handle(
        &serde_json::json!({
            "transport": "archive",
            "workspaceBase64": "UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA==",
            "checksum": "0000000000000000000000000000000000000000000000000000000000000000",
        }),
        "transportHandle",
    )
    .unwrap();
    let expires_at = p.now.saturating_add(std::time::Duration::from_secs(60));
    send(
        &mut p,
        Message::Start(Start {
            delegation_id: id.clone(),
            lease: ActiveLease {
                expires_at,
                access_mode: crate::wire::AccessMode::Rw,
            },
            handle,
        }),
    );
    let seen: Vec<&Misbehaviour> = p
        .executor_events
        .iter()
        .filter_map(|e| match e {
            ExecutorEvent::PeerMisbehaved { id: i, reason } if *i == id => Some(reason),
            _ => None,
        })
        .collect();
    assert_eq!(
        seen,
        [
            &Misbehaviour::UnexpectedMessage("ACCEPT"),
            &Misbehaviour::StartBeforeAccept
        ]
    );
}

/// Where snapshot URLs start is the engine's decision: the origin the delegator used for its
/// accepted INVITE/START, a configured public URL before that, inline for \[S\] peers.
mod snapshot_delivery {
    use super::*;
    use crate::engine::executor::SnapshotDelivery;
    use crate::engine::pair::Pair;

    #[test]
    fn snapshot_urls_start_at_the_origin_the_delegator_used() {
        let s = Scenario::new().to_end();
        assert_eq!(
            s.pair.captures,
            vec![SnapshotDelivery::ByUrl {
                base: "http://executor.invalid".into()
            }]
        );
    }

    #[test]
    fn a_public_url_wins_over_the_origin() {
        let executor = ExecutorConfig {
            public_url: Some("https://exec.example".into()),
            ..ExecutorConfig::default()
        };
        let s = Scenario::with(Pair::new(Default::default(), executor)).to_end();
        assert_eq!(
            s.pair.captures,
            vec![SnapshotDelivery::ByUrl {
                base: "https://exec.example".into()
            }]
        );
        assert_eq!(
            ended(&s.pair, &s.id),
            Some((AssignmentState::Completed, None))
        );
    }

    /// Storage: the executor uploads to the handle's `uploadUrl` and names it (WIRE.md
    /// §11.4); the delegator stores from its own result object.
    #[test]
    fn a_storage_result_is_uploaded_and_read_back_from_the_delegators_object() {
        let mut s = Scenario::new();
        let mut r = Pair::request(&s.id, Dialect::Reference);
        r.transport = crate::wire::TransportKind::Storage;
        s.pair.executor = crate::engine::executor::Executor::new(ExecutorConfig {
            transports: vec![
                crate::wire::TransportKind::Archive,
                crate::wire::TransportKind::Storage,
            ],
            ..ExecutorConfig::default()
        });
        s.pair.delegator.delegate(s.pair.now, r).unwrap();
        s.pair.run(1_000);
        let want = format!(
            "http://s3.invalid/bucket/workspaces/{}-result.zip?X-Amz-Signature=00",
            s.id
        );
        assert_eq!(
            s.pair.captures,
            vec![SnapshotDelivery::Upload { url: want }]
        );
        assert_eq!(
            s.pair.stored_from,
            vec![crate::engine::delegator::ResultSource::StorageObject]
        );
        assert_eq!(
            ended(&s.pair, &s.id),
            Some((AssignmentState::Completed, None))
        );
    }

    #[test]
    fn storage_urls_dead_at_start_end_the_assignment_with_a_clear_error() {
        let mut s = Scenario::new();
        let mut r = Pair::request(&s.id, Dialect::Reference);
        r.transport = crate::wire::TransportKind::Storage;
        s.pair.executor = crate::engine::executor::Executor::new(ExecutorConfig {
            transports: vec![crate::wire::TransportKind::Storage],
            ..ExecutorConfig::default()
        });
        s.pair.storage_urls_expire_at = Some(s.pair.now);
        s.pair.delegator.delegate(s.pair.now, r).unwrap();
        s.pair.run(1_000);
        assert!(s.pair.captures.is_empty());
        assert_eq!(
            ended(&s.pair, &s.id),
            Some((AssignmentState::Error, Some(ErrorCode::StartExpired)))
        );
        let said = s.pair.executor_events.iter().any(|e| {
            matches!(e, ExecutorEvent::Ended { error: Some(e), .. }
                if e.message.contains("storage URLs had expired"))
        });
        assert!(said, "{:?}", s.pair.executor_events);
    }

    #[test]
    fn seed_peers_get_their_result_inline() {
        let mut s = Scenario::new();
        s.pair.delegate(&s.id, Dialect::Seed);
        s.pair.run(1_000);
        assert_eq!(s.pair.captures, vec![SnapshotDelivery::Inline]);
    }
}
