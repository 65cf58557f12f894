//! What both engines (partner and leader) share: handles, the HTTP response, the retry policy,
//! the seed-keyed hash maps, and AIP's clock on the shared core. The timer table, the output
//! queue with the engine clock ([`engine_basics::timers`]) and the id source
//! ([`engine_basics::ids`]) are shared with AWCP.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::time::Duration;

use engine_basics::ids::SplitMix64;
pub use engine_basics::timers::Reason;

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
        // "keyed ma": a stream apart from the ids'.
        let mut keys = SplitMix64::new(seed ^ 0x6b65_7965_6420_6d61);
        let k0 = keys.next_u64();
        let k1 = keys.next_u64();
        KeyedHasher { k0, k1 }
    }
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

/// The shared core ([`engine_basics::timers::Core`]) over AIP's timestamps: the timers, the
/// output queue and the engine clock.
pub(crate) type Core<K, O> = engine_basics::timers::Core<K, O, Timestamp>;

/// AIP's clock on the shared core: kept in UTC with microseconds, the form the engines write.
pub(crate) trait Clock {
    /// Advances the engine clock to `now` in UTC (AIP's `tick`: an earlier `now` is ignored,
    /// so a wall clock stepping back never fires timers early or makes `stateChangedAt` go
    /// backwards).
    fn advance(&mut self, now: Timestamp);
    /// The deadline `d` from the engine clock.
    fn at(&self, d: Duration) -> Timestamp;
}

impl<K: Ord + Clone, O> Clock for Core<K, O> {
    fn advance(&mut self, now: Timestamp) {
        self.tick(now.to_utc());
    }

    fn at(&self, d: Duration) -> Timestamp {
        self.now().saturating_add(d)
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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn hash_keys_are_pinned_by_the_seed() {
        // Drawn apart from the id stream: a change would reorder nothing visible, but would
        // make a seed's hashes differ from what they were.
        let k = KeyedHasher::from_seed(1);
        assert_eq!((k.k0, k.k1), (0x5cc0_62a3_6eb2_4077, 0x34e6_2000_95d5_4a3f));
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
    fn the_clock_is_kept_in_utc_and_never_goes_backwards() {
        let mut c: Core<u8, ()> = Core::default();
        let later = Timestamp::parse_rfc3339("1970-01-01T08:00:00.1+08:00").unwrap();
        c.advance(later);
        c.advance(Timestamp::from_unix_millis(50));
        assert_eq!(c.now().to_rfc3339(), "1970-01-01T00:00:00.100000+00:00");
        assert_eq!(c.at(Duration::from_millis(5)).as_unix_millis(), 105);
    }
}
