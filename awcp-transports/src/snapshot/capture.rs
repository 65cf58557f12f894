//! Executor side: recording the baseline manifest at setup and capturing snapshots.

use std::fs;
use std::path::{Path, PathBuf};

use crate::archive::{produce, ArchiveOutput, Delivery, PackItem, DELTA_ENTRY};
use crate::cancel::CancelFlag;
use crate::error::TransportError;
use crate::manifest::Manifest;
use crate::walk::{walk, WalkOptions};

/// Full snapshot (the whole work directory, what \[R\] peers expect) or delta (changed files
/// plus `.awcp/delta.json` listing deletions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SnapshotKind {
    /// Everything.
    #[default]
    Full,
    /// Only what changed since setup.
    Delta,
}

/// A captured snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapturedSnapshot {
    /// The archive (inline base64 handle, or a file for URL mode).
    pub archive: ArchiveOutput,
    /// Full or delta.
    pub kind: SnapshotKind,
    /// Files in the archive.
    pub file_count: u64,
    /// Uncompressed bytes in the archive.
    pub total_bytes: u64,
    /// Files added or changed since setup (relative to the work directory).
    pub changed: Vec<String>,
    /// Files deleted since setup.
    pub deleted: Vec<String>,
}

/// Where the executor keeps the baseline manifest of a work directory: a hidden sibling file,
/// so the work directory itself only holds the workspace.
pub fn baseline_path(work_dir: &Path) -> PathBuf {
    let name = work_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "work".into());
    work_dir.with_file_name(format!(".{name}.awcp-baseline.json"))
}

/// Saves a baseline manifest for `work_dir`.
pub fn save_baseline(work_dir: &Path, m: &Manifest) -> Result<(), TransportError> {
    let data =
        serde_json::to_vec(m).map_err(|e| TransportError::io("encoding baseline", e.into()))?;
    let p = baseline_path(work_dir);
    let tmp = p.with_extension("tmp");
    fs::write(&tmp, data).map_err(|e| TransportError::io("writing baseline", e))?;
    fs::rename(&tmp, &p).map_err(|e| TransportError::io("writing baseline", e))
}

/// Loads the baseline manifest for `work_dir`.
pub fn load_baseline(work_dir: &Path) -> Result<Manifest, TransportError> {
    let data =
        fs::read(baseline_path(work_dir)).map_err(|e| TransportError::io("reading baseline", e))?;
    serde_json::from_slice(&data).map_err(|e| TransportError::io("decoding baseline", e.into()))
}

/// The walk options the executor uses for the work directory: the defaults (skip
/// `node_modules/`, `.git/`; honour ignore files; skip symlinks).
pub fn executor_walk_options() -> WalkOptions {
    WalkOptions::default()
}

/// Walk options that ship the whole work directory with no exclusions, as the reference
/// executor does for its full snapshots (its delegator replaces the resource with them).
pub fn full_walk_options() -> WalkOptions {
    WalkOptions {
        skip_dirs: Vec::new(),
        honour_ignore_files: false,
        ..WalkOptions::default()
    }
}

/// Captures a snapshot of `work_dir` walked with `opts`. A delta needs the baseline recorded at setup; without it
/// a full snapshot is produced.
pub fn capture(
    work_dir: &Path,
    kind: SnapshotKind,
    delivery: &Delivery,
    opts: &WalkOptions,
    cancel: &CancelFlag,
) -> Result<CapturedSnapshot, TransportError> {
    let w = walk(work_dir, opts, cancel)?;
    let baseline = load_baseline(work_dir).ok();
    let (kind, files, changed, deleted) = match (&baseline, kind) {
        (Some(b), SnapshotKind::Delta) => {
            let ch = b.changes(&w, cancel)?;
            let changed: Vec<String> = ch.changed.iter().map(|e| e.rel.clone()).collect();
            (SnapshotKind::Delta, ch.changed, changed, ch.deleted)
        }
        (Some(b), SnapshotKind::Full) => {
            let ch = b.changes(&w, cancel)?;
            let changed = ch.changed.iter().map(|e| e.rel.clone()).collect();
            (SnapshotKind::Full, w.files.clone(), changed, ch.deleted)
        }
        (None, _) => {
            let all = w.files.iter().map(|e| e.rel.clone()).collect();
            (SnapshotKind::Full, w.files.clone(), all, Vec::new())
        }
    };
    let items: Vec<PackItem<'_>> = files
        .iter()
        .map(|e| PackItem {
            name: &e.rel,
            entry: e,
        })
        .collect();
    let delta_json;
    let mut extra: Vec<(&str, &[u8])> = Vec::new();
    if kind == SnapshotKind::Delta {
        delta_json = serde_json::to_vec(&serde_json::json!({"version": 1, "deleted": deleted}))
            .map_err(|e| TransportError::io("encoding delta", e.into()))?;
        extra.push((DELTA_ENTRY, &delta_json));
    }
    let mut report = None;
    let archive = produce(delivery, "snapshot", |w| {
        let (_, r) = crate::archive::pack(w, &items, &extra, cancel)?;
        let sum = r.archive_sha256.clone();
        report = Some(r);
        Ok(sum)
    })?;
    let total_bytes = report.map(|r| r.total_bytes).unwrap_or(0);
    Ok(CapturedSnapshot {
        archive,
        kind,
        file_count: files.len() as u64,
        total_bytes,
        changed,
        deleted,
    })
}
