//! Large inline archives are streamed to and from files (no copy of the archive is held in
//! memory), and those files never outlive what they were for — checked on the real binaries:
//! a client vanishing mid-upload, an executor killed with SIGKILL mid-upload and restarted, a
//! daemon restarted over archives a killed predecessor left; and such an archive is checked
//! against its checksum as it is received.

mod zip_support;

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

/// One HTTP/1.0 exchange with the server at `peer` (its `/awcp` URL): the response, head and
/// body, read to its end (a 1.0 response is not chunked: an SSE body arrives as written).
fn exchange(peer: &str, method: &str, path: &str, body: Option<&str>) -> String {
    let hostport = peer
        .trim_start_matches("http://")
        .trim_end_matches("/awcp")
        .to_owned();
    let mut c = TcpStream::connect(&hostport).unwrap();
    c.set_read_timeout(Some(DEADLINE)).unwrap();
    let body = body.unwrap_or("");
    write!(
        c,
        "{method} {path} HTTP/1.0\r\nHost: {hostport}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out)
        .expect("the response ends (before the deadline)");
    String::from_utf8_lossy(&out).into_owned()
}

/// The real executor checks a large inline archive against START's checksum, with the hash
/// taken as the archive is received: on the receiving thread for its first MiB, then on a
/// thread of its own. The same 4 MB archive runs its task with its own checksum and is
/// refused (`CHECKSUM_MISMATCH`, no task, no archive file left) with the checksum of other
/// bytes.
#[test]
fn a_large_inline_archive_is_checked_against_its_checksum() {
    use sha2::Digest as _;
    let dir = tempfile::tempdir().unwrap();
    let (child, peer) = bins::spawn_announcing(
        &mut bins::executor_command(dir.path(), "true"),
        bins::EXECUTOR_ANNOUNCES,
    );
    let _ex = KillOnDrop(child);
    let zip = zip_support::random_file_zip("workspace/big.bin", 4_000_000, 0x2545_F491_4F6C_DD1D);
    // Well over the switch to a hashing thread (1 MiB), so that pieces go to it however the
    // body is cut.
    assert!(zip.len() > 3 << 20);
    let hex = |b: &[u8]| -> String {
        sha2::Sha256::digest(b)
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect()
    };
    let own = hex(&zip);
    let mut other = zip.clone();
    *other.last_mut().unwrap() ^= 1;
    let wrong = hex(&other);
    let b64 = awcp_transports::archive::encode_base64(&zip);
    let downloads = dir.path().join("state/downloads");
    for (id, checksum, matches) in [
        ("dlg_1a2b3c4d5e6f708192a3b4c5d6e7f801", &own, true),
        ("dlg_2b3c4d5e6f708192a3b4c5d6e7f8019a", &wrong, false),
    ] {
        let invite = format!(
            r#"{{"version":"1","type":"INVITE","delegationId":"{id}","task":{{"description":"A task","prompt":"p"}},"lease":{{"ttlSeconds":1800,"accessMode":"rw"}},"environment":{{"resources":[{{"name":"workspace","type":"fs","mode":"rw"}}]}},"requirements":{{"transport":"archive"}}}}"#
        );
        let r = exchange(&peer, "POST", "/awcp", Some(&invite));
        assert!(r.starts_with("HTTP/1.0 200") && r.contains("ACCEPT"), "{r}");
        let start = format!(
            r#"{{"version":"1","type":"START","delegationId":"{id}","lease":{{"expiresAt":"2099-01-01T00:00:00.000Z","accessMode":"rw"}},"transportHandle":{{"transport":"archive","workspaceBase64":"{b64}","checksum":"{checksum}"}}}}"#
        );
        let r = exchange(&peer, "POST", "/awcp", Some(&start));
        assert!(r.starts_with("HTTP/1.0 200"), "{r}");
        let events = exchange(&peer, "GET", &format!("/awcp/tasks/{id}/events"), None);
        if matches {
            assert!(
                events.contains(r#""type":"done""#) && !events.contains("CHECKSUM_MISMATCH"),
                "its own checksum: {events}"
            );
        } else {
            assert!(
                events.contains("CHECKSUM_MISMATCH") && !events.contains(r#""type":"done""#),
                "another checksum: {events}"
            );
        }
    }
    wait_for("no archive file left", || {
        files(&downloads, ".awcp-start-").is_empty()
    });
}
