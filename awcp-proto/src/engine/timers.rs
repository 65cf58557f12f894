//! Named timers in a deadline index (one per delegation and kind).

use std::collections::{BTreeMap, BTreeSet};

use crate::id::DelegationId;
use crate::time::Timestamp;

/// A deadline index: `poll` is O(log n), re-arming a timer replaces its old deadline.
#[derive(Debug)]
pub(crate) struct TimerIndex<K: Ord + Copy> {
    by_deadline: BTreeSet<(Timestamp, DelegationId, K)>,
    by_key: BTreeMap<(DelegationId, K), Timestamp>,
}

impl<K: Ord + Copy> Default for TimerIndex<K> {
    fn default() -> Self {
        TimerIndex {
            by_deadline: BTreeSet::new(),
            by_key: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Copy> TimerIndex<K> {
    /// Arms (or re-arms) timer `kind` of `id` at `at`.
    pub(crate) fn set(&mut self, id: &DelegationId, kind: K, at: Timestamp) {
        // One lookup for the key: the old deadline (if any) comes back from the insert.
        match self.by_key.insert((id.clone(), kind), at) {
            Some(old) if old == at => {}
            Some(old) => {
                self.by_deadline.remove(&(old, id.clone(), kind));
                self.by_deadline.insert((at, id.clone(), kind));
            }
            None => {
                self.by_deadline.insert((at, id.clone(), kind));
            }
        }
    }

    /// Disarms timer `kind` of `id`.
    pub(crate) fn cancel(&mut self, id: &DelegationId, kind: K) {
        if let Some(at) = self.by_key.remove(&(id.clone(), kind)) {
            self.by_deadline.remove(&(at, id.clone(), kind));
        }
    }

    /// Disarms every timer of `id`.
    pub(crate) fn cancel_all(&mut self, id: &DelegationId) {
        let keys: Vec<K> = self
            .by_key
            .keys()
            .filter(|(d, _)| d == id)
            .map(|(_, k)| *k)
            .collect();
        for k in keys {
            self.cancel(id, k);
        }
    }

    /// When timer `kind` of `id` fires, if armed.
    #[cfg_attr(not(any(test, feature = "_internal-pair")), allow(dead_code))]
    pub(crate) fn deadline(&self, id: &DelegationId, kind: K) -> Option<Timestamp> {
        self.by_key.get(&(id.clone(), kind)).copied()
    }

    /// The earliest deadline and its timer.
    pub(crate) fn next_with_kind(&self) -> Option<(Timestamp, K)> {
        self.by_deadline.first().map(|(at, _, k)| (*at, *k))
    }

    /// Removes and returns one timer due at or before `now`.
    pub(crate) fn pop_due(&mut self, now: Timestamp) -> Option<(DelegationId, K)> {
        let (at, _, _) = self.by_deadline.first()?;
        if *at > now {
            return None;
        }
        let (_, id, kind) = self.by_deadline.pop_first()?;
        self.by_key.remove(&(id.clone(), kind));
        Some((id, kind))
    }
}

/// What both engines share for the drive contract: the output queue, the named timers and the
/// last `now` seen.
#[derive(Debug)]
pub(crate) struct Core<K: Ord + Copy, O> {
    pub(crate) timers: TimerIndex<K>,
    pub(crate) outputs: std::collections::VecDeque<O>,
    pub(crate) last_now: Timestamp,
}

impl<K: Ord + Copy, O> Default for Core<K, O> {
    fn default() -> Self {
        Core {
            timers: TimerIndex::default(),
            outputs: std::collections::VecDeque::new(),
            last_now: Timestamp::EPOCH,
        }
    }
}

impl<K: Ord + Copy, O> Core<K, O> {
    /// Time never goes backwards inside the engine.
    pub(crate) fn tick(&mut self, now: Timestamp) {
        if now > self.last_now {
            self.last_now = now;
        }
    }

    /// The next output.
    pub(crate) fn poll_output(&mut self) -> Option<O> {
        self.outputs.pop_front()
    }

    /// When to be woken and why: "due now" (`queued`) while outputs are queued, else the
    /// earliest timer and its kind.
    pub(crate) fn poll_timeout_reason(&self, queued: K) -> Option<(Timestamp, K)> {
        if !self.outputs.is_empty() {
            return Some((self.last_now, queued));
        }
        self.timers.next_with_kind()
    }
}
