//! The storage transport on the real binaries against a real S3-compatible server that checks
//! signatures and expiry (s3s-fs, started here on loopback): full delegations on both
//! runtimes, the daemon's cancel and a SIGKILLed daemon leaving no object behind, and the
//! delegator's S3 credentials never reaching the executor.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use awcp_tests::bins::{self, show, KillOnDrop};
use awcp_tests::files::files_containing;
use awcp_tests::s3::{self, S3Server};

const BUCKET: &str = "awcp-test";
/// Longest any wait may take before the test fails (never reached when things work).
const DEADLINE: Duration = Duration::from_secs(90);

/// The agent: writes `RESULT.txt`; with the prompt `slow`, waits until the file `release`
/// (in its directory) exists first (60 s at most: a task orphaned by a test's failure ends).
const AGENT: &str = r#"#!/bin/sh
if [ "$AWCP_PROMPT" = slow ]; then
  i=0
  while [ ! -e "$(dirname "$0")/release" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
fi
echo "agent was here" > RESULT.txt
echo "A by the agent" > a.txt
echo "done editing"
"#;

/// An executor on `runtime` whose agent is [`AGENT`]; the directory holds its state, logs and
/// agent.
fn executor(dir: &Path, runtime: &str) -> (KillOnDrop, String) {
    let agent = dir.join("agent.sh");
    std::fs::write(&agent, AGENT).unwrap();
    let log = std::fs::File::create(dir.join("executor.log")).unwrap();
    let mut cmd = bins::executor_command(dir, &format!("sh {}", agent.display()));
    cmd.args(["--runtime", runtime]);
    let (child, url) = bins::spawn_announcing_to(&mut cmd, bins::EXECUTOR_ANNOUNCES, log);
    (KillOnDrop(child), url)
}

/// The S3 variables of `server` for a delegator.
fn s3_env(cmd: &mut Command, server: &S3Server) {
    cmd.env("AWS_ACCESS_KEY_ID", &server.access_key)
        .env("AWS_SECRET_ACCESS_KEY", &server.secret_key)
        .env("AWS_REGION", &server.region)
        .env("AWS_ENDPOINT_URL", &server.endpoint)
        .env("AWCP_S3_BUCKET", BUCKET)
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_SESSION_TOKEN");
}

/// `awcp --json delegate WS --peer PEER --transport storage …` with `server`'s credentials
/// (or, without a server, the local provider: `--serve-archives`), and `env`.
fn delegate(
    ws: &Path,
    peer: &str,
    state: &Path,
    server: Option<&S3Server>,
    runtime: &str,
    env: &[(&str, &str)],
) -> Output {
    let mut cmd = Command::new(bins::path("awcp"));
    cmd.args(["--quiet", "--json", "--runtime", runtime, "delegate"])
        .arg(ws)
        .args(["--peer", peer, "--prompt", "edit", "--transport", "storage"])
        .arg("--state-dir")
        .arg(state)
        .envs(env.iter().copied());
    match server {
        Some(server) => s3_env(&mut cmd, server),
        None => {
            for k in [
                "AWCP_S3_BUCKET",
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
            ] {
                cmd.env_remove(k);
            }
            cmd.args(["--serve-archives", "127.0.0.1:0"]);
        }
    }
    cmd.output().expect("awcp runs")
}

/// The delegation in `o` completed and its result is in `ws`.
fn assert_applied(o: &Output, ws: &Path, what: &str) {
    assert_eq!(o.status.code(), Some(0), "{what}: applied\n{}", show(o));
    assert_eq!(
        std::fs::read_to_string(ws.join("RESULT.txt")).unwrap(),
        "agent was here\n",
        "{what}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "A by the agent\n",
        "{what}"
    );
    let v = record(o);
    assert_eq!(v["state"], "completed", "{what}: {v}");
}

/// A workspace of two files: `a.txt` (`A`) and `b.txt` (`B`).
fn workspace() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.txt"), "A\n").unwrap();
    std::fs::write(d.path().join("b.txt"), "B\n").unwrap();
    d
}

/// The delegation record `awcp --json` printed last on stdout.
fn record(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().last().unwrap_or_else(|| panic!("{}", show(o)));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {}", show(o)))
}

/// Processes whose command line mentions `needle`.
fn processes_running(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(cmd);
            }
        }
    }
    found
}

/// Waits until `cond` holds.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_delegation_through_s3_applies_on_both_runtimes_and_leaves_no_object() {
    if !s3::require_or_skip("a_delegation_through_s3_applies_on_both_runtimes") {
        return;
    }
    let server = S3Server::start();
    server.create_bucket(BUCKET);
    for runtime in ["tokio", "smol"] {
        let dir = tempfile::tempdir().unwrap();
        let (_ex, peer) = executor(dir.path(), runtime);
        let ws = workspace();
        let state = tempfile::tempdir().unwrap();
        let o = delegate(ws.path(), &peer, state.path(), Some(&server), runtime, &[]);
        assert_applied(&o, ws.path(), runtime);
        // Both objects went with the release.
        assert_eq!(
            server.object_keys(BUCKET),
            Vec::<String>::new(),
            "{runtime}"
        );
        // The executor got presigned URLs only: the secret is nowhere on its side (state,
        // journal, work root, log), nor in what the delegator printed.
        let leaked = files_containing(dir.path(), &server.secret_key);
        assert!(leaked.is_empty(), "{runtime}: secret key in {leaked:?}");
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains(&server.secret_key)
                && !String::from_utf8_lossy(&o.stderr).contains(&server.secret_key)
        );
        // And no presigned URL's signature was logged by the executor.
        let log = std::fs::read_to_string(dir.path().join("executor.log")).unwrap();
        assert!(!log.contains("X-Amz-Signature"), "{runtime}: {log}");
    }
}

/// A workspace above the part size goes up as a multipart upload (5 MiB parts here: S3's
/// smallest) that the server assembles; the executor's checksum check proves the bytes.
#[test]
fn a_large_workspace_goes_up_in_parts() {
    if !s3::require_or_skip("a_large_workspace_goes_up_in_parts") {
        return;
    }
    let server = S3Server::start();
    server.create_bucket(BUCKET);
    let dir = tempfile::tempdir().unwrap();
    let (_ex, peer) = executor(dir.path(), "tokio");
    let ws = workspace();
    // 12 MiB that deflate cannot shrink: three parts.
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let noise: Vec<u8> = (0..12 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(ws.path().join("noise.bin"), &noise).unwrap();
    let state = tempfile::tempdir().unwrap();
    let o = delegate(
        ws.path(),
        &peer,
        state.path(),
        Some(&server),
        "tokio",
        &[("AWCP_S3_PART_MIB", "5")],
    );
    assert_applied(&o, ws.path(), "multipart");
    assert_eq!(std::fs::read(ws.path().join("noise.bin")).unwrap(), noise);
    assert_eq!(server.object_keys(BUCKET), Vec::<String>::new());
}

/// Without a bucket, a delegator serving archives is its own object store (the local
/// provider): the executor GETs and PUTs capability URLs on its archive listener.
#[test]
fn the_local_provider_serves_the_objects_itself_on_both_runtimes() {
    for runtime in ["tokio", "smol"] {
        let dir = tempfile::tempdir().unwrap();
        let (_ex, peer) = executor(dir.path(), runtime);
        let ws = workspace();
        let state = tempfile::tempdir().unwrap();
        let o = delegate(ws.path(), &peer, state.path(), None, runtime, &[]);
        assert_applied(&o, ws.path(), runtime);
        let left: Vec<_> = std::fs::read_dir(state.path().join("objects-local"))
            .map(|r| r.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{runtime}: {left:?}");
        let archives: Vec<_> = std::fs::read_dir(state.path().join("archives"))
            .map(|r| r.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(archives.is_empty(), "{runtime}: {archives:?}");
    }
}

/// The daemon lends through its bucket; a cancelled delegation's objects are deleted, and so
/// are those of a delegation whose daemon was SIGKILLed (by the restarted daemon).
#[test]
fn objects_go_after_a_cancel_and_after_a_daemon_is_killed_and_restarted() {
    if !s3::require_or_skip("objects_go_after_a_cancel_and_after_a_daemon_is_killed") {
        return;
    }
    let server = S3Server::start();
    server.create_bucket(BUCKET);
    let dir = tempfile::tempdir().unwrap();
    let (ex, peer) = executor(dir.path(), "tokio");
    let state = dir.path().join("daemon");
    let spawn_daemon = || {
        let mut cmd = Command::new(bins::path("awcp"));
        cmd.args([
            "--quiet",
            "daemon",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
        ])
        .arg(&state)
        .env_remove("AWCP_DAEMON_TOKEN");
        s3_env(&mut cmd, &server);
        let (child, url) = bins::spawn_announcing(&mut cmd, bins::DAEMON_ANNOUNCES);
        (KillOnDrop(child), url)
    };
    let (daemon, url) = spawn_daemon();
    let ws = workspace();
    let start_slow = |url: &str| {
        let o = bins::awcp_on_daemon(
            url,
            &state,
            &[
                "--json",
                "delegate",
                ws.path().to_str().unwrap(),
                "--peer",
                &peer,
                "--prompt",
                "slow",
                "--transport",
                "storage",
                "--daemon",
                "--background",
            ],
        );
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        let v: serde_json::Value =
            serde_json::from_slice(o.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
        v["delegationId"].as_str().unwrap().to_owned()
    };
    let has_workspace = |id: &str| {
        server
            .object_keys(BUCKET)
            .contains(&format!("workspaces/{id}.zip"))
    };

    // Cancelled while the agent waits: both objects go.
    let id = start_slow(&url);
    wait_for("the workspace object", || has_workspace(&id));
    let o = bins::awcp_on_daemon(&url, &state, &["cancel", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    wait_for("the objects to go after cancel", || {
        server.object_keys(BUCKET).is_empty()
    });

    // SIGKILLed with the objects in the bucket: the restarted daemon still knows them (they
    // were journalled before the upload) and deletes them when the delegation ends.
    let id = start_slow(&url);
    wait_for("the workspace object", || has_workspace(&id));
    drop(daemon);
    assert!(has_workspace(&id), "left by the kill");
    // And objects of a delegation that is over (here: one it never heard of, as a crash in
    // the middle of a release leaves) go at start-up.
    let orphan = "dlg_00000000000000000000000000000000";
    let key = format!("workspaces/{orphan}.zip");
    let file = server.root.join(BUCKET).join(&key);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, b"PK").unwrap();
    std::fs::create_dir_all(state.join("objects")).unwrap();
    std::fs::write(
        state.join("objects").join(format!("{orphan}.json")),
        format!(r#"{{"bucket":"{BUCKET}","keys":["{key}"]}}"#),
    )
    .unwrap();
    let (_daemon, url) = spawn_daemon();
    wait_for("the restarted daemon to delete the orphan", || {
        !server.object_keys(BUCKET).contains(&key)
    });
    assert!(has_workspace(&id), "kept while its delegation goes on");
    let o = bins::awcp_on_daemon(&url, &state, &["cancel", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    wait_for(
        "the objects to go after the restarted daemon's cancel",
        || server.object_keys(BUCKET).is_empty(),
    );
    // And their journal entry (removed right after the deletes).
    let journal = state.join("objects").join(format!("{id}.json"));
    wait_for("the object journal entry to go", || !journal.exists());
    drop(ex);
    // The cancels ended both agents (none waits for `release`).
    let agent = dir.path().join("agent.sh").display().to_string();
    wait_for("no agent left running", || {
        processes_running(&agent).is_empty()
    });
}
