//! The one workspace walker shared by admission, packing, capture and apply, so that what
//! admission counts is exactly what the archive ships.
//!
//! Rules:
//! - only regular files are shipped; directories are implied by their files (empty
//!   directories are not shipped);
//! - directories named in [`WalkOptions::skip_dirs`] (`node_modules`, `.git` by default) are
//!   neither counted nor shipped, at any depth; the top-level `.awcp/` directory is reserved
//!   for protocol metadata and always skipped;
//! - `.gitignore` and `.awcpignore` files inside the workspace are honoured (ignore files above
//!   the workspace root are not read, so the result never depends on where it lives);
//! - symlinks are never followed and never shipped. A symlink that resolves outside the
//!   workspace is refused under [`SymlinkPolicy::RefuseOutside`] and skipped under
//!   [`SymlinkPolicy::Skip`]; symlinks that stay inside are skipped (the file they point to is
//!   shipped under its own name anyway). Skipped symlinks are reported.
//! - FIFOs, sockets and device files are skipped and reported.
//! - With [`WalkOptions::report_ignored`], the entries left out by ignore files and the skipped
//!   directories are reported too (the top-most ones: an ignored directory is reported, not
//!   its contents).

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ignore::{WalkBuilder, WalkState};

use crate::cancel::CancelFlag;
use crate::error::TransportError;

/// Name of the per-workspace ignore file (gitignore syntax).
pub const AWCP_IGNORE_FILE: &str = ".awcpignore";
/// The reserved top-level metadata directory.
pub const AWCP_DIR: &str = ".awcp";

/// What to do with a symlink that resolves outside the workspace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SymlinkPolicy {
    /// Skip it (and report it in [`WalkResult::skipped_symlinks`]).
    #[default]
    Skip,
    /// Fail the walk with [`TransportError::WorkspaceInvalid`].
    RefuseOutside,
}

/// How to walk a workspace.
#[derive(Clone, Debug)]
pub struct WalkOptions {
    /// Directory names skipped at any depth.
    pub skip_dirs: Vec<String>,
    /// Honour `.gitignore` and `.awcpignore` files.
    pub honour_ignore_files: bool,
    /// Symlinks pointing outside the workspace.
    pub symlinks: SymlinkPolicy,
    /// Walker threads; 0 picks a default from the machine.
    pub threads: usize,
    /// Also report what ignore files and [`WalkOptions::skip_dirs`] left out
    /// ([`WalkResult::ignored`], [`WalkResult::skipped_dirs`]); costs one directory listing
    /// per directory. Admission sets it, packing and capture do not need it.
    pub report_ignored: bool,
}

impl Default for WalkOptions {
    fn default() -> Self {
        WalkOptions {
            skip_dirs: vec!["node_modules".into(), ".git".into()],
            honour_ignore_files: true,
            symlinks: SymlinkPolicy::Skip,
            threads: 0,
            report_ignored: false,
        }
    }
}

impl WalkOptions {
    /// Whether a relative path (`/`-separated) lies in a skipped or reserved directory.
    pub fn is_excluded(&self, rel: &str) -> bool {
        let mut parts = rel.split('/').peekable();
        let mut first = true;
        while let Some(p) = parts.next() {
            let is_dir_component = parts.peek().is_some();
            if is_dir_component && (first && p == AWCP_DIR || self.skip_dirs.iter().any(|d| d == p))
            {
                return true;
            }
            first = false;
        }
        false
    }
}

/// One regular file the walk found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalkEntry {
    /// Path relative to the workspace root, `/`-separated.
    pub rel: String,
    /// Absolute path on this machine (never put on the wire).
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (`0o7777` mask).
    pub mode: u32,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
}

/// The files of a workspace, sorted by relative path.
#[derive(Clone, Debug, Default)]
pub struct WalkResult {
    /// Regular files, sorted by [`WalkEntry::rel`].
    pub files: Vec<WalkEntry>,
    /// Relative paths of symlinks that were skipped.
    pub skipped_symlinks: Vec<String>,
    /// Relative paths of FIFOs, sockets and devices that were skipped.
    pub skipped_special: Vec<String>,
    /// With [`WalkOptions::report_ignored`]: relative paths left out by `.awcpignore` or
    /// `.gitignore` (directories end with `/`).
    pub ignored: Vec<String>,
    /// With [`WalkOptions::report_ignored`]: directories skipped by name
    /// ([`WalkOptions::skip_dirs`]), ending with `/`.
    pub skipped_dirs: Vec<String>,
}

impl WalkResult {
    /// Sum of file sizes.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// Modification time of a metadata record in nanoseconds.
pub(crate) fn mtime_ns(md: &fs::Metadata) -> i64 {
    ns_since_epoch(md.mtime(), md.mtime_nsec())
}

/// Seconds and nanoseconds as one count of nanoseconds (saturating), the form records keep.
fn ns_since_epoch(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}

/// Entries walked on the calling thread before a walk switches to the parallel walker.
const SEQUENTIAL_LIMIT: usize = 2000;

/// Walks `root` (a directory; a symlink at the root itself is resolved once).
pub fn walk(
    root: &Path,
    opts: &WalkOptions,
    cancel: &CancelFlag,
) -> Result<WalkResult, TransportError> {
    let root = fs::canonicalize(root).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            TransportError::WorkspaceNotFound(display_name(root))
        } else {
            TransportError::io("resolving workspace root", e)
        }
    })?;
    if root.parent().is_none() {
        return Err(TransportError::WorkspaceInvalid(
            "`/` is the filesystem root, not a project directory: lend the directory of the \
             project instead"
                .into(),
        ));
    }
    let md = fs::metadata(&root).map_err(|e| TransportError::io("reading workspace root", e))?;
    if !md.is_dir() {
        return Err(TransportError::WorkspaceInvalid(format!(
            "`{}` is not a directory",
            display_name(&root)
        )));
    }

    let skip = opts.skip_dirs.clone();
    let mut builder = WalkBuilder::new(&root);
    builder
        .hidden(false)
        .parents(false)
        .ignore(false)
        .git_global(false)
        .git_exclude(false)
        .require_git(false)
        .git_ignore(opts.honour_ignore_files)
        .follow_links(false)
        .threads(opts.threads)
        .filter_entry(move |e| {
            let is_dir = e.file_type().is_some_and(|t| t.is_dir());
            if !is_dir {
                return true;
            }
            let name = e.file_name().to_string_lossy();
            if e.depth() == 1 && name == AWCP_DIR {
                return false;
            }
            !skip.iter().any(|s| *s == name)
        });
    if opts.honour_ignore_files {
        builder.add_custom_ignore_filename(AWCP_IGNORE_FILE);
    }

    let out = Mutex::new(WalkResult::default());
    // With report_ignored: every entry the walk yielded, and the directories among them.
    let seen: Mutex<(std::collections::BTreeSet<String>, Vec<String>)> = Mutex::default();
    let failure: Mutex<Option<TransportError>> = Mutex::new(None);
    let open_dir: Mutex<Option<OpenDir>> = Mutex::new(None);
    let fail = |e: TransportError| {
        let mut f = failure.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(e);
        }
        WalkState::Quit
    };

    let visit = |res: Result<ignore::DirEntry, ignore::Error>| -> WalkState {
        if cancel.is_cancelled() {
            return fail(TransportError::Cancelled);
        }
        let entry = match res {
            Ok(e) => e,
            Err(e) => {
                return fail(TransportError::WorkspaceInvalid(format!(
                    "cannot read part of the workspace: {}",
                    crate::walk_error::describe(&e, &root)
                )))
            }
        };
        if entry.depth() == 0 {
            return WalkState::Continue;
        }
        let path = entry.path();
        let rel = match rel_name(&root, path) {
            Some(r) => r,
            None => {
                return fail(TransportError::WorkspaceInvalid(format!(
                    "file name is not valid UTF-8: {}",
                    path.strip_prefix(&root).unwrap_or(path).to_string_lossy()
                )))
            }
        };
        let Some(ft) = entry.file_type() else {
            return WalkState::Continue;
        };
        if opts.report_ignored {
            let mut g = lock(&seen);
            if ft.is_dir() {
                g.1.push(rel.clone());
            }
            g.0.insert(rel.clone());
        }
        if ft.is_dir() {
            return WalkState::Continue;
        }
        if ft.is_symlink() {
            let inside = fs::canonicalize(path)
                .map(|t| t.starts_with(&root))
                .unwrap_or(false);
            if !inside && opts.symlinks == SymlinkPolicy::RefuseOutside {
                return fail(TransportError::WorkspaceInvalid(format!(
                    "symlink `{rel}` points outside the workspace"
                )));
            }
            lock(&out).skipped_symlinks.push(rel);
            return WalkState::Continue;
        }
        if !ft.is_file() {
            lock(&out).skipped_special.push(rel);
            return WalkState::Continue;
        }
        let (size, mode, mtime_ns) = match lstat(&open_dir, path) {
            Ok(m) => m,
            Err(e) => return fail(TransportError::io(format!("reading `{rel}`"), e)),
        };
        let e = WalkEntry {
            rel,
            path: path.to_path_buf(),
            size,
            mode,
            mtime_ns,
        };
        lock(&out).files.push(e);
        WalkState::Continue
    };

    // Small trees (the common case) are walked on this thread: starting the parallel walker's
    // threads costs more than walking a few hundred entries. Past SEQUENTIAL_LIMIT entries
    // the walk starts over in parallel.
    let mut small = true;
    for (n, res) in builder.build().enumerate() {
        if n >= SEQUENTIAL_LIMIT && opts.threads != 1 {
            small = false;
            break;
        }
        if matches!(visit(res), WalkState::Quit) {
            break;
        }
    }
    if !small {
        *lock(&out) = WalkResult::default();
        *lock(&seen) = Default::default();
        builder.build_parallel().run(|| Box::new(&visit));
    }

    if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let mut out = out.into_inner().unwrap_or_else(|p| p.into_inner());
    if opts.report_ignored {
        let (seen, mut dirs) = seen.into_inner().unwrap_or_else(|p| p.into_inner());
        dirs.push(String::new());
        left_out(&root, &dirs, &seen, opts, &mut out);
    }
    out.files.sort_by(|a, b| a.rel.cmp(&b.rel));
    out.skipped_symlinks.sort();
    out.skipped_special.sort();
    out.ignored.sort();
    out.skipped_dirs.sort();
    Ok(out)
}

/// The directory of the files last stat'ed, kept open: the walk yields a directory's files
/// one after another, and each is stat'ed relative to it (`fstatat`) instead of resolving its
/// whole path again (1,000 files a few directories deep: 1.5-2.2 ms of stats per walk became
/// 0.9-1.2 ms). The parallel walker's threads use it when no other thread holds it.
struct OpenDir {
    path: PathBuf,
    fd: std::os::fd::OwnedFd,
}

/// Size, permission bits and modification time (ns) of `path`, not following a symlink.
// The stat fields' types vary by platform: conversions useless on one are needed on another.
#[allow(clippy::useless_conversion)]
fn lstat(open: &Mutex<Option<OpenDir>>, path: &Path) -> std::io::Result<(u64, u32, i64)> {
    use rustix::fs::{AtFlags, Mode, OFlags};
    let by_path = || {
        fs::symlink_metadata(path)
            .map(|md| (md.len(), md.permissions().mode() & 0o7777, mtime_ns(&md)))
    };
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return by_path();
    };
    let Ok(mut held) = open.try_lock() else {
        return by_path();
    };
    let d = match &mut *held {
        Some(d) if d.path == dir => d,
        slot => {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            let Ok(fd) = rustix::fs::open(dir, flags, Mode::empty()) else {
                return by_path();
            };
            slot.insert(OpenDir {
                path: dir.to_path_buf(),
                fd,
            })
        }
    };
    let st = rustix::fs::statat(&d.fd, name, AtFlags::SYMLINK_NOFOLLOW)?;
    // The field types vary by platform.
    let mtime = ns_since_epoch(
        i64::try_from(st.st_mtime).unwrap_or(i64::MAX),
        i64::try_from(st.st_mtime_nsec).unwrap_or(0),
    );
    let size = u64::try_from(st.st_size).unwrap_or(0);
    Ok((size, u32::from(st.st_mode) & 0o7777, mtime))
}

/// Lists the children of every walked directory that the walk did not yield: skipped
/// directories, the reserved top-level `.awcp/` (not reported) and ignored entries.
fn left_out(
    root: &Path,
    dirs: &[String],
    seen: &std::collections::BTreeSet<String>,
    opts: &WalkOptions,
    out: &mut WalkResult,
) {
    for d in dirs {
        let Ok(rd) = fs::read_dir(root.join(d)) else {
            continue;
        };
        for e in rd.flatten() {
            let Some(name) = e.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let rel = if d.is_empty() {
                name.clone()
            } else {
                format!("{d}/{name}")
            };
            if seen.contains(&rel) {
                continue;
            }
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            if is_dir && d.is_empty() && name == AWCP_DIR {
                continue;
            }
            if is_dir && opts.skip_dirs.contains(&name) {
                out.skipped_dirs.push(format!("{rel}/"));
            } else if is_dir {
                out.ignored.push(format!("{rel}/"));
            } else {
                out.ignored.push(rel);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn rel_name(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let mut s = String::new();
    for c in rel.components() {
        if !s.is_empty() {
            s.push('/');
        }
        s.push_str(c.as_os_str().to_str()?);
    }
    Some(s)
}

/// The last component of a path, for messages that must not reveal the full path.
pub(crate) fn display_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "<workspace>".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, data: &[u8]) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, data).unwrap();
    }

    #[test]
    fn large_trees_switch_to_the_parallel_walk_with_the_same_result() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        let n = SEQUENTIAL_LIMIT + 500;
        for i in 0..n {
            write(r, &format!("d{}/f{i}.txt", i % 7), b"x");
        }
        write(r, ".gitignore", b"d3/\n");
        write(r, "node_modules/skip.js", b"x");
        let sequential = walk(
            r,
            &WalkOptions {
                threads: 1,
                ..WalkOptions::default()
            },
            &CancelFlag::new(),
        )
        .unwrap();
        let parallel = walk(
            r,
            &WalkOptions {
                threads: 2,
                ..WalkOptions::default()
            },
            &CancelFlag::new(),
        )
        .unwrap();
        let names = |w: &WalkResult| w.files.iter().map(|f| f.rel.clone()).collect::<Vec<_>>();
        assert_eq!(names(&sequential), names(&parallel));
        // Every file but the ignored d3/ ones, plus .gitignore itself.
        let ignored = (0..n).filter(|i| i % 7 == 3).count();
        assert_eq!(parallel.files.len(), n - ignored + 1);
        assert!(!names(&parallel)
            .iter()
            .any(|f| f.starts_with("node_modules/")));
    }

    #[test]
    fn skips_default_dirs_ignore_files_and_reserved_dir() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        write(r, "a.txt", b"a");
        write(r, "src/b.rs", b"bb");
        write(r, "node_modules/x/y.js", b"x");
        write(r, "sub/node_modules/z.js", b"x");
        write(r, ".git/config", b"x");
        write(r, ".awcp/manifest.json", b"x");
        write(r, ".gitignore", b"*.log\n");
        write(r, "debug.log", b"x");
        write(r, ".awcpignore", b"secret/\n");
        write(r, "secret/k", b"x");
        write(r, ".hidden", b"h");
        let w = walk(r, &WalkOptions::default(), &CancelFlag::new()).unwrap();
        let names: Vec<_> = w.files.iter().map(|f| f.rel.as_str()).collect();
        assert_eq!(
            names,
            vec![".awcpignore", ".gitignore", ".hidden", "a.txt", "src/b.rs"]
        );
        assert_eq!(w.total_bytes(), 8 + 6 + 1 + 1 + 2);
    }

    #[test]
    fn reports_the_top_most_ignored_entries_and_skipped_dirs_when_asked() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        write(r, "a.txt", b"a");
        write(r, ".awcpignore", b".env\nbuild/\n*.log\n");
        write(r, ".env", b"SECRET=1");
        write(r, "build/out/x.o", b"x");
        write(r, "src/debug.log", b"x");
        write(r, "src/main.rs", b"x");
        write(r, "node_modules/m/index.js", b"x");
        write(r, "web/node_modules/n.js", b"x");
        write(r, ".git/config", b"x");
        write(r, ".awcp/manifest.json", b"x");
        let opts = WalkOptions {
            report_ignored: true,
            ..Default::default()
        };
        for threads in [1, 2] {
            let w = walk(
                r,
                &WalkOptions {
                    threads,
                    ..opts.clone()
                },
                &CancelFlag::new(),
            )
            .unwrap();
            assert_eq!(w.ignored, vec![".env", "build/", "src/debug.log"]);
            assert_eq!(
                w.skipped_dirs,
                vec![".git/", "node_modules/", "web/node_modules/"]
            );
        }
        let plain = walk(r, &WalkOptions::default(), &CancelFlag::new()).unwrap();
        assert!(plain.ignored.is_empty() && plain.skipped_dirs.is_empty());
    }

    #[test]
    fn symlinks_outside_are_skipped_or_refused_never_followed() {
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "secret", b"top secret");
        let t = tempfile::tempdir().unwrap();
        write(t.path(), "a.txt", b"a");
        std::os::unix::fs::symlink(outside.path().join("secret"), t.path().join("leak")).unwrap();
        std::os::unix::fs::symlink(outside.path(), t.path().join("leakdir")).unwrap();
        std::os::unix::fs::symlink("a.txt", t.path().join("inside")).unwrap();
        let w = walk(t.path(), &WalkOptions::default(), &CancelFlag::new()).unwrap();
        assert_eq!(w.files.len(), 1);
        assert_eq!(w.skipped_symlinks, vec!["inside", "leak", "leakdir"]);
        let opts = WalkOptions {
            symlinks: SymlinkPolicy::RefuseOutside,
            ..Default::default()
        };
        let err = walk(t.path(), &opts, &CancelFlag::new()).unwrap_err();
        assert!(matches!(err, TransportError::WorkspaceInvalid(m) if m.contains("leak")));
    }

    #[test]
    fn missing_and_non_dir_roots() {
        let t = tempfile::tempdir().unwrap();
        let e = walk(
            &t.path().join("nope"),
            &WalkOptions::default(),
            &CancelFlag::new(),
        );
        assert!(matches!(e, Err(TransportError::WorkspaceNotFound(_))));
        write(t.path(), "f", b"x");
        let e = walk(
            &t.path().join("f"),
            &WalkOptions::default(),
            &CancelFlag::new(),
        );
        assert!(matches!(e, Err(TransportError::WorkspaceInvalid(_))));
    }

    #[test]
    fn cancelled_walk_stops() {
        let t = tempfile::tempdir().unwrap();
        write(t.path(), "a", b"a");
        let c = CancelFlag::new();
        c.cancel();
        assert!(matches!(
            walk(t.path(), &WalkOptions::default(), &c),
            Err(TransportError::Cancelled)
        ));
    }

    #[test]
    fn excluded_paths() {
        let o = WalkOptions::default();
        assert!(o.is_excluded(".git/hooks/pre-commit"));
        assert!(o.is_excluded("a/node_modules/x"));
        assert!(o.is_excluded(".awcp/delta.json"));
        assert!(!o.is_excluded("a/.awcp/x"));
        assert!(!o.is_excluded(".git"));
        assert!(!o.is_excluded("src/main.rs"));
    }

    /// Sizes, modes and modification times come from a stat relative to the file's open
    /// directory: the same as `symlink_metadata` by path says, in every directory, and also
    /// from the parallel walker (past `SEQUENTIAL_LIMIT` entries).
    #[test]
    fn entries_carry_what_a_stat_by_path_says() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        for (n, files) in [(3usize, 5usize), (2, 1100)] {
            let root = t.path().join(format!("ws{files}"));
            for d in 0..n {
                for f in 0..files {
                    let rel = format!("d{d}/sub/f{f}.txt");
                    write(&root, &rel, &vec![b'x'; f % 7 + d]);
                    let p = root.join(&rel);
                    fs::set_permissions(
                        &p,
                        fs::Permissions::from_mode(0o600 + (f as u32 % 2) * 0o44),
                    )
                    .unwrap();
                }
            }
            let w = walk(&root, &WalkOptions::default(), &CancelFlag::new()).unwrap();
            assert_eq!(w.files.len(), n * files);
            for e in &w.files {
                let md = fs::symlink_metadata(&e.path).unwrap();
                assert_eq!(e.size, md.len(), "{}", e.rel);
                assert_eq!(e.mode, md.permissions().mode() & 0o7777, "{}", e.rel);
                assert_eq!(e.mtime_ns, mtime_ns(&md), "{}", e.rel);
            }
        }
    }
}
