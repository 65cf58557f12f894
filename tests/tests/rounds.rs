//! Issue 52: multi-round delegations with the real binaries. `awcp delegate --daemon
//! --rounds` keeps a delegation open after its first round; `awcp continue` runs the next
//! round in the executor's same work directory and applies its result; `awcp close` ends it
//! and the executor frees the work directory. Each scenario runs on tokio and on smol, and
//! the unhappy paths kill a real daemon or executor between rounds.
//!
//! Everything binds 127.0.0.1; every process is killed when its guard drops.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use awcp_tests::bins::{self, show, KillOnDrop};
use serde_json::Value;

/// The agent: appends its prompt to `log.txt` and copies the history of earlier rounds it is
/// given to `history.json`; `round two` also creates `temp.txt`, which `round three` deletes
/// again (a file that was never lent, deleted by a later round).
const AGENT: &str = r#"#!/bin/sh
echo "prompt=$AWCP_PROMPT" >> log.txt
echo "$AWCP_ROUND" > round.txt
if [ -n "$AWCP_HISTORY_FILE" ]; then cp "$AWCP_HISTORY_FILE" history.json; fi
case "$AWCP_PROMPT" in
  "round two") echo temporary > temp.txt ;;
  "round three") rm -f temp.txt ;;
  slow) echo $$ > slow.txt; exec sleep 120 ;;
  nap) echo napping > nap.txt; sleep 3 ;;
esac
echo "did $AWCP_PROMPT"
"#;

/// One executor, one daemon, one workspace, on one runtime.
struct Setup {
    dir: tempfile::TempDir,
    runtime: &'static str,
    executor: Option<KillOnDrop>,
    executor_url: String,
    daemon: Option<KillOnDrop>,
    daemon_url: String,
    daemon_args: Vec<&'static str>,
}

impl Setup {
    fn new(runtime: &'static str, executor_args: &[&str]) -> Setup {
        Setup::with_daemon(runtime, executor_args, &[])
    }

    fn with_daemon(
        runtime: &'static str,
        executor_args: &[&str],
        daemon_args: &[&'static str],
    ) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        std::fs::write(dir.path().join("ws/a.txt"), "lent\n").unwrap();
        std::fs::write(dir.path().join("agent.sh"), AGENT).unwrap();
        let mut s = Setup {
            dir,
            runtime,
            executor: None,
            executor_url: String::new(),
            daemon: None,
            daemon_url: String::new(),
            daemon_args: daemon_args.to_vec(),
        };
        s.start_executor("127.0.0.1:0", executor_args);
        s.start_daemon();
        s
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn ws(&self) -> PathBuf {
        self.path().join("ws")
    }

    fn start_executor(&mut self, listen: &str, extra: &[&str]) {
        let agent = format!("sh {}", self.path().join("agent.sh").display());
        // As `bins::executor_command`, on `listen` (a restart takes the port delegators know).
        let mut cmd = Command::new(bins::path("awcp-executor"));
        cmd.args(["--listen", listen, "--quiet", "--work-root"])
            .arg(self.path().join("work"))
            .arg("--state-dir")
            .arg(self.path().join("state"))
            .args(["--agent-cmd", &agent])
            .args(extra)
            .env("AWCP_RUNTIME", self.runtime);
        let (child, url) = bins::spawn_announcing(&mut cmd, bins::EXECUTOR_ANNOUNCES);
        self.executor = Some(KillOnDrop(child));
        self.executor_url = url;
    }

    fn start_daemon(&mut self) {
        let mut cmd = Command::new(bins::path("awcp"));
        cmd.args([
            "--quiet",
            "daemon",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
        ])
        .arg(self.path().join("dstate"))
        .args(&self.daemon_args)
        .env_remove("AWCP_DAEMON_TOKEN")
        .env("AWCP_RUNTIME", self.runtime);
        let (child, url) = bins::spawn_announcing(&mut cmd, bins::DAEMON_ANNOUNCES);
        self.daemon = Some(KillOnDrop(child));
        self.daemon_url = url;
    }

    /// Kills the process in `slot` with SIGKILL (no clean-up of its own) and reaps it.
    fn kill(slot: &mut Option<KillOnDrop>) {
        if let Some(mut p) = slot.take() {
            p.0.kill().unwrap();
            p.0.wait().unwrap();
        }
    }

    /// `awcp --json ARGS` against the daemon.
    fn awcp(&self, args: &[&str]) -> Output {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        bins::awcp_on_daemon(&self.daemon_url, &self.path().join("dstate"), &all)
    }

    fn delegate_rounds(&self, prompt: &str) -> Value {
        self.delegate_rounds_with(prompt, &[])
    }

    fn delegate_rounds_with(&self, prompt: &str, extra: &[&str]) -> Value {
        let ws = self.ws();
        let mut args = vec![
            "delegate",
            ws.to_str().unwrap(),
            "--peer",
            &self.executor_url,
            "--prompt",
            prompt,
            "--daemon",
            "--rounds",
        ];
        args.extend_from_slice(extra);
        let o = self.awcp(&args);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        json(&o)
    }

    fn continue_with(&self, id: &str, prompt: &str) -> Value {
        let o = self.awcp(&["continue", id, "--prompt", prompt]);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        json(&o)
    }

    fn prompts(&self) -> Vec<String> {
        std::fs::read_to_string(self.ws().join("log.txt"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The executor's work directories still there.
    fn work_dirs(&self) -> usize {
        std::fs::read_dir(self.path().join("work"))
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("dlg_"))
                    .count()
            })
            .unwrap_or(0)
    }
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(o)))
}

fn runtimes() -> [&'static str; 2] {
    ["tokio", "smol"]
}

/// Three rounds, each applied before the next starts (including a file a later round
/// deletes that was never lent), then CLOSE: completed, and the executor's work directory
/// is gone.
#[test]
fn three_rounds_are_applied_one_after_the_other_then_closed() {
    for rt in runtimes() {
        let s = Setup::new(rt, &[]);
        let v = s.delegate_rounds("round one");
        assert_eq!(v["state"], "idle", "{rt}: {v}");
        assert_eq!(v["round"], 1, "{rt}: {v}");
        let id = v["id"].as_str().unwrap().to_owned();
        assert_eq!(s.prompts(), ["prompt=round one"], "{rt}");
        assert_eq!(
            s.work_dirs(),
            1,
            "{rt}: the executor keeps the work directory"
        );

        let v = s.continue_with(&id, "round two");
        assert_eq!(
            (v["state"].as_str(), v["round"].as_u64()),
            (Some("idle"), Some(2)),
            "{rt}: {v}"
        );
        assert_eq!(
            s.prompts(),
            ["prompt=round one", "prompt=round two"],
            "{rt}"
        );
        assert!(s.ws().join("temp.txt").exists(), "{rt}");

        let v = s.continue_with(&id, "round three");
        assert_eq!(v["round"], 3, "{rt}: {v}");
        assert_eq!(s.prompts().len(), 3, "{rt}");
        assert!(
            !s.ws().join("temp.txt").exists(),
            "{rt}: deleted by round three"
        );
        let applied = v["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["status"] == "applied")
            .count();
        assert_eq!(applied, 3, "{rt}: one applied snapshot per round: {v}");

        let o = s.awcp(&["close", &id]);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        let v = json(&o);
        assert_eq!(
            (v["state"].as_str(), v["ended"].as_bool()),
            (Some("completed"), Some(true)),
            "{rt}: {v}"
        );
        assert_eq!(v["result"]["summary"], "did round three", "{rt}: {v}");
        assert_eq!(
            s.work_dirs(),
            0,
            "{rt}: the executor released the work directory"
        );
        // Nothing to continue any more.
        let o = s.awcp(&["continue", &id, "--prompt", "round four"]);
        assert_ne!(o.status.code(), Some(0), "{}", show(&o));
    }
}

/// Without --rounds nothing changes: one round, `done`, completed.
#[test]
fn a_delegation_without_rounds_completes_after_its_one_round() {
    let s = Setup::new("tokio", &[]);
    let ws = s.ws();
    let o = s.awcp(&[
        "delegate",
        ws.to_str().unwrap(),
        "--peer",
        &s.executor_url,
        "--prompt",
        "round one",
        "--daemon",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let v = json(&o);
    assert_eq!(
        (v["state"].as_str(), v["round"].as_u64()),
        (Some("completed"), Some(1)),
        "{v}"
    );
    assert_eq!(s.work_dirs(), 0);
}

/// A daemon SIGKILLed between rounds comes back with the delegation still idle, and the next
/// round and the close go through.
#[test]
fn a_daemon_killed_between_rounds_continues_after_its_restart() {
    for rt in runtimes() {
        let mut s = Setup::new(rt, &[]);
        let v = s.delegate_rounds("round one");
        let id = v["id"].as_str().unwrap().to_owned();
        Setup::kill(&mut s.daemon);
        s.start_daemon();
        let o = s.awcp(&["status", &id]);
        assert_eq!(json(&o)["state"], "idle", "{rt}: {}", show(&o));
        let v = s.continue_with(&id, "round two");
        assert_eq!(v["round"], 2, "{rt}: {v}");
        assert_eq!(s.prompts().len(), 2, "{rt}");
        let o = s.awcp(&["close", &id]);
        assert_eq!(o.status.code(), Some(0), "{rt}: {}", show(&o));
        assert_eq!(s.work_dirs(), 0, "{rt}");
    }
}

/// An executor SIGKILLed between rounds closes the delegation when it restarts (every round
/// so far was delivered): the daemon hears `done` and completes it; nothing is left.
#[test]
fn an_executor_killed_between_rounds_closes_the_delegation_when_it_restarts() {
    for rt in runtimes() {
        let mut s = Setup::new(rt, &[]);
        let v = s.delegate_rounds("round one");
        let id = v["id"].as_str().unwrap().to_owned();
        let listen = s
            .executor_url
            .trim_start_matches("http://")
            .trim_end_matches("/awcp")
            .to_owned();
        Setup::kill(&mut s.executor);
        s.start_executor(&listen, &[]);
        let o = s.awcp(&["wait", &id, "--timeout", "120"]);
        assert_eq!(o.status.code(), Some(0), "{rt}: {}", show(&o));
        let v = json(&o);
        assert_eq!(v["state"], "completed", "{rt}: {v}");
        assert_eq!(v["result"]["summary"], "did round one", "{rt}: {v}");
        assert_eq!(s.prompts(), ["prompt=round one"], "{rt}");
        assert_eq!(s.work_dirs(), 0, "{rt}");
    }
}

/// A delegation nobody continues is closed by the executor after its idle time; the daemon
/// completes it. Cancel between rounds releases everything too.
#[test]
fn an_idle_delegation_is_closed_after_the_idle_time_or_cancelled() {
    let s = Setup::new("tokio", &["--round-idle-timeout", "1"]);
    let v = s.delegate_rounds("round one");
    let id = v["id"].as_str().unwrap().to_owned();
    let o = s.awcp(&["wait", &id, "--timeout", "120"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(json(&o)["state"], "completed");
    assert_eq!(s.work_dirs(), 0);

    let s = Setup::new("smol", &[]);
    let v = s.delegate_rounds("round one");
    let id = v["id"].as_str().unwrap().to_owned();
    let o = s.awcp(&["cancel", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let o = s.awcp(&["wait", &id, "--timeout", "120"]);
    let v = json(&o);
    assert_eq!(v["state"], "cancelled", "{v}");
    assert_eq!(s.prompts(), ["prompt=round one"], "the applied round stays");
    // The executor releases the cancelled assignment's work directory.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while s.work_dirs() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(s.work_dirs(), 0);
}

/// The daemon closes a delegation nobody continues after its own idle time (CLOSE to the
/// executor, which releases the work directory).
#[test]
fn the_daemon_closes_a_delegation_left_idle() {
    let s = Setup::with_daemon("smol", &[], &["--round-idle-timeout", "1"]);
    let v = s.delegate_rounds("round one");
    let id = v["id"].as_str().unwrap().to_owned();
    let o = s.awcp(&["wait", &id, "--timeout", "120"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let v = json(&o);
    assert_eq!(v["state"], "completed", "{v}");
    let warned = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains("without a next round"));
    assert!(warned, "{v}");
    assert_eq!(s.work_dirs(), 0, "the executor got the CLOSE");
}

/// A round cancelled while its agent runs: cancelled, the agent stopped, the work directory
/// released; what earlier rounds applied stays.
#[test]
fn a_round_cancelled_mid_way_stops_its_agent_and_releases_everything() {
    for rt in runtimes() {
        let s = Setup::new(rt, &[]);
        let v = s.delegate_rounds("round one");
        let id = v["id"].as_str().unwrap().to_owned();
        let o = s.awcp(&["continue", &id, "--prompt", "slow", "--background"]);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert_eq!(json(&o)["round"], 2, "{}", show(&o));
        // Wait for the agent of round 2 to run (it writes slow.txt in the executor's work
        // directory), then cancel.
        let agent_pid = || {
            std::fs::read_dir(s.path().join("work"))
                .into_iter()
                .flatten()
                .flatten()
                .find_map(|e| std::fs::read_to_string(e.path().join("workspace/slow.txt")).ok())
                .and_then(|pid| pid.trim().parse::<u32>().ok())
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let pid = loop {
            if let Some(pid) = agent_pid() {
                break pid;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{rt}: round 2 never ran"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let o = s.awcp(&["cancel", &id]);
        assert_eq!(o.status.code(), Some(0), "{rt}: {}", show(&o));
        let o = s.awcp(&["wait", &id, "--timeout", "120"]);
        let v = json(&o);
        assert_eq!(v["state"], "cancelled", "{rt}: {v}");
        assert_eq!(v["round"], 2, "{rt}: {v}");
        assert_eq!(
            s.prompts(),
            ["prompt=round one"],
            "{rt}: round one stays applied"
        );
        assert!(
            !s.ws().join("slow.txt").exists(),
            "{rt}: nothing of round two"
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while s.work_dirs() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "{rt}: work directory kept"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // The agent (`sleep 120` in its jail) is gone.
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "{rt}: the agent {pid} still runs"
        );
    }
}

/// A daemon SIGKILLed while round 2 runs: restarted, it reconnects to the executor's stream,
/// takes round 2's end and applies it; the delegation goes on.
#[test]
fn a_daemon_killed_mid_round_takes_the_rounds_result_after_its_restart() {
    for rt in runtimes() {
        let mut s = Setup::new(rt, &[]);
        let v = s.delegate_rounds("round one");
        let id = v["id"].as_str().unwrap().to_owned();
        let o = s.awcp(&["continue", &id, "--prompt", "nap", "--background"]);
        assert_eq!(o.status.code(), Some(0), "{rt}: {}", show(&o));
        // The agent of round 2 runs (it writes nap.txt in the executor's work directory).
        let napping = || {
            std::fs::read_dir(s.path().join("work"))
                .into_iter()
                .flatten()
                .flatten()
                .any(|e| e.path().join("workspace/nap.txt").exists())
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !napping() {
            assert!(
                std::time::Instant::now() < deadline,
                "{rt}: round 2 never ran"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Setup::kill(&mut s.daemon);
        s.start_daemon();
        // Round 2 ends after the restart: the delegation is idle again, its result applied.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        let v = loop {
            let v = json(&s.awcp(&["status", &id]));
            if v["state"] == "idle" && v["round"] == 2 && s.prompts().len() == 2 {
                break v;
            }
            assert!(std::time::Instant::now() < deadline, "{rt}: {v}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        assert_eq!(v["round"], 2, "{rt}: {v}");
        assert_eq!(
            s.prompts(),
            ["prompt=round one", "prompt=nap"],
            "{rt}: round 2 applied"
        );
        assert!(s.ws().join("nap.txt").exists(), "{rt}");
    }
}

/// With the executor's auth on, every round goes through with the delegation's credential;
/// a CONTINUE or CLOSE without it is refused (401) and changes nothing.
#[test]
fn with_auth_on_rounds_need_the_delegations_credential() {
    const TOKEN: &str = "tok-rounds-0123456789abcdef0123456789";
    let s = Setup::new("smol", &["--auth-token", TOKEN]);
    let v = s.delegate_rounds_with("round one", &["--token", TOKEN]);
    let id = v["id"].as_str().unwrap().to_owned();
    let hostport = s
        .executor_url
        .trim_start_matches("http://")
        .trim_end_matches("/awcp")
        .to_owned();
    for body in [
        format!(
            r#"{{"version":"1","type":"CONTINUE","delegationId":"{id}","task":{{"description":"x","prompt":"x"}},"round":2}}"#
        ),
        format!(r#"{{"version":"1","type":"CLOSE","delegationId":"{id}"}}"#),
    ] {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(&hostport).unwrap();
        write!(
            c,
            "POST /awcp HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    }
    let v = s.continue_with(&id, "round two");
    assert_eq!(v["round"], 2, "{v}");
    assert_eq!(s.prompts(), ["prompt=round one", "prompt=round two"]);
    let o = s.awcp(&["close", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(s.work_dirs(), 0);
}
