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
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/aip", listener.local_addr().unwrap());
        let paths = Arc::new(Mutex::new(Vec::new()));
        let seen = paths.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { break };
                let seen = seen.clone();
                std::thread::spawn(move || serve(conn, &seen));
            }
        });
        RpcOnlyPartner { url, paths }
    }
}

fn serve(conn: TcpStream, seen: &Mutex<Vec<String>>) {
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
                "<html><body>Not Found</body></html>".to_owned(),
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
    Command::new(env!("CARGO_BIN_EXE_aip"))
        .env("AIP_PARTNER", partner)
        .args(["--timeout", "10"])
        .args(args)
        .output()
        .expect("aip runs")
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
