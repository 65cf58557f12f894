//! Admission scanning: workspace statistics computed with the same walker the archive uses.

use std::path::PathBuf;

use awcp_proto::{AccessMode, ResourceName};

use crate::cancel::CancelFlag;
use crate::error::TransportError;
use crate::walk::{walk, WalkOptions};

/// One exported directory on the delegator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceSpec {
    /// Name on the wire and top-level directory in \[R\] archives.
    pub name: ResourceName,
    /// The real directory. Never put on the wire.
    pub source_path: PathBuf,
    /// Access to this resource.
    pub mode: AccessMode,
}

/// What admission counts (exactly what the archive ships).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkspaceStats {
    /// Sum of shipped file sizes.
    pub total_bytes: u64,
    /// Number of shipped files.
    pub file_count: u64,
    /// Size of the largest shipped file.
    pub largest_file_bytes: u64,
    /// `resource/path` of the largest file, if any.
    pub largest_file_path: Option<String>,
    /// `resource/path` of symlinks that were skipped (never followed).
    pub skipped_symlinks: Vec<String>,
}

/// Admission limits (WIRE.md §9 defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionLimits {
    /// Most total bytes.
    pub max_total_bytes: u64,
    /// Most files.
    pub max_file_count: u64,
    /// Largest single file.
    pub max_file_bytes: u64,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        AdmissionLimits {
            max_total_bytes: 100 * 1024 * 1024,
            max_file_count: 10_000,
            max_file_bytes: 50 * 1024 * 1024,
        }
    }
}

impl AdmissionLimits {
    /// The verdict helper: total → count → largest, each a strict `>` comparison.
    pub fn check(&self, s: &WorkspaceStats) -> Result<(), TransportError> {
        if s.total_bytes > self.max_total_bytes {
            return Err(TransportError::WorkspaceTooLarge(format!(
                "{} bytes in total, limit {}",
                s.total_bytes, self.max_total_bytes
            )));
        }
        if s.file_count > self.max_file_count {
            return Err(TransportError::WorkspaceTooLarge(format!(
                "{} files, limit {}",
                s.file_count, self.max_file_count
            )));
        }
        if s.largest_file_bytes > self.max_file_bytes {
            return Err(TransportError::WorkspaceTooLarge(format!(
                "`{}` is {} bytes, limit {}",
                s.largest_file_path.as_deref().unwrap_or("?"),
                s.largest_file_bytes,
                self.max_file_bytes
            )));
        }
        Ok(())
    }
}

/// Scans every resource with the archive's walker. Fails closed: any walk error is an error.
pub fn scan(
    resources: &[ResourceSpec],
    opts: &WalkOptions,
    cancel: &CancelFlag,
) -> Result<WorkspaceStats, TransportError> {
    let mut s = WorkspaceStats::default();
    for r in resources {
        let w = walk(&r.source_path, opts, cancel)?;
        for f in &w.files {
            s.total_bytes += f.size;
            s.file_count += 1;
            if f.size > s.largest_file_bytes || s.largest_file_path.is_none() {
                s.largest_file_bytes = f.size;
                s.largest_file_path = Some(format!("{}/{}", r.name, f.rel));
            }
        }
        s.skipped_symlinks
            .extend(w.skipped_symlinks.iter().map(|l| format!("{}/{l}", r.name)));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn counts_what_ships_and_checks_limits_in_order() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::write(r.join("a"), vec![0u8; 10]).unwrap();
        fs::write(r.join("b"), vec![0u8; 30]).unwrap();
        fs::create_dir_all(r.join("node_modules")).unwrap();
        fs::write(r.join("node_modules/big"), vec![0u8; 1000]).unwrap();
        let res = [ResourceSpec {
            name: ResourceName::new("ws").unwrap(),
            source_path: r.to_path_buf(),
            mode: AccessMode::Rw,
        }];
        let s = scan(&res, &WalkOptions::default(), &CancelFlag::new()).unwrap();
        assert_eq!(
            (s.total_bytes, s.file_count, s.largest_file_bytes),
            (40, 2, 30)
        );
        assert_eq!(s.largest_file_path.as_deref(), Some("ws/b"));
        let ok = AdmissionLimits {
            max_total_bytes: 40,
            max_file_count: 2,
            max_file_bytes: 30,
        };
        assert!(ok.check(&s).is_ok());
        let e = AdmissionLimits {
            max_total_bytes: 39,
            max_file_count: 1,
            ..ok
        }
        .check(&s);
        assert!(matches!(e, Err(TransportError::WorkspaceTooLarge(m)) if m.contains("in total")));
        let e = AdmissionLimits {
            max_file_count: 1,
            ..ok
        }
        .check(&s);
        assert!(matches!(e, Err(TransportError::WorkspaceTooLarge(m)) if m.contains("files")));
        let e = AdmissionLimits {
            max_file_bytes: 29,
            ..ok
        }
        .check(&s);
        assert!(matches!(e, Err(TransportError::WorkspaceTooLarge(m)) if m.contains("ws/b")));
    }
}
