//! The drivers side by side: the same delegations on tokio and on smol, in one run.
//!
//! * lifecycle latency: a one-file workspace, the demo runner, inline archive, from `delegate`
//!   (INVITE) to the delegation's end (snapshot applied, executor released);
//! * 50 MB end to end: 50 incompressible 1 MiB files delegated by archive URL, the demo
//!   runner, the snapshot applied.
//!
//! `cargo bench -p awcp-smol --bench drivers` (`AWCP_BENCH_ITERS=n` for more lifecycle runs).

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use awcp_driver::{
    DelegateParams, DelegatorHandle, DelegatorOptions, ExecutorHandle, ExecutorOptions, Runtime,
};
use awcp_proto::{DelegationState, ExecutorConfig};
use awcp_smol::SmolRuntime;
use awcp_tokio::TokioRuntime;
use awcp_transports::{ArchiveDelegator, ArchiveDelegatorConfig, ArchiveExecutor, DemoRunner};

/// What a bench needs from a driver: run, and serve on a free loopback port.
trait BenchRuntime: Runtime + Default {
    const NAME: &'static str;
    fn block_on<F: Future>(f: F) -> F::Output;
    /// Binds 127.0.0.1:0, returns the base URL and a function that serves a handler there.
    fn serve_executor(h: ExecutorHandle) -> impl Future<Output = String>;
    fn serve_delegator(
        build: impl FnOnce(String) -> DelegatorHandle,
    ) -> impl Future<Output = DelegatorHandle>;
}

impl BenchRuntime for TokioRuntime {
    const NAME: &'static str = "tokio";
    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }
    async fn serve_executor(h: ExecutorHandle) -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", l.local_addr().unwrap());
        h.set_public_url(base.clone());
        tokio::spawn(awcp_tokio::serve(
            l,
            awcp_tokio::executor_router(h),
            std::future::pending(),
        ));
        base
    }
    async fn serve_delegator(build: impl FnOnce(String) -> DelegatorHandle) -> DelegatorHandle {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let d = build(format!("http://{}", l.local_addr().unwrap()));
        let router = awcp_tokio::delegator_router(d.clone());
        tokio::spawn(awcp_tokio::serve(l, router, std::future::pending()));
        d
    }
}

impl BenchRuntime for SmolRuntime {
    const NAME: &'static str = "smol";
    fn block_on<F: Future>(f: F) -> F::Output {
        smol::block_on(f)
    }
    async fn serve_executor(h: ExecutorHandle) -> String {
        let l = smol::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", l.local_addr().unwrap());
        h.set_public_url(base.clone());
        smol::spawn(awcp_smol::serve(
            l,
            awcp_smol::executor_service(h),
            std::future::pending(),
        ))
        .detach();
        base
    }
    async fn serve_delegator(build: impl FnOnce(String) -> DelegatorHandle) -> DelegatorHandle {
        let l = smol::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let d = build(format!("http://{}", l.local_addr().unwrap()));
        let svc = awcp_smol::delegator_service(d.clone());
        smol::spawn(awcp_smol::serve(l, svc, std::future::pending())).detach();
        d
    }
}

struct Setup {
    peer: String,
    delegator: DelegatorHandle,
    _dirs: Vec<tempfile::TempDir>,
}

async fn setup<R: BenchRuntime>() -> Setup {
    let exec_dir = tempfile::tempdir().unwrap();
    let opts = ExecutorOptions::new(
        ExecutorConfig {
            work_root: exec_dir.path().to_string_lossy().into_owned(),
            max_concurrent: 64,
            ..ExecutorConfig::default()
        },
        Arc::new(ArchiveExecutor::default()),
        Arc::new(DemoRunner),
    );
    let base = R::serve_executor(ExecutorHandle::start(R::default(), opts)).await;
    let deleg_dir = tempfile::tempdir().unwrap();
    let state = deleg_dir.path().join("state");
    let delegator = R::serve_delegator(|url| {
        let transport = ArchiveDelegator::new(ArchiveDelegatorConfig::new(state.join("exports")));
        let mut opts = DelegatorOptions::new(Arc::new(transport), state.clone());
        opts.archive_base_url = Some(url);
        DelegatorHandle::start(R::default(), opts)
    })
    .await;
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
        .delegate(DelegateParams::new(&s.peer, dir, "bench", "note the files"))
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

fn big_workspace(mib: usize) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..mib {
        let mut buf = Vec::with_capacity(1 << 20);
        while buf.len() < 1 << 20 {
            // xorshift64: incompressible enough that the archive is ~ the data.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf.extend_from_slice(&x.to_le_bytes());
        }
        std::fs::write(d.path().join(format!("blob{i:03}.bin")), &buf).unwrap();
    }
    d
}

struct Stats {
    median: Duration,
    mean: Duration,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort();
    let mean = v.iter().sum::<Duration>() / v.len() as u32;
    Stats {
        median: v[v.len() / 2],
        mean,
    }
}

fn run<R: BenchRuntime>(iters: usize, big: &Path, big_iters: usize) -> (Stats, Stats) {
    R::block_on(async {
        let s = setup::<R>().await;
        let ws = tiny_workspace();
        for _ in 0..3 {
            delegate_once(&s, ws.path()).await; // warm-up
        }
        let mut lat = Vec::new();
        for _ in 0..iters {
            lat.push(delegate_once(&s, ws.path()).await);
        }
        let mut bulk = Vec::new();
        for _ in 0..big_iters {
            bulk.push(delegate_once(&s, big).await);
        }
        (stats(lat), stats(bulk))
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    // `cargo test --benches` runs this with `--bench` absent: keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let iters: usize = std::env::var("AWCP_BENCH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if quick { 3 } else { 50 });
    let (mib, big_iters) = if quick { (2, 1) } else { (50, 5) };
    let big = big_workspace(mib);
    // Interleave the runtimes so both see the same machine state.
    let (tl, tb) = run::<TokioRuntime>(iters, big.path(), big_iters);
    let (sl, sb) = run::<SmolRuntime>(iters, big.path(), big_iters);
    println!(
        "lifecycle: {iters} runs each; bulk: {big_iters} runs each of {mib} MiB (demo runner, archive by URL)"
    );
    println!(
        "{:<28} {:>12} {:>12} {:>12}",
        "benchmark",
        TokioRuntime::NAME,
        SmolRuntime::NAME,
        "smol/tokio"
    );
    for (name, t, s) in [
        ("lifecycle median (ms)", tl.median, sl.median),
        ("lifecycle mean (ms)", tl.mean, sl.mean),
        ("bulk median (ms)", tb.median, sb.median),
        ("bulk mean (ms)", tb.mean, sb.mean),
    ] {
        println!(
            "{:<28} {:>12.2} {:>12.2} {:>12.2}",
            name,
            ms(t),
            ms(s),
            ms(s) / ms(t)
        );
    }
}
