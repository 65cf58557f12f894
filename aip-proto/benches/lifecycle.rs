#![allow(clippy::disallowed_methods)] // a benchmark measures wall-clock time
//! Engine-only throughput, JSON included (no network): `cargo bench -p aip-proto --bench lifecycle`
//! (`-- --seconds N` per measurement, default 3; `-- --profile N` runs N partner lifecycles
//! as `partner/rpc_lifecycle` and nothing else, for `valgrind --tool=callgrind` or `perf`;
//! `--profile-fresh N` the same as `partner/rpc_lifecycle_fresh_engine`, `--profile-pair N`
//! as `leader+partner/rpc_lifecycle`).
//!
//! Each figure is reported twice: per wall-clock second, and per second of CPU time of the
//! measuring thread (from `/proc/thread-self/schedstat`), which stays meaningful on a shared,
//! loaded machine: "per core" means per CPU-second.
//!
//! * `partner/rpc_lifecycle`: what a partner server does per task: decode an `rpc` start,
//!   accept it, the application moves it to awaiting-completion with one product, encode the
//!   reply; decode the `complete`, encode the final reply. One long-lived partner at its task
//!   capacity (10,000 ended tasks kept; each new task purges the oldest), as a serving partner
//!   runs.
//! * `partner/rpc_lifecycle_fresh_engine`: the same on a new partner per 10,000 tasks, dropped
//!   after them (the first method: each lifecycle also pays a share of dropping a whole
//!   engine and of growing its tables).
//! * `leader+partner/rpc_lifecycle`: both engines, every message encoded and decoded: the
//!   leader starts, the partner answers awaiting-completion, the leader completes, the
//!   partner answers completed, the leader sees the task end.
//! * `codec/*`: single messages.
//!
//! Figures and how to read them: `BENCHMARKS.md`.

use std::time::Instant;

use aip_proto::engine::RequestId;
use aip_proto::leader::{
    Leader, LeaderConfig, LeaderInput, LeaderOutput, PartnerEndpoint, StartTask,
};
use aip_proto::partner::{Partner, PartnerConfig, PartnerEvent, PartnerInput, PartnerOutput};
use aip_proto::*;

const BATCH: usize = 10_000;
const RANGES: usize = 3;

fn t(ms: u64) -> Timestamp {
    Timestamp::from_unix_millis(1_756_699_080_000 + ms)
}

fn start_body(i: usize) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","method":"rpc","id":"{i:05}","params":{{"command":{{"type":"task-command","id":"cmd-s-{i:05}","sentAt":"2025-09-01T03:58:00.123456+00:00","senderRole":"leader","senderId":"leader-aic","dataItems":[{{"type":"text","text":"Plan a three-day trip to Beijing with cultural activities."}}],"sessionId":"session-1","command":"start","taskId":"task-{i:05}"}}}}}}"#
    )
    .into_bytes()
}

fn complete_body(i: usize) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","method":"rpc","id":"c{i:05}","params":{{"command":{{"type":"task-command","id":"cmd-c-{i:05}","sentAt":"2025-09-01T03:59:00.123456+00:00","senderRole":"leader","senderId":"leader-aic","sessionId":"session-1","command":"complete","taskId":"task-{i:05}"}}}}}}"#
    )
    .into_bytes()
}

fn partner() -> Partner {
    Partner::new(PartnerConfig {
        partner_id: "partner-aic".into(),
        keepalive: None,
        ..PartnerConfig::default()
    })
}

/// A leader with one partner, `p`, that speaks v02.
fn leader() -> Leader {
    let mut l = Leader::new(LeaderConfig {
        poll_interval: None,
        ..LeaderConfig::default()
    });
    l.add_partner(
        "p",
        PartnerEndpoint {
            url: "http://p/rpc".into(),
            dialect: Dialect::V2,
        },
    );
    l
}

/// The id of task number `i` (as the bodies carry it).
fn task_id(i: usize) -> String {
    format!("task-{i:05}")
}

/// The request bodies of task number `i` (below 100,000), made as a server has them: fresh
/// and just written (it has read them from the socket), not read from a table of 60,000
/// bodies (36 MB, out of every cache: a sixth of the cache misses of a lifecycle were the
/// bench reading its own input; BENCHMARKS.md, 2026-11-28).
struct Bodies {
    start: Vec<u8>,
    complete: Vec<u8>,
    /// Where the five digits of the task number are, in each.
    start_digits: Vec<usize>,
    complete_digits: Vec<usize>,
}

impl Bodies {
    fn new() -> Self {
        // The digits are where the bodies of tasks 0 and 11111 differ.
        let digits = |a: &[u8], b: &[u8]| -> Vec<usize> {
            assert_eq!(a.len(), b.len());
            (0..a.len()).filter(|&k| a[k] != b[k]).collect()
        };
        let (start, complete) = (start_body(0), complete_body(0));
        let start_digits = digits(&start, &start_body(11_111));
        let complete_digits = digits(&complete, &complete_body(11_111));
        assert_eq!((start_digits.len(), complete_digits.len()), (15, 15));
        Bodies {
            start,
            complete,
            start_digits,
            complete_digits,
        }
    }

    fn make(template: &[u8], at: &[usize], i: usize) -> Vec<u8> {
        let mut body = template.to_vec();
        let mut digits = [b'0'; 5];
        let mut n = i;
        for d in digits.iter_mut().rev() {
            *d = b'0' + (n % 10) as u8;
            n /= 10;
        }
        for (k, &p) in at.iter().enumerate() {
            body[p] = digits[k % 5];
        }
        body
    }

    fn start(&self, i: usize) -> Vec<u8> {
        Self::make(&self.start, &self.start_digits, i)
    }

    fn complete(&self, i: usize) -> Vec<u8> {
        Self::make(&self.complete, &self.complete_digits, i)
    }
}

/// `count` lifecycles on a long-lived partner, from lifecycle number `next` on (returned
/// advanced); the clock advances 1 ms a lifecycle. Task ids cycle through `RANGES` ranges of
/// `BATCH`: the partner keeps its default 10,000 ended tasks and purges the oldest for each
/// new one (as a serving partner does), then remembers 10,000 purged starts (a start sent
/// again after its task was purged is answered "purged", not run again), so a range is clean
/// two ranges later.
fn steady_batch(p: &mut Partner, next: usize, bodies: &Bodies, count: usize) -> usize {
    for n in next..next + count {
        let i = n % (RANGES * BATCH);
        std::hint::black_box(partner_task(
            p,
            t(n as u64),
            i,
            bodies.start(i),
            bodies.complete(i),
        ));
    }
    // Every task of the batch started afresh and completed (a start refused because its id
    // was still held would not reach this state).
    let last = task_id((next + count - 1) % (RANGES * BATCH));
    let state = p.snapshot(&last).map(|r| r.status.state);
    assert_eq!(state, Some(TaskState::Completed), "{last}");
    assert!(
        p.snapshot(&task_id((next + count) % (RANGES * BATCH)))
            .is_none()
            || next == 0
    );
    next + count
}

/// Runs the partner side of one task; returns the reply bytes seen (so nothing is optimised
/// away).
fn partner_task(
    p: &mut Partner,
    now: Timestamp,
    i: usize,
    start: Vec<u8>,
    complete: Vec<u8>,
) -> usize {
    let mut bytes = 0;
    p.handle(
        now,
        PartnerInput::Request {
            request: RequestId(2 * i as u64),
            body: start,
        },
    );
    while let Some(o) = p.poll_output() {
        match o {
            PartnerOutput::Event(PartnerEvent::TaskStarted { task_id, .. }) => {
                p.start_working(now, &task_id).unwrap();
                let product = Product::text(
                    "product-1",
                    "Day 1: Forbidden City. Day 2: Great Wall. Day 3: hutongs.",
                );
                p.submit(now, &task_id, vec![product], vec![]).unwrap();
            }
            PartnerOutput::Respond { response, .. } => bytes += response.body.len(),
            _ => {}
        }
    }
    p.handle(
        now,
        PartnerInput::Request {
            request: RequestId(2 * i as u64 + 1),
            body: complete,
        },
    );
    while let Some(o) = p.poll_output() {
        if let PartnerOutput::Respond { response, .. } = o {
            bytes += response.body.len();
        }
    }
    bytes
}

/// Both engines, one task, every message through JSON.
fn both_task(l: &mut Leader, p: &mut Partner, now: Timestamp, i: usize) {
    let id = task_id(i);
    l.start(
        now,
        StartTask::new(
            "p",
            id.clone(),
            "session-1",
            "Plan a three-day trip to Beijing.",
        ),
    )
    .unwrap();
    let mut next = 0u64;
    let mut pending: Vec<LeaderOutput> = std::iter::from_fn(|| l.poll_output()).collect();
    let mut complete_sent = false;
    while let Some(o) = pending.pop() {
        if let LeaderOutput::Send { call, request } = o {
            next += 1;
            p.handle(
                now,
                PartnerInput::Request {
                    request: RequestId(next),
                    body: request.body,
                },
            );
            while let Some(po) = p.poll_output() {
                match po {
                    PartnerOutput::Event(PartnerEvent::TaskStarted { task_id, .. }) => {
                        p.start_working(now, &task_id).unwrap();
                        let product =
                            Product::text("product-1", "Day 1: Forbidden City. Day 2: Great Wall.");
                        p.submit(now, &task_id, vec![product], vec![]).unwrap();
                    }
                    PartnerOutput::Respond { response, .. } => {
                        let input = LeaderInput::Response {
                            call,
                            status: response.status,
                            content_type: Some(response.content_type.into()),
                            body: response.body,
                        };
                        l.handle(now, input);
                    }
                    _ => {}
                }
            }
            if !complete_sent
                && l.task(&id).and_then(|t| t.state) == Some(TaskState::AwaitingCompletion)
            {
                complete_sent = true;
                l.complete(now, &id).unwrap();
            }
            pending.extend(std::iter::from_fn(|| l.poll_output()));
        }
    }
    assert_eq!(
        l.task(&id).and_then(|t| t.state),
        Some(TaskState::Completed)
    );
}

/// On-CPU nanoseconds of this thread (Linux), if readable.
fn cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Runs `op` in batches for about `secs` seconds; prints ops per wall second and per CPU second.
fn measure(name: &str, secs: f64, mut batch: impl FnMut() -> usize) {
    batch(); // warm up
    let (w0, c0) = (Instant::now(), cpu_ns());
    let mut ops = 0usize;
    while w0.elapsed().as_secs_f64() < secs {
        ops += batch();
    }
    let wall = w0.elapsed().as_secs_f64();
    let cpu = match (c0, cpu_ns()) {
        (Some(a), Some(b)) => Some((b - a) as f64 / 1e9),
        _ => None,
    };
    let per_cpu = cpu.map_or("n/a".to_owned(), |c| {
        format!(
            "{:.0}/s per CPU-second ({:.2} µs each)",
            ops as f64 / c,
            c * 1e6 / ops as f64
        )
    });
    println!(
        "{name:<34} {ops:>9} ops  {:>10.0}/s wall   {per_cpu}",
        ops as f64 / wall
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |k: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<f64>().ok())
    };
    if let Some(n) = arg("--profile") {
        // As measured below: one long-lived partner at its task capacity.
        let mut p = partner();
        let bodies = Bodies::new();
        let mut next = 0;
        let n = n as usize;
        while next < n {
            next = steady_batch(&mut p, next, &bodies, (n - next).min(BATCH));
        }
        return;
    }
    if let Some(n) = arg("--profile-fresh") {
        // As `partner/rpc_lifecycle_fresh_engine` (the same bodies, made the same way).
        let bodies = Bodies::new();
        let mut p = partner();
        for i in 0..n as usize {
            if i % BATCH == 0 {
                p = partner();
            }
            let k = i % BATCH;
            partner_task(&mut p, t(i as u64), k, bodies.start(k), bodies.complete(k));
        }
        return;
    }
    if let Some(n) = arg("--profile-pair") {
        // As `leader+partner/rpc_lifecycle`.
        let (mut l, mut p) = (leader(), partner());
        for i in 0..n as usize {
            if i % BATCH == 0 {
                (l, p) = (leader(), partner());
            }
            both_task(&mut l, &mut p, t(i as u64), i % BATCH);
        }
        return;
    }
    if let Some(n) = arg("--profile-decode") {
        let body = start_body(1);
        for _ in 0..n as usize {
            std::hint::black_box(decode_request(std::hint::black_box(&body)).unwrap());
        }
        return;
    }
    if args.iter().any(|a| a == "--list") {
        println!("partner/rpc_lifecycle: bench\nleader+partner/rpc_lifecycle: bench");
        return;
    }
    let secs = arg("--seconds").unwrap_or(3.0);
    let bodies = Bodies::new();
    let mut p = partner();
    let mut next = 0;
    measure("partner/rpc_lifecycle", secs, || {
        next = steady_batch(&mut p, next, &bodies, BATCH);
        BATCH
    });
    // Each measure starts on a clean heap: the steady partner's 10,000 tasks, kept alive
    // through the next measures, changed their figures by tens of per cent from one build to
    // another (BENCHMARKS.md, 2026-11-28).
    drop(p);
    measure("partner/rpc_lifecycle_fresh_engine", secs, || {
        let mut p = partner();
        for i in 0..BATCH {
            std::hint::black_box(partner_task(
                &mut p,
                t(i as u64),
                i,
                bodies.start(i),
                bodies.complete(i),
            ));
        }
        BATCH
    });
    measure("leader+partner/rpc_lifecycle", secs, || {
        let (mut l, mut p) = (leader(), partner());
        for i in 0..BATCH {
            both_task(&mut l, &mut p, t(i as u64), i);
        }
        BATCH
    });
    let start = start_body(1);
    let mut p = partner();
    partner_task(&mut p, t(0), 1, start_body(1), complete_body(1));
    let result = p.snapshot(&task_id(1)).unwrap();
    let id = RpcId::Str("1".into());
    let reply = encode_task_response(&id, &result, Dialect::V2);
    measure(
        &format!("codec/decode_rpc_start ({} B)", start.len()),
        secs / 3.0,
        || {
            for _ in 0..1000 {
                std::hint::black_box(decode_request(std::hint::black_box(&start)).unwrap());
            }
            1000
        },
    );
    measure("codec/serde_json_value_baseline", secs / 3.0, || {
        for _ in 0..1000 {
            std::hint::black_box(
                serde_json::from_slice::<serde_json::Value>(std::hint::black_box(&start)).unwrap(),
            );
        }
        1000
    });
    measure(
        &format!("codec/encode_task_result ({} B)", reply.len()),
        secs / 3.0,
        || {
            for _ in 0..1000 {
                std::hint::black_box(encode_task_response(
                    &id,
                    std::hint::black_box(&result),
                    Dialect::V2,
                ));
            }
            1000
        },
    );
    measure("codec/decode_task_result", secs / 3.0, || {
        for _ in 0..1000 {
            std::hint::black_box(decode_rpc_response(std::hint::black_box(&reply)).unwrap());
        }
        1000
    });
}
