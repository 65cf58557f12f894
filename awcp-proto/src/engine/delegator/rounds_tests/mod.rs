//! Multi-round delegations on the delegator side (WIRE.md §17), driven by hand: `round_done`
//! → `idle`, CONTINUE / CLOSE, the idle timeout, refusals, the executor closing by itself,
//! snapshots of a round applied between rounds, and a restart between rounds (helpers in
//! `tests.rs`).

// Tests pick the outputs they look at out of the rest.
#![allow(clippy::wildcard_enum_match_arm)]

use super::tests::*;
use super::*;
use crate::wire::{RoundDoneEvent, StatusEvent, TaskStatus};

/// The idle timeout of [`DelegatorConfig::default`].
fn idle_timeout() -> Duration {
    DelegatorConfig::default().idle_timeout
}

/// A `round_done` for round `round` (summary `round <n>`), naming `snapshot` if given.
fn round_done(round: u64, snapshot: Option<&str>) -> DelegatorInput {
    event(TaskEventKind::RoundDone(RoundDoneEvent {
        round,
        summary: format!("round {round}"),
        highlights: vec![format!("file{round}.txt")],
        snapshot_ids: snapshot.map(sid).into_iter().collect(),
        recommended_snapshot_id: snapshot.map(sid),
    }))
}

/// A `done` event with this summary and no snapshot.
fn done_saying(summary: &str) -> DelegatorInput {
    event(TaskEventKind::Done(DoneEvent {
        summary: summary.into(),
        highlights: vec![],
        snapshot_ids: vec![],
        recommended_snapshot_id: None,
        result_base64: None,
        result_local_file: None,
    }))
}

fn status() -> DelegatorInput {
    event(TaskEventKind::Status(StatusEvent {
        status: TaskStatus::Running,
        message: Some("working".into()),
        progress: None,
    }))
}

fn reply(to: Outbound, reply: Reply) -> DelegatorInput {
    DelegatorInput::Reply {
        id: id(),
        to,
        reply,
    }
}

fn released() -> DelegatorInput {
    DelegatorInput::TransportReleased {
        id: id(),
        warnings: vec![],
    }
}

/// The outcome a `round_done` of [`round_done`] reports.
fn outcome(round: u64) -> TaskOutcome {
    TaskOutcome {
        summary: format!("round {round}"),
        highlights: vec![format!("file{round}.txt")],
    }
}

fn task(n: u64) -> TaskSpec {
    TaskSpec {
        description: format!("r{n}"),
        prompt: format!("round {n} prompt"),
    }
}

/// The messages sent to the executor as `to`, in order.
fn sent(out: &[DelegatorOutput], to: Outbound) -> Vec<&Message> {
    out.iter()
        .filter_map(|o| match o {
            DelegatorOutput::SendMessage { to: t, message, .. } if *t == to => Some(&**message),
            _ => None,
        })
        .collect()
}

fn count(out: &[DelegatorOutput], f: impl Fn(&DelegatorOutput) -> bool) -> usize {
    out.iter().filter(|o| f(o)).count()
}

fn is_release(o: &DelegatorOutput) -> bool {
    matches!(o, DelegatorOutput::ReleaseTransport { .. })
}

fn is_ended(o: &DelegatorOutput) -> bool {
    matches!(o, DelegatorOutput::Event(DelegatorEvent::Ended { .. }))
}

/// The state changes among `out`, as `(from, to)`.
fn changes(out: &[DelegatorOutput]) -> Vec<(DelegationState, DelegationState)> {
    events(out)
        .into_iter()
        .filter_map(|e| match e {
            DelegatorEvent::StateChanged { from, to, .. } => Some((*from, *to)),
            _ => None,
        })
        .collect()
}

fn state(d: &Delegator) -> DelegationState {
    d.get(&id()).unwrap().state
}

/// The ACCEPT of an executor that agreed to rounds.
fn accept_rounds() -> Accept {
    Accept {
        features: vec![Feature::MultiRound],
        ..accept()
    }
}

/// A delegation that asked for rounds (`keep_open`), in `started`, on a delegator with
/// `config`, accepted with `acc`; outputs drained.
fn started_open_with(config: DelegatorConfig, mode: SnapshotMode, acc: Accept) -> Delegator {
    let mut d = Delegator::new(config);
    d.delegate(
        t(0),
        DelegateRequest {
            keep_open: true,
            ..request(mode)
        },
    )
    .unwrap();
    let steps = [
        DelegatorInput::ScanCompleted {
            id: id(),
            result: Ok(WorkspaceStats::default()),
        },
        reply(Outbound::Invite, Reply::Accept(Box::new(acc))),
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
    assert_eq!(state(&d), DelegationState::Started);
    d
}

/// [`started_open_with`], then the executor's first `status`: `running`.
fn running_open_with(config: DelegatorConfig, mode: SnapshotMode, acc: Accept) -> Delegator {
    let mut d = started_open_with(config, mode, acc);
    d.handle(t(1), status()).unwrap();
    drain(&mut d);
    assert_eq!(state(&d), DelegationState::Running);
    d
}

/// A running delegation that asked for rounds, default configuration.
fn running_open(mode: SnapshotMode) -> Delegator {
    running_open_with(DelegatorConfig::default(), mode, accept_rounds())
}

/// [`running_open`] whose first round ended at `t(5)`: `idle`.
fn idle_open(mode: SnapshotMode) -> Delegator {
    let mut d = running_open(mode);
    d.handle(t(5), round_done(1, None)).unwrap();
    drain(&mut d);
    assert_eq!(state(&d), DelegationState::Idle);
    d
}

mod asked;
mod executor_closes;
mod refusals;
mod restart;
mod snapshots;
mod stream;
mod unasked;
