//! The deterministic simulation of AIP direct mode: a seed sweep (`AIP_SIM_SEEDS`, default
//! 10 000; replay one seed with `AIP_SIM_SEED`) and scenario tests.

use awcp_tests::aip_sim::{replay_command, run_seed, AipSimConfig, Faults, World};
use awcp_tests::sweep::{catch_seed, env_u64, sweep, Stats};

fn check_seed(seed: u64) -> Result<Stats, String> {
    catch_seed(seed, "AIP simulation", &replay_command(seed), || {
        let mut stats = run_seed(seed).map(|s| s.stats).map_err(|f| f.to_string())?;
        stats.insert("seeds", 1);
        Ok(stats)
    })
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
    let started = std::time::Instant::now();
    let total = sweep(count, base, check_seed).unwrap_or_else(|msg| panic!("{msg}"));
    println!(
        "{count} AIP seeds from {base} passed in {:.1?}",
        started.elapsed()
    );
    for (k, v) in total {
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
