//! Executors behind NAT (issue 51): the real `awcp-relay`, `awcp-executor --tunnel` and
//! `awcp delegate` binaries on 127.0.0.1. A delegation goes through the relay on both runtimes;
//! a wrong token is refused; a token cannot serve another executor's name; an executor comes
//! back after its relay restarts on the same port.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use awcp_tests::bins::{self, show, KillOnDrop};

/// The agent: edits `a.txt` and adds `RESULT.txt`.
const AGENT: &str = r#"#!/bin/sh
echo "agent was here" > RESULT.txt
echo "A by the agent" > a.txt
"#;

const RELAY_ANNOUNCES: &str = "awcp-relay listening on ";

/// Writes `name token` registrations (the token's digest, through `awcp-relay hash-token`).
fn registry(dir: &Path, entries: &[(&str, &str)]) -> std::path::PathBuf {
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
fn relay(runtime: &str, executors: &Path, listen: &str) -> (KillOnDrop, String) {
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
fn executor(runtime: &str, dir: &Path, relay: &str, token: &str) -> KillOnDrop {
    let agent = dir.join("agent.sh");
    std::fs::write(&agent, AGENT).unwrap();
    let token_file = dir.join("tunnel.token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let (child, _url) = bins::spawn_announcing(
        bins::executor_command(dir, &format!("sh {}", agent.display()))
            .args(["--runtime", runtime])
            .arg("--tunnel")
            .arg(format!("ws://{relay}/tunnel"))
            .arg("--tunnel-token-file")
            .arg(&token_file),
        bins::EXECUTOR_ANNOUNCES,
    );
    KillOnDrop(child)
}

/// `GET path` on `addr`: `(status, body)`; status 0 if the connection failed.
fn get(addr: &str, path: &str) -> (u16, String) {
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
fn wait_served(relay: &str, name: &str) {
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

fn workspace() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.txt"), "A\n").unwrap();
    std::fs::write(d.path().join("b.txt"), "B\n").unwrap();
    d
}

fn delegate(runtime: &str, ws: &Path, peer: &str, state: &Path) -> Output {
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

fn assert_applied(o: &Output, ws: &Path) {
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

fn delegation_through_the_relay(runtime: &str) {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), &[("alice", "alice-token")]);
    let (_relay, addr) = relay(runtime, &reg, "127.0.0.1:0");
    let exdir = tempfile::tempdir().unwrap();
    let _ex = executor(runtime, exdir.path(), &addr, "alice-token");
    wait_served(&addr, "alice");
    // The relay refuses what it does not serve.
    assert_eq!(get(&addr, "/e/nobody/awcp/status").0, 404);
    assert_eq!(get(&addr, "/elsewhere").0, 404);
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let o = delegate(
        runtime,
        ws.path(),
        &format!("http://{addr}/e/alice/awcp"),
        state.path(),
    );
    assert_applied(&o, ws.path());
}

#[test]
fn a_delegation_goes_through_the_relay_on_tokio() {
    delegation_through_the_relay("tokio");
}

#[test]
fn a_delegation_goes_through_the_relay_on_smol() {
    delegation_through_the_relay("smol");
}

/// An executor whose token the relay does not know stops (retrying cannot help) and exits 1;
/// a registered token serves its own name only, so a second executor cannot take the first's.
#[test]
fn a_wrong_token_is_refused_and_a_token_serves_its_own_name_only() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(
        dir.path(),
        &[("alice", "alice-token"), ("bob", "bob-token")],
    );
    let (_relay, addr) = relay("tokio", &reg, "127.0.0.1:0");

    let wrong = tempfile::tempdir().unwrap();
    let mut ex = executor("tokio", wrong.path(), &addr, "not-a-registered-token");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = ex.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the executor kept running");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(1));

    let a = tempfile::tempdir().unwrap();
    let mut alice = executor("tokio", a.path(), &addr, "alice-token");
    wait_served(&addr, "alice");
    let b = tempfile::tempdir().unwrap();
    let _bob = executor("smol", b.path(), &addr, "bob-token");
    wait_served(&addr, "bob");
    // Bob's connection did not take alice's name: with alice gone, her URL is not served
    // (after the relay's offline grace: 503) while bob's still is.
    let _ = alice.0.kill();
    let _ = alice.0.wait();
    let (status, body) = get(&addr, "/e/alice/awcp/status");
    assert_eq!(status, 503, "{body}");
    assert_eq!(get(&addr, "/e/bob/awcp/status").0, 200);
}

/// The relay stops while no task runs and starts again on the same port: the executor
/// reconnects by itself and the next delegation succeeds.
#[test]
fn the_executor_reconnects_after_its_relay_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), &[("alice", "alice-token")]);
    let (first, addr) = relay("smol", &reg, "127.0.0.1:0");
    let exdir = tempfile::tempdir().unwrap();
    let _ex = executor("tokio", exdir.path(), &addr, "alice-token");
    wait_served(&addr, "alice");
    drop(first);
    let (_second, again) = relay("smol", &reg, &addr);
    assert_eq!(again, addr);
    wait_served(&addr, "alice");
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let o = delegate(
        "smol",
        ws.path(),
        &format!("http://{addr}/e/alice/awcp"),
        state.path(),
    );
    assert_applied(&o, ws.path());
}

/// A workspace of a few MiB (incompressible) travels inline in START through the relay and
/// comes back in the result: both bodies are streamed under the tunnel's flow control.
#[test]
fn a_workspace_of_a_few_mib_goes_through_the_relay() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), &[("alice", "alice-token")]);
    let (_relay, addr) = relay("tokio", &reg, "127.0.0.1:0");
    let exdir = tempfile::tempdir().unwrap();
    let _ex = executor("smol", exdir.path(), &addr, "alice-token");
    wait_served(&addr, "alice");
    let ws = workspace();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let big: Vec<u8> = (0..3 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(ws.path().join("big.bin"), &big).unwrap();
    let state = tempfile::tempdir().unwrap();
    let o = delegate(
        "tokio",
        ws.path(),
        &format!("http://{addr}/e/alice/awcp"),
        state.path(),
    );
    assert_applied(&o, ws.path());
    assert!(std::fs::read(ws.path().join("big.bin")).unwrap() == big);
}
