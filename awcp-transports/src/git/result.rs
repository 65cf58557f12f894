//! The delegator's reading of an executor's branch: fetched into the delegation's bare
//! repository with every object checked (`transfer.fsckObjects`: no `.git` or `..` path, no
//! malformed tree), checked to descend from the base commit, then turned into a **delta
//! snapshot ZIP** (the files the executor added or changed, `.awcp/delta.json` listing what
//! it deleted). That ZIP goes through the archive transport's apply: the hardened extractor,
//! the baseline's three-way check of every path, the journal that makes the apply
//! all-or-nothing across a crash, `staged` and `discard`.
//!
//! Local edits made since the delegation started are merged, not only detected: a file the
//! executor modified that was also edited locally is merged line by line against the base
//! commit's version (`git merge-file`) when the ZIP is built. A clean merge goes
//! into the ZIP in place of the executor's version, and `.awcp/delta.json` records the
//! SHA-256 of the local version it merged (`merged`, ours and delegator-local: this ZIP never
//! leaves the delegator); the apply writes it if the local file is still that version. Edits
//! that overlap (or a binary file, or a file edited locally in any other way: deleted,
//! replaced by a link) are a conflict: nothing is written, and the branch stays for review.
//!
//! Refused before anything is written, as the archive transport refuses them: a submodule
//! (gitlink), a path with a `.git` component, a path the extractor refuses, a file or a total
//! over the limits. Symbolic links are written into the ZIP as links, which the extractor
//! drops and reports, as it does an archive's.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::Stdio;

use zip::write::SimpleFileOptions;

use super::{spawn_reader, with_credential, Config, Credential, Git};
use crate::archive::{validate_name, DeltaInfo, ExtractLimits, DELTA_ENTRY};
use crate::error::TransportError;

mod merge;

pub use merge::LocalWorkspace;
use merge::{merge_local, Merges};

/// Fetches `branch` of `url` into `into_ref` of the bare repository `repo`, every received
/// object checked; the fetched commit's id.
pub fn fetch_branch(
    git: &Git,
    config: Config,
    repo: &Path,
    url: &str,
    branch: &str,
    into_ref: &str,
    cred: &Credential,
) -> Result<String, TransportError> {
    if !super::is_branch_name(branch) {
        return Err(TransportError::rejected(branch, "not a branch name"));
    }
    let mut cmd = git.in_repo(config, repo, None);
    with_credential(&mut cmd, cred);
    cmd.args([
        "-c",
        "transfer.fsckObjects=true",
        "-c",
        "fetch.fsckObjects=true",
    ])
    .args([
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--",
    ])
    .arg(url)
    .arg(format!("+refs/heads/{branch}:{into_ref}"));
    git.run(&mut cmd, None)?;
    commit_of(git, repo, into_ref)
}

/// The commit `rev` names in `repo`.
pub fn commit_of(git: &Git, repo: &Path, rev: &str) -> Result<String, TransportError> {
    git.line(
        git.in_repo(Config::Isolated, repo, None)
            .args(["rev-parse", "--verify", "--quiet", "--end-of-options"])
            .arg(format!("{rev}^{{commit}}")),
    )
    .map_err(|_| TransportError::rejected(rev, "no such commit"))
}

/// Whether `ancestor` is `descendant` or one of its ancestors.
pub fn descends_from(
    git: &Git,
    repo: &Path,
    descendant: &str,
    ancestor: &str,
) -> Result<bool, TransportError> {
    let status = git
        .in_repo(Config::Isolated, repo, None)
        .args(["merge-base", "--is-ancestor", ancestor, descendant])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| TransportError::io("running git merge-base", e))?;
    match status.code() {
        Some(0) => Ok(true),
        Some(1) => Ok(false),
        _ => Err(TransportError::Git(
            "git merge-base failed (a commit is missing)".into(),
        )),
    }
}

/// What a result branch changed, as written into the delta ZIP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GitDelta {
    /// Files added or changed (paths in the tree).
    pub changed: Vec<String>,
    /// Files deleted.
    pub deleted: Vec<String>,
    /// Symbolic links added or changed (in the ZIP as links: the extractor drops them).
    pub links: Vec<String>,
    /// Bytes of the changed files (as written: merged ones at their merged size).
    pub total_bytes: u64,
    /// Files of [`Self::changed`] that were also edited locally, written merged with the local
    /// version (see the [module docs](self)).
    pub merged: Vec<String>,
}

/// One line of `git diff-tree --raw -z`.
struct Change {
    old_mode: u32,
    new_mode: u32,
    old_id: String,
    new_id: String,
    status: u8,
    path: String,
}

/// Writes the delta from `base` to `result` (commits of `repo`) as a snapshot ZIP at `out`
/// (see the [module docs](self)), the files also edited in `local` since merged where their
/// edits do not overlap; what it holds. Nothing is written to `out` if the result is refused.
pub fn delta_zip(
    git: &Git,
    repo: &Path,
    base: &str,
    result: &str,
    out: &Path,
    limits: &ExtractLimits,
    local: &LocalWorkspace,
) -> Result<GitDelta, TransportError> {
    if !super::is_object_id(base) || !super::is_object_id(result) {
        return Err(TransportError::rejected(result, "not an object id"));
    }
    let raw = git.run(
        git.in_repo(Config::Isolated, repo, None)
            .args([
                "diff-tree",
                "-r",
                "-z",
                "--raw",
                "--no-renames",
                "--no-abbrev",
            ])
            .args([base, result]),
        None,
    )?;
    let changes = parse_raw(&raw)?;
    let mut delta = GitDelta::default();
    let mut wanted = Vec::new();
    for c in changes {
        validate_name(&c.path).map_err(|why| TransportError::rejected(&c.path, why))?;
        if c.path
            .split('/')
            .any(|p| p.eq_ignore_ascii_case(".git") || p.eq_ignore_ascii_case(".gitmodules"))
        {
            return Err(TransportError::rejected(
                &c.path,
                "git's own files are never part of a result",
            ));
        }
        if c.status == b'D' {
            delta.deleted.push(c.path);
            continue;
        }
        match c.new_mode {
            0o160000 => {
                return Err(TransportError::rejected(
                    &c.path,
                    "a submodule (a commit of another repository) is not a file",
                ))
            }
            0o120000 => delta.links.push(c.path.clone()),
            0o100644 | 0o100755 => delta.changed.push(c.path.clone()),
            other => {
                return Err(TransportError::rejected(
                    &c.path,
                    format!("unsupported git mode {other:o}"),
                ))
            }
        }
        wanted.push(c);
    }
    if wanted.len() + 1 > limits.max_entries {
        return Err(TransportError::BadArchive(format!(
            "{} changed entries, more than the limit of {}",
            wanted.len(),
            limits.max_entries
        )));
    }
    let merges = merge_local(git, repo, &wanted, local, limits);
    delta.merged = merges.files.keys().cloned().collect();
    let part = out.with_extension("zip.part");
    let written = write_zip(git, repo, &wanted, &delta, &merges, &part, limits);
    drop(merges);
    match written {
        Ok(total) => {
            delta.total_bytes = total;
            std::fs::rename(&part, out).map_err(|e| TransportError::io("delta ZIP", e))?;
            Ok(delta)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&part);
            Err(e)
        }
    }
}

/// The ZIP of `wanted`'s blobs (read through one `git cat-file --batch`; the merged file
/// instead for those in `merges`) and the delta entry; the file bytes written.
fn write_zip(
    git: &Git,
    repo: &Path,
    wanted: &[Change],
    delta: &GitDelta,
    merges: &Merges,
    part: &Path,
    limits: &ExtractLimits,
) -> Result<u64, TransportError> {
    let file = std::fs::File::create(part).map_err(|e| TransportError::io("delta ZIP", e))?;
    let mut zip = zip::ZipWriter::new(std::io::BufWriter::with_capacity(256 * 1024, file));
    let io = |e: std::io::Error| TransportError::io("writing the delta ZIP", e);
    let zerr = |e: zip::result::ZipError| TransportError::BadArchive(e.to_string());
    let mut cmd = git.in_repo(Config::Isolated, repo, None);
    cmd.args(["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| TransportError::io("running git cat-file", e))?;
    let err = child.stderr.take().map(spawn_reader);
    let mut input = child.stdin.take().expect("piped");
    let mut output = BufReader::with_capacity(256 * 1024, child.stdout.take().expect("piped"));
    let mut total = 0u64;
    let result = (|| {
        for c in wanted {
            writeln!(input, "{}", c.new_id).map_err(io)?;
            input.flush().map_err(io)?;
            let mut header = String::new();
            output.read_line(&mut header).map_err(io)?;
            let size: u64 = header
                .trim_end()
                .strip_prefix(&format!("{} blob ", c.new_id))
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| TransportError::rejected(&c.path, "not a blob"))?;
            if size > limits.max_file_bytes {
                return Err(TransportError::rejected(
                    &c.path,
                    format!("{size} bytes, over the limit of {}", limits.max_file_bytes),
                ));
            }
            let merged = merges.files.get(&c.path);
            total += merged.map_or(size, |m| m.size);
            if total > limits.max_total_bytes {
                return Err(TransportError::BadArchive(format!(
                    "the result's changed files exceed {} bytes",
                    limits.max_total_bytes
                )));
            }
            let mut body = (&mut output).take(size);
            if let Some(m) = merged {
                let opts = SimpleFileOptions::default()
                    .compression_method(zip::CompressionMethod::Stored)
                    .unix_permissions(if m.mode == 0o100755 { 0o755 } else { 0o644 })
                    .large_file(m.size >= u32::MAX as u64);
                zip.start_file(c.path.as_str(), opts).map_err(zerr)?;
                let mut f = std::fs::File::open(&m.file).map_err(io)?.take(m.size);
                let n = std::io::copy(&mut f, &mut zip).map_err(io)?;
                let skipped = std::io::copy(&mut body, &mut std::io::sink()).map_err(io)?;
                if n != m.size || skipped != size {
                    return Err(TransportError::BadArchive(
                        "git cat-file or a merged file ended early".into(),
                    ));
                }
            } else if c.new_mode == 0o120000 {
                let mut target = String::new();
                body.read_to_string(&mut target).map_err(io)?;
                zip.add_symlink(c.path.as_str(), target, SimpleFileOptions::default())
                    .map_err(zerr)?;
            } else {
                let mode = if c.new_mode == 0o100755 { 0o755 } else { 0o644 };
                let opts = SimpleFileOptions::default()
                    .compression_method(zip::CompressionMethod::Stored)
                    .unix_permissions(mode)
                    .large_file(size >= u32::MAX as u64);
                zip.start_file(c.path.as_str(), opts).map_err(zerr)?;
                let n = std::io::copy(&mut body, &mut zip).map_err(io)?;
                if n != size {
                    return Err(TransportError::BadArchive(
                        "git cat-file ended early".into(),
                    ));
                }
            }
            let mut nl = [0u8; 1];
            output.read_exact(&mut nl).map_err(io)?;
        }
        let info = DeltaInfo {
            version: 1,
            deleted: delta.deleted.clone(),
            merged: merges
                .files
                .iter()
                .map(|(p, m)| (p.clone(), m.local_sha256.clone()))
                .collect(),
        };
        let json = serde_json::to_vec(&info).map_err(|e| io(e.into()))?;
        zip.start_file(DELTA_ENTRY, SimpleFileOptions::default())
            .map_err(zerr)?;
        zip.write_all(&json).map_err(io)?;
        let w = zip.finish().map_err(zerr)?;
        let f = w.into_inner().map_err(|e| io(e.into_error()))?;
        f.sync_all().map_err(io)?;
        Ok(total)
    })();
    drop(input);
    let _ = child.wait();
    let _ = err.map(|h| h.join());
    result
}

/// `diff-tree --raw -z` output: `:<old mode> <new mode> <old id> <new id> <status>\0<path>\0`.
fn parse_raw(raw: &[u8]) -> Result<Vec<Change>, TransportError> {
    let bad = || TransportError::BadArchive("unreadable git diff-tree output".into());
    let mut out = Vec::new();
    let mut fields = raw.split(|b| *b == 0).filter(|f| !f.is_empty());
    while let Some(meta) = fields.next() {
        let meta = std::str::from_utf8(meta).map_err(|_| bad())?;
        let path = fields.next().ok_or_else(bad)?;
        let path = String::from_utf8(path.to_vec())
            .map_err(|_| TransportError::rejected("(a path)", "not UTF-8"))?;
        let parts: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
        let [old_mode, new_mode, old_id, new_id, status] = parts[..] else {
            return Err(bad());
        };
        out.push(Change {
            old_mode: u32::from_str_radix(old_mode, 8).map_err(|_| bad())?,
            new_mode: u32::from_str_radix(new_mode, 8).map_err(|_| bad())?,
            old_id: old_id.to_owned(),
            new_id: new_id.to_owned(),
            status: *status.as_bytes().first().ok_or_else(bad)?,
            path,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_lines() {
        let z = "0".repeat(40);
        let a = "a".repeat(40);
        let raw = format!(
            ":000000 100644 {z} {a} A\0new.txt\0:100644 000000 {a} {z} D\0gone.txt\0:160000 160000 {a} {a} M\0sub\0"
        );
        let c = parse_raw(raw.as_bytes()).unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(
            (c[0].status, c[0].new_mode, c[0].path.as_str()),
            (b'A', 0o100644, "new.txt")
        );
        assert_eq!(c[1].status, b'D');
        assert_eq!(c[2].new_mode, 0o160000);
        assert!(parse_raw(b":bad\0").is_err());
    }
}
