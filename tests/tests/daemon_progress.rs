//! Live progress through the daemon (issue 15, item 6), real `awcp daemon`, `awcp` and
//! `awcp-executor` processes on loopback: `awcp delegate --daemon` shows the executor's
//! progress lines as the in-process path does (the daemon streams them,
//! `GET /delegation/{id}/events`), the user is told within seconds when the executor
//! vanishes ("connection to the executor lost … reconnecting"), `awcp status` shows the latest
//! progress line, and `awcp wait` shows the
//! state of a delegation it follows.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use awcp_tests::bins::{self, KillOnDrop};

/// Says it is working, then holds until `$HOLD_FLAG` exists (at most 60 s), then edits.
const AGENT: &str = r#"#!/bin/sh
echo "working on it"
i=0
while [ $i -lt 600 ] && [ ! -f "$HOLD_FLAG" ]; do sleep 0.1; i=$((i+1)); done
echo "agent was here" > RESULT.txt
echo "finished"
"#;

fn stderr_lines(child: &mut std::process::Child) -> mpsc::Receiver<String> {
    let err = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits (at most 60 s) for a line containing `want`; returns every line read so far.
fn wait_for(rx: &mpsc::Receiver<String>, seen: &mut Vec<String>, want: &str) {
    while !seen.iter().any(|l| l.contains(want)) {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) => seen.push(l),
            Err(e) => panic!("no line with {want:?} ({e}); saw:\n{}", seen.join("\n")),
        }
    }
}

/// A held-task executor and a daemon, real processes: killed when dropped.
struct Setup {
    dir: tempfile::TempDir,
    /// Created to let the agent finish.
    flag: std::path::PathBuf,
    ex: KillOnDrop,
    peer: String,
    _daemon: KillOnDrop,
    url: String,
    state: std::path::PathBuf,
    ws: std::path::PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent.sh");
    std::fs::write(&agent, AGENT).unwrap();
    let flag = dir.path().join("release");
    let (ex, peer) = bins::spawn_announcing(
        bins::executor_command(&dir.path().join("ex"), &format!("sh {}", agent.display()))
            .env("HOLD_FLAG", &flag)
            .args(["--agent-env", "HOLD_FLAG"]),
        bins::EXECUTOR_ANNOUNCES,
    );
    let state = dir.path().join("daemon");
    let (daemon, url) = bins::spawn_daemon(&state);
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    Setup {
        flag,
        ex: KillOnDrop(ex),
        peer,
        _daemon: KillOnDrop(daemon),
        url,
        state,
        ws,
        dir,
    }
}

#[test]
fn delegate_through_the_daemon_shows_live_progress_and_a_lost_executor() {
    let Setup {
        dir: _dir,
        flag,
        mut ex,
        peer,
        _daemon,
        url,
        state,
        ws,
    } = setup();
    let token = bins::daemon_token(&state);
    let mut cli = Command::new(bins::path("awcp"))
        .args(["--quiet", "--daemon-url", &url, "--daemon-token", &token])
        .args([
            "delegate",
            ws.to_str().unwrap(),
            "--daemon",
            "--peer",
            &peer,
        ])
        .args(["--prompt", "hold"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = stderr_lines(&mut cli);
    let _cli = KillOnDrop(cli);
    let mut seen = Vec::new();
    wait_for(&rx, &mut seen, "state: running");
    wait_for(&rx, &mut seen, "executor: working on it");
    // The executor vanishes mid-task: the user hears of it, not silence.
    let _ = ex.0.kill();
    let _ = ex.0.wait();
    wait_for(&rx, &mut seen, "connection to the executor lost");
    assert!(
        seen.iter().any(|l| l.contains("reconnecting in")),
        "{}",
        seen.join("\n")
    );
    // The orphaned agent ends at once.
    std::fs::write(&flag, "").unwrap();
}

#[test]
fn awcp_wait_follows_a_daemon_delegation_to_its_end() {
    let Setup {
        dir: _dir,
        flag,
        ex: _ex,
        peer,
        _daemon,
        url,
        state,
        ws,
    } = setup();
    let o = bins::awcp_on_daemon(
        &url,
        &state,
        &[
            "--json",
            "delegate",
            ws.to_str().unwrap(),
            "--daemon",
            "--background",
            "--peer",
            &peer,
            "--prompt",
            "hold",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", bins::show(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let id = v["delegationId"].as_str().unwrap().to_owned();
    let token = bins::daemon_token(&state);
    let mut wait = Command::new(bins::path("awcp"))
        .args([
            "--quiet",
            "--daemon-url",
            &url,
            "--daemon-token",
            &token,
            "wait",
            &id,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = stderr_lines(&mut wait);
    let mut seen = Vec::new();
    // It joins a running delegation: the current state first, then what happens live.
    wait_for(&rx, &mut seen, "state: running");
    wait_for(&rx, &mut seen, "executor: working on it");
    // `awcp status` (one shot) shows the same latest progress line.
    let o = bins::awcp_on_daemon(&url, &state, &["status", &id]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("running") && out.contains("executor: working on it"),
        "{}",
        bins::show(&o)
    );
    std::fs::write(&flag, "").unwrap();
    wait_for(&rx, &mut seen, "snapshot snap_");
    wait_for(&rx, &mut seen, "state: completed");
    let status = wait.wait().unwrap();
    assert!(status.success(), "{status}: {}", seen.join("\n"));
    assert_eq!(
        std::fs::read_to_string(ws.join("RESULT.txt")).unwrap(),
        "agent was here\n"
    );
}
