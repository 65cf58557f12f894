//! Where an apply stages beside the workspace, and the recovery of an apply a previous
//! process left interrupted.

use std::fs;
use std::path::{Path, PathBuf};

use super::super::journal::{close, recover_in, Recovery, APPLY_DIR_PREFIX};
use crate::error::TransportError;

/// The apply directory for a delegation next to a resource directory.
pub fn apply_dir(resource_root: &Path, delegation_id: &str) -> PathBuf {
    let parent = resource_root.parent().unwrap_or(resource_root);
    parent.join(format!("{APPLY_DIR_PREFIX}{delegation_id}"))
}

/// Recovers whatever apply of `delegation_id` a previous process left interrupted, for a
/// delegation whose resources are at `roots`: a swap that was `committing` is rolled forward,
/// anything earlier is rolled back, and every staging directory of the delegation beside the
/// roots (`.awcp-stage-<id>`, and what `.awcp-apply-<id>` staged) is removed. Afterwards each
/// resource is entirely as before the apply or entirely as after it. Call it at start-up for
/// every delegation the process knows, before any apply runs; roots that no longer exist are
/// skipped.
///
/// [`Recovery::RolledForward`] says the swap finished (now or before the restart, with
/// [`super::ApplyRequest::keep_proof`]): the apply directory then stays, holding only its
/// `committed` journal, so that a second restart learns the same, until the caller has
/// recorded the apply and calls [`close_apply`].
pub fn recover_interrupted(
    roots: &[PathBuf],
    delegation_id: &str,
) -> Result<Recovery, TransportError> {
    if crate::id_is_unsafe(delegation_id) {
        return Err(TransportError::Unsupported("invalid delegation id".into()));
    }
    let mut done = Recovery::Nothing;
    for root in roots {
        let Ok(root) = fs::canonicalize(root) else {
            continue;
        };
        match recover_in(&apply_dir(&root, delegation_id), true)? {
            Recovery::Nothing => {}
            r => done = r,
        }
        let side = side_dir(&root, delegation_id);
        if fs::symlink_metadata(&side).is_ok() {
            fs::remove_dir_all(&side)
                .map_err(|e| TransportError::io("removing a staging directory", e))?;
            if done == Recovery::Nothing {
                done = Recovery::RolledBack;
            }
        }
    }
    Ok(done)
}

/// Removes the apply directories of `delegation_id` beside `roots` that an apply with
/// [`super::ApplyRequest::keep_proof`] or [`recover_interrupted`] left as proof of a finished swap:
/// call it once the apply is recorded. Idempotent; roots that no longer exist are skipped.
pub fn close_apply(roots: &[PathBuf], delegation_id: &str) -> Result<(), TransportError> {
    if crate::id_is_unsafe(delegation_id) {
        return Err(TransportError::Unsupported("invalid delegation id".into()));
    }
    for root in roots {
        if let Ok(root) = fs::canonicalize(root) {
            close(&apply_dir(&root, delegation_id))?;
        }
    }
    Ok(())
}

pub(super) fn side_dir(root: &Path, id: &str) -> PathBuf {
    let parent = root.parent().unwrap_or(root);
    parent.join(format!(".awcp-stage-{id}"))
}
