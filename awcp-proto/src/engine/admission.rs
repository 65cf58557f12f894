//! Delegator admission: the pure verdict over workspace statistics (WIRE.md §9).
//!
//! The scan itself (walking the tree) belongs to awcp-transports; this module only compares its
//! numbers with the limits, in the reference's order: total → count → largest.

use crate::error::{ErrorCode, ErrorInfo};

/// Admission limits. Defaults are the reference's: 100 MiB, 10 000 files, 50 MiB per file.
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

/// What the scanner measured over everything the transport would ship.
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
}

/// Compares `stats` with `limits` (strict `>`, total → count → largest). `Err` carries
/// `WORKSPACE_TOO_LARGE` with the measured size and the limit in message and hint.
pub fn admission_verdict(
    stats: &WorkspaceStats,
    limits: &AdmissionLimits,
) -> Result<(), ErrorInfo> {
    let too_large = |message: String, hint: String| ErrorInfo {
        code: ErrorCode::WorkspaceTooLarge,
        message,
        hint: Some(hint),
    };
    if stats.total_bytes > limits.max_total_bytes {
        return Err(too_large(
            format!(
                "Workspace exceeds size limits: {} > {}",
                human(stats.total_bytes),
                human(limits.max_total_bytes)
            ),
            format!(
                "The workspace holds {} in {} files; the limit is {}. Select a smaller subdirectory, exclude large binaries and build output in .awcpignore, or raise the limit.",
                human(stats.total_bytes),
                stats.file_count,
                human(limits.max_total_bytes)
            ),
        ));
    }
    if stats.file_count > limits.max_file_count {
        return Err(too_large(
            format!(
                "Workspace has too many files: {} > {}",
                stats.file_count, limits.max_file_count
            ),
            "Select a smaller subdirectory or exclude generated files (node_modules, build output) in .awcpignore.".to_owned(),
        ));
    }
    if stats.largest_file_bytes > limits.max_single_file_bytes {
        let name = stats.largest_file.as_deref().unwrap_or("a file");
        return Err(too_large(
            format!(
                "File {name} is too large: {} > {}",
                human(stats.largest_file_bytes),
                human(limits.max_single_file_bytes)
            ),
            format!("Exclude {name} (add it to .awcpignore) or raise the single-file limit."),
        ));
    }
    Ok(())
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
        }
    }

    #[test]
    fn limits_are_strict_greater_than() {
        let l = AdmissionLimits::default();
        assert!(admission_verdict(
            &stats(l.max_total_bytes, l.max_file_count, l.max_single_file_bytes),
            &l
        )
        .is_ok());
    }

    #[test]
    fn total_is_checked_first_and_hint_names_sizes() {
        let l = AdmissionLimits::default();
        let e =
            admission_verdict(&stats(250 * 1024 * 1024, 20_000, 60 * 1024 * 1024), &l).unwrap_err();
        assert_eq!(e.code, ErrorCode::WorkspaceTooLarge);
        assert_eq!(
            e.message,
            "Workspace exceeds size limits: 250.0MB > 100.0MB"
        );
        assert!(e.hint.unwrap().contains("250.0MB"));
    }

    #[test]
    fn count_then_largest() {
        let l = AdmissionLimits::default();
        let e = admission_verdict(&stats(1, 10_001, 1), &l).unwrap_err();
        assert!(e.message.contains("too many files"));
        let e = admission_verdict(&stats(60 * 1024 * 1024, 1, 60 * 1024 * 1024), &l).unwrap_err();
        assert!(e.message.contains("big.bin"), "{}", e.message);
    }
}
