//! Results coming back are held to the delegator's admission limits: before anything is
//! written, the workspace as the snapshot would leave it is measured and judged by
//! [`awcp_proto::result_verdict`] (the same limits and comparisons as admission).

use std::collections::BTreeMap;
use std::path::Path;

use awcp_proto::{AccessMode, WorkspaceStats};

use super::apply::{ApplyOptions, ApplyRequest};
use crate::archive::{ExtractReport, Layout};
use crate::cancel::CancelFlag;
use crate::error::TransportError;
use crate::walk::walk;

/// The workspace (every resource) as applying `ex` would leave it: what was shipped (the
/// baseline, or the files on disk where there is none), minus the snapshot's deletions, plus
/// its files. Paths the apply never writes (skipped directories, `.awcp/`) are not counted.
pub(crate) fn projected_stats(
    req: &ApplyRequest<'_>,
    ex: &ExtractReport,
    layout: Layout,
    opts: &ApplyOptions,
    cancel: &CancelFlag,
) -> Result<WorkspaceStats, TransportError> {
    let mut stats = WorkspaceStats::default();
    for r in req.resources {
        let name = r.name.as_str();
        let prefix = match layout {
            Layout::Flat => String::new(),
            Layout::PerResource => format!("{name}/"),
        };
        let mut files: BTreeMap<String, u64> =
            match req.baseline.and_then(|b| b.resources.get(name)) {
                Some(m) => m.files.iter().map(|(k, f)| (k.clone(), f.size)).collect(),
                None => on_disk(&r.source_path, opts, cancel)?,
            };
        let writable = r.mode == AccessMode::Rw && req.access_mode == AccessMode::Rw;
        let present = layout == Layout::Flat || ex.top_level.contains(name);
        if writable && present {
            let written = ex
                .files
                .iter()
                .filter_map(|f| {
                    f.name
                        .strip_prefix(prefix.as_str())
                        .map(|rel| (rel, f.size))
                })
                .filter(|(rel, _)| !rel.is_empty() && !opts.walk.is_excluded(rel));
            match &ex.delta {
                Some(d) => {
                    for del in d
                        .deleted
                        .iter()
                        .filter_map(|p| p.strip_prefix(prefix.as_str()))
                    {
                        files.remove(del);
                    }
                    files.extend(written.map(|(rel, size)| (rel.to_owned(), size)));
                }
                None => files = written.map(|(rel, size)| (rel.to_owned(), size)).collect(),
            }
        }
        for (rel, size) in files {
            stats.add_file(&format!("{name}/{rel}"), size);
        }
    }
    Ok(stats)
}

/// What the walker would ship from `root` now (path → size); nothing if it is gone.
fn on_disk(
    root: &Path,
    opts: &ApplyOptions,
    cancel: &CancelFlag,
) -> Result<BTreeMap<String, u64>, TransportError> {
    match walk(root, &opts.walk, cancel) {
        Ok(w) => Ok(w.files.into_iter().map(|f| (f.rel, f.size)).collect()),
        Err(TransportError::WorkspaceNotFound(_)) => Ok(BTreeMap::new()),
        Err(e) => Err(e),
    }
}
