//! Durable assignment records: one JSON file per assignment under
//! `<state_dir>/assignments/<id>.json`, written atomically (temp file, fsync, rename) whenever
//! the engine reports a change, removed when the engine forgets the assignment. At start-up
//! the records are handed to [`awcp_proto::Executor::restore`].
//!
//! Why files and not an embedded store: records are small, written a few times per
//! delegation, and never queried; one file per id with write-then-rename is crash-safe
//! without a dependency, and an operator can read it.

use std::io::Write;
use std::path::{Path, PathBuf};

use awcp_proto::DelegationId;

/// The assignment journal.
pub struct Journal {
    dir: PathBuf,
}

impl Journal {
    /// A journal under `state_dir` (`<state_dir>/assignments`).
    pub fn new(state_dir: PathBuf) -> Self {
        Self::at(state_dir.join("assignments"))
    }

    /// A journal in exactly `dir`.
    pub fn at(dir: PathBuf) -> Self {
        Journal { dir }
    }

    /// Writes (or replaces) the record of `id`.
    pub fn write(&self, id: &DelegationId, record: &serde_json::Value) {
        if let Err(e) = write_atomic(
            &self.dir,
            &format!("{id}.json"),
            record.to_string().as_bytes(),
        ) {
            tracing::warn!(delegation = %id, "journal write failed: {e}");
        }
    }

    /// Removes the record of `id`.
    pub fn remove(&self, id: &DelegationId) {
        let _ = std::fs::remove_file(self.dir.join(format!("{id}.json")));
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
            match std::fs::read(&p)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
            {
                Some(v) => out.push(v),
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

/// Writes `name` in `dir` atomically: temp file (`.tmp…`, see [`Journal::load`]), fsync,
/// rename.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new().prefix(".tmp").tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(dir.join(name)).map_err(|e| e.error)?;
    Ok(())
}
