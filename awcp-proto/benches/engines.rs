//! Both engines running whole delegations in memory, every message, reply, result body and SSE
//! event encoded to JSON by one side and decoded by the other (`awcp_proto::engine::pair`).
//!
//! `cargo bench -p awcp-proto --features _internal-pair --bench engines`
//!
//! One iteration is one complete lifecycle: INVITE → ACCEPT → START → setup → task → snapshot →
//! `done` → store/apply → ack → both sides released and forgotten. Each lifecycle is measured
//! twice: in wall time (`wall/…`), and in CPU time of the measuring thread (`cpu/…`, from
//! `/proc/thread-self/schedstat`), which stays meaningful on a machine shared with other jobs.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)] // bench code

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use awcp_proto::engine::pair::Pair;
use awcp_proto::{DelegationId, Dialect};

fn lifecycle(dialect: Dialect, n: u64) -> Pair {
    let mut p = Pair::default_pair();
    let id = DelegationId::new(format!("dlg_{n:032x}")).unwrap();
    p.delegate(&id, dialect);
    p.run(1_000);
    assert_eq!(p.executor.live_count(), 0);
    p
}

/// Nanoseconds this thread has spent on a CPU (Linux); `None` elsewhere.
fn thread_cpu() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

fn engines(c: &mut Criterion) {
    let mut g = c.benchmark_group("lifecycle");
    g.throughput(Throughput::Elements(1));
    for (name, dialect) in [("reference", Dialect::Reference), ("seed", Dialect::Seed)] {
        let mut n = 0u64;
        g.bench_function(format!("wall/{name}"), |b| {
            b.iter(|| {
                n += 1;
                lifecycle(dialect, n)
            })
        });
        if thread_cpu().is_some() {
            g.bench_function(format!("cpu/{name}"), |b| {
                b.iter_custom(|iters| {
                    let start = thread_cpu().unwrap();
                    for _ in 0..iters {
                        n += 1;
                        std::hint::black_box(lifecycle(dialect, n));
                    }
                    thread_cpu().unwrap() - start
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, engines);
criterion_main!(benches);
