//! Restart between rounds.

use super::*;

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
            last_event_id: None,
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
            last_event_id: None,
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
