//! Drives `awcp-mcp` with the official TypeScript MCP SDK (`@modelcontextprotocol/sdk` from
//! npm: the client of the MCP Inspector and of many agents), through `tests/mcp/ts_client.mjs`.
//! That client checks every result's `structuredContent` against the tool's `outputSchema`
//! and turns a mismatch into an error, so this test fails whenever a result (an error result
//! included) breaks its own schema, which the Python client lets through.
//!
//! The SDK is installed (or reused) under `<target>/mcp-ts` with `npm`. Where `node` or the
//! npm registry is unavailable the test is skipped with a notice, unless
//! `AWCP_REQUIRE_MCP_TEST=1` (set by `.ci/run`), which turns that into a failure.

mod mcp_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use mcp_support::{show, skip_or_fail};

/// The SDK version the test pins (what `npm install` fetches).
const SDK: &str = "@modelcontextprotocol/sdk@1.32.2";

/// The SDK's package directory under `<target>/mcp-ts`; `None` (after a notice) if it cannot
/// be installed.
fn sdk_dir(target: &Path) -> Option<PathBuf> {
    let prefix = target.join("mcp-ts");
    let dir = prefix.join("node_modules/@modelcontextprotocol/sdk");
    if dir.join("package.json").exists() {
        return Some(dir);
    }
    std::fs::create_dir_all(&prefix).expect("create the npm prefix");
    let o = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
        .arg(&prefix)
        .arg(SDK)
        .output();
    match o {
        Ok(o) if o.status.success() && dir.join("package.json").exists() => Some(dir),
        Ok(o) => {
            skip_or_fail(
                "mcp_typescript",
                &format!("npm install {SDK} failed\n{}", show(&o)),
            );
            None
        }
        Err(e) => {
            skip_or_fail("mcp_typescript", &format!("npm not found: {e}"));
            None
        }
    }
}

#[test]
fn official_typescript_mcp_client_accepts_every_result_of_awcp_mcp() {
    let root = mcp_support::root();
    let target = mcp_support::profile_dir()
        .parent()
        .expect("target dir")
        .to_path_buf();
    let Some(sdk) = sdk_dir(&target) else {
        return;
    };
    let [mcp, executor] =
        <[PathBuf; 2]>::try_from(mcp_support::build(&["awcp-mcp", "awcp-executor"]))
            .expect("two binaries");
    let o = Command::new("node")
        .arg(root.join("tests/mcp/ts_client.mjs"))
        .arg(&mcp)
        .arg(&executor)
        .env("AWCP_MCP_TS_SDK", &sdk)
        .output()
        .expect("run node");
    assert!(
        o.status.success(),
        "the TypeScript MCP client failed\n{}",
        show(&o)
    );
    eprintln!("{}", String::from_utf8_lossy(&o.stdout));
}
