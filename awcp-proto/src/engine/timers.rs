//! Named timers in a deadline index (one per delegation and kind).

use std::collections::BTreeMap;

use crate::id::DelegationId;
use crate::time::Timestamp;

/// A deadline index: `poll` is O(log n), re-arming a timer replaces its old deadline.
/// A delegation's timers: at most one per kind, so a handful.
type Deadlines<K> = Vec<(K, Timestamp, u64)>;

/// The deadline index of all delegations' timers.
///
/// Ordered by deadline, then by when each timer was set. Neither lookup nor removal copies a
/// [`DelegationId`]: the id is held once per delegation and once per pending deadline, and
/// deadlines are found again by `(deadline, sequence number)`. (Cloning an id is an atomic
/// reference count; building a key per lookup was two atomic operations per timer touched.)
#[derive(Debug)]
pub(crate) struct TimerIndex<K: Ord + Copy> {
    by_deadline: BTreeMap<(Timestamp, u64), (DelegationId, K)>,
    by_key: BTreeMap<DelegationId, Deadlines<K>>,
    /// The next timer's sequence number.
    next_seq: u64,
}

impl<K: Ord + Copy> Default for TimerIndex<K> {
    fn default() -> Self {
        TimerIndex {
            by_deadline: BTreeMap::new(),
            by_key: BTreeMap::new(),
            next_seq: 0,
        }
    }
}

impl<K: Ord + Copy> TimerIndex<K> {
    /// Sets `id`'s timer `kind` to fire at `at` (replacing its deadline if it had one).
    pub(crate) fn set(&mut self, id: &DelegationId, kind: K, at: Timestamp) {
        let seq = self.next_seq;
        let timers = match self.by_key.get_mut(id) {
            Some(timers) => timers,
            None => self.by_key.entry(id.clone()).or_default(),
        };
        match timers.iter_mut().find(|(k, _, _)| *k == kind) {
            Some((_, old, _)) if *old == at => return,
            Some((_, old, old_seq)) => {
                let value = self.by_deadline.remove(&(*old, *old_seq));
                *old = at;
                *old_seq = seq;
                // The id moves from the old entry to the new one.
                let value = value.unwrap_or_else(|| (id.clone(), kind));
                self.by_deadline.insert((at, seq), value);
            }
            None => {
                timers.push((kind, at, seq));
                self.by_deadline.insert((at, seq), (id.clone(), kind));
            }
        }
        self.next_seq += 1;
    }

    /// Cancels `id`'s timer `kind`, if set.
    pub(crate) fn cancel(&mut self, id: &DelegationId, kind: K) {
        let Some(timers) = self.by_key.get_mut(id) else {
            return;
        };
        let Some(i) = timers.iter().position(|(k, _, _)| *k == kind) else {
            return;
        };
        let (_, at, seq) = timers.swap_remove(i);
        self.by_deadline.remove(&(at, seq));
        if timers.is_empty() {
            self.by_key.remove(id);
        }
    }

    /// Cancels all of `id`'s timers.
    pub(crate) fn cancel_all(&mut self, id: &DelegationId) {
        for (_, at, seq) in self.by_key.remove(id).unwrap_or_default() {
            self.by_deadline.remove(&(at, seq));
        }
    }

    /// When timer `kind` of `id` fires, if armed.
    #[cfg_attr(not(any(test, feature = "_internal-pair")), allow(dead_code))]
    pub(crate) fn deadline(&self, id: &DelegationId, kind: K) -> Option<Timestamp> {
        self.by_key
            .get(id)?
            .iter()
            .find(|(k, _, _)| *k == kind)
            .map(|(_, at, _)| *at)
    }

    /// The earliest deadline and its timer.
    pub(crate) fn next_with_kind(&self) -> Option<(Timestamp, K)> {
        self.by_deadline
            .first_key_value()
            .map(|((at, _), (_, k))| (*at, *k))
    }

    /// Removes and returns one timer due at or before `now`.
    pub(crate) fn pop_due(&mut self, now: Timestamp) -> Option<(DelegationId, K)> {
        let ((at, _), _) = self.by_deadline.first_key_value()?;
        if *at > now {
            return None;
        }
        let ((_, seq), (id, kind)) = self.by_deadline.pop_first()?;
        if let Some(timers) = self.by_key.get_mut(&id) {
            timers.retain(|(_, _, s)| *s != seq);
            if timers.is_empty() {
                self.by_key.remove(&id);
            }
        }
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Set(u8, u8, u64),
        Cancel(u8, u8),
        CancelAll(u8),
        Pop(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..3u8, 0..3u8, 0..20u64).prop_map(|(d, k, at)| Op::Set(d, k, at)),
            (0..3u8, 0..3u8).prop_map(|(d, k)| Op::Cancel(d, k)),
            (0..3u8).prop_map(Op::CancelAll),
            (0..20u64).prop_map(Op::Pop),
        ]
    }

    fn id(d: u8) -> DelegationId {
        DelegationId::new(format!("dlg_{d}")).unwrap()
    }

    proptest! {
        /// The index agrees with a plain map of (delegation, kind) → deadline: what is set,
        /// replaced, cancelled and popped, and which deadline comes next.
        #[test]
        fn the_index_behaves_as_a_map_of_deadlines(ops in prop::collection::vec(op(), 0..60)) {
            let mut index = TimerIndex::<u8>::default();
            let mut model: BTreeMap<(DelegationId, u8), Timestamp> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Set(d, k, at) => {
                        let at = Timestamp::from_unix_millis(at);
                        index.set(&id(d), k, at);
                        model.insert((id(d), k), at);
                    }
                    Op::Cancel(d, k) => {
                        index.cancel(&id(d), k);
                        model.remove(&(id(d), k));
                    }
                    Op::CancelAll(d) => {
                        index.cancel_all(&id(d));
                        model.retain(|(i, _), _| *i != id(d));
                    }
                    Op::Pop(now) => {
                        let now = Timestamp::from_unix_millis(now);
                        while let Some((i, k)) = index.pop_due(now) {
                            let at = model.remove(&(i, k));
                            prop_assert!(at.is_some_and(|at| at <= now));
                        }
                        prop_assert!(model.values().all(|at| *at > now));
                    }
                }
                for ((i, k), at) in &model {
                    prop_assert_eq!(index.deadline(i, *k), Some(*at));
                }
                prop_assert_eq!(
                    index.next_with_kind().map(|(at, _)| at),
                    model.values().min().copied()
                );
                prop_assert_eq!(index.by_deadline.len(), model.len());
            }
        }
    }
}
