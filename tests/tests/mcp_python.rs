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

use std::path::PathBuf;
use std::process::Command;

use mcp_support::show;

#[test]
fn official_python_mcp_client_drives_awcp_mcp() {
    let root = mcp_support::root();
    let Some(python) = mcp_support::venv_python("mcp_python") else {
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
