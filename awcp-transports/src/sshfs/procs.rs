//! Processes as `/proc` shows them: enough to find the sshd sessions that use a delegation's
//! export (delegator) and the `sshfs`/`ssh` processes of a mount (executor), and to end them
//! without ever hitting a reused PID.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

/// One process, named by its PID and its start time (clock ticks since boot), so that a PID
/// reused by a new process is never mistaken for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Proc {
    pub pid: i32,
    pub start: u64,
}

/// What `/proc/<pid>/stat` says: parent, state letter, start time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stat {
    pub ppid: i32,
    pub state: char,
    pub start: u64,
}

/// Every PID in `/proc`.
pub(crate) fn pids() -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .collect()
}

/// Parses `/proc/<pid>/stat` (the command name may contain spaces and parentheses: fields are
/// counted after the last `)`).
pub(crate) fn stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

fn parse_stat(text: &str) -> Option<Stat> {
    crate::contain::parse_stat(text).map(|s| Stat {
        ppid: i32::try_from(s.ppid).unwrap_or(0),
        state: s.state,
        start: s.start_ticks,
    })
}

/// The process as a [`Proc`], if it exists.
pub(crate) fn proc_of(pid: i32) -> Option<Proc> {
    stat(pid).map(|s| Proc {
        pid,
        start: s.start,
    })
}

/// The real user id (from `status`: the owner of `/proc/<pid>` is root for processes that
/// made themselves non-dumpable, as sshd's session processes do).
pub(crate) fn uid(pid: i32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The command line, split at NULs.
pub(crate) fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The paths a process holds: its working directory, root and every open file descriptor, as
/// the kernel prints them (from the caller's root; ` (deleted)` appended for removed ones).
pub(crate) fn held_paths(pid: i32) -> Vec<String> {
    let link = |p: PathBuf| {
        std::fs::read_link(p)
            .ok()
            .map(|l| l.to_string_lossy().into_owned())
    };
    let mut out: Vec<String> = ["cwd", "root"]
        .iter()
        .filter_map(|n| link(PathBuf::from(format!("/proc/{pid}/{n}"))))
        .collect();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        out.extend(rd.flatten().filter_map(|e| link(e.path())));
    }
    out
}

/// Whether a path as printed by the kernel (see [`held_paths`]) is `dir` or inside it.
pub(crate) fn is_under(printed: &str, dir: &Path) -> bool {
    let printed = printed.strip_suffix(" (deleted)").unwrap_or(printed);
    Path::new(printed).starts_with(dir)
}

/// Whether `p` still runs (a zombie has released its files and counts as gone).
pub(crate) fn alive(p: Proc) -> bool {
    matches!(stat(p.pid), Some(s) if s.start == p.start && s.state != 'Z' && s.state != 'X')
}

/// Sends SIGKILL to each process that is still the one recorded, then waits (at most
/// `timeout`) until all are gone. Returns the ones still running.
pub(crate) fn kill_and_wait(victims: &[Proc], timeout: Duration) -> Vec<Proc> {
    for &p in victims {
        if alive(p) {
            if let Some(pid) = Pid::from_raw(p.pid) {
                let _ = kill_process(pid, Signal::KILL);
            }
        }
    }
    // A killed process is gone within a scheduler tick or two; there is no event to wait on
    // for a process that is not our child, so poll briefly.
    let deadline = Instant::now() + timeout;
    loop {
        let left: Vec<Proc> = victims.iter().copied().filter(|&p| alive(p)).collect();
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_names() {
        let s = parse_stat("42 (a) b (c) S 7 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 0")
            .unwrap();
        assert_eq!((s.state, s.ppid, s.start), ('S', 7, 12345));
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn this_process_is_visible() {
        let me = proc_of(std::process::id() as i32).unwrap();
        assert!(alive(me));
        assert!(!alive(Proc {
            pid: me.pid,
            start: me.start + 1
        }));
        assert!(held_paths(me.pid).iter().any(|p| p.starts_with('/')));
        assert!(!cmdline(me.pid).is_empty());
    }

    #[test]
    fn under() {
        let d = Path::new("/j/abc");
        assert!(is_under("/j/abc", d));
        assert!(is_under("/j/abc/w/x (deleted)", d));
        assert!(is_under("/j/abc (deleted)", d));
        assert!(!is_under("/j/abcd", d));
        assert!(!is_under("socket:[123]", d));
    }
}
