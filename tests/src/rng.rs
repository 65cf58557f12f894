//! A small deterministic generator (xorshift) for tests that kill processes at random moments
//! and for benchmark data: seeded by the caller (from the clock, printed, so a failing run can
//! be told apart), no dependency.

/// Xorshift64; the seed must not be 0 ([`Rng::from_clock`] makes sure).
pub struct Rng(pub u64);

impl Rng {
    /// Seeded from the wall clock (never 0).
    pub fn from_clock() -> Self {
        Rng(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9e37_79b9_7f4a_7c15)
            | 1)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Fills `buf` with the generator's bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let b = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&b[..chunk.len()]);
        }
    }
}
