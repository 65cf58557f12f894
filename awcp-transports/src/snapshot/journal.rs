//! The apply journal: a small JSON file that makes the swap phase of an apply restartable.
//!
//! Life of an apply directory `<parent>/.awcp-apply-<delegation>/`:
//! 1. staging: the snapshot is extracted into `new/` and verified; the journal is written with
//!    state `prepared` listing every planned rename (not synced). A crash now is rolled back
//!    (the staging directory is removed; the workspace was never touched). After a power loss
//!    the journal may be missing: the directory is then removed as well, and only a side
//!    directory (`.awcp-stage-<delegation>` beside a resource in another parent directory) may
//!    be left behind.
//! 2. the staged files are made durable (each synced, or one `syncfs` for many), then the
//!    state becomes `committing` (atomic rename of the journal, synced), then each op moves the
//!    current file (if any) to `backup/` and the staged file into place. A crash now is rolled
//!    forward: every op is idempotent, so recovery simply redoes the remaining ones, from
//!    staged files that are on disk even after a power loss.
//! 3. the workspace directories the swap renamed in and out of are synced (one `syncfs` for
//!    many), then the state becomes `committed` and the staging (`new/`, `backup/`, side
//!    directories) is removed. A crash before the `committed` journal is written finds `committing` and redoes
//!    the ops, which are all done already.
//! 4. the directory is removed: at once by a plain apply, or, when the caller asked to keep
//!    the proof ([`super::ApplyRequest::keep_proof`]), only by [`close`] once the caller has
//!    recorded the apply elsewhere (the delegator's journal). Until then a restart finds the
//!    `committed` journal and learns that the swap finished ([`Recovery::RolledForward`])
//!    although the caller's record may not say so yet.

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::durable::sync_dir;
use crate::error::TransportError;

/// File name of the journal inside an apply directory.
pub const JOURNAL_FILE: &str = "journal.json";
/// Prefix of apply directories.
pub const APPLY_DIR_PREFIX: &str = ".awcp-apply-";

/// Where an apply is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JournalState {
    /// Staged and verified; nothing in the workspace touched yet.
    Prepared,
    /// Renames in progress.
    Committing,
    /// Done.
    Committed,
}

/// One planned rename.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalOp {
    /// The workspace file.
    pub target: PathBuf,
    /// The staged new content (`None` for a deletion).
    pub staged: Option<PathBuf>,
    /// Where the old file is moved before being replaced or deleted.
    pub backup: PathBuf,
}

/// The journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    /// Format version (1).
    pub version: u32,
    /// The delegation.
    pub delegation_id: String,
    /// State.
    pub state: JournalState,
    /// Renames, in order.
    pub ops: Vec<JournalOp>,
    /// Staging directories to remove when finished.
    pub cleanup: Vec<PathBuf>,
}

/// What [`recover`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// No journal was found.
    Nothing,
    /// The apply had not started swapping; the workspace is untouched and staging removed.
    RolledBack,
    /// The swap had begun: it was finished, or had finished before (a `committed` journal).
    RolledForward,
}

impl Journal {
    /// Writes the journal atomically (write temp, fsync, rename, fsync the directory).
    pub fn save(&self, dir: &Path) -> Result<(), TransportError> {
        self.write(dir, true)
    }

    /// Writes the journal atomically (write temp, rename), made durable only if `sync`.
    pub(crate) fn write(&self, dir: &Path, sync: bool) -> Result<(), TransportError> {
        let data = serde_json::to_vec_pretty(self)
            .map_err(|e| TransportError::io("encoding journal", e.into()))?;
        let tmp = dir.join("journal.json.tmp");
        let mut f = fs::File::create(&tmp).map_err(|e| TransportError::io("writing journal", e))?;
        f.write_all(&data)
            .and_then(|_| if sync { f.sync_all() } else { Ok(()) })
            .map_err(|e| TransportError::io("writing journal", e))?;
        fs::rename(&tmp, dir.join(JOURNAL_FILE))
            .map_err(|e| TransportError::io("writing journal", e))?;
        if sync {
            let _ = sync_dir(dir);
        }
        Ok(())
    }

    /// Reads a journal from an apply directory.
    pub fn load(dir: &Path) -> Result<Option<Journal>, TransportError> {
        match fs::read(dir.join(JOURNAL_FILE)) {
            Ok(d) => serde_json::from_slice(&d)
                .map(Some)
                .map_err(|e| TransportError::io("decoding journal", e.into())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(TransportError::io("reading journal", e)),
        }
    }
}

fn exists(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok()
}

/// Renames `from` to `to`, creating `to`'s parent directories first unless `made` says this
/// swap already made or found them; should they have gone since, they are made again.
fn rename_into(
    from: &Path,
    to: &Path,
    made: &mut HashSet<PathBuf>,
    what: &'static str,
) -> Result<(), TransportError> {
    let parent = to.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(d) = parent.filter(|d| !made.contains(*d)) {
        // The directories this creates and the one they are created in gain entries: all are
        // remembered, so the swap can make those entries durable (`make_swap_durable`).
        let mut a = d;
        while !a.exists() {
            match a.parent().filter(|p| !p.as_os_str().is_empty()) {
                Some(p) => {
                    made.insert(a.to_path_buf());
                    a = p;
                }
                None => break,
            }
        }
        made.insert(a.to_path_buf());
        fs::create_dir_all(d).map_err(|e| TransportError::io("creating directory", e))?;
        made.insert(d.to_path_buf());
    }
    match fs::rename(from, to) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && parent.is_some() => {
            if let Some(d) = parent {
                fs::create_dir_all(d).map_err(|e| TransportError::io("creating directory", e))?;
            }
            fs::rename(from, to).map_err(|e| TransportError::io(what, e))
        }
        r => r.map_err(|e| TransportError::io(what, e)),
    }
}

/// Performs op `op` idempotently; `made`: parent directories this swap made or found.
pub(crate) fn run_op(op: &JournalOp, made: &mut HashSet<PathBuf>) -> Result<(), TransportError> {
    let staged_present = op.staged.as_deref().is_some_and(exists);
    let is_delete = op.staged.is_none();
    if (staged_present || is_delete) && exists(&op.target) && !exists(&op.backup) {
        rename_into(&op.target, &op.backup, made, "backing up")?;
    }
    if let Some(staged) = &op.staged {
        if staged_present {
            rename_into(staged, &op.target, made, "moving into place")?;
        }
    }
    Ok(())
}

/// Runs all ops from `committing` to `committed`, then removes the staging and, unless
/// `keep_proof`, the directory (else it stays with its `committed` journal until [`close`]).
pub(crate) fn commit(
    dir: &Path,
    j: &mut Journal,
    crash_after_ops: Option<usize>,
    keep_proof: bool,
) -> Result<(), TransportError> {
    if j.state == JournalState::Prepared {
        // What the swap moves in must be on disk before the journal that says to move it: a
        // recovery after a power loss redoes the swap from the staged files, and the files it
        // replaces are gone once it ends. (Written but not synced, a new file can come back
        // empty after a power loss: its data may not have reached the disk for seconds.)
        make_staged_durable(dir, j)?;
        j.state = JournalState::Committing;
        j.save(dir)?;
    }
    let mut made = HashSet::new();
    for (i, op) in j.ops.iter().enumerate() {
        if crash_after_ops == Some(i) {
            return Err(TransportError::InjectedCrash("mid-swap"));
        }
        run_op(op, &mut made)?;
    }
    if crash_after_ops == Some(j.ops.len()) {
        return Err(TransportError::InjectedCrash("after the last op"));
    }
    // The swap's renames durable before anything says the swap finished (the caller's record
    // next): on some file systems a rename is only on disk once its directory is synced.
    make_swap_durable(dir, j, &made)?;
    j.state = JournalState::Committed;
    if keep_proof {
        // The proof must outlive the staging: written before anything is removed. Not synced:
        // it tells a process restarted after a kill (the file is in the page cache) that the
        // swap finished. After a power loss the synced `committing` journal may be what is
        // found instead, and redoing its ops is then a no-op (the staged files were moved in,
        // the replaced ones out), so the recovery still reports the swap finished.
        j.write(dir, false)?;
        remove_staging(dir, j);
    } else {
        // Not saved: recovery of `committing` after this point redoes ops that are all done.
        cleanup(dir, j);
    }
    Ok(())
}

/// Staged entries up to which each is synced on its own; an apply with more makes them
/// durable with one `syncfs` of their file system (one flush of the disk instead of one per
/// file).
pub(crate) const SYNC_EACH_UP_TO: usize = 64;

/// Makes the staged content of `j` durable: each staged file's data (`fdatasync`), or, for
/// more than [`SYNC_EACH_UP_TO`] entries or a staged entry that is not a plain file (a whole
/// directory moved in), the file systems holding the apply directory `dir` and its side
/// directories (`syncfs`; where there is none, each file under them). A staged file's
/// directory entry is made durable with it by the file systems this runs on (ext4 with or
/// without its journal, XFS and btrfs make a new file's entry durable with its first sync).
fn make_staged_durable(dir: &Path, j: &Journal) -> Result<(), TransportError> {
    let fail = |e| TransportError::io("making the staged files durable", e);
    let staged: Vec<&Path> = j.ops.iter().filter_map(|o| o.staged.as_deref()).collect();
    if staged.len() <= SYNC_EACH_UP_TO {
        let mut files = Vec::with_capacity(staged.len());
        let mut plain = true;
        for p in &staged {
            match fs::symlink_metadata(p) {
                Ok(m) if m.is_file() => files.push(*p),
                // Moved in by an earlier run of the ops (a recovery): nothing left to sync.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Ok(_) => plain = false,
                Err(e) => return Err(fail(e)),
            }
        }
        if plain {
            for p in files {
                fs::File::open(p)
                    .and_then(|f| f.sync_data())
                    .map_err(fail)?;
            }
            return Ok(());
        }
    }
    let mut roots = vec![dir];
    roots.extend(
        j.cleanup
            .iter()
            .map(PathBuf::as_path)
            .filter(|d| d.exists()),
    );
    sync_file_systems(&roots).map_err(fail)
}

/// Makes the swap's renames durable: each workspace directory a file was moved into or out of
/// or that a directory was created in (`made`, see `rename_into`), or, on Linux for more than
/// [`SYNC_EACH_UP_TO`] of them, their file systems (`syncfs`). The backups are removed once
/// the swap ends, so where they went need not be durable.
fn make_swap_durable(
    dir: &Path,
    j: &Journal,
    made: &HashSet<PathBuf>,
) -> Result<(), TransportError> {
    let fail = |e| TransportError::io("making the swap durable", e);
    let staging = |d: &Path| d.starts_with(dir) || j.cleanup.iter().any(|c| d.starts_with(c));
    let dirs: std::collections::BTreeSet<&Path> = j
        .ops
        .iter()
        .filter_map(|o| o.target.parent())
        .chain(made.iter().map(PathBuf::as_path))
        .filter(|d| !d.as_os_str().is_empty() && !staging(d) && d.exists())
        .collect();
    if dirs.len() <= SYNC_EACH_UP_TO || cfg!(not(target_os = "linux")) {
        for d in dirs {
            sync_dir(d).map_err(fail)?;
        }
        return Ok(());
    }
    let mut roots: Vec<&Path> = vec![dir];
    roots.extend(dirs);
    sync_file_systems(&roots).map_err(fail)
}

/// Flushes the file systems holding `dirs` (Linux: one `syncfs` each; elsewhere every regular
/// file and directory under them is synced).
fn sync_file_systems(dirs: &[&Path]) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        let mut done = std::collections::BTreeSet::new();
        for d in dirs {
            let f = fs::File::open(d)?;
            if done.insert(f.metadata()?.dev()) {
                rustix::fs::syncfs(&f).map_err(std::io::Error::from)?;
            }
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let mut stack: Vec<PathBuf> = dirs.iter().map(|d| d.to_path_buf()).collect();
        while let Some(d) = stack.pop() {
            sync_dir(&d)?;
            for e in fs::read_dir(&d)? {
                let e = e?;
                let t = e.file_type()?;
                if t.is_dir() {
                    stack.push(e.path());
                } else if t.is_file() {
                    fs::File::open(e.path())?.sync_data()?;
                }
            }
        }
        Ok(())
    }
}

/// Removes an apply directory and the staging directories its journal lists.
pub(crate) fn cleanup(dir: &Path, j: &Journal) {
    for c in &j.cleanup {
        let _ = fs::remove_dir_all(c);
    }
    let _ = fs::remove_dir_all(dir);
}

/// Removes the staging directories a journal lists and everything in its apply directory but
/// the journal itself (the proof that the swap finished).
fn remove_staging(dir: &Path, j: &Journal) {
    for c in &j.cleanup {
        let _ = fs::remove_dir_all(c);
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name() == JOURNAL_FILE {
            continue;
        }
        let path = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => {
                let _ = fs::remove_dir_all(&path);
            }
            _ => {
                let _ = fs::remove_file(&path);
            }
        }
    }
}

/// Removes an apply directory (the proof an apply with [`super::ApplyRequest::keep_proof`]
/// left), once the apply is recorded elsewhere. Idempotent.
pub fn close(dir: &Path) -> Result<(), TransportError> {
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(TransportError::io("removing an apply directory", e)),
    }
}

/// Finishes or rolls back an interrupted apply whose directory is `dir`
/// (`<parent>/.awcp-apply-<delegation>`), and removes the directory.
pub fn recover(dir: &Path) -> Result<Recovery, TransportError> {
    recover_in(dir, false)
}

/// [`recover`], keeping the directory of a swap that finished (rolled forward) with its
/// `committed` journal as the proof of it, until [`close`].
pub(crate) fn recover_in(dir: &Path, keep_proof: bool) -> Result<Recovery, TransportError> {
    let Some(mut j) = Journal::load(dir)? else {
        if exists(dir) {
            // Crashed while staging, before the journal existed.
            let _ = fs::remove_dir_all(dir);
            return Ok(Recovery::RolledBack);
        }
        return Ok(Recovery::Nothing);
    };
    match j.state {
        JournalState::Prepared => {
            cleanup(dir, &j);
            Ok(Recovery::RolledBack)
        }
        JournalState::Committing => {
            commit(dir, &mut j, None, keep_proof)?;
            Ok(Recovery::RolledForward)
        }
        JournalState::Committed => {
            if keep_proof {
                remove_staging(dir, &j);
            } else {
                cleanup(dir, &j);
            }
            Ok(Recovery::RolledForward)
        }
    }
}

/// Recovers every interrupted apply directory directly under `parent` (the parent directory
/// of a workspace resource). Returns what was done for each.
pub fn recover_all(parent: &Path) -> Result<Vec<(String, Recovery)>, TransportError> {
    let mut out = Vec::new();
    let rd = match fs::read_dir(parent) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(TransportError::io("listing apply directories", e)),
    };
    let mut dirs: Vec<_> = rd
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(APPLY_DIR_PREFIX)
        })
        .map(|e| e.path())
        .collect();
    dirs.sort();
    for d in dirs {
        let name = d
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.push((name, recover(&d)?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A swap creates each parent directory once; one that went away after it was made (a user
    /// removing it mid-swap) is made again rather than failing the rename.
    #[test]
    fn a_parent_made_once_is_made_again_if_it_went_away() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        fs::write(&a, b"1").unwrap();
        fs::write(&b, b"2").unwrap();
        let mut made = HashSet::new();
        rename_into(&a, &t.path().join("x/y/a"), &mut made, "test").unwrap();
        assert!(made.contains(&t.path().join("x/y")));
        fs::remove_dir_all(t.path().join("x")).unwrap();
        rename_into(&b, &t.path().join("x/y/b"), &mut made, "test").unwrap();
        assert_eq!(fs::read(t.path().join("x/y/b")).unwrap(), b"2");
        // A source that is not there is an error, not a loop.
        let e = rename_into(&a, &t.path().join("x/y/c"), &mut made, "test").unwrap_err();
        assert!(e.to_string().contains("test"), "{e}");
    }
}
