//! Partner → leader: [`TaskResult`] (v01.00 `Task`, v02 `TaskResult`) and the stream events
//! ([`StatusUpdate`], [`ProductChunk`], [`EventData`], [`StreamEvent`]).
//!
//! v02 made every object extend `Message`; those shared fields live in [`Header`], all
//! optional, so a v01.00 object (which has none of them but `senderId`, `groupId`,
//! `sessionId`) and a v02 object decode into the same value.

use crate::time::Timestamp;
use crate::wire::command::TaskCommand;
use crate::wire::data::{DataItem, Mentions, Product, SenderRole, TaskState, TaskStatus};

/// The `Message` base fields of a v02 object (all optional here; v01.00 objects carry only
/// `senderId`, `groupId` and `sessionId`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Header {
    /// Message id (v02). In v01.00 a task's `id` is its task id, so this stays `None`.
    pub id: Option<String>,
    /// When it was sent (v02).
    pub sent_at: Option<Timestamp>,
    /// `partner` (v02).
    pub sender_role: Option<SenderRole>,
    /// The sender's AIC (v02; v01.00 only in group mode).
    pub sender_id: Option<String>,
    /// Group mode: who should act (v02).
    pub mentions: Option<Mentions>,
    /// Content (v02).
    pub data_items: Option<Vec<DataItem>>,
    /// Group mode: the group.
    pub group_id: Option<String>,
    /// The session (required in v01.00, where absent is written `""`).
    pub session_id: Option<String>,
}

impl Header {
    /// A partner's header: message id, time and sender.
    pub fn partner(id: String, sent_at: Timestamp, sender_id: String) -> Self {
        Header {
            id: Some(id),
            sent_at: Some(sent_at),
            sender_role: Some(SenderRole::Partner),
            sender_id: Some(sender_id),
            ..Header::default()
        }
    }
}

/// A task as the partner reports it: v01.00 `Task` (`type:"task"`, `id` = task id) or v02
/// `TaskResult` (`type:"task-result"`, `id` = message id, `taskId`).
#[derive(Clone, Debug, PartialEq)]
pub struct TaskResult {
    /// Message fields.
    pub header: Header,
    /// The task.
    pub task_id: String,
    /// Its current status.
    pub status: TaskStatus,
    /// What it produced so far.
    pub products: Option<Vec<Product>>,
    /// `messageHistory` (v01.00) / `commandHistory` (v02).
    pub command_history: Option<Vec<TaskCommand>>,
    /// Every status it went through.
    pub status_history: Option<Vec<TaskStatus>>,
}

impl TaskResult {
    /// The current state.
    pub fn state(&self) -> TaskState {
        self.status.state
    }
}

/// `status-update` (v01.00) / `task-status-update` (v02) stream event.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusUpdate {
    /// Message fields (v02).
    pub header: Header,
    /// The task.
    pub task_id: String,
    /// The new status.
    pub status: TaskStatus,
}

/// `product-chunk` stream event: one piece of a product.
#[derive(Clone, Debug, PartialEq)]
pub struct ProductChunk {
    /// Message fields (v02).
    pub header: Header,
    /// The task.
    pub task_id: String,
    /// The piece (its `dataItems` are this chunk's).
    pub product: Product,
    /// `false` for the first chunk of the product, `true` for later ones.
    pub append: bool,
    /// `true` on the product's last chunk.
    pub last_chunk: bool,
}

/// `eventData` of a stream event.
#[derive(Clone, Debug, PartialEq)]
pub enum EventData {
    /// A whole task.
    Task(TaskResult),
    /// A message (v01.00) or task command (v02).
    Command(TaskCommand),
    /// A status change.
    StatusUpdate(StatusUpdate),
    /// A product chunk.
    ProductChunk(ProductChunk),
}

impl EventData {
    /// The task the event is about.
    pub fn task_id(&self) -> Option<&str> {
        match self {
            EventData::Task(t) => Some(&t.task_id),
            EventData::Command(c) => c.task_id.as_deref(),
            EventData::StatusUpdate(s) => Some(&s.task_id),
            EventData::ProductChunk(p) => Some(&p.task_id),
        }
    }

    /// The status the event carries, if any.
    pub fn status(&self) -> Option<&TaskStatus> {
        match self {
            EventData::Task(t) => Some(&t.status),
            EventData::StatusUpdate(s) => Some(&s.status),
            EventData::Command(_) | EventData::ProductChunk(_) => None,
        }
    }
}

/// One stream event: `result: {eventSeq, eventData}`.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamEvent {
    /// Increasing per task (gaps allowed).
    pub seq: u64,
    /// The payload.
    pub data: EventData,
}
