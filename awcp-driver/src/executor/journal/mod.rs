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
//! The module, by mechanism: the journal itself (here), the on-disk format of a record file
//! (`file.rs`: appends, compaction, reading back, atomic writes), what a driver last wrote
//! (`written.rs`: the write-ahead rule's bookkeeping) and the history of settled records
//! (`history.rs`: moved out of the start-up path, read on demand, swept).
//!
//! Why files and not an embedded store: records are small, written a few times per
//! delegation, and never queried; one file per id is crash-safe without a dependency, and an
//! operator can read it.

use std::path::PathBuf;

use serde_json::Value;

use awcp_proto::DelegationId;

mod file;
mod history;
mod written;

use file::append_record;
pub use file::{read_record, read_record_file, write_atomic, COMPACT_AT};
pub use history::SWEEP_EVERY;
pub use written::Written;

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

#[cfg(test)]
mod tests;
