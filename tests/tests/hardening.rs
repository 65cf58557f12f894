//! Finding 4 of issue 12: the executor's HTTP surface must not be starved. Against the real
//! `awcp-executor` binary on both runtimes: a flood of idle connections (more than the
//! process has file descriptors) does not block the next delegation; a slowloris head and
//! slow request bodies are cut off and memory stays flat. Every wait is bounded by a
//! generous deadline; nothing asserts on timing.

#[allow(dead_code, unused_macros)]
mod conformance;
#[allow(dead_code)]
mod net_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use awcp_proto::DelegationState;
use conformance::*;
use net_support::{executor, nofile_limit};

const DEADLINE: Duration = Duration::from_secs(60);

fn addr_of(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_end_matches("/awcp")
        .to_owned()
}

/// 1,100 idle connections against an executor limited to 1,024 open files (a common default):
/// the next delegation still completes.
#[test]
fn idle_connection_flood_does_not_block_the_next_delegation() {
    // The executor gets at most 1,024 files; this process needs as many as it floods with.
    let exec_files = 1024.min(nofile_limit().saturating_sub(300) / 2).max(128);
    let flood = exec_files as usize + 76;
    for runtime in ["tokio", "smol"] {
        let dir = tempfile::tempdir().unwrap();
        let ex = executor(runtime, dir.path(), &[], Some(exec_files));
        let addr = addr_of(&ex.url);
        let idle: Vec<TcpStream> = (0..flood)
            .filter_map(|_| TcpStream::connect(&addr).ok())
            .collect();
        assert!(
            idle.len() > exec_files as usize,
            "only {} connections opened",
            idle.len()
        );
        <awcp_tokio::TokioRuntime as awcp_driver::Driver>::block_on(async {
            let dg = start_delegator::<awcp_tokio::TokioRuntime>(false, |_| {}).await;
            let ws = workspace();
            let v = run_to_end::<awcp_tokio::TokioRuntime>(
                &dg.handle,
                params::<awcp_tokio::TokioRuntime>(&ex.url, ws.path()),
            )
            .await;
            assert_eq!(v.state, DelegationState::Completed, "{runtime}: {v:?}");
        });
        drop(idle);
    }
}

/// Whether the server closes `s` while `trickle` is written every 50 ms (responses are kept
/// in `got`).
fn closed_while_trickling(s: TcpStream, trickle: &[u8], got: &mut Vec<u8>) -> bool {
    agent_rt::test_util::closed_by_server(
        s,
        Some(trickle),
        Duration::from_millis(50),
        DEADLINE,
        got,
    )
}

#[test]
fn slowloris_and_slow_bodies_are_cut_off() {
    for runtime in ["tokio", "smol"] {
        let dir = tempfile::tempdir().unwrap();
        let ex = executor(
            runtime,
            dir.path(),
            &net_support::args(&[
                &"--header-read-timeout",
                &1,
                &"--body-read-timeout",
                &1,
                &"--idle-timeout",
                &1,
            ]),
            None,
        );
        let addr = addr_of(&ex.url);

        // A head that never ends.
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(b"POST /awcp HTTP/1.1\r\nHost: x\r\n").unwrap();
        assert!(
            closed_while_trickling(s, b"X-Slow: 1\r\n", &mut Vec::new()),
            "{runtime}: slowloris head not cut off"
        );

        // Four uploads announcing 200 MB each, sent a few bytes at a time.
        let uploads: Vec<_> = (0..4)
            .map(|_| {
                let addr = addr.clone();
                std::thread::spawn(move || {
                    let mut s = TcpStream::connect(&addr).unwrap();
                    s.write_all(
                        b"POST /awcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 209715200\r\n\r\n{",
                    )
                    .unwrap();
                    let mut got = Vec::new();
                    let closed = closed_while_trickling(s, &[b' '; 64], &mut got);
                    (closed, String::from_utf8_lossy(&got).into_owned())
                })
            })
            .collect();
        for u in uploads {
            let (closed, got) = u.join().unwrap();
            assert!(closed, "{runtime}: slow upload not cut off (got {got:?})");
        }
        let rss = ex.rss_kib();
        assert!(
            rss < 128 * 1024,
            "{runtime}: executor RSS {rss} KiB after slow uploads"
        );

        // The executor still serves.
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(b"GET /awcp/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut resp = String::new();
        let _ = s.read_to_string(&mut resp);
        assert!(resp.starts_with("HTTP/1.1 "), "{runtime}: {resp:?}");
    }
}
