//! Named timers in one deadline table, and the core every engine drives them from.
//!
//! An engine never sleeps: it arms timers with absolute deadlines, reports the earliest
//! through `poll_timeout`, and fires whatever is due when `handle_timeout(now)` is called.
//! [`TimerTable`] is that index: one deadline per key, where the key names the timer: what it
//! is for and whose it is (AWCP: a delegation and a [`Reason`]; AIP: an enum whose variants
//! carry their task or call). [`Core`] adds the output queue and the engine's clock, and says
//! "due now" while outputs are queued, so a driver never sleeps on queued work.
//!
//! Both are generic over the deadline type `T` (each engine has its own timestamp type, built on
//! [`crate::time`]); any `Ord + Copy` type will do (tests use `u64`).

use std::borrow::Borrow;
use std::collections::{BTreeMap, VecDeque};
use std::ops::RangeBounds;

/// Why a timer is set: a short phrase for logs ("lease", "stream keepalive"), so a driver can
/// say why its engine woke.
pub trait Reason {
    /// A short phrase for logs (lower case, no trailing period).
    fn reason(&self) -> &'static str;
}

/// A key made of an owner and a reason (AWCP's `(delegation, timer kind)`) has its reason's.
impl<O, R: Reason> Reason for (O, R) {
    fn reason(&self) -> &'static str {
        self.1.reason()
    }
}

/// A deadline table: at most one deadline per key `K`, fired earliest first.
///
/// - Re-arming a key replaces its deadline (re-arming it at the deadline it has changes
///   nothing, not even its place among equal deadlines).
/// - Timers due at the same time fire in the order they were set.
/// - Finding, setting and cancelling a timer are O(log n); firing the next is O(log n).
///
/// Keys are ordered, so [`TimerTable::cancel_range`] cancels every timer of one owner when the
/// owner comes first in the key (a tuple `(owner, reason)`, or an enum ordered that way).
/// A key is stored twice (once per index): keep keys cheap to clone (an `Arc<str>`, a small
/// enum, an integer).
#[derive(Clone, Debug)]
pub struct TimerTable<K, T> {
    /// Armed timers in firing order: by deadline, then by sequence number (when they were set).
    by_deadline: BTreeMap<(T, u64), K>,
    /// Each armed timer's place in `by_deadline`.
    by_key: BTreeMap<K, (T, u64)>,
    /// The next timer's sequence number.
    next_seq: u64,
}

impl<K, T> Default for TimerTable<K, T> {
    fn default() -> Self {
        TimerTable {
            by_deadline: BTreeMap::new(),
            by_key: BTreeMap::new(),
            next_seq: 0,
        }
    }
}

impl<K: Ord + Clone, T: Ord + Copy> TimerTable<K, T> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Arms `key` to fire at `at`, replacing its deadline if it is armed already.
    pub fn set(&mut self, key: K, at: T) {
        let seq = self.next_seq;
        match self.by_key.get_mut(&key) {
            Some((old, _)) if *old == at => return,
            Some(slot) => {
                // The stored key moves to the new deadline; `key` is dropped.
                let stored = self.by_deadline.remove(&*slot).unwrap_or(key);
                *slot = (at, seq);
                self.by_deadline.insert((at, seq), stored);
            }
            None => {
                self.by_deadline.insert((at, seq), key.clone());
                self.by_key.insert(key, (at, seq));
            }
        }
        self.next_seq += 1;
    }

    /// Disarms `key`; returns the deadline it had, if it was armed.
    pub fn cancel<Q>(&mut self, key: &Q) -> Option<T>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let slot = self.by_key.remove(key)?;
        self.by_deadline.remove(&slot);
        Some(slot.0)
    }

    /// Disarms every key in `range` (in key order): with keys `(owner, reason)`, all timers of
    /// one owner are `(owner, first reason)..=(owner, last reason)`. O(m log n) for m timers
    /// cancelled.
    pub fn cancel_range<Q, R>(&mut self, range: R)
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
        R: RangeBounds<Q>,
    {
        let slots: Vec<(T, u64)> = self.by_key.range(range).map(|(_, slot)| *slot).collect();
        for slot in slots {
            if let Some(key) = self.by_deadline.remove(&slot) {
                self.by_key.remove::<K>(&key);
            }
        }
    }

    /// The armed timers whose keys are in `range`, in key order, with their deadlines.
    pub fn range<Q, R>(&self, range: R) -> impl Iterator<Item = (&K, T)>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
        R: RangeBounds<Q>,
    {
        self.by_key.range(range).map(|(key, (at, _))| (key, *at))
    }

    /// Whether `key` is armed.
    pub fn is_set<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.by_key.contains_key(key)
    }

    /// When `key` fires, if it is armed.
    pub fn deadline<Q>(&self, key: &Q) -> Option<T>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.by_key.get(key).map(|(at, _)| *at)
    }

    /// The timer that fires next: its deadline and key.
    pub fn next(&self) -> Option<(T, &K)> {
        self.by_deadline
            .first_key_value()
            .map(|((at, _), key)| (*at, key))
    }

    /// Disarms and returns the next timer if it is due at `now` (its deadline is not after
    /// `now`). Call until `None` to fire everything due, in order.
    pub fn pop_due(&mut self, now: T) -> Option<K> {
        let ((at, _), _) = self.by_deadline.first_key_value()?;
        if *at > now {
            return None;
        }
        let (_, key) = self.by_deadline.pop_first()?;
        self.by_key.remove(&key);
        Some(key)
    }

    /// How many timers are armed.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

/// What an engine holds for the drive contract ([`crate::drive`]): its timers, the outputs it
/// has queued for the driver, and its clock (the latest `now` it was given).
///
/// `O` is the output type, `K` the timer key and `T` the deadline (timestamp) type. The
/// engine pushes to [`Core::outputs`], arms [`Core::timers`], calls [`Core::tick`] with every
/// `now` it is given, and answers `poll_output`/`poll_timeout` from here.
#[derive(Clone, Debug)]
pub struct Core<K, O, T> {
    /// The engine's timers.
    pub timers: TimerTable<K, T>,
    /// Outputs not yet polled, oldest first.
    pub outputs: VecDeque<O>,
    /// The latest `now` seen.
    now: T,
}

impl<K, O, T: Default> Default for Core<K, O, T> {
    /// A core whose clock starts at `T::default()` (the epoch, for both engines' timestamps).
    fn default() -> Self {
        Core::new(T::default())
    }
}

impl<K, O, T> Core<K, O, T> {
    /// A core with no timers or outputs, its clock at `start`.
    pub fn new(start: T) -> Self {
        Core {
            timers: TimerTable::default(),
            outputs: VecDeque::new(),
            now: start,
        }
    }
}

impl<K: Ord + Clone, O, T: Ord + Copy> Core<K, O, T> {
    /// The engine's clock: the latest `now` it was given.
    pub fn now(&self) -> T {
        self.now
    }

    /// Advances the clock to `now`. Time never goes backwards inside an engine: a `now`
    /// earlier than the clock (a wall clock stepped back) is ignored, so it neither fires
    /// timers early nor dates anything before what is already dated.
    pub fn tick(&mut self, now: T) {
        if now > self.now {
            self.now = now;
        }
    }

    /// The next output, oldest first.
    pub fn poll_output(&mut self) -> Option<O> {
        self.outputs.pop_front()
    }

    /// When the engine wants to be woken: now (the clock) while outputs are queued, else the
    /// next timer's deadline; `None` when nothing is queued or armed.
    pub fn poll_timeout(&self) -> Option<T> {
        self.next_wake().map(|(at, _)| at)
    }

    /// [`Core::poll_timeout`] and why: `None` for "outputs are queued", else the timer's key.
    pub fn next_wake(&self) -> Option<(T, Option<&K>)> {
        if !self.outputs.is_empty() {
            return Some((self.now, None));
        }
        self.timers.next().map(|(at, key)| (at, Some(key)))
    }

    /// [`Core::next_wake`] with its reason for logs: `"outputs queued"`, or the timer's
    /// [`Reason`].
    pub fn next_wake_reason(&self) -> Option<(T, &'static str)>
    where
        K: Reason,
    {
        self.next_wake()
            .map(|(at, key)| (at, key.map_or("outputs queued", Reason::reason)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
    enum Kind {
        Lease,
        Retry,
    }

    impl Reason for Kind {
        fn reason(&self) -> &'static str {
            match self {
                Kind::Lease => "lease",
                Kind::Retry => "retry",
            }
        }
    }

    #[test]
    fn rearming_replaces_the_deadline_and_ties_fire_in_the_order_set() {
        let mut t = TimerTable::new();
        t.set("a", 10);
        t.set("b", 20);
        t.set("a", 30);
        t.set("c", 30);
        t.set("z", 30);
        t.set("y", 30);
        assert_eq!(t.pop_due(25), Some("b"));
        assert_eq!(t.pop_due(25), None);
        assert_eq!(t.next(), Some((30, &"a")));
        // Re-arming at the same deadline keeps the timer's place.
        t.set("a", 30);
        let fired: Vec<_> = std::iter::from_fn(|| t.pop_due(30)).collect();
        assert_eq!(fired, ["a", "c", "z", "y"]);
        assert!(t.is_empty());
    }

    #[test]
    fn cancel_and_lookups_take_a_borrowed_key() {
        let mut t: TimerTable<String, u64> = TimerTable::new();
        t.set("poll".to_owned(), 5);
        assert!(t.is_set("poll"));
        assert_eq!(t.deadline("poll"), Some(5));
        assert_eq!(t.cancel("poll"), Some(5));
        assert_eq!(t.cancel("poll"), None);
        assert_eq!((t.len(), t.next()), (0, None));
    }

    #[test]
    fn a_range_cancels_one_owners_timers_only() {
        let mut t = TimerTable::new();
        for owner in 1..=3u8 {
            t.set((owner, Kind::Lease), u64::from(owner));
            t.set((owner, Kind::Retry), 10 + u64::from(owner));
        }
        let of_two = |t: &TimerTable<(u8, Kind), u64>| {
            t.range((2, Kind::Lease)..=(2, Kind::Retry))
                .map(|(key, at)| (key.1, at))
                .collect::<Vec<_>>()
        };
        assert_eq!(of_two(&t), [(Kind::Lease, 2), (Kind::Retry, 12)]);
        t.cancel_range((2, Kind::Lease)..=(2, Kind::Retry));
        assert_eq!(of_two(&t), []);
        let fired: Vec<_> = std::iter::from_fn(|| t.pop_due(100)).collect();
        assert_eq!(
            fired,
            [
                (1, Kind::Lease),
                (3, Kind::Lease),
                (1, Kind::Retry),
                (3, Kind::Retry)
            ]
        );
    }

    #[test]
    fn the_core_is_due_now_while_outputs_are_queued_and_its_clock_never_goes_back() {
        let mut c: Core<(u8, Kind), &str, u64> = Core::default();
        c.tick(100);
        c.tick(50);
        assert_eq!(c.now(), 100);
        assert_eq!(c.poll_timeout(), None);
        c.timers.set((1, Kind::Retry), 300);
        assert_eq!(c.next_wake_reason(), Some((300, "retry")));
        c.outputs.push_back("send");
        assert_eq!(c.next_wake(), Some((100, None)));
        assert_eq!(c.next_wake_reason(), Some((100, "outputs queued")));
        assert_eq!(c.poll_output(), Some("send"));
        assert_eq!(c.poll_timeout(), Some(300));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Set(u8, u8, u64),
        Cancel(u8, u8),
        CancelOwner(u8),
        Pop(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..3u8, 0..3u8, 0..20u64).prop_map(|(o, r, at)| Op::Set(o, r, at)),
            (0..3u8, 0..3u8).prop_map(|(o, r)| Op::Cancel(o, r)),
            (0..3u8).prop_map(Op::CancelOwner),
            (0..20u64).prop_map(Op::Pop),
        ]
    }

    proptest! {
        /// The table agrees with a plain map of (owner, reason) → (deadline, when set): what
        /// is set, replaced, cancelled and popped, in which order timers fire (by deadline,
        /// then in the order set), and which comes next.
        #[test]
        fn the_table_behaves_as_a_map_of_deadlines(ops in prop::collection::vec(op(), 0..60)) {
            let mut table = TimerTable::<(u8, u8), u64>::new();
            let mut model: BTreeMap<(u8, u8), (u64, u64)> = BTreeMap::new();
            let mut order = 0u64;
            for op in ops {
                match op {
                    Op::Set(o, r, at) => {
                        table.set((o, r), at);
                        if model.get(&(o, r)).map(|(old, _)| *old) != Some(at) {
                            model.insert((o, r), (at, order));
                            order += 1;
                        }
                    }
                    Op::Cancel(o, r) => {
                        let had = model.remove(&(o, r)).map(|(at, _)| at);
                        prop_assert_eq!(table.cancel(&(o, r)), had);
                    }
                    Op::CancelOwner(o) => {
                        table.cancel_range((o, u8::MIN)..=(o, u8::MAX));
                        model.retain(|(owner, _), _| *owner != o);
                    }
                    Op::Pop(now) => {
                        while let Some(key) = table.pop_due(now) {
                            let first = model.iter().min_by_key(|(_, v)| **v).map(|(k, v)| (*k, *v));
                            prop_assert_eq!(first.map(|(k, _)| k), Some(key));
                            prop_assert!(first.is_some_and(|(_, (at, _))| at <= now));
                            model.remove(&key);
                        }
                        prop_assert!(model.values().all(|(at, _)| *at > now));
                    }
                }
                for (key, (at, _)) in &model {
                    prop_assert_eq!(table.deadline(key), Some(*at));
                    prop_assert!(table.is_set(key));
                }
                let first = model.iter().min_by_key(|(_, v)| **v).map(|(k, (at, _))| (*at, k));
                prop_assert_eq!(table.next(), first);
                prop_assert_eq!(table.len(), model.len());
                prop_assert_eq!(table.by_deadline.len(), model.len());
            }
        }
    }
}
