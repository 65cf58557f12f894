//! The partner's inputs, outputs, events and timers.

use std::sync::Arc;

use crate::engine::{DeliveryId, HttpResponse, RequestId};
use crate::state::Cause;
use crate::wire::{TaskCommand, TaskState};

/// An input for [`super::Partner::handle`].
#[derive(Clone, Debug, PartialEq)]
pub enum PartnerInput {
    /// The body of an HTTP POST to an AIP endpoint (`rpc`, `stream`, `notification/*`; the
    /// method is read from the body). Answer it when an output names `request`.
    Request {
        /// Driver-issued handle.
        request: RequestId,
        /// The body.
        body: Vec<u8>,
    },
    /// The client of a stream went away (or the driver closed it).
    StreamClosed {
        /// The stream's request.
        request: RequestId,
    },
    /// The outcome of a [`PartnerOutput::Notify`].
    NotificationResult {
        /// The attempt.
        delivery: DeliveryId,
        /// Whether the receiver took it.
        outcome: DeliveryOutcome,
    },
}

/// What happened to a notification POST.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// The receiver answered with this HTTP status (2xx is success).
    Status(u16),
    /// No answer (connect refused, reset, timeout): the reason, for logs.
    Failed(String),
}

/// Something for the driver to do or the application to know.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub enum PartnerOutput {
    /// Send this complete response to `request`.
    Respond {
        /// The request.
        request: RequestId,
        /// The response.
        response: HttpResponse,
    },
    /// Answer `request` with `200` and [`crate::sse::STREAM_HEADERS`]; frames follow.
    StartStream {
        /// The request.
        request: RequestId,
    },
    /// Write these bytes (one SSE frame) to the stream of `request`.
    StreamData {
        /// The stream's request.
        request: RequestId,
        /// SSE bytes.
        data: Vec<u8>,
    },
    /// Close the stream of `request` (after writing what came before).
    EndStream {
        /// The stream's request.
        request: RequestId,
    },
    /// POST `body` to `url` with [`crate::http::notification_headers`]`(token)`; report with
    /// [`PartnerInput::NotificationResult`].
    Notify {
        /// The attempt.
        delivery: DeliveryId,
        /// The receiver.
        url: String,
        /// `X-ACPS-AIP-Notification-Token`.
        token: String,
        /// The bare task (`Task` or `TaskResult`) as JSON.
        body: Vec<u8>,
    },
    /// For the application.
    Event(PartnerEvent),
}

/// Why a notification was given up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GiveUpReason {
    /// Every attempt failed.
    Exhausted,
    /// The configuration was deleted before delivery.
    ConfigDeleted,
    /// Too many notifications queued for the receiver; the oldest was dropped.
    QueueFull,
}

/// What the application learns.
#[derive(Clone, Debug, PartialEq)]
pub enum PartnerEvent {
    /// A start waits for [`super::Partner::accept`] or [`super::Partner::reject`] (`auto_accept` off).
    StartRequested {
        /// The task (the id the partner holds, shared: an event copies no string).
        task_id: Arc<str>,
        /// The start command (data items, params).
        command: Arc<TaskCommand>,
    },
    /// The task was accepted: do the work (move it with the application calls).
    TaskStarted {
        /// The task (the id the partner holds, shared: an event copies no string).
        task_id: Arc<str>,
        /// The start command.
        command: Arc<TaskCommand>,
    },
    /// The leader continued the task (it is working again) with this command's input.
    TaskContinued {
        /// The task (the id the partner holds, shared: an event copies no string).
        task_id: Arc<str>,
        /// The continue command.
        command: Arc<TaskCommand>,
    },
    /// Every transition, whoever caused it.
    StateChanged {
        /// The task (the id the partner holds, shared: an event copies no string).
        task_id: Arc<str>,
        /// The previous state (`None` before the start decision).
        from: Option<TaskState>,
        /// The new state.
        to: TaskState,
        /// What caused it.
        cause: Cause,
    },
    /// The task reached a terminal state: stop any work on it.
    TaskEnded {
        /// The task (the id the partner holds, shared: an event copies no string).
        task_id: Arc<str>,
        /// The terminal state.
        state: TaskState,
    },
    /// The task was purged after its retention.
    TaskPurged {
        /// The task (the id the partner holds, shared: an event copies no string).
        task_id: Arc<str>,
    },
    /// A notification was delivered.
    NotificationDelivered {
        /// The task (the id the partner holds, shared: an event copies no string).
        task_id: Arc<str>,
        /// The configuration.
        config_id: String,
        /// The state it reported.
        state: TaskState,
    },
    /// A notification was given up.
    NotificationGaveUp {
        /// The task (the id the partner holds, shared: an event copies no string).
        task_id: Arc<str>,
        /// The configuration.
        config_id: String,
        /// The state it reported.
        state: TaskState,
        /// Attempts made.
        attempts: u32,
        /// Why.
        reason: GiveUpReason,
    },
}

/// Why the partner wants to wake up.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PartnerTimer {
    /// A start waits for the application's decision.
    ResponseTimeout(Arc<str>),
    /// A task waits in awaiting-input.
    AwaitingInputTimeout(Arc<str>),
    /// A task waits in awaiting-completion.
    AwaitingCompletionTimeout(Arc<str>),
    /// An ended task is to be purged (its retention is over). Kept in the partner's index of
    /// ended tasks, not armed as a timer; [`super::Partner::next_timer`] reports it.
    Retention(Arc<str>),
    /// An idle stream gets a keepalive comment.
    Keepalive(RequestId),
    /// A notification is retried (task, configuration).
    NotificationRetry(String, String),
    /// A notification attempt has had no outcome for too long.
    NotificationTimeout(DeliveryId),
}

impl PartnerTimer {
    /// The task a task timer is for (`None` for stream and notification timers).
    pub(crate) fn task_id(&self) -> Option<&str> {
        match self {
            PartnerTimer::ResponseTimeout(t)
            | PartnerTimer::AwaitingInputTimeout(t)
            | PartnerTimer::AwaitingCompletionTimeout(t)
            | PartnerTimer::Retention(t) => Some(t),
            PartnerTimer::Keepalive(_)
            | PartnerTimer::NotificationRetry(..)
            | PartnerTimer::NotificationTimeout(_) => None,
        }
    }

    /// One bit per kind of task timer that is armed (0 for the others).
    pub(crate) fn task_bit(&self) -> u8 {
        match self {
            PartnerTimer::ResponseTimeout(_) => 1,
            PartnerTimer::AwaitingInputTimeout(_) => 2,
            PartnerTimer::AwaitingCompletionTimeout(_) => 4,
            PartnerTimer::Retention(_)
            | PartnerTimer::Keepalive(_)
            | PartnerTimer::NotificationRetry(..)
            | PartnerTimer::NotificationTimeout(_) => 0,
        }
    }

    /// A short reason for logs.
    pub fn reason(&self) -> &'static str {
        match self {
            PartnerTimer::ResponseTimeout(_) => "start decision timeout",
            PartnerTimer::AwaitingInputTimeout(_) => "awaiting-input timeout",
            PartnerTimer::AwaitingCompletionTimeout(_) => "awaiting-completion timeout",
            PartnerTimer::Retention(_) => "ended task retention",
            PartnerTimer::Keepalive(_) => "stream keepalive",
            PartnerTimer::NotificationRetry(..) => "notification retry",
            PartnerTimer::NotificationTimeout(_) => "notification attempt timeout",
        }
    }
}

impl crate::engine::Reason for PartnerTimer {
    fn reason(&self) -> &'static str {
        PartnerTimer::reason(self)
    }
}
