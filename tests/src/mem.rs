//! Memory and bulk data of the real binaries' tests: a process's peak resident set (running:
//! `VmHWM`; waited: `wait4`'s `ru_maxrss`), and files of bytes deflate cannot shrink.

use std::io::Write;
use std::path::Path;

/// `VmHWM` (peak resident set, KiB) of a running process.
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
