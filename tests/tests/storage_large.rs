//! A 1 GiB workspace through the storage transport on the real binaries and a real
//! S3-compatible server: memory stays flat in the workspace's size in the delegator (peak
//! RSS of `awcp delegate`, from the kernel's accounting of the waited child) and in the
//! executor (its `VmHWM`), both under 32 MiB, while the workspace goes up in multipart parts,
//! comes down streamed with its checksum checked, and the result comes back and is applied.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use awcp_tests::bins::{self, KillOnDrop};
use awcp_tests::s3::{self, S3Server};

const BUCKET: &str = "awcp-large";
/// The workspace: this many files of [`FILE`] bytes each (1 GiB).
const FILES: usize = 16;
const FILE: usize = 64 << 20;
/// The budget per process.
const MAX_RSS_KIB: u64 = 32 * 1024;

/// Writes `len` bytes that deflate cannot shrink (xorshift) to `path`, a chunk at a time.
fn write_noise(path: &Path, len: usize, seed: u64) {
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

/// `VmHWM` (peak resident set, KiB) of a running process.
fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

/// Waits for `child` and returns its exit code and peak RSS in KiB (`wait4`'s `ru_maxrss`).
fn wait_with_max_rss(child: std::process::Child) -> (Option<i32>, u64) {
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

#[test]
fn a_1_gib_workspace_keeps_both_sides_under_32_mib() {
    if !s3::require_or_skip("a_1_gib_workspace_keeps_both_sides_under_32_mib") {
        return;
    }
    let server = S3Server::start();
    server.create_bucket(BUCKET);
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent.sh");
    std::fs::write(&agent, "echo \"agent was here\" > RESULT.txt\n").unwrap();
    let mut cmd = bins::executor_command(dir.path(), &format!("sh {}", agent.display()));
    let (ex, peer) = bins::spawn_announcing(&mut cmd, bins::EXECUTOR_ANNOUNCES);
    let ex = KillOnDrop(ex);

    let ws = tempfile::tempdir().unwrap();
    for i in 0..FILES {
        write_noise(
            &ws.path().join(format!("blob-{i:02}.bin")),
            FILE,
            i as u64 + 7,
        );
    }
    let state = tempfile::tempdir().unwrap();
    let child = Command::new(bins::path("awcp"))
        .args(["--quiet", "delegate"])
        .arg(ws.path())
        .args([
            "--peer",
            &peer,
            "--prompt",
            "edit",
            "--transport",
            "storage",
        ])
        // The default caps would refuse 1 GiB: this test is about memory, not admission.
        .args(["--max-total-bytes", &(2u64 << 30).to_string()])
        .args(["--max-file-bytes", &(1u64 << 30).to_string()])
        .arg("--state-dir")
        .arg(state.path())
        .env("AWS_ACCESS_KEY_ID", &server.access_key)
        .env("AWS_SECRET_ACCESS_KEY", &server.secret_key)
        .env("AWS_REGION", &server.region)
        .env("AWS_ENDPOINT_URL", &server.endpoint)
        .env("AWCP_S3_BUCKET", BUCKET)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let (code, delegator_kib) = wait_with_max_rss(child);
    assert_eq!(code, Some(0), "the delegation completed and was applied");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("RESULT.txt")).unwrap(),
        "agent was here\n"
    );
    let executor_kib = vm_hwm_kib(ex.0.id());
    eprintln!("peak RSS: delegator {delegator_kib} KiB, executor {executor_kib} KiB");
    assert!(
        delegator_kib < MAX_RSS_KIB,
        "delegator peak RSS {delegator_kib} KiB"
    );
    assert!(
        executor_kib < MAX_RSS_KIB,
        "executor peak RSS {executor_kib} KiB"
    );
    assert_eq!(server.object_keys(BUCKET), Vec::<String>::new());
}
