//! The real `awcp daemon` killed with SIGKILL at a random moment of a delegation's life and
//! restarted on the same state directory, again and again: its journal (records appended to
//! one file per delegation) must always load, and every delegation must end consistently.
//!
//! Each try picks its own delegation id, asks the daemon to delegate (a real `awcp-executor`
//! whose agent waits a little and writes `result.txt`), kills the daemon after a random delay
//! (sometimes before it has even answered), restarts it and waits for the delegation to end.
//! Checked each time: the daemon either never recorded the delegation (then the workspace is
//! untouched) or knows it and ends it; the workspace holds the agent's `result.txt` for this
//! try exactly when the record says a snapshot was applied, and resumed delegations do reach
//! their result (a stale record would abandon them); no record file is ever moved aside
//! as unreadable; no staging directory is left beside the workspace. The run fails unless some
//! kills landed before the delegation ended (the daemon resumed it after the restart).
//!
//! And one restart made deterministic (issue 47, item 9): the daemon stopped while it was
//! storing a delegation's result, so its journal says `completed` with the snapshot
//! `in_flight`; restarted, it must report the delegation running while it fetches the result
//! again, never `completed`.
//!
//! And a daemon down longer than the lease (issue 47, item 7): the executor finished within
//! the lease while the daemon was down; restarted, the daemon asks it before expiring
//! anything, applies the result and says so.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use awcp_driver::delegator::daemon::api::DelegateBody;
use awcp_driver::delegator::daemon::DaemonClient;
use awcp_driver::DelegateParams;
use awcp_tests::bins::{self, KillOnDrop};
use awcp_tests::rng::Rng;
use awcp_tokio::TokioRuntime;

const TRIES: u64 = 12;

/// Waits 0.1–0.2 s (by its pid) so kills land at every stage, then writes the delegation's id.
const AGENT: &str = r#"#!/bin/sh
sleep 0.$(( ($$ % 10) + 2 ))
printf '%s\n' "$AWCP_DELEGATION_ID" > result.txt
echo "wrote result.txt"
"#;

fn client(url: String, state: &Path) -> DaemonClient<TokioRuntime> {
    DaemonClient::new(TokioRuntime, url).with_token(Some(bins::daemon_token(state)))
}

fn staging_left(parent: &Path) -> Vec<String> {
    std::fs::read_dir(parent)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".awcp-"))
        .collect()
}

#[test]
fn sigkill_at_any_moment_then_restart_keeps_every_record_readable_and_every_delegation_consistent()
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let base = tempfile::tempdir().unwrap();
    let parent = base.path().join("projects");
    let ws = parent.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("README.md"), "# lent\n").unwrap();
    let state = base.path().join("daemon");

    let exdir = base.path().join("executor");
    std::fs::create_dir_all(&exdir).unwrap();
    std::fs::write(exdir.join("agent.sh"), AGENT).unwrap();
    let agent = format!("sh {}", exdir.join("agent.sh").display());
    let (ex, peer) = bins::spawn_announcing(
        &mut bins::executor_command(&exdir, &agent),
        bins::EXECUTOR_ANNOUNCES,
    );
    let _ex = KillOnDrop(ex);

    let mut rng = Rng::from_clock();
    eprintln!("rng seed {}", rng.0);
    let (mut never_recorded, mut resumed, mut applied, mut not_applied) = (0, 0, 0, 0);
    // Every delegation the daemon knew after a restart: still known at the end (a kill may
    // land while a settled record moves to the history, `ended/`).
    let mut known = Vec::new();
    for attempt in 0..TRIES {
        let _ = std::fs::remove_file(ws.join("result.txt"));
        let id = format!("dlg_{:016x}{:016x}", rng.below(u64::MAX), attempt);
        let (daemon, url) = bins::spawn_daemon(&state);
        let mut daemon = KillOnDrop(daemon);
        let c = client(url, &state);
        let mut params = DelegateParams::new(peer.clone(), ws.clone(), "write result.txt");
        params.id = Some(awcp_proto::DelegationId::new(id.clone()).unwrap());
        let body = DelegateBody::from_params(&params).unwrap();
        // A quarter of the kills within the first 10 ms (before or while the delegation is
        // recorded), the others anywhere in its life.
        let delay = Duration::from_millis(if rng.below(4) == 0 {
            rng.below(10)
        } else {
            rng.below(400)
        });
        rt.block_on(async {
            // Kill after `delay`, whether or not the daemon has answered by then.
            let _ = tokio::time::timeout(delay, c.delegate(&body)).await;
            tokio::time::sleep(delay / 2).await;
        });
        daemon.0.kill().unwrap();
        daemon.0.wait().unwrap();
        drop(daemon);

        let (daemon, url) = bins::spawn_daemon(&state);
        let _daemon = KillOnDrop(daemon);
        let c = client(url, &state);
        let outcome = rt.block_on(async {
            let at_restart = match c.get(&id).await {
                Ok(rec) => rec,
                Err(e) if e.status == 404 => return None,
                Err(e) => panic!("try {attempt}: the restarted daemon answers: {e}"),
            };
            let end = c
                .wait(&id, Duration::from_secs(90))
                .await
                .unwrap_or_else(|e| panic!("try {attempt}: {id} ends after the restart: {e}"));
            Some((at_restart.ended, end))
        });
        let result = std::fs::read_to_string(ws.join("result.txt")).ok();
        match outcome {
            None => {
                never_recorded += 1;
                assert_eq!(
                    result, None,
                    "try {attempt}: unknown to the daemon, yet applied"
                );
            }
            Some((ended_before, end)) => {
                assert!(end.ended, "try {attempt}: {end:?}");
                known.push(id.clone());
                if !ended_before {
                    resumed += 1;
                }
                match &end.applied_snapshot_id {
                    Some(_) => {
                        applied += 1;
                        assert_eq!(
                            result.as_deref(),
                            Some(format!("{id}\n").as_str()),
                            "try {attempt}: the record says applied: {end:?}"
                        );
                    }
                    None => {
                        not_applied += 1;
                        // A result never applied leaves the workspace as it was (a staged or
                        // failed one is listed, not written).
                        assert_eq!(
                            result, None,
                            "try {attempt}: not applied, yet written: {end:?}"
                        );
                    }
                }
            }
        }
        let unreadable: Vec<_> = std::fs::read_dir(state.join("delegations"))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".unreadable") || n.starts_with(".tmp"))
                    .collect()
            })
            .unwrap_or_default();
        assert!(unreadable.is_empty(), "try {attempt}: {unreadable:?}");
        assert!(
            staging_left(&parent).is_empty(),
            "try {attempt}: staging left: {:?}",
            staging_left(&parent)
        );
    }
    let (daemon, url) = bins::spawn_daemon(&state);
    let _daemon = KillOnDrop(daemon);
    let listed = rt
        .block_on(client(url, &state).list())
        .expect("the last daemon lists");
    let listed = serde_json::to_string(&listed).unwrap();
    for id in &known {
        assert!(listed.contains(id.as_str()), "{id} lost: {listed}");
    }
    // Nothing settled (ended, nothing stored) stays in the start-up path once a daemon ran
    // on it.
    for e in std::fs::read_dir(state.join("delegations"))
        .unwrap()
        .flatten()
    {
        let rec = awcp_driver::executor::journal::read_record_file(&e.path());
        assert!(
            rec.as_ref().is_some_and(
                |r| r["ended"] != true || r["stored"].as_array().is_some_and(|s| !s.is_empty())
            ),
            "{}: {rec:?}",
            e.path().display()
        );
    }
    eprintln!(
        "{TRIES} tries: {never_recorded} never recorded, {resumed} resumed after the restart, \
         {applied} applied, {not_applied} ended without applying"
    );
    assert!(
        resumed >= 2,
        "too few kills landed before the delegation ended ({resumed}); the test proved little"
    );
    // A restart that read a stale record (one from before START went out) abandons the
    // delegation instead of resuming it: most resumed delegations must come to their result.
    assert!(
        applied >= 2,
        "only {applied} of {resumed} resumed delegations applied their result"
    );
}

/// The journal record of a delegation whose task completed and whose result was being stored
/// (not yet stored) when the daemon stopped: what the daemon writes at that moment.
fn record_while_storing(id: &str, peer: &str, workspace: &Path) -> serde_json::Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    serde_json::json!({
        "version": 1, "id": id, "peer": peer, "dialect": "reference",
        "invite": {"version": "1", "type": "INVITE", "delegationId": id,
            "task": {"description": "edit", "prompt": "edit"},
            "lease": {"ttlSeconds": 3600, "accessMode": "rw"},
            "environment": {"resources": [{"name": "workspace", "type": "fs", "mode": "rw"}]},
            "requirements": {"transport": "archive"}},
        "snapshotMode": "auto", "state": "completed",
        "createdAt": now - 2000, "updatedAt": now - 1000, "expiresAt": now + 3_600_000,
        "accessMode": "rw", "features": ["delta-snapshots", "archive-url"],
        "executorWorkDir": "/srv/work", "startSent": true, "heardTerminal": true, "ended": false,
        "stored": [],
        "snapshots": [{"id": "snap_restart", "summary": "edited", "highlights": [],
            "recommended": true, "metadata": {}, "status": {"status": "in_flight"},
            "receivedAt": now - 1000, "appliedAt": null, "error": null, "checksum": null}],
        "result": {"summary": "edited", "highlights": []}, "error": null,
        "allowSensitive": false, "notShipped": [], "notShippedCount": 0, "resultError": null,
        "warnings": [],
        "sources": [{"name": "workspace", "path": workspace, "mode": "rw"}],
    })
}

/// Issue 47, item 9: after a restart, a delegation whose result was still being stored is
/// reported `running` (its result is being fetched again), not `completed`; once the fetch
/// fails it ends as `not_applied`. The executor is a socket of this test that holds the
/// daemon's `GET …/result` open until the record has been read, then answers 404.
#[test]
fn a_restart_while_the_result_was_being_stored_reports_running_not_completed() {
    let base = tempfile::tempdir().unwrap();
    let ws = base.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "A\n").unwrap();
    let state = base.path().join("daemon");
    let executor = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let peer = format!("http://{}/awcp", executor.local_addr().unwrap());
    let id = "dlg_0123456789abcdef0123456789abcdef";
    let journal = state.join("delegations");
    std::fs::create_dir_all(&journal).unwrap();
    std::fs::write(
        journal.join(format!("{id}.json")),
        record_while_storing(id, &peer, &ws).to_string(),
    )
    .unwrap();

    // The executor: the first request (the result fetch) is held until `release` says, then
    // every request is answered 404 (the executor no longer has the result).
    let (fetching_tx, fetching) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let not_found = "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\n\
                         content-length: 2\r\nconnection: close\r\n\r\n{}";
        for (n, conn) in executor.incoming().enumerate() {
            let Ok(mut conn) = conn else { return };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).is_ok_and(|k| k == 1) {
                head.push(byte[0]);
            }
            if n == 0 {
                let _ = fetching_tx.send(String::from_utf8_lossy(&head).into_owned());
                let _ = released.recv();
            }
            let _ = conn.write_all(not_found.as_bytes());
        }
    });

    let (daemon, url) = bins::spawn_daemon(&state);
    let _daemon = KillOnDrop(daemon);
    let request = fetching
        .recv_timeout(Duration::from_secs(60))
        .expect("the restarted daemon fetches the result again");
    assert!(
        request.starts_with(&format!("GET /awcp/tasks/{id}/result")),
        "{request}"
    );
    // The fetch is held: the result is on its way.
    let o = bins::awcp_on_daemon(&url, &state, &["--json", "status", id]);
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", bins::show(&o)));
    assert_eq!(v["state"], "completed", "the task did complete: {v}");
    assert_eq!(
        v["outcome"]["status"], "running",
        "the result is still being fetched: {v}"
    );
    assert_eq!(v["ended"], false, "{v}");

    release.send(()).unwrap();
    let o = bins::awcp_on_daemon(&url, &state, &["--json", "wait", id, "--timeout", "60"]);
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", bins::show(&o)));
    assert_eq!(v["ended"], true, "{v}");
    assert_eq!(v["outcome"]["status"], "not_applied", "{v}");
    assert_eq!(o.status.code(), Some(4), "{}", bins::show(&o));
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "A\n");
}

/// Waits for `path` to appear, then writes `result.txt` (the test opens the gate while the
/// daemon is down).
const GATED_AGENT: &str = r#"#!/bin/sh
echo "waiting for the gate"
while [ ! -e "$GATE" ]; do sleep 0.05; done
printf 'finished while the delegator was down\n' > result.txt
echo "wrote result.txt"
"#;

/// `GET url` over a plain socket; the response body (HTTP/1.0, so the server closes).
fn http_get(url: &str) -> String {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (authority, path) = rest.split_once('/').expect("a path");
    let mut s = std::net::TcpStream::connect(authority).unwrap();
    write!(s, "GET /{path} HTTP/1.0\r\nHost: {authority}\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// Issue 47, item 7: a daemon down longer than the lease, while the executor finished the
/// task within it and still serves the result. Restarted, the daemon asks the executor
/// before it expires anything: the result is applied, the delegation `completed`, and the
/// record says what happened.
#[test]
fn a_daemon_down_past_the_lease_takes_the_result_the_executor_finished_within_it() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let base = tempfile::tempdir().unwrap();
    let ws = base.path().join("projects").join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("README.md"), "# lent\n").unwrap();
    let state = base.path().join("daemon");
    let exdir = base.path().join("executor");
    std::fs::create_dir_all(&exdir).unwrap();
    std::fs::write(exdir.join("agent.sh"), GATED_AGENT).unwrap();
    let gate = exdir.join("gate");
    let agent = format!("sh {}", exdir.join("agent.sh").display());
    let (ex, peer) = bins::spawn_announcing(
        bins::executor_command(&exdir, &agent)
            .args(["--agent-env", &format!("GATE={}", gate.display())]),
        bins::EXECUTOR_ANNOUNCES,
    );
    let _ex = KillOnDrop(ex);

    let id = "dlg_7a1e2b3c4d5e6f708192a3b4c5d6e7f8";
    let (daemon, url) = bins::spawn_daemon(&state);
    let mut daemon = KillOnDrop(daemon);
    let c = client(url, &state);
    let mut params = DelegateParams::new(peer.clone(), ws.clone(), "write result.txt");
    params.id = Some(awcp_proto::DelegationId::new(id).unwrap());
    params.ttl_seconds = 4;
    let body = DelegateBody::from_params(&params).unwrap();
    let expires_at = rt.block_on(async {
        c.delegate(&body).await.unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let rec = c.get(id).await.unwrap();
            if rec.state == "running" {
                let lease = rec.active_lease.expect("a running delegation has a lease");
                break awcp_proto::Timestamp::parse_rfc3339(&lease.expires_at).unwrap();
            }
            assert!(std::time::Instant::now() < until, "never running: {rec:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    daemon.0.kill().unwrap();
    daemon.0.wait().unwrap();
    drop(daemon);

    // While the daemon is down: the task finishes within the lease…
    std::fs::write(&gate, "").unwrap();
    let result_url = format!(
        "{}/awcp/tasks/{id}/result",
        peer.trim_end_matches('/').trim_end_matches("/awcp")
    );
    let until = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let r = http_get(&result_url);
        if r.contains("\"status\":\"completed\"") {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "the task never completed: {r}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    assert!(
        now_ms() < expires_at.as_unix_millis(),
        "finished after the lease: too slow a machine"
    );
    // …and the lease ends before the daemon is back.
    while now_ms() <= expires_at.as_unix_millis() + 500 {
        std::thread::sleep(Duration::from_millis(50));
    }

    let (daemon, url) = bins::spawn_daemon(&state);
    let _daemon = KillOnDrop(daemon);
    let c = client(url, &state);
    let end = rt
        .block_on(c.wait(id, Duration::from_secs(90)))
        .expect("the delegation ends after the restart");
    assert_eq!(end.state, "completed", "{end:?}");
    assert!(end.applied_snapshot_id.is_some(), "{end:?}");
    assert_eq!(
        std::fs::read_to_string(ws.join("result.txt")).unwrap(),
        "finished while the delegator was down\n"
    );
    assert!(
        end.warnings
            .iter()
            .any(|w| w.contains("finished the task within it")),
        "the record says what happened: {:?}",
        end.warnings
    );
}
