//! What the CLI tests share: the real binaries as child processes that announce their URL on
//! their first stdout line, and a small workspace.

#![allow(dead_code)] // each test file uses part of it

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Every binary of the package, by name, with its path.
pub const BINS: [(&str, &str); 7] = [
    ("awcp", env!("CARGO_BIN_EXE_awcp")),
    ("awcp-executor", env!("CARGO_BIN_EXE_awcp-executor")),
    ("awcp-relay", env!("CARGO_BIN_EXE_awcp-relay")),
    ("awcp-mcp", env!("CARGO_BIN_EXE_awcp-mcp")),
    ("awcp-quickstart", env!("CARGO_BIN_EXE_awcp-quickstart")),
    ("aip", env!("CARGO_BIN_EXE_aip")),
    ("aip-partner", env!("CARGO_BIN_EXE_aip-partner")),
];

/// A child process, killed and reaped when dropped.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `cmd` (stdout piped, stderr discarded) and returns it with what its first stdout
/// line says after `prefix`.
pub fn spawn_announcing(cmd: &mut Command, prefix: &str) -> (Child, String) {
    let mut child = cmd
        .env_remove("AWCP_DAEMON_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    (child, url)
}

/// `bin args…`, killed when dropped, and the URL it announced after `prefix`.
pub fn announced(bin: &str, args: &[&str], prefix: &str) -> (Kill, String) {
    let (child, url) = spawn_announcing(Command::new(bin).args(args), prefix);
    (Kill(child), url)
}

/// `awcp-executor` (demo runner) on 127.0.0.1 with its work root and state under `dir`, and
/// its AWCP URL.
pub fn start_executor(dir: &Path) -> (Kill, String) {
    let (work, state) = (dir.join("work"), dir.join("exec-state"));
    announced(
        env!("CARGO_BIN_EXE_awcp-executor"),
        &[
            "--listen",
            "127.0.0.1:0",
            "--quiet",
            "--work-root",
            work.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ],
        "awcp-executor listening on ",
    )
}

/// `<dir>/ws` holding one file.
pub fn workspace(dir: &Path) -> PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    ws
}
