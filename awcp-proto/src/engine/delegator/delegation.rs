//! One delegation's own state.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Timer {
    Lease,
    SetupGrace,
    Reconnect,
    ResultPoll,
    Purge,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Res {
    /// Nothing prepared.
    None,
    Preparing,
    Prepared,
    Releasing,
    Released,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stream {
    Closed,
    Opening,
    Open,
}

#[derive(Debug)]
pub(super) struct Delegation {
    pub(super) req: DelegateRequest,
    pub(super) machine: DelegationMachine,
    pub(super) created_at: Timestamp,
    pub(super) updated_at: Timestamp,
    pub(super) expires_at: Option<Timestamp>,
    pub(super) invited_at: Option<Timestamp>,
    pub(super) access: AccessMode,
    pub(super) features: Vec<String>,
    pub(super) accept: Option<Accept>,
    pub(super) transport: Res,
    pub(super) handle: Option<TransportHandle>,
    pub(super) stream: Stream,
    pub(super) stream_failures: u32,
    pub(super) start_sent: bool,
    pub(super) snapshots: BTreeMap<SnapshotId, SnapshotRecord>,
    pub(super) snapshot_order: Vec<SnapshotId>,
    /// Snapshots whose bytes are in the driver's store (stored, not yet deleted).
    pub(super) stored: Vec<SnapshotId>,
    pub(super) ops_in_flight: u32,
    /// Snapshot the executor announced in `done` that has not arrived (fetch it).
    pub(super) awaiting_snapshot: Option<SnapshotId>,
    /// The snapshot being applied (one at a time).
    pub(super) applying: Option<SnapshotId>,
    /// Stored snapshots waiting to be applied, in order.
    pub(super) apply_queue: Vec<SnapshotId>,
    /// Why the announced result could not be fetched.
    pub(super) result_error: Option<ErrorInfo>,
    pub(super) heard_terminal: bool,
    pub(super) ack_sent: bool,
    pub(super) result: Option<TaskOutcome>,
    pub(super) error: Option<ErrorInfo>,
    pub(super) ended: bool,
    pub(super) warnings: Vec<String>,
    pub(super) not_shipped: Vec<NotShipped>,
    pub(super) not_shipped_count: u64,
}
