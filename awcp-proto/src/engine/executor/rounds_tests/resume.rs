//! Event ids and subscribers that resume with `Last-Event-ID` (WIRE.md §4.6). Not specific to
//! rounds: this harness is the one that drives an assignment by hand.

use super::*;

/// The ids and types of the events written to `stream` among `out`, in order.
fn ids_on(out: &[ExecutorOutput], stream: StreamId) -> Vec<(Option<u64>, &'static str)> {
    out.iter()
        .filter_map(|o| match o {
            ExecutorOutput::StreamEvent {
                stream: s,
                event,
                event_id,
                ..
            } if *s == stream => Some((*event_id, event.kind.type_str())),
            _ => None,
        })
        .collect()
}

fn subscribe(r: &mut Run, stream: StreamId, last_event_id: Option<u64>) -> Vec<ExecutorOutput> {
    r.input(ExecutorInput::Subscribe {
        stream,
        id: r.id.clone(),
        credential: None,
        last_event_id,
    })
}

fn progress(r: &mut Run, message: &str) -> Vec<ExecutorOutput> {
    r.input(ExecutorInput::TaskProgress {
        id: r.id.clone(),
        message: Some(message.to_owned()),
        progress: None,
    })
}

/// An archive assignment whose task runs; the delegator's stream saw `status` (id 1) and
/// `extra` progress events (ids 2…).
fn running(config: ExecutorConfig, extra: usize) -> Run {
    let mut r = Run::new(config);
    r.invited(Vec::new());
    r.started(archive_handle());
    for i in 0..extra {
        progress(&mut r, &format!("step {i}"));
    }
    r
}

#[test]
fn events_get_ids_in_order_the_same_on_every_stream() {
    let mut r = Run::new(ExecutorConfig::default());
    r.invited(Vec::new());
    r.started(archive_handle());
    let out = progress(&mut r, "one");
    assert_eq!(ids_on(&out, STREAM), vec![(Some(2), "status")]);
    // A second subscriber (no Last-Event-ID) sees live events only, with the same ids.
    assert!(subscribe(&mut r, StreamId(2), None).is_empty());
    let out = progress(&mut r, "two");
    for s in [STREAM, StreamId(2)] {
        assert_eq!(ids_on(&out, s), vec![(Some(3), "status")], "{s:?}");
    }
    let (_, out) = r.finish_round(1);
    for s in [STREAM, StreamId(2)] {
        assert_eq!(
            ids_on(&out, s),
            vec![(Some(4), "snapshot"), (Some(5), "done")],
            "{s:?}"
        );
    }
}

#[test]
fn a_subscriber_resuming_after_n_gets_the_events_after_n_then_live_ones() {
    let mut r = running(ExecutorConfig::default(), 3); // ids 1..=4
    let out = subscribe(&mut r, StreamId(2), Some(2));
    assert_eq!(
        ids_on(&out, StreamId(2)),
        vec![(Some(3), "status"), (Some(4), "status")]
    );
    assert_eq!(closes(&out, StreamId(2)), 0);
    let out = progress(&mut r, "live");
    assert_eq!(ids_on(&out, StreamId(2)), vec![(Some(5), "status")]);
    // Resuming at the last id: nothing to replay, live events follow.
    assert!(ids_on(&subscribe(&mut r, StreamId(3), Some(5)), StreamId(3)).is_empty());
}

#[test]
fn a_finished_assignment_resumed_after_n_replays_what_followed_n_and_ends() {
    let mut r = running(ExecutorConfig::default(), 1); // ids 1, 2
    r.finish_round(1); // snapshot 3, done 4
    let out = subscribe(&mut r, StreamId(2), Some(2));
    assert_eq!(
        ids_on(&out, StreamId(2)),
        vec![(Some(3), "snapshot"), (Some(4), "done")]
    );
    assert_eq!(closes(&out, StreamId(2)), 1);
    // A late subscriber without an id gets the usual replay, with the same ids.
    let out = subscribe(&mut r, StreamId(3), None);
    assert_eq!(
        ids_on(&out, StreamId(3)),
        vec![(Some(3), "snapshot"), (Some(4), "done")]
    );
    // One that has everything gets nothing, and the end.
    let out = subscribe(&mut r, StreamId(4), Some(4));
    assert!(ids_on(&out, StreamId(4)).is_empty());
    assert_eq!(closes(&out, StreamId(4)), 1);
}

#[test]
fn the_replay_buffer_keeps_at_most_its_count_and_an_evicted_n_shows_as_a_gap() {
    let config = ExecutorConfig {
        replay_events: 2,
        ..ExecutorConfig::default()
    };
    let mut r = running(config, 4); // ids 1..=5; 4 and 5 kept
    let out = subscribe(&mut r, StreamId(2), Some(1));
    assert_eq!(
        ids_on(&out, StreamId(2)),
        vec![(Some(4), "status"), (Some(5), "status")]
    );
}

#[test]
fn the_replay_buffer_keeps_at_most_its_bytes() {
    let config = ExecutorConfig {
        replay_bytes: 4096,
        ..ExecutorConfig::default()
    };
    let mut r = running(config, 0); // status 1
    progress(&mut r, &"x".repeat(10_000)); // 2: too large to keep
    progress(&mut r, "small"); // 3
    let out = subscribe(&mut r, StreamId(2), Some(1));
    assert_eq!(ids_on(&out, StreamId(2)), vec![(Some(3), "status")]);
}

#[test]
fn a_finished_assignment_whose_events_were_evicted_still_replays_its_snapshot_and_end() {
    let config = ExecutorConfig {
        replay_events: 0,
        ..ExecutorConfig::default()
    };
    let mut r = running(config, 2); // ids 1..=3, none kept
    r.finish_round(1); // snapshot 4, done 5
    let out = subscribe(&mut r, StreamId(2), Some(1));
    assert_eq!(
        ids_on(&out, StreamId(2)),
        vec![(Some(4), "snapshot"), (Some(5), "done")]
    );
    // The snapshot it already has is not sent again.
    let out = subscribe(&mut r, StreamId(3), Some(4));
    assert_eq!(ids_on(&out, StreamId(3)), vec![(Some(5), "done")]);
}

#[test]
fn an_unknown_n_moves_the_sequence_past_it() {
    let mut r = running(ExecutorConfig::default(), 1); // ids 1, 2
    let out = subscribe(&mut r, StreamId(2), Some(100));
    assert!(ids_on(&out, StreamId(2)).is_empty());
    let out = progress(&mut r, "after");
    for s in [STREAM, StreamId(2)] {
        assert_eq!(ids_on(&out, s), vec![(Some(101), "status")], "{s:?}");
    }
}

#[test]
fn a_restarted_executor_replays_the_end_with_ids_past_the_subscribers_last() {
    let mut r = running(ExecutorConfig::default(), 5); // ids 1..=6
    r.finish_round(1); // snapshot 7, done 8
    let record = r.ex.record(&r.id).unwrap();
    let mut ex = Executor::new(ExecutorConfig {
        work_root: "/w".into(),
        ..ExecutorConfig::default()
    });
    assert_eq!(ex.restore(r.now, std::slice::from_ref(&record)), 1);
    let _: Vec<_> = std::iter::from_fn(|| ex.poll_output()).collect();
    // The delegator saw up to 6 from the previous process; this one starts again at 0.
    ex.handle(
        r.now,
        ExecutorInput::Subscribe {
            stream: StreamId(9),
            id: r.id.clone(),
            credential: None,
            last_event_id: Some(6),
        },
    )
    .unwrap();
    let out: Vec<_> = std::iter::from_fn(|| ex.poll_output()).collect();
    let got = ids_on(&out, StreamId(9));
    // Whatever the record says the end was, it comes after 6, in a fresh run of ids.
    let ids: Vec<u64> = got.iter().filter_map(|(i, _)| *i).collect();
    let want: Vec<u64> = (7..7 + got.len() as u64).collect();
    assert_eq!(ids, want, "{got:?}");
    assert!(matches!(got.last(), Some((_, "done" | "error"))), "{got:?}");
    assert_eq!(closes(&out, StreamId(9)), 1);
}

#[test]
fn a_refused_subscription_has_no_id() {
    let mut r = Run::new(ExecutorConfig::default());
    let out = subscribe(&mut r, StreamId(2), Some(3));
    assert_eq!(ids_on(&out, StreamId(2)), vec![(None, "error")]);
}
