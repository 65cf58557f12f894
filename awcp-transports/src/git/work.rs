//! The executor's side: the base branch fetched shallow into a repository of the executor's
//! own, **outside** the work directory (which then holds the workspace's files and no
//! `.git/`: the task cannot plant hooks or configuration in it), checked out there with
//! symbolic links as plain files; at the end, the work directory committed as a configurable
//! identity and pushed to `awcp/<id>` (never forced).

use std::path::Path;

use super::{with_credential, Config, Credential, Git, Identity};
use crate::error::TransportError;

/// Where the executor's repository of a work directory is, and how it reaches the remote.
#[derive(Clone, Debug)]
pub struct Checkout<'a> {
    /// The executor's repository (created; removed at release by the caller).
    pub git_dir: &'a Path,
    /// The work directory (exists, empty).
    pub work_dir: &'a Path,
    /// The remote (the handle's `repoUrl`).
    pub url: &'a str,
    /// The credential for the remote.
    pub credential: &'a Credential,
}

/// Fetches `base_branch` (depth 1) and checks out `base_commit`, which must be its tip, into
/// the work directory; the local branch is `task_branch`. The URL never reaches git as an
/// option (`--`), and is refused if it looks like one.
pub fn clone_base(
    git: &Git,
    c: &Checkout<'_>,
    base_branch: &str,
    base_commit: &str,
    task_branch: &str,
) -> Result<(), TransportError> {
    for b in [base_branch, task_branch] {
        if !super::is_branch_name(b) {
            return Err(TransportError::rejected(b, "not a branch name"));
        }
    }
    if !super::is_object_id(base_commit) {
        return Err(TransportError::rejected(base_commit, "not a commit id"));
    }
    if c.url.starts_with('-') {
        return Err(TransportError::rejected("repoUrl", "not a URL"));
    }
    super::base::init_bare(git, c.git_dir)?;
    let mut cmd = git.in_repo(Config::Isolated, c.git_dir, None);
    with_credential(&mut cmd, c.credential);
    cmd.args(["-c", "transfer.fsckObjects=true"])
        .args([
            "fetch",
            "--quiet",
            "--depth=1",
            "--no-tags",
            "--no-write-fetch-head",
        ])
        .arg("--")
        .arg(c.url)
        .arg(format!(
            "+refs/heads/{base_branch}:refs/heads/{task_branch}"
        ));
    git.run(&mut cmd, None)
        .map_err(|e| super::hide_url(e, c.url))?;
    let tip = super::result::commit_of(git, c.git_dir, &format!("refs/heads/{task_branch}"))?;
    if tip != base_commit {
        return Err(TransportError::Setup(format!(
            "the base branch {base_branch} is at {tip}, not at the delegation's base commit \
             {base_commit} (it moved since the delegator pushed it)"
        )));
    }
    git.run(
        git.in_repo(Config::Isolated, c.git_dir, None)
            .args(["symbolic-ref", "HEAD"])
            .arg(format!("refs/heads/{task_branch}")),
        None,
    )?;
    // A work tree for this repository from now on (it was created bare).
    git.run(
        git.in_repo(Config::Isolated, c.git_dir, None)
            .args(["config", "core.bare", "false"]),
        None,
    )?;
    git.run(
        work_tree_cmd(git, c)
            .args(["-c", "core.symlinks=false"])
            .args(["checkout", "--quiet", "--force", task_branch]),
        None,
    )?;
    Ok(())
}

/// A command on the checkout's repository and work tree.
fn work_tree_cmd(git: &Git, c: &Checkout<'_>) -> std::process::Command {
    let mut cmd = git.in_repo(Config::Isolated, c.git_dir, Some(c.work_dir));
    // Symbolic links stay plain files both ways: what was checked out as one is committed
    // back as one.
    cmd.args(["-c", "core.symlinks=false"]);
    cmd
}

/// What the executor reports of its pushed work (the snapshot text of WIRE.md §11.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// The branch pushed.
    pub branch: String,
    /// Its tip.
    pub commit: String,
    /// The base commit.
    pub base_commit: String,
    /// Paths that differ between the two.
    pub changed_files: Vec<String>,
}

/// Commits everything in the work directory (its `.gitignore` files honoured) as `who` when
/// anything changed, and pushes the branch to `task_branch` of the remote (a fast-forward of
/// the base: never forced).
pub fn commit_and_push(
    git: &Git,
    c: &Checkout<'_>,
    task_branch: &str,
    base_commit: &str,
    message: &str,
    who: &Identity,
) -> Result<Pushed, TransportError> {
    git.run(
        work_tree_cmd(git, c).args(["add", "--all", "--", "."]),
        None,
    )?;
    let status = work_tree_cmd(git, c)
        .args(["diff", "--cached", "--quiet"])
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| TransportError::io("running git diff", e))?;
    if !status.success() {
        let mut cmd = work_tree_cmd(git, c);
        who.env(&mut cmd);
        cmd.args([
            "commit",
            "--quiet",
            "--no-verify",
            "--allow-empty-message",
            "-F",
            "-",
        ]);
        git.run(&mut cmd, Some(message.as_bytes()))?;
    }
    let commit = super::result::commit_of(git, c.git_dir, "HEAD")?;
    let mut cmd = git.in_repo(Config::Isolated, c.git_dir, None);
    with_credential(&mut cmd, c.credential);
    cmd.args(["push", "--quiet", "--no-verify", "--"])
        .arg(c.url)
        .arg(format!("{commit}:refs/heads/{task_branch}"));
    git.run(&mut cmd, None)
        .map_err(|e| super::hide_url(e, c.url))?;
    let names = git.run(
        git.in_repo(Config::Isolated, c.git_dir, None)
            .args(["diff", "--name-only", "-z", "--no-renames"])
            .args([base_commit, &commit]),
        None,
    )?;
    let changed_files = names
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    Ok(Pushed {
        branch: task_branch.to_owned(),
        commit,
        base_commit: base_commit.to_owned(),
        changed_files,
    })
}
