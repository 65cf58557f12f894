//! The filesystem reads and moves of an apply.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::TransportError;
use crate::manifest::Manifest;
use crate::scan::ResourceSpec;
use crate::walk::{mtime_ns, WalkEntry};

/// Moves a tree, by rename or (across filesystems) copy-then-remove.
pub(super) fn move_tree(from: &Path, to: &Path) -> Result<(), TransportError> {
    if let Some(p) = to.parent() {
        fs::create_dir_all(p).map_err(|e| TransportError::io("creating staging directory", e))?;
    }
    if fs::rename(from, to).is_ok() {
        return Ok(());
    }
    copy_tree(from, to)?;
    fs::remove_dir_all(from).map_err(|e| TransportError::io("removing staged copy", e))
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), TransportError> {
    fs::create_dir_all(to).map_err(|e| TransportError::io("copying staged tree", e))?;
    for e in fs::read_dir(from).map_err(|e| TransportError::io("copying staged tree", e))? {
        let e = e.map_err(|e| TransportError::io("copying staged tree", e))?;
        let ft = e
            .file_type()
            .map_err(|e| TransportError::io("copying staged tree", e))?;
        let dst = to.join(e.file_name());
        if ft.is_dir() {
            copy_tree(&e.path(), &dst)?;
        } else if ft.is_file() {
            fs::copy(e.path(), &dst).map_err(|e| TransportError::io("copying staged tree", e))?;
        }
    }
    Ok(())
}

pub(super) fn current_entry(root: &Path, rel: &str) -> Option<(WalkEntry, fs::Metadata)> {
    let path = root.join(rel);
    let md = fs::symlink_metadata(&path).ok()?;
    Some((
        WalkEntry {
            rel: rel.to_owned(),
            path,
            size: md.len(),
            mode: md.permissions().mode() & 0o7777,
            mtime_ns: mtime_ns(&md),
        },
        md,
    ))
}

/// Whether any parent directory of `rel` under `root` is a symlink or not a directory.
pub(super) fn parent_unsafe(root: &Path, rel: &str) -> Option<String> {
    let parts: Vec<&str> = rel.split('/').collect();
    let mut cur = root.to_path_buf();
    for (i, p) in parts[..parts.len() - 1].iter().enumerate() {
        cur.push(p);
        match fs::symlink_metadata(&cur) {
            Ok(md) if md.is_dir() => {}
            Ok(_) => return Some(parts[..=i].join("/")),
            Err(_) => return None,
        }
    }
    None
}

/// Whether a staged file has the permission bits of `mode` (always, when the archive carried
/// none: the local bits are kept).
pub(super) fn same_mode(mode: u32, f: &crate::archive::ExtractedFile) -> bool {
    !f.has_mode || (mode & 0o777) == (f.mode & 0o777)
}

/// The proper ancestors of `rel`, shortest first (`a`, `a/b` for `a/b/c`).
pub(super) fn ancestors(rel: &str) -> impl Iterator<Item = &str> {
    rel.match_indices('/').map(move |(i, _)| &rel[..i])
}

/// What in the local directory `rel` is not a shipped, unchanged file (relative paths): a
/// directory the result replaces by a file must hold nothing else. Without a baseline nothing
/// can be told apart, so everything in it counts.
pub(super) fn dir_changes(
    root: &Path,
    rel: &str,
    base: Option<&Manifest>,
) -> Result<Vec<String>, TransportError> {
    let mut out = Vec::new();
    let mut stack = vec![rel.to_owned()];
    while let Some(d) = stack.pop() {
        let rd = fs::read_dir(root.join(&d))
            .map_err(|e| TransportError::io(format!("reading `{d}`"), e))?;
        for entry in rd {
            let entry = entry.map_err(|e| TransportError::io(format!("reading `{d}`"), e))?;
            let child = format!("{d}/{}", entry.file_name().to_string_lossy());
            let ft = entry
                .file_type()
                .map_err(|e| TransportError::io(format!("reading `{child}`"), e))?;
            if ft.is_dir() {
                stack.push(child);
                continue;
            }
            let unchanged = match (ft.is_file(), base.and_then(|m| m.files.get(&child))) {
                (true, Some(rec)) => current_entry(root, &child)
                    .map(|(e, _)| Manifest::matches(rec, &e))
                    .transpose()?
                    .unwrap_or(false),
                _ => false,
            };
            if !unchanged {
                out.push(child);
            }
        }
    }
    out.sort();
    Ok(out)
}

pub(super) fn first_parent<'a>(
    roots: &'a BTreeMap<String, PathBuf>,
    writable: &[&ResourceSpec],
) -> Option<&'a Path> {
    roots[writable[0].name.as_str()].parent()
}
