//! The real `aip-partner` and `aip` binaries: the README's two-command experience on both
//! runtimes, a canceled task whose agent (and everything it started) is killed, and the
//! partner's shutdown leaving no agent behind. Waits are on the binaries' output and exit;
//! where a process must disappear, a bounded check of /proc (never reached when things work).

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(60);

/// An `aip-partner` process, killed when dropped.
struct Partner {
    child: Child,
    url: String,
}

impl Partner {
    fn spawn(runtime: &str, work_root: &Path, agent: &str) -> Partner {
        Partner::spawn_with(runtime, work_root, agent, |_| {})
    }

    /// [`Partner::spawn`], with `configure` adding flags (before the agent) or environment.
    fn spawn_with(
        runtime: &str,
        work_root: &Path,
        agent: &str,
        configure: impl FnOnce(&mut Command),
    ) -> Partner {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_aip-partner"));
        cmd.args(["--listen", "127.0.0.1:0", "--quiet", "--runtime", runtime])
            .arg("--work-root")
            .arg(work_root);
        configure(&mut cmd);
        let mut child = cmd
            .args(["--", "sh", "-c", agent])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("aip-partner starts");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("aip-partner prints its URL");
        let url = line
            .trim()
            .strip_prefix("aip-partner listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Partner { child, url }
    }

    /// SIGTERM, and wait for the exit.
    fn terminate(mut self) -> std::process::ExitStatus {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for Partner {
    /// SIGTERM first, so the partner kills its agents even when a test fails (SIGKILL would
    /// leave them running); SIGKILL if it has not exited after the deadline.
    fn drop(&mut self) {
        let pid = rustix::process::Pid::from_child(&self.child);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let start = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) && start.elapsed() < DEADLINE {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn aip(partner: &str, runtime: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aip"))
        .env("AIP_PARTNER", partner)
        .args(["--runtime", runtime])
        .args(args)
        .output()
        .expect("aip runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "aip failed: {}\n{}", o.status, text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Processes whose working directory is under `dir`.
fn processes_in(dir: &Path) -> Vec<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir)) {
            found.push(pid);
        }
    }
    found
}

/// Until `cond` holds (bounded by the deadline).
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

const ASKING_AGENT: &str = r#"read q; echo "thinking about: $q"; echo "AIP-ASK: which city?"; read c; echo "going to $c"; printf 'report for %s\n' "$c" > "$AIP_OUTPUT_DIR/report.txt"; echo done"#;

fn two_commands(partner_rt: &str, cli_rt: &str) {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let p = Partner::spawn(partner_rt, &work, ASKING_AGENT);

    let out = ok(aip(
        &p.url,
        cli_rt,
        &["stream", "--task", "t-1", "plan", "a", "trip"],
    ));
    assert!(out.contains("thinking about: plan a trip"), "{out}");
    assert!(out.contains("[awaiting-input] which city?"), "{out}");

    let out = ok(aip(&p.url, cli_rt, &["continue", "t-1", "Rome"]));
    assert!(out.starts_with("task t-1: "), "{out}");
    // Follow the task's stream again (replayed from its start) until it awaits completion.
    let out = ok(aip(&p.url, cli_rt, &["stream", "--attach", "t-1"]));
    assert!(out.contains("[awaiting-completion]"), "{out}");
    // Each product once (issue 48.10: the replayed chunks, then the whole product again).
    assert!(out.contains("going to Rome"), "{out}");
    assert_eq!(out.matches("product result:").count(), 1, "{out}");
    assert_eq!(out.matches("product file:report.txt:").count(), 1, "{out}");

    let out = ok(aip(&p.url, cli_rt, &["--json", "get", "t-1"]));
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    let r = &v["result"];
    assert_eq!(r["status"]["state"], "awaiting-completion");
    let products = r["products"].as_array().unwrap();
    assert_eq!(products[0]["id"], "result");
    assert_eq!(
        products[0]["dataItems"][0]["text"],
        "thinking about: plan a trip\ngoing to Rome\ndone"
    );
    let file = &products[1]["dataItems"][0];
    assert_eq!(
        (&file["name"], &file["mimeType"]),
        (&"report.txt".into(), &"text/plain".into())
    );
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(file["bytes"].as_str().unwrap())
        .unwrap();
    assert_eq!(bytes, b"report for Rome\n");
    // The file products can be saved (issue 48.10), and are never overwritten.
    let saved = dir.path().join("saved");
    let save = ["get", "t-1", "--save", saved.to_str().unwrap()];
    let out = ok(aip(&p.url, cli_rt, &save));
    assert!(out.contains("saved "), "{out}");
    assert_eq!(
        std::fs::read(saved.join("report.txt")).unwrap(),
        b"report for Rome\n"
    );
    let again = aip(&p.url, cli_rt, &save);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(text(&again).contains("not saved"), "{}", text(&again));
    // `continue` was run without `--session`: it carries the task's own session (issue 48.7:
    // it used to make one up).
    let history = r["commandHistory"]
        .as_array()
        .or_else(|| r["messageHistory"].as_array())
        .expect("a command history");
    let session_of = |kind: &str| {
        history
            .iter()
            .find(|c| c["command"] == kind)
            .map(|c| c["sessionId"].clone())
            .unwrap_or_else(|| panic!("no {kind} in {history:?}"))
    };
    assert!(session_of("start").is_string(), "{history:?}");
    assert_eq!(session_of("continue"), session_of("start"), "{history:?}");
    let states: Vec<&str> = r["statusHistory"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states,
        [
            "accepted",
            "working",
            "awaiting-input",
            "working",
            "awaiting-completion"
        ]
    );

    let out = ok(aip(&p.url, cli_rt, &["complete", "t-1"]));
    assert!(out.starts_with("task t-1: completed"), "{out}");
    // The task's work directory goes with its end.
    eventually("the work directory is removed", || {
        std::fs::read_dir(&work).unwrap().next().is_none()
    });

    let o = aip(&p.url, cli_rt, &["get", "t-unknown"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("-32001"),
        "{}",
        text(&o)
    );

    // A start that the agent answers without asking, followed by polling.
    let p2 = Partner::spawn(
        partner_rt,
        &dir.path().join("work2"),
        r#"read q; echo "echo: $q""#,
    );
    let out = ok(aip(
        &p2.url,
        cli_rt,
        &["start", "--wait", "--task", "t-2", "hi"],
    ));
    assert!(out.contains("[awaiting-completion]"), "{out}");
    assert!(out.contains("product result: echo: hi"), "{out}");
    let out = ok(aip(&p2.url, cli_rt, &["cancel", "t-2"]));
    assert!(out.starts_with("task t-2: canceled"), "{out}");
}

#[test]
fn the_two_commands_on_tokio() {
    two_commands("tokio", "smol");
}

#[test]
fn the_two_commands_on_smol() {
    two_commands("smol", "tokio");
}

#[test]
fn notify_runs_a_receiver_that_gets_every_state() {
    let dir = tempfile::tempdir().unwrap();
    let p = Partner::spawn("tokio", &dir.path().join("w"), r#"read q; echo "got $q""#);
    let o = aip(
        &p.url,
        "tokio",
        &["--json", "notify", "--listen", "127.0.0.1:0", "hello"],
    );
    let out = ok(o);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["event"], "receiver");
    let states: Vec<&str> = lines
        .iter()
        .filter(|l| l["event"] == "state")
        .map(|l| l["status"]["state"].as_str().unwrap())
        .collect();
    assert_eq!(states.last(), Some(&"awaiting-completion"), "{out}");
}

/// Cancel kills the agent and what it started (a shell with a child `sleep`, and a daemon
/// that left its process group, session and environment: a double fork through `setsid` with
/// `env -i`); SIGTERM to the partner kills a running agent before the partner exits; nothing
/// is left behind (issue 47 item 1, the partner's side).
#[test]
fn canceled_and_shut_down_agents_leave_no_process_behind() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    // The sleeps are forked before the question, so all run once the task awaits input.
    let agent = r#"(env -i setsid /bin/sh -c 'exec sleep 300' &); sleep 300 & echo started; echo "AIP-ASK: hold on?"; wait"#;
    let p = Partner::spawn("tokio", &work, agent);
    let out = ok(aip(&p.url, "smol", &["stream", "--task", "t-c", "go"]));
    assert!(out.contains("[awaiting-input]"), "{out}");
    let running = processes_in(&work);
    assert!(
        running.len() >= 3,
        "the shell, its sleep and the daemon run: {running:?}"
    );
    let out = ok(aip(&p.url, "smol", &["cancel", "t-c"]));
    assert!(out.starts_with("task t-c: canceled"), "{out}");
    eventually("the canceled agent's processes are gone", || {
        processes_in(&work).is_empty()
    });

    let out = ok(aip(&p.url, "smol", &["stream", "--task", "t-d", "go"]));
    assert!(out.contains("[awaiting-input]"), "{out}");
    assert!(processes_in(&work).len() >= 3);
    let status = p.terminate();
    assert!(
        status.success(),
        "the partner exits cleanly on SIGTERM: {status}"
    );
    // SIGKILL is delivered asynchronously: the orphaned sleep may take a moment to go.
    eventually("the running agent's processes are gone", || {
        processes_in(&work).is_empty()
    });
    assert!(
        std::fs::read_dir(&work).unwrap().next().is_none(),
        "work directories are removed"
    );
}

/// Issue 47, item 8 (the same class as the executor's): the agent `aip-partner` runs gets
/// none of the partner's environment (a broker URL with its password, a token) but the
/// documented basics and what `--agent-env` names.
#[test]
fn the_agent_gets_no_secret_of_the_partner() {
    let dir = tempfile::tempdir().unwrap();
    let p = Partner::spawn_with(
        "tokio",
        &dir.path().join("work"),
        "read q; env | sort | tr '\\n' ' '",
        |cmd| {
            cmd.args(["--agent-env", "MY_AGENT_KEY,FIXED=given"])
                .env(
                    "AIP_INBOX_BROKER_SECRET",
                    "amqp://u:broker-password@127.0.0.1",
                )
                .env("SOME_API_TOKEN", "partner-secret-token")
                .env("MY_AGENT_KEY", "agent-key-value");
        },
    );
    let out = ok(aip(
        &p.url,
        "tokio",
        &["start", "--wait", "--task", "t-env", "show"],
    ));
    for secret in ["broker-password", "partner-secret-token", "SOME_API_TOKEN"] {
        assert!(!out.contains(secret), "{secret} reached the agent: {out}");
    }
    for given in [
        "MY_AGENT_KEY=agent-key-value",
        "FIXED=given",
        "AIP_TASK_ID=t-env",
        "PATH=",
    ] {
        assert!(out.contains(given), "{given} in {out}");
    }
}

/// Issue 48 item 4: a request larger than one environment string may be (128 KiB) reaches
/// the agent whole, on stdin and in `AIP_PROMPT_FILE` (not in `AIP_PROMPT`), whether `aip`
/// reads it from a file or from its standard input.
#[test]
fn a_request_too_large_for_the_environment_reaches_the_agent_whole() {
    let dir = tempfile::tempdir().unwrap();
    let agent = r#"read q; printf 'stdin %s file %s env %s.\n' "${#q}" "$(wc -c < "$AIP_PROMPT_FILE")" "${AIP_PROMPT:+set}""#;
    let p = Partner::spawn("tokio", &dir.path().join("work"), agent);
    let big = "0123456789abcdef".repeat(200 * 1024 / 16);
    let file = dir.path().join("request.txt");
    std::fs::write(&file, &big).unwrap();
    let out = ok(aip(
        &p.url,
        "tokio",
        &[
            "start",
            "--wait",
            "--task",
            "t-big",
            "--text-file",
            file.to_str().unwrap(),
        ],
    ));
    assert!(out.contains("stdin 204800 file 204800 env ."), "{out}");
    // From standard input, on the other runtime.
    let mut child = Command::new(env!("CARGO_BIN_EXE_aip"))
        .env("AIP_PARTNER", &p.url)
        .args([
            "--runtime",
            "smol",
            "start",
            "--wait",
            "--task",
            "t-big2",
            "--text-file",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        stdin.write_all(big.as_bytes()).unwrap();
    });
    let out = ok(child.wait_with_output().unwrap());
    writer.join().unwrap();
    assert!(out.contains("stdin 204800 file 204800 env ."), "{out}");
    // A small request is in the environment too, as before.
    let out = ok(aip(
        &p.url,
        "tokio",
        &["start", "--wait", "--task", "t-small", "hello"],
    ));
    assert!(out.contains("stdin 5 file 5 env set."), "{out}");
}

/// `POST`s `body` to `url` over a plain socket with exactly the headers given (plus
/// `Content-Length`, and `Host` naming the address unless given); the HTTP status.
fn raw_post(url: &str, headers: &[(&str, &str)], body: &str) -> u16 {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (authority, path) = rest.split_once('/').expect("a path");
    let mut req = format!(
        "POST /{path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {authority}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    let mut s = std::net::TcpStream::connect(authority).unwrap();
    // A server that never answers fails the test instead of hanging it.
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let status = answer.split(' ').nth(1).unwrap_or_default();
    status
        .parse()
        .unwrap_or_else(|_| panic!("no status: {answer}"))
}

/// A JSON-RPC `start` of task `task` with the text `text`.
fn start_body(task: &str, text: &str) -> String {
    serde_json::json!({
        "jsonrpc": "2.0", "method": "rpc", "id": "1",
        "params": {"command": {
            "type": "task-command", "id": format!("msg-{task}"),
            "sentAt": "2025-09-01T11:58:00+08:00", "senderRole": "leader",
            "senderId": "leader", "command": "start", "taskId": task,
            "dataItems": [{"type": "text", "text": text}],
        }},
    })
    .to_string()
}

/// What only a web page makes a browser send: a cross-site request (an `Origin` header, a
/// `text/plain` body that needs no CORS preflight) and a DNS-rebinding one (a `Host` naming the
/// page's own domain). A partner refuses each before its engine sees it.
const WEB_PAGE_REQUESTS: [(&[(&str, &str)], u16); 4] = [
    (
        &[
            ("Origin", "https://evil.example"),
            ("Content-Type", "application/json"),
        ],
        403,
    ),
    (&[("Content-Type", "text/plain")], 415),
    (&[], 415),
    (
        &[
            ("Host", "evil.example"),
            ("Content-Type", "application/json"),
        ],
        421,
    ),
];

/// The class of issue 47 item 6 on the AIP side: a web page the user opens must not make a
/// local `aip-partner` run its agent (cross-site POST) or read its answers (DNS rebinding),
/// in direct mode on both runtimes; a leader's request (JSON, no `Origin`, an IP address or a
/// name given with `--allow-host` as `Host`) is served.
#[test]
fn web_pages_cannot_drive_a_partner() {
    for runtime in ["tokio", "smol"] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("agent.log");
        let p = Partner::spawn_with(
            runtime,
            &dir.path().join("work"),
            r#"read q; echo "$q" >> "$LOG"; echo done"#,
            |cmd| {
                cmd.arg("--agent-env")
                    .arg(format!("LOG={}", log.display()))
                    .args(["--allow-host", "agents.lan"]);
            },
        );
        for (i, (headers, status)) in WEB_PAGE_REQUESTS.iter().enumerate() {
            let body = start_body(&format!("t-web-{i}"), &format!("from a web page {i}"));
            assert_eq!(
                raw_post(&p.url, headers, &body),
                *status,
                "{runtime} {headers:?}"
            );
        }
        let json = ("Content-Type", "application/json");
        let body = start_body("t-leader", "from the leader");
        assert_eq!(raw_post(&p.url, &[json], &body), 200, "{runtime}");
        let port = p
            .url
            .split(':')
            .nth(2)
            .and_then(|r| r.split('/').next())
            .unwrap();
        let named = format!("agents.lan:{port}");
        let body = start_body("t-named", "from the leader by name");
        assert_eq!(raw_post(&p.url, &[json, ("Host", &named)], &body), 200);
        eventually("both leader tasks ran their agent", || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.lines().count() == 2)
        });
        let ran = std::fs::read_to_string(&log).unwrap();
        assert!(!ran.contains("web page"), "{runtime}: {ran}");
        drop(p);
    }
}

/// The same for a group-mode partner's `group` endpoint: a web page must not make it join the
/// page's broker (where the page's leader would then give its agent tasks).
#[test]
fn web_pages_cannot_make_a_group_partner_join() {
    /// Killed when dropped, also when an assertion fails.
    struct Killed(Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_aip-partner"))
        .args([
            "--group",
            "--id",
            "p-web",
            "--listen",
            "127.0.0.1:0",
            "--quiet",
        ])
        .arg("--work-root")
        .arg(dir.path().join("work"))
        .args(["--", "true"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("aip-partner starts");
    let stdout = child.stdout.take().unwrap();
    let _child = Killed(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .expect("aip-partner prints its URL");
    let url = line
        .trim()
        .strip_prefix("aip-partner group rpc on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    let join = serde_json::json!({
        "jsonrpc": "2.0", "method": "group", "id": "1",
        "params": {"group": "g-web", "server": {"host": "127.0.0.1", "port": 1}},
    })
    .to_string();
    for (headers, status) in WEB_PAGE_REQUESTS {
        assert_eq!(raw_post(&url, headers, &join), status, "{headers:?}");
    }
    // A leader's invitation is read (and fails here only because no broker listens).
    let json = ("Content-Type", "application/json");
    assert_eq!(raw_post(&url, &[json], &join), 200);
}

/// Issue 48.7: a request larger than the partner's limit (64 MiB) was refused only after
/// 64 MiB had been read. A `Content-Length` over the limit is answered 413 before the body:
/// here only its first KiB is ever sent, and the answer still comes.
#[test]
fn an_oversized_request_is_refused_from_its_content_length() {
    use std::io::{Read, Write};
    for runtime in ["tokio", "smol"] {
        let dir = tempfile::tempdir().unwrap();
        let p = Partner::spawn(runtime, &dir.path().join("work"), "cat");
        let rest = p.url.strip_prefix("http://").unwrap();
        let (authority, path) = rest.split_once('/').unwrap();
        let mut s = std::net::TcpStream::connect(authority).unwrap();
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        let head = format!(
            "POST /{path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n",
            100u64 << 20
        );
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(&[b' '; 1024]).unwrap();
        let mut answer = [0u8; 64];
        let n = s
            .read(&mut answer)
            .expect("an answer before the body is sent");
        let answer = String::from_utf8_lossy(&answer[..n]);
        assert!(answer.starts_with("HTTP/1.1 413"), "{runtime}: {answer}");
    }
}
