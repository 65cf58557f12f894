//! SSE subscribers: live events with ids, a replay of the result for late subscribers, and
//! the missed events for subscribers that resume with `Last-Event-ID` (WIRE.md §4.5, §4.6).

use std::sync::Arc;

use crate::engine::StreamId;
use crate::error::{ErrorCode, ErrorInfo};
use crate::id::DelegationId;
use crate::time::Timestamp;
use crate::wire::{Dialect, TaskEvent, TaskEventKind};

use super::auth::Credential;
use super::event_log::{Resume, Retained};
use super::{Executor, ExecutorOutput};

impl Executor {
    pub(super) fn on_stream_closed(&mut self, stream: StreamId) {
        if let Some(id) = self.streams.remove(&stream) {
            if let Some(a) = self.assignments.get_mut(&id) {
                a.subscribers.remove(&stream);
            }
        }
    }

    /// A new subscriber; `after` is its `Last-Event-ID`.
    ///
    /// * Without `after`: live events only, after what a late subscriber is replayed (a
    ///   finished assignment's snapshot and terminal event, an idle round's snapshot and
    ///   `round_done`), as the reference does.
    /// * With `after = n`: the events after `n`. If some of them were evicted from the buffer,
    ///   what is left of it and the retained events after `n` (the subscriber sees the gap in
    ///   the ids). If `n` was never issued (a previous process's id), the sequence jumps past
    ///   `n` and the retained events are replayed with new ids.
    pub(super) fn on_subscribe(
        &mut self,
        stream: StreamId,
        id: &DelegationId,
        credential: Option<Credential>,
        after: Option<u64>,
    ) {
        let dialect = self
            .assignments
            .get(id)
            .map(|a| a.dialect)
            .unwrap_or_default();
        let refuse = |this: &mut Self, error: ErrorInfo| {
            let ev = Arc::new(TaskEvent {
                delegation_id: id.clone(),
                timestamp: this.core.now(),
                kind: TaskEventKind::Error(error),
            });
            this.core.outputs.push_back(ExecutorOutput::StreamEvent {
                stream,
                event: ev,
                dialect,
                event_id: None,
            });
            this.core
                .outputs
                .push_back(ExecutorOutput::CloseStream { stream });
        };
        if !self.authorized(id, credential.as_ref()) {
            return refuse(self, super::auth::auth_failed());
        }
        if self.assignments.get(id).is_none_or(|a| a.acked) {
            return refuse(
                self,
                ErrorInfo::new(ErrorCode::NotFound, format!("unknown delegation {id}")),
            );
        }
        let finished = self
            .assignments
            .get(id)
            .is_some_and(|a| a.terminal_event.is_some());
        let replay = self.replay_for(id, after, finished);
        for (event_id, event) in replay {
            self.core.outputs.push_back(ExecutorOutput::StreamEvent {
                stream,
                event,
                dialect,
                event_id: Some(event_id),
            });
        }
        if finished {
            self.core
                .outputs
                .push_back(ExecutorOutput::CloseStream { stream });
            return;
        }
        if let Some(a) = self.assignments.get_mut(id) {
            a.subscribers.insert(stream);
        }
        self.streams.insert(stream, id.clone());
    }

    /// What a new subscriber is sent before live events, with ids, oldest first.
    fn replay_for(
        &mut self,
        id: &DelegationId,
        after: Option<u64>,
        finished: bool,
    ) -> Vec<(u64, Arc<TaskEvent>)> {
        let Some(a) = self.assignments.get(id) else {
            return Vec::new();
        };
        // The events a late subscriber is given.
        let mut retained: Vec<(Retained, Arc<TaskEvent>)> = Vec::new();
        if finished {
            if let Some(snap) = a.snapshot.clone() {
                if a.dialect == Dialect::Reference {
                    retained.push((Retained::Snapshot, snap));
                }
            }
            if let Some(term) = a.terminal_event.clone() {
                retained.push((Retained::Terminal, term));
            }
        } else {
            let round = self.round_replay(id);
            let kinds = round.into_iter().map(|e| {
                let which = if matches!(e.kind, TaskEventKind::Snapshot(_)) {
                    Retained::Snapshot
                } else {
                    Retained::RoundDone
                };
                (which, e)
            });
            retained.extend(kinds);
        }
        let Some(a) = self.assignments.get_mut(id) else {
            return Vec::new();
        };
        let buffered = match after.map(|n| (n, a.events.after(n))) {
            None => Vec::new(),
            Some((_, Resume::Complete(v))) => v,
            Some((n, Resume::Partial(v))) => {
                tracing::info!(delegation = %id, after = n, "resumed event stream: some events after the subscriber's last were evicted");
                v
            }
            Some((n, Resume::Unknown)) => {
                tracing::info!(delegation = %id, after = n, last = a.events.last(), "resumed event stream: unknown Last-Event-ID; the sequence goes on after it");
                a.events.skip_past(n);
                Vec::new()
            }
        };
        let mut out = buffered;
        for (which, event) in retained {
            let event_id = match a.events.retained(which) {
                Some(i) => i,
                None => {
                    let i = a.events.issue();
                    a.events.retain(which, i);
                    i
                }
            };
            if after.is_none_or(|n| event_id > n) && !out.iter().any(|(i, _)| *i == event_id) {
                out.push((event_id, event));
            }
        }
        out.sort_by_key(|(i, _)| *i);
        out
    }

    /// Sends an event to every live subscriber; a terminal event also closes them and is
    /// retained for replay.
    pub(super) fn broadcast(&mut self, now: Timestamp, id: &DelegationId, kind: TaskEventKind) {
        let limits = self.config.replay_limits();
        let Some(a) = self.assignments.get_mut(id) else {
            return;
        };
        let terminal = kind.is_terminal();
        let is_snapshot = matches!(kind, TaskEventKind::Snapshot(_));
        let is_round_done = matches!(kind, TaskEventKind::RoundDone(_));
        let ev = Arc::new(TaskEvent {
            delegation_id: id.clone(),
            timestamp: now,
            kind,
        });
        let dialect = a.dialect;
        let send = !(is_snapshot && dialect == Dialect::Seed);
        // Only what is sent is in the sequence (a gap in the ids means events were lost).
        let event_id = send.then(|| a.events.record(&ev, limits));
        if is_snapshot {
            a.snapshot = Some(ev.clone());
            if let Some(i) = event_id {
                a.events.retain(Retained::Snapshot, i);
            }
        }
        if terminal {
            a.terminal_event = Some(ev.clone());
            if let Some(i) = event_id {
                a.events.retain(Retained::Terminal, i);
            }
        }
        if is_round_done {
            a.round_done = Some(ev.clone());
            if let Some(i) = event_id {
                a.events.retain(Retained::RoundDone, i);
            }
        }
        for &s in &a.subscribers {
            if send {
                self.core.outputs.push_back(ExecutorOutput::StreamEvent {
                    stream: s,
                    event: ev.clone(),
                    dialect,
                    event_id,
                });
            }
            if terminal {
                self.core
                    .outputs
                    .push_back(ExecutorOutput::CloseStream { stream: s });
                self.streams.remove(&s);
            }
        }
        if terminal {
            a.subscribers.clear();
        }
    }
}
