//! Delegator admission (WIRE.md §9): the one set of limits and the one check, for the
//! workspace before INVITE and for a result before it is applied.
//!
//! The scan itself (walking the tree) belongs to awcp-transports; it feeds every shipped file
//! to [`WorkspaceStats::add_file`] (which also decides which names look like secrets) and every
//! entry it leaves out to [`WorkspaceStats::add_not_shipped`]. This module compares the numbers
//! with the limits, in the reference's order: total → count → largest → sensitive, each a
//! strict `>` comparison.

use crate::error::{ErrorCode, ErrorInfo};

pub use super::sensitive::{
    holds_private_key, is_sensitive_name, KEY_SNIFF_HEAD_BYTES, KEY_SNIFF_MAX_FILE_BYTES,
    SENSITIVE_PATTERNS,
};

/// Admission limits. Defaults are the reference's: 100 MiB, 10 000 files, 50 MiB per file.
///
/// The one place they are configured: the delegator engine's
/// [`DelegatorConfig::admission`](crate::DelegatorConfig::admission) (the `awcp` CLI and daemon
/// set it with `--max-total-bytes`, `--max-file-count`, `--max-file-bytes`). Drivers hand the
/// same value to the transport, which re-checks what it actually packs, and to snapshot apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionLimits {
    /// Maximum total bytes of regular files.
    pub max_total_bytes: u64,
    /// Maximum number of regular files.
    pub max_file_count: u64,
    /// Maximum size of one file.
    pub max_single_file_bytes: u64,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        AdmissionLimits {
            max_total_bytes: 100 * 1024 * 1024,
            max_file_count: 10_000,
            max_single_file_bytes: 50 * 1024 * 1024,
        }
    }
}

/// Why an entry of a workspace is not shipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum NotShippedReason {
    /// A symlink (never followed, never shipped).
    Symlink,
    /// A FIFO, socket or device file.
    SpecialFile,
    /// Matched by `.awcpignore` or `.gitignore`.
    Ignored,
    /// A directory skipped by default at any depth (`node_modules`, `.git`).
    SkippedDir,
}

impl NotShippedReason {
    /// `symlink`, `special file`, `ignored` or `skipped directory`.
    pub fn as_str(self) -> &'static str {
        match self {
            NotShippedReason::Symlink => "symlink",
            NotShippedReason::SpecialFile => "special file",
            NotShippedReason::Ignored => "ignored",
            NotShippedReason::SkippedDir => "skipped directory",
        }
    }

    /// Parses [`NotShippedReason::as_str`]'s output.
    pub fn parse(s: &str) -> Option<Self> {
        [
            NotShippedReason::Symlink,
            NotShippedReason::SpecialFile,
            NotShippedReason::Ignored,
            NotShippedReason::SkippedDir,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// One workspace entry that is not shipped.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct NotShipped {
    /// `resource/path` (directories end with `/`).
    pub path: String,
    /// Why.
    pub reason: NotShippedReason,
}

/// How many not-shipped entries [`WorkspaceStats`] lists by name (all are counted).
pub const MAX_NOT_SHIPPED_LISTED: usize = 100;

/// What the scanner measured over everything the transport would ship (or what a result would
/// leave in the workspace), and what it leaves out.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct WorkspaceStats {
    /// Sum of regular-file sizes.
    pub total_bytes: u64,
    /// Number of regular files.
    pub file_count: u64,
    /// Size of the largest file.
    pub largest_file_bytes: u64,
    /// Relative path of the largest file (for the hint), if any.
    pub largest_file: Option<String>,
    /// Shipped files that hold credentials by their name ([`is_sensitive_name`]) or their
    /// content ([`holds_private_key`]).
    pub sensitive_files: Vec<String>,
    /// Entries not shipped (the first [`MAX_NOT_SHIPPED_LISTED`]).
    pub not_shipped: Vec<NotShipped>,
    /// How many entries are not shipped in all.
    pub not_shipped_count: u64,
}

impl WorkspaceStats {
    /// Counts one shipped regular file (`path` is `resource/path`) whose name alone says
    /// whether it is sensitive ([`is_sensitive_name`]).
    pub fn add_file(&mut self, path: &str, size: u64) {
        self.add_file_with_head(path, size, None);
    }

    /// [`Self::add_file`], with the first bytes of the file when the scan read them (files up
    /// to [`KEY_SNIFF_MAX_FILE_BYTES`], [`KEY_SNIFF_HEAD_BYTES`] of them): a file holding a
    /// private key is sensitive whatever its name ([`holds_private_key`]).
    pub fn add_file_with_head(&mut self, path: &str, size: u64, head: Option<&[u8]>) {
        self.total_bytes = self.total_bytes.saturating_add(size);
        self.file_count += 1;
        if size > self.largest_file_bytes || self.largest_file.is_none() {
            self.largest_file_bytes = size;
            self.largest_file = Some(path.to_owned());
        }
        if is_sensitive_name(path) || head.is_some_and(holds_private_key) {
            self.sensitive_files.push(path.to_owned());
        }
    }

    /// Records an entry that is not shipped (listed while fewer than
    /// [`MAX_NOT_SHIPPED_LISTED`] are).
    pub fn add_not_shipped(&mut self, path: String, reason: NotShippedReason) {
        self.not_shipped_count += 1;
        if self.not_shipped.len() < MAX_NOT_SHIPPED_LISTED {
            self.not_shipped.push(NotShipped { path, reason });
        }
    }
}

/// The first limit `stats` exceeds, in the reference's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exceeded {
    Total,
    Count,
    Largest,
}

fn exceeded(stats: &WorkspaceStats, limits: &AdmissionLimits) -> Option<Exceeded> {
    if stats.total_bytes > limits.max_total_bytes {
        Some(Exceeded::Total)
    } else if stats.file_count > limits.max_file_count {
        Some(Exceeded::Count)
    } else if stats.largest_file_bytes > limits.max_single_file_bytes {
        Some(Exceeded::Largest)
    } else {
        None
    }
}

/// How the limits are raised, for hints.
const RAISE: &str = "`--max-total-bytes`, `--max-file-count`, `--max-file-bytes` on `awcp delegate` / `awcp daemon` (`DelegatorConfig::admission` when embedded)";

/// The admission check: `stats` against `limits` (strict `>`, total → count → largest), then
/// secret-looking files unless `allow_sensitive`. `Err` is `WORKSPACE_TOO_LARGE` with the
/// measured size, the limit and the flag that raises it, or `SENSITIVE_FILES` listing the
/// files found.
pub fn admission_verdict(
    stats: &WorkspaceStats,
    limits: &AdmissionLimits,
    allow_sensitive: bool,
) -> Result<(), ErrorInfo> {
    let too_large = |message: String, hint: String| ErrorInfo {
        code: ErrorCode::WorkspaceTooLarge,
        message,
        hint: Some(hint),
    };
    match exceeded(stats, limits) {
        Some(Exceeded::Total) => {
            return Err(too_large(
                format!(
                    "Workspace exceeds size limits: {} > {}",
                    human(stats.total_bytes),
                    human(limits.max_total_bytes)
                ),
                format!(
                    "The workspace holds {} in {} files; the limit is {}. Select a smaller subdirectory, exclude large binaries and build output in .awcpignore, or raise the limit with `--max-total-bytes` on `awcp delegate` / `awcp daemon` (`DelegatorConfig::admission` when embedded).",
                    human(stats.total_bytes),
                    stats.file_count,
                    human(limits.max_total_bytes)
                ),
            ))
        }
        Some(Exceeded::Count) => {
            return Err(too_large(
                format!(
                    "Workspace has too many files: {} > {}",
                    stats.file_count, limits.max_file_count
                ),
                "Select a smaller subdirectory, exclude generated files (node_modules, build output) in .awcpignore, or raise the limit with `--max-file-count` on `awcp delegate` / `awcp daemon` (`DelegatorConfig::admission` when embedded).".to_owned(),
            ))
        }
        Some(Exceeded::Largest) => {
            let name = stats.largest_file.as_deref().unwrap_or("a file");
            return Err(too_large(
                format!(
                    "File {name} is too large: {} > {}",
                    human(stats.largest_file_bytes),
                    human(limits.max_single_file_bytes)
                ),
                format!("Exclude {name} (add it to .awcpignore) or raise the single-file limit with `--max-file-bytes` on `awcp delegate` / `awcp daemon` (`DelegatorConfig::admission` when embedded)."),
            ))
        }
        None => {}
    }
    if !allow_sensitive && !stats.sensitive_files.is_empty() {
        let n = stats.sensitive_files.len();
        return Err(ErrorInfo {
            code: ErrorCode::SensitiveFiles,
            message: format!(
                "Workspace contains {n} secret-looking file{}: {}",
                if n == 1 { "" } else { "s" },
                list(&stats.sensitive_files, 20)
            ),
            hint: Some(
                "They would be lent to the executor. Remove them, list them in .awcpignore (they are then not shipped), or lend them deliberately with `--allow-sensitive` (`allowSensitive` in the daemon API, `allow_sensitive` in MCP `delegate`).".to_owned(),
            ),
        });
    }
    Ok(())
}

/// The same limits for a result coming back: `stats` describes the workspace as the result
/// would leave it. `Err` is `WORKSPACE_TOO_LARGE` saying that the result was not applied.
pub fn result_verdict(stats: &WorkspaceStats, limits: &AdmissionLimits) -> Result<(), ErrorInfo> {
    let what = match exceeded(stats, limits) {
        None => return Ok(()),
        Some(Exceeded::Total) => format!(
            "{} in total > {}",
            human(stats.total_bytes),
            human(limits.max_total_bytes)
        ),
        Some(Exceeded::Count) => format!("{} files > {}", stats.file_count, limits.max_file_count),
        Some(Exceeded::Largest) => format!(
            "a {} file > {}",
            human(stats.largest_file_bytes),
            human(limits.max_single_file_bytes)
        ),
    };
    let largest = stats
        .largest_file
        .as_deref()
        .map(|f| format!(" (largest file {f}, {})", human(stats.largest_file_bytes)))
        .unwrap_or_default();
    Err(ErrorInfo {
        code: ErrorCode::WorkspaceTooLarge,
        message: format!(
            "The result was NOT applied: it would leave the workspace over the admission limits: {what}{largest}"
        ),
        hint: Some(format!(
            "Nothing was written. Ask for a smaller result, or raise the limits ({RAISE}) and apply the snapshot again."
        )),
    })
}

/// `a, b, c and 4 more`.
fn list(items: &[String], max: usize) -> String {
    let mut s = items
        .iter()
        .take(max)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > max {
        s.push_str(&format!(" and {} more", items.len() - max));
    }
    s
}

fn human(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if bytes >= MIB {
        format!("{:.1}MB", bytes as f64 / MIB as f64)
    } else if bytes >= 1024 {
        format!("{:.1}KB", bytes as f64 / 1024.0)
    } else {
        format!("{bytes}B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(total: u64, count: u64, largest: u64) -> WorkspaceStats {
        WorkspaceStats {
            total_bytes: total,
            file_count: count,
            largest_file_bytes: largest,
            largest_file: Some("big.bin".into()),
            ..WorkspaceStats::default()
        }
    }

    #[test]
    fn limits_are_strict_greater_than() {
        let l = AdmissionLimits::default();
        assert!(admission_verdict(
            &stats(l.max_total_bytes, l.max_file_count, l.max_single_file_bytes),
            &l,
            false
        )
        .is_ok());
    }

    #[test]
    fn total_is_checked_first_and_hint_names_sizes_and_the_flag() {
        let l = AdmissionLimits::default();
        let e = admission_verdict(
            &stats(250 * 1024 * 1024, 20_000, 60 * 1024 * 1024),
            &l,
            false,
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::WorkspaceTooLarge);
        assert_eq!(
            e.message,
            "Workspace exceeds size limits: 250.0MB > 100.0MB"
        );
        let hint = e.hint.unwrap();
        assert!(hint.contains("250.0MB") && hint.contains("--max-total-bytes"));
    }

    #[test]
    fn count_then_largest() {
        let l = AdmissionLimits::default();
        let e = admission_verdict(&stats(1, 10_001, 1), &l, false).unwrap_err();
        assert!(e.message.contains("too many files"));
        assert!(e.hint.unwrap().contains("--max-file-count"));
        let e = admission_verdict(&stats(60 * 1024 * 1024, 1, 60 * 1024 * 1024), &l, false)
            .unwrap_err();
        assert!(e.message.contains("big.bin"), "{}", e.message);
        assert!(e.hint.unwrap().contains("--max-file-bytes"));
    }

    #[test]
    fn sensitive_files_are_refused_after_the_limits_unless_allowed() {
        let mut s = WorkspaceStats::default();
        s.add_file("ws/.env", 10);
        s.add_file("ws/src/main.rs", 10);
        s.add_file("ws/keys/id_ed25519", 10);
        assert_eq!(s.sensitive_files, vec!["ws/.env", "ws/keys/id_ed25519"]);
        let l = AdmissionLimits::default();
        let e = admission_verdict(&s, &l, false).unwrap_err();
        assert_eq!(e.code, ErrorCode::SensitiveFiles);
        assert!(e
            .message
            .contains("2 secret-looking files: ws/.env, ws/keys/id_ed25519"));
        assert!(e.hint.unwrap().contains("--allow-sensitive"));
        assert!(admission_verdict(&s, &l, true).is_ok());
        // Size limits come first.
        let tight = AdmissionLimits {
            max_total_bytes: 5,
            ..l
        };
        assert_eq!(
            admission_verdict(&s, &tight, false).unwrap_err().code,
            ErrorCode::WorkspaceTooLarge
        );
    }

    #[test]
    fn not_shipped_entries_are_counted_and_listed_up_to_the_cap() {
        let mut s = WorkspaceStats::default();
        for i in 0..(MAX_NOT_SHIPPED_LISTED + 5) {
            s.add_not_shipped(format!("ws/l{i}"), NotShippedReason::Symlink);
        }
        assert_eq!(s.not_shipped.len(), MAX_NOT_SHIPPED_LISTED);
        assert_eq!(s.not_shipped_count, MAX_NOT_SHIPPED_LISTED as u64 + 5);
        for r in [
            NotShippedReason::Symlink,
            NotShippedReason::SpecialFile,
            NotShippedReason::Ignored,
            NotShippedReason::SkippedDir,
        ] {
            assert_eq!(NotShippedReason::parse(r.as_str()), Some(r));
        }
    }

    #[test]
    fn results_use_the_same_limits_and_say_they_were_not_applied() {
        let l = AdmissionLimits::default();
        assert!(result_verdict(&stats(10, 1, 10), &l).is_ok());
        let e = result_verdict(&stats(200 * 1024 * 1024, 3, 200 * 1024 * 1024), &l).unwrap_err();
        assert_eq!(e.code, ErrorCode::WorkspaceTooLarge);
        assert!(e.message.contains("NOT applied") && e.message.contains("big.bin"));
        assert!(e.hint.unwrap().contains("--max-total-bytes"));
    }
}
