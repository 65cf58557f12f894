//! The deterministic simulation of AIP direct mode: a seed sweep (`AIP_SIM_SEEDS`, default
//! 10 000; replay one seed with `AIP_SIM_SEED`) and scenario tests.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use awcp_tests::aip_sim::{replay_command, run_seed, AipSimConfig, Faults, World};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

type Stats = BTreeMap<&'static str, u64>;

fn check_seed(seed: u64, stats: &mut Stats) -> Result<(), String> {
    match catch_unwind(AssertUnwindSafe(|| run_seed(seed))) {
        Ok(Ok(s)) => {
            for (k, v) in s.stats {
                *stats.entry(k).or_insert(0) += v;
            }
            *stats.entry("seeds").or_insert(0) += 1;
            Ok(())
        }
        Ok(Err(f)) => Err(f.to_string()),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panic".into());
            Err(format!(
                "AIP simulation seed {seed} panicked: {msg}\nreplay: {}",
                replay_command(seed)
            ))
        }
    }
}

#[test]
fn aip_simulation_seeds() {
    if let Some(seed) = env_u64("AIP_SIM_SEED") {
        let mut cfg = AipSimConfig::random(seed);
        cfg.trace = true;
        println!("{cfg:?}");
        let mut w = World::new(cfg);
        let r = w.run();
        println!("{}", w.trace_text());
        match r {
            Ok(s) => println!(
                "seed {seed}: ok, {} steps, ended at {} ms, {:?}",
                s.steps, s.end_ms, s.stats
            ),
            Err(f) => panic!("{f}"),
        }
        return;
    }
    let count = env_u64("AIP_SIM_SEEDS").unwrap_or(10_000);
    let base = env_u64("AIP_SIM_SEED_BASE").unwrap_or(0);
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 8);
    let next = AtomicU64::new(0);
    let failures: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());
    let total: Mutex<Stats> = Mutex::new(Stats::new());
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut stats = Stats::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count || !failures.lock().unwrap().is_empty() {
                        break;
                    }
                    if let Err(msg) = check_seed(base + i, &mut stats) {
                        failures.lock().unwrap().push((base + i, msg));
                    }
                }
                let mut total = total.lock().unwrap();
                for (k, v) in stats {
                    *total.entry(k).or_insert(0) += v;
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
        "{count} AIP seeds from {base} passed in {:.1?}",
        started.elapsed()
    );
    for (k, v) in total.into_inner().unwrap() {
        println!("  {k:>26}: {v}");
    }
}

#[test]
fn same_seed_same_run() {
    for seed in [3, 77, 4242] {
        let run = || {
            let mut cfg = AipSimConfig::random(seed);
            cfg.trace = true;
            World::new(cfg)
                .run()
                .map(|s| s.trace)
                .map_err(|f| f.to_string())
        };
        let (a, b) = (run().unwrap(), run().unwrap());
        assert!(!a.is_empty());
        assert_eq!(a, b, "seed {seed} is not deterministic");
    }
}

fn run(cfg: AipSimConfig) -> World {
    let mut w = World::new(cfg);
    if let Err(f) = w.run() {
        panic!("{f}");
    }
    w
}

#[test]
fn every_delivery_completes_fault_free() {
    for delivery in 0..3 {
        let w = run(AipSimConfig::quiet(11, 4, delivery));
        assert_eq!(w.stats.get("request lost"), None);
        let (delivered, gave_up) = w.check.notifications();
        if delivery == 2 {
            assert!(delivered > 0, "notifications were delivered");
            assert_eq!(gave_up, 0);
        }
        if delivery == 1 {
            assert!(w.stats.get("stream opened").copied().unwrap_or(0) >= 4);
        }
    }
}

#[test]
fn a_storm_of_faults_still_ends_every_task() {
    for seed in 0..40 {
        let mut cfg = AipSimConfig::random(seed);
        cfg.faults = Faults {
            req_loss: 150,
            resp_loss: 150,
            dup: 150,
            slow: 80,
            stream_cut: 300,
            receiver_down: 200,
            notify_resp_loss: 200,
            clock_jump: 50,
        };
        run(cfg);
    }
}
