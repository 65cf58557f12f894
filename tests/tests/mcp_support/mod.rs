//! What the MCP acceptance tests (`mcp_python.rs`, `mcp_typescript.rs`, `mcp_storage.rs`,
//! `mcp_git.rs`) share: skipping (or, with `AWCP_REQUIRE_MCP_TEST=1`, failing) where a client
//! SDK cannot be installed, the Python SDK's virtualenv, and building the binaries they drive
//! with the profile of the test run.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Whether a missing client SDK fails the test (CI) instead of skipping it.
pub fn required() -> bool {
    std::env::var("AWCP_REQUIRE_MCP_TEST").is_ok_and(|v| v == "1")
}

/// Skips with a notice, or fails where the test is required.
pub fn skip_or_fail(test: &str, why: &str) {
    if required() {
        panic!("MCP acceptance test cannot run: {why}");
    }
    eprintln!("SKIPPED {test}: {why} (set AWCP_REQUIRE_MCP_TEST=1 to make this fatal)");
}

/// A process's status and output, for failure messages.
pub fn show(o: &Output) -> String {
    format!(
        "status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// `target/<profile>` of this build: the test binary lives in `target/<profile>/deps`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// Builds `bins` of awcp-aip-cli with the profile of this test run (reusing its
/// dependencies) and returns their paths.
pub fn build(bins: &[&str]) -> Vec<PathBuf> {
    let dir = profile_dir();
    let target = dir.parent().expect("target dir").to_path_buf();
    let profile = if dir.file_name().is_some_and(|n| n == "release") {
        "release"
    } else {
        "test"
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root())
        .args(["build", "--profile", profile, "-p", "awcp-aip-cli"]);
    for b in bins {
        cmd.args(["--bin", b]);
    }
    let o = cmd
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("run cargo build");
    assert!(
        o.status.success(),
        "building the binaries failed\n{}",
        show(&o)
    );
    bins.iter()
        .map(|b| {
            let p = dir.join(b);
            assert!(p.exists(), "{} missing", p.display());
            p
        })
        .collect()
}

/// The python of the virtualenv `<target>/mcp-venv` with the official Python MCP SDK (`mcp`
/// from PyPI), made if it is missing (once per test process: the tests of one file share it);
/// `None`, after [`skip_or_fail`]'s notice naming `test`, where it cannot be made.
#[allow(dead_code)] // Not every test file including this module drives the Python SDK.
pub fn venv_python(test: &str) -> Option<PathBuf> {
    static VENV: std::sync::Mutex<Option<Option<PathBuf>>> = std::sync::Mutex::new(None);
    let mut made = VENV.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = &*made {
        if p.is_none() {
            skip_or_fail(test, "the MCP venv could not be made (see above)");
        }
        return p.clone();
    }
    let target = profile_dir().parent().expect("target dir").to_path_buf();
    let p = make_venv(&target, test);
    *made = Some(p.clone());
    p
}

fn make_venv(target: &Path, test: &str) -> Option<PathBuf> {
    let venv = target.join("mcp-venv");
    let python = venv.join("bin").join("python");
    let has_mcp = |py: &Path| {
        Command::new(py)
            .args(["-c", "import mcp.client.stdio"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if python.exists() && has_mcp(&python) {
        return Some(python);
    }
    match Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
    {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            skip_or_fail(test, &format!("python3 -m venv failed\n{}", show(&o)));
            return None;
        }
        Err(e) => {
            skip_or_fail(test, &format!("python3 not found: {e}"));
            return None;
        }
    }
    let o = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "mcp",
        ])
        .output()
        .expect("run pip");
    if !o.status.success() || !has_mcp(&python) {
        skip_or_fail(test, &format!("pip install mcp failed\n{}", show(&o)));
        return None;
    }
    Some(python)
}
