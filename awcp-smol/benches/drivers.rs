//! The driver benchmarks, on tokio and on smol side by side in one run. Every case runs in its
//! own child process (this binary again), so each gets a fresh heap and its own peak RSS; both
//! the delegator and the executor live in that process and talk over loopback HTTP.
//!
//! * `lifecycle`: a one-file workspace and a no-op task, inline archive; from `delegate`
//!   (INVITE) to the delegation's end (executor released, result recorded). p50, p95, mean.
//! * `concurrent`: 1,000 delegations at once against one executor with raised limits (one
//!   one-file workspace each, no-op task): wall time, and peak RSS growth per delegation.
//! * `e2e`: 1, 10 and 50 MB workspaces, inline and by URL, the demo runner (it writes a file,
//!   so a snapshot comes back and is applied): time and the process's peak RSS.
//!
//! `cargo bench -p awcp-smol --bench drivers` (`AWCP_BENCH_ITERS=n` for more lifecycle runs,
//! `AWCP_BENCH_CONCURRENT=n` for another fan-out). Without `--bench` (as `cargo test
//! --benches` runs it) every case is tiny.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use awcp_driver::{
    DelegateParams, DelegatorHandle, DelegatorOptions, Driver, ExecutorHandle, ExecutorOptions,
};
use awcp_proto::{DelegationState, ExecutorConfig};
use awcp_smol::SmolRuntime;
use awcp_tokio::TokioRuntime;
use awcp_transports::{
    ArchiveDelegator, ArchiveDelegatorConfig, ArchiveExecutor, CancelFlag, DemoRunner, TaskContext,
    TaskOutcome, TaskRunner,
};

/// A task that does nothing.
struct Noop;

impl TaskRunner for Noop {
    fn run(
        &self,
        _: &TaskContext,
        _: &dyn Fn(String),
        _: &CancelFlag,
    ) -> Result<TaskOutcome, awcp_proto::TaskFailure> {
        Ok(TaskOutcome {
            summary: "nothing to do".into(),
            highlights: vec![],
        })
    }
}

struct Setup {
    peer: String,
    delegator: DelegatorHandle,
    _dirs: Vec<tempfile::TempDir>,
}

/// An executor and a delegator on `R`, each served on a free loopback port.
async fn setup<R: Driver>(runner: Arc<dyn TaskRunner>, url_mode: bool, max: usize) -> Setup {
    let exec_dir = tempfile::tempdir().unwrap();
    let opts = ExecutorOptions::new(
        ExecutorConfig {
            work_root: exec_dir.path().to_string_lossy().into_owned(),
            max_concurrent: max,
            ..ExecutorConfig::default()
        },
        Arc::new(ArchiveExecutor::default()),
        runner,
    );
    let executor = ExecutorHandle::start(R::default(), opts);
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    executor.set_public_url(base.clone());
    R::default().spawn_executor_server(l, executor);

    let deleg_dir = tempfile::tempdir().unwrap();
    let state = deleg_dir.path().join("state");
    let transport = ArchiveDelegator::new(ArchiveDelegatorConfig::new(state.join("exports")));
    let mut opts = DelegatorOptions::new(Arc::new(transport), state);
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    if url_mode {
        opts.archive_base_url = Some(format!("http://{}", l.local_addr().unwrap()));
    }
    let delegator = DelegatorHandle::start(R::default(), opts);
    R::default().spawn_archive_server(l, delegator.clone());
    Setup {
        peer: format!("{base}/awcp"),
        delegator,
        _dirs: vec![exec_dir, deleg_dir],
    }
}

async fn delegate_once(s: &Setup, dir: &Path) -> Duration {
    let t = Instant::now();
    let id = s
        .delegator
        .delegate(DelegateParams::new(&s.peer, dir, "note the files").description("bench"))
        .await
        .unwrap();
    let v = s.delegator.wait(&id).await.unwrap();
    let took = t.elapsed();
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    took
}

fn tiny_workspace() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.txt"), "A\n").unwrap();
    d
}

/// `files` incompressible files making `mib` MiB in all.
fn workspace(mib: usize, files: usize) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let size = (mib << 20) / files;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..files {
        let mut buf = Vec::with_capacity(size + 8);
        while buf.len() < size {
            // xorshift64: incompressible, so the archive is about the size of the data.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf.extend_from_slice(&x.to_le_bytes());
        }
        buf.truncate(size);
        let sub = d.path().join(format!("d{:02}", i % 16));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(format!("f{i:04}.bin")), &buf).unwrap();
    }
    d
}

/// (current RSS, peak RSS) of this process in KiB, from /proc.
fn rss_kib() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// Runs one case on `R` (in a child process) and returns `name=value` results.
fn run_case<R: Driver>(case: &str, quick: bool) -> Vec<(String, f64)> {
    R::block_on(async {
        let mut out = Vec::new();
        match case {
            "lifecycle" => {
                let iters: usize = env_or("AWCP_BENCH_ITERS", if quick { 3 } else { 100 });
                let s = setup::<R>(Arc::new(Noop), false, 8).await;
                let ws = tiny_workspace();
                for _ in 0..5 {
                    delegate_once(&s, ws.path()).await; // warm-up
                }
                let mut v = Vec::new();
                for _ in 0..iters {
                    v.push(delegate_once(&s, ws.path()).await);
                }
                v.sort();
                let mean = v.iter().sum::<Duration>() / v.len() as u32;
                out.push(("p50 ms".into(), ms(percentile(&v, 50))));
                out.push(("p95 ms".into(), ms(percentile(&v, 95))));
                out.push(("mean ms".into(), ms(mean)));
            }
            "concurrent" => {
                let n: usize = env_or("AWCP_BENCH_CONCURRENT", if quick { 20 } else { 1000 });
                let s = setup::<R>(Arc::new(Noop), false, n + 10).await;
                let dirs: Vec<_> = (0..n).map(|_| tiny_workspace()).collect();
                let (before, _) = rss_kib();
                let t = Instant::now();
                let runs = dirs.iter().map(|d| delegate_once(&s, d.path()));
                futures::future::join_all(runs).await;
                let took = t.elapsed();
                let (_, peak) = rss_kib();
                out.push((format!("{n} at once ms"), ms(took)));
                out.push((
                    "peak RSS KiB/delegation".into(),
                    peak.saturating_sub(before) as f64 / n as f64,
                ));
            }
            e2e => {
                // e2e-<MiB>-<inline|url>
                let mut parts = e2e.split('-').skip(1);
                let mib: usize = parts.next().and_then(|m| m.parse().ok()).unwrap();
                let url = parts.next() == Some("url");
                let mib = if quick { 1 } else { mib };
                let files = match mib {
                    0..=1 => 100,
                    2..=10 => 1000,
                    _ => 550,
                };
                let ws = workspace(mib, files);
                let s = setup::<R>(Arc::new(DemoRunner), url, 8).await;
                let mut v = Vec::new();
                for _ in 0..if quick { 1 } else { 3 } {
                    v.push(delegate_once(&s, ws.path()).await);
                    // The demo runner's notes come back applied; drop them for the next run.
                    let _ = std::fs::remove_file(ws.path().join("AWCP_NOTES.md"));
                }
                v.sort();
                out.push(("median ms".into(), ms(percentile(&v, 50))));
                out.push(("peak RSS MiB".into(), rss_kib().1 as f64 / 1024.0));
            }
        }
        out
    })
}

fn env_or(k: &str, default: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    // Child: run one case, print its results as `name\tvalue` lines.
    if let Ok(spec) = std::env::var("AWCP_BENCH_CHILD") {
        if std::env::var_os("RUST_LOG").is_some() {
            tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_writer(std::io::stderr)
                .init();
        }
        let (runtime, case) = spec.split_once(':').unwrap();
        let results = match runtime {
            "tokio" => run_case::<TokioRuntime>(case, quick),
            _ => run_case::<SmolRuntime>(case, quick),
        };
        for (k, v) in results {
            println!("{k}\t{v}");
        }
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let cases = [
        "lifecycle",
        "concurrent",
        "e2e-1-inline",
        "e2e-1-url",
        "e2e-10-inline",
        "e2e-10-url",
        "e2e-50-inline",
        "e2e-50-url",
    ];
    println!(
        "{:<34} {:>12} {:>12} {:>11}",
        "benchmark",
        TokioRuntime::NAME,
        SmolRuntime::NAME,
        "smol/tokio"
    );
    for case in cases {
        // Both runtimes back to back, so they see the same machine state.
        let results: Vec<Vec<(String, f64)>> = [TokioRuntime::NAME, SmolRuntime::NAME]
            .iter()
            .map(|rt| {
                let mut cmd = Command::new(&exe);
                if !quick {
                    cmd.arg("--bench");
                }
                // Both sides share one process here: tokio gets a worker per core, as every
                // earlier run of this bench did (`Driver::block_on` alone runs one thread,
                // which suits a process that is one side, like the binaries).
                if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
                    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
                    cmd.env("TOKIO_WORKER_THREADS", cores.to_string());
                }
                let out = cmd
                    .env("AWCP_BENCH_CHILD", format!("{rt}:{case}"))
                    .output()
                    .expect("the bench runs itself");
                assert!(
                    out.status.success(),
                    "{rt} {case} failed:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter_map(|l| l.split_once('\t'))
                    .map(|(k, v)| (k.to_owned(), v.parse().unwrap()))
                    .collect()
            })
            .collect();
        for ((name, t), (_, s)) in results[0].iter().zip(&results[1]) {
            println!(
                "{:<34} {:>12.2} {:>12.2} {:>11.2}",
                format!("{case} {name}"),
                t,
                s,
                s / t
            );
        }
    }
}
