//! The partner engine: every task of one partner, from `start` to purge.
//!
//! ## Method groups
//! * **Inputs from the driver**: [`Partner::handle`] with a [`PartnerInput`] (the body of an
//!   HTTP POST to any AIP endpoint with a driver-issued [`RequestId`]; a stream whose client
//!   went away; the outcome of a notification POST) and [`Partner::handle_timeout`].
//! * **Application calls** (the application decides the work; the engine never waits for
//!   it): [`Partner::accept`] / [`Partner::reject`] (when `auto_accept` is off),
//!   [`Partner::start_working`], [`Partner::progress`], [`Partner::product_chunk`],
//!   [`Partner::request_input`], [`Partner::submit`], [`Partner::fail`].
//! * **Outputs**: [`Partner::poll_output`] (drain until `None` after every call) and
//!   [`Partner::poll_timeout`] / [`Partner::next_timer`] (the next wake-up and its reason).
//! * **Getters**: [`Partner::task`], [`Partner::task_count`], [`Partner::open_streams`],
//!   [`Partner::pending_notifications`].
//!
//! ## Flow
//! `start` (method `rpc`, `stream` or `notification/start`) creates the task and
//! [`PartnerEvent::TaskStarted`] tells the application to work (or
//! [`PartnerEvent::StartRequested`] asks it to decide first; without a decision within the
//! response timeout the task is rejected). The application moves the task through the table
//! of [`crate::state`]; the leader's `continue` ([`PartnerEvent::TaskContinued`]), `cancel`
//! and `complete` and the two awaiting timeouts move it too. Every change is a
//! [`PartnerEvent::StateChanged`], a stream event for each subscriber, and a notification for
//! each matching configuration. Ended tasks stay readable (`get`, `re-stream`) for
//! [`PartnerConfig::retention`], then are purged.
//!
//! ## Answers
//! A command in a state where the table has no row for it is ignored and answered with the
//! current task (as the spec and the SDK do); a re-sent command (same message `id`) is not
//! applied twice. A reply to a task command shows the task as it is when the reply is polled,
//! so an application that moves the task at once (accept → working → awaiting-completion)
//! answers the start with its latest state. Errors are JSON-RPC errors with HTTP 200.

mod dispatch;
mod notify;
mod stream;
mod task;
mod types;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use engine_basics::ids::IdSource;

use crate::engine::{
    Clock as _, Core, HashIndex, HttpResponse, IdMap, KeyedHasher, RequestId, RetryPolicy,
};
use crate::error::UsageError;
use crate::state::Cause;
use crate::time::Timestamp;
use crate::wire::{DataItem, Product, TaskResult, TaskState};

use notify::Notifier;
use stream::Subscriber;
use task::PartnerTask;

pub use task::TaskView;
pub use types::{
    DeliveryOutcome, GiveUpReason, PartnerEvent, PartnerInput, PartnerOutput, PartnerTimer,
};

/// Partner policy. `Default` is safe for a public server.
#[derive(Clone, Debug)]
pub struct PartnerConfig {
    /// This partner's AIC (`senderId` of its v02 results and events).
    pub partner_id: String,
    /// Accept every start at once; otherwise the application decides through
    /// [`PartnerEvent::StartRequested`].
    pub auto_accept: bool,
    /// How long a start waits for the application's decision when the leader names no
    /// `responseTimeout`; then the task is rejected.
    pub default_response_timeout: Duration,
    /// Longest response timeout a leader may ask for.
    pub max_response_timeout: Duration,
    /// awaiting-input timeout (→ canceled) when the leader names none; `None`: no timeout.
    pub default_awaiting_input_timeout: Option<Duration>,
    /// awaiting-completion timeout (→ completed) when the leader names none.
    pub default_awaiting_completion_timeout: Option<Duration>,
    /// A cap on products per task, on top of the leader's `maxProductsBytes`.
    pub max_products_bytes: Option<u64>,
    /// How long an ended task stays readable before it is purged.
    pub retention: Duration,
    /// Most tasks held at once (live and ended); a start beyond it is rejected.
    pub max_tasks: usize,
    /// Commands kept in a task's history (the oldest after the start are dropped).
    pub max_history: usize,
    /// Stream events kept per task for `re-stream`; older ones expire.
    pub stream_buffer: usize,
    /// Open streams per task.
    pub max_streams_per_task: usize,
    /// Comment frame on idle streams this often; `None`: never.
    pub keepalive: Option<Duration>,
    /// Serve `notification/*`; otherwise they answer -32003.
    pub notifications: bool,
    /// Notification configurations per task.
    pub max_notification_configs_per_task: usize,
    /// Notification configurations in all.
    pub max_notification_configs: usize,
    /// Notifications queued per configuration (the oldest is given up beyond it).
    pub max_queued_notifications: usize,
    /// How notification POSTs are retried.
    pub notification_retry: RetryPolicy,
    /// Largest request body the engine reads (drivers should refuse larger ones first, see
    /// [`crate::http::too_large`]).
    pub max_request_bytes: usize,
    /// Seed for the ids the engine mints and the keys of its maps of leader-chosen task ids
    /// (use a random seed in production; `aip-driver` draws one from the OS when it is 0).
    pub id_seed: u64,
}

impl Default for PartnerConfig {
    fn default() -> Self {
        PartnerConfig {
            partner_id: "partner".into(),
            auto_accept: true,
            default_response_timeout: Duration::from_secs(30),
            max_response_timeout: Duration::from_secs(600),
            default_awaiting_input_timeout: Some(Duration::from_secs(3600)),
            default_awaiting_completion_timeout: Some(Duration::from_secs(3600)),
            max_products_bytes: None,
            retention: Duration::from_secs(3600),
            max_tasks: 10_000,
            max_history: 256,
            stream_buffer: 200,
            max_streams_per_task: 8,
            keepalive: Some(Duration::from_secs(15)),
            notifications: true,
            max_notification_configs_per_task: 8,
            max_notification_configs: 10_000,
            max_queued_notifications: 64,
            notification_retry: RetryPolicy {
                attempts: 5,
                first_backoff: Duration::from_secs(1),
                max_backoff: Duration::from_secs(60),
                attempt_timeout: Duration::from_secs(30),
            },
            max_request_bytes: 64 * 1024 * 1024,
            id_seed: 0,
        }
    }
}

/// A queued output; replies to task commands are rendered when polled.
#[derive(Debug)]
enum Queued {
    Out(PartnerOutput),
    Reply(task::LazyReply),
}

/// The partner engine. See the [module docs](self) for the drive contract.
#[derive(Debug)]
pub struct Partner {
    config: PartnerConfig,
    core: Core<PartnerTimer, Queued>,
    tasks: IdMap<PartnerTask>,
    /// Ended tasks by the time they ended (the first is purged when the partner is full).
    ended: BTreeSet<(Timestamp, Arc<str>)>,
    /// Purged tasks: task id → the message id of its start, so a start re-sent after the
    /// purge is recognised (answered -32001) instead of creating the task again. Bounded by
    /// `max_tasks`, oldest first out.
    tombstones: HashIndex<Arc<str>, String>,
    tombstone_order: VecDeque<Arc<str>>,
    streams: BTreeMap<RequestId, Subscriber>,
    notifier: Notifier,
    ids: IdSource,
    /// The message id of the result being answered (a buffer reused from reply to reply).
    result_id: String,
}

impl Partner {
    /// A partner with no tasks.
    pub fn new(config: PartnerConfig) -> Self {
        let ids = IdSource::new(config.id_seed);
        let keys = KeyedHasher::from_seed(config.id_seed);
        Partner {
            config,
            core: Core::default(),
            tasks: IdMap::new(keys),
            ended: BTreeSet::new(),
            tombstones: HashIndex::new(keys),
            tombstone_order: VecDeque::new(),
            streams: BTreeMap::new(),
            notifier: Notifier::default(),
            ids,
            result_id: String::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PartnerConfig {
        &self.config
    }

    /// Feeds one input. Drain [`Partner::poll_output`] afterwards.
    pub fn handle(&mut self, now: Timestamp, input: PartnerInput) {
        self.core.advance(now);
        match input {
            PartnerInput::Request { request, body } => self.on_request(request, &body),
            PartnerInput::StreamClosed { request } => self.unsubscribe(request),
            PartnerInput::NotificationResult { delivery, outcome } => {
                self.on_delivery_result(delivery, outcome)
            }
        }
    }

    /// Fires every timer due at `now` (an early call does nothing), in deadline order (at
    /// equal deadlines, an ended task's retention last).
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.core.advance(now);
        let now = self.core.now();
        while let Some((at, retention)) = self.next_due() {
            if at > now {
                break;
            }
            if retention {
                if let Some((_, id)) = self.ended.pop_first() {
                    self.purge(&id);
                }
            } else if let Some(t) = self.core.timers.pop_due(now) {
                self.on_timer(t);
            }
        }
    }

    /// When the task that ended first is to be purged. Ended tasks are kept `retention` after
    /// they end, so the index of ended tasks (by the time they ended) is also the queue of
    /// their retention deadlines: no timer per task.
    fn retention_due(&self) -> Option<(Timestamp, &Arc<str>)> {
        self.ended
            .first()
            .map(|(at, id)| (at.saturating_add(self.config.retention), id))
    }

    /// The earliest deadline and whether it is a retention (else the timer index's first);
    /// at equal deadlines the timer goes first.
    fn next_due(&self) -> Option<(Timestamp, bool)> {
        let timer = self.core.timers.next().map(|(at, _)| at);
        match (timer, self.retention_due().map(|(at, _)| at)) {
            (Some(t), Some(r)) if r < t => Some((r, true)),
            (Some(t), _) => Some((t, false)),
            (None, r) => r.map(|r| (r, true)),
        }
    }

    /// The next output, or `None` when everything is drained.
    pub fn poll_output(&mut self) -> Option<PartnerOutput> {
        match self.core.outputs.pop_front()? {
            Queued::Out(o) => Some(o),
            Queued::Reply(r) => Some(self.render_reply(r)),
        }
    }

    /// When to call [`Partner::handle_timeout`]: now while outputs are queued, else the
    /// earliest timer; `None` when nothing is scheduled.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let retention = self.retention_due().map(|(at, _)| at);
        [self.core.poll_timeout(), retention]
            .into_iter()
            .flatten()
            .min()
    }

    /// The earliest timer and its reason.
    pub fn next_timer(&self) -> Option<(Timestamp, PartnerTimer)> {
        match self.next_due()? {
            (at, true) => {
                let (_, id) = self.retention_due()?;
                Some((at, PartnerTimer::Retention(Arc::clone(id))))
            }
            (_, false) => self.core.timers.next().map(|(at, k)| (at, k.clone())),
        }
    }

    /// A task's current view.
    pub fn task(&self, task_id: &str) -> Option<TaskView<'_>> {
        self.tasks.get(task_id).map(PartnerTask::view)
    }

    /// Tasks held (live and ended, not yet purged).
    pub fn task_count(&self) -> usize {
        self.tasks.len()
    }

    /// Open streams.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Notifications queued since the partner started (each ends in exactly one
    /// [`PartnerEvent::NotificationDelivered`] or [`PartnerEvent::NotificationGaveUp`]).
    pub fn notifications_queued(&self) -> u64 {
        self.notifier.queued_total()
    }

    /// Notifications queued or in flight.
    pub fn pending_notifications(&self) -> usize {
        self.notifier.pending()
    }

    /// The task as a result (what a reply shows), once the start is decided.
    pub fn snapshot(&mut self, task_id: &str) -> Option<TaskResult> {
        self.result_of(task_id, None)
    }

    /// The task's id as the partner holds it (shared), or a new one for a task not held.
    fn shared_id(&self, task_id: &str) -> Arc<str> {
        self.tasks
            .get(task_id)
            .map_or_else(|| Arc::from(task_id), |t| Arc::clone(&t.id))
    }

    /// Arms a task timer and marks its kind on the task (see `PartnerTask::armed`).
    fn arm(&mut self, key: PartnerTimer, at: Timestamp) {
        if let Some(id) = key.task_id() {
            if let Some(t) = self.tasks.get_mut(id) {
                t.armed |= key.task_bit();
            }
        }
        self.core.timers.set(key, at);
    }

    fn push(&mut self, o: PartnerOutput) {
        self.core.outputs.push_back(Queued::Out(o));
    }

    fn event(&mut self, e: PartnerEvent) {
        self.push(PartnerOutput::Event(e));
    }

    fn respond(&mut self, request: RequestId, body: Vec<u8>) {
        self.push(PartnerOutput::Respond {
            request,
            response: HttpResponse::json(body),
        });
    }

    // ---- application calls ------------------------------------------------------------

    /// Accepts a start that waits for a decision (`auto_accept` off).
    pub fn accept(&mut self, now: Timestamp, task_id: &str) -> Result<(), UsageError> {
        self.core.advance(now);
        self.decide(task_id, TaskState::Accepted, None)
    }

    /// Rejects a start that waits for a decision, with an optional reason.
    pub fn reject(
        &mut self,
        now: Timestamp,
        task_id: &str,
        items: Vec<DataItem>,
    ) -> Result<(), UsageError> {
        self.core.advance(now);
        self.decide(task_id, TaskState::Rejected, non_empty(items))
    }

    /// accepted → working.
    pub fn start_working(
        &mut self,
        now: Timestamp,
        task_id: &str,
    ) -> Result<TaskState, UsageError> {
        self.core.advance(now);
        self.transition(task_id, Cause::Partner, TaskState::Working, None)
    }

    /// working → awaiting-input, with the question in `items`.
    pub fn request_input(
        &mut self,
        now: Timestamp,
        task_id: &str,
        items: Vec<DataItem>,
    ) -> Result<TaskState, UsageError> {
        self.core.advance(now);
        self.transition(
            task_id,
            Cause::Partner,
            TaskState::AwaitingInput,
            non_empty(items),
        )
    }

    /// Adds `products` (a product with an existing id replaces it; stream subscribers get
    /// each as a product chunk) and moves working → awaiting-completion. If the products exceed `maxProductsBytes`, the task fails instead
    /// (the answer is `Ok(TaskState::Failed)`), as the spec allows.
    pub fn submit(
        &mut self,
        now: Timestamp,
        task_id: &str,
        products: Vec<Product>,
        items: Vec<DataItem>,
    ) -> Result<TaskState, UsageError> {
        self.core.advance(now);
        self.require_state(
            task_id,
            &[TaskState::Working],
            TaskState::AwaitingCompletion,
        )?;
        // Stream subscribers get the products as chunks before the status (§6.2.6).
        let whole = task::AsChunk {
            append: false,
            last_chunk: true,
        };
        if let Some(failed) = self.add_products(task_id, products, Some(whole)) {
            return Ok(failed);
        }
        self.transition(
            task_id,
            Cause::Partner,
            TaskState::AwaitingCompletion,
            non_empty(items),
        )
    }

    /// working → failed, with the reason in `items`.
    pub fn fail(
        &mut self,
        now: Timestamp,
        task_id: &str,
        items: Vec<DataItem>,
    ) -> Result<TaskState, UsageError> {
        self.core.advance(now);
        self.transition(task_id, Cause::Partner, TaskState::Failed, non_empty(items))
    }

    /// Reports progress without a state change: the status's data items become `items` and a
    /// status event goes to stream subscribers (not to notifications, which are per state).
    pub fn progress(
        &mut self,
        now: Timestamp,
        task_id: &str,
        items: Vec<DataItem>,
    ) -> Result<(), UsageError> {
        self.core.advance(now);
        self.progress_inner(task_id, items)
    }

    /// Streams one product chunk (working tasks) and records it in the task's products
    /// (`append: false` starts or replaces the product, `true` appends its data items). If the
    /// products exceed `maxProductsBytes`, the task fails (answer `Ok(TaskState::Failed)`).
    pub fn product_chunk(
        &mut self,
        now: Timestamp,
        task_id: &str,
        product: Product,
        append: bool,
        last_chunk: bool,
    ) -> Result<TaskState, UsageError> {
        self.core.advance(now);
        self.chunk_inner(task_id, product, append, last_chunk)
    }

    fn require_state(
        &self,
        task_id: &str,
        allowed: &[TaskState],
        to: TaskState,
    ) -> Result<(), UsageError> {
        let t = self
            .tasks
            .get(task_id)
            .ok_or_else(|| UsageError::UnknownTask(task_id.to_owned()))?;
        let s = t.machine.state();
        if s.is_some_and(|s| allowed.contains(&s)) {
            Ok(())
        } else {
            Err(UsageError::IllegalTransition {
                task: task_id.to_owned(),
                from: crate::error::StateName(s),
                to,
            })
        }
    }

    fn on_timer(&mut self, t: PartnerTimer) {
        match t {
            PartnerTimer::ResponseTimeout(id) => {
                let reason = DataItem::text("no decision within the response timeout");
                let _ = self.decide(&id, TaskState::Rejected, Some(vec![reason]));
            }
            PartnerTimer::AwaitingInputTimeout(id) => {
                let item = DataItem::text("no input within the awaiting-input timeout");
                let _ = self.transition(&id, Cause::Timeout, TaskState::Canceled, Some(vec![item]));
            }
            PartnerTimer::AwaitingCompletionTimeout(id) => {
                let _ = self.transition(&id, Cause::Timeout, TaskState::Completed, None);
            }
            // Not armed any more (see `retention_due`); purging is what it would do.
            PartnerTimer::Retention(id) => self.purge(&id),
            PartnerTimer::Keepalive(r) => self.keepalive(r),
            PartnerTimer::NotificationRetry(task, config) => self.send_next(&task, &config),
            PartnerTimer::NotificationTimeout(d) => {
                self.on_delivery_result(d, DeliveryOutcome::Failed("no outcome in time".into()))
            }
        }
    }

    fn purge(&mut self, task_id: &str) {
        let Some(mut t) = self.tasks.remove(task_id) else {
            return;
        };
        if let Some(at) = t.ended_at {
            self.ended.remove(&(at, Arc::clone(&t.id)));
        }
        if let Some(start) = t.history.pop_front() {
            // The start's id is moved out when nothing else holds the command (the usual case).
            let start_id = Arc::try_unwrap(start).map_or_else(|s| s.id.clone(), |s| s.id);
            self.tombstones.insert(Arc::clone(&t.id), start_id);
            self.tombstone_order.push_back(Arc::clone(&t.id));
            while self.tombstone_order.len() > self.config.max_tasks.max(1) {
                if let Some(old) = self.tombstone_order.pop_front() {
                    self.tombstones.remove(&old);
                }
            }
        }
        for r in t.subscribers {
            self.streams.remove(&r);
            self.core.timers.cancel(&PartnerTimer::Keepalive(r));
            self.push(PartnerOutput::EndStream { request: r });
        }
        let kinds: [fn(Arc<str>) -> PartnerTimer; 3] = [
            PartnerTimer::ResponseTimeout,
            PartnerTimer::AwaitingInputTimeout,
            PartnerTimer::AwaitingCompletionTimeout,
        ];
        for kind in kinds {
            let k = kind(Arc::clone(&t.id));
            if t.armed & k.task_bit() != 0 {
                self.core.timers.cancel(&k);
            }
        }
        self.notifier.forget_task(task_id);
        self.event(PartnerEvent::TaskPurged {
            task_id: Arc::clone(&t.id),
        });
    }
}

fn non_empty(items: Vec<DataItem>) -> Option<Vec<DataItem>> {
    (!items.is_empty()).then_some(items)
}

/// A request held while a start waits for its decision.
#[derive(Debug)]
struct Held {
    request: RequestId,
    req: crate::wire::Request,
    /// This request created the task.
    created: bool,
}

type HeldQueue = VecDeque<Held>;

#[cfg(test)]
mod tests;
