//! The delegator's base commit: the workspace archive the archive transport packed (same
//! files, same rules), written as one commit by `git fast-import` into a bare repository of
//! the delegation's own. When the workspace is a git repository, the commit's parent is its
//! `HEAD`, reached through `objects/info/alternates` (the user's repository is only read):
//! the branch then shows `HEAD`, then "HEAD plus the uncommitted changes", then the
//! executor's work.

use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::{spawn_reader, Config, Git, Identity};
use crate::error::TransportError;

/// Creates the bare repository `repo` (its parents too). Idempotent.
pub fn init_bare(git: &Git, repo: &Path) -> Result<(), TransportError> {
    if let Some(p) = repo.parent() {
        std::fs::create_dir_all(p).map_err(|e| TransportError::io("git repository dir", e))?;
    }
    git.run(
        git.command(Config::Isolated)
            .args(["init", "--quiet", "--bare"])
            .arg(repo),
        None,
    )?;
    // Nothing may run in it: no sample hooks either.
    let _ = std::fs::remove_dir_all(repo.join("hooks"));
    Ok(())
}

/// The work tree root of the git repository `dir` is the top of, and its `HEAD` commit, if
/// `dir` is the top of a work tree with at least one commit; its object directory (for
/// alternates) with it. `None` for anything else (not a repository, a subdirectory of one,
/// a repository without commits).
pub fn repository_head(git: &Git, dir: &Path) -> Option<(String, PathBuf)> {
    // The user's repository is only read: no optional locks, no hooks, no fsmonitor (see
    // `Git::command`).
    let mut cmd = git.command(Config::Isolated);
    cmd.current_dir(dir)
        .args(["rev-parse", "--show-toplevel", "--git-common-dir"]);
    let out = git.run(&mut cmd, None).ok()?;
    let text = String::from_utf8(out).ok()?;
    let mut lines = text.lines();
    let top = PathBuf::from(lines.next()?);
    let common = PathBuf::from(lines.next()?);
    let mut cmd = git.command(Config::Isolated);
    cmd.current_dir(dir)
        .args(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"]);
    let head = git.line(&mut cmd).ok()?;
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(&top, dir) || !super::is_object_id(&head) {
        return None;
    }
    let common = if common.is_absolute() {
        common
    } else {
        dir.join(common)
    };
    let objects = common.join("objects").canonicalize().ok()?;
    Some((head, objects))
}

/// Lets `repo` read the objects of `objects` (another repository's object directory).
pub fn add_alternate(repo: &Path, objects: &Path) -> Result<(), TransportError> {
    let info = repo.join("objects").join("info");
    std::fs::create_dir_all(&info).map_err(|e| TransportError::io("git alternates", e))?;
    std::fs::write(
        info.join("alternates"),
        format!("{}\n", objects.to_string_lossy()),
    )
    .map_err(|e| TransportError::io("git alternates", e))
}

/// What a base commit was written from.
#[derive(Debug)]
pub struct BaseCommit<'a> {
    /// The bare repository (see [`init_bare`]).
    pub repo: &'a Path,
    /// The workspace ZIP (as the archive transport packed it).
    pub zip: &'a Path,
    /// The full ref to create (`refs/heads/awcp/<id>`); it must not exist.
    pub branch_ref: &'a str,
    /// The parent commit, if any (the workspace repository's `HEAD`).
    pub parent: Option<&'a str>,
    /// The commit message.
    pub message: &'a str,
    /// Author and committer.
    pub identity: &'a Identity,
    /// The commit time (Unix seconds).
    pub time: u64,
}

/// Writes `b.zip`'s files as one commit on `b.branch_ref` (its whole tree, the parent's
/// replaced), streamed through `git fast-import`; the commit's id. Directories (git keeps
/// none), entries under `.awcp/` and names that are not plain relative paths are left out.
pub fn commit_zip(git: &Git, b: &BaseCommit<'_>) -> Result<String, TransportError> {
    let file = std::fs::File::open(b.zip).map_err(|e| TransportError::io("workspace ZIP", e))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| TransportError::BadArchive(e.to_string()))?;
    let mut cmd = git.in_repo(Config::Isolated, b.repo, None);
    cmd.args(["fast-import", "--quiet", "--done", "--date-format=raw"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| TransportError::io("running git fast-import", e))?;
    let err = child.stderr.take().map(spawn_reader);
    let stdin = child.stdin.take().expect("piped");
    let written = (|| -> std::io::Result<()> {
        let mut w = BufWriter::with_capacity(256 * 1024, stdin);
        let who = format!(
            "{} <{}> {} +0000",
            b.identity.name, b.identity.email, b.time
        );
        write!(
            w,
            "commit {}\nauthor {who}\ncommitter {who}\n",
            b.branch_ref
        )?;
        data(&mut w, b.message.as_bytes())?;
        if let Some(p) = b.parent {
            writeln!(w, "from {p}")?;
        }
        w.write_all(b"deleteall\n")?;
        for i in 0..zip.len() {
            let mut e = zip.by_index(i).map_err(std::io::Error::other)?;
            let name = e.name().to_owned();
            if e.is_dir() || !plain_path(&name) || name.starts_with(".awcp/") {
                continue;
            }
            let mode = e.unix_mode().unwrap_or(0o644);
            let git_mode = match mode & 0o170000 {
                0o120000 => "120000",
                _ if mode & 0o111 != 0 => "100755",
                _ => "100644",
            };
            writeln!(w, "M {git_mode} inline {}", quote_path(&name))?;
            let size = e.size();
            writeln!(w, "data {size}")?;
            let n = std::io::copy(&mut (&mut e).take(size), &mut w)?;
            if n != size {
                return Err(std::io::Error::other("a ZIP entry ended early"));
            }
            w.write_all(b"\n")?;
        }
        w.write_all(b"\ndone\n")?;
        w.flush()
    })();
    let status = child
        .wait()
        .map_err(|e| TransportError::io("waiting for git fast-import", e))?;
    let stderr = err
        .map(|h| h.join().unwrap_or_default())
        .unwrap_or_default();
    if !status.success() {
        return Err(super::failed("git fast-import", &stderr));
    }
    written.map_err(|e| TransportError::io("writing the base commit", e))?;
    git.line(
        git.in_repo(Config::Isolated, b.repo, None)
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("{}^{{commit}}", b.branch_ref)),
    )
}

/// `data <n>\n<bytes>\n` of fast-import.
fn data(w: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    writeln!(w, "data {}", bytes.len())?;
    w.write_all(bytes)?;
    w.write_all(b"\n")
}

/// A relative `/`-separated path without empty, `.`, `..` or `.git` components.
fn plain_path(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('/')
        && name
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && !c.eq_ignore_ascii_case(".git"))
}

/// A path as fast-import reads it: C-style quoted (so any byte but NUL is safe).
fn quote_path(name: &str) -> String {
    let mut q = String::with_capacity(name.len() + 2);
    q.push('"');
    for b in name.bytes() {
        match b {
            b'"' => q.push_str("\\\""),
            b'\\' => q.push_str("\\\\"),
            b'\n' => q.push_str("\\n"),
            0x20..=0x7e => q.push(b as char),
            _ => q.push_str(&format!("\\{b:03o}")),
        }
    }
    q.push('"');
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote_path("a b/c\"d"), "\"a b/c\\\"d\"");
        assert_eq!(quote_path("é"), "\"\\303\\251\"");
        assert_eq!(quote_path("x\ny"), "\"x\\ny\"");
    }

    #[test]
    fn plain_paths() {
        assert!(plain_path("a/b.txt"));
        for bad in ["", "/a", "a//b", "./a", "a/../b", ".git/config", "x/.GIT/y"] {
            assert!(!plain_path(bad), "{bad}");
        }
    }
}
