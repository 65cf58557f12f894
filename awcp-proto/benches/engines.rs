//! Both engines running whole delegations in memory, every message, reply, result body and SSE
//! event encoded to JSON by one side and decoded by the other (`awcp_proto::engine::pair`).
//!
//! `cargo bench -p awcp-proto --features _internal-pair --bench engines`
//!
//! One iteration is one complete lifecycle: INVITE → ACCEPT → START → setup → task → snapshot →
//! `done` → store/apply → ack → both sides released and forgotten. Each lifecycle is measured
//! twice: in wall time (`wall/…`), and in CPU time of the measuring thread (`cpu/…`, from
//! `CLOCK_THREAD_CPUTIME_ID`), which stays meaningful on a machine shared with other jobs.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)] // bench code

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use awcp_proto::engine::pair::Pair;
use awcp_proto::{DelegationId, Dialect};

/// One whole delegation through `p`'s two engines, which live on across lifecycles as they do
/// in a daemon (both have forgotten the delegation when this returns).
fn lifecycle(p: &mut Pair, dialect: Dialect, n: u64) {
    // `dlg_<n>` without `format!` (the harness's own cost).
    let mut digits = itoa_buf(n);
    digits.insert_str(0, "dlg_");
    let id = DelegationId::new(digits).unwrap();
    p.delegate(&id, dialect);
    p.run(1_000);
    assert!(p.delegator.get(&id).is_none() && p.executor.assignment(&id).is_none());
    // The harness's own logs, kept for tests: not part of an engine's cost.
    p.delegator_events.clear();
    p.executor_events.clear();
    p.captures.clear();
}

/// The decimal digits of `n`.
fn itoa_buf(mut n: u64) -> String {
    let mut out = Vec::with_capacity(24);
    loop {
        out.push(b'0' + (n % 10) as u8);
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap()
}

/// Lifecycles between two fresh pairs. Each lifecycle moves the pair's virtual clock past
/// both sides' retention (days), and timestamps after the year 9999 cannot be written.
const RENEW_EVERY: u64 = 100_000;

/// A fresh pair every [`RENEW_EVERY`] lifecycles.
fn renew_now_and_then(p: &mut Pair, n: u64) {
    if n % RENEW_EVERY == 0 {
        *p = Pair::default_pair();
    }
}

/// CPU time this thread has used (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu() -> Option<Duration> {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only into `t`, a valid timespec we own.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    (r == 0).then(|| Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
}

fn engines(c: &mut Criterion) {
    let mut g = c.benchmark_group("lifecycle");
    g.throughput(Throughput::Elements(1));
    for (name, dialect) in [("reference", Dialect::Reference), ("seed", Dialect::Seed)] {
        let mut n = 0u64;
        let mut p = Pair::default_pair();
        g.bench_function(format!("wall/{name}"), |b| {
            b.iter(|| {
                n += 1;
                renew_now_and_then(&mut p, n);
                lifecycle(&mut p, dialect, n)
            })
        });
        if thread_cpu().is_some() {
            g.bench_function(format!("cpu/{name}"), |b| {
                b.iter_custom(|iters| {
                    let mut spent = Duration::ZERO;
                    let mut start = thread_cpu().unwrap();
                    for _ in 0..iters {
                        n += 1;
                        if n % RENEW_EVERY == 0 {
                            // Not timed: a new pair is not part of a lifecycle.
                            spent += thread_cpu().unwrap() - start;
                            renew_now_and_then(&mut p, n);
                            start = thread_cpu().unwrap();
                        }
                        lifecycle(&mut p, dialect, n);
                    }
                    spent + (thread_cpu().unwrap() - start)
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, engines);
criterion_main!(benches);
