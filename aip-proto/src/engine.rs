//! What both engines share: handles, the named-timer deadline index, the output queue with
//! the engine clock, and the seeded id source.

use std::borrow::Borrow;
use std::collections::{BTreeSet, VecDeque};
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use crate::time::Timestamp;

/// Driver-issued handle of an inbound HTTP request (partner: a request to an AIP endpoint;
/// leader: a notification POST). The engine stores and echoes it, never interprets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// Engine-issued handle of an outbound HTTP request of the leader (one per attempt).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CallId(pub u64);

/// Engine-issued handle of one notification POST attempt of the partner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeliveryId(pub u64);

/// A complete HTTP response for the driver to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    /// Status code (AIP answers JSON-RPC errors with 200, like its peers expect).
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// `200 application/json`.
    pub fn json(body: Vec<u8>) -> Self {
        HttpResponse {
            status: 200,
            content_type: "application/json",
            body,
        }
    }
}

/// How a failed delivery or call is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (the first included); at least 1.
    pub attempts: u32,
    /// Wait before the second attempt; doubled each time.
    pub first_backoff: std::time::Duration,
    /// Longest wait between attempts.
    pub max_backoff: std::time::Duration,
    /// How long one attempt may take before it counts as failed.
    pub attempt_timeout: std::time::Duration,
}

impl RetryPolicy {
    /// The wait after failed attempt number `attempt` (1-based).
    pub fn backoff(&self, attempt: u32) -> std::time::Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.first_backoff
            .checked_mul(factor)
            .unwrap_or(self.max_backoff)
            .min(self.max_backoff)
    }
}

/// The hasher of the engines' maps keyed by peer-chosen strings (task ids): SipHash-1-3 with
/// a key derived from the engine's seed, so a peer that does not know the seed cannot choose
/// ids that collide (the standard library's `RandomState` would draw the key from the
/// operating system, which an engine does not touch).
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyedHasher {
    k0: u64,
    k1: u64,
}

impl KeyedHasher {
    /// Keys drawn from `seed` (without advancing any id source, so ids stay what they were).
    pub(crate) fn from_seed(seed: u64) -> Self {
        let mut state = seed ^ 0x6b65_7965_6420_6d61; // "keyed ma": apart from the id stream
        KeyedHasher {
            k0: splitmix64(&mut state),
            k1: splitmix64(&mut state),
        }
    }
}

/// splitmix64: the next pseudo-random number from `state` (advanced).
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl BuildHasher for KeyedHasher {
    type Hasher = siphasher::sip::SipHasher13;

    fn build_hasher(&self) -> Self::Hasher {
        siphasher::sip::SipHasher13::new_with_keys(self.k0, self.k1)
    }
}

/// A hash map that cannot be iterated: lookups only, so hashing never decides an order that
/// reaches an output (the reason this crate bans `HashMap`; this is the one place it is
/// used, behind an interface without iteration).
#[derive(Debug)]
pub(crate) struct HashIndex<K, V> {
    #[allow(clippy::disallowed_types)] // no iteration: see the type's docs
    map: std::collections::HashMap<K, V, KeyedHasher>,
}

impl<K: Hash + Eq, V> HashIndex<K, V> {
    pub(crate) fn new(hasher: KeyedHasher) -> Self {
        #[allow(clippy::disallowed_types)] // no iteration: see the type's docs
        let map = std::collections::HashMap::with_hasher(hasher);
        HashIndex { map }
    }

    pub(crate) fn get<Q: Hash + Eq + ?Sized>(&self, k: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.map.get(k)
    }

    pub(crate) fn contains_key<Q: Hash + Eq + ?Sized>(&self, k: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.map.contains_key(k)
    }

    pub(crate) fn insert(&mut self, k: K, v: V) -> Option<V> {
        self.map.insert(k, v)
    }

    pub(crate) fn remove<Q: Hash + Eq + ?Sized>(&mut self, k: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        self.map.remove(k)
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Entries in key order (tests only).
    #[cfg(test)]
    pub(crate) fn sorted(&self) -> Vec<(&K, &V)>
    where
        K: Ord,
    {
        let mut v: Vec<(&K, &V)> = self.map.iter().collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        v
    }
}

/// A deadline index: re-arming a timer replaces its deadline; `next` is O(log n), finding a
/// timer by key O(1).
#[derive(Debug)]
pub(crate) struct TimerIndex<K: Ord + Hash + Clone> {
    by_deadline: BTreeSet<(Timestamp, K)>,
    by_key: HashIndex<K, Timestamp>,
}

impl<K: Ord + Hash + Clone> TimerIndex<K> {
    pub(crate) fn new(hasher: KeyedHasher) -> Self {
        TimerIndex {
            by_deadline: BTreeSet::new(),
            by_key: HashIndex::new(hasher),
        }
    }

    pub(crate) fn set(&mut self, key: K, at: Timestamp) {
        if let Some(old) = self.by_key.insert(key.clone(), at) {
            self.by_deadline.remove(&(old, key.clone()));
        }
        self.by_deadline.insert((at, key));
    }

    pub(crate) fn cancel(&mut self, key: &K) {
        if let Some(at) = self.by_key.remove(key) {
            self.by_deadline.remove(&(at, key.clone()));
        }
    }

    pub(crate) fn is_set(&self, key: &K) -> bool {
        self.by_key.contains_key(key)
    }

    pub(crate) fn next(&self) -> Option<(Timestamp, &K)> {
        self.by_deadline.first().map(|(at, k)| (*at, k))
    }

    pub(crate) fn pop_due(&mut self, now: Timestamp) -> Option<K> {
        let (at, _) = self.by_deadline.first()?;
        if *at > now {
            return None;
        }
        let (_, key) = self.by_deadline.pop_first()?;
        self.by_key.remove(&key);
        Some(key)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_key.len()
    }
}

/// Output queue, timers and the engine clock.
#[derive(Debug)]
pub(crate) struct Core<K: Ord + Hash + Clone, O> {
    pub(crate) timers: TimerIndex<K>,
    pub(crate) out: VecDeque<O>,
    /// The engine's clock: the latest `now` seen (time never goes backwards inside).
    pub(crate) now: Timestamp,
}

impl<K: Ord + Hash + Clone, O> Core<K, O> {
    pub(crate) fn new(hasher: KeyedHasher) -> Self {
        Core {
            timers: TimerIndex::new(hasher),
            out: VecDeque::new(),
            now: Timestamp::UNIX_EPOCH,
        }
    }

    /// Advances the clock to `now` (a `now` earlier than the clock is ignored, so a wall clock
    /// stepping back never fires timers early or makes `stateChangedAt` go backwards).
    pub(crate) fn tick(&mut self, now: Timestamp) {
        if now > self.now {
            self.now = now.to_utc();
        }
    }

    /// "Due now" while outputs are queued, else the earliest timer.
    pub(crate) fn poll_timeout(&self) -> Option<Timestamp> {
        if !self.out.is_empty() {
            return Some(self.now);
        }
        self.timers.next().map(|(t, _)| t)
    }

    pub(crate) fn at(&self, d: std::time::Duration) -> Timestamp {
        self.now.saturating_add(d)
    }
}

/// Ids the engine mints (message ids, result ids, notification config ids): a prefix drawn
/// from the caller's seed plus a counter, so two engines with different seeds never collide
/// and a run with the same seed is the same run.
#[derive(Debug, Clone)]
pub(crate) struct IdSource {
    prefix: String,
    n: u64,
    state: u64,
}

impl IdSource {
    pub(crate) fn new(seed: u64) -> Self {
        let mut s = IdSource {
            prefix: String::new(),
            n: 0,
            state: seed,
        };
        s.prefix = format!("{:08x}", s.random() as u32);
        s
    }

    pub(crate) fn random(&mut self) -> u64 {
        splitmix64(&mut self.state)
    }

    /// `kind-<prefix><counter>`.
    pub(crate) fn next(&mut self, kind: &str) -> String {
        let mut s = String::with_capacity(kind.len() + 1 + self.prefix.len() + 16);
        self.next_into(kind, &mut s);
        s
    }

    /// [`IdSource::next`] into `s` (cleared first), to reuse its buffer.
    pub(crate) fn next_into(&mut self, kind: &str, s: &mut String) {
        self.n += 1;
        s.clear();
        s.push_str(kind);
        s.push('-');
        s.push_str(&self.prefix);
        let digits = (64 - self.n.leading_zeros()).div_ceil(4).max(1);
        for i in (0..digits).rev() {
            let d = ((self.n >> (4 * i)) & 0xf) as u8;
            s.push(char::from(if d < 10 { b'0' + d } else { b'a' + d - 10 }));
        }
    }

    /// 32 hex digits from the seeded generator (tokens; as unguessable as the seed).
    pub(crate) fn secret(&mut self) -> String {
        format!("{:016x}{:016x}", self.random(), self.random())
    }
}

/// Tasks by id: a hash index of ids to slots, plus a one-entry cache of the last slot
/// found. One engine call touches one task many times (transition, timers, stream, reply);
/// with the cache only the first lookup hashes the id, the others compare one id.
///
/// Implementation note: with ten thousand tasks a `BTreeMap<String, _>` lookup costs about
/// twenty string comparisons, and a lifecycle made some thirty of them: half the engine's
/// time before the cache, and still 5 % of a lifecycle with it (BENCHMARKS.md).
#[derive(Debug)]
pub(crate) struct IdMap<V> {
    /// Ids and slots; a slot holds the same (shared) id as its index key.
    index: HashIndex<Arc<str>, usize>,
    slots: Vec<Option<(Arc<str>, V)>>,
    free: Vec<usize>,
    last: core::cell::Cell<usize>,
}

impl<V> IdMap<V> {
    pub(crate) fn new(hasher: KeyedHasher) -> Self {
        IdMap {
            index: HashIndex::new(hasher),
            slots: Vec::new(),
            free: Vec::new(),
            last: core::cell::Cell::new(usize::MAX),
        }
    }

    fn slot(&self, id: &str) -> Option<usize> {
        let last = self.last.get();
        if let Some(Some((k, _))) = self.slots.get(last) {
            // Most callers pass the map's own shared id back: the same bytes, no comparison.
            let same = std::ptr::eq(k.as_ptr(), id.as_ptr()) && k.len() == id.len();
            if same || **k == *id {
                return Some(last);
            }
        }
        let i = *self.index.get(id)?;
        self.last.set(i);
        Some(i)
    }

    pub(crate) fn get(&self, id: &str) -> Option<&V> {
        let i = self.slot(id)?;
        self.slots[i].as_ref().map(|(_, v)| v)
    }

    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut V> {
        let i = self.slot(id)?;
        self.slots[i].as_mut().map(|(_, v)| v)
    }

    pub(crate) fn contains_key(&self, id: &str) -> bool {
        self.slot(id).is_some()
    }

    /// Inserts (or replaces) `v` under `id` (a `String` or an `Arc<str>` the value shares).
    pub(crate) fn insert(&mut self, id: impl Into<Arc<str>>, v: V) {
        let id: Arc<str> = id.into();
        if let Some(i) = self.slot(&id) {
            self.slots[i] = Some((id, v));
            return;
        }
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some((Arc::clone(&id), v));
                i
            }
            None => {
                self.slots.push(Some((Arc::clone(&id), v)));
                self.slots.len() - 1
            }
        };
        self.index.insert(id, i);
        self.last.set(i);
    }

    pub(crate) fn remove(&mut self, id: &str) -> Option<V> {
        let i = self.index.remove(id)?;
        self.free.push(i);
        self.slots[i].take().map(|(_, v)| v)
    }

    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// Values in id order.
    #[cfg(test)]
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.index
            .sorted()
            .into_iter()
            .filter_map(|(_, i)| self.slots[*i].as_ref().map(|(_, v)| v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rearming_a_timer_replaces_its_deadline() {
        let mut t = TimerIndex::new(KeyedHasher::from_seed(1));
        t.set("a", Timestamp::from_unix_millis(10));
        t.set("b", Timestamp::from_unix_millis(20));
        t.set("a", Timestamp::from_unix_millis(30));
        assert_eq!(t.pop_due(Timestamp::from_unix_millis(25)), Some("b"));
        assert_eq!(t.pop_due(Timestamp::from_unix_millis(25)), None);
        assert_eq!(t.next().map(|(at, _)| at.as_unix_millis()), Some(30));
        t.cancel(&"a");
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn the_id_map_finds_inserts_and_reuses_slots() {
        let mut m = IdMap::new(KeyedHasher::from_seed(1));
        m.insert("b".to_owned(), 2);
        m.insert("a".to_owned(), 1);
        assert_eq!(m.get("b"), Some(&2));
        assert_eq!(m.get("a"), Some(&1));
        assert_eq!(m.remove("a"), Some(1));
        assert_eq!(
            m.get("a"),
            None,
            "the cache must not answer for a removed id"
        );
        m.insert("c".to_owned(), 3);
        assert_eq!((m.get("c"), m.get("b"), m.len()), (Some(&3), Some(&2), 2));
        m.insert("c".to_owned(), 4);
        assert_eq!(m.values().copied().collect::<Vec<_>>(), vec![2, 4]);
        assert!(!m.contains_key("zz"));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RetryPolicy {
            attempts: 5,
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(5),
            attempt_timeout: Duration::from_secs(30),
        };
        let waits: Vec<u64> = (1..=5).map(|a| p.backoff(a).as_secs()).collect();
        assert_eq!(waits, vec![1, 2, 4, 5, 5]);
        assert_eq!(p.backoff(100), Duration::from_secs(5));
    }

    #[test]
    fn the_clock_never_goes_backwards() {
        let mut c: Core<u8, ()> = Core::new(KeyedHasher::from_seed(1));
        c.tick(Timestamp::from_unix_millis(100));
        c.tick(Timestamp::from_unix_millis(50));
        assert_eq!(c.now.as_unix_millis(), 100);
    }

    #[test]
    fn ids_differ_by_seed_and_repeat_by_seed() {
        let (mut a, mut b, mut c) = (IdSource::new(1), IdSource::new(2), IdSource::new(1));
        let x = a.next("x");
        assert_ne!(x, b.next("x"));
        assert_eq!(x, c.next("x"));
        assert_ne!(a.next("x"), x);
        assert_eq!(a.secret().len(), 32);
        let mut c = IdSource::new(7);
        let first = c.next("k");
        let p = first.trim_end_matches('1').to_owned();
        for n in 2..40u64 {
            assert_eq!(c.next("k"), format!("{p}{n:x}"));
        }
    }
}
