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
