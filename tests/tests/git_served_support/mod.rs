//! What the served-repository tests share (`tests/tests/git_served.rs`): the agent, the
//! spawners that keep each process's log, a TCP tap that reads the handle off the wire, and
//! an intruder holding a served repository's URL.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use awcp_tests::bins::{self, show, KillOnDrop};
use awcp_tests::files::{entries, read};
use awcp_tests::git::git;

/// Longest any wait may take before the test fails (never reached when things work).
pub const DEADLINE: Duration = Duration::from_secs(90);

/// The agent. It writes `RESULT.txt`, rewrites `a.txt` and deletes `gone.txt`; with the
/// prompt `slow`, it first says it started (`started-<delegation id>` beside it) and waits
/// until `release` or `release-<delegation id>` exists (60 s at most); with `big`, it also
/// writes 2 MB of random bytes (`big.bin`).
pub const AGENT: &str = r#"#!/bin/sh
here="$(dirname "$0")"
if [ "$AWCP_PROMPT" = slow ]; then
  touch "$here/started-$AWCP_DELEGATION_ID"
  i=0
  while [ ! -e "$here/release" ] && [ ! -e "$here/release-$AWCP_DELEGATION_ID" ] \
    && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
fi
echo "agent was here" > RESULT.txt
echo "A by the agent" > a.txt
rm -f gone.txt
if [ "$AWCP_PROMPT" = big ]; then head -c 2000000 /dev/urandom > big.bin; fi
echo "done editing"
"#;

/// Whether `git` runs here (every test needs it; without it they are skipped, as the
/// executor would decline git delegations).
pub fn have_git(test: &str) -> bool {
    let ok = Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipping {test}: no git binary");
    }
    ok
}

/// Spawns `cmd` with stdout piped and stderr appended to `log`; the child and what its first
/// stdout line says after `prefix` (the URL it listens on). Unlike
/// [`bins::spawn_announcing`], which discards stderr, the log is kept: the tests read it.
pub fn spawn_logged(cmd: &mut Command, log: &Path, prefix: &str) -> (KillOnDrop, String) {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let (child, rest) = bins::spawn_announcing_to(cmd, prefix, log);
    (KillOnDrop(child), rest)
}

/// An executor whose agent is [`AGENT`], logging at debug level to `dir/executor.log`; `dir`
/// holds its state, work directories and agent. Its AWCP URL.
pub fn executor(dir: &Path) -> (KillOnDrop, String) {
    std::fs::create_dir_all(dir).unwrap();
    let agent = dir.join("agent.sh");
    std::fs::write(&agent, AGENT).unwrap();
    let mut cmd = bins::executor_command(dir, &format!("sh {}", agent.display()));
    cmd.args([
        "--git-name",
        "Test Executor",
        "--git-email",
        "exec@example.org",
    ])
    .env("RUST_LOG", "debug");
    spawn_logged(
        &mut cmd,
        &dir.join("executor.log"),
        bins::EXECUTOR_ANNOUNCES,
    )
}

/// `awcp --json delegate WS --transport git …` with `extra` arguments, logging at debug
/// level.
pub fn delegate_cmd(ws: &Path, peer: &str, state: &Path, prompt: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(bins::path("awcp"));
    cmd.args(["--quiet", "--json", "delegate"])
        .arg(ws)
        .args(["--peer", peer, "--prompt", prompt, "--transport", "git"])
        .arg("--state-dir")
        .arg(state)
        .args(extra)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("RUST_LOG", "debug");
    cmd
}

/// `awcp daemon` on `state` (API and `extra`, e.g. `--serve-archives`, on 127.0.0.1 port 0),
/// logging at debug level to `log`; its API URL.
pub fn daemon(state: &Path, log: &Path, extra: &[&str]) -> (KillOnDrop, String) {
    let mut cmd = Command::new(bins::path("awcp"));
    cmd.args(["--quiet", "daemon", "--listen", "127.0.0.1:0"])
        .arg("--state-dir")
        .arg(state)
        .args(extra)
        .env_remove("AWCP_DAEMON_TOKEN")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("RUST_LOG", "debug");
    spawn_logged(&mut cmd, log, bins::DAEMON_ANNOUNCES)
}

/// `awcp --json delegate WS --daemon --background --transport git --prompt PROMPT` on the
/// daemon at `api`: the delegation's id.
pub fn delegate_on_daemon(api: &str, state: &Path, ws: &Path, peer: &str, prompt: &str) -> String {
    let o = bins::awcp_on_daemon(
        api,
        state,
        &[
            "--json",
            "delegate",
            ws.to_str().unwrap(),
            "--daemon",
            "--background",
            "--peer",
            peer,
            "--prompt",
            prompt,
            "--transport",
            "git",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["delegationId"].as_str().unwrap().to_owned()
}

/// `awcp --json wait ID` on the daemon at `api`: its output once the delegation ended.
pub fn wait_on_daemon(api: &str, state: &Path, id: &str) -> Output {
    bins::awcp_on_daemon(api, state, &["--json", "wait", id, "--timeout", "90"])
}

/// A workspace: `a.txt`, `b.txt`, `gone.txt`, and `tag.txt` holding `tag` (so two
/// workspaces' base commits differ).
pub fn workspace(tag: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for (f, t) in [
        ("a.txt", "A\n"),
        ("b.txt", "B\n"),
        ("gone.txt", "G\n"),
        ("tag.txt", tag),
    ] {
        std::fs::write(d.path().join(f), t).unwrap();
    }
    d
}

/// The delegation record `awcp --json` printed last on stdout.
pub fn record(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().last().unwrap_or_else(|| panic!("{}", show(o)));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {}", show(o)))
}

/// The agent's result is in `ws`, and nothing else came with it.
pub fn assert_applied(o: &Output, ws: &Path, what: &str) {
    assert_eq!(o.status.code(), Some(0), "{what}: applied\n{}", show(o));
    assert_eq!(read(&ws.join("RESULT.txt")), "agent was here\n", "{what}");
    assert_eq!(read(&ws.join("a.txt")), "A by the agent\n", "{what}");
    assert_eq!(read(&ws.join("b.txt")), "B\n", "{what}");
    assert!(
        !ws.join("gone.txt").exists(),
        "{what}: the deletion applied"
    );
    assert_eq!(record(o)["state"], "completed", "{what}");
    let mut names = entries(ws);
    names.sort();
    assert_eq!(
        names,
        ["RESULT.txt", "a.txt", "b.txt", "tag.txt"],
        "{what}: the executor's change and nothing else"
    );
}

/// Waits until `cond` holds (polling every 20 ms, failing after [`DEADLINE`]).
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The ids of the delegations whose agent said it started (`started-<id>` in `exec_dir`).
pub fn started(exec_dir: &Path) -> Vec<String> {
    let mut ids: Vec<String> = entries(exec_dir)
        .into_iter()
        .filter_map(|n| n.strip_prefix("started-").map(str::to_owned))
        .collect();
    ids.sort();
    ids
}

/// Waits until `n` agents started; their delegation ids.
pub fn wait_started(exec_dir: &Path, n: usize) -> Vec<String> {
    wait_for("the tasks to start", || started(exec_dir).len() >= n);
    started(exec_dir)
}

/// Nothing of the delegations is left: the delegator's repositories and request bodies, the
/// executor's repositories and work directories.
pub fn assert_nothing_left(exec_dir: &Path, state: &Path, what: &str) {
    wait_for(&format!("{what}: the executor's release"), || {
        entries(&exec_dir.join("state").join("git")).is_empty()
            && entries(&exec_dir.join("work")).is_empty()
    });
    assert_eq!(entries(&state.join("git")), Vec::<String>::new(), "{what}");
    assert_eq!(
        entries(&state.join("git-http")),
        Vec::<String>::new(),
        "{what}: request bodies left"
    );
}

/// Runs git in `dir` as a client of a served repository (no configuration, no prompt): its
/// output, or what it said when it failed.
pub fn try_git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .args(["-c", "user.name=Intruder", "-c", "user.email=i@example.org"])
        .args(args)
        .output()
        .expect("git runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_owned();
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(text(&out.stderr))
    }
}

/// `git ls-remote URL`.
pub fn ls_remote(url: &str) -> Result<String, String> {
    try_git(Path::new("/"), &["ls-remote", "--", url])
}

/// The status of one plain HTTP request (`Connection: close`) to `url`.
pub fn http_status(method: &str, url: &str, body: &[u8]) -> u16 {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut s = TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
         Content-Type: application/x-git-upload-pack-request\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer to {method} {path}: {text:?}"))
}

/// The token of a served repository's URL (`…/git/<token>/repo.git`).
pub fn token_of(url: &str) -> String {
    let after = &url[url.find("/git/").expect("a served repository URL") + 5..];
    after
        .strip_suffix("/repo.git")
        .expect("…/repo.git")
        .to_owned()
}

/// A TCP relay in front of an executor: the delegator talks to the executor through it, and
/// every byte the delegator sent is kept, so the test reads the START requests' handles as
/// the executor received them. Every thread and socket ends when it is dropped.
pub struct Tap {
    /// The executor's AWCP URL through the relay.
    pub url: String,
    pub port: u16,
    pub sent: Arc<Mutex<Vec<u8>>>,
    pub sockets: Arc<Mutex<Vec<TcpStream>>>,
    pub stop: Arc<AtomicBool>,
    pub accept: Option<JoinHandle<()>>,
}

impl Tap {
    /// Relays to the executor at `peer` (`http://host:port/awcp`).
    pub fn start(peer: &str) -> Tap {
        let rest = peer.strip_prefix("http://").expect("a plain http peer");
        let (target, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let target = target.to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let sent: Arc<Mutex<Vec<u8>>> = Arc::default();
        let sockets: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, k2, t2) = (sent.clone(), sockets.clone(), stop.clone());
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if t2.load(Ordering::SeqCst) {
                    break;
                }
                let (Ok(down), Ok(up)) = (conn, TcpStream::connect(&target)) else {
                    continue;
                };
                let (Ok(d2), Ok(u2), Ok(d3), Ok(u3)) = (
                    down.try_clone(),
                    up.try_clone(),
                    down.try_clone(),
                    up.try_clone(),
                ) else {
                    continue;
                };
                k2.lock().unwrap().extend([d3, u3]);
                let kept = s2.clone();
                std::thread::spawn(move || relay(down, up, Some(&kept)));
                std::thread::spawn(move || relay(u2, d2, None));
            }
        });
        Tap {
            url: format!("http://127.0.0.1:{port}{path}"),
            port,
            sent,
            sockets,
            stop,
            accept: Some(accept),
        }
    }

    /// Every git handle the delegator sent (`{"transport":"git","repoUrl":…}` objects).
    pub fn handles(&self) -> Vec<serde_json::Value> {
        let sent = self.sent.lock().unwrap().clone();
        let needle = b"\"repoUrl\"";
        let mut found: Vec<serde_json::Value> = Vec::new();
        let mut at = 0;
        while let Some(i) = find(&sent[at..], needle) {
            let i = at + i;
            at = i + needle.len();
            let Some(open) = sent[..i].iter().rposition(|b| *b == b'{') else {
                continue;
            };
            let mut values = serde_json::Deserializer::from_slice(&sent[open..])
                .into_iter::<serde_json::Value>();
            if let Some(Ok(v)) = values.next() {
                if !found.contains(&v) {
                    found.push(v);
                }
            }
        }
        found
    }

    /// Waits until the delegator sent `n` git handles; the handles, in the order sent.
    pub fn wait_handles(&self, n: usize) -> Vec<serde_json::Value> {
        wait_for("the git handles", || self.handles().len() >= n);
        self.handles()
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for s in self.sockets.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Copies `from` to `to` until either ends (keeping the bytes in `kept`), then closes both
/// directions' write side.
pub fn relay(mut from: TcpStream, mut to: TcpStream, kept: Option<&Mutex<Vec<u8>>>) {
    let mut buf = [0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(k) = kept {
            k.lock().unwrap().extend_from_slice(&buf[..n]);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The repository URL of a handle.
pub fn repo_url(h: &serde_json::Value) -> String {
    h["repoUrl"].as_str().expect("repoUrl").to_owned()
}

/// A `git` delegation's repository on the delegator: `<state>/git/<id>.git`'s refs.
pub fn served_refs(state: &Path, id: &str) -> String {
    git(
        &state.join("git").join(format!("{id}.git")),
        &["for-each-ref", "--format=%(refname) %(objectname)"],
    )
}

/// A running `awcp delegate --serve-archives` of the `slow` agent, and a clone of its base
/// (from the served URL) with an intruder's commit on top and an unrelated root commit.
pub struct Intrusion {
    pub dir: tempfile::TempDir,
    pub exec_dir: std::path::PathBuf,
    pub _executor: KillOnDrop,
    pub _tap: Tap,
    pub ws: tempfile::TempDir,
    pub state: std::path::PathBuf,
    pub child: ChildOutput,
    pub id: String,
    pub url: String,
    /// `refs/heads/awcp/<id>-base`.
    pub base: String,
    /// The served repository's refs before any push.
    pub before: String,
    /// The clone.
    pub scratch: std::path::PathBuf,
    /// A root commit unrelated to the base.
    pub orphan: String,
}

impl Intrusion {
    pub fn start() -> Intrusion {
        let dir = tempfile::tempdir().unwrap();
        let exec_dir = dir.path().join("executor");
        let (executor, peer) = executor(&exec_dir);
        let tap = Tap::start(&peer);
        let ws = workspace("one\n");
        let state = dir.path().join("delegator");
        let child = delegate_cmd(
            ws.path(),
            &tap.url,
            &state,
            "slow",
            &["--serve-archives", "127.0.0.1:0"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        let child = ChildOutput(Some(child));
        let id = wait_started(&exec_dir, 1).remove(0);
        let url = repo_url(&tap.wait_handles(1)[0]);
        let base = format!("refs/heads/awcp/{id}-base");
        let before = served_refs(&state, &id);
        assert!(before.contains(&base), "{before}");
        try_git(
            dir.path(),
            &[
                "clone",
                "-q",
                "--branch",
                &format!("awcp/{id}-base"),
                "--",
                &url,
                "scratch",
            ],
        )
        .unwrap_or_else(|e| panic!("clone while running: {e}"));
        let scratch = dir.path().join("scratch");
        std::fs::write(scratch.join("intruder.txt"), "not the executor's\n").unwrap();
        git(&scratch, &["add", "intruder.txt"]);
        git(&scratch, &["commit", "-q", "-m", "intruder"]);
        let tree = git(&scratch, &["rev-parse", "HEAD^{tree}"]);
        let orphan = git(&scratch, &["commit-tree", &tree, "-m", "orphan"]);
        Intrusion {
            dir,
            exec_dir,
            _executor: executor,
            _tap: tap,
            ws,
            state,
            child,
            id,
            url,
            base,
            before,
            scratch,
            orphan,
        }
    }

    /// Pushes each of `specs` from the clone: those `git` reported done or that changed a
    /// ref of the served repository.
    pub fn taken(&self, specs: &[String]) -> Vec<String> {
        let mut taken = Vec::new();
        for spec in specs {
            let r = try_git(&self.scratch, &["push", "--", &self.url, spec]);
            if r.is_ok() || served_refs(&self.state, &self.id) != self.before {
                taken.push(format!("{spec}: {r:?}"));
            }
        }
        taken
    }

    /// Lets the agent finish: the executor's work, and nothing else, is applied, and nothing
    /// is left.
    pub fn finish(self, what: &str) {
        std::fs::write(self.exec_dir.join("release"), "").unwrap();
        let o = self.child.wait();
        assert_applied(&o, self.ws.path(), what);
        // `awcp delegate` logged at debug level: not the URL.
        let token = token_of(&self.url);
        assert!(
            !show(&o).contains(&token),
            "{what}: the token in {}",
            show(&o)
        );
        assert_nothing_left(&self.exec_dir, &self.state, what);
        drop(self.dir);
    }
}

/// A spawned `awcp delegate` whose output is collected once it exits (killed if the test
/// fails first).
pub struct ChildOutput(pub Option<Child>);

impl ChildOutput {
    pub fn wait(mut self) -> Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for ChildOutput {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
