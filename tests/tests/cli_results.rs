//! The `awcp` CLI against a real `awcp-executor`, both real processes on loopback: what a user
//! sees when a delegation ends — the documented exit codes (README "Exit codes"), and a result
//! that was not applied never looking like success (it is kept staged with its reason, the
//! executor is acknowledged only once the result is stored locally, and the printed retry
//! command works).

mod cli_support;

use std::path::Path;

use awcp_tests::bins::{self, awcp, show};
use serde_json::Value;

use cli_support::{
    conflicting_delegation, dead_peer, delegate, delegate_with, record, retry_command, workspace,
    Executor,
};

/// Exit codes: 0 applied, 2 usage error, 3 task failed, 5 peer unreachable (4, result not
/// applied, has its own tests below).
#[test]
fn delegate_exit_codes_are_distinct_and_documented() {
    let ex = Executor::start();
    let state = tempfile::tempdir().unwrap();

    let ws = workspace();
    let o = delegate(ws.path(), &ex.url, "edit", state.path());
    assert_eq!(o.status.code(), Some(0), "applied\n{}", show(&o));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("RESULT.txt")).unwrap(),
        "agent was here\n"
    );

    let o = awcp(&[
        "delegate",
        ws.path().to_str().unwrap(),
        "--peer",
        &ex.url,
        "--prompt",
        "x",
        "--snapshot-mode",
        "sometimes",
    ]);
    assert_eq!(o.status.code(), Some(2), "bad flag value\n{}", show(&o));
    let o = awcp(&[
        "delegate",
        "/nonexistent/awcp-ws",
        "--peer",
        &ex.url,
        "--prompt",
        "x",
    ]);
    assert_eq!(o.status.code(), Some(2), "missing workspace\n{}", show(&o));

    let o = delegate(ws.path(), &ex.url, "fail now", state.path());
    assert_eq!(o.status.code(), Some(3), "task failed\n{}", show(&o));
    assert_eq!(record(&o)["error"]["code"], "TASK_FAILED", "{}", show(&o));

    let o = delegate(ws.path(), &dead_peer(), "edit", state.path());
    assert_eq!(o.status.code(), Some(5), "peer unreachable\n{}", show(&o));
    assert_eq!(
        record(&o)["outcome"]["status"],
        "unreachable",
        "{}",
        show(&o)
    );
}

/// The workspace changed locally while the task ran: the result conflicts, so it is not
/// applied. `awcp delegate` exits 4 and says so; the snapshot stays staged with the reason;
/// the executor is acknowledged (the result is stored locally); the printed retry command
/// applies it once the local edit is undone.
#[test]
fn result_not_applied_exits_4_stays_staged_and_the_printed_retry_applies_it() {
    let (ex, _state, ws, o) = conflicting_delegation();
    let a = ws.path().join("a.txt");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("NOT applied"), "{}", show(&o));
    let v = record(&o);
    assert_eq!(v["state"], "completed", "{v}");
    assert_eq!(v["outcome"]["status"], "not_applied", "{v}");
    let snap = &v["snapshots"][0];
    assert_eq!(snap["status"], "pending", "kept staged: {v}");
    assert!(
        snap["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("a.txt")),
        "the reason names the conflicting file: {v}"
    );
    // Nothing of the result was written; the local edit is intact.
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "edited locally\n");
    assert!(!ws.path().join("RESULT.txt").exists());
    // Stored locally, so the executor was acknowledged and forgot it.
    let id = v["id"].as_str().unwrap();
    assert_eq!(
        ex.result(id).0,
        404,
        "acknowledged after the result was stored"
    );

    // Undo the local edit and run the command awcp printed.
    std::fs::write(&a, "A\n").unwrap();
    let retry = retry_command(&o);
    let args: Vec<&str> = retry.iter().map(String::as_str).collect();
    let o2 = awcp(&args);
    assert_eq!(o2.status.code(), Some(0), "{}", show(&o2));
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "A by the agent\n");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("RESULT.txt")).unwrap(),
        "agent was here\n"
    );
}

/// The result cannot be stored locally (the snapshot store is unusable): exit 4, and the
/// executor is NOT acknowledged, so it still holds the result.
#[test]
fn result_that_cannot_be_stored_is_not_acknowledged() {
    let ex = Executor::start();
    let state = tempfile::tempdir().unwrap();
    // A file where the snapshot store directory belongs.
    std::fs::write(state.path().join("snapshots"), "not a directory").unwrap();
    let ws = workspace();
    let o = delegate(ws.path(), &ex.url, "edit", state.path());
    assert_eq!(o.status.code(), Some(4), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("NOT applied"),
        "{}",
        show(&o)
    );
    let v = record(&o);
    assert_eq!(v["outcome"]["status"], "not_applied", "{v}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "A\n"
    );
    let id = v["id"].as_str().unwrap();
    assert_eq!(
        ex.result(id),
        (200, "completed".to_owned()),
        "not acknowledged: the executor keeps the result"
    );
}

/// Through `awcp daemon`: the daemon's record says the result was not applied, and
/// `awcp delegate --daemon` exits 4.
#[test]
fn daemon_record_says_the_result_was_not_applied() {
    let ex = Executor::start();
    let state = tempfile::tempdir().unwrap();
    let (mut daemon, url) = bins::spawn_daemon(state.path());
    let ws = workspace();
    let a = ws.path().join("a.txt");
    let o = bins::awcp_on_daemon(
        &url,
        state.path(),
        &[
            "--json",
            "delegate",
            ws.path().to_str().unwrap(),
            "--daemon",
            "--peer",
            &ex.url,
            "--prompt",
            &format!("conflict {}", a.display()),
        ],
    );
    let id = record(&o)["id"].as_str().unwrap_or_default().to_owned();
    let status = bins::awcp_on_daemon(&url, state.path(), &["--json", "status", &id]);
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert_eq!(o.status.code(), Some(4), "{}", show(&o));
    assert!(
        retry_command(&o).contains(&url),
        "the retry command names the daemon\n{}",
        show(&o)
    );
    let v = record(&status);
    assert_eq!(v["outcome"]["status"], "not_applied", "{v}");
    assert_eq!(v["snapshots"][0]["status"], "pending", "{v}");
}

/// Upgrading with a result still staged: the state directory holds the delegation's journal
/// record in the format of an older release (version 0: the same fields, no `version`). The
/// real `awcp` of this release applies it with the retry command and writes the record back
/// as the current version. A record from a *newer* release is refused and left untouched
/// (a downgrade never eats the result).
#[test]
fn a_result_staged_by_an_older_release_applies_after_the_upgrade() {
    let (_ex, state, ws, o) = conflicting_delegation();
    let a = ws.path().join("a.txt");
    let id = record(&o)["id"].as_str().unwrap().to_owned();
    let path = state.path().join("delegations").join(format!("{id}.json"));
    let mut rec: Value = awcp_driver::executor::journal::read_record_file(&path).unwrap();
    assert_eq!(rec["version"], 1, "this release writes version 1: {rec}");
    std::fs::write(&a, "A\n").unwrap();
    let retry = retry_command(&o);
    let args: Vec<&str> = retry.iter().map(String::as_str).collect();

    // A newer release's record: refused, kept byte for byte, nothing applied.
    rec["version"] = 2.into();
    let newer = serde_json::to_vec_pretty(&rec).unwrap();
    std::fs::write(&path, &newer).unwrap();
    let o2 = awcp(&args);
    assert_ne!(o2.status.code(), Some(0), "{}", show(&o2));
    assert!(
        String::from_utf8_lossy(&o2.stderr)
            .lines()
            .any(|l| l.starts_with("error:") && l.contains("newer than this delegator understands")),
        "says why: {}",
        show(&o2)
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        newer,
        "the newer record is kept"
    );
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "A\n");
    assert!(!ws.path().join("RESULT.txt").exists());

    // An older release's record: applied, then written back as version 1.
    rec.as_object_mut().unwrap().remove("version");
    std::fs::write(&path, serde_json::to_vec_pretty(&rec).unwrap()).unwrap();
    let o3 = awcp(&args);
    assert_eq!(o3.status.code(), Some(0), "{}", show(&o3));
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "A by the agent\n");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("RESULT.txt")).unwrap(),
        "agent was here\n"
    );
    if let Ok(bytes) = std::fs::read(&path) {
        let after = awcp_driver::executor::journal::read_record(&bytes).unwrap();
        assert_eq!(after["version"], 1, "written back as the current version");
    }
}

/// Review before apply: `awcp diff ID` shows what applying the staged result would do (files
/// added and modified with their diffs, the local edit it conflicts with) and writes nothing;
/// once the local edit is undone the diff shows the clean change, and the apply does exactly
/// that.
#[test]
fn awcp_diff_shows_what_a_staged_result_would_change_and_writes_nothing() {
    let (_ex, state, ws, o) = conflicting_delegation();
    let id = record(&o)["id"].as_str().unwrap().to_owned();
    let a = ws.path().join("a.txt");
    let tree = |d: &Path| {
        let mut v: Vec<(String, String)> = std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read_to_string(e.path()).unwrap_or_default(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = tree(ws.path());
    let state_dir = state.path().to_str().unwrap();
    let d = awcp(&["--json", "diff", &id, "--state-dir", state_dir]);
    assert_eq!(d.status.code(), Some(0), "{}", show(&d));
    let v: Value =
        serde_json::from_slice(&d.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(&d)));
    assert!(
        v["conflicts"][0]
            .as_str()
            .is_some_and(|p| p.ends_with("/a.txt")),
        "the local edit is named: {v}"
    );
    let added = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| {
            f["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/RESULT.txt"))
        })
        .unwrap_or_else(|| panic!("RESULT.txt listed: {v}"));
    assert_eq!(added["change"], "added");
    assert!(added["diff"].as_str().unwrap().contains("+agent was here"));
    assert_eq!(tree(ws.path()), before, "a diff writes nothing");

    // The local edit undone: a clean change, shown as text.
    std::fs::write(&a, "A\n").unwrap();
    let d = awcp(&["diff", &id, "--state-dir", state_dir]);
    assert_eq!(d.status.code(), Some(0), "{}", show(&d));
    let text = String::from_utf8_lossy(&d.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("A ") && l.ends_with("/RESULT.txt")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("M ") && l.ends_with("/a.txt")),
        "{text}"
    );
    assert!(text.contains("-A\n+A by the agent\n"), "{text}");
    assert!(!text.contains("conflict"), "{text}");
    assert!(!ws.path().join("RESULT.txt").exists());
    let retry = retry_command(&o);
    let args: Vec<&str> = retry.iter().map(String::as_str).collect();
    let o2 = awcp(&args);
    assert_eq!(o2.status.code(), Some(0), "{}", show(&o2));
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "A by the agent\n");
    // Nothing left to preview once applied.
    let d = awcp(&["diff", &id, "--state-dir", state_dir]);
    assert_ne!(d.status.code(), Some(0), "{}", show(&d));
}

/// Issue 47, item 8: the agent an executor runs gets none of the executor's secrets (its
/// `AWCP_AUTH_TOKEN`, anything else in its environment) but what `--agent-env` names; tokens
/// come from files (`--auth-token-file`, `--token-file`) and are then not on any command line.
/// Real `awcp-executor` and `awcp` processes; the agent writes its environment into the
/// workspace, which comes back as the result.
#[test]
fn the_agent_gets_no_secret_and_tokens_come_from_files() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "file-token-0123456789\n").unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    for (how, token_args) in [
        ("from the environment", vec![]),
        (
            "from a file",
            vec![
                "--auth-token-file".to_owned(),
                token_file.display().to_string(),
            ],
        ),
    ] {
        let ex_dir = tempfile::tempdir().unwrap();
        let mut cmd = bins::executor_command(ex_dir.path(), "sh -c 'env > agent-env.txt; echo ok'");
        cmd.env("AWS_SECRET_ACCESS_KEY", "aws-secret-value")
            .env("MY_AGENT_KEY", "agent-key-value")
            .args(["--agent-env", "MY_AGENT_KEY,FIXED=given"])
            .args(&token_args);
        if token_args.is_empty() {
            cmd.env("AWCP_AUTH_TOKEN", "file-token-0123456789");
        } else {
            cmd.env_remove("AWCP_AUTH_TOKEN");
        }
        let (child, url) = bins::spawn_announcing(&mut cmd, bins::EXECUTOR_ANNOUNCES);
        let child = bins::KillOnDrop(child);
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", child.0.id())).unwrap();
        assert!(
            !String::from_utf8_lossy(&cmdline).contains("file-token-0123456789"),
            "{how}: the token is on the executor's command line"
        );
        let ws = workspace();
        let state = tempfile::tempdir().unwrap();
        let o = delegate_with(
            ws.path(),
            &url,
            "dump the environment",
            state.path(),
            &["--token-file", token_file.to_str().unwrap()],
        );
        assert_eq!(record(&o)["state"], "completed", "{how}: {}", show(&o));
        let env = std::fs::read_to_string(ws.path().join("agent-env.txt")).unwrap();
        for secret in [
            "file-token-0123456789",
            "aws-secret-value",
            "AWCP_AUTH_TOKEN",
        ] {
            assert!(
                !env.contains(secret),
                "{how}: {secret} reached the agent:\n{env}"
            );
        }
        for line in ["MY_AGENT_KEY=agent-key-value", "FIXED=given"] {
            assert!(env.lines().any(|l| l == line), "{how}: {line} in\n{env}");
        }
        assert!(
            env.lines()
                .any(|l| l.starts_with("AWCP_DELEGATION_ID=dlg_")),
            "{env}"
        );
        assert!(env.lines().any(|l| l.starts_with("PATH=")), "{env}");
    }
    // A wrong token from a file is refused like a wrong one on the command line.
    let ex_dir = tempfile::tempdir().unwrap();
    let mut cmd = bins::executor_command(ex_dir.path(), "true");
    cmd.env_remove("AWCP_AUTH_TOKEN")
        .args(["--auth-token-file", token_file.to_str().unwrap()]);
    let (child, url) = bins::spawn_announcing(&mut cmd, bins::EXECUTOR_ANNOUNCES);
    let _child = bins::KillOnDrop(child);
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "not-the-token\n").unwrap();
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let o = delegate_with(
        ws.path(),
        &url,
        "x",
        state.path(),
        &["--token-file", wrong.to_str().unwrap()],
    );
    assert_ne!(o.status.code(), Some(0), "{}", show(&o));
    assert!(show(&o).contains("AUTH_FAILED"), "{}", show(&o));
}

/// Issue 47, item 9: a relative `--state-dir` still gives the agent an absolute
/// `AWCP_WORK_DIR` (it used to be relative to the executor's directory, not the agent's), and a
/// work root every user may write to (`/tmp`, or any `o+w` directory) is refused at start.
#[test]
fn a_relative_state_dir_gives_absolute_paths_and_a_world_writable_work_root_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(bins::path("awcp-executor"));
    cmd.current_dir(dir.path())
        .env_remove("AWCP_AUTH_TOKEN")
        .args(["--listen", "127.0.0.1:0", "--quiet", "--state-dir", "state"])
        .args([
            "--agent-cmd",
            "sh -c 'echo \"$AWCP_WORK_DIR\" > work-dir.txt; echo ok'",
        ]);
    let (child, url) = bins::spawn_announcing(&mut cmd, bins::EXECUTOR_ANNOUNCES);
    let _child = bins::KillOnDrop(child);
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let o = delegate(ws.path(), &url, "where am I", state.path());
    assert_eq!(record(&o)["state"], "completed", "{}", show(&o));
    let work_dir = std::fs::read_to_string(ws.path().join("work-dir.txt")).unwrap();
    let work_dir = std::path::Path::new(work_dir.trim());
    assert!(work_dir.is_absolute(), "AWCP_WORK_DIR {work_dir:?}");
    let state_abs = std::fs::canonicalize(dir.path().join("state")).unwrap();
    assert!(
        work_dir.starts_with(&state_abs),
        "{work_dir:?} under {state_abs:?}"
    );

    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    for root in [Path::new("/tmp"), open.as_path()] {
        let o = std::process::Command::new(bins::path("awcp-executor"))
            .env_remove("AWCP_AUTH_TOKEN")
            .args(["--listen", "127.0.0.1:0", "--quiet", "--work-root"])
            .arg(root)
            .arg("--state-dir")
            .arg(
                dir.path()
                    .join(format!("state-{}", root.display()).replace('/', "_")),
            )
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{}: {}", root.display(), show(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("writable by every user"),
            "{}",
            show(&o)
        );
    }
}

/// Issue 47, item 9: a result not applied through the daemon prints an `awcp apply` that works
/// exactly as printed (run by `sh`, where the default state directory holds no token) however
/// the client found the daemon's token: a token file, the daemon's state directory (by flag or
/// `AWCP_STATE_DIR`), the environment. A token given on the command line is never printed; the
/// command names the file to give instead.
#[test]
fn the_daemon_retry_command_works_as_printed_and_never_prints_the_token() {
    use std::os::unix::fs::PermissionsExt;
    let ex = Executor::start();
    let state = tempfile::tempdir().unwrap();
    let (daemon, url) = bins::spawn_daemon(state.path());
    let _daemon = bins::KillOnDrop(daemon);
    let token = bins::daemon_token(state.path());
    let state_dir = state.path().to_str().unwrap();
    // The client's own AWCP_HOME: its default state directory holds no daemon token.
    let home = tempfile::tempdir().unwrap();
    let token_file = home.path().join("daemon-token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let token_file = token_file.to_str().unwrap();
    let path = format!(
        "{}:{}",
        bins::path("awcp").parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // `program args…` with `env` (and no other AWCP variable but AWCP_HOME), `awcp` on PATH.
    let run = |env: &[(&str, &str)], program: &str, args: &[&str]| {
        let mut cmd = std::process::Command::new(program);
        cmd.env("AWCP_HOME", home.path()).env("PATH", &path);
        for k in [
            "AWCP_STATE_DIR",
            "AWCP_DAEMON_TOKEN",
            "AWCP_DAEMON_TOKEN_FILE",
            "AWCP_DAEMON_URL",
        ] {
            cmd.env_remove(k);
        }
        cmd.envs(env.iter().copied()).args(args).output().unwrap()
    };
    // How the client is given the token: its flags, its environment.
    type Way<'a> = (&'a str, Vec<&'a str>, Vec<(&'a str, &'a str)>);
    let ways: [Way; 5] = [
        (
            "a token file",
            vec!["--daemon-token-file", token_file],
            vec![],
        ),
        (
            "the state directory",
            vec!["--state-dir", state_dir],
            vec![],
        ),
        (
            "AWCP_STATE_DIR",
            vec![],
            vec![("AWCP_STATE_DIR", state_dir)],
        ),
        (
            "AWCP_DAEMON_TOKEN",
            vec![],
            vec![("AWCP_DAEMON_TOKEN", &token)],
        ),
        ("the command line", vec!["--daemon-token", &token], vec![]),
    ];
    for (how, token_args, env) in ways {
        let ws = workspace();
        let a = ws.path().join("a.txt");
        let prompt = format!("conflict {}", a.display());
        let mut args = vec!["--quiet", "--json", "--daemon-url", &url];
        args.extend(&token_args);
        args.extend([
            "delegate",
            ws.path().to_str().unwrap(),
            "--daemon",
            "--peer",
            &ex.url,
            "--prompt",
            &prompt,
        ]);
        let o = run(&env, "awcp", &args);
        assert_eq!(o.status.code(), Some(4), "{how}: {}", show(&o));
        assert!(
            !show(&o).contains(&token),
            "{how}: the token was printed: {}",
            show(&o)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        let mut line = err
            .lines()
            .map(str::trim)
            .find(|l| l.contains("awcp apply "))
            .unwrap_or_else(|| panic!("{how}: no retry command: {err}"))
            .to_owned();
        assert!(line.contains(&url), "{how}: {line}");
        if how == "the command line" {
            assert!(
                line.contains("TOKEN_FILE") && err.contains("AWCP_DAEMON_TOKEN"),
                "{how}: says where the token goes: {err}"
            );
            line = line.replace("TOKEN_FILE", token_file);
        }
        // Undo the local edit, then run the command as printed.
        std::fs::write(&a, "A\n").unwrap();
        let o2 = run(&env, "sh", &["-c", &line]);
        assert_eq!(o2.status.code(), Some(0), "{how}: {line}\n{}", show(&o2));
        assert_eq!(
            std::fs::read_to_string(&a).unwrap(),
            "A by the agent\n",
            "{how}"
        );
    }
}

/// Issue 48.8: `awcp delegate` says what changed (it used to end with `snapshot …: applied`
/// and name the files only in an INFO log); the JSON record lists them too; a staged result
/// ends with the commands that review, apply or discard it, and they work as printed.
#[test]
fn delegate_names_the_changed_files_and_how_to_review_a_staged_result() {
    let ex = Executor::start();
    let state = tempfile::tempdir().unwrap();
    let run = |ws: &Path, extra: &[&str]| {
        let mut args = vec![
            "delegate",
            ws.to_str().unwrap(),
            "--peer",
            &ex.url,
            "--prompt",
            "edit",
            "--state-dir",
            state.path().to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        awcp(&args)
    };
    let ws = workspace();
    let o = run(ws.path(), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("changed (2 files):"), "{}", show(&o));
    let listed: Vec<&str> = out.lines().filter(|l| l.starts_with("  ")).collect();
    assert!(
        listed.iter().any(|l| l.ends_with("/RESULT.txt")),
        "{}",
        show(&o)
    );
    assert!(listed.iter().any(|l| l.ends_with("/a.txt")), "{}", show(&o));

    let ws = workspace();
    let o = delegate(ws.path(), &ex.url, "edit", state.path());
    let v = record(&o);
    let changed = v["snapshots"][0]["changed"].as_array().expect("a list");
    assert_eq!(changed.len(), 2, "{v}");

    let ws = workspace();
    let o = run(ws.path(), &["--snapshot-mode", "staged"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        !ws.path().join("RESULT.txt").exists(),
        "staged, not applied"
    );
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let printed = |verb: &str| -> Vec<String> {
        let line = err
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with(&format!("awcp {verb} ")))
            .unwrap_or_else(|| panic!("no `awcp {verb}` printed\n{}", show(&o)));
        line.split_whitespace().skip(1).map(str::to_owned).collect()
    };
    assert!(err.contains("awcp discard "), "{}", show(&o));
    let diff = printed("diff");
    let d = awcp(&diff.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(d.status.code(), Some(0), "{}", show(&d));
    assert!(
        String::from_utf8_lossy(&d.stdout).contains("RESULT.txt"),
        "{}",
        show(&d)
    );
    let apply = printed("apply");
    let a = awcp(&apply.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(a.status.code(), Some(0), "{}", show(&a));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("RESULT.txt")).unwrap(),
        "agent was here\n"
    );
}

/// Issue 48.8: a URL that is not an AWCP executor (a web server answering 501 with an HTML
/// page) was reported as TIMEOUT, the page printed three times with a Rust debug struct. It
/// is a PROTOCOL_ERROR, said once, in one line, with what to check; no log line repeats it.
#[test]
fn a_peer_that_is_not_an_awcp_executor_is_named_as_such_once() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let peer = format!("http://{}/awcp", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { break };
            let mut buf = [0u8; 65536];
            let _ = c.read(&mut buf);
            let page = "<!DOCTYPE HTML>\n<html><head><title>Error response</title></head>\n\
                        <body><h1>Error response</h1><p>Error code: 501</p></body></html>\n";
            let _ = write!(
                c,
                "HTTP/1.0 501 Unsupported method\r\nContent-Type: text/html\r\n\
                 Content-Length: {}\r\n\r\n{page}",
                page.len()
            );
        }
    });
    let state = tempfile::tempdir().unwrap();
    let ws = workspace();
    let o = awcp(&[
        "delegate",
        ws.path().to_str().unwrap(),
        "--peer",
        &peer,
        "--prompt",
        "x",
        "--state-dir",
        state.path().to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(all.matches("error: PROTOCOL_ERROR").count(), 1, "{all}");
    assert!(all.contains("not AWCP"), "{all}");
    assert!(all.contains("--peer"), "the hint says what to check: {all}");
    assert!(!all.contains("<body>"), "no web page in the output: {all}");
    assert!(!all.contains("UnusableReply"), "no debug struct: {all}");
    assert!(!all.contains(" WARN "), "no log line repeats it: {all}");
}
