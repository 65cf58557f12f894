//! Executors behind NAT when things break (issue 51), on the real `awcp-relay`,
//! `awcp-executor --tunnel` and `awcp delegate` binaries on 127.0.0.1:
//! - the relay is SIGKILLed mid-task and started again on the same port: the executor
//!   reconnects, the delegator resumes its event stream by `Last-Event-ID`, the task finishes,
//!   and the delegator shows every progress event exactly once (none lost, none doubled);
//! - the executor's tunnel connection is cut while an inline archive streams through it: the
//!   delegation ends (applied, or failed with the workspace untouched), the executor keeps no
//!   work directory, reconnects, and serves the next delegation;
//! - a 51 MiB inline archive goes through the relay and back with memory flat in all three
//!   processes.

mod tunnel_support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use awcp_tests::bins::{self, KillOnDrop};
use awcp_tests::mem::{spawn_measured, vm_hwm_kib, wait_with_max_rss, write_noise};
use sha2::{Digest, Sha256};
use tunnel_support::*;

/// Longest any wait may take before the test fails (never reached when things work).
const DEADLINE: Duration = Duration::from_secs(120);

/// Waits until `cond` holds, checking every few milliseconds.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `awcp delegate ws --peer peer` (progress lines on stderr, into `log`), not waited for.
fn spawn_delegate(runtime: &str, ws: &Path, peer: &str, state: &Path, log: &Path) -> KillOnDrop {
    let child = Command::new(bins::path("awcp"))
        .args(["delegate"])
        .arg(ws)
        .args(["--peer", peer, "--prompt", "edit", "--runtime", runtime])
        .arg("--state-dir")
        .arg(state)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

/// Waits for `child` to exit; its exit code.
fn wait_exit(child: &mut KillOnDrop) -> Option<i32> {
    let start = Instant::now();
    loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            return s.code();
        }
        assert!(start.elapsed() < DEADLINE, "the process kept running");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An agent that prints `step 1` … `step 5`, waits for `<mark>/go`, prints `step 6` …
/// `step 10`, says so in `<mark>/second`, waits for `<mark>/go2`, then edits the files.
fn stepping_agent(mark: &Path) -> String {
    let m = mark.display();
    format!(
        r#"#!/bin/sh
for i in 1 2 3 4 5; do echo "step $i"; done
while [ ! -e "{m}/go" ]; do sleep 0.02; done
for i in 6 7 8 9 10; do echo "step $i"; done
touch "{m}/second"
while [ ! -e "{m}/go2" ]; do sleep 0.02; done
echo "agent was here" > RESULT.txt
echo "A by the agent" > a.txt
echo "done"
"#
    )
}

fn relay_killed_mid_task(relay_runtime: &str, runtime: &str) {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), &[("alice", "alice-token")]);
    let (first, addr) = relay(relay_runtime, &reg, "127.0.0.1:0");
    let mark = tempfile::tempdir().unwrap();
    let exdir = tempfile::tempdir().unwrap();
    let _ex = executor_with(
        runtime,
        exdir.path(),
        &format!("ws://{addr}/tunnel"),
        "alice-token",
        &stepping_agent(mark.path()),
    );
    wait_served(&addr, "alice");
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let log = dir.path().join("delegate.log");
    let mut delegate = spawn_delegate(
        runtime,
        ws.path(),
        &format!("http://{addr}/e/alice/awcp"),
        state.path(),
        &log,
    );
    let stderr = || std::fs::read_to_string(&log).unwrap_or_default();
    // The first five events reached the delegator through the relay.
    wait_for("step 5 at the delegator", || {
        stderr().contains("executor: step 5")
    });
    // SIGKILL (KillOnDrop), mid-task: the delegator's stream and the tunnel break.
    drop(first);
    std::fs::write(mark.path().join("go"), "").unwrap();
    // Five more events happen while no relay runs.
    wait_for("steps 6-10 printed", || mark.path().join("second").exists());
    let (_second, again) = relay(relay_runtime, &reg, &addr);
    assert_eq!(again, addr);
    std::fs::write(mark.path().join("go2"), "").unwrap();
    let code = wait_exit(&mut delegate);
    let text = stderr();
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("connection to the executor lost"),
        "the stream broke mid-task: {text}"
    );
    for i in 1..=10 {
        let line = format!("executor: step {i}\n");
        assert_eq!(
            text.matches(&line).count(),
            1,
            "step {i} shown exactly once: {text}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(ws.path().join("RESULT.txt")).unwrap(),
        "agent was here\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "A by the agent\n"
    );
}

#[test]
fn a_relay_killed_mid_task_restarts_and_every_event_arrives_once_on_tokio() {
    relay_killed_mid_task("tokio", "tokio");
}

#[test]
fn a_relay_killed_mid_task_restarts_and_every_event_arrives_once_on_smol() {
    relay_killed_mid_task("smol", "smol");
}

/// A TCP forwarder on 127.0.0.1 port 0 to `upstream` that, once armed, cuts every connection
/// (both directions) when more than `after` bytes have gone down it (upstream to client)
/// since arming; then it disarms and lets new connections through.
struct Cutter {
    addr: String,
    armed: Arc<AtomicBool>,
    down: Arc<AtomicU64>,
    cuts: Arc<AtomicU64>,
    after: Arc<AtomicU64>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Cutter {
    fn start(upstream: String) -> Cutter {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = Cutter {
            addr: listener.local_addr().unwrap().to_string(),
            armed: Arc::default(),
            down: Arc::default(),
            cuts: Arc::default(),
            after: Arc::default(),
            conns: Arc::default(),
        };
        let (armed, down, cuts, after, conns) = (
            c.armed.clone(),
            c.down.clone(),
            c.cuts.clone(),
            c.after.clone(),
            c.conns.clone(),
        );
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                {
                    let mut all = conns.lock().unwrap();
                    all.push(client.try_clone().unwrap());
                    all.push(server.try_clone().unwrap());
                }
                // Up: client to server, as is.
                let (mut from, mut to) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(Shutdown::Write);
                });
                // Down: server to client, counted, cut once armed and past the mark.
                let (mut from, mut to) = (server, client);
                let (armed, down, cuts, after, conns) = (
                    armed.clone(),
                    down.clone(),
                    cuts.clone(),
                    after.clone(),
                    conns.clone(),
                );
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 16 << 10];
                    loop {
                        let n = match from.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if armed.load(Ordering::SeqCst) {
                            let total = down.fetch_add(n as u64, Ordering::SeqCst) + n as u64;
                            if total > after.load(Ordering::SeqCst)
                                && armed.swap(false, Ordering::SeqCst)
                            {
                                for s in conns.lock().unwrap().drain(..) {
                                    let _ = s.shutdown(Shutdown::Both);
                                }
                                cuts.fetch_add(1, Ordering::SeqCst);
                                break;
                            }
                        }
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(Shutdown::Write);
                });
            }
        });
        c
    }

    /// Cuts every connection once more than `bytes` more have gone down.
    fn arm(&self, bytes: u64) {
        self.down.store(0, Ordering::SeqCst);
        self.after.store(bytes, Ordering::SeqCst);
        self.armed.store(true, Ordering::SeqCst);
    }
}

/// SHA-256 of `path`'s bytes after the first `skip`, followed by `then`, read a piece at a
/// time.
fn digest_of(path: &Path, skip: u64, then: &[u8]) -> Vec<u8> {
    let mut f = std::fs::File::open(path).unwrap();
    std::io::copy(&mut (&mut f).take(skip), &mut std::io::sink()).unwrap();
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    h.update(then);
    h.finalize().to_vec()
}

/// Entries of `dir` (none if it does not exist).
fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_tunnel_cut_mid_archive_ends_the_delegation_cleanly_and_the_executor_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), &[("alice", "alice-token")]);
    let (_relay, addr) = relay("tokio", &reg, "127.0.0.1:0");
    let cutter = Cutter::start(addr.clone());
    let exdir = tempfile::tempdir().unwrap();
    let _ex = executor_with(
        "tokio",
        exdir.path(),
        &format!("ws://{}/tunnel", cutter.addr),
        "alice-token",
        AGENT,
    );
    wait_served(&addr, "alice");
    let ws = workspace();
    write_noise(&ws.path().join("big.bin"), 8 << 20, 7);
    let big = digest_of(&ws.path().join("big.bin"), 0, b"");
    let peer = format!("http://{addr}/e/alice/awcp");
    // The START's 8 MiB archive goes down the tunnel; the cut comes after 2 MiB of it.
    cutter.arm(2 << 20);
    let state = tempfile::tempdir().unwrap();
    let o = delegate("tokio", ws.path(), &peer, state.path());
    assert_eq!(cutter.cuts.load(Ordering::SeqCst), 1, "{}", bins::show(&o));
    if o.status.code() == Some(0) {
        assert_applied(&o, ws.path());
    } else {
        // Failed, as the relay's 502 said: the executor became unreachable (not "the answer
        // is not AWCP"), and the workspace is as it was.
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["error"]["code"], "UNREACHABLE", "{}", bins::show(&o));
        assert!(!ws.path().join("RESULT.txt").exists(), "{}", bins::show(&o));
        assert_eq!(
            std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
            "A\n"
        );
    }
    assert_eq!(digest_of(&ws.path().join("big.bin"), 0, b""), big);
    // The executor keeps no work directory of the cut delegation.
    let work = exdir.path().join("work");
    wait_for("the executor's work root to empty", || {
        entries(&work).is_empty()
    });
    // It reconnected through the forwarder and serves the next delegation.
    wait_served(&addr, "alice");
    delegation_is_applied("tokio", &addr, "alice");
}

/// Peak resident set allowed for each process with a 51 MiB archive going through (the
/// archive is streamed: no process holds a copy of it).
const MAX_RSS_KIB: u64 = 40 * 1024;

#[test]
fn a_51_mib_inline_archive_goes_through_the_relay_with_memory_flat_in_all_three_processes() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), &[("alice", "alice-token")]);
    let (relay_proc, addr) = relay("tokio", &reg, "127.0.0.1:0");
    let exdir = tempfile::tempdir().unwrap();
    // The agent rewrites the big files, so 51 MiB come back in the result as well.
    let agent = r#"#!/bin/sh
echo "agent was here" > RESULT.txt
echo "A by the agent" > a.txt
for f in big-*.bin; do tail -c +2 "$f" > t.tmp && cat t.tmp > "$f" && printf x >> "$f"; done
rm -f t.tmp
"#;
    let ex = executor_with(
        "smol",
        exdir.path(),
        &format!("ws://{addr}/tunnel"),
        "alice-token",
        agent,
    );
    wait_served(&addr, "alice");
    let ws = workspace();
    // 51 MiB in three files (a single file may hold at most 50 MB by default); what the agent
    // makes of each is known by its digest (this process holds no copy: see spawn_measured).
    let mut want = Vec::new();
    for i in 0..3 {
        let f = ws.path().join(format!("big-{i}.bin"));
        write_noise(&f, 17 << 20, 51 + i);
        want.push(digest_of(&f, 1, b"x"));
    }
    let state = tempfile::tempdir().unwrap();
    let out = dir.path().join("delegate.out");
    let child = spawn_measured(
        Command::new(bins::path("awcp"))
            .args(["--json", "delegate"])
            .arg(ws.path())
            .args(["--peer", &format!("http://{addr}/e/alice/awcp")])
            .args(["--prompt", "edit", "--state-dir"])
            .arg(state.path())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::null()),
    );
    let (code, delegator_kib) = wait_with_max_rss(child);
    assert_eq!(
        code,
        Some(0),
        "{}",
        std::fs::read_to_string(&out).unwrap_or_default()
    );
    for (i, digest) in want.iter().enumerate() {
        let got = digest_of(&ws.path().join(format!("big-{i}.bin")), 0, b"");
        assert_eq!(&got, digest, "big-{i}.bin as the agent left it");
    }
    assert_eq!(
        std::fs::read_to_string(ws.path().join("RESULT.txt")).unwrap(),
        "agent was here\n"
    );
    let relay_kib = vm_hwm_kib(relay_proc.0.id());
    let executor_kib = vm_hwm_kib(ex.0.id());
    eprintln!("peak RSS: delegator {delegator_kib} KiB, relay {relay_kib} KiB, executor {executor_kib} KiB");
    for (who, kib) in [
        ("awcp delegate", delegator_kib),
        ("awcp-relay", relay_kib),
        ("awcp-executor", executor_kib),
    ] {
        assert!(
            kib < MAX_RSS_KIB,
            "{who}: peak RSS {kib} KiB with a 51 MiB archive (budget {MAX_RSS_KIB} KiB)"
        );
    }
}
