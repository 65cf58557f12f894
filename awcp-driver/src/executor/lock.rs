//! One executor per directory: an exclusive `flock(2)` on the work root (on the directory
//! itself, so nothing is written into it) and on the state directory (on `executor.lock`,
//! which names the holder's pid). A second executor on either refuses to start instead of
//! releasing, reusing or deleting the first one's live work. The lock goes with the process,
//! also on SIGKILL, so a restarted executor is never locked out by its crashed predecessor.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::lockfile::{lock_pid_file, try_lock, PidLock};

/// Why an executor could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// Another process holds the directory.
    #[error(
        "the {what} {} is in use by another executor{}; give this one its own --state-dir (and --work-root), or stop the other one",
        path.display(),
        holder.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    InUse {
        /// `work root` or `state directory`.
        what: &'static str,
        /// The directory.
        path: PathBuf,
        /// The holder's pid, where it is known.
        holder: Option<u32>,
    },
    /// The directory cannot be used as configured.
    #[error("the {what} {} cannot be used: {reason}", path.display())]
    Unusable {
        /// `work root` or `state directory`.
        what: &'static str,
        /// The directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// A held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

fn unusable(what: &'static str, path: &Path, reason: impl ToString) -> StartError {
    StartError::Unusable {
        what,
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

impl DirLock {
    /// Locks directory `dir` itself (creating it if needed).
    pub fn directory(dir: &Path, what: &'static str) -> Result<DirLock, StartError> {
        std::fs::create_dir_all(dir).map_err(|e| unusable(what, dir, e))?;
        let file = File::open(dir).map_err(|e| unusable(what, dir, e))?;
        match try_lock(&file) {
            Ok(true) => Ok(DirLock { _file: file }),
            Ok(false) => Err(StartError::InUse {
                what,
                path: dir.to_owned(),
                holder: None,
            }),
            Err(e) => Err(unusable(what, dir, format!("cannot lock it: {e}"))),
        }
    }

    /// Locks `dir/executor.lock` (creating both) and writes this process's pid into it.
    pub fn state_dir(dir: &Path) -> Result<DirLock, StartError> {
        const WHAT: &str = "state directory";
        std::fs::create_dir_all(dir).map_err(|e| unusable(WHAT, dir, e))?;
        match lock_pid_file(&dir.join("executor.lock")) {
            Ok(PidLock::Held(file)) => Ok(DirLock { _file: file }),
            Ok(PidLock::InUse(holder)) => Err(StartError::InUse {
                what: WHAT,
                path: dir.to_owned(),
                holder,
            }),
            Err(e) => Err(unusable(WHAT, dir, format!("cannot lock it: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_directory_is_refused_until_the_first_is_dropped() {
        let t = tempfile::tempdir().unwrap();
        let work = t.path().join("work");
        let a = DirLock::directory(&work, "work root").unwrap();
        let e = DirLock::directory(&work, "work root").unwrap_err();
        assert!(e.to_string().contains("work root") && e.to_string().contains("in use"));
        drop(a);
        let _b = DirLock::directory(&work, "work root").unwrap();
        assert_eq!(
            std::fs::read_dir(&work).unwrap().count(),
            0,
            "nothing written"
        );

        let state = t.path().join("state");
        let s = DirLock::state_dir(&state).unwrap();
        match DirLock::state_dir(&state).unwrap_err() {
            StartError::InUse { holder, .. } => assert_eq!(holder, Some(std::process::id())),
            other => panic!("{other}"),
        }
        drop(s);
        DirLock::state_dir(&state).unwrap();
    }
}
