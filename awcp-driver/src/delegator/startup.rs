//! What a delegator does with its state directory before its engine runs: take the
//! directory's lock, and recover every apply a previous process left interrupted (what was
//! found goes to the engine's restore).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use awcp_proto::engine::delegator::ApplyRecovery;
use awcp_proto::DelegationId;
use awcp_transports::ResourceSpec;

use super::DelegatorError;

/// Takes the exclusive lock of a delegator state directory (`<dir>/lock`, flock(2); released
/// when the file is closed, also when the process dies) and records our process id in it.
pub(super) fn lock_state_dir(dir: &Path) -> Result<std::fs::File, DelegatorError> {
    let io_err = |source| DelegatorError::StateDir {
        dir: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io_err)?;
    match crate::lockfile::lock_pid_file(&dir.join("lock")).map_err(io_err)? {
        crate::lockfile::PidLock::Held(f) => Ok(f),
        crate::lockfile::PidLock::InUse(holder) => Err(DelegatorError::StateDirInUse {
            dir: dir.to_path_buf(),
            holder,
        }),
    }
}

/// Finishes or rolls back every apply a previous process left interrupted, for every
/// delegation in the journal (`specs`: their resources), and removes their staging; see
/// [`awcp_transports::snapshot::recover_interrupted`]. Runs before the engine restores
/// anything, so each workspace is entirely old or entirely new when delegations resume.
/// Returns what it did, for the engine to record ([`awcp_proto::Delegator::restore`]).
pub(super) fn recover_interrupted_applies(
    specs: &BTreeMap<DelegationId, Vec<ResourceSpec>>,
) -> BTreeMap<DelegationId, ApplyRecovery> {
    use awcp_transports::snapshot::Recovery;
    let mut recovered = BTreeMap::new();
    for (id, resources) in specs {
        let roots: Vec<PathBuf> = resources.iter().map(|r| r.source_path.clone()).collect();
        let r = match awcp_transports::snapshot::recover_interrupted(&roots, id.as_str()) {
            Ok(Recovery::Nothing) => continue,
            Ok(Recovery::RolledBack) => ApplyRecovery::RolledBack,
            Ok(Recovery::RolledForward) => ApplyRecovery::Finished,
            Err(e) => {
                tracing::error!(
                    delegation = %id,
                    "recovering an interrupted apply failed (the workspace may be half applied; \
                     applying the snapshot again retries the recovery): {e}"
                );
                ApplyRecovery::Failed(e.to_error_info())
            }
        };
        tracing::info!(delegation = %id, recovery = ?r, "interrupted apply recovered");
        recovered.insert(id.clone(), r);
    }
    recovered
}
