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
            last_event_id: None,
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

mod closing;
mod continuing;
mod ending;
mod idle;
mod negotiation;
mod pair;
mod replay;
mod restart;
mod resume;
