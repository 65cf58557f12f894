//! Late subscribers.

use super::*;

#[test]
fn a_late_subscriber_while_idle_gets_the_rounds_snapshot_and_round_done_again() {
    let (mut r, _) = Run::idle(ExecutorConfig::default(), rounds());
    let sid = r.last_snapshot.clone().unwrap();
    let late = StreamId(2);
    let out = r.input(ExecutorInput::Subscribe {
        stream: late,
        id: r.id.clone(),
        credential: None,
        last_event_id: None,
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
        last_event_id: None,
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
        last_event_id: None,
    });
    assert!(out.is_empty(), "{out:?}");
    // It is subscribed all the same: it gets the next round's events.
    let (_, out) = r.send_continue(2, None);
    assert!(!on_stream(&out, StreamId(2)).is_empty());
}
