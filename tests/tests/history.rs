//! Issue 54.2: a delegator's start-up costs what is live, not its history. The records of
//! settled delegations (ended, nothing stored or being applied) move from `<state>/delegations`
//! to `<state>/ended` and are read only when a command may ask about one of them; they stay
//! listed and readable. Real `awcp` against a real `awcp-executor`.

#[allow(dead_code)] // Helpers shared with cli_results.rs, not all used here.
mod cli_support;

use std::path::Path;

use awcp_tests::bins::{awcp, show, KillOnDrop};
use awcp_tests::strace;

use cli_support::{delegate, delegate_with, record, retry_command, workspace, Executor};

fn ids_in(dir: &Path) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.strip_suffix(".json").map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

fn id_of(o: &std::process::Output) -> String {
    record(o)["id"].as_str().expect("an id").to_owned()
}

/// Applied delegations leave the journal for the history; a staged one stays until it is
/// applied. `awcp status` and `awcp list` still show every one, and an `awcp delegate` run
/// after them never touches anything of the settled ones (its start-up reads no history).
#[test]
fn settled_delegations_leave_the_start_up_path_and_stay_listed() {
    let ex = Executor::start();
    let state = tempfile::tempdir().unwrap();
    let journal = state.path().join("delegations");
    let history = state.path().join("ended");
    let mut settled = Vec::new();
    for _ in 0..3 {
        let ws = workspace();
        let o = delegate(ws.path(), &ex.url, "edit", state.path());
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        settled.push(id_of(&o));
    }
    let ws = workspace();
    let o = delegate_with(
        ws.path(),
        &ex.url,
        "edit",
        state.path(),
        &["--snapshot-mode", "staged"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let staged = id_of(&o);
    settled.sort();
    assert_eq!(ids_in(&history), settled, "applied ones are history");
    assert_eq!(
        ids_in(&journal),
        vec![staged.clone()],
        "a staged one is live"
    );

    let st = state.path().to_str().unwrap();
    for id in &settled {
        let s = awcp(&["--json", "status", id, "--state-dir", st]);
        assert_eq!(s.status.code(), Some(0), "{}", show(&s));
        let v = record(&s);
        assert_eq!(v["state"], "completed", "{v}");
        assert!(v["appliedSnapshotId"].is_string(), "{v}");
    }
    // Listed by a daemon on the same state directory (which reads the history at the first
    // list), and nothing written back to the journal by reading it.
    let (daemon, url) = awcp_tests::bins::spawn_daemon(state.path());
    let daemon = KillOnDrop(daemon);
    let l = awcp(&["--json", "--daemon-url", &url, "--state-dir", st, "list"]);
    drop(daemon);
    assert_eq!(l.status.code(), Some(0), "{}", show(&l));
    let listed = String::from_utf8_lossy(&l.stdout);
    for id in settled.iter().chain([&staged]) {
        assert!(
            listed.contains(id.as_str()),
            "{id} not listed: {}",
            show(&l)
        );
    }
    assert_eq!(ids_in(&journal), vec![staged.clone()]);

    // Applying the staged one settles it.
    let sid = record(&o)["snapshots"][0]["id"]
        .as_str()
        .expect("a staged snapshot")
        .to_owned();
    let apply = ["apply", staged.as_str(), sid.as_str(), "--state-dir", st];
    let a = awcp(&apply);
    assert_eq!(a.status.code(), Some(0), "{}", show(&a));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("RESULT.txt")).unwrap(),
        "agent was here\n"
    );
    assert!(ids_in(&journal).is_empty(), "{:?}", ids_in(&journal));
    settled.push(staged);

    // A new delegation's process never names a settled one (no record read or synced, no
    // snapshot or apply directory looked for).
    if !strace::available("settled_delegations_leave_the_start_up_path_and_stay_listed") {
        return;
    }
    let log = state.path().join("..").join(format!(
        "history-{}.strace",
        state.path().file_name().unwrap().to_string_lossy()
    ));
    let ws = workspace();
    let o = strace::command_tracing(
        &awcp_tests::bins::path("awcp"),
        &log,
        "openat,stat,statx,newfstatat,access,unlink,unlinkat,rmdir,rename,fsync,fdatasync",
    )
    .args(["--json", "delegate"])
    .arg(ws.path())
    .args(["--peer", &ex.url, "--prompt", "edit", "--state-dir", st])
    .output()
    .expect("strace runs");
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let lines = strace::lines(&log);
    let _ = std::fs::remove_file(&log);
    let named: Vec<&String> = lines
        .iter()
        .filter(|l| settled.iter().any(|id| l.contains(id.as_str())))
        .collect();
    assert!(named.is_empty(), "start-up touched history: {named:#?}");
    assert!(ids_in(&history).contains(&id_of(&o)));
}

/// The printed retry command of a result that could not be applied still works when other
/// delegations of the same state directory are history, and the delegation settles after it.
#[test]
fn a_result_left_staged_by_a_conflict_is_live_until_applied() {
    let (_ex, state, ws, o) = cli_support::conflicting_delegation();
    let id = id_of(&o);
    assert_eq!(ids_in(&state.path().join("delegations")), vec![id.clone()]);
    std::fs::write(ws.path().join("a.txt"), "A\n").unwrap();
    let retry = retry_command(&o);
    let a = awcp(&retry.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(a.status.code(), Some(0), "{}", show(&a));
    assert!(ids_in(&state.path().join("delegations")).is_empty());
    assert_eq!(ids_in(&state.path().join("ended")), vec![id]);
}

/// A delegation id a caller chooses (the daemon API's `id`) that names a settled delegation is
/// refused as taken, also by a daemon that has not read its history yet (a fresh start), and
/// the settled record is left as it was.
#[test]
fn a_chosen_id_of_a_settled_delegation_is_refused_after_a_restart() {
    use awcp_driver::delegator::daemon::api::DelegateBody;
    use awcp_driver::delegator::daemon::DaemonClient;
    use awcp_driver::DelegateParams;
    use std::time::Duration;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ex = Executor::start();
    let state = tempfile::tempdir().unwrap();
    let ws = workspace();
    let id = "dlg_0123456789abcdef0123456789abcdef";
    let mut params = DelegateParams::new(ex.url.clone(), ws.path().to_path_buf(), "edit");
    params.id = Some(awcp_proto::DelegationId::new(id).unwrap());
    let body = DelegateBody::from_params(&params).unwrap();
    let client = |url: String| {
        DaemonClient::new(awcp_tokio::TokioRuntime, url)
            .with_token(Some(awcp_tests::bins::daemon_token(state.path())))
    };
    {
        let (daemon, url) = awcp_tests::bins::spawn_daemon(state.path());
        let _daemon = KillOnDrop(daemon);
        let c = client(url);
        rt.block_on(async {
            c.delegate(&body).await.expect("delegated");
            let end = c.wait(id, Duration::from_secs(60)).await.expect("ended");
            assert!(end.outcome.is_success(), "{end:?}");
        });
    }
    let history = state.path().join("ended").join(format!("{id}.json"));
    let before = std::fs::read(&history).expect("settled into the history");
    let (daemon, url) = awcp_tests::bins::spawn_daemon(state.path());
    let _daemon = KillOnDrop(daemon);
    let c = client(url);
    let again = rt.block_on(c.delegate(&body));
    assert!(again.is_err(), "the id is taken: {again:?}");
    assert_eq!(std::fs::read(&history).unwrap(), before, "left as it was");
    assert!(ids_in(&state.path().join("delegations")).is_empty());
}
