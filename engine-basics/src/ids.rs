//! Ids and secrets an engine mints itself, from a seed the caller hands in.
//!
//! An engine has no randomness of its own: the caller passes a seed (random in a driver, fixed
//! in a simulation), so a run with the same seed mints the same ids and is the same run.
//! [`SplitMix64`] is the generator; [`IdSource`] makes ids (`kind-<prefix><counter>`) and
//! secrets from it. Ids and hashes that were minted from a seed once must stay the same for
//! that seed: the engines' golden and simulation tests pin them (the tests below pin the
//! generator).

/// splitmix64 (Steele, Lea, Flood 2014): a small, fast, seeded generator of 64-bit numbers.
/// Deterministic, not cryptographic: its outputs are as unguessable as its seed.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub const fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The ids an engine mints (message ids, task ids, tokens): `kind-<prefix><counter>`, where
/// the prefix (8 hex digits) is the seed's first number and the counter (hex, from 1) counts
/// every id of the source. Two engines with different seeds never mint the same id, and the
/// same seed mints the same ids in the same order.
#[derive(Clone, Debug)]
pub struct IdSource {
    prefix: String,
    n: u64,
    rng: SplitMix64,
}

impl IdSource {
    /// A source seeded with `seed` (its first number becomes the prefix).
    pub fn new(seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let prefix = format!("{:08x}", rng.next_u64() as u32);
        IdSource { prefix, n: 0, rng }
    }

    /// The generator's next number.
    pub fn random(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// The next id of `kind`: `kind-<prefix><counter>`.
    pub fn next(&mut self, kind: &str) -> String {
        let mut s = String::with_capacity(kind.len() + 1 + self.prefix.len() + 16);
        self.next_into(kind, &mut s);
        s
    }

    /// [`IdSource::next`] into `s` (cleared first), to reuse its buffer.
    pub fn next_into(&mut self, kind: &str, s: &mut String) {
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

    /// A secret (a token): 32 hex digits from the next two numbers.
    pub fn secret(&mut self) -> String {
        let (a, b) = (self.random(), self.random());
        format!("{a:016x}{b:016x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_is_the_published_sequence() {
        // The reference implementation's first outputs for seed 0 (and the engines' ids and
        // hash keys depend on these staying the same).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(r.next_u64(), 0x06c4_5d18_8009_454f);
    }

    #[test]
    fn ids_are_pinned_by_the_seed() {
        let mut ids = IdSource::new(1);
        assert_eq!(ids.next("msg"), "msg-89025cc11");
        assert_eq!(ids.secret(), "beeb8da1658eec67f893a2eefb32555e");
        let mut buf = String::from("old");
        ids.next_into("task", &mut buf);
        assert_eq!(buf, "task-89025cc12");
    }

    #[test]
    fn ids_differ_by_seed_and_repeat_by_seed() {
        let (mut a, mut b, mut c) = (IdSource::new(1), IdSource::new(2), IdSource::new(1));
        let x = a.next("x");
        assert_ne!(x, b.next("x"));
        assert_eq!(x, c.next("x"));
        assert_ne!(a.next("x"), x);
        assert_eq!(a.secret().len(), 32);
    }

    #[test]
    fn the_counter_is_hex_without_leading_zeros() {
        let mut c = IdSource::new(7);
        let first = c.next("k");
        let p = first.trim_end_matches('1').to_owned();
        for n in 2..300u64 {
            assert_eq!(c.next("k"), format!("{p}{n:x}"));
        }
    }
}
