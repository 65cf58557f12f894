//! Whole delegations through the real release binaries, one row per line of the performance
//! table (`BENCHMARKS.md` at the workspace root): a tiny delegation as one `awcp delegate`
//! process and through one `awcp daemon`, the CPU it costs each side, 1 MB / 10 MB / 51 MB
//! workspaces inline and by URL beside `cp -a` of the same tree, 50 delegations at once, and
//! (given a filter) 200 and 500 MB workspaces, also with the whole workspace coming back
//! inline as the result (`results-inline` rows).
//!
//! ```sh
//! cargo bench -p awcp-tests --bench delegations              # every row
//! cargo bench -p awcp-tests --bench delegations -- tiny      # rows whose name contains "tiny"
//! AWCP_BIN_DIR=/other/target/release cargo bench -p awcp-tests --bench delegations
//! AWCP_BENCH_TINY_N=1500 cargo bench -p awcp-tests --bench delegations -- tiny-daemon  # 1,500, not 50
//! ```
//!
//! Everything runs on 127.0.0.1 (port 0) under one temporary directory; every process the
//! bench starts is killed and reaped when it ends. Each row prints its median, p95 and the peak
//! RSS of each process: `awcp delegate` processes through `wait4`'s `ru_maxrss`, the long-lived
//! executor and daemon through `VmHWM`, reset before each row (`/proc/PID/clear_refs`). CPU per
//! delegation is the `utime + stime` a process gained over the row, divided by its delegations.
//! The executor runs the built-in demo task (it writes `AWCP_NOTES.md`, so every delegation
//! brings a snapshot back and applies it); the file is removed between runs.
//!
//! Without `--bench` (as `cargo test --benches` runs it) every row runs once, tiny, as a smoke
//! test.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use awcp_driver::delegator::daemon::api::DelegateBody;
use awcp_driver::delegator::daemon::DaemonClient;
use awcp_driver::DelegateParams;
use awcp_tests::bins::{self, KillOnDrop};
use awcp_tests::rng::Rng;
use awcp_tokio::TokioRuntime;

/// Runs to completion, measuring wall time and the child's peak RSS.
// The child is reaped by `wait4` (which `Child::wait` cannot do: it has no `rusage`).
#[allow(clippy::zombie_processes)]
fn run_measured(cmd: &mut Command) -> (Duration, u64) {
    let t = Instant::now();
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: `rusage` is plain data that `wait4` fills; `pid` is our child, waited once.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let took = t.elapsed();
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    if !ok {
        let mut err = String::new();
        if let Some(mut e) = child.stderr {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        panic!("{cmd:?} failed ({status}):\n{err}");
    }
    (took, usage.ru_maxrss as u64)
}

/// CPU time `pid` has used (all its threads, those gone too), in nanoseconds: the process's
/// CPU-time clock, read to the nanosecond (`/proc/PID/stat` counts in 10 ms ticks, too coarse
/// for a figure near 1 ms per delegation).
fn cpu_ns(pid: u32) -> u64 {
    let mut clock: libc::clockid_t = 0;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: both out-pointers are valid for writes of their types.
    unsafe {
        assert_eq!(
            libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock),
            0,
            "the CPU clock of {pid}"
        );
        assert_eq!(
            libc::clock_gettime(clock, &mut ts),
            0,
            "reading the CPU clock of {pid}"
        );
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn ns_to_ms(t: u64) -> f64 {
    t as f64 / 1e6
}

/// Peak RSS of `pid` since the last [`reset_peak`], KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn reset_peak(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn p95(v: &mut [Duration]) -> Duration {
    v.sort();
    v[(v.len() * 95 / 100).min(v.len() - 1)]
}

/// `files` files of incompressible data, `bytes` in all, in subdirectories of 100.
fn workspace(root: &Path, name: &str, bytes: usize, files: usize) -> PathBuf {
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

fn tiny_workspace(root: &Path, name: &str) -> PathBuf {
    let ws = root.join(name);
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("README.md"), "# tiny\n").unwrap();
    std::fs::write(ws.join("main.rs"), "fn main() {}\n").unwrap();
    ws
}

fn forget_notes(ws: &Path) {
    let _ = std::fs::remove_file(ws.join("AWCP_NOTES.md"));
}

/// The executor under test: demo task (lists files into AWCP_NOTES.md).
fn start_executor(dir: &Path) -> (KillOnDrop, String) {
    start_executor_running(dir, &["--demo"])
}

/// An executor whose task appends a byte to every file of the work dir (so the whole
/// workspace comes back as the result).
fn start_rewriting_executor(dir: &Path) -> (KillOnDrop, String) {
    std::fs::create_dir_all(dir).unwrap();
    let script = dir.join("touch-all.sh");
    std::fs::write(
        &script,
        "find . -type f -exec sh -c 'for f; do printf x >> \"$f\"; done' _ {} +\necho done\n",
    )
    .unwrap();
    let cmd = format!("sh {}", script.display());
    start_executor_running(dir, &["--agent-cmd", &cmd])
}

/// The executor under test running `task` (its flags), raised concurrency, its own dirs
/// under `dir`.
fn start_executor_running(dir: &Path, task: &[&str]) -> (KillOnDrop, String) {
    let mut cmd = Command::new(bins::path("awcp-executor"));
    cmd.args(["--listen", "127.0.0.1:0", "--quiet"])
        .args(task)
        .args(["--max-concurrent", "128"])
        // Inline bodies of the largest row (500 MiB of archive, as base64).
        .args(["--max-body-bytes", "1000000000"])
        .arg("--work-root")
        .arg(dir.join("work"))
        .arg("--state-dir")
        .arg(dir.join("state"));
    let (child, url) = bins::spawn_announcing(&mut cmd, bins::EXECUTOR_ANNOUNCES);
    (KillOnDrop(child), url)
}

fn delegate_cmd(state: &Path, ws: &Path, peer: &str) -> Command {
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

/// How an e2e row's archives travel.
#[derive(Clone, Copy)]
enum Mode {
    /// The default: both ways inline (the demo task's result is one small file).
    Inline,
    /// The workspace by URL (`--serve-archives`).
    Url,
    /// The task changes every file and the whole result comes back inline in the event
    /// stream (`--inline-results`), as from a reference executor.
    WholeResultInline,
}

impl Mode {
    fn describe(self) -> &'static str {
        match self {
            Mode::Inline => "inline (default)",
            Mode::Url => "URL mode (`--serve-archives`)",
            Mode::WholeResultInline => "whole workspace back inline (`--inline-results`)",
        }
    }
}

struct Bench {
    root: tempfile::TempDir,
    quick: bool,
    filter: Option<String>,
    rows: Vec<String>,
}

impl Bench {
    /// Whether the row (or group of rows) `name` runs: every one without a filter, else those
    /// whose name contains the filter, and the groups they belong to.
    fn wants(&self, name: &str) -> bool {
        self.filter
            .as_deref()
            .is_none_or(|f| name.contains(f) || f.starts_with(name))
    }

    fn row(&mut self, line: String) {
        println!("{line}");
        self.rows.push(line);
    }

    /// A tiny delegation as one whole `awcp delegate` process.
    fn tiny_process(&mut self) {
        let dir = self.root.path().join("tiny-process");
        let (ex, url) = start_executor(&dir);
        let ws = tiny_workspace(&dir, "ws");
        let state = dir.join("delegator");
        let n = if self.quick { 1 } else { 30 };
        for _ in 0..if self.quick { 0 } else { 3 } {
            run_measured(&mut delegate_cmd(&state, &ws, &url));
            forget_notes(&ws);
        }
        reset_peak(ex.0.id());
        let cpu0 = cpu_ns(ex.0.id());
        let mut times = Vec::new();
        let mut rss = 0;
        for _ in 0..n {
            let (t, r) = run_measured(&mut delegate_cmd(&state, &ws, &url));
            times.push(t);
            rss = rss.max(r);
            forget_notes(&ws);
        }
        let ex_cpu = ns_to_ms(cpu_ns(ex.0.id()) - cpu0) / n as f64;
        self.row(format!(
            "| tiny (2 files), whole `awcp delegate` process, n={n} | {:.1} ms | {:.1} ms | {:.1} MiB | {:.1} MiB | executor CPU {ex_cpu:.2} ms/delegation |",
            ms(median(&mut times)),
            ms(p95(&mut times)),
            rss as f64 / 1024.0,
            peak_kib(ex.0.id()) as f64 / 1024.0,
        ));
    }

    /// Tiny delegations through one `awcp daemon`: sequential (latency and CPU per delegation
    /// on each side) and 50 at once.
    fn tiny_daemon(&mut self, rt: &tokio::runtime::Runtime) {
        let dir = self.root.path().join("tiny-daemon");
        let (ex, url) = start_executor(&dir);
        let state = dir.join("daemon");
        let (daemon, durl) = bins::spawn_daemon(&state);
        let daemon = KillOnDrop(daemon);
        let client =
            DaemonClient::new(TokioRuntime, durl).with_token(Some(bins::daemon_token(&state)));
        let once = |ws: PathBuf| {
            let client = client.clone();
            let url = url.clone();
            async move {
                let body = DelegateBody::from_params(&DelegateParams::new(
                    url,
                    ws.clone(),
                    "note what you see",
                ))
                .expect("a valid body");
                let id = client.delegate(&body).await.expect("delegated");
                let rec = client
                    .wait(&id, Duration::from_secs(120))
                    .await
                    .expect("ended");
                assert!(rec.outcome.is_success(), "{rec:?}");
                forget_notes(&ws);
            }
        };
        let ws = tiny_workspace(&dir, "ws");
        let n = if self.quick {
            2
        } else {
            // More delegations per row, e.g. to profile them: AWCP_BENCH_TINY_N=1500.
            std::env::var("AWCP_BENCH_TINY_N")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(50)
        };
        if self.wants("tiny-daemon-sequential") {
            for _ in 0..if self.quick { 0 } else { 5 } {
                rt.block_on(once(ws.clone()));
            }
            reset_peak(ex.0.id());
            reset_peak(daemon.0.id());
            let (d0, e0) = (cpu_ns(daemon.0.id()), cpu_ns(ex.0.id()));
            let mut times = Vec::new();
            for _ in 0..n {
                let t = Instant::now();
                rt.block_on(once(ws.clone()));
                times.push(t.elapsed());
            }
            let d_cpu = ns_to_ms(cpu_ns(daemon.0.id()) - d0) / n as f64;
            let e_cpu = ns_to_ms(cpu_ns(ex.0.id()) - e0) / n as f64;
            self.row(format!(
                "| tiny-daemon-sequential: tiny, {n} sequential through one daemon | {:.1} ms | {:.1} ms | daemon {:.1} MiB | {:.1} MiB | CPU per delegation: daemon {d_cpu:.2} ms, executor {e_cpu:.2} ms |",
                ms(median(&mut times)),
                ms(p95(&mut times)),
                peak_kib(daemon.0.id()) as f64 / 1024.0,
                peak_kib(ex.0.id()) as f64 / 1024.0,
            ));
        }
        if self.wants("tiny-daemon-concurrent") {
            let wss: Vec<PathBuf> = (0..n)
                .map(|i| tiny_workspace(&dir, &format!("ws{i}")))
                .collect();
            reset_peak(ex.0.id());
            reset_peak(daemon.0.id());
            let mut times = Vec::new();
            for _ in 0..if self.quick { 1 } else { 3 } {
                let t = Instant::now();
                rt.block_on(futures::future::join_all(wss.iter().cloned().map(&once)));
                times.push(t.elapsed());
            }
            self.row(format!(
                "| tiny-daemon-concurrent: {n} tiny at once through one daemon, 3 rounds | {:.0} ms | {:.0} ms | daemon {:.1} MiB | {:.1} MiB | |",
                ms(median(&mut times)),
                ms(p95(&mut times)),
                peak_kib(daemon.0.id()) as f64 / 1024.0,
                peak_kib(ex.0.id()) as f64 / 1024.0,
            ));
        }
    }

    /// A workspace of `mib` MiB in `files` files, as one `awcp delegate` process, sent as
    /// `mode` says; beside `cp -a` of the same tree twice (`cp_twice`).
    fn e2e(&mut self, name: &str, mib: usize, files: usize, mode: Mode, cp_twice: bool) {
        let dir = self.root.path().join(name);
        let (ex, url) = match mode {
            Mode::Inline | Mode::Url => start_executor(&dir),
            Mode::WholeResultInline => start_rewriting_executor(&dir),
        };
        let (mib, files) = if self.quick { (1, 10) } else { (mib, files) };
        let ws = workspace(&dir, "ws", mib << 20, files);
        let state = dir.join("delegator");
        let runs = if self.quick { 1 } else { 5 };
        let cmd = |ws: &Path| {
            let mut c = delegate_cmd(&state, ws, &url);
            match mode {
                Mode::Inline => {}
                Mode::Url => {
                    c.args(["--serve-archives", "127.0.0.1:0"]);
                }
                Mode::WholeResultInline => {
                    c.arg("--inline-results");
                }
            }
            c.args(["--max-total-bytes", "1000000000"]);
            c
        };
        if !self.quick {
            run_measured(&mut cmd(&ws)); // warm the page cache
            forget_notes(&ws);
        }
        reset_peak(ex.0.id());
        let mut times = Vec::new();
        let mut rss = 0;
        for _ in 0..runs {
            let (t, r) = run_measured(&mut cmd(&ws));
            times.push(t);
            rss = rss.max(r);
            forget_notes(&ws);
        }
        let mut cp = String::new();
        if cp_twice {
            let mut cps = Vec::new();
            for i in 0..runs {
                let t = Instant::now();
                for k in 0..2 {
                    let to = dir.join(format!("cp-{i}-{k}"));
                    let ok = Command::new("cp")
                        .arg("-a")
                        .arg(&ws)
                        .arg(&to)
                        .status()
                        .expect("cp runs")
                        .success();
                    assert!(ok, "cp -a");
                }
                cps.push(t.elapsed());
                for k in 0..2 {
                    let _ = std::fs::remove_dir_all(dir.join(format!("cp-{i}-{k}")));
                }
            }
            let c = median(&mut cps);
            cp = format!(
                "`cp -a` twice {:.0} ms (ratio {:.2})",
                ms(c),
                ms(median(&mut times)) / ms(c)
            );
        }
        self.row(format!(
            "| {name}: {mib} MiB, {files} files, {} | {:.0} ms | {:.0} ms | {:.1} MiB | {:.1} MiB | {cp} |",
            mode.describe(),
            ms(median(&mut times)),
            ms(p95(&mut times)),
            rss as f64 / 1024.0,
            peak_kib(ex.0.id()) as f64 / 1024.0,
        ));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = !args.iter().any(|a| a == "--bench");
    let filter = args.iter().find(|a| !a.starts_with('-')).cloned();
    let mut b = Bench {
        root: tempfile::tempdir().expect("a temporary directory"),
        quick,
        filter,
        rows: Vec::new(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    println!(
        "binaries: {}",
        bins::path("awcp")
            .parent()
            .unwrap_or(Path::new(""))
            .display()
    );
    println!("| row | median | p95 | delegator peak RSS | executor peak RSS | notes |");
    println!("|---|---:|---:|---:|---:|---|");
    if b.wants("tiny-process") {
        b.tiny_process();
    }
    if b.wants("tiny-daemon") {
        b.tiny_daemon(&rt);
    }
    let e2e: [(&str, usize, usize, Mode, bool); 9] = [
        ("e2e-1mb", 1, 100, Mode::Inline, false),
        ("e2e-10mb", 10, 1000, Mode::Inline, true),
        ("e2e-51mb-inline", 51, 550, Mode::Inline, false),
        ("e2e-51mb-url", 51, 550, Mode::Url, false),
        (
            "e2e-51mb-results-inline",
            51,
            550,
            Mode::WholeResultInline,
            false,
        ),
        ("e2e-200mb-inline", 200, 550, Mode::Inline, false),
        ("e2e-500mb-inline", 500, 1100, Mode::Inline, false),
        (
            "e2e-200mb-results-inline",
            200,
            550,
            Mode::WholeResultInline,
            false,
        ),
        (
            "e2e-500mb-results-inline",
            500,
            1100,
            Mode::WholeResultInline,
            false,
        ),
    ];
    for (name, mib, files, url, cp) in e2e {
        if b.wants(name) && (b.filter.is_some() || mib <= 51) {
            b.e2e(name, mib, files, url, cp);
        }
    }
    let _ = b.rows.len();
}
