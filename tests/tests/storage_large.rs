//! A 1 GiB workspace through the storage transport on the real binaries and a real
//! S3-compatible server: memory stays flat in the workspace's size in the delegator (peak
//! RSS of `awcp delegate`, from the kernel's accounting of the waited child) and in the
//! executor (its `VmHWM`), both under 32 MiB, while the workspace goes up in multipart parts,
//! comes down streamed with its checksum checked, and the result comes back and is applied.

use std::process::{Command, Stdio};

use awcp_tests::bins::{self, KillOnDrop};
use awcp_tests::mem::{spawn_measured, vm_hwm_kib, wait_with_max_rss, write_noise};
use awcp_tests::s3::{self, S3Server};

const BUCKET: &str = "awcp-large";
/// The workspace: this many files of [`FILE`] bytes each (1 GiB).
const FILES: usize = 16;
const FILE: usize = 64 << 20;
/// The budget per process.
const MAX_RSS_KIB: u64 = 32 * 1024;

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
    let child = spawn_measured(
        Command::new(bins::path("awcp"))
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
            .stderr(Stdio::inherit()),
    );
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
