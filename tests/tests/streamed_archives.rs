//! Large inline archives are streamed to and from files (no copy of the archive is held in
//! memory), and those files never outlive what they were for — checked on the real binaries:
//! a client vanishing mid-upload, an executor killed with SIGKILL mid-upload and restarted, a
//! daemon restarted over archives a killed predecessor left.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use awcp_tests::bins::{self, KillOnDrop};

/// Longest any wait may take before the test fails (never reached when things work).
const DEADLINE: Duration = Duration::from_secs(60);

/// Files in `dir` whose names start with `prefix` (none if `dir` does not exist).
fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until `cond` holds, checking the file system every few milliseconds.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Opens `POST /awcp` with a START announcing an 8 MiB archive text and sends the first 4 MiB
/// of it: the executor is then writing the archive's file.
fn start_upload(peer: &str) -> TcpStream {
    let hostport = peer
        .trim_start_matches("http://")
        .trim_end_matches("/awcp")
        .to_owned();
    let head = r#"{"version":"1","type":"START","delegationId":"dlg_0123456789abcdef0123456789abcdef","lease":{"expiresAt":"2030-01-01T00:00:00Z","accessMode":"rw"},"transportHandle":{"transport":"archive","checksum":"00","workspaceBase64":""#;
    let text_len = 8 << 20;
    let tail = r#""}}"#;
    let len = head.len() + text_len + tail.len();
    let mut c = TcpStream::connect(&hostport).unwrap();
    write!(
        c,
        "POST /awcp HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n{head}"
    )
    .unwrap();
    let piece = "QUJD".repeat(16 * 1024);
    for _ in 0..(4 << 20) / piece.len() {
        c.write_all(piece.as_bytes()).unwrap();
    }
    c
}

#[test]
fn an_upload_cut_off_or_killed_mid_way_leaves_no_archive_file() {
    let dir = tempfile::tempdir().unwrap();
    let downloads = dir.path().join("state/downloads");
    let spawn = || {
        let (child, peer) = bins::spawn_announcing(
            &mut bins::executor_command(dir.path(), "true"),
            bins::EXECUTOR_ANNOUNCES,
        );
        (KillOnDrop(child), peer)
    };

    // The client goes away mid-upload: the partial file is removed.
    let (ex, peer) = spawn();
    let c = start_upload(&peer);
    wait_for("the archive file", || {
        !files(&downloads, ".awcp-start-").is_empty()
    });
    drop(c);
    wait_for("the archive file to go", || {
        files(&downloads, ".awcp-start-").is_empty()
    });

    // The executor is killed mid-upload: the file stays behind until the next start.
    let mut c = start_upload(&peer);
    wait_for("the archive file", || {
        !files(&downloads, ".awcp-start-").is_empty()
    });
    drop(ex);
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest); // the connection dies with the process
    assert_eq!(
        files(&downloads, ".awcp-start-").len(),
        1,
        "left by the kill"
    );
    let (_ex, _peer) = spawn();
    assert_eq!(
        files(&downloads, ".awcp-start-"),
        Vec::<PathBuf>::new(),
        "removed before the restarted executor listens"
    );
}

#[test]
fn a_daemon_removes_archives_a_killed_predecessor_left() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("daemon");
    let (daemon, _url) = bins::spawn_daemon(&state);
    drop(KillOnDrop(daemon));
    let archives = state.join("archives");
    std::fs::create_dir_all(&archives).unwrap();
    std::fs::write(archives.join("dlg_x-abc.zip"), b"PK").unwrap();
    let (daemon, _url) = bins::spawn_daemon(&state);
    let _daemon = KillOnDrop(daemon);
    assert!(!archives.exists(), "removed before the daemon listens");
}
