//! File manifests: (path, size, mode, mtime, SHA-256) records used for delta snapshots on the
//! executor and for local-edit conflict detection on the delegator.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::Path;
use std::sync::mpsc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::cancel::CancelFlag;
use crate::error::TransportError;
use crate::walk::{WalkEntry, WalkResult};

/// What is known about one file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// Size in bytes.
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Modification time in nanoseconds (a cheap change hint; the hash decides).
    pub mtime_ns: i64,
    /// SHA-256 of the content, lowercase hex.
    pub sha256: String,
}

/// Files of one directory tree keyed by `/`-separated relative path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The files.
    pub files: BTreeMap<String, FileRecord>,
}

/// The delegator's record of what it shipped, per resource name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Baseline {
    /// Manifest of each resource, paths relative to the resource root.
    pub resources: BTreeMap<String, Manifest>,
}

/// How a tree differs from a manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Files that are new or whose content or mode changed, with their current state.
    pub changed: Vec<WalkEntry>,
    /// Paths in the manifest that no longer exist.
    pub deleted: Vec<String>,
}

impl Changes {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.deleted.is_empty()
    }
}

/// SHA-256 of a byte slice, lowercase hex.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// Lowercase hex of bytes.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// SHA-256 of data that arrives in pieces, as [`hash_reader`] computes it of the whole: e.g.
/// of an archive as it is written.
#[derive(Clone, Default)]
pub struct Sha256Hex(Sha256);

impl std::fmt::Debug for Sha256Hex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sha256Hex")
    }
}

impl Sha256Hex {
    /// Adds the next piece.
    pub fn update(&mut self, piece: &[u8]) {
        self.0.update(piece);
    }

    /// The hash of everything added, lowercase hex.
    pub fn finish(self) -> String {
        hex(&self.0.finalize())
    }
}

/// [`Sha256Hex`] taken on a thread of its own, so that the thread producing the pieces (a
/// packer writing an archive out) does not wait for the hash: on a workspace of many small
/// files the archive's hash was a quarter of the writing thread's time, while the cores had
/// time to spare (`BENCHMARKS.md`, 2026-11-27, late night). Pieces are handed over whole
/// and come back emptied, to be reused; at most [`Sha256Thread::AHEAD`] wait at once.
pub struct Sha256Thread {
    to_hash: Option<mpsc::SyncSender<Vec<u8>>>,
    emptied: mpsc::Receiver<Vec<u8>>,
    thread: Option<std::thread::JoinHandle<String>>,
}

impl Sha256Thread {
    /// Pieces handed over and not hashed yet, at most (the producer waits beyond).
    pub const AHEAD: usize = 2;

    /// Starts the hashing thread.
    pub fn spawn() -> std::io::Result<Self> {
        Self::continuing(Sha256Hex::default())
    }

    /// Starts the hashing thread with what `h` hashed so far: e.g. once a stream hashed as it
    /// came turns out to be large.
    pub fn continuing(mut h: Sha256Hex) -> std::io::Result<Self> {
        let (to_hash, pieces) = mpsc::sync_channel::<Vec<u8>>(Self::AHEAD);
        let (give_back, emptied) = mpsc::sync_channel(Self::AHEAD + 2);
        let thread = std::thread::Builder::new()
            .name("awcp-sha256".into())
            .spawn(move || {
                for mut piece in pieces {
                    h.update(&piece);
                    piece.clear();
                    // Reused if the producer wants it; dropped if enough are waiting.
                    let _ = give_back.try_send(piece);
                }
                h.finish()
            })?;
        Ok(Sha256Thread {
            to_hash: Some(to_hash),
            emptied,
            thread: Some(thread),
        })
    }

    /// Adds the next piece (waiting if [`Sha256Thread::AHEAD`] are waiting already).
    pub fn update(&mut self, piece: Vec<u8>) {
        if let Some(tx) = &self.to_hash {
            // Fails only if the thread ended, which `finish` reports.
            let _ = tx.send(piece);
        }
    }

    /// An emptied piece to reuse, if one came back.
    pub fn emptied(&self) -> Option<Vec<u8>> {
        self.emptied.try_recv().ok()
    }

    /// The hash of every piece added, lowercase hex.
    pub fn finish(mut self) -> String {
        self.to_hash = None;
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(hash)) => hash,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            // Taken only here and in drop.
            None => String::new(),
        }
    }
}

impl std::fmt::Debug for Sha256Thread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sha256Thread")
            .field("running", &self.thread.is_some())
            .finish()
    }
}

impl Drop for Sha256Thread {
    /// Ends the thread (the hash is not wanted).
    fn drop(&mut self) {
        self.to_hash = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The SHA-256 of pieces, taken on the calling thread until [`Sha256Pieces::to_a_thread`]
/// moves it to a thread of its own ([`Sha256Thread`]), continuing what was hashed: for a
/// producer that learns only on the way whether the hash is worth a thread (an archive being
/// packed or received).
#[derive(Debug, Default)]
pub struct Sha256Pieces {
    at: HashedAt,
    len: u64,
    /// A thread was asked for and could not be started: the hash stays here.
    no_thread: bool,
}

#[derive(Debug)]
enum HashedAt {
    Here(Sha256Hex),
    Thread(Sha256Thread),
}

impl Default for HashedAt {
    fn default() -> Self {
        HashedAt::Here(Sha256Hex::default())
    }
}

impl Sha256Pieces {
    /// Bytes hashed so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was hashed yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the hash is taken on a thread of its own.
    pub fn on_a_thread(&self) -> bool {
        matches!(self.at, HashedAt::Thread(_))
    }

    /// Takes the hash on a thread of its own from now on (nothing if it is already there). If
    /// no thread can be started, the hash stays on the calling thread, and later calls do not
    /// try again.
    pub fn to_a_thread(&mut self) {
        let HashedAt::Here(h) = &self.at else {
            return;
        };
        if self.no_thread {
            return;
        }
        match Sha256Thread::continuing(h.clone()) {
            Ok(t) => self.at = HashedAt::Thread(t),
            Err(e) => {
                tracing::debug!("hashing on the calling thread: {e}");
                self.no_thread = true;
            }
        }
    }

    /// Adds `piece`: hashed here, or handed to the thread whole (no copy).
    pub fn update_owned(&mut self, piece: Vec<u8>) {
        self.len += piece.len() as u64;
        match &mut self.at {
            HashedAt::Here(h) => h.update(&piece),
            HashedAt::Thread(t) => t.update(piece),
        }
    }

    /// Adds `piece`: hashed here, or copied to the thread.
    pub fn update(&mut self, piece: &[u8]) {
        match &mut self.at {
            HashedAt::Here(h) => {
                self.len += piece.len() as u64;
                h.update(piece);
            }
            HashedAt::Thread(_) => self.update_owned(piece.to_vec()),
        }
    }

    /// A piece the thread hashed and emptied, to reuse; none while hashing here.
    pub fn emptied(&self) -> Option<Vec<u8>> {
        match &self.at {
            HashedAt::Here(_) => None,
            HashedAt::Thread(t) => t.emptied(),
        }
    }

    /// The hash of every piece added, lowercase hex.
    pub fn finish(self) -> String {
        match self.at {
            HashedAt::Here(h) => h.finish(),
            HashedAt::Thread(t) => t.finish(),
        }
    }
}

/// SHA-256 of a file's content, streamed.
pub fn hash_file(path: &Path) -> std::io::Result<String> {
    let mut f = fs::File::open(path)?;
    hash_reader(&mut f)
}

/// SHA-256 of everything a reader yields, streamed.
pub fn hash_reader(r: &mut dyn Read) -> std::io::Result<String> {
    let mut h = Sha256Hex::default();
    crate::buf::read_each(r, |b| {
        h.update(b);
        Ok(())
    })?;
    Ok(h.finish())
}

impl Baseline {
    /// Moves the baseline past an applied snapshot (a multi-round delegation's next round
    /// is compared with what the last one left): each written `resource/path` is recorded as
    /// it now is on disk under its resource's root in `roots`, each deleted one is dropped.
    /// A path that cannot be read is dropped too (the next apply then treats it as new).
    pub fn advance(
        &mut self,
        written: &[String],
        deleted: &[String],
        roots: &BTreeMap<String, std::path::PathBuf>,
    ) {
        use std::os::unix::fs::MetadataExt as _;
        for path in deleted {
            if let Some((res, rel)) = path.split_once('/') {
                if let Some(m) = self.resources.get_mut(res) {
                    m.files.remove(rel);
                }
            }
        }
        for path in written {
            let Some((res, rel)) = path.split_once('/') else {
                continue;
            };
            let Some(root) = roots.get(res) else {
                continue;
            };
            let file = root.join(rel);
            let m = self.resources.entry(res.to_owned()).or_default();
            let record = fs::symlink_metadata(&file)
                .ok()
                .filter(fs::Metadata::is_file)
                .and_then(|md| {
                    Some(FileRecord {
                        size: md.len(),
                        mode: md.mode() & 0o7777,
                        mtime_ns: crate::walk::mtime_ns(&md),
                        sha256: hash_file(&file).ok()?,
                    })
                });
            match record {
                Some(r) => {
                    m.files.insert(rel.to_owned(), r);
                }
                None => {
                    m.files.remove(rel);
                }
            }
        }
    }
}

impl Manifest {
    /// Builds a manifest from a walk, hashing every file.
    pub fn from_walk(walk: &WalkResult, cancel: &CancelFlag) -> Result<Manifest, TransportError> {
        let mut files = BTreeMap::new();
        for e in &walk.files {
            cancel.check()?;
            let sha256 = hash_file(&e.path)
                .map_err(|err| TransportError::io(format!("hashing `{}`", e.rel), err))?;
            files.insert(e.rel.clone(), record(e, sha256));
        }
        Ok(Manifest { files })
    }

    /// Whether the file at `entry` still matches the record `rec`: equal size and mode, and
    /// either an equal mtime or (if the mtime moved) an equal hash.
    pub fn matches(rec: &FileRecord, entry: &WalkEntry) -> Result<bool, TransportError> {
        if rec.size != entry.size || rec.mode != entry.mode {
            return Ok(false);
        }
        if rec.mtime_ns == entry.mtime_ns {
            return Ok(true);
        }
        let h = hash_file(&entry.path)
            .map_err(|err| TransportError::io(format!("hashing `{}`", entry.rel), err))?;
        Ok(h == rec.sha256)
    }

    /// Compares a fresh walk of the same tree with this manifest. Files whose size, mode and
    /// mtime are unchanged are taken as unchanged without reading them (like git's index);
    /// others are hashed.
    pub fn changes(
        &self,
        walk: &WalkResult,
        cancel: &CancelFlag,
    ) -> Result<Changes, TransportError> {
        let mut out = Changes::default();
        let mut seen = 0usize;
        for e in &walk.files {
            cancel.check()?;
            match self.files.get(&e.rel) {
                Some(rec) => {
                    seen += 1;
                    if !Self::matches(rec, e)? {
                        out.changed.push(e.clone());
                    }
                }
                None => out.changed.push(e.clone()),
            }
        }
        if seen != self.files.len() {
            let present: std::collections::BTreeSet<&str> =
                walk.files.iter().map(|f| f.rel.as_str()).collect();
            out.deleted = self
                .files
                .keys()
                .filter(|k| !present.contains(k.as_str()))
                .cloned()
                .collect();
        }
        Ok(out)
    }
}

pub(crate) fn record(e: &WalkEntry, sha256: String) -> FileRecord {
    FileRecord {
        size: e.size,
        mode: e.mode,
        mtime_ns: e.mtime_ns,
        sha256,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::walk::{walk, WalkOptions};

    /// On a thread, from the start or continuing a hash begun here, pieces of any size hash
    /// to what the whole hashes to; pieces come back emptied.
    #[test]
    fn a_hash_on_a_thread_is_the_hash_of_the_whole() {
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let want = hash_reader(&mut &data[..]).unwrap();
        let mut t = Sha256Thread::spawn().unwrap();
        let mut came_back = 0;
        for piece in data.chunks(65_537) {
            t.update(piece.to_vec());
            while let Some(v) = t.emptied() {
                assert!(v.is_empty());
                came_back += 1;
            }
        }
        assert_eq!(t.finish(), want);
        assert!(came_back > 0, "no piece came back");

        let mut here = Sha256Hex::default();
        here.update(&data[..12_345]);
        let mut t = Sha256Thread::continuing(here).unwrap();
        t.update(data[12_345..500_000].to_vec());
        t.update(Vec::new());
        t.update(data[500_000..].to_vec());
        assert_eq!(t.finish(), want);

        // Dropped unfinished: its thread ends (dropping does not hang).
        let mut t = Sha256Thread::spawn().unwrap();
        t.update(data.clone());
        drop(t);
    }

    #[test]
    fn pieces_moved_to_a_thread_hash_the_whole() {
        let data: Vec<u8> = (0..700_000u32).map(|i| (i * 13 % 241) as u8).collect();
        let want = hash_reader(&mut &data[..]).unwrap();
        for move_at in [0, 1, 99_999, 700_000] {
            let mut p = Sha256Pieces::default();
            assert!(p.is_empty() && !p.on_a_thread());
            for (i, piece) in data.chunks(100_000).enumerate() {
                if i * 100_000 >= move_at {
                    p.to_a_thread();
                    assert!(p.on_a_thread());
                }
                // Borrowed and owned pieces, empty ones between.
                if i % 2 == 0 {
                    p.update(piece);
                } else {
                    p.update_owned(piece.to_vec());
                }
                p.update(&[]);
                if !p.on_a_thread() {
                    assert!(p.emptied().is_none());
                }
            }
            assert_eq!(p.len(), data.len() as u64);
            assert_eq!(p.finish(), want, "moved at {move_at}");
        }
    }

    #[test]
    fn detects_added_changed_deleted() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::write(r.join("a"), b"a").unwrap();
        fs::write(r.join("b"), b"b").unwrap();
        fs::write(r.join("c"), b"c").unwrap();
        let c = CancelFlag::new();
        let o = WalkOptions::default();
        let m = Manifest::from_walk(&walk(r, &o, &c).unwrap(), &c).unwrap();
        assert_eq!(m.files["a"].sha256, sha256_hex(b"a"));
        assert!(m.changes(&walk(r, &o, &c).unwrap(), &c).unwrap().is_empty());
        fs::write(r.join("a"), b"A2").unwrap();
        fs::remove_file(r.join("b")).unwrap();
        fs::write(r.join("d"), b"d").unwrap();
        let ch = m.changes(&walk(r, &o, &c).unwrap(), &c).unwrap();
        let changed: Vec<_> = ch.changed.iter().map(|e| e.rel.as_str()).collect();
        assert_eq!(changed, vec!["a", "d"]);
        assert_eq!(ch.deleted, vec!["b"]);
    }
}
