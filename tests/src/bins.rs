//! The workspace's binaries (`awcp`, `awcp-executor`, `awcp-mcp`, …) for tests that run the
//! real programs: built once per test process with the profile of the running test (so `cargo
//! test`'s dependency builds are reused and every test binary agrees on one build).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The binaries [`path`] builds (one `cargo build -p awcp-examples` for all of them).
const BINARIES: [&str; 2] = ["awcp", "awcp-executor"];

/// `target/<profile>` of the running test executable (`target/<profile>/deps/<test>`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// The path of binary `name` (one of `awcp`, `awcp-executor`), built on first use. Panics with
/// cargo's output if the build fails.
pub fn path(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let bins = profile_dir();
        let target = bins.parent().expect("target dir").to_path_buf();
        let profile = if bins.file_name().is_some_and(|n| n == "release") {
            "release"
        } else {
            "test"
        };
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace root");
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.current_dir(root)
            .args(["build", "-q", "--profile", profile, "-p", "awcp-examples"])
            .env("CARGO_TARGET_DIR", &target);
        for bin in BINARIES {
            cmd.args(["--bin", bin]);
        }
        let o = cmd.output().expect("cargo build runs");
        assert!(
            o.status.success(),
            "building the binaries failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        bins
    });
    let p = dir.join(name);
    assert!(p.exists(), "{} was not built", p.display());
    p
}
