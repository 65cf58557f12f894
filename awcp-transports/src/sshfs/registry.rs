//! The registry of live SSHFS delegations, shared by every delegator process that uses the
//! same principals file (a daemon and any number of `awcp delegate` processes).
//!
//! It lives in `<principals dir>/.awcp-<user>/` (root-only, mode 0700): a `lock` file taken with
//! `flock` around every change, and one `<principal>.json` record per delegation naming the
//! process that owns it (PID, start time and a random instance id). The rules that let many
//! processes share one jail and one principals file:
//! - a record is written before anything it names exists (token directory, bind mounts,
//!   principal line) and removed after all of it is gone;
//! - principal lines are added and removed one at a time under the lock, never rewritten from
//!   one process's view;
//! - a sweep ends only delegations whose owning process is gone (or that lost their record:
//!   a `restrict awcp-…` line without a record, an empty token directory nobody records).

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation};
use serde::{Deserialize, Serialize};

use super::procs::{self, Proc};
use crate::error::TransportError;

/// Which process owns a delegation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Owner {
    pub pid: i32,
    /// Start time of `pid` (see [`procs::Proc`]).
    pub start: u64,
    /// Random per [`super::SshfsDelegator`], so two transports in one process tell theirs apart.
    pub instance: String,
}

impl Owner {
    /// Whether the owning process is gone (then its delegations are provably stale).
    pub fn gone(&self) -> bool {
        !procs::alive(Proc {
            pid: self.pid,
            start: self.start,
        })
    }
}

/// One rw resource whose source directory is checked at release.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RwSource {
    pub name: String,
    pub path: PathBuf,
}

/// A delegation as the registry records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Record {
    pub principal: String,
    pub delegation: String,
    /// `<jail>/<token>`: the bind mounts are below it.
    pub token_dir: PathBuf,
    pub owner: Owner,
    pub expires_at_ms: u64,
    /// When the export was made (an inode change time): changes after it are the executor's.
    pub lease_start: super::residue::ChangeTime,
    pub rw_sources: Vec<RwSource>,
}

/// The registry directory and the principals file it guards.
#[derive(Debug)]
pub(crate) struct Registry {
    dir: PathBuf,
    principals_file: PathBuf,
}

/// The registry, locked (the lock is released on drop).
pub(crate) struct Locked<'a> {
    reg: &'a Registry,
    _lock: fs::File,
}

fn io(ctx: &'static str) -> impl FnOnce(std::io::Error) -> TransportError {
    move |e| TransportError::io(ctx, e)
}

/// The principal a `restrict <principal>` line names.
fn principal_of(line: &str) -> Option<&str> {
    line.split_whitespace().last()
}

impl Registry {
    /// The registry for `<principals_dir>/<user>`; creates the directories.
    pub fn open(principals_dir: &Path, user: &str) -> Result<Self, TransportError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(principals_dir)
            .map_err(io("principals dir"))?;
        let dir = principals_dir.join(format!(".awcp-{user}"));
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io("sshfs registry dir"))?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
            .map_err(io("sshfs registry dir"))?;
        Ok(Registry {
            dir,
            principals_file: principals_dir.join(user),
        })
    }

    /// Takes the registry lock (blocks while another process holds it).
    pub fn lock(&self) -> Result<Locked<'_>, TransportError> {
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(self.dir.join("lock"))
            .map_err(io("sshfs registry lock"))?;
        flock(&f, FlockOperation::LockExclusive)
            .map_err(|e| TransportError::io("sshfs registry lock", e.into()))?;
        Ok(Locked {
            reg: self,
            _lock: f,
        })
    }
}

impl Locked<'_> {
    fn record_path(&self, principal: &str) -> PathBuf {
        self.reg.dir.join(format!("{principal}.json"))
    }

    /// Every record (unreadable ones are skipped with a warning).
    pub fn records(&self) -> Vec<Record> {
        let Ok(rd) = fs::read_dir(&self.reg.dir) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_none_or(|x| x != "json") {
                continue;
            }
            match fs::read(&p).map(|b| serde_json::from_slice::<Record>(&b)) {
                Ok(Ok(r)) => out.push(r),
                _ => tracing::warn!(path = %p.display(), "unreadable sshfs registry record"),
            }
        }
        out.sort_by(|a, b| a.principal.cmp(&b.principal));
        out
    }

    /// The record of `principal`.
    pub fn get(&self, principal: &str) -> Option<Record> {
        let b = fs::read(self.record_path(principal)).ok()?;
        serde_json::from_slice(&b).ok()
    }

    /// Writes (or replaces) a record atomically.
    pub fn put(&self, r: &Record) -> Result<(), TransportError> {
        let path = self.record_path(&r.principal);
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_vec_pretty(r)
            .map_err(|e| TransportError::io("sshfs registry record", std::io::Error::other(e)))?;
        write_file(&tmp, &text, 0o600).map_err(io("sshfs registry record"))?;
        fs::rename(&tmp, &path).map_err(io("sshfs registry record"))
    }

    /// Removes a record.
    pub fn remove(&self, principal: &str) {
        let _ = fs::remove_file(self.record_path(principal));
    }

    fn principal_lines(&self) -> Result<Vec<String>, TransportError> {
        match fs::read_to_string(&self.reg.principals_file) {
            Ok(t) => Ok(t.lines().map(str::to_owned).collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(TransportError::io("principals file", e)),
        }
    }

    fn write_principal_lines(&self, lines: &[String]) -> Result<(), TransportError> {
        let mut text = lines.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        let path = &self.reg.principals_file;
        let tmp = path.with_extension("awcp-tmp");
        write_file(&tmp, text.as_bytes(), 0o644).map_err(io("principals file"))?;
        fs::rename(&tmp, path).map_err(io("principals file"))
    }

    /// Adds the line `restrict <principal>` (`restrict` turns off forwarding and the pty even
    /// if a certificate allowed them).
    pub fn add_principal(&self, principal: &str) -> Result<(), TransportError> {
        let mut lines = self.principal_lines()?;
        if !lines.iter().any(|l| principal_of(l) == Some(principal)) {
            lines.push(format!("restrict {principal}"));
            self.write_principal_lines(&lines)?;
        }
        Ok(())
    }

    /// Removes the lines naming `principal`: from now on sshd refuses its certificate.
    pub fn remove_principal(&self, principal: &str) -> Result<(), TransportError> {
        let lines = self.principal_lines()?;
        let kept: Vec<String> = lines
            .iter()
            .filter(|l| principal_of(l) != Some(principal))
            .cloned()
            .collect();
        if kept.len() != lines.len() {
            self.write_principal_lines(&kept)?;
        }
        Ok(())
    }

    /// Removes `restrict awcp-…` lines no record names (left by a crash between the two
    /// steps, or by an older version that kept no records). Other lines are left alone.
    pub fn remove_orphan_principals(&self) -> Result<Vec<String>, TransportError> {
        let known: BTreeSet<String> = self.records().into_iter().map(|r| r.principal).collect();
        let lines = self.principal_lines()?;
        let (orphans, kept): (Vec<String>, Vec<String>) = lines.into_iter().partition(|l| {
            l.starts_with("restrict awcp-") && principal_of(l).is_some_and(|p| !known.contains(p))
        });
        if !orphans.is_empty() {
            self.write_principal_lines(&kept)?;
        }
        Ok(orphans)
    }
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(p: &str, pid: i32) -> Record {
        Record {
            principal: p.into(),
            delegation: p.trim_start_matches("awcp-").into(),
            token_dir: "/jail/t".into(),
            owner: Owner {
                pid,
                start: procs::proc_of(pid).map(|p| p.start).unwrap_or(1),
                instance: "i".into(),
            },
            expires_at_ms: 1,
            lease_start: (0, 0),
            rw_sources: vec![],
        }
    }

    #[test]
    fn principals_are_edited_one_line_at_a_time() {
        let d = tempfile::tempdir().unwrap();
        let reg = Registry::open(d.path(), "u").unwrap();
        let file = d.path().join("u");
        fs::write(&file, "restrict manual\n").unwrap();
        let l = reg.lock().unwrap();
        l.add_principal("awcp-a").unwrap();
        l.add_principal("awcp-b").unwrap();
        l.add_principal("awcp-a").unwrap();
        assert_eq!(
            fs::read_to_string(&file).unwrap(),
            "restrict manual\nrestrict awcp-a\nrestrict awcp-b\n"
        );
        l.remove_principal("awcp-a").unwrap();
        assert_eq!(
            fs::read_to_string(&file).unwrap(),
            "restrict manual\nrestrict awcp-b\n"
        );
        // awcp-b has no record: an orphan; the manual line stays.
        l.put(&record("awcp-c", std::process::id() as i32)).unwrap();
        l.add_principal("awcp-c").unwrap();
        assert_eq!(l.remove_orphan_principals().unwrap(), ["restrict awcp-b"]);
        assert_eq!(
            fs::read_to_string(&file).unwrap(),
            "restrict manual\nrestrict awcp-c\n"
        );
        assert_eq!(l.records().len(), 1);
        assert!(!l.get("awcp-c").unwrap().owner.gone());
        l.remove("awcp-c");
        assert!(l.records().is_empty());
        let mode = fs::metadata(d.path().join(".awcp-u"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn a_dead_owner_is_gone() {
        let mut r = record("awcp-x", std::process::id() as i32);
        r.owner.start += 1;
        assert!(r.owner.gone());
    }
}
