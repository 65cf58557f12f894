//! The leader's view of one task, and the only way it changes: [`Leader::observe`] takes a
//! status from any source (reply, stream event, notification) and keeps the newest that the
//! state machine allows. Also the notification receiver.

use super::{AbandonReason, CallError, Delivery, Leader, LeaderEvent, LeaderOutput, LeaderTimer};
use crate::engine::{CallId, Clock as _, RequestId};
use crate::state::is_reachable;
use crate::time::Timestamp;
use crate::wire::{
    decode_task, Dialect, EventData, Product, ProductChunk, RpcResult, StartParams, TaskResult,
    TaskState, TaskStatus,
};

/// How a task ended for the leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    State(TaskState),
    Abandoned(AbandonReason),
}

/// A task as the leader follows it.
#[derive(Debug)]
pub(crate) struct LeaderTask {
    pub(crate) id: String,
    pub(crate) partner: String,
    pub(crate) session_id: String,
    pub(crate) dialect: Dialect,
    pub(crate) delivery: Delivery,
    pub(crate) params: StartParams,
    pub(crate) data_items: Vec<crate::wire::DataItem>,
    pub(crate) status: Option<TaskStatus>,
    pub(crate) products: Vec<Product>,
    /// The newest stream event accepted (0: none).
    pub(crate) last_seq: u64,
    /// Stream event numbers accepted, in order (bounded; for checks and tests).
    pub(crate) seqs: Vec<u64>,
    pub(crate) stream: Option<CallId>,
    /// The stream start request, re-sent while no event was seen.
    pub(crate) start_body: Option<Vec<u8>>,
    pub(crate) restream_attempts: u32,
    pub(crate) stream_lost: bool,
    pub(crate) get_in_flight: bool,
    pub(crate) deadline_hit: bool,
    pub(crate) notification_token: Option<String>,
    /// The newest `sentAt` among the results and events applied (v02 headers; v01.00 has
    /// none): a result sent before it cannot carry newer data items or products.
    pub(crate) newest_sent: Option<Timestamp>,
    /// The application's ticket for the start, until the first task answers it.
    pub(crate) start_ticket: Option<crate::leader::Ticket>,
    pub(crate) ended: Option<Ended>,
}

/// A read-only view of a task at the leader.
#[derive(Clone, Copy, Debug)]
pub struct LeaderTaskView<'a> {
    /// The task id.
    pub id: &'a str,
    /// The partner.
    pub partner: &'a str,
    /// The observed state (`None` before the first answer).
    pub state: Option<TaskState>,
    /// The observed status.
    pub status: Option<&'a TaskStatus>,
    /// The products as last received.
    pub products: &'a [Product],
    /// The newest stream event accepted (0: none).
    pub last_event_seq: u64,
    /// Every stream event number accepted, in order (the last 4096).
    pub event_seqs: &'a [u64],
    /// Whether the leader follows the task no more (terminal, or abandoned).
    pub ended: bool,
    /// Why it was abandoned, if it was.
    pub abandoned: Option<&'a AbandonReason>,
    /// Whether the stream could not be resumed (the task is polled instead).
    pub stream_lost: bool,
}

const MAX_SEQS: usize = 4096;

impl LeaderTask {
    pub(crate) fn view(&self) -> LeaderTaskView<'_> {
        LeaderTaskView {
            id: &self.id,
            partner: &self.partner,
            state: self.status.as_ref().map(|s| s.state),
            status: self.status.as_ref(),
            products: &self.products,
            last_event_seq: self.last_seq,
            event_seqs: &self.seqs,
            ended: self.ended.is_some(),
            abandoned: match &self.ended {
                Some(Ended::Abandoned(r)) => Some(r),
                _ => None,
            },
            stream_lost: self.stream_lost,
        }
    }

    /// Whether something sent at `sent` is older than the newest thing applied.
    pub(crate) fn sent_before_newest(&self, sent: Option<Timestamp>) -> bool {
        matches!((sent, self.newest_sent), (Some(s), Some(n)) if s < n)
    }

    pub(crate) fn saw_sent(&mut self, sent: Option<Timestamp>) {
        if sent > self.newest_sent {
            self.newest_sent = sent;
        }
    }

    pub(crate) fn accept_seq(&mut self, seq: u64) -> bool {
        if seq <= self.last_seq {
            return false;
        }
        self.last_seq = seq;
        if self.seqs.len() >= MAX_SEQS {
            self.seqs.remove(0);
        }
        self.seqs.push(seq);
        true
    }
}

/// How a new status relates to the one held.
enum Verdict {
    New,
    Progress,
    Stale,
    Impossible,
}

fn judge(cur: Option<&TaskStatus>, new: &TaskStatus) -> Verdict {
    let Some(cur) = cur else {
        return if is_reachable(None, new.state) {
            Verdict::New
        } else {
            Verdict::Impossible
        };
    };
    let reachable = is_reachable(Some(cur.state), new.state);
    match new.state_changed_at.cmp(&cur.state_changed_at) {
        core::cmp::Ordering::Less => Verdict::Stale,
        core::cmp::Ordering::Equal if new.state == cur.state => {
            if new.data_items != cur.data_items {
                Verdict::Progress
            } else {
                Verdict::Stale
            }
        }
        // Two changes within one clock tick: take the one the table allows after ours.
        core::cmp::Ordering::Equal => {
            if reachable {
                Verdict::New
            } else {
                Verdict::Stale
            }
        }
        core::cmp::Ordering::Greater if reachable => Verdict::New,
        core::cmp::Ordering::Greater if new.state == cur.state && !cur.state.is_terminal() => {
            // The same state entered again later (a cycle we did not see) or new data items.
            Verdict::Progress
        }
        core::cmp::Ordering::Greater => Verdict::Impossible,
    }
}

impl Leader {
    /// Takes a status from any source, sent at `sent` (if the source says). `true` when it
    /// is news (the view moved).
    pub(super) fn observe(
        &mut self,
        task_id: &str,
        new: &TaskStatus,
        sent: Option<Timestamp>,
    ) -> bool {
        let Some(t) = self.tasks.get_mut(task_id) else {
            return false;
        };
        if matches!(t.ended, Some(Ended::Abandoned(_))) {
            return false;
        }
        let older = t.sent_before_newest(sent);
        t.saw_sent(sent);
        match judge(t.status.as_ref(), new) {
            Verdict::Stale => false,
            // Progress keeps its `stateChangedAt`: only `sentAt` tells an old answer (a reply
            // that crossed newer stream events) from new progress.
            Verdict::Progress if older => false,
            Verdict::Impossible => {
                let from = t.status.as_ref().map_or("none", |s| s.state.as_str());
                let detail = format!("reported {} after {from}", new.state);
                self.event(LeaderEvent::PeerMisbehaved {
                    task_id: task_id.to_owned(),
                    detail,
                });
                false
            }
            Verdict::Progress => {
                t.status = Some(new.clone());
                self.event(LeaderEvent::Progress {
                    task_id: task_id.to_owned(),
                    status: new.clone(),
                });
                true
            }
            Verdict::New => {
                let from = t.status.as_ref().map(|s| s.state);
                t.status = Some(new.clone());
                self.event(LeaderEvent::StateChanged {
                    task_id: task_id.to_owned(),
                    from,
                    status: new.clone(),
                });
                if new.state.is_terminal() {
                    self.end(task_id, Ended::State(new.state));
                }
                true
            }
        }
    }

    /// A whole task (reply, stream or notification): its status, then its products.
    ///
    /// `from_stream` says the task came on the task's own stream, which is ordered with its
    /// product chunks. A reply or notification is not: with the same status and no `sentAt`
    /// to order it (v01.00 has none), it may have been written before chunks the stream has
    /// already delivered, so while that stream is live it leaves the products alone (the
    /// stream brings every later change anyway).
    pub(super) fn apply_result(&mut self, task_id: &str, result: TaskResult, from_stream: bool) {
        if result.task_id != task_id {
            self.event(LeaderEvent::PeerMisbehaved {
                task_id: task_id.to_owned(),
                detail: format!("answer about task {}", result.task_id),
            });
            return;
        }
        if let (Some(t), Some(session)) = (self.tasks.get_mut(task_id), &result.header.session_id) {
            // An attached task whose session the caller did not know takes the partner's.
            if t.session_id.is_empty() {
                t.session_id.clone_from(session);
            }
        }
        let sent = result.header.sent_at;
        let older = self
            .tasks
            .get(task_id)
            .is_some_and(|t| t.sent_before_newest(sent));
        let news = self.observe(task_id, &result.status, sent);
        let same = self
            .tasks
            .get(task_id)
            .and_then(|t| t.status.as_ref())
            .is_some_and(|s| *s == result.status);
        if news || same {
            if let (Some(t), Some(p)) = (self.tasks.get_mut(task_id), &result.products) {
                let unordered = !from_stream
                    && (sent.is_none() || t.newest_sent.is_none())
                    && !t.stream_lost
                    && t.last_seq > 0;
                if news || !(older || unordered) {
                    t.products.clone_from(p);
                }
            }
            let waits = self
                .tasks
                .get(task_id)
                .is_some_and(|t| t.start_ticket.is_some());
            if waits {
                self.answer_start(task_id, Ok(RpcResult::Task(Box::new(result.clone()))));
            }
            self.event(LeaderEvent::Result {
                task_id: task_id.to_owned(),
                result: Box::new(result),
            });
        }
    }

    /// One accepted stream event.
    pub(super) fn apply_event(&mut self, task_id: &str, data: EventData) {
        match data {
            EventData::Task(r) => self.apply_result(task_id, r, true),
            EventData::StatusUpdate(u) => {
                self.observe(task_id, &u.status, u.header.sent_at);
            }
            EventData::ProductChunk(c) => self.apply_chunk(task_id, c),
            EventData::Command(m) => self.event(LeaderEvent::Message {
                task_id: task_id.to_owned(),
                message: Box::new(m),
            }),
        }
    }

    fn apply_chunk(&mut self, task_id: &str, c: ProductChunk) {
        let Some(t) = self.tasks.get_mut(task_id) else {
            return;
        };
        t.saw_sent(c.header.sent_at);
        match t.products.iter_mut().find(|p| p.id == c.product.id) {
            Some(p) if c.append => p.data_items.extend(c.product.data_items.iter().cloned()),
            Some(p) => *p = c.product.clone(),
            None => t.products.push(c.product.clone()),
        }
        self.event(LeaderEvent::ProductChunk {
            task_id: task_id.to_owned(),
            chunk: Box::new(c),
        });
    }

    /// The leader follows the task no more: timers, stream and token go.
    pub(super) fn end(&mut self, task_id: &str, how: Ended) {
        let Some(t) = self.tasks.get_mut(task_id) else {
            return;
        };
        if t.ended.is_some() {
            return;
        }
        t.ended = Some(how.clone());
        let stream = t.stream;
        for k in [
            LeaderTimer::Poll(task_id.to_owned()),
            LeaderTimer::Restream(task_id.to_owned()),
            LeaderTimer::Deadline(task_id.to_owned()),
        ] {
            self.core.timers.cancel(&k);
        }
        // A live stream ends by itself after the terminal event; give it the idle timeout.
        if stream.is_none() {
            self.core
                .timers
                .cancel(&LeaderTimer::StreamIdle(task_id.to_owned()));
        }
        let at = self.core.at(self.config.retention);
        self.core
            .timers
            .set(LeaderTimer::Retention(task_id.to_owned()), at);
        match how {
            Ended::State(state) => {
                // Only status updates came (a stream without a full task): no task to show.
                let detail = format!("the task ended ({state}) before a full task arrived");
                self.answer_start(task_id, Err(CallError::Mismatch(detail)));
                self.event(LeaderEvent::TaskEnded {
                    task_id: task_id.to_owned(),
                    state,
                })
            }
            Ended::Abandoned(reason) => {
                if let Some(call) = stream {
                    self.drop_stream(call);
                }
                self.answer_start(task_id, Err(CallError::Abandoned(reason.clone())));
                self.event(LeaderEvent::TaskAbandoned {
                    task_id: task_id.to_owned(),
                    reason,
                })
            }
        }
    }

    /// A notification POST: check the token, read the task, answer.
    pub(super) fn on_notification(&mut self, request: RequestId, token: Option<&str>, body: &[u8]) {
        let Some(task_id) = token.and_then(|t| self.tokens.get(t)).cloned() else {
            self.push(LeaderOutput::RespondNotification {
                request,
                status: 401,
            });
            return;
        };
        match decode_task(body) {
            Ok((result, _)) if result.task_id == task_id => {
                self.push(LeaderOutput::RespondNotification {
                    request,
                    status: 200,
                });
                self.apply_result(&task_id, result, false);
            }
            _ => self.push(LeaderOutput::RespondNotification {
                request,
                status: 400,
            }),
        }
    }
}
