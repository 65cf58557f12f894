//! Memory, CPU and bulk data of the real binaries' tests and benches: a process's peak
//! resident set (running: `VmHWM`, reset by [`reset_peak`]; waited: `wait4`'s `ru_maxrss`), its
//! CPU time (running: [`cpu_ns`], [`children_cpu`]; waited: [`run_with_usage`]), and files of
//! bytes deflate cannot shrink.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `VmHWM` (peak resident set, KiB) of a running process: its peak since it started or since
/// the last [`reset_peak`].
pub fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

/// Spawns `cmd` for [`wait_with_max_rss`]: forked, not `vfork`ed. A child that `exec`s from a
/// `vfork` shares this process's memory until then, and Linux carries that memory's peak into
/// the child's `ru_maxrss`: the figure would be this test process's own peak. After a fork it
/// starts from this process's current resident set, so keep no large buffers at hand when
/// spawning.
pub fn spawn_measured(cmd: &mut std::process::Command) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook does nothing (it only makes std fork instead of vfork).
    unsafe { cmd.pre_exec(|| Ok(())) };
    cmd.spawn().expect("the measured command starts")
}

/// Waits for `child` (spawned by [`spawn_measured`]) and returns its exit code and peak RSS
/// in KiB (`wait4`'s `ru_maxrss`).
pub fn wait_with_max_rss(child: std::process::Child) -> (Option<i32>, u64) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our own unwaited child; the pointers are valid for the call.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    std::mem::forget(child); // reaped above
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    (code, u64::try_from(usage.ru_maxrss).unwrap_or(0))
}

/// Resets the peak resident set of running process `pid` that [`vm_hwm_kib`] reads
/// (`/proc/PID/clear_refs`); ignored where that cannot be written.
pub fn reset_peak(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// What one process cost: wall time, peak RSS (KiB) and CPU time (user + system).
pub struct Usage {
    pub took: Duration,
    pub rss_kib: u64,
    pub cpu: Duration,
}

/// Runs `cmd` to completion (stdout discarded), measuring its wall time, peak RSS and CPU
/// time. Panics with its stderr unless it exits 0.
// The child is reaped by `wait4` (which `Child::wait` cannot do: it has no `rusage`).
#[allow(clippy::zombie_processes)]
pub fn run_with_usage(cmd: &mut Command) -> Usage {
    let t = Instant::now();
    // Forked, not vforked: `ru_maxrss` is then the child's own peak (see `spawn_measured`).
    let child = spawn_measured(cmd.stdout(Stdio::null()).stderr(Stdio::piped()));
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: `rusage` is plain data that `wait4` fills; `pid` is our child, waited once.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let took = t.elapsed();
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    if !ok {
        let mut err = String::new();
        if let Some(mut e) = child.stderr {
            let _ = e.read_to_string(&mut err);
        }
        panic!("{cmd:?} failed ({status}):\n{err}");
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Usage {
        took,
        rss_kib: usage.ru_maxrss as u64,
        cpu: tv(usage.ru_utime) + tv(usage.ru_stime),
    }
}

/// CPU time `pid` has used (all its threads, those gone too), in nanoseconds: the process's
/// CPU-time clock, read to the nanosecond (`/proc/PID/stat` counts in 10 ms ticks, too coarse
/// for a figure near 1 ms per delegation).
pub fn cpu_ns(pid: u32) -> u64 {
    let mut clock: libc::clockid_t = 0;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: both out-pointers are valid for writes of their types.
    unsafe {
        assert_eq!(
            libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock),
            0,
            "the CPU clock of {pid}"
        );
        assert_eq!(
            libc::clock_gettime(clock, &mut ts),
            0,
            "reading the CPU clock of {pid}"
        );
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time (user + system) of the children `pid` has waited for (`/proc/PID/stat`'s
/// `cutime` and `cstime`, in clock ticks).
pub fn children_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command's name (which may hold spaces) start at the state (3rd).
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let ticks = f[16 - 3] + f[17 - 3];
    Duration::from_nanos(ticks * 1_000_000_000 / hz)
}

/// Writes `len` bytes (a multiple of 1 MiB) that deflate cannot shrink (xorshift from `seed`)
/// to `path`, a chunk at a time.
pub fn write_noise(path: &Path, len: usize, seed: u64) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut x = seed | 1;
    let mut chunk = vec![0u8; 1 << 20];
    for _ in 0..len / chunk.len() {
        for w in chunk.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.copy_from_slice(&x.to_le_bytes());
        }
        f.write_all(&chunk).unwrap();
    }
    f.flush().unwrap();
}
