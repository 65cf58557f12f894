//! The history: records of settled delegations moved out of what [`Journal::load`] reads at
//! start-up ([`Journal::retire`]), read back on demand and swept when their retention ends.

use awcp_proto::DelegationId;
use awcp_transports::durable::sync_dir;

use super::{read_record_file, Journal};

/// How often [`Journal::sweep_history`] looks through the history.
pub const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

impl Journal {
    /// Moves the record of `id` to the history (a rename: the record must be durable first;
    /// see [`super::Written::retire`]), and syncs the history directory so its new name is durable
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
}
