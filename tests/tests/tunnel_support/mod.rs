//! Shared by the tunnel tests (`tunnel.rs`, `tunnel_faults.rs`, `tunnel_limits.rs`; the
//! workspace, agent and checks also by `tunnel_tls.rs` and `reference_tunnel.rs`): the real
//! `awcp-relay` and `awcp-executor --tunnel` binaries on 127.0.0.1 and `awcp delegate`; the
//! registry of hashed tokens and plain HTTP requests to the relay come from
//! [`awcp_tests::relay`] (re-exported).

// Not every test file including this module uses every helper.
#![allow(dead_code, unused_imports)]

use std::path::Path;
use std::process::Output;

use awcp_tests::bins::{self, show, KillOnDrop};
pub use awcp_tests::relay::{get, registry, wait_served};

/// The agent: edits `a.txt` and adds `RESULT.txt`.
pub const AGENT: &str = r#"#!/bin/sh
echo "agent was here" > RESULT.txt
echo "A by the agent" > a.txt
"#;

/// `awcp-relay --runtime RUNTIME` on `listen` with `executors`; its child and
/// `127.0.0.1:port`.
pub fn relay(runtime: &str, executors: &Path, listen: &str) -> (KillOnDrop, String) {
    let (child, url) = awcp_tests::relay::spawn(
        awcp_tests::relay::command(executors, listen).args(["--runtime", runtime]),
    );
    (child, url.trim_start_matches("http://").to_owned())
}

/// `awcp-executor --tunnel ws://<relay>/tunnel` with the token in a file under `dir`.
pub fn executor(runtime: &str, dir: &Path, relay: &str, token: &str) -> KillOnDrop {
    executor_with(runtime, dir, &format!("ws://{relay}/tunnel"), token, AGENT)
}

/// `awcp-executor --tunnel <tunnel>` (a `ws://…` URL) running the shell script `agent`, with
/// the token in a file under `dir`.
pub fn executor_with(
    runtime: &str,
    dir: &Path,
    tunnel: &str,
    token: &str,
    agent: &str,
) -> KillOnDrop {
    executor_with_args(runtime, dir, tunnel, token, agent, &[])
}

/// [`executor_with`] with the further arguments `extra`.
pub fn executor_with_args(
    runtime: &str,
    dir: &Path,
    tunnel: &str,
    token: &str,
    agent: &str,
    extra: &[&str],
) -> KillOnDrop {
    let script = dir.join("agent.sh");
    std::fs::write(&script, agent).unwrap();
    let token_file = dir.join("tunnel.token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let (child, _url) = bins::spawn_announcing(
        bins::executor_command(dir, &format!("sh {}", script.display()))
            .args(["--runtime", runtime])
            .arg("--tunnel")
            .arg(tunnel)
            .arg("--tunnel-token-file")
            .arg(&token_file)
            .args(extra),
        bins::EXECUTOR_ANNOUNCES,
    );
    KillOnDrop(child)
}

/// A workspace of `a.txt` (`A`) and `b.txt` (`B`).
pub fn workspace() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.txt"), "A\n").unwrap();
    std::fs::write(d.path().join("b.txt"), "B\n").unwrap();
    d
}

/// `awcp --json delegate WS --peer PEER --prompt edit --runtime RUNTIME --state-dir STATE`.
pub fn delegate(runtime: &str, ws: &Path, peer: &str, state: &Path) -> Output {
    delegate_with(runtime, ws, peer, state, &[])
}

/// [`delegate`] with the further arguments `extra`.
pub fn delegate_with(runtime: &str, ws: &Path, peer: &str, state: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "--json",
        "delegate",
        ws.to_str().unwrap(),
        "--peer",
        peer,
        "--prompt",
        "edit",
        "--runtime",
        runtime,
        "--state-dir",
        state.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    bins::awcp(&args)
}

/// Delegates a fresh [`workspace`] to `<addr>/e/<name>/awcp` (plain HTTP) on `runtime` and
/// asserts [`AGENT`]'s files were applied; the workspace, for further checks.
pub fn delegation_is_applied(runtime: &str, addr: &str, name: &str) -> tempfile::TempDir {
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let o = delegate(
        runtime,
        ws.path(),
        &format!("http://{addr}/e/{name}/awcp"),
        state.path(),
    );
    assert_applied(&o, ws.path());
    ws
}

/// `o` succeeded and applied [`AGENT`]'s files to `ws`.
pub fn assert_applied(o: &Output, ws: &Path) {
    assert_eq!(o.status.code(), Some(0), "{}", show(o));
    assert_eq!(
        std::fs::read_to_string(ws.join("RESULT.txt")).unwrap(),
        "agent was here\n",
        "{}",
        show(o)
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "A by the agent\n"
    );
}
