//! One delegation's own state.

use super::*;

/// Where a delegation's transport is (export view, archives, credentials). The handle for
/// START exists only while the transport is prepared and START has not taken it; a finished
/// delegation never keeps credentials.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum TransportPhase {
    /// Nothing prepared (before ACCEPT, or preparing failed and cleaned up after itself).
    None,
    /// `PrepareTransport` is in flight.
    Preparing,
    /// Prepared; `handle` is the handle for START until START (or a teardown) takes it.
    Prepared {
        /// The handle (with its credentials) START carries.
        handle: Option<TransportHandle>,
    },
    /// `ReleaseTransport` is in flight.
    Releasing,
    /// Released: nothing is held any more.
    Released,
}

impl TransportPhase {
    /// Prepared (with or without the handle).
    pub(super) fn is_prepared(&self) -> bool {
        matches!(self, TransportPhase::Prepared { .. })
    }
}

/// Applies of one delegation run one at a time, in arrival order: snapshots wait only behind
/// an apply in flight.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) enum Applies {
    /// No apply in flight.
    #[default]
    Idle,
    /// `current` is being applied; `queued` wait, in order.
    Applying {
        /// The snapshot whose `ApplySnapshot` is in flight.
        current: SnapshotId,
        /// Stored snapshots to apply after it.
        queued: std::collections::VecDeque<SnapshotId>,
    },
}

impl Applies {
    /// Queues `sid`; returns it if it is to be applied now (nothing was in flight).
    pub(super) fn push(&mut self, sid: SnapshotId) -> Option<SnapshotId> {
        match self {
            Applies::Idle => {
                *self = Applies::Applying {
                    current: sid.clone(),
                    queued: Default::default(),
                };
                Some(sid)
            }
            Applies::Applying { queued, .. } => {
                queued.push_back(sid);
                None
            }
        }
    }

    /// The apply of `sid` finished: returns the next snapshot to apply, if any.
    pub(super) fn finish(&mut self, sid: &SnapshotId) -> Option<SnapshotId> {
        let Applies::Applying { current, queued } = self else {
            return None;
        };
        if current != sid {
            // Not the one in flight (a driver answering twice): only drop it from the queue.
            queued.retain(|s| s != sid);
            return None;
        }
        match queued.pop_front() {
            Some(next) => {
                *current = next.clone();
                Some(next)
            }
            None => {
                *self = Applies::Idle;
                None
            }
        }
    }
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
    pub(super) transport: TransportPhase,
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
    /// The apply in flight and the stored snapshots waiting behind it (one at a time).
    pub(super) applies: Applies,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::delegator::tests::sid;

    #[test]
    fn applies_run_one_at_a_time_in_arrival_order() {
        let mut a = Applies::Idle;
        assert_eq!(a.push(sid("snap_a")), Some(sid("snap_a")));
        assert_eq!(a.push(sid("snap_b")), None);
        assert_eq!(a.push(sid("snap_c")), None);
        assert_eq!(a.finish(&sid("snap_a")), Some(sid("snap_b")));
        assert_eq!(a.finish(&sid("snap_b")), Some(sid("snap_c")));
        assert_eq!(a.finish(&sid("snap_c")), None);
        assert_eq!(a, Applies::Idle);
    }

    #[test]
    fn a_finish_for_a_snapshot_not_in_flight_starts_nothing() {
        let mut a = Applies::Idle;
        assert_eq!(a.finish(&sid("snap_a")), None);
        a.push(sid("snap_a"));
        a.push(sid("snap_b"));
        assert_eq!(a.finish(&sid("snap_b")), None);
        assert_eq!(a.finish(&sid("snap_a")), None, "snap_b left the queue");
        assert_eq!(a, Applies::Idle);
    }

    #[test]
    fn only_a_prepared_transport_counts_as_prepared() {
        assert!(TransportPhase::Prepared { handle: None }.is_prepared());
        for p in [
            TransportPhase::None,
            TransportPhase::Preparing,
            TransportPhase::Releasing,
            TransportPhase::Released,
        ] {
            assert!(!p.is_prepared());
        }
    }
}
