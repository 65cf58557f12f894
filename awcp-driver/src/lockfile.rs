//! Exclusive `flock(2)` locks that say who holds them: the one mechanism behind "one process
//! per directory" for executors (work root, state directory) and delegators (state
//! directory). A lock goes with its process, also on SIGKILL, so a restarted process is never
//! locked out by its crashed predecessor.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::Path;

use rustix::fs::{flock, FlockOperation};

/// Takes the exclusive lock on `file` without waiting: `Ok(false)` if another open file
/// description holds it.
pub(crate) fn try_lock(file: &File) -> std::io::Result<bool> {
    match flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// A lock file taken or found held.
pub(crate) enum PidLock {
    /// Ours until the file is closed; it names this process's pid.
    Held(File),
    /// Another process holds it (its pid, if the file names one).
    InUse(Option<u32>),
}

/// Opens (creating) the lock file `path` and takes its lock, writing this process's pid into
/// it; if another process holds it, reads that one's pid instead.
pub(crate) fn lock_pid_file(path: &Path) -> std::io::Result<PidLock> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    if try_lock(&file)? {
        let _ = file
            .set_len(0)
            .and_then(|_| file.rewind())
            .and_then(|_| writeln!(file, "{}", std::process::id()));
        Ok(PidLock::Held(file))
    } else {
        let mut s = String::new();
        let _ = file.read_to_string(&mut s);
        Ok(PidLock::InUse(s.trim().parse().ok()))
    }
}
