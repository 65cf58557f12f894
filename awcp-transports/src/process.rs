//! Task process groups: every task a [`crate::CommandRunner`] starts runs in its own process
//! group, and the whole group is ended (SIGKILL) when the task ends for any reason: cancel,
//! lease expiry, executor shutdown, failure, or success with a background process left over.
//!
//! A [`TaskGroup`] is what the executor journals about a running task, so that after an
//! executor crash the restarted executor can end the orphaned tree
//! ([`TaskGroup::end_orphaned`]). Because process ids are reused, a recorded group is only
//! signalled when it is verifiably the same: the group leader still runs with the recorded
//! start time, or (leader gone) a member carries the delegation id in its environment
//! (`AWCP_DELEGATION_ID`, set by the runner); processes that left the group (`setsid`) are
//! found by that variable too.
//!
//! Where the task ran in a cgroup of its own ([`crate::contain`]), the journal records it, and
//! the restarted executor ends the whole cgroup: nothing the task started is out of reach.
//!
//! Linux only for now (`/proc`); elsewhere the group is still killed by the runner, but a
//! restarted executor cannot verify, so it leaves recorded groups alone.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rustix::process::{kill_process, kill_process_group, Pid, Signal};

use crate::contain::{has_env, proc_stat, process_table};

/// A task's process group (and cgroup, where it had one), as journalled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskGroup {
    /// The process group id (= the leader's pid).
    pub pgid: u32,
    /// The leader's start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start_ticks: u64,
    /// `/proc/sys/kernel/random/boot_id` when the group was started (a reboot ends groups).
    pub boot_id: String,
    /// The task's own cgroup v2 ([`crate::contain`]), if it ran in one.
    pub cgroup: Option<PathBuf>,
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
        let st = proc_stat(pid)?;
        Some(TaskGroup {
            pgid: pid,
            start_ticks: st.start_ticks,
            boot_id: boot_id()?,
            cgroup: None,
        })
    }

    /// The journal form: `pgid:start_ticks:boot_id`, then `|cgroup=<path>` if it had one.
    pub fn to_handle(&self) -> String {
        let mut s = format!("{}:{}:{}", self.pgid, self.start_ticks, self.boot_id);
        if let Some(dir) = &self.cgroup {
            s.push_str("|cgroup=");
            s.push_str(&dir.to_string_lossy());
        }
        s
    }

    /// Parses [`TaskGroup::to_handle`]'s output (also the form without a cgroup that earlier
    /// versions wrote).
    pub fn from_handle(s: &str) -> Option<TaskGroup> {
        let (group, cgroup) = match s.split_once("|cgroup=") {
            Some((g, c)) => (g, Some(PathBuf::from(c)).filter(|p| p.is_absolute())),
            None => (s, None),
        };
        let mut it = group.splitn(3, ':');
        let pgid = it.next()?.parse().ok().filter(|p| *p > 1)?;
        let start_ticks = it.next()?.parse().ok()?;
        let boot_id = it.next()?.to_owned();
        Some(TaskGroup {
            pgid,
            start_ticks,
            boot_id,
            cgroup,
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

    /// After an executor crash: ends what is verifiably the task of delegation
    /// `delegation_id` (see the [module docs](self)) and waits for it to be gone: its whole
    /// cgroup if it had one, else its group (if the leader is the recorded one, or else the
    /// members carrying the delegation id) and every process that left the group but carries
    /// the delegation id.
    pub fn end_orphaned(&self, delegation_id: &str) -> Orphans {
        if boot_id().is_none() {
            return Orphans::Unverifiable;
        }
        if boot_id().as_deref() != Some(self.boot_id.as_str()) {
            return Orphans::Gone;
        }
        if let Some(dir) = self.cgroup.as_deref().filter(|d| d.is_dir()) {
            return match crate::contain::kill_cgroup(dir) {
                0 => Orphans::Gone,
                n => Orphans::Ended(n),
            };
        }
        let Some(table) = process_table() else {
            return Orphans::Unverifiable;
        };
        let marker = format!("AWCP_DELEGATION_ID={delegation_id}");
        let in_group: Vec<u32> = table
            .iter()
            .filter(|(_, st)| st.alive() && st.pgid == self.pgid)
            .map(|(pid, _)| *pid)
            .collect();
        let leader_is_ours = table
            .get(&self.pgid)
            .is_some_and(|st| st.alive() && st.start_ticks == self.start_ticks);
        let ours: Vec<u32> = table
            .iter()
            .filter(|(pid, st)| {
                st.alive()
                    && ((leader_is_ours && st.pgid == self.pgid)
                        || (st.start_ticks >= self.start_ticks && has_env(**pid, &marker)))
            })
            .map(|(pid, _)| *pid)
            .collect();
        if ours.is_empty() {
            return if in_group.is_empty() {
                Orphans::Gone
            } else {
                Orphans::NotOurs
            };
        }
        if leader_is_ours {
            self.kill();
        }
        for pid in &ours {
            if let Some(p) = Pid::from_raw(*pid as i32) {
                let _ = kill_process(p, Signal::KILL);
            }
        }
        let until = Instant::now() + Duration::from_secs(10);
        while ours
            .iter()
            .any(|pid| proc_stat(*pid).is_some_and(|st| st.alive()))
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        Orphans::Ended(ours.len())
    }
}

fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Live (non-zombie) processes whose group is `pgid`; `None` without `/proc`.
fn members(pgid: u32) -> Option<Vec<u32>> {
    Some(
        process_table()?
            .into_iter()
            .filter(|(_, st)| st.pgid == pgid && st.alive())
            .map(|(pid, _)| pid)
            .collect(),
    )
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
            cgroup: None,
        };
        assert_eq!(TaskGroup::from_handle(&g.to_handle()), Some(g.clone()));
        let in_cgroup = TaskGroup {
            cgroup: Some("/sys/fs/cgroup/awcp-task-9-1".into()),
            ..g
        };
        assert_eq!(
            TaskGroup::from_handle(&in_cgroup.to_handle()),
            Some(in_cgroup)
        );
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
