//! Hardened ZIP extraction.
//!
//! Every entry is validated before anything is written (pass 1), then files are written into
//! the target directory (pass 2) with `O_EXCL` creation through directories this extractor
//! created itself, while actual decompressed bytes are counted against the limits (declared
//! sizes are not trusted). Refused: absolute names, `..`, backslashes, drive prefixes, NUL,
//! duplicate (or file-vs-directory clashing) entries, encrypted entries, device files, FIFOs and
//! sockets, symlinks that resolve outside the archive root, entries over the size limits, zip
//! bombs (total size and compression ratio). Symlinks that stay inside are skipped (never
//! materialised) and reported. Entries under the reserved top-level `.awcp/` directory are not
//! written; `.awcp/delta.json` is parsed as delta metadata.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use zip::ZipArchive;

use crate::cancel::CancelFlag;
use crate::error::TransportError;
use crate::manifest::hex;
use crate::walk::AWCP_DIR;

/// The entry that marks a delta snapshot.
pub const DELTA_ENTRY: &str = ".awcp/delta.json";

/// Extraction limits (generous defaults above the admission limits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtractLimits {
    /// Most entries in the archive.
    pub max_entries: usize,
    /// Largest single file (declared and actual).
    pub max_file_bytes: u64,
    /// Most uncompressed bytes in total (declared and actual).
    pub max_total_bytes: u64,
    /// Highest uncompressed/compressed ratio, checked per entry above 1 MiB and for the whole
    /// archive.
    pub max_ratio: u64,
}

impl Default for ExtractLimits {
    fn default() -> Self {
        ExtractLimits {
            max_entries: 100_000,
            max_file_bytes: 512 * 1024 * 1024,
            max_total_bytes: 1024 * 1024 * 1024,
            max_ratio: 250,
        }
    }
}

/// `.awcp/delta.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeltaInfo {
    /// Format version (1).
    pub version: u32,
    /// Paths (relative to the archive root) the executor deleted.
    pub deleted: Vec<String>,
    /// Ours, never on the wire: files of a git result that the delegator merged with its own
    /// local edits when it built the delta (see [`crate::git::result`]), each with the SHA-256
    /// (hex) of the local version it merged against. An apply honours it only for a delta
    /// the delegator built itself ([`crate::snapshot::ApplyRequest::built_here`]); readers
    /// that do not know it ignore it, so the version stays 1.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub merged: BTreeMap<String, String>,
}

/// A file written by the extractor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtractedFile {
    /// Entry name (`/`-separated, validated).
    pub name: String,
    /// Bytes written.
    pub size: u64,
    /// Permission bits applied (those of the entry, with owner-read always set).
    pub mode: u32,
    /// Whether the entry carried permission bits (else `mode` is the default 0644).
    pub has_mode: bool,
    /// SHA-256 of the content.
    pub sha256: String,
}

/// What the extractor did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtractReport {
    /// Files written, in archive order.
    pub files: Vec<ExtractedFile>,
    /// Delta metadata, if the archive is a delta snapshot.
    pub delta: Option<DeltaInfo>,
    /// Entries skipped (in-archive symlinks, other `.awcp/` entries).
    pub skipped: Vec<String>,
    /// Top-level names (first path component of every file, directory or deletion).
    pub top_level: BTreeSet<String>,
}

const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;
const S_IFDIR: u32 = 0o040000;
const S_IFLNK: u32 = 0o120000;

enum Kind {
    File,
    Dir,
    Skip,
    Delta,
}

struct Planned {
    index: usize,
    name: String,
    kind: Kind,
    declared: u64,
    mode: u32,
    has_mode: bool,
}

/// Validates an entry name and returns its components.
pub fn validate_name(name: &str) -> Result<Vec<&str>, String> {
    if name.is_empty() {
        return Err("empty name".into());
    }
    if name.contains('\0') {
        return Err("NUL in name".into());
    }
    if name.contains('\\') {
        return Err("backslash in name".into());
    }
    if name.starts_with('/') {
        return Err("absolute path".into());
    }
    let trimmed = name.strip_suffix('/').unwrap_or(name);
    let parts: Vec<&str> = trimmed.split('/').collect();
    if parts
        .first()
        .is_some_and(|p| p.len() >= 2 && p.as_bytes()[1] == b':')
    {
        return Err("drive-prefixed path".into());
    }
    for p in &parts {
        match *p {
            ".." => return Err("`..` escapes the target directory".into()),
            "." | "" => return Err("empty or `.` path component".into()),
            _ => {}
        }
    }
    Ok(parts)
}

/// Lexically resolves a symlink target relative to the entry's directory; `false` if it leaves
/// the archive root or is absolute.
fn link_stays_inside(entry_parts: &[&str], target: &str) -> bool {
    if target.starts_with('/') || target.contains('\\') || target.contains('\0') {
        return false;
    }
    let mut stack: Vec<&str> = entry_parts[..entry_parts.len().saturating_sub(1)].to_vec();
    for p in target.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                if stack.pop().is_none() {
                    return false;
                }
            }
            other => stack.push(other),
        }
    }
    true
}

/// Extracts a ZIP from `reader` into `target` (which must exist; normally empty).
pub fn extract<R: Read + Seek>(
    reader: R,
    target: &Path,
    limits: &ExtractLimits,
    cancel: &CancelFlag,
) -> Result<ExtractReport, TransportError> {
    let (mut zip, jobs, report) = begin(reader, target, limits, cancel)?;
    let work = FileWork::new(&jobs, target, limits, cancel);
    let written = work.run(&mut zip)?;
    Ok(finish(report, written))
}

/// Everything before the files are written: the archive opened and validated (pass 1), the
/// directories made and the rest of the report filled (pass 2). Returns the files to write.
fn begin<R: Read + Seek>(
    reader: R,
    target: &Path,
    limits: &ExtractLimits,
    cancel: &CancelFlag,
) -> Result<(ZipArchive<R>, Vec<Planned>, ExtractReport), TransportError> {
    let mut zip = open_zip(reader, limits)?;
    let (plan, mut report) = plan_entries(&mut zip, limits, cancel)?;
    let jobs = prepare_target(&mut zip, plan, target, &mut report, cancel)?;
    Ok((zip, jobs, report))
}

/// Files written by more than one thread only from this many on: below it a thread costs more
/// than it saves (a tiny delegation's archive is a handful of files).
const PARALLEL_MIN_FILES: usize = 64;
/// Threads writing files at most (file creation stops scaling past a few on one filesystem).
const MAX_WORKERS: usize = 4;

/// [`extract`] with the files written by up to 4 threads (one per core) when there are many
/// (64 or more; fewer are written by the calling thread): each thread decompresses and writes
/// whole entries through its own reader (`reader` is cloned, sharing the parsed central
/// directory). Everything is validated first and directories are created first, by one
/// thread, exactly as [`extract`] does; the limits on actual bytes hold across threads. The
/// report is the same as [`extract`]'s.
pub fn extract_parallel<R: Read + Seek + Clone + Send>(
    reader: R,
    target: &Path,
    limits: &ExtractLimits,
    cancel: &CancelFlag,
) -> Result<ExtractReport, TransportError> {
    let (mut zip, jobs, report) = begin(reader, target, limits, cancel)?;
    let work = FileWork::new(&jobs, target, limits, cancel);
    // Asked only when there is enough to share out: finding the core count reads the
    // cgroup files, several system calls, as much as extracting a tiny archive.
    let workers = if jobs.len() < PARALLEL_MIN_FILES {
        1
    } else {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .min(MAX_WORKERS)
            .min(jobs.len() / (PARALLEL_MIN_FILES / 2))
    };
    let written = if workers < 2 {
        work.run(&mut zip)?
    } else {
        std::thread::scope(|s| {
            let threads: Vec<_> = (0..workers)
                .map(|_| {
                    let mut zip = zip.clone();
                    let work = &work;
                    s.spawn(move || work.run(&mut zip))
                })
                .collect();
            let mut written = Vec::with_capacity(jobs.len());
            let mut failed = None;
            for t in threads {
                match t.join() {
                    Ok(Ok(w)) => written.extend(w),
                    Ok(Err(e)) => {
                        failed.get_or_insert(e);
                    }
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            match failed {
                Some(e) => Err(e),
                None => Ok(written),
            }
        })?
    };
    Ok(finish(report, written))
}

/// The report, its files in archive order.
fn finish(mut report: ExtractReport, mut written: Vec<(usize, ExtractedFile)>) -> ExtractReport {
    written.sort_unstable_by_key(|(i, _)| *i);
    report.files = written.into_iter().map(|(_, f)| f).collect();
    report
}

/// Checks the raw central directory (duplicates, entry count) and opens the archive.
fn open_zip<R: Read + Seek>(
    reader: R,
    limits: &ExtractLimits,
) -> Result<ZipArchive<R>, TransportError> {
    let mut reader = reader;
    // The zip crate folds entries with equal names into one; read the raw central directory to
    // see duplicates.
    let raw_names = central_directory_names(&mut reader, limits.max_entries)?;
    let mut seen = BTreeSet::new();
    for n in &raw_names {
        if !seen.insert(n.as_slice()) {
            return Err(TransportError::rejected(
                String::from_utf8_lossy(n),
                "duplicate entry",
            ));
        }
    }
    reader
        .rewind()
        .map_err(|e| TransportError::BadArchive(e.to_string()))?;
    let zip = ZipArchive::new(reader)
        .map_err(|e| TransportError::BadArchive(format!("not a ZIP: {e}")))?;
    if zip.len() != raw_names.len() {
        return Err(TransportError::BadArchive(
            "central directory entry count is inconsistent".into(),
        ));
    }
    if zip.len() > limits.max_entries {
        return Err(TransportError::BadArchive(format!(
            "{} entries, limit {}",
            zip.len(),
            limits.max_entries
        )));
    }
    Ok(zip)
}

/// Pass 1: validates every entry before anything is written, and plans the writes.
fn plan_entries<R: Read + Seek>(
    zip: &mut ZipArchive<R>,
    limits: &ExtractLimits,
    cancel: &CancelFlag,
) -> Result<(Vec<Planned>, ExtractReport), TransportError> {
    let mut plan = Vec::with_capacity(zip.len());
    let mut report = ExtractReport::default();
    let mut files: BTreeMap<String, ()> = BTreeMap::new();
    let mut dirs: BTreeSet<String> = BTreeSet::new();
    let mut declared_total: u64 = 0;
    let mut compressed_total: u64 = 0;
    for i in 0..zip.len() {
        cancel.check()?;
        let (name, mode, size, csize, encrypted, is_dir_name) = {
            let f = zip
                .by_index_raw(i)
                .map_err(|e| TransportError::BadArchive(format!("entry #{i}: {e}")))?;
            let name = match std::str::from_utf8(f.name_raw()) {
                Ok(n) => n.to_owned(),
                Err(_) => {
                    return Err(TransportError::rejected(
                        String::from_utf8_lossy(f.name_raw()),
                        "name is not UTF-8",
                    ))
                }
            };
            (
                name.clone(),
                f.unix_mode(),
                f.size(),
                f.compressed_size(),
                f.encrypted(),
                name.ends_with('/'),
            )
        };
        let parts = validate_name(&name).map_err(|r| TransportError::rejected(&name, r))?;
        if encrypted {
            return Err(TransportError::rejected(&name, "encrypted entry"));
        }
        let ftype = mode.map(|m| m & S_IFMT).unwrap_or(0);
        let kind = match ftype {
            0 | S_IFREG if !is_dir_name => Kind::File,
            0 | S_IFDIR if is_dir_name => Kind::Dir,
            S_IFDIR => Kind::Dir,
            S_IFLNK => {
                let mut t = String::new();
                zip.by_index(i)
                    .map_err(|e| TransportError::rejected(&name, e.to_string()))?
                    .take(4096)
                    .read_to_string(&mut t)
                    .map_err(|_| TransportError::rejected(&name, "unreadable symlink target"))?;
                if !link_stays_inside(&parts, &t) {
                    return Err(TransportError::rejected(
                        &name,
                        "symlink resolves outside the target directory",
                    ));
                }
                Kind::Skip
            }
            S_IFREG => Kind::File,
            _ => {
                return Err(TransportError::rejected(
                    &name,
                    "device file, FIFO or socket entries are not allowed",
                ))
            }
        };
        let trimmed = parts.join("/");
        let kind = if parts[0] == AWCP_DIR {
            if trimmed == DELTA_ENTRY && matches!(kind, Kind::File) {
                Kind::Delta
            } else {
                Kind::Skip
            }
        } else {
            kind
        };
        // Duplicates and file/dir clashes.
        match kind {
            Kind::File | Kind::Delta => {
                if files.insert(trimmed.clone(), ()).is_some() || dirs.contains(&trimmed) {
                    return Err(TransportError::rejected(&name, "duplicate entry"));
                }
            }
            Kind::Dir => {
                if files.contains_key(&trimmed) {
                    return Err(TransportError::rejected(&name, "duplicate entry"));
                }
            }
            Kind::Skip => {}
        }
        for k in 1..parts.len() {
            let prefix = parts[..k].join("/");
            if files.contains_key(&prefix) {
                return Err(TransportError::rejected(
                    &name,
                    "duplicate entry (a file of the same name exists)",
                ));
            }
            dirs.insert(prefix);
        }
        if matches!(kind, Kind::Dir) {
            dirs.insert(trimmed.clone());
        }
        if matches!(kind, Kind::File) {
            if size > limits.max_file_bytes {
                return Err(TransportError::rejected(
                    &name,
                    format!(
                        "{size} bytes exceeds the file limit {}",
                        limits.max_file_bytes
                    ),
                ));
            }
            if size > 1024 * 1024 && size / csize.max(1) > limits.max_ratio {
                return Err(TransportError::rejected(
                    &name,
                    format!("compression ratio above {} (zip bomb)", limits.max_ratio),
                ));
            }
            declared_total = declared_total.saturating_add(size);
            compressed_total = compressed_total.saturating_add(csize);
            if declared_total > limits.max_total_bytes {
                return Err(TransportError::BadArchive(format!(
                    "more than {} bytes uncompressed (zip bomb) at entry `{name}`",
                    limits.max_total_bytes
                )));
            }
        }
        if !matches!(kind, Kind::Delta) && parts[0] != AWCP_DIR {
            report.top_level.insert(parts[0].to_owned());
        }
        plan.push(Planned {
            index: i,
            name: trimmed,
            kind,
            declared: size,
            mode: mode.unwrap_or(0o644),
            has_mode: mode.is_some(),
        });
    }
    if declared_total > 1024 * 1024 && declared_total / compressed_total.max(1) > limits.max_ratio {
        return Err(TransportError::BadArchive(format!(
            "overall compression ratio above {} (zip bomb)",
            limits.max_ratio
        )));
    }

    Ok((plan, report))
}

/// Pass 2, in archive order, by one thread: directories (and every file's parents) created,
/// the delta metadata read, skipped entries listed. Returns the files still to write.
fn prepare_target<R: Read + Seek>(
    zip: &mut ZipArchive<R>,
    plan: Vec<Planned>,
    target: &Path,
    report: &mut ExtractReport,
    cancel: &CancelFlag,
) -> Result<Vec<Planned>, TransportError> {
    let mut dirs = DirMaker::default();
    let mut files = Vec::new();
    for p in plan {
        cancel.check()?;
        match p.kind {
            Kind::Skip => report.skipped.push(p.name),
            Kind::Dir => dirs.ensure(target, &p.name, true)?,
            Kind::Delta => {
                let mut s = String::new();
                zip.by_index(p.index)
                    .map_err(|e| TransportError::rejected(&p.name, e.to_string()))?
                    .take(16 * 1024 * 1024)
                    .read_to_string(&mut s)
                    .map_err(|e| TransportError::rejected(&p.name, e.to_string()))?;
                let d: DeltaInfo = serde_json::from_str(&s).map_err(|e| {
                    TransportError::rejected(&p.name, format!("bad delta metadata: {e}"))
                })?;
                if d.version != 1 {
                    return Err(TransportError::rejected(
                        &p.name,
                        format!("unsupported delta version {}", d.version),
                    ));
                }
                for del in &d.deleted {
                    let parts = validate_name(del).map_err(|r| TransportError::rejected(del, r))?;
                    if parts[0] != AWCP_DIR {
                        report.top_level.insert(parts[0].to_owned());
                    }
                }
                report.delta = Some(d);
            }
            Kind::File => {
                dirs.ensure(target, &p.name, false)?;
                files.push(p);
            }
        }
    }
    Ok(files)
}

/// Pass 3: the files, written by one or more threads that each take the next unwritten one.
struct FileWork<'a> {
    jobs: &'a [Planned],
    target: &'a Path,
    limits: &'a ExtractLimits,
    cancel: &'a CancelFlag,
    /// The next job to take.
    next: AtomicUsize,
    /// Decompressed bytes written so far, by every thread (the total limit is on this).
    written: AtomicU64,
    /// A thread failed: the others stop taking jobs.
    failed: AtomicBool,
}

impl<'a> FileWork<'a> {
    fn new(
        jobs: &'a [Planned],
        target: &'a Path,
        limits: &'a ExtractLimits,
        cancel: &'a CancelFlag,
    ) -> Self {
        FileWork {
            jobs,
            target,
            limits,
            cancel,
            next: AtomicUsize::new(0),
            written: AtomicU64::new(0),
            failed: AtomicBool::new(false),
        }
    }

    /// Writes jobs until none is left (or a thread failed); returns them with their index.
    fn run<R: Read + Seek>(
        &self,
        zip: &mut ZipArchive<R>,
    ) -> Result<Vec<(usize, ExtractedFile)>, TransportError> {
        let largest = self.jobs.iter().map(|p| p.declared).max().unwrap_or(0);
        let mut buf = crate::buf::for_len(largest);
        let mut out = Vec::new();
        while !self.failed.load(Ordering::Relaxed) {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(p) = self.jobs.get(i) else { break };
            match self
                .cancel
                .check()
                .and_then(|()| self.write(zip, p, &mut buf))
            {
                Ok(f) => out.push((i, f)),
                Err(e) => {
                    self.failed.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    /// Writes one file, counting its actual bytes against the limits.
    fn write<R: Read + Seek>(
        &self,
        zip: &mut ZipArchive<R>,
        p: &Planned,
        buf: &mut [u8],
    ) -> Result<ExtractedFile, TransportError> {
        let limits = self.limits;
        // The entry's permission bits (a read-only file stays read-only), readable by its
        // owner; written through a descriptor opened writable, then set exactly.
        let mode = (p.mode & 0o777) | 0o400;
        let path = self.target.join(&p.name);
        let mut out = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode | 0o200)
            .custom_flags(libc_o_nofollow())
            .open(&path)
            .map_err(|e| TransportError::rejected(&p.name, format!("cannot create: {e}")))?;
        let mut f = zip
            .by_index(p.index)
            .map_err(|e| TransportError::rejected(&p.name, e.to_string()))?;
        let mut h = Sha256::new();
        let mut n: u64 = 0;
        loop {
            let k = match f.read(buf) {
                Ok(k) => k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(TransportError::rejected(
                        &p.name,
                        format!("corrupt data: {e}"),
                    ))
                }
            };
            if k == 0 {
                break;
            }
            n += k as u64;
            let written_total = self.written.fetch_add(k as u64, Ordering::Relaxed) + k as u64;
            if n > p.declared || n > limits.max_file_bytes {
                return Err(TransportError::rejected(
                    &p.name,
                    "more data than declared (zip bomb)",
                ));
            }
            if written_total > limits.max_total_bytes {
                return Err(TransportError::BadArchive(format!(
                    "more than {} bytes uncompressed (zip bomb) at entry `{}`",
                    limits.max_total_bytes, p.name
                )));
            }
            h.update(&buf[..k]);
            out.write_all(&buf[..k])
                .map_err(|e| TransportError::io(format!("writing `{}`", p.name), e))?;
        }
        if n != p.declared {
            return Err(TransportError::rejected(
                &p.name,
                "size differs from the declared size",
            ));
        }
        // The mode given to open() is filtered by the umask; set it exactly.
        out.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|e| TransportError::io(format!("chmod `{}`", p.name), e))?;
        Ok(ExtractedFile {
            name: p.name.clone(),
            size: n,
            mode,
            has_mode: p.has_mode,
            sha256: hex(&h.finalize()),
        })
    }
}

fn le16(b: &[u8], at: usize) -> u64 {
    u16::from_le_bytes([b[at], b[at + 1]]) as u64
}
fn le32(b: &[u8], at: usize) -> u64 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as u64
}
fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Reads the raw entry names from the central directory (classic and ZIP64 end records).
fn central_directory_names<R: Read + Seek>(
    r: &mut R,
    max_entries: usize,
) -> Result<Vec<Vec<u8>>, TransportError> {
    let bad = |m: &str| TransportError::BadArchive(format!("not a ZIP: {m}"));
    let io_bad = |e: io::Error| TransportError::BadArchive(format!("not a ZIP: {e}"));
    let len = r.seek(io::SeekFrom::End(0)).map_err(io_bad)?;
    let tail_len = len.min(22 + 65_535);
    r.seek(io::SeekFrom::Start(len - tail_len))
        .map_err(io_bad)?;
    let mut tail = vec![0u8; tail_len as usize];
    r.read_exact(&mut tail).map_err(io_bad)?;
    let eocd = (0..tail.len().saturating_sub(21))
        .rev()
        .find(|&i| tail[i..i + 4] == [0x50, 0x4b, 0x05, 0x06])
        .ok_or_else(|| bad("no end of central directory"))?;
    let mut count = le16(&tail, eocd + 10);
    let mut cd_size = le32(&tail, eocd + 12);
    let mut cd_off = le32(&tail, eocd + 16);
    if count == 0xffff || cd_size == 0xffff_ffff || cd_off == 0xffff_ffff {
        if eocd < 20 || tail[eocd - 20..eocd - 16] != [0x50, 0x4b, 0x06, 0x07] {
            return Err(bad("missing ZIP64 locator"));
        }
        let z64 = le64(&tail, eocd - 12);
        r.seek(io::SeekFrom::Start(z64)).map_err(io_bad)?;
        let mut rec = [0u8; 56];
        r.read_exact(&mut rec).map_err(io_bad)?;
        if rec[..4] != [0x50, 0x4b, 0x06, 0x06] {
            return Err(bad("bad ZIP64 end record"));
        }
        count = le64(&rec, 32);
        cd_size = le64(&rec, 40);
        cd_off = le64(&rec, 48);
    }
    if count > max_entries as u64 {
        return Err(TransportError::BadArchive(format!(
            "{count} entries, limit {max_entries}"
        )));
    }
    if cd_off.checked_add(cd_size).is_none_or(|end| end > len) || cd_size > 64 * 1024 * 1024 {
        return Err(bad("central directory out of bounds"));
    }
    r.seek(io::SeekFrom::Start(cd_off)).map_err(io_bad)?;
    let mut cd = vec![0u8; cd_size as usize];
    r.read_exact(&mut cd).map_err(io_bad)?;
    let mut names = Vec::with_capacity(count as usize);
    let mut at = 0usize;
    for _ in 0..count {
        if at + 46 > cd.len() || cd[at..at + 4] != [0x50, 0x4b, 0x01, 0x02] {
            return Err(bad("truncated central directory"));
        }
        let n = le16(&cd, at + 28) as usize;
        let x = le16(&cd, at + 30) as usize;
        let c = le16(&cd, at + 32) as usize;
        if at + 46 + n > cd.len() {
            return Err(bad("truncated central directory"));
        }
        names.push(cd[at + 46..at + 46 + n].to_vec());
        at += 46 + n + x + c;
    }
    Ok(names)
}

/// `O_NOFOLLOW` on Linux/macOS without a libc dependency.
const fn libc_o_nofollow() -> i32 {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        0o400000
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        0x0100
    }
}

/// Creates the parent directories of an entry (or the entry itself, a directory) under a root,
/// one component at a time, refusing any existing component that is not a real directory. A
/// directory it has made or checked once is not looked at again (the extraction target is the extractor's own directory, where
/// nothing else creates entries).
#[derive(Default)]
struct DirMaker {
    /// Relative paths of directories known to be real directories under the root.
    known: std::collections::HashSet<String>,
}

impl DirMaker {
    fn ensure(&mut self, root: &Path, rel: &str, is_dir: bool) -> Result<(), TransportError> {
        let parts: Vec<&str> = rel.split('/').collect();
        let n = if is_dir { parts.len() } else { parts.len() - 1 };
        if n == 0 {
            return Ok(());
        }
        // The deepest directory already known: everything above it is known too.
        let mut from = n;
        while from > 0 && !self.known.contains(&parts[..from].join("/")) {
            from -= 1;
        }
        if from == n {
            return Ok(());
        }
        let mut cur = root.to_path_buf();
        for part in &parts[..from] {
            cur.push(part);
        }
        for i in from..n {
            cur.push(parts[i]);
            check_or_make_dir(&cur, rel, &parts, i)?;
            self.known.insert(parts[..=i].join("/"));
        }
        Ok(())
    }
}

/// Makes directory `cur` (component `i` of `rel`), or checks that it is a real directory.
fn check_or_make_dir(
    cur: &Path,
    rel: &str,
    parts: &[&str],
    i: usize,
) -> Result<(), TransportError> {
    {
        match fs::symlink_metadata(cur) {
            Ok(md) if md.is_dir() => {}
            Ok(md) if md.file_type().is_symlink() => {
                return Err(TransportError::SymlinkInPath(parts[..=i].join("/")))
            }
            Ok(_) => {
                return Err(TransportError::rejected(
                    rel,
                    format!("`{}` exists and is not a directory", parts[..=i].join("/")),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir(cur).map_err(|e| {
                    TransportError::io(format!("creating `{}`", parts[..=i].join("/")), e)
                })?;
            }
            Err(e) => return Err(TransportError::io(format!("inspecting `{rel}`"), e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate_name("a/b.txt").is_ok());
        assert!(validate_name("dir/").is_ok());
        for bad in [
            "",
            "/etc/passwd",
            "a/../../x",
            "..",
            "a\\b",
            "C:/x",
            "a//b",
            "./a",
            "a\0b",
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn links() {
        assert!(link_stays_inside(&["a", "l"], "b"));
        assert!(link_stays_inside(&["a", "l"], "../b"));
        assert!(!link_stays_inside(&["a", "l"], "../../b"));
        assert!(!link_stays_inside(&["l"], "/etc/passwd"));
    }
}
