//! The git transport's served repository (no `--git-remote`: the delegator serves a bare
//! repository itself over git's smart HTTP at `/git/<token>/repo.git/` on its archive
//! listener) on the real binaries, for what `tests/tests/git.rs` does not show:
//!
//! - the URL is a capability: it opens the repository while the task runs and nothing once
//!   the delegation ended (404 to git, fetch and push, and to plain HTTP) on a listener that
//!   is still up; it is in no log of either side (both at debug level) and no file of
//!   either side;
//! - a push can neither rewind nor delete the base branch nor write the delegator's own
//!   `refs/awcp/…`, and whatever else a holder of the URL pushes, the delegation applies
//!   exactly the executor's work; tags, notes and anything else that is not a branch are
//!   refused (branch names are not restricted: a reference executor's task branch has a
//!   prefix of its own);
//! - one delegation's token opens its own repository only (and cannot write the other's),
//!   and tokens of the same shape that were never issued open nothing;
//! - clients holding requests open (push and fetch bodies announced and never sent, a request
//!   head never finished) do not stall the delegator, and what they sent goes with the
//!   delegation; a push over the snapshot size limit is refused, the delegation ends with
//!   the executor's push error, and nothing is left;
//! - a delegator SIGKILLed in the middle of a git delegation, restarted as `awcp daemon` on
//!   its state directory: the start-up sweep removes what belonged to delegations that are
//!   over (a repository, request bodies) and keeps the live one's; through a remote
//!   (`git daemon`) the delegation resumes and applies, and every ref of the remote is as it
//!   was; served, the URL died with the process, so the executor's push fails and the
//!   delegation ends in error, with nothing applied and both sides released.
//!
//! The URL is learnt the way the executor learns it: from the START request's handle, read
//! off the wire by a TCP relay between the delegator and the executor ([`Tap`]).

mod git_served_support;

use git_served_support::*;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use awcp_tests::bins::{show, KillOnDrop};
use awcp_tests::files::{entries, files_containing, read};
use awcp_tests::git::{git, GitDaemon};

#[test]
fn a_served_repository_url_opens_it_until_the_delegation_ends_and_is_logged_nowhere() {
    if !have_git("a_served_repository_url_opens_it_until_the_delegation_ends") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exec_dir = dir.path().join("executor");
    let (_ex, peer) = executor(&exec_dir);
    let tap = Tap::start(&peer);
    // A daemon: its archive listener outlives the delegation, so what answers after the
    // end is the listener refusing the token, not a closed port.
    let state = dir.path().join("daemon");
    let daemon_log = dir.path().join("daemon.log");
    let (mut daemon_proc, api) = daemon(&state, &daemon_log, &["--serve-archives", "127.0.0.1:0"]);
    let ws = workspace("one\n");
    let id = delegate_on_daemon(&api, &state, ws.path(), &tap.url, "slow");
    assert_eq!(wait_started(&exec_dir, 1), std::slice::from_ref(&id));
    let handle = tap.wait_handles(1).remove(0);
    let url = repo_url(&handle);
    let token = token_of(&url);
    assert_eq!(token.len(), 64, "a 256-bit token: {url}");
    let base_branch = format!("awcp/{id}-base");
    assert_eq!(handle["baseBranch"], base_branch.as_str());
    let base_commit = handle["baseCommit"].as_str().unwrap().to_owned();

    // While the task runs: the URL opens the repository (git and plain HTTP alike).
    let refs = ls_remote(&url).unwrap_or_else(|e| panic!("ls-remote while running: {e}"));
    assert!(
        refs.contains(&format!("{base_commit}\trefs/heads/{base_branch}")),
        "{refs}"
    );
    let info_refs = format!("{url}/info/refs?service=git-upload-pack");
    assert_eq!(http_status("GET", &info_refs, b""), 200);
    // A clone to push from after the end.
    let scratch = dir.path().join("scratch");
    try_git(
        dir.path(),
        &[
            "clone",
            "-q",
            "--branch",
            &base_branch,
            "--",
            &url,
            "scratch",
        ],
    )
    .unwrap_or_else(|e| panic!("clone while running: {e}"));
    // The executor got the URL in START and keeps it in memory only: it is in no file of
    // its directory (log, state, work directory: no `.git/config` with a remote).
    let leaked = files_containing(&exec_dir, &token);
    assert!(leaked.is_empty(), "the token is in {leaked:?}");
    assert!(!read(&exec_dir.join("executor.log")).is_empty(), "logging");
    // Nor does the delegator write it down (it keeps the token's digest, in memory).
    let leaked = files_containing(&state, &token);
    assert!(leaked.is_empty(), "the token is in {leaked:?}");

    std::fs::write(exec_dir.join("release"), "").unwrap();
    let o = wait_on_daemon(&api, &state, &id);
    assert_applied(&o, ws.path(), "served by the daemon");
    assert_nothing_left(&exec_dir, &state, "after the end");

    // Ended and released, the daemon still up: the same URL opens nothing, for git and for
    // plain HTTP, fetch and push alike.
    assert!(
        daemon_proc.0.try_wait().unwrap().is_none(),
        "the daemon runs"
    );
    let e = ls_remote(&url).expect_err("ls-remote after the end");
    assert!(e.contains("404") || e.contains("not found"), "{e}");
    std::fs::write(scratch.join("late.txt"), "late\n").unwrap();
    git(&scratch, &["add", "late.txt"]);
    git(&scratch, &["commit", "-q", "-m", "late"]);
    let e = try_git(
        &scratch,
        &["push", "--", &url, &format!("HEAD:refs/heads/awcp/{id}")],
    )
    .expect_err("a push after the end");
    assert!(e.contains("404") || e.contains("not found"), "{e}");
    for (m, u, body) in [
        ("GET", info_refs.clone(), &b""[..]),
        (
            "GET",
            format!("{url}/info/refs?service=git-receive-pack"),
            b"",
        ),
        ("POST", format!("{url}/git-upload-pack"), b"0000"),
        ("POST", format!("{url}/git-receive-pack"), b"0000"),
    ] {
        assert_eq!(http_status(m, &u, body), 404, "{m} {u}");
    }

    // Neither side logged the capability: not the executor (debug level), not the daemon
    // (debug level).
    for log in [exec_dir.join("executor.log"), daemon_log] {
        let text = read(&log);
        assert!(!text.contains(&token), "{} holds the token", log.display());
        assert!(
            !text.contains("/git/"),
            "{} holds a repository path",
            log.display()
        );
    }
    for d in [&exec_dir, &state] {
        let leaked = files_containing(d, &token);
        assert!(leaked.is_empty(), "the token is in {leaked:?}");
    }
}
/// What a push to the served repository can never do: rewind or delete the base branch, or
/// touch the delegator's own `refs/awcp/…`; and whatever else a holder of the URL pushes
/// (a branch of its own, a tag, a fast-forward of the base branch), the delegation applies
/// the executor's change against the base it lent, and nothing more.
#[test]
fn a_served_repository_s_base_and_own_refs_cannot_be_rewound_deleted_or_written() {
    if !have_git("a_served_repository_s_base_and_own_refs_cannot_be_rewound_deleted_or_written") {
        return;
    }
    let x = Intrusion::start();
    let (base, orphan) = (&x.base, &x.orphan);
    let refused = [
        // The base branch rewound (forced) and deleted.
        format!("+{orphan}:{base}"),
        format!(":{base}"),
        // The delegator's own refs.
        "+HEAD:refs/awcp/base".to_owned(),
        "HEAD:refs/awcp/result".to_owned(),
        "HEAD:refs/awcp/intruder".to_owned(),
        // Anything but a branch.
        "HEAD:refs/tags/intruder".to_owned(),
        "HEAD:refs/notes/intruder".to_owned(),
    ];
    assert_eq!(x.taken(&refused), Vec::<String>::new(), "pushes taken");
    // Pushes that are taken: new branches (a reference executor names its task branch with
    // a prefix of its own, so branch names are not restricted) and a fast-forward of the
    // base. None of them reaches what the delegator reads: `refs/awcp/base` and the branch
    // the executor's snapshot names.
    for spec in ["HEAD:refs/heads/main".to_owned(), format!("HEAD:{base}")] {
        let _ = try_git(&x.scratch, &["push", "--", &x.url, &spec]);
    }
    let base_ref = |refs: &str| {
        refs.lines()
            .find(|l| l.starts_with("refs/awcp/base "))
            .map(str::to_owned)
    };
    let now = served_refs(&x.state, &x.id);
    assert_eq!(base_ref(&now), base_ref(&x.before), "{now}");
    assert!(base_ref(&now).is_some(), "{now}");
    x.finish("after the intruder's pushes");
}

#[test]
fn a_served_repository_s_token_opens_that_delegation_s_repository_only() {
    if !have_git("a_served_repository_s_token_opens_that_delegation_s_repository_only") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exec_dir = dir.path().join("executor");
    let (_ex, peer) = executor(&exec_dir);
    let tap = Tap::start(&peer);
    let state = dir.path().join("daemon");
    let (_daemon, api) = daemon(
        &state,
        &dir.path().join("daemon.log"),
        &["--serve-archives", "127.0.0.1:0"],
    );
    let (ws_a, ws_b) = (workspace("A\n"), workspace("B\n"));
    let a = delegate_on_daemon(&api, &state, ws_a.path(), &tap.url, "slow");
    let b = delegate_on_daemon(&api, &state, ws_b.path(), &tap.url, "slow");
    let mut ids = vec![a.clone(), b.clone()];
    ids.sort();
    assert_eq!(wait_started(&exec_dir, 2), ids);
    let handles = tap.wait_handles(2);
    let of = |id: &str| {
        handles
            .iter()
            .find(|h| h["baseBranch"] == format!("awcp/{id}-base").as_str())
            .unwrap_or_else(|| panic!("no handle of {id}: {handles:?}"))
            .clone()
    };
    let (ha, hb) = (of(&a), of(&b));
    let (url_a, url_b) = (repo_url(&ha), repo_url(&hb));
    assert_ne!(token_of(&url_a), token_of(&url_b));
    assert_ne!(ha["baseCommit"], hb["baseCommit"]);

    // Each token lists its own delegation's base branch and commit, and nothing of the other.
    for (url, mine, theirs) in [(&url_a, &ha, &hb), (&url_b, &hb, &ha)] {
        let refs = ls_remote(url).unwrap_or_else(|e| panic!("ls-remote {url}: {e}"));
        let line = format!(
            "{}\trefs/heads/{}",
            mine["baseCommit"].as_str().unwrap(),
            mine["baseBranch"].as_str().unwrap()
        );
        assert!(refs.contains(&line), "{refs}");
        assert!(
            !refs.contains(theirs["baseCommit"].as_str().unwrap())
                && !refs.contains(theirs["baseBranch"].as_str().unwrap()),
            "{refs}"
        );
    }
    // A's token cannot write B's branch where B's delegation reads it: a push of that name
    // lands, if anywhere, in A's own repository.
    try_git(
        dir.path(),
        &[
            "clone",
            "-q",
            "--branch",
            &format!("awcp/{a}-base"),
            "--",
            &url_a,
            "scratch",
        ],
    )
    .unwrap_or_else(|e| panic!("clone: {e}"));
    let scratch = dir.path().join("scratch");
    std::fs::write(scratch.join("intruder.txt"), "from A's token\n").unwrap();
    git(&scratch, &["add", "intruder.txt"]);
    git(&scratch, &["commit", "-q", "-m", "intruder"]);
    let refs_b = served_refs(&state, &b);
    let r = try_git(
        &scratch,
        &["push", "--", &url_a, &format!("HEAD:refs/heads/awcp/{b}")],
    );
    assert_eq!(
        served_refs(&state, &b),
        refs_b,
        "A's token reached B: {r:?}"
    );

    // Tokens of the right shape that were never issued open nothing; nor does a real token
    // under another repository name.
    let real = token_of(&url_a);
    let flipped = format!(
        "{}{}",
        if real.starts_with('0') { '1' } else { '0' },
        &real[1..]
    );
    for token in [flipped, "0".repeat(64), "f".repeat(64)] {
        let fake = url_a.replace(&real, &token);
        assert!(ls_remote(&fake).is_err(), "{fake} opened");
        let info = format!("{fake}/info/refs?service=git-upload-pack");
        assert_eq!(http_status("GET", &info, b""), 404, "{info}");
    }
    let other = url_a.replace("/repo.git", "/other.git");
    assert_eq!(
        http_status(
            "GET",
            &format!("{other}/info/refs?service=git-upload-pack"),
            b""
        ),
        404
    );

    std::fs::write(exec_dir.join("release"), "").unwrap();
    assert_applied(&wait_on_daemon(&api, &state, &a), ws_a.path(), "A");
    assert_applied(&wait_on_daemon(&api, &state, &b), ws_b.path(), "B");
    assert_eq!(read(&ws_a.path().join("tag.txt")), "A\n");
    assert_eq!(read(&ws_b.path().join("tag.txt")), "B\n");
    assert_nothing_left(&exec_dir, &state, "two delegations");
}

#[test]
fn clients_holding_requests_on_a_served_repository_do_not_stall_the_delegator() {
    if !have_git("clients_holding_requests_on_a_served_repository_do_not_stall_the_delegator") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exec_dir = dir.path().join("executor");
    let (_ex, peer) = executor(&exec_dir);
    let tap = Tap::start(&peer);
    let ws = workspace("one\n");
    let state = dir.path().join("delegator");
    let child = delegate_cmd(
        ws.path(),
        &tap.url,
        &state,
        "slow",
        &["--serve-archives", "127.0.0.1:0"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let child = ChildOutput(Some(child));
    let id = wait_started(&exec_dir, 1).remove(0);
    let url = repo_url(&tap.wait_handles(1)[0]);
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    // Held open while the delegation runs: pushes announcing most of a gigabyte and sending
    // a few bytes, a fetch likewise, and a request head never finished.
    let mut held = Vec::new();
    for (service, sent) in [
        ("git-receive-pack", 4096),
        ("git-receive-pack", 1),
        ("git-upload-pack", 100),
    ] {
        let mut s = TcpStream::connect(host).unwrap();
        write!(
            s,
            "POST {path}/{service} HTTP/1.1\r\nHost: {host}\r\n\
             Content-Type: application/x-{service}-request\r\nContent-Length: 900000000\r\n\r\n"
        )
        .unwrap();
        s.write_all(&vec![b'0'; sent]).unwrap();
        held.push(s);
    }
    let mut s = TcpStream::connect(host).unwrap();
    write!(
        s,
        "POST {path}/git-receive-pack HTTP/1.1\r\nHost: {host}\r\nContent-Le"
    )
    .unwrap();
    held.push(s);
    // Bodies being received are files under `<state>/git-http/<id>`.
    let bodies = state.join("git-http").join(&id);
    wait_for("the bodies being received", || entries(&bodies).len() >= 3);
    // The repository still answers, and the real delegation runs to its end.
    let refs = ls_remote(&url).unwrap_or_else(|e| panic!("ls-remote while held: {e}"));
    assert!(refs.contains("-base"), "{refs}");
    std::fs::write(exec_dir.join("release"), "").unwrap();
    let o = child.wait();
    assert_applied(&o, ws.path(), "with requests held open");
    // The delegation ended while the requests were held: what they sent is gone with it.
    assert_nothing_left(&exec_dir, &state, "with requests held open");
    drop(held);
}

/// An in-process delegator (its snapshot limit, which caps a push's body, set to 512 KiB:
/// `awcp delegate` has no flag for it) serving the repository, against the real executor
/// whose agent writes 2 MB of random bytes: the push is refused, the delegation ends with the
/// executor's push error, nothing is applied or left on either side.
#[test]
fn a_push_over_the_snapshot_limit_is_refused_and_the_delegation_ends() {
    use agent_rt::TokioRuntime;
    use awcp_driver::{DelegateParams, DelegatorHandle, DelegatorOptions};
    if !have_git("a_push_over_the_snapshot_limit_is_refused_and_the_delegation_ends") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exec_dir = dir.path().join("executor");
    let (_ex, peer) = executor(&exec_dir);
    let state = dir.path().join("delegator");
    let ws = workspace("one\n");
    let view = <TokioRuntime as awcp_driver::Driver>::block_on(async {
        let transport = awcp_transports::ArchiveDelegator::new(
            awcp_transports::ArchiveDelegatorConfig::new(state.join("exports")),
        );
        let mut opts = DelegatorOptions::new(Arc::new(transport), state.clone());
        opts.engine.max_snapshot_bytes = 512 * 1024;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        opts.archive_base_url = Some(format!("http://{}", l.local_addr().unwrap()));
        let d = DelegatorHandle::start(TokioRuntime, opts);
        awcp_driver::Driver::spawn_archive_server(&TokioRuntime, l, d.clone());
        let mut p = DelegateParams::new(peer.clone(), ws.path(), "big");
        p.transport = awcp_proto::TransportKind::Git;
        let id = d.delegate(p).await.unwrap();
        let v = d.wait(&id).await.unwrap();
        // The release runs after the end: let it finish before the runtime goes.
        let git = state.join("git");
        let start = Instant::now();
        while !entries(&git).is_empty() && start.elapsed() < DEADLINE {
            d.timer(Duration::from_millis(20)).await;
        }
        d.stop().await;
        v
    });
    assert!(view.ended, "{view:?}");
    assert_ne!(
        view.state,
        awcp_proto::DelegationState::Completed,
        "{view:?}"
    );
    // The executor's push failed, and says so. Not why: the delegator answers 413 and
    // closes the connection while git is still sending, so git reports a broken pipe (or,
    // when the whole body fitted in the socket's buffers, the 413).
    let error = view.error.as_ref().unwrap_or_else(|| panic!("{view:?}"));
    assert_eq!(error.code.as_str(), "TRANSPORT_ERROR", "{view:?}");
    assert!(error.message.contains("git push failed"), "{view:?}");
    assert!(view.snapshots.is_empty(), "{view:?}");
    assert!(!ws.path().join("RESULT.txt").exists());
    assert!(!ws.path().join("big.bin").exists());
    assert_eq!(read(&ws.path().join("a.txt")), "A\n");
    assert_nothing_left(&exec_dir, &state, "an oversized push");
}

/// A delegator SIGKILLed while its served git delegation runs, restarted as `awcp daemon`
/// on its state directory (serving again, on another port): what a previous process left
/// for delegations that are over (a repository, request bodies) goes at start-up; the
/// killed delegation's URL died with the process (the port, and the grant, which is not
/// journalled), so the executor's push fails, and the delegation ends without a result,
/// its repository removed, the executor released.
#[test]
fn a_sigkilled_serving_delegator_restarted_sweeps_and_the_executor_releases() {
    if !have_git("a_sigkilled_serving_delegator_restarted_sweeps_and_the_executor_releases") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exec_dir = dir.path().join("executor");
    let (_ex, peer) = executor(&exec_dir);
    let ws = workspace("one\n");
    let state = dir.path().join("delegator");
    let child = delegate_cmd(
        ws.path(),
        &peer,
        &state,
        "slow",
        &["--serve-archives", "127.0.0.1:0"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut killed = KillOnDrop(child);
    let id = wait_started(&exec_dir, 1).remove(0);
    killed.0.kill().unwrap();
    killed.0.wait().unwrap();
    drop(killed);
    assert_eq!(entries(&state.join("git")), [format!("{id}.git")]);
    // What a crash between prepare and release leaves of a delegation that is over (here,
    // one this state directory never knew), and a request body of the dead process.
    let orphan = "dlg_00000000000000000000000000000000";
    git(
        dir.path(),
        &[
            "init",
            "-q",
            "--bare",
            state
                .join("git")
                .join(format!("{orphan}.git"))
                .to_str()
                .unwrap(),
        ],
    );
    std::fs::create_dir_all(state.join("git-http")).unwrap();
    std::fs::write(state.join("git-http").join("stale.in"), "0000").unwrap();

    let (_daemon, api) = daemon(
        &state,
        &dir.path().join("daemon.log"),
        &["--serve-archives", "127.0.0.1:0"],
    );
    wait_for("the start-up sweep", || {
        entries(&state.join("git")) == [format!("{id}.git")]
            && entries(&state.join("git-http")).is_empty()
    });
    std::fs::write(exec_dir.join("release"), "").unwrap();
    let o = wait_on_daemon(&api, &state, &id);
    let v = record(&o);
    assert_eq!(v["ended"], true, "{}", show(&o));
    assert_eq!(v["state"], "error", "{}", show(&o));
    assert_eq!(v["error"]["code"], "TRANSPORT_ERROR", "{}", show(&o));
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("git push failed"), "{message}");
    assert!(
        !message.contains("/git/"),
        "the URL in a message: {message}"
    );
    assert!(!ws.path().join("RESULT.txt").exists(), "{}", show(&o));
    assert_eq!(read(&ws.path().join("a.txt")), "A\n");
    assert_nothing_left(&exec_dir, &state, "after the restart");
}

/// The same through a remote (`git daemon`): the restarted `awcp daemon`, given the same
/// `--git-remote`, keeps the live delegation's repository, resumes the delegation, applies
/// the executor's branch and deletes both delegation branches; every other ref of the
/// remote is as it was.
#[test]
fn a_sigkilled_delegator_with_a_remote_restarted_resumes_and_leaves_the_remote_as_it_was() {
    if !have_git("a_sigkilled_delegator_with_a_remote_restarted_resumes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let remotes = tempfile::tempdir().unwrap();
    let gitd = GitDaemon::start(remotes.path());
    let remote = gitd.repository("team.git");
    let before = gitd.refs("team.git");
    let exec_dir = dir.path().join("executor");
    let (_ex, peer) = executor(&exec_dir);
    let ws = workspace("one\n");
    let state = dir.path().join("delegator");
    let child = delegate_cmd(ws.path(), &peer, &state, "slow", &["--git-remote", &remote])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut killed = KillOnDrop(child);
    let id = wait_started(&exec_dir, 1).remove(0);
    killed.0.kill().unwrap();
    killed.0.wait().unwrap();
    drop(killed);
    let left = gitd.refs("team.git");
    assert!(
        left.contains(&format!("refs/heads/awcp/{id}-base")),
        "{left}"
    );
    // A repository of a delegation this state directory never knew (a crash before its
    // record): the sweep releases it, remote configured or not.
    let orphan = state
        .join("git")
        .join("dlg_00000000000000000000000000000000.git");
    git(
        dir.path(),
        &["init", "-q", "--bare", orphan.to_str().unwrap()],
    );
    let (_daemon, api) = daemon(
        &state,
        &dir.path().join("daemon.log"),
        &["--git-remote", &remote],
    );
    // The delegation is live: the start-up sweep keeps its repository (which the result is
    // fetched into).
    wait_for("the sweep of the orphan", || !orphan.exists());
    assert_eq!(entries(&state.join("git")), [format!("{id}.git")]);
    std::fs::write(exec_dir.join("release"), "").unwrap();
    let o = wait_on_daemon(&api, &state, &id);
    assert_applied(&o, ws.path(), "resumed through the remote");
    assert_nothing_left(&exec_dir, &state, "resumed through the remote");
    assert_eq!(
        gitd.refs("team.git"),
        before,
        "the remote's refs as they were"
    );
}
