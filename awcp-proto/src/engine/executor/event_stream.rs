//! SSE subscribers: live events, and a replay of the result for late subscribers.

use std::sync::Arc;

use crate::engine::StreamId;
use crate::error::{ErrorCode, ErrorInfo};
use crate::id::DelegationId;
use crate::time::Timestamp;
use crate::wire::{Dialect, TaskEvent, TaskEventKind};

use super::auth::Credential;
use super::{Executor, ExecutorOutput};

impl Executor {
    pub(super) fn on_stream_closed(&mut self, stream: StreamId) {
        if let Some(id) = self.streams.remove(&stream) {
            if let Some(a) = self.assignments.get_mut(&id) {
                a.subscribers.remove(&stream);
            }
        }
    }

    pub(super) fn on_subscribe(
        &mut self,
        stream: StreamId,
        id: &DelegationId,
        credential: Option<Credential>,
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
            });
            this.core
                .outputs
                .push_back(ExecutorOutput::CloseStream { stream });
        };
        if !self.authorized(id, credential.as_ref()) {
            return refuse(self, super::auth::auth_failed());
        }
        let Some(a) = self.assignments.get_mut(id).filter(|a| !a.acked) else {
            return refuse(
                self,
                ErrorInfo::new(ErrorCode::NotFound, format!("unknown delegation {id}")),
            );
        };
        if let Some(term) = a.terminal_event.clone() {
            // Replay for late subscribers: the snapshot (if any) and the terminal event.
            if let Some(snap) = a.snapshot.clone() {
                if dialect == Dialect::Reference {
                    self.core.outputs.push_back(ExecutorOutput::StreamEvent {
                        stream,
                        event: snap,
                        dialect,
                    });
                }
            }
            self.core.outputs.push_back(ExecutorOutput::StreamEvent {
                stream,
                event: term,
                dialect,
            });
            self.core
                .outputs
                .push_back(ExecutorOutput::CloseStream { stream });
            return;
        }
        for event in self.round_replay(id) {
            self.core.outputs.push_back(ExecutorOutput::StreamEvent {
                stream,
                event,
                dialect,
            });
        }
        if let Some(a) = self.assignments.get_mut(id) {
            a.subscribers.insert(stream);
        }
        self.streams.insert(stream, id.clone());
    }

    /// Sends an event to every live subscriber; a terminal event also closes them and is
    /// retained for replay.
    pub(super) fn broadcast(&mut self, now: Timestamp, id: &DelegationId, kind: TaskEventKind) {
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
        if is_snapshot {
            a.snapshot = Some(ev.clone());
        }
        if terminal {
            a.terminal_event = Some(ev.clone());
        }
        if is_round_done {
            a.round_done = Some(ev.clone());
        }
        let send = !(is_snapshot && dialect == Dialect::Seed);
        for &s in &a.subscribers {
            if send {
                self.core.outputs.push_back(ExecutorOutput::StreamEvent {
                    stream: s,
                    event: ev.clone(),
                    dialect,
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
