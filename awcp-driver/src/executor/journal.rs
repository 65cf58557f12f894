//! Durable assignment records: one JSON file per assignment under
//! `<state_dir>/assignments/<id>.json`, written atomically (write to a temp file, fsync,
//! rename), removed when the assignment is forgotten.

use std::io::Write;
use std::path::{Path, PathBuf};

use awcp_proto::ExecutorEvent;
use serde_json::json;

/// The assignment journal.
pub struct Journal {
    dir: PathBuf,
}

impl Journal {
    /// A journal under `state_dir`.
    pub fn new(state_dir: PathBuf) -> Self {
        Journal {
            dir: state_dir.join("assignments"),
        }
    }

    /// Records what an engine event says about an assignment.
    pub fn record(&self, ev: &ExecutorEvent) {
        let (id, value) = match ev {
            ExecutorEvent::InviteReceived { id, invite, .. } => (
                id,
                json!({"id": id.as_str(), "state": "pending", "description": invite.task.description}),
            ),
            ExecutorEvent::StateChanged { id, to, .. } => {
                (id, json!({"id": id.as_str(), "state": to.as_str()}))
            }
            ExecutorEvent::Ended { id, state, error } => (
                id,
                json!({"id": id.as_str(), "state": state.as_str(), "released": true, "error": error}),
            ),
        };
        if let Err(e) = write_atomic(
            &self.dir,
            &format!("{id}.json"),
            value.to_string().as_bytes(),
        ) {
            tracing::warn!(delegation = %id, "journal write failed: {e}");
        }
    }

    /// Ids of records left by a previous run.
    pub fn leftovers(&self) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        rd.flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(".json"))
                    .map(str::to_owned)
            })
            .collect()
    }
}

/// Writes `name` in `dir` atomically: temp file, fsync, rename.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(dir.join(name)).map_err(|e| e.error)?;
    Ok(())
}
