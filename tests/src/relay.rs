//! The real `awcp-relay` for the tunnel tests and benches: its subcommands (`hash-token`,
//! `cert-digest`), a registry file of hashed tokens, the relay itself on 127.0.0.1, and plain
//! HTTP requests to it (waiting until it serves an executor).

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::bins::{self, show, KillOnDrop};

/// What `awcp-relay` prints before its public URL.
pub const RELAY_ANNOUNCES: &str = "awcp-relay listening on ";

/// Runs `awcp-relay ARGS…` (a subcommand: `hash-token`, `cert-digest`) with `stdin`; its
/// trimmed stdout. Panics (with its output) if it fails.
pub fn tool<S: AsRef<OsStr>>(args: &[S], stdin: &str) -> String {
    let mut child = Command::new(bins::path("awcp-relay"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", show(&o));
    String::from_utf8(o.stdout).unwrap().trim().to_owned()
}

/// The digest a registry holds for `token` (`awcp-relay hash-token`).
pub fn token_digest(token: &str) -> String {
    let digest = tool(&["hash-token"], &format!("{token}\n"));
    assert_eq!(digest.len(), 64, "{digest}");
    digest
}

/// Writes `name digest` registrations for `(name, token)` entries to `dir/executors.txt`
/// (the digests through [`token_digest`]); its path.
pub fn registry(dir: &Path, entries: &[(&str, &str)]) -> PathBuf {
    let mut text = String::new();
    for (name, token) in entries {
        text.push_str(&format!("{name} {}\n", token_digest(token)));
    }
    let p = dir.join("executors.txt");
    std::fs::write(&p, text).unwrap();
    p
}

/// `awcp-relay --listen LISTEN --quiet --executors EXECUTORS`; add flags, then start it with
/// [`spawn`].
pub fn command(executors: &Path, listen: &str) -> Command {
    let mut cmd = Command::new(bins::path("awcp-relay"));
    cmd.args(["--listen", listen, "--quiet", "--executors"])
        .arg(executors);
    cmd
}

/// Starts the relay `cmd` ([`command`]): its child and its public URL as announced
/// (`http://127.0.0.1:<port>`, or `https://…` with TLS).
pub fn spawn(cmd: &mut Command) -> (KillOnDrop, String) {
    let (child, url) = bins::spawn_announcing(cmd, RELAY_ANNOUNCES);
    (KillOnDrop(child), url)
}

/// `GET path` on the connected stream `s` to `addr`: `(status, body)`; status 0 if the
/// request could not be written or no status came back.
pub fn get_on(s: &mut (impl Read + Write), addr: &str, path: &str) -> (u16, String) {
    if write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .is_err()
    {
        return (0, String::new());
    }
    let mut out = Vec::new();
    // A TLS server that closes without close_notify ends the read with an error: what was
    // read is the answer.
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

/// `GET path` over plain HTTP on `addr`: `(status, body)`; status 0 if the connection failed.
pub fn get(addr: &str, path: &str) -> (u16, String) {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return (0, String::new());
    };
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    get_on(&mut s, addr, path)
}

/// Waits (90 s at most) until `get` (a `GET` of a path, as [`get`]) answers 200 for `name`'s
/// status through the relay. The relay holds a request for an offline executor until it
/// connects, so each try waits for the event itself; a failed connection (status 0: the
/// relay is not listening yet) is retried after 50 ms.
pub fn wait_served_with(name: &str, mut get: impl FnMut(&str) -> (u16, String)) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (status, body) = get(&format!("/e/{name}/awcp/status"));
        if status == 200 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} not served through the relay: {status} {body}"
        );
        if status == 0 {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Waits until the relay at `relay` (`127.0.0.1:port`, plain HTTP) serves `name`'s status:
/// [`wait_served_with`] [`get`].
pub fn wait_served(relay: &str, name: &str) {
    wait_served_with(name, |path| get(relay, path));
}
