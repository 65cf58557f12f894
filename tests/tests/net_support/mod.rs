//! Helpers for the network-security tests (TLS, hardening, proxies): real binaries as child
//! processes that print their URL first, and their memory use.

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A child process that printed `<prefix><url>` as its first stdout line; killed when dropped.
pub struct Proc {
    pub child: Child,
    /// What followed the prefix on the first line.
    pub url: String,
}

impl Proc {
    /// Runs `bin args…` (under `ulimit -n nofile` if given) and waits for its first line.
    pub fn spawn(bin: &Path, args: &[String], prefix: &str, nofile: Option<u64>) -> Proc {
        let mut cmd = match nofile {
            Some(n) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let mut child = cmd
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{} starts: {e}", bin.display()));
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("the process prints its URL");
        let url = line
            .trim()
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Proc { child, url }
    }

    /// Resident memory of the process in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("/proc/<pid>/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmRSS")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// This process's soft limit on open files.
pub fn nofile_limit() -> u64 {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        })
        .unwrap_or(1024)
}

/// Strings for a command line.
pub fn args(a: &[&dyn std::fmt::Display]) -> Vec<String> {
    a.iter().map(|x| x.to_string()).collect()
}

/// The `awcp-executor` binary on `runtime` (demo runner, work root and state under `dir`) on a free
/// loopback port, with `extra` flags, under `ulimit -n nofile` if given.
pub fn executor(runtime: &str, dir: &Path, extra: &[String], nofile: Option<u64>) -> Proc {
    let mut a = args(&[
        &"--listen",
        &"127.0.0.1:0",
        &"--quiet",
        &"--runtime",
        &runtime,
        &"--work-root",
        &dir.join("work").display(),
        &"--state-dir",
        &dir.join("state").display(),
    ]);
    a.extend(extra.iter().cloned());
    Proc::spawn(
        &crate::conformance::example_binary("awcp-executor"),
        &a,
        "awcp-executor listening on ",
        nofile,
    )
}
