//! The WebSocket tunnel beside direct (issue 51): the same delegations to one release
//! `awcp-executor`, once at its own listener and once through one `awcp-relay` it dials
//! (`--tunnel ws://…/tunnel`), in the same run. Goal: the tunnel costs at most 1.3× the direct
//! wall time, and memory stays flat as the workspace grows.
//!
//! ```sh
//! cargo bench -p awcp-tests --bench tunnel              # every row
//! cargo bench -p awcp-tests --bench tunnel -- tiny      # rows whose name contains "tiny"
//! AWCP_BIN_DIR=/other/target/release cargo bench -p awcp-tests --bench tunnel
//! ```
//!
//! Rows: `tiny-direct`, `tiny-tunnel` (two small files, n = 20 each) and `51mib-direct`,
//! `51mib-tunnel` (51 MiB of incompressible data in 550 files, inline archive: the default
//! transport; n = 5 each). The executor runs the built-in demo task (it writes
//! `AWCP_NOTES.md`, so every delegation brings a snapshot back and applies it; checked, and
//! removed after each run). After warm-up runs, the runs of a size **alternate** direct and
//! tunnel, so that a change of load on the machine falls on both rows alike.
//!
//! Per row: median and p95 wall time of whole `awcp delegate` processes; peak RSS of `awcp`
//! (`wait4`'s `ru_maxrss`), of the executor and of the relay (`VmHWM`, reset through
//! `/proc/PID/clear_refs` before each run, the row's figure the largest after any of its
//! runs); CPU time per delegation of each process (`awcp`: `wait4`; the long-lived ones: their
//! CPU-time clocks). Then the ratio tunnel / direct of the medians for each size.
//!
//! Without `--bench` (as `cargo test --benches` runs it) every row runs once, on 1 MiB.
//! Everything runs on 127.0.0.1 (port 0) under one temporary directory; every process the
//! bench starts is killed and reaped when it ends.
//!
//! Helpers shared with `delegations.rs` are in `support` and [`awcp_tests::mem`]; the relay's
//! in [`awcp_tests::relay`].

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use awcp_tests::bins::{self, KillOnDrop};
use awcp_tests::mem::{cpu_ns, reset_peak, run_with_usage, vm_hwm_kib};
use awcp_tests::relay::{self, registry, wait_served};
use support::{delegate_cmd, median, ms, p95, tiny_workspace, workspace};

mod support;

const NAME: &str = "bench";
const TOKEN: &str = "bench-tunnel-token";

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The processes under test: one relay, one executor serving at its listener and through the
/// relay.
struct Setup {
    executor: KillOnDrop,
    relay: KillOnDrop,
    direct: String,
    tunnel: String,
}

fn start(dir: &Path) -> Setup {
    std::fs::create_dir_all(dir).unwrap();
    let reg = registry(dir, &[(NAME, TOKEN)]);
    let (relay, url) = relay::spawn(&mut relay::command(&reg, "127.0.0.1:0"));
    let addr = url.trim_start_matches("http://").trim_end_matches('/');
    let token_file = dir.join("tunnel.token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let exdir = dir.join("executor");
    let (executor, direct) = bins::spawn_announcing(
        Command::new(bins::path("awcp-executor"))
            .args(["--listen", "127.0.0.1:0", "--quiet", "--demo"])
            // Inline bodies of the 51 MiB row (as base64).
            .args(["--max-body-bytes", "1000000000"])
            .arg("--work-root")
            .arg(exdir.join("work"))
            .arg("--state-dir")
            .arg(exdir.join("state"))
            .arg("--tunnel")
            .arg(format!("ws://{addr}/tunnel"))
            .arg("--tunnel-token-file")
            .arg(&token_file),
        bins::EXECUTOR_ANNOUNCES,
    );
    let executor = KillOnDrop(executor);
    wait_served(addr, NAME);
    Setup {
        executor,
        relay,
        direct,
        tunnel: format!("http://{addr}/e/{NAME}/awcp"),
    }
}

/// One row's figures, gathered over its runs.
#[derive(Default)]
struct Row {
    times: Vec<Duration>,
    awcp_kib: u64,
    executor_kib: u64,
    relay_kib: u64,
    awcp_cpu: Duration,
    executor_cpu_ns: u64,
    relay_cpu_ns: u64,
}

impl Row {
    fn median_ms(&mut self) -> f64 {
        ms(median(&mut self.times))
    }

    fn line(&mut self, name: &str, what: &str) -> String {
        let n = self.times.len();
        let per = |ns: u64| ns as f64 / 1e6 / n as f64;
        format!(
            "| {name}: {what}, n={n} | {:.1} ms | {:.1} ms | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} / {:.1} / {:.1} ms |",
            self.median_ms(),
            ms(p95(&mut self.times)),
            mib(self.awcp_kib),
            mib(self.executor_kib),
            mib(self.relay_kib),
            ms(self.awcp_cpu) / n as f64,
            per(self.executor_cpu_ns),
            per(self.relay_cpu_ns),
        )
    }
}

/// One delegation of `ws` to `peer`, its figures added to `row`.
fn measure(s: &Setup, row: &mut Row, state: &Path, ws: &Path, peer: &str) {
    let (ex, relay) = (s.executor.0.id(), s.relay.0.id());
    reset_peak(ex);
    reset_peak(relay);
    let (e0, r0) = (cpu_ns(ex), cpu_ns(relay));
    let mut cmd = delegate_cmd(state, ws, peer);
    let u = run_with_usage(cmd.args(["--max-total-bytes", "1000000000"]));
    row.executor_cpu_ns += cpu_ns(ex) - e0;
    row.relay_cpu_ns += cpu_ns(relay) - r0;
    row.executor_kib = row.executor_kib.max(vm_hwm_kib(ex));
    row.relay_kib = row.relay_kib.max(vm_hwm_kib(relay));
    row.awcp_kib = row.awcp_kib.max(u.rss_kib);
    row.awcp_cpu += u.cpu;
    row.times.push(u.took);
    forget_notes(ws);
}

/// The demo task's note came back and was applied; removed for the next run.
fn forget_notes(ws: &Path) {
    let notes = ws.join("AWCP_NOTES.md");
    assert!(notes.exists(), "the demo task's snapshot was not applied");
    std::fs::remove_file(notes).unwrap();
}

/// The rows of one size: `warm` warm-up runs each way, then `n` runs of each, alternating.
/// Returns the ratio tunnel / direct of the medians (when both rows ran).
#[allow(clippy::too_many_arguments)]
fn size(
    s: &Setup,
    dir: &Path,
    ws: &Path,
    (label, what): (&str, &str),
    n: usize,
    warm: usize,
    wants: &dyn Fn(&str) -> bool,
    out: &mut Vec<String>,
) -> Option<f64> {
    let names = [format!("{label}-direct"), format!("{label}-tunnel")];
    let peers = [&s.direct, &s.tunnel];
    let on: Vec<bool> = names.iter().map(|n| wants(n)).collect();
    let states = [dir.join("delegator-direct"), dir.join("delegator-tunnel")];
    let mut rows = [Row::default(), Row::default()];
    let mut scratch = Row::default();
    for _ in 0..warm {
        for k in (0..2).filter(|&k| on[k]) {
            measure(s, &mut scratch, &states[k], ws, peers[k]);
        }
    }
    for _ in 0..n {
        for k in (0..2).filter(|&k| on[k]) {
            measure(s, &mut rows[k], &states[k], ws, peers[k]);
        }
    }
    for k in (0..2).filter(|&k| on[k]) {
        let line = rows[k].line(&names[k], what);
        println!("{line}");
        out.push(line);
    }
    (on[0] && on[1]).then(|| rows[1].median_ms() / rows[0].median_ms())
}

fn main() {
    let (quick, filter) = support::args();
    let wants = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    let root = tempfile::tempdir().expect("a temporary directory");
    support::print_binaries();
    let s = start(&root.path().join("procs"));
    println!("direct: {}  tunnel: {}", s.direct, s.tunnel);
    println!(
        "idle RSS before the rows: executor {:.1} MiB, relay {:.1} MiB",
        mib(vm_hwm_kib(s.executor.0.id())),
        mib(vm_hwm_kib(s.relay.0.id())),
    );
    let header = "| row | median | p95 | `awcp` peak RSS | executor peak RSS | relay peak RSS | CPU per delegation `awcp` / executor / relay |\n|---|---:|---:|---:|---:|---:|---|";
    println!("{header}");
    let mut out = Vec::new();
    let mut ratios = Vec::new();
    if wants("tiny-direct") || wants("tiny-tunnel") {
        let dir = root.path().join("tiny");
        let ws = tiny_workspace(&dir, "ws");
        let (n, warm) = if quick { (1, 0) } else { (20, 3) };
        let what = ("tiny", "2 small files");
        if let Some(r) = size(&s, &dir, &ws, what, n, warm, &wants, &mut out) {
            ratios.push(("tiny", r));
        }
    }
    if wants("51mib-direct") || wants("51mib-tunnel") {
        let dir = root.path().join("51mib");
        let (m, n, warm) = if quick { (1, 1, 0) } else { (51, 5, 1) };
        let ws = workspace(&dir, "ws", m << 20, 550);
        let what = format!("{m} MiB in 550 incompressible files, inline archive");
        if let Some(r) = size(&s, &dir, &ws, ("51mib", &what), n, warm, &wants, &mut out) {
            ratios.push(("51mib", r));
        }
    }
    println!("\n{header}");
    for line in &out {
        println!("{line}");
    }
    for (label, r) in &ratios {
        let verdict = if *r <= 1.3 { "meets" } else { "misses" };
        println!("ratio tunnel / direct ({label}, medians): {r:.2}× ({verdict} the 1.3× goal)");
    }
    drop(s); // kills and reaps the executor, then the relay
}
