//! The handshake, driven by hand: INVITE answers, ACCEPT, START once both the transport and
//! the event stream are ready, and failed requests named as they happened.

#![allow(clippy::wildcard_enum_match_arm)] // tests pick the outputs they look at

use super::*;
use crate::engine::delegator::tests::{
    accept, archive_handle, drain, events, id, invited, running, t,
};

fn answer(d: &mut Delegator, to: Outbound, reply: Reply) -> Vec<DelegatorOutput> {
    d.handle(
        t(2),
        DelegatorInput::Reply {
            id: id(),
            to,
            reply,
        },
    )
    .unwrap();
    drain(d)
}

fn misbehaviours(out: &[DelegatorOutput]) -> Vec<PeerMisbehavior> {
    events(out)
        .into_iter()
        .filter_map(|e| match e {
            DelegatorEvent::PeerMisbehaved { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn an_invite_answered_with_a_bare_ok_is_the_executors_fault_and_abandons() {
    let mut d = invited();
    let out = answer(&mut d, Outbound::Invite, Reply::Ok);
    assert_eq!(
        misbehaviours(&out),
        vec![PeerMisbehavior::UnexpectedReply {
            to: Outbound::Invite
        }]
    );
    assert_eq!(d.get(&id()).unwrap().state, DelegationState::Error);
    assert!(out.iter().any(|o| matches!(
        o,
        DelegatorOutput::SendMessage { message, .. } if matches!(**message, Message::Error(_))
    )));
}

#[test]
fn an_unusable_answer_is_the_executors_fault() {
    let mut d = invited();
    let failure = RequestFailure::Unusable("HTTP 502: <html>".into());
    let out = answer(&mut d, Outbound::Invite, Reply::Failed(failure));
    assert!(matches!(
        misbehaviours(&out).as_slice(),
        [PeerMisbehavior::UnusableReply { to: Outbound::Invite, detail }] if detail.contains("502")
    ));
    let err = d.get(&id()).unwrap().error.unwrap();
    // Issue 48.8: not a TIMEOUT (it answered at once), but an answer that is not AWCP.
    assert_eq!(err.code, ErrorCode::ProtocolError);
    assert_eq!(
        err.message,
        "INVITE failed: the answer is not AWCP: HTTP 502: <html>"
    );
}

#[test]
fn a_network_failure_is_nobodys_fault() {
    let mut d = invited();
    let failure = RequestFailure::Network("connection refused".into());
    let out = answer(&mut d, Outbound::Invite, Reply::Failed(failure));
    assert!(misbehaviours(&out).is_empty());
    assert_eq!(d.get(&id()).unwrap().state, DelegationState::Error);
}

#[test]
fn failures_are_named_as_they_happened() {
    for (failure, code) in [
        (
            RequestFailure::Unreachable("connect 127.0.0.1:1: refused".into()),
            ErrorCode::Unreachable,
        ),
        (
            RequestFailure::TimedOut("timed out after 30s".into()),
            ErrorCode::Timeout,
        ),
        (
            RequestFailure::Network("reset".into()),
            ErrorCode::Unreachable,
        ),
    ] {
        let mut d = invited();
        answer(&mut d, Outbound::Invite, Reply::Failed(failure));
        let err = d.get(&id()).unwrap().error.unwrap();
        assert_eq!(err.code, code, "{err:?}");
        assert!(!err.hint.unwrap_or_default().contains("timed out") || code == ErrorCode::Timeout);
    }
}

#[test]
fn start_waits_for_both_the_transport_and_the_event_stream() {
    let mut d = invited();
    let out = answer(&mut d, Outbound::Invite, Reply::Accept(Box::new(accept())));
    assert!(out
        .iter()
        .any(|o| matches!(o, DelegatorOutput::PrepareTransport { .. })));
    assert!(out
        .iter()
        .any(|o| matches!(o, DelegatorOutput::OpenEventStream { .. })));
    let handle = archive_handle();
    d.handle(
        t(3),
        DelegatorInput::TransportPrepared {
            id: id(),
            result: Ok(Box::new(handle.clone())),
            archive_token: None,
        },
    )
    .unwrap();
    assert!(
        drain(&mut d).is_empty(),
        "no START before the stream is open"
    );
    d.handle(t(4), DelegatorInput::EventStreamOpened { id: id() })
        .unwrap();
    let out = drain(&mut d);
    let starts: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            DelegatorOutput::SendMessage { message, .. } => match &**message {
                Message::Start(s) => Some(s),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(starts.len(), 1);
    assert_eq!(starts[0].handle, handle);
    // START took the handle: a second "opened" sends nothing.
    d.handle(t(5), DelegatorInput::EventStreamOpened { id: id() })
        .unwrap();
    assert!(drain(&mut d).is_empty());
}

#[test]
fn an_accept_after_a_cancel_frees_the_executors_assignment() {
    let mut d = invited();
    d.cancel(t(2), &id()).unwrap();
    drain(&mut d);
    let out = answer(&mut d, Outbound::Invite, Reply::Accept(Box::new(accept())));
    assert!(out.iter().any(|o| matches!(
        o,
        DelegatorOutput::SendMessage { message, .. } if matches!(**message, Message::Error(_))
    )));
    assert!(!out
        .iter()
        .any(|o| matches!(o, DelegatorOutput::PrepareTransport { .. })));
    assert!(misbehaviours(&out).is_empty(), "a race, not misbehaviour");
}

#[test]
fn a_late_odd_answer_to_start_changes_nothing() {
    let mut d = running(SnapshotMode::Auto);
    // Running already: a late odd answer to START changes nothing.
    let out = answer(&mut d, Outbound::Start, Reply::Accept(Box::new(accept())));
    assert!(out.is_empty());
    assert_eq!(d.get(&id()).unwrap().state, DelegationState::Running);
}

#[test]
fn resources_are_never_lent_with_more_access_than_the_delegation_asks() {
    let mut d = Delegator::new(DelegatorConfig::default());
    let mut req = crate::engine::delegator::tests::request(SnapshotMode::Auto);
    req.access_mode = AccessMode::Ro;
    d.delegate(t(0), req).unwrap();
    let v = d.get(&id()).unwrap();
    assert!(v.request.resources.iter().all(|r| r.mode == AccessMode::Ro));
}

#[test]
fn every_message_names_the_request_its_answer_belongs_to() {
    let mut d = Delegator::new(DelegatorConfig::default());
    d.delegate(
        t(0),
        crate::engine::delegator::tests::request(SnapshotMode::Auto),
    )
    .unwrap();
    d.handle(
        t(1),
        DelegatorInput::ScanCompleted {
            id: id(),
            result: Ok(WorkspaceStats::default()),
        },
    )
    .unwrap();
    d.cancel(t(2), &id()).unwrap();
    let out = drain(&mut d);
    let sent: Vec<(Outbound, &str)> = out
        .iter()
        .filter_map(|o| match o {
            DelegatorOutput::SendMessage { to, message, .. } => Some((*to, message.type_str())),
            _ => None,
        })
        .collect();
    assert_eq!(sent, vec![(Outbound::Invite, "INVITE")]);
    assert!(out
        .iter()
        .any(|o| matches!(o, DelegatorOutput::SendCancel { .. })));
    assert!(Outbound::Cancel.is_farewell() && Outbound::Ack.is_farewell());
    assert!(Outbound::Error.is_farewell());
    assert!(!Outbound::Invite.is_farewell() && !Outbound::Start.is_farewell());
}

#[test]
fn started_means_start_went_out_or_the_delegation_ended_without_error() {
    let other = DelegationId::new("dlg_other").unwrap();
    let changed = |to| DelegatorEvent::StateChanged {
        id: id(),
        from: DelegationState::Accepted,
        to,
    };
    assert_eq!(
        changed(DelegationState::Started).start_outcome(&id()),
        Some(Ok(()))
    );
    assert_eq!(changed(DelegationState::Invited).start_outcome(&id()), None);
    assert_eq!(
        changed(DelegationState::Started).start_outcome(&other),
        None
    );
    let ended = |error: Option<ErrorInfo>| DelegatorEvent::Ended {
        id: id(),
        state: DelegationState::Error,
        result: None,
        error: error.map(Box::new),
    };
    let declined = ErrorInfo::bare(ErrorCode::Declined, "no");
    assert_eq!(
        ended(Some(declined.clone())).start_outcome(&id()),
        Some(Err(declined))
    );
    let cancelled = ErrorInfo::bare(ErrorCode::Cancelled, "by you");
    assert_eq!(ended(Some(cancelled)).start_outcome(&id()), Some(Ok(())));
}
