//! Shared by the tunnel tests (`tunnel.rs`, `tunnel_faults.rs`): the real `awcp-relay` and
//! `awcp-executor --tunnel` binaries on 127.0.0.1, a registry of hashed tokens, plain HTTP
//! requests to the relay, and `awcp delegate`.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use awcp_tests::bins::{self, show, KillOnDrop};

/// The agent: edits `a.txt` and adds `RESULT.txt`.
pub const AGENT: &str = r#"#!/bin/sh
echo "agent was here" > RESULT.txt
echo "A by the agent" > a.txt
"#;

pub const RELAY_ANNOUNCES: &str = "awcp-relay listening on ";

/// Writes `name token` registrations (the token's digest, through `awcp-relay hash-token`).
pub fn registry(dir: &Path, entries: &[(&str, &str)]) -> std::path::PathBuf {
    let mut text = String::new();
    for (name, token) in entries {
        let mut child = Command::new(bins::path("awcp-relay"))
            .arg("hash-token")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(format!("{token}\n").as_bytes())
            .unwrap();
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", show(&o));
        let digest = String::from_utf8(o.stdout).unwrap();
        assert_eq!(digest.trim().len(), 64, "{digest}");
        text.push_str(&format!("{name} {}\n", digest.trim()));
    }
    let p = dir.join("executors.txt");
    std::fs::write(&p, text).unwrap();
    p
}

/// `awcp-relay` on `listen` with `executors`; its child and `127.0.0.1:port`.
pub fn relay(runtime: &str, executors: &Path, listen: &str) -> (KillOnDrop, String) {
    let (child, url) = bins::spawn_announcing(
        Command::new(bins::path("awcp-relay"))
            .args(["--listen", listen, "--runtime", runtime, "--quiet"])
            .arg("--executors")
            .arg(executors),
        RELAY_ANNOUNCES,
    );
    (
        KillOnDrop(child),
        url.trim_start_matches("http://").to_owned(),
    )
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
            .arg(&token_file),
        bins::EXECUTOR_ANNOUNCES,
    );
    KillOnDrop(child)
}

/// `GET path` on `addr`: `(status, body)`; status 0 if the connection failed.
pub fn get(addr: &str, path: &str) -> (u16, String) {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return (0, String::new());
    };
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    if write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .is_err()
    {
        return (0, String::new());
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

/// Waits until the relay serves `name`'s status (the relay holds a request for an offline
/// executor until it connects, so each try waits for the event itself).
pub fn wait_served(relay: &str, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (status, body) = get(relay, &format!("/e/{name}/awcp/status"));
        if status == 200 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} not served through the relay: {status} {body}"
        );
        if status == 0 {
            // The relay itself is not listening yet (restarting).
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

pub fn workspace() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.txt"), "A\n").unwrap();
    std::fs::write(d.path().join("b.txt"), "B\n").unwrap();
    d
}

pub fn delegate(runtime: &str, ws: &Path, peer: &str, state: &Path) -> Output {
    bins::awcp(&[
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
    ])
}

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
