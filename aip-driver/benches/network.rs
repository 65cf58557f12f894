//! AIP over real loopback HTTP, on tokio and smol side by side in one run (and the acps-sdk
//! 2.1.0 partner for scale, when `target/aip-venv` has it):
//!
//! * `rpc`: start → complete round trips per second, our leader against a partner server
//!   whose application does the work inside the start call (so the start answers
//!   awaiting-completion with a product and the complete answers completed), one and 32 in
//!   flight. Both sides in this process (CPU figures count both); the SDK partner is a
//!   uvicorn process (CPU figures count this process and the partner's).
//! * `stream`: progress events per second through one stream to one subscriber (our leader),
//!   paced by what it has received (at most 256 in flight).
//! * `memory`: 1,000 open streams (tasks working, each stream open): RSS growth of the
//!   partner (its own process: this binary with `--serve-partner`) and of the leader, per
//!   stream.
//!
//! `cargo bench -p aip-driver --bench network` (`-- --seconds N` per figure, default 3;
//! `--streams N` for another fan-out). Without `--bench` (as `cargo test --benches` runs it)
//! every case is tiny.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agent_rt::{Host, ServerOptions, SmolRuntime, TokioRuntime};
use aip_driver::{LeaderHandle, LeaderOptions, PartnerEvents, PartnerHandle, PartnerOptions};
use aip_proto::leader::{Delivery, LeaderConfig, LeaderEvent, PartnerEndpoint, StartTask};
use aip_proto::partner::{PartnerConfig, PartnerEvent};
use aip_proto::{DataItem, Dialect, Product, TaskState};
use futures::StreamExt;

struct Opts {
    seconds: f64,
    streams: usize,
}

fn opts() -> Opts {
    let args: Vec<String> = std::env::args().collect();
    let val = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<f64>().ok())
    };
    let full = args.iter().any(|a| a == "--bench");
    Opts {
        seconds: val("--seconds").unwrap_or(if full { 3.0 } else { 0.2 }),
        streams: val("--streams").map_or(if full { 1000 } else { 20 }, |v| v as usize),
    }
}

/// The partner application: decides every start inside one engine call. "work": accept,
/// work and submit (the start answers awaiting-completion); anything else: accept and work
/// (the task stays working, its stream open).
async fn bench_app(p: PartnerHandle, mut events: PartnerEvents) {
    while let Some(e) = events.next().await {
        if let PartnerEvent::StartRequested { task_id, command } = e {
            let work = command.items().first().and_then(DataItem::as_text) == Some("work");
            let _ = p
                .with_engine(move |e, now| {
                    let _ = e.accept(now, &task_id);
                    let _ = e.start_working(now, &task_id);
                    if work {
                        let _ =
                            e.submit(now, &task_id, vec![Product::text("answer", "42")], vec![]);
                    }
                })
                .await;
        }
    }
}

fn partner_options() -> PartnerOptions {
    PartnerOptions {
        engine: PartnerConfig {
            partner_id: "bench-partner".into(),
            auto_accept: false,
            max_tasks: 1_000_000,
            stream_buffer: 1024,
            ..PartnerConfig::default()
        },
        ..PartnerOptions::default()
    }
}

fn server_options() -> ServerOptions {
    ServerOptions {
        max_connections: 8192,
        ..ServerOptions::default()
    }
}

/// A partner with the bench application, served on a free loopback port; its rpc URL.
fn serve_partner<R: Host>() -> (String, PartnerHandle) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/rpc", l.local_addr().unwrap());
    let (p, events) = PartnerHandle::spawn(R::default(), partner_options());
    R::default().spawn(Box::pin(bench_app(p.clone(), events)));
    let serve = aip_driver::serve_partner(
        R::default(),
        l,
        &p,
        server_options(),
        std::future::pending(),
    );
    R::default().spawn(Box::pin(async move {
        serve.await.unwrap();
    }));
    (url, p)
}

async fn leader<R: Host>(url: &str) -> (LeaderHandle, aip_driver::LeaderEvents) {
    let (l, ev) = LeaderHandle::spawn(
        R::default(),
        LeaderOptions {
            engine: LeaderConfig {
                leader_id: "bench-leader".into(),
                poll_interval: None,
                task_timeout: None,
                ..LeaderConfig::default()
            },
            ..LeaderOptions::default()
        },
    );
    l.add_partner(
        "p",
        PartnerEndpoint {
            url: url.to_owned(),
            dialect: Dialect::V2,
        },
    )
    .await
    .unwrap();
    (l, ev)
}

/// CPU seconds (user + system) of a process so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat; after the command's ")" (field 2) they
    // are the 12th and 13th.
    let num = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    let ticks = num(11) + num(12);
    ticks as f64 / 100.0
}

/// Resident memory of a process, KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// start → complete round trips with `inflight` at once for `secs`: (per second, CPU µs each
/// counting `also` too).
async fn round_trips(
    l: &LeaderHandle,
    name: &str,
    inflight: usize,
    secs: f64,
    also: Option<u32>,
) -> (f64, f64) {
    let done = AtomicU64::new(0);
    let cpu0 = cpu_seconds(std::process::id()) + also.map_or(0.0, cpu_seconds);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let worker = |w: usize| {
        let done = &done;
        async move {
            let mut i = 0u64;
            while Instant::now() < end {
                i += 1;
                let id = format!("{name}-{inflight}-{w}-{i}");
                let r = l
                    .start(StartTask::new("p", id.clone(), "s", "work"))
                    .await
                    .unwrap();
                assert_eq!(r.status.state, TaskState::AwaitingCompletion, "{r:?}");
                let r = l.complete(&id).await.unwrap();
                assert_eq!(r.status.state, TaskState::Completed);
                done.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    futures::future::join_all((0..inflight).map(worker)).await;
    let wall = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds(std::process::id()) + also.map_or(0.0, cpu_seconds) - cpu0;
    let n = done.load(Ordering::Relaxed).max(1) as f64;
    (n / wall, cpu / n * 1e6)
}

async fn rpc<R: Host>(o: &Opts) {
    let (url, _p) = serve_partner::<R>();
    let (l, ev) = leader::<R>(&url).await;
    drop(ev);
    for inflight in [1, 32] {
        let (rate, cpu) = round_trips(&l, R::NAME, inflight, o.seconds, None).await;
        println!(
            "rpc/{:<5} in flight {inflight:>2}: {rate:>8.0} round trips/s   {cpu:>6.0} µs CPU each (leader + partner)",
            R::NAME
        );
    }
}

async fn stream<R: Host>(o: &Opts) {
    const BATCH: u64 = 256;
    let (url, p) = serve_partner::<R>();
    let (l, mut ev) = leader::<R>(&url).await;
    let start = StartTask {
        delivery: Delivery::Stream,
        ..StartTask::new("p", "s-1", "s", "hold")
    };
    l.start(start).await.unwrap();
    let mut produced = 0u64;
    let mut received = 0u64;
    let cpu0 = cpu_seconds(std::process::id());
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(o.seconds);
    while Instant::now() < end {
        let from = produced;
        p.with_engine(move |e, now| {
            for n in from..from + BATCH {
                let _ = e.progress(now, "s-1", vec![DataItem::text(n.to_string())]);
            }
        })
        .await
        .unwrap();
        produced += BATCH;
        while received < produced {
            match ev.next().await {
                Some(LeaderEvent::Progress { .. }) => received += 1,
                Some(LeaderEvent::StreamDropped { .. } | LeaderEvent::StreamLost { .. }) => {
                    panic!("the stream dropped during the bench")
                }
                Some(_) => {}
                None => panic!("the leader stopped"),
            }
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(std::process::id()) - cpu0;
    println!(
        "stream/{:<5} one subscriber: {:>8.0} events/s   {:>6.1} µs CPU each (leader + partner)",
        R::NAME,
        received as f64 / wall,
        cpu / received as f64 * 1e6
    );
    l.complete("s-1").await.unwrap();
}

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `cmd`, which prints `<prefix><url>` first; the process and the URL.
fn spawn_url(mut cmd: Command, prefix: &str) -> (Proc, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the partner process starts");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    (Proc(child), url)
}

async fn memory<R: Host>(o: &Opts) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--serve-partner", R::NAME]);
    let (child, url) = spawn_url(cmd, "URL ");
    let pid = child.0.id();
    let (l, ev) = leader::<R>(&url).await;
    drop(ev);
    // One stream first, so both sides have their buffers and code paths warm.
    let warm = StartTask {
        delivery: Delivery::Stream,
        ..StartTask::new("p", "warm", "s", "hold")
    };
    l.start(warm).await.unwrap();
    let (p0, l0) = (rss_kib(pid), rss_kib(std::process::id()));
    let n = o.streams;
    let starts = (0..n).map(|i| {
        let l = &l;
        async move {
            let s = StartTask {
                delivery: Delivery::Stream,
                ..StartTask::new("p", format!("m-{i}"), "s", "hold")
            };
            // Answered by the stream's first event: the stream is open.
            l.start(s).await.unwrap();
        }
    });
    futures::future::join_all(starts).await;
    let open = l.calls_in_flight().await.unwrap();
    assert!(open > n, "{open} streams open at the leader");
    let (p1, l1) = (rss_kib(pid), rss_kib(std::process::id()));
    println!(
        "memory/{:<5} {n} open streams: partner +{} KiB ({:.1} KiB each), leader +{} KiB ({:.1} KiB each)",
        R::NAME,
        p1.saturating_sub(p0),
        p1.saturating_sub(p0) as f64 / n as f64,
        l1.saturating_sub(l0),
        l1.saturating_sub(l0) as f64 / n as f64
    );
    drop(child);
}

/// The acps-sdk 2.1.0 partner (FastAPI + uvicorn), if the venv is there.
async fn sdk(o: &Opts) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("../target/aip-venv/bin/python");
    if !python.exists() {
        println!(
            "rpc/sdk: skipped (no {}; run the SDK interop test or .ci/run first)",
            python.display()
        );
        return;
    }
    let mut cmd = Command::new(python);
    cmd.arg(root.join("tests/sdk/sdk_partner.py"));
    let (child, url) = spawn_url(cmd, "LISTENING ");
    let (l, ev) = leader::<TokioRuntime>(&url).await;
    drop(ev);
    // The SDK partner's on_start (tests/sdk/sdk_partner.py) answers awaiting-completion too.
    for inflight in [1, 32] {
        let (rate, cpu) = round_trips(&l, "sdk", inflight, o.seconds, Some(child.0.id())).await;
        println!(
            "rpc/sdk   in flight {inflight:>2}: {rate:>8.0} round trips/s   {cpu:>6.0} µs CPU each (our leader + the SDK partner)"
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--serve-partner") {
        let rt = args.get(i + 1).map(String::as_str).unwrap_or("tokio");
        let serve = || async {
            let (url, _p) = match rt {
                "smol" => serve_partner::<SmolRuntime>(),
                _ => serve_partner::<TokioRuntime>(),
            };
            println!("URL {url}");
            std::future::pending::<()>().await;
        };
        match rt {
            "smol" => <SmolRuntime as Host>::block_on(serve()),
            _ => <TokioRuntime as Host>::block_on(serve()),
        }
        return;
    }
    let o = opts();
    println!(
        "AIP over loopback HTTP ({} s per figure, {} streams; {} cores)",
        o.seconds,
        o.streams,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    <TokioRuntime as Host>::block_on(rpc::<TokioRuntime>(&o));
    <SmolRuntime as Host>::block_on(rpc::<SmolRuntime>(&o));
    <TokioRuntime as Host>::block_on(sdk(&o));
    <TokioRuntime as Host>::block_on(stream::<TokioRuntime>(&o));
    <SmolRuntime as Host>::block_on(stream::<SmolRuntime>(&o));
    <TokioRuntime as Host>::block_on(memory::<TokioRuntime>(&o));
    <SmolRuntime as Host>::block_on(memory::<SmolRuntime>(&o));
}
