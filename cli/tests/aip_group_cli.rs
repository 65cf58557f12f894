//! The real `aip group` leader console and two real `aip-partner --group` processes against
//! a real RabbitMQ node (the test's own, `aip-driver/tests/common/rabbit.rs`): partner A
//! joins by the `group` JSON-RPC method, B through its inbox; a task to all, a task
//! mentioning only B, complete to A, get-status, mute/unmute, remove A, disband. Waits are
//! on the binaries' output lines. Skips without `rabbitmq-server` unless
//! `AIP_REQUIRE_RABBITMQ_TEST=1`.

#[path = "../../aip-driver/tests/common/rabbit.rs"]
mod rabbit;
#[path = "../../aip-driver/tests/common/sdk.rs"]
mod sdk;

use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(60);

/// A child's stdout lines, read on a thread; every line seen is kept for failure messages.
struct Lines {
    rx: mpsc::Receiver<String>,
    seen: Vec<String>,
    name: &'static str,
}

impl Lines {
    fn of(child: &mut Child, name: &'static str) -> Lines {
        let out = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Lines {
            rx,
            seen: Vec::new(),
            name,
        }
    }

    /// The next line for which `want` holds (earlier lines are kept in `seen`).
    fn wait(&mut self, what: &str, want: impl Fn(&str) -> bool) -> String {
        let until = Instant::now() + DEADLINE;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if want(&l) {
                        return l;
                    }
                }
                Err(e) => panic!(
                    "{}: no line {what} ({e}); saw:\n{}",
                    self.name,
                    self.seen.join("\n")
                ),
            }
        }
    }

    fn wait_line(&mut self, line: &str) {
        self.wait(&format!("{line:?}"), |l| l == line);
    }

    /// Waits until every one of `lines` came (in any order) after the lines already read.
    fn wait_all(&mut self, lines: &[String]) {
        let mut left: Vec<&String> = lines.iter().collect();
        while !left.is_empty() {
            let got = self.wait(&format!("any of {left:?}"), |l| {
                left.iter().any(|w| *w == l)
            });
            left.retain(|w| **w != got);
        }
    }
}

/// A child process: SIGTERM when dropped (so a partner stops its agents), then SIGKILL if
/// it has not exited after the deadline.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let pid = rustix::process::Pid::from_child(&self.0);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let start = Instant::now();
        while matches!(self.0.try_wait(), Ok(None)) && start.elapsed() < DEADLINE {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn aic(n: u32) -> String {
    format!(
        "1.2.156.3088.1.1.7.{}.1.{n:04}",
        std::process::id() % 100_000
    )
}

fn partner(id: &str, work: &std::path::Path, inbox: Option<&str>) -> (Proc, Lines, String) {
    partner_with(id, work, inbox, &[])
}

/// [`partner`] with `extra` flags (TLS).
fn partner_with(
    id: &str,
    work: &std::path::Path,
    inbox: Option<&str>,
    extra: &[&std::ffi::OsStr],
) -> (Proc, Lines, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_aip-partner"));
    cmd.args(["--group", "--quiet", "--listen", "127.0.0.1:0", "--id", id])
        .arg("--work-root")
        .arg(work)
        .args(extra);
    if let Some(url) = inbox {
        cmd.args(["--inbox-broker", url]);
    }
    // The partner's own secrets never reach its agent (issue 47 item 8, group mode): a
    // leaked variable would show in every result line the test waits for.
    let mut child = cmd
        .env("AIP_GROUP_TEST_SECRET", "the-partners-secret")
        .args([
            "--",
            "sh",
            "-c",
            r#"while read q; do last=$q; done; echo "$AIP_TASK_ID says: $last${AIP_GROUP_TEST_SECRET}""#,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("aip-partner starts");
    let mut lines = Lines::of(&mut child, "aip-partner");
    let first = lines.wait("with the URL", |_| true);
    let url = first
        .strip_prefix("aip-partner group rpc on ")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_owned();
    if inbox.is_some() {
        lines.wait("inbox ready", |l| l.ends_with(" ready"));
    }
    (Proc(child), lines, url)
}

/// `aip group` on `broker` with `extra` flags, once it said the group was created: the
/// process, its stdout lines and its stdin.
fn leader(
    broker: &str,
    group: &str,
    leader_id: &str,
    extra: &[&std::ffi::OsStr],
) -> (Proc, Lines, ChildStdin) {
    let mut leader = Command::new(env!("CARGO_BIN_EXE_aip"))
        .args(["group", "--broker", broker, "--group", group])
        .args(["--leader-id", leader_id, "--status-timeout", "10"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("aip group starts");
    let mut ll = Lines::of(&mut leader, "aip group");
    let stdin = leader.stdin.take().unwrap();
    ll.wait("created", |l| {
        l.starts_with(&format!("group {group} created"))
    });
    (Proc(leader), ll, stdin)
}

fn send(stdin: &mut ChildStdin, line: &str) {
    writeln!(stdin, "{line}")
        .and_then(|_| stdin.flush())
        .unwrap();
}

#[test]
fn aip_group_leads_two_aip_partners_over_a_real_broker() {
    let Some(b) = rabbit::Broker::start() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (l, a, c) = (aic(0), aic(1), aic(2));
    let group = format!("cli-{}", std::process::id());
    let (_pa, mut la, url_a) = partner(&a, work.path(), None);
    let (_pc, mut lc, _) = partner(&c, work.path(), Some(&b.url()));

    let (leader, mut ll, mut stdin) = leader(&b.url(), &group, &l, &[]);

    send(&mut stdin, &format!("invite {a} {url_a}"));
    ll.wait_line(&format!("ok invite {a}"));
    send(&mut stdin, &format!("invite-inbox {c}"));
    ll.wait_line(&format!("joined {c}"));

    send(&mut stdin, "start t-1 all hello");
    ll.wait_all(
        &[a.clone(), c.clone()]
            .map(|who| format!("result {who} t-1 awaiting-completion: t-1 says: hello")),
    );
    send(&mut stdin, &format!("start t-2 {c} only you"));
    ll.wait_line(&format!(
        "result {c} t-2 awaiting-completion: t-2 says: only you"
    ));
    // A continue runs the agent again with every input (issue 48 item 5: it used to stick in
    // working).
    send(&mut stdin, &format!("continue t-2 {c} and more"));
    ll.wait("the continued task's new result", |l| {
        l.contains("t-2 says: and more")
    });
    lc.wait("the partner ran it again", |l| l.contains("t-2 continued"));
    send(&mut stdin, &format!("complete t-1 {a}"));
    ll.wait_line(&format!("result {a} t-1 completed: t-1 says: hello"));

    send(&mut stdin, "status");
    ll.wait_all(&[a.clone(), c.clone()].map(|who| format!("status {who} connected unmuted")));
    send(&mut stdin, &format!("mute {c}"));
    ll.wait_line(&format!("status {c} connected muted"));
    send(&mut stdin, &format!("unmute {c}"));
    ll.wait_line(&format!("status {c} connected unmuted"));
    send(&mut stdin, &format!("remove {a}"));
    ll.wait_line(&format!("left {a}"));
    send(&mut stdin, "members");
    ll.wait_line(&format!("member {a} Left unmuted"));
    send(&mut stdin, "disband");
    ll.wait_line("ok disband");
    let mut leader = leader;
    let status = leader.0.wait().unwrap();
    assert!(status.success(), "aip group exited with {status}");

    la.wait_line(&format!("left {group} (Asked)"));
    lc.wait_line(&format!("left {group} (Disbanded)"));
    // A was never mentioned on t-2; C ran both.
    assert!(
        !la.seen.iter().any(|l| l.contains("t-2")),
        "A saw t-2: {:?}",
        la.seen
    );
    assert!(lc.seen.contains(&format!("task {group} t-2 started")));
}

/// The AIP v02.01 production path on the command line: `aip group` on an `amqps://` broker
/// that takes only client certificates and logs them in with SASL EXTERNAL (CN = AIC), and
/// an `aip-partner --group` that serves its `group` RPC over https and joins with its own
/// certificate (the invitation carries no `accessToken`).
#[test]
fn aip_group_and_aip_partner_log_in_with_client_certificates_over_amqps() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = agent_rt::test_util::TestPki::new(pki_dir.path(), "amqps");
    let broker_cert = pki.server("broker", &["127.0.0.1", "localhost"]);
    let Some(b) = rabbit::Broker::start_tls(&rabbit::TlsListener {
        ca: pki.ca_file(),
        cert: broker_cert.cert,
        key: broker_cert.key,
        remove_with_node: None,
    }) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (l, a) = (aic(10), aic(11));
    b.add_user(&l);
    b.add_user(&a);
    let ca = pki.ca_file();
    let amqp_flags = |cn: &str| {
        let c = pki.client(cn, cn);
        [
            "--amqp-ca".into(),
            ca.clone().into_os_string(),
            "--amqp-cert".into(),
            c.cert.into_os_string(),
            "--amqp-key".into(),
            c.key.into_os_string(),
        ]
    };
    let rpc_cert = pki.server("rpc", &["127.0.0.1"]);
    let mut partner_flags = amqp_flags(&a).to_vec();
    partner_flags.extend([
        "--tls-cert".into(),
        rpc_cert.cert.into_os_string(),
        "--tls-key".into(),
        rpc_cert.key.into_os_string(),
    ]);
    let flags: Vec<&std::ffi::OsStr> = partner_flags.iter().map(|s| s.as_os_str()).collect();
    let (_pa, mut la, url_a) = partner_with(&a, work.path(), None, &flags);
    assert!(url_a.starts_with("https://"), "{url_a}");

    let group = format!("cli-tls-{}", std::process::id());
    let mut leader_flags = amqp_flags(&l).to_vec();
    leader_flags.extend(["--ca-file".into(), ca.clone().into_os_string()]);
    let flags: Vec<&std::ffi::OsStr> = leader_flags.iter().map(|s| s.as_os_str()).collect();
    let (leader, mut ll, mut stdin) = leader(&b.tls_url(), &group, &l, &flags);
    send(&mut stdin, &format!("invite {a} {url_a}"));
    ll.wait_line(&format!("ok invite {a}"));
    send(&mut stdin, "start t-1 all over amqps");
    ll.wait_line(&format!(
        "result {a} t-1 awaiting-completion: t-1 says: over amqps"
    ));
    send(&mut stdin, "disband");
    ll.wait_line("ok disband");
    let mut leader = leader;
    let status = leader.0.wait().unwrap();
    assert!(status.success(), "aip group exited with {status}");
    la.wait_line(&format!("left {group} (Disbanded)"));
}

/// Issue 48.5 with the SDK's group leader (`GroupLeaderMqClient`,
/// `cli/tests/sdk/sdk_group_continue.py`): a start, then a continue, to the real
/// `aip-partner --group`. The continue used to be logged as ignored and the task stayed in
/// `working`; now the agent runs again with every input and the task awaits completion with
/// the new answer, then completes; it is accepted once.
#[test]
fn the_sdk_group_leader_continues_a_task_on_aip_partner() {
    let test = "the_sdk_group_leader_continues_a_task_on_aip_partner";
    let Some(python) = sdk::python_or_skip(test) else {
        return;
    };
    let Some(b) = rabbit::Broker::start() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let (l, a) = (aic(20), aic(21));
    let group = format!("sdk-continue-{}", std::process::id());
    let (_pa, _la, url_a) = partner(&a, work.path(), None);
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/sdk_group_continue.py");
    let o = Command::new(python)
        .arg(script)
        .args([&b.port.to_string(), &l, &group, &a, &url_a])
        .output()
        .expect("run the SDK group leader");
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).contains("DONE"),
        "the SDK group leader failed\n{}",
        sdk::show(&o)
    );
}
