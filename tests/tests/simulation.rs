//! The deterministic simulation: a seed sweep (`AWCP_SIM_SEEDS`, default 10 000; replay one
//! seed with `AWCP_SIM_SEED`) and scenario tests with precise expectations.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use awcp_tests::sim::{replay_command, run_seed, run_seed_traced, SimConfig, World};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// One seed, panics caught and reported with the seed.
fn check_seed(seed: u64) -> Result<(), String> {
    match catch_unwind(AssertUnwindSafe(|| run_seed(seed))) {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(f)) => Err(f.to_string()),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panic".into());
            Err(format!(
                "simulation seed {seed} panicked: {msg}\nreplay: {}",
                replay_command(seed)
            ))
        }
    }
}

#[test]
fn simulation_seeds() {
    if let Some(seed) = env_u64("AWCP_SIM_SEED") {
        let result = run_seed_traced(seed);
        match result {
            Ok(s) => {
                println!("{}", s.trace);
                println!(
                    "seed {seed}: ok, {} steps, ended at {} ms, states {:?}",
                    s.steps, s.end_ms, s.states
                );
            }
            Err(f) => panic!("{f}"),
        }
        return;
    }
    let count = env_u64("AWCP_SIM_SEEDS").unwrap_or(10_000);
    let base = env_u64("AWCP_SIM_SEED_BASE").unwrap_or(0);
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 8);
    let next = AtomicU64::new(0);
    let failures: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count || !failures.lock().unwrap().is_empty() {
                    break;
                }
                let seed = base + i;
                if let Err(msg) = check_seed(seed) {
                    failures.lock().unwrap().push((seed, msg));
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap();
    failures.sort();
    if let Some((_, msg)) = failures.first() {
        panic!("{msg}");
    }
    println!(
        "{count} seeds from {base} passed in {:.1?}",
        started.elapsed()
    );
}

#[test]
fn same_seed_same_run() {
    for seed in [1, 42, 4242, 99_999] {
        let a = run_seed_traced(seed).map(|s| s.trace);
        let b = run_seed_traced(seed).map(|s| s.trace);
        match (a, b) {
            (Ok(a), Ok(b)) => {
                assert!(!a.is_empty());
                assert_eq!(a, b, "seed {seed} is not deterministic");
            }
            (Err(f), _) | (_, Err(f)) => panic!("{f}"),
        }
    }
}

#[allow(dead_code)]
fn quiet(seed: u64) -> World {
    World::new(SimConfig::quiet(seed, 1, 2))
}
