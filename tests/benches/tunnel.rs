//! The WebSocket tunnel beside direct (issue 51): the same delegations to one release
//! `awcp-executor`, once at its own listener and once through one `awcp-relay` it dials
//! (`--tunnel ws://…/tunnel`), in the same run. Goal: the tunnel costs at most 1.3× the direct
//! wall time, and memory stays flat as the workspace grows.
//!
//! ```sh
//! cargo bench -p awcp-tests --bench tunnel              # every row
//! cargo bench -p awcp-tests --bench tunnel -- tiny      # rows whose name contains "tiny"
//! AWCP_BIN_DIR=/other/target/release cargo bench -p awcp-tests --bench tunnel
//! ```
//!
//! Rows: `tiny-direct`, `tiny-tunnel` (two small files, n = 20 each) and `51mib-direct`,
//! `51mib-tunnel` (51 MiB of incompressible data in 550 files, inline archive: the default
//! transport; n = 5 each). The executor runs the built-in demo task (it writes
//! `AWCP_NOTES.md`, so every delegation brings a snapshot back and applies it; checked, and
//! removed after each run). After warm-up runs, the runs of a size **alternate** direct and
//! tunnel, so that a change of load on the machine falls on both rows alike.
//!
//! Per row: median and p95 wall time of whole `awcp delegate` processes; peak RSS of `awcp`
//! (`wait4`'s `ru_maxrss`), of the executor and of the relay (`VmHWM`, reset through
//! `/proc/PID/clear_refs` before each run, the row's figure the largest after any of its
//! runs); CPU time per delegation of each process (`awcp`: `wait4`; the long-lived ones: their
//! CPU-time clocks). Then the ratio tunnel / direct of the medians for each size.
//!
//! Without `--bench` (as `cargo test --benches` runs it) every row runs once, on 1 MiB.
//! Everything runs on 127.0.0.1 (port 0) under one temporary directory; every process the
//! bench starts is killed and reaped when it ends.
//!
//! Helpers copied from `delegations.rs` (candidates for a shared module in `awcp_tests`):
//! `run_with_usage` (as `run`), `cpu_ns`, `peak_kib`, `reset_peak`, `ms`, `median`, `p95`,
//! `workspace`, `tiny_workspace`, `delegate_cmd`; from `tests/tunnel.rs`: `registry`, `get`,
//! `wait_served`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use awcp_tests::bins::{self, KillOnDrop};
use awcp_tests::rng::Rng;

const RELAY_ANNOUNCES: &str = "awcp-relay listening on ";
const NAME: &str = "bench";
const TOKEN: &str = "bench-tunnel-token";

/// What one `awcp delegate` process cost: wall time, peak RSS (KiB), CPU time.
struct Usage {
    took: Duration,
    rss_kib: u64,
    cpu: Duration,
}

/// Runs `cmd` to completion (it must succeed), measuring its wall time, peak RSS and CPU.
// The child is reaped by `wait4` (which `Child::wait` cannot do: it has no `rusage`).
#[allow(clippy::zombie_processes)]
fn run(cmd: &mut Command) -> Usage {
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
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        let mut err = String::new();
        if let Some(mut e) = child.stderr {
            let _ = e.read_to_string(&mut err);
        }
        panic!("{cmd:?} failed ({status}):\n{err}");
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Usage {
        took,
        rss_kib: usage.ru_maxrss as u64,
        cpu: tv(usage.ru_utime) + tv(usage.ru_stime),
    }
}

/// CPU time `pid` has used (all its threads), in nanoseconds (its CPU-time clock).
fn cpu_ns(pid: u32) -> u64 {
    let mut clock: libc::clockid_t = 0;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: both out-pointers are valid for writes of their types.
    unsafe {
        assert_eq!(libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock), 0);
        assert_eq!(libc::clock_gettime(clock, &mut ts), 0);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// `files` files of incompressible data, `bytes` in all, in subdirectories of 100.
fn workspace(root: &Path, name: &str, bytes: usize, files: usize) -> PathBuf {
    let ws = root.join(name);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ bytes as u64);
    let mut buf = vec![0u8; bytes / files.max(1)];
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

fn delegate_cmd(state: &Path, ws: &Path, peer: &str) -> Command {
    let mut cmd = Command::new(bins::path("awcp"));
    cmd.args(["--quiet", "delegate"])
        .arg(ws)
        .args(["--peer", peer, "--prompt", "note what you see"])
        .args(["--max-total-bytes", "1000000000", "--state-dir"])
        .arg(state);
    cmd
}

/// A registry file naming [`NAME`] with [`TOKEN`]'s digest (`awcp-relay hash-token`).
fn registry(dir: &Path) -> PathBuf {
    let mut child = Command::new(bins::path("awcp-relay"))
        .arg("hash-token")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(format!("{TOKEN}\n").as_bytes()).unwrap();
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "hash-token failed");
    let digest = String::from_utf8(o.stdout).unwrap();
    let p = dir.join("executors.txt");
    std::fs::write(&p, format!("{NAME} {}\n", digest.trim())).unwrap();
    p
}

/// `GET path` on `addr`: its status, 0 if the connection failed.
fn get(addr: &str, path: &str) -> u16 {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return 0;
    };
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return 0;
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Waits until the relay serves [`NAME`]'s status (the executor's tunnel is up).
fn wait_served(relay: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while get(relay, &format!("/e/{NAME}/awcp/status")) != 200 {
        assert!(Instant::now() < deadline, "not served through the relay");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The processes under test: one relay, one executor serving at its listener and through the
/// relay.
struct Setup {
    executor: KillOnDrop,
    relay: KillOnDrop,
    direct: String,
    tunnel: String,
}

fn start(dir: &Path) -> Setup {
    std::fs::create_dir_all(dir).unwrap();
    let reg = registry(dir);
    let (relay, url) = bins::spawn_announcing(
        Command::new(bins::path("awcp-relay"))
            .args(["--listen", "127.0.0.1:0", "--quiet", "--executors"])
            .arg(&reg),
        RELAY_ANNOUNCES,
    );
    let relay = KillOnDrop(relay);
    let addr = url.trim_start_matches("http://").trim_end_matches('/');
    let token_file = dir.join("tunnel.token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let exdir = dir.join("executor");
    let (executor, direct) = bins::spawn_announcing(
        Command::new(bins::path("awcp-executor"))
            .args(["--listen", "127.0.0.1:0", "--quiet", "--demo"])
            // Inline bodies of the 51 MiB row (as base64).
            .args(["--max-body-bytes", "1000000000"])
            .arg("--work-root")
            .arg(exdir.join("work"))
            .arg("--state-dir")
            .arg(exdir.join("state"))
            .arg("--tunnel")
            .arg(format!("ws://{addr}/tunnel"))
            .arg("--tunnel-token-file")
            .arg(&token_file),
        bins::EXECUTOR_ANNOUNCES,
    );
    let executor = KillOnDrop(executor);
    wait_served(addr);
    Setup {
        executor,
        relay,
        direct,
        tunnel: format!("http://{addr}/e/{NAME}/awcp"),
    }
}

/// One row's figures, gathered over its runs.
#[derive(Default)]
struct Row {
    times: Vec<Duration>,
    awcp_kib: u64,
    executor_kib: u64,
    relay_kib: u64,
    awcp_cpu: Duration,
    executor_cpu_ns: u64,
    relay_cpu_ns: u64,
}

impl Row {
    fn median_ms(&mut self) -> f64 {
        ms(median(&mut self.times))
    }

    fn line(&mut self, name: &str, what: &str) -> String {
        let n = self.times.len();
        let per = |ns: u64| ns as f64 / 1e6 / n as f64;
        format!(
            "| {name}: {what}, n={n} | {:.1} ms | {:.1} ms | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} / {:.1} / {:.1} ms |",
            self.median_ms(),
            ms(p95(&mut self.times)),
            mib(self.awcp_kib),
            mib(self.executor_kib),
            mib(self.relay_kib),
            ms(self.awcp_cpu) / n as f64,
            per(self.executor_cpu_ns),
            per(self.relay_cpu_ns),
        )
    }
}

/// One delegation of `ws` to `peer`, its figures added to `row`.
fn measure(s: &Setup, row: &mut Row, state: &Path, ws: &Path, peer: &str) {
    let (ex, relay) = (s.executor.0.id(), s.relay.0.id());
    reset_peak(ex);
    reset_peak(relay);
    let (e0, r0) = (cpu_ns(ex), cpu_ns(relay));
    let u = run(&mut delegate_cmd(state, ws, peer));
    row.executor_cpu_ns += cpu_ns(ex) - e0;
    row.relay_cpu_ns += cpu_ns(relay) - r0;
    row.executor_kib = row.executor_kib.max(peak_kib(ex));
    row.relay_kib = row.relay_kib.max(peak_kib(relay));
    row.awcp_kib = row.awcp_kib.max(u.rss_kib);
    row.awcp_cpu += u.cpu;
    row.times.push(u.took);
    forget_notes(ws);
}

/// The demo task's note came back and was applied; removed for the next run.
fn forget_notes(ws: &Path) {
    let notes = ws.join("AWCP_NOTES.md");
    assert!(notes.exists(), "the demo task's snapshot was not applied");
    std::fs::remove_file(notes).unwrap();
}

/// The rows of one size: `warm` warm-up runs each way, then `n` runs of each, alternating.
/// Returns the ratio tunnel / direct of the medians (when both rows ran).
#[allow(clippy::too_many_arguments)]
fn size(
    s: &Setup,
    dir: &Path,
    ws: &Path,
    (label, what): (&str, &str),
    n: usize,
    warm: usize,
    wants: &dyn Fn(&str) -> bool,
    out: &mut Vec<String>,
) -> Option<f64> {
    let names = [format!("{label}-direct"), format!("{label}-tunnel")];
    let peers = [&s.direct, &s.tunnel];
    let on: Vec<bool> = names.iter().map(|n| wants(n)).collect();
    let states = [dir.join("delegator-direct"), dir.join("delegator-tunnel")];
    let mut rows = [Row::default(), Row::default()];
    let mut scratch = Row::default();
    for _ in 0..warm {
        for k in (0..2).filter(|&k| on[k]) {
            measure(s, &mut scratch, &states[k], ws, peers[k]);
        }
    }
    for _ in 0..n {
        for k in (0..2).filter(|&k| on[k]) {
            measure(s, &mut rows[k], &states[k], ws, peers[k]);
        }
    }
    for k in (0..2).filter(|&k| on[k]) {
        let line = rows[k].line(&names[k], what);
        println!("{line}");
        out.push(line);
    }
    (on[0] && on[1]).then(|| rows[1].median_ms() / rows[0].median_ms())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = !args.iter().any(|a| a == "--bench");
    let filter = args.iter().find(|a| !a.starts_with('-')).cloned();
    let wants = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    let root = tempfile::tempdir().expect("a temporary directory");
    println!(
        "binaries: {}",
        bins::path("awcp")
            .parent()
            .unwrap_or(Path::new(""))
            .display()
    );
    let s = start(&root.path().join("procs"));
    println!("direct: {}  tunnel: {}", s.direct, s.tunnel);
    println!(
        "idle RSS before the rows: executor {:.1} MiB, relay {:.1} MiB",
        mib(peak_kib(s.executor.0.id())),
        mib(peak_kib(s.relay.0.id())),
    );
    let header = "| row | median | p95 | `awcp` peak RSS | executor peak RSS | relay peak RSS | CPU per delegation `awcp` / executor / relay |\n|---|---:|---:|---:|---:|---:|---|";
    println!("{header}");
    let mut out = Vec::new();
    let mut ratios = Vec::new();
    if wants("tiny-direct") || wants("tiny-tunnel") {
        let dir = root.path().join("tiny");
        let ws = tiny_workspace(&dir, "ws");
        let (n, warm) = if quick { (1, 0) } else { (20, 3) };
        let what = ("tiny", "2 small files");
        if let Some(r) = size(&s, &dir, &ws, what, n, warm, &wants, &mut out) {
            ratios.push(("tiny", r));
        }
    }
    if wants("51mib-direct") || wants("51mib-tunnel") {
        let dir = root.path().join("51mib");
        let (m, n, warm) = if quick { (1, 1, 0) } else { (51, 5, 1) };
        let ws = workspace(&dir, "ws", m << 20, 550);
        let what = format!("{m} MiB in 550 incompressible files, inline archive");
        if let Some(r) = size(&s, &dir, &ws, ("51mib", &what), n, warm, &wants, &mut out) {
            ratios.push(("51mib", r));
        }
    }
    println!("\n{header}");
    for line in &out {
        println!("{line}");
    }
    for (label, r) in &ratios {
        let verdict = if *r <= 1.3 { "meets" } else { "misses" };
        println!("ratio tunnel / direct ({label}, medians): {r:.2}× ({verdict} the 1.3× goal)");
    }
    drop(s); // kills and reaps the executor, then the relay
}
