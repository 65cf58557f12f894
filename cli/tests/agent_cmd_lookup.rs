//! Issue 48, item 12: `awcp-executor` warns at start-up when the program of its `--agent-cmd`
//! is not on the agent's PATH (every task would fail to start), and says nothing when it is.
//! Runs the real binary on 127.0.0.1 port 0; its log lines before `executor ready` (logged
//! right after the listening URL) are what it said at start-up.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Starts `awcp-executor --agent-cmd CMD` and returns its stderr up to and including the
/// `executor ready` line (or all of it, if it exits first), then kills it.
fn startup_log(agent_cmd: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_awcp-executor"))
        .args(["--listen", "127.0.0.1:0", "--agent-cmd", agent_cmd])
        .arg("--work-root")
        .arg(dir.path().join("work"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .env_remove("RUST_LOG")
        .env_remove("AWCP_LOG_FORMAT")
        .env_remove("AWCP_AGENT_ENV")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = support::Kill(child);
    let stdout = child.0.stdout.take().unwrap();
    let stderr = child.0.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let ready = line.contains("executor ready");
            if tx.send(line).is_err() || ready {
                break;
            }
        }
    });
    let mut first = String::new();
    BufReader::new(stdout).read_line(&mut first).unwrap();
    assert!(
        first.starts_with("awcp-executor listening on http://127.0.0.1:"),
        "unexpected first line {first:?}"
    );
    let mut log = String::new();
    // The ready line follows the URL at once; the limit only keeps a broken build from hanging.
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(30)) {
        log.push_str(&line);
        log.push('\n');
        if line.contains("executor ready") {
            return log;
        }
    }
    panic!("no `executor ready` line; stderr so far:\n{log}");
}

#[test]
fn a_missing_agent_program_is_warned_about_at_start() {
    let log = startup_log("no-such-program-xyz --prompt-file {prompt_file}");
    let warning = log
        .lines()
        .find(|l| l.contains("no-such-program-xyz"))
        .unwrap_or_else(|| panic!("no warning naming the program:\n{log}"));
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("not found on PATH"), "{warning}");
}

#[test]
fn the_first_program_of_a_sh_c_script_is_checked_too() {
    let log = startup_log("sh -c 'exec no-such-program-xyz -p \"$AWCP_PROMPT\"'");
    assert!(
        log.lines().any(|l| l.contains("WARN")
            && l.contains("\"no-such-program-xyz\" (the first command of its -c script)")),
        "{log}"
    );
}

#[test]
fn an_agent_program_on_path_gets_no_warning() {
    let log = startup_log("sh -c 'cat > /dev/null; echo done'");
    assert!(!log.contains("--agent-cmd"), "{log}");
}
