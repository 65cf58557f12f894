//! `awcp-mcp`'s `delegate` with `transport: "git"`, driven by the official Python MCP SDK (the
//! virtualenv `<target>/mcp-venv`, `mcp_support::venv_python`) against a real `awcp-executor`:
//! with the repository served by the in-process delegator (`--serve-archives`: smart HTTP on
//! its archive listener) and through a remote (`--git-remote`, a `git daemon` started here on
//! loopback, whose refs are the same afterwards: the delegation's branch went once its result
//! was applied). Either way the executor's commit comes back applied in the workspace and no
//! repository is left. Without `--serve-archives` or `--git-remote` the in-process daemon does
//! not offer git at all, and refuses it.
//!
//! Skipped with a notice where the venv cannot be made, unless `AWCP_REQUIRE_MCP_TEST=1`.

mod mcp_support;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use awcp_tests::bins::{spawn_announcing_to, KillOnDrop, EXECUTOR_ANNOUNCES};
use awcp_tests::files::entries;
use awcp_tests::git::GitDaemon;
use mcp_support::show;

/// The agent: writes `RESULT.txt`, rewrites `a.txt` and deletes `gone.txt`.
const AGENT: &str = r#"#!/bin/sh
echo "agent was here" > RESULT.txt
echo "A by the agent" > a.txt
rm -f gone.txt
echo "done editing"
"#;

/// The MCP client: `CLIENT MCP_BIN PEER TMP CASE [REMOTE]`. Case `none`: `delegate` does not
/// offer git (archive, and storage if the environment names a bucket) and refuses it. Cases `served` (`--serve-archives`) and `remote`
/// (`--git-remote REMOTE`): `delegate` offers git; a foreground `delegate` with
/// `transport: "git"` completes and its result (a new file, a changed one, a deletion) is
/// applied.
const CLIENT: &str = r##"
import asyncio, os, sys
from pathlib import Path
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

mcp_bin, peer, tmp, case = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
remote = sys.argv[5] if len(sys.argv) > 5 else None

def field(o, snake, camel):
    return getattr(o, snake) if hasattr(o, snake) else getattr(o, camel)

def text_of(r):
    return "\n".join(c.text for c in r.content if getattr(c, "type", "") == "text")

def log(m):
    print(f"[mcp-git {case}] {m}", flush=True)

async def main():
    args = ["--peers", peer, "--state-dir", str(tmp / "delegator")]
    if case == "served":
        args += ["--serve-archives", "127.0.0.1:0"]
    if case == "remote":
        args += ["--git-remote", remote]
    params = StdioServerParameters(command=mcp_bin, args=args,
                                   env={**os.environ, "RUST_LOG": "info"})
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            tools = {t.name: t for t in (await s.list_tools()).tools}
            schema = field(tools["delegate"], "input_schema", "inputSchema")
            offered = schema["properties"]["transport"]["enum"]
            log(f"delegate offers transports {offered}")
            ws = tmp / "ws"
            ws.mkdir()
            for name, text in [("a.txt", "A\n"), ("b.txt", "B\n"), ("gone.txt", "G\n")]:
                (ws / name).write_text(text)
            call = {"description": "edit the files", "prompt": "edit", "workspace_dir": str(ws),
                    "peer_url": peer, "transport": "git"}
            if case == "none":
                assert "git" not in offered and "archive" in offered, offered
                r = await s.call_tool("delegate", call)
                assert field(r, "is_error", "isError"), text_of(r)
                assert "not available" in text_of(r), text_of(r)
                assert not (ws / "RESULT.txt").exists()
                log(f"git refused: {text_of(r).strip()}")
                return
            assert "git" in offered and "archive" in offered, offered
            r = await s.call_tool("delegate", call)
            text = text_of(r)
            assert not field(r, "is_error", "isError"), text
            st = field(r, "structured_content", "structuredContent")
            assert st and st["state"] == "completed", (st, text)
            assert "done editing" in text, text
            assert "The result has been applied to the local workspace." in text, text
            assert "/RESULT.txt" in text, text
            assert (ws / "RESULT.txt").read_text() == "agent was here\n"
            assert (ws / "a.txt").read_text() == "A by the agent\n"
            assert (ws / "b.txt").read_text() == "B\n"
            assert not (ws / "gone.txt").exists(), "the deletion was not applied"
            assert not (ws / ".git").exists(), "a repository was made in the workspace"
            log(f"delegate(transport=git) {st['id']}: completed, result applied")

asyncio.run(asyncio.wait_for(main(), timeout=180))
"##;

/// Longest the release may take to show after the client is done.
const DEADLINE: Duration = Duration::from_secs(30);

/// `awcp-mcp` and `awcp-executor`, built once per test process.
fn binaries() -> &'static (PathBuf, PathBuf) {
    static BINS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BINS.get_or_init(|| {
        let [mcp, executor] =
            <[PathBuf; 2]>::try_from(mcp_support::build(&["awcp-mcp", "awcp-executor"]))
                .expect("two binaries");
        (mcp, executor)
    })
}

/// What one run of [`CLIENT`] needs: the venv's python, the binaries, a running executor (its
/// agent [`AGENT`]) and a temporary directory for both.
struct Setup {
    python: PathBuf,
    mcp: PathBuf,
    peer: String,
    tmp: tempfile::TempDir,
    _executor: KillOnDrop,
}

impl Setup {
    /// `None` where the venv cannot be made (after the skip notice).
    fn new() -> Option<Setup> {
        let python = mcp_support::venv_python("mcp_git")?;
        let (mcp, executor) = binaries().clone();
        let tmp = tempfile::Builder::new()
            .prefix("awcp-mcp-git-")
            .tempdir()
            .expect("a temporary directory");
        let dir = tmp.path();
        let agent = dir.join("agent.sh");
        std::fs::write(&agent, AGENT).expect("write the agent");
        let log = std::fs::File::create(dir.join("executor.log")).expect("executor log");
        let mut cmd = Command::new(executor);
        cmd.args(["--listen", "127.0.0.1:0", "--quiet"])
            .arg("--work-root")
            .arg(dir.join("executor-work"))
            .arg("--state-dir")
            .arg(dir.join("executor-state"))
            .arg("--agent-cmd")
            .arg(format!("sh {}", agent.display()))
            .args([
                "--git-name",
                "Test Executor",
                "--git-email",
                "exec@example.org",
            ]);
        let (child, peer) = spawn_announcing_to(&mut cmd, EXECUTOR_ANNOUNCES, log);
        Some(Setup {
            python,
            mcp,
            peer,
            tmp,
            _executor: KillOnDrop(child),
        })
    }

    /// Runs [`CLIENT`] for `case` (with `remote`, the `--git-remote`), without the user's git
    /// configuration; panics with its output unless it succeeds.
    fn client(&self, case: &str, remote: Option<&str>) -> Output {
        let script = self.tmp.path().join("client.py");
        std::fs::write(&script, CLIENT).expect("write the client");
        let mut cmd = Command::new(&self.python);
        cmd.arg(&script)
            .arg(&self.mcp)
            .arg(&self.peer)
            .arg(self.tmp.path())
            .arg(case);
        if let Some(r) = remote {
            cmd.arg(r);
        }
        // A bucket in the environment changes nothing asserted here; these would point the
        // server elsewhere or set what the case sets.
        for k in [
            "AWCP_DAEMON_URL",
            "AWCP_MCP_STATE_DIR",
            "AWCP_MCP_SERVE_ARCHIVES",
            "AWCP_MCP_GIT_REMOTE",
            "AWCP_MCP_TRANSPORT",
        ] {
            cmd.env_remove(k);
        }
        cmd.env("GIT_CONFIG_GLOBAL", "/dev/null");
        let o = cmd.output().expect("run the Python MCP client");
        assert!(
            o.status.success(),
            "the Python MCP client ({case}) failed\n{}\n--- executor log ---\n{}",
            show(&o),
            self.executor_log()
        );
        eprintln!("{}", String::from_utf8_lossy(&o.stdout));
        o
    }

    fn executor_log(&self) -> String {
        std::fs::read_to_string(self.tmp.path().join("executor.log")).unwrap_or_default()
    }

    /// The in-process daemon's journal has one ended delegation, whose INVITE asked for the git
    /// transport; neither side keeps a repository of it (nor a served request's body).
    fn assert_delegated_over_git_and_released(&self) {
        let ended = self.tmp.path().join("delegator/ended");
        let records: Vec<String> = std::fs::read_dir(&ended)
            .unwrap_or_else(|e| panic!("{}: {e}", ended.display()))
            .flatten()
            .map(|e| std::fs::read_to_string(e.path()).expect("read an ended record"))
            .collect();
        assert_eq!(records.len(), 1, "ended delegations: {records:?}");
        assert!(
            records[0].contains(r#""requirements":{"transport":"git"}"#),
            "{}",
            records[0]
        );
        let left = |sub: &str| entries(&self.tmp.path().join(sub));
        let start = Instant::now();
        while !(left("delegator/git").is_empty()
            && left("delegator/git-http").is_empty()
            && left("executor-state/git").is_empty()
            && left("executor-work").is_empty())
        {
            assert!(
                start.elapsed() < DEADLINE,
                "left after release: delegator/git {:?}, delegator/git-http {:?}, \
                 executor-state/git {:?}, executor-work {:?}\n--- executor log ---\n{}",
                left("delegator/git"),
                left("delegator/git-http"),
                left("executor-state/git"),
                left("executor-work"),
                self.executor_log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn delegate_over_git_through_a_served_repository() {
    let Some(setup) = Setup::new() else {
        return;
    };
    let started = Instant::now();
    setup.client("served", None);
    setup.assert_delegated_over_git_and_released();
    eprintln!(
        "(served: {:.1}s after the build)",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn delegate_over_git_through_a_remote_leaves_its_refs_as_they_were() {
    let Some(setup) = Setup::new() else {
        return;
    };
    let started = Instant::now();
    let remotes = tempfile::tempdir().expect("a temporary directory");
    let daemon = GitDaemon::start(remotes.path());
    let url = daemon.repository("team.git");
    let before = daemon.refs("team.git");
    setup.client("remote", Some(&url));
    setup.assert_delegated_over_git_and_released();
    // The branch `awcp/<id>` was pushed, worked on and deleted once the result was applied
    // (at release, which the server finished before it exited).
    assert_eq!(daemon.refs("team.git"), before);
    eprintln!(
        "(remote: {:.1}s after the build)",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn without_served_archives_or_a_remote_git_is_not_offered() {
    let Some(setup) = Setup::new() else {
        return;
    };
    setup.client("none", None);
    assert_eq!(
        entries(&setup.tmp.path().join("delegator/git")),
        Vec::<String>::new()
    );
}
