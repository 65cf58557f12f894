//! The executor's side of the `storage` transport against broken and hostile handles, on the
//! real `awcp-executor` and a real signature-checking S3 server (s3s-fs on loopback), driven
//! by hand-written INVITE and START (no delegator in between, so the handle is exactly what a
//! hostile delegator could send): a control delegation that works, a wrong checksum, an
//! expired download URL, URLs past the handle's `expiresAt`, an upload URL the server refuses
//! and a workspace ZIP whose entries escape the work directory. Each case watches the task's
//! SSE stream (opened before START, as a delegator does) and `GET …/result`.
//!
//! Skipped with a message where s3s-fs is not installed, unless `AWCP_REQUIRE_S3_TEST=1` makes
//! that a failure.

mod zip_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use awcp_tests::bins::{self, KillOnDrop};
use awcp_tests::s3::{self, S3Server};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};
use zip_support::{zip_of, Entry};

/// The bucket every case uses.
const BUCKET: &str = "awcp-hostile";
/// Longest any wait may take before the test fails (never reached when things work).
const DEADLINE: Duration = Duration::from_secs(60);
/// How often `GET …/result` is polled.
const POLL: Duration = Duration::from_millis(20);
/// What the agent writes into `RESULT.txt`.
const AGENT_SAYS: &str = "agent was here";

/// An `awcp-executor` on loopback whose agent (`sh agent.sh`) appends a line to the marker
/// file [`Executor::marker`] (outside the work root, so it outlives the work directory) and
/// writes `RESULT.txt` into its working directory. Killed on drop, before its directory goes.
struct Executor {
    _child: KillOnDrop,
    /// `127.0.0.1:PORT`.
    hostport: String,
    dir: tempfile::TempDir,
}

impl Executor {
    fn spawn() -> Executor {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("agent-ran");
        let agent = dir.path().join("agent.sh");
        std::fs::write(
            &agent,
            format!(
                "echo ran >> '{}'\necho '{AGENT_SAYS}' > RESULT.txt\n",
                marker.display()
            ),
        )
        .unwrap();
        let (child, url) = bins::spawn_announcing(
            &mut bins::executor_command(dir.path(), &format!("sh {}", agent.display())),
            bins::EXECUTOR_ANNOUNCES,
        );
        let child = KillOnDrop(child);
        let hostport = url
            .strip_prefix("http://")
            .and_then(|u| u.strip_suffix("/awcp"))
            .unwrap_or_else(|| panic!("an http://HOST:PORT/awcp URL: {url}"))
            .to_owned();
        assert!(hostport.starts_with("127.0.0.1:"), "{hostport}");
        Executor {
            _child: child,
            hostport,
            dir,
        }
    }

    /// How many times the agent ran.
    fn agent_runs(&self) -> usize {
        std::fs::read_to_string(self.dir.path().join("agent-ran"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    /// One HTTP/1.0 exchange (the whole response is read: a 1.0 response is never chunked):
    /// the status and the body.
    fn exchange(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
        let mut c = TcpStream::connect(&self.hostport).unwrap();
        c.set_read_timeout(Some(DEADLINE)).unwrap();
        let body = body.map(Value::to_string).unwrap_or_default();
        write!(
            c,
            "{method} {path} HTTP/1.0\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            self.hostport,
            body.len()
        )
        .unwrap();
        let mut out = Vec::new();
        c.read_to_end(&mut out)
            .expect("the response ends (before the deadline)");
        let out = String::from_utf8_lossy(&out).into_owned();
        let (head, body) = out
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no HTTP head: {out:?}"));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status in {head:?}"));
        (status, body.to_owned())
    }

    /// POSTs an INVITE for `id` asking for the storage transport and one read-write resource
    /// `workspace`; panics unless it is accepted.
    fn invite(&self, id: &str) {
        let invite = json!({
            "version": "1", "type": "INVITE", "delegationId": id,
            "task": {"description": "Hostile storage", "prompt": "write RESULT.txt"},
            "lease": {"ttlSeconds": 1800, "accessMode": "rw"},
            "retentionMs": 604_800_000u64,
            "environment": {"resources": [{"name": "workspace", "type": "fs", "mode": "rw"}]},
            "requirements": {"transport": "storage"},
        });
        let (status, body) = self.exchange("POST", "/awcp", Some(&invite));
        let accept: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!((status, &accept["type"]), (200, &json!("ACCEPT")), "{body}");
    }

    /// POSTs START for `id` with `handle` and a lease ending in 30 min: the HTTP status and
    /// the body as JSON.
    fn send_start(&self, id: &str, handle: Value) -> (u16, Value) {
        let start = json!({
            "version": "1", "type": "START", "delegationId": id,
            "lease": {"expiresAt": iso(SystemTime::now() + Duration::from_secs(1800)),
                      "accessMode": "rw"},
            "transportHandle": handle,
        });
        let (status, body) = self.exchange("POST", "/awcp", Some(&start));
        let body = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        (status, body)
    }

    /// Opens `id`'s SSE stream and returns once its response head arrived (so no event is
    /// missed): a thread that reads the stream to its end (the executor ends it after `done`
    /// or `error`) and returns its events.
    fn events(&self, id: &str) -> JoinHandle<Vec<Value>> {
        let mut c = TcpStream::connect(&self.hostport).unwrap();
        c.set_read_timeout(Some(DEADLINE)).unwrap();
        write!(
            c,
            "GET /awcp/tasks/{id}/events HTTP/1.0\r\nHost: {}\r\nAccept: text/event-stream\r\n\r\n",
            self.hostport
        )
        .unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            c.read_exact(&mut byte).expect("the stream's head");
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        assert!(head.starts_with("HTTP/1.0 200"), "{head}");
        std::thread::spawn(move || {
            let mut text = String::new();
            c.read_to_string(&mut text)
                .expect("the stream ends (before the deadline)");
            text.lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
                .collect()
        })
    }

    /// Polls `GET …/tasks/<id>/result` until the task is `completed` or `error`; returns that
    /// body.
    fn outcome(&self, id: &str) -> Value {
        let start = Instant::now();
        loop {
            let (status, body) = self.exchange("GET", &format!("/awcp/tasks/{id}/result"), None);
            let r: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
            if status == 200 && matches!(r["status"].as_str(), Some("completed" | "error")) {
                return r;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{id} still not finished after {DEADLINE:?}: HTTP {status} {body}"
            );
            std::thread::sleep(POLL);
        }
    }
}

/// A fresh S3 server with [`BUCKET`], if s3s-fs is installed.
fn s3_server() -> S3Server {
    let s3 = S3Server::start();
    s3.create_bucket(BUCKET);
    s3
}

/// A new delegation id, `dlg_` + 32 lowercase hex.
fn delegation_id() -> String {
    let mut rng = awcp_tests::rng::Rng::from_clock();
    format!("dlg_{:016x}{:016x}", rng.next_u64(), rng.next_u64())
}

/// `t` as ISO-8601 UTC with milliseconds, `YYYY-MM-DDTHH:MM:SS.000Z`.
fn iso(t: SystemTime) -> String {
    let d = s3::amz_date(t); // YYYYMMDDTHHMMSSZ
    format!(
        "{}-{}-{}T{}:{}:{}.000Z",
        &d[0..4],
        &d[4..6],
        &d[6..8],
        &d[9..11],
        &d[11..13],
        &d[13..15]
    )
}

/// Lowercase hex SHA-256.
fn sha256_hex(bytes: &[u8]) -> String {
    s3::hex(&Sha256::digest(bytes))
}

/// A `storage` transport handle.
fn storage_handle(download: &str, upload: &str, checksum: &str, expires_at: SystemTime) -> Value {
    json!({
        "transport": "storage",
        "downloadUrl": download,
        "uploadUrl": upload,
        "checksum": checksum,
        "expiresAt": iso(expires_at),
    })
}

/// A per-resource workspace ZIP: `workspace/a.txt`.
fn workspace_zip() -> Vec<u8> {
    zip_of(&[("workspace/a.txt", Entry::File(b"A\n"))])
}

/// The object key of `id`'s workspace and of its result.
fn keys(id: &str) -> (String, String) {
    (
        format!("workspaces/{id}.zip"),
        format!("workspaces/{id}-result.zip"),
    )
}

/// The value of `url`'s `X-Amz-Signature` parameter.
fn signature_of(url: &str) -> &str {
    url.split_once("X-Amz-Signature=")
        .map(|(_, s)| s)
        .expect("a presigned URL")
}

/// Asserts that `text` shows nothing of a presigned URL's query (its signature above all).
fn assert_no_url_secrets(text: &str, urls: &[&str]) {
    assert!(!text.contains("X-Amz-"), "a presigned query shows: {text}");
    for url in urls {
        assert!(
            !text.contains(signature_of(url)),
            "a URL's signature shows: {text}"
        );
    }
}

/// Asserts that `events` ends in exactly one `error` event whose code is `code` (no `done`,
/// no `snapshot`), and returns it.
fn assert_ends_in_error<'a>(events: &'a [Value], code: &str) -> &'a Value {
    let kinds: Vec<_> = events.iter().map(|e| e["type"].as_str()).collect();
    assert!(
        !kinds.contains(&Some("done")) && !kinds.contains(&Some("snapshot")),
        "{events:?}"
    );
    let last = events.last().unwrap_or_else(|| panic!("no events"));
    assert_eq!(last["type"], "error", "{events:?}");
    assert_eq!(last["code"], code, "{events:?}");
    assert_eq!(
        kinds.iter().filter(|k| **k == Some("error")).count(),
        1,
        "{events:?}"
    );
    last
}

/// The control: a correct handle runs the agent, PUTs the result to the upload URL (a new
/// object of the bucket, holding the agent's file and the workspace's) and names that URL in
/// the snapshot event; the task completes.
#[test]
fn a_correct_storage_handle_completes_and_uploads_the_result() {
    if !s3::require_or_skip("a_correct_storage_handle_completes_and_uploads_the_result") {
        return;
    }
    let s3 = s3_server();
    let ex = Executor::spawn();
    let id = delegation_id();
    let (key, result_key) = keys(&id);
    let ws = workspace_zip();
    s3.put_object(BUCKET, &key, &ws);
    let now = SystemTime::now();
    let download = s3.presign("GET", BUCKET, &key, now, 600);
    let upload = s3.presign("PUT", BUCKET, &result_key, now, 600);

    ex.invite(&id);
    let events = ex.events(&id);
    let handle = storage_handle(
        &download,
        &upload,
        &sha256_hex(&ws),
        now + Duration::from_secs(600),
    );
    let (status, body) = ex.send_start(&id, handle);
    assert_eq!((status, &body), (200, &json!({"ok": true})));

    let r = ex.outcome(&id);
    assert_eq!(r["status"], "completed", "{r}");
    let events = events.join().unwrap();
    let snapshot = events
        .iter()
        .find(|e| e["type"] == "snapshot")
        .unwrap_or_else(|| panic!("no snapshot event: {events:?}"));
    let text = snapshot["snapshotBase64"].as_str().expect("snapshotBase64");
    let named: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(named, json!({"resultUrl": upload}));
    assert_eq!(events.last().unwrap()["type"], "done", "{events:?}");

    let mut both = [key, result_key.clone()];
    both.sort();
    assert_eq!(s3.object_keys(BUCKET), both);
    let stored = std::fs::read(s3.root.join(BUCKET).join(&result_key)).unwrap();
    let mut result = zip::ZipArchive::new(std::io::Cursor::new(stored)).unwrap();
    let names: Vec<String> = result.file_names().map(str::to_owned).collect();
    let mut content = |suffix: &str| {
        let name = names
            .iter()
            .find(|n| n.ends_with(suffix))
            .unwrap_or_else(|| panic!("no {suffix} in the result: {names:?}"));
        let mut s = String::new();
        result
            .by_name(name)
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        s
    };
    assert_eq!(content("RESULT.txt"), format!("{AGENT_SAYS}\n"));
    assert_eq!(content("a.txt"), "A\n");
    assert_eq!(ex.agent_runs(), 1);
}

/// A handle whose checksum is not the ZIP's: `CHECKSUM_MISMATCH`, checked before anything is
/// extracted, so the agent never runs and nothing is uploaded.
#[test]
fn a_wrong_checksum_fails_before_the_agent_runs() {
    if !s3::require_or_skip("a_wrong_checksum_fails_before_the_agent_runs") {
        return;
    }
    let s3 = s3_server();
    let ex = Executor::spawn();
    let id = delegation_id();
    let (key, result_key) = keys(&id);
    let ws = workspace_zip();
    s3.put_object(BUCKET, &key, &ws);
    let now = SystemTime::now();
    let download = s3.presign("GET", BUCKET, &key, now, 600);
    let upload = s3.presign("PUT", BUCKET, &result_key, now, 600);
    let mut other = ws.clone();
    *other.last_mut().unwrap() ^= 1;

    ex.invite(&id);
    let events = ex.events(&id);
    let handle = storage_handle(
        &download,
        &upload,
        &sha256_hex(&other),
        now + Duration::from_secs(600),
    );
    assert_eq!(ex.send_start(&id, handle).0, 200);

    let r = ex.outcome(&id);
    assert_eq!(r["status"], "error", "{r}");
    assert_eq!(r["error"]["code"], "CHECKSUM_MISMATCH", "{r}");
    let event = assert_ends_in_error(&events.join().unwrap(), "CHECKSUM_MISMATCH").clone();
    assert_eq!(event["message"], r["error"]["message"]);
    assert_eq!(
        ex.agent_runs(),
        0,
        "the agent ran on an unchecked workspace"
    );
    assert_eq!(s3.object_keys(BUCKET), [key]);
    assert_no_url_secrets(&r.to_string(), &[&download, &upload]);
}

/// A download URL that is correctly signed but already expired (while the handle's
/// `expiresAt` is ahead): S3 answers 403, and the task fails at once with `TRANSPORT_ERROR`
/// saying so, without showing the URL's signature.
#[test]
fn an_expired_download_url_fails_promptly_without_leaking_the_signature() {
    if !s3::require_or_skip("an_expired_download_url_fails_promptly_without_leaking_the_signature")
    {
        return;
    }
    let s3 = s3_server();
    let ex = Executor::spawn();
    let id = delegation_id();
    let (key, result_key) = keys(&id);
    let ws = workspace_zip();
    s3.put_object(BUCKET, &key, &ws);
    let now = SystemTime::now();
    // Signed two minutes ago for one minute.
    let download = s3.presign("GET", BUCKET, &key, now - Duration::from_secs(120), 60);
    let upload = s3.presign("PUT", BUCKET, &result_key, now, 600);

    ex.invite(&id);
    let events = ex.events(&id);
    let handle = storage_handle(
        &download,
        &upload,
        &sha256_hex(&ws),
        now + Duration::from_secs(600),
    );
    let started = Instant::now();
    assert_eq!(ex.send_start(&id, handle).0, 200);
    let r = ex.outcome(&id);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(15), "failed only after {took:?}");
    assert_eq!(r["status"], "error", "{r}");
    assert_eq!(r["error"]["code"], "TRANSPORT_ERROR", "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(message.contains("403"), "{message}");
    assert_no_url_secrets(&r.to_string(), &[&download, &upload]);
    let events = events.join().unwrap();
    let event = assert_ends_in_error(&events, "TRANSPORT_ERROR");
    assert_eq!(event["message"], r["error"]["message"]);
    assert_no_url_secrets(&Value::from(events.clone()).to_string(), &[&download]);
    assert_eq!(ex.agent_runs(), 0);
    assert_eq!(s3.object_keys(BUCKET), [key]);
}

/// A handle whose `expiresAt` has passed (the lease itself runs for 30 min): START is
/// answered with an ERROR `START_EXPIRED`, and nothing runs.
#[test]
fn a_handle_past_its_expiry_is_refused_at_start() {
    if !s3::require_or_skip("a_handle_past_its_expiry_is_refused_at_start") {
        return;
    }
    let s3 = s3_server();
    let ex = Executor::spawn();
    let id = delegation_id();
    let (key, result_key) = keys(&id);
    let ws = workspace_zip();
    s3.put_object(BUCKET, &key, &ws);
    let now = SystemTime::now();
    let download = s3.presign("GET", BUCKET, &key, now, 600);
    let upload = s3.presign("PUT", BUCKET, &result_key, now, 600);

    ex.invite(&id);
    let handle = storage_handle(
        &download,
        &upload,
        &sha256_hex(&ws),
        now - Duration::from_secs(60),
    );
    let (status, body) = ex.send_start(&id, handle);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["type"], "ERROR", "{body}");
    assert_eq!(body["delegationId"], id.as_str(), "{body}");
    assert_eq!(body["code"], "START_EXPIRED", "{body}");

    let r = ex.outcome(&id);
    assert_eq!(r["status"], "error", "{r}");
    assert_eq!(r["error"]["code"], "START_EXPIRED", "{r}");
    assert_eq!(ex.agent_runs(), 0);
    assert_eq!(s3.object_keys(BUCKET), [key]);
}

/// Presigns a PUT of a key at a time (both given) on a server.
type PresignPut = fn(&S3Server, &str, SystemTime) -> String;

/// An upload URL the server refuses — signed with a wrong secret, or expired by the time the
/// result is PUT: the agent ran, but the task ends in `TRANSPORT_ERROR` about the upload (not
/// `completed`), no object is written, and the message shows no signature.
#[test]
fn a_refused_upload_fails_the_task() {
    if !s3::require_or_skip("a_refused_upload_fails_the_task") {
        return;
    }
    let s3 = s3_server();
    let ex = Executor::spawn();
    let now = SystemTime::now();
    let cases: [(&str, PresignPut); 2] = [
        ("wrong secret", |s3, key, now| {
            let wrong = format!("{}x", s3.secret_key);
            s3.presign_with_secret(&wrong, "PUT", BUCKET, key, now, 600)
        }),
        ("expired", |s3, key, now| {
            s3.presign("PUT", BUCKET, key, now - Duration::from_secs(120), 60)
        }),
    ];
    let mut workspaces = Vec::new();
    for (n, (what, upload_url)) in cases.into_iter().enumerate() {
        let id = delegation_id();
        let (key, result_key) = keys(&id);
        let ws = workspace_zip();
        s3.put_object(BUCKET, &key, &ws);
        workspaces.push(key.clone());
        let download = s3.presign("GET", BUCKET, &key, now, 600);
        let upload = upload_url(&s3, &result_key, now);

        ex.invite(&id);
        let events = ex.events(&id);
        let handle = storage_handle(
            &download,
            &upload,
            &sha256_hex(&ws),
            now + Duration::from_secs(600),
        );
        assert_eq!(ex.send_start(&id, handle).0, 200, "{what}");
        let r = ex.outcome(&id);
        assert_eq!(r["status"], "error", "{what}: {r}");
        assert_eq!(r["error"]["code"], "TRANSPORT_ERROR", "{what}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("uploading the result") && message.contains("403"),
            "{what}: {message}"
        );
        assert_no_url_secrets(&r.to_string(), &[&download, &upload]);
        let events = events.join().unwrap();
        assert_ends_in_error(&events, "TRANSPORT_ERROR");
        assert_no_url_secrets(&Value::from(events.clone()).to_string(), &[&upload]);
        assert_eq!(ex.agent_runs(), n + 1, "{what}: the agent ran");
        workspaces.sort();
        assert_eq!(s3.object_keys(BUCKET), workspaces, "{what}");
    }
}

/// Every file or directory under `dir` (recursively) whose name starts with `prefix`.
fn find_named(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with(prefix) {
                found.push(e.path());
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
        }
    }
    found
}

/// A workspace ZIP with an entry that escapes the work directory (`workspace/../../x`,
/// `../x`, `../../../x` up to the temporary directory, an absolute path) is refused as a
/// whole (`SETUP_FAILED` naming the entry): the agent never runs and nothing is written
/// outside the work root.
#[test]
fn a_zip_escaping_the_work_directory_is_refused() {
    if !s3::require_or_skip("a_zip_escaping_the_work_directory_is_refused") {
        return;
    }
    let s3 = s3_server();
    let ex = Executor::spawn();
    let tag = format!("evil-{}", &delegation_id()[4..16]);
    let tmp = std::env::temp_dir();
    let absolute = tmp.join(format!("{tag}-absolute.txt"));
    let names = [
        format!("workspace/../../{tag}-a.txt"),
        format!("../{tag}-b.txt"),
        format!("../../../{tag}-c.txt"),
        absolute.display().to_string(),
    ];
    // Where a naive extractor into `<work>/<id>` would put them.
    let outside = [
        ex.dir.path().join("work").join(format!("{tag}-a.txt")),
        ex.dir.path().join("work").join(format!("{tag}-b.txt")),
        tmp.join(format!("{tag}-c.txt")),
        absolute.clone(),
    ];
    let now = SystemTime::now();
    let mut workspaces = Vec::new();
    for name in &names {
        let id = delegation_id();
        let (key, result_key) = keys(&id);
        let ws = zip_of(&[
            ("workspace/a.txt", Entry::File(b"A\n")),
            (name, Entry::File(b"evil\n")),
        ]);
        let listed: Vec<String> = zip::ZipArchive::new(std::io::Cursor::new(&ws))
            .unwrap()
            .file_names()
            .map(str::to_owned)
            .collect();
        assert!(listed.contains(name), "the ZIP holds {name}: {listed:?}");
        s3.put_object(BUCKET, &key, &ws);
        workspaces.push(key.clone());
        let download = s3.presign("GET", BUCKET, &key, now, 600);
        let upload = s3.presign("PUT", BUCKET, &result_key, now, 600);

        ex.invite(&id);
        let events = ex.events(&id);
        let handle = storage_handle(
            &download,
            &upload,
            &sha256_hex(&ws),
            now + Duration::from_secs(600),
        );
        assert_eq!(ex.send_start(&id, handle).0, 200, "{name}");
        let r = ex.outcome(&id);
        assert_eq!(r["status"], "error", "{name}: {r}");
        assert_eq!(r["error"]["code"], "SETUP_FAILED", "{name}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.contains(name.as_str()), "{name}: {message}");
        assert_ends_in_error(&events.join().unwrap(), "SETUP_FAILED");
        assert_eq!(ex.agent_runs(), 0, "{name}: the agent ran");
        workspaces.sort();
        assert_eq!(s3.object_keys(BUCKET), workspaces, "{name}");
    }
    let escaped: Vec<_> = outside.iter().filter(|p| p.exists()).collect();
    for p in &escaped {
        let _ = std::fs::remove_file(p);
    }
    assert!(
        escaped.is_empty(),
        "written outside the work root: {escaped:?}"
    );
    assert_eq!(find_named(ex.dir.path(), &tag), Vec::<PathBuf>::new());
}
