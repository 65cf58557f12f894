//! Event ids and the replay buffer of one assignment (WIRE.md §4.6, this implementation).
//!
//! Every event an assignment sends gets the next id of its own sequence (1, 2, 3…), the same
//! for every subscriber. The last events are kept in a buffer bounded in count and in bytes
//! ([`ExecutorConfig::replay_events`](super::ExecutorConfig::replay_events),
//! [`ExecutorConfig::replay_bytes`](super::ExecutorConfig::replay_bytes)), so that a subscriber
//! that comes back with `Last-Event-ID: n` gets what it missed. The buffer is contiguous: it
//! holds the ids `evicted + 1 ..= last`; an event too large for it evicts everything before
//! it and itself.
//!
//! Implementation note: the buffer lives in memory only. A restarted executor starts every
//! sequence again at 0; a subscriber whose `n` is past the end ([`Resume::Unknown`]) makes
//! the sequence jump past `n`, so what it is sent next is never taken for a duplicate.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::wire::{TaskEvent, TaskEventKind};

/// The bounds of a replay buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReplayLimits {
    /// Most events kept.
    pub(crate) events: usize,
    /// Most bytes kept (by [`weight`]).
    pub(crate) bytes: usize,
}

/// One buffered event.
#[derive(Clone, Debug)]
struct Buffered {
    id: u64,
    event: Arc<TaskEvent>,
    weight: usize,
}

/// Which retained event (replayed to late subscribers) an id belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retained {
    /// The last `snapshot`.
    Snapshot,
    /// The last `round_done`.
    RoundDone,
    /// The terminal `done` or `error`.
    Terminal,
}

/// What a subscriber resuming after id `n` can be given.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Resume {
    /// Every event after `n`, oldest first (possibly none).
    Complete(Vec<(u64, Arc<TaskEvent>)>),
    /// Events after `n` were evicted: what is still buffered, oldest first.
    Partial(Vec<(u64, Arc<TaskEvent>)>),
    /// `n` is past the last id issued (an id of a previous executor process, or made up).
    Unknown,
}

/// The ids and replay buffer of one assignment.
#[derive(Clone, Debug, Default)]
pub(crate) struct EventLog {
    /// The last id issued (0: none yet).
    last: u64,
    /// Every id up to this one is no longer buffered.
    evicted: u64,
    buffer: VecDeque<Buffered>,
    bytes: usize,
    snapshot: Option<u64>,
    round_done: Option<u64>,
    terminal: Option<u64>,
}

impl EventLog {
    /// The last id issued (0: none yet).
    pub(crate) fn last(&self) -> u64 {
        self.last
    }

    /// A new id for an event that is not buffered: a retained event that had none (restored
    /// after a restart, or not sent live). It is found through [`EventLog::retained`].
    pub(crate) fn issue(&mut self) -> u64 {
        self.last += 1;
        self.last
    }

    /// Records a sent event: it gets the next id and is buffered within `limits`.
    pub(crate) fn record(&mut self, event: &Arc<TaskEvent>, limits: ReplayLimits) -> u64 {
        self.last += 1;
        let id = self.last;
        let weight = weight(event);
        self.buffer.push_back(Buffered {
            id,
            event: event.clone(),
            weight,
        });
        self.bytes += weight;
        while self.buffer.len() > limits.events || self.bytes > limits.bytes {
            let Some(b) = self.buffer.pop_front() else {
                break;
            };
            self.bytes -= b.weight;
            self.evicted = b.id;
        }
        id
    }

    /// The events after `n` (see [`Resume`]).
    pub(crate) fn after(&self, n: u64) -> Resume {
        if n > self.last {
            return Resume::Unknown;
        }
        let events = self
            .buffer
            .iter()
            .filter(|b| b.id > n)
            .map(|b| (b.id, b.event.clone()))
            .collect();
        if n >= self.evicted {
            Resume::Complete(events)
        } else {
            Resume::Partial(events)
        }
    }

    /// A subscriber knows ids up to `n` from elsewhere (a previous process): the sequence
    /// goes on after it, and retained events get new ids when next replayed.
    pub(crate) fn skip_past(&mut self, n: u64) {
        if n > self.last {
            self.last = n;
            self.evict_all();
            self.snapshot = None;
            self.round_done = None;
            self.terminal = None;
        }
    }

    /// The id of a retained event, if it has one.
    pub(crate) fn retained(&self, which: Retained) -> Option<u64> {
        match which {
            Retained::Snapshot => self.snapshot,
            Retained::RoundDone => self.round_done,
            Retained::Terminal => self.terminal,
        }
    }

    /// Notes the id of a retained event.
    pub(crate) fn retain(&mut self, which: Retained, id: u64) {
        let slot = match which {
            Retained::Snapshot => &mut self.snapshot,
            Retained::RoundDone => &mut self.round_done,
            Retained::Terminal => &mut self.terminal,
        };
        *slot = Some(id);
    }

    fn evict_all(&mut self) {
        self.buffer.clear();
        self.bytes = 0;
        self.evicted = self.last;
    }
}

/// About how many bytes an event holds: its text fields (an inline archive's base64 above
/// all) plus a fixed overhead. Cheap: nothing is encoded.
pub(crate) fn weight(event: &TaskEvent) -> usize {
    const OVERHEAD: usize = 256;
    let strings = |v: &[String]| v.iter().map(String::len).sum::<usize>();
    let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    let meta = |m: &std::collections::BTreeMap<String, serde_json::Value>| {
        m.iter()
            .map(|(k, v)| k.len() + v.to_string().len())
            .sum::<usize>()
    };
    OVERHEAD
        + match &event.kind {
            TaskEventKind::Status(s) => opt(&s.message),
            TaskEventKind::Snapshot(s) => {
                s.summary.len()
                    + strings(&s.highlights)
                    + opt(&s.data.base64)
                    + opt(&s.data.url)
                    + opt(&s.data.local_file)
                    + meta(&s.metadata)
            }
            TaskEventKind::Done(d) => {
                d.summary.len()
                    + strings(&d.highlights)
                    + opt(&d.result_base64)
                    + opt(&d.result_local_file)
                    + d.snapshot_ids.len() * 32
            }
            TaskEventKind::Error(e) => e.message.len() + opt(&e.hint),
            TaskEventKind::RoundDone(r) => {
                r.summary.len() + strings(&r.highlights) + r.snapshot_ids.len() * 32
            }
        }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::id::DelegationId;
    use crate::time::Timestamp;
    use crate::wire::{StatusEvent, TaskStatus};

    fn status(message: &str) -> Arc<TaskEvent> {
        Arc::new(TaskEvent {
            delegation_id: DelegationId::new("dlg_1").unwrap(),
            timestamp: Timestamp::from_unix_millis(0),
            kind: TaskEventKind::Status(StatusEvent {
                status: TaskStatus::Progress,
                message: Some(message.to_owned()),
                progress: None,
            }),
        })
    }

    const ROOMY: ReplayLimits = ReplayLimits {
        events: 100,
        bytes: 1 << 20,
    };

    fn ids(r: &Resume) -> Vec<u64> {
        match r {
            Resume::Complete(v) | Resume::Partial(v) => v.iter().map(|(id, _)| *id).collect(),
            Resume::Unknown => vec![],
        }
    }

    #[test]
    fn ids_are_assigned_in_order_from_one() {
        let mut log = EventLog::default();
        let got: Vec<_> = (0..3).map(|_| log.record(&status("x"), ROOMY)).collect();
        assert_eq!(got, vec![1, 2, 3]);
        assert_eq!(log.last(), 3);
    }

    #[test]
    fn resuming_after_n_gives_the_events_after_n() {
        let mut log = EventLog::default();
        for m in ["a", "b", "c"] {
            log.record(&status(m), ROOMY);
        }
        let r = log.after(1);
        assert!(matches!(r, Resume::Complete(_)));
        assert_eq!(ids(&r), vec![2, 3]);
        assert_eq!(log.after(3), Resume::Complete(vec![]));
        assert_eq!(ids(&log.after(0)), vec![1, 2, 3]);
    }

    #[test]
    fn the_buffer_keeps_at_most_its_count_and_an_older_n_is_partial() {
        let limits = ReplayLimits {
            events: 2,
            bytes: 1 << 20,
        };
        let mut log = EventLog::default();
        for m in ["a", "b", "c", "d"] {
            log.record(&status(m), limits);
        }
        let r = log.after(1);
        assert!(matches!(r, Resume::Partial(_)));
        assert_eq!(ids(&r), vec![3, 4]);
        assert!(matches!(log.after(2), Resume::Complete(_)));
    }

    #[test]
    fn the_buffer_keeps_at_most_its_bytes_and_an_event_too_large_is_not_kept() {
        let limits = ReplayLimits {
            events: 100,
            bytes: 2000,
        };
        let mut log = EventLog::default();
        log.record(&status("small"), limits);
        log.record(&status(&"x".repeat(5000)), limits);
        // The large one evicted everything before it, and itself.
        assert!(matches!(log.after(0), Resume::Partial(ref v) if v.is_empty()));
        log.record(&status("after"), limits);
        assert_eq!(ids(&log.after(2)), vec![3]);
        assert!(matches!(log.after(2), Resume::Complete(_)));
        assert!(log.bytes <= limits.bytes);
    }

    #[test]
    fn an_id_past_the_last_is_unknown_and_the_sequence_jumps_past_it() {
        let mut log = EventLog::default();
        log.record(&status("a"), ROOMY);
        log.retain(Retained::Terminal, 1);
        assert_eq!(log.after(7), Resume::Unknown);
        log.skip_past(7);
        assert_eq!(log.retained(Retained::Terminal), None);
        assert_eq!(log.record(&status("b"), ROOMY), 8);
        assert_eq!(log.issue(), 9);
    }
}
