//! CLOSE.

use super::*;

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
