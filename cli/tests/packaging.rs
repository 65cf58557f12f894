//! Packaging (issue 15, item 10): the binaries install from this one package, every crate of
//! the workspace carries `license` and `repository` metadata, the repository has a LICENSE
//! file, and README links only to files that exist in the repository.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root holds cli/")
        .to_path_buf()
}

#[test]
fn readme_links_only_to_files_in_the_repository() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        !readme.contains("../"),
        "README refers to a path outside the repository"
    );
    // Every relative markdown link target exists.
    let mut checked = 0;
    for (i, _) in readme.match_indices("](") {
        let rest = &readme[i + 2..];
        let Some(end) = rest.find(')') else { continue };
        let target = &rest[..end];
        if target.starts_with("http") || target.starts_with('#') {
            continue;
        }
        let file = target.split('#').next().unwrap_or(target);
        assert!(
            root.join(file).exists(),
            "README links to {target}, which is not in the repository"
        );
        checked += 1;
    }
    assert!(checked >= 3, "README links to docs/ ({checked} links seen)");
}

#[test]
fn readme_install_command_names_this_package() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(readme.contains("cargo install --locked --path cli"));
    let manifest = std::fs::read_to_string(root().join("cli/Cargo.toml")).unwrap();
    assert!(manifest.contains("name = \"awcp-aip-cli\""));
    // The binaries the README promises are this package's (Cargo gives their paths to tests).
    for bin in [
        env!("CARGO_BIN_EXE_awcp"),
        env!("CARGO_BIN_EXE_awcp-executor"),
        env!("CARGO_BIN_EXE_awcp-mcp"),
    ] {
        assert!(Path::new(bin).exists(), "{bin} was built with this package");
    }
}

/// Every crate says its license; none claims a repository URL, because none is known (issue
/// 48.13: the workspace had a placeholder `example.invalid` URL).
#[test]
fn every_crate_has_license_metadata_and_no_invented_repository() {
    let root = root();
    assert!(
        root.join("LICENSE").is_file(),
        "the repository has a LICENSE file"
    );
    let workspace = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    assert!(workspace.contains("\nlicense = "));
    assert!(!workspace.contains("example.invalid"), "a placeholder URL");
    let members_start = workspace.find("members = [").expect("workspace members");
    let members_end = members_start + workspace[members_start..].find(']').unwrap();
    let members: Vec<&str> = workspace[members_start..members_end]
        .lines()
        .filter_map(|l| l.trim().strip_prefix('"')?.split('"').next())
        .collect();
    assert!(members.len() >= 10, "members parsed: {members:?}");
    for m in members {
        let manifest = std::fs::read_to_string(root.join(m).join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains("\nlicense.workspace = true") || manifest.contains("\nlicense = "),
            "{m}/Cargo.toml has no license"
        );
        assert!(
            !manifest.contains("example.invalid"),
            "{m}/Cargo.toml has a placeholder URL"
        );
    }
}

/// The AICs in README's examples pass the ACPs SDK 2.1.0's check (`acps_sdk.aic.
/// validate_aic_format`: ten segments, the prefix 1.2.156.3088, segments 5 to 10 in upper-case
/// base 36 with lengths 1, 1-6, 1-6, 1-9, 1-9 and exactly 4); the SDK's partners refused the
/// old `…1.1.1.1.1.1` (issue 48.7).
#[test]
fn readme_aics_pass_the_sdks_format_check() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let aics: Vec<&str> = readme
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
        .filter(|w| w.starts_with("1.2.156.3088."))
        .collect();
    assert!(aics.len() >= 5, "AICs found: {aics:?}");
    let lengths = [(1, 1), (1, 6), (1, 6), (1, 9), (1, 9), (4, 4)];
    for aic in aics {
        let parts: Vec<&str> = aic.split('.').collect();
        assert_eq!(parts.len(), 10, "{aic}");
        assert_eq!(parts[..4], ["1", "2", "156", "3088"], "{aic}");
        for (seg, (min, max)) in parts[4..].iter().zip(lengths) {
            assert!(
                (min..=max).contains(&seg.len())
                    && seg
                        .bytes()
                        .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase()),
                "{aic}: segment {seg:?}"
            );
        }
    }
}
