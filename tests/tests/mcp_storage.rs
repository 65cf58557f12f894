//! `awcp-mcp`'s `delegate` with `transport: "storage"`, driven by the official Python MCP SDK
//! (the virtualenv `<target>/mcp-venv`, `mcp_support::venv_python`) against a real
//! `awcp-executor`: through the local provider (`--serve-archives`: the delegator serves the
//! objects itself) and through a real S3 server (s3s-fs, the bucket named by the environment),
//! whose bucket holds the workspace while the agent runs and is empty afterwards. Without a
//! bucket or `--serve-archives` the in-process daemon does not offer storage at all.
//!
//! Skipped with a notice where the venv cannot be made, unless `AWCP_REQUIRE_MCP_TEST=1`; the
//! S3 case also follows `awcp_tests::s3::require_or_skip` (`AWCP_REQUIRE_S3_TEST`).

mod mcp_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use awcp_tests::bins::{spawn_announcing_to, KillOnDrop, EXECUTOR_ANNOUNCES};
use awcp_tests::s3::{self, S3Server};
use mcp_support::show;

const BUCKET: &str = "awcp-mcp-test";

/// The agent: with the prompt `WAITFILE <path>`, waits (at most 60 s) for that file first; then
/// writes `AGENT_RESULT.txt`.
const AGENT: &str = r#"#!/bin/sh
case "$AWCP_PROMPT" in
  WAITFILE*) set -- $AWCP_PROMPT; n=0
             while [ ! -e "$2" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done ;;
esac
echo "written by the agent" > AGENT_RESULT.txt
echo "wrote AGENT_RESULT.txt"
"#;

/// The MCP client: `CLIENT MCP_BIN PEER TMP CASE [OBJECTS_DIR]`. Case `none`: `delegate`
/// offers archive only and refuses storage. Cases `local` and `s3`: `delegate` offers storage;
/// a foreground `delegate` with `transport: "storage"` whose agent waits until OBJECTS_DIR
/// (given for `s3`: the bucket's directory) holds an object, so the workspace went through the
/// bucket; it completes and its result is applied.
const CLIENT: &str = r##"
import asyncio, os, sys, time
from pathlib import Path
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

mcp_bin, peer, tmp, case = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
objects = Path(sys.argv[5]) if len(sys.argv) > 5 else None

def field(o, snake, camel):
    return getattr(o, snake) if hasattr(o, snake) else getattr(o, camel)

def text_of(r):
    return "\n".join(c.text for c in r.content if getattr(c, "type", "") == "text")

def log(m):
    print(f"[mcp-storage {case}] {m}", flush=True)

async def main():
    args = ["--peers", peer]
    if case != "none":
        args += ["--state-dir", str(tmp / "delegator")]
    if case == "local":
        args += ["--serve-archives", "127.0.0.1:0"]
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
            (ws / "src").mkdir(parents=True)
            (ws / "README.md").write_text("# sample\n")
            (ws / "src" / "main.py").write_text("print('hi')\n")
            call = {"description": "add a file", "workspace_dir": str(ws), "peer_url": peer,
                    "transport": "storage"}
            if case == "none":
                assert offered == ["archive"], offered
                r = await s.call_tool("delegate", {**call, "prompt": "write AGENT_RESULT.txt"})
                assert field(r, "is_error", "isError"), text_of(r)
                assert "not available" in text_of(r), text_of(r)
                assert not (ws / "AGENT_RESULT.txt").exists()
                log(f"storage refused: {text_of(r).strip()}")
                return
            assert "storage" in offered and "archive" in offered, offered
            go = tmp / "go"
            task = asyncio.create_task(s.call_tool(
                "delegate", {**call, "prompt": f"WAITFILE {go}"}))
            if objects is not None:
                deadline = time.monotonic() + 60
                seen = []
                while not seen and not task.done() and time.monotonic() < deadline:
                    seen = [str(p.relative_to(objects)) for p in objects.rglob("*")
                            if p.is_file()]
                    await asyncio.sleep(0.05)
                go.touch()
                assert seen, "no object in the bucket while the agent ran"
                log(f"objects in the bucket while the agent ran: {seen}")
            else:
                go.touch()
            r = await task
            text = text_of(r)
            assert not field(r, "is_error", "isError"), text
            st = field(r, "structured_content", "structuredContent")
            assert st and st["state"] == "completed", (st, text)
            assert "wrote AGENT_RESULT.txt" in text, text
            assert "The result has been applied to the local workspace." in text, text
            assert "/AGENT_RESULT.txt" in text, text
            got = (ws / "AGENT_RESULT.txt").read_text()
            assert got == "written by the agent\n", got
            log(f"delegate(transport=storage) {st['id']}: completed, result applied")

asyncio.run(asyncio.wait_for(main(), timeout=180))
"##;

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
        let python = mcp_support::venv_python("mcp_storage")?;
        let (mcp, executor) = binaries().clone();
        let tmp = tempfile::Builder::new()
            .prefix("awcp-mcp-storage-")
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
            .arg(format!("sh {}", agent.display()));
        let (child, peer) = spawn_announcing_to(&mut cmd, EXECUTOR_ANNOUNCES, log);
        Some(Setup {
            python,
            mcp,
            peer,
            tmp,
            _executor: KillOnDrop(child),
        })
    }

    /// Runs [`CLIENT`] for `case` (with `objects`, the bucket's directory to watch), with the
    /// S3 variables of `server` or none; panics with its output unless it succeeds.
    fn client(&self, case: &str, objects: Option<&Path>, server: Option<&S3Server>) -> Output {
        let script = self.tmp.path().join("client.py");
        std::fs::write(&script, CLIENT).expect("write the client");
        let mut cmd = Command::new(&self.python);
        cmd.arg(&script)
            .arg(&self.mcp)
            .arg(&self.peer)
            .arg(self.tmp.path())
            .arg(case);
        if let Some(dir) = objects {
            cmd.arg(dir);
        }
        for k in [
            "AWCP_S3_BUCKET",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
            "AWS_ENDPOINT_URL",
            "AWS_ENDPOINT_URL_S3",
            "AWS_PROFILE",
            "AWS_SESSION_TOKEN",
            "AWCP_DAEMON_URL",
            "AWCP_MCP_STATE_DIR",
        ] {
            cmd.env_remove(k);
        }
        if let Some(s) = server {
            cmd.env("AWS_ACCESS_KEY_ID", &s.access_key)
                .env("AWS_SECRET_ACCESS_KEY", &s.secret_key)
                .env("AWS_REGION", &s.region)
                .env("AWS_ENDPOINT_URL", &s.endpoint)
                .env("AWCP_S3_BUCKET", BUCKET);
        }
        let o = cmd.output().expect("run the Python MCP client");
        let log = std::fs::read_to_string(self.tmp.path().join("executor.log")).unwrap_or_default();
        assert!(
            o.status.success(),
            "the Python MCP client ({case}) failed\n{}\n--- executor log ---\n{log}",
            show(&o)
        );
        eprintln!("{}", String::from_utf8_lossy(&o.stdout));
        o
    }

    /// The in-process daemon's journal (`--state-dir`) has one ended delegation, whose INVITE
    /// asked for the storage transport (the delegator sends the transport it lends over).
    fn assert_invited_over_storage(&self) {
        let ended = self.tmp.path().join("delegator/ended");
        let records: Vec<String> = std::fs::read_dir(&ended)
            .unwrap_or_else(|e| panic!("{}: {e}", ended.display()))
            .flatten()
            .map(|e| std::fs::read_to_string(e.path()).expect("read an ended record"))
            .collect();
        assert_eq!(records.len(), 1, "ended delegations: {records:?}");
        assert!(
            records[0].contains(r#""requirements":{"transport":"storage"}"#),
            "{}",
            records[0]
        );
    }
}

#[test]
fn delegate_over_storage_through_the_local_provider() {
    let Some(setup) = Setup::new() else {
        return;
    };
    setup.client("local", None, None);
    // The result object PUT to the delegator went with the release.
    let left: Vec<_> = std::fs::read_dir(setup.tmp.path().join("delegator/objects-local"))
        .map(|r| r.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "objects left: {left:?}");
    setup.assert_invited_over_storage();
}

#[test]
fn delegate_over_storage_through_an_s3_bucket() {
    if !s3::require_or_skip("delegate_over_storage_through_an_s3_bucket") {
        return;
    }
    let Some(setup) = Setup::new() else {
        return;
    };
    let server = S3Server::start();
    server.create_bucket(BUCKET);
    let o = setup.client("s3", Some(&server.root.join(BUCKET)), Some(&server));
    assert_eq!(server.object_keys(BUCKET), Vec::<String>::new());
    setup.assert_invited_over_storage();
    for out in [&o.stdout, &o.stderr] {
        let out = String::from_utf8_lossy(out);
        assert!(
            !out.contains(&server.secret_key),
            "the secret key was printed"
        );
    }
}

#[test]
fn without_a_bucket_or_served_archives_storage_is_not_offered() {
    let Some(setup) = Setup::new() else {
        return;
    };
    setup.client("none", None, None);
}
