//! Delegator prepare → executor setup → edits → capture → delegator apply, in both layouts and
//! both delivery modes; crash recovery; conflicts; read-only delegations.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use awcp_proto::{AccessMode, DelegationId, ResourceName};
use awcp_transports::archive::transport::{ArchiveDelegatorConfig, ArchiveExecutorConfig};
use awcp_transports::snapshot::{recover, CrashPoint, Recovery};
use awcp_transports::*;
use common::{tree, write};

struct Fixture {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    work: PathBuf,
    out: PathBuf,
    delegator: ArchiveDelegator,
    executor: ArchiveExecutor,
    resources: Vec<ResourceSpec>,
}

fn fixture(access: AccessMode) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("project");
    write(&ws, "README.md", b"# project\n");
    write(&ws, "src/main.rs", b"fn main() {}\n");
    write(&ws, "src/lib.rs", b"pub fn a() {}\n");
    write(&ws, "docs/guide.md", b"guide\n");
    write(&ws, "old.txt", b"to be deleted\n");
    write(&ws, "run.sh", b"#!/bin/sh\necho hi\n");
    fs::set_permissions(ws.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    write(&ws, ".git/HEAD", b"ref: refs/heads/main\n");
    let mut cfg = ArchiveDelegatorConfig::new(tmp.path().join("exports"));
    cfg.apply.walk = cfg.walk.clone();
    Fixture {
        ws: ws.clone(),
        work: tmp.path().join("executor/d1"),
        out: tmp.path().join("out"),
        delegator: ArchiveDelegator::new(cfg),
        executor: ArchiveExecutor::new(ArchiveExecutorConfig::default()),
        resources: vec![ResourceSpec {
            name: ResourceName::new("project").unwrap(),
            source_path: ws,
            mode: access,
        }],
        _tmp: tmp,
    }
}

fn did() -> DelegationId {
    DelegationId::new("d1").unwrap()
}

fn prepare(f: &Fixture, layout: Layout, delivery: Delivery, access: AccessMode) -> Prepared {
    f.delegator
        .prepare(
            &PrepareRequest {
                delegation_id: &did(),
                resources: &f.resources,
                access_mode: access,
                export: ExportViewKind::Symlink,
                delivery,
                layout,
                admission: None,
                allow_sensitive: false,
            },
            &CancelFlag::new(),
        )
        .unwrap()
}

fn setup(f: &Fixture, p: &Prepared, access: AccessMode) -> SetupReport {
    let names = vec![ResourceName::new("project").unwrap()];
    let req = match &p.archive {
        ArchiveOutput::Inline(h) => {
            SetupRequest::from_inline_handle(&f.work, h, access, &names).unwrap()
        }
        ArchiveOutput::File(file) => {
            // URL mode: the executor consumes a byte stream.
            let stream = Box::leak(Box::new(fs::File::open(&file.path).unwrap()));
            SetupRequest {
                work_dir: &f.work,
                source: ArchiveSource::Reader(stream),
                expected_checksum: Some(Box::leak(file.checksum.clone().into_boxed_str())),
                access_mode: access,
                resources: Box::leak(names.into_boxed_slice()),
            }
        }
    };
    f.executor.setup(req, &CancelFlag::new()).unwrap()
}

/// 3 edits (one adds an executable bit), 1 add, 1 delete in the executor's copy.
fn edit(root: &Path) {
    write(root, "README.md", b"# project\nedited\n");
    write(root, "src/main.rs", b"fn main() { println!(\"x\"); }\n");
    write(root, "docs/guide.md", b"guide v2\n");
    write(root, "src/new.rs", b"// new\n");
    fs::set_permissions(root.join("src/new.rs"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::remove_file(root.join("old.txt")).unwrap();
}

fn apply(
    f: &Fixture,
    p: &Prepared,
    snap: &CapturedSnapshot,
    opts: &ApplyOptions,
    access: AccessMode,
) -> Result<ApplyReport, TransportError> {
    with_request(f, p, snap, access, |req| {
        apply_snapshot(req, opts, &CancelFlag::new())
    })
}

/// [`apply`] as the delegator's driver does it: the apply directory stays as the proof of a
/// finished swap until `close_apply`.
fn apply_keeping_proof(
    f: &Fixture,
    p: &Prepared,
    snap: &CapturedSnapshot,
    opts: &ApplyOptions,
) -> Result<ApplyReport, TransportError> {
    with_request(f, p, snap, AccessMode::Rw, |mut req| {
        req.keep_proof = true;
        apply_snapshot(req, opts, &CancelFlag::new())
    })
}

/// A fixture lent `rw`, set up on the executor and edited there (see [`edit`]), with the
/// delta snapshot of the edits.
fn edited() -> (Fixture, Prepared, CapturedSnapshot) {
    let f = fixture(AccessMode::Rw);
    let p = prepare(&f, Layout::PerResource, Delivery::Inline, AccessMode::Rw);
    setup(&f, &p, AccessMode::Rw);
    edit(&f.work.join("project"));
    let snap = capture_inline_delta(&f);
    (f, p, snap)
}

fn parent_of(ws: &Path) -> PathBuf {
    fs::canonicalize(ws)
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf()
}

/// What is beside the workspace under `.awcp-` names, and in each such directory.
fn staging(ws: &Path) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in fs::read_dir(ws.parent().unwrap()).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(".awcp-") {
            for inner in fs::read_dir(e.path()).unwrap().flatten() {
                out.push(format!("{name}/{}", inner.file_name().to_string_lossy()));
            }
        }
    }
    out.sort();
    out
}

/// Runs `go` with the apply request of `snap` (what [`apply`] and a preview take).
fn with_request<T>(
    f: &Fixture,
    p: &Prepared,
    snap: &CapturedSnapshot,
    access: AccessMode,
    go: impl FnOnce(ApplyRequest<'_>) -> T,
) -> T {
    let owned_bytes;
    let source = match &snap.archive {
        ArchiveOutput::Inline(h) => ArchiveSource::Base64(h.data.base64.as_deref().unwrap()),
        ArchiveOutput::File(file) => {
            owned_bytes = file.path.clone();
            ArchiveSource::File(&owned_bytes)
        }
    };
    go(ApplyRequest {
        delegation_id: "d1",
        source,
        expected_checksum: Some(snap.archive.checksum()),
        resources: &f.resources,
        access_mode: access,
        baseline: Some(&p.baseline),
        layout: None,
        limits: None,
        keep_proof: false,
        built_here: false,
    })
}

/// The executor's changes since setup, as an inline delta snapshot.
fn capture_inline_delta(f: &Fixture) -> CapturedSnapshot {
    f.executor
        .capture(
            &f.work,
            SnapshotKind::Delta,
            &Delivery::Inline,
            &CancelFlag::new(),
        )
        .unwrap()
}

/// No staging leftovers (`.awcp-*`) next to the workspace.
fn assert_no_staging(ws: &Path) {
    assert!(fs::read_dir(ws.parent().unwrap())
        .unwrap()
        .flatten()
        .all(|e| !e.file_name().to_string_lossy().starts_with(".awcp-")));
}

fn assert_edited(ws: &Path) {
    assert_eq!(
        fs::read(ws.join("README.md")).unwrap(),
        b"# project\nedited\n"
    );
    assert_eq!(fs::read(ws.join("docs/guide.md")).unwrap(), b"guide v2\n");
    assert!(fs::read_to_string(ws.join("src/main.rs"))
        .unwrap()
        .contains("println"));
    assert!(!ws.join("old.txt").exists(), "deletion must be propagated");
    let mode = fs::metadata(ws.join("src/new.rs"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111, "executable bit preserved");
    let mode = fs::metadata(ws.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111);
    assert_eq!(
        fs::read(ws.join(".git/HEAD")).unwrap(),
        b"ref: refs/heads/main\n"
    );
}

#[test]
fn delta_round_trip_inline_per_resource() {
    let f = fixture(AccessMode::Rw);
    let p = prepare(&f, Layout::PerResource, Delivery::Inline, AccessMode::Rw);
    // Admission counted exactly what shipped: .git is neither counted nor shipped.
    assert_eq!(p.stats.file_count, 6);
    assert_eq!(p.baseline.resources["project"].files.len(), 6);
    let s = setup(&f, &p, AccessMode::Rw);
    assert_eq!(s.layout, Layout::PerResource);
    assert_eq!(s.file_count, 6);
    assert!(!f.work.join("project/.git").exists());
    // The executor's copy keeps the executable bit.
    let m = fs::metadata(f.work.join("project/run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(m & 0o111, 0o111);

    edit(&f.work.join("project"));
    let snap = capture_inline_delta(&f);
    assert_eq!(snap.kind, SnapshotKind::Delta);
    assert_eq!(
        snap.changed,
        vec![
            "project/README.md",
            "project/docs/guide.md",
            "project/src/main.rs",
            "project/src/new.rs"
        ]
    );
    assert_eq!(snap.deleted, vec!["project/old.txt"]);
    assert_eq!(snap.file_count, 4);

    let r = apply(&f, &p, &snap, &ApplyOptions::default(), AccessMode::Rw).unwrap();
    assert_eq!(r.kind, SnapshotKind::Delta);
    assert_eq!(r.deleted, vec!["project/old.txt"]);
    assert_eq!(r.written.len(), 4);
    assert_edited(&f.ws);

    assert_no_staging(&f.ws);

    f.delegator.release(&did()).unwrap();
    f.delegator.release(&did()).unwrap();
    f.executor.release(&f.work).unwrap();
    f.executor.release(&f.work).unwrap();
    assert!(!f.work.exists());
}

#[test]
fn an_empty_delta_applies_as_nothing_and_leaves_no_staging() {
    let f = fixture(AccessMode::Rw);
    let p = prepare(&f, Layout::PerResource, Delivery::Inline, AccessMode::Rw);
    setup(&f, &p, AccessMode::Rw);
    let before = tree(&f.ws);
    // The executor changed nothing.
    let snap = capture_inline_delta(&f);
    assert!(snap.changed.is_empty() && snap.deleted.is_empty());
    let r = apply(&f, &p, &snap, &ApplyOptions::default(), AccessMode::Rw).unwrap();
    assert!(r.written.is_empty() && r.deleted.is_empty(), "{r:?}");
    assert_eq!(tree(&f.ws), before);
    assert_no_staging(&f.ws);
}

#[test]
fn full_round_trip_url_mode_flat_layout() {
    let f = fixture(AccessMode::Rw);
    let p = prepare(
        &f,
        Layout::Flat,
        Delivery::File(f.out.clone()),
        AccessMode::Rw,
    );
    let ArchiveOutput::File(file) = &p.archive else {
        panic!()
    };
    assert!(file.path.exists());
    let h = file.handle_for_url("http://127.0.0.1:1/a.zip");
    assert_eq!(h.checksum.len(), 64);
    let s = setup(&f, &p, AccessMode::Rw);
    assert_eq!(s.layout, Layout::Flat);
    assert!(f.work.join("README.md").exists());
    edit(&f.work);
    let snap = f
        .executor
        .capture(
            &f.work,
            SnapshotKind::Full,
            &Delivery::File(f.out.clone()),
            &CancelFlag::new(),
        )
        .unwrap();
    assert_eq!(snap.kind, SnapshotKind::Full);
    assert_eq!(snap.deleted, vec!["old.txt"]);
    let r = apply(&f, &p, &snap, &ApplyOptions::default(), AccessMode::Rw).unwrap();
    assert_eq!(r.kind, SnapshotKind::Full);
    assert_eq!(r.deleted, vec!["project/old.txt"]);
    assert_eq!(r.unchanged, 2, "untouched files are not rewritten");
    assert_edited(&f.ws);
    let ArchiveOutput::File(sf) = &snap.archive else {
        panic!()
    };
    f.executor.release(&f.work).unwrap();
    assert!(!sf.path.exists());
    f.delegator.release(&did()).unwrap();
    assert!(!file.path.exists());
}

#[test]
fn crash_between_staging_and_swap_is_rolled_back() {
    let f = fixture(AccessMode::Rw);
    let p = prepare(&f, Layout::PerResource, Delivery::Inline, AccessMode::Rw);
    setup(&f, &p, AccessMode::Rw);
    edit(&f.work.join("project"));
    let snap = capture_inline_delta(&f);
    let before = tree(&f.ws);
    let opts = ApplyOptions {
        crash: Some(CrashPoint::AfterStaging),
        ..Default::default()
    };
    let e = apply(&f, &p, &snap, &opts, AccessMode::Rw).unwrap_err();
    assert!(matches!(e, TransportError::InjectedCrash(_)));
    assert_eq!(tree(&f.ws), before, "workspace untouched");
    // "Restart": recover the apply directory.
    let dir = awcp_transports::snapshot::apply_dir(&fs::canonicalize(&f.ws).unwrap(), "d1");
    assert!(dir.exists());
    assert_eq!(recover(&dir).unwrap(), Recovery::RolledBack);
    assert!(!dir.exists());
    assert_eq!(tree(&f.ws), before);
    assert_eq!(fs::read(f.ws.join("old.txt")).unwrap(), b"to be deleted\n");
    // The same snapshot then applies cleanly.
    apply(&f, &p, &snap, &ApplyOptions::default(), AccessMode::Rw).unwrap();
    assert_edited(&f.ws);
}

#[test]
fn crash_mid_swap_is_rolled_forward() {
    let f = fixture(AccessMode::Rw);
    let p = prepare(&f, Layout::PerResource, Delivery::Inline, AccessMode::Rw);
    setup(&f, &p, AccessMode::Rw);
    edit(&f.work.join("project"));
    let snap = capture_inline_delta(&f);
    let opts = ApplyOptions {
        crash: Some(CrashPoint::AfterOps(2)),
        ..Default::default()
    };
    assert!(apply(&f, &p, &snap, &opts, AccessMode::Rw).is_err());
    let parent = f.ws.parent().unwrap();
    let done = awcp_transports::snapshot::recover_all(parent).unwrap();
    assert_eq!(
        done,
        vec![(".awcp-apply-d1".to_owned(), Recovery::RolledForward)]
    );
    assert_edited(&f.ws);
    assert!(!parent.join(".awcp-apply-d1").exists());
}

/// An apply that keeps its proof (as the delegator's driver asks) leaves only its `committed`
/// journal beside the workspace; a restart that finds it learns the swap finished — again
/// after a second restart — and nothing is applied twice; `close_apply` removes it, and a
/// restart after that finds nothing. A proof left over is no obstacle to the next apply.
#[test]
fn a_finished_swap_is_recovered_as_finished_until_the_apply_is_closed() {
    let (f, p, snap) = edited();
    apply_keeping_proof(&f, &p, &snap, &ApplyOptions::default()).unwrap();
    assert_edited(&f.ws);
    assert_eq!(staging(&f.ws), vec![".awcp-apply-d1/journal.json"]);
    let roots = std::slice::from_ref(&f.ws);
    let after = tree(&f.ws);
    for _restart in 0..2 {
        let r = awcp_transports::snapshot::recover_interrupted(roots, "d1").unwrap();
        assert_eq!(r, Recovery::RolledForward);
        assert_eq!(tree(&f.ws), after);
        assert_eq!(staging(&f.ws), vec![".awcp-apply-d1/journal.json"]);
    }
    // What a power loss may leave instead of the unsynced `committed` journal: the synced
    // `committing` one, its staging gone. Redoing its renames changes nothing.
    let journal = parent_of(&f.ws).join(".awcp-apply-d1/journal.json");
    let text = fs::read_to_string(&journal).unwrap();
    assert!(text.contains("\"committed\""), "{text}");
    fs::write(&journal, text.replace("\"committed\"", "\"committing\"")).unwrap();
    let r = awcp_transports::snapshot::recover_interrupted(roots, "d1").unwrap();
    assert_eq!(r, Recovery::RolledForward);
    assert_eq!(tree(&f.ws), after);
    awcp_transports::snapshot::close_apply(roots, "d1").unwrap();
    assert_no_staging(&f.ws);
    let r = awcp_transports::snapshot::recover_interrupted(roots, "d1").unwrap();
    assert_eq!(r, Recovery::Nothing);
    awcp_transports::snapshot::close_apply(roots, "d1").unwrap();

    // Killed mid-swap, then recovered: the same proof, until closed.
    let (f, p, snap) = edited();
    let opts = ApplyOptions {
        crash: Some(CrashPoint::AfterOps(1)),
        ..Default::default()
    };
    assert!(apply_keeping_proof(&f, &p, &snap, &opts).is_err());
    let roots = std::slice::from_ref(&f.ws);
    let r = awcp_transports::snapshot::recover_interrupted(roots, "d1").unwrap();
    assert_eq!(r, Recovery::RolledForward);
    assert_edited(&f.ws);
    assert_eq!(staging(&f.ws), vec![".awcp-apply-d1/journal.json"]);
    // The next apply finds the proof and goes ahead; a no-op here, it swaps nothing and so
    // leaves no proof of its own (the workspace is the same whether it ran or not).
    let again = apply_keeping_proof(&f, &p, &snap, &ApplyOptions::default()).unwrap();
    assert!(again.written.is_empty(), "{again:?}");
    assert_edited(&f.ws);
    assert_no_staging(&f.ws);

    // Killed before the swap: rolled back, no proof.
    let (f, p, snap) = edited();
    let before = tree(&f.ws);
    let opts = ApplyOptions {
        crash: Some(CrashPoint::AfterStaging),
        ..Default::default()
    };
    assert!(apply_keeping_proof(&f, &p, &snap, &opts).is_err());
    let roots = std::slice::from_ref(&f.ws);
    let r = awcp_transports::snapshot::recover_interrupted(roots, "d1").unwrap();
    assert_eq!(r, Recovery::RolledBack);
    assert_eq!(tree(&f.ws), before);
    assert_no_staging(&f.ws);
}

#[test]
fn local_edits_are_reported_as_conflicts_not_overwritten() {
    let f = fixture(AccessMode::Rw);
    let p = prepare(&f, Layout::PerResource, Delivery::Inline, AccessMode::Rw);
    setup(&f, &p, AccessMode::Rw);
    edit(&f.work.join("project"));
    let snap = capture_inline_delta(&f);
    // Meanwhile, the user edits two files locally.
    write(&f.ws, "README.md", b"local change\n");
    write(&f.ws, "old.txt", b"locally changed too\n");
    let before = tree(&f.ws);
    let e = apply(&f, &p, &snap, &ApplyOptions::default(), AccessMode::Rw).unwrap_err();
    match &e {
        TransportError::Conflict { paths } => {
            assert_eq!(
                paths,
                &vec!["project/README.md".to_owned(), "project/old.txt".to_owned()]
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(tree(&f.ws), before);
    assert_eq!(fs::read(f.ws.join("README.md")).unwrap(), b"local change\n");
    // A local edit to a file the executor did not touch is not a conflict.
    write(&f.ws, "README.md", b"# project\nedited\n");
    write(&f.ws, "old.txt", b"to be deleted\n");
    write(&f.ws, "src/lib.rs", b"pub fn local() {}\n");
    apply(&f, &p, &snap, &ApplyOptions::default(), AccessMode::Rw).unwrap();
    assert_eq!(
        fs::read(f.ws.join("src/lib.rs")).unwrap(),
        b"pub fn local() {}\n"
    );
    assert!(!f.ws.join("old.txt").exists());
}

#[test]
fn overwrite_policy_overrides_conflicts() {
    let f = fixture(AccessMode::Rw);
    let p = prepare(&f, Layout::PerResource, Delivery::Inline, AccessMode::Rw);
    setup(&f, &p, AccessMode::Rw);
    edit(&f.work.join("project"));
    let snap = capture_inline_delta(&f);
    write(&f.ws, "README.md", b"local change\n");
    let opts = ApplyOptions {
        on_conflict: ConflictPolicy::Overwrite,
        ..Default::default()
    };
    apply(&f, &p, &snap, &opts, AccessMode::Rw).unwrap();
    assert_edited(&f.ws);
}

#[test]
fn read_only_delegations_never_write() {
    for (res_mode, access) in [
        (AccessMode::Ro, AccessMode::Rw),
        (AccessMode::Rw, AccessMode::Ro),
    ] {
        let f = fixture(res_mode);
        let p = prepare(&f, Layout::PerResource, Delivery::Inline, access);
        setup(&f, &p, access);
        edit(&f.work.join("project"));
        let snap = f
            .executor
            .capture(
                &f.work,
                SnapshotKind::Full,
                &Delivery::Inline,
                &CancelFlag::new(),
            )
            .unwrap();
        let before = tree(&f.ws);
        let r = apply(&f, &p, &snap, &ApplyOptions::default(), access).unwrap();
        assert_eq!(r.skipped_resources, vec!["project"]);
        assert!(r.written.is_empty() && r.deleted.is_empty());
        assert_eq!(tree(&f.ws), before);
        assert_no_staging(&f.ws);
    }
}

#[test]
fn apply_never_writes_through_symlinks_or_into_git() {
    let f = fixture(AccessMode::Rw);
    let p = prepare(&f, Layout::PerResource, Delivery::Inline, AccessMode::Rw);
    setup(&f, &p, AccessMode::Rw);
    // The executor adds a file under a directory that, on the delegator, is a symlink out.
    write(&f.work.join("project"), "linked/evil.txt", b"x");
    write(
        &f.work.join("project"),
        ".git/hooks/post-checkout",
        b"rm -rf ~",
    );
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), f.ws.join("linked")).unwrap();
    let snap = f
        .executor
        .capture(
            &f.work,
            SnapshotKind::Full,
            &Delivery::Inline,
            &CancelFlag::new(),
        )
        .unwrap();
    let e = apply(&f, &p, &snap, &ApplyOptions::default(), AccessMode::Rw).unwrap_err();
    assert!(
        matches!(e, TransportError::SymlinkInPath(ref s) if s == "project/linked"),
        "{e:?}"
    );
    assert!(tree(outside.path()).is_empty());
    assert!(!f.ws.join(".git/hooks").exists());
}

#[test]
fn setup_requires_an_empty_work_dir_and_cleans_up_on_failure() {
    let f = fixture(AccessMode::Rw);
    let p = prepare(&f, Layout::PerResource, Delivery::Inline, AccessMode::Rw);
    write(&f.work, "stale", b"x");
    let ArchiveOutput::Inline(h) = &p.archive else {
        panic!()
    };
    let names = vec![ResourceName::new("project").unwrap()];
    let req = SetupRequest::from_inline_handle(&f.work, h, AccessMode::Rw, &names).unwrap();
    let e = f.executor.setup(req, &CancelFlag::new()).unwrap_err();
    assert_eq!(e.to_error_info().code, awcp_proto::ErrorCode::WorkdirDenied);
    fs::remove_dir_all(&f.work).unwrap();
    let mut bad = h.clone();
    bad.checksum = "0".repeat(64);
    let req = SetupRequest::from_inline_handle(&f.work, &bad, AccessMode::Rw, &names).unwrap();
    let e = f.executor.setup(req, &CancelFlag::new()).unwrap_err();
    assert_eq!(
        e.to_error_info().code,
        awcp_proto::ErrorCode::ChecksumMismatch
    );
    assert!(!f.work.exists());
}

#[test]
fn admission_in_prepare_refuses_oversized_workspaces() {
    let f = fixture(AccessMode::Rw);
    let d = ArchiveDelegator::new(ArchiveDelegatorConfig::new(f.out.join("exports")));
    let e = d
        .prepare(
            &PrepareRequest {
                delegation_id: &did(),
                resources: &f.resources,
                access_mode: AccessMode::Rw,
                export: ExportViewKind::Copy,
                delivery: Delivery::Inline,
                layout: Layout::PerResource,
                admission: Some(awcp_proto::AdmissionLimits {
                    max_file_count: 2,
                    ..Default::default()
                }),
                allow_sensitive: false,
            },
            &CancelFlag::new(),
        )
        .unwrap_err();
    let info = e.to_error_info();
    assert_eq!(info.code, awcp_proto::ErrorCode::WorkspaceTooLarge);
    assert!(
        info.hint.unwrap().contains("--max-file-count"),
        "the verdict of awcp-proto, hint included"
    );
    assert!(
        !f.out.join("exports/d1").exists(),
        "export view removed on failure"
    );
    // scan() agrees with what prepare counts (and also reports what is left out).
    let s = scan(&f.resources, &WalkOptions::default(), &CancelFlag::new()).unwrap();
    let p = prepare(&f, Layout::PerResource, Delivery::Inline, AccessMode::Rw);
    let shipped = |s: &awcp_proto::WorkspaceStats| {
        (
            s.total_bytes,
            s.file_count,
            s.largest_file_bytes,
            s.largest_file.clone(),
            s.sensitive_files.clone(),
        )
    };
    assert_eq!(shipped(&s), shipped(&p.stats));
}

#[test]
fn archives_never_contain_real_paths() {
    let f = fixture(AccessMode::Rw);
    let p = prepare(&f, Layout::PerResource, Delivery::Inline, AccessMode::Rw);
    let ArchiveOutput::Inline(h) = &p.archive else {
        panic!()
    };
    let raw = awcp_transports::archive::decode_base64(h.data.base64.as_deref().unwrap()).unwrap();
    let z = zip::ZipArchive::new(std::io::Cursor::new(&raw)).unwrap();
    let real = f.ws.to_string_lossy().into_owned();
    for n in z.file_names() {
        assert!(n.starts_with("project/"), "{n}");
        assert!(!n.contains(&real));
    }
    assert_eq!(h.checksum, awcp_transports::manifest::sha256_hex(&raw));
    assert_eq!(h.checksum, h.checksum.to_lowercase());
}

#[test]
fn cancelled_prepare_and_setup_leave_nothing_behind() {
    let f = fixture(AccessMode::Rw);
    let c = CancelFlag::new();
    c.cancel();
    let e = f
        .delegator
        .prepare(
            &PrepareRequest {
                delegation_id: &did(),
                resources: &f.resources,
                access_mode: AccessMode::Rw,
                export: ExportViewKind::Copy,
                delivery: Delivery::File(f.out.clone()),
                layout: Layout::PerResource,
                admission: None,
                allow_sensitive: false,
            },
            &c,
        )
        .unwrap_err();
    assert!(matches!(e, TransportError::Cancelled));
    assert_eq!(e.to_error_info().code, awcp_proto::ErrorCode::Cancelled);
    assert!(tree(&f.out).is_empty());
    let p = prepare(&f, Layout::PerResource, Delivery::Inline, AccessMode::Rw);
    let ArchiveOutput::Inline(h) = &p.archive else {
        panic!()
    };
    let names = vec![ResourceName::new("project").unwrap()];
    let req = SetupRequest::from_inline_handle(&f.work, h, AccessMode::Rw, &names).unwrap();
    assert!(matches!(
        f.executor.setup(req, &c),
        Err(TransportError::Cancelled)
    ));
    assert!(!f.work.exists());
}

/// The executor's copy changes types: `docs/` becomes a file, `old.txt` becomes a directory.
fn change_types(root: &Path) {
    fs::remove_dir_all(root.join("docs")).unwrap();
    write(root, "docs", b"docs is a file now\n");
    fs::remove_file(root.join("old.txt")).unwrap();
    write(root, "old.txt/inside.txt", b"old.txt is a directory now\n");
}

fn assert_types_changed(ws: &Path) {
    assert_eq!(fs::read(ws.join("docs")).unwrap(), b"docs is a file now\n");
    assert_eq!(
        fs::read(ws.join("old.txt/inside.txt")).unwrap(),
        b"old.txt is a directory now\n"
    );
    assert_eq!(fs::read(ws.join("README.md")).unwrap(), b"# project\n");
}

/// Type changes apply three-way (the base sent, the local tree, the result) in one journalled
/// swap: a crash after any number of its renames (all of them included, before the apply
/// directory is removed) is rolled forward by the start-up recovery to exactly the new tree,
/// and applying again afterwards is a no-op success.
#[test]
fn type_changes_survive_a_crash_at_every_step_of_the_swap() {
    for kind in [SnapshotKind::Delta, SnapshotKind::Full] {
        for n in 0.. {
            let f = fixture(AccessMode::Rw);
            let p = prepare(&f, Layout::PerResource, Delivery::Inline, AccessMode::Rw);
            setup(&f, &p, AccessMode::Rw);
            change_types(&f.work.join("project"));
            let snap = f
                .executor
                .capture(&f.work, kind, &Delivery::Inline, &CancelFlag::new())
                .unwrap();
            let opts = ApplyOptions {
                crash: Some(CrashPoint::AfterOps(n)),
                ..Default::default()
            };
            match apply(&f, &p, &snap, &opts, AccessMode::Rw) {
                Ok(_) => {
                    // n is past the last rename: the uninterrupted apply.
                    assert_types_changed(&f.ws);
                    assert_no_staging(&f.ws);
                    assert!(n > 2, "{kind:?}: the swap has several renames");
                    break;
                }
                Err(TransportError::InjectedCrash(_)) => {}
                Err(e) => panic!("{kind:?} after {n} renames: {e}"),
            }
            let r =
                awcp_transports::snapshot::recover_interrupted(std::slice::from_ref(&f.ws), "d1")
                    .unwrap();
            assert_eq!(r, Recovery::RolledForward, "{kind:?} after {n} renames");
            assert_types_changed(&f.ws);
            // The proof that the swap finished stays until the apply is recorded.
            assert_eq!(staging(&f.ws), vec![".awcp-apply-d1/journal.json"]);
            awcp_transports::snapshot::close_apply(std::slice::from_ref(&f.ws), "d1").unwrap();
            assert_no_staging(&f.ws);
            let again = apply(&f, &p, &snap, &ApplyOptions::default(), AccessMode::Rw).unwrap();
            assert!(again.written.is_empty(), "{kind:?}: {again:?}");
            assert_types_changed(&f.ws);
        }
    }
}

/// A type change over local changes is a conflict, whatever the policy, when it would destroy
/// what was never shipped; nothing is written.
#[test]
fn type_changes_never_destroy_local_work() {
    for policy in [ConflictPolicy::Refuse, ConflictPolicy::Overwrite] {
        let f = fixture(AccessMode::Rw);
        let p = prepare(&f, Layout::PerResource, Delivery::Inline, AccessMode::Rw);
        setup(&f, &p, AccessMode::Rw);
        change_types(&f.work.join("project"));
        let snap = capture_inline_delta(&f);
        write(&f.ws, "docs/mine.md", b"written locally, never shipped\n");
        let before = tree(&f.ws);
        let opts = ApplyOptions {
            on_conflict: policy,
            ..Default::default()
        };
        let e = apply(&f, &p, &snap, &opts, AccessMode::Rw).unwrap_err();
        match &e {
            TransportError::Conflict { paths } => {
                assert_eq!(
                    paths,
                    &vec!["project/docs/mine.md".to_owned()],
                    "{policy:?}"
                )
            }
            other => panic!("{policy:?}: {other:?}"),
        }
        let hint = e.to_error_info().hint.unwrap();
        assert!(hint.contains("changed locally"), "{hint}");
        assert_eq!(tree(&f.ws), before, "{policy:?}");
        assert_no_staging(&f.ws);
    }
    // The file that becomes a directory was edited locally: a conflict (Refuse).
    let f = fixture(AccessMode::Rw);
    let p = prepare(&f, Layout::PerResource, Delivery::Inline, AccessMode::Rw);
    setup(&f, &p, AccessMode::Rw);
    change_types(&f.work.join("project"));
    let snap = capture_inline_delta(&f);
    write(&f.ws, "old.txt", b"edited locally\n");
    let e = apply(&f, &p, &snap, &ApplyOptions::default(), AccessMode::Rw).unwrap_err();
    assert!(
        matches!(&e, TransportError::Conflict { paths } if paths == &vec!["project/old.txt".to_owned()]),
        "{e:?}"
    );
    assert_eq!(fs::read(f.ws.join("old.txt")).unwrap(), b"edited locally\n");
}

/// Permission bits round-trip through setup and apply: a 0444 file is 0444 in the work
/// directory and stays 0444 when the result rewrites it.
#[test]
fn read_only_files_stay_read_only_both_ways() {
    let f = fixture(AccessMode::Rw);
    fs::set_permissions(f.ws.join("README.md"), fs::Permissions::from_mode(0o444)).unwrap();
    let p = prepare(&f, Layout::PerResource, Delivery::Inline, AccessMode::Rw);
    setup(&f, &p, AccessMode::Rw);
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let readme = f.work.join("project/README.md");
    assert_eq!(mode(&readme), 0o444, "read-only on the executor");
    fs::set_permissions(&readme, fs::Permissions::from_mode(0o644)).unwrap();
    write(&f.work.join("project"), "README.md", b"# edited\n");
    fs::set_permissions(&readme, fs::Permissions::from_mode(0o444)).unwrap();
    fs::set_permissions(
        f.work.join("project/run.sh"),
        fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    let snap = capture_inline_delta(&f);
    apply(&f, &p, &snap, &ApplyOptions::default(), AccessMode::Rw).unwrap();
    assert_eq!(fs::read(f.ws.join("README.md")).unwrap(), b"# edited\n");
    assert_eq!(mode(&f.ws.join("README.md")), 0o444);
    assert_eq!(mode(&f.ws.join("run.sh")), 0o700, "a chmod alone travels");
}

/// Review before apply: the preview lists exactly what the apply then does (added, modified,
/// deleted, with unified diffs of the text files), names local edits as conflicts, respects
/// its size budget, and changes nothing (no file, no staging beside the workspace).
#[test]
fn a_preview_shows_what_the_apply_will_do_and_changes_nothing() {
    use awcp_transports::snapshot::{preview_snapshot, ChangeKind, PreviewLimits};
    let f = fixture(AccessMode::Rw);
    let p = prepare(&f, Layout::PerResource, Delivery::Inline, AccessMode::Rw);
    setup(&f, &p, AccessMode::Rw);
    edit(&f.work.join("project"));
    let snap = capture_inline_delta(&f);
    let before = tree(&f.ws);
    let preview = |limits| {
        with_request(&f, &p, &snap, AccessMode::Rw, |req| {
            preview_snapshot(req, &ApplyOptions::default(), limits, &CancelFlag::new())
        })
        .unwrap()
    };
    let pv = preview(PreviewLimits::default());
    assert_eq!(tree(&f.ws), before, "a preview writes nothing");
    assert_no_staging(&f.ws);
    let kinds: Vec<(&str, ChangeKind)> = pv
        .files
        .iter()
        .map(|c| (c.path.as_str(), c.change))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("project/README.md", ChangeKind::Modified),
            ("project/docs/guide.md", ChangeKind::Modified),
            ("project/old.txt", ChangeKind::Deleted),
            ("project/src/main.rs", ChangeKind::Modified),
            ("project/src/new.rs", ChangeKind::Added),
        ]
    );
    let diff_of = |path: &str| {
        pv.files
            .iter()
            .find(|c| c.path == path)
            .and_then(|c| c.diff.clone())
            .unwrap_or_default()
    };
    assert_eq!(
        diff_of("project/docs/guide.md"),
        "--- a/project/docs/guide.md\n+++ b/project/docs/guide.md\n@@ -1 +1 @@\n-guide\n+guide v2\n"
    );
    assert!(diff_of("project/src/new.rs").starts_with("--- /dev/null\n+++ b/project/src/new.rs"));
    assert!(diff_of("project/old.txt").contains("-to be deleted"));
    assert!(pv.conflicts.is_empty() && !pv.truncated);
    // A local edit where the snapshot writes: named as a conflict, still nothing written.
    write(&f.ws, "README.md", b"local change\n");
    let pv = preview(PreviewLimits::default());
    assert_eq!(pv.conflicts, vec!["project/README.md".to_owned()]);
    assert_eq!(fs::read(f.ws.join("README.md")).unwrap(), b"local change\n");
    write(&f.ws, "README.md", b"# project\n");
    // A small budget: every change listed, the diffs past it left out and said so.
    let pv = preview(PreviewLimits {
        max_diff_bytes: 80,
        ..PreviewLimits::default()
    });
    assert!(pv.truncated);
    assert_eq!(pv.files.len(), 5);
    assert!(pv
        .files
        .iter()
        .any(|c| c.diff.is_none() && c.note.is_some()));
    // And the apply does what the preview said.
    let report = apply(&f, &p, &snap, &ApplyOptions::default(), AccessMode::Rw).unwrap();
    assert_eq!(report.deleted, vec!["project/old.txt".to_owned()]);
    assert_eq!(report.written.len(), 4);
    assert_edited(&f.ws);
}
