//! Admission scanning: workspace statistics computed with the same walker the archive uses.
//!
//! The limits and the verdict live in awcp-proto ([`awcp_proto::AdmissionLimits`],
//! [`awcp_proto::admission_verdict`]); this module only measures, into
//! [`awcp_proto::WorkspaceStats`].

use std::path::{Path, PathBuf};

use awcp_proto::{
    AccessMode, NotShippedReason, ResourceName, WorkspaceStats, KEY_SNIFF_HEAD_BYTES,
    KEY_SNIFF_MAX_FILE_BYTES,
};

use crate::cancel::CancelFlag;
use crate::error::TransportError;
use crate::walk::{walk, WalkOptions, WalkResult};

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

/// Adds one resource's walk of the directory `root` to `stats`: every shipped file
/// (`resource/path`), and every entry the walk left out. Small files whose name does not
/// already say they are sensitive are looked into for a private key
/// ([`awcp_proto::holds_private_key`]): one read of their first bytes.
pub fn add_walk(stats: &mut WorkspaceStats, resource: &str, root: &Path, w: &WalkResult) {
    let mut head = [0u8; KEY_SNIFF_HEAD_BYTES];
    for f in &w.files {
        let path = format!("{resource}/{}", f.rel);
        let sniffed = (f.size > 0
            && f.size <= KEY_SNIFF_MAX_FILE_BYTES
            && !awcp_proto::is_sensitive_name(&path))
        .then(|| read_head(&root.join(&f.rel), &mut head))
        .flatten();
        stats.add_file_with_head(&path, f.size, sniffed.map(|n| &head[..n]));
    }
    let left_out = [
        (&w.skipped_symlinks, NotShippedReason::Symlink),
        (&w.skipped_special, NotShippedReason::SpecialFile),
        (&w.ignored, NotShippedReason::Ignored),
        (&w.skipped_dirs, NotShippedReason::SkippedDir),
    ];
    for (paths, reason) in left_out {
        for p in paths {
            stats.add_not_shipped(format!("{resource}/{p}"), reason);
        }
    }
}

/// Reads up to `buf.len()` bytes from the start of the regular file `path` (not following a
/// symlink); `None` if it cannot be read (it is then judged by its name alone).
fn read_head(path: &Path, buf: &mut [u8]) -> Option<usize> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
        .open(path)
        .ok()?;
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(n)
}

/// Scans every resource with the archive's walker (`opts`, plus the report of what ignore
/// files and skipped directories leave out). Fails closed: any walk error is an error.
pub fn scan(
    resources: &[ResourceSpec],
    opts: &WalkOptions,
    cancel: &CancelFlag,
) -> Result<WorkspaceStats, TransportError> {
    let opts = WalkOptions {
        report_ignored: true,
        ..opts.clone()
    };
    let mut s = WorkspaceStats::default();
    for r in resources {
        let w = walk(&r.source_path, &opts, cancel)?;
        add_walk(&mut s, r.name.as_str(), &r.source_path, &w);
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use awcp_proto::{admission_verdict, AdmissionLimits, ErrorCode, NotShipped};
    use std::fs;

    fn res(r: &std::path::Path) -> [ResourceSpec; 1] {
        [ResourceSpec {
            name: ResourceName::new("ws").unwrap(),
            source_path: r.to_path_buf(),
            mode: AccessMode::Rw,
        }]
    }

    #[test]
    fn a_private_key_under_any_name_is_sensitive_a_certificate_is_not() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::write(
            r.join("deploy"),
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n",
        )
        .unwrap();
        fs::write(r.join("ca.crt"), "-----BEGIN CERTIFICATE-----\nMIIB\n").unwrap();
        fs::create_dir_all(r.join(".aws")).unwrap();
        fs::write(r.join(".aws/credentials"), "[default]\n").unwrap();
        // Too large to be a key file: judged by its name alone.
        let mut big = b"-----BEGIN RSA PRIVATE KEY-----\n".to_vec();
        big.resize(KEY_SNIFF_MAX_FILE_BYTES as usize + 1, b'A');
        fs::write(r.join("big.txt"), big).unwrap();
        let mut s = scan(&res(r), &WalkOptions::default(), &CancelFlag::new()).unwrap();
        s.sensitive_files.sort();
        assert_eq!(s.sensitive_files, ["ws/.aws/credentials", "ws/deploy"]);
    }

    #[test]
    fn counts_what_ships_and_the_proto_check_applies_the_limits_in_order() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::write(r.join("a"), vec![0u8; 10]).unwrap();
        fs::write(r.join("b"), vec![0u8; 30]).unwrap();
        fs::create_dir_all(r.join("node_modules")).unwrap();
        fs::write(r.join("node_modules/big"), vec![0u8; 1000]).unwrap();
        let s = scan(&res(r), &WalkOptions::default(), &CancelFlag::new()).unwrap();
        assert_eq!(
            (s.total_bytes, s.file_count, s.largest_file_bytes),
            (40, 2, 30)
        );
        assert_eq!(s.largest_file.as_deref(), Some("ws/b"));
        let ok = AdmissionLimits {
            max_total_bytes: 40,
            max_file_count: 2,
            max_single_file_bytes: 30,
        };
        assert!(admission_verdict(&s, &ok, false).is_ok());
        let refused = |l: AdmissionLimits| admission_verdict(&s, &l, false).unwrap_err();
        let e = refused(AdmissionLimits {
            max_total_bytes: 39,
            max_file_count: 1,
            ..ok
        });
        assert_eq!(e.code, ErrorCode::WorkspaceTooLarge);
        assert!(e.message.contains("size limits"), "{}", e.message);
        let e = refused(AdmissionLimits {
            max_file_count: 1,
            ..ok
        });
        assert!(e.message.contains("too many files"), "{}", e.message);
        let e = refused(AdmissionLimits {
            max_single_file_bytes: 29,
            ..ok
        });
        assert!(e.message.contains("ws/b"), "{}", e.message);
    }

    #[test]
    fn reports_secret_looking_files_and_what_is_not_shipped() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::write(r.join("a.txt"), "a").unwrap();
        fs::write(r.join(".env"), "K=v").unwrap();
        fs::create_dir_all(r.join("keys")).unwrap();
        fs::write(r.join("keys/server.pem"), "pem").unwrap();
        fs::write(r.join("keys/id_rsa"), "k").unwrap();
        fs::write(r.join(".awcpignore"), "keys/id_rsa\nout/\n").unwrap();
        fs::create_dir_all(r.join("out")).unwrap();
        fs::write(r.join("out/x"), "x").unwrap();
        std::os::unix::fs::symlink("a.txt", r.join("link")).unwrap();
        let s = scan(&res(r), &WalkOptions::default(), &CancelFlag::new()).unwrap();
        assert_eq!(s.sensitive_files, vec!["ws/.env", "ws/keys/server.pem"]);
        let mut ns = s.not_shipped.clone();
        ns.sort();
        let n = |p: &str, reason| NotShipped {
            path: p.into(),
            reason,
        };
        assert_eq!(
            ns,
            vec![
                n("ws/keys/id_rsa", NotShippedReason::Ignored),
                n("ws/link", NotShippedReason::Symlink),
                n("ws/out/", NotShippedReason::Ignored),
            ]
        );
        assert_eq!(s.not_shipped_count, 3);
        let e = admission_verdict(&s, &AdmissionLimits::default(), false).unwrap_err();
        assert_eq!(e.code, ErrorCode::SensitiveFiles);
        assert!(admission_verdict(&s, &AdmissionLimits::default(), true).is_ok());
    }
}
