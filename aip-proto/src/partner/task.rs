//! One task on the partner, and every way it moves: the start decision, transitions through
//! the table (with their timers, stream events, notifications and application events),
//! products and their byte limit, and the `TaskResult` a reply shows.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use super::stream::{EventLog, Logged, Shown};
use super::{HeldQueue, Partner, PartnerEvent, PartnerOutput, PartnerTimer};
use crate::engine::{Clock as _, RequestId};
use crate::error::{RpcError, StateName, UsageError};
use crate::state::{Cause, TaskMachine};
use crate::time::Timestamp;
use crate::wire::{
    encode_error, encode_parts_response, DataItem, Dialect, GetParams, Product, ResultParts, RpcId,
    SenderRole, StartParams, TaskCommand, TaskResult, TaskState, TaskStatus,
};

/// A task as the partner holds it.
#[derive(Debug)]
pub(crate) struct PartnerTask {
    pub(crate) id: Arc<str>,
    pub(crate) machine: TaskMachine,
    pub(crate) status: Option<TaskStatus>,
    pub(crate) status_history: Vec<TaskStatus>,
    /// Commands that changed or could change the task, the start first.
    pub(crate) history: VecDeque<Arc<TaskCommand>>,
    pub(crate) products: Vec<Product>,
    pub(crate) params: StartParams,
    /// The dialect of the start (notifications use it).
    pub(crate) dialect: Dialect,
    /// Requests waiting for the start decision.
    pub(crate) held: HeldQueue,
    pub(crate) log: EventLog,
    pub(crate) subscribers: BTreeSet<RequestId>,
    /// Notification subscriptions: configuration id and states (empty: all).
    pub(crate) notify: Vec<(String, Vec<TaskState>)>,
    pub(crate) ended_at: Option<Timestamp>,
    /// The kinds of task timer ever armed for it ([`PartnerTimer::task_bit`]): purging
    /// cancels only those (never cleared: cancelling a timer that is gone does nothing).
    pub(crate) armed: u8,
}

/// A read-only view of a partner's task.
#[derive(Clone, Copy, Debug)]
pub struct TaskView<'a> {
    /// The task id.
    pub id: &'a str,
    /// Its state (`None` while the start waits for a decision).
    pub state: Option<TaskState>,
    /// Its current status.
    pub status: Option<&'a TaskStatus>,
    /// Every status so far.
    pub status_history: &'a [TaskStatus],
    /// Its products.
    pub products: &'a [Product],
    /// Its session.
    pub session_id: Option<&'a str>,
    /// The effective start parameters (the leader's, capped and defaulted by the config).
    pub params: &'a StartParams,
    /// The last stream event number (0: none yet).
    pub last_event_seq: u64,
}

impl PartnerTask {
    /// The task's session: the start's (the first command of the history, never trimmed; not
    /// copied, as ended tasks are kept by the thousand).
    pub(crate) fn session_id(&self) -> Option<&str> {
        self.history.front().and_then(|c| c.session_id.as_deref())
    }

    pub(crate) fn view(&self) -> TaskView<'_> {
        TaskView {
            id: &self.id,
            state: self.machine.state(),
            status: self.status.as_ref(),
            status_history: &self.status_history,
            products: &self.products,
            session_id: self.session_id(),
            params: &self.params,
            last_event_seq: self.log.last_seq(),
        }
    }

    /// Records a command; `false` if a command with its id is in the history (a re-sent
    /// command is not applied twice). The history is short (`max_history`) and scanning it
    /// costs less than keeping a second index of its ids.
    pub(crate) fn record(&mut self, c: Arc<TaskCommand>, max: usize) -> bool {
        if self.history.iter().any(|h| h.id == c.id) {
            return false;
        }
        self.history.push_back(c);
        while self.history.len() > max.max(2) {
            self.history.remove(1);
        }
        true
    }
}

/// The flags of the stream chunk a product added to a task is logged as.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AsChunk {
    pub(crate) append: bool,
    pub(crate) last_chunk: bool,
}

/// A reply to a task command, rendered when polled.
#[derive(Debug)]
pub(crate) struct LazyReply {
    pub(crate) request: RequestId,
    pub(crate) id: RpcId,
    pub(crate) task_id: Arc<str>,
    pub(crate) dialect: Dialect,
    pub(crate) get: Option<GetParams>,
}

/// The JSON size of one product, counted without building the text.
fn product_bytes(product: &Product) -> u64 {
    /// A writer that only counts.
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len() as u64;
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    match serde_json::to_writer(&mut c, product) {
        Ok(()) => c.0,
        Err(_) => u64::MAX,
    }
}

/// The JSON size of the array `products` (what `maxProductsBytes` bounds): `[`, the products
/// separated by commas, `]`.
fn products_bytes<'a>(products: impl Iterator<Item = &'a Product>) -> u64 {
    let (mut n, mut size) = (0u64, 2u64);
    for p in products {
        size = size.saturating_add(product_bytes(p));
        n += 1;
    }
    size.saturating_add(n.saturating_sub(1))
}

impl Partner {
    /// A task for a start command, not yet decided.
    pub(super) fn new_task(&mut self, id: Arc<str>, start: Arc<TaskCommand>, dialect: Dialect) {
        let asked = start.start_params();
        let c = &self.config;
        let params = StartParams {
            response_timeout: Some(
                asked
                    .response_timeout
                    .unwrap_or(c.default_response_timeout)
                    .min(c.max_response_timeout),
            ),
            awaiting_input_timeout: asked
                .awaiting_input_timeout
                .or(c.default_awaiting_input_timeout),
            awaiting_completion_timeout: asked
                .awaiting_completion_timeout
                .or(c.default_awaiting_completion_timeout),
            max_products_bytes: match (asked.max_products_bytes, c.max_products_bytes) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        };
        let mut t = PartnerTask {
            id: Arc::clone(&id),
            machine: TaskMachine::new(),
            status: None,
            status_history: Vec::new(),
            history: VecDeque::new(),
            products: Vec::new(),
            params,
            dialect,
            held: VecDeque::new(),
            log: EventLog::default(),
            subscribers: BTreeSet::new(),
            notify: Vec::new(),
            ended_at: None,
            armed: 0,
        };
        t.record(start, self.config.max_history);
        self.tasks.insert(id, t);
    }

    /// The command that started the task (the first of its history).
    pub(super) fn start_command(&self, task_id: &str) -> Option<Arc<TaskCommand>> {
        let t = self.tasks.get(task_id)?;
        t.history.front().cloned()
    }

    /// The start decision (accepted or rejected), then the requests that waited for it.
    pub(super) fn decide(
        &mut self,
        task_id: &str,
        to: TaskState,
        items: Option<Vec<DataItem>>,
    ) -> Result<(), UsageError> {
        let t = self
            .tasks
            .get_mut(task_id)
            .ok_or_else(|| UsageError::UnknownTask(task_id.to_owned()))?;
        if t.machine.state().is_some() {
            return Err(UsageError::AlreadyDecided(task_id.to_owned()));
        }
        self.transition(task_id, Cause::Start, to, items)?;
        if !self.config.auto_accept {
            self.core
                .timers
                .cancel(&PartnerTimer::ResponseTimeout(self.shared_id(task_id)));
        }
        let Some(t) = self.tasks.get_mut(task_id) else {
            return Ok(());
        };
        let held = std::mem::take(&mut t.held);
        if to == TaskState::Accepted {
            if let Some(command) = self.start_command(task_id) {
                self.event(PartnerEvent::TaskStarted {
                    task_id: self.shared_id(task_id),
                    command,
                });
            }
        }
        for h in held {
            self.answer_command(h.request, h.req, h.created);
        }
        Ok(())
    }

    /// Moves a task through the table, with everything a change brings.
    pub(super) fn transition(
        &mut self,
        task_id: &str,
        cause: Cause,
        to: TaskState,
        items: Option<Vec<DataItem>>,
    ) -> Result<TaskState, UsageError> {
        let now = self.core.now();
        let t = self
            .tasks
            .get_mut(task_id)
            .ok_or_else(|| UsageError::UnknownTask(task_id.to_owned()))?;
        let from = t.machine.state();
        if from.is_none() && cause != Cause::Start {
            return Err(UsageError::IllegalTransition {
                task: task_id.to_owned(),
                from: StateName(None),
                to,
            });
        }
        t.machine.apply(task_id, cause, to)?;
        let status = TaskStatus {
            state: to,
            state_changed_at: now,
            data_items: items,
        };
        t.status_history.push(status.clone());
        t.status = Some(status.clone());
        let (input_timeout, completion_timeout) = (
            t.params.awaiting_input_timeout,
            t.params.awaiting_completion_timeout,
        );
        if to.is_terminal() {
            t.ended_at = Some(now);
            self.ended.insert((now, Arc::clone(&t.id)));
        }
        let tid = Arc::clone(&t.id);
        let key = |k: fn(Arc<str>) -> PartnerTimer| k(Arc::clone(&tid));
        match from {
            Some(TaskState::AwaitingInput) => {
                self.core
                    .timers
                    .cancel(&key(PartnerTimer::AwaitingInputTimeout));
            }
            Some(TaskState::AwaitingCompletion) => {
                self.core
                    .timers
                    .cancel(&key(PartnerTimer::AwaitingCompletionTimeout));
            }
            _ => {}
        }
        match (to, input_timeout, completion_timeout) {
            (TaskState::AwaitingInput, Some(d), _) => {
                let at = self.core.at(d);
                self.arm(key(PartnerTimer::AwaitingInputTimeout), at);
            }
            (TaskState::AwaitingCompletion, _, Some(d)) => {
                let at = self.core.at(d);
                self.arm(key(PartnerTimer::AwaitingCompletionTimeout), at);
            }
            _ => {}
        }
        let logged = match from {
            None => Logged::Snapshot {
                status,
                products: self
                    .tasks
                    .get(task_id)
                    .map(|t| t.products.clone())
                    .unwrap_or_default(),
            },
            Some(_) => Logged::Status(status),
        };
        self.append_event(task_id, logged);
        self.notify_state(task_id, to);
        let shared = self.shared_id(task_id);
        self.event(PartnerEvent::StateChanged {
            task_id: Arc::clone(&shared),
            from,
            to,
            cause,
        });
        if to.is_terminal() {
            self.event(PartnerEvent::TaskEnded {
                task_id: shared,
                state: to,
            });
        }
        Ok(to)
    }

    pub(super) fn progress_inner(
        &mut self,
        task_id: &str,
        items: Vec<DataItem>,
    ) -> Result<(), UsageError> {
        let t = self
            .tasks
            .get_mut(task_id)
            .ok_or_else(|| UsageError::UnknownTask(task_id.to_owned()))?;
        let Some(status) = t.status.as_mut().filter(|s| !s.state.is_terminal()) else {
            return Err(UsageError::InvalidArgument(format!(
                "task {task_id}: progress needs a live task"
            )));
        };
        status.data_items = non_empty(items);
        let status = status.clone();
        self.append_event(task_id, Logged::Status(status));
        Ok(())
    }

    pub(super) fn chunk_inner(
        &mut self,
        task_id: &str,
        product: Product,
        append: bool,
        last_chunk: bool,
    ) -> Result<TaskState, UsageError> {
        self.require_state(task_id, &[TaskState::Working], TaskState::Working)
            .map_err(|_| {
                UsageError::InvalidArgument(format!(
                    "task {task_id}: product chunks need a working task"
                ))
            })?;
        let t = self
            .tasks
            .get(task_id)
            .ok_or_else(|| UsageError::UnknownTask(task_id.to_owned()))?;
        let as_chunk = AsChunk { append, last_chunk };
        match (append, t.products.iter().find(|p| p.id == product.id)) {
            (true, Some(old)) => {
                // The chunk is only the new part: it keeps its own copy.
                let chunk = Logged::Chunk {
                    product: Shown::Held(Box::new(product.clone())),
                    append,
                    last_chunk,
                };
                let mut merged = old.clone();
                merged.data_items.extend(product.data_items);
                if let Some(failed) = self.add_products(task_id, vec![merged], None) {
                    return Ok(failed);
                }
                self.append_event(task_id, chunk);
            }
            _ => {
                if let Some(failed) = self.add_products(task_id, vec![product], Some(as_chunk)) {
                    return Ok(failed);
                }
            }
        }
        Ok(TaskState::Working)
    }

    /// Adds products (same id replaces); fails the task if they exceed its byte limit.
    /// With `as_chunk`, each product is also logged as a stream chunk showing it as stored,
    /// and the task's streams get them.
    pub(super) fn add_products(
        &mut self,
        task_id: &str,
        products: Vec<Product>,
        as_chunk: Option<AsChunk>,
    ) -> Option<TaskState> {
        let t = self.tasks.get_mut(task_id)?;
        if let Some(limit) = t.params.max_products_bytes {
            // The size the products would have, without building them: the kept ones (not
            // replaced by a new one with their id), then the new ones (the last of an id wins).
            let new = |i: usize, p: &Product| !products[i + 1..].iter().any(|q| q.id == p.id);
            let kept = t
                .products
                .iter()
                .filter(|q| !products.iter().any(|p| p.id == q.id));
            let added = products.iter().enumerate().filter(|(i, p)| new(*i, p));
            let size = products_bytes(kept.chain(added.map(|(_, p)| p)));
            if size > limit {
                let item = DataItem::text(format!(
                    "Products size {size} bytes exceeds maxProductsBytes={limit}."
                ));
                return self
                    .transition(task_id, Cause::Partner, TaskState::Failed, Some(vec![item]))
                    .ok();
            }
        }
        if t.products.is_empty() {
            t.products.reserve_exact(products.len());
        }
        let logged_after = t.log.last_seq();
        for p in products {
            let at = match t.products.iter().position(|q| q.id == p.id) {
                Some(i) => {
                    // Chunks logged before show the product being replaced: they copy it.
                    t.log.detach(i, &t.products[i]);
                    t.products[i] = p;
                    i
                }
                None => {
                    t.products.push(p);
                    t.products.len() - 1
                }
            };
            if let Some(c) = as_chunk {
                let chunk = Logged::Chunk {
                    product: Shown::InTask(at),
                    append: c.append,
                    last_chunk: c.last_chunk,
                };
                t.log
                    .push(chunk, self.core.now(), self.config.stream_buffer);
            }
        }
        if as_chunk.is_some() {
            self.send_logged_after(task_id, logged_after);
        }
        None
    }

    /// The task as a result (histories only for `get`, filtered by its parameters).
    pub(super) fn result_of(
        &mut self,
        task_id: &str,
        get: Option<&GetParams>,
    ) -> Option<TaskResult> {
        self.with_result(task_id, get, |parts| parts.to_result())
    }

    /// Calls `f` with the task's result as it is answered (a fresh message id, the task's
    /// own status and products, borrowed); `None` for an unknown or undecided task.
    fn with_result<R>(
        &mut self,
        task_id: &str,
        get: Option<&GetParams>,
        f: impl FnOnce(&ResultParts<'_>) -> R,
    ) -> Option<R> {
        let t = self.tasks.get(task_id)?;
        let status = t.status.as_ref()?;
        let (commands, statuses) = match get {
            Some(g) => (
                Some(
                    t.history
                        .iter()
                        .filter(|c| g.last_command_sent_at.is_none_or(|at| c.sent_at > at))
                        .map(|c| TaskCommand::clone(c))
                        .collect::<Vec<_>>(),
                ),
                Some(
                    t.status_history
                        .iter()
                        .filter(|s| {
                            g.last_state_changed_at
                                .is_none_or(|at| s.state_changed_at > at)
                        })
                        .cloned()
                        .collect::<Vec<_>>(),
                ),
            ),
            None => (None, None),
        };
        // The message id is minted into a buffer the partner keeps (no allocation a reply).
        self.ids.next_into("result", &mut self.result_id);
        Some(f(&ResultParts {
            id: Some(&self.result_id),
            sent_at: Some(&self.core.now()),
            sender_role: Some(SenderRole::Partner),
            sender_id: Some(&self.config.partner_id),
            mentions: None,
            data_items: None,
            group_id: None,
            session_id: t.session_id(),
            task_id,
            status,
            products: Some(&t.products),
            command_history: commands.as_deref(),
            status_history: statuses.as_deref(),
        }))
    }

    pub(super) fn render_reply(&mut self, r: LazyReply) -> PartnerOutput {
        let body = self
            .with_result(&r.task_id, r.get.as_ref(), |parts| {
                encode_parts_response(&r.id, parts, r.dialect)
            })
            .unwrap_or_else(|| encode_error(&r.id, &RpcError::task_not_found(&r.task_id)));
        PartnerOutput::Respond {
            request: r.request,
            response: crate::engine::HttpResponse::json(body),
        }
    }
}

fn non_empty(items: Vec<DataItem>) -> Option<Vec<DataItem>> {
    (!items.is_empty()).then_some(items)
}
