//! Delegator side: all-or-nothing snapshot apply with local-edit conflict detection.
//!
//! The snapshot is extracted (hardened, see [`mod@crate::archive::extract`]) into a staging
//! directory next to the resource (same filesystem), checked against the baseline manifest
//! recorded at prepare time, then swapped into place under a journal
//! (see [`super::journal`]). Only `rw` resources of an `rw` delegation are written. Deletions
//! are propagated (delta `deleted` list, or for full snapshots: shipped files missing from the
//! snapshot), but a file the delegator never shipped is never deleted. Paths inside skipped
//! directories (`.git/`, `node_modules/`) and `.awcp/` are never written. Nothing is written
//! through a symlink. A file of a delta the delegator built itself (a git result) that it
//! merged with a local edit is checked against the local version merged instead of the
//! baseline ([`ApplyRequest::built_here`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use awcp_proto::AccessMode;

use super::capture::SnapshotKind;
use super::journal::{commit, recover, Journal, JournalOp, JournalState};
use crate::archive::{detect_layout, open_verified, ArchiveSource, Layout};
use crate::cancel::CancelFlag;
use crate::error::TransportError;
use crate::manifest::{hash_file, Manifest};
use crate::scan::ResourceSpec;
use crate::walk::walk;
use std::os::unix::fs::PermissionsExt;

mod files;
mod recovery;
mod types;

use files::{
    ancestors, current_entry, dir_changes, first_parent, move_tree, parent_unsafe, same_mode,
};
use recovery::side_dir;
pub use recovery::{apply_dir, close_apply, recover_interrupted};
pub use types::{
    changed_total, ApplyOptions, ApplyReport, ApplyRequest, ConflictPolicy, CrashPoint,
    CHANGED_SHOWN,
};

fn is_writable(r: &ResourceSpec, mode: AccessMode) -> bool {
    r.mode == AccessMode::Rw && mode == AccessMode::Rw
}

/// Applies a snapshot. All-or-nothing: on any error before the swap phase the workspace is
/// untouched; a crash during the swap is finished by [`super::journal::recover`].
pub fn apply_snapshot(
    mut req: ApplyRequest<'_>,
    opts: &ApplyOptions,
    cancel: &CancelFlag,
) -> Result<ApplyReport, TransportError> {
    let source = std::mem::replace(&mut req.source, ArchiveSource::Bytes(&[]));
    let mut report = ApplyReport::default();
    let Some((writable, roots)) = writable_roots(&req, &mut report)? else {
        return Ok(report);
    };
    let first_root = roots[writable[0].name.as_str()].clone();
    let dir = apply_dir(&first_root, req.delegation_id);
    // A leftover from a crash: finish it first.
    recover(&dir)?;
    fs::create_dir(&dir).map_err(|e| TransportError::io("creating staging directory", e))?;
    // Staging directories beside other resources are recorded up front so a crash while
    // staging is rolled back completely by recover(). Without them there is nothing to record:
    // recover() removes a journal-less apply directory.
    let first_parent = first_root.parent().map(Path::to_path_buf);
    let side_dirs: Vec<PathBuf> = roots
        .values()
        .filter(|r| r.parent().map(Path::to_path_buf) != first_parent)
        .map(|r| side_dir(r, req.delegation_id))
        .collect();
    if !side_dirs.is_empty() {
        Journal {
            version: 1,
            delegation_id: req.delegation_id.to_owned(),
            state: JournalState::Prepared,
            ops: Vec::new(),
            cleanup: side_dirs,
        }
        .save(&dir)?;
    }
    let result = stage_and_commit(
        &req,
        source,
        opts,
        cancel,
        &dir,
        &writable,
        &roots,
        &mut report,
        false,
    );
    match result {
        Ok(_) => Ok(report),
        Err(TransportError::InjectedCrash(p)) => Err(TransportError::InjectedCrash(p)),
        Err(e) => {
            // Only reached before the swap began or if a rename failed; in the latter case
            // the journal lets recover() finish it, so keep the directory.
            match Journal::load(&dir) {
                Ok(Some(j)) if j.state != JournalState::Prepared => {}
                _ => {
                    let _ = fs::remove_dir_all(&dir);
                    for r in &writable {
                        let _ = fs::remove_dir_all(side_dir(
                            &roots[r.name.as_str()],
                            req.delegation_id,
                        ));
                    }
                }
            }
            Err(e)
        }
    }
}

/// The resources an apply writes (`rw` in an `rw` delegation) and their canonical roots;
/// `None` when there are none (the others are listed as skipped in `report`).
#[allow(clippy::type_complexity)]
fn writable_roots<'r>(
    req: &ApplyRequest<'r>,
    report: &mut ApplyReport,
) -> Result<Option<(Vec<&'r ResourceSpec>, BTreeMap<String, PathBuf>)>, TransportError> {
    let writable: Vec<&ResourceSpec> = req
        .resources
        .iter()
        .filter(|r| is_writable(r, req.access_mode))
        .collect();
    for r in req.resources {
        if !is_writable(r, req.access_mode) {
            report.skipped_resources.push(r.name.to_string());
        }
    }
    if writable.is_empty() {
        return Ok(None);
    }
    if crate::id_is_unsafe(req.delegation_id) {
        return Err(TransportError::Unsupported("invalid delegation id".into()));
    }
    let mut roots = BTreeMap::new();
    for r in &writable {
        let root = fs::canonicalize(&r.source_path)
            .map_err(|_| TransportError::WorkspaceNotFound(r.name.to_string()))?;
        roots.insert(r.name.to_string(), root);
    }
    Ok(Some((writable, roots)))
}

/// Stages `req`'s snapshot in `dir` (a directory of the caller's, anywhere) and plans the
/// apply without changing the workspace: `report` says what would be written, deleted,
/// refused and which local edits conflict. Returns the layout, to find the staged files
/// (`dir/new[/resource]/path`).
pub(super) fn stage_for_preview(
    mut req: ApplyRequest<'_>,
    opts: &ApplyOptions,
    cancel: &CancelFlag,
    dir: &Path,
    report: &mut ApplyReport,
) -> Result<(Layout, BTreeMap<String, PathBuf>), TransportError> {
    let source = std::mem::replace(&mut req.source, ArchiveSource::Bytes(&[]));
    let Some((writable, roots)) = writable_roots(&req, report)? else {
        return Ok((Layout::PerResource, BTreeMap::new()));
    };
    let layout = stage_and_commit(
        &req, source, opts, cancel, dir, &writable, &roots, report, true,
    )?;
    Ok((layout, roots))
}

#[allow(clippy::too_many_arguments)]
fn stage_and_commit(
    req: &ApplyRequest<'_>,
    source: ArchiveSource<'_>,
    opts: &ApplyOptions,
    cancel: &CancelFlag,
    dir: &Path,
    writable: &[&ResourceSpec],
    roots: &BTreeMap<String, PathBuf>,
    report: &mut ApplyReport,
    preview: bool,
) -> Result<Layout, TransportError> {
    let staged_root = dir.join("new");
    fs::create_dir(&staged_root)
        .map_err(|e| TransportError::io("creating staging directory", e))?;
    let opened = open_verified(
        source,
        req.expected_checksum,
        dir,
        opts.limits.max_total_bytes,
        cancel,
    )?;
    let ex = opened.extract(&staged_root, &opts.limits, cancel)?;
    report.dropped = ex.skipped.clone();
    report.kind = if ex.delta.is_some() {
        SnapshotKind::Delta
    } else {
        SnapshotKind::Full
    };
    let names: Vec<&str> = req.resources.iter().map(|r| r.name.as_str()).collect();
    let layout = req
        .layout
        .unwrap_or_else(|| detect_layout(&ex.top_level, &names));
    if layout == Layout::Flat && req.resources.len() != 1 && !ex.top_level.is_empty() {
        return Err(TransportError::BadArchive(
            "flat snapshot layout but the delegation has several resources".into(),
        ));
    }
    if let Some(limits) = &req.limits {
        let projected = super::limits::projected_stats(req, &ex, layout, opts, cancel)?;
        awcp_proto::result_verdict(&projected, limits).map_err(TransportError::Refused)?;
    }
    let prefix_of = |name: &str| -> String {
        match layout {
            Layout::Flat => String::new(),
            Layout::PerResource => format!("{name}/"),
        }
    };
    // The files of a delta this delegator built that it merged with a local version: archive
    // name → SHA-256 of that version.
    let no_merges = BTreeMap::new();
    let merged = match &ex.delta {
        Some(d) if req.built_here => &d.merged,
        _ => &no_merges,
    };

    // Deletions run before writes: a file the result turns into a directory must be out of
    // the way before anything is written under it.
    let mut del_ops = Vec::new();
    let mut ops = Vec::new();
    let mut conflicts = Vec::new();
    // Conflicts no policy overrides: what a type change would destroy that was never shipped
    // or is not a plain file.
    let mut hard_conflicts = false;
    let mut cleanup = Vec::new();
    let mut deleted_paths = Vec::new();
    for r in writable {
        cancel.check()?;
        let name = r.name.as_str();
        let root = &roots[name];
        let prefix = prefix_of(name);
        if layout == Layout::PerResource && !ex.top_level.contains(name) {
            report.skipped_resources.push(name.to_owned());
            continue;
        }
        let base = req.baseline.and_then(|b| b.resources.get(name));
        // Staged files for this resource, and where they are.
        let files: BTreeMap<&str, &crate::archive::ExtractedFile> = ex
            .files
            .iter()
            .filter_map(|f| f.name.strip_prefix(prefix.as_str()).map(|rel| (rel, f)))
            .filter(|(rel, _)| !rel.is_empty())
            .collect();
        let (res_stage, backup_root) = {
            let rel_stage = if prefix.is_empty() {
                staged_root.clone()
            } else {
                staged_root.join(name)
            };
            if preview || root.parent() == first_parent(roots, writable) {
                (rel_stage, dir.join("backup").join(name))
            } else {
                let sd = side_dir(root, req.delegation_id);
                let _ = fs::remove_dir_all(&sd);
                if rel_stage.exists() {
                    move_tree(&rel_stage, &sd.join("new"))?;
                }
                cleanup.push(sd.clone());
                (sd.join("new"), sd.join("backup"))
            }
        };
        let qual = |rel: &str| format!("{name}/{rel}");
        // What the result deletes: the delta's list, or (full snapshot) every shipped file it
        // lacks; without a baseline, every local file it lacks.
        let dels: Vec<String> = match &ex.delta {
            Some(d) => d
                .deleted
                .iter()
                .filter_map(|p| p.strip_prefix(prefix.as_str()).map(str::to_owned))
                .collect(),
            None => match base {
                Some(m) => m
                    .files
                    .keys()
                    .filter(|k| !files.contains_key(k.as_str()))
                    .cloned()
                    .collect(),
                None => walk(root, &opts.walk, cancel)?
                    .files
                    .into_iter()
                    .map(|e| e.rel)
                    .filter(|k| !files.contains_key(k.as_str()))
                    .collect(),
            },
        };
        let deleted_by_result: BTreeSet<&str> = dels.iter().map(String::as_str).collect();
        // Local directories the result replaces by a file, and local files it replaces by a
        // directory (type changes): moved aside whole, in one journalled rename each.
        let mut replaced_dirs: Vec<String> = Vec::new();
        let mut replaced_files: BTreeSet<String> = BTreeSet::new();

        for (rel, f) in &files {
            if opts.walk.is_excluded(rel) {
                report.refused.push(qual(rel));
                continue;
            }
            // A parent that is a file locally: a file -> directory type change, if the result
            // deletes that file and it is unchanged since it was shipped.
            let mut blocked = false;
            for p in ancestors(rel) {
                if replaced_files.contains(p) {
                    break;
                }
                let Ok(md) = fs::symlink_metadata(root.join(p)) else {
                    break;
                };
                if md.is_dir() {
                    continue;
                }
                if md.file_type().is_symlink() {
                    return Err(TransportError::SymlinkInPath(qual(p)));
                }
                let shipped_unchanged = match (md.is_file(), base.and_then(|m| m.files.get(p))) {
                    (true, Some(rec)) => current_entry(root, p)
                        .map(|(e, _)| Manifest::matches(rec, &e))
                        .transpose()?
                        .unwrap_or(false),
                    _ => false,
                };
                if deleted_by_result.contains(p) && shipped_unchanged {
                    replaced_files.insert(p.to_owned());
                } else if deleted_by_result.contains(p)
                    && md.is_file()
                    && opts.on_conflict == ConflictPolicy::Overwrite
                    && base.is_some_and(|m| m.files.contains_key(p))
                {
                    conflicts.push(qual(p));
                    replaced_files.insert(p.to_owned());
                } else {
                    conflicts.push(qual(p));
                    hard_conflicts = true;
                    blocked = true;
                }
                break;
            }
            if blocked {
                continue;
            }
            let rec = base.and_then(|m| m.files.get(*rel));
            let merged_with = merged.get(f.name.as_str());
            if let (Some(rec), None) = (rec, merged_with) {
                if rec.sha256 == f.sha256 && same_mode(rec.mode, f) {
                    report.unchanged += 1;
                    continue;
                }
            }
            let cur = current_entry(root, rel);
            if let Some((_, md)) = &cur {
                if md.is_dir() {
                    // A directory -> file type change: only over a directory that holds
                    // nothing but shipped, unchanged files.
                    let found = dir_changes(root, rel, base)?;
                    if found.is_empty() {
                        replaced_dirs.push((*rel).to_owned());
                    } else {
                        conflicts.extend(found.iter().map(|p| qual(p)));
                        hard_conflicts = true;
                        continue;
                    }
                    ops.push(JournalOp {
                        target: root.join(rel),
                        staged: Some(res_stage.join(rel)),
                        backup: backup_root.join(rel),
                    });
                    report.written.push(qual(rel));
                    continue;
                }
            }
            let conflict = if let Some(local) = merged_with {
                // Merged with a local version when the delta was built: that version must
                // still be there; any other is an edit made since, a conflict.
                match &cur {
                    Some((e, md)) if md.is_file() => {
                        let now = hash_file(&e.path).ok();
                        if now.as_deref() == Some(f.sha256.as_str()) && same_mode(e.mode, f) {
                            report.unchanged += 1;
                            continue;
                        }
                        now.as_deref() != Some(local.as_str())
                    }
                    _ => true,
                }
            } else {
                match (rec, &cur) {
                    (Some(_), None) => true,
                    (Some(rec), Some((e, md))) => {
                        if !md.is_file() {
                            true
                        } else if Manifest::matches(rec, e)? {
                            false
                        } else if hash_file(&e.path).ok().as_deref() == Some(&f.sha256)
                            && same_mode(e.mode, f)
                        {
                            // Changed locally to exactly what the executor produced.
                            report.unchanged += 1;
                            continue;
                        } else {
                            true
                        }
                    }
                    (None, None) => false,
                    (None, Some((e, md))) => {
                        if md.is_file() && hash_file(&e.path).ok().as_deref() == Some(&f.sha256) {
                            if same_mode(e.mode, f) {
                                report.unchanged += 1;
                                continue;
                            }
                            false
                        } else {
                            base.is_some() || !md.is_file()
                        }
                    }
                }
            };
            if conflict {
                conflicts.push(qual(rel));
                if opts.on_conflict == ConflictPolicy::Refuse {
                    continue;
                }
            } else if merged_with.is_some() {
                report.merged.push(qual(rel));
            }
            if !f.has_mode {
                // The archive carries no permission bits: keep the local file's.
                if let Some((e, _)) = &cur {
                    let _ = fs::set_permissions(
                        res_stage.join(rel),
                        fs::Permissions::from_mode(e.mode & 0o777),
                    );
                }
            }
            ops.push(JournalOp {
                target: root.join(rel),
                staged: Some(res_stage.join(rel)),
                backup: backup_root.join(rel),
            });
            report.written.push(qual(rel));
        }

        // Deletions.
        let under_replaced = |rel: &str| {
            replaced_dirs.iter().any(|d| {
                rel.strip_prefix(d.as_str())
                    .is_some_and(|r| r.starts_with('/'))
            })
        };
        for rel in dels {
            if rel.is_empty() || opts.walk.is_excluded(&rel) {
                report.refused.push(qual(&rel));
                continue;
            }
            if under_replaced(&rel) {
                // Moved aside with its directory.
                report.deleted.push(qual(&rel));
                continue;
            }
            if replaced_files.contains(&rel) {
                del_ops.push(JournalOp {
                    target: root.join(&rel),
                    staged: None,
                    backup: backup_root.join(&rel),
                });
                report.deleted.push(qual(&rel));
                continue;
            }
            if parent_unsafe(root, &rel).is_some() {
                report.refused.push(qual(&rel));
                continue;
            }
            let Some((e, md)) = current_entry(root, &rel) else {
                continue;
            };
            if md.is_dir() && files.keys().any(|k| k.starts_with(&format!("{rel}/"))) {
                // Already the directory the result makes of it (a re-apply).
                continue;
            }
            let rec = base.and_then(|m| m.files.get(&rel));
            match (base, rec) {
                (Some(_), None) => {
                    // Never shipped: never deleted.
                    report.refused.push(qual(&rel));
                    continue;
                }
                (_, Some(rec)) => {
                    if !md.is_file() || !Manifest::matches(rec, &e)? {
                        conflicts.push(qual(&rel));
                        if opts.on_conflict == ConflictPolicy::Refuse || md.is_dir() {
                            continue;
                        }
                    }
                }
                (None, None) => {
                    if md.is_dir() {
                        continue;
                    }
                }
            }
            del_ops.push(JournalOp {
                target: root.join(&rel),
                staged: None,
                backup: backup_root.join(&rel),
            });
            deleted_paths.push(root.join(&rel));
            report.deleted.push(qual(&rel));
        }
    }
    del_ops.append(&mut ops);
    let ops = del_ops;
    if preview {
        conflicts.sort();
        conflicts.dedup();
        report.conflicts = conflicts;
        return Ok(layout);
    }
    if !conflicts.is_empty() && (opts.on_conflict == ConflictPolicy::Refuse || hard_conflicts) {
        conflicts.sort();
        conflicts.dedup();
        return Err(TransportError::Conflict { paths: conflicts });
    }
    cancel.check()?;

    let mut journal = Journal {
        version: 1,
        delegation_id: req.delegation_id.to_owned(),
        state: JournalState::Prepared,
        ops,
        cleanup,
    };
    if journal.ops.is_empty() {
        // Nothing to swap (an empty delta, or only unchanged files): drop the staging as the
        // recovery of a prepared journal would, without the commit's journal writes.
        super::journal::cleanup(dir, &journal);
        return Ok(layout);
    }
    // Not synced: until `committing` (synced, after the staged files) the workspace is
    // untouched, and a recovery that finds this journal, or none, rolls back.
    journal.write(dir, false)?;
    if opts.crash == Some(CrashPoint::AfterStaging) {
        return Err(TransportError::InjectedCrash("after staging"));
    }
    let crash_after = match opts.crash {
        Some(CrashPoint::AfterOps(n)) => Some(n),
        _ => None,
    };
    commit(dir, &mut journal, crash_after, req.keep_proof)?;

    // Best effort: remove directories left empty by deletions.
    let stop: BTreeSet<&PathBuf> = roots.values().collect();
    for p in deleted_paths {
        let mut cur = p.parent().map(Path::to_path_buf);
        while let Some(d) = cur {
            if stop.contains(&d) || fs::remove_dir(&d).is_err() {
                break;
            }
            cur = d.parent().map(Path::to_path_buf);
        }
    }
    Ok(layout)
}
