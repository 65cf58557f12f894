//! Read buffers sized to the data they will hold.
//!
//! A zeroed 64 KiB buffer costs more than reading a small file: on a tiny workspace, zeroing
//! (and page-faulting) the buffers of packing, hashing and extraction was a visible share of a
//! delegation's CPU time (`BENCHMARKS.md`, 2026-11-27). Buffers here start at what the data
//! needs, at most [`MAX`], and grow to [`MAX`] only when a read fills them.

use std::io::{self, Read, Seek, SeekFrom, Write};

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

/// A write buffer that stays put across seeks within what it holds. `std::io::BufWriter`
/// writes itself out on every seek; a ZIP writer seeks back after each entry to patch its local
/// header (CRC and sizes), so through a `BufWriter` or straight to a file an entry cost about
/// eleven system calls (`BENCHMARKS.md`, 2026-11-27, late). Here the bytes from `base` on stay
/// in memory; writes and seeks inside them (or right at their end) change only the buffer,
/// which is written out once it holds [`WRITE_BUF`] bytes, all but its last [`KEEP`] (where
/// the entry being written starts, unless it is larger). Anything else (a write before `base`)
/// writes it out first and goes to the inner writer, so the result is always what the same
/// writes and seeks would have made of `inner` directly.
///
/// It also hashes (SHA-256) what it writes out, in order, so that an archive needs no second
/// pass to be checksummed: [`SeekWriteBuf::finish`] returns the hash of the whole content
/// unless something already written out was written again (the header of a ZIP entry larger
/// than [`KEEP`] is patched after it went out) or the writer did not start at 0.
pub struct SeekWriteBuf<W: Write + Seek> {
    inner: W,
    /// The inner writer's position.
    inner_pos: u64,
    /// The offset of `buf[0]`.
    base: u64,
    buf: Vec<u8>,
    /// The logical position.
    pos: u64,
    /// The hash of the content's first `hashed` bytes, all written out; `None` once it cannot
    /// become the whole content's hash.
    hasher: Option<crate::manifest::Sha256Pieces>,
    hashed: u64,
}

/// How much [`SeekWriteBuf`] holds before writing it out.
pub const WRITE_BUF: usize = 256 * 1024;
/// How much of it stays when it is written out for its size.
pub const KEEP: usize = 64 * 1024;

impl<W: Write + Seek> SeekWriteBuf<W> {
    /// Buffers writes to `inner`, from its current position.
    pub fn new(mut inner: W) -> io::Result<Self> {
        let pos = inner.stream_position()?;
        Ok(SeekWriteBuf {
            inner,
            inner_pos: pos,
            base: pos,
            buf: Vec::new(),
            pos,
            hasher: (pos == 0).then(Default::default),
            hashed: 0,
        })
    }

    /// Writes out what is held but its last `keep` bytes.
    fn write_out_but(&mut self, keep: usize) -> io::Result<()> {
        let n = self.buf.len().saturating_sub(keep);
        if n == 0 {
            return Ok(());
        }
        if self.inner_pos != self.base {
            self.inner.seek(SeekFrom::Start(self.base))?;
        }
        self.inner.write_all(&self.buf[..n])?;
        let follows = self.base == self.hashed;
        match &mut self.hasher {
            Some(h) if follows && h.on_a_thread() => {
                // The written-out bytes go to the hashing thread as they are; what stays is
                // moved to a buffer it emptied before (the same copy `drain` would make).
                let mut rest = h
                    .emptied()
                    .unwrap_or_else(|| Vec::with_capacity(2 * WRITE_BUF));
                rest.extend_from_slice(&self.buf[n..]);
                let mut piece = std::mem::replace(&mut self.buf, rest);
                piece.truncate(n);
                h.update_owned(piece);
            }
            Some(h) if follows => {
                h.update(&self.buf[..n]);
                self.buf.drain(..n);
            }
            _ => {
                self.hasher = None;
                self.buf.drain(..n);
            }
        }
        if self.hasher.is_some() {
            self.hashed += n as u64;
        }
        self.base += n as u64;
        self.inner_pos = self.base;
        Ok(())
    }

    /// Takes the hash on a thread of its own from here on ([`crate::manifest::Sha256Pieces`]),
    /// continuing what was hashed: worth it for a large archive, whose writing thread has
    /// enough else to do; not for a small one (a thread costs more than hashing a few KiB).
    /// If no thread can be started, the hash stays on the writing thread.
    pub fn hash_on_a_thread(&mut self) {
        if let Some(h) = &mut self.hasher {
            h.to_a_thread();
        }
    }

    /// Writes out what is held; the inner writer is then at the end of it.
    fn write_out(&mut self) -> io::Result<()> {
        self.write_out_but(0)
    }

    /// Everything written out; the inner writer, at the logical position, and the SHA-256
    /// (lowercase hex) of its whole content when it could be followed (see [`SeekWriteBuf`]).
    pub fn finish(mut self) -> io::Result<(W, Option<String>)> {
        self.write_out()?;
        self.inner.flush()?;
        let end = self.inner.seek(SeekFrom::End(0))?;
        if end != self.pos {
            self.inner.seek(SeekFrom::Start(self.pos))?;
        }
        let hash = self
            .hasher
            .filter(|_| self.hashed == end)
            .map(crate::manifest::Sha256Pieces::finish);
        Ok((self.inner, hash))
    }
}

impl<W: Write + Seek> Write for SeekWriteBuf<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let end = self.base + self.buf.len() as u64;
        if self.pos < self.base || self.pos > end {
            // Outside what is held: write that out and start holding from here.
            self.write_out()?;
            self.base = self.pos;
        }
        let at = (self.pos - self.base) as usize;
        let overlap = data.len().min(self.buf.len() - at);
        self.buf[at..at + overlap].copy_from_slice(&data[..overlap]);
        self.buf.extend_from_slice(&data[overlap..]);
        self.pos += data.len() as u64;
        if self.buf.len() >= WRITE_BUF {
            self.write_out_but(KEEP)?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.write_out()?;
        self.inner.flush()
    }
}

impl<W: Write + Seek> Seek for SeekWriteBuf<W> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
            SeekFrom::End(_) => {
                // The end is the inner writer's business (not used by the ZIP writer).
                self.write_out()?;
                self.pos = self.inner.seek(to)?;
                self.inner_pos = self.pos;
                self.base = self.pos;
                return Ok(self.pos);
            }
        };
        self.pos = target.ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "seek to a negative position")
        })?;
        Ok(self.pos)
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

    /// One step of a writer's life: a write of `len` bytes (filled with `byte`) or a seek.
    #[derive(Clone, Debug)]
    enum Step {
        Write(usize, u8),
        SeekStart(u64),
        SeekBack(i64),
        SeekEnd,
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            6 => (0usize..3000, any::<u8>()).prop_map(|(n, b)| Step::Write(n, b)),
            1 => (WRITE_BUF - 3000..WRITE_BUF + 3000, any::<u8>()).prop_map(|(n, b)| Step::Write(n, b)),
            2 => (0u64..600_000).prop_map(Step::SeekStart),
            3 => (0i64..5000).prop_map(Step::SeekBack),
            1 => Just(Step::SeekEnd),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// Whatever writes and seeks a writer makes, through the buffer the result is the one
        /// it would have made of the inner writer directly, ending at the same position; and
        /// a hash, taken here or on a thread, is the content's.
        #[test]
        fn seek_write_buf_makes_what_the_direct_writes_make(steps in proptest::collection::vec(step(), 0..40), on_a_thread: bool) {
            let mut direct = io::Cursor::new(Vec::new());
            let mut buffered = SeekWriteBuf::new(io::Cursor::new(Vec::new())).unwrap();
            if on_a_thread {
                buffered.hash_on_a_thread();
            }
            for s in &steps {
                let (a, b) = match *s {
                    Step::Write(n, b) => {
                        let data = vec![b; n];
                        direct.write_all(&data).unwrap();
                        buffered.write_all(&data).unwrap();
                        (0, 0)
                    }
                    Step::SeekStart(n) => {
                        let n = n.min(direct.get_ref().len() as u64);
                        (direct.seek(SeekFrom::Start(n)).unwrap(), buffered.seek(SeekFrom::Start(n)).unwrap())
                    }
                    Step::SeekBack(d) => {
                        let d = d.min(direct.position() as i64);
                        (direct.seek(SeekFrom::Current(-d)).unwrap(), buffered.seek(SeekFrom::Current(-d)).unwrap())
                    }
                    Step::SeekEnd => (direct.seek(SeekFrom::End(0)).unwrap(), buffered.seek(SeekFrom::End(0)).unwrap()),
                };
                proptest::prop_assert_eq!(a, b);
            }
            let pos = direct.position();
            let (inner, hash) = buffered.finish().unwrap();
            proptest::prop_assert_eq!(inner.position(), pos);
            proptest::prop_assert!(inner.get_ref() == direct.get_ref(), "contents differ");
            if let Some(h) = hash {
                let want = crate::manifest::hash_reader(&mut &direct.get_ref()[..]).unwrap();
                proptest::prop_assert_eq!(h, want, "a hash that is not the content's");
            }
        }
    }

    #[test]
    fn a_zip_written_through_the_buffer_is_the_same_zip() {
        let files: Vec<Vec<u8>> = (0..50u32)
            .map(|i| {
                (0..(i * 997 % 20_000))
                    .map(|j| (j * i % 251) as u8)
                    .collect()
            })
            .collect();
        let write = |w: &mut dyn WriteSeekDyn| {
            let mut z = zip::ZipWriter::new(w);
            for (i, f) in files.iter().enumerate() {
                let opts = zip::write::SimpleFileOptions::default()
                    .compression_method(zip::CompressionMethod::Stored);
                z.start_file(format!("f{i}"), opts).unwrap();
                z.write_all(f).unwrap();
            }
            z.finish().unwrap();
        };
        let mut direct = io::Cursor::new(Vec::new());
        write(&mut direct);
        let want = crate::manifest::hash_reader(&mut &direct.get_ref()[..]).unwrap();
        for on_a_thread in [false, true] {
            let mut buffered = SeekWriteBuf::new(io::Cursor::new(Vec::new())).unwrap();
            if on_a_thread {
                buffered.hash_on_a_thread();
            }
            write(&mut buffered);
            let (inner, hash) = buffered.finish().unwrap();
            assert!(inner.get_ref() == direct.get_ref());
            // Every entry smaller than what the buffer keeps: followed to the end.
            assert_eq!(
                hash.as_ref(),
                Some(&want),
                "hashed on a thread: {on_a_thread}"
            );
        }
    }

    trait WriteSeekDyn: Write + Seek {}
    impl<T: Write + Seek> WriteSeekDyn for T {}
}
