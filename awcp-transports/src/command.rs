//! A task runner that runs any command-line agent in the work directory.
//!
//! The command is a shell-free argument template: `my-agent --prompt-file {prompt_file}`.
//! Placeholders: `{prompt_file}` (a file holding the prompt), `{work_dir}`, `{description}`,
//! `{delegation_id}`. The prompt is also given on stdin and in `AWCP_PROMPT`; `AWCP_WORK_DIR`,
//! `AWCP_DELEGATION_ID`, `AWCP_ACCESS_MODE`, `AWCP_EXPIRES_AT` and `AWCP_ROUND` (1, or the
//! round of a multi-round delegation) are set too; from round 2 on, `AWCP_HISTORY_FILE` names
//! a JSON file with the earlier rounds (`[{"round", "task": {"description", "prompt"},
//! "summary"}]`, oldest first). Each stdout
//! line becomes a progress message; exit code 0 is success (the last stdout line is the
//! summary), anything else is a task failure carrying the tail of stderr.
//!
//! The command does not inherit the executor's environment (which may hold its
//! `AWCP_AUTH_TOKEN` and other secrets): it gets the variables named in [`AGENT_ENV`] that
//! the executor has, the ones added with [`CommandRunner::pass_env`] and
//! [`CommandRunner::set_env`], and the `AWCP_*` task variables above.
//!
//! The command runs in its own process group ([`crate::process`]); the whole group, whatever
//! the command started, is killed on cancel, when the lease expires, and when the command
//! itself exits (a background process it left behind does not outlive the task). The group is
//! reported through [`TaskRunner::run_tracked`] so the executor can journal it.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::process::{waitid, Pid, WaitId, WaitIdOptions};

use crate::cancel::CancelFlag;
use crate::contain::{Jail, JailedChild};
use crate::process::TaskGroup;
use crate::traits::{TaskContext, TaskOutcome, TaskRunner};

/// The executor's environment variables an agent command gets by default: what programs need
/// to run (search path, home, user, shell, locale, terminal, time zone, temporary directory).
/// A name ending in `*` stands for every name with that prefix. Anything else (API keys an
/// agent needs included) is passed only when named ([`CommandRunner::pass_env`], the
/// executor's `--agent-env NAME`).
pub const AGENT_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TERM", "TZ", "TMPDIR",
];

/// Runs a command per task. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct CommandRunner {
    argv: Vec<String>,
    /// Further names (or `PREFIX*`) passed from the executor's environment.
    pass: Vec<String>,
    /// Variables set to a given value.
    set: Vec<(String, String)>,
}

/// Whether the variable `name` is one of `patterns` (a name, or a prefix ending in `*`).
fn env_listed<S: AsRef<str>>(name: &str, patterns: &[S]) -> bool {
    patterns.iter().any(|p| match p.as_ref().strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == p.as_ref(),
    })
}

/// Splits a command template into arguments (whitespace, with '…' and "…" quoting).
pub fn split_command(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if quote.is_some() {
        return Err(format!("unterminated quote in command {s:?}"));
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    if out.is_empty() {
        return Err("empty command".into());
    }
    Ok(out)
}

impl CommandRunner {
    /// A runner for the command template `cmd`.
    pub fn new(cmd: &str) -> Result<Self, String> {
        Ok(CommandRunner {
            argv: split_command(cmd)?,
            pass: Vec::new(),
            set: Vec::new(),
        })
    }

    /// Also passes these variables (names, or prefixes ending in `*`) from the executor's
    /// environment to the command, beside [`AGENT_ENV`].
    pub fn pass_env<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.pass.extend(names.into_iter().map(Into::into));
        self
    }

    /// Sets `name` to `value` in the command's environment.
    pub fn set_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.set.push((name.into(), value.into()));
        self
    }

    /// The environment the command starts with (before the `AWCP_*` task variables).
    fn environment(&self) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        agent_environment(&self.pass, &self.set)
    }
}

/// The environment an agent command starts with: the variables of this process named in
/// [`AGENT_ENV`] or `pass` (names, or prefixes ending in `*`), then `set`. Used for every
/// agent this workspace starts (the AWCP executor's [`CommandRunner`], the AIP partner's).
pub fn agent_environment(
    pass: &[String],
    set: &[(String, String)],
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut env: Vec<_> = std::env::vars_os()
        .filter(|(k, _)| {
            k.to_str()
                .is_some_and(|k| env_listed(k, AGENT_ENV) || env_listed(k, pass))
        })
        .collect();
    env.extend(set.iter().map(|(k, v)| (k.into(), v.into())));
    env
}

/// What `--agent-env` asks for: variables to pass from this process's environment (names, or
/// prefixes ending in `*`), and variables to set.
pub type AgentEnvSpec = (Vec<String>, Vec<(String, String)>);

/// Reads `--agent-env` values: `NAME` (or `PREFIX*`) passes the variable from this process's
/// environment, `NAME=VALUE` sets it. Returns `(pass, set)`; an empty name is an error.
pub fn parse_agent_env(values: &[String]) -> Result<AgentEnvSpec, String> {
    let (mut pass, mut set) = (Vec::new(), Vec::new());
    for v in values {
        match v.split_once('=') {
            Some((k, val)) if !k.trim().is_empty() => {
                set.push((k.trim().to_owned(), val.to_owned()))
            }
            None if !v.trim().is_empty() => pass.push(v.trim().to_owned()),
            _ => return Err(format!("--agent-env {v:?}: expected NAME or NAME=VALUE")),
        }
    }
    Ok((pass, set))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// How long the output of an ended task is still read: a process that escaped the group
/// (`setsid`) may hold stdout open forever.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// Whether `child` has exited, without reaping it: while it is a zombie its pid (the group
/// id) cannot be reused, so the group can still be killed safely.
fn exited(child: &JailedChild) -> Result<bool, String> {
    let Some(pid) = Pid::from_raw(child.id() as i32) else {
        return Err("invalid child pid".into());
    };
    waitid(
        WaitId::Pid(pid),
        WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
    )
    .map(|s| s.is_some())
    .map_err(|e| format!("waiting for the command: {e}"))
}

/// What a running command's threads tell its loop.
enum Happened {
    /// A line of its standard output.
    Line(String),
    /// Its standard output ended.
    OutputEnded,
    /// The command exited (not yet reaped: [`end_task`] reaps it).
    Exited,
}

/// Sends [`Happened::Exited`] on `tx` once `child` exits, from a thread blocked in `waitid`
/// on a pidfd of it (which names exactly this process even once it is reaped, so the thread
/// never waits on a reused pid; it ends at the latest when the task is ended). Nothing is
/// sent where pidfds are not available (Linux before 5.4): the loop's tick sees the exit.
fn watch_exit(child: &JailedChild, tx: std::sync::mpsc::Sender<Happened>) {
    let Some(pid) = Pid::from_raw(child.id() as i32) else {
        return;
    };
    // Opened before the child can be reaped (only this thread's caller reaps it).
    let Ok(fd) = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) else {
        return;
    };
    std::thread::spawn(move || {
        use std::os::fd::AsFd;
        let waited = loop {
            match waitid(
                WaitId::PidFd(fd.as_fd()),
                WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
            ) {
                Err(rustix::io::Errno::INTR) => continue,
                other => break other,
            }
        };
        if waited.is_ok() {
            let _ = tx.send(Happened::Exited);
        }
    });
}

/// Ends every process of the task (its jail: group, cgroup, descendants) and reaps the
/// command itself.
fn end_task(jail: &mut Jail, child: &mut JailedChild) -> std::io::Result<ExitStatus> {
    jail.end();
    child.wait()
}

impl TaskRunner for CommandRunner {
    fn run(
        &self,
        ctx: &TaskContext,
        progress: &dyn Fn(String),
        cancel: &CancelFlag,
    ) -> Result<TaskOutcome, awcp_proto::TaskFailure> {
        self.run_tracked(ctx, progress, &|_| {}, cancel)
    }

    fn run_tracked(
        &self,
        ctx: &TaskContext,
        progress: &dyn Fn(String),
        spawned: &dyn Fn(TaskGroup),
        cancel: &CancelFlag,
    ) -> Result<TaskOutcome, awcp_proto::TaskFailure> {
        let prompt_dir = tempfile::tempdir().map_err(|e| format!("prompt file: {e}"))?;
        let prompt_file = prompt_dir.path().join("prompt.txt");
        std::fs::write(&prompt_file, &ctx.prompt).map_err(|e| format!("prompt file: {e}"))?;
        // A later round's agent gets the rounds before it (their tasks and summaries).
        let history_file = prompt_dir.path().join("history.json");
        if !ctx.earlier.is_empty() {
            let json = serde_json::to_vec(&ctx.earlier).map_err(|e| format!("history: {e}"))?;
            std::fs::write(&history_file, json).map_err(|e| format!("history file: {e}"))?;
        }
        let subst = |a: &str| {
            a.replace("{prompt_file}", &prompt_file.to_string_lossy())
                .replace("{work_dir}", &ctx.work_dir.to_string_lossy())
                .replace("{description}", &ctx.description)
                .replace("{delegation_id}", ctx.delegation_id.as_str())
        };
        let mut cmd = Command::new(subst(&self.argv[0]));
        cmd.args(self.argv[1..].iter().map(|a| subst(a)))
            .current_dir(&ctx.work_dir)
            .env_clear()
            .envs(self.environment())
            .env("AWCP_PROMPT", &ctx.prompt)
            .env("AWCP_PROMPT_FILE", &prompt_file)
            .env("AWCP_WORK_DIR", &ctx.work_dir)
            .env("AWCP_DELEGATION_ID", ctx.delegation_id.as_str())
            .env("AWCP_ACCESS_MODE", ctx.access_mode.as_str())
            .env("AWCP_EXPIRES_AT", ctx.expires_at.to_rfc3339())
            .env("AWCP_ROUND", ctx.round.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Everything the command starts stays in the task's jail and ends with it.
        if !ctx.earlier.is_empty() {
            cmd.env("AWCP_HISTORY_FILE", &history_file);
        }
        let mut jail = Jail::new(format!("AWCP_DELEGATION_ID={}", ctx.delegation_id.as_str()));
        let cannot_start = |e: std::io::Error| {
            awcp_proto::TaskFailure::CannotStart(format!("{:?}: {e}", self.argv[0]))
        };
        let mut child = jail.spawn(&mut cmd).map_err(cannot_start)?;
        if let Some(mut group) = TaskGroup::of_leader(child.id()) {
            group.cgroup = jail.cgroup().map(Into::into);
            spawned(group);
        }
        if let Some(mut stdin) = child.stdin.take() {
            let p = ctx.prompt.clone();
            std::thread::spawn(move || {
                let _ = stdin.write_all(p.as_bytes());
            });
        }
        let last_line = Arc::new(Mutex::new(String::new()));
        // What the task's threads report: its lines, the end of its output, its exit. The
        // loop below wakes on each at once (a poll tick here once cost a tiny task ~20 ms
        // whenever the output ended before the exit was seen).
        let (tx, rx) = std::sync::mpsc::channel::<Happened>();
        watch_exit(&child, tx.clone());
        if let Some(out) = child.stdout.take() {
            let last = last_line.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if !line.trim().is_empty() {
                        *last.lock().unwrap_or_else(|p| p.into_inner()) = line.clone();
                    }
                    let _ = tx.send(Happened::Line(line));
                }
                let _ = tx.send(Happened::OutputEnded);
            });
        } else {
            let _ = tx.send(Happened::OutputEnded);
        }
        drop(tx);
        let (err_tx, err_rx) = std::sync::mpsc::channel::<String>();
        if let Some(mut e) = child.stderr.take() {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = e.read_to_string(&mut s);
                let _ = err_tx.send(s);
            });
        }
        let deadline = ctx.expires_at.as_unix_millis();
        let mut output_done = false;
        let stopped = loop {
            if cancel.is_cancelled() {
                break Some("the task was cancelled");
            }
            if now_ms() >= deadline {
                break Some("the lease expired; the command was killed");
            }
            match exited(&child) {
                Ok(true) => break None,
                Ok(false) => {}
                Err(e) => {
                    let _ = end_task(&mut jail, &mut child);
                    return Err(e.into());
                }
            }
            jail.watch();
            // Wait for a line, the end of the output or the exit; the tick only bounds how
            // late a cancel, the lease's end or an escape is noticed.
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(Happened::Line(line)) => progress(line),
                Ok(Happened::OutputEnded) => output_done = true,
                Ok(Happened::Exited) => {}
                Err(_) => {}
            }
        };
        // The command exited or is stopped: nothing it started outlives the task.
        let status = end_task(&mut jail, &mut child);
        if let Some(why) = stopped {
            return Err(why.into());
        }
        let status = status.map_err(|e| format!("waiting for the command: {e}"))?;
        if !output_done {
            let until = std::time::Instant::now() + OUTPUT_GRACE;
            while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
                match rx.recv_timeout(left) {
                    Ok(Happened::Line(line)) => progress(line),
                    Ok(Happened::Exited) => {}
                    Ok(Happened::OutputEnded) | Err(_) => break,
                }
            }
        }
        let stderr = err_rx.recv_timeout(OUTPUT_GRACE).unwrap_or_default();
        if status.success() {
            let summary = last_line.lock().unwrap_or_else(|p| p.into_inner()).clone();
            Ok(TaskOutcome {
                summary: if summary.is_empty() {
                    "the command succeeded".into()
                } else {
                    summary
                },
                highlights: Vec::new(),
            })
        } else {
            let tail: String = stderr
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            Err(format!(
                "the command exited with {}{}",
                status
                    .code()
                    .map(|c| format!("code {c}"))
                    .unwrap_or_else(|| "a signal".into()),
                if tail.is_empty() {
                    String::new()
                } else {
                    format!(": {tail}")
                }
            )
            .into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awcp_proto::{AccessMode, DelegationId, Timestamp};

    fn ctx(dir: &std::path::Path) -> TaskContext {
        TaskContext {
            delegation_id: DelegationId::new("dlg_t").unwrap(),
            work_dir: dir.to_path_buf(),
            description: "d".into(),
            prompt: "hello prompt".into(),
            expires_at: Timestamp::from_unix_millis(now_ms() + 60_000),
            access_mode: AccessMode::Rw,
            round: 1,
            earlier: Vec::new(),
        }
    }

    #[test]
    fn the_agent_gets_only_the_listed_environment() {
        // Cargo gives a test process its CARGO_* variables: one stands for a secret the
        // executor holds (not passed), others for what an operator names.
        let secret = std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo");
        let name = std::env::var("CARGO_PKG_NAME").unwrap();
        let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap();
        let t = tempfile::tempdir().unwrap();
        let (pass, set) = parse_agent_env(&[
            "CARGO_PKG_NAME".into(),
            "CARGO_PKG_VERSION_*".into(),
            "EXTRA=set here".into(),
        ])
        .unwrap();
        let r = CommandRunner::new("sh -c 'env > env.txt; echo ok'")
            .unwrap()
            .pass_env(pass)
            .set_env(set[0].0.clone(), set[0].1.clone());
        r.run(&ctx(t.path()), &|_| {}, &CancelFlag::new()).unwrap();
        let env = std::fs::read_to_string(t.path().join("env.txt")).unwrap();
        assert!(!env.contains("CARGO_MANIFEST_DIR"), "{env}");
        assert!(
            !env.lines().any(|l| l.ends_with(&format!("={secret}"))),
            "{env}"
        );
        for line in [
            format!("CARGO_PKG_NAME={name}"),
            format!("CARGO_PKG_VERSION_MAJOR={major}"),
            "EXTRA=set here".to_owned(),
            "AWCP_DELEGATION_ID=dlg_t".to_owned(),
        ] {
            assert!(env.lines().any(|l| l == line), "{line} in {env}");
        }
        assert!(env.lines().any(|l| l.starts_with("PATH=")), "{env}");
        assert!(parse_agent_env(&["=x".into()]).is_err());
        assert!(parse_agent_env(&["".into()]).is_err());
    }

    #[test]
    fn splits_quoted_templates() {
        assert_eq!(
            split_command("agent --p '{prompt_file}' \"a b\"").unwrap(),
            vec!["agent", "--p", "{prompt_file}", "a b"]
        );
        assert!(split_command("  ").is_err());
        assert!(split_command("a 'b").is_err());
    }

    #[test]
    fn streams_output_and_reads_the_prompt_file() {
        let t = tempfile::tempdir().unwrap();
        let r = CommandRunner::new(
            "sh -c 'echo step; cat \"$AWCP_PROMPT_FILE\" > out.txt; echo finished'",
        )
        .unwrap();
        let seen = Mutex::new(Vec::new());
        let out = r
            .run(
                &ctx(t.path()),
                &|m| seen.lock().unwrap().push(m),
                &CancelFlag::new(),
            )
            .unwrap();
        assert_eq!(out.summary, "finished");
        assert_eq!(
            std::fs::read_to_string(t.path().join("out.txt")).unwrap(),
            "hello prompt"
        );
        assert_eq!(seen.lock().unwrap().as_slice(), ["step", "finished"]);
    }

    #[test]
    fn nonzero_exit_is_a_failure_with_stderr() {
        let t = tempfile::tempdir().unwrap();
        let r = CommandRunner::new("sh -c 'echo broken >&2; exit 3'").unwrap();
        let e = r
            .run(&ctx(t.path()), &|_| {}, &CancelFlag::new())
            .unwrap_err();
        let e = e.to_string();
        assert!(e.contains("code 3") && e.contains("broken"), "{e}");
    }

    #[test]
    fn a_background_process_does_not_outlive_the_task() {
        let t = tempfile::tempdir().unwrap();
        let r = CommandRunner::new("sh -c 'sleep 600 & echo \"bg $!\"; echo done'").unwrap();
        let groups = Mutex::new(Vec::new());
        let lines = Mutex::new(Vec::new());
        let out = r
            .run_tracked(
                &ctx(t.path()),
                &|m| lines.lock().unwrap().push(m),
                &|g| groups.lock().unwrap().push(g),
                &CancelFlag::new(),
            )
            .unwrap();
        assert_eq!(out.summary, "done");
        let groups = groups.into_inner().unwrap();
        assert_eq!(groups.len(), 1, "the group is reported");
        let bg: u32 = lines.lock().unwrap()[0]
            .strip_prefix("bg ")
            .unwrap()
            .parse()
            .unwrap();
        // The background sleep was in the task's group and is gone (or a zombie).
        let alive = std::fs::read_to_string(format!("/proc/{bg}/stat")).is_ok_and(|st| {
            let rest = &st[st.rfind(')').unwrap() + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            f[0] != "Z" && f[2] == groups[0].pgid.to_string()
        });
        assert!(!alive, "the background process was killed with its group");
    }

    #[test]
    fn cancel_kills_the_command() {
        let t = tempfile::tempdir().unwrap();
        let r = CommandRunner::new("sh -c 'echo started; sleep 30'").unwrap();
        let c = CancelFlag::new();
        let c2 = c.clone();
        // Cancel as soon as the command reports it started (an event, not a sleep).
        let e = r
            .run(&ctx(t.path()), &move |_| c2.cancel(), &c)
            .unwrap_err();
        assert!(e.to_string().contains("cancelled"), "{e}");
    }
}
