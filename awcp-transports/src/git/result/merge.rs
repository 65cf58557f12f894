//! The three-way merge of a git result with the delegator's local edits, when the delta ZIP
//! is built: for each file the executor modified that was also edited locally since the
//! delegation started (the local file differs from both the base and the executor's
//! version), `git merge-file` merges the local version with the executor's against the base.
//! A clean merge goes into the ZIP instead of the executor's version, and `.awcp/delta.json`
//! records the SHA-256 of the local version it was merged with
//! ([`DeltaInfo::merged`](crate::archive::DeltaInfo::merged)); the apply writes it only if
//! the local file is still that version. A conflict, a binary file, a file over the limits,
//! or anything that fails here: no merge, the executor's version goes in, and the apply
//! reports the local edit as a conflict as it always did.
//!
//! The local files are only read: never through a symbolic link (the file or a directory
//! above it), a copy of each is what is hashed and merged. The copies and the blobs merged
//! are written in a temporary directory inside the delegation's own repository, removed when
//! the ZIP is written.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::Change;
use crate::archive::{ExtractLimits, Layout};
use crate::git::{Config, Git};

/// The delegator's workspace as a result's paths map onto it: where an apply writes each
/// path of the delta (the same mapping as [`crate::snapshot::apply_snapshot`]'s).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum LocalWorkspace {
    /// None known: nothing is merged.
    #[default]
    None,
    /// One resource at the result's root ([`Layout::Flat`]): `path` is `<dir>/path`.
    Flat(PathBuf),
    /// Each resource under its name ([`Layout::PerResource`]): `name/path` is
    /// `<name's dir>/path`.
    PerResource(BTreeMap<String, PathBuf>),
}

impl LocalWorkspace {
    /// The workspace of a delegation laid out as `layout` whose writable resources are `roots`
    /// (name, directory). A flat layout needs exactly one resource (an apply refuses any
    /// other), else there is none.
    pub fn new(layout: Layout, roots: impl IntoIterator<Item = (String, PathBuf)>) -> Self {
        let mut roots: BTreeMap<String, PathBuf> = roots.into_iter().collect();
        match layout {
            Layout::Flat if roots.len() == 1 => {
                LocalWorkspace::Flat(roots.pop_first().map(|(_, d)| d).unwrap_or_default())
            }
            Layout::Flat => LocalWorkspace::None,
            Layout::PerResource if roots.is_empty() => LocalWorkspace::None,
            Layout::PerResource => LocalWorkspace::PerResource(roots),
        }
    }

    /// The local regular file the result's `path` would be written to: `None` if there is
    /// none, or if it or a directory above it (below its resource's directory) is a symbolic
    /// link or not what it should be.
    pub fn file(&self, path: &str) -> Option<PathBuf> {
        let (root, rel) = match self {
            LocalWorkspace::None => return None,
            LocalWorkspace::Flat(root) => (root, path),
            LocalWorkspace::PerResource(roots) => {
                let (name, rel) = path.split_once('/')?;
                (roots.get(name)?, rel)
            }
        };
        let mut cur = fs::canonicalize(root).ok()?;
        let parts: Vec<&str> = rel.split('/').collect();
        let (leaf, dirs) = parts.split_last()?;
        for p in dirs {
            if p.is_empty() || *p == "." || *p == ".." {
                return None;
            }
            cur.push(p);
            if !fs::symlink_metadata(&cur).ok()?.is_dir() {
                return None;
            }
        }
        if leaf.is_empty() || *leaf == "." || *leaf == ".." {
            return None;
        }
        cur.push(leaf);
        fs::symlink_metadata(&cur).ok()?.is_file().then_some(cur)
    }
}

/// A file of the result merged with its local version.
#[derive(Debug)]
pub(super) struct Merged {
    /// The merged content (in the merge directory).
    pub file: PathBuf,
    /// Its size.
    pub size: u64,
    /// SHA-256 (hex) of the local version it was merged with.
    pub local_sha256: String,
    /// Its git mode: the executor's if the executor changed the mode, else the local file's.
    pub mode: u32,
}

/// The files merged (by path in the result), and the directory that holds them (removed
/// when this is dropped).
#[derive(Debug, Default)]
pub(super) struct Merges {
    pub files: BTreeMap<String, Merged>,
    _dir: Option<tempfile::TempDir>,
}

/// How many paths one `git hash-object --stdin-paths` is given: its answers (41 bytes each,
/// 65 in a SHA-256 repository) stay well within a pipe's buffer, so writing the paths before
/// reading the answers never blocks.
const HASH_BATCH: usize = 500;

const REGULAR: [u32; 2] = [0o100644, 0o100755];

/// Merges the local edits of `local` into the files `changes` modified (see the
/// [module docs](self)), in a temporary directory inside `repo`. Never fails: what cannot be
/// merged is left to the apply's conflict check.
pub(super) fn merge_local(
    git: &Git,
    repo: &Path,
    changes: &[Change],
    local: &LocalWorkspace,
    limits: &ExtractLimits,
) -> Merges {
    let mut candidates: Vec<(&Change, PathBuf)> = Vec::new();
    if *local != LocalWorkspace::None {
        for c in changes {
            if c.status != b'M' || !REGULAR.contains(&c.old_mode) || !REGULAR.contains(&c.new_mode)
            {
                continue;
            }
            let Some(p) = local.file(&c.path) else {
                continue;
            };
            let small = fs::symlink_metadata(&p).is_ok_and(|m| m.len() <= limits.max_file_bytes);
            if small && !p.as_os_str().as_bytes().contains(&b'\n') {
                candidates.push((c, p));
            }
        }
    }
    // The local files edited on both sides: their git object id is neither the base's nor
    // the executor's.
    let mut edited = Vec::new();
    for chunk in candidates.chunks(HASH_BATCH) {
        let Some(ids) = object_ids(git, repo, chunk.iter().map(|(_, p)| p.as_path())) else {
            return Merges::default();
        };
        for ((c, p), id) in chunk.iter().zip(ids) {
            if id != c.old_id && id != c.new_id {
                edited.push((*c, p));
            }
        }
    }
    if edited.is_empty() {
        return Merges::default();
    }
    let dir = match tempfile::Builder::new()
        .prefix("awcp-merge-")
        .tempdir_in(repo)
    {
        Ok(d) => d,
        Err(e) => {
            tracing::debug!("no merge of local edits: {e}");
            return Merges::default();
        }
    };
    let mut files = BTreeMap::new();
    for (i, (c, p)) in edited.into_iter().enumerate() {
        let stem = dir.path().join(i.to_string());
        match merge_one(git, repo, c, p, &stem, limits.max_file_bytes) {
            Ok(Some(m)) => {
                files.insert(c.path.clone(), m);
            }
            Ok(None) => tracing::debug!(path = %c.path, "local edit not merged (a conflict)"),
            Err(e) => tracing::debug!(path = %c.path, "local edit not merged: {e}"),
        }
    }
    Merges {
        files,
        _dir: Some(dir),
    }
}

/// The git object ids of `paths` (as `git hash-object --no-filters` computes them, in the
/// repository's hash), in order; `None` if one cannot be read.
fn object_ids<'a>(
    git: &Git,
    repo: &Path,
    paths: impl Iterator<Item = &'a Path>,
) -> Option<Vec<String>> {
    let mut input = Vec::new();
    let mut n = 0;
    for p in paths {
        input.extend_from_slice(p.as_os_str().as_bytes());
        input.push(b'\n');
        n += 1;
    }
    let mut cmd = git.in_repo(Config::Isolated, repo, None);
    cmd.args(["hash-object", "--no-filters", "--stdin-paths"]);
    let out = match git.run(&mut cmd, Some(&input)) {
        Ok(o) => o,
        Err(e) => {
            tracing::debug!("no merge of local edits: {e}");
            return None;
        }
    };
    let ids: Vec<String> = String::from_utf8_lossy(&out)
        .lines()
        .map(str::to_owned)
        .collect();
    (ids.len() == n).then_some(ids)
}

/// Merges the local file `local` with the executor's version of `c` against the base, in
/// files `<stem>.*`: the merged file, or `None` when the merge has conflicts (or the files
/// are binary, or over `max` bytes).
fn merge_one(
    git: &Git,
    repo: &Path,
    c: &Change,
    local: &Path,
    stem: &Path,
    max: u64,
) -> io::Result<Option<Merged>> {
    let [mine, base, theirs, out] = ["local", "base", "theirs", "merged"].map(|x| {
        let mut p = stem.as_os_str().to_owned();
        p.push(".");
        p.push(x);
        PathBuf::from(p)
    });
    let done = |r: io::Result<Option<Merged>>| {
        for f in [&mine, &base, &theirs] {
            let _ = fs::remove_file(f);
        }
        if !matches!(r, Ok(Some(_))) {
            let _ = fs::remove_file(&out);
        }
        r
    };
    let Some(local_mode) = copy_local(local, &mine, max)? else {
        return done(Ok(None));
    };
    let local_sha256 = crate::manifest::hash_file(&mine)?;
    if !blob_to_file(git, repo, &c.old_id, &base, max)?
        || !blob_to_file(git, repo, &c.new_id, &theirs, max)?
    {
        return done(Ok(None));
    }
    let mut cmd = git.in_repo(Config::Isolated, repo, None);
    cmd.args([
        "merge-file",
        "-p",
        "-L",
        "local",
        "-L",
        "base",
        "-L",
        "result",
    ])
    .arg("--")
    .args([&mine, &base, &theirs]);
    let Some(size) = bounded_output(&mut cmd, &out, max)? else {
        return done(Ok(None));
    };
    let mode = if c.old_mode != c.new_mode {
        c.new_mode
    } else if local_mode & 0o111 != 0 {
        0o100755
    } else {
        0o100644
    };
    done(Ok(Some(Merged {
        file: out.clone(),
        size,
        local_sha256,
        mode,
    })))
}

/// Copies the regular file `from` (never followed if it is a symbolic link) to `to`: its
/// permission bits, or `None` if it is not a regular file or is over `max` bytes.
fn copy_local(from: &Path, to: &Path, max: u64) -> io::Result<Option<u32>> {
    let mut src = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(from)?;
    let md = src.metadata()?;
    if !md.is_file() || md.len() > max {
        return Ok(None);
    }
    let mut dst = fs::File::create(to)?;
    let n = io::copy(&mut (&mut src).take(max + 1), &mut dst)?;
    Ok((n <= max).then_some(md.permissions().mode()))
}

/// Writes the blob `id` of `repo` to `to`: `false` if it is over `max` bytes or cannot be
/// read.
fn blob_to_file(git: &Git, repo: &Path, id: &str, to: &Path, max: u64) -> io::Result<bool> {
    if !crate::git::is_object_id(id) {
        return Ok(false);
    }
    let mut cmd = git.in_repo(Config::Isolated, repo, None);
    cmd.args(["cat-file", "blob", id]);
    Ok(bounded_output(&mut cmd, to, max)?.is_some())
}

/// Runs `cmd` with its standard output written to `to`: the bytes written if it exits with
/// status 0 having written at most `max`, else `None` (stopped as soon as it writes more).
fn bounded_output(cmd: &mut std::process::Command, to: &Path, max: u64) -> io::Result<Option<u64>> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut dst = fs::File::create(to)?;
    let copied = match child.stdout.take() {
        Some(mut o) => io::copy(&mut (&mut o).take(max + 1), &mut dst),
        None => Ok(0),
    };
    let n = match copied {
        Ok(n) if n <= max => n,
        other => {
            let _ = child.kill();
            let _ = child.wait();
            return other.map(|_| None);
        }
    };
    let status = child.wait()?;
    Ok((status.code() == Some(0)).then_some(n))
}
