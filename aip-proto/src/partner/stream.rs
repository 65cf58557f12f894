//! Streams (§6.2): every task keeps a bounded log of its events, numbered by an increasing
//! `eventSeq`; a `stream` request subscribes to it, `re-stream` replays what followed
//! `lastEventSeq`, and streams close once the task is terminal (after its last event).
//!
//! A re-stream that needs events the log no longer holds (it keeps
//! [`super::PartnerConfig::stream_buffer`] events) gets one error frame and the stream closes:
//! `{"code":-32001,"message":"Stream events expired","data":{"lastAvailableSeq":N,
//! "oldestAvailableSeq":M}}` (v02.02's text; `lastAvailableSeq` is the newest event the
//! partner has).

use std::collections::VecDeque;

use super::task::PartnerTask;
use super::{Partner, PartnerOutput, PartnerTimer};
use crate::engine::{Clock as _, RequestId};
use crate::error::{ErrorCode, RpcError};
use crate::sse;
use crate::time::Timestamp;
use crate::wire::{
    encode_error, encode_stream_event, Dialect, EventData, Header, Product, ProductChunk, RpcId,
    StatusUpdate, StreamEvent, TaskResult, TaskStatus,
};

/// What a logged event was; rendered into [`EventData`] only when a stream needs it, so
/// tasks without subscribers pay for a status clone per change and nothing more.
#[derive(Debug)]
pub(crate) enum Logged {
    /// The whole task (first event, or the snapshot a new stream starts with).
    Snapshot {
        status: TaskStatus,
        products: Vec<Product>,
    },
    /// A status change or progress.
    Status(TaskStatus),
    /// A product chunk.
    Chunk {
        product: Shown,
        append: bool,
        last_chunk: bool,
    },
}

/// The product a logged chunk shows.
///
/// Implementation note: a chunk usually shows a product exactly as the task then stores it,
/// and an ended task is kept (10,000 by default) long after its stream closed; a copy per
/// chunk was four more allocations per task to keep and, when the task is purged, to free
/// (each a cache miss by then: BENCHMARKS.md). So the log points at the stored product
/// instead, and copies it out ([`EventLog::detach`]) before the task's product at that place
/// is replaced. Products are only ever added or replaced in place, never removed or moved.
#[derive(Debug)]
pub(crate) enum Shown {
    /// The task's product at this index, as it is now.
    InTask(usize),
    /// A copy (a chunk that differs from what the task stores, or a product since replaced;
    /// boxed: the log's entries stay small, see [`EventLog::push`]).
    Held(Box<Product>),
}

#[derive(Debug)]
struct Entry {
    seq: u64,
    at: Timestamp,
    what: Logged,
}

/// A task's numbered events, the newest `capacity` of them.
#[derive(Debug, Default)]
pub(crate) struct EventLog {
    events: VecDeque<Entry>,
    last_seq: u64,
    /// The newest sequence number that is no longer held (0: nothing expired).
    expired_upto: u64,
}

impl EventLog {
    /// Implementation note: a short lifecycle logs five events (the first snapshot, working,
    /// a product chunk, awaiting-completion, the end); the first push makes room for six at
    /// once (one allocation, not three; a longer task grows it), and entries are small
    /// enough (a chunk points at its product) that they stay under a kilobyte, which glibc's
    /// allocator serves from its small bins. Ended tasks are kept by the thousand, so the
    /// room matters: six measured faster than eight (BENCHMARKS.md, 2026-11-28).
    pub(super) fn push(&mut self, what: Logged, at: Timestamp, capacity: usize) -> u64 {
        if self.events.capacity() == 0 {
            self.events.reserve_exact(capacity.clamp(1, 6));
        }
        self.last_seq += 1;
        self.events.push_back(Entry {
            seq: self.last_seq,
            at,
            what,
        });
        while self.events.len() > capacity.max(1) {
            if let Some(e) = self.events.pop_front() {
                self.expired_upto = e.seq;
            }
        }
        self.last_seq
    }

    /// Before the task's product at `index` is replaced: the chunks that show it get a copy
    /// of it as it is.
    pub(crate) fn detach(&mut self, index: usize, product: &Product) {
        for e in &mut self.events {
            if let Logged::Chunk { product: shown, .. } = &mut e.what {
                if matches!(shown, Shown::InTask(i) if *i == index) {
                    *shown = Shown::Held(Box::new(product.clone()));
                }
            }
        }
    }

    pub(crate) fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Whether every event since the first is still held.
    pub(crate) fn is_complete(&self) -> bool {
        self.expired_upto == 0
    }

    fn after(&self, seq: u64) -> impl Iterator<Item = &Entry> {
        self.events.iter().filter(move |e| e.seq > seq)
    }
}

/// The stream event of a log entry (message ids derive from task and sequence number, so a
/// replayed event carries the same id as the first time).
fn render(t: &PartnerTask, partner_id: &str, e: &Entry) -> StreamEvent {
    let header = |kind: &str| {
        let mut h = Header::partner(
            format!("{kind}-{}-{}", t.id, e.seq),
            e.at,
            partner_id.to_owned(),
        );
        h.session_id = t.session_id().map(str::to_owned);
        h
    };
    let data = match &e.what {
        Logged::Snapshot { status, products } => EventData::Task(TaskResult {
            header: header("result"),
            task_id: t.id.to_string(),
            status: status.clone(),
            products: Some(products.clone()),
            command_history: None,
            status_history: None,
        }),
        Logged::Status(status) => EventData::StatusUpdate(StatusUpdate {
            header: header("event"),
            task_id: t.id.to_string(),
            status: status.clone(),
        }),
        Logged::Chunk {
            product,
            append,
            last_chunk,
        } => EventData::ProductChunk(ProductChunk {
            header: header("event"),
            task_id: t.id.to_string(),
            product: match product {
                Shown::InTask(i) => t.products.get(*i).cloned().unwrap_or_else(|| {
                    debug_assert!(false, "a logged chunk points past the task's products");
                    Product {
                        id: String::new(),
                        name: None,
                        description: None,
                        data_items: Vec::new(),
                    }
                }),
                Shown::Held(p) => Product::clone(p),
            },
            append: *append,
            last_chunk: *last_chunk,
        }),
    };
    StreamEvent { seq: e.seq, data }
}

/// One open stream.
#[derive(Debug)]
pub(crate) struct Subscriber {
    task_id: String,
    id: RpcId,
    dialect: Dialect,
}

impl Partner {
    /// Logs an event and sends it to the task's streams; closes them if the task ended.
    pub(super) fn append_event(&mut self, task_id: &str, what: Logged) {
        let (cap, now) = (self.config.stream_buffer, self.core.now());
        let Some(t) = self.tasks.get_mut(task_id) else {
            return;
        };
        let seq = t.log.push(what, now, cap);
        let terminal = t.status.as_ref().is_some_and(|s| s.state.is_terminal());
        let subs: Vec<RequestId> = t.subscribers.iter().copied().collect();
        for r in subs {
            self.send_events(r, task_id, seq - 1);
            if terminal {
                self.close_stream(r);
            }
        }
    }

    /// Sends the events logged after `after` to the task's streams (which stay open: the
    /// task did not end).
    pub(super) fn send_logged_after(&mut self, task_id: &str, after: u64) {
        let Some(t) = self.tasks.get(task_id) else {
            return;
        };
        let subs: Vec<RequestId> = t.subscribers.iter().copied().collect();
        for r in subs {
            self.send_events(r, task_id, after);
        }
    }

    /// Sends the events after `after` to stream `r`.
    fn send_events(&mut self, r: RequestId, task_id: &str, after: u64) {
        let (Some(sub), Some(t)) = (self.streams.get(&r), self.tasks.get(task_id)) else {
            return;
        };
        let frames: Vec<Vec<u8>> = t
            .log
            .after(after)
            .map(|e| {
                let ev = render(t, &self.config.partner_id, e);
                sse::frame(&encode_stream_event(&sub.id, &ev, sub.dialect))
            })
            .collect();
        for data in frames {
            self.push(PartnerOutput::StreamData { request: r, data });
        }
        if let Some(k) = self.config.keepalive {
            let at = self.core.at(k);
            self.core.timers.set(PartnerTimer::Keepalive(r), at);
        }
    }

    /// Opens a stream on `r` for `task_id` and replays the events after `after`; closes it at
    /// once if the task already ended.
    pub(super) fn subscribe(
        &mut self,
        r: RequestId,
        task_id: &str,
        id: RpcId,
        dialect: Dialect,
        after: u64,
    ) {
        let Some(t) = self.tasks.get_mut(task_id) else {
            return;
        };
        if t.subscribers.len() >= self.config.max_streams_per_task {
            let e =
                RpcError::with_message(ErrorCode::InternalError, "too many streams for this task");
            self.respond(r, encode_error(&id, &e));
            return;
        }
        t.subscribers.insert(r);
        let terminal = t.status.as_ref().is_some_and(|s| s.state.is_terminal());
        self.streams.insert(
            r,
            Subscriber {
                task_id: task_id.to_owned(),
                id,
                dialect,
            },
        );
        self.push(PartnerOutput::StartStream { request: r });
        self.send_events(r, task_id, after);
        if terminal {
            self.close_stream(r);
        }
    }

    /// `re-stream`: replay after `last` (everything if `None`), or the expiry error frame.
    pub(super) fn restream(
        &mut self,
        r: RequestId,
        task_id: &str,
        id: RpcId,
        dialect: Dialect,
        last: Option<u64>,
    ) {
        let Some(t) = self.tasks.get(task_id) else {
            return;
        };
        let after = last.unwrap_or(0);
        if after < t.log.expired_upto {
            let e = RpcError::with_message(ErrorCode::TaskNotFound, "Stream events expired")
                .with_data(serde_json::json!({
                    "lastAvailableSeq": t.log.last_seq,
                    "oldestAvailableSeq": t.log.expired_upto + 1,
                }));
            self.push(PartnerOutput::StartStream { request: r });
            self.push(PartnerOutput::StreamData {
                request: r,
                data: sse::frame(&encode_error(&id, &e)),
            });
            self.push(PartnerOutput::EndStream { request: r });
            return;
        }
        self.subscribe(r, task_id, id, dialect, after);
    }

    /// A stream with a current snapshot first: used by `stream` requests that did not create
    /// the task.
    pub(super) fn subscribe_with_snapshot(
        &mut self,
        r: RequestId,
        task_id: &str,
        id: RpcId,
        dialect: Dialect,
    ) {
        let (cap, now) = (self.config.stream_buffer, self.core.now());
        let Some(t) = self.tasks.get_mut(task_id) else {
            return;
        };
        let Some(status) = t.status.clone() else {
            return;
        };
        let before = t.log.last_seq;
        // Logged, not only sent, so the numbering stays one sequence per task.
        let snapshot = Logged::Snapshot {
            status,
            products: t.products.clone(),
        };
        let seq = t.log.push(snapshot, now, cap);
        let others: Vec<RequestId> = t.subscribers.iter().copied().collect();
        for o in others {
            self.send_events(o, task_id, seq - 1);
        }
        self.subscribe(r, task_id, id, dialect, before);
    }

    fn close_stream(&mut self, r: RequestId) {
        if let Some(sub) = self.streams.remove(&r) {
            if let Some(t) = self.tasks.get_mut(&sub.task_id) {
                t.subscribers.remove(&r);
            }
            self.core.timers.cancel(&PartnerTimer::Keepalive(r));
            self.push(PartnerOutput::EndStream { request: r });
        }
    }

    /// The client went away.
    pub(super) fn unsubscribe(&mut self, r: RequestId) {
        if let Some(sub) = self.streams.remove(&r) {
            if let Some(t) = self.tasks.get_mut(&sub.task_id) {
                t.subscribers.remove(&r);
            }
            self.core.timers.cancel(&PartnerTimer::Keepalive(r));
        }
    }

    pub(super) fn keepalive(&mut self, r: RequestId) {
        if self.streams.contains_key(&r) {
            self.push(PartnerOutput::StreamData {
                request: r,
                data: sse::KEEPALIVE.to_vec(),
            });
            if let Some(k) = self.config.keepalive {
                let at = self.core.at(k);
                self.core.timers.set(PartnerTimer::Keepalive(r), at);
            }
        }
    }
}

#[cfg(test)]
mod size_tests {
    /// Eight log entries stay under a kilobyte (see [`super::EventLog::push`]).
    #[test]
    fn eight_log_entries_fit_in_a_kilobyte() {
        assert!(8 * std::mem::size_of::<super::Entry>() < 1024);
    }
}
