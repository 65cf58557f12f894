//! The `storage` transport (docs/WIRE.md §3.3, §11.4) against the TypeScript reference's
//! `@awcp/transport-storage` (its `dev` branch, built by `reference_support`), both ways:
//!
//! - our delegator (`awcp delegate --transport storage`, S3 through a signature-checking
//!   s3s-fs) facing a reference executor with `StorageExecutorTransport`: the executor GETs the
//!   presigned workspace URL, checks the checksum, PUTs its result to the presigned upload URL
//!   and names it in `{"resultUrl"}`; our delegator applies the result (read from its own
//!   object) and leaves the bucket empty;
//! - the reference `DelegatorService` with `StorageDelegatorTransport` and its `local` provider
//!   facing our `awcp-executor`: the provider only writes `<localDir>/workspaces/<id>.zip` and
//!   names URLs under an endpoint nothing serves, so the test serves `localDir` itself (a tiny
//!   GET/PUT file server on loopback, logging every request); our executor must download and
//!   check the workspace, PUT its result there, and report `{"resultUrl": uploadUrl}`, which
//!   the reference delegator then applies to its workspace. With the workspace ZIP tampered
//!   with on its way, our executor must refuse it (checksum) and PUT nothing.
//!
//! Skipped with a notice where the reference cannot be built (unless
//! `AWCP_REQUIRE_REFERENCE_TEST=1`) or s3s-fs is missing (unless `AWCP_REQUIRE_S3_TEST=1`).
//! Everything binds 127.0.0.1; every process is killed when its test ends.

#[allow(dead_code)] // Not every helper is used by every test file including it.
mod reference_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use awcp_tests::bins::{self, show, KillOnDrop};
use awcp_tests::s3::{self, S3Server};
use reference_support::{answers_to, json_line, reference_dev, run_bounded};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const BUCKET: &str = "awcp-ref-storage";

/// The longest a CLI command may run.
const CLI_LIMIT: Duration = Duration::from_secs(60);

/// How long the reference executor's log may lag behind what a finished command did.
const LOG_LAG: Duration = Duration::from_secs(10);

/// A workspace of `a.txt` (`A`) and `sub/b.txt` (`B`).
fn workspace() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.txt"), "A\n").unwrap();
    std::fs::create_dir(d.path().join("sub")).unwrap();
    std::fs::write(d.path().join("sub/b.txt"), "B\n").unwrap();
    d
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("<{}: {e}>", path.display()))
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The names of the entries of the ZIP `bytes`.
fn zip_names(bytes: &[u8]) -> Vec<String> {
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(bytes)).expect("a ZIP");
    let mut names: Vec<String> = (0..z.len())
        .map(|i| z.by_index(i).unwrap().name().to_owned())
        .collect();
    names.sort();
    names
}

/// The text of entry `name` of the ZIP `bytes`.
fn zip_text(bytes: &[u8], name: &str) -> String {
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(bytes)).expect("a ZIP");
    let mut s = String::new();
    z.by_name(name)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .read_to_string(&mut s)
        .unwrap();
    s
}

// ----- our delegator, the reference's storage executor -----

#[test]
fn our_delegator_runs_a_storage_delegation_on_a_reference_storage_executor() {
    let Some(tree) = reference_dev() else {
        return;
    };
    if !s3::require_or_skip("our_delegator_runs_a_storage_delegation_on_a_reference_executor") {
        return;
    }
    let server = S3Server::start();
    server.create_bucket(BUCKET);
    let ex = tree.start_storage_executor();
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();

    let mut cmd = Command::new(bins::path("awcp"));
    cmd.args(["--quiet", "--json", "delegate"])
        .arg(ws.path())
        .args(["--peer", &ex.url(), "--prompt", "store it"])
        .args(["--transport", "storage", "--state-dir"])
        .arg(state.path())
        .env("AWS_ACCESS_KEY_ID", &server.access_key)
        .env("AWS_SECRET_ACCESS_KEY", &server.secret_key)
        .env("AWS_REGION", &server.region)
        .env("AWS_ENDPOINT_URL", &server.endpoint)
        .env("AWCP_S3_BUCKET", BUCKET)
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_SESSION_TOKEN");
    let o = run_bounded(&mut cmd, CLI_LIMIT);
    assert_eq!(
        o.status.code(),
        Some(0),
        "awcp delegate\n{}\n{}",
        show(&o),
        ex.show()
    );
    let v = json_line(&o, "").unwrap_or_else(|| panic!("no JSON printed\n{}", show(&o)));
    assert_eq!(v["state"], "completed", "{v}\n{}", ex.show());
    let id = v["id"].as_str().expect("an id").to_owned();

    // The agent's file came back; what was lent is still there.
    assert_eq!(
        read(&ws.path().join("storage-agent.txt")),
        "prompt=store it\n",
        "{}",
        ex.show()
    );
    assert_eq!(read(&ws.path().join("a.txt")), "A\n");
    assert_eq!(read(&ws.path().join("sub/b.txt")), "B\n");

    // The reference executor got the workspace through its GET (checksum checked by it) and
    // PUT its result to the upload URL of our handle, which it named.
    let log = ex.log();
    assert!(
        log.contains(&format!("SETUP {id} ok")),
        "setup\n{}",
        ex.show()
    );
    assert!(
        log.contains(&format!("FILES {id} [\"a.txt\",\"sub\"]")),
        "the agent saw the workspace\n{}",
        ex.show()
    );
    let result_url = format!("{}/{BUCKET}/workspaces/{id}-result.zip", server.endpoint);
    let captured = format!("CAPTURE {id} {}", json!({ "resultUrl": result_url }));
    assert!(
        log.lines().any(|l| l == captured),
        "expected {captured:?}\n{}",
        ex.show()
    );
    // A `dev` executor ends the round with round_done: our delegator closed the session.
    assert!(
        ex.wait_for_log(LOG_LAG, |l| !answers_to(l, "CLOSE").1.is_empty()),
        "no CLOSE\n{}",
        ex.show()
    );
    let (received, statuses) = answers_to(&ex.log(), "CLOSE");
    assert_eq!((received, statuses), (1, vec![200]), "{}", ex.show());

    // Both objects (workspace and result) were deleted.
    assert_eq!(
        server.object_keys(BUCKET),
        Vec::<String>::new(),
        "{}",
        show(&o)
    );
}

/// Our delegator without a bucket (the local provider: it serves the two objects itself on
/// its archive listener) → the reference's storage executor, which GETs and PUTs them.
#[test]
fn our_local_provider_serves_a_reference_storage_executor() {
    let Some(tree) = reference_dev() else {
        return;
    };
    let ex = tree.start_storage_executor();
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bins::path("awcp"));
    cmd.args(["--quiet", "--json", "delegate"])
        .arg(ws.path())
        .args(["--peer", &ex.url(), "--prompt", "store it"])
        .args(["--transport", "storage", "--serve-archives", "127.0.0.1:0"])
        .arg("--state-dir")
        .arg(state.path())
        .env_remove("AWCP_S3_BUCKET")
        .env_remove("AWS_ACCESS_KEY_ID");
    let o = run_bounded(&mut cmd, CLI_LIMIT);
    assert_eq!(
        o.status.code(),
        Some(0),
        "awcp delegate\n{}\n{}",
        show(&o),
        ex.show()
    );
    let v = json_line(&o, "").unwrap_or_else(|| panic!("no JSON printed\n{}", show(&o)));
    assert_eq!(v["state"], "completed", "{v}\n{}", ex.show());
    let id = v["id"].as_str().expect("an id").to_owned();
    assert_eq!(
        read(&ws.path().join("storage-agent.txt")),
        "prompt=store it\n",
        "{}",
        ex.show()
    );
    let log = ex.log();
    assert!(log.contains(&format!("SETUP {id} ok")), "{}", ex.show());
    // It named our own object URL as its result.
    let capture = log
        .lines()
        .find(|l| l.starts_with(&format!("CAPTURE {id} ")))
        .unwrap_or_else(|| panic!("no capture\n{}", ex.show()));
    assert!(
        capture.contains("/objects/") && capture.ends_with("/result.zip\"}"),
        "{capture}"
    );
    // Nothing of it is left on our side.
    for dir in ["objects-local", "archives"] {
        let left: Vec<_> = std::fs::read_dir(state.path().join(dir))
            .map(|r| r.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{dir}: {left:?}");
    }
}

// ----- the reference's storage delegator (`local` provider), our executor -----

/// One request [`FileServer`] answered.
#[derive(Clone, Debug)]
struct Served {
    method: String,
    /// The path, query cut off.
    path: String,
    status: u16,
    content_type: Option<String>,
    /// The body sent (GET) or received (PUT).
    body: Vec<u8>,
}

/// A minimal HTTP/1.1 file server over `root` on 127.0.0.1 (what the reference's
/// `LocalStorageProvider` assumes exists at its `endpoint`): `GET`/`HEAD` serve
/// `root/<path>` (404 if missing), `PUT` writes it (parents created). One request per
/// connection (`Connection: close`); bodies by `Content-Length` or chunked; `Expect:
/// 100-continue` honoured. With `tamper`, a GET body gets one byte appended. Every request is
/// logged. Stopped (and its thread joined) when dropped.
struct FileServer {
    endpoint: String,
    log: Arc<Mutex<Vec<Served>>>,
    stop: Arc<AtomicBool>,
    addr: std::net::SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl FileServer {
    fn start(root: &Path, tamper: bool) -> FileServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (root, log2, stop2) = (root.to_path_buf(), Arc::clone(&log), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            let mut conns = Vec::new();
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (root, log) = (root.clone(), Arc::clone(&log2));
                conns.push(std::thread::spawn(move || {
                    if let Some(s) = serve(conn, &root, tamper) {
                        log.lock().unwrap().push(s);
                    }
                }));
            }
            for c in conns {
                let _ = c.join();
            }
        });
        FileServer {
            endpoint: format!("http://{addr}"),
            log,
            stop,
            addr,
            thread: Some(thread),
        }
    }

    fn served(&self) -> Vec<Served> {
        self.log.lock().unwrap().clone()
    }

    /// The log without bodies, for failure messages.
    fn show(&self) -> String {
        self.served()
            .iter()
            .map(|s| {
                format!(
                    "{} {} -> {} ({} bytes, {:?})\n",
                    s.method,
                    s.path,
                    s.status,
                    s.body.len(),
                    s.content_type
                )
            })
            .collect()
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers one request on `conn` (see [`FileServer`]); what it served, `None` for a
/// connection that sent no request (the wake-up at drop, a client giving up).
fn serve(conn: TcpStream, root: &Path, tamper: bool) -> Option<Served> {
    conn.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let mut w = conn.try_clone().ok()?;
    let mut r = BufReader::new(conn);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let target = parts.next()?.to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    if header("expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue")) {
        w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").ok()?;
    }
    let mut body = Vec::new();
    if header("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked")) {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let n = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            if n == 0 {
                // Trailers, then the empty line.
                loop {
                    let mut t = String::new();
                    if r.read_line(&mut t).ok()? == 0 || t.trim_end().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + n, 0);
            r.read_exact(&mut body[start..]).ok()?;
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf).ok()?;
        }
    } else if let Some(n) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(n, 0);
        r.read_exact(&mut body).ok()?;
    }

    let path = target.split('?').next().unwrap_or("").to_owned();
    let file: Option<PathBuf> = (path.starts_with('/')
        && !path.split('/').any(|c| c == ".." || c == "."))
    .then(|| root.join(path.trim_start_matches('/')));
    let (status, sent) = match (method.as_str(), file) {
        (_, None) => (400, Vec::new()),
        ("GET" | "HEAD", Some(f)) => match std::fs::read(&f) {
            Ok(mut bytes) => {
                if tamper {
                    bytes.push(b'!');
                }
                (200, bytes)
            }
            Err(_) => (404, Vec::new()),
        },
        ("PUT", Some(f)) => {
            let ok = f
                .parent()
                .map(std::fs::create_dir_all)
                .unwrap_or(Ok(()))
                .and_then(|()| std::fs::write(&f, &body));
            (if ok.is_ok() { 200 } else { 500 }, Vec::new())
        }
        _ => (405, Vec::new()),
    };
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Internal Server Error",
    };
    let mut head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n",
        sent.len()
    );
    if status == 200 && method != "PUT" {
        head.push_str("Content-Type: application/zip\r\n");
    }
    head.push_str("\r\n");
    w.write_all(head.as_bytes()).ok()?;
    if method != "HEAD" {
        w.write_all(&sent).ok()?;
    }
    w.flush().ok()?;
    Some(Served {
        method: method.clone(),
        path,
        status,
        content_type: header("content-type"),
        body: if method == "PUT" { body } else { sent },
    })
}

/// Our agent: writes `RESULT.txt` and changes `a.txt` (in the resource directory, its cwd).
const AGENT: &str = r#"#!/bin/sh
echo "agent was here: $AWCP_PROMPT" > RESULT.txt
echo "A by the agent" > a.txt
echo "done editing"
"#;

/// Our `awcp-executor` (storage accepted by default) running [`AGENT`]; its directory holds
/// its state, work root, agent and log (stderr).
fn our_executor(dir: &Path) -> (KillOnDrop, String) {
    let agent = dir.join("agent.sh");
    std::fs::write(&agent, AGENT).unwrap();
    let log = std::fs::File::create(dir.join("executor.log")).unwrap();
    let mut cmd = bins::executor_command(dir, &format!("sh {}", agent.display()));
    let (child, url) = bins::spawn_announcing_to(&mut cmd, bins::EXECUTOR_ANNOUNCES, log);
    (KillOnDrop(child), url)
}

/// Everything a failure message needs.
fn context(o: &Output, files: &FileServer, dir: &Path) -> String {
    format!(
        "{}\n--- file server ---\n{}--- our executor's log ---\n{}",
        show(o),
        files.show(),
        read(&dir.join("executor.log"))
    )
}

#[test]
fn a_reference_storage_delegator_with_its_local_provider_runs_on_our_executor() {
    let Some(tree) = reference_dev() else {
        return;
    };
    if !s3::require_or_skip("a_reference_storage_delegator_runs_on_our_executor") {
        return;
    }
    let local = tempfile::tempdir().unwrap();
    let files = FileServer::start(local.path(), false);
    let dir = tempfile::tempdir().unwrap();
    let (_ex, url) = our_executor(dir.path());
    let src = workspace();

    let o = tree.run_storage_delegator(&url, src.path(), local.path(), &files.endpoint);
    let ctx = || context(&o, &files, dir.path());
    let result = json_line(&o, "RESULT ").unwrap_or_else(|| panic!("no RESULT\n{}", ctx()));
    let id = result["id"].as_str().unwrap_or_default().to_owned();
    let served = files.served();

    // What our executor did: GET the workspace (the bytes the handle's checksum is of) …
    let handle = &result["handle"];
    assert_eq!(handle["transport"], "storage", "{result}\n{}", ctx());
    let zip_path = format!("/workspaces/{id}.zip");
    let result_path = format!("/workspaces/{id}-result.zip");
    assert_eq!(
        handle["downloadUrl"],
        format!("{}{zip_path}", files.endpoint),
        "{result}"
    );
    assert_eq!(
        handle["uploadUrl"],
        format!("{}{result_path}", files.endpoint),
        "{result}"
    );
    let gets: Vec<&Served> = served
        .iter()
        .filter(|s| s.method == "GET" && s.path == zip_path)
        .collect();
    assert_eq!(gets.len(), 1, "one download\n{}", ctx());
    assert_eq!(gets[0].status, 200);
    assert_eq!(
        handle["checksum"].as_str(),
        Some(sha256_hex(&gets[0].body).as_str()),
        "the checksum is the served ZIP's"
    );
    // … PUT its result where the handle said (one request, a ZIP of the resource) …
    let puts: Vec<&Served> = served.iter().filter(|s| s.method == "PUT").collect();
    assert_eq!(puts.len(), 1, "one upload\n{}", ctx());
    assert_eq!(puts[0].path, result_path, "{}", ctx());
    assert_eq!(puts[0].status, 200);
    let names = zip_names(&puts[0].body);
    assert!(
        names.iter().any(|n| n == "workspace/RESULT.txt")
            && names.iter().any(|n| n == "workspace/a.txt")
            && names.iter().any(|n| n == "workspace/sub/b.txt"),
        "the result ZIP holds the resource: {names:?}"
    );
    assert_eq!(
        zip_text(&puts[0].body, "workspace/RESULT.txt"),
        "agent was here: storage round\n"
    );
    // … and named it in its snapshot as the reference does: `{"resultUrl": uploadUrl}`.
    let events = result["events"].as_array().cloned().unwrap_or_default();
    let snapshots: Vec<&Value> = events.iter().filter(|e| e["type"] == "snapshot").collect();
    assert_eq!(snapshots.len(), 1, "{result}\n{}", ctx());
    let text: Value = serde_json::from_str(snapshots[0]["snapshotText"].as_str().unwrap_or(""))
        .unwrap_or_else(|e| panic!("snapshot text: {e}\n{result}"));
    assert_eq!(
        text,
        json!({ "resultUrl": format!("{}{result_path}", files.endpoint) }),
        "{result}"
    );
    // Before anyone could read the result, it was there (the PUT came before the event the
    // delegator reacted to with its GET).
    let put_at = served.iter().position(|s| s.method == "PUT");
    let result_get_at = served
        .iter()
        .position(|s| s.method == "GET" && s.path == result_path);
    assert!(
        result_get_at.is_some() && put_at < result_get_at,
        "the reference delegator read the result after our PUT\n{}",
        ctx()
    );

    // The reference delegator completed and applied the result to its workspace.
    assert!(
        o.status.success(),
        "storage-delegator.mjs failed\n{}",
        ctx()
    );
    assert_eq!(result["ok"], true, "{result}");
    assert_eq!(result["state"], "completed", "{result}");
    assert_eq!(result["apply"], "applied", "{result}\n{}", ctx());
    assert_eq!(
        read(&src.path().join("RESULT.txt")),
        "agent was here: storage round\n",
        "{}",
        ctx()
    );
    assert_eq!(read(&src.path().join("a.txt")), "A by the agent\n");
    assert_eq!(read(&src.path().join("sub/b.txt")), "B\n");
    // What it applied is what our executor PUT (the reference releases the two files only
    // when the delegation's retention expires, so they are still in `localDir`).
    assert_eq!(
        std::fs::read(local.path().join(result_path.trim_start_matches('/'))).ok(),
        Some(puts[0].body.clone()),
        "the stored result is the uploaded one"
    );
}

#[test]
fn our_executor_refuses_a_tampered_storage_workspace_from_a_reference_delegator() {
    let Some(tree) = reference_dev() else {
        return;
    };
    if !s3::require_or_skip("our_executor_refuses_a_tampered_storage_workspace") {
        return;
    }
    let local = tempfile::tempdir().unwrap();
    let files = FileServer::start(local.path(), true);
    let dir = tempfile::tempdir().unwrap();
    let (_ex, url) = our_executor(dir.path());
    let src = workspace();

    let o = tree.run_storage_delegator(&url, src.path(), local.path(), &files.endpoint);
    let ctx = || context(&o, &files, dir.path());
    let result = json_line(&o, "RESULT ").unwrap_or_else(|| panic!("no RESULT\n{}", ctx()));
    assert!(!o.status.success(), "{}", ctx());
    assert_eq!(result["state"], "error", "{result}\n{}", ctx());
    let served = files.served();
    assert!(
        served.iter().any(|s| s.method == "GET" && s.status == 200),
        "the workspace was downloaded\n{}",
        ctx()
    );
    assert!(
        !served.iter().any(|s| s.method == "PUT"),
        "nothing may be uploaded\n{}",
        ctx()
    );
    let events = result["events"].as_array().cloned().unwrap_or_default();
    assert!(events.iter().all(|e| e["type"] != "snapshot"), "{result}");
    let error = events
        .iter()
        .find(|e| e["type"] == "error")
        .unwrap_or_else(|| panic!("no error event\n{result}\n{}", ctx()));
    assert!(
        error["message"]
            .as_str()
            .unwrap_or_default()
            .to_ascii_lowercase()
            .contains("checksum"),
        "the error names the checksum: {error}\n{}",
        ctx()
    );
    // The source is untouched.
    assert_eq!(read(&src.path().join("a.txt")), "A\n");
    assert!(!src.path().join("RESULT.txt").exists());
}
