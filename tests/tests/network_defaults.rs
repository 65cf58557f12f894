//! The release binaries' network defaults, tried as an attacker would (issue 12): the delegator
//! daemon against a web page (cross-origin "simple" request, DNS rebinding) and against
//! callers without its token; what `awcp daemon` and `awcp-executor` agree to listen on.
//!
//! Everything binds 127.0.0.1. Refusals of network addresses are tried with 192.0.2.1 (TEST-NET,
//! never assigned to this machine), so even a broken check cannot open a network socket.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use awcp_tests::bins::{self, KillOnDrop};

/// A running `awcp daemon`, killed when dropped.
struct Daemon {
    _child: KillOnDrop,
    /// `127.0.0.1:port`.
    addr: String,
    state: tempfile::TempDir,
}

impl Daemon {
    fn start() -> Daemon {
        let state = tempfile::tempdir().unwrap();
        let (child, url) = bins::spawn_daemon(state.path());
        Daemon {
            _child: KillOnDrop(child),
            addr: url.trim_start_matches("http://").to_owned(),
            state,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The token the daemon created in its state directory.
    fn token(&self) -> String {
        bins::daemon_token(self.state.path())
    }
}

/// Sends `head` (request line and headers, without the final empty line) plus `body` on a new
/// connection and returns `(status, body)`.
fn raw(addr: &str, head: &str, body: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

/// A TCP listener that counts connections: an "executor" that would notice any delegation.
fn counting_peer() -> (String, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let n = Arc::new(AtomicUsize::new(0));
    let n2 = n.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            n2.fetch_add(1, Ordering::SeqCst);
            drop(c);
        }
    });
    (format!("http://{addr}/awcp"), n)
}

fn delegate_body(peer: &str, source: &Path) -> String {
    serde_json::json!({
        "executorUrl": peer,
        "environment": {"resources": [{"name": "workspace", "type": "fs", "source": source, "mode": "rw"}]},
        "task": {"description": "exfiltrate", "prompt": "send me everything"},
    })
    .to_string()
}

fn secret_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("id_rsa"), "PRIVATE KEY\n").unwrap();
    d
}

/// What a browser sends for `fetch("http://127.0.0.1:3100/delegate", {method: "POST",
/// mode: "no-cors", body: JSON.stringify(...)})` from a page on another site: a "simple"
/// request (text/plain, no custom header), sent without a CORS preflight.
fn browser_head(addr: &str, path: &str, host: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\n\
         User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36\r\n\
         Accept: */*\r\nAccept-Language: en-US,en;q=0.9\r\n\
         Content-Type: text/plain;charset=UTF-8\r\n\
         Origin: http://evil.example\r\nReferer: http://evil.example/\r\n\
         Sec-Fetch-Site: cross-site\r\nSec-Fetch-Mode: no-cors\r\nSec-Fetch-Dest: empty\r\n\
         X-Probe: {addr}"
    )
}

#[test]
fn daemon_refuses_a_cross_origin_simple_request_and_ships_nothing() {
    let d = Daemon::start();
    let (peer, connections) = counting_peer();
    let secrets = secret_dir();
    let body = delegate_body(&peer, secrets.path());
    let (status, text) = raw(&d.addr, &browser_head(&d.addr, "/delegate", &d.addr), &body);
    assert!(
        status == 401 || status == 403,
        "cross-origin POST /delegate answered {status}: {text}"
    );
    // The same page after a DNS rebinding (its own name resolving to 127.0.0.1).
    let rebound = browser_head(&d.addr, "/delegate", "evil.example:3100")
        .replace("http://evil.example", "http://evil.example:3100");
    let (status, text) = raw(&d.addr, &rebound, &body);
    assert!(
        status == 401 || status == 403 || status == 421,
        "rebound POST /delegate answered {status}: {text}"
    );
    let (status, list) = raw(
        &d.addr,
        &format!(
            "GET /delegations HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}",
            d.addr,
            d.token()
        ),
        "",
    );
    assert_eq!(status, 200, "{list}");
    assert!(list.contains("\"delegations\":[]"), "{list}");
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "the daemon contacted the executor: the directory was shipped"
    );
}

#[test]
fn daemon_requires_its_token_stored_mode_0600() {
    let d = Daemon::start();
    let token = d.token();
    assert!(token.len() >= 32, "a long random token: {token:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(d.state.path().join("daemon.token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "token file mode {mode:o}");
    let get = |auth: &str| {
        raw(
            &d.addr,
            &format!("GET /delegations HTTP/1.1\r\nHost: {}{auth}", d.addr),
            "",
        )
    };
    assert_eq!(get("").0, 401, "no token");
    assert_eq!(get("\r\nAuthorization: Bearer wrong").0, 401, "wrong token");
    assert_eq!(
        get(&format!("\r\nAuthorization: Basic {token}")).0,
        401,
        "not a bearer token"
    );
    assert_eq!(get(&format!("\r\nAuthorization: Bearer {token}")).0, 200);
    // Health needs it too (it tells a page that a daemon runs here).
    let (s, _) = raw(
        &d.addr,
        &format!("GET /health HTTP/1.1\r\nHost: {}", d.addr),
        "",
    );
    assert_eq!(s, 401);
}

#[test]
fn daemon_checks_origin_host_and_content_type_even_with_the_token() {
    let d = Daemon::start();
    let auth = format!("Authorization: Bearer {}", d.token());
    let (peer, connections) = counting_peer();
    let secrets = secret_dir();
    let body = delegate_body(&peer, secrets.path());
    let post = |host: &str, extra: &str| {
        raw(
            &d.addr,
            &format!("POST /delegate HTTP/1.1\r\nHost: {host}\r\n{auth}{extra}"),
            &body,
        )
    };
    let (s, t) = post(
        &d.addr,
        "\r\nContent-Type: application/json\r\nOrigin: http://evil.example",
    );
    assert_eq!(s, 403, "foreign Origin: {t}");
    let (s, t) = post("evil.example:3100", "\r\nContent-Type: application/json");
    assert!(s == 403 || s == 421, "foreign Host: {s} {t}");
    let (s, t) = post(&d.addr, "\r\nContent-Type: text/plain");
    assert_eq!(s, 415, "text/plain body: {t}");
    let (s, t) = post(&d.addr, "");
    assert_eq!(s, 415, "body without a content type: {t}");
    assert_eq!(connections.load(Ordering::SeqCst), 0, "nothing was shipped");
    // Loopback names and the daemon's own origin are fine.
    let port = d.addr.rsplit(':').next().unwrap();
    for host in [d.addr.clone(), format!("localhost:{port}")] {
        let (s, t) = raw(
            &d.addr,
            &format!(
                "GET /delegations HTTP/1.1\r\nHost: {host}\r\n{auth}\r\nOrigin: http://{host}"
            ),
            "",
        );
        assert_eq!(s, 200, "Host {host}: {t}");
    }
}

/// Malformed JSON, missing fields and hostile ids get a 400 naming the problem (they held in
/// the probe; this keeps them held).
#[test]
fn daemon_answers_malformed_requests_with_400() {
    let d = Daemon::start();
    let auth = format!("Authorization: Bearer {}", d.token());
    let post = |body: &str| {
        raw(
            &d.addr,
            &format!(
                "POST /delegate HTTP/1.1\r\nHost: {}\r\n{auth}\r\nContent-Type: application/json",
                d.addr
            ),
            body,
        )
    };
    let (s, t) = post("{not json");
    assert_eq!(s, 400, "{t}");
    let (s, t) = post(r#"{"executorUrl":"http://127.0.0.1:9/awcp","task":{"description":"d"}}"#);
    assert_eq!(s, 400, "{t}");
    assert!(t.contains("task.prompt"), "{t}");
    for path in ["/delegation/..%2F..%2Fetc", "/delegation/a%00b/snapshots"] {
        let (s, t) = raw(
            &d.addr,
            &format!("GET {path} HTTP/1.1\r\nHost: {}\r\n{auth}", d.addr),
            "",
        );
        assert_eq!(s, 400, "{path}: {t}");
    }
}

#[test]
fn cli_reads_the_daemon_token_from_the_state_directory() {
    let d = Daemon::start();
    let run = |extra: &[&str]| {
        Command::new(bins::path("awcp"))
            .args(["--json", "--daemon-url", &d.url(), "--state-dir"])
            .arg(d.state.path())
            .args(extra)
            .arg("list")
            .env_remove("AWCP_DAEMON_TOKEN")
            .output()
            .unwrap()
    };
    let o = run(&[]);
    assert!(
        o.status.success(),
        "awcp list with the state directory's token: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("delegations"));
    let o = run(&["--daemon-token", "wrong"]);
    assert!(!o.status.success(), "a wrong --daemon-token is refused");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("token"), "the error names the token: {err}");
}

fn run_to_exit(cmd: &mut Command) -> (bool, String) {
    let o = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[test]
fn daemon_refuses_a_network_address_without_tls_or_the_insecure_flag() {
    let state = tempfile::tempdir().unwrap();
    let daemon = |extra: &[&str]| {
        run_to_exit(
            Command::new(bins::path("awcp"))
                .args(["daemon", "--listen", "192.0.2.1:0", "--state-dir"])
                .arg(state.path())
                .args(extra),
        )
    };
    let (ok, out) = daemon(&[]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("--insecure-plain-http") && out.contains("TLS"),
        "the refusal names TLS and the insecure flag: {out}"
    );
    // With the flag, or with TLS, the check passes (and binding the foreign address fails).
    let pki = agent_rt::test_util::TestPki::new(state.path(), "daemon");
    let cert = pki.server("daemon", &["localhost"]);
    let (c, k) = (
        cert.cert.display().to_string(),
        cert.key.display().to_string(),
    );
    for flags in [
        &["--insecure-plain-http"][..],
        &["--tls-cert", &c, "--tls-key", &k][..],
    ] {
        let (ok, out) = daemon(flags);
        assert!(!ok, "{out}");
        assert!(out.contains("cannot listen"), "with {flags:?}: {out}");
    }
}

#[test]
fn executor_refuses_a_network_address_without_auth_or_the_insecure_flag() {
    let work = tempfile::tempdir().unwrap();
    let executor = |extra: &[&str]| {
        run_to_exit(
            Command::new(bins::path("awcp-executor"))
                .args(["--listen", "192.0.2.1:0", "--work-root"])
                .arg(work.path().join("work"))
                .arg("--state-dir")
                .arg(work.path().join("state"))
                .args(extra)
                .env_remove("AWCP_AUTH_TOKEN"),
        )
    };
    let (ok, out) = executor(&[]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("--insecure-no-auth") && out.contains("--auth-token"),
        "the refusal names --auth-token and --insecure-no-auth: {out}"
    );
    for flags in [
        &["--insecure-no-auth"][..],
        &["--auth-token", "t0k3n-long-enough-for-anyone"][..],
    ] {
        let (ok, out) = executor(flags);
        assert!(!ok, "{out}");
        assert!(out.contains("cannot listen"), "with {flags:?}: {out}");
    }
}

#[test]
fn executor_warns_when_it_runs_without_auth_on_loopback() {
    let work = tempfile::tempdir().unwrap();
    let mut child = KillOnDrop(
        Command::new(bins::path("awcp-executor"))
            .args(["--quiet", "--listen", "127.0.0.1:0", "--work-root"])
            .arg(work.path().join("work"))
            .arg("--state-dir")
            .arg(work.path().join("state"))
            .env_remove("AWCP_AUTH_TOKEN")
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("http://127.0.0.1:"), "{line}");
    let _ = child.0.kill();
    let _ = child.0.wait();
    let mut err = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains("without --auth-token"),
        "a warning about running without a credential: {err}"
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `awcp delegate --serve-archives ADDR` listens where executors fetch the workspace; that
/// listener answers one-time archive URLs and nothing else (it used to serve the whole daemon
/// API, unauthenticated).
#[test]
fn delegate_serve_archives_listener_answers_only_archive_urls() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("mark");
    std::fs::create_dir(&mark).unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "A\n").unwrap();
    let agent = format!(
        "sh -c 'touch {m}/started; while [ ! -e {m}/go ]; do sleep 0.05; done; echo finished'",
        m = mark.display()
    );
    let mut executor = KillOnDrop(
        Command::new(bins::path("awcp-executor"))
            .args([
                "--quiet",
                "--listen",
                "127.0.0.1:0",
                "--auth-token",
                "t0k3n-for-the-test",
            ])
            .arg("--work-root")
            .arg(dir.path().join("work"))
            .args(["--agent-cmd", &agent])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(executor.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let peer = line.trim().rsplit(' ').next().unwrap().to_owned();
    let port = free_port();
    let archives = format!("127.0.0.1:{port}");
    let mut cli = KillOnDrop(
        Command::new(bins::path("awcp"))
            .args(["--quiet", "--json", "delegate"])
            .arg(&ws)
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .args([
                "--ro",
                "--peer",
                &peer,
                "--prompt",
                "wait",
                "--token",
                "t0k3n-for-the-test",
            ])
            .args(["--serve-archives", &archives])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // The executor fetched the workspace by URL and started the task.
    let started = (0..1200).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        mark.join("started").exists()
    });
    assert!(started, "the task started within 60 s");
    for (m, path, body) in [
        ("GET", "/health", ""),
        ("GET", "/delegations", ""),
        ("POST", "/delegate", "{}"),
        ("GET", "/archives/not-a-token", ""),
    ] {
        let (s, t) = raw(
            &archives,
            &format!("{m} {path} HTTP/1.1\r\nHost: {archives}\r\nContent-Type: application/json"),
            body,
        );
        assert_eq!(s, 404, "{m} {path} on the archive listener: {t}");
        assert!(!t.contains("delegations"), "{t}");
    }
    std::fs::write(mark.join("go"), "").unwrap();
    let status = cli.0.wait().unwrap();
    let mut err = String::new();
    let _ = cli.0.stderr.take().unwrap().read_to_string(&mut err);
    assert!(status.success(), "the delegation completed: {err}");
    drop(executor);
}

/// Issue 15, item 9: `GET /` on the daemon says what it is, its version and its routes, even
/// without the token (and nothing about any delegation); every other route still needs the
/// token, and the Host/Origin checks apply to `GET /` too.
#[test]
fn daemon_root_says_what_it_is_and_opens_nothing_else() {
    let d = Daemon::start();
    let host = &d.addr;
    let (s, body) = raw(host, &format!("GET / HTTP/1.1\r\nHost: {host}"), "");
    assert_eq!(s, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["name"], "awcp delegator daemon");
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert!(v["routes"]["POST /delegate"].is_string(), "{v}");
    assert!(v["cli"].to_string().contains("awcp list"), "{v}");
    assert!(!body.contains("dlg_"), "no delegation is named: {body}");
    let (s, _) = raw(
        host,
        &format!("GET /delegations HTTP/1.1\r\nHost: {host}"),
        "",
    );
    assert_eq!(s, 401, "the API still needs the token");
    let (s, _) = raw(host, "GET / HTTP/1.1\r\nHost: evil.example", "");
    assert_eq!(s, 403, "DNS rebinding: a foreign Host is refused on / too");
    let (s, _) = raw(
        host,
        &format!("GET / HTTP/1.1\r\nHost: {host}\r\nOrigin: http://evil.example"),
        "",
    );
    assert_eq!(s, 403, "a web page's request is refused on / too");
    // With the token, / answers the same.
    let (s, _) = raw(
        host,
        &format!(
            "GET / HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}",
            d.token()
        ),
        "",
    );
    assert_eq!(s, 200);
}

/// Issue 15, item 9: the executor's `GET /` and agent card say what it is for
/// (`--card-description`, `--card-skill`) and that it needs a credential (`--auth-token`),
/// without a credential; its AWCP endpoints still refuse requests without one.
#[test]
fn executor_root_and_card_say_what_it_is_for_and_that_it_needs_a_credential() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = bins::executor_command(dir.path(), "true");
    cmd.args([
        "--auth-token",
        "s3cret-token-for-the-card-test",
        "--card-description",
        "Runs a linter over Python repositories",
        "--card-skill",
        "Python lint: Finds and fixes lint errors",
        "--card-skill",
        "Type check: Runs mypy",
    ]);
    let (child, url) = bins::spawn_announcing(&mut cmd, bins::EXECUTOR_ANNOUNCES);
    let _child = KillOnDrop(child);
    let base = url.trim_end_matches("/awcp");
    let addr = base.trim_start_matches("http://");
    let (s, body) = raw(addr, &format!("GET / HTTP/1.1\r\nHost: {addr}"), "");
    assert_eq!(s, 200, "{body}");
    let root: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(root["service"], "awcp executor");
    assert_eq!(root["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        root["description"],
        "Runs a linter over Python repositories"
    );
    assert_eq!(root["authRequired"], true);
    assert_eq!(root["endpoints"]["awcp"], format!("{base}/awcp"));
    let (s, body) = raw(
        addr,
        &format!("GET /.well-known/agent-card.json HTTP/1.1\r\nHost: {addr}"),
        "",
    );
    assert_eq!(s, 200, "{body}");
    let card: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        card["description"],
        "Runs a linter over Python repositories"
    );
    let skills: Vec<(&str, &str)> = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap(),
                s["description"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        skills,
        [
            ("python-lint", "Finds and fixes lint errors"),
            ("type-check", "Runs mypy")
        ]
    );
    assert_eq!(card["securitySchemes"]["bearer"]["scheme"], "bearer");
    let (s, _) = raw(
        addr,
        &format!("GET /awcp/status HTTP/1.1\r\nHost: {addr}"),
        "",
    );
    assert_eq!(s, 401, "the AWCP endpoints still need the credential");
}

/// Issue 47, item 6: an executor without a token refuses a request whose `Host` names a
/// foreign domain (a web page after a DNS rebinding: its own name resolving to 127.0.0.1, and
/// a simple `GET` carries no `Origin`), on every AWCP endpoint, on both runtimes. IP addresses,
/// `localhost`, the public URL's host and `--allowed-host` names are served; the public card
/// stays public.
#[test]
fn executor_without_a_token_refuses_a_foreign_host() {
    for runtime in ["tokio", "smol"] {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = bins::executor_command(dir.path(), "true");
        cmd.env_remove("AWCP_AUTH_TOKEN")
            .args(["--runtime", runtime, "--allowed-host", "exec.lan"])
            .args(["--public-url", "https://exec.example:8443"]);
        let (child, url) = bins::spawn_announcing(&mut cmd, bins::EXECUTOR_ANNOUNCES);
        let _child = KillOnDrop(child);
        let addr = url.trim_start_matches("http://").trim_end_matches("/awcp");
        let port = addr.rsplit_once(':').unwrap().1;
        let get =
            |path: &str, host: &str| raw(addr, &format!("GET {path} HTTP/1.1\r\nHost: {host}"), "");
        let id = "dlg_0a1b2c3d4e5f60718293a4b5c6d7e8f9";
        for path in [
            "/awcp/status".to_owned(),
            format!("/awcp/tasks/{id}/events"),
            format!("/awcp/tasks/{id}/result"),
            format!("/awcp/tasks/{id}/snapshots/snap_0a1b2c3d"),
        ] {
            for host in [format!("evil.example:{port}"), "evil.example".to_owned()] {
                let (s, body) = get(&path, &host);
                assert_eq!(s, 421, "{runtime}: GET {path} with Host {host}: {body}");
                assert!(body.contains("DECLINED"), "{body}");
            }
        }
        let (s, body) = raw(
            addr,
            &format!(
                "POST /awcp HTTP/1.1\r\nHost: evil.example:{port}\r\n\
                 Content-Type: application/json"
            ),
            "{}",
        );
        assert_eq!(s, 421, "{runtime}: POST /awcp: {body}");
        for host in [
            addr.to_owned(),
            format!("localhost:{port}"),
            format!("exec.lan:{port}"),
            "exec.example:8443".to_owned(),
        ] {
            let (s, body) = get("/awcp/status", &host);
            assert_eq!(s, 200, "{runtime}: Host {host}: {body}");
        }
        let (s, _) = get("/.well-known/agent-card.json", "evil.example");
        assert_eq!(s, 200, "{runtime}: the public card");
    }
}
