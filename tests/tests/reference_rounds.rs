//! Multi-round delegations against the TypeScript reference's `dev` branch (CONTINUE / CLOSE
//! messages, the SSE `round_done` event; `/work/notes/multiround-wire.md`), both ways:
//!
//! - our delegator (`awcp delegate`, in-process) facing a reference executor, which ends every
//!   round, the first one included, with `round_done` and waits: it must close the session
//!   (CLOSE, accepted) and complete with the round's result applied;
//! - our daemon driving three rounds on a reference executor (`awcp delegate --daemon
//!   --rounds`, `awcp continue`, `awcp close`), each round's snapshot applied before the next;
//! - the reference `DelegatorService` driving three rounds on our `awcp-executor
//!   --reference-rounds`.
//!
//! The reference is built from its git mirror by `reference_support` (skipped with a notice
//! where the mirror, node or npm are missing, unless `AWCP_REQUIRE_REFERENCE_TEST=1`).
//! Everything binds 127.0.0.1; every process is killed when its test ends; every CLI run is
//! killed (and the test fails) after 60 s.

#[allow(dead_code)] // Not every helper is used by every test file including it.
mod reference_support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use awcp_tests::bins::{self, show, KillOnDrop};
use reference_support::{answers_to, json_line, reference_dev, run_bounded, RefExecutor};
use serde_json::Value;

/// The longest a CLI command may run.
const CLI_LIMIT: Duration = Duration::from_secs(60);

/// How long the reference executor's log may lag behind what a finished command did.
const LOG_LAG: Duration = Duration::from_secs(10);

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
