//! What a read-write executor may leave in the lent directory that is dangerous once the
//! delegation is over, checked after its sessions have ended:
//! - **set-id files**: SFTP lets the owner of a file set any mode, so an executor can upload a
//!   program and make it set-user-id (to the SFTP login user) or set-group-id. Set-id bits on
//!   regular files owned by the login user whose inode changed during the lease are removed.
//! - **set-gid or world-writable directories**: a directory the executor made `2777` lets
//!   anyone drop files (in its group) into the workspace afterwards; both bits are removed
//!   from directories of the login user changed during the lease.
//! - **escaping symlinks**: a link to `/`, `/etc/shadow` or `../../..` is harmless inside the
//!   jail (it resolves there) but points out of the workspace for whoever uses the directory
//!   afterwards. Links the executor created or changed that point outside are handled by
//!   [`EscapingSymlinks`].
//!
//! "Changed during the lease" is read from the inode's change time (`ctime`), which no user
//! can set. Subdirectories on other filesystems are skipped: a bind mount does not expose them.
//! The check runs once every session and connection of the delegation is gone, so nothing can
//! change the tree under it; a directory it cannot read is reported, never skipped silently.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// What to do, at release, with symlinks the executor created (or changed) in a read-write
/// resource that point outside it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EscapingSymlinks {
    /// Leave them and say nothing.
    Keep,
    /// Tell the user about each; remove the absolute ones (their target is never inside the
    /// workspace as the executor saw it). The default.
    #[default]
    Report,
    /// Remove each, and tell the user.
    Remove,
}

impl EscapingSymlinks {
    /// `keep`, `report` or `remove`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "keep" => Some(Self::Keep),
            "report" => Some(Self::Report),
            "remove" => Some(Self::Remove),
            _ => None,
        }
    }

    /// The name [`Self::parse`] reads.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Keep => "keep",
            Self::Report => "report",
            Self::Remove => "remove",
        }
    }
}

/// An inode change time: seconds and nanoseconds since the epoch.
pub(crate) type ChangeTime = (i64, i64);

/// The change time of `path` (the reference point "the lease began" is the change time of the
/// export's own directory, made at prepare: the kernel's clock, as the files' times are).
pub(crate) fn change_time(path: &Path) -> std::io::Result<ChangeTime> {
    let md = fs::symlink_metadata(path)?;
    Ok((md.ctime(), md.ctime_nsec()))
}

/// Checks one read-write resource (`root`, shown to the user as `name/…`) after the lease and
/// returns what the user should be told. Entries whose inode changed after `since` are the
/// executor's; `login_uid`: the SFTP login user (only its files can have been chmod-ed by the
/// executor).
pub(crate) fn inspect(
    name: &str,
    root: &Path,
    since: ChangeTime,
    login_uid: u32,
    policy: EscapingSymlinks,
) -> Vec<String> {
    let mut notes = Vec::new();
    let Ok(root_md) = fs::symlink_metadata(root) else {
        return notes;
    };
    let changed = |md: &fs::Metadata| (md.ctime(), md.ctime_nsec()) > since;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                // A directory the executor made unreadable hides what is below it: say so.
                let rel = dir.strip_prefix(root).unwrap_or(&dir).display().to_string();
                notes.push(format!(
                    "`{name}/{rel}` could not be checked for set-id files and escaping symlinks: {e}"
                ));
                continue;
            }
        };
        for e in rd.flatten() {
            let path = e.path();
            let Ok(md) = fs::symlink_metadata(&path) else {
                continue;
            };
            let rel = format!(
                "{name}/{}",
                path.strip_prefix(root).unwrap_or(&path).display()
            );
            let ft = md.file_type();
            if ft.is_dir() {
                let mode = md.permissions().mode();
                // A set-gid or world-writable directory the executor made: anyone could drop
                // files (in its group) into the workspace afterwards.
                if mode & 0o2002 != 0 && md.uid() == login_uid && changed(&md) {
                    let safe = mode & 0o7777 & !0o2002;
                    notes.push(match fs::set_permissions(&path, fs::Permissions::from_mode(safe)) {
                        Ok(()) => format!(
                            "removed the set-group-id and world-writable bits the executor set on directory `{rel}` (mode {:04o} → {safe:04o})",
                            mode & 0o7777
                        ),
                        Err(e) => format!(
                            "directory `{rel}` is set-group-id or world-writable by the executor (mode {:04o}) and could not be changed: {e}",
                            mode & 0o7777
                        ),
                    });
                }
                if md.dev() == root_md.dev() {
                    stack.push(path);
                }
            } else if ft.is_file() {
                let mode = md.permissions().mode();
                if mode & 0o6000 != 0 && md.uid() == login_uid && changed(&md) {
                    let safe = mode & 0o7777 & !0o6000;
                    match fs::set_permissions(&path, fs::Permissions::from_mode(safe)) {
                        Ok(()) => notes.push(format!(
                            "removed the set-id bits the executor set on `{rel}` (mode {:04o} → {safe:04o})",
                            mode & 0o7777
                        )),
                        Err(e) => notes.push(format!(
                            "`{rel}` has set-id bits set by the executor (mode {:04o}) that could not be removed: {e}",
                            mode & 0o7777
                        )),
                    }
                }
            } else if ft.is_symlink() && policy != EscapingSymlinks::Keep && changed(&md) {
                let Ok(target) = fs::read_link(&path) else {
                    continue;
                };
                let absolute = target.is_absolute();
                if !absolute && !escapes(root, &path, &target) {
                    continue;
                }
                let remove = absolute || policy == EscapingSymlinks::Remove;
                let what = format!(
                    "symlink `{rel}` → `{}` created by the executor points outside the workspace",
                    target.display()
                );
                notes.push(if !remove {
                    format!("{what} (kept)")
                } else {
                    match fs::remove_file(&path) {
                        Ok(()) => format!("{what}: removed"),
                        Err(e) => format!("{what}; removing it failed: {e}"),
                    }
                });
            }
        }
    }
    notes.sort();
    notes
}

/// Whether the relative symlink `link` → `target` leads outside `root`: resolved one
/// component at a time, following the links on the way (a path that does not exist further
/// down stays where it is), so `..` above the root and hops through other escaping links
/// both count.
fn escapes(root: &Path, link: &Path, target: &Path) -> bool {
    let Ok(rel_dir) = link.parent().unwrap_or(root).strip_prefix(root) else {
        return true;
    };
    let mut cur = root.join(rel_dir);
    let mut pending: std::collections::VecDeque<PathBuf> = target
        .components()
        .map(|c| PathBuf::from(c.as_os_str()))
        .collect();
    let mut hops = 0;
    while let Some(c) = pending.pop_front() {
        match c.components().next() {
            None | Some(Component::CurDir) => {}
            Some(Component::ParentDir) => {
                cur.pop();
                if !cur.starts_with(root) {
                    return true;
                }
            }
            Some(Component::RootDir) | Some(Component::Prefix(_)) => return true,
            Some(Component::Normal(n)) => {
                cur.push(n);
                let is_link = fs::symlink_metadata(&cur).is_ok_and(|m| m.file_type().is_symlink());
                if is_link {
                    hops += 1;
                    let Ok(next) = fs::read_link(&cur) else {
                        return false;
                    };
                    if hops > 40 {
                        // A loop: it leads nowhere.
                        return false;
                    }
                    cur.pop();
                    for c in next.components().rev() {
                        pending.push_front(PathBuf::from(c.as_os_str()));
                    }
                }
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn uid() -> u32 {
        fs::metadata("/proc/self").unwrap().uid()
    }

    #[test]
    fn set_id_bits_of_changed_files_are_removed() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("tool");
        fs::write(&f, "x").unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o6755)).unwrap();
        // Changed before the lease: left alone.
        let notes = inspect(
            "w",
            d.path(),
            (i64::MAX, 0),
            uid(),
            EscapingSymlinks::Report,
        );
        assert!(notes.is_empty(), "{notes:?}");
        // During the lease, by the login user: stripped. By another user: left alone.
        assert!(inspect("w", d.path(), (0, 0), uid() + 1, EscapingSymlinks::Report).is_empty());
        let notes = inspect("w", d.path(), (0, 0), uid(), EscapingSymlinks::Report);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("`w/tool`") && notes[0].contains("6755 → 0755"));
        assert_eq!(
            fs::metadata(&f).unwrap().permissions().mode() & 0o7777,
            0o755
        );
    }

    #[test]
    fn set_gid_and_world_writable_directories_of_the_lease_are_fixed() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("drop");
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o2777)).unwrap();
        let notes = inspect("w", d.path(), (0, 0), uid(), EscapingSymlinks::Report);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("`w/drop`") && notes[0].contains("2777 → 0775"));
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o7777,
            0o775
        );
    }

    #[test]
    fn escaping_symlinks_follow_the_policy() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().join("ws");
        fs::create_dir_all(r.join("sub/inner")).unwrap();
        fs::write(r.join("a.txt"), "a").unwrap();
        symlink("/etc/shadow", r.join("shadow")).unwrap();
        symlink("../../..", r.join("sub/up")).unwrap();
        symlink("../a.txt", r.join("sub/ok")).unwrap();
        symlink("inner/../../a.txt", r.join("sub/ok2")).unwrap();
        symlink("missing", r.join("dangling")).unwrap();
        // `hop` stays inside lexically but leads out through `sub/up`.
        symlink("sub/up/etc", r.join("hop")).unwrap();

        let keep = inspect("ws", &r, (0, 0), uid(), EscapingSymlinks::Keep);
        assert!(keep.is_empty(), "{keep:?}");

        let notes = inspect("ws", &r, (0, 0), uid(), EscapingSymlinks::Report);
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(notes
            .iter()
            .any(|n| n.contains("`ws/shadow`") && n.ends_with("removed")));
        assert!(notes
            .iter()
            .any(|n| n.contains("`ws/sub/up`") && n.ends_with("(kept)")));
        assert!(notes
            .iter()
            .any(|n| n.contains("`ws/hop`") && n.ends_with("(kept)")));
        assert!(fs::symlink_metadata(r.join("shadow")).is_err());
        assert!(fs::symlink_metadata(r.join("sub/up")).is_ok());
        assert!(fs::symlink_metadata(r.join("sub/ok")).is_ok());

        fs::remove_file(r.join("hop")).unwrap();
        let notes = inspect("ws", &r, (0, 0), uid(), EscapingSymlinks::Remove);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("`ws/sub/up`") && notes[0].ends_with("removed"));
        assert!(fs::symlink_metadata(r.join("sub/up")).is_err());
        assert!(fs::symlink_metadata(r.join("sub/ok2")).is_ok());
        assert!(fs::symlink_metadata(r.join("dangling")).is_ok());
    }

    #[test]
    fn policy_names() {
        for p in [
            EscapingSymlinks::Keep,
            EscapingSymlinks::Report,
            EscapingSymlinks::Remove,
        ] {
            assert_eq!(EscapingSymlinks::parse(p.as_str()), Some(p));
        }
        assert_eq!(EscapingSymlinks::parse("nope"), None);
    }
}
