//! Review before apply: what applying a stored snapshot would do to the workspace, without
//! doing it. The snapshot is staged in a private temporary directory (never beside the
//! workspace, where a real apply stages and journals) and planned exactly as
//! [`super::apply_snapshot`] plans it (same baseline, conflict and refusal rules); the files
//! it would add, change and delete are listed, with a unified diff for text files (of a file
//! merged with local edits, a git result's, the diff from the local version to the merged
//! one: what the apply adds). The workspace is only read.

use std::fs;
use std::path::Path;

use super::apply::{stage_for_preview, ApplyOptions, ApplyReport, ApplyRequest};
use crate::archive::Layout;
use crate::cancel::CancelFlag;
use crate::error::TransportError;

/// How much a preview shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreviewLimits {
    /// Total bytes of unified diff text across all files; files past it are listed without
    /// their diff ([`Preview::truncated`]).
    pub max_diff_bytes: usize,
    /// Files larger than this (either side) are listed without a diff.
    pub max_file_bytes: u64,
}

impl Default for PreviewLimits {
    fn default() -> Self {
        PreviewLimits {
            max_diff_bytes: 256 * 1024,
            max_file_bytes: 1024 * 1024,
        }
    }
}

/// What applying a snapshot would do to one file.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// A file that does not exist in the workspace.
    Added,
    /// A file whose content or mode would change.
    Modified,
    /// A file that would be deleted.
    Deleted,
}

/// One file a snapshot would write or delete.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileChange {
    /// `resource/path`.
    pub path: String,
    /// Added, modified or deleted.
    pub change: ChangeKind,
    /// A unified diff (`--- a/…`, `+++ b/…`), for text files within the limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// Why there is no diff (binary, too large, over the preview's budget, mode only), and
    /// whether the file merges the executor's change with local edits ([`MERGED_NOTE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What applying a snapshot would do.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Preview {
    /// Files added, modified and deleted, by path.
    pub files: Vec<FileChange>,
    /// `resource/path` of local edits the snapshot would overwrite or delete: an apply
    /// refuses the whole snapshot while there are any (unless told to overwrite).
    pub conflicts: Vec<String>,
    /// `resource/path` of entries the apply would refuse (inside `.git/`, never shipped…).
    pub refused: Vec<String>,
    /// Resources the apply would not write (read-only, or absent from the snapshot).
    pub skipped_resources: Vec<String>,
    /// Files identical to what was shipped (left alone).
    pub unchanged: usize,
    /// `resource/path` of the files (also in [`Self::files`]) whose new content merges the
    /// executor's change with local edits made since the delegation started (a git result;
    /// their diff shows what the apply adds to the local version).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged: Vec<String>,
    /// Whether some diffs were left out to stay within [`PreviewLimits::max_diff_bytes`].
    pub truncated: bool,
}

/// The [`FileChange::note`] of a file whose new content merges the executor's change with
/// local edits.
pub const MERGED_NOTE: &str = "merged with local edits";

/// Previews `req` (see the module docs): the same request an apply takes, the workspace left
/// untouched.
pub fn preview_snapshot(
    req: ApplyRequest<'_>,
    opts: &ApplyOptions,
    limits: PreviewLimits,
    cancel: &CancelFlag,
) -> Result<Preview, TransportError> {
    let staging = tempfile::Builder::new()
        .prefix("awcp-preview-")
        .tempdir()
        .map_err(|e| TransportError::io("creating a preview directory", e))?;
    let mut report = ApplyReport::default();
    let (layout, roots) = stage_for_preview(req, opts, cancel, staging.path(), &mut report)?;
    let staged = |qualified: &str| {
        let (name, rel) = qualified.split_once('/')?;
        let base = staging.path().join("new");
        Some(match layout {
            Layout::Flat => base.join(rel),
            Layout::PerResource => base.join(name).join(rel),
        })
    };
    let local = |qualified: &str| {
        let (name, rel) = qualified.split_once('/')?;
        Some(roots.get(name)?.join(rel))
    };
    let mut budget = limits.max_diff_bytes;
    let mut preview = Preview {
        conflicts: report.conflicts,
        refused: report.refused,
        skipped_resources: report.skipped_resources,
        unchanged: report.unchanged,
        merged: report.merged,
        ..Preview::default()
    };
    let mut changes: Vec<(String, ChangeKind)> = report
        .written
        .into_iter()
        .map(|p| {
            let exists = local(&p).is_some_and(|l| fs::symlink_metadata(l).is_ok());
            let kind = if exists {
                ChangeKind::Modified
            } else {
                ChangeKind::Added
            };
            (p, kind)
        })
        .collect();
    changes.extend(report.deleted.into_iter().map(|p| (p, ChangeKind::Deleted)));
    changes.sort();
    for (path, change) in changes {
        cancel.check()?;
        let old = match change {
            ChangeKind::Added => None,
            ChangeKind::Modified | ChangeKind::Deleted => local(&path),
        };
        let new = match change {
            ChangeKind::Deleted => None,
            ChangeKind::Added | ChangeKind::Modified => staged(&path),
        };
        let (diff, note) = if budget == 0 {
            preview.truncated = true;
            (
                None,
                Some("diff left out: the preview's size limit was reached".into()),
            )
        } else {
            match unified(&path, old.as_deref(), new.as_deref(), limits.max_file_bytes) {
                Ok(d) if d.len() > budget => {
                    preview.truncated = true;
                    budget = 0;
                    (
                        None,
                        Some("diff left out: the preview's size limit was reached".into()),
                    )
                }
                Ok(d) if d.is_empty() => (None, Some("permissions only".into())),
                Ok(d) => {
                    budget -= d.len();
                    (Some(d), None)
                }
                Err(why) => (None, Some(why)),
            }
        };
        let note = if preview.merged.contains(&path) {
            Some(match note {
                Some(n) => format!("{MERGED_NOTE}; {n}"),
                None => MERGED_NOTE.to_owned(),
            })
        } else {
            note
        };
        preview.files.push(FileChange {
            path,
            change,
            diff,
            note,
        });
    }
    Ok(preview)
}

/// The text of a file for a diff: empty for a side that does not exist, or why there is no
/// diff (binary, too large, unreadable).
fn text_of(path: Option<&Path>, max: u64) -> Result<String, String> {
    let Some(path) = path else {
        return Ok(String::new());
    };
    let md = fs::symlink_metadata(path).map_err(|e| format!("cannot read: {e}"))?;
    if !md.is_file() {
        return Err("not a regular file".into());
    }
    if md.len() > max {
        return Err(format!("{} bytes: too large to show", md.len()));
    }
    let bytes = fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    if bytes.contains(&0) {
        return Err(format!("binary, {} bytes", bytes.len()));
    }
    String::from_utf8(bytes).map_err(|e| format!("binary, {} bytes", e.as_bytes().len()))
}

/// What kind of entry `path` is, in a person's words (`None` if it cannot be read).
fn kind_of(path: &Path) -> Option<&'static str> {
    let t = fs::symlink_metadata(path).ok()?.file_type();
    Some(if t.is_symlink() {
        "symbolic link"
    } else if t.is_dir() {
        "directory"
    } else if t.is_file() {
        "file"
    } else {
        "special file"
    })
}

/// A unified diff of `old` → `new` labelled with `path` (empty when the texts are equal).
fn unified(path: &str, old: Option<&Path>, new: Option<&Path>, max: u64) -> Result<String, String> {
    if let (Some(a), Some(b)) = (old.and_then(kind_of), new.and_then(kind_of)) {
        if a != b {
            return Err(format!("type change: {a} → {b}"));
        }
        if a == "symbolic link" {
            let target = |p: Option<&Path>| {
                p.and_then(|p| fs::read_link(p).ok())
                    .map_or_else(String::new, |t| t.display().to_string())
            };
            return Err(format!("symbolic link: {} → {}", target(old), target(new)));
        }
    }
    let a = text_of(old, max)?;
    let b = text_of(new, max)?;
    if a == b {
        return Ok(String::new());
    }
    let from = if old.is_some() {
        format!("a/{path}")
    } else {
        "/dev/null".to_owned()
    };
    let to = if new.is_some() {
        format!("b/{path}")
    } else {
        "/dev/null".to_owned()
    };
    Ok(similar::TextDiff::from_lines(&a, &b)
        .unified_diff()
        .context_radius(3)
        .header(&from, &to)
        .to_string())
}
