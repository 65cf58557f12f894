//! Durable records, one file per delegation: the executor's assignments under
//! `<state_dir>/assignments/<id>.json`, the delegator's delegations under
//! `<state_dir>/delegations/<id>.json`. A record is written whenever the engine reports a
//! change and the file is removed when the engine forgets the delegation. At start-up the
//! records are handed to the engine's `restore`.
//!
//! The file is a log of JSON lines, the last complete one being the record: the first record
//! creates the file atomically (temp file, fsync, rename), later ones are appended and synced
//! (`fdatasync`), or appended without a sync and synced later ([`Journal::write_record`],
//! [`Journal::sync`]: both sides' records, written ahead of what the engine says must follow
//! a durable record, `awcp_proto::engine::Journaling`). Each append starts with a newline, so
//! the torn tail a crash may leave ends
//! its own line and is skipped by the reader, which falls back to the record before it. A file
//! past [`COMPACT_AT`] bytes is rewritten atomically with only the newest record. Appending
//! instead of replacing the file avoids creating, renaming and evicting an inode per write,
//! which was most of a tiny delegation's CPU time (`BENCHMARKS.md`). A file holding one JSON
//! document (what older releases wrote, or an operator's pretty-printed edit) reads as that
//! document.
//!
//! Why files and not an embedded store: records are small, written a few times per
//! delegation, and never queried; one file per id is crash-safe without a dependency, and an
//! operator can read it.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

use awcp_proto::DelegationId;
use awcp_transports::durable::sync_dir;

/// The assignment journal.
pub struct Journal {
    dir: PathBuf,
    /// Where records the engine says are settled are moved ([`Journal::retire`]), out of what
    /// [`Journal::load`] reads at start-up; `None`: they stay.
    history: Option<PathBuf>,
}

impl Journal {
    /// A journal under `state_dir` (`<state_dir>/assignments`).
    pub fn new(state_dir: PathBuf) -> Self {
        Self::at(state_dir.join("assignments"))
    }

    /// A journal in exactly `dir`.
    pub fn at(dir: PathBuf) -> Self {
        Journal { dir, history: None }
    }

    /// This journal, moving settled records to `history` ([`Journal::retire`]).
    pub fn with_history(mut self, history: PathBuf) -> Self {
        self.history = Some(history);
        self
    }

    /// Moves the record of `id` to the history (a rename: the record must be durable first;
    /// see [`Written::retire`]), and syncs the history directory so its new name is durable
    /// (on a file system that writes directories back late, an unsynced rename across
    /// directories could otherwise lose both names). The old name's removal need not be: a
    /// record a power loss leaves in the journal is found by [`Journal::load`] and retired
    /// again.
    pub fn retire(&self, id: &DelegationId) -> std::io::Result<()> {
        let Some(history) = &self.history else {
            return Ok(());
        };
        let name = format!("{id}.json");
        match std::fs::rename(self.dir.join(&name), history.join(&name)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !history.exists() => {
                std::fs::create_dir_all(history)?;
                if let Some(parent) = history.parent() {
                    sync_dir(parent)?;
                }
                std::fs::rename(self.dir.join(&name), history.join(&name))?;
            }
            other => other?,
        }
        sync_dir(history)
    }

    /// Every record in the history (settled delegations, [`Journal::retire`]), unsynced:
    /// each was durable before it was moved there. Unreadable ones are skipped (and left).
    pub fn load_history(&self) -> Vec<serde_json::Value> {
        let Some(history) = &self.history else {
            return Vec::new();
        };
        let Ok(rd) = std::fs::read_dir(history) else {
            return Vec::new();
        };
        rd.flatten()
            .filter(|e| e.path().extension().and_then(|x| x.to_str()) == Some("json"))
            .filter_map(|e| read_record_file(&e.path()))
            .collect()
    }

    /// Removes the history records not modified for `retention` (those of delegations whose
    /// retention has ended), at most once per [`SWEEP_EVERY`] (a `.swept` file in the history
    /// remembers when): what a delegator that never reads its history (a one-shot `awcp
    /// delegate`) does instead of forgetting them. Returns the ids removed.
    pub fn sweep_history(&self, retention: std::time::Duration) -> Vec<DelegationId> {
        let Some(history) = &self.history else {
            return Vec::new();
        };
        let marker = history.join(".swept");
        let now = std::time::SystemTime::now();
        let age = |m: &std::fs::Metadata| {
            m.modified()
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .unwrap_or_default()
        };
        match std::fs::metadata(&marker) {
            Ok(m) if age(&m) < SWEEP_EVERY => return Vec::new(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !history.exists() => {
                return Vec::new();
            }
            _ => {}
        }
        let _ = std::fs::write(&marker, b"");
        let Ok(rd) = std::fs::read_dir(history) else {
            return Vec::new();
        };
        let mut removed = Vec::new();
        for e in rd.flatten() {
            let p = e.path();
            let Some(id) = p
                .file_stem()
                .and_then(|x| x.to_str())
                .filter(|_| p.extension().and_then(|x| x.to_str()) == Some("json"))
                .and_then(|x| DelegationId::new(x).ok())
            else {
                continue;
            };
            if e.metadata().is_ok_and(|m| age(&m) > retention) && std::fs::remove_file(&p).is_ok() {
                removed.push(id);
            }
        }
        removed
    }

    /// Writes (or replaces) the record of `id`; durable when this returns (a failure is
    /// logged).
    pub fn write(&self, id: &DelegationId, record: &Value) {
        if let Err(e) = self.write_record(id, &record.to_string(), true) {
            tracing::warn!(delegation = %id, "journal write failed: {e}");
        }
    }

    /// Writes (or replaces) the record of `id` (one line of compact JSON), synced only if
    /// `durable` or the file is new (or compacted). Returns whether it is durable; if not,
    /// [`Journal::sync`] makes it so.
    pub fn write_record(
        &self,
        id: &DelegationId,
        record: &str,
        durable: bool,
    ) -> std::io::Result<bool> {
        append_record(&self.dir, &format!("{id}.json"), record, durable, None).map(|(d, _)| d)
    }

    /// Makes what was written of the record of `id` durable (a failure is logged).
    pub fn sync(&self, id: &DelegationId) {
        let path = self.dir.join(format!("{id}.json"));
        let synced = std::fs::File::open(&path).and_then(|f| f.sync_data());
        if let Err(e) = synced {
            tracing::warn!(delegation = %id, "journal sync failed: {e}");
        }
    }

    /// Removes the record of `id` (and its history record).
    pub fn remove(&self, id: &DelegationId) {
        let _ = std::fs::remove_file(self.dir.join(format!("{id}.json")));
        if let Some(history) = &self.history {
            let _ = std::fs::remove_file(history.join(format!("{id}.json")));
        }
    }

    /// Every record left by a previous run. Temp files of a write a crash interrupted are
    /// removed; a record that is not JSON is moved aside to `<name>.unreadable` (never
    /// deleted: it may be the only trace of a workspace) and skipped; other files are left
    /// alone.
    pub fn load(&self) -> Vec<serde_json::Value> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in rd.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(".tmp") {
                // A temp file from a write interrupted by a crash (see `write_atomic`).
                let _ = std::fs::remove_file(&p);
                continue;
            }
            if p.extension().and_then(|x| x.to_str()) != Some("json") {
                continue;
            }
            match std::fs::read(&p).ok().and_then(|b| read_record(&b)) {
                Some(v) => {
                    // What a process that crashed wrote without a sync is still only in the
                    // page cache: durable before this process acts on it.
                    let _ = std::fs::File::open(&p).and_then(|f| f.sync_data());
                    out.push(v);
                }
                None => {
                    let aside = self.dir.join(format!("{name}.unreadable"));
                    tracing::warn!(
                        path = %p.display(),
                        "unreadable journal record skipped and moved to {}",
                        aside.display()
                    );
                    let _ = std::fs::rename(&p, &aside);
                }
            }
        }
        out
    }
}

/// What a driver last wrote of each record, for the write-ahead rule
/// (`awcp_proto::engine::Journaling`): an unchanged record is not written again, and a sync is
/// made only for a record written since its last one. Both sides' loops keep one.
#[derive(Debug, Default)]
pub struct Written {
    /// The SHA-256 of the record last written, per delegation: compared instead of the text
    /// itself, which kept a copy of every live record (a KiB or two each, on both sides).
    written: std::collections::BTreeMap<DelegationId, [u8; 32]>,
    /// Written since their last sync.
    unsynced: std::collections::BTreeSet<DelegationId>,
    /// The file of the record last appended to, still open: the next append to or sync of
    /// the same record (the usual case: a write, then its sync or the next state) needs no
    /// open, `fstat` and close. One at a time, so the journal holds at most one descriptor.
    /// Only [`Written`] writes a record file while it lives, and it drops this whenever the
    /// file is replaced (a new or compacted record) or removed, so it is never a stale inode.
    kept: Option<KeptRecord>,
}

/// An open record file and its length.
#[derive(Debug)]
struct KeptRecord {
    id: DelegationId,
    file: std::fs::File,
    len: u64,
}

impl Written {
    /// Makes `text` the record of `id` in `journal` unless it is the one last written, and
    /// durable if `durable` (a new or compacted file always is). A failed write is logged and
    /// not remembered, so the next change writes it again.
    pub fn write(&mut self, journal: &Journal, id: &DelegationId, text: String, durable: bool) {
        let digest: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        if self.written.get(id) == Some(&digest) {
            if durable {
                self.sync(journal, id);
            }
            return;
        }
        let kept = match self.kept.take() {
            Some(k) if k.id == *id => Some((k.file, k.len)),
            other => {
                self.kept = other;
                None
            }
        };
        let name = format!("{id}.json");
        match append_record(&journal.dir, &name, &text, durable, kept) {
            Ok((synced, open)) => {
                if synced {
                    self.unsynced.remove(id);
                } else {
                    self.unsynced.insert(id.clone());
                }
                self.written.insert(id.clone(), digest);
                if let Some((file, len)) = open {
                    self.kept = Some(KeptRecord {
                        id: id.clone(),
                        file,
                        len,
                    });
                }
            }
            Err(e) => tracing::warn!(delegation = %id, "journal write failed: {e}"),
        }
    }

    /// Makes the record of `id` durable if it was written since its last sync.
    pub fn sync(&mut self, journal: &Journal, id: &DelegationId) {
        if self.unsynced.remove(id) {
            match &self.kept {
                Some(k) if k.id == *id => {
                    if let Err(e) = k.file.sync_data() {
                        tracing::warn!(delegation = %id, "journal sync failed: {e}");
                    }
                }
                _ => journal.sync(id),
            }
        }
    }

    /// Makes every record written since its last sync durable.
    pub fn sync_all(&mut self, journal: &Journal) {
        let ids: Vec<DelegationId> = self.unsynced.iter().cloned().collect();
        for id in ids {
            self.sync(journal, &id);
        }
    }

    /// Makes the record of `id` durable and moves it to the journal's history
    /// ([`Journal::retire`]); the file is no longer kept open. A failure is logged (the record
    /// stays where it was, which is only slower).
    pub fn retire(&mut self, journal: &Journal, id: &DelegationId) {
        self.sync(journal, id);
        if self.kept.as_ref().is_some_and(|k| k.id == *id) {
            self.kept = None;
        }
        if let Err(e) = journal.retire(id) {
            tracing::warn!(delegation = %id, "moving a settled record to the history: {e}");
        }
    }

    /// Removes the record of `id`.
    pub fn remove(&mut self, journal: &Journal, id: &DelegationId) {
        self.written.remove(id);
        self.unsynced.remove(id);
        if self.kept.as_ref().is_some_and(|k| k.id == *id) {
            self.kept = None;
        }
        journal.remove(id);
    }
}

/// How often [`Journal::sweep_history`] looks through the history.
pub const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// A record file past this size is rewritten with only its newest record.
pub const COMPACT_AT: u64 = 64 * 1024;

/// Makes `record` (one line of compact JSON) the record in `dir/name`: appended (and synced
/// if `sync`), or written atomically (always durable) when the file is new or due for
/// compaction. `kept` is the file already open for appending, with its length. Returns whether
/// the record is durable, and the file it was appended to with its new length (`None` when
/// the file was replaced).
fn append_record(
    dir: &Path,
    name: &str,
    record: &str,
    sync: bool,
    kept: Option<(std::fs::File, u64)>,
) -> std::io::Result<(bool, Option<(std::fs::File, u64)>)> {
    let (mut file, len) = match kept {
        Some(k) => k,
        None => match std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join(name))
        {
            Ok(f) => {
                let len = f.metadata()?.len();
                (f, len)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                write_atomic(dir, name, format!("{record}\n").as_bytes())?;
                return Ok((true, None));
            }
            Err(e) => return Err(e),
        },
    };
    if len > COMPACT_AT {
        drop(file);
        write_atomic(dir, name, format!("{record}\n").as_bytes())?;
        return Ok((true, None));
    }
    let mut line = Vec::with_capacity(record.len() + 2);
    line.push(b'\n');
    line.extend_from_slice(record.as_bytes());
    line.push(b'\n');
    file.write_all(&line)?;
    if sync {
        file.sync_data()?;
    }
    Ok((sync, Some((file, len + line.len() as u64))))
}

/// The record a journal file holds: the whole file if it is one JSON document, else its last
/// line that is a complete JSON object (a crash may have torn the line after it). `None` when
/// there is none.
pub fn read_record(bytes: &[u8]) -> Option<Value> {
    if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
        return v.is_object().then_some(v);
    }
    bytes.split(|b| *b == b'\n').rev().find_map(|line| {
        serde_json::from_slice::<Value>(line)
            .ok()
            .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()))
    })
}

/// [`read_record`] of the file at `path` (`None` if it cannot be read).
pub fn read_record_file(path: &Path) -> Option<Value> {
    read_record(&std::fs::read(path).ok()?)
}

/// Writes `name` in `dir` atomically and durably: temp file (`.tmp…`, see [`Journal::load`]),
/// fsync, rename, fsync of `dir` (see [`sync_dir`]).
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new().prefix(".tmp").tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(dir.join(name)).map_err(|e| e.error)?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn id() -> DelegationId {
        DelegationId::new("dlg_journal").unwrap()
    }

    fn state(n: usize) -> Value {
        json!({"id": "dlg_journal", "version": 1, "state": format!("s{n}"), "pad": "x".repeat(n)})
    }

    #[test]
    fn a_first_record_is_durable_later_ones_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::at(dir.path().to_path_buf());
        let text = |n| state(n).to_string();
        let write = |n, durable| j.write_record(&id(), &text(n), durable).unwrap();
        assert!(write(0, false), "a new file is written atomically");
        assert!(!write(1, false), "an append without a sync");
        assert!(write(2, true));
        assert!(!write(3, false));
        j.sync(&id());
        assert_eq!(j.load(), vec![state(3)]);
    }

    #[test]
    fn the_last_record_written_is_the_one_loaded_and_one_file_holds_them() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::at(dir.path().to_path_buf());
        for n in 0..5 {
            j.write(&id(), &state(n));
        }
        assert_eq!(j.load(), vec![state(4)]);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "no temp files left: {names:?}");
        j.remove(&id());
        assert!(j.load().is_empty());
    }

    /// A crash may cut the last append anywhere (or leave zeros where its data should be):
    /// the reader then sees the record before it, and the next write after the restart is the
    /// one read back.
    #[test]
    fn a_torn_append_at_any_byte_falls_back_to_the_previous_record() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::at(dir.path().to_path_buf());
        j.write(&id(), &state(1));
        j.write(&id(), &state(2));
        let file = dir.path().join("dlg_journal.json");
        let whole = std::fs::read(&file).unwrap();
        j.write(&id(), &state(3));
        let with_third = std::fs::read(&file).unwrap();
        for cut in whole.len()..with_third.len() {
            let torn = &with_third[..cut];
            let expect = if cut + 1 >= with_third.len() {
                state(3) // only the final newline is missing: the record is whole
            } else {
                state(2)
            };
            assert_eq!(read_record(torn), Some(expect.clone()), "cut at {cut}");
            let mut zeroed = torn.to_vec();
            zeroed.resize(with_third.len(), 0);
            if cut + 1 < with_third.len() {
                assert_eq!(read_record(&zeroed), Some(state(2)), "zeros from {cut}");
            }
            // Restart after the crash: the next record is appended after the torn tail.
            std::fs::write(&file, torn).unwrap();
            j.write(&id(), &state(4));
            assert_eq!(j.load(), vec![state(4)], "write after a cut at {cut}");
        }
    }

    #[test]
    fn a_single_document_of_an_older_release_reads_and_takes_appends() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::at(dir.path().to_path_buf());
        let file = dir.path().join("dlg_journal.json");
        // Older releases wrote one compact document without a newline; operators may pretty-print.
        std::fs::write(&file, state(1).to_string()).unwrap();
        assert_eq!(j.load(), vec![state(1)]);
        std::fs::write(&file, serde_json::to_vec_pretty(&state(2)).unwrap()).unwrap();
        assert_eq!(j.load(), vec![state(2)]);
        j.write(&id(), &state(3));
        assert_eq!(j.load(), vec![state(3)]);
        assert_eq!(read_record_file(&file), Some(state(3)));
    }

    #[test]
    fn a_long_log_is_compacted_to_its_newest_record() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::at(dir.path().to_path_buf());
        let file = dir.path().join("dlg_journal.json");
        for n in 0..200 {
            j.write(&id(), &state(1000 + n));
            assert!(
                std::fs::metadata(&file).unwrap().len() <= COMPACT_AT + 4096,
                "bounded at write {n}"
            );
        }
        assert_eq!(j.load(), vec![state(1199)]);
    }

    /// `Written` appends a record only when it differs from the one it last wrote for that
    /// delegation (compared by digest): the same text twice is one line; a different one, the
    /// same one after another delegation's, and the same one after a removal are written.
    #[test]
    fn an_unchanged_record_is_not_written_again() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::at(dir.path().to_path_buf());
        let other = DelegationId::new("dlg_other").unwrap();
        let mut w = Written::default();
        let len = || std::fs::metadata(dir.path().join("dlg_journal.json")).map(|m| m.len());
        w.write(&j, &id(), state(1).to_string(), false);
        let one = len().unwrap();
        w.write(&j, &id(), state(1).to_string(), true);
        assert_eq!(len().unwrap(), one, "the same record is not appended again");
        assert!(w.unsynced.is_empty(), "but the durable ask synced it");
        w.write(&j, &other, state(1).to_string(), false);
        w.write(&j, &id(), state(1).to_string(), false);
        assert_eq!(
            len().unwrap(),
            one,
            "another delegation's record changes nothing here"
        );
        w.write(&j, &id(), state(2).to_string(), false);
        assert!(len().unwrap() > one, "a changed record is appended");
        w.remove(&j, &id());
        assert!(len().is_err());
        w.write(&j, &id(), state(2).to_string(), false);
        assert_eq!(
            read_record_file(&dir.path().join("dlg_journal.json")),
            Some(state(2))
        );
    }

    /// `Written` keeps the file it last appended to open: appends and syncs through it land in
    /// the file on disk under the record's name, also across compactions (which replace the
    /// file), removals, and records of other delegations written in between.
    #[test]
    fn written_records_reach_the_named_file_through_compaction_removal_and_interleaving() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::at(dir.path().to_path_buf());
        let other = DelegationId::new("dlg_other").unwrap();
        let mut w = Written::default();
        let on_disk = |d: &DelegationId| read_record_file(&dir.path().join(format!("{d}.json")));
        for n in 0..300 {
            // Large enough that the log is compacted (the file replaced) several times.
            w.write(&j, &id(), state(1000 + n).to_string(), n % 3 == 0);
            assert_eq!(on_disk(&id()), Some(state(1000 + n)), "write {n}");
            if n % 7 == 0 {
                w.write(&j, &other, state(n).to_string(), false);
                assert_eq!(on_disk(&other), Some(state(n)), "other at {n}");
            }
            if n % 5 == 0 {
                w.sync(&j, &id());
            }
        }
        assert!(
            std::fs::metadata(dir.path().join("dlg_journal.json"))
                .unwrap()
                .len()
                <= COMPACT_AT + 4096,
            "still compacted"
        );
        w.sync_all(&j);
        assert!(w.unsynced.is_empty());
        w.remove(&j, &id());
        assert_eq!(on_disk(&id()), None);
        // A new record after the removal is a new file, not an append to the removed one.
        w.write(&j, &id(), state(1).to_string(), false);
        assert_eq!(on_disk(&id()), Some(state(1)));
        w.write(&j, &id(), state(2).to_string(), false);
        assert_eq!(on_disk(&id()), Some(state(2)));
        assert_eq!(j.load().len(), 2);
    }

    #[test]
    fn a_file_with_no_whole_record_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::at(dir.path().to_path_buf());
        std::fs::write(dir.path().join("dlg_torn.json"), b"{\"id\": \"dlg_t").unwrap();
        assert!(j.load().is_empty());
        assert!(dir.path().join("dlg_torn.json.unreadable").exists());
    }

    /// A retired record leaves what `load` reads for the history, is read back by
    /// `load_history`, can be written again (and retired again, replacing the history's copy)
    /// and is removed from both places.
    #[test]
    fn a_retired_record_moves_to_the_history_and_back_out_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let history = dir.path().join("ended");
        let j = Journal::at(dir.path().join("live")).with_history(history.clone());
        let mut w = Written::default();
        w.write(&j, &id(), state(0).to_string(), false);
        w.write(&j, &id(), state(1).to_string(), false);
        assert!(!w.unsynced.is_empty(), "an append, not synced");
        w.retire(&j, &id());
        assert!(w.unsynced.is_empty(), "synced before it moved");
        assert!(j.load().is_empty(), "start-up does not read it");
        assert_eq!(j.load_history(), vec![state(1)]);
        // A later change (never expected of a settled delegation) is live again, then
        // retired over the history's copy.
        w.write(&j, &id(), state(2).to_string(), false);
        assert_eq!(j.load(), vec![state(2)]);
        w.retire(&j, &id());
        assert!(j.load().is_empty());
        assert_eq!(j.load_history(), vec![state(2)]);
        w.remove(&j, &id());
        assert!(j.load_history().is_empty());
        assert_eq!(std::fs::read_dir(&history).unwrap().count(), 0);
    }

    /// The sweep removes history records older than the retention, at most once per
    /// `SWEEP_EVERY`, and nothing else.
    #[test]
    fn the_sweep_removes_only_what_outlived_its_retention_and_runs_daily() {
        let dir = tempfile::tempdir().unwrap();
        let history = dir.path().join("ended");
        let j = Journal::at(dir.path().join("live")).with_history(history.clone());
        assert!(
            j.sweep_history(Duration::from_secs(60)).is_empty(),
            "no history yet"
        );
        std::fs::create_dir_all(&history).unwrap();
        let old = DelegationId::new("dlg_old").unwrap();
        let new = DelegationId::new("dlg_new").unwrap();
        for d in [&old, &new] {
            std::fs::write(history.join(format!("{d}.json")), state(1).to_string()).unwrap();
        }
        std::fs::write(history.join("notes.txt"), "kept").unwrap();
        let long_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
        let age = |name: &str| {
            std::fs::File::options()
                .write(true)
                .open(history.join(name))
                .unwrap()
                .set_modified(long_ago)
                .unwrap()
        };
        age("dlg_old.json");
        age("notes.txt");
        assert_eq!(j.sweep_history(Duration::from_secs(60)), vec![old.clone()]);
        assert!(history.join("dlg_new.json").exists());
        assert!(history.join("notes.txt").exists());
        // Not again within a day, even with more to remove.
        age("dlg_new.json");
        assert!(j.sweep_history(Duration::from_secs(60)).is_empty());
        assert!(history.join("dlg_new.json").exists());
        age(".swept");
        let long_ago = std::time::SystemTime::now() - SWEEP_EVERY - Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(history.join(".swept"))
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        assert_eq!(j.sweep_history(Duration::from_secs(60)), vec![new]);
    }
}
