//! [`GitDelegator`]: the delegator side of the git transport, over the archive transport.
//!
//! Prepare: the archive transport packs the workspace (its ignore, secret-looking-file and
//! admission rules, and the baseline the apply checks local edits against); [`base`] writes
//! that ZIP as the base commit on `awcp/<id>-base` of the delegation's bare repository
//! (`<root>/<id>.git`, with `refs/awcp/base` pointing at it); with a remote, that branch
//! alone is pushed there, never forced, never another ref. Without one, the driver serves the
//! repository itself ([`super::serve`]).
//!
//! Result: the executor's branch, read from the repository (pushed into it) or fetched from
//! the remote, must be at the commit the executor named and descend from the base; its
//! change becomes a delta snapshot ZIP ([`super::result`]) for the archive transport's apply,
//! with the local edits made since merged into the files the executor also modified where
//! the two do not overlap.
//!
//! Release: the repository goes; on the remote the base branch, and the result's branch
//! `awcp/<id>` when the caller says the results are settled (applied or discarded; a result
//! that was not applied keeps its branch for review).

use std::path::{Path, PathBuf};

use awcp_proto::wire::{GitAuth, GitResult};

use super::result::{commit_of, delta_zip, descends_from, fetch_branch, GitDelta, LocalWorkspace};
use super::{base, base_branch, delegation_branch, Config, Credential, Git, Identity};
use crate::archive::ExtractLimits;
use crate::error::TransportError;

/// The delegator's git settings.
#[derive(Clone, Debug)]
pub struct GitDelegatorConfig {
    /// Where the delegations' bare repositories are (`<state>/git`).
    pub root: PathBuf,
    /// The remote the delegation branches are pushed to (the user's credentials and git
    /// configuration apply); `None`: the delegator serves the repository itself.
    pub remote: Option<String>,
    /// The credential executors get in the handle for that remote: a token (`{type:
    /// "token"}`), or an SSH key and the host key to pin (`{type: "ssh", privateKey,
    /// hostKey}`); `None`: the handle carries none (the remote needs none, or executors have
    /// their own). Unused for a served repository (its URL is the capability).
    pub executor_auth: Option<GitAuth>,
    /// Keep every delegation's branches on the remote at release (`--keep-branch`); by
    /// default the base branch goes, and the result's once its results were applied or
    /// discarded.
    pub keep_branch: bool,
}

impl GitDelegatorConfig {
    /// A delegator that serves its repositories itself, kept under `root`.
    pub fn served(root: impl Into<PathBuf>) -> GitDelegatorConfig {
        GitDelegatorConfig {
            root: root.into(),
            remote: None,
            executor_auth: None,
            keep_branch: false,
        }
    }
}

/// In a delegation's repository: the remote its branches were pushed to.
const REMOTE_FILE: &str = "awcp-remote";

/// Records `remote` in `repo` (mode 0600; a password in the URL is left out: deleting the
/// branch later then takes the user's credential helper, as their pushes do).
fn write_remote(repo: &Path, remote: &str) -> Result<(), TransportError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |e| TransportError::io("recording the remote", e);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(repo.join(REMOTE_FILE))
        .map_err(io)?;
    f.write_all(without_password(remote).as_bytes())
        .map_err(io)?;
    f.sync_all().map_err(io)
}

/// The remote `repo` records, if any.
fn read_remote(repo: &Path) -> Option<String> {
    let text = std::fs::read_to_string(repo.join(REMOTE_FILE)).ok()?;
    let url = text.trim();
    (!url.is_empty()).then(|| url.to_owned())
}

/// `url` without the password of its user information (`scheme://user:pass@host/…` →
/// `scheme://user@host/…`).
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split(':').next().unwrap_or("");
            format!("{scheme}://{user}@{host}{path}")
        }
        None => url.to_owned(),
    }
}

/// The handle's `auth` for an SSH remote: `private_key` (OpenSSH format, not encrypted: an
/// executor's ssh never prompts), and the server's host key (an OpenSSH public key) executors
/// pin; an error, saying which, if either is not one.
pub fn ssh_auth(private_key: &str, host_key: Option<&str>) -> Result<GitAuth, TransportError> {
    let key = ssh_key::PrivateKey::from_openssh(private_key.trim())
        .map_err(|e| TransportError::Unsupported(format!("the SSH key is not one: {e}")))?;
    if key.is_encrypted() {
        return Err(TransportError::Unsupported(
            "the SSH key is encrypted: executors cannot type its passphrase".into(),
        ));
    }
    if let Some(h) = host_key {
        super::known_hosts_line(h)?;
    }
    Ok(GitAuth::Ssh {
        private_key: Some(private_key.trim().to_owned()),
        host_key: host_key.map(|h| h.trim().to_owned()),
    })
}

/// The delegator side of the git transport (see the [module docs](self)).
#[derive(Debug)]
pub struct GitDelegator {
    git: Git,
    config: GitDelegatorConfig,
}

/// A prepared delegation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedBase {
    /// The branch (`awcp/<id>`).
    pub branch: String,
    /// The base commit.
    pub commit: String,
}

/// `refs/awcp/base`: where a delegation's repository keeps its base commit.
const BASE_REF: &str = "refs/awcp/base";

impl GitDelegator {
    /// A delegator side with `config`.
    pub fn new(config: GitDelegatorConfig) -> GitDelegator {
        GitDelegator {
            git: Git::new(),
            config,
        }
    }

    /// Its settings.
    pub fn config(&self) -> &GitDelegatorConfig {
        &self.config
    }

    /// Whether the `git` binary runs.
    pub fn check(&self) -> Result<(), TransportError> {
        self.git.version().map(|_| ())
    }

    /// `<root>/<id>.git`.
    pub fn repository(&self, id: &str) -> PathBuf {
        self.config.root.join(format!("{id}.git"))
    }

    /// Writes the base commit of `id` from the workspace ZIP `zip`; with a remote, pushes
    /// the branch there. `workspace_root`: the one resource's directory, when the workspace
    /// is a single resource laid out at the root (its repository's `HEAD`, if it is the top
    /// of one, becomes the base commit's parent).
    pub fn prepare(
        &self,
        id: &str,
        zip: &Path,
        workspace_root: Option<&Path>,
        now_unix: u64,
    ) -> Result<PreparedBase, TransportError> {
        let repo = self.repository(id);
        let _ = std::fs::remove_dir_all(&repo);
        let r = self.prepare_in(&repo, id, zip, workspace_root, now_unix);
        if r.is_err() {
            let _ = std::fs::remove_dir_all(&repo);
        }
        r
    }

    fn prepare_in(
        &self,
        repo: &Path,
        id: &str,
        zip: &Path,
        workspace_root: Option<&Path>,
        now_unix: u64,
    ) -> Result<PreparedBase, TransportError> {
        base::init_bare(&self.git, repo)?;
        let head = workspace_root.and_then(|w| base::repository_head(&self.git, w));
        if let Some((_, objects)) = &head {
            base::add_alternate(repo, objects)?;
        }
        let branch = base_branch(id);
        let message = match &head {
            Some(_) => format!("AWCP {id}: the workspace as lent (HEAD and uncommitted changes)"),
            None => format!("AWCP {id}: the workspace as lent"),
        };
        let commit = base::commit_zip(
            &self.git,
            &base::BaseCommit {
                repo,
                zip,
                branch_ref: &format!("refs/heads/{branch}"),
                parent: head.as_ref().map(|(h, _)| h.as_str()),
                message: &message,
                identity: &Identity::delegator(),
                time: now_unix,
            },
        )?;
        self.git.run(
            self.git
                .in_repo(Config::Isolated, repo, None)
                .args(["update-ref", BASE_REF, &commit]),
            None,
        )?;
        if let Some(remote) = &self.config.remote {
            if !self.config.keep_branch {
                // Before the push: a repository whose branch may be on the remote names it,
                // so a later release (a result applied in another process, a start-up sweep)
                // deletes that branch there.
                write_remote(repo, remote)?;
            }
            // The branch only, created (a ref of that name already there is an error, never
            // overwritten): `<commit>:refs/heads/awcp/<id>` without `+` or `--force`.
            let mut cmd = self.git.in_repo(Config::User, repo, None);
            cmd.args(["push", "--quiet", "--no-verify", "--"])
                .arg(remote)
                .arg(format!("{commit}:refs/heads/{branch}"));
            self.git.run(&mut cmd, None)?;
        }
        Ok(PreparedBase { branch, commit })
    }

    /// Reads the executor's result `r` of `id` and writes it as a delta snapshot ZIP at
    /// `out` (see the [module docs](self)). `local`: the delegation's workspace as the
    /// result's paths map onto it, whose edits made since the base are merged into the files
    /// the executor also modified ([`super::result`]); [`LocalWorkspace::None`]: none is.
    pub fn result_zip(
        &self,
        id: &str,
        r: &GitResult,
        out: &Path,
        limits: &ExtractLimits,
        local: &LocalWorkspace,
    ) -> Result<GitDelta, TransportError> {
        let repo = self.repository(id);
        let base = commit_of(&self.git, &repo, BASE_REF)?;
        if r.base_commit != base {
            return Err(TransportError::rejected(
                &r.branch,
                format!("based on {}, not on the delegation's {base}", r.base_commit),
            ));
        }
        let tip = match &self.config.remote {
            Some(remote) => fetch_branch(
                &self.git,
                Config::User,
                &repo,
                remote,
                &r.branch,
                "refs/awcp/result",
                &Credential::None,
            )?,
            None => commit_of(&self.git, &repo, &format!("refs/heads/{}", r.branch))?,
        };
        if tip != r.commit_hash {
            return Err(TransportError::rejected(
                &r.branch,
                format!(
                    "at {tip}, not at the commit the executor named ({})",
                    r.commit_hash
                ),
            ));
        }
        if !descends_from(&self.git, &repo, &tip, &base)? {
            return Err(TransportError::rejected(
                &r.branch,
                "does not descend from the delegation's base commit",
            ));
        }
        delta_zip(&self.git, &repo, &base, &tip, out, limits, local)
    }

    /// Releases `id`'s branches and repository. With a remote (the one its repository names,
    /// else [`GitDelegatorConfig::remote`]) and unless branches are kept
    /// ([`GitDelegatorConfig::keep_branch`]): the remote's base branch `awcp/<id>-base` goes,
    /// and, if `results_settled` (every result applied or discarded), the result branch
    /// `awcp/<id>`: only those refs, and a branch already gone is no error. The repository
    /// goes too, except while a result branch on the remote waits for review (results not
    /// settled): it is kept, naming the remote, until a later release with `results_settled`
    /// deletes the branch (the apply or discard of the last result, or a start-up sweep).
    pub fn release(&self, id: &str, results_settled: bool) -> Result<(), TransportError> {
        let repo = self.repository(id);
        let mut result = Ok(());
        let mut doomed = vec![base_branch(id)];
        if results_settled {
            doomed.push(delegation_branch(id));
        }
        let remote = read_remote(&repo).or_else(|| {
            self.config
                .remote
                .clone()
                .filter(|_| !self.config.keep_branch)
        });
        for branch in doomed.iter().filter(|_| repo.exists()) {
            let Some(remote) = &remote else { break };
            let mut cmd = self.git.in_repo(Config::User, &repo, None);
            cmd.args(["push", "--quiet", "--no-verify", "--"])
                .arg(remote)
                .arg(format!(":refs/heads/{branch}"));
            if let Err(e) = self.git.run(&mut cmd, None) {
                let gone = e.to_string().contains("remote ref does not exist");
                if !gone && result.is_ok() {
                    result = Err(e);
                }
            }
        }
        let awaits_review = remote.is_some() && !results_settled && repo.exists();
        if awaits_review || (result.is_err() && results_settled) {
            // Kept: the branch is deleted by a later release (a failed deletion too).
            return result;
        }
        if let Err(e) = std::fs::remove_dir_all(&repo) {
            if e.kind() != std::io::ErrorKind::NotFound && result.is_ok() {
                result = Err(TransportError::io("removing the git repository", e));
            }
        }
        result
    }

    /// The delegations that have a repository here (start-up: those that are over are
    /// released).
    pub fn repositories(&self) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(&self.config.root) else {
            return Vec::new();
        };
        rd.flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()?
                    .strip_suffix(".git")
                    .map(str::to_owned)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_remote_keeps_no_password() {
        for (url, kept) in [
            ("https://u:secret@h/r.git", "https://u@h/r.git"),
            ("https://h/r.git", "https://h/r.git"),
            ("ssh://git@h:22/r.git", "ssh://git@h:22/r.git"),
            ("git@h:team/r.git", "git@h:team/r.git"),
            ("https://tok:x@h/p@q.git", "https://tok@h/p@q.git"),
        ] {
            assert_eq!(without_password(url), kept, "{url}");
        }
    }
}
