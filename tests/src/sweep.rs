//! The seed sweep both simulations run: seeds on every core, panics caught and reported with
//! the seed and its replay command, the first failure (smallest seed) reported, counters
//! summed.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Counters summed over a sweep.
pub type Stats = BTreeMap<&'static str, u64>;

/// An environment variable as a number.
pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Runs one seed; a panic becomes an error naming the seed and `replay`.
pub fn catch_seed(
    seed: u64,
    what: &str,
    replay: &str,
    run: impl FnOnce() -> Result<Stats, String>,
) -> Result<Stats, String> {
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panic".into());
            Err(format!(
                "{what} seed {seed} panicked: {msg}\nreplay: {replay}"
            ))
        }
    }
}

/// Runs `check` for seeds `base..base + count` on up to 8 threads. Returns the summed
/// counters, or the failure of the smallest failing seed.
pub fn sweep(
    count: u64,
    base: u64,
    check: impl Fn(u64) -> Result<Stats, String> + Sync,
) -> Result<Stats, String> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 8);
    let next = AtomicU64::new(0);
    let failures: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());
    let total: Mutex<Stats> = Mutex::new(Stats::new());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut stats = Stats::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count || !failures.lock().unwrap().is_empty() {
                        break;
                    }
                    match check(base + i) {
                        Ok(s) => {
                            for (k, v) in s {
                                *stats.entry(k).or_insert(0) += v;
                            }
                        }
                        Err(msg) => failures.lock().unwrap().push((base + i, msg)),
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
    match failures.into_iter().next() {
        Some((_, msg)) => Err(msg),
        None => Ok(total.into_inner().unwrap()),
    }
}
