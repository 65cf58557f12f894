//! Drives `awcp-mcp` with a real MCP client nobody here wrote: the official Python SDK
//! (`mcp` on PyPI), through `tests/mcp/test_mcp_client.py`.
//!
//! The test creates (or reuses) a virtualenv under `<target>/mcp-venv` with `mcp` installed,
//! builds `awcp-mcp`, `awcp-executor` and `awcp` (test profile, so `cargo test`'s dependency builds are
//! reused), then runs the script and fails with its output if it exits non-zero.
//!
//! Where `python3 -m venv` or PyPI is unavailable the test is skipped with a notice, unless
//! `AWCP_REQUIRE_MCP_TEST=1` (set by `.ci/run`), which turns that into a failure.

mod mcp_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use mcp_support::{show, skip_or_fail};

/// A virtualenv with the `mcp` package; `None` (after a notice) if it cannot be made.
fn venv_python(target: &Path) -> Option<PathBuf> {
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
            skip_or_fail(
                "mcp_python",
                &format!("python3 -m venv failed\n{}", show(&o)),
            );
            return None;
        }
        Err(e) => {
            skip_or_fail("mcp_python", &format!("python3 not found: {e}"));
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
        skip_or_fail(
            "mcp_python",
            &format!("pip install mcp failed\n{}", show(&o)),
        );
        return None;
    }
    Some(python)
}

#[test]
fn official_python_mcp_client_drives_awcp_mcp() {
    let root = mcp_support::root();
    let target = mcp_support::profile_dir()
        .parent()
        .expect("target dir")
        .to_path_buf();
    let Some(python) = venv_python(&target) else {
        return;
    };
    let [mcp, executor, awcp] =
        <[PathBuf; 3]>::try_from(mcp_support::build(&["awcp-mcp", "awcp-executor", "awcp"]))
            .expect("three binaries");

    let started = std::time::Instant::now();
    let o = Command::new(&python)
        .arg(root.join("tests/mcp/test_mcp_client.py"))
        .arg(&mcp)
        .arg(&executor)
        .arg(&awcp)
        .output()
        .expect("run the Python MCP client");
    assert!(
        o.status.success(),
        "the Python MCP client failed\n{}",
        show(&o)
    );
    eprintln!(
        "{}\n(MCP acceptance run: {:.1}s)",
        String::from_utf8_lossy(&o.stdout),
        started.elapsed().as_secs_f64()
    );
}
