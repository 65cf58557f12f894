//! Data safety on the unhappy paths, tried with the real binaries (`awcp-executor`, `awcp`) on
//! the runtime under test: what the executor deletes and locks (issue 11.5), which processes
//! outlive a task (11.6), the one admission limit for workspaces and results (11.7), secrets
//! and what is not shipped (11.8).
//!
//! Processes are identified by PID *and* start time (`/proc/<pid>/stat`), so a recycled PID is
//! never mistaken for a survivor, and only processes these tests started are ever signalled.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use awcp_driver::runtime::blocking;
use awcp_proto::{DelegationState, DelegatorEvent};
use futures::StreamExt;

use super::{params, start_delegator, timeout, tree, workspace, TestRuntime};

// ---------------------------------------------------------------------------------------------
// The binaries (built once per test process by `awcp_tests::bins`)

/// Environment variables a test process may have that would change a binary's defaults.
const AWCP_ENV: &[&str] = &[
    "AWCP_HOME",
    "AWCP_STATE_DIR",
    "AWCP_WORK_ROOT",
    "AWCP_LISTEN",
    "AWCP_AGENT_CMD",
    "AWCP_AUTH_TOKEN",
    "AWCP_TOKEN",
    "AWCP_PEER",
    "AWCP_RUNTIME",
    "AWCP_DAEMON_URL",
    "AWCP_DAEMON_LISTEN",
];

/// The example binary `name` (`awcp` or `awcp-executor`) on `R`'s runtime, with the AWCP
/// environment cleared and, when `R` runs with authentication, its credential set: an
/// executor requires it, `awcp delegate` presents it.
fn command<R: TestRuntime>(name: &str) -> Command {
    let mut c = Command::new(awcp_tests::bins::path(name));
    for k in AWCP_ENV {
        c.env_remove(k);
    }
    c.args(["--runtime", R::NAME]);
    if let Some(token) = R::TOKEN {
        let var = if name == "awcp" {
            "AWCP_TOKEN"
        } else {
            "AWCP_AUTH_TOKEN"
        };
        c.env(var, token);
    }
    c
}

/// A running `awcp-executor`, killed (SIGKILL) when dropped.
pub struct ExecProc {
    /// The process.
    pub child: Child,
    /// Its AWCP URL (`http://127.0.0.1:port/awcp`).
    pub peer: String,
    /// Where its stderr goes.
    pub log: PathBuf,
}

impl ExecProc {
    /// Sends SIGTERM (a graceful shutdown) and waits for the process to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let st = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(st.success());
        self.child.wait().expect("executor exits")
    }

    /// SIGKILL: no chance to clean up.
    pub fn sigkill(&mut self) {
        self.child.kill().expect("SIGKILL delivered");
        self.child.wait().expect("executor reaped");
    }

    /// The executor's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ExecProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How an `awcp-executor` start went.
pub enum Started {
    /// It printed its URL and serves.
    Running(ExecProc),
    /// It exited before serving.
    Refused {
        /// Exit code.
        code: Option<i32>,
        /// What it wrote on stderr.
        stderr: String,
    },
}

impl Started {
    /// The running executor (panics with its stderr if it refused).
    pub fn running(self) -> ExecProc {
        match self {
            Started::Running(p) => p,
            Started::Refused { code, stderr } => {
                panic!("awcp-executor refused to start ({code:?}): {stderr}")
            }
        }
    }
}

/// Starts `awcp-executor --listen 127.0.0.1:0 ARGS` on `R` with `env` (stderr to `log`) and
/// waits for the URL line or the exit.
pub fn spawn_executor<R: TestRuntime>(
    args: &[String],
    env: &[(&str, String)],
    log: &Path,
) -> Started {
    let mut c = command::<R>("awcp-executor");
    if !args.iter().any(|a| a == "--listen") {
        c.args(["--listen", "127.0.0.1:0"]);
    }
    c.args(args)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).expect("log file"));
    for (k, v) in env {
        c.env(k, v);
    }
    // The agent gets only what the executor is told to pass: what the test sets is for it.
    if !env.is_empty() {
        let names: Vec<&str> = env.iter().map(|(k, _)| *k).collect();
        c.args(["--agent-env", &names.join(",")]);
    }
    let mut child = c.spawn().expect("awcp-executor starts");
    let mut line = String::new();
    let _ = std::io::BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .expect("read the executor's stdout");
    match line
        .trim()
        .strip_prefix(awcp_tests::bins::EXECUTOR_ANNOUNCES)
    {
        Some(url) => Started::Running(ExecProc {
            child,
            peer: url.to_owned(),
            log: log.to_owned(),
        }),
        None => {
            let st = child.wait().expect("executor exits");
            Started::Refused {
                code: st.code(),
                stderr: std::fs::read_to_string(log).unwrap_or_default(),
            }
        }
    }
}

/// What `awcp …` printed and how it exited.
pub struct CliRun {
    /// Exit code.
    pub code: Option<i32>,
    /// Stdout (the JSON record with `--json`).
    pub stdout: String,
    /// Stderr.
    pub stderr: String,
}

impl CliRun {
    /// Stdout as JSON (panics with both streams if it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "awcp printed no JSON ({e}), exit {:?}\nstdout: {}\nstderr: {}",
                self.code, self.stdout, self.stderr
            )
        })
    }
}

/// Runs `awcp --quiet ARGS` on `R` to its end.
pub fn awcp_cli<R: TestRuntime>(args: &[String]) -> CliRun {
    let o = command::<R>("awcp")
        .arg("--quiet")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("awcp runs");
    CliRun {
        code: o.status.code(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Starts `awcp daemon --listen 127.0.0.1:0 ARGS` on `R`; returns it and its URL.
pub fn spawn_daemon<R: TestRuntime>(args: &[&str]) -> (Child, String) {
    awcp_tests::bins::spawn_announcing(
        command::<R>("awcp")
            .env_remove("AWCP_DAEMON_TOKEN")
            .args(["--quiet", "daemon", "--listen", "127.0.0.1:0"])
            .args(args),
        awcp_tests::bins::DAEMON_ANNOUNCES,
    )
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|x| (*x).to_owned()).collect()
}

/// An `awcp-executor` on `R` with its state under `d/exec` and `extra` flags, running.
async fn executor_in<R: TestRuntime>(d: &Path, extra: &[&str]) -> ExecProc {
    let mut args = vec!["--state-dir".into(), s(&d.join("exec"))];
    args.extend(strings(extra));
    let log = d.join("executor.log");
    blocking(&R::default(), move || {
        spawn_executor::<R>(&args, &[], &log).running()
    })
    .await
}

/// `awcp delegate --json --prompt PROMPT WS --peer PEER --state-dir STATE EXTRA…`.
fn delegate_args(ws: &Path, peer: &str, state: &Path, prompt: &str, extra: &[&str]) -> Vec<String> {
    let mut a = strings(&["delegate", "--json", "--prompt", prompt]);
    a.extend([s(ws), "--peer".into(), peer.to_owned()]);
    a.extend(["--state-dir".into(), s(state)]);
    a.extend(strings(extra));
    a
}

// ---------------------------------------------------------------------------------------------
// Processes of a task tree

/// A process some agent started, identified by PID and start time (clock ticks since boot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proc {
    /// PID.
    pub pid: u32,
    /// Start time from `/proc/<pid>/stat` (field 22).
    pub start: u64,
}

/// `(state, start time)` of a live process from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state …`: comm may contain anything, so parse after the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // Field 22 (starttime) is index 19 after pid and comm.
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

impl Proc {
    /// The process `pid` as it is now (`None` if it is gone).
    pub fn of(pid: u32) -> Option<Proc> {
        stat(pid).map(|(_, start)| Proc { pid, start })
    }

    /// Whether this very process still runs (a zombie does not: it can do nothing more).
    pub fn alive(&self) -> bool {
        matches!(stat(self.pid), Some((st, start)) if start == self.start && st != 'Z' && st != 'X')
    }

    /// SIGKILL to this process if it is still this process (test clean-up only).
    fn kill_if_alive(&self) {
        if self.alive() {
            let _ = Command::new("kill")
                .args(["-KILL", &self.pid.to_string()])
                .status();
        }
    }
}

/// The agent command of the task-tree tests: a shell that starts a grandchild (`sleep`) and
/// a daemon that escapes every process-group and environment rule (a double fork into a new
/// session with an empty environment: `(env -i setsid sh -c … &)`), reports the three PIDs
/// as `tree <shell> <grandchild> <daemon>`, then runs `tail` (`wait` for the grandchild, or
/// exit with 3). Only a per-task cgroup (or a walk that saw it) reaches the daemon.
fn tree_agent(tail: &str) -> String {
    format!(
        "sh -c 'sleep 600 & P=$(mktemp -u); \
         (env -i P=$P setsid /bin/sh -c \"echo \\$\\$ > $P.t; mv $P.t $P; exec sleep 600\" &); \
         while [ ! -s $P ]; do sleep 0.01; done; \
         echo \"tree $$ $! $(cat $P)\"; rm -f $P; {tail}'"
    )
}

/// Follows a delegation's events until it ends; returns the processes of its first
/// `tree …` status line (read while they run) and the final state.
async fn follow_tree<R: TestRuntime>(
    events: &mut futures::channel::mpsc::UnboundedReceiver<DelegatorEvent>,
    on_tree: impl FnOnce(),
) -> (Vec<Proc>, Option<DelegationState>) {
    let mut procs = Vec::new();
    let mut on_tree = Some(on_tree);
    let follow = async {
        while let Some(ev) = events.next().await {
            match ev {
                DelegatorEvent::Progress {
                    message: Some(m), ..
                } if procs.is_empty() && m.starts_with("tree ") => {
                    let pids: Vec<u32> = m
                        .split_whitespace()
                        .skip(1)
                        .filter_map(|p| p.parse().ok())
                        .collect();
                    procs = pids.iter().copied().filter_map(Proc::of).collect();
                    assert!(
                        pids.len() == 3 && procs.len() == 3,
                        "the shell, its grandchild and its daemon run when reported: {m}"
                    );
                    if let Some(f) = on_tree.take() {
                        f();
                    }
                }
                DelegatorEvent::Ended { state, .. } => return Some(state),
                _ => {}
            }
        }
        None
    };
    let end = timeout::<R, _>(Duration::from_secs(60), follow)
        .await
        .flatten();
    (procs, end)
}

/// Waits (bounded) until none of `procs` runs; otherwise kills the survivors and fails.
async fn assert_tree_gone<R: TestRuntime>(procs: &[Proc], what: &str) {
    assert!(
        !procs.is_empty(),
        "{what}: the agent never reported its tree"
    );
    for _ in 0..2000 {
        if procs.iter().all(|p| !p.alive()) {
            return;
        }
        R::default().sleep(Duration::from_millis(10)).await;
    }
    let left: Vec<_> = procs.iter().filter(|p| p.alive()).copied().collect();
    for p in &left {
        p.kill_if_alive();
    }
    panic!("{what}: processes of the task tree outlived it: {left:?}");
}

/// A FIFO the agent blocks on (`cat FIFO`) until the test opens and closes it.
struct Gate {
    path: PathBuf,
}

impl Gate {
    fn new(dir: &Path) -> Gate {
        let path = dir.join("gate.fifo");
        let st = Command::new("mkfifo").arg(&path).status().expect("mkfifo");
        assert!(st.success());
        Gate { path }
    }

    /// Lets the blocked agent continue: opens the FIFO for writing once the agent has it open
    /// for reading. Panics (instead of hanging the test) if no agent opens it within a minute.
    fn open(&self) {
        use std::os::unix::fs::OpenOptionsExt;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            // Without a reader, a non-blocking open for writing fails (ENXIO) at once.
            let opened = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&self.path);
            if opened.is_ok() {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the agent never opened its gate {}",
                self.path.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 11.5: the executor deletes only what it created and recorded; one instance per directory

/// A start-up must leave the operator's files in the work root alone (it used to delete every
/// entry but `.awcp` as a "stale work directory").
pub async fn executor_start_up_leaves_foreign_files_in_its_work_root<R: TestRuntime>() {
    let rt = R::default();
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("home");
    std::fs::create_dir_all(work.join("project/src")).unwrap();
    std::fs::write(work.join("notes.txt"), "mine\n").unwrap();
    std::fs::write(work.join("project/src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::create_dir_all(work.join(".awcp/downloads")).unwrap();
    std::fs::write(work.join(".awcp/downloads/keep"), "mine too\n").unwrap();
    let before = tree(&work);
    let args = vec![
        "--work-root".into(),
        s(&work),
        "--state-dir".into(),
        s(&dir.path().join("state")),
    ];
    let log = dir.path().join("executor.log");
    let ex = blocking(&rt, move || spawn_executor::<R>(&args, &[], &log).running()).await;
    assert_eq!(
        tree(&work),
        before,
        "start-up deleted files it did not create"
    );
    drop(ex);

    // Pointed at the home directory itself: refused before anything is touched.
    let args = vec![
        "--work-root".into(),
        s(&work),
        "--state-dir".into(),
        s(&dir.path().join("state2")),
    ];
    let env = vec![("HOME", s(&work))];
    let log = dir.path().join("executor-home.log");
    match blocking(&rt, move || spawn_executor::<R>(&args, &env, &log)).await {
        Started::Running(p) => {
            drop(p);
            panic!("an executor started with the home directory as its work root");
        }
        Started::Refused { code, stderr } => {
            assert_eq!(code, Some(2), "{stderr}");
            assert!(stderr.contains("home directory"), "{stderr}");
        }
    }
    assert_eq!(tree(&work), before, "the refused start-up touched the home");
}

// ---------------------------------------------------------------------------------------------
// Journal records across releases: an upgrade finishes what the older release left, a
// downgrade leaves what the newer release wrote alone.

/// An assignment id for the record tests.
const RECORD_ID: &str = "dlg_0a1b2c3d4e5f60718293a4b5c6d7e8f9";

/// A journal record as the release before versioned records wrote it (no `version` field;
/// with authentication, the clear-text credential those releases kept) of an assignment that
/// was running `task` in `work/RECORD_ID` when its executor died.
fn version_0_running_record<R: TestRuntime>(work: &Path, task: &str) -> serde_json::Value {
    let invite = serde_json::json!({
        "version": "1",
        "type": "INVITE",
        "delegationId": RECORD_ID,
        "task": {"description": "d", "prompt": "p"},
        "lease": {"ttlSeconds": 600, "accessMode": "rw"},
        "environment": {"resources": [{"name": "workspace", "type": "fs", "mode": "rw"}]},
    });
    let mut r = serde_json::json!({
        "id": RECORD_ID,
        "invite": invite,
        "dialect": "reference",
        "state": "active",
        "workDir": s(&work.join(RECORD_ID)),
        "allocated": true,
        "released": false,
        "transport": "archive",
        "task": task,
        "retentionMs": 60_000,
    });
    if let Some(token) = R::TOKEN {
        r["credential"] = token.into();
    }
    r
}

/// Polls `done` (every 10 ms, up to 20 s); `true` once it holds.
async fn eventually<R: TestRuntime>(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..2000 {
        if done() {
            return true;
        }
        R::default().sleep(Duration::from_millis(10)).await;
    }
    done()
}

/// The executor after an upgrade (records without a `version`, from the release before): it
/// ends the task the record names, removes the recorded work directory, and journals the
/// assignment back in today's format as failed, with the credential digested.
pub async fn an_upgraded_executor_ends_the_task_an_older_release_journaled<R: TestRuntime>() {
    let rt = R::default();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let work = d.join("work");
    std::fs::create_dir_all(work.join(RECORD_ID).join("workspace")).unwrap();
    std::fs::write(work.join(RECORD_ID).join("workspace/a.txt"), "a\n").unwrap();
    // The older release's task: a process group of its own, marked with the delegation id,
    // as the executor starts tasks.
    let mut task = {
        use std::os::unix::process::CommandExt;
        Command::new("sleep")
            .arg("600")
            .env("AWCP_DELEGATION_ID", RECORD_ID)
            .process_group(0)
            .spawn()
            .expect("sleep starts")
    };
    let proc_ = Proc::of(task.id()).expect("the task runs");
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let handle = format!("{}:{}:{}", proc_.pid, proc_.start, boot.trim());
    let record = version_0_running_record::<R>(&work, &handle);
    let journal = d.join("exec/assignments");
    std::fs::create_dir_all(&journal).unwrap();
    let file = journal.join(format!("{RECORD_ID}.json"));
    std::fs::write(&file, record.to_string()).unwrap();

    let args = vec![
        "--work-root".into(),
        s(&work),
        "--state-dir".into(),
        s(&d.join("exec")),
    ];
    let log = d.join("executor.log");
    let ex = blocking(&rt, move || spawn_executor::<R>(&args, &[], &log).running()).await;
    let ended = eventually::<R>(|| !proc_.alive()).await;
    proc_.kill_if_alive();
    let _ = task.wait();
    assert!(
        ended,
        "the recorded task outlived the upgrade\n{}",
        ex.log_text()
    );
    assert!(
        eventually::<R>(|| !work.join(RECORD_ID).exists()).await,
        "the recorded work directory is removed\n{}",
        ex.log_text()
    );
    let back = awcp_driver::executor::journal::read_record_file(&file).expect("the record is kept");
    assert_eq!(back["version"], 1, "written back in today's format: {back}");
    assert_eq!(back["state"], "error", "{back}");
    assert_eq!(back["error"]["code"], "TASK_FAILED", "{back}");
    assert_eq!(back["invite"], record["invite"], "{back}");
    if let Some(token) = R::TOKEN {
        let text = back.to_string();
        assert!(!text.contains(token), "the credential is digested: {text}");
        assert_eq!(back["auth"]["binding"], "header", "{back}");
    }
}

/// The executor after a downgrade (a record from a newer release, which this one cannot
/// read): the record is the only copy of what it describes, so start-up leaves it, and the
/// work directory it names, exactly as they were; the executor serves, and says why it skipped
/// the record. It used to delete the record (and with it the newer release's result).
pub async fn a_downgraded_executor_leaves_a_newer_releases_record_alone<R: TestRuntime>() {
    let rt = R::default();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let work = d.join("work");
    std::fs::create_dir_all(work.join(RECORD_ID)).unwrap();
    std::fs::write(
        work.join(RECORD_ID).join("result.txt"),
        "the newer release's\n",
    )
    .unwrap();
    let mut record = version_0_running_record::<R>(&work, "1:2:not-a-boot");
    record["version"] = 99.into();
    record["state"] = "completed".into();
    record["somethingNew"] = serde_json::json!({"only": "the newer release knows"});
    let journal = d.join("exec/assignments");
    std::fs::create_dir_all(&journal).unwrap();
    let file = journal.join(format!("{RECORD_ID}.json"));
    let bytes = serde_json::to_vec_pretty(&record).unwrap();
    std::fs::write(&file, &bytes).unwrap();
    // And a record that is not JSON at all: moved aside, not deleted.
    std::fs::write(journal.join("dlg_torn.json"), b"{\"id\": \"dlg_t").unwrap();
    let before = tree(&work);

    let args = vec![
        "--work-root".into(),
        s(&work),
        "--state-dir".into(),
        s(&d.join("exec")),
    ];
    let log = d.join("executor.log");
    // Running: it printed its URL, so start-up (and the restore) is over.
    let mut ex = blocking(&rt, move || spawn_executor::<R>(&args, &[], &log).running()).await;
    let st = blocking(&rt, move || {
        let st = ex.terminate();
        (st, ex.log_text())
    })
    .await;
    let (st, text) = st;
    assert!(st.success(), "{st:?}\n{text}");
    assert_eq!(
        std::fs::read(&file).expect("the newer record is kept"),
        bytes,
        "the newer record is left exactly as it was\n{text}"
    );
    assert_eq!(tree(&work), before, "its work directory is left alone");
    assert!(
        text.contains("kept as it is") && text.contains("newer"),
        "the log says why the record was skipped: {text}"
    );
    assert!(
        journal.join("dlg_torn.json.unreadable").exists(),
        "an unreadable record is moved aside, not deleted"
    );
}

/// Two executors on one work root or one state directory: the second refuses to start with a
/// message naming the directory, and the first keeps serving.
pub async fn a_second_executor_on_the_same_work_root_or_state_dir_refuses<R: TestRuntime>() {
    let rt = R::default();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    let (work, state) = (d.join("work"), d.join("state"));
    let start = move |work: &Path, state: &Path, log: &str| {
        let args = vec![
            "--work-root".into(),
            s(work),
            "--state-dir".into(),
            s(state),
        ];
        spawn_executor::<R>(&args, &[], &d.join(log))
    };
    let (a_work, a_state) = (work.clone(), state.clone());
    let s2 = start.clone();
    let first = blocking(&rt, move || s2(&a_work, &a_state, "a.log").running()).await;
    let other = dir.path().join("other");
    for (w, st, what) in [
        (work.clone(), other.join("state"), "work root"),
        (other.join("work"), state.clone(), "state directory"),
    ] {
        let s3 = start.clone();
        let (w2, st2) = (w.clone(), st.clone());
        match blocking(&rt, move || s3(&w2, &st2, "b.log")).await {
            Started::Running(p) => {
                drop(p);
                panic!("a second executor started on the same {what}");
            }
            Started::Refused { code, stderr } => {
                assert_ne!(code, Some(0), "{stderr}");
                assert!(
                    stderr.contains("in use") && stderr.contains(what),
                    "the refusal names the {what} in use: {stderr}"
                );
            }
        }
    }
    // The first one still serves.
    let (status, _) = super::http_get::<R>(
        &first.peer.replace("/awcp", "/awcp/status"),
        &super::auth_headers::<R>(),
    )
    .await;
    assert_eq!(status, 200);
    drop(first);
}

/// Two executors started with default settings (same user, same home): the second must not
/// touch the first one's live work directory (it refuses: the default work root lives in the
/// state directory, which is locked). One given its own state directory runs beside it.
pub async fn executors_with_default_settings_leave_each_others_work_alone<R: TestRuntime>() {
    let rt = R::default();
    let dir = tempfile::tempdir().unwrap();
    let (home, tmp) = (dir.path().join("home"), dir.path().join("tmp"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let gate = Gate::new(dir.path());
    let env = vec![
        ("HOME", s(&home)),
        ("TMPDIR", s(&tmp)),
        ("GATE", s(&gate.path)),
    ];
    let agent = "sh -c 'echo started; cat \"$GATE\" > /dev/null; echo done > gate.txt'";
    let d = dir.path().to_owned();
    let start = move |extra: Vec<String>, log: &str| {
        let mut args = vec!["--agent-cmd".to_owned(), agent.to_owned()];
        args.extend(extra);
        spawn_executor::<R>(&args, &env, &d.join(log))
    };
    let s1 = start.clone();
    let a = blocking(&rt, move || s1(Vec::new(), "a.log").running()).await;
    let dg = start_delegator::<R>(false, |_| {}).await;
    let ws = workspace();
    let mut events = dg.handle.events();
    let id = dg
        .handle
        .delegate(params::<R>(&a.peer, ws.path()))
        .await
        .unwrap();
    super::progress_seen::<R>(&mut events, "started").await;

    // Same defaults: refused (the default work root lives in the locked state directory).
    let s2 = start.clone();
    match blocking(&rt, move || s2(Vec::new(), "b.log")).await {
        Started::Running(b) => {
            drop(b);
            panic!("a second executor with the same defaults started");
        }
        Started::Refused { code, stderr } => {
            assert_eq!(code, Some(2), "{stderr}");
            assert!(stderr.contains("in use"), "{stderr}");
        }
    }
    // Its own state directory: runs beside the first one, in its own work root.
    let own = s(&dir.path().join("c-state"));
    let s3 = start.clone();
    let c = blocking(&rt, move || {
        s3(vec!["--state-dir".into(), own], "c.log").running()
    })
    .await;

    let g = Arc::new(gate);
    let g2 = g.clone();
    blocking(&rt, move || g2.open()).await;
    let v = timeout::<R, _>(Duration::from_secs(60), dg.handle.wait(&id))
        .await
        .expect("delegation ended in time")
        .unwrap();
    assert_eq!(
        v.state,
        DelegationState::Completed,
        "the first executor's live work survived: {v:?}\n{}",
        a.log_text()
    );
    assert_eq!(
        tree(ws.path()).get("gate.txt").map(String::as_str),
        Some("done\n")
    );
    drop((a, c));
}

// ---------------------------------------------------------------------------------------------
// 11.6: no process of a task tree outlives the task

/// The flags of an executor binary under `dir` whose agent is [`tree_agent`]`(tail)`.
fn tree_executor_args(dir: &Path, tail: &str) -> Vec<String> {
    vec![
        "--work-root".into(),
        s(&dir.join("work")),
        "--state-dir".into(),
        s(&dir.join("state")),
        "--agent-cmd".into(),
        tree_agent(tail),
    ]
}

/// A delegation to an executor binary whose agent is [`tree_agent`]`(tail)`.
struct TreeRun {
    ex: ExecProc,
    dg: super::Deleg,
    _ws: tempfile::TempDir,
    id: awcp_proto::DelegationId,
    events: futures::channel::mpsc::UnboundedReceiver<DelegatorEvent>,
}

/// Starts an executor binary under `dir` whose agent is [`tree_agent`]`(tail)` (with `env`)
/// and delegates to it (with a lease of `ttl` seconds if given).
async fn tree_run<R: TestRuntime>(
    dir: &Path,
    tail: &str,
    env: Vec<(&'static str, String)>,
    ttl: Option<u64>,
) -> TreeRun {
    let args = tree_executor_args(dir, tail);
    let log = dir.join("executor.log");
    let ex = blocking(&R::default(), move || {
        spawn_executor::<R>(&args, &env, &log).running()
    })
    .await;
    let dg = start_delegator::<R>(false, |_| {}).await;
    let ws = workspace();
    let events = dg.handle.events();
    let mut p = params::<R>(&ex.peer, ws.path());
    if let Some(ttl) = ttl {
        p.ttl_seconds = ttl;
    }
    let id = dg.handle.delegate(p).await.unwrap();
    TreeRun {
        ex,
        dg,
        _ws: ws,
        id,
        events,
    }
}

/// A callback for [`follow_tree`], and what it fires when the agent has reported its tree.
fn tree_reported() -> (impl FnOnce(), futures::channel::oneshot::Receiver<()>) {
    let (tx, rx) = futures::channel::oneshot::channel();
    (
        move || {
            let _ = tx.send(());
        },
        rx,
    )
}

/// Cancel ends the whole task tree, not just the agent's own process.
pub async fn cancel_ends_the_whole_task_tree<R: TestRuntime>() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = tree_run::<R>(dir.path(), "wait", Vec::new(), None).await;
    let (on_tree, reported) = tree_reported();
    let follow = follow_tree::<R>(&mut run.events, on_tree);
    let (h, id) = (run.dg.handle.clone(), run.id.clone());
    let cancel = async move {
        if reported.await.is_ok() {
            h.cancel(&id).await.unwrap();
        }
    };
    let ((procs, end), ()) = futures::join!(follow, cancel);
    assert_eq!(
        end,
        Some(DelegationState::Cancelled),
        "{}",
        run.ex.log_text()
    );
    assert_tree_gone::<R>(&procs, "cancel").await;
}

/// Lease expiry ends the whole task tree.
pub async fn lease_expiry_ends_the_whole_task_tree<R: TestRuntime>() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = tree_run::<R>(dir.path(), "wait", Vec::new(), Some(3)).await;
    let (procs, end) = follow_tree::<R>(&mut run.events, || {}).await;
    assert_eq!(end, Some(DelegationState::Expired), "{}", run.ex.log_text());
    assert_tree_gone::<R>(&procs, "lease expiry").await;
}

/// A failing agent (non-zero exit) leaves no background process behind, and its failure is
/// reported (the executor used to wait for the grandchild's end of stdout forever).
pub async fn a_failed_task_leaves_no_process_behind<R: TestRuntime>() {
    let rt = R::default();
    let dir = tempfile::tempdir().unwrap();
    // The agent exits with 3 once the test has seen its tree (the gate opens).
    let gate = Arc::new(Gate::new(dir.path()));
    let env = vec![("GATE", s(&gate.path))];
    let tail = "cat \"$GATE\" > /dev/null; exit 3";
    let mut run = tree_run::<R>(dir.path(), tail, env, None).await;
    let (on_tree, reported) = tree_reported();
    let follow = follow_tree::<R>(&mut run.events, on_tree);
    let open = async {
        if reported.await.is_ok() {
            let g = gate.clone();
            blocking(&rt, move || g.open()).await;
        }
    };
    let ((procs, end), ()) = futures::join!(follow, open);
    let v = run.dg.handle.get(&run.id).await.unwrap();
    assert_eq!(
        end,
        Some(DelegationState::Error),
        "{v:?}\n{}",
        run.ex.log_text()
    );
    assert!(v.error.unwrap().message.contains("code 3"));
    assert_tree_gone::<R>(&procs, "task failure").await;
}

/// A graceful shutdown (SIGTERM) of the executor ends every task tree before it exits.
pub async fn executor_shutdown_ends_the_whole_task_tree<R: TestRuntime>() {
    let rt = R::default();
    let dir = tempfile::tempdir().unwrap();
    let mut run = tree_run::<R>(dir.path(), "wait", Vec::new(), None).await;
    let (on_tree, reported) = tree_reported();
    let follow = follow_tree::<R>(&mut run.events, on_tree);
    let mut ex = run.ex;
    let stop = async {
        reported.await.expect("the agent reported its tree");
        blocking(&rt, move || {
            let st = ex.terminate();
            (st, ex.log_text())
        })
        .await
    };
    let ((procs, _), (st, log)) = futures::join!(follow, stop);
    assert!(st.success(), "graceful exit: {st:?}\n{log}");
    assert_tree_gone::<R>(&procs, "executor shutdown").await;
}

/// After SIGKILL of the executor, the restarted executor (same state directory) ends the task
/// tree recorded in its journal, then fails the lost assignment and removes its work dir.
pub async fn executor_sigkill_restart_ends_the_orphaned_task_tree<R: TestRuntime>() {
    let rt = R::default();
    let dir = tempfile::tempdir().unwrap();
    let mut run = tree_run::<R>(dir.path(), "wait", Vec::new(), None).await;
    let (on_tree, reported) = tree_reported();
    let follow = follow_tree::<R>(&mut run.events, on_tree);
    let mut ex = run.ex;
    let listen = ex
        .peer
        .trim_start_matches("http://")
        .trim_end_matches("/awcp")
        .to_owned();
    let d = dir.path().to_owned();
    let restart = async {
        reported.await.expect("the agent reported its tree");
        blocking(&rt, move || {
            ex.sigkill();
            let mut args = vec!["--listen".into(), listen];
            args.extend(tree_executor_args(&d, "wait"));
            spawn_executor::<R>(&args, &[], &d.join("restarted.log")).running()
        })
        .await
    };
    let ((procs, end), ex2) = futures::join!(follow, restart);
    assert_eq!(end, Some(DelegationState::Error), "{}", ex2.log_text());
    assert_tree_gone::<R>(&procs, "executor SIGKILL + restart").await;
    let work_dir = dir.path().join("work").join(run.id.as_str());
    for _ in 0..2000 {
        if !work_dir.exists() {
            break;
        }
        R::default().sleep(Duration::from_millis(10)).await;
    }
    assert!(!work_dir.exists(), "the recorded work dir is removed");
    drop(ex2);
}

/// A result sent inline is not kept across a restart (see
/// `inline_results_a_stopped_executor_left_are_removed_at_start`). An executor killed after
/// its task completed, before the delegator took the result, must say so once restarted
/// (TASK_FAILED, "restarted"): a completed task without its snapshot reads to a delegator as a
/// task that changed nothing, and the agent's work would be gone without a word. Real binary,
/// SIGKILL, same state directory; the delegator's side is raw HTTP, so nothing takes the
/// result before the kill.
pub async fn an_inline_result_lost_to_an_executor_restart_is_reported_not_dropped<
    R: TestRuntime,
>() {
    use super::security::{archive_invite, call, read_event_stream, reference_start};
    let rt = R::default();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    // The demo task writes AWCP_NOTES.md: the result has a snapshot, sent inline by default.
    let mut ex = executor_in::<R>(&d, &[]).await;
    let base = ex.peer.trim_end_matches("/awcp").to_owned();
    let listen = base.trim_start_matches("http://").to_owned();
    let id = "dlg_5e1f0c3a9b7d4e2f8a6c0b1d3e5f7a9c";
    let auth = super::auth_headers::<R>();
    let invite = archive_invite(id, "note what you see");
    let (st, body) = call::<R>(http::Method::POST, &ex.peer, &auth, Some(invite)).await;
    assert!(body.contains("\"type\":\"ACCEPT\""), "{st} {body}");
    let ws = workspace();
    let start = reference_start(id, ws.path());
    let (st, body) = call::<R>(http::Method::POST, &ex.peer, &auth, Some(start)).await;
    assert_eq!((st, body.as_str()), (200, r#"{"ok":true}"#));
    let result_url = format!("{base}/awcp/tasks/{id}/result");
    let done = timeout::<R, _>(Duration::from_secs(60), async {
        loop {
            let (_, body) = call::<R>(http::Method::GET, &result_url, &auth, None).await;
            if body.contains("\"status\":\"completed\"") {
                break body;
            }
            R::default().sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the task completed");
    assert!(done.contains("snapshotBase64"), "an inline result: {done}");
    // Killed before anyone took the result; restarted on the same port and state.
    let log = d.join("restarted.log");
    let restarted = blocking(&rt, move || {
        ex.sigkill();
        let args = vec![
            "--listen".into(),
            listen,
            "--state-dir".into(),
            s(&d.join("exec")),
        ];
        spawn_executor::<R>(&args, &[], &log).running()
    })
    .await;
    let (status, body) = call::<R>(http::Method::GET, &result_url, &auth, None).await;
    assert!(
        !body.contains("\"status\":\"completed\""),
        "a completed task without its result: {status} {body}"
    );
    assert!(
        body.contains("TASK_FAILED") && body.contains("restarted"),
        "{status} {body}"
    );
    let events = read_event_stream::<R>(&format!("{base}/awcp/tasks/{id}/events"), &auth).await;
    assert!(!events.contains("\"type\":\"done\""), "{events}");
    assert!(
        events.contains("\"type\":\"error\"") && events.contains("restarted"),
        "{events}"
    );
    drop(restarted);
}

// ---------------------------------------------------------------------------------------------
// 11.7: one admission limit, for workspaces and for results

/// A 51 MiB file (over the 50 MiB default single-file limit) of compressible text.
fn big_text_file(path: &Path, bytes: usize) {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut n = 0usize;
    let mut i = 0u64;
    while n < bytes {
        let line = format!(
            "{i:012} the quick brown fox jumps over the lazy dog {}\n",
            i % 97
        );
        f.write_all(line.as_bytes()).unwrap();
        n += line.len();
        i += 1;
    }
    f.flush().unwrap();
}

/// `awcp delegate` refuses a workspace with a file over the single-file limit, naming the flag
/// that raises it; raising that one flag is enough for the whole delegation to go through
/// (admission, packing and the executor) with the real binaries. The daemon takes the same
/// flags.
pub async fn raising_the_one_admission_limit_is_enough<R: TestRuntime>() {
    let rt = R::default();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    let ex = executor_in::<R>(&d, &[]).await;
    let ws = workspace();
    let big = ws.path().join("data.txt");
    let b2 = big.clone();
    blocking(&rt, move || big_text_file(&b2, 51 * 1024 * 1024 + 7)).await;
    let state = d.join("delegator");
    let delegate = |extra: &[&str]| delegate_args(ws.path(), &ex.peer, &state, "list files", extra);
    let a = delegate(&[]);
    let refused = blocking(&rt, move || awcp_cli::<R>(&a)).await;
    let v = refused.json();
    assert_eq!(v["error"]["code"], "WORKSPACE_TOO_LARGE", "{v}");
    assert_ne!(refused.code, Some(0));
    assert!(
        v["error"]["hint"]
            .as_str()
            .unwrap_or("")
            .contains("--max-file-bytes"),
        "the hint names the flag: {v}"
    );
    let a = delegate(&["--max-file-bytes", "60000000"]);
    let done = blocking(&rt, move || awcp_cli::<R>(&a)).await;
    let v = done.json();
    assert_eq!(v["state"], "completed", "{v}\n{}", done.stderr);
    assert_eq!(done.code, Some(0));
    assert!(ws.path().join("AWCP_NOTES.md").exists(), "result applied");

    // The daemon: its flags are the limit of every delegation it makes.
    let (mut daemon, daemon_url) = spawn_daemon::<R>(&[
        "--state-dir",
        &s(&d.join("daemon")),
        "--max-file-bytes",
        "1000",
    ]);
    let small = workspace();
    std::fs::write(small.path().join("two-k.txt"), "x".repeat(2000)).unwrap();
    let mut a = strings(&["delegate", "--json", "--daemon", "--prompt", "p"]);
    a.extend([s(small.path()), "--peer".into(), ex.peer.clone()]);
    a.extend(["--daemon-url".into(), daemon_url]);
    a.extend([
        "--daemon-token".into(),
        awcp_tests::bins::daemon_token(&d.join("daemon")),
    ]);
    let r = blocking(&rt, move || awcp_cli::<R>(&a)).await;
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert_ne!(r.code, Some(0), "{}", r.stdout);
    assert!(
        r.stderr.contains("WORKSPACE_TOO_LARGE") || r.stdout.contains("WORKSPACE_TOO_LARGE"),
        "daemon refused with its configured limit: {} {}",
        r.stdout,
        r.stderr
    );
    drop(ex);
}

/// A result that would make the workspace exceed the admission limits is not applied, with
/// the real binaries: `awcp delegate` exits 4 (NOT applied) with `WORKSPACE_TOO_LARGE` naming
/// the file, the workspace stays as it was, and the snapshot stays pending; `awcp apply` with
/// the limit raised then applies it.
pub async fn a_result_over_the_admission_limits_is_not_applied<R: TestRuntime>() {
    let rt = R::default();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    let agent = "sh -c 'head -c 204800 /dev/zero > huge.bin'";
    let ex = executor_in::<R>(&d, &["--agent-cmd", agent]).await;
    let ws = workspace();
    let before = tree(ws.path());
    let state = d.join("delegator");
    let limit = ["--max-total-bytes", "102400", "--max-file-bytes", "102400"];
    let a = delegate_args(ws.path(), &ex.peer, &state, "write a big file", &limit);
    let r = blocking(&rt, move || awcp_cli::<R>(&a)).await;
    let v = r.json();
    assert_eq!(
        r.code,
        Some(4),
        "NOT applied: {v}
{}",
        r.stderr
    );
    assert!(r.stderr.contains("NOT applied"), "{}", r.stderr);
    let outcome = &v["outcome"];
    assert_eq!(outcome["status"], "not_applied", "{v}");
    assert_eq!(outcome["error"]["code"], "WORKSPACE_TOO_LARGE", "{v}");
    assert!(
        outcome["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("huge.bin"),
        "the refusal names the file: {v}"
    );
    let after = tree(ws.path());
    assert!(
        after == before,
        "nothing of the result was applied: {:?}",
        after.keys().collect::<Vec<_>>()
    );

    // Kept: applied once the limit is raised.
    let sid = outcome["snapshotId"]
        .as_str()
        .unwrap_or_else(|| panic!("the snapshot is kept: {v}"))
        .to_owned();
    let id = v["id"].as_str().expect("id").to_owned();
    let a = strings(&[
        "apply",
        &id,
        &sid,
        "--state-dir",
        &s(&state),
        "--max-total-bytes",
        "1000000",
        "--max-file-bytes",
        "1000000",
    ]);
    let r = blocking(&rt, move || awcp_cli::<R>(&a)).await;
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    let huge = std::fs::metadata(ws.path().join("huge.bin")).expect("applied");
    assert_eq!(huge.len(), 204800);
    drop(ex);
}

// ---------------------------------------------------------------------------------------------
// 11.8: secrets are not lent silently; what is not shipped is reported

/// `awcp delegate` refuses a workspace with secret-looking files (listing them), lends it with
/// `--allow-sensitive`, and lends it without them when `.awcpignore` lists them; the record
/// says what was not shipped (ignored files, symlinks, FIFOs). The daemon takes
/// `allowSensitive` too.
pub async fn sensitive_files_are_refused_unless_allowed_or_ignored<R: TestRuntime>() {
    let rt = R::default();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    let ex = executor_in::<R>(&d, &[]).await;
    let ws = workspace();
    std::fs::write(ws.path().join(".env"), "AWS_SECRET_ACCESS_KEY=abc\n").unwrap();
    std::fs::create_dir_all(ws.path().join("keys")).unwrap();
    std::fs::write(ws.path().join("keys/id_ed25519"), "PRIVATE\n").unwrap();
    let state = d.join("delegator");
    let delegate = |extra: &[&str]| delegate_args(ws.path(), &ex.peer, &state, "list files", extra);
    let a = delegate(&[]);
    let r = blocking(&rt, move || awcp_cli::<R>(&a)).await;
    let v = r.json();
    assert_ne!(r.code, Some(0));
    assert_eq!(v["error"]["code"], "SENSITIVE_FILES", "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or("");
    assert!(
        msg.contains(".env") && msg.contains("keys/id_ed25519"),
        "{msg}"
    );
    assert!(v["error"]["hint"]
        .as_str()
        .unwrap_or("")
        .contains("--allow-sensitive"));

    let a = delegate(&["--allow-sensitive"]);
    let r = blocking(&rt, move || awcp_cli::<R>(&a)).await;
    assert_eq!(r.json()["state"], "completed", "{}", r.stderr);
    let notes = std::fs::read_to_string(ws.path().join("AWCP_NOTES.md")).unwrap();
    assert!(notes.contains(".env"), "allowed: shipped");
    std::fs::remove_file(ws.path().join("AWCP_NOTES.md")).unwrap();

    // Ignored instead, plus things that are never shipped.
    std::fs::write(ws.path().join(".awcpignore"), ".env\nkeys/\n").unwrap();
    std::os::unix::fs::symlink("a.txt", ws.path().join("link")).unwrap();
    let st = Command::new("mkfifo")
        .arg(ws.path().join("pipe"))
        .status()
        .unwrap();
    assert!(st.success());
    let a = delegate(&[]);
    let r = blocking(&rt, move || awcp_cli::<R>(&a)).await;
    let v = r.json();
    assert_eq!(v["state"], "completed", "{v}\n{}", r.stderr);
    let notes = std::fs::read_to_string(ws.path().join("AWCP_NOTES.md")).unwrap();
    assert!(!notes.contains(".env") && !notes.contains("id_ed25519"));
    let not_shipped: BTreeMap<String, String> = v["notShipped"]
        .as_array()
        .unwrap_or_else(|| panic!("notShipped in {v}"))
        .iter()
        .map(|x| {
            (
                x["path"].as_str().unwrap().to_owned(),
                x["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        not_shipped.get("workspace/.env").map(String::as_str),
        Some("ignored"),
        "{v}"
    );
    assert_eq!(
        not_shipped.get("workspace/keys/").map(String::as_str),
        Some("ignored"),
        "{v}"
    );
    assert_eq!(
        not_shipped.get("workspace/link").map(String::as_str),
        Some("symlink"),
        "{v}"
    );
    assert_eq!(
        not_shipped.get("workspace/pipe").map(String::as_str),
        Some("special file"),
        "{v}"
    );

    // Through the daemon: refused without allowSensitive, lent with it.
    std::fs::remove_file(ws.path().join(".awcpignore")).unwrap();
    std::fs::remove_file(ws.path().join("pipe")).unwrap();
    let (mut daemon, daemon_url) = spawn_daemon::<R>(&["--state-dir", &s(&d.join("daemon"))]);
    let via_daemon = |extra: &[&str]| {
        let mut a = strings(&["delegate", "--json", "--daemon", "--prompt", "p"]);
        a.extend([s(ws.path()), "--peer".into(), ex.peer.clone()]);
        a.extend(["--daemon-url".into(), daemon_url.clone()]);
        a.extend([
            "--daemon-token".into(),
            awcp_tests::bins::daemon_token(&d.join("daemon")),
        ]);
        a.extend(strings(extra));
        a
    };
    let a = via_daemon(&[]);
    let refused = blocking(&rt, move || awcp_cli::<R>(&a)).await;
    let a = via_daemon(&["--allow-sensitive"]);
    let allowed = blocking(&rt, move || awcp_cli::<R>(&a)).await;
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert_ne!(refused.code, Some(0));
    assert!(
        refused.stderr.contains("SENSITIVE_FILES") || refused.stdout.contains("SENSITIVE_FILES"),
        "{} {}",
        refused.stdout,
        refused.stderr
    );
    assert_eq!(allowed.json()["state"], "completed", "{}", allowed.stderr);
    drop(ex);
}

/// Issue 47, item 2: the well-known credential files of common tools, and a private key under
/// a name that says nothing, are refused as sensitive (the real `awcp` CLI against a real
/// executor); a certificate ships. On `a38d050` they all shipped with `notShipped: []`.
pub async fn well_known_credential_files_are_refused<R: TestRuntime>() {
    let rt = R::default();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    let ex = executor_in::<R>(&d, &[]).await;
    let ws = workspace();
    let secret_files = [
        (
            ".aws/credentials",
            "[default]\naws_secret_access_key = abc\n",
        ),
        (".netrc", "machine example.com login u password p\n"),
        (".git-credentials", "https://u:p@example.com\n"),
        (".pgpass", "localhost:5432:*:u:p\n"),
        (".ssh/id_dsa", "-----BEGIN DSA PRIVATE KEY-----\n"),
        (".docker/config.json", "{\"auths\":{}}\n"),
        (".kube/config", "apiVersion: v1\n"),
        (
            "deploy_access",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n",
        ),
    ];
    for (name, content) in secret_files {
        let p = ws.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    std::fs::write(
        ws.path().join("ca.crt"),
        "-----BEGIN CERTIFICATE-----\nMIIB\n",
    )
    .unwrap();
    let state = d.join("delegator");
    let a = delegate_args(ws.path(), &ex.peer, &state, "list files", &[]);
    let r = blocking(&rt, move || awcp_cli::<R>(&a)).await;
    let v = r.json();
    assert_ne!(r.code, Some(0));
    assert_eq!(v["error"]["code"], "SENSITIVE_FILES", "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or("");
    for (name, _) in secret_files {
        assert!(msg.contains(name), "{name} not named in {msg}");
    }
    assert!(!msg.contains("ca.crt"), "{msg}");
    // Lent deliberately, they ship, the certificate with them.
    let a = delegate_args(
        ws.path(),
        &ex.peer,
        &state,
        "list files",
        &["--allow-sensitive"],
    );
    let r = blocking(&rt, move || awcp_cli::<R>(&a)).await;
    assert_eq!(r.json()["state"], "completed", "{}", r.stderr);
    let notes = std::fs::read_to_string(ws.path().join("AWCP_NOTES.md")).unwrap();
    assert!(
        notes.contains("ca.crt") && notes.contains("deploy_access"),
        "{notes}"
    );
}
