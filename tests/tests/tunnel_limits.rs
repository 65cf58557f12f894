//! The relay's limits on the real binaries (issue 51): slow clients that send a request head
//! and hold its body back take an executor's streams (64 in flight); the relay answers the
//! rest 503 at once, and frees every stream when those clients go, so the next delegation
//! goes through. A head that never ends and a trickled body are cut off by the relay's
//! timeouts, as by the executor's own server.

mod tunnel_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use tunnel_support::*;

/// Slow clients opened: more than the streams one executor may have in flight.
const SLOW: usize = 100;
/// What the relay lets one online executor have: 64 streams in flight (WIRE.md §18.6).
const HELD: usize = 64;

#[test]
fn slow_clients_meet_the_per_executor_limit_and_free_it_when_they_go() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), &[("alice", "alice-token")]);
    let (_relay, addr) = relay("tokio", &reg, "127.0.0.1:0");
    let exdir = tempfile::tempdir().unwrap();
    let _ex = executor("smol", exdir.path(), &addr, "alice-token");
    wait_served(&addr, "alice");
    // Each sends a START's head announcing 1 MB and one byte of it.
    let mut slow: Vec<TcpStream> = (0..SLOW)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            write!(
                s,
                "POST /e/alice/awcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{{"
            )
            .unwrap();
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    // The relay refuses what is over the limit as the heads arrive; the others stay open.
    let mut refused = [false; SLOW];
    let deadline = Instant::now() + Duration::from_secs(60);
    while refused.iter().filter(|r| **r).count() < SLOW - HELD {
        assert!(
            Instant::now() < deadline,
            "only {} of {SLOW} slow clients refused",
            refused.iter().filter(|r| **r).count()
        );
        for (i, s) in slow.iter_mut().enumerate() {
            if refused[i] {
                continue;
            }
            let mut buf = [0u8; 512];
            match s.read(&mut buf) {
                Ok(n) if n > 0 => {
                    let head = String::from_utf8_lossy(&buf[..n]);
                    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
                    refused[i] = true;
                }
                _ => {}
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Exactly those over the limit.
    assert_eq!(refused.iter().filter(|r| **r).count(), SLOW - HELD);
    // The slow clients go: their streams are reset and freed, so a delegation goes through.
    drop(slow);
    delegation_is_applied("tokio", &addr, "alice");
}

/// Whether the relay closes `s` while `trickle` is written every 50 ms.
fn closed_while_trickling(s: TcpStream, trickle: &[u8]) -> bool {
    agent_rt::test_util::closed_by_server(
        s,
        Some(trickle),
        Duration::from_millis(50),
        Duration::from_secs(60),
        &mut Vec::new(),
    )
}

/// The relay's HTTP side has the executor's hardening: a head that never ends and a body
/// trickled a few bytes at a time (to an executor behind it) are cut off after the timeouts
/// given, and the relay serves on.
#[test]
fn the_relay_cuts_off_slow_heads_and_slow_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), &[("alice", "alice-token")]);
    let (_relay, url) = awcp_tests::relay::spawn(
        awcp_tests::relay::command(&reg, "127.0.0.1:0")
            .args(["--header-read-timeout", "1", "--body-read-timeout", "1"])
            .args(["--idle-timeout", "1"]),
    );
    let addr = url.trim_start_matches("http://").to_owned();
    let exdir = tempfile::tempdir().unwrap();
    let _ex = executor("tokio", exdir.path(), &addr, "alice-token");
    wait_served(&addr, "alice");

    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(b"POST /e/alice/awcp HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    assert!(
        closed_while_trickling(s, b"X-Slow: 1\r\n"),
        "slowloris head not cut off"
    );

    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(
        b"POST /e/alice/awcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 209715200\r\n\r\n{",
    )
    .unwrap();
    assert!(
        closed_while_trickling(s, &[b' '; 64]),
        "slow body not cut off"
    );
    wait_served(&addr, "alice");
}
