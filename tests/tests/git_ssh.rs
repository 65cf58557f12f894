//! The git transport over SSH on the real binaries: a private `sshd` whose login user's shell
//! is `git-shell` ([`awcp_tests::git_ssh::GitSshd`]). The delegator pushes with its own key
//! (the user's `GIT_SSH_COMMAND`); executors get a deploy key and the server's host key in the
//! handle, and use exactly those: the key as the only identity, the host key pinned. A wrong
//! host key, or none where the executor's own `known_hosts` does not know the server, means
//! no connection (never an unchecked one). Neither key file outlives the delegation.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use awcp_tests::bins::{self, show, KillOnDrop};
use awcp_tests::files::{entries, files_containing, read};
use awcp_tests::git_ssh::{self, GitSshd};

/// Skips (or, with `AWCP_REQUIRE_SSHFS_TEST=1`, fails) when sshd or git-shell cannot run.
macro_rules! require_sshd {
    () => {
        if let Some(why) = git_ssh::missing_prerequisite() {
            if git_ssh::required() {
                panic!("git over SSH needs a real sshd (AWCP_REQUIRE_SSHFS_TEST=1): {why}");
            }
            eprintln!("SKIPPED: git over SSH needs a real sshd: {why}");
            return;
        }
    };
}

/// The agent: writes `RESULT.txt` and rewrites `a.txt`.
const AGENT: &str =
    "#!/bin/sh\necho 'agent was here' > RESULT.txt\necho 'A by the agent' > a.txt\n";

/// An executor on `runtime` (its `HOME` an empty directory: no `known_hosts` of its own).
fn executor(dir: &Path, runtime: &str) -> (KillOnDrop, String) {
    let agent = dir.join("agent.sh");
    std::fs::write(&agent, AGENT).unwrap();
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let log = std::fs::File::create(dir.join("executor.log")).unwrap();
    let mut cmd = bins::executor_command(dir, &format!("sh {}", agent.display()));
    cmd.args(["--runtime", runtime]).env("HOME", &home);
    let (child, url) = bins::spawn_announcing_to(&mut cmd, bins::EXECUTOR_ANNOUNCES, log);
    (KillOnDrop(child), url)
}

/// `awcp --json delegate` of `ws` over git to `url`, the deploy key for executors, `host_key`
/// (a file) pinned if given; started, its output piped.
fn delegate(
    fx: &GitSshd,
    ws: &Path,
    peer: &str,
    state: &Path,
    url: &str,
    host_key: Option<&Path>,
) -> Child {
    let mut cmd = Command::new(bins::path("awcp"));
    cmd.args(["--quiet", "--json", "delegate"])
        .arg(ws)
        .args(["--peer", peer, "--prompt", "edit", "--transport", "git"])
        .arg("--state-dir")
        .arg(state)
        .args(["--git-remote", url, "--git-executor-ssh-key-file"])
        .arg(&fx.executor_key)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_SSH_COMMAND", fx.delegator_ssh_command())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(h) = host_key {
        cmd.arg("--git-host-key-file").arg(h);
    }
    cmd.spawn().unwrap()
}

fn workspace() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.txt"), "A\n").unwrap();
    std::fs::write(d.path().join("b.txt"), "B\n").unwrap();
    d
}

/// The delegation record `awcp --json` printed last.
fn record(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().last().unwrap_or_else(|| panic!("{}", show(o)));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {}", show(o)))
}

/// Waits (90 s at most) until the executor released every work directory, repository and
/// key file.
fn wait_released(exec_dir: &Path) {
    let start = Instant::now();
    while !(entries(&exec_dir.join("state").join("git")).is_empty()
        && entries(&exec_dir.join("work")).is_empty())
    {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "the executor kept {:?}",
            entries(&exec_dir.join("state").join("git"))
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Two delegators (one on each runtime, each with its executor) lend to one remote at the
/// same time.
#[test]
fn two_delegations_over_ssh_side_by_side_use_the_deploy_key_and_the_pinned_host_key() {
    require_sshd!();
    let fx = GitSshd::start();
    let url = fx.repository("team.git");
    let before = fx.refs("team.git");
    let host_key = fx.base.join("keys").join("host.pub");
    std::fs::write(&host_key, &fx.host_key).unwrap();
    let deploy = std::fs::read_to_string(&fx.executor_key).unwrap();
    let runs: Vec<_> = ["tokio", "smol"]
        .into_iter()
        .map(|runtime| {
            let dir = tempfile::tempdir().unwrap();
            let (ex, peer) = executor(dir.path(), runtime);
            let ws = workspace();
            let state = dir.path().join("delegator");
            let child = delegate(&fx, ws.path(), &peer, &state, &url, Some(&host_key));
            (runtime, dir, ex, ws, child)
        })
        .collect();
    for (runtime, dir, _ex, ws, child) in runs {
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{runtime}: {}", show(&o));
        assert_eq!(record(&o)["state"], "completed");
        assert_eq!(read(&ws.path().join("RESULT.txt")), "agent was here\n");
        assert_eq!(read(&ws.path().join("a.txt")), "A by the agent\n");
        assert_eq!(read(&ws.path().join("b.txt")), "B\n");
        // Neither the key nor the pinned host key outlives the delegation.
        wait_released(dir.path());
        let key_line = deploy.lines().nth(1).unwrap();
        let left = files_containing(dir.path(), key_line);
        assert!(left.is_empty(), "{runtime}: the key is in {left:?}");
    }
    // Only the delegations' branches were written, and they are gone.
    assert_eq!(fx.refs("team.git"), before);
    // The executors connected with the deploy key (sshd names the key it accepted).
    let deploy_fp = GitSshd::fingerprint(&fx.executor_key);
    let log = fx.log();
    let logins = log
        .lines()
        .filter(|l| l.contains("Accepted publickey") && l.contains(&deploy_fp))
        .count();
    // Per executor: the clone and the push.
    assert!(logins >= 4, "{logins} logins with the deploy key:\n{log}");
}

#[test]
fn an_unknown_or_wrong_host_key_means_no_connection() {
    require_sshd!();
    let fx = GitSshd::start();
    let url = fx.repository("team.git");
    let wrong = fx.base.join("keys").join("wrong.pub");
    std::fs::write(&wrong, &fx.other_host_key).unwrap();
    // Pinned to another host's key; then none pinned, and the executor's own known_hosts
    // (an empty HOME) does not know the server either.
    for (what, pinned) in [
        ("a wrong pinned key", Some(wrong.as_path())),
        ("no key", None),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (_ex, peer) = executor(dir.path(), "tokio");
        let ws = workspace();
        let state = dir.path().join("delegator");
        let accepted = |fx: &GitSshd| {
            fx.log()
                .lines()
                .filter(|l| {
                    l.contains("Accepted publickey")
                        && l.contains(&GitSshd::fingerprint(&fx.executor_key))
                })
                .count()
        };
        let before = accepted(&fx);
        let o = delegate(&fx, ws.path(), &peer, &state, &url, pinned)
            .wait_with_output()
            .unwrap();
        assert_ne!(o.status.code(), Some(0), "{what}: {}", show(&o));
        let out = show(&o);
        assert!(
            out.contains("Host key verification failed") || out.contains("host key"),
            "{what}: the failure says why: {out}"
        );
        assert_eq!(read(&ws.path().join("a.txt")), "A\n", "{what}");
        assert!(!ws.path().join("RESULT.txt").exists(), "{what}");
        assert_eq!(
            accepted(&fx),
            before,
            "{what}: the executor never logged in"
        );
        wait_released(dir.path());
        let log = read(&dir.path().join("executor.log"));
        assert!(!log.contains("PRIVATE KEY"), "{what}: {log}");
    }
}
