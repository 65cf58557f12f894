//! Multi-round assignments on the executor side (WIRE.md §17), driven by hand: a round that
//! ends with `round_done` and leaves the assignment `idle`, CONTINUE and CLOSE and their
//! refusals, the idle timeout, cancel between rounds, replay to a late subscriber, when rounds
//! are (not) agreed, a restart between rounds; and both engines through a whole multi-round
//! delegation ([`crate::engine::pair`]).

#![allow(clippy::wildcard_enum_match_arm)]

use std::time::Duration;

use super::tests::invite;
use super::{
    Credential, Executor, ExecutorConfig, ExecutorEvent, ExecutorInput, ExecutorOutput,
    ExecutorTimer, Request, RequiredAuth, Response, ResultStatus, TaskFailure, WorkspaceLayout,
};
use crate::engine::{CapturedSnapshot, RequestId, SnapshotKind, StreamId, TaskOutcome};
use crate::error::ErrorCode;
use crate::id::{DelegationId, SnapshotId};
use crate::state::AssignmentState;
use crate::time::Timestamp;
use crate::wire::{
    AccessMode, ActiveLease, ArchiveData, ArchiveHandle, AuthType, Close, Continue, Dialect,
    Feature, Invite, Message, RoundDoneEvent, Start, TaskEventKind, TaskSpec, TransportHandle,
    TransportKind,
};

const T0: Timestamp = Timestamp::from_unix_millis(1_750_000_000_000);

/// An empty ZIP, base64.
const EMPTY_ZIP: &str = "UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA==";

/// The delegator's event stream.
const STREAM: StreamId = StreamId(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn outcome(round: u64) -> TaskOutcome {
    TaskOutcome {
        summary: format!("did round {round}"),
        highlights: vec![format!("f{round}.txt")],
    }
}

fn task(round: u64) -> TaskSpec {
    TaskSpec {
        description: format!("r{round}"),
        prompt: format!("round {round}, the whole prompt"),
    }
}

fn captured() -> CapturedSnapshot {
    CapturedSnapshot {
        data: ArchiveData {
            base64: Some(EMPTY_ZIP.into()),
            url: None,
            local_file: None,
            local_file_sha256: None,
        },
        checksum: Some("0".repeat(64)),
        metadata: Default::default(),
    }
}

fn archive_handle() -> TransportHandle {
    TransportHandle::Archive(ArchiveHandle {
        data: ArchiveData {
            base64: Some(EMPTY_ZIP.into()),
            url: None,
            local_file: None,
            local_file_sha256: None,
        },
        checksum: "0".repeat(64),
        size_bytes: None,
    })
}

fn sshfs_handle() -> TransportHandle {
    crate::wire::decode_handle(
        &serde_json::json!({
            "transport": "sshfs",
            "endpoint": {"host": "127.0.0.1", "port": 2222, "user": "awcp"},
            "exportLocator": "/exports/x",
            "credential": {"privateKey": "KEY"},
        }),
        "transportHandle",
    )
    .unwrap()
}

/// The kinds of the events written to `stream` among `out`, in order.
fn on_stream(out: &[ExecutorOutput], stream: StreamId) -> Vec<TaskEventKind> {
    out.iter()
        .filter_map(|o| match o {
            ExecutorOutput::StreamEvent {
                stream: s, event, ..
            } if *s == stream => Some(event.kind.clone()),
            _ => None,
        })
        .collect()
}

fn closes(out: &[ExecutorOutput], stream: StreamId) -> usize {
    out.iter()
        .filter(|o| matches!(o, ExecutorOutput::CloseStream { stream: s } if *s == stream))
        .count()
}

fn releases(out: &[ExecutorOutput]) -> usize {
    out.iter()
        .filter(|o| matches!(o, ExecutorOutput::Release { .. }))
        .count()
}

fn run_tasks(out: &[ExecutorOutput]) -> Vec<(String, TaskSpec, Timestamp)> {
    out.iter()
        .filter_map(|o| match o {
            ExecutorOutput::RunTask {
                task_dir,
                task,
                expires_at,
                ..
            } => Some((task_dir.clone(), task.clone(), *expires_at)),
            _ => None,
        })
        .collect()
}

fn captures(out: &[ExecutorOutput]) -> Vec<(SnapshotId, SnapshotKind)> {
    out.iter()
        .filter_map(|o| match o {
            ExecutorOutput::CaptureSnapshot {
                snapshot_id, kind, ..
            } => Some((snapshot_id.clone(), *kind)),
            _ => None,
        })
        .collect()
}

fn changes(out: &[ExecutorOutput]) -> Vec<(AssignmentState, AssignmentState)> {
    out.iter()
        .filter_map(|o| match o {
            ExecutorOutput::Event(ExecutorEvent::StateChanged { from, to, .. }) => {
                Some((*from, *to))
            }
            _ => None,
        })
        .collect()
}

fn is_done(k: &TaskEventKind) -> bool {
    matches!(k, TaskEventKind::Done(_))
}

fn is_round_done(k: &TaskEventKind) -> bool {
    matches!(k, TaskEventKind::RoundDone(_))
}

/// One assignment driven by hand, as a driver and a delegator would.
struct Run {
    ex: Executor,
    id: DelegationId,
    now: Timestamp,
    next_request: u64,
    /// The credential header every request of the delegator presents.
    credential: Option<Credential>,
    /// Where the delegator reaches the executor (snapshot URLs start there).
    origin: Option<String>,
    dialect: Dialect,
    /// The snapshot of the round that ended last.
    last_snapshot: Option<SnapshotId>,
}

impl Run {
    fn new(config: ExecutorConfig) -> Run {
        Run {
            ex: Executor::new(ExecutorConfig {
                work_root: "/w".into(),
                ..config
            }),
            id: DelegationId::new("dlg_rounds").unwrap(),
            now: T0,
            next_request: 0,
            credential: None,
            origin: None,
            dialect: Dialect::Reference,
            last_snapshot: None,
        }
    }

    fn later(&mut self, d: Duration) {
        self.now = self.now.saturating_add(d);
    }

    fn input(&mut self, input: ExecutorInput) -> Vec<ExecutorOutput> {
        self.ex.handle(self.now, input).unwrap();
        std::iter::from_fn(|| self.ex.poll_output()).collect()
    }

    /// Sends a request with `credential`; returns its answer and every output.
    fn ask_as(
        &mut self,
        body: Request,
        credential: Option<Credential>,
    ) -> (Response, Vec<ExecutorOutput>) {
        self.next_request += 1;
        let request = RequestId(self.next_request);
        let out = self.input(ExecutorInput::Request {
            request,
            credential,
            origin: self.origin.clone(),
            body,
        });
        let answer = out
            .iter()
            .find_map(|o| match o {
                ExecutorOutput::Respond {
                    request: r,
                    response,
                } if *r == request => Some(response.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("request {request:?} not answered: {out:?}"));
        (answer, out)
    }

    fn ask(&mut self, body: Request) -> (Response, Vec<ExecutorOutput>) {
        let credential = self.credential.clone();
        self.ask_as(body, credential)
    }

    fn send(&mut self, msg: Message) -> (Response, Vec<ExecutorOutput>) {
        let dialect = self.dialect;
        self.ask(Request::Message(Box::new(msg), dialect))
    }

    fn continue_msg(&self, round: u64, lease: Option<Timestamp>) -> Message {
        Message::Continue(Continue {
            delegation_id: self.id.clone(),
            task: task(round),
            round,
            lease: lease.map(|expires_at| ActiveLease {
                expires_at,
                access_mode: AccessMode::Rw,
            }),
        })
    }

    fn send_continue(
        &mut self,
        round: u64,
        lease: Option<Timestamp>,
    ) -> (Response, Vec<ExecutorOutput>) {
        let msg = self.continue_msg(round, lease);
        self.send(msg)
    }

    fn send_close(&mut self) -> (Response, Vec<ExecutorOutput>) {
        let msg = Message::Close(Close {
            delegation_id: self.id.clone(),
        });
        self.send(msg)
    }

    fn state(&self) -> AssignmentState {
        self.ex.assignment(&self.id).unwrap().state
    }

    /// INVITE offering `features`, allocated, accepted; the delegator subscribes.
    fn invited(&mut self, features: Vec<Feature>) -> crate::wire::Accept {
        let mut inv = invite(&self.id);
        inv.features = features;
        self.invited_with(inv)
    }

    fn invited_with(&mut self, inv: Invite) -> crate::wire::Accept {
        let dialect = self.dialect;
        let credential = self.credential.clone();
        self.next_request += 1;
        let request = RequestId(self.next_request);
        self.input(ExecutorInput::Request {
            request,
            credential,
            origin: self.origin.clone(),
            body: Request::Message(Box::new(Message::Invite(inv)), dialect),
        });
        let out = self.input(ExecutorInput::WorkDirAllocated {
            id: self.id.clone(),
            result: Ok(()),
        });
        let accept = out
            .iter()
            .find_map(|o| match o {
                ExecutorOutput::Respond {
                    request: r,
                    response: Response::Accept(a, _),
                } if *r == request => Some(a.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("not accepted: {out:?}"));
        let credential = self.credential.clone();
        let out = self.input(ExecutorInput::Subscribe {
            stream: STREAM,
            id: self.id.clone(),
            credential,
        });
        assert!(out.is_empty(), "nothing to replay yet: {out:?}");
        accept
    }

    /// START with `handle`, set up: the task of round 1 runs. Returns its directory.
    fn started(&mut self, handle: TransportHandle) -> String {
        let (answer, _) = self.send(Message::Start(Start {
            delegation_id: self.id.clone(),
            lease: ActiveLease {
                expires_at: self.now.saturating_add(Duration::from_secs(600)),
                access_mode: AccessMode::Rw,
            },
            handle,
        }));
        assert_eq!(answer, Response::Ok);
        let out = self.input(ExecutorInput::SetupCompleted {
            id: self.id.clone(),
            result: Ok(WorkspaceLayout::PerResource),
        });
        let runs = run_tasks(&out);
        assert_eq!(runs.len(), 1, "{out:?}");
        assert_eq!(self.state(), AssignmentState::Active);
        runs[0].0.clone()
    }

    /// The running round's task finishes as round `round`; its snapshot is captured (when
    /// one is asked for). Returns the capture's kind and every output of the last step.
    fn finish_round(&mut self, round: u64) -> (Option<SnapshotKind>, Vec<ExecutorOutput>) {
        let out = self.input(ExecutorInput::TaskFinished {
            id: self.id.clone(),
            result: Ok(outcome(round)),
        });
        let asked = captures(&out);
        match asked.as_slice() {
            [] => (None, out),
            [(sid, kind)] => {
                self.last_snapshot = Some(sid.clone());
                let out = self.input(ExecutorInput::SnapshotCaptured {
                    id: self.id.clone(),
                    result: Ok(Box::new(captured())),
                });
                (Some(*kind), out)
            }
            more => panic!("more than one capture: {more:?}"),
        }
    }

    /// An archive assignment offering `features`, its round 1 over: `idle` (asserted).
    fn idle(config: ExecutorConfig, features: Vec<Feature>) -> (Run, String) {
        let mut r = Run::new(config);
        r.invited(features);
        let dir = r.started(archive_handle());
        r.later(ms(500));
        r.finish_round(1);
        assert_eq!(r.state(), AssignmentState::Idle);
        (r, dir)
    }
}

fn rounds() -> Vec<Feature> {
    vec![Feature::MultiRound, Feature::DeltaSnapshots]
}

/// The error status and code of an answer.
fn refusal(answer: &Response) -> (u16, ErrorCode) {
    match answer {
        Response::Error {
            message, status, ..
        } => (*status, message.error.code.clone()),
        other => panic!("not a refusal: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The end of a round

#[test]
fn with_multi_round_a_round_ends_with_its_snapshot_then_round_done_and_the_assignment_waits() {
    let mut r = Run::new(ExecutorConfig::default());
    let accept = r.invited(rounds());
    assert!(accept.features.contains(&Feature::MultiRound), "{accept:?}");
    r.started(archive_handle());
    r.later(ms(500));
    let (kind, out) = r.finish_round(1);
    assert_eq!(
        kind,
        Some(SnapshotKind::Delta),
        "round 1: against what was lent"
    );
    let sid = r.last_snapshot.clone().unwrap();
    let events = on_stream(&out, STREAM);
    assert_eq!(events.len(), 2, "{events:?}");
    match &events[0] {
        TaskEventKind::Snapshot(s) => {
            assert_eq!(s.snapshot_id, sid);
            assert_eq!(s.summary, "did round 1");
            assert_eq!(s.recommended, Some(true));
        }
        other => panic!("not the snapshot: {other:?}"),
    }
    assert_eq!(
        events[1],
        TaskEventKind::RoundDone(RoundDoneEvent {
            round: 1,
            summary: "did round 1".into(),
            highlights: vec!["f1.txt".into()],
            snapshot_ids: vec![sid.clone()],
            recommended_snapshot_id: Some(sid),
        })
    );
    assert_eq!(
        changes(&out),
        [(AssignmentState::Active, AssignmentState::Idle)]
    );
    assert_eq!(releases(&out), 0, "the work directory is kept: {out:?}");
    assert_eq!(closes(&out, STREAM), 0, "the stream goes on");
    assert!(!out
        .iter()
        .any(|o| matches!(o, ExecutorOutput::Event(ExecutorEvent::Ended { .. }))));
    let view = r.ex.assignment(&r.id).unwrap();
    assert_eq!(view.state, AssignmentState::Idle);
    assert!(!view.released);
    // No lease runs between rounds; the idle time does.
    assert_eq!(r.ex.timer_deadline(&r.id, ExecutorTimer::Lease), None);
    let idle_end = r.now.saturating_add(ExecutorConfig::default().idle_timeout);
    assert_eq!(r.ex.poll_timeout(), Some((idle_end, ExecutorTimer::Idle)));
    // `GET …/result` says running between rounds, as the reference does.
    let (answer, _) = r.ask(Request::Result(r.id.clone()));
    match answer {
        Response::Result(body) => assert_eq!(body.status, ResultStatus::Running),
        other => panic!("{other:?}"),
    }
    // An idle assignment still holds its work directory.
    assert_eq!(r.ex.status().active, 1);
    assert_eq!(r.ex.live_count(), 1);
}

#[test]
fn a_read_only_round_ends_with_round_done_without_a_snapshot() {
    let mut r = Run::new(ExecutorConfig::default());
    let mut inv = invite(&r.id);
    inv.features = rounds();
    inv.lease.access_mode = AccessMode::Ro;
    r.invited_with(inv);
    r.started(archive_handle());
    let (kind, out) = r.finish_round(1);
    assert_eq!(kind, None, "nothing to bring back");
    assert_eq!(
        on_stream(&out, STREAM),
        [TaskEventKind::RoundDone(RoundDoneEvent {
            round: 1,
            summary: "did round 1".into(),
            highlights: vec!["f1.txt".into()],
            snapshot_ids: vec![],
            recommended_snapshot_id: None,
        })]
    );
    assert_eq!(r.state(), AssignmentState::Idle);
}

// ---------------------------------------------------------------------------------------------
// CONTINUE

#[test]
fn continue_in_idle_runs_the_next_round_in_the_same_directory_under_its_lease() {
    let (mut r, dir) = Run::idle(ExecutorConfig::default(), rounds());
    let first = r.last_snapshot.clone().unwrap();
    r.later(ms(1_000));
    let lease_end = r.now.saturating_add(Duration::from_secs(300));
    let (answer, out) = r.send_continue(2, Some(lease_end));
    assert_eq!(answer, Response::Ok);
    let events = on_stream(&out, STREAM);
    match events.as_slice() {
        [TaskEventKind::Status(s)] => {
            assert_eq!(s.message.as_deref(), Some("Round 2 execution started"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(run_tasks(&out), [(dir.clone(), task(2), lease_end)]);
    assert_eq!(
        changes(&out),
        [(AssignmentState::Idle, AssignmentState::Active)]
    );
    assert_eq!(r.state(), AssignmentState::Active);
    assert_eq!(
        r.ex.timer_deadline(&r.id, ExecutorTimer::Lease),
        Some(lease_end)
    );
    assert_eq!(r.ex.timer_deadline(&r.id, ExecutorTimer::Idle), None);

    // Round 2's result is the whole work directory, not a delta; round 1's snapshot goes.
    r.later(ms(1_000));
    let (kind, out) = r.finish_round(2);
    assert_eq!(kind, Some(SnapshotKind::Full));
    let second = r.last_snapshot.clone().unwrap();
    assert_ne!(first, second, "a fresh id per round");
    assert!(out.iter().any(|o| matches!(
        o,
        ExecutorOutput::DropSnapshot { snapshot_id, .. } if *snapshot_id == first
    )));
    assert!(!out.iter().any(|o| matches!(
        o,
        ExecutorOutput::DropSnapshot { snapshot_id, .. } if *snapshot_id == second
    )));
    let events = on_stream(&out, STREAM);
    assert!(
        matches!(&events[..], [TaskEventKind::Snapshot(s), TaskEventKind::RoundDone(d)]
            if s.snapshot_id == second && d.round == 2 && d.snapshot_ids == [second.clone()]
                && d.summary == "did round 2"),
        "{events:?}"
    );
    assert_eq!(r.state(), AssignmentState::Idle);
    assert_eq!(r.ex.timer_deadline(&r.id, ExecutorTimer::Lease), None);

    // Round 3 without a lease: as long as the first one.
    let (answer, out) = r.send_continue(3, None);
    assert_eq!(answer, Response::Ok);
    let runs = run_tasks(&out);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].0, dir);
    assert_eq!(runs[0].2, r.now.saturating_add(Duration::from_secs(600)));
}

#[test]
fn a_continue_lease_longer_than_the_executor_grants_is_capped() {
    let (mut r, _) = Run::idle(
        ExecutorConfig {
            max_ttl_seconds: 60,
            ..ExecutorConfig::default()
        },
        rounds(),
    );
    let (answer, out) = r.send_continue(2, Some(r.now.saturating_add(Duration::from_secs(3600))));
    assert_eq!(answer, Response::Ok);
    let capped = r.now.saturating_add(Duration::from_secs(60));
    assert_eq!(run_tasks(&out)[0].2, capped);
    assert_eq!(
        r.ex.timer_deadline(&r.id, ExecutorTimer::Lease),
        Some(capped)
    );
}

#[test]
fn continue_is_refused_unless_the_round_ended_and_a_repeat_of_the_running_round_is_ok() {
    let mut r = Run::new(ExecutorConfig::default());
    r.invited(rounds());
    // Pending: no round ran yet.
    let (answer, out) = r.send_continue(2, None);
    assert_eq!(refusal(&answer), (409, ErrorCode::Declined));
    assert!(run_tasks(&out).is_empty());
    assert_eq!(r.state(), AssignmentState::Pending);
    r.started(archive_handle());
    // Round 1 runs: another round is refused.
    let (answer, out) = r.send_continue(2, None);
    assert_eq!(refusal(&answer), (409, ErrorCode::Declined));
    assert!(run_tasks(&out).is_empty());
    assert!(on_stream(&out, STREAM).is_empty());
    assert_eq!(r.state(), AssignmentState::Active);
    r.finish_round(1);
    let (answer, _) = r.send_continue(2, None);
    assert_eq!(answer, Response::Ok);
    // The same CONTINUE again (a retry): answered as the first, nothing started twice.
    let (answer, out) = r.send_continue(2, None);
    assert_eq!(answer, Response::Ok);
    assert!(run_tasks(&out).is_empty(), "{out:?}");
    assert!(on_stream(&out, STREAM).is_empty());
    // Another round while round 2 runs: refused.
    let (answer, out) = r.send_continue(3, None);
    assert_eq!(refusal(&answer), (409, ErrorCode::Declined));
    assert!(run_tasks(&out).is_empty());
    assert_eq!(r.state(), AssignmentState::Active);
}

#[test]
fn a_failed_round_ends_the_session_with_task_failed() {
    let (mut r, _) = Run::idle(ExecutorConfig::default(), rounds());
    r.send_continue(2, None);
    let out = r.input(ExecutorInput::TaskFinished {
        id: r.id.clone(),
        result: Err(TaskFailure::Failed("exit 3".into())),
    });
    let events = on_stream(&out, STREAM);
    assert!(
        matches!(&events[..], [TaskEventKind::Error(e)] if e.code == ErrorCode::TaskFailed),
        "{events:?}"
    );
    assert_eq!(closes(&out, STREAM), 1);
    assert_eq!(releases(&out), 1);
    assert_eq!(r.state(), AssignmentState::Error);
    let (answer, _) = r.send_continue(3, None);
    assert_eq!(refusal(&answer).0, 409);
}

#[test]
fn the_lease_of_a_later_round_stops_it_with_expired() {
    let (mut r, _) = Run::idle(ExecutorConfig::default(), rounds());
    let lease_end = r.now.saturating_add(Duration::from_secs(30));
    r.send_continue(2, Some(lease_end));
    r.ex.handle_timeout(lease_end);
    let out: Vec<_> = std::iter::from_fn(|| r.ex.poll_output()).collect();
    assert!(out
        .iter()
        .any(|o| matches!(o, ExecutorOutput::StopTask { .. })));
    let events = on_stream(&out, STREAM);
    assert!(
        matches!(&events[..], [TaskEventKind::Error(e)] if e.code == ErrorCode::Expired),
        "{events:?}"
    );
    assert_eq!(r.state(), AssignmentState::Error);
}

// ---------------------------------------------------------------------------------------------
// CLOSE

#[test]
fn close_in_idle_completes_with_done_and_releases() {
    let (mut r, _) = Run::idle(ExecutorConfig::default(), rounds());
    let sid = r.last_snapshot.clone().unwrap();
    let (answer, out) = r.send_close();
    assert_eq!(answer, Response::Ok);
    let events = on_stream(&out, STREAM);
    match events.as_slice() {
        [TaskEventKind::Done(d)] => {
            assert_eq!(d.summary, "did round 1", "the last round's outcome");
            assert_eq!(d.snapshot_ids, std::slice::from_ref(&sid));
            assert_eq!(d.recommended_snapshot_id, Some(sid));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(closes(&out, STREAM), 1);
    assert_eq!(releases(&out), 1);
    assert_eq!(
        changes(&out),
        [(AssignmentState::Idle, AssignmentState::Completed)]
    );
    assert_eq!(r.state(), AssignmentState::Completed);
    assert_eq!(r.ex.timer_deadline(&r.id, ExecutorTimer::Idle), None);
    let out = r.input(ExecutorInput::Released {
        id: r.id.clone(),
        result: Ok(()),
    });
    assert!(out.iter().any(|o| matches!(
        o,
        ExecutorOutput::Event(ExecutorEvent::Ended {
            state: AssignmentState::Completed,
            error: None,
            ..
        })
    )));
    // A repeated CLOSE is answered as the first; nothing happens again.
    let (answer, out) = r.send_close();
    assert_eq!(answer, Response::Ok);
    assert_eq!(releases(&out), 0);
    assert!(on_stream(&out, STREAM).is_empty());
    // No round after the close.
    let (answer, _) = r.send_continue(2, None);
    assert_eq!(refusal(&answer), (409, ErrorCode::Declined));
    // `GET …/result` now has the last round's outcome.
    let (answer, _) = r.ask(Request::Result(r.id.clone()));
    match answer {
        Response::Result(body) => {
            assert_eq!(body.status, ResultStatus::Completed);
            assert_eq!(body.outcome, Some(outcome(1)));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn close_is_refused_while_a_round_runs_or_before_any_did() {
    let mut r = Run::new(ExecutorConfig::default());
    r.invited(rounds());
    let (answer, _) = r.send_close();
    assert_eq!(refusal(&answer), (409, ErrorCode::Declined));
    assert_eq!(r.state(), AssignmentState::Pending);
    r.started(archive_handle());
    let (answer, out) = r.send_close();
    assert_eq!(refusal(&answer), (409, ErrorCode::Declined));
    assert_eq!(releases(&out), 0);
    assert!(!out
        .iter()
        .any(|o| matches!(o, ExecutorOutput::StopTask { .. })));
    assert!(on_stream(&out, STREAM).is_empty());
    assert_eq!(r.state(), AssignmentState::Active);
}

#[test]
fn close_and_continue_for_an_unknown_delegation_are_not_found() {
    let mut r = Run::new(ExecutorConfig::default());
    let (answer, out) = r.send_close();
    assert_eq!(refusal(&answer), (404, ErrorCode::NotFound));
    assert_eq!(answer.http_status(), 404);
    assert_eq!(out.len(), 1, "only the answer: {out:?}");
    let (answer, _) = r.send_continue(2, None);
    assert_eq!(refusal(&answer), (404, ErrorCode::NotFound));
    assert!(r.ex.assignment(&r.id).is_none());
}

#[test]
fn close_and_continue_without_the_bound_credential_are_refused_when_auth_is_on() {
    let config = ExecutorConfig {
        auth: Some(RequiredAuth {
            types: vec![AuthType::Bearer],
            credential: "s3cret".into(),
        }),
        ..ExecutorConfig::default()
    };
    let mut r = Run::new(config);
    r.credential = Some(Credential::bearer("s3cret"));
    r.invited(rounds());
    r.started(archive_handle());
    r.finish_round(1);
    assert_eq!(r.state(), AssignmentState::Idle);
    let close = Request::Message(
        Box::new(Message::Close(Close {
            delegation_id: r.id.clone(),
        })),
        Dialect::Reference,
    );
    let cont = Request::Message(Box::new(r.continue_msg(2, None)), Dialect::Reference);
    for (presented, what) in [(None, "none"), (Some(Credential::bearer("wrong")), "wrong")] {
        let (answer, out) = r.ask_as(close.clone(), presented.clone());
        assert_eq!(refusal(&answer), (401, ErrorCode::AuthFailed), "{what}");
        assert_eq!(releases(&out), 0);
        let (answer, out) = r.ask_as(cont.clone(), presented);
        assert_eq!(refusal(&answer), (401, ErrorCode::AuthFailed), "{what}");
        assert!(run_tasks(&out).is_empty());
        assert_eq!(r.state(), AssignmentState::Idle, "{what}");
    }
    let (answer, out) = r.ask(close);
    assert_eq!(answer, Response::Ok);
    assert_eq!(releases(&out), 1);
    assert_eq!(r.state(), AssignmentState::Completed);
}

// ---------------------------------------------------------------------------------------------
// Idle timeout, cancel

#[test]
fn the_idle_timeout_closes_an_idle_assignment_with_done_and_releases() {
    let config = ExecutorConfig {
        idle_timeout: Duration::from_secs(40),
        ..ExecutorConfig::default()
    };
    let (mut r, _) = Run::idle(config, rounds());
    let at = r.now.saturating_add(Duration::from_secs(40));
    assert_eq!(r.ex.poll_timeout(), Some((at, ExecutorTimer::Idle)));
    r.ex.handle_timeout(at.saturating_sub(ms(1)));
    assert!(r.ex.poll_output().is_none());
    assert_eq!(r.state(), AssignmentState::Idle);
    r.ex.handle_timeout(at);
    let out: Vec<_> = std::iter::from_fn(|| r.ex.poll_output()).collect();
    let events = on_stream(&out, STREAM);
    assert!(
        matches!(&events[..], [TaskEventKind::Done(d)] if d.summary == "did round 1"),
        "{events:?}"
    );
    assert_eq!(closes(&out, STREAM), 1);
    assert_eq!(releases(&out), 1);
    assert_eq!(r.state(), AssignmentState::Completed);
    // A delegator closing afterwards (its CLOSE crossed the timeout) is answered Ok.
    let (answer, _) = r.send_close();
    assert_eq!(answer, Response::Ok);
}

#[test]
fn a_continue_restarts_the_idle_time_only_after_the_next_round() {
    let config = ExecutorConfig {
        idle_timeout: Duration::from_secs(40),
        ..ExecutorConfig::default()
    };
    let (mut r, _) = Run::idle(config, rounds());
    let first_idle_end = r.now.saturating_add(Duration::from_secs(40));
    r.later(Duration::from_secs(10));
    r.send_continue(2, None);
    // The round runs past the first idle deadline: nothing closes it.
    r.ex.handle_timeout(first_idle_end);
    let out: Vec<_> = std::iter::from_fn(|| r.ex.poll_output()).collect();
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(r.state(), AssignmentState::Active);
    r.now = first_idle_end;
    r.finish_round(2);
    assert_eq!(
        r.ex.timer_deadline(&r.id, ExecutorTimer::Idle),
        Some(first_idle_end.saturating_add(Duration::from_secs(40)))
    );
}

#[test]
fn a_cancel_while_idle_fails_with_cancelled_and_releases() {
    let (mut r, _) = Run::idle(ExecutorConfig::default(), rounds());
    let (answer, out) = r.ask(Request::Cancel(r.id.clone()));
    assert_eq!(answer, Response::Cancelled);
    let events = on_stream(&out, STREAM);
    assert!(
        matches!(&events[..], [TaskEventKind::Error(e)] if e.code == ErrorCode::Cancelled),
        "{events:?}"
    );
    assert_eq!(closes(&out, STREAM), 1);
    assert_eq!(releases(&out), 1);
    assert!(
        !out.iter()
            .any(|o| matches!(o, ExecutorOutput::StopTask { .. })),
        "no task runs between rounds"
    );
    assert_eq!(r.state(), AssignmentState::Error);
    assert_eq!(r.ex.timer_deadline(&r.id, ExecutorTimer::Idle), None);
    let (answer, _) = r.send_close();
    assert_eq!(refusal(&answer).0, 409);
}

#[test]
fn an_error_message_while_idle_fails_the_assignment_and_releases() {
    let (mut r, _) = Run::idle(ExecutorConfig::default(), rounds());
    let (answer, out) = r.send(Message::Error(crate::wire::ErrorMessage {
        delegation_id: r.id.clone(),
        error: crate::error::ErrorInfo::new(ErrorCode::Cancelled, "the delegator gave up"),
    }));
    assert_eq!(answer, Response::Ok);
    assert_eq!(releases(&out), 1);
    assert_eq!(r.state(), AssignmentState::Error);
}

// ---------------------------------------------------------------------------------------------
// Late subscribers

#[test]
fn a_late_subscriber_while_idle_gets_the_rounds_snapshot_and_round_done_again() {
    let (mut r, _) = Run::idle(ExecutorConfig::default(), rounds());
    let sid = r.last_snapshot.clone().unwrap();
    let late = StreamId(2);
    let out = r.input(ExecutorInput::Subscribe {
        stream: late,
        id: r.id.clone(),
        credential: None,
    });
    let events = on_stream(&out, late);
    assert!(
        matches!(&events[..], [TaskEventKind::Snapshot(s), TaskEventKind::RoundDone(d)]
            if s.snapshot_id == sid && d.round == 1 && d.snapshot_ids == [sid.clone()]),
        "{events:?}"
    );
    assert_eq!(closes(&out, late), 0, "the stream stays open");
    assert!(on_stream(&out, STREAM).is_empty(), "only to the new one");
    // Both streams get what follows.
    let (_, out) = r.send_close();
    for s in [STREAM, late] {
        assert!(on_stream(&out, s).iter().any(is_done), "{s:?}");
        assert_eq!(closes(&out, s), 1);
    }
    // After the close, a subscriber gets the end (and the snapshot before it).
    let out = r.input(ExecutorInput::Subscribe {
        stream: StreamId(3),
        id: r.id.clone(),
        credential: None,
    });
    let events = on_stream(&out, StreamId(3));
    assert!(
        matches!(&events[..], [TaskEventKind::Snapshot(_), TaskEventKind::Done(d)] if d.summary == "did round 1"),
        "{events:?}"
    );
    assert_eq!(closes(&out, StreamId(3)), 1);
}

#[test]
fn a_late_subscriber_of_a_delegator_that_did_not_negotiate_rounds_gets_no_replay() {
    // A reference `dev` delegator reads a second `round_done` as an error.
    let config = ExecutorConfig {
        reference_rounds: true,
        ..ExecutorConfig::default()
    };
    let (mut r, _) = Run::idle(config, Vec::new());
    let out = r.input(ExecutorInput::Subscribe {
        stream: StreamId(2),
        id: r.id.clone(),
        credential: None,
    });
    assert!(out.is_empty(), "{out:?}");
    // It is subscribed all the same: it gets the next round's events.
    let (_, out) = r.send_continue(2, None);
    assert!(!on_stream(&out, StreamId(2)).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Whether rounds happen

#[test]
fn without_multi_round_a_task_completes_with_done_as_before() {
    let mut r = Run::new(ExecutorConfig::default());
    let accept = r.invited(vec![Feature::DeltaSnapshots]);
    assert!(!accept.features.contains(&Feature::MultiRound));
    r.started(archive_handle());
    let (kind, out) = r.finish_round(1);
    assert_eq!(kind, Some(SnapshotKind::Delta));
    let events = on_stream(&out, STREAM);
    assert!(
        matches!(&events[..], [TaskEventKind::Snapshot(_), TaskEventKind::Done(d)] if d.summary == "did round 1"),
        "{events:?}"
    );
    assert!(!events.iter().any(is_round_done));
    assert_eq!(closes(&out, STREAM), 1);
    assert_eq!(releases(&out), 1);
    assert_eq!(r.state(), AssignmentState::Completed);
    for (answer, _) in [r.send_continue(2, None), r.send_close()] {
        assert_eq!(refusal(&answer), (409, ErrorCode::Declined));
    }
}

#[test]
fn an_executor_not_supporting_multi_round_does_not_agree_to_it() {
    let config = ExecutorConfig {
        features: vec![Feature::DeltaSnapshots],
        ..ExecutorConfig::default()
    };
    let mut r = Run::new(config);
    let accept = r.invited(rounds());
    assert_eq!(accept.features, [Feature::DeltaSnapshots]);
    r.started(archive_handle());
    let (_, out) = r.finish_round(1);
    assert!(on_stream(&out, STREAM).iter().any(is_done));
    assert_eq!(r.state(), AssignmentState::Completed);
}

#[test]
fn with_reference_rounds_a_delegator_that_negotiates_nothing_gets_rounds() {
    let config = ExecutorConfig {
        reference_rounds: true,
        ..ExecutorConfig::default()
    };
    let mut r = Run::new(config.clone());
    let accept = r.invited(Vec::new());
    assert!(accept.features.is_empty(), "nothing was agreed: {accept:?}");
    let dir = r.started(archive_handle());
    let (kind, out) = r.finish_round(1);
    assert_eq!(
        kind,
        Some(SnapshotKind::Full),
        "no delta for a reference peer"
    );
    let events = on_stream(&out, STREAM);
    assert!(
        matches!(&events[..], [TaskEventKind::Snapshot(_), TaskEventKind::RoundDone(d)] if d.round == 1),
        "{events:?}"
    );
    assert_eq!(r.state(), AssignmentState::Idle);
    assert_eq!(releases(&out), 0);
    // The reference delegator's CONTINUE: no lease.
    let (answer, out) = r.send_continue(2, None);
    assert_eq!(answer, Response::Ok);
    assert_eq!(run_tasks(&out)[0].0, dir);

    // A delegator that negotiates something, but not rounds, is single-shot.
    let mut r = Run::new(config.clone());
    r.invited(vec![Feature::ArchiveUrl]);
    r.started(archive_handle());
    let (_, out) = r.finish_round(1);
    assert!(on_stream(&out, STREAM).iter().any(is_done));
    assert_eq!(r.state(), AssignmentState::Completed);

    // So is a seed-dialect delegator.
    let mut r = Run::new(config);
    r.dialect = Dialect::Seed;
    r.invited(Vec::new());
    r.started(archive_handle());
    let (_, out) = r.finish_round(1);
    assert!(on_stream(&out, STREAM).iter().any(is_done));
    assert_eq!(r.state(), AssignmentState::Completed);
}

#[test]
fn a_live_transport_never_agrees_to_rounds() {
    let config = ExecutorConfig {
        transports: vec![TransportKind::Archive, TransportKind::Sshfs],
        reference_rounds: true,
        ..ExecutorConfig::default()
    };
    for offered in [rounds(), Vec::new()] {
        let mut r = Run::new(config.clone());
        let mut inv = invite(&r.id);
        inv.transport = Some(TransportKind::Sshfs);
        inv.features = offered.clone();
        let accept = r.invited_with(inv);
        assert!(
            !accept.features.contains(&Feature::MultiRound),
            "offered {offered:?}: {accept:?}"
        );
        r.started(sshfs_handle());
        // The task ends: detached first (no snapshot), then `done`; never `round_done`.
        let (kind, out) = r.finish_round(1);
        assert_eq!(kind, None);
        assert_eq!(releases(&out), 1, "{out:?}");
        assert!(on_stream(&out, STREAM).is_empty(), "{out:?}");
        let out = r.input(ExecutorInput::Released {
            id: r.id.clone(),
            result: Ok(()),
        });
        let events = on_stream(&out, STREAM);
        assert!(
            matches!(&events[..], [TaskEventKind::Done(_)]),
            "offered {offered:?}: {events:?}"
        );
        assert_eq!(r.state(), AssignmentState::Completed);
    }
}

// ---------------------------------------------------------------------------------------------
// Restart between rounds

#[test]
fn an_assignment_restored_from_a_record_taken_while_idle_is_completed_and_replays_done() {
    let mut r = Run::new(ExecutorConfig::default());
    // Snapshot URLs start at the delegator's origin: the snapshot event is journalled.
    r.origin = Some("http://executor.invalid".into());
    r.invited(rounds());
    r.started(archive_handle());
    let out = r.input(ExecutorInput::TaskFinished {
        id: r.id.clone(),
        result: Ok(outcome(1)),
    });
    let sid = match captures(&out).as_slice() {
        [(sid, _)] => sid.clone(),
        other => panic!("{other:?}"),
    };
    let url = crate::http_binding::snapshot_url("http://executor.invalid", &r.id, &sid);
    r.input(ExecutorInput::SnapshotCaptured {
        id: r.id.clone(),
        result: Ok(Box::new(CapturedSnapshot {
            data: ArchiveData {
                base64: None,
                url: Some(url),
                local_file: None,
                local_file_sha256: None,
            },
            checksum: Some("0".repeat(64)),
            metadata: Default::default(),
        })),
    });
    assert_eq!(r.state(), AssignmentState::Idle);
    let record = r.ex.record(&r.id).unwrap();
    assert_eq!(record["state"], "idle");

    let later = r.now.saturating_add(Duration::from_secs(60));
    let mut ex = Executor::new(ExecutorConfig {
        work_root: "/w".into(),
        ..ExecutorConfig::default()
    });
    assert_eq!(ex.restore(later, std::slice::from_ref(&record)), 1);
    let out: Vec<_> = std::iter::from_fn(|| ex.poll_output()).collect();
    assert!(
        out.iter().any(|o| matches!(o,
            ExecutorOutput::Release { id, work_dir, .. } if *id == r.id && work_dir == "/w/dlg_rounds")),
        "the kept work directory is released: {out:?}"
    );
    assert_eq!(
        ex.assignment(&r.id).map(|a| a.state),
        Some(AssignmentState::Completed)
    );
    // A delegator reconnecting gets the last round's snapshot and `done`, then the end.
    ex.handle(
        later,
        ExecutorInput::Subscribe {
            stream: StreamId(9),
            id: r.id.clone(),
            credential: None,
        },
    )
    .unwrap();
    let out: Vec<_> = std::iter::from_fn(|| ex.poll_output()).collect();
    let events = on_stream(&out, StreamId(9));
    match events.as_slice() {
        [TaskEventKind::Snapshot(s), TaskEventKind::Done(d)] => {
            assert_eq!(s.snapshot_id, sid);
            assert_eq!(d.summary, "did round 1");
            assert_eq!(d.snapshot_ids, [sid]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(closes(&out, StreamId(9)), 1);
    // The restarted executor neither continues nor refuses a CLOSE of it.
    let cont = Request::Message(Box::new(r.continue_msg(2, None)), Dialect::Reference);
    ex.handle(
        later,
        ExecutorInput::Request {
            request: RequestId(77),
            credential: None,
            origin: None,
            body: cont,
        },
    )
    .unwrap();
    let out: Vec<_> = std::iter::from_fn(|| ex.poll_output()).collect();
    assert!(out.iter().any(|o| matches!(
        o,
        ExecutorOutput::Respond {
            request: RequestId(77),
            response: Response::Error { status: 409, .. }
        }
    )));
    ex.handle(
        later,
        ExecutorInput::Released {
            id: r.id.clone(),
            result: Ok(()),
        },
    )
    .unwrap();
    let out: Vec<_> = std::iter::from_fn(|| ex.poll_output()).collect();
    assert!(out.iter().any(|o| matches!(
        o,
        ExecutorOutput::Event(ExecutorEvent::Ended {
            state: AssignmentState::Completed,
            ..
        })
    )));
}

#[test]
fn an_assignment_restored_while_idle_with_an_inline_snapshot_still_completes() {
    // Inline bytes are not journalled; every round's result was delivered before the round
    // ended, so the restart is not a lost result.
    let (r, _) = Run::idle(ExecutorConfig::default(), rounds());
    let record = r.ex.record(&r.id).unwrap();
    let mut ex = Executor::new(ExecutorConfig {
        work_root: "/w".into(),
        ..ExecutorConfig::default()
    });
    assert_eq!(ex.restore(r.now, &[record]), 1);
    let view = ex.assignment(&r.id).unwrap();
    assert_eq!(view.state, AssignmentState::Completed);
    assert_eq!(view.error, None);
    ex.handle(
        r.now,
        ExecutorInput::Subscribe {
            stream: StreamId(9),
            id: r.id.clone(),
            credential: None,
        },
    )
    .unwrap();
    let out: Vec<_> = std::iter::from_fn(|| ex.poll_output()).collect();
    let events = on_stream(&out, StreamId(9));
    assert!(
        matches!(events.last(), Some(TaskEventKind::Done(d)) if d.summary == "did round 1"),
        "{events:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Both engines

mod pair {
    use super::*;
    use crate::engine::delegator::{DelegatorEvent, Outcome};
    use crate::engine::pair::Pair;
    use crate::state::DelegationState;

    fn kept_open(p: &mut Pair, id: &DelegationId) {
        let req = crate::engine::delegator::DelegateRequest {
            keep_open: true,
            ..Pair::request(id, Dialect::Reference)
        };
        p.delegator.delegate(p.now, req).unwrap();
    }

    /// What the pair's executor task reports.
    fn pair_outcome() -> TaskOutcome {
        TaskOutcome {
            summary: "done".into(),
            highlights: vec!["src/main.rs".into()],
        }
    }

    /// The state and result the delegation ended with.
    fn ended(p: &Pair, id: &DelegationId) -> Option<(DelegationState, Option<TaskOutcome>)> {
        p.delegator_events.iter().find_map(|e| match e {
            DelegatorEvent::Ended {
                id: i,
                state,
                result,
                ..
            } if i == id => Some((*state, result.clone())),
            _ => None,
        })
    }

    fn ended_events(p: &Pair, id: &DelegationId) -> usize {
        p.delegator_events
            .iter()
            .filter(|e| matches!(e, DelegatorEvent::Ended { id: i, .. } if i == id))
            .count()
    }

    #[test]
    fn a_kept_open_delegation_runs_three_rounds_and_closes_on_both_sides() {
        let mut p = Pair::default_pair();
        let id = DelegationId::new("dlg_pair_rounds").unwrap();
        kept_open(&mut p, &id);
        p.drive();
        assert_eq!(p.delegation_state(&id), Some(DelegationState::Idle));
        assert_eq!(p.assignment_state(&id), Some(AssignmentState::Idle));
        assert!(p.delegator.round_settled(&id));
        for round in 2..=3 {
            assert_eq!(
                p.delegator.continue_delegation(p.now, &id, task(round)),
                Ok(round)
            );
            p.drive();
            assert_eq!(
                p.delegation_state(&id),
                Some(DelegationState::Idle),
                "{round}"
            );
            assert_eq!(
                p.assignment_state(&id),
                Some(AssignmentState::Idle),
                "{round}"
            );
            assert_eq!(p.delegator.get(&id).unwrap().round, round);
            assert!(p.delegator.round_settled(&id));
        }
        // Every round's snapshot was applied.
        let v = p.delegator.get(&id).unwrap();
        assert_eq!(v.snapshots.len(), 3);
        assert!(v
            .snapshots
            .iter()
            .all(|s| s.status == crate::engine::delegator::SnapshotStatus::Applied));
        p.delegator.close(p.now, &id).unwrap();
        p.drive();
        assert_eq!(p.delegation_state(&id), Some(DelegationState::Completed));
        assert_eq!(p.delegator.get(&id).unwrap().outcome(), Outcome::Completed);
        assert_eq!(
            ended(&p, &id),
            Some((DelegationState::Completed, Some(pair_outcome())))
        );
        p.run(100);
        assert_eq!(ended_events(&p, &id), 1);
        // Acknowledged after the CLOSE: the executor forgot it.
        assert!(p
            .executor_events
            .iter()
            .any(|e| matches!(e, ExecutorEvent::Forgotten { id: i } if *i == id)));
        assert_eq!(p.executor.live_count(), 0);
    }

    #[test]
    fn an_idle_delegation_is_closed_by_the_delegators_idle_timeout_first() {
        let mut p = Pair::default_pair();
        let id = DelegationId::new("dlg_pair_idle").unwrap();
        kept_open(&mut p, &id);
        p.drive();
        assert_eq!(p.assignment_state(&id), Some(AssignmentState::Idle));
        let idle = crate::engine::delegator::DelegatorConfig::default().idle_timeout;
        assert!(idle < ExecutorConfig::default().idle_timeout);
        p.advance_by(idle);
        assert_eq!(p.delegation_state(&id), Some(DelegationState::Completed));
        let v = p.delegator.get(&id).unwrap();
        assert!(
            v.warnings
                .iter()
                .any(|w| w.contains("without a next round")),
            "{:?}",
            v.warnings
        );
        assert_eq!(
            ended(&p, &id),
            Some((DelegationState::Completed, Some(pair_outcome())))
        );
        p.run(100);
        assert_eq!(ended_events(&p, &id), 1);
        assert_eq!(p.executor.live_count(), 0);
        // The executor was closed by the CLOSE, not by its own (longer) idle timeout.
        assert!(p.executor_events.iter().any(|e| matches!(
            e,
            ExecutorEvent::Ended {
                id: i,
                state: AssignmentState::Completed,
                ..
            } if *i == id
        )));
    }

    #[test]
    fn a_kept_open_seed_delegation_gets_its_rounds_result() {
        let mut p = Pair::default_pair();
        let id = DelegationId::new("dlg_pair_seed").unwrap();
        let req = crate::engine::delegator::DelegateRequest {
            keep_open: true,
            ..Pair::request(&id, Dialect::Seed)
        };
        p.delegator.delegate(p.now, req).unwrap();
        p.drive();
        // No rounds with a seed peer (its result rides on `done`): one round, completed.
        assert!(p.delegator.close(p.now, &id).is_err(), "never idle");
        let v = p.delegator.get(&id).unwrap();
        assert_eq!(v.state, DelegationState::Completed);
        assert!(
            v.snapshots
                .iter()
                .any(|s| s.status == crate::engine::delegator::SnapshotStatus::Applied),
            "the round's result was never applied: {v:?}"
        );
    }

    #[test]
    fn a_delegation_not_kept_open_is_single_shot_with_a_multi_round_executor() {
        let mut p = Pair::default_pair();
        let id = DelegationId::new("dlg_pair_plain").unwrap();
        p.delegate(&id, Dialect::Reference);
        p.run(100);
        assert_eq!(p.delegation_state(&id), Some(DelegationState::Completed));
        assert!(!p.delegator_events.iter().any(|e| matches!(
            e,
            DelegatorEvent::StateChanged {
                to: DelegationState::Idle,
                ..
            }
        )));
    }

    #[test]
    fn a_delegation_not_kept_open_closes_after_a_reference_rounds_executors_first_round() {
        // A delegator that negotiates nothing (as the reference does) meets an executor that
        // gives such delegators rounds: it takes round 1 and closes.
        let mut p = Pair::new(
            crate::engine::delegator::DelegatorConfig {
                features: Vec::new(),
                ..Default::default()
            },
            ExecutorConfig {
                reference_rounds: true,
                ..ExecutorConfig::default()
            },
        );
        let id = DelegationId::new("dlg_pair_dev").unwrap();
        p.delegate(&id, Dialect::Reference);
        p.run(100);
        let states: Vec<_> = p
            .delegator_events
            .iter()
            .filter_map(|e| match e {
                DelegatorEvent::StateChanged { id: i, to, .. } if *i == id => Some(*to),
                _ => None,
            })
            .collect();
        assert!(
            states.ends_with(&[
                DelegationState::Running,
                DelegationState::Idle,
                DelegationState::Completed
            ]),
            "{states:?}"
        );
        assert_eq!(
            ended(&p, &id),
            Some((DelegationState::Completed, Some(pair_outcome())))
        );
        assert!(p.executor_events.iter().any(|e| matches!(
            e,
            ExecutorEvent::Ended {
                id: i,
                state: AssignmentState::Completed,
                ..
            } if *i == id
        )));
        assert_eq!(p.executor.live_count(), 0);
    }
}

#[test]
fn a_seed_delegator_with_multi_round_still_gets_each_rounds_result() {
    let mut r = Run::new(ExecutorConfig::default());
    r.dialect = Dialect::Seed;
    r.invited(rounds());
    r.started(archive_handle());
    let (kind, out) = r.finish_round(1);
    assert!(kind.is_some(), "a result was captured");
    let events = on_stream(&out, STREAM);
    let delivered = events.iter().any(|k| match k {
        TaskEventKind::Snapshot(_) => true,
        TaskEventKind::Done(d) => d.result_base64.is_some() || d.result_local_file.is_some(),
        _ => false,
    });
    // Either the round's result reaches the seed delegator now, or rounds were not agreed
    // and `done` carries it.
    assert!(
        delivered,
        "the seed delegator never sees the result: {events:?}"
    );
}
