//! The `git` transport (docs/WIRE.md §3.4, §11.3, §11.6) against the TypeScript reference's
//! `@awcp/transport-git` (its `dev` branch, built by `reference_support`), both ways:
//!
//! - our delegator (`awcp delegate --transport git`) facing a reference executor with
//!   `GitExecutorTransport`, the repository served by our delegator (smart HTTP,
//!   `--serve-archives`) or on a remote (`--git-remote`, a `git daemon` on loopback): the
//!   executor clones the handle's base branch, its agent works in the resource's directory
//!   (`<workPath>/workspace`, where the reference's own A2A adapter tells an agent to work),
//!   it commits on its task branch (`<branchPrefix><id>`) and pushes it; our delegator must
//!   apply the branch its snapshot names and leave the remote's refs as they were. Our base
//!   branch is `awcp/<id>-base` (the reference's task branch is `awcp/<id>`) and the files are
//!   laid out per resource (a reference executor does not agree to `git-root-layout`); a
//!   reference executor with another `branchPrefix` keeps its own branch on the remote;
//! - the reference `DelegatorService` with `GitDelegatorTransport` (remote = a scratch
//!   repository of a `git daemon`, `auth: {type: 'none'}`) facing our `awcp-executor`: the
//!   reference force-pushes its workspace as `main`; our executor must fetch it, push the
//!   agent's commit as `awcp/<id>` (a child of the base commit) and report it in the §11.3
//!   text, which the reference delegator fetches, merges and copies over its workspace.
//!
//! Skipped with a notice where the reference cannot be built (unless
//! `AWCP_REQUIRE_REFERENCE_TEST=1`). Everything binds 127.0.0.1; every process is killed when
//! its test ends.

#[allow(dead_code)] // Not every helper is used by every test file including it.
mod reference_support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use awcp_tests::bins::{self, show, KillOnDrop};
use awcp_tests::files::{entries, read};
use awcp_tests::git::{git, GitDaemon};
use reference_support::{answers_to, json_line, reference_dev, run_bounded};
use serde_json::{json, Value};

/// The longest a CLI command may run.
const CLI_LIMIT: Duration = Duration::from_secs(90);

/// How long the reference executor's log, or our executor's state, may lag behind what a
/// finished command did.
const LAG: Duration = Duration::from_secs(10);

/// A workspace of `a.txt` (`A`), `gone.txt` (`G`) and `sub/b.txt` (`B`).
fn workspace() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.txt"), "A\n").unwrap();
    std::fs::write(d.path().join("gone.txt"), "G\n").unwrap();
    std::fs::create_dir(d.path().join("sub")).unwrap();
    std::fs::write(d.path().join("sub/b.txt"), "B\n").unwrap();
    d
}

/// Whether `s` is a full (SHA-1) object id.
fn is_oid(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The sorted `changedFiles` of a §11.3 snapshot text.
fn changed_files(text: &Value) -> Vec<String> {
    let mut files: Vec<String> = text["changedFiles"]
        .as_array()
        .unwrap_or_else(|| panic!("no changedFiles: {text}"))
        .iter()
        .map(|f| f.as_str().unwrap_or_default().to_owned())
        .collect();
    files.sort();
    files
}

// ----- our delegator, the reference's git executor -----

/// Where our delegator keeps the repository for the reference executor.
enum Repository<'a> {
    /// Served by the delegator itself (`--serve-archives 127.0.0.1:0`).
    Served,
    /// The remote of this URL (`--git-remote`).
    Remote(&'a str),
}

/// How the reference executor is set up.
#[derive(Clone, Copy)]
enum Reference {
    /// As it comes: task branch `awcp/<id>` (so our base branch must be another one:
    /// `awcp/<id>-base`), its agent in `<workPath>/workspace` (so a one-resource base commit
    /// is laid out per resource: it does not agree to `git-root-layout`).
    AsIs,
    /// Its transport's `branchPrefix` set to `result/`: it pushes `result/<id>`.
    OtherPrefix,
}

/// What [`delegate_to_reference`] leaves for the test to check further.
struct Delegated {
    id: String,
    /// The snapshot text the executor reported.
    text: Value,
}

/// `awcp --json delegate` of a [`workspace`] with `--transport git` to a reference git executor
/// set up as `reference`. The result must be applied: the reference agent's work is in the
/// workspace, what was lent and kept is intact, the reference pushed its task branch and named
/// it, our delegator closed the session and kept no repository. `None` if the reference is
/// not available (skipped).
fn delegate_to_reference(reference: Reference, repository: Repository<'_>) -> Option<Delegated> {
    let tree = reference_dev()?;
    let (prefix, at_root) = match reference {
        Reference::AsIs => ("awcp/", false),
        Reference::OtherPrefix => ("result/", false),
    };
    let ex = tree.start_git_executor(Some(prefix).filter(|p| *p != "awcp/"), at_root);
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bins::path("awcp"));
    cmd.args(["--quiet", "--json", "delegate"])
        .arg(ws.path())
        .args(["--peer", &ex.url(), "--prompt", "use git"])
        .args(["--transport", "git", "--state-dir"])
        .arg(state.path())
        .env("GIT_CONFIG_GLOBAL", "/dev/null");
    match repository {
        Repository::Served => cmd.args(["--serve-archives", "127.0.0.1:0"]),
        Repository::Remote(url) => cmd.args(["--git-remote", url]),
    };
    let o = run_bounded(&mut cmd, CLI_LIMIT);
    let ctx = || format!("{}\n{}", show(&o), ex.show());
    let v = json_line(&o, "").unwrap_or_else(|| panic!("no JSON printed\n{}", ctx()));
    let id = v["id"].as_str().unwrap_or_default().to_owned();
    let log = ex.log();
    assert!(
        log.contains(&format!("SETUP {id} ok")),
        "the reference executor's setup (clone, checkout)\n{}",
        ctx()
    );
    // Its agent found the workspace lent where a reference agent looks.
    assert!(
        log.contains(&format!("FILES {id} [\"a.txt\",\"gone.txt\",\"sub\"]")),
        "the agent saw the workspace\n{}",
        ctx()
    );
    assert_eq!(o.status.code(), Some(0), "awcp delegate\n{}", ctx());
    assert_eq!(v["state"], "completed", "{v}\n{}", ctx());

    // Its agent's work came back: added, changed and deleted files; the rest intact.
    assert_eq!(read(&ws.path().join("git-agent.txt")), "prompt=use git\n");
    assert_eq!(read(&ws.path().join("a.txt")), "A by the reference agent\n");
    assert!(!ws.path().join("gone.txt").exists(), "the deletion applied");
    assert_eq!(read(&ws.path().join("sub/b.txt")), "B\n");
    assert!(!ws.path().join(".git").exists(), "no repository made here");

    // It pushed its task branch and named it in the §11.3 text.
    let capture = log
        .lines()
        .find_map(|l| l.strip_prefix(&format!("CAPTURE {id} ")))
        .unwrap_or_else(|| panic!("no capture\n{}", ctx()));
    let text: Value =
        serde_json::from_str(capture).unwrap_or_else(|e| panic!("{e}: {capture}\n{}", ctx()));
    assert_eq!(text["branch"], format!("{prefix}{id}"), "{text}");
    for field in ["commitHash", "baseCommit"] {
        assert!(is_oid(text[field].as_str().unwrap_or_default()), "{text}");
    }
    let dir = if at_root { "" } else { "workspace/" };
    let expected: Vec<String> = ["a.txt", "git-agent.txt", "gone.txt"]
        .iter()
        .map(|f| format!("{dir}{f}"))
        .collect();
    assert_eq!(changed_files(&text), expected, "{text}");

    // A `dev` executor ends the round with round_done: our delegator closed the session.
    assert!(
        ex.wait_for_log(LAG, |l| !answers_to(l, "CLOSE").1.is_empty()),
        "no CLOSE\n{}",
        ctx()
    );
    assert_eq!(answers_to(&ex.log(), "CLOSE"), (1, vec![200]), "{}", ctx());
    // Nothing of the delegation is left on our side.
    for dir in ["git", "git-http"] {
        assert_eq!(
            entries(&state.path().join(dir)),
            Vec::<String>::new(),
            "{dir}"
        );
    }
    Some(Delegated { id, text })
}

#[test]
fn our_served_repository_feeds_a_reference_git_executor() {
    delegate_to_reference(Reference::AsIs, Repository::Served);
}

#[test]
fn a_remote_feeds_a_reference_git_executor_and_its_refs_stay() {
    let remotes = tempfile::tempdir().unwrap();
    let daemon = GitDaemon::start(remotes.path());
    let url = daemon.repository("team.git");
    let before = daemon.refs("team.git");
    if delegate_to_reference(Reference::AsIs, Repository::Remote(&url)).is_none() {
        return;
    }
    // Our base branch `awcp/<id>-base` and the executor's `awcp/<id>` are deleted once
    // applied.
    assert_eq!(daemon.refs("team.git"), before);
}

/// A reference executor with another branch prefix, through a remote: our base branch is
/// deleted once applied; its `result/<id>` stays (our delegator only ever deletes its own
/// `awcp/<id>-base` and `awcp/<id>`, never a branch an executor names); every other ref is as
/// it was.
#[test]
fn a_reference_executor_with_another_branch_prefix_keeps_its_branch() {
    let remotes = tempfile::tempdir().unwrap();
    let daemon = GitDaemon::start(remotes.path());
    let url = daemon.repository("team.git");
    let before = daemon.refs("team.git");
    let Some(d) = delegate_to_reference(Reference::OtherPrefix, Repository::Remote(&url)) else {
        return;
    };
    let after = daemon.refs("team.git");
    let commit = d.text["commitHash"].as_str().unwrap();
    let kept = format!("refs/heads/result/{} {commit}", d.id);
    assert!(after.lines().any(|l| l == kept), "{after}");
    let others: Vec<&str> = after.lines().filter(|l| *l != kept).collect();
    assert_eq!(others.join("\n"), before, "{after}");
    // The reference's commit is a child of our base commit.
    let parent = git(
        &remotes.path().join("team.git"),
        &["rev-parse", &format!("result/{}^", d.id)],
    );
    assert_eq!(parent, d.text["baseCommit"].as_str().unwrap());
}

// ----- the reference's git delegator, our executor -----

/// Our agent: writes `RESULT.txt`, changes `a.txt` and deletes `gone.txt` (in the resource
/// directory, its cwd).
const AGENT: &str = r#"#!/bin/sh
echo "agent was here: $AWCP_PROMPT" > RESULT.txt
echo "A by the agent" > a.txt
rm -f gone.txt
echo "done editing"
"#;

/// Our `awcp-executor` (git accepted by default) running [`AGENT`]; its directory holds its
/// state, work root, agent and log (stderr).
fn our_executor(dir: &Path) -> (KillOnDrop, String) {
    let agent = dir.join("agent.sh");
    std::fs::write(&agent, AGENT).unwrap();
    let log = std::fs::File::create(dir.join("executor.log")).unwrap();
    let mut cmd = bins::executor_command(dir, &format!("sh {}", agent.display()));
    let (child, url) = bins::spawn_announcing_to(&mut cmd, bins::EXECUTOR_ANNOUNCES, log);
    (KillOnDrop(child), url)
}

#[test]
fn a_reference_git_delegator_runs_on_our_executor() {
    let Some(tree) = reference_dev() else {
        return;
    };
    let remotes = tempfile::tempdir().unwrap();
    let daemon = GitDaemon::start(remotes.path());
    // A scratch repository: the reference force-pushes its `main` there.
    let url = daemon.repository("scratch.git");
    let before = daemon.refs("scratch.git");
    let dir = tempfile::tempdir().unwrap();
    let (_ex, peer) = our_executor(dir.path());
    let src = workspace();

    let o = tree.run_git_delegator(&peer, src.path(), &url);
    let ctx = || {
        format!(
            "{}\n--- our executor's log ---\n{}",
            show(&o),
            read(&dir.path().join("executor.log"))
        )
    };
    let result = json_line(&o, "RESULT ").unwrap_or_else(|| panic!("no RESULT\n{}", ctx()));
    let id = result["id"].as_str().unwrap_or_default().to_owned();

    // The handle the reference made: its remote, `main`, the commit it pushed, no credential.
    let handle = &result["handle"];
    assert_eq!(handle["transport"], "git", "{result}\n{}", ctx());
    assert_eq!(handle["repoUrl"], url.as_str(), "{handle}");
    assert_eq!(handle["baseBranch"], "main", "{handle}");
    assert_eq!(handle["auth"], json!({"type": "none"}), "{handle}");
    let base = handle["baseCommit"].as_str().unwrap_or_default().to_owned();
    assert!(is_oid(&base), "{handle}");

    // The reference delegator completed and applied the result to its workspace.
    assert!(o.status.success(), "git-delegator.mjs failed\n{}", ctx());
    assert_eq!(result["ok"], true, "{result}");
    assert_eq!(result["state"], "completed", "{result}");
    assert_eq!(result["apply"], "applied", "{result}\n{}", ctx());
    assert_eq!(
        read(&src.path().join("RESULT.txt")),
        "agent was here: git round\n",
        "{}",
        ctx()
    );
    assert_eq!(read(&src.path().join("a.txt")), "A by the agent\n");
    assert!(
        !src.path().join("gone.txt").exists(),
        "the deletion applied"
    );
    assert_eq!(read(&src.path().join("sub/b.txt")), "B\n");
    assert_eq!(
        result["files"],
        json!(["RESULT.txt", "a.txt", "sub"]),
        "{result}"
    );

    // Our executor's snapshot: the §11.3 text naming `awcp/<id>`, based on the handle's commit.
    let events = result["events"].as_array().cloned().unwrap_or_default();
    let snapshots: Vec<&Value> = events.iter().filter(|e| e["type"] == "snapshot").collect();
    assert_eq!(snapshots.len(), 1, "{result}\n{}", ctx());
    let text: Value = serde_json::from_str(snapshots[0]["snapshotText"].as_str().unwrap_or(""))
        .unwrap_or_else(|e| panic!("snapshot text: {e}\n{result}"));
    let branch = format!("awcp/{id}");
    assert_eq!(text["branch"], branch.as_str(), "{text}");
    assert_eq!(text["baseCommit"], base.as_str(), "{text}");
    let commit = text["commitHash"].as_str().unwrap_or_default().to_owned();
    assert!(is_oid(&commit), "{text}");
    assert_eq!(
        changed_files(&text),
        [
            "workspace/RESULT.txt",
            "workspace/a.txt",
            "workspace/gone.txt"
        ],
        "{text}"
    );

    // The remote: our executor pushed `awcp/<id>` at that commit, a child of the base; the
    // reference's `main` is its base commit (force-pushed over the remote's own `main`; the
    // reference deletes the task branch only at release, once the retention has passed); no
    // other ref changed.
    let repo = remotes.path().join("scratch.git");
    let after = daemon.refs("scratch.git");
    let pushed = format!("refs/heads/{branch} {commit}");
    assert!(after.lines().any(|l| l == pushed), "{after}\n{}", ctx());
    assert!(
        after
            .lines()
            .any(|l| l == format!("refs/heads/main {base}")),
        "{after}"
    );
    let untouched = |refs: &str| -> Vec<String> {
        refs.lines()
            .filter(|l| !l.starts_with("refs/heads/main ") && !l.starts_with(&pushed))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(untouched(&after), untouched(&before), "{after}");
    assert_eq!(git(&repo, &["rev-parse", &format!("{branch}^")]), base);
    assert_eq!(
        git(&repo, &["show", &format!("{branch}:workspace/RESULT.txt")]),
        "agent was here: git round"
    );
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%an <%ae>", &branch]),
        "AWCP Executor <executor@awcp.local>"
    );

    // Our executor keeps nothing of it once the session is closed.
    let start = Instant::now();
    while !(entries(&dir.path().join("state").join("git")).is_empty()
        && entries(&dir.path().join("work")).is_empty())
    {
        assert!(
            start.elapsed() < LAG,
            "our executor kept its repository or work directory\n{}",
            ctx()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
