//! A real process's system calls, read with `strace` (`.ci/run` installs it). After a power
//! loss only what was synced is on disk, so a durability rule is checked on the order in which
//! a real binary syncs and renames its files.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Whether `strace` can run here. Where it cannot, a test reading system calls is skipped with
/// a notice, unless `AWCP_REQUIRE_STRACE_TEST=1` (set by `.ci/run`, which installs it): then
/// this panics.
pub fn available(test: &str) -> bool {
    let ok = Command::new("strace")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("AWCP_REQUIRE_STRACE_TEST").is_none(),
            "{test}: strace is required (AWCP_REQUIRE_STRACE_TEST) but does not run"
        );
        eprintln!("{test}: skipped, strace is not installed (apt-get install strace)");
    }
    ok
}

/// `strace -f -y` of `program`: its syncs and renames (with the paths of the descriptors
/// synced), written to `log`. Add the program's arguments.
pub fn command(program: &Path, log: &Path) -> Command {
    command_tracing(
        program,
        log,
        "fsync,fdatasync,syncfs,rename,renameat,renameat2",
    )
}

/// [`command`] tracing the system calls `calls` (strace's `-e trace=` list) instead.
pub fn command_tracing(program: &Path, log: &Path, calls: &str) -> Command {
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-y", "-qq", "-s", "4096", "-o"])
        .arg(log)
        .arg("-e")
        .arg(format!("trace={calls}"))
        .arg(program);
    cmd
}

/// A spawned [`command`] that, when dropped, kills the process it traces and then waits for
/// `strace` to end (killing `strace` first would leave the traced process running).
pub struct Traced(pub Child);

impl Drop for Traced {
    fn drop(&mut self) {
        let pid = self.0.id();
        if let Ok(kids) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
            for kid in kids.split_whitespace() {
                let _ = Command::new("kill").args(["-KILL", kid]).status();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if !matches!(self.0.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The lines of a trace.
pub fn lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .expect("the trace")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Whether a trace line is a rename.
pub fn is_rename(line: &str) -> bool {
    ["rename(", "renameat(", "renameat2("]
        .iter()
        .any(|c| line.contains(c))
}

/// Whether a trace line syncs a descriptor whose path ends with `suffix`.
pub fn syncs(line: &str, suffix: &str) -> bool {
    (line.contains("fdatasync(") || line.contains("fsync(")) && line.contains(&format!("{suffix}>"))
}

/// The first quoted argument of a trace line (a rename's source).
pub fn first_quoted(line: &str) -> &str {
    let from = line.find('"').expect("a quoted path") + 1;
    let len = line[from..].find('"').expect("a closing quote");
    &line[from..from + len]
}

/// The second quoted argument of a trace line (a rename's target).
pub fn second_quoted(line: &str) -> &str {
    let first = first_quoted(line);
    let rest = &line[line.find(first).expect("the first path") + first.len() + 1..];
    first_quoted(rest)
}
