//! One delegation's own state.

use super::*;

/// How an accepted delegation's transport stands before START (export view, archives,
/// credentials).
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Preparation {
    /// `PrepareTransport` is in flight.
    Preparing,
    /// Prepared; START carries this handle (with its credentials).
    Prepared(TransportHandle),
    /// Prepared before a restart: the handle's credentials died with the process, so it is only
    /// ever released (a restored `accepted` delegation is abandoned).
    Stale,
}

/// What a finished delegation still holds of its transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Release {
    /// Nothing (never prepared, preparing failed, or released).
    Free,
    /// `PrepareTransport` is still in flight: release what it prepares once it answers.
    Preparing,
    /// Prepared and held: to be released.
    Held,
    /// `ReleaseTransport` is in flight.
    Releasing,
}

/// A terminal delegation winding down: what is still to be closed, acknowledged and released
/// before it ends.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Finishing {
    /// The transport, until released.
    pub(super) transport: Release,
    /// The event stream is still open (closed by [`Delegator::wind_down`]).
    pub(super) close_stream: bool,
    /// START went out before the delegation finished.
    pub(super) start_sent: bool,
    /// The executor's `done` or `error` was heard (it keeps the result until acknowledged).
    pub(super) heard_terminal: bool,
    /// The result was acknowledged (`SendAck`).
    pub(super) ack_sent: bool,
    /// A snapshot the executor announced in `done` that has not arrived (being fetched).
    pub(super) awaiting: Option<SnapshotId>,
    /// CLOSE is in flight: the executor is acknowledged only once it confirmed it.
    pub(super) closing: bool,
}

/// Where a delegation is in its life: what it holds and waits for at each stage, so that
/// impossible combinations (a START handle after START, an open stream after the end, an ack
/// before the executor finished) cannot be represented.
///
/// The spec state ([`DelegationState`], in [`Delegation::machine`]) is the only authority on
/// which transitions are legal; the phase follows it: `created`/`invited` are
/// [`Phase::Inviting`], `accepted` is [`Phase::Accepted`], `started`/`running`/`idle` are
/// [`Phase::Started`], and a terminal state is [`Phase::Finishing`] until everything is
/// released, then [`Phase::Ended`]. [`Delegator::transition`] moves a delegation into
/// `Finishing` on its terminal transition.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Phase {
    /// Before ACCEPT: nothing is prepared and no stream is open.
    Inviting {
        /// When INVITE went out (`None` while created, or after a restart).
        invited_at: Option<Timestamp>,
    },
    /// ACCEPT received: the transport is being prepared and the event stream opened; START
    /// goes out once both are ready.
    Accepted {
        /// The transport.
        transport: Preparation,
        /// The event stream.
        stream: Stream,
        /// Consecutive stream failures.
        stream_failures: u32,
    },
    /// START went out (its handle with it): the transport is prepared and held; the executor
    /// sets up, then runs the task.
    Started {
        /// The event stream.
        stream: Stream,
        /// Consecutive stream failures.
        stream_failures: u32,
        /// The executor's `done` or `error` was heard: set by the handler that then makes the
        /// terminal transition it causes (never true between two calls).
        heard_terminal: bool,
    },
    /// Terminal, winding down.
    Finishing(Finishing),
    /// Terminal, everything released and `Ended` emitted: kept for listing until the
    /// retention is over.
    Ended {
        /// START went out before the delegation finished.
        start_sent: bool,
        /// The executor's `done` or `error` was heard.
        heard_terminal: bool,
    },
}

impl Phase {
    /// The phase entered on a terminal transition: what is still held is kept, to be released.
    /// A START handle that was never sent is dropped here (a finished delegation never keeps
    /// credentials).
    pub(super) fn finish(self) -> Phase {
        let finishing = |transport, stream: Stream, start_sent, heard_terminal| {
            Phase::Finishing(Finishing {
                transport,
                close_stream: stream != Stream::Closed,
                start_sent,
                heard_terminal,
                ack_sent: false,
                awaiting: None,
                closing: false,
            })
        };
        match self {
            Phase::Inviting { .. } => finishing(Release::Free, Stream::Closed, false, false),
            Phase::Accepted {
                transport, stream, ..
            } => {
                let transport = match transport {
                    Preparation::Preparing => Release::Preparing,
                    Preparation::Prepared(_) | Preparation::Stale => Release::Held,
                };
                finishing(transport, stream, false, false)
            }
            Phase::Started {
                stream,
                heard_terminal,
                ..
            } => finishing(Release::Held, stream, true, heard_terminal),
            done @ (Phase::Finishing(_) | Phase::Ended { .. }) => done,
        }
    }

    /// Whether START went out (events before it are noise, or a previous incarnation's).
    pub(super) fn start_sent(&self) -> bool {
        match self {
            Phase::Inviting { .. } | Phase::Accepted { .. } => false,
            Phase::Started { .. } => true,
            Phase::Finishing(f) => f.start_sent,
            Phase::Ended { start_sent, .. } => *start_sent,
        }
    }

    /// Whether the executor's `done` or `error` was heard.
    pub(super) fn heard_terminal(&self) -> bool {
        match self {
            Phase::Inviting { .. } | Phase::Accepted { .. } => false,
            Phase::Started { heard_terminal, .. } | Phase::Ended { heard_terminal, .. } => {
                *heard_terminal
            }
            Phase::Finishing(f) => f.heard_terminal,
        }
    }

    /// Notes that the executor's `done` or `error` was heard. Before START the executor has
    /// nothing to say (and the engine never asks), so nothing is noted then.
    pub(super) fn hear_terminal(&mut self) {
        match self {
            Phase::Inviting { .. } | Phase::Accepted { .. } => {}
            Phase::Started { heard_terminal, .. } | Phase::Ended { heard_terminal, .. } => {
                *heard_terminal = true;
            }
            Phase::Finishing(f) => f.heard_terminal = true,
        }
    }

    /// The event stream and its consecutive failures, while the delegation uses one (accepted,
    /// started, running).
    pub(super) fn stream_mut(&mut self) -> Option<(&mut Stream, &mut u32)> {
        match self {
            Phase::Accepted {
                stream,
                stream_failures,
                ..
            }
            | Phase::Started {
                stream,
                stream_failures,
                ..
            } => Some((stream, stream_failures)),
            Phase::Inviting { .. } | Phase::Finishing(_) | Phase::Ended { .. } => None,
        }
    }

    /// The snapshot announced in `done` that has not arrived, while winding down.
    pub(super) fn awaiting(&self) -> Option<&SnapshotId> {
        match self {
            Phase::Finishing(f) => f.awaiting.as_ref(),
            Phase::Inviting { .. }
            | Phase::Accepted { .. }
            | Phase::Started { .. }
            | Phase::Ended { .. } => None,
        }
    }

    /// Gives up waiting for the announced snapshot, returning it.
    pub(super) fn take_awaiting(&mut self) -> Option<SnapshotId> {
        match self {
            Phase::Finishing(f) => f.awaiting.take(),
            Phase::Inviting { .. }
            | Phase::Accepted { .. }
            | Phase::Started { .. }
            | Phase::Ended { .. } => None,
        }
    }

    /// Whether everything is released and `Ended` was emitted.
    pub(super) fn is_ended(&self) -> bool {
        matches!(self, Phase::Ended { .. })
    }

    /// Whether this phase belongs with spec state `state` (see [`Phase`]).
    pub(super) fn fits(&self, state: DelegationState) -> bool {
        use DelegationState as S;
        match self {
            Phase::Inviting { .. } => matches!(state, S::Created | S::Invited),
            Phase::Accepted { .. } => state == S::Accepted,
            Phase::Started { .. } => matches!(state, S::Started | S::Running | S::Idle),
            Phase::Finishing(_) | Phase::Ended { .. } => state.is_terminal(),
        }
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

/// The executor's event stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stream {
    /// Not open (not yet, or closed and waiting for a reconnect).
    Closed,
    /// `OpenEventStream` is in flight.
    Opening,
    /// Open: events arrive.
    Open,
}

/// A delegation's snapshots, in arrival order.
///
/// A vector searched by id: a delegation has one snapshot, or a few with delta snapshots, and
/// a map's first node (about 3 KiB, one allocation too large for the allocator's fast path)
/// cost more than the scan. No more than [`Snapshots::MAX`] are kept, so a peer that sends
/// snapshot events without end can make neither the scan quadratic nor the record unbounded.
#[derive(Debug, Default)]
pub(super) struct Snapshots(Vec<SnapshotRecord>);

impl Snapshots {
    /// Snapshots one delegation keeps; later ones are refused (a peer that sends more is
    /// misbehaving: one snapshot per task, a few with delta snapshots).
    pub(super) const MAX: usize = 1024;

    /// The snapshot `id`.
    pub(super) fn get(&self, id: &SnapshotId) -> Option<&SnapshotRecord> {
        self.0.iter().find(|r| r.id == *id)
    }

    /// The snapshot `id`, to change it.
    pub(super) fn get_mut(&mut self, id: &SnapshotId) -> Option<&mut SnapshotRecord> {
        self.0.iter_mut().find(|r| r.id == *id)
    }

    /// Whether `id` is known.
    pub(super) fn contains(&self, id: &SnapshotId) -> bool {
        self.get(id).is_some()
    }

    /// Whether [`Snapshots::MAX`] are kept (no more may be pushed).
    pub(super) fn is_full(&self) -> bool {
        self.0.len() >= Self::MAX
    }

    /// Adds a snapshot the caller checked is not known yet (and, for one the executor
    /// announces, not one too many: records read back are all kept).
    pub(super) fn push(&mut self, rec: SnapshotRecord) {
        debug_assert!(!self.contains(&rec.id));
        self.0.push(rec);
    }

    /// Keeps the snapshots `keep` says to keep (and lets it change them), in order.
    pub(super) fn retain_mut(&mut self, keep: impl FnMut(&mut SnapshotRecord) -> bool) {
        self.0.retain_mut(keep);
    }

    /// All of them, in arrival order.
    pub(super) fn iter(&self) -> std::slice::Iter<'_, SnapshotRecord> {
        self.0.iter()
    }
}

/// One delegation of the delegator.
#[derive(Debug)]
pub(super) struct Delegation {
    /// What the application asked for.
    pub(super) req: DelegateRequest,
    /// `req.peer`, shared by every output that names the executor.
    pub(super) peer: std::sync::Arc<str>,
    /// The spec state; changes only through [`Delegator::transition`].
    pub(super) machine: DelegationMachine,
    /// What the delegation holds and waits for (follows the spec state, see [`Phase`]).
    pub(super) phase: Phase,
    pub(super) created_at: Timestamp,
    pub(super) updated_at: Timestamp,
    /// The lease end, once invited (capped by the executor's `maxTtlSeconds`).
    pub(super) expires_at: Option<Timestamp>,
    /// The effective access (the executor may lower it in ACCEPT).
    pub(super) access: AccessMode,
    /// Extensions agreed in ACCEPT.
    pub(super) features: Vec<Feature>,
    /// The executor's ACCEPT, for the view (absent before it, and after a restart).
    pub(super) accept: Option<Accept>,
    /// Snapshots, in arrival order.
    pub(super) snapshots: Snapshots,
    /// Snapshots whose bytes are in the driver's store (stored, not yet deleted).
    pub(super) stored: Vec<SnapshotId>,
    /// The apply in flight and the stored snapshots waiting behind it (one at a time).
    pub(super) applies: Applies,
    /// What the application sees of the end, each set once: the executor's summary, what went
    /// wrong (set by the terminal transition), why an announced result could not be fetched.
    pub(super) result: Option<TaskOutcome>,
    pub(super) error: Option<ErrorInfo>,
    pub(super) result_error: Option<ErrorInfo>,
    /// What releasing the transport found.
    pub(super) warnings: Vec<String>,
    /// What the admission scan did not ship (the first few, and how many in all).
    pub(super) not_shipped: Vec<NotShipped>,
    pub(super) not_shipped_count: u64,
    /// The executor's latest progress message (not journaled: a status line, not state).
    pub(super) last_progress: Option<String>,
    /// The id of the last event taken from the executor's stream (WIRE.md §4.6): sent as
    /// `Last-Event-ID` when the stream is opened again, and events up to it are duplicates.
    /// Not recorded: a restarted delegator opens its stream without it.
    pub(super) last_event_id: Option<u64>,
    /// The INVITE as the record holds it, encoded at the first record (`req` never changes;
    /// the journal asks for the record at every change).
    pub(super) invite_record: std::sync::OnceLock<crate::wire::JsonText>,
    /// Restored after its lease had ended: the executor is asked first (its event stream,
    /// until the setup grace period ends) whether the task finished within the lease, and the
    /// delegation expires only if it did not say so (not journaled: set by each restore).
    pub(super) asking_after_lease: bool,
    /// The round running or last ended (1: the START round; WIRE.md §17).
    pub(super) round: u64,
    /// Restored idle with a snapshot of the round whose storing the restart interrupted: the
    /// executor's replay of the round brings it again, and the round is not settled before
    /// (not journaled: set by each restore).
    pub(super) replay_awaited: bool,
}

impl Delegation {
    /// How the workspace's root is laid out: by the executor's dialect (WIRE.md §15), except
    /// a `git` delegation of one resource with an executor that agreed to
    /// [`Feature::GitRootLayout`]: its files are at the root (the branch then reads like the
    /// repository it may come from, §11.6).
    pub(super) fn layout(&self) -> ArchiveLayout {
        if self.req.transport == TransportKind::Git
            && self.req.resources.len() == 1
            && self.features.contains(&Feature::GitRootLayout)
        {
            ArchiveLayout::Flat
        } else {
            ArchiveLayout::for_dialect(self.req.dialect)
        }
    }

    /// A new delegation in `created`.
    pub(super) fn new(now: Timestamp, req: DelegateRequest) -> Delegation {
        Delegation {
            access: req.access_mode,
            peer: req.peer.as_str().into(),
            req,
            machine: DelegationMachine::new(),
            phase: Phase::Inviting { invited_at: None },
            created_at: now,
            updated_at: now,
            expires_at: None,
            features: Vec::new(),
            accept: None,
            snapshots: Snapshots::default(),
            stored: Vec::new(),
            applies: Applies::Idle,
            result: None,
            error: None,
            result_error: None,
            warnings: Vec::new(),
            not_shipped: Vec::new(),
            not_shipped_count: 0,
            last_progress: None,
            last_event_id: None,
            asking_after_lease: false,
            invite_record: Default::default(),
            round: 1,
            replay_awaited: false,
        }
    }

    /// The spec state: a projection of the machine.
    pub(super) fn state(&self) -> DelegationState {
        self.machine.state()
    }

    /// How many stores and applies are in flight: exactly the snapshots whose status is
    /// [`SnapshotStatus::InFlight`] (a snapshot is in flight from its arrival until stored,
    /// and from an apply's start until it answers).
    pub(super) fn ops_in_flight(&self) -> usize {
        self.snapshots
            .iter()
            .filter(|r| r.status == SnapshotStatus::InFlight)
            .count()
    }

    /// Whether the result may be acknowledged (the executor may then forget it): every
    /// snapshot is stored (or applied, or discarded by policy) and nothing announced is missing.
    pub(super) fn result_safe(&self) -> bool {
        self.result_error.is_none()
            && !self
                .snapshots
                .iter()
                .any(|r| matches!(r.status, SnapshotStatus::Failed(_)))
    }
}

#[cfg(test)]
#[allow(clippy::wildcard_enum_match_arm)] // tests pick the outputs they look at
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
    fn a_terminal_transition_keeps_what_is_held_and_drops_the_start_handle() {
        let handle = crate::engine::delegator::tests::archive_handle();
        let accepted = |transport| Phase::Accepted {
            transport,
            stream: Stream::Open,
            stream_failures: 0,
        };
        let finishing = |p: Phase| match p.finish() {
            Phase::Finishing(f) => f,
            other => panic!("not finishing: {other:?}"),
        };
        let f = finishing(accepted(Preparation::Prepared(handle)));
        assert_eq!(f.transport, Release::Held, "released, not forgotten");
        assert!(f.close_stream && !f.start_sent && !f.heard_terminal);
        assert_eq!(
            finishing(accepted(Preparation::Preparing)).transport,
            Release::Preparing,
            "released once the preparation answers"
        );
        assert_eq!(
            finishing(Phase::Inviting { invited_at: None }).transport,
            Release::Free
        );
        let f = finishing(Phase::Started {
            stream: Stream::Closed,
            stream_failures: 2,
            heard_terminal: true,
        });
        assert!(f.start_sent && f.heard_terminal && !f.close_stream);
        let ended = Phase::Ended {
            start_sent: true,
            heard_terminal: false,
        };
        assert_eq!(ended.clone().finish(), ended, "the end is final");
    }

    #[test]
    fn every_phase_fits_only_its_spec_states() {
        use DelegationState as S;
        let phases = [
            Phase::Inviting { invited_at: None },
            Phase::Accepted {
                transport: Preparation::Stale,
                stream: Stream::Closed,
                stream_failures: 0,
            },
            Phase::Started {
                stream: Stream::Closed,
                stream_failures: 0,
                heard_terminal: false,
            },
            Phase::Inviting { invited_at: None }.finish(),
            Phase::Ended {
                start_sent: false,
                heard_terminal: false,
            },
        ];
        for state in S::ALL {
            let fitting = phases.iter().filter(|p| p.fits(state)).count();
            let want = if state.is_terminal() { 2 } else { 1 };
            assert_eq!(fitting, want, "{state}");
        }
    }
}
