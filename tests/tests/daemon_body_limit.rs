//! The delegator daemon's `POST /delegate` refuses a body whose declared length is over its
//! limit (1 MiB) before reading it: the neighbour of aip-partner's 413 (issue 48.7), both read
//! through `agent_rt::body::read_body`. Only the first KiB of a declared 100 MiB is sent, and
//! the answer still comes; the real `awcp daemon`, token on.

use std::io::{Read, Write};
use std::time::Duration;

use awcp_tests::bins;

#[test]
fn a_declared_oversized_delegate_request_is_refused_unread() {
    let state = tempfile::tempdir().unwrap();
    let (daemon, url) = bins::spawn_daemon(state.path());
    let _daemon = bins::KillOnDrop(daemon);
    let token = bins::daemon_token(state.path());
    let authority = url.trim_start_matches("http://").trim_end_matches('/');
    let mut s = std::net::TcpStream::connect(authority).unwrap();
    // A guard: a daemon that waits for the whole body fails the test instead of hanging it.
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let head = format!(
        "POST /delegate HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        100u64 << 20
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&[b' '; 1024]).unwrap();
    let mut answer = [0u8; 512];
    let n = s
        .read(&mut answer)
        .expect("an answer before the body is sent");
    let answer = String::from_utf8_lossy(&answer[..n]).into_owned();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("too large"), "{answer}");
}
