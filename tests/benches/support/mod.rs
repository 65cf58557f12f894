//! Shared by the benches (`delegations.rs`, `tunnel.rs`): their arguments, figures of wall
//! times, the workspaces they delegate and the `awcp delegate` command. Measuring processes (peak RSS,
//! CPU time) is [`awcp_tests::mem`]'s.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use awcp_tests::bins;
use awcp_tests::rng::Rng;

/// The bench's arguments: whether it runs quick (without `--bench`, as `cargo test --benches`
/// runs it: every row once, small) and its filter (the first argument not starting with `-`).
pub fn args() -> (bool, Option<String>) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = !args.iter().any(|a| a == "--bench");
    let filter = args.iter().find(|a| !a.starts_with('-')).cloned();
    (quick, filter)
}

/// Prints the directory of the binaries under test ([`bins::path`]; built on first use).
pub fn print_binaries() {
    println!(
        "binaries: {}",
        bins::path("awcp")
            .parent()
            .unwrap_or(Path::new(""))
            .display()
    );
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The median of `v` (sorted in place).
pub fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The 95th percentile of `v` (sorted in place).
pub fn p95(v: &mut [Duration]) -> Duration {
    v.sort();
    v[(v.len() * 95 / 100).min(v.len() - 1)]
}

/// `files` files of incompressible data, `bytes` in all, in subdirectories of 100.
pub fn workspace(root: &Path, name: &str, bytes: usize, files: usize) -> PathBuf {
    let ws = root.join(name);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ bytes as u64);
    let each = bytes / files.max(1);
    let mut buf = vec![0u8; each];
    for i in 0..files {
        let dir = ws.join(format!("d{}", i / 100));
        std::fs::create_dir_all(&dir).unwrap();
        rng.fill(&mut buf);
        std::fs::write(dir.join(format!("f{i}.bin")), &buf).unwrap();
    }
    ws
}

/// A workspace of two small files (`README.md`, `main.rs`).
pub fn tiny_workspace(root: &Path, name: &str) -> PathBuf {
    let ws = root.join(name);
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("README.md"), "# tiny\n").unwrap();
    std::fs::write(ws.join("main.rs"), "fn main() {}\n").unwrap();
    ws
}

/// `awcp --quiet delegate WS --peer PEER --prompt "note what you see" --state-dir STATE`; add
/// flags.
pub fn delegate_cmd(state: &Path, ws: &Path, peer: &str) -> Command {
    let mut cmd = Command::new(bins::path("awcp"));
    cmd.args(["--quiet", "delegate"])
        .arg(ws)
        .args([
            "--peer",
            peer,
            "--prompt",
            "note what you see",
            "--state-dir",
        ])
        .arg(state);
    cmd
}
