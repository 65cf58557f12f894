//! What a driver last wrote of each record (the write-ahead rule's bookkeeping).

use sha2::{Digest, Sha256};

use awcp_proto::DelegationId;

use super::{append_record, Journal};

/// What a driver last wrote of each record, for the write-ahead rule
/// (`awcp_proto::engine::Journaling`): an unchanged record is not written again, and a sync is
/// made only for a record written since its last one. Both sides' loops keep one.
#[derive(Debug, Default)]
pub struct Written {
    /// The SHA-256 of the record last written, per delegation: compared instead of the text
    /// itself, which kept a copy of every live record (a KiB or two each, on both sides).
    written: std::collections::BTreeMap<DelegationId, [u8; 32]>,
    /// Written since their last sync.
    pub(super) unsynced: std::collections::BTreeSet<DelegationId>,
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
