//! Multi-round delegations against the TypeScript reference's `dev` branch (CONTINUE / CLOSE
//! messages, the SSE `round_done` event; `/work/notes/multiround-wire.md`), both ways:
//!
//! - our delegator (`awcp delegate`, in-process) facing a reference executor, which ends every
//!   round, the first one included, with `round_done` and waits: it must close the session
//!   (CLOSE, accepted) and complete with the round's result applied;
//! - our daemon driving three rounds on a reference executor (`awcp delegate --daemon
//!   --rounds`, `awcp continue`, `awcp close`), each round's snapshot applied before the next;
//! - the reference `DelegatorService` driving three rounds on our `awcp-executor
//!   --reference-rounds`, cancelling a running round there (our executor must stop the agent
//!   and release the work directory), and leaving a session idle: our executor's
//!   `--round-idle-timeout` ends it with `error{EXPIRED}` (a `dev` delegator takes no `done`
//!   while idle), and a `ps_dev` delegator's own idle timeout closes it.
//!
//! The reference (`dev`, and `ps_dev` for its idle timeout) is built from its git mirror by
//! `reference_support` (skipped with a notice where the mirror, node or npm are missing, unless
//! `AWCP_REQUIRE_REFERENCE_TEST=1`).
//! Everything binds 127.0.0.1; every process is killed when its test ends; every CLI run is
//! killed (and the test fails) after 60 s.

#[allow(dead_code)] // Not every helper is used by every test file including it.
mod reference_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use awcp_tests::bins::{self, show, KillOnDrop};
use reference_support::{
    answers_to, json_line, reference_dev, reference_ps_dev, run_bounded, RefExecutor,
    SLOW_AGENT_STARTED,
};
use serde_json::Value;

/// The longest a CLI command may run.
const CLI_LIMIT: Duration = Duration::from_secs(60);

/// How long the reference executor's log may lag behind what a finished command did.
const LOG_LAG: Duration = Duration::from_secs(10);

/// How long our executor may take, once a session has ended on the delegator's side, to stop
/// its agent and remove its work directory.
const RELEASE_LIMIT: Duration = Duration::from_secs(10);

/// A workspace of one file, `a.txt`.
fn workspace() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.txt"), "A\n").unwrap();
    d
}

/// The workspace's `log.txt` (empty if missing).
fn log_of(ws: &Path) -> String {
    std::fs::read_to_string(ws.join("log.txt")).unwrap_or_default()
}

/// `prompt=<p>` lines for `prompts`, as the agents write them.
fn prompt_lines(prompts: &[&str]) -> String {
    prompts.iter().map(|p| format!("prompt={p}\n")).collect()
}

/// `awcp --quiet ARGS…`, killed after [`CLI_LIMIT`].
fn awcp(args: &[&str]) -> Output {
    // The binary is built (if need be) before the clock starts.
    let bin = bins::path("awcp");
    run_bounded(Command::new(bin).arg("--quiet").args(args), CLI_LIMIT)
}

/// The JSON view the command printed last, after checking it exited 0.
fn view(o: &Output, what: &str, ex: &RefExecutor) -> Value {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{what}\n{}\n{}",
        show(o),
        ex.show()
    );
    json_line(o, "").unwrap_or_else(|| panic!("{what}: no JSON printed\n{}", show(o)))
}

/// Waits until the reference executor has answered `count` messages of type `ty`, and checks
/// it received that many and accepted each (200).
fn assert_accepted(ex: &RefExecutor, ty: &str, count: usize) {
    let answered = ex.wait_for_log(LOG_LAG, |log| answers_to(log, ty).1.len() >= count);
    let (received, statuses) = answers_to(&ex.log(), ty);
    assert!(
        answered && received == count && statuses.iter().all(|s| *s == 200),
        "expected {count} {ty} accepted by the reference executor, got {received} received, \
         answered {statuses:?}\n{}",
        ex.show()
    );
}

#[test]
fn our_delegator_closes_a_round_it_did_not_ask_for_and_completes() {
    let Some(tree) = reference_dev() else {
        return;
    };
    bins::path("awcp");
    let ex = tree.start_executor();
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let url = ex.url();
    let o = awcp(&[
        "delegate",
        ws.path().to_str().unwrap(),
        "--peer",
        &url,
        "--prompt",
        "one",
        "--json",
        "--state-dir",
        state.path().to_str().unwrap(),
    ]);
    let v = view(&o, "awcp delegate", &ex);
    assert_eq!(v["state"], "completed", "{v}\n{}", ex.show());
    assert_eq!(log_of(ws.path()), prompt_lines(&["one"]), "{}", ex.show());
    assert_eq!(
        std::fs::read_to_string(ws.path().join("round-one.txt")).unwrap_or_default(),
        "one\n",
        "the round's files came back"
    );
    // The session on the executor was ended by a CLOSE it accepted (which also ends its event
    // stream with `done`), and no further round was asked for.
    assert_accepted(&ex, "CLOSE", 1);
    assert_eq!(answers_to(&ex.log(), "CONTINUE").0, 0, "{}", ex.show());
}

#[test]
fn our_delegator_runs_three_rounds_on_a_reference_dev_executor() {
    let Some(tree) = reference_dev() else {
        return;
    };
    bins::path("awcp");
    let ex = tree.start_executor();
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let (daemon, daemon_url) = bins::spawn_daemon(state.path());
    let _daemon = KillOnDrop(daemon);
    let token = bins::daemon_token(state.path());
    let on_daemon = |args: &[&str]| {
        let mut all = vec![
            "--json",
            "--daemon-url",
            &daemon_url,
            "--daemon-token",
            &token,
        ];
        all.extend_from_slice(args);
        awcp(&all)
    };
    let peer = ex.url();

    let o = on_daemon(&[
        "delegate",
        ws.path().to_str().unwrap(),
        "--peer",
        &peer,
        "--prompt",
        "round 1",
        "--description",
        "r1",
        "--daemon",
        "--rounds",
    ]);
    let v = view(&o, "awcp delegate --daemon --rounds", &ex);
    assert_eq!(v["state"], "idle", "{v}\n{}", ex.show());
    assert_eq!(v["round"], 1, "{v}");
    let id = v["id"].as_str().expect("an id").to_owned();
    assert_eq!(
        log_of(ws.path()),
        prompt_lines(&["round 1"]),
        "round 1's snapshot applied before the round is reported over\n{v}\n{}",
        ex.show()
    );

    let prompts = ["round 1", "round 2", "round 3"];
    for n in 2..=3 {
        let prompt = prompts[n - 1];
        let description = format!("r{n}");
        let o = on_daemon(&[
            "continue",
            &id,
            "--prompt",
            prompt,
            "--description",
            &description,
        ]);
        let v = view(&o, &format!("awcp continue (round {n})"), &ex);
        assert_eq!(v["id"], id.as_str(), "{v}");
        assert_eq!(v["state"], "idle", "{v}\n{}", ex.show());
        assert_eq!(v["round"], n, "{v}");
        assert_eq!(
            log_of(ws.path()),
            prompt_lines(&prompts[..n]),
            "round {n}'s snapshot applied before the round is reported over\n{v}\n{}",
            ex.show()
        );
    }
    assert_accepted(&ex, "CONTINUE", 2);

    let o = on_daemon(&["close", &id]);
    let v = view(&o, "awcp close", &ex);
    assert_eq!(v["id"], id.as_str(), "{v}");
    assert_eq!(v["state"], "completed", "{v}\n{}", ex.show());
    assert_accepted(&ex, "CLOSE", 1);
    assert_eq!(log_of(ws.path()), prompt_lines(&prompts), "{}", ex.show());
    for (n, prompt) in prompts.iter().enumerate() {
        let file = ws.path().join(format!("round-r{}.txt", n + 1));
        assert_eq!(
            std::fs::read_to_string(&file).unwrap_or_default(),
            format!("{prompt}\n"),
            "{} (written in the round described r{})",
            file.display(),
            n + 1
        );
    }
}

/// Appends `prompt=$AWCP_PROMPT` to `log.txt` (one line per round).
const AGENT: &str = r#"#!/bin/sh
printf 'prompt=%s\n' "$AWCP_PROMPT" >> log.txt
echo "logged round"
"#;

#[test]
fn a_reference_dev_delegator_runs_three_rounds_on_our_executor() {
    let Some(tree) = reference_dev() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent.sh");
    std::fs::write(&agent, AGENT).unwrap();
    let mut cmd = bins::executor_command(dir.path(), &format!("sh {}", agent.display()));
    cmd.arg("--reference-rounds");
    let (ex, url) = bins::spawn_announcing(&mut cmd, bins::EXECUTOR_ANNOUNCES);
    let _ex = KillOnDrop(ex);
    let src = workspace();

    let o = tree.run_delegator(&url, src.path(), 3);
    assert!(o.status.success(), "delegator.mjs failed\n{}", show(&o));
    let result = json_line(&o, "RESULT ").unwrap_or_else(|| panic!("no RESULT\n{}", show(&o)));
    assert_eq!(result["ok"], true, "{result}");
    assert_eq!(result["state"], "completed", "{result}");
    assert_eq!(result["closeOutcome"], "accepted", "{result}");
    let rounds = result["rounds"].as_array().cloned().unwrap_or_default();
    assert_eq!(rounds.len(), 3, "{result}");
    assert!(
        rounds.iter().all(|r| r["summary"].is_string()),
        "every round has a result: {result}"
    );
    assert_eq!(
        log_of(src.path()),
        prompt_lines(&["round 1", "round 2", "round 3"]),
        "{}",
        show(&o)
    );
    // The source followed every round (auto mode applies each round's snapshot).
    let per_round: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("ROUND "))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|r| r["log"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        per_round,
        vec![
            prompt_lines(&["round 1"]),
            prompt_lines(&["round 1", "round 2"]),
            prompt_lines(&["round 1", "round 2", "round 3"]),
        ],
        "{}",
        show(&o)
    );
}

/// Our daemon against a reference `dev` executor: a session left idle is closed by the
/// daemon's idle timeout (a CLOSE the executor accepts), and a round cancelled while it runs
/// (round 2: the reference executor survives a cancel then) ends cancelled with the executor
/// told.
#[test]
fn our_daemon_closes_an_idle_reference_session_and_cancels_a_running_round() {
    let Some(tree) = reference_dev() else {
        return;
    };
    bins::path("awcp");
    let ex = tree.start_executor();
    let state = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bins::path("awcp"));
    cmd.args([
        "--quiet",
        "daemon",
        "--listen",
        "127.0.0.1:0",
        "--state-dir",
    ])
    .arg(state.path())
    .args(["--round-idle-timeout", "1"])
    .env_remove("AWCP_DAEMON_TOKEN");
    let (daemon, daemon_url) = bins::spawn_announcing(&mut cmd, bins::DAEMON_ANNOUNCES);
    let _daemon = KillOnDrop(daemon);
    let token = bins::daemon_token(state.path());
    let on_daemon = |args: &[&str]| {
        let mut all = vec![
            "--json",
            "--daemon-url",
            &daemon_url,
            "--daemon-token",
            &token,
        ];
        all.extend_from_slice(args);
        awcp(&all)
    };
    let peer = ex.url();
    let delegate = |ws: &Path| {
        let o = on_daemon(&[
            "delegate",
            ws.to_str().unwrap(),
            "--peer",
            &peer,
            "--prompt",
            "round 1",
            "--description",
            "r1",
            "--daemon",
            "--rounds",
        ]);
        let v = view(&o, "awcp delegate --daemon --rounds", &ex);
        assert_eq!(v["state"], "idle", "{v}\n{}", ex.show());
        v["id"].as_str().expect("an id").to_owned()
    };

    // Left idle: closed after a second.
    let ws = workspace();
    let id = delegate(ws.path());
    let o = on_daemon(&["wait", &id, "--timeout", "60"]);
    let v = view(&o, "awcp wait", &ex);
    assert_eq!(v["state"], "completed", "{v}\n{}", ex.show());
    assert_accepted(&ex, "CLOSE", 1);
    assert_eq!(log_of(ws.path()), prompt_lines(&["round 1"]));

    // Cancelled while round 2 runs.
    let ws = workspace();
    let id = delegate(ws.path());
    let o = on_daemon(&[
        "continue",
        &id,
        "--prompt",
        "slow round 2",
        "--description",
        "r2",
        "--background",
    ]);
    view(&o, "awcp continue --background", &ex);
    assert!(
        ex.wait_for_log(LOG_LAG, |log| log.contains("slow round 2")),
        "round 2 never ran\n{}",
        ex.show()
    );
    let o = on_daemon(&["cancel", &id]);
    view(&o, "awcp cancel", &ex);
    let o = on_daemon(&["wait", &id, "--timeout", "60"]);
    // Exit 3: the delegation did not complete.
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let v = json_line(&o, "").unwrap_or_else(|| panic!("no JSON printed\n{}", show(&o)));
    assert_eq!(v["state"], "cancelled", "{v}\n{}", ex.show());
    assert_eq!(v["round"], 2, "{v}");
    let told = format!("RES 200 POST /awcp/cancel/{id}");
    assert!(
        ex.wait_for_log(LOG_LAG, |log| log.contains(&told)),
        "the executor was not told\n{}",
        ex.show()
    );
    assert_eq!(
        log_of(ws.path()),
        prompt_lines(&["round 1"]),
        "round 1 stays applied, nothing of round 2"
    );
}

/// Our agent for the tests below, run as `sh agent.sh RUNS`: appends `<pid> <work dir>
/// <prompt>` to the file RUNS (outside the work directory, so it outlives it) and
/// `prompt=$AWCP_PROMPT` to `log.txt`; a prompt starting with `slow` then prints
/// [`SLOW_AGENT_STARTED`] (a progress message: the delegator sees it) and becomes `sleep 120`
/// (the same pid).
fn traced_agent() -> String {
    format!(
        r#"#!/bin/sh
printf '%s %s %s\n' "$$" "$PWD" "$AWCP_PROMPT" >> "$1"
printf 'prompt=%s\n' "$AWCP_PROMPT" >> log.txt
case "$AWCP_PROMPT" in
slow*) echo '{SLOW_AGENT_STARTED}'; exec sleep 120 ;;
esac
echo "logged round"
"#
    )
}

/// Our `awcp-executor --reference-rounds` (plus `extra` arguments) running [`traced_agent`],
/// killed when dropped, and with it any agent of it still running (which the executor, killed
/// with SIGKILL, cannot stop).
struct OurExecutor {
    _child: KillOnDrop,
    url: String,
    dir: tempfile::TempDir,
}

/// One run of [`traced_agent`].
#[derive(Debug)]
struct Run {
    pid: u32,
    work_dir: PathBuf,
    prompt: String,
}

impl OurExecutor {
    fn start(extra: &[&str]) -> OurExecutor {
        let dir = tempfile::tempdir().unwrap();
        let agent = dir.path().join("agent.sh");
        std::fs::write(&agent, traced_agent()).unwrap();
        let runs = dir.path().join("runs.txt");
        let mut cmd = bins::executor_command(
            dir.path(),
            &format!("sh {} {}", agent.display(), runs.display()),
        );
        cmd.arg("--reference-rounds").args(extra);
        let (child, url) = bins::spawn_announcing(&mut cmd, bins::EXECUTOR_ANNOUNCES);
        OurExecutor {
            _child: KillOnDrop(child),
            url,
            dir,
        }
    }

    /// The agent's runs so far.
    fn runs(&self) -> Vec<Run> {
        std::fs::read_to_string(self.dir.path().join("runs.txt"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut f = l.splitn(3, ' ');
                Some(Run {
                    pid: f.next()?.parse().ok()?,
                    work_dir: PathBuf::from(f.next()?),
                    prompt: f.next().unwrap_or_default().to_owned(),
                })
            })
            .collect()
    }

    /// The delegations' work directories (`<work-root>/dlg_*`) there are.
    fn work_dirs(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.dir.path().join("work"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with("dlg_"))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Waits up to [`RELEASE_LIMIT`] until no work directory is left and none of the agent's
    /// runs is, and then asserts it.
    fn assert_released(&self, o: &Output) {
        let gone =
            || self.work_dirs().is_empty() && self.runs().iter().all(|r| !r.work_dir.exists());
        wait_for(RELEASE_LIMIT, gone);
        assert!(
            gone(),
            "our executor kept work directories {:?} (agent runs {:?})\n{}",
            self.work_dirs(),
            self.runs(),
            show(o)
        );
    }
}

impl Drop for OurExecutor {
    fn drop(&mut self) {
        for run in self.runs() {
            if running(run.pid) {
                // SAFETY: `kill` takes no pointers; the pid is one of our agent's runs.
                unsafe { libc::kill(run.pid as libc::pid_t, libc::SIGKILL) };
            }
        }
    }
}

/// Polls `cond` every 20 ms until it holds or `limit` has passed; whether it held.
fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` still runs (exists and is not a zombie, i.e. has not exited).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S …`: the state follows the last `)`.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// The `RESULT` line of a `delegator.mjs` run that exited 0 with `ok: true`.
fn delegator_result(o: &Output) -> Value {
    assert!(o.status.success(), "delegator.mjs failed\n{}", show(o));
    let result = json_line(o, "RESULT ").unwrap_or_else(|| panic!("no RESULT\n{}", show(o)));
    assert_eq!(result["ok"], true, "{result}");
    result
}

#[test]
fn a_reference_dev_delegator_cancels_a_running_round_on_our_executor() {
    let Some(tree) = reference_dev() else {
        return;
    };
    let ours = OurExecutor::start(&[]);
    let src = workspace();

    let o = tree.run_delegator_with(
        &ours.url,
        src.path(),
        1,
        &[("AWCP_REF_MODE", "cancel-round-2")],
    );
    let result = delegator_result(&o);
    assert_eq!(result["state"], "cancelled", "{result}");
    assert_eq!(result["currentRound"], 2, "{result}");
    assert_eq!(result["cancelOutcome"], "accepted", "{result}");
    assert_eq!(
        log_of(src.path()),
        prompt_lines(&["round 1"]),
        "round 1 stays applied, nothing of round 2\n{}",
        show(&o)
    );

    let runs = ours.runs();
    assert_eq!(runs.len(), 2, "the agent ran twice: {runs:?}");
    assert_eq!(runs[1].prompt, "slow round 2", "{runs:?}");
    assert_eq!(
        runs[0].work_dir, runs[1].work_dir,
        "round 2 runs in round 1's work directory"
    );
    let pid = runs[1].pid;
    assert!(
        wait_for(RELEASE_LIMIT, || !running(pid)),
        "our executor did not stop the cancelled round's agent (pid {pid})"
    );
    ours.assert_released(&o);
}

#[test]
fn our_executor_ends_an_idle_reference_dev_session_with_an_error_after_its_idle_time() {
    let Some(tree) = reference_dev() else {
        return;
    };
    let ours = OurExecutor::start(&["--round-idle-timeout", "1"]);
    let src = workspace();

    let started = Instant::now();
    let o = tree.run_delegator_with(&ours.url, src.path(), 1, &[("AWCP_REF_MODE", "wait-idle")]);
    let took = started.elapsed();
    let result = delegator_result(&o);
    assert_eq!(result["state"], "error", "{result}");
    assert_eq!(result["error"]["code"], "EXPIRED", "{result}");
    let events = result["events"].as_array().cloned().unwrap_or_default();
    let last = events.last().cloned().unwrap_or_default();
    assert_eq!(
        last["type"], "error",
        "the session ended on an error event: {result}"
    );
    assert_eq!(last["code"], "EXPIRED", "{result}");
    assert!(
        events.iter().all(|e| e["type"] != "done"),
        "no done while idle: {result}"
    );
    assert!(
        took >= Duration::from_secs(1),
        "the session ended before its idle time ({took:?})"
    );
    assert_eq!(
        log_of(src.path()),
        prompt_lines(&["round 1"]),
        "{}",
        show(&o)
    );
    assert_eq!(ours.runs().len(), 1, "{:?}", ours.runs());
    ours.assert_released(&o);
}

#[test]
fn a_reference_ps_dev_delegator_closes_an_idle_session_on_our_executor() {
    let Some(tree) = reference_ps_dev() else {
        return;
    };
    let ours = OurExecutor::start(&[]);
    let src = workspace();

    let started = Instant::now();
    let o = tree.run_delegator_with(
        &ours.url,
        src.path(),
        1,
        &[
            ("AWCP_REF_MODE", "wait-idle"),
            ("AWCP_REF_IDLE_TIMEOUT_MS", "1500"),
        ],
    );
    let took = started.elapsed();
    let result = delegator_result(&o);
    assert!(
        took >= Duration::from_millis(1500),
        "the session ended before the delegator's idle time ({took:?})\n{result}"
    );
    assert_eq!(result["state"], "completed", "{result}");
    assert_eq!(result["closeOutcome"], "accepted", "{result}");
    assert_eq!(result["errors"], serde_json::json!([]), "{result}");
    assert_eq!(result["error"], Value::Null, "{result}");
    assert_eq!(result["result"]["summary"], "logged round", "{result}");
    assert_eq!(
        log_of(src.path()),
        prompt_lines(&["round 1"]),
        "{}",
        show(&o)
    );
    assert_eq!(ours.runs().len(), 1, "{:?}", ours.runs());
    ours.assert_released(&o);
}
