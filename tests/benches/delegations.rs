//! Whole delegations through the real release binaries, one row per line of the performance
//! table (`BENCHMARKS.md` at the workspace root): a tiny delegation as one `awcp delegate`
//! process and through one `awcp daemon`, the CPU it costs each side, 1 MB / 10 MB / 51 MB
//! workspaces inline and by URL beside `cp -a` of the same tree, 50 delegations at once, and
//! (given a filter) 200 and 500 MB workspaces, also with the whole workspace coming back
//! inline as the result (`results-inline` rows); and the `storage` transport through a real
//! S3-compatible server (s3s-fs) for 1 MiB and 51 MiB workspaces (1 GiB given a filter), each
//! beside `curl` PUT + GET of as many bytes to the same server in the same run; and the `git`
//! transport on a 10,000-file repository with a one-file change, through a `git daemon`
//! remote and through the repository the delegator serves, beside `git push` + `git fetch` of
//! the same change in the same run.
//!
//! ```sh
//! cargo bench -p awcp-tests --bench delegations              # every row
//! cargo bench -p awcp-tests --bench delegations -- tiny      # rows whose name contains "tiny"
//! AWCP_BIN_DIR=/other/target/release cargo bench -p awcp-tests --bench delegations
//! AWCP_BENCH_TINY_N=1500 cargo bench -p awcp-tests --bench delegations -- tiny-daemon  # 1,500, not 50
//! cargo bench -p awcp-tests --bench delegations -- user    # the user's path (issue 54)
//! cargo bench -p awcp-tests --bench delegations -- storage # storage rows, 1 GiB included
//! cargo bench -p awcp-tests --bench delegations -- git     # git rows and git push + fetch
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
//! The `user-…` rows take the path users take instead: a shell agent through `--agent-cmd`,
//! a state directory that already holds 1,000 ended delegations, the CLI through a daemon;
//! they add the spread of wall times, CPU per process and syncs per delegation (counted by
//! `strace -c` over three further delegations, when `strace` is installed).
//!
//! Without `--bench` (as `cargo test --benches` runs it) every row runs once, tiny, as a smoke
//! test. The storage rows need s3s-fs (`awcp_tests::s3`) and `curl`: without s3s-fs they are
//! skipped, unless `AWCP_REQUIRE_S3_TEST=1`. The git rows run on 100 files then, and are
//! skipped when `git` does not run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use awcp_driver::delegator::daemon::api::DelegateBody;
use awcp_driver::delegator::daemon::DaemonClient;
use awcp_driver::DelegateParams;
use awcp_tests::bins::{self, KillOnDrop};
use awcp_tests::git::{git, GitDaemon};
use awcp_tests::mem::{children_cpu, cpu_ns, reset_peak, run_with_usage, vm_hwm_kib};
use awcp_tests::rng::Rng;
use awcp_tests::s3::{self, S3Server};
use awcp_tokio::TokioRuntime;
use support::{delegate_cmd, median, ms, p95, tiny_workspace, workspace};

mod support;

/// Runs to completion, measuring wall time and the child's peak RSS.
fn run_measured(cmd: &mut Command) -> (Duration, u64) {
    let u = run_with_usage(cmd);
    (u.took, u.rss_kib)
}

/// Wall times as `min / p10 / p50 / p90 / max` ms: a row with two modes shows as a jump.
fn spread(v: &mut [Duration]) -> String {
    v.sort();
    let at = |q: usize| ms(v[(v.len() * q / 100).min(v.len() - 1)]);
    format!(
        "{:.1} / {:.1} / {:.1} / {:.1} / {:.1}",
        ms(v[0]),
        at(10),
        at(50),
        at(90),
        ms(v[v.len() - 1])
    )
}

/// Counts the `fsync`, `fdatasync` and `syncfs` calls of running processes (`strace -c`
/// attached to each of `pids`) while `during` runs; `None` without `strace`.
fn syncs_during(pids: &[u32], during: impl FnOnce()) -> Option<Vec<u64>> {
    use std::io::BufRead;
    let dir = tempfile::tempdir().ok()?;
    let mut tracers = Vec::new();
    for pid in pids {
        let out = dir.path().join(format!("{pid}.strace"));
        let mut child = Command::new("strace")
            .args(["-f", "-c", "-e", "trace=fsync,fdatasync,syncfs", "-o"])
            .arg(&out)
            .args(["-p", &pid.to_string()])
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        // Attached once it says so (its first line, one per thread).
        let mut line = String::new();
        let mut err = std::io::BufReader::new(child.stderr.take()?);
        err.read_line(&mut line).ok()?;
        if !line.contains("attached") {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::spawn(move || for _ in err.lines() {});
        tracers.push((child, out));
    }
    during();
    let mut counts = Vec::new();
    for (child, out) in tracers {
        // SAFETY: signalling our own child, not yet reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        let mut child = child;
        let _ = child.wait();
        counts.push(strace_total_calls(&std::fs::read_to_string(out).ok()?));
    }
    Some(counts)
}

/// The calls `strace -c` counted in all (its `total` line).
fn strace_total_calls(summary: &str) -> u64 {
    summary
        .lines()
        .find(|l| l.trim_end().ends_with("total"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Counts the sync calls of one run of `cmd` (`strace -f -c`); `None` without `strace`.
fn syncs_of(cmd: &Command) -> Option<u64> {
    let dir = tempfile::tempdir().ok()?;
    let out = dir.path().join("run.strace");
    let ok = Command::new("strace")
        .args(["-f", "-c", "-e", "trace=fsync,fdatasync,syncfs", "-o"])
        .arg(&out)
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()?
        .success();
    ok.then(|| strace_total_calls(&std::fs::read_to_string(out).unwrap_or_default()))
}

fn per(n: Option<u64>, k: usize) -> String {
    n.map_or("n/a (no strace)".into(), |n| {
        format!("{:.1}", n as f64 / k as f64)
    })
}

fn ns_to_ms(t: u64) -> f64 {
    t as f64 / 1e6
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

/// The agent of the user's-path rows: a shell script, as `--agent-cmd` runs real agents (it
/// prints two lines and writes one file, so a snapshot comes back and is applied).
const SHELL_AGENT: &str = "echo working\necho 'written by the agent' > AGENT_NOTE.md\necho done\n";

/// An executor running [`SHELL_AGENT`] through `--agent-cmd`.
fn start_shell_executor(dir: &Path) -> (KillOnDrop, String) {
    std::fs::create_dir_all(dir).unwrap();
    let script = dir.join("agent.sh");
    std::fs::write(&script, SHELL_AGENT).unwrap();
    let cmd = format!("sh {}", script.display());
    start_executor_running(dir, &["--agent-cmd", &cmd])
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
            vm_hwm_kib(ex.0.id()) as f64 / 1024.0,
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
                vm_hwm_kib(daemon.0.id()) as f64 / 1024.0,
                vm_hwm_kib(ex.0.id()) as f64 / 1024.0,
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
                vm_hwm_kib(daemon.0.id()) as f64 / 1024.0,
                vm_hwm_kib(ex.0.id()) as f64 / 1024.0,
            ));
        }
    }

    /// The path users take (issue 54): a shell agent through `--agent-cmd`, the persistent
    /// state directory (`~/.awcp/delegator` by default) already holding 1,000 ended
    /// delegations beside a fresh one, and `awcp delegate --daemon` (the CLI through a
    /// daemon). Each row: wall time with its spread, CPU per delegation of each process,
    /// and the syncs (`fsync`, `fdatasync`) each side makes per delegation.
    fn user_path(&mut self) {
        let dir = self.root.path().join("user-path");
        let (ex, url) = start_shell_executor(&dir.join("executor"));
        let ws = tiny_workspace(&dir, "ws");
        let forget = |ws: &Path| {
            let _ = std::fs::remove_file(ws.join("AGENT_NOTE.md"));
        };
        let n = if self.quick { 2 } else { 60 };
        let history_n = if self.quick { 3 } else { 1000 };
        let history = dir.join("history");
        if self.wants("user-history") {
            // A state directory with history, made the way users make it.
            for _ in 0..history_n {
                run_measured(&mut delegate_cmd(&history, &ws, &url));
                forget(&ws);
            }
        }
        let fresh_state = dir.join("fresh");
        let mut rows: Vec<(&str, String, Option<&Path>)> = Vec::new();
        if self.wants("user-fresh") {
            rows.push(("user-fresh", "fresh state directory".into(), None));
        }
        if self.wants("user-history") {
            rows.push((
                "user-history",
                format!("state directory holding {history_n} ended delegations"),
                Some(history.as_path()),
            ));
        }
        for (name, what, state) in rows {
            let state_of = || state.map_or(fresh_state.clone(), Path::to_path_buf);
            let fresh = state.is_none();
            // After each run: the agent's file goes, and a fresh state directory with it.
            let tidy = || {
                forget(&ws);
                if fresh {
                    let _ = std::fs::remove_dir_all(&fresh_state);
                }
            };
            for _ in 0..if self.quick { 0 } else { 5 } {
                run_measured(&mut delegate_cmd(&state_of(), &ws, &url));
                tidy();
            }
            reset_peak(ex.0.id());
            let e0 = cpu_ns(ex.0.id());
            let (mut times, mut cpu, mut rss) = (Vec::new(), Duration::ZERO, 0);
            for _ in 0..n {
                let u = run_with_usage(&mut delegate_cmd(&state_of(), &ws, &url));
                times.push(u.took);
                cpu += u.cpu;
                rss = rss.max(u.rss_kib);
                tidy();
            }
            let e_cpu = ns_to_ms(cpu_ns(ex.0.id()) - e0) / n as f64;
            let k = 3;
            let mut d_syncs = Some(0);
            let ex_syncs = syncs_during(&[ex.0.id()], || {
                for _ in 0..k {
                    let s = syncs_of(&delegate_cmd(&state_of(), &ws, &url));
                    d_syncs = d_syncs.zip(s).map(|(a, b)| a + b);
                    tidy();
                }
            });
            self.row(format!(
                "| {name}: tiny, `--agent-cmd` shell agent, whole `awcp delegate` process, {what}, n={n} | {:.1} ms | {:.1} ms | {:.1} MiB | {:.1} MiB | spread {} ms; CPU per delegation: `awcp` {:.2} ms, executor {e_cpu:.2} ms; syncs per delegation: `awcp` {}, executor {} |",
                ms(median(&mut times)),
                ms(p95(&mut times)),
                rss as f64 / 1024.0,
                vm_hwm_kib(ex.0.id()) as f64 / 1024.0,
                spread(&mut times),
                ms(cpu) / n as f64,
                per(d_syncs, k),
                per(ex_syncs.map(|v| v[0]), k),
            ));
        }
        if self.wants("user-cli-daemon") {
            let state = dir.join("daemon");
            let (daemon, durl) = bins::spawn_daemon(&state);
            let daemon = KillOnDrop(daemon);
            let cmd = || {
                let mut c = Command::new(bins::path("awcp"));
                c.args(["--quiet", "--daemon-url", &durl, "--state-dir"])
                    .arg(&state)
                    .arg("delegate")
                    .arg(&ws)
                    .args(["--peer", &url, "--prompt", "note what you see", "--daemon"]);
                c
            };
            for _ in 0..if self.quick { 0 } else { 5 } {
                run_measured(&mut cmd());
                forget(&ws);
            }
            reset_peak(ex.0.id());
            reset_peak(daemon.0.id());
            let (d0, e0) = (cpu_ns(daemon.0.id()), cpu_ns(ex.0.id()));
            let (mut times, mut cpu, mut rss) = (Vec::new(), Duration::ZERO, 0);
            for _ in 0..n {
                let u = run_with_usage(&mut cmd());
                times.push(u.took);
                cpu += u.cpu;
                rss = rss.max(u.rss_kib);
                forget(&ws);
            }
            let d_cpu = ns_to_ms(cpu_ns(daemon.0.id()) - d0) / n as f64;
            let e_cpu = ns_to_ms(cpu_ns(ex.0.id()) - e0) / n as f64;
            let k = 3;
            let syncs = syncs_during(&[daemon.0.id(), ex.0.id()], || {
                for _ in 0..k {
                    run_measured(&mut cmd());
                    forget(&ws);
                }
            });
            self.row(format!(
                "| user-cli-daemon: tiny, `--agent-cmd` shell agent, `awcp delegate --daemon` processes, {n} sequential | {:.1} ms | {:.1} ms | `awcp` {:.1} MiB, daemon {:.1} MiB | {:.1} MiB | spread {} ms; CPU per delegation: `awcp` {:.2} ms, daemon {d_cpu:.2} ms, executor {e_cpu:.2} ms; syncs per delegation: daemon {}, executor {} |",
                ms(median(&mut times)),
                ms(p95(&mut times)),
                rss as f64 / 1024.0,
                vm_hwm_kib(daemon.0.id()) as f64 / 1024.0,
                vm_hwm_kib(ex.0.id()) as f64 / 1024.0,
                spread(&mut times),
                ms(cpu) / n as f64,
                per(syncs.as_ref().map(|v| v[0]), k),
                per(syncs.as_ref().map(|v| v[1]), k),
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
            vm_hwm_kib(ex.0.id()) as f64 / 1024.0,
        ));
    }

    /// `--transport storage` through a real S3-compatible server (s3s-fs, [`S3Server`]): whole
    /// `awcp delegate` processes lending a workspace of `mib` MiB in `files` files of random
    /// bytes, alternating, run by run, with the yardstick of the issue: `curl` PUT then GET
    /// (presigned URLs, the GET written to a file) of a file as large as the workspace's ZIP
    /// to the same server (`curl_name`'s row). Prints both rows and the ratio (curl wall /
    /// delegation wall: the delegation's throughput as a share of curl's).
    fn storage(&mut self, name: &str, curl_name: &str, mib: usize, files: usize) {
        const BUCKET: &str = "awcp-bench";
        let dir = self.root.path().join(name);
        let (mib, files) = if self.quick { (1, 10) } else { (mib, files) };
        let runs = match (self.quick, mib) {
            (true, _) => 1,
            (false, 0..=1) => 20,
            (false, 2..=64) => 7,
            _ => 5,
        };
        let server = S3Server::start();
        server.create_bucket(BUCKET);
        let (ex, url) = start_executor(&dir);
        let ws = workspace(&dir, "ws", mib << 20, files);
        let state = dir.join("delegator");
        let cmd = || {
            let mut c = delegate_cmd(&state, &ws, &url);
            c.args(["--transport", "storage"])
                .args(["--max-total-bytes", &(4u64 << 30).to_string()])
                .env("AWS_ACCESS_KEY_ID", &server.access_key)
                .env("AWS_SECRET_ACCESS_KEY", &server.secret_key)
                .env("AWS_REGION", &server.region)
                .env("AWS_ENDPOINT_URL", &server.endpoint)
                .env("AWCP_S3_BUCKET", BUCKET)
                .env_remove("AWS_SESSION_TOKEN")
                .env_remove("AWS_PROFILE")
                .env_remove("AWCP_S3_PREFIX");
            c
        };
        // The first delegation (the warm-up, or the only one when quick) learns the ZIP's
        // size: the object appears whole in the bucket's directory and stays until the end.
        let objects = server.root.join(BUCKET).join("workspaces");
        let (first, zip_bytes) = {
            let seen = std::sync::atomic::AtomicU64::new(0);
            let done = std::sync::atomic::AtomicBool::new(false);
            let first = std::thread::scope(|s| {
                s.spawn(|| {
                    use std::sync::atomic::Ordering::Relaxed;
                    while !done.load(Relaxed) {
                        for e in std::fs::read_dir(&objects).into_iter().flatten().flatten() {
                            let n = e.file_name().to_string_lossy().into_owned();
                            if n.ends_with(".zip") && !n.ends_with("-result.zip") {
                                let len = e.metadata().map_or(0, |m| m.len());
                                seen.fetch_max(len, Relaxed);
                            }
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                });
                let (e0, s0) = (cpu_ns(ex.0.id()), cpu_ns(server.pid()));
                let u = run_with_usage(&mut cmd());
                let (e, s) = (cpu_ns(ex.0.id()) - e0, cpu_ns(server.pid()) - s0);
                done.store(true, std::sync::atomic::Ordering::Relaxed);
                (u, e, s)
            });
            forget_notes(&ws);
            assert!(
                server.object_keys(BUCKET).is_empty(),
                "the delegation left objects behind: {:?}",
                server.object_keys(BUCKET)
            );
            let n = seen.into_inner();
            assert!(
                n >= (mib << 20) as u64,
                "the workspace's ZIP was not seen ({n} bytes)"
            );
            (first, n)
        };
        // Quick: that first delegation is the row's only run; else it warmed the caches.
        let mut first = self.quick.then_some(first);
        let blob = dir.join("curl-put.bin");
        {
            let mut rng = Rng(0x2545_F491_4F6C_DD1D ^ zip_bytes);
            let mut f = std::io::BufWriter::new(std::fs::File::create(&blob).unwrap());
            let mut buf = vec![0u8; 1 << 20];
            let mut left = zip_bytes as usize;
            while left > 0 {
                let k = left.min(buf.len());
                rng.fill(&mut buf[..k]);
                std::io::Write::write_all(&mut f, &buf[..k]).unwrap();
                left -= k;
            }
            std::io::Write::flush(&mut f).unwrap();
        }
        let got = dir.join("curl-get.bin");
        let curl = |method: &str| {
            let url = server.presign(method, BUCKET, "curl/blob.bin", SystemTime::now(), 3600);
            let mut c = Command::new("curl");
            c.args(["-sS", "--fail", "--max-time", "3600"]);
            if method == "PUT" {
                // No `Expect: 100-continue` round trip (the delegator sends none either).
                c.args(["-H", "Expect:", "-T"]).arg(&blob);
            } else {
                c.arg("-o").arg(&got);
            }
            c.arg(url);
            c
        };
        // One PUT + GET pair: (wall of both, PUT wall, GET wall, curl peak RSS, curl CPU).
        let curl_pair = || {
            let put = run_with_usage(&mut curl("PUT"));
            let get = run_with_usage(&mut curl("GET"));
            assert_eq!(
                std::fs::metadata(&got).map(|m| m.len()).unwrap_or(0),
                zip_bytes,
                "curl GET brought the object back whole"
            );
            let _ = std::fs::remove_file(&got);
            (
                put.took + get.took,
                put.took,
                get.took,
                put.rss_kib.max(get.rss_kib),
                put.cpu + get.cpu,
            )
        };
        if !self.quick {
            curl_pair(); // warm the server and the page cache for curl too
        }
        reset_peak(ex.0.id());
        let (mut times, mut d_cpu, mut rss) = (Vec::new(), Duration::ZERO, 0);
        let (mut ex_ns, mut s3_ns) = (0, 0);
        let (mut c_times, mut puts, mut gets) = (Vec::new(), Vec::new(), Vec::new());
        let (mut c_cpu, mut c_rss, mut c_s3_ns) = (Duration::ZERO, 0, 0);
        for _ in 0..runs {
            let (u, e, s) = first.take().unwrap_or_else(|| {
                let (e0, s0) = (cpu_ns(ex.0.id()), cpu_ns(server.pid()));
                let u = run_with_usage(&mut cmd());
                let (e, s) = (cpu_ns(ex.0.id()) - e0, cpu_ns(server.pid()) - s0);
                forget_notes(&ws);
                (u, e, s)
            });
            ex_ns += e;
            s3_ns += s;
            times.push(u.took);
            d_cpu += u.cpu;
            rss = rss.max(u.rss_kib);

            let s0 = cpu_ns(server.pid());
            let (t, put, get, r, cpu) = curl_pair();
            c_s3_ns += cpu_ns(server.pid()) - s0;
            c_times.push(t);
            puts.push(put);
            gets.push(get);
            c_cpu += cpu;
            c_rss = c_rss.max(r);
        }
        assert!(server
            .object_keys(BUCKET)
            .iter()
            .all(|k| k.starts_with("curl/")));
        let n = runs as f64;
        let d = median(&mut times);
        let c = median(&mut c_times);
        let mb_s = |t: Duration| zip_bytes as f64 / 1e6 / t.as_secs_f64();
        let share = ms(c) / ms(d) * 100.0;
        self.row(format!(
            "| {name}: {mib} MiB, {files} files, `--transport storage` (s3s-fs), ZIP {zip_bytes} B, n={runs} | {:.0} ms | {:.0} ms | {:.1} MiB | {:.1} MiB | {:.0} MB/s; CPU per delegation: `awcp` {:.1} ms, executor {:.1} ms, s3s-fs {:.1} ms; **{share:.0} % of curl's throughput** (goal ≥ 70 %: {}) |",
            ms(d),
            ms(p95(&mut times)),
            rss as f64 / 1024.0,
            vm_hwm_kib(ex.0.id()) as f64 / 1024.0,
            mb_s(d),
            ms(d_cpu) / n,
            ns_to_ms(ex_ns) / n,
            ns_to_ms(s3_ns) / n,
            if share >= 70.0 { "met" } else { "not met" },
        ));
        self.row(format!(
            "| {curl_name}: `curl` PUT then GET of {zip_bytes} B (presigned, GET to a file), same server, n={runs} | {:.0} ms | {:.0} ms | curl {:.1} MiB | – | {:.0} MB/s; PUT {:.0} ms, GET {:.0} ms; CPU per pair: curl {:.1} ms, s3s-fs {:.1} ms |",
            ms(c),
            ms(p95(&mut c_times)),
            c_rss as f64 / 1024.0,
            mb_s(c),
            ms(median(&mut puts)),
            ms(median(&mut gets)),
            ms(c_cpu) / n,
            ns_to_ms(c_s3_ns) / n,
        ));
    }

    /// Whether the row `name` itself runs: every row without a filter, else those whose name
    /// contains the filter (a group's rows, unlike [`Bench::wants`], are not all taken in).
    fn wants_row(&self, name: &str) -> bool {
        self.filter.as_deref().is_none_or(|f| name.contains(f))
    }

    /// `--transport git` on a repository of `files` small text files ([`text_workspace`]: a git
    /// repository whose one commit is packed, so the base commit has its `HEAD` as parent), the
    /// executor's agent appending one line to one file ([`start_one_line_executor`]): whole `awcp
    /// delegate` processes through a remote (`git-10k`: `--git-remote`, a [`GitDaemon`] repository
    /// already holding that `HEAD` as `main`, as a team's remote would) and through the repository
    /// the delegator serves itself (`git-10k-served`: `--serve-archives`), one executor each;
    /// alternating with them, run by run, the yardstick of the issue (`git-10k-push-fetch`): in a
    /// clone of another repository of the same daemon holding the same `HEAD`, the same line
    /// appended to the same file and committed (`git commit -a`, not counted), `git push` of that
    /// commit, then `git fetch` of it into a second clone (its `git merge --ff-only` not counted
    /// either). The ratio is the delegation's median over push + fetch's.
    fn git_10k(&mut self, files: usize) {
        const CHANGED: &str = "d0/f0.txt";
        let dir = self.root.path().join("git-10k");
        let files = if self.quick { 100 } else { files };
        let runs = if self.quick { 1 } else { 5 };
        let rows = [
            self.wants_row("git-10k"),
            self.wants_row("git-10k-served"),
            self.wants_row("git-10k-push-fetch"),
        ];
        let ws = text_workspace(&dir, "ws", files);
        git(&ws, &["init", "-q", "-b", "main"]);
        git(&ws, &["add", "-A"]);
        git(&ws, &["commit", "-q", "-m", "the project"]);
        // As a repository of this size is (`gc --auto` packs beyond 6,700 loose objects).
        git(&ws, &["repack", "-adq"]);
        let original = std::fs::read(ws.join(CHANGED)).unwrap();
        let mut changed = original.clone();
        changed.extend_from_slice(ONE_LINE.as_bytes());
        let ws_bytes: u64 = (0..files)
            .map(|i| std::fs::metadata(ws.join(text_file(i))).unwrap().len())
            .sum();

        // The remotes: `team.git` for the delegations, `yard.git` for push + fetch, both
        // holding the workspace's HEAD as `main`.
        let remotes = dir.join("remotes");
        std::fs::create_dir_all(&remotes).unwrap();
        let daemon = GitDaemon::start(&remotes);
        for name in ["team.git", "yard.git"] {
            git(&remotes, &["init", "-q", "--bare", "-b", "main", name]);
            let to = remotes.join(name);
            git(
                &ws,
                &["push", "-q", to.to_str().unwrap(), "HEAD:refs/heads/main"],
            );
        }
        let team = format!("{}team.git", daemon.url);
        let before = daemon.refs("team.git");

        // The delegations: one executor per row, each row's command.
        let ex_remote = rows[0].then(|| start_one_line_executor(&dir.join("ex-remote")));
        let ex_served = rows[1].then(|| start_one_line_executor(&dir.join("ex-served")));
        let state = dir.join("delegator");
        let cmd = |peer: &str, remote: bool| {
            let mut c = Command::new(bins::path("awcp"));
            c.args(["--quiet", "delegate"])
                .arg(&ws)
                .args(["--peer", peer, "--prompt", "append a line", "--state-dir"])
                .arg(&state)
                .args(["--transport", "git", "--max-file-count", "1000000"])
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1");
            if remote {
                c.args(["--git-remote", &team]);
            } else {
                c.args(["--serve-archives", "127.0.0.1:0"]);
            }
            c
        };
        // One delegation: its usage, and the executor's CPU and its children's (git, the agent).
        let delegate = |ex: &(KillOnDrop, String), remote: bool| {
            let pid = ex.0 .0.id();
            let (c0, k0) = (cpu_ns(pid), children_cpu(pid));
            let u = run_with_usage(&mut cmd(&ex.1, remote));
            let (c, k) = (cpu_ns(pid) - c0, children_cpu(pid) - k0);
            assert_eq!(
                std::fs::read(ws.join(CHANGED)).unwrap(),
                changed,
                "the executor's line was applied"
            );
            std::fs::write(ws.join(CHANGED), &original).unwrap();
            (u, c, k)
        };

        // The yardstick: `a` commits and pushes, `b` fetches and merges.
        let yard = format!("{}yard.git", daemon.url);
        let (a, b) = (dir.join("clone-a"), dir.join("clone-b"));
        for c in [&a, &b].into_iter().filter(|_| rows[2]) {
            git(&dir, &["clone", "-q", &yard, c.to_str().unwrap()]);
        }
        let git_cmd = |at: &Path, args: &[&str]| {
            let mut c = Command::new("git");
            c.current_dir(at)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .args(["-c", "user.name=Dev", "-c", "user.email=dev@example.org"])
                .args(args);
            c
        };
        // One push + fetch: (commit, push, fetch, merge) usages.
        let push_fetch = || {
            let f = a.join(CHANGED);
            let mut text = std::fs::read(&f).unwrap();
            text.extend_from_slice(ONE_LINE.as_bytes());
            std::fs::write(&f, text).unwrap();
            let commit =
                run_with_usage(&mut git_cmd(&a, &["commit", "-q", "-a", "-m", "one line"]));
            let push = run_with_usage(&mut git_cmd(&a, &["push", "-q", "origin", "HEAD:main"]));
            let fetch = run_with_usage(&mut git_cmd(&b, &["fetch", "-q", "origin"]));
            let merge = run_with_usage(&mut git_cmd(
                &b,
                &["merge", "-q", "--ff-only", "origin/main"],
            ));
            assert_eq!(
                git(&b, &["rev-parse", "HEAD"]),
                git(&a, &["rev-parse", "HEAD"]),
                "the commit came across"
            );
            (commit, push, fetch, merge)
        };

        if !self.quick {
            // Warm-up: the page cache, the daemon, each executor.
            if let Some(ex) = &ex_remote {
                delegate(ex, true);
            }
            if let Some(ex) = &ex_served {
                delegate(ex, false);
            }
            if rows[2] {
                push_fetch();
            }
        }
        for ex in [&ex_remote, &ex_served].into_iter().flatten() {
            reset_peak(ex.0 .0.id());
        }
        #[derive(Default)]
        struct Row {
            times: Vec<Duration>,
            cpu: Duration,
            rss: u64,
            ex_ns: u64,
            ex_children: Duration,
        }
        let (mut by_remote, mut served) = (Row::default(), Row::default());
        let (mut pf, mut commits, mut pushes, mut fetches, mut merges) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut pf_rss = 0;
        for _ in 0..runs {
            for (ex, remote, row) in [
                (&ex_remote, true, &mut by_remote),
                (&ex_served, false, &mut served),
            ] {
                if let Some(ex) = ex {
                    let (u, c, k) = delegate(ex, remote);
                    row.times.push(u.took);
                    row.cpu += u.cpu;
                    row.rss = row.rss.max(u.rss_kib);
                    row.ex_ns += c;
                    row.ex_children += k;
                }
            }
            if rows[2] {
                let (commit, push, fetch, merge) = push_fetch();
                pf.push(push.took + fetch.took);
                commits.push(commit.took);
                pushes.push(push.took);
                fetches.push(fetch.took);
                merges.push(merge.took);
                pf_rss = pf_rss.max(push.rss_kib).max(fetch.rss_kib);
            }
        }
        assert_eq!(
            daemon.refs("team.git"),
            before,
            "every delegation branch went once applied"
        );
        let pf_median = (!pf.is_empty()).then(|| median(&mut pf));
        let what = format!(
            "{files} files ({:.1} MB) in a git repository, one line appended to one file",
            ws_bytes as f64 / 1e6
        );
        let n = runs as f64;
        for (name, ex, row, how) in [
            (
                "git-10k",
                &ex_remote,
                by_remote,
                "`--git-remote` (git daemon, holding HEAD as `main`)",
            ),
            (
                "git-10k-served",
                &ex_served,
                served,
                "`--serve-archives` (smart HTTP from the delegator)",
            ),
        ] {
            let Some(ex) = ex else { continue };
            let mut times = row.times;
            let d = median(&mut times);
            let ratio = pf_median.map_or("no push + fetch row run".into(), |p| {
                format!("**{:.1}× push + fetch**", ms(d) / ms(p))
            });
            self.row(format!(
                "| {name}: {what}, {how}, n={runs} | {:.0} ms | {:.0} ms | {:.1} MiB | {:.1} MiB | CPU per delegation: `awcp` and its git {:.0} ms, executor {:.0} ms, its children (git, the agent) {:.0} ms; {ratio} |",
                ms(d),
                ms(p95(&mut times)),
                row.rss as f64 / 1024.0,
                vm_hwm_kib(ex.0.0.id()) as f64 / 1024.0,
                ms(row.cpu) / n,
                ns_to_ms(row.ex_ns) / n,
                ms(row.ex_children) / n,
            ));
        }
        if let Some(p) = pf_median {
            self.row(format!(
                "| git-10k-push-fetch: the same change committed in a clone, `git push` to the same daemon, `git fetch` into another clone, n={runs} | {:.0} ms | {:.0} ms | git {:.1} MiB | – | push {:.0} ms, fetch {:.0} ms; not counted: `git commit -a` {:.0} ms, `git merge --ff-only` {:.0} ms |",
                ms(p),
                ms(p95(&mut pf)),
                pf_rss as f64 / 1024.0,
                ms(median(&mut pushes)),
                ms(median(&mut fetches)),
                ms(median(&mut commits)),
                ms(median(&mut merges)),
            ));
        }
    }
}

/// The path of file `i` of a [`text_workspace`].
fn text_file(i: usize) -> String {
    format!("d{}/f{i}.txt", i / 100)
}

/// `files` text files of about 260 bytes (six lines of hex), in directories of 100.
fn text_workspace(root: &Path, name: &str, files: usize) -> PathBuf {
    use std::fmt::Write;
    let ws = root.join(name);
    let mut rng = Rng(0x6A09_E667_F3BC_C908 ^ files as u64);
    for i in 0..files {
        let path = ws.join(text_file(i));
        if i % 100 == 0 {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        }
        let mut text = String::new();
        for line in 0..6 {
            let _ = writeln!(
                text,
                "f{i} l{line}: {:016x}{:016x}",
                rng.next_u64(),
                rng.next_u64()
            );
        }
        std::fs::write(path, text).unwrap();
    }
    ws
}

/// What the git rows' agent (and the yardstick's developer) appends to `d0/f0.txt`.
const ONE_LINE: &str = "one more line\n";

/// An executor whose agent appends [`ONE_LINE`] to `d0/f0.txt` (a shell script through
/// `--agent-cmd`).
fn start_one_line_executor(dir: &Path) -> (KillOnDrop, String) {
    std::fs::create_dir_all(dir).unwrap();
    let script = dir.join("one-line.sh");
    std::fs::write(
        &script,
        format!("printf '%s' '{ONE_LINE}' >> d0/f0.txt\necho done\n"),
    )
    .unwrap();
    let cmd = format!("sh {}", script.display());
    start_executor_running(dir, &["--agent-cmd", &cmd])
}

/// Whether `git` runs (the git rows are skipped without it).
fn git_runs() -> bool {
    Command::new("git")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn main() {
    let (quick, filter) = support::args();
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
    support::print_binaries();
    println!("| row | median | p95 | delegator peak RSS | executor peak RSS | notes |");
    println!("|---|---:|---:|---:|---:|---|");
    if b.wants("tiny-process") {
        b.tiny_process();
    }
    if b.wants("tiny-daemon") {
        b.tiny_daemon(&rt);
    }
    if b.wants("user") {
        b.user_path();
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
    // Storage rows (their curl baselines in the same group); 1 GiB only given a filter.
    let storage: [(&str, usize, usize); 3] = [
        ("storage-1mb", 1, 100),
        ("storage-51mb", 51, 550),
        ("storage-1gib", 1024, 1100),
    ];
    for (name, mib, files) in storage {
        let curl_name = name.replacen("storage-", "storage-curl-", 1);
        if (b.wants(name) || b.wants(&curl_name)) && (b.filter.is_some() || mib <= 51) {
            // Without s3s-fs: skipped, unless AWCP_REQUIRE_S3_TEST=1 (then this panics).
            if !s3::require_or_skip(name) {
                break;
            }
            b.storage(name, &curl_name, mib, files);
        }
    }
    // The git rows (their push + fetch yardstick in the same group), skipped without git.
    if ["git-10k", "git-10k-served", "git-10k-push-fetch"]
        .iter()
        .any(|r| b.wants_row(r))
    {
        if git_runs() {
            b.git_10k(10_000);
        } else {
            println!("git-10k: skipped, `git` does not run");
        }
    }
    let _ = b.rows.len();
}
