//! Containment of a task's processes: everything a task's command starts ends with the task,
//! including processes that leave its process group (`setsid`, `nohup setsid`), daemonise with
//! a double fork, or clear their environment.
//!
//! One mechanism is in force per process ([`mechanism`], chosen once):
//!
//! - **[`Mechanism::Cgroup`]** (preferred): each task runs in a cgroup v2 of its own, created
//!   under the executor's cgroup (`<cgroup2 mount><own cgroup>/awcp-task-<pid>-<n>`). The
//!   command joins it before it executes, so every descendant is in it whatever it does to
//!   its session, group or environment; ending the task writes `cgroup.kill` (or kills every
//!   member until none is left on kernels without it) and removes the cgroup. The path is
//!   journalled, so a restarted executor ends what a crashed one left the same way.
//! - **[`Mechanism::Subreaper`]** (where no cgroup can be made: no cgroup v2, no permission):
//!   the executor is a child subreaper (`PR_SET_CHILD_SUBREAPER`), so orphans are re-parented to
//!   it instead of to init. While a task runs, its descendants are recorded on every tick of
//!   the runner (at most ten times a second) (a walk of `/proc` from the task's leader through parent links); at its end
//!   the recorded processes, its process group, and every process carrying the task's
//!   `AWCP_DELEGATION_ID` are killed and the adopted ones reaped. A process that leaves the
//!   tree, the group and the environment between two walks (a double fork that also clears its
//!   environment, within 100 ms) can escape this mechanism; the cgroup one has no such gap.
//! - **[`Mechanism::GroupOnly`]** (not Linux): the task's process group only.
//!
//! `AWCP_TASK_CONTAINMENT=cgroup|subreaper|group` (or `auto`, the default) forces a mechanism;
//! a forced cgroup that cannot be made falls back to the subreaper with a warning. The
//! executor logs the mechanism in force at start-up; a task's agent can check it in
//! `/proc/self/cgroup`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub use crate::spawn::JailedChild;

/// How a task's processes are contained (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mechanism {
    /// A cgroup v2 per task, under `parent`.
    Cgroup {
        /// The cgroup the per-task cgroups are made in (the executor's own).
        parent: PathBuf,
    },
    /// The executor is a child subreaper and walks its tasks' descendants.
    Subreaper,
    /// The task's process group only.
    GroupOnly,
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mechanism::Cgroup { parent } => {
                write!(f, "a cgroup v2 per task under {}", parent.display())
            }
            Mechanism::Subreaper => {
                f.write_str("child subreaper with a walk of each task's descendants")
            }
            Mechanism::GroupOnly => f.write_str("the task's process group only"),
        }
    }
}

/// The environment variable that forces a mechanism.
pub const CONTAINMENT_ENV: &str = "AWCP_TASK_CONTAINMENT";

static MECHANISM: OnceLock<Mechanism> = OnceLock::new();

/// The mechanism in force in this process, chosen on first use (see the [module docs](self)).
pub fn mechanism() -> &'static Mechanism {
    MECHANISM.get_or_init(|| {
        let wanted = std::env::var(CONTAINMENT_ENV).unwrap_or_default();
        choose(wanted.trim())
    })
}

fn choose(wanted: &str) -> Mechanism {
    if !cfg!(target_os = "linux") || wanted == "group" {
        return Mechanism::GroupOnly;
    }
    if wanted != "subreaper" {
        match cgroup_parent() {
            Ok(parent) => return Mechanism::Cgroup { parent },
            Err(e) if wanted == "cgroup" => {
                tracing::warn!("{CONTAINMENT_ENV}=cgroup, but no cgroup can be made ({e}); using a child subreaper");
            }
            Err(e) => tracing::debug!("no per-task cgroup ({e}); using a child subreaper"),
        }
    }
    if become_subreaper() {
        Mechanism::Subreaper
    } else {
        Mechanism::GroupOnly
    }
}

/// Makes this process a child subreaper (Linux); `false` where it cannot be one.
#[cfg(target_os = "linux")]
pub fn become_subreaper() -> bool {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).is_ok()
}

/// Makes this process a child subreaper (Linux); `false` where it cannot be one.
#[cfg(not(target_os = "linux"))]
pub fn become_subreaper() -> bool {
    false
}

/// This process's cgroup v2 directory, if it may make cgroups in it (tried for real: a probe
/// cgroup is made and removed).
fn cgroup_parent() -> Result<PathBuf, String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let mount = mountinfo
        .lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            (right.split_whitespace().next()? == "cgroup2")
                .then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
        })
        .ok_or("no cgroup2 file system is mounted")?;
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let rel = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("this process is in no cgroup v2")?;
    let parent = mount.join(rel.trim_start_matches('/'));
    let probe = parent.join(format!("awcp-probe-{}", std::process::id()));
    std::fs::create_dir(&probe).map_err(|e| format!("{}: {e}", probe.display()))?;
    let movable = std::fs::OpenOptions::new()
        .write(true)
        .open(probe.join("cgroup.procs"));
    let _ = std::fs::remove_dir(&probe);
    movable.map_err(|e| format!("{}/cgroup.procs: {e}", probe.display()))?;
    Ok(parent)
}

static NEXT_JAIL: AtomicU64 = AtomicU64::new(1);

/// One task's containment: made before its command is spawned, ended (with everything in it)
/// when the task ends, also on drop.
#[derive(Debug)]
pub struct Jail {
    /// The task's own cgroup (cgroup mechanism).
    cgroup: Option<PathBuf>,
    /// Whether its descendants are walked (no cgroup, and on Linux).
    walk: bool,
    /// `AWCP_DELEGATION_ID=<id>` (or the caller's marker): processes carrying it are the task's.
    marker: String,
    /// The command's pid (its process group id) and start time, once spawned.
    leader: Option<(u32, u64)>,
    /// Descendants seen while the task ran (subreaper mechanism): pid → start time.
    tracked: BTreeMap<u32, u64>,
    last_watch: Option<Instant>,
    ended: bool,
}

impl Jail {
    /// A jail for a task whose processes carry the environment entry `marker` (`KEY=value`).
    /// With the cgroup mechanism its cgroup is made now; should that fail, the task is
    /// contained as the subreaper mechanism would (if this process is not a subreaper, by its
    /// group and marker only) and a warning is logged.
    pub fn new(marker: impl Into<String>) -> Jail {
        Jail::under(mechanism(), marker)
    }

    /// A jail under `mechanism` rather than the one in force ([`Jail::new`]); the subreaper
    /// mechanism needs this process to be a subreaper ([`become_subreaper`]).
    pub fn under(mechanism: &Mechanism, marker: impl Into<String>) -> Jail {
        let cgroup = match mechanism {
            Mechanism::Cgroup { parent } => {
                let n = NEXT_JAIL.fetch_add(1, Ordering::Relaxed);
                let dir = parent.join(format!("awcp-task-{}-{n}", std::process::id()));
                match std::fs::create_dir(&dir) {
                    Ok(()) => Some(dir),
                    Err(e) => {
                        tracing::warn!("cannot make the task's cgroup {}: {e}", dir.display());
                        None
                    }
                }
            }
            Mechanism::Subreaper | Mechanism::GroupOnly => None,
        };
        Jail {
            walk: cgroup.is_none() && *mechanism != Mechanism::GroupOnly,
            cgroup,
            marker: marker.into(),
            leader: None,
            tracked: BTreeMap::new(),
            last_watch: None,
            ended: false,
        }
    }

    /// The task's cgroup, if it has one.
    pub fn cgroup(&self) -> Option<&Path> {
        self.cgroup.as_deref()
    }

    /// Makes `cmd` start in the jail: its own process group, and (cgroup mechanism) its cgroup,
    /// joined in the child before the command executes, so nothing it starts is ever outside.
    pub fn confine(&self, cmd: &mut std::process::Command) -> std::io::Result<()> {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
        #[cfg(target_os = "linux")]
        if let Some(dir) = &self.cgroup {
            let procs = std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))?;
            let fd = std::os::fd::OwnedFd::from(procs);
            // SAFETY: the closure runs in the forked child before exec; it only makes one
            // write(2) system call (async-signal-safe) on a descriptor opened before the fork,
            // and allocates nothing.
            unsafe {
                cmd.pre_exec(move || {
                    rustix::io::write(&fd, b"0")
                        .map(|_| ())
                        .map_err(std::io::Error::from)
                });
            }
        }
        Ok(())
    }

    /// Starts `cmd` in the jail, all three standard streams piped, its environment exactly
    /// the variables set on it (callers `env_clear` it): with a cgroup, directly in it
    /// (`clone3` with `CLONE_INTO_CGROUP`; see [`crate::spawn`] for why), else as
    /// [`Jail::confine`] makes it start; then [`Jail::started`].
    pub fn spawn(&mut self, cmd: &mut std::process::Command) -> std::io::Result<JailedChild> {
        #[cfg(target_os = "linux")]
        if let Some(dir) = &self.cgroup {
            match crate::spawn::spawn_into_cgroup(cmd, dir) {
                Ok(c) => {
                    self.started(c.id());
                    return Ok(c);
                }
                Err(crate::spawn::NotSpawned::Failed(e)) => return Err(e),
                Err(crate::spawn::NotSpawned::Unsupported) => {}
            }
        }
        self.confine(cmd)?;
        let c = crate::spawn::spawn_std(cmd)?;
        self.started(c.id());
        Ok(c)
    }

    /// The command was spawned as `pid`.
    pub fn started(&mut self, pid: u32) {
        let start = proc_stat(pid).map_or(0, |s| s.start_ticks);
        self.leader = Some((pid, start));
    }

    /// Records the task's descendants (subreaper mechanism; cheap otherwise): call it while
    /// the task runs, so processes that leave the tree later are still known to be the
    /// task's.
    pub fn watch(&mut self) {
        if !self.walk {
            return;
        }
        // A walk reads every process's stat: at most ten a second.
        if self
            .last_watch
            .is_some_and(|t| t.elapsed() < Duration::from_millis(100))
        {
            return;
        }
        self.last_watch = Some(Instant::now());
        let Some((leader, start)) = self.leader else {
            return;
        };
        let Some(table) = process_table() else {
            return;
        };
        if table.get(&leader).is_some_and(|st| st.start_ticks == start) {
            self.tracked.insert(leader, start);
        }
        // Parent links, to a fixed point: a child of a recorded process (the same process:
        // same start time, so a reused pid is not taken for it) is the task's.
        loop {
            let mut grew = false;
            for (pid, st) in &table {
                if self.tracked.contains_key(pid) {
                    continue;
                }
                let parent_is_ours = table
                    .get(&st.ppid)
                    .is_some_and(|p| self.tracked.get(&st.ppid) == Some(&p.start_ticks));
                if parent_is_ours {
                    self.tracked.insert(*pid, st.start_ticks);
                    grew = true;
                }
            }
            if !grew {
                break;
            }
        }
    }

    /// Ends every process of the task and waits (up to 10 s) until they are gone; removes
    /// the cgroup. Returns how many processes were killed. Idempotent.
    pub fn end(&mut self) -> usize {
        if self.ended {
            return 0;
        }
        self.ended = true;
        if let Some(dir) = self.cgroup.clone() {
            // Counted before anything is killed: a killed process leaves `cgroup.procs` as
            // soon as it is reaped, so a count after the group kill could miss them all.
            let held = cgroup_members(&dir).len();
            if let Some((pgid, _)) = self.leader {
                kill_group(pgid);
            }
            return kill_cgroup(&dir).max(held);
        }
        self.last_watch = None;
        self.watch();
        let start = self.leader.map_or(0, |(_, s)| s);
        let mut killed = std::collections::BTreeSet::new();
        let until = Instant::now() + Duration::from_secs(10);
        while let Some(table) = process_table() {
            let victims: Vec<u32> = table
                .iter()
                .filter(|(pid, st)| {
                    st.alive()
                        && (self.tracked.get(pid) == Some(&st.start_ticks)
                            || self.leader.is_some_and(|(g, _)| st.pgid == g)
                            || (st.start_ticks >= start && has_env(**pid, &self.marker)))
                })
                .map(|(pid, _)| *pid)
                .collect();
            if victims.is_empty() || Instant::now() >= until {
                break;
            }
            if let Some((pgid, _)) = self.leader {
                kill_group(pgid);
            }
            for pid in &victims {
                kill_pid(*pid);
            }
            killed.extend(victims.iter().copied());
            reap_adopted(&victims, self.leader.map(|(p, _)| p));
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some((pgid, _)) = self.leader {
            kill_group(pgid);
        }
        killed.len()
    }
}

impl Drop for Jail {
    fn drop(&mut self) {
        self.end();
    }
}

/// Kills every process of cgroup `dir` (`cgroup.kill`, or one by one where the kernel has
/// none), waits until it is empty (up to 10 s), and removes it. Returns how many it held.
pub fn kill_cgroup(dir: &Path) -> usize {
    let held = cgroup_members(dir).len();
    let has_kill = std::fs::write(dir.join("cgroup.kill"), "1").is_ok();
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let left = cgroup_members(dir);
        if left.is_empty() || Instant::now() >= until {
            break;
        }
        if !has_kill {
            for pid in &left {
                kill_pid(*pid);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if let Err(e) = std::fs::remove_dir(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!("cannot remove the task's cgroup {}: {e}", dir.display());
        }
    }
    held
}

/// The processes in the cgroup at `dir` now (none if it cannot be read).
fn cgroup_members(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

fn kill_group(pgid: u32) {
    if let Some(p) = rustix::process::Pid::from_raw(pgid as i32) {
        let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
    }
}

fn kill_pid(pid: u32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
}

/// Reaps the killed processes this process adopted as a subreaper (never `leader`, the
/// command itself, which its `Child` waits for).
fn reap_adopted(pids: &[u32], leader: Option<u32>) {
    #[cfg(target_os = "linux")]
    {
        let me = std::process::id();
        for &pid in pids {
            if Some(pid) == leader || proc_stat(pid).is_none_or(|s| s.ppid != me) {
                continue;
            }
            if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::waitpid(Some(p), rustix::process::WaitOptions::NOHANG);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (pids, leader);
}

/// What `/proc/<pid>/stat` says about a process.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ProcStat {
    pub(crate) state: char,
    pub(crate) ppid: u32,
    pub(crate) pgid: u32,
    pub(crate) start_ticks: u64,
}

impl ProcStat {
    /// Not a zombie (nor dead).
    pub(crate) fn alive(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }
}

/// `/proc/<pid>/stat`: state, parent, process group, start time.
pub(crate) fn proc_stat(pid: u32) -> Option<ProcStat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Parses the text of `/proc/<pid>/stat` (the command name may contain spaces and
/// parentheses: fields are counted after the last `)`).
pub(crate) fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = text.get(text.rfind(')')? + 1..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(3) ppid(4) pgrp(5) … starttime(22), so indexes 0, 1, 2 and 19.
    Some(ProcStat {
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        pgid: f.get(2)?.parse().ok()?,
        start_ticks: f.get(19)?.parse().ok()?,
    })
}

/// Every process's stat; `None` without `/proc`.
pub(crate) fn process_table() -> Option<BTreeMap<u32, ProcStat>> {
    let rd = std::fs::read_dir("/proc").ok()?;
    Some(
        rd.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|pid| Some((pid, proc_stat(pid)?)))
            .collect(),
    )
}

/// Whether process `pid`'s environment holds `entry` (`KEY=value`).
pub(crate) fn has_env(pid: u32, entry: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|b| b.split(|c| *c == 0).any(|kv| kv == entry.as_bytes()))
        .unwrap_or(false)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::process::Command;

    /// How the agent's escapee gets away: each line is a shell snippet that starts
    /// `sh -c "$ESC"` (which writes its pid to `$PIDFILE` and sleeps) out of reach of a
    /// process-group kill.
    const ESCAPES: [(&str, &str); 5] = [
        ("in the group", r#"sh -c "$ESC" &"#),
        ("setsid", r#"setsid sh -c "$ESC" &"#),
        (
            "nohup setsid",
            r#"nohup setsid sh -c "$ESC" >/dev/null 2>&1 &"#,
        ),
        ("double fork + setsid", r#"(setsid sh -c "$ESC" &) ; true"#),
        (
            "double fork + setsid + empty environment",
            r#"(env -i PIDFILE="$PIDFILE" ESC="$ESC" setsid /bin/sh -c "$ESC" &) ; true"#,
        ),
    ];

    const ESC: &str = r#"echo $$ > "$PIDFILE.tmp"; mv "$PIDFILE.tmp" "$PIDFILE"; exec sleep 600"#;

    /// Runs an agent that starts an escapee the given way and then waits (stdin), in a jail
    /// under `mechanism`; returns the escapee's pid once it runs, and the jail and agent.
    fn escape(mechanism: &Mechanism, how: &str, dir: &Path) -> (u32, Jail, JailedChild) {
        let pidfile = dir.join("escapee.pid");
        let _ = std::fs::remove_file(&pidfile);
        // One delegation id per test: tests run side by side in this process.
        let id = dir.file_name().unwrap().to_string_lossy().replace('.', "_");
        let mut jail = Jail::under(mechanism, format!("AWCP_DELEGATION_ID={id}"));
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &format!("{how}\nread _")])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("AWCP_DELEGATION_ID", &id)
            .env("PIDFILE", &pidfile)
            .env("ESC", ESC);
        let child = jail.spawn(&mut cmd).unwrap();
        let until = Instant::now() + Duration::from_secs(20);
        let pid = loop {
            jail.watch();
            if let Some(pid) = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())
            {
                break pid;
            }
            assert!(Instant::now() < until, "{how}: the escapee never started");
            std::thread::sleep(Duration::from_millis(2));
        };
        (pid, jail, child)
    }

    fn alive(pid: u32) -> bool {
        proc_stat(pid).is_some_and(|s| s.alive())
    }

    fn contains(mechanism: &Mechanism, escapes: &[(&str, &str)]) {
        let dir = tempfile::tempdir().unwrap();
        for &(name, how) in escapes {
            let (pid, mut jail, mut child) = escape(mechanism, how, dir.path());
            // The walk sees the escapee while it runs (what the runner's ticks do).
            jail.last_watch = None;
            jail.watch();
            assert!(alive(pid), "{name}: the escapee runs");
            let killed = jail.end();
            let _ = child.wait();
            assert!(killed >= 1, "{name}: nothing was killed");
            if alive(pid) {
                kill_pid(pid);
                panic!("{name}: the escapee {pid} outlived its task under {mechanism}");
            }
        }
    }

    #[test]
    fn a_cgroup_per_task_ends_every_escape() {
        let Ok(parent) = cgroup_parent() else {
            eprintln!("skipped: no cgroup v2 this process may make cgroups in");
            return;
        };
        let mechanism = Mechanism::Cgroup { parent };
        contains(&mechanism, &ESCAPES);
        // The cgroups are gone with their tasks.
        let jail = Jail::under(&mechanism, "X=1");
        let dir = jail.cgroup().unwrap().to_owned();
        assert!(dir.is_dir());
        drop(jail);
        assert!(!dir.exists(), "the task's cgroup is removed");
    }

    /// All but the last escape: a double fork that also empties its environment leaves the
    /// tree before a walk can see it (the gap the module docs name).
    #[test]
    fn the_subreaper_walk_ends_every_escape_it_can_see() {
        if !cfg!(target_os = "linux") || !become_subreaper() {
            eprintln!("skipped: not a subreaper");
            return;
        }
        contains(&Mechanism::Subreaper, &ESCAPES[..4]);
    }

    /// What the cgroup closes: without it (the process group and the delegation id alone, as
    /// before), a double fork into a new session with an empty environment survives its task.
    #[test]
    fn without_a_cgroup_or_a_walk_an_empty_environment_daemon_escapes() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (name, how) = ESCAPES[4];
        let (pid, mut jail, mut child) = escape(&Mechanism::GroupOnly, how, dir.path());
        jail.end();
        let _ = child.wait();
        let survived = alive(pid);
        kill_pid(pid);
        assert!(survived, "{name}: expected to escape a group-only jail");
    }

    /// The mechanisms a spawn is tried under: a cgroup where this process may make one, and
    /// the group only (the path without a cgroup).
    fn cgroup_and_group() -> Vec<Mechanism> {
        match cgroup_parent() {
            Ok(parent) => vec![Mechanism::Cgroup { parent }, Mechanism::GroupOnly],
            Err(_) => vec![Mechanism::GroupOnly],
        }
    }

    /// What `Jail::spawn` starts (directly in the cgroup where it has one): in the jail's
    /// cgroup before it runs anything, leading its own process group, in its working
    /// directory, with exactly the environment set on the command, its three streams piped,
    /// `SIGPIPE` at its default (a pipeline ends quietly), and its exit status reported.
    #[test]
    fn a_spawned_command_starts_in_its_jail_as_the_command_says() {
        let dir = tempfile::tempdir().unwrap();
        let mechanisms = cgroup_and_group();
        for mechanism in &mechanisms {
            let mut jail = Jail::under(mechanism, "X=1");
            let mut cmd = Command::new("sh");
            cmd.args([
                "-c",
                "read line; echo \"got $line\"; echo \"FOO=$FOO\"; env | grep -c =; pwd; \
                 cat /proc/self/cgroup; yes | head -n 1 >/dev/null; echo oops >&2; exit 3",
            ])
            .current_dir(dir.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("FOO", "bar baz");
            let mut child = jail.spawn(&mut cmd).unwrap();
            if jail.cgroup().is_some() {
                assert!(
                    child.started_in_cgroup(),
                    "clone3 into the cgroup on this kernel"
                );
            }
            {
                use std::io::Write;
                let mut stdin = child.stdin.take().unwrap();
                stdin.write_all(b"hello\n").unwrap();
            }
            let mut out = String::new();
            let mut err = String::new();
            {
                use std::io::Read;
                child
                    .stdout
                    .take()
                    .unwrap()
                    .read_to_string(&mut out)
                    .unwrap();
                child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
            }
            let status = child.wait().unwrap();
            assert_eq!(status.code(), Some(3), "{mechanism}: {out}");
            assert_eq!(
                child.wait().unwrap().code(),
                Some(3),
                "reaped once, status kept"
            );
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines[0], "got hello", "{mechanism}: {out}");
            assert_eq!(lines[1], "FOO=bar baz", "{mechanism}: {out}");
            // PATH, FOO, and what sh adds itself (PWD; some shells OLDPWD, SHLVL, _).
            let n: usize = lines[2].parse().unwrap();
            assert!(
                (2..=6).contains(&n),
                "{mechanism}: only what was set: {out}"
            );
            assert_eq!(
                Path::new(lines[3]).canonicalize().unwrap(),
                dir.path().canonicalize().unwrap()
            );
            if let Some(cg) = jail.cgroup() {
                let name = cg.file_name().unwrap().to_string_lossy().into_owned();
                assert!(
                    out.contains(&format!("/{name}\n")),
                    "{mechanism}: in {name}: {out}"
                );
            }
            assert_eq!(err, "oops\n", "{mechanism}: SIGPIPE ends `yes` quietly");
            let st = proc_stat(child.id());
            assert!(st.is_none(), "reaped");
            jail.end();
        }
    }

    /// A command that cannot start is an error of the spawn (not a child that exits 127),
    /// with and without a cgroup.
    #[test]
    fn a_missing_program_is_an_error_of_the_spawn() {
        let dir = tempfile::tempdir().unwrap();
        let mechanisms = cgroup_and_group();
        for mechanism in &mechanisms {
            for program in ["no-such-agent-program", "./no-such-agent-program"] {
                let mut jail = Jail::under(mechanism, "X=1");
                let mut cmd = Command::new(program);
                cmd.current_dir(dir.path()).env_clear();
                let e = jail.spawn(&mut cmd).unwrap_err();
                assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{mechanism}: {e}");
            }
            // Not executable.
            let script = dir.path().join("agent.sh");
            std::fs::write(&script, "echo hi\n").unwrap();
            let mut jail = Jail::under(mechanism, "X=1");
            let e = jail.spawn(Command::new(&script).env_clear()).unwrap_err();
            assert_eq!(
                e.kind(),
                std::io::ErrorKind::PermissionDenied,
                "{mechanism}: {e}"
            );
        }
    }

    #[test]
    fn the_mechanism_can_be_forced() {
        assert_eq!(choose("group"), Mechanism::GroupOnly);
        if cfg!(target_os = "linux") {
            assert_eq!(choose("subreaper"), Mechanism::Subreaper);
        }
    }
}
