//! The workspace's binaries (`awcp`, `awcp-executor`, `awcp-mcp`, …) for tests that run the
//! real programs: built once per test process with the profile of the running test (so `cargo
//! test`'s dependency builds are reused and every test binary agrees on one build).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

/// The binaries [`path`] builds (one `cargo build -p awcp-aip-cli` for all of them).
const BINARIES: [&str; 3] = ["awcp", "awcp-executor", "awcp-relay"];

/// `target/<profile>` of the running test executable (`target/<profile>/deps/<test>`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// The path of binary `name` (one of `awcp`, `awcp-executor`), built on first use. Panics with
/// cargo's output if the build fails. With `AWCP_BIN_DIR` set, the binaries of that directory
/// are used as they are (e.g. an older release's, for a benchmark side by side).
pub fn path(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        if let Some(dir) = std::env::var_os("AWCP_BIN_DIR") {
            return PathBuf::from(dir);
        }
        let bins = profile_dir();
        let target = bins.parent().expect("target dir").to_path_buf();
        let profile = if bins.file_name().is_some_and(|n| n == "release") {
            "release"
        } else {
            "test"
        };
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace root");
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.current_dir(root)
            .args(["build", "-q", "--profile", profile, "-p", "awcp-aip-cli"])
            .env("CARGO_TARGET_DIR", &target);
        for bin in BINARIES {
            cmd.args(["--bin", bin]);
        }
        let o = cmd.output().expect("cargo build runs");
        assert!(
            o.status.success(),
            "building the binaries failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        bins
    });
    let p = dir.join(name);
    assert!(p.exists(), "{} was not built", p.display());
    p
}

/// Spawns `cmd` with stdout piped (stderr discarded) and returns the child with what its first
/// stdout line says after `prefix` — the URL a binary announces it listens on. Panics if the
/// line does not start with `prefix`. To keep stderr, use [`spawn_announcing_to`].
pub fn spawn_announcing(cmd: &mut Command, prefix: &str) -> (Child, String) {
    spawn_announcing_to(cmd, prefix, Stdio::null())
}

/// [`spawn_announcing`] with stderr going to `stderr` (e.g. a log file).
pub fn spawn_announcing_to(
    cmd: &mut Command,
    prefix: &str,
    stderr: impl Into<Stdio>,
) -> (Child, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("the binary starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("the binary prints its first line");
    let rest = line
        .trim()
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    (child, rest)
}

/// `awcp-executor --listen 127.0.0.1:0 --quiet` with its work root and state under `dir`,
/// running `agent_cmd`; spawn it with [`spawn_announcing`] and
/// `"awcp-executor listening on "` to learn its AWCP URL.
pub fn executor_command(dir: &Path, agent_cmd: &str) -> Command {
    let mut cmd = Command::new(path("awcp-executor"));
    cmd.args(["--listen", "127.0.0.1:0", "--quiet"])
        .arg("--work-root")
        .arg(dir.join("work"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--agent-cmd")
        .arg(agent_cmd);
    cmd
}

/// What an executor started by [`executor_command`] prints before its URL.
pub const EXECUTOR_ANNOUNCES: &str = "awcp-executor listening on ";
/// What `awcp daemon` prints before its URL.
pub const DAEMON_ANNOUNCES: &str = "awcp daemon listening on ";

/// `awcp daemon` on 127.0.0.1 port 0 with state directory `state`, and its URL. Its token is
/// the one of `state` ([`daemon_token`]), whatever `AWCP_DAEMON_TOKEN` says.
pub fn spawn_daemon(state: &Path) -> (Child, String) {
    spawn_announcing(
        Command::new(path("awcp"))
            .args([
                "--quiet",
                "daemon",
                "--listen",
                "127.0.0.1:0",
                "--state-dir",
            ])
            .arg(state)
            .env_remove("AWCP_DAEMON_TOKEN"),
        DAEMON_ANNOUNCES,
    )
}

/// The token of the daemon whose state directory is `state` (`<state>/daemon.token`, written
/// at its first start): what a client passes as `--daemon-token` or `Authorization: Bearer`.
pub fn daemon_token(state: &Path) -> String {
    let path = state.join("daemon.token");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_owned()
}

/// Runs `awcp --quiet --daemon-url URL --daemon-token <token of state> ARGS…` to completion:
/// a client command against the daemon started by [`spawn_daemon`] on `state`.
pub fn awcp_on_daemon(url: &str, state: &Path, args: &[&str]) -> Output {
    let token = daemon_token(state);
    let mut all = vec!["--daemon-url", url, "--daemon-token", &token];
    all.extend_from_slice(args);
    awcp(&all)
}

/// A child process, killed (if still running) and reaped when dropped, so a failing test
/// leaves none behind.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `awcp --quiet ARGS…` to completion.
pub fn awcp(args: &[&str]) -> Output {
    Command::new(path("awcp"))
        .arg("--quiet")
        .args(args)
        .output()
        .expect("awcp runs")
}

/// A finished process's exit code and output, for assertion messages.
pub fn show(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
