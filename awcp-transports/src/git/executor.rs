//! [`GitExecutor`]: the executor side of the git transport as an [`ExecutorTransport`].
//!
//! Per work directory it keeps, under its own directory (never in the work directory): the
//! repository (`<root>/<name>.git`) and, for an SSH credential, the key file
//! (`<root>/<name>.key`, mode 0600) and the `known_hosts` file pinning the handle's host key
//! (`<root>/<name>.known_hosts`). Both go at release, and at start-up ([`recover`]).
//! The handle's credential stays in memory only.
//!
//! [`recover`]: ExecutorTransport::recover

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use awcp_proto::wire::{GitAuth, GitResult};
use awcp_proto::{DelegationId, ResourceName, TransportHandle, TransportKind};

use super::work::{clone_base, commit_and_push, Checkout};
use super::{delegation_branch, Credential, Git, Identity};
use crate::archive::{Delivery, Layout};
use crate::cancel::CancelFlag;
use crate::error::TransportError;
use crate::snapshot::{CapturedSnapshot, SnapshotKind};
use crate::traits::{DependencyMissing, ExecutorTransport, SetupReport, SetupRequest};

/// What the executor knows of a work directory it set up.
#[derive(Clone, Debug)]
struct Entry {
    url: String,
    credential: Credential,
    base_commit: String,
    branch: String,
}

/// The executor side of the git transport (see the [module docs](self)).
#[derive(Debug)]
pub struct GitExecutor {
    git: Git,
    root: PathBuf,
    identity: Identity,
    entries: Mutex<BTreeMap<PathBuf, Entry>>,
}

/// The URL schemes an executor's git reaches by default: never `file://` (its own
/// repositories) or `ext::` (a command).
pub const EXECUTOR_PROTOCOLS: &str = "http:https:ssh:git";

impl GitExecutor {
    /// Keeps its repositories and key files under `root`; commits as the reference's
    /// identity (see [`GitExecutor::identity`]).
    pub fn new(root: impl Into<PathBuf>) -> GitExecutor {
        GitExecutor {
            git: Git::new().allow_protocols(EXECUTOR_PROTOCOLS),
            root: root.into(),
            identity: Identity::executor(),
            entries: Mutex::new(BTreeMap::new()),
        }
    }

    /// Commits as `who`.
    pub fn identity(mut self, who: Identity) -> GitExecutor {
        self.identity = who;
        self
    }

    /// Uses `git` (e.g. one that also allows `file://`, for tests).
    pub fn with_git(mut self, git: Git) -> GitExecutor {
        self.git = git;
        self
    }

    /// The repository, the key file and the `known_hosts` file of `work_dir`.
    fn paths(&self, work_dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
        let name = work_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "work".into());
        (
            self.root.join(format!("{name}.git")),
            self.root.join(format!("{name}.key")),
            self.root.join(format!("{name}.known_hosts")),
        )
    }

    /// Commits the work directory and pushes it to the delegation's branch (see
    /// [`commit_and_push`]); the snapshot text the delegator reads.
    pub fn push(&self, work_dir: &Path, message: &str) -> Result<GitResult, TransportError> {
        let e = self
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(work_dir)
            .cloned()
            .ok_or_else(|| TransportError::Unsupported("no git checkout here".into()))?;
        let (git_dir, _, _) = self.paths(work_dir);
        let c = Checkout {
            git_dir: &git_dir,
            work_dir,
            url: &e.url,
            credential: &e.credential,
        };
        let p = commit_and_push(
            &self.git,
            &c,
            &e.branch,
            &e.base_commit,
            message,
            &self.identity,
        )?;
        Ok(GitResult {
            branch: p.branch,
            commit_hash: p.commit,
            base_commit: p.base_commit,
            changed_files: p.changed_files,
        })
    }

    /// Sets up `work_dir` from a git handle: the layout found (one directory per resource,
    /// or the workspace at the root).
    pub fn setup_git(
        &self,
        id: &DelegationId,
        work_dir: &Path,
        handle: &TransportHandle,
        resources: &[ResourceName],
    ) -> Result<Layout, TransportError> {
        let TransportHandle::Git(h) = handle else {
            return Err(TransportError::Unsupported(format!(
                "git cannot set up a {} handle",
                handle.kind().as_str()
            )));
        };
        let (git_dir, key_file, known_hosts) = self.paths(work_dir);
        std::fs::create_dir_all(&self.root).map_err(|e| TransportError::io("git directory", e))?;
        let forget = || {
            let _ = std::fs::remove_dir_all(&git_dir);
            let _ = std::fs::remove_file(&key_file);
            let _ = std::fs::remove_file(&known_hosts);
        };
        let credential = match &h.auth {
            None | Some(GitAuth::None) => Credential::None,
            Some(GitAuth::Token(t)) => Credential::Token(t.clone()),
            Some(GitAuth::Ssh {
                private_key,
                host_key,
            }) => {
                let written = (|| {
                    let key_file = match private_key {
                        Some(key) => {
                            write_private(&key_file, key)?;
                            Some(key_file.clone())
                        }
                        None => None,
                    };
                    let known_hosts = match host_key {
                        Some(k) => {
                            write_private(&known_hosts, &super::known_hosts_line(k)?)?;
                            Some(known_hosts.clone())
                        }
                        None => None,
                    };
                    Ok::<_, TransportError>(Credential::SshKey {
                        key_file,
                        known_hosts,
                    })
                })();
                written.inspect_err(|_| forget())?
            }
        };
        let branch = delegation_branch(id.as_str());
        let c = Checkout {
            git_dir: &git_dir,
            work_dir,
            url: &h.repo_url,
            credential: &credential,
        };
        let r = clone_base(&self.git, &c, &h.base_branch, &h.base_commit, &branch);
        if let Err(e) = r {
            forget();
            return Err(e);
        }
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                work_dir.to_path_buf(),
                Entry {
                    url: h.repo_url.clone(),
                    credential,
                    base_commit: h.base_commit.clone(),
                    branch,
                },
            );
        let top: std::collections::BTreeSet<String> = std::fs::read_dir(work_dir)
            .map_err(|e| TransportError::io("work directory", e))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let names: Vec<&str> = resources.iter().map(|r| r.as_str()).collect();
        Ok(crate::archive::detect_layout(&top, &names))
    }
}

/// Writes `text` (an SSH private key, a `known_hosts` line) to `path`, mode 0600 from its
/// creation, ending in one newline.
fn write_private(path: &Path, text: &str) -> Result<(), TransportError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| TransportError::io("git key file", e))?;
    let mut text = text.trim_end().to_owned();
    text.push('\n');
    f.write_all(text.as_bytes())
        .map_err(|e| TransportError::io("git key file", e))
}

impl ExecutorTransport for GitExecutor {
    fn kind(&self) -> TransportKind {
        TransportKind::Git
    }

    fn check_dependency(&self) -> Result<(), DependencyMissing> {
        self.git
            .version()
            .map(|_| ())
            .map_err(|e| DependencyMissing {
                hint: format!("git is not usable ({e}): install git 2.31 or later on PATH"),
            })
    }

    fn setup(
        &self,
        _req: SetupRequest<'_>,
        _cancel: &CancelFlag,
    ) -> Result<SetupReport, TransportError> {
        Err(TransportError::Unsupported(
            "git sets up from its handle: use setup_git".into(),
        ))
    }

    fn capture(
        &self,
        _work_dir: &Path,
        _kind: SnapshotKind,
        _delivery: &Delivery,
        _cancel: &CancelFlag,
    ) -> Result<CapturedSnapshot, TransportError> {
        Err(TransportError::Unsupported(
            "git pushes its result: use push".into(),
        ))
    }

    fn release(&self, work_dir: &Path) -> Result<(), TransportError> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(work_dir);
        let (git_dir, key_file, known_hosts) = self.paths(work_dir);
        let _ = std::fs::remove_file(&key_file);
        let _ = std::fs::remove_file(&known_hosts);
        match std::fs::remove_dir_all(&git_dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(TransportError::io("removing the git repository", e))
            }
            _ => Ok(()),
        }
    }

    fn recover(&self, _work_root: &Path) {
        // A restarted executor resumes no task: every repository and key file goes.
        if let Ok(rd) = std::fs::read_dir(&self.root) {
            for e in rd.flatten() {
                tracing::info!(path = %e.path().display(), "removing a stale git checkout");
                let p = e.path();
                let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
            }
        }
    }
}
