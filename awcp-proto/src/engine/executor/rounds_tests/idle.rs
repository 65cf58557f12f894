//! Idle timeout, cancel.

use super::*;

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
