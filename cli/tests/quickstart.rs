//! `awcp-quickstart`, the README's first command, end to end (issue 48.13): it completes, keeps
//! its sample project and says where, and says what to try next.

use std::process::Command;

#[test]
fn quickstart_completes_keeps_its_sample_project_and_says_what_next() {
    let tmp = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_awcp-quickstart"))
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("completed"), "{out}");
    let kept = out
        .lines()
        .find_map(|l| l.strip_prefix("The sample project is kept at "))
        .unwrap_or_else(|| panic!("where the sample project is: {out}"));
    let kept = std::path::Path::new(kept.trim());
    assert!(kept.starts_with(tmp.path()), "{}", kept.display());
    assert!(kept.join("README.md").is_file(), "{}", kept.display());
    assert!(
        kept.join("AWCP_NOTES.md").is_file(),
        "the applied result is there"
    );
    assert!(
        out.contains("Next:") && out.contains("awcp delegate"),
        "{out}"
    );
    // Only the sample project stays: the executor's work and the delegator's state are gone.
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "{left:?}");
}
