//! Read buffers sized to the data they will hold.
//!
//! A zeroed 64 KiB buffer costs more than reading a small file: on a tiny workspace, zeroing
//! (and page-faulting) the buffers of packing, hashing and extraction was a visible share of a
//! delegation's CPU time (`BENCHMARKS.md`, 2026-11-27). Buffers here start at what the data
//! needs, at most [`MAX`], and grow to [`MAX`] only when a read fills them.

use std::io::{self, Read};

/// The largest read buffer: one read of a large file.
pub const MAX: usize = 64 * 1024;
/// The smallest (a buffer is never empty).
const MIN: usize = 4 * 1024;

/// A zeroed buffer for reading about `hint` bytes: one more than `hint` (so the read that
/// finds the end needs no second buffer), between 4 KiB and [`MAX`].
pub fn for_len(hint: u64) -> Vec<u8> {
    vec![0u8; usize::try_from(hint.saturating_add(1)).map_or(MAX, |n| n.clamp(MIN, MAX))]
}

/// Reads `r` to its end in pieces, handing each to `each`; the buffer starts small and grows
/// to [`MAX`] once a read fills it. Returns the number of bytes read.
pub fn read_each(
    r: &mut dyn Read,
    mut each: impl FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<u64> {
    let mut buf = for_len(0);
    let mut total = 0u64;
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        total += n as u64;
        each(&buf[..n])?;
        grow_if_filled(&mut buf, n);
    }
}

/// Grows `buf` to [`MAX`] if the read that returned `n` filled it (more is likely to follow).
pub fn grow_if_filled(buf: &mut Vec<u8>, n: usize) {
    if n == buf.len() && buf.len() < MAX {
        buf.resize(MAX, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sized_to_the_data_within_bounds() {
        assert_eq!(for_len(0).len(), MIN);
        assert_eq!(for_len(10_000).len(), 10_001);
        assert_eq!(for_len(1 << 40).len(), MAX);
        assert_eq!(for_len(u64::MAX).len(), MAX);
    }

    #[test]
    fn read_each_sees_every_byte_in_order() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let mut seen = Vec::new();
        let n = read_each(&mut &data[..], |b| {
            seen.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        assert_eq!(n, data.len() as u64);
        assert_eq!(seen, data);
    }
}
