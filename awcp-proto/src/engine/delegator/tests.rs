//! The result-safety rules of the engine, driven by hand: store before apply, ack only
//! after stored, failed applies stay pending, one apply at a time, restarts mid-apply.

// Tests pick the outputs they look at out of the rest.
#![allow(clippy::wildcard_enum_match_arm)]

use super::*;
use crate::wire::{ArchiveHandle, StatusEvent, TaskStatus};

const PEER: &str = "http://127.0.0.1:10200/awcp";

pub(super) fn t(ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(1_700_000_000_000 + ms)
}

pub(super) fn id() -> DelegationId {
    DelegationId::new("dlg_engine_test").unwrap()
}

pub(super) fn sid(s: &str) -> SnapshotId {
    SnapshotId::new(s).unwrap()
}

pub(super) fn drain(d: &mut Delegator) -> Vec<DelegatorOutput> {
    std::iter::from_fn(|| d.poll_output()).collect()
}

pub(super) fn event(kind: TaskEventKind) -> DelegatorInput {
    DelegatorInput::TaskEvent {
        event: Box::new(TaskEvent {
            delegation_id: id(),
            timestamp: t(0),
            kind,
        }),
        event_id: None,
    }
}

pub(super) fn snapshot(s: &str) -> DelegatorInput {
    event(TaskEventKind::Snapshot(SnapshotEvent {
        snapshot_id: sid(s),
        summary: "edited".into(),
        highlights: vec![],
        data: ArchiveData {
            base64: Some("UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA==".into()),
            url: None,
            local_file: None,
            local_file_sha256: None,
        },
        checksum: None,
        recommended: Some(true),
        metadata: BTreeMap::new(),
    }))
}

pub(super) fn done(s: &str) -> DelegatorInput {
    event(TaskEventKind::Done(DoneEvent {
        summary: "done".into(),
        highlights: vec![],
        snapshot_ids: vec![sid(s)],
        recommended_snapshot_id: Some(sid(s)),
        result_base64: None,
        result_local_file: None,
    }))
}

pub(super) fn is_ack(o: &DelegatorOutput) -> bool {
    matches!(o, DelegatorOutput::SendAck { .. })
}

pub(super) fn is_apply(o: &DelegatorOutput) -> bool {
    matches!(o, DelegatorOutput::ApplySnapshot { .. })
}

pub(super) fn stored(s: &str, result: Result<(), StoreFailure>) -> DelegatorInput {
    DelegatorInput::SnapshotStored {
        id: id(),
        snapshot_id: sid(s),
        result,
    }
}

pub(super) fn applied(s: &str, result: Result<(), ErrorInfo>) -> DelegatorInput {
    DelegatorInput::SnapshotApplied {
        id: id(),
        snapshot_id: sid(s),
        result,
        left_out: Vec::new(),
        changed: Vec::new(),
    }
}

/// A running `auto` delegation that received `snap_a` and `done`.
pub(super) fn done_with_snapshot() -> Delegator {
    let mut d = running(SnapshotMode::Auto);
    d.handle(t(2), snapshot("snap_a")).unwrap();
    d.handle(t(2), done("snap_a")).unwrap();
    d
}

pub(super) fn request(mode: SnapshotMode) -> DelegateRequest {
    DelegateRequest {
        id: id(),
        peer: PEER.into(),
        dialect: Dialect::Reference,
        task: TaskSpec {
            description: "d".into(),
            prompt: "p".into(),
        },
        ttl_seconds: 600,
        access_mode: AccessMode::Rw,
        resources: vec![Resource {
            name: crate::ResourceName::new("workspace").unwrap(),
            kind: "fs".into(),
            mode: AccessMode::Rw,
        }],
        transport: TransportKind::Archive,
        snapshot_mode: mode,
        auth: Some(Auth {
            auth_type: crate::wire::AuthType::Bearer,
            credential: "tok".into(),
            metadata: Default::default(),
        }),
        allow_sensitive: false,
        keep_open: false,
    }
}

/// An inline archive handle with an empty archive.
pub(super) fn archive_handle() -> TransportHandle {
    TransportHandle::Archive(ArchiveHandle {
        data: ArchiveData {
            base64: Some(String::new()),
            url: None,
            local_file: None,
            local_file_sha256: None,
        },
        checksum: "00".into(),
        size_bytes: None,
    })
}

/// The executor's ACCEPT of [`id`].
pub(super) fn accept() -> Accept {
    Accept {
        delegation_id: id(),
        work_dir: "/w".into(),
        constraints: None,
        retention_ms: None,
        features: vec![],
    }
}

/// A delegation in `invited` (INVITE sent, no answer yet), outputs drained.
pub(super) fn invited() -> Delegator {
    invited_with(DelegatorConfig::default())
}

/// [`invited`] on a delegator with `config`.
pub(super) fn invited_with(config: DelegatorConfig) -> Delegator {
    let mut d = Delegator::new(config);
    d.delegate(t(0), request(SnapshotMode::Auto)).unwrap();
    d.handle(
        t(1),
        DelegatorInput::ScanCompleted {
            id: id(),
            result: Ok(WorkspaceStats::default()),
        },
    )
    .unwrap();
    drain(&mut d);
    assert_eq!(d.get(&id()).unwrap().state, DelegationState::Invited);
    d
}

/// The events among `out`.
pub(super) fn events(out: &[DelegatorOutput]) -> Vec<&DelegatorEvent> {
    out.iter()
        .filter_map(|o| match o {
            DelegatorOutput::Event(e) => Some(e),
            _ => None,
        })
        .collect()
}

/// A delegation in `started` (START sent, the executor sets up), with `auth` and `mode`.
pub(super) fn started(mode: SnapshotMode) -> Delegator {
    let mut d = Delegator::new(DelegatorConfig::default());
    d.delegate(t(0), request(mode)).unwrap();
    let steps = [
        DelegatorInput::ScanCompleted {
            id: id(),
            result: Ok(WorkspaceStats::default()),
        },
        DelegatorInput::Reply {
            id: id(),
            to: Outbound::Invite,
            reply: Reply::Accept(Box::new(accept())),
        },
        DelegatorInput::TransportPrepared {
            id: id(),
            result: Ok(Box::new(archive_handle())),
            archive_token: None,
        },
        DelegatorInput::EventStreamOpened { id: id() },
    ];
    for s in steps {
        d.handle(t(1), s).unwrap();
    }
    drain(&mut d);
    assert_eq!(d.get(&id()).unwrap().state, DelegationState::Started);
    d
}

/// A delegation in `running`, with `auth` and `mode`.
pub(super) fn running(mode: SnapshotMode) -> Delegator {
    let mut d = started(mode);
    let status = event(TaskEventKind::Status(StatusEvent {
        status: TaskStatus::Running,
        message: None,
        progress: None,
    }));
    d.handle(t(1), status).unwrap();
    drain(&mut d);
    assert_eq!(d.get(&id()).unwrap().state, DelegationState::Running);
    d
}

/// The view keeps the executor's latest progress message, cut to 1 KiB on a character
/// boundary; a status without a message keeps the previous one.
#[test]
fn the_view_keeps_the_latest_progress_message_bounded() {
    let mut d = running(SnapshotMode::Auto);
    assert_eq!(d.get(&id()).unwrap().last_progress, None);
    let say = |d: &mut Delegator, message: Option<String>| {
        let status = event(TaskEventKind::Status(StatusEvent {
            status: TaskStatus::Running,
            message,
            progress: None,
        }));
        d.handle(t(2), status).unwrap();
        drain(d);
    };
    say(&mut d, Some("reading files".into()));
    say(&mut d, None);
    assert_eq!(
        d.get(&id()).unwrap().last_progress.as_deref(),
        Some("reading files")
    );
    say(&mut d, Some("é".repeat(600)));
    let kept = d.get(&id()).unwrap().last_progress.unwrap();
    assert_eq!(kept, "é".repeat(512));
}

pub(super) fn status_of(d: &Delegator, s: &str) -> SnapshotRecord {
    d.get(&id())
        .unwrap()
        .snapshots
        .into_iter()
        .find(|r| r.id == sid(s))
        .unwrap()
}

#[test]
fn auto_snapshots_are_stored_then_applied_and_acked_only_after() {
    let mut d = done_with_snapshot();
    let out = drain(&mut d);
    assert!(out
        .iter()
        .any(|o| matches!(o, DelegatorOutput::StoreSnapshot { .. })));
    assert!(!out.iter().any(|o| is_apply(o) || is_ack(o)));
    d.handle(t(3), stored("snap_a", Ok(()))).unwrap();
    let out = drain(&mut d);
    assert!(out.iter().any(is_apply));
    assert!(!out.iter().any(is_ack), "no ack while the apply runs");
    d.handle(t(4), applied("snap_a", Ok(()))).unwrap();
    let out = drain(&mut d);
    assert!(out.iter().any(is_ack));
    assert!(out
        .iter()
        .any(|o| matches!(o, DelegatorOutput::DeleteStoredSnapshot { .. })));
    assert_eq!(status_of(&d, "snap_a").status, SnapshotStatus::Applied);
    d.handle(
        t(5),
        DelegatorInput::TransportReleased {
            id: id(),
            warnings: vec![],
        },
    )
    .unwrap();
    assert_eq!(d.get(&id()).unwrap().outcome(), Outcome::Completed);
}

#[test]
fn failed_auto_apply_keeps_the_snapshot_pending_with_its_reason() {
    let mut d = done_with_snapshot();
    for input in [
        stored("snap_a", Ok(())),
        applied(
            "snap_a",
            Err(ErrorInfo::new(ErrorCode::TransportError, "conflict: a.txt")),
        ),
        DelegatorInput::TransportReleased {
            id: id(),
            warnings: vec![],
        },
    ] {
        d.handle(t(3), input).unwrap();
    }
    let out = drain(&mut d);
    assert!(out.iter().any(is_ack), "the result is stored: ack");
    assert!(!out
        .iter()
        .any(|o| matches!(o, DelegatorOutput::DeleteStoredSnapshot { .. })));
    let rec = status_of(&d, "snap_a");
    assert_eq!(rec.status, SnapshotStatus::Pending);
    assert!(rec.error.as_ref().unwrap().message.contains("a.txt"));
    let v = d.get(&id()).unwrap();
    assert!(v.ended);
    assert!(
        matches!(&v.outcome(), Outcome::NotApplied { snapshot: Some(s), .. } if *s == sid("snap_a")),
        "{:?}",
        v.outcome()
    );
    // Re-appliable.
    d.apply_snapshot(t(4), &id(), &sid("snap_a")).unwrap();
    assert!(drain(&mut d).iter().any(is_apply));
    d.handle(t(5), applied("snap_a", Ok(()))).unwrap();
    assert_eq!(d.get(&id()).unwrap().outcome(), Outcome::Completed);
}

#[test]
fn a_snapshot_that_cannot_be_stored_is_never_acknowledged() {
    let mut d = done_with_snapshot();
    d.handle(
        t(3),
        stored("snap_a", Err(StoreFailure::Local("disk full".into()))),
    )
    .unwrap();
    d.handle(
        t(4),
        DelegatorInput::TransportReleased {
            id: id(),
            warnings: vec![],
        },
    )
    .unwrap();
    let out = drain(&mut d);
    assert!(!out.iter().any(is_ack), "{out:?}");
    assert!(!out.iter().any(is_apply));
    let v = d.get(&id()).unwrap();
    assert!(v.ended);
    assert!(matches!(
        v.outcome(),
        Outcome::NotApplied { snapshot: None, .. }
    ));
}

#[test]
fn applies_of_one_delegation_run_one_at_a_time_in_order() {
    let mut d = running(SnapshotMode::Auto);
    d.handle(t(2), snapshot("snap_a")).unwrap();
    d.handle(t(2), snapshot("snap_b")).unwrap();
    drain(&mut d);
    for s in ["snap_b", "snap_a"] {
        d.handle(t(3), stored(s, Ok(()))).unwrap();
    }
    let applies = |out: &[DelegatorOutput]| -> Vec<SnapshotId> {
        out.iter()
            .filter_map(|o| match o {
                DelegatorOutput::ApplySnapshot { snapshot_id, .. } => Some(snapshot_id.clone()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(applies(&drain(&mut d)), vec![sid("snap_b")]);
    d.handle(t(4), applied("snap_b", Ok(()))).unwrap();
    assert_eq!(applies(&drain(&mut d)), vec![sid("snap_a")]);
}

#[test]
fn the_credential_goes_only_to_the_executor_origin() {
    let d = running(SnapshotMode::Auto);
    let auth = d
        .credential_for(&id(), "http://127.0.0.1:10200/awcp/tasks/x/snapshots/y")
        .unwrap();
    assert_eq!(
        crate::http_binding::credential_header(auth),
        ("authorization", "Bearer tok".to_owned())
    );
    assert_eq!(
        d.credential_for(&id(), "http://storage.example/bucket/y"),
        None
    );
    assert_eq!(d.credential_for(&id(), "http://127.0.0.1:10201/awcp"), None);
}

#[test]
fn an_unusable_event_is_reported_and_changes_nothing() {
    let mut d = running(SnapshotMode::Auto);
    let before = d.get(&id()).unwrap().state;
    let problem = EventProblem::Undecodable("not JSON".into());
    d.handle(
        t(1),
        DelegatorInput::UnusableEvent {
            id: id(),
            problem: problem.clone(),
        },
    )
    .unwrap();
    let out = drain(&mut d);
    assert_eq!(
        events(&out),
        [&DelegatorEvent::PeerMisbehaved {
            id: id(),
            reason: PeerMisbehavior::UnusableEvent { problem },
        }]
    );
    assert_eq!(
        out.len(),
        1,
        "the stream is not closed or reopened: {out:?}"
    );
    assert_eq!(d.get(&id()).unwrap().state, before);
    // For a delegation the engine does not have: a usage error, nothing out.
    let other = DelegationId::new("dlg_ffffffffffffffffffffffffffffffff").unwrap();
    assert!(d
        .handle(
            t(1),
            DelegatorInput::UnusableEvent {
                id: other.clone(),
                problem: EventProblem::OtherDelegation(other),
            },
        )
        .is_err());
    assert!(drain(&mut d).is_empty());
}
