//! The leader's inputs, outputs, events, timers and call errors.

use core::fmt;

use crate::engine::{CallId, RequestId};
use crate::error::{DecodeError, RpcError};
use crate::wire::{
    CommandKind, Method, ProductChunk, RpcResult, TaskCommand, TaskResult, TaskState, TaskStatus,
};

/// Names one command the application sent ([`super::Leader::start`], `continue_task`,
/// `complete`, `cancel`, `get`); its outcome arrives as exactly one
/// [`LeaderEvent::Answered`] with the same ticket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(pub u64);

/// An input for [`super::Leader::handle`].
#[derive(Clone, Debug, PartialEq)]
pub enum LeaderInput {
    /// A complete HTTP response to [`LeaderOutput::Send`] (for a stream call: a response that
    /// is not `200 text/event-stream`, e.g. a JSON-RPC error).
    Response {
        /// The call.
        call: CallId,
        /// HTTP status.
        status: u16,
        /// `Content-Type`, if any.
        content_type: Option<String>,
        /// The body.
        body: Vec<u8>,
    },
    /// Bytes of a `200 text/event-stream` response to a stream call.
    StreamChunk {
        /// The call.
        call: CallId,
        /// The bytes, as received.
        data: Vec<u8>,
    },
    /// A stream response ended (closed by the partner or broken).
    StreamEnded {
        /// The call.
        call: CallId,
    },
    /// No response (connection refused, reset, timed out in the driver).
    Failed {
        /// The call.
        call: CallId,
        /// Why, for logs.
        reason: String,
    },
    /// A notification POST arrived at the leader's receiver.
    Notification {
        /// Driver-issued handle; answer with [`LeaderOutput::RespondNotification`].
        request: RequestId,
        /// The `X-ACPS-AIP-Notification-Token` header, if present.
        token: Option<String>,
        /// The body.
        body: Vec<u8>,
    },
}

/// An HTTP request for the driver to send (always `POST`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRequest {
    /// Where.
    pub url: String,
    /// `Content-Type: application/json` always; `Accept: text/event-stream` when set (stream
    /// calls), else `Accept: application/json`. See [`crate::http::request_headers`].
    pub event_stream: bool,
    /// The JSON-RPC request.
    pub body: Vec<u8>,
}

/// Something for the driver to do or the application to know.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub enum LeaderOutput {
    /// Send this request; report with [`LeaderInput::Response`], or (stream calls)
    /// [`LeaderInput::StreamChunk`]s and [`LeaderInput::StreamEnded`], or
    /// [`LeaderInput::Failed`].
    Send {
        /// The call (one per attempt).
        call: CallId,
        /// The request.
        request: HttpRequest,
    },
    /// Stop the call (drop the connection); nothing more is expected for it.
    Abort {
        /// The call.
        call: CallId,
    },
    /// Answer a notification POST with this status (200 taken, 400 unreadable, 401 token).
    RespondNotification {
        /// The request.
        request: RequestId,
        /// HTTP status.
        status: u16,
    },
    /// For the application.
    Event(LeaderEvent),
}

/// Why a call failed for good.
#[derive(Clone, Debug, PartialEq)]
pub enum CallError {
    /// The partner answered with a JSON-RPC error.
    Rpc(RpcError),
    /// A non-2xx HTTP status without a JSON-RPC error body.
    Http {
        /// Status.
        status: u16,
        /// The start of the body if it is JSON, else a one-line description of it.
        body: String,
    },
    /// No answer after every attempt (the last reason).
    Transport(String),
    /// No answer in time after every attempt.
    Timeout,
    /// An answer we cannot read.
    Decode(DecodeError),
    /// The answer names another request id or task.
    Mismatch(String),
    /// The leader stopped following the task before the command was answered.
    Abandoned(AbandonReason),
}

impl CallError {
    /// An HTTP error status with its body: a JSON body keeps its start (at most 200 bytes),
    /// anything else (a web page, a proxy's error) is described in one line and not echoed.
    pub(crate) fn http(status: u16, body: &[u8]) -> CallError {
        let body = if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() {
            String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned()
        } else {
            engine_basics::body::describe_foreign_body(body)
        };
        CallError::Http { status, body }
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Rpc(e) => write!(f, "JSON-RPC error {e}"),
            CallError::Http { status, body } => write!(f, "HTTP {status}: {body}"),
            CallError::Transport(r) => write!(f, "no answer: {r}"),
            CallError::Timeout => f.write_str("no answer in time"),
            CallError::Decode(e) => write!(f, "unreadable answer: {e}"),
            CallError::Mismatch(m) => write!(f, "answer does not match the request: {m}"),
            CallError::Abandoned(r) => write!(f, "the task was abandoned ({r})"),
        }
    }
}

/// Why the leader stopped following a task that it never saw end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AbandonReason {
    /// The task's deadline passed and the cancel did not get through.
    Deadline,
    /// The partner does not know the task (-32001): it never started or the partner lost it.
    UnknownAtPartner,
}

impl fmt::Display for AbandonReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AbandonReason::Deadline => "its deadline passed and the cancel did not get through",
            AbandonReason::UnknownAtPartner => "the partner does not know it",
        })
    }
}

/// What the application learns.
#[derive(Clone, Debug, PartialEq)]
pub enum LeaderEvent {
    /// A command the application sent was answered, or failed for good. Every [`Ticket`] gets
    /// exactly one. The answer is as received (it may be older than what the leader has seen
    /// since; [`LeaderEvent::StateChanged`] tells the news). A `start` is answered by the
    /// first task the leader receives for it: the reply (rpc, `notification/start`) or the
    /// stream's first event.
    Answered {
        /// The task.
        task_id: String,
        /// The command's ticket.
        ticket: Ticket,
        /// The command.
        command: CommandKind,
        /// The partner's answer (a task, or a v01.00 message), or why there is none.
        outcome: Result<RpcResult, CallError>,
    },
    /// The partner's task moved (as observed; intermediate states may be skipped).
    StateChanged {
        /// The task.
        task_id: String,
        /// The previously observed state.
        from: Option<TaskState>,
        /// The new status.
        status: TaskStatus,
    },
    /// The status changed without a state change (new data items).
    Progress {
        /// The task.
        task_id: String,
        /// The status.
        status: TaskStatus,
    },
    /// A product chunk arrived on the stream.
    ProductChunk {
        /// The task.
        task_id: String,
        /// The chunk.
        chunk: Box<ProductChunk>,
    },
    /// A full task arrived (reply, stream event or notification): products and histories.
    Result {
        /// The task.
        task_id: String,
        /// The result as received.
        result: Box<TaskResult>,
    },
    /// A plain message arrived (a v01.00 `Message` result, or a command event on a stream).
    Message {
        /// The task.
        task_id: String,
        /// The message.
        message: Box<TaskCommand>,
    },
    /// The task reached a terminal state.
    TaskEnded {
        /// The task.
        task_id: String,
        /// The state.
        state: TaskState,
    },
    /// The leader stopped following a task it never saw end.
    TaskAbandoned {
        /// The task.
        task_id: String,
        /// Why.
        reason: AbandonReason,
    },
    /// A call failed for good (after its retries).
    CallFailed {
        /// The task.
        task_id: String,
        /// The method.
        method: Method,
        /// The command, for command calls.
        command: Option<CommandKind>,
        /// Why.
        error: CallError,
    },
    /// The task's stream broke before the task ended; `retry_in` is when it reconnects.
    StreamDropped {
        /// The task.
        task_id: String,
        /// Whether a re-stream follows.
        will_retry: bool,
    },
    /// The stream cannot be resumed (events expired, or no stream support); the leader polls
    /// with `get` instead.
    StreamLost {
        /// The task.
        task_id: String,
        /// Why.
        error: CallError,
    },
    /// The partner broke the protocol (an impossible transition, a stream going backwards,
    /// an unreadable event); the offending data was ignored.
    PeerMisbehaved {
        /// The task.
        task_id: String,
        /// What happened.
        detail: String,
    },
}

/// Why the leader wants to wake up.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LeaderTimer {
    /// An attempt has had no answer for too long.
    CallTimeout(CallId),
    /// A failed call is sent again (internal call number).
    CallRetry(u64),
    /// A task is polled with `get`.
    Poll(String),
    /// A dropped stream is resumed with `re-stream`.
    Restream(String),
    /// A stream has been silent for too long.
    StreamIdle(String),
    /// A task's deadline.
    Deadline(String),
    /// An ended task is forgotten.
    Retention(String),
}

impl LeaderTimer {
    /// A short reason for logs.
    pub fn reason(&self) -> &'static str {
        match self {
            LeaderTimer::CallTimeout(_) => "call attempt timeout",
            LeaderTimer::CallRetry(_) => "call retry",
            LeaderTimer::Poll(_) => "poll with get",
            LeaderTimer::Restream(_) => "re-stream after a drop",
            LeaderTimer::StreamIdle(_) => "stream idle timeout",
            LeaderTimer::Deadline(_) => "task deadline",
            LeaderTimer::Retention(_) => "ended task retention",
        }
    }
}

impl crate::engine::Reason for LeaderTimer {
    fn reason(&self) -> &'static str {
        LeaderTimer::reason(self)
    }
}
