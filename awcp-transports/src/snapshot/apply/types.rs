//! What an apply takes and what it reports.

use awcp_proto::AccessMode;

use super::super::capture::SnapshotKind;
use crate::archive::{ArchiveSource, ExtractLimits, Layout};
#[cfg(doc)]
use crate::error::TransportError;
use crate::manifest::Baseline;
use crate::scan::ResourceSpec;
use crate::walk::WalkOptions;

/// What to do when the workspace changed locally where the snapshot writes or deletes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConflictPolicy {
    /// Refuse the whole apply with [`TransportError::Conflict`] (nothing is written).
    #[default]
    Refuse,
    /// Overwrite local edits (the old content is still moved aside, then dropped).
    Overwrite,
}

/// A place to inject a crash, for recovery tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPoint {
    /// After staging and writing the journal, before any rename.
    AfterStaging,
    /// After this many renames of the swap phase.
    AfterOps(usize),
}

/// Apply options.
#[derive(Clone, Debug, Default)]
pub struct ApplyOptions {
    /// Extraction limits.
    pub limits: ExtractLimits,
    /// Conflict handling.
    pub on_conflict: ConflictPolicy,
    /// The walker options used at prepare (for skipped directories, and for full snapshots
    /// applied without a baseline).
    pub walk: WalkOptions,
    /// Test hook: simulate a crash here (the error is [`TransportError::InjectedCrash`] and the
    /// apply directory is left for [`crate::snapshot::journal::recover`]).
    #[doc(hidden)]
    pub crash: Option<CrashPoint>,
}

/// One snapshot to apply.
#[derive(Debug)]
pub struct ApplyRequest<'a> {
    /// The delegation (names the staging directory).
    pub delegation_id: &'a str,
    /// The snapshot ZIP.
    pub source: ArchiveSource<'a>,
    /// Checksum to verify, if the peer sent one (reference snapshots have none).
    pub expected_checksum: Option<&'a str>,
    /// The delegation's resources.
    pub resources: &'a [ResourceSpec],
    /// The delegation's effective access mode.
    pub access_mode: AccessMode,
    /// What was shipped at prepare time, for conflict detection and deletions.
    pub baseline: Option<&'a Baseline>,
    /// The ZIP layout, if known (the layout used at prepare); `None` detects it from the
    /// top-level entries (WIRE.md §15).
    pub layout: Option<Layout>,
    /// The delegator's admission limits: a snapshot that would leave the workspace over them
    /// is refused with [`TransportError::Refused`] before anything is written. `None`: no check.
    pub limits: Option<awcp_proto::AdmissionLimits>,
    /// Keep the apply directory ([`super::apply_dir`]) with its `committed` journal after a
    /// successful swap, as the proof for [`super::recover_interrupted`] that the swap finished,
    /// until [`super::close_apply`] removes it. A caller that records the apply elsewhere after this
    /// returns (the delegator's journal) sets it: a crash between the swap and that record is
    /// then recovered as finished, instead of looking like an apply that never ran while the
    /// workspace holds its result. `false`: the directory goes with the apply.
    pub keep_proof: bool,
    /// The snapshot was built by this delegator, not received from an executor: a git
    /// result's delta ZIP ([`crate::git::result`]). Only then are the files its
    /// `.awcp/delta.json` lists as `merged` (local edits merged into the executor's version
    /// when the delta was built) checked against the local version they were merged with
    /// instead of against the baseline: written if the local file is still that version, a
    /// conflict if it changed again since. `false`: a `merged` record is ignored (an
    /// executor's archive never decides which local edits an apply may overwrite).
    pub built_here: bool,
}

/// How many changed files an [`ApplyReport::changed`] list names (a record keeps it).
pub const CHANGED_SHOWN: usize = 500;

/// How the last entry of an [`ApplyReport::changed`] list that was cut starts.
const MORE_PREFIX: &str = "… and ";

/// An [`ApplyReport::changed`] list read back: the files it names, and how many files the
/// apply changed in all (more than it names when the list was cut).
pub fn changed_total(entries: &[String]) -> (&[String], usize) {
    let more = entries.last().and_then(|e| {
        e.strip_prefix(MORE_PREFIX)?
            .strip_suffix(" more")?
            .parse::<usize>()
            .ok()
    });
    match more {
        Some(more) => {
            let named = &entries[..entries.len() - 1];
            (named, named.len() + more)
        }
        None => (entries, entries.len()),
    }
}

/// What an apply did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// Full or delta.
    pub kind: SnapshotKind,
    /// `resource/path` of files written.
    pub written: Vec<String>,
    /// `resource/path` of files deleted.
    pub deleted: Vec<String>,
    /// Files in the snapshot identical to what was shipped (not rewritten).
    pub unchanged: usize,
    /// Resources not written (`ro`, or absent from the snapshot).
    pub skipped_resources: Vec<String>,
    /// `resource/path` of entries refused (inside `.git/`, `node_modules/`, never shipped…).
    pub refused: Vec<String>,
    /// Archive names of entries the extractor dropped instead of writing (symlinks inside the
    /// archive, other entries under `.awcp/`).
    pub dropped: Vec<String>,
    /// `resource/path` of local edits the snapshot would overwrite or delete (filled by a
    /// preview, [`crate::snapshot::preview_snapshot`]; an apply refuses them with
    /// [`TransportError::Conflict`] instead, unless told to overwrite).
    pub conflicts: Vec<String>,
    /// `resource/path` of the files written (also in [`Self::written`]) whose content merges
    /// the executor's change with local edits (a git result, see
    /// [`ApplyRequest::built_here`]).
    pub merged: Vec<String>,
}

impl ApplyReport {
    /// What the apply changed, for the user: `resource/path` of each file written and
    /// `resource/path (deleted)` of each deleted, at most [`CHANGED_SHOWN`] entries (then one
    /// `… and N more`, which [`changed_total`] reads back).
    pub fn changed(&self) -> Vec<String> {
        let written = self.written.iter().cloned();
        let deleted = self.deleted.iter().map(|p| format!("{p} (deleted)"));
        let mut all: Vec<String> = written.chain(deleted).take(CHANGED_SHOWN).collect();
        let total = self.written.len() + self.deleted.len();
        if total > CHANGED_SHOWN {
            all.push(format!("{MORE_PREFIX}{} more", total - CHANGED_SHOWN));
        }
        all
    }

    /// Everything in the result that was not written to the workspace, each as
    /// `path (reason)`: refused entries, then dropped ones. What a user is told after an
    /// apply, so a hostile or careless result cannot lose or plant files silently.
    pub fn left_out(&self) -> Vec<String> {
        let refused = self.refused.iter().map(|p| format!("{p} (refused)"));
        let dropped = self.dropped.iter().map(|p| format!("{p} (dropped)"));
        refused.chain(dropped).collect()
    }
}
