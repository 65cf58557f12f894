//! Task process groups: every task a [`crate::CommandRunner`] starts runs in its own process
//! group, and the whole group is ended (SIGKILL) when the task ends for any reason: cancel,
//! lease expiry, executor shutdown, failure, or success with a background process left over.
//!
//! A [`TaskGroup`] is what the executor journals about a running task, so that after an
//! executor crash the restarted executor can end the orphaned tree
//! ([`TaskGroup::end_orphaned`]). Because process ids are reused, a recorded group is only
//! signalled when it is verifiably the same: the group leader still runs with the recorded
//! start time, or (leader gone) a member carries the delegation id in its environment
//! (`AWCP_DELEGATION_ID`, set by the runner). Processes that left the group (`setsid`,
//! `setpgid`) or cleared their environment are out of reach; confine agents in a cgroup or
//! container for that.
//!
//! Linux only for now (`/proc`); elsewhere the group is still killed by the runner, but a
//! restarted executor cannot verify, so it leaves recorded groups alone.

use std::time::{Duration, Instant};

use rustix::process::{kill_process, kill_process_group, Pid, Signal};

/// A task's process group, as journalled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskGroup {
    /// The process group id (= the leader's pid).
    pub pgid: u32,
    /// The leader's start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start_ticks: u64,
    /// `/proc/sys/kernel/random/boot_id` when the group was started (a reboot ends groups).
    pub boot_id: String,
}

/// What [`TaskGroup::end_orphaned`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Orphans {
    /// No process of the group runs any more (or the machine rebooted).
    Gone,
    /// Processes of the group were found, killed, and are gone.
    Ended(usize),
    /// Processes with that group id run but are not provably the task's: left alone.
    NotOurs,
    /// The group could not be inspected on this platform: left alone.
    Unverifiable,
}

impl TaskGroup {
    /// The group led by `pid` (a child started with `process_group(0)`), or `None` where
    /// `/proc` cannot describe it.
    pub fn of_leader(pid: u32) -> Option<TaskGroup> {
        let st = stat(pid)?;
        Some(TaskGroup {
            pgid: pid,
            start_ticks: st.start_ticks,
            boot_id: boot_id()?,
        })
    }

    /// The journal form: `pgid:start_ticks:boot_id`.
    pub fn to_handle(&self) -> String {
        format!("{}:{}:{}", self.pgid, self.start_ticks, self.boot_id)
    }

    /// Parses [`TaskGroup::to_handle`]'s output.
    pub fn from_handle(s: &str) -> Option<TaskGroup> {
        let mut it = s.splitn(3, ':');
        let pgid = it.next()?.parse().ok().filter(|p| *p > 1)?;
        let start_ticks = it.next()?.parse().ok()?;
        let boot_id = it.next()?.to_owned();
        Some(TaskGroup {
            pgid,
            start_ticks,
            boot_id,
        })
    }

    /// SIGKILL to every process of the group. Only for a group whose leader is this process's
    /// own unreaped child (so the id cannot have been reused).
    pub fn kill(&self) {
        if let Some(p) = Pid::from_raw(self.pgid as i32) {
            let _ = kill_process_group(p, Signal::KILL);
        }
    }

    /// Waits (up to `limit`) until no live (non-zombie) process is in the group; `true` if none
    /// is.
    pub fn wait_gone(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        loop {
            if members(self.pgid).is_none_or(|m| m.is_empty()) {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// After an executor crash: ends the group if it is verifiably the task of delegation
    /// `delegation_id` (see the [module docs](self)), and waits for it to be gone.
    pub fn end_orphaned(&self, delegation_id: &str) -> Orphans {
        if boot_id().is_none() {
            return Orphans::Unverifiable;
        }
        if boot_id().as_deref() != Some(self.boot_id.as_str()) {
            return Orphans::Gone;
        }
        let Some(found) = members(self.pgid) else {
            return Orphans::Unverifiable;
        };
        if found.is_empty() {
            return Orphans::Gone;
        }
        let leader_is_ours = found
            .iter()
            .any(|m| m.pid == self.pgid && m.start_ticks == self.start_ticks);
        let marker = format!("AWCP_DELEGATION_ID={delegation_id}");
        let ours: Vec<&Member> = if leader_is_ours {
            found.iter().collect()
        } else {
            found
                .iter()
                .filter(|m| m.start_ticks >= self.start_ticks && has_env(m.pid, &marker))
                .collect()
        };
        if ours.is_empty() {
            return Orphans::NotOurs;
        }
        if leader_is_ours {
            self.kill();
        } else {
            for m in &ours {
                if let Some(p) = Pid::from_raw(m.pid as i32) {
                    let _ = kill_process(p, Signal::KILL);
                }
            }
        }
        let n = ours.len();
        self.wait_gone(Duration::from_secs(10));
        Orphans::Ended(n)
    }
}

/// One live process of a group.
#[derive(Clone, Copy, Debug)]
struct Member {
    pid: u32,
    start_ticks: u64,
}

struct Stat {
    state: char,
    pgid: u32,
    start_ticks: u64,
}

/// `/proc/<pid>/stat`: state, process group, start time.
fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp …`: comm may contain anything; parse after the last ')'.
    let rest = text.get(text.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        state: f.first()?.chars().next()?,
        pgid: f.get(2)?.parse().ok()?,
        start_ticks: f.get(19)?.parse().ok()?,
    })
}

fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Live (non-zombie) processes whose group is `pgid`; `None` without `/proc`.
fn members(pgid: u32) -> Option<Vec<Member>> {
    let rd = std::fs::read_dir("/proc").ok()?;
    let mut out = Vec::new();
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(st) = stat(pid) {
            if st.pgid == pgid && st.state != 'Z' && st.state != 'X' {
                out.push(Member {
                    pid,
                    start_ticks: st.start_ticks,
                });
            }
        }
    }
    Some(out)
}

/// Whether process `pid`'s environment holds `entry` (`KEY=value`).
fn has_env(pid: u32, entry: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|b| b.split(|c| *c == 0).any(|kv| kv == entry.as_bytes()))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    fn spawn_tree(env: &str) -> (std::process::Child, TaskGroup) {
        let child = Command::new("sh")
            .args(["-c", "sleep 600 & sleep 600; true"])
            .env("AWCP_DELEGATION_ID", env)
            .process_group(0)
            .spawn()
            .unwrap();
        let g = TaskGroup::of_leader(child.id()).expect("/proc describes the group");
        // Wait until both sleeps are in the group.
        let until = Instant::now() + Duration::from_secs(10);
        while members(g.pgid).map_or(0, |m| m.len()) < 3 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        (child, g)
    }

    #[test]
    fn handles_round_trip() {
        let g = TaskGroup {
            pgid: 42,
            start_ticks: 7,
            boot_id: "a:b-c".into(),
        };
        assert_eq!(TaskGroup::from_handle(&g.to_handle()), Some(g));
        assert_eq!(TaskGroup::from_handle("1:2:x"), None, "never group 1");
        assert_eq!(TaskGroup::from_handle("x"), None);
    }

    #[test]
    fn a_verified_orphan_group_is_ended_and_a_foreign_one_is_left_alone() {
        let (mut child, g) = spawn_tree("dlg_a");
        // A different start time (a reused id) is not ours: left alone.
        let stranger = TaskGroup {
            start_ticks: g.start_ticks + 1,
            ..g.clone()
        };
        assert_eq!(stranger.end_orphaned("dlg_other"), Orphans::NotOurs);
        assert!(!members(g.pgid).unwrap().is_empty());
        // The recorded group: ended, all of it.
        assert_eq!(g.end_orphaned("dlg_a"), Orphans::Ended(3));
        let _ = child.wait();
        assert!(members(g.pgid).unwrap().is_empty());
        assert_eq!(g.end_orphaned("dlg_a"), Orphans::Gone);
    }

    #[test]
    fn with_the_leader_gone_members_are_recognised_by_their_delegation_id() {
        let (mut child, g) = spawn_tree("dlg_b");
        // The leader dies alone (its grandchildren stay in the group).
        let _ = kill_process(Pid::from_raw(g.pgid as i32).unwrap(), Signal::KILL);
        let _ = child.wait();
        assert_eq!(g.end_orphaned("dlg_not_this_one"), Orphans::NotOurs);
        assert_eq!(g.end_orphaned("dlg_b"), Orphans::Ended(2));
        assert!(members(g.pgid).unwrap().is_empty());
    }
}
