//! `aip` against partners that are not ours: a small stub on loopback plays a partner with
//! only part of the protocol (as some SDK partners are), and the real `aip` binary runs
//! against it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A partner with `/rpc` only: `/stream` answers 404 with an HTML page, as a web framework
/// does for a route it lacks. Every rpc command is answered with the task awaiting
/// completion. Records the paths it was asked for, each with its command.
struct RpcOnlyPartner {
    url: String,
    paths: Arc<Mutex<Vec<String>>>,
}

impl RpcOnlyPartner {
    fn start() -> RpcOnlyPartner {
        Self::start_with(false)
    }

    /// With `silent_stream`, `/stream` opens an event stream and then says nothing, ever
    /// (a stalled partner); `/rpc` answers as before.
    fn start_with(silent_stream: bool) -> RpcOnlyPartner {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/aip", listener.local_addr().unwrap());
        let paths = Arc::new(Mutex::new(Vec::new()));
        let seen = paths.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { break };
                let seen = seen.clone();
                std::thread::spawn(move || serve(conn, &seen, silent_stream));
            }
        });
        RpcOnlyPartner { url, paths }
    }
}

fn serve(conn: TcpStream, seen: &Mutex<Vec<String>>, silent_stream: bool) {
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        let mut length = 0;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let req: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        // rpc puts the command under `command`, a stream request under `message`.
        let params = &req["params"];
        let cmd = if params["command"].is_object() {
            &params["command"]
        } else {
            &params["message"]
        };
        let name = cmd["command"].as_str().unwrap_or("-");
        seen.lock().unwrap().push(format!("{path} {name}"));
        if silent_stream && path.ends_with("/stream") {
            let mut w = &conn;
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                        Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n\r\n";
            let _ = w.write_all(head.as_bytes());
            // Nothing more until the client gives up and closes.
            let mut sink = [0u8; 1024];
            while matches!(reader.read(&mut sink), Ok(n) if n > 0) {}
            return;
        }
        let (status, kind, reply) = if path.ends_with("/rpc") {
            let task = serde_json::json!({
                "type": "task-result", "id": "r-1", "sentAt": "2026-11-29T00:00:00Z",
                "senderRole": "partner", "senderId": "stub", "taskId": cmd["taskId"],
                "sessionId": cmd["sessionId"],
                "status": {"state": "awaiting-completion", "stateChangedAt": "2026-11-29T00:00:00Z"},
                "products": [{"id": "answer", "dataItems": [{"type": "text", "text": "42"}]}]
            });
            let reply = serde_json::json!({"jsonrpc": "2.0", "id": req["id"], "result": task});
            ("200 OK", "application/json", reply.to_string())
        } else {
            (
                "404 Not Found",
                "text/html",
                "<!DOCTYPE html>\n<html><body>Not Found</body></html>\n".to_owned(),
            )
        };
        let mut w = &conn;
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\r\n",
            reply.len()
        );
        if w.write_all(head.as_bytes()).is_err() || w.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

fn aip(partner: &str, args: &[&str]) -> Output {
    aip_with_timeout(partner, "10", args)
}

fn aip_with_timeout(partner: &str, timeout: &str, args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_aip"))
        .env("AIP_PARTNER", partner)
        .args(["--timeout", timeout])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("aip runs");
    // A guard, not a measurement: a run that hangs fails the test instead of blocking it.
    let pid = child.id();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(50));
        if !flag.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    });
    let _ = &mut child;
    let o = child.wait_with_output().expect("aip ends");
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    o
}

/// Issue 48.7: `aip stream` against a partner without `/stream` said "the task was
/// abandoned". The start never reached the partner, so `aip` says there is no stream, starts
/// the task over rpc and follows it by polling.
#[test]
fn stream_against_a_partner_without_a_stream_endpoint_starts_over_rpc() {
    let p = RpcOnlyPartner::start();
    let o = aip(&p.url, &["stream", "--task", "t-1", "hello"]);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}\n{out}\n{err}", o.status);
    assert!(!out.contains("abandoned"), "{out}");
    assert!(out.contains("no stream from the partner"), "{out}");
    assert!(!out.contains("<body>"), "the web page is not echoed: {out}");
    assert!(out.contains("[awaiting-completion]"), "{out}");
    assert!(out.contains("42"), "{out}");
    let paths = p.paths.lock().unwrap().clone();
    assert_eq!(
        paths.first().map(String::as_str),
        Some("/aip/stream start"),
        "{paths:?}"
    );
    assert_eq!(
        paths.get(1).map(String::as_str),
        Some("/aip/rpc start"),
        "{paths:?}"
    );
}

/// Issue 48.7: a stalled stream was noticed only after 60 s, whatever `--timeout` said. With
/// `--timeout 1` against a partner whose stream opens and then stays silent, `aip` resumes it
/// after each silent second, gives the stream up after its retries, and follows the task by
/// polling, well inside the 50 s guard (at 60 s per silence it would take minutes).
#[test]
fn a_silent_stream_is_resumed_after_the_timeout_then_given_up_for_polling() {
    let p = RpcOnlyPartner::start_with(true);
    let o = aip_with_timeout(&p.url, "1", &["stream", "--task", "t-2", "hello"]);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}\n{out}\n{err}", o.status);
    assert!(out.contains("(stream dropped; resuming)"), "{out}");
    assert!(out.contains("[awaiting-completion]"), "{out}");
    let paths = p.paths.lock().unwrap().clone();
    let streams = paths
        .iter()
        .filter(|x| x.starts_with("/aip/stream"))
        .count();
    assert!(streams >= 2, "the stream was resumed: {paths:?}");
    assert!(paths.iter().any(|x| x.starts_with("/aip/rpc")), "{paths:?}");
}
