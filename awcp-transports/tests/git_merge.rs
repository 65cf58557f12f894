//! Local edits merged into a git result against the real `git` binary: the delta ZIP holds
//! the executor's change merged with a local edit on other lines and records the local version
//! it merged; overlapping edits, binary files and local files that are not plain files are
//! left to the apply's conflict check; the apply writes a merged file only while the local
//! file is the version merged, and only for a delta the delegator built itself.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use awcp_proto::{AccessMode, DelegationId, ResourceName};
use awcp_transports::archive::transport::ArchiveDelegatorConfig;
use awcp_transports::archive::{DeltaInfo, ExtractLimits, DELTA_ENTRY};
use awcp_transports::git::result::{self, LocalWorkspace};
use awcp_transports::git::{base, Git, Identity};
use awcp_transports::manifest::sha256_hex;
use awcp_transports::snapshot::{preview_snapshot, PreviewLimits, MERGED_NOTE};
use awcp_transports::*;

/// Ten numbered lines, `line N`.
fn lines() -> String {
    (1..=10).map(|i| format!("line {i}\n")).collect()
}

/// [`lines`] with line `n` replaced by `with`.
fn with_line(text: &str, n: usize, with: &str) -> String {
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            if i + 1 == n {
                format!("{with}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect()
}

/// `git` in `repo` (index `idx`, if any) with no user configuration; its trimmed output.
fn git_in(repo: &Path, idx: Option<&Path>, args: &[&str], stdin: Option<&[u8]>) -> String {
    let mut cmd = Command::new("git");
    cmd.current_dir(repo)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(i) = idx {
        cmd.env("GIT_INDEX_FILE", i);
    }
    let mut c = cmd.spawn().unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(stdin.unwrap_or_default())
        .unwrap();
    let out = c.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The executor's commit on top of `parent`: `files` written (path, content).
fn commit_on(repo: &Path, parent: &str, files: &[(&str, &[u8])]) -> String {
    let idx = repo.join("test-index");
    let _ = fs::remove_file(&idx);
    git_in(repo, Some(&idx), &["read-tree", parent], None);
    for (path, bytes) in files {
        let blob = git_in(repo, None, &["hash-object", "-w", "--stdin"], Some(bytes));
        let info = format!("100644,{blob},{path}");
        git_in(
            repo,
            Some(&idx),
            &["update-index", "--add", "--cacheinfo", &info],
            None,
        );
    }
    let tree = git_in(repo, Some(&idx), &["write-tree"], None);
    let _ = fs::remove_file(&idx);
    git_in(
        repo,
        None,
        &[
            "commit-tree",
            "-p",
            parent,
            "-m",
            "the executor's work",
            &tree,
        ],
        None,
    )
}

/// A workspace lent through the archive transport (its baseline) whose archive became the
/// base commit of a bare repository.
struct Lent {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    repo: PathBuf,
    base: String,
    prepared: Prepared,
    resources: Vec<ResourceSpec>,
    layout: Layout,
}

impl Lent {
    /// `files` (path, content) in a workspace `proj`, lent laid out as `layout`.
    fn new(files: &[(&str, &[u8])], layout: Layout) -> Lent {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("proj");
        for (p, b) in files {
            let f = ws.join(p);
            fs::create_dir_all(f.parent().unwrap()).unwrap();
            fs::write(f, b).unwrap();
        }
        let resources = vec![ResourceSpec {
            name: ResourceName::new("proj").unwrap(),
            source_path: ws.clone(),
            mode: AccessMode::Rw,
        }];
        let delegator = ArchiveDelegator::new(ArchiveDelegatorConfig::new(tmp.path().join("x")));
        let prepared = delegator
            .prepare(
                &PrepareRequest {
                    delegation_id: &DelegationId::new("d1").unwrap(),
                    resources: &resources,
                    access_mode: AccessMode::Rw,
                    export: ExportViewKind::Symlink,
                    delivery: Delivery::File(tmp.path().join("archives")),
                    layout,
                    admission: None,
                    allow_sensitive: false,
                },
                &CancelFlag::new(),
            )
            .unwrap();
        let ArchiveOutput::File(zip) = &prepared.archive else {
            panic!("a file archive")
        };
        let git = Git::new();
        let repo = tmp.path().join("d1.git");
        base::init_bare(&git, &repo).unwrap();
        let base = base::commit_zip(
            &git,
            &base::BaseCommit {
                repo: &repo,
                zip: &zip.path,
                branch_ref: "refs/heads/awcp/d1-base",
                parent: None,
                message: "base",
                identity: &Identity::delegator(),
                time: 1_700_000_000,
            },
        )
        .unwrap();
        Lent {
            _tmp: tmp,
            ws,
            repo,
            base,
            prepared,
            resources,
            layout,
        }
    }

    /// `path` in the result (with the resource's name in a per-resource layout).
    fn zip_path(&self, path: &str) -> String {
        match self.layout {
            Layout::Flat => path.to_owned(),
            Layout::PerResource => format!("proj/{path}"),
        }
    }

    /// The executor's commit writing `files`, as a delta ZIP built against the workspace as
    /// it is now.
    fn delta(&self, files: &[(&str, &[u8])]) -> (PathBuf, result::GitDelta) {
        let named: Vec<(String, &[u8])> =
            files.iter().map(|(p, b)| (self.zip_path(p), *b)).collect();
        let named: Vec<(&str, &[u8])> = named.iter().map(|(p, b)| (p.as_str(), *b)).collect();
        let tip = commit_on(&self.repo, &self.base, &named);
        let out = self.repo.parent().unwrap().join("delta.zip");
        let local = LocalWorkspace::new(self.layout, [("proj".to_owned(), self.ws.clone())]);
        let d = result::delta_zip(
            &Git::new(),
            &self.repo,
            &self.base,
            &tip,
            &out,
            &ExtractLimits::default(),
            &local,
        )
        .unwrap();
        let leftovers: Vec<String> = fs::read_dir(&self.repo)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("awcp-merge"))
            .collect();
        assert!(leftovers.is_empty(), "merge files left: {leftovers:?}");
        (out, d)
    }

    fn request<'a>(&'a self, zip: &'a Path, built_here: bool) -> ApplyRequest<'a> {
        ApplyRequest {
            delegation_id: "d1",
            source: ArchiveSource::File(zip),
            expected_checksum: None,
            resources: &self.resources,
            access_mode: AccessMode::Rw,
            baseline: Some(&self.prepared.baseline),
            layout: Some(self.layout),
            limits: None,
            keep_proof: false,
            built_here,
        }
    }

    fn read(&self, path: &str) -> String {
        fs::read_to_string(self.ws.join(path)).unwrap()
    }
}

/// An entry of the ZIP at `zip`.
fn entry(zip: &Path, name: &str) -> Vec<u8> {
    let mut z = zip::ZipArchive::new(fs::File::open(zip).unwrap()).unwrap();
    let mut v = Vec::new();
    z.by_name(name).unwrap().read_to_end(&mut v).unwrap();
    v
}

fn delta_info(zip: &Path) -> DeltaInfo {
    serde_json::from_slice(&entry(zip, DELTA_ENTRY)).unwrap()
}

#[test]
fn edits_on_other_lines_are_merged_and_the_local_version_recorded() {
    for layout in [Layout::Flat, Layout::PerResource] {
        let base = lines();
        let lent = Lent::new(
            &[("notes.txt", base.as_bytes()), ("other.txt", b"o\n")],
            layout,
        );
        let local = with_line(&base, 5, "line 5, edited here");
        fs::write(lent.ws.join("notes.txt"), &local).unwrap();
        let theirs = with_line(&base, 1, "line 1, by the executor");
        let (zip, d) = lent.delta(&[("notes.txt", theirs.as_bytes()), ("other.txt", b"O\n")]);
        let name = lent.zip_path("notes.txt");
        assert_eq!(d.merged, vec![name.clone()], "{layout:?}");
        let merged = with_line(&local, 1, "line 1, by the executor");
        assert_eq!(entry(&zip, &name), merged.as_bytes(), "{layout:?}");
        // Not edited locally: the executor's version as it is.
        assert_eq!(entry(&zip, &lent.zip_path("other.txt")), b"O\n");
        let info = delta_info(&zip);
        assert_eq!(info.version, 1);
        assert_eq!(info.merged.len(), 1);
        assert_eq!(
            info.merged[&name],
            sha256_hex(local.as_bytes()),
            "{layout:?}"
        );
        assert_eq!(d.total_bytes, (merged.len() + 2) as u64);
    }
}

#[test]
fn overlapping_edits_binary_files_and_links_are_not_merged() {
    let base = lines();
    let bin: Vec<u8> = [b"\0bin\n".as_slice(), base.as_bytes()].concat();
    let lent = Lent::new(
        &[
            ("same.txt", base.as_bytes()),
            ("data.bin", &bin),
            ("linked.txt", base.as_bytes()),
            ("untouched.txt", base.as_bytes()),
        ],
        Layout::Flat,
    );
    // The same line edited on both sides.
    fs::write(
        lent.ws.join("same.txt"),
        with_line(&base, 3, "line 3, mine"),
    )
    .unwrap();
    // A binary file edited on other lines on both sides.
    let bin_local: Vec<u8> = [b"\0bin\n".as_slice(), with_line(&base, 9, "x").as_bytes()].concat();
    fs::write(lent.ws.join("data.bin"), &bin_local).unwrap();
    // A file replaced locally by a link to a file edited on other lines.
    let elsewhere = lent.ws.parent().unwrap().join("elsewhere.txt");
    fs::write(&elsewhere, with_line(&base, 9, "line 9, elsewhere")).unwrap();
    fs::remove_file(lent.ws.join("linked.txt")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, lent.ws.join("linked.txt")).unwrap();
    let theirs = with_line(&base, 3, "line 3, theirs");
    let bin_theirs: Vec<u8> = [b"\0bin\n".as_slice(), theirs.as_bytes()].concat();
    let (zip, d) = lent.delta(&[
        ("same.txt", theirs.as_bytes()),
        ("data.bin", &bin_theirs),
        ("linked.txt", theirs.as_bytes()),
        ("untouched.txt", theirs.as_bytes()),
    ]);
    assert!(d.merged.is_empty(), "{:?}", d.merged);
    for f in ["same.txt", "linked.txt", "untouched.txt"] {
        assert_eq!(
            entry(&zip, f),
            theirs.as_bytes(),
            "{f}: the executor's version"
        );
    }
    assert_eq!(entry(&zip, "data.bin"), bin_theirs);
    let raw = String::from_utf8(entry(&zip, DELTA_ENTRY)).unwrap();
    assert!(!raw.contains("merged"), "no merged record: {raw}");
    // The apply: the overlapping edit, the binary and the link are conflicts as before.
    let e = apply_snapshot(
        lent.request(&zip, true),
        &ApplyOptions::default(),
        &CancelFlag::new(),
    )
    .unwrap_err();
    let TransportError::Conflict { paths } = e else {
        panic!("{e}")
    };
    assert_eq!(
        paths,
        vec!["proj/data.bin", "proj/linked.txt", "proj/same.txt"]
    );
    assert_eq!(lent.read("untouched.txt"), base, "nothing written");
}

#[test]
fn a_merged_file_applies_while_its_local_version_is_the_one_merged() {
    let base = lines();
    let lent = Lent::new(
        &[("notes.txt", base.as_bytes()), ("other.txt", b"o\n")],
        Layout::Flat,
    );
    let local = with_line(&base, 10, "line 10, mine");
    fs::write(lent.ws.join("notes.txt"), &local).unwrap();
    let theirs = with_line(&base, 2, "line 2, theirs");
    let (zip, _) = lent.delta(&[("notes.txt", theirs.as_bytes()), ("other.txt", b"O\n")]);
    let merged = with_line(&local, 2, "line 2, theirs");

    // What `awcp diff` shows: the executor's line added to the local version, and why.
    let p = preview_snapshot(
        lent.request(&zip, true),
        &ApplyOptions::default(),
        PreviewLimits::default(),
        &CancelFlag::new(),
    )
    .unwrap();
    assert!(p.conflicts.is_empty(), "{:?}", p.conflicts);
    assert_eq!(p.merged, vec!["proj/notes.txt"]);
    let notes = p.files.iter().find(|f| f.path == "proj/notes.txt").unwrap();
    assert_eq!(notes.note.as_deref(), Some(MERGED_NOTE));
    let diff = notes.diff.as_deref().unwrap();
    assert!(diff.contains("-line 2\n+line 2, theirs\n"), "{diff}");
    assert!(
        !diff.contains("line 10"),
        "the local edit is no change: {diff}"
    );

    let report = apply_snapshot(
        lent.request(&zip, true),
        &ApplyOptions::default(),
        &CancelFlag::new(),
    )
    .unwrap();
    assert_eq!(report.merged, vec!["proj/notes.txt"]);
    assert_eq!(report.written, vec!["proj/notes.txt", "proj/other.txt"]);
    assert_eq!(lent.read("notes.txt"), merged);
    assert_eq!(lent.read("other.txt"), "O\n");
}

#[test]
fn a_file_edited_again_after_the_merge_is_a_conflict_and_nothing_is_written() {
    let base = lines();
    let lent = Lent::new(
        &[("notes.txt", base.as_bytes()), ("other.txt", b"o\n")],
        Layout::PerResource,
    );
    let local = with_line(&base, 10, "line 10, mine");
    fs::write(lent.ws.join("notes.txt"), &local).unwrap();
    let theirs = with_line(&base, 2, "line 2, theirs");
    let (zip, d) = lent.delta(&[("notes.txt", theirs.as_bytes()), ("other.txt", b"O\n")]);
    assert_eq!(d.merged, vec!["proj/notes.txt"]);

    // An executor's archive does not decide what is merged: the record is ignored unless the
    // delegator built the delta, and the local edit is a conflict.
    let refuse = |built_here| match apply_snapshot(
        lent.request(&zip, built_here),
        &ApplyOptions::default(),
        &CancelFlag::new(),
    ) {
        Err(TransportError::Conflict { paths }) => paths,
        other => panic!("{other:?}"),
    };
    assert_eq!(refuse(false), vec!["proj/notes.txt"]);

    // Edited again after the merge: a conflict, nothing written.
    let again = with_line(&local, 6, "line 6, mine too");
    fs::write(lent.ws.join("notes.txt"), &again).unwrap();
    assert_eq!(refuse(true), vec!["proj/notes.txt"]);
    let p = preview_snapshot(
        lent.request(&zip, true),
        &ApplyOptions::default(),
        PreviewLimits::default(),
        &CancelFlag::new(),
    )
    .unwrap();
    assert_eq!(p.conflicts, vec!["proj/notes.txt"]);
    assert!(p.merged.is_empty());
    assert_eq!(lent.read("notes.txt"), again);
    assert_eq!(lent.read("other.txt"), "o\n");
    // Back to the version merged: it applies.
    fs::write(lent.ws.join("notes.txt"), &local).unwrap();
    let report = apply_snapshot(
        lent.request(&zip, true),
        &ApplyOptions::default(),
        &CancelFlag::new(),
    )
    .unwrap();
    assert_eq!(report.merged, vec!["proj/notes.txt"]);
    assert_eq!(
        lent.read("notes.txt"),
        with_line(&local, 2, "line 2, theirs")
    );
}
