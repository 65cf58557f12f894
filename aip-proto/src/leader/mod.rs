//! The leader engine: tasks at many partners, commands out, answers, stream events and
//! notifications in.
//!
//! ## Method groups
//! * **Setup**: [`Leader::add_partner`] (an endpoint and its dialect, e.g. from the ACS
//!   `protocolVersion`).
//! * **Application calls**: [`Leader::start`], [`Leader::continue_task`],
//!   [`Leader::complete`], [`Leader::cancel`], [`Leader::get`], [`Leader::open_stream`].
//! * **Inputs from the driver**: [`Leader::handle`] with a [`LeaderInput`] (responses, stream
//!   bytes, failures, notification POSTs) and [`Leader::handle_timeout`].
//! * **Outputs**: [`Leader::poll_output`] (drain until `None` after every call) and
//!   [`Leader::poll_timeout`] / [`Leader::next_timer`].
//! * **Getters**: [`Leader::task`], [`Leader::task_count`].
//!
//! ## What the engine does on its own
//! * Every command carries a fresh message id and is re-sent with the same id when an attempt
//!   gets no answer (partners apply a command id once), with backoff, up to
//!   [`LeaderConfig::calls`]' attempts; then [`LeaderEvent::CallFailed`].
//! * The observed task only moves forward: an answer older than what was seen is ignored,
//!   an impossible one is reported ([`LeaderEvent::PeerMisbehaved`]) and ignored.
//! * Stream events are de-duplicated by `eventSeq` per task; a stream that drops before the
//!   task ends is resumed with `re-stream` and the last seen `eventSeq`, so no event is lost
//!   ([`LeaderConfig::restream`]); if that is impossible the task is polled instead.
//! * Tasks without a stream are polled with `get` ([`LeaderConfig::poll_interval`]; tasks
//!   with notifications more slowly, as notifications may be given up).
//! * A task past its deadline is canceled; if even that fails it is abandoned. A partner that
//!   answers -32001 for a task it should know ends the task as abandoned too.

mod answers;
mod calls;
mod stream;
mod types;
mod view;

use std::collections::BTreeMap;
use std::time::Duration;

use engine_basics::ids::IdSource;

use crate::engine::{CallId, Clock as _, Core, IdMap, KeyedHasher, RetryPolicy};
use crate::error::UsageError;
use crate::time::Timestamp;
use crate::wire::{DataItem, Dialect, StartParams, TaskState};

pub use types::{
    AbandonReason, CallError, HttpRequest, LeaderEvent, LeaderInput, LeaderOutput, LeaderTimer,
    Ticket,
};
pub use view::LeaderTaskView;

use calls::Call;
use stream::StreamConn;
use view::LeaderTask;

/// Leader policy.
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    /// This leader's AIC (`senderId` of its commands).
    pub leader_id: String,
    /// How calls are retried when an attempt gets no answer.
    pub calls: RetryPolicy,
    /// How often tasks without a stream or notifications are polled; `None`: never (the
    /// application calls [`Leader::get`] itself).
    pub poll_interval: Option<Duration>,
    /// How often tasks with notifications, or whose stream is lost, are polled.
    pub fallback_poll_interval: Duration,
    /// How a dropped stream is resumed (attempts and backoff).
    pub restream: RetryPolicy,
    /// A stream silent for this long (no event, no keepalive) counts as dropped.
    pub stream_idle_timeout: Duration,
    /// Deadline of a task that names none; `None`: no deadline.
    pub task_timeout: Option<Duration>,
    /// How long an ended task stays readable through [`Leader::task`].
    pub retention: Duration,
    /// The receiver URL for notification tasks that name none.
    pub notification_url: Option<String>,
    /// Largest stream event accepted.
    pub max_stream_event_bytes: usize,
    /// Seed for message ids and notification tokens (use a random seed in production: tokens
    /// are only as unguessable as the seed; `aip-driver` draws one from the OS when it is 0).
    pub id_seed: u64,
}

impl Default for LeaderConfig {
    fn default() -> Self {
        LeaderConfig {
            leader_id: "leader".into(),
            calls: RetryPolicy {
                attempts: 3,
                first_backoff: Duration::from_secs(1),
                max_backoff: Duration::from_secs(10),
                attempt_timeout: Duration::from_secs(30),
            },
            poll_interval: Some(Duration::from_secs(2)),
            fallback_poll_interval: Duration::from_secs(30),
            restream: RetryPolicy {
                attempts: 3,
                first_backoff: Duration::from_secs(1),
                max_backoff: Duration::from_secs(5),
                attempt_timeout: Duration::from_secs(30),
            },
            stream_idle_timeout: Duration::from_secs(60),
            task_timeout: Some(Duration::from_secs(24 * 3600)),
            retention: Duration::from_secs(3600),
            notification_url: None,
            max_stream_event_bytes: crate::sse::DEFAULT_MAX_EVENT_BYTES,
            id_seed: 0,
        }
    }
}

/// Where a partner is and which dialect it speaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartnerEndpoint {
    /// The ACS `endPoints[].url` (`…/rpc` or a base URL); methods are resolved relative to it
    /// ([`crate::http::method_url`]).
    pub url: String,
    /// The dialect (from the ACS `protocolVersion`, [`Dialect::from_protocol_version`]).
    pub dialect: Dialect,
}

/// How the leader follows a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// `rpc` answers, plus polling with `get`.
    Rpc,
    /// A `stream` (SSE), resumed with `re-stream` when it drops.
    Stream,
    /// `notification/set` then `notification/start`; the partner POSTs changes to `url`.
    Notification {
        /// The receiver URL (`None`: [`LeaderConfig::notification_url`]).
        url: Option<String>,
        /// The token (`None`: one is generated).
        token: Option<String>,
        /// States to be notified about (empty: every change).
        states: Vec<TaskState>,
    },
}

/// A task to start.
#[derive(Clone, Debug, PartialEq)]
pub struct StartTask {
    /// The partner (as registered with [`Leader::add_partner`]).
    pub partner: String,
    /// The task id (unique at the leader).
    pub task_id: String,
    /// The session.
    pub session_id: String,
    /// The request.
    pub data_items: Vec<DataItem>,
    /// Start parameters.
    pub params: StartParams,
    /// How to follow it.
    pub delivery: Delivery,
    /// The task's deadline from now (`None`: [`LeaderConfig::task_timeout`]).
    pub deadline: Option<Duration>,
}

impl StartTask {
    /// A task with a text request, followed by `rpc` and polling.
    pub fn new(
        partner: impl Into<String>,
        task_id: impl Into<String>,
        session_id: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        StartTask {
            partner: partner.into(),
            task_id: task_id.into(),
            session_id: session_id.into(),
            data_items: vec![DataItem::text(text)],
            params: StartParams::default(),
            delivery: Delivery::Rpc,
            deadline: None,
        }
    }
}

/// A task that exists at a partner but was not started by this leader (e.g. by an earlier
/// run of a command-line tool): [`Leader::attach`] follows it from its next answer on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachTask {
    /// The partner (as registered with [`Leader::add_partner`]).
    pub partner: String,
    /// The task id at the partner.
    pub task_id: String,
    /// The session; empty when the caller does not know it: the engine then takes the
    /// session of the first answer about the task (ask with [`Leader::get`]) and, until
    /// then, sends commands without a `sessionId` (optional on the wire) rather than a
    /// wrong one.
    pub session_id: String,
    /// How to follow it ([`Delivery::Notification`] is not possible for an attached task:
    /// its configuration would need a `notification/start`).
    pub delivery: Delivery,
    /// The deadline from now (`None`: [`LeaderConfig::task_timeout`]).
    pub deadline: Option<Duration>,
}

/// The leader engine. See the [module docs](self) for the drive contract.
#[derive(Debug)]
pub struct Leader {
    config: LeaderConfig,
    core: Core<LeaderTimer, LeaderOutput>,
    partners: BTreeMap<String, PartnerEndpoint>,
    tasks: IdMap<LeaderTask>,
    /// Calls by internal number.
    calls: BTreeMap<u64, Call>,
    /// The attempt in flight → internal call number.
    attempts: BTreeMap<CallId, u64>,
    streams: BTreeMap<CallId, StreamConn>,
    /// Notification token → task.
    tokens: BTreeMap<String, String>,
    next_call: u64,
    next_attempt: u64,
    next_ticket: u64,
    ids: IdSource,
}

impl Leader {
    /// A leader with no partners and no tasks.
    pub fn new(config: LeaderConfig) -> Self {
        let ids = IdSource::new(config.id_seed);
        let keys = KeyedHasher::from_seed(config.id_seed);
        Leader {
            config,
            core: Core::default(),
            partners: BTreeMap::new(),
            tasks: IdMap::new(keys),
            calls: BTreeMap::new(),
            attempts: BTreeMap::new(),
            streams: BTreeMap::new(),
            tokens: BTreeMap::new(),
            next_call: 0,
            next_attempt: 0,
            next_ticket: 0,
            ids,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &LeaderConfig {
        &self.config
    }

    /// Registers (or updates) a partner.
    pub fn add_partner(&mut self, id: impl Into<String>, endpoint: PartnerEndpoint) {
        self.partners.insert(id.into(), endpoint);
    }

    /// Feeds one input. Drain [`Leader::poll_output`] afterwards.
    pub fn handle(&mut self, now: Timestamp, input: LeaderInput) {
        self.core.advance(now);
        match input {
            LeaderInput::Response {
                call,
                status,
                content_type,
                body,
            } => self.on_response(call, status, content_type.as_deref(), &body),
            LeaderInput::StreamChunk { call, data } => self.on_stream_chunk(call, &data),
            LeaderInput::StreamEnded { call } => self.on_stream_ended(call),
            LeaderInput::Failed { call, reason } => self.on_failed(call, reason),
            LeaderInput::Notification {
                request,
                token,
                body,
            } => self.on_notification(request, token.as_deref(), &body),
        }
    }

    /// Fires every timer due at `now` (an early call does nothing).
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.core.advance(now);
        while let Some(t) = self.core.timers.pop_due(self.core.now()) {
            self.on_timer(t);
        }
    }

    /// The next output, or `None` when everything is drained.
    pub fn poll_output(&mut self) -> Option<LeaderOutput> {
        self.core.outputs.pop_front()
    }

    /// When to call [`Leader::handle_timeout`]: now while outputs are queued, else the
    /// earliest timer; `None` when nothing is scheduled.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.core.poll_timeout()
    }

    /// The earliest timer and its reason.
    pub fn next_timer(&self) -> Option<(Timestamp, &LeaderTimer)> {
        self.core.timers.next()
    }

    /// A task as observed.
    pub fn task(&self, task_id: &str) -> Option<LeaderTaskView<'_>> {
        self.tasks.get(task_id).map(LeaderTask::view)
    }

    /// Tasks held (live and ended, not yet forgotten).
    pub fn task_count(&self) -> usize {
        self.tasks.len()
    }

    /// Calls in flight or waiting for a retry, and open streams.
    pub fn calls_in_flight(&self) -> usize {
        self.calls.len() + self.streams.len()
    }

    fn push(&mut self, o: LeaderOutput) {
        self.core.outputs.push_back(o);
    }

    fn event(&mut self, e: LeaderEvent) {
        self.push(LeaderOutput::Event(e));
    }

    fn on_timer(&mut self, t: LeaderTimer) {
        match t {
            LeaderTimer::CallTimeout(c) => self.on_attempt_timeout(c),
            LeaderTimer::CallRetry(n) => self.send_attempt(n),
            LeaderTimer::Poll(task) => self.poll_task(&task),
            LeaderTimer::Restream(task) => self.reconnect(&task),
            LeaderTimer::StreamIdle(task) => self.on_stream_idle(&task),
            LeaderTimer::Deadline(task) => self.on_deadline(&task),
            LeaderTimer::Retention(task) => {
                if let Some(call) = self.tasks.get(&task).and_then(|t| t.stream) {
                    self.drop_stream(call);
                }
                if let Some(token) = self.tasks.remove(&task).and_then(|t| t.notification_token) {
                    self.tokens.remove(&token);
                }
            }
        }
    }

    fn live(&self, task_id: &str) -> Result<&LeaderTask, UsageError> {
        match self.tasks.get(task_id) {
            Some(t) if t.ended.is_none() => Ok(t),
            Some(_) => Err(UsageError::InvalidArgument(format!(
                "task {task_id} has ended"
            ))),
            None => Err(UsageError::UnknownTask(task_id.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests;
