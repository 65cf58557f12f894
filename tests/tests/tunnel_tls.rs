//! Executors behind NAT over TLS (issue 51): the real `awcp-relay` serving HTTPS and `wss://`
//! with `--tls-cert/--tls-key --client-ca`, executors dialling it with `--ca-file` and either a
//! token or a client certificate (no token), and `awcp delegate` over
//! `https://…/e/<name>/awcp`. Refused: a certificate signed by the CA but not registered (the
//! executor exits 1), a certificate from another CA even when its digest is registered (the
//! TLS handshake fails; the executor keeps retrying and is never served), and a plain `ws://`
//! dial to the TLS port. Every wait is on an event (an announced line, a log line, an exit, the
//! relay's answer); all on 127.0.0.1, port 0.

mod tunnel_support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agent_rt::test_util::{CertFiles, TestPki};
use agent_rt::ClientTls;
use awcp_tests::bins::{self, show, KillOnDrop};
use awcp_tests::relay;
use tunnel_support::{assert_applied, delegate_with, workspace, AGENT};

const DEADLINE: Duration = Duration::from_secs(90);

/// How an executor authenticates to the relay.
enum Cred<'a> {
    Token(&'a str),
    Cert(&'a CertFiles),
}

/// A registry line for `name`: the token's digest (`hash-token`) or the certificate's
/// (`cert-digest`).
fn registration(name: &str, cred: &Cred) -> String {
    match cred {
        Cred::Token(t) => format!("{name} {}", relay::token_digest(t)),
        Cred::Cert(c) => {
            let digest = relay::tool(&["cert-digest".as_ref(), c.cert.as_os_str()], "");
            assert!(digest.starts_with("cert-sha256:"), "{digest}");
            assert_eq!(digest.len(), "cert-sha256:".len() + 64, "{digest}");
            format!("{name} {digest}")
        }
    }
}

/// `awcp-relay` with TLS and `--client-ca`; the child and `127.0.0.1:port`.
fn tls_relay(dir: &Path, pki: &TestPki, lines: &[String]) -> (KillOnDrop, String) {
    let executors = dir.join("executors.txt");
    std::fs::write(&executors, lines.join("\n") + "\n").unwrap();
    let cert = pki.server("relay", &["127.0.0.1", "localhost"]);
    let (child, url) = relay::spawn(
        relay::command(&executors, "127.0.0.1:0")
            .arg("--tls-cert")
            .arg(&cert.cert)
            .arg("--tls-key")
            .arg(&cert.key)
            .arg("--client-ca")
            .arg(pki.ca_file()),
    );
    let addr = url
        .strip_prefix("https://")
        .unwrap_or_else(|| panic!("a TLS relay announces https: {url}"))
        .to_owned();
    (child, addr)
}

/// A running executor and its stderr lines.
struct Executor {
    child: KillOnDrop,
    log: mpsc::Receiver<String>,
}

impl Executor {
    /// Waits for a stderr line containing `what`; all lines seen, for messages.
    fn wait_log(&self, what: &str) -> String {
        let deadline = Instant::now() + DEADLINE;
        let mut seen = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.log.recv_timeout(left) {
                Ok(line) => {
                    seen.push_str(&line);
                    seen.push('\n');
                    if line.contains(what) {
                        return seen;
                    }
                }
                Err(_) => panic!("no log line with {what:?}; stderr so far:\n{seen}"),
            }
        }
    }

    /// Waits for the executor to exit: its status code.
    fn wait_exit(&mut self) -> Option<i32> {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(s) = self.child.0.try_wait().unwrap() {
                return s.code();
            }
            assert!(Instant::now() < deadline, "the executor kept running");
            // Wake on its stderr (it logs before it exits) or every 50 ms at most.
            let _ = self.log.recv_timeout(Duration::from_millis(50));
        }
    }
}

/// `awcp-executor --tunnel <url> --ca-file <ca>` with `cred`, stderr captured.
fn executor(dir: &Path, url: &str, ca: &Path, cred: &Cred) -> Executor {
    let agent = dir.join("agent.sh");
    std::fs::write(&agent, AGENT).unwrap();
    let mut cmd = bins::executor_command(dir, &format!("sh {}", agent.display()));
    cmd.arg("--tunnel").arg(url).arg("--ca-file").arg(ca);
    match cred {
        Cred::Token(t) => {
            let file = dir.join("tunnel.token");
            std::fs::write(&file, format!("{t}\n")).unwrap();
            cmd.arg("--tunnel-token-file").arg(file);
        }
        Cred::Cert(c) => {
            cmd.arg("--client-cert")
                .arg(&c.cert)
                .arg("--client-key")
                .arg(&c.key);
        }
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("awcp-executor starts");
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let child = KillOnDrop(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    assert!(
        line.starts_with(bins::EXECUTOR_ANNOUNCES),
        "unexpected first line {line:?}"
    );
    let (tx, log) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    Executor { child, log }
}

/// `GET path` over HTTPS on `addr` (trusting `tls`): `(status, body)`; status 0 if the
/// connection or handshake failed.
fn https_get(tls: &ClientTls, addr: &str, path: &str) -> (u16, String) {
    use agent_rt::rustls;
    let Ok(tcp) = std::net::TcpStream::connect(addr) else {
        return (0, String::new());
    };
    tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(tls.config(), name).unwrap();
    let mut s = rustls::StreamOwned::new(conn, tcp);
    relay::get_on(&mut s, addr, path)
}

/// Waits until the relay serves `name`'s status over HTTPS ([`relay::wait_served_with`]
/// [`https_get`]).
fn wait_served(tls: &ClientTls, addr: &str, name: &str) {
    relay::wait_served_with(name, |path| https_get(tls, addr, path));
}

/// `awcp delegate` to `peer` (https) trusting `ca`.
fn delegate(runtime: &str, ws: &Path, peer: &str, ca: &Path, state: &Path) -> Output {
    let ca = ["--ca-file", ca.to_str().unwrap()];
    delegate_with(runtime, ws, peer, state, &ca)
}

fn ca_pem(pki: &TestPki) -> PathBuf {
    pki.ca_file()
}

/// One executor with a token, one with a client certificate and no token, both over `wss://`;
/// a delegation over HTTPS reaches each.
#[test]
fn delegations_reach_executors_authenticated_by_token_and_by_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "relay");
    let ca = ca_pem(&pki);
    let bob_cert = pki.client("bob", "bob");
    let alice = Cred::Token("alice-token");
    let bob = Cred::Cert(&bob_cert);
    let (_relay, addr) = tls_relay(
        dir.path(),
        &pki,
        &[registration("alice", &alice), registration("bob", &bob)],
    );
    let tunnel = format!("wss://{addr}/tunnel");
    let a = tempfile::tempdir().unwrap();
    let _alice = executor(a.path(), &tunnel, &ca, &alice);
    let b = tempfile::tempdir().unwrap();
    let _bob = executor(b.path(), &tunnel, &ca, &bob);
    let tls = pki.client_tls(None);
    wait_served(&tls, &addr, "alice");
    wait_served(&tls, &addr, "bob");
    for (name, runtime) in [("alice", "tokio"), ("bob", "smol")] {
        let ws = workspace();
        let state = tempfile::tempdir().unwrap();
        let peer = format!("https://{addr}/e/{name}/awcp");
        let o = delegate(runtime, ws.path(), &peer, &ca, state.path());
        assert_applied(&o, ws.path());
    }
}

/// What the relay refuses: a certificate of its CA that is not registered (`AUTH_ERROR`: the
/// executor exits 1), a certificate of another CA although its digest is registered (the
/// handshake fails: the executor retries and its name is never served), a plain `ws://` dial
/// to the TLS port; and the executor refuses a certificate without TLS.
#[test]
fn unregistered_and_foreign_certificates_and_plain_dials_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "relay");
    let other = TestPki::new(dir.path(), "other");
    let ca = ca_pem(&pki);
    let mallory_cert = other.client("mallory", "mallory");
    let carol_cert = pki.client("carol", "carol");
    let (_relay, addr) = tls_relay(
        dir.path(),
        &pki,
        &[
            registration("alice", &Cred::Token("alice-token")),
            registration("mallory", &Cred::Cert(&mallory_cert)),
        ],
    );
    let tunnel = format!("wss://{addr}/tunnel");

    // Signed by the relay's CA, not registered: refused for good.
    let c = tempfile::tempdir().unwrap();
    let mut carol = executor(c.path(), &tunnel, &ca, &Cred::Cert(&carol_cert));
    assert_eq!(carol.wait_exit(), Some(1));

    // Another CA's certificate, registered or not, fails the TLS handshake: the executor
    // reports the failed connection, keeps retrying, and mallory is never served.
    let m = tempfile::tempdir().unwrap();
    let mut mallory = executor(m.path(), &tunnel, &ca, &Cred::Cert(&mallory_cert));
    let log = mallory.log_until_disconnected();
    // The relay's TLS refused the certificate's issuer.
    assert!(log.contains("UnknownCA"), "{log}");
    let (status, body) = https_get(&pki.client_tls(None), &addr, "/e/mallory/awcp/status");
    assert_eq!(status, 503, "{body}");
    assert!(mallory.child.0.try_wait().unwrap().is_none(), "{log}");

    // A plain WebSocket dial to the TLS port fails.
    let plain = <awcp_tokio::TokioRuntime as awcp_driver::Driver>::block_on(async {
        let rt = awcp_tokio::TokioRuntime;
        awcp_driver::ws::dial(&rt, &format!("ws://{addr}/tunnel"), &ClientTls::default())
            .await
            .map(|_| ())
    });
    assert!(plain.is_err(), "a ws:// dial to a TLS relay succeeded");
    // And so does a wss:// dial that does not trust the relay's CA.
    let untrusted = <awcp_tokio::TokioRuntime as awcp_driver::Driver>::block_on(async {
        let rt = awcp_tokio::TokioRuntime;
        awcp_driver::ws::dial(&rt, &tunnel, &other.client_tls(None))
            .await
            .map(|_| ())
    });
    let e = untrusted.expect_err("a relay from an untrusted CA was accepted");
    assert!(e.contains("UnknownIssuer"), "{e}");

    // The executor: a client certificate is the credential only over wss://.
    let x = tempfile::tempdir().unwrap();
    let o = bins::executor_command(x.path(), "true")
        .arg("--tunnel")
        .arg(format!("ws://{addr}/tunnel"))
        .arg("--client-cert")
        .arg(&carol_cert.cert)
        .arg("--client-key")
        .arg(&carol_cert.key)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("wss://"),
        "{}",
        show(&o)
    );
    // Neither a token nor a certificate: refused before anything starts.
    let o = bins::executor_command(x.path(), "true")
        .arg("--tunnel")
        .arg(&tunnel)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));

    // The relay itself: a bad PEM for cert-digest is a clear error, exit 2.
    let bad = dir.path().join("bad.pem");
    std::fs::write(&bad, "not a certificate\n").unwrap();
    let o = Command::new(bins::path("awcp-relay"))
        .arg("cert-digest")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("bad.pem"),
        "{}",
        show(&o)
    );
    // A registry naming certificates without --client-ca could never serve them: refused.
    let o = Command::new(bins::path("awcp-relay"))
        .args(["--listen", "127.0.0.1:0", "--quiet", "--executors"])
        .arg(dir.path().join("executors.txt"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--client-ca"),
        "{}",
        show(&o)
    );
}

impl Executor {
    /// Waits for the tunnel's first failed connection; the log so far.
    fn log_until_disconnected(&mut self) -> String {
        self.wait_log("tunnel disconnected")
    }
}
