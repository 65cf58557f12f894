//! The git transport on the real binaries: full delegations on both runtimes with the
//! repository served by the delegator (smart HTTP through `git http-backend`) and through a
//! remote (`git daemon`, started here on loopback); a local edit made during the task kept
//! (another file) or merged (other lines of a file the executor changed), a conflicting one
//! not applied with the branch kept for review; a staged result previewed with `awcp diff`
//! (a merged file shown as such), then applied with `awcp apply`; no other ref of the remote changed; hostile results (a
//! symbolic link out, an embedded repository) refused; nothing left behind (repositories, key
//! files, the executor's token).

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use awcp_tests::bins::{self, show, KillOnDrop};
use awcp_tests::files::{entries, files_containing, read};
use awcp_tests::git::{git, GitDaemon};

/// Longest any wait may take before the test fails (never reached when things work).
const DEADLINE: Duration = Duration::from_secs(90);

/// The agent. It writes `RESULT.txt`, rewrites `a.txt` and deletes `gone.txt`; with a
/// prompt that has the word `slow`, it first says it started (`started` beside it) and waits
/// until `release` exists (60 s at most); with `merge`, it also changes the first line of
/// `notes.txt` (and no other); with `link`, it also leaves a symbolic link to `/etc/passwd`;
/// with `embedded`, a git repository of its own inside the work directory.
const AGENT: &str = r#"#!/bin/sh
here="$(dirname "$0")"
case " $AWCP_PROMPT " in *" slow "*)
  touch "$here/started"
  i=0
  while [ ! -e "$here/release" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
esac
echo "agent was here" > RESULT.txt
echo "A by the agent" > a.txt
rm -f gone.txt
case " $AWCP_PROMPT " in *" merge "*) sed -i 's/^line 1$/line 1 by the agent/' notes.txt ;; esac
if [ "$AWCP_PROMPT" = link ]; then ln -s /etc/passwd escape; fi
if [ "$AWCP_PROMPT" = embedded ]; then
  mkdir inner && cd inner && git init -q && echo x > x && git add x \
    && git -c user.name=a -c user.email=a@a commit -q -m x && cd ..
fi
echo "done editing"
"#;

/// An executor on `runtime` whose agent is [`AGENT`]; `dir` holds its state, log and agent.
fn executor(dir: &Path, runtime: &str) -> (KillOnDrop, String) {
    let agent = dir.join("agent.sh");
    std::fs::write(&agent, AGENT).unwrap();
    let log = std::fs::File::create(dir.join("executor.log")).unwrap();
    let mut cmd = bins::executor_command(dir, &format!("sh {}", agent.display()));
    cmd.args(["--runtime", runtime]).args([
        "--git-name",
        "Test Executor",
        "--git-email",
        "exec@example.org",
    ]);
    let (child, url) = bins::spawn_announcing_to(&mut cmd, bins::EXECUTOR_ANNOUNCES, log);
    (KillOnDrop(child), url)
}

/// `awcp --json delegate WS --transport git …` with `extra` arguments (`--git-remote`, or
/// `--serve-archives`).
fn delegate_cmd(ws: &Path, peer: &str, state: &Path, prompt: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(bins::path("awcp"));
    cmd.args(["--quiet", "--json", "delegate"])
        .arg(ws)
        .args(["--peer", peer, "--prompt", prompt, "--transport", "git"])
        .arg("--state-dir")
        .arg(state)
        .args(extra)
        .env("GIT_CONFIG_GLOBAL", "/dev/null");
    cmd
}

/// A workspace: `a.txt`, `b.txt`, `gone.txt`, and `notes.txt` ([`NOTES`]).
fn workspace() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for (f, t) in [
        ("a.txt", "A\n"),
        ("b.txt", "B\n"),
        ("gone.txt", "G\n"),
        ("notes.txt", NOTES),
    ] {
        std::fs::write(d.path().join(f), t).unwrap();
    }
    d
}

/// `notes.txt` as lent: six numbered lines.
const NOTES: &str = "line 1\nline 2\nline 3\nline 4\nline 5\nline 6\n";

/// [`NOTES`] as the user edits it during the task: line 5 changed.
const NOTES_HERE: &str = "line 1\nline 2\nline 3\nline 4\nline 5 edited here\nline 6\n";

/// [`NOTES_HERE`] merged with the agent's change of `merge` (line 1).
const NOTES_MERGED: &str =
    "line 1 by the agent\nline 2\nline 3\nline 4\nline 5 edited here\nline 6\n";

/// The delegation record `awcp --json` printed last on stdout.
fn record(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().last().unwrap_or_else(|| panic!("{}", show(o)));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {}", show(o)))
}

/// The agent's result is in `ws`.
fn assert_applied(o: &Output, ws: &Path, what: &str) {
    assert_eq!(o.status.code(), Some(0), "{what}: applied\n{}", show(o));
    assert_eq!(read(&ws.join("RESULT.txt")), "agent was here\n", "{what}");
    assert_eq!(read(&ws.join("a.txt")), "A by the agent\n", "{what}");
    assert!(
        !ws.join("gone.txt").exists(),
        "{what}: the deletion applied"
    );
    assert_eq!(record(o)["state"], "completed", "{what}");
}

/// Waits until `cond` holds.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Nothing of the delegation is left: the delegator's repositories and request bodies, the
/// executor's repositories, key files and work directories.
fn assert_nothing_left(exec_dir: &Path, state: &Path, what: &str) {
    wait_for("the executor's release", || {
        entries(&exec_dir.join("state").join("git")).is_empty()
            && entries(&exec_dir.join("work")).is_empty()
    });
    assert_eq!(entries(&state.join("git")), Vec::<String>::new(), "{what}");
    assert_eq!(
        entries(&state.join("git-http")),
        Vec::<String>::new(),
        "{what}"
    );
}

#[test]
fn a_delegation_through_a_served_repository_applies_on_both_runtimes() {
    for runtime in ["tokio", "smol"] {
        let dir = tempfile::tempdir().unwrap();
        let (_ex, peer) = executor(dir.path(), runtime);
        let ws = workspace();
        let state = tempfile::tempdir().unwrap();
        let o = delegate_cmd(
            ws.path(),
            &peer,
            state.path(),
            "edit",
            &["--runtime", runtime, "--serve-archives", "127.0.0.1:0"],
        )
        .output()
        .unwrap();
        assert_applied(&o, ws.path(), runtime);
        assert_eq!(read(&ws.path().join("b.txt")), "B\n", "{runtime}");
        assert!(
            !ws.path().join(".git").exists(),
            "{runtime}: no repository made here"
        );
        assert_nothing_left(dir.path(), state.path(), runtime);
    }
}

#[test]
fn a_remote_gets_only_the_delegation_branches_which_go_once_applied() {
    let dir = tempfile::tempdir().unwrap();
    let remotes = tempfile::tempdir().unwrap();
    let daemon = GitDaemon::start(remotes.path());
    let url = daemon.repository("team.git");
    let before = daemon.refs("team.git");
    let (_ex, peer) = executor(dir.path(), "tokio");
    // The executor's token: handed over in the handle, written nowhere.
    let token = "git-token-4f1c0e9a-never-on-disk";
    let token_file = dir.path().join("executor-token");
    std::fs::write(&token_file, token).unwrap();
    let ws = workspace();
    let state = dir.path().join("delegator");
    let o = delegate_cmd(
        ws.path(),
        &peer,
        &state,
        "edit",
        &[
            "--git-remote",
            &url,
            "--git-executor-token-file",
            token_file.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    assert_applied(&o, ws.path(), "remote");
    // The branch was pushed, worked on and deleted: the remote's refs are as they were.
    assert_eq!(daemon.refs("team.git"), before);
    assert_nothing_left(dir.path(), &state, "remote");
    std::fs::remove_file(&token_file).unwrap();
    let leaked = files_containing(dir.path(), token);
    assert!(leaked.is_empty(), "the token is in {leaked:?}");
}

#[test]
fn a_local_edit_merges_and_a_conflicting_one_keeps_the_branch_unapplied() {
    let dir = tempfile::tempdir().unwrap();
    let remotes = tempfile::tempdir().unwrap();
    let daemon = GitDaemon::start(remotes.path());
    let url = daemon.repository("team.git");
    let before = daemon.refs("team.git");
    let (_ex, peer) = executor(dir.path(), "tokio");
    let (started, release) = (dir.path().join("started"), dir.path().join("release"));
    // Another file edited here; another line of a file the agent changes (merged); the line
    // the agent rewrites (a conflict).
    let cases = [
        ("b.txt", "edited here meanwhile\n", "slow", None),
        ("notes.txt", NOTES_HERE, "slow merge", Some(NOTES_MERGED)),
        ("a.txt", "edited here meanwhile\n", "slow", None),
    ];
    for (edit, text, prompt, merged) in cases {
        let conflicting = edit == "a.txt";
        let _ = std::fs::remove_file(&started);
        let _ = std::fs::remove_file(&release);
        let ws = workspace();
        let state = dir.path().join(format!("delegator-{edit}"));
        let child = delegate_cmd(ws.path(), &peer, &state, prompt, &["--git-remote", &url])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for("the task to start", || started.exists());
        std::fs::write(ws.path().join(edit), text).unwrap();
        std::fs::write(&release, "").unwrap();
        let o = child.wait_with_output().unwrap();
        let v = record(&o);
        if !conflicting {
            assert_applied(&o, ws.path(), edit);
            // Both edits are there: the file edited here as it was, or merged with the
            // agent's change.
            assert_eq!(
                read(&ws.path().join(edit)),
                merged.unwrap_or(text),
                "{edit}"
            );
            assert_eq!(
                daemon.refs("team.git"),
                before,
                "{edit}: branch deleted once applied"
            );
            continue;
        }
        // Not applied: exit 4, the local edit and the rest of the workspace untouched.
        assert_eq!(o.status.code(), Some(4), "{}", show(&o));
        assert_eq!(read(&ws.path().join("a.txt")), "edited here meanwhile\n");
        assert!(!ws.path().join("RESULT.txt").exists());
        assert!(ws.path().join("gone.txt").exists());
        // The branch stays for review: the remote has it beside its own refs, unchanged.
        let id = v["id"].as_str().unwrap().to_owned();
        let after = daemon.refs("team.git");
        let kept = format!("refs/heads/awcp/{id}");
        assert!(after.contains(&kept), "{after}");
        let others: Vec<&str> = after.lines().filter(|l| !l.starts_with(&kept)).collect();
        assert_eq!(others.join("\n"), before);
        let tip = git(
            &remotes.path().join("team.git"),
            &["show", &format!("awcp/{id}:a.txt")],
        );
        assert_eq!(tip, "A by the agent");
        let who = git(
            &remotes.path().join("team.git"),
            &["log", "-1", "--format=%an <%ae>", &format!("awcp/{id}")],
        );
        assert_eq!(who, "Test Executor <exec@example.org>");
        // Discarded after review (another process): the branch goes, and the repository
        // that named its remote.
        let sid = v["snapshots"][0]["id"].as_str().unwrap().to_owned();
        let d = awcp_in(&state, &["discard", &id, &sid]);
        assert_eq!(d.status.code(), Some(0), "{}", show(&d));
        assert_eq!(daemon.refs("team.git"), before, "discarded: branch deleted");
        assert_eq!(entries(&state.join("git")), Vec::<String>::new());
    }
}

/// `awcp ARGS… --state-dir STATE` (in-process, the user's git configuration left out).
fn awcp_in(state: &Path, args: &[&str]) -> Output {
    Command::new(bins::path("awcp"))
        .arg("--quiet")
        .args(args)
        .arg("--state-dir")
        .arg(state)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap()
}

#[test]
fn a_staged_result_shows_in_awcp_diff_merged_then_applies() {
    let dir = tempfile::tempdir().unwrap();
    let remotes = tempfile::tempdir().unwrap();
    let daemon = GitDaemon::start(remotes.path());
    let url = daemon.repository("team.git");
    let before = daemon.refs("team.git");
    let (_ex, peer) = executor(dir.path(), "tokio");
    let (started, release) = (dir.path().join("started"), dir.path().join("release"));
    let ws = workspace();
    let state = dir.path().join("delegator");
    let extra = ["--git-remote", &url, "--snapshot-mode", "staged"];
    let child = delegate_cmd(ws.path(), &peer, &state, "slow merge", &extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the task to start", || started.exists());
    std::fs::write(ws.path().join("notes.txt"), NOTES_HERE).unwrap();
    std::fs::write(&release, "").unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "staged\n{}", show(&o));
    let v = record(&o);
    let id = v["id"].as_str().unwrap().to_owned();
    let sid = v["snapshots"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(v["snapshots"][0]["status"], "pending", "{v}");
    // Nothing applied yet; the branch waits on the remote.
    assert!(!ws.path().join("RESULT.txt").exists());
    assert_eq!(read(&ws.path().join("notes.txt")), NOTES_HERE);
    // The result's branch waits on the remote (the base branch went at release), and the
    // delegation's repository stays to name that remote until the result is settled.
    let kept = format!("refs/heads/awcp/{id}");
    let waiting = daemon.refs("team.git");
    let others: Vec<&str> = waiting.lines().filter(|l| !l.starts_with(&kept)).collect();
    assert_eq!(others.join("\n"), before, "only the result branch is added");
    assert!(waiting.contains(&kept), "{waiting}");
    assert_eq!(entries(&state.join("git")), vec![format!("{id}.git")]);

    // The preview: the agent's files, `notes.txt` merged (the diff is the agent's line on
    // top of the local edit), no conflict.
    let d = awcp_in(&state, &["diff", &id]);
    assert_eq!(d.status.code(), Some(0), "{}", show(&d));
    let text = String::from_utf8_lossy(&d.stdout).into_owned();
    let listed = |mark: &str, file: &str| {
        text.lines()
            .any(|l| l.starts_with(&format!("{mark} ")) && l.contains(&format!("/{file}")))
    };
    for (mark, file) in [
        ("A", "RESULT.txt"),
        ("M", "a.txt"),
        ("D", "gone.txt"),
        ("M", "notes.txt  (merged with local edits)"),
    ] {
        assert!(listed(mark, file), "{mark} {file}\n{text}");
    }
    assert!(text.contains("-line 1\n+line 1 by the agent\n"), "{text}");
    assert!(!text.contains("line 5 edited here\n+"), "{text}");
    assert!(!text.contains("conflict"), "{text}");
    let d = awcp_in(&state, &["--json", "diff", &id, &sid]);
    let preview: serde_json::Value =
        serde_json::from_slice(&d.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(&d)));
    let merged = preview["merged"].as_array().expect("a merged list");
    assert_eq!(merged.len(), 1, "{preview}");
    assert!(merged[0].as_str().unwrap().ends_with("/notes.txt"));
    // Previewing changed nothing.
    assert_eq!(read(&ws.path().join("notes.txt")), NOTES_HERE);
    assert!(!ws.path().join("RESULT.txt").exists());

    let a = awcp_in(&state, &["apply", &id, &sid]);
    assert_eq!(a.status.code(), Some(0), "{}", show(&a));
    assert_eq!(read(&ws.path().join("notes.txt")), NOTES_MERGED);
    assert_eq!(read(&ws.path().join("RESULT.txt")), "agent was here\n");
    assert_eq!(read(&ws.path().join("a.txt")), "A by the agent\n");
    assert!(!ws.path().join("gone.txt").exists());
    // Applied (by another process than the one that delegated): the branch goes with the
    // repository, the remote's refs are as they were.
    assert_eq!(daemon.refs("team.git"), before);
    assert_eq!(entries(&state.join("git")), Vec::<String>::new());
}

#[test]
fn hostile_results_are_refused_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (_ex, peer) = executor(dir.path(), "tokio");
    let serve = ["--serve-archives", "127.0.0.1:0"];
    // A symbolic link out of the workspace: refused as the archive transport refuses it,
    // nothing written (exit 4: not applied).
    let ws = workspace();
    let state = dir.path().join("d-link");
    let o = delegate_cmd(ws.path(), &peer, &state, "link", &serve)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", show(&o));
    assert!(show(&o).contains("escape"), "{}", show(&o));
    assert!(std::fs::symlink_metadata(ws.path().join("escape")).is_err());
    assert!(!ws.path().join("RESULT.txt").exists());
    assert_eq!(read(&ws.path().join("a.txt")), "A\n");
    // An embedded repository (a gitlink in the result): refused whole, nothing written.
    let ws = workspace();
    let state = dir.path().join("d-embedded");
    let o = delegate_cmd(ws.path(), &peer, &state, "embedded", &serve)
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0), "{}", show(&o));
    assert!(show(&o).contains("submodule"), "{}", show(&o));
    assert!(!ws.path().join("RESULT.txt").exists());
    assert!(!ws.path().join("inner").exists());
    assert_eq!(read(&ws.path().join("a.txt")), "A\n");
    assert_nothing_left(dir.path(), &state, "embedded");
}

#[test]
fn a_workspace_repository_s_head_is_the_branch_s_root_and_the_repository_is_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let remotes = tempfile::tempdir().unwrap();
    let daemon = GitDaemon::start(remotes.path());
    let url = daemon.repository("team.git");
    let (_ex, peer) = executor(dir.path(), "smol");
    // A repository with a commit, and an uncommitted change.
    let ws = workspace();
    git(ws.path(), &["init", "-q", "-b", "main"]);
    git(ws.path(), &["add", "-A"]);
    git(ws.path(), &["commit", "-q", "-m", "mine"]);
    let head = git(ws.path(), &["rev-parse", "HEAD"]);
    std::fs::write(ws.path().join("b.txt"), "B, not committed yet\n").unwrap();
    let refs = git(ws.path(), &["for-each-ref"]);
    let objects = git(ws.path(), &["count-objects", "-v"]);
    let state = dir.path().join("delegator");
    let o = delegate_cmd(
        ws.path(),
        &peer,
        &state,
        "edit",
        &["--git-remote", &url, "--keep-branch"],
    )
    .output()
    .unwrap();
    assert_applied(&o, ws.path(), "repository");
    let id = record(&o)["id"].as_str().unwrap().to_owned();
    // On the remote: HEAD, then the uncommitted change, then the executor's work.
    let remote = remotes.path().join("team.git");
    let branch = format!("awcp/{id}");
    assert_eq!(git(&remote, &["rev-parse", &format!("{branch}~2")]), head);
    assert_eq!(
        git(&remote, &["show", &format!("{branch}~1:b.txt")]),
        "B, not committed yet"
    );
    assert_eq!(
        git(&remote, &["log", "-1", "--format=%an", &branch]),
        "Test Executor"
    );
    // The workspace's repository: no ref, no object, nothing staged.
    assert_eq!(git(ws.path(), &["for-each-ref"]), refs);
    assert_eq!(git(ws.path(), &["count-objects", "-v"]), objects);
    assert_eq!(git(ws.path(), &["rev-parse", "HEAD"]), head);
    assert_eq!(
        git(ws.path(), &["diff", "--cached", "--name-only"]),
        "",
        "nothing staged in the user's index"
    );
    assert_nothing_left(dir.path(), &state, "repository");
}

#[test]
fn the_daemon_lends_through_its_remote() {
    let dir = tempfile::tempdir().unwrap();
    let remotes = tempfile::tempdir().unwrap();
    let daemon = GitDaemon::start(remotes.path());
    let url = daemon.repository("team.git");
    let before = daemon.refs("team.git");
    let (_ex, peer) = executor(dir.path(), "tokio");
    let state = dir.path().join("daemon");
    let (child, api) = bins::spawn_announcing(
        Command::new(bins::path("awcp"))
            .args([
                "--quiet",
                "daemon",
                "--listen",
                "127.0.0.1:0",
                "--git-remote",
                &url,
            ])
            .arg("--state-dir")
            .arg(&state)
            .env_remove("AWCP_DAEMON_TOKEN")
            .env("GIT_CONFIG_GLOBAL", "/dev/null"),
        bins::DAEMON_ANNOUNCES,
    );
    let _daemon_proc = KillOnDrop(child);
    let ws = workspace();
    let o = bins::awcp_on_daemon(
        &api,
        &state,
        &[
            "--json",
            "delegate",
            ws.path().to_str().unwrap(),
            "--daemon",
            "--peer",
            &peer,
            "--prompt",
            "edit",
            "--transport",
            "git",
        ],
    );
    assert_applied(&o, ws.path(), "daemon");
    assert_eq!(daemon.refs("team.git"), before);
    assert_nothing_left(dir.path(), &state, "daemon");
}

#[test]
fn an_executor_started_with_no_git_declines_git_delegations() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent.sh");
    std::fs::write(&agent, AGENT).unwrap();
    let mut cmd = bins::executor_command(dir.path(), &format!("sh {}", agent.display()));
    cmd.arg("--no-git");
    let (child, peer) = bins::spawn_announcing(&mut cmd, bins::EXECUTOR_ANNOUNCES);
    let _ex = KillOnDrop(child);
    let ws = workspace();
    let state = dir.path().join("delegator");
    let o = delegate_cmd(
        ws.path(),
        &peer,
        &state,
        "edit",
        &["--serve-archives", "127.0.0.1:0"],
    )
    .output()
    .unwrap();
    assert_ne!(o.status.code(), Some(0), "{}", show(&o));
    assert!(show(&o).contains("git"), "{}", show(&o));
    assert!(!ws.path().join("RESULT.txt").exists());
    assert_eq!(entries(&state.join("git")), Vec::<String>::new());
}

#[test]
fn a_relative_state_directory_works() {
    let dir = tempfile::tempdir().unwrap();
    let (_ex, peer) = executor(dir.path(), "tokio");
    let ws = workspace();
    let mut cmd = delegate_cmd(
        ws.path(),
        &peer,
        Path::new("relative-state"),
        "edit",
        &["--serve-archives", "127.0.0.1:0"],
    );
    let o = cmd.current_dir(dir.path()).output().unwrap();
    assert_applied(&o, ws.path(), "relative --state-dir");
    assert_nothing_left(dir.path(), &dir.path().join("relative-state"), "relative");
}
