//! Helpers of the `awcp` CLI tests against a real `awcp-executor` (`cli_results.rs`): the
//! executor and its agent, workspaces, `awcp delegate` runs and what they printed.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Output};

use awcp_tests::bins::{self, awcp, show};
use serde_json::Value;

/// The agent: `fail` fails the task; `conflict <path>` also edits `<path>` (a file of the
/// delegator's workspace, as a user editing locally during the task would); otherwise it
/// edits `a.txt` and adds `RESULT.txt`.
const AGENT: &str = r#"#!/bin/sh
case "$AWCP_PROMPT" in
  fail*) echo "failing on purpose" >&2; exit 7 ;;
  conflict\ *) set -- $AWCP_PROMPT; echo "edited locally" > "$2" ;;
esac
echo "agent was here" > RESULT.txt
echo "A by the agent" > a.txt
echo "done editing"
"#;

/// An `awcp-executor` process, killed when dropped.
pub struct Executor {
    child: Child,
    /// Its AWCP URL.
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Executor {
    pub fn start() -> Executor {
        let dir = tempfile::tempdir().unwrap();
        let agent = dir.path().join("agent.sh");
        std::fs::write(&agent, AGENT).unwrap();
        let (child, url) = bins::spawn_announcing(
            &mut bins::executor_command(dir.path(), &format!("sh {}", agent.display())),
            bins::EXECUTOR_ANNOUNCES,
        );
        Executor {
            child,
            url,
            _dir: dir,
        }
    }

    /// `GET /awcp/tasks/<id>/result`: the HTTP status and the `status` field.
    pub fn result(&self, id: &str) -> (u16, String) {
        let hostport = self
            .url
            .trim_start_matches("http://")
            .trim_end_matches("/awcp");
        let mut s = std::net::TcpStream::connect(hostport).unwrap();
        write!(
            s,
            "GET /awcp/tasks/{id}/result HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
        let field = body
            .find('{')
            .and_then(|i| serde_json::from_str::<Value>(&body[i..body.rfind('}')? + 1]).ok())
            .and_then(|v| v["status"].as_str().map(str::to_owned))
            .unwrap_or_default();
        (status, field)
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A workspace of two files: `a.txt` (`A`) and `b.txt` (`B`).
pub fn workspace() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.txt"), "A\n").unwrap();
    std::fs::write(d.path().join("b.txt"), "B\n").unwrap();
    d
}

/// `awcp delegate DIR --peer PEER --prompt PROMPT --state-dir STATE --json`.
pub fn delegate(dir: &Path, peer: &str, prompt: &str, state: &Path) -> Output {
    delegate_with(dir, peer, prompt, state, &[])
}

/// [`delegate`] with further arguments.
pub fn delegate_with(dir: &Path, peer: &str, prompt: &str, state: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "--json",
        "delegate",
        dir.to_str().unwrap(),
        "--peer",
        peer,
        "--prompt",
        prompt,
        "--state-dir",
        state.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    awcp(&args)
}

/// The delegation record `awcp --json` printed last on stdout.
pub fn record(o: &Output) -> Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().last().unwrap_or_else(|| panic!("{}", show(o)));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {}", show(o)))
}

/// A peer URL nobody listens on.
pub fn dead_peer() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("http://127.0.0.1:{port}/awcp")
}

/// A delegation whose result conflicts with a local edit of `a.txt` made during the task:
/// `awcp delegate` exits 4 with the result staged. Returns the executor, the state dir, the
/// workspace and the CLI's output.
pub fn conflicting_delegation() -> (Executor, tempfile::TempDir, tempfile::TempDir, Output) {
    let ex = Executor::start();
    let state = tempfile::tempdir().unwrap();
    let ws = workspace();
    let a = ws.path().join("a.txt");
    let o = delegate(
        ws.path(),
        &ex.url,
        &format!("conflict {}", a.display()),
        state.path(),
    );
    assert_eq!(o.status.code(), Some(4), "{}", show(&o));
    (ex, state, ws, o)
}

/// The retry command `awcp delegate` printed (`awcp apply ID SID …`), as arguments after `awcp`.
pub fn retry_command(o: &Output) -> Vec<String> {
    let err = String::from_utf8_lossy(&o.stderr);
    let line = err
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("awcp apply "))
        .unwrap_or_else(|| panic!("no retry command printed\n{}", show(o)));
    line.split_whitespace().skip(1).map(str::to_owned).collect()
}
