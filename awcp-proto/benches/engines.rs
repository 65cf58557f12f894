//! Both engines running whole delegations in memory, every message, reply, result body and SSE
//! event encoded to JSON by one side and decoded by the other (`awcp_proto::engine::pair`).
//!
//! `cargo bench -p awcp-proto --features _internal-pair --bench engines`
//!
//! One iteration is one complete lifecycle: INVITE → ACCEPT → START → setup → task → snapshot →
//! `done` → store/apply → ack → both sides released and forgotten.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)] // test code

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use awcp_proto::engine::pair::Pair;
use awcp_proto::{DelegationId, Dialect};

fn lifecycle(dialect: Dialect, n: u64) -> Pair {
    let mut p = Pair::default_pair();
    let id = DelegationId::new(format!("dlg_{n:032x}")).unwrap_or_else(|_| unreachable!());
    p.delegate(&id, dialect);
    p.run(1_000);
    p
}

fn engines(c: &mut Criterion) {
    let mut g = c.benchmark_group("lifecycle");
    g.throughput(Throughput::Elements(1));
    for (name, dialect) in [("reference", Dialect::Reference), ("seed", Dialect::Seed)] {
        let mut n = 0u64;
        g.bench_function(name, |b| {
            b.iter(|| {
                n += 1;
                lifecycle(dialect, n)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, engines);
criterion_main!(benches);
