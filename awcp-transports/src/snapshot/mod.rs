//! Snapshots: capture on the executor, all-or-nothing apply on the delegator, the apply
//! journal that makes a crash mid-apply recoverable, and the preview of an apply (review
//! before apply).

pub mod apply;
pub mod capture;
pub mod journal;
mod limits;
pub mod preview;

pub use apply::{
    apply_dir, apply_snapshot, changed_total, close_apply, recover_interrupted, ApplyOptions,
    ApplyReport, ApplyRequest, ConflictPolicy, CrashPoint,
};
pub use capture::{
    baseline_path, capture, executor_walk_options, full_walk_options, load_baseline, save_baseline,
    CapturedSnapshot, SnapshotKind,
};
pub use journal::{close, recover, recover_all, Journal, JournalState, Recovery};
pub use preview::{preview_snapshot, ChangeKind, FileChange, Preview, PreviewLimits, MERGED_NOTE};
