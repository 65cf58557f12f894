//! Every extractor rejection, each with nothing written outside the target directory.

mod common;

use std::fs;
use std::io::Cursor;

use awcp_proto::ErrorCode;
use awcp_transports::archive::{extract, extract_parallel, ExtractLimits, FileAt};
use awcp_transports::snapshot::{apply_snapshot, ApplyOptions, ApplyRequest};
use awcp_transports::{ArchiveSource, CancelFlag, ResourceSpec, TransportError};
use common::{raw_zip, tree, RawEntry};

/// Extracts `zip` into `<tmp>/target` and checks that nothing appeared outside it and nothing
/// was written at all when the refusal happens during validation.
fn refuse(zip: &[u8], limits: ExtractLimits) -> TransportError {
    let t = tempfile::tempdir().unwrap();
    let target = t.path().join("target");
    fs::create_dir(&target).unwrap();
    let err = extract(
        Cursor::new(zip.to_vec()),
        &target,
        &limits,
        &CancelFlag::new(),
    )
    .expect_err("archive must be refused");
    let outside: Vec<_> = tree(t.path())
        .into_iter()
        .filter(|p| !p.starts_with("target/"))
        .collect();
    assert!(
        outside.is_empty(),
        "something was written outside: {outside:?}"
    );
    // Refusals found while validating happen before anything is written at all; only a lie
    // discovered while decompressing can leave a partial file, and only inside the target.
    if !err.to_string().contains("declared") {
        assert!(tree(&target).is_empty(), "{:?}", tree(&target));
    }
    err
}

fn rejected_entry(err: &TransportError, name: &str) {
    match err {
        TransportError::EntryRejected { entry, .. } => assert_eq!(entry, name),
        other => panic!("expected EntryRejected for {name}, got {other:?}"),
    }
    let info = err.to_error_info();
    assert_eq!(info.code, ErrorCode::SetupFailed);
    assert!(info.message.contains(name), "{}", info.message);
}

fn ok_first() -> RawEntry {
    RawEntry::file("ok.txt", b"fine")
}

#[test]
fn absolute_path() {
    let z = raw_zip(&[ok_first(), RawEntry::file("/tmp/awcp-evil-abs", b"x")]);
    rejected_entry(&refuse(&z, ExtractLimits::default()), "/tmp/awcp-evil-abs");
    assert!(!std::path::Path::new("/tmp/awcp-evil-abs").exists());
}

#[test]
fn dot_dot() {
    let z = raw_zip(&[ok_first(), RawEntry::file("a/../../evil", b"x")]);
    rejected_entry(&refuse(&z, ExtractLimits::default()), "a/../../evil");
}

#[test]
fn backslash_and_drive() {
    let z = raw_zip(&[RawEntry::file("..\\evil", b"x")]);
    rejected_entry(&refuse(&z, ExtractLimits::default()), "..\\evil");
    let z = raw_zip(&[RawEntry::file("C:/evil", b"x")]);
    rejected_entry(&refuse(&z, ExtractLimits::default()), "C:/evil");
}

#[test]
fn symlink_resolving_outside() {
    let mut l = RawEntry::file("sub/link", b"../../../etc/passwd");
    l.mode = 0o120777;
    let z = raw_zip(&[ok_first(), l, RawEntry::file("sub/link/x", b"x")]);
    rejected_entry(&refuse(&z, ExtractLimits::default()), "sub/link");
    let mut l = RawEntry::file("abs", b"/etc");
    l.mode = 0o120777;
    rejected_entry(&refuse(&raw_zip(&[l]), ExtractLimits::default()), "abs");
}

#[test]
fn symlink_inside_is_skipped_not_materialised() {
    let mut l = RawEntry::file("link", b"ok.txt");
    l.mode = 0o120777;
    let z = raw_zip(&[ok_first(), l]);
    let t = tempfile::tempdir().unwrap();
    let r = extract(
        Cursor::new(z),
        t.path(),
        &ExtractLimits::default(),
        &CancelFlag::new(),
    )
    .unwrap();
    assert_eq!(r.skipped, vec!["link"]);
    assert_eq!(tree(t.path()), vec!["ok.txt"]);
}

#[test]
fn device_fifo_socket() {
    for (mode, name) in [
        (0o020644, "chr"),
        (0o060644, "blk"),
        (0o010644, "fifo"),
        (0o140644, "sock"),
    ] {
        let mut e = RawEntry::file(name, b"");
        e.mode = mode;
        rejected_entry(
            &refuse(&raw_zip(&[ok_first(), e]), ExtractLimits::default()),
            name,
        );
    }
}

#[test]
fn duplicate_entries() {
    let z = raw_zip(&[ok_first(), RawEntry::file("ok.txt", b"again")]);
    rejected_entry(&refuse(&z, ExtractLimits::default()), "ok.txt");
    // A file and a directory of the same name.
    let z = raw_zip(&[ok_first(), RawEntry::file("ok.txt/inner", b"x")]);
    rejected_entry(&refuse(&z, ExtractLimits::default()), "ok.txt/inner");
}

#[test]
fn entry_over_file_limit() {
    let limits = ExtractLimits {
        max_file_bytes: 100,
        ..Default::default()
    };
    let z = raw_zip(&[ok_first(), RawEntry::file("big", &[7u8; 101])]);
    rejected_entry(&refuse(&z, limits), "big");
}

#[test]
fn lying_declared_size() {
    let mut e = RawEntry::file("liar", &[1u8; 5000]);
    e.declared_size = Some(10);
    let err = refuse(&raw_zip(&[e]), ExtractLimits::default());
    assert_eq!(err.to_error_info().code, ErrorCode::SetupFailed);
    assert!(err.to_string().contains("liar"), "{err}");
}

#[test]
fn zip_bomb_total_size() {
    let limits = ExtractLimits {
        max_total_bytes: 1000,
        ..Default::default()
    };
    let z = raw_zip(&[
        RawEntry::file("a", &[1u8; 600]),
        RawEntry::file("b", &[2u8; 600]),
    ]);
    let err = refuse(&z, limits);
    assert!(
        matches!(err, TransportError::BadArchive(ref m) if m.contains("`b`")),
        "{err:?}"
    );
    assert_eq!(err.to_error_info().code, ErrorCode::SetupFailed);
}

#[test]
fn zip_bomb_compression_ratio() {
    let mut e = RawEntry::file("bomb", &vec![0u8; 20 * 1024 * 1024]);
    e.deflate = true;
    rejected_entry(&refuse(&raw_zip(&[e]), ExtractLimits::default()), "bomb");
}

#[test]
fn too_many_entries_and_garbage() {
    let limits = ExtractLimits {
        max_entries: 2,
        ..Default::default()
    };
    let z = raw_zip(&[
        ok_first(),
        RawEntry::file("b", b"b"),
        RawEntry::file("c", b"c"),
    ]);
    assert!(matches!(refuse(&z, limits), TransportError::BadArchive(_)));
    assert!(matches!(
        refuse(b"definitely not a zip", ExtractLimits::default()),
        TransportError::BadArchive(_)
    ));
}

#[test]
fn checksum_mismatch_is_refused_before_extraction() {
    let z = raw_zip(&[ok_first()]);
    let t = tempfile::tempdir().unwrap();
    let ws = t.path().join("ws");
    fs::create_dir(&ws).unwrap();
    fs::write(ws.join("keep"), b"keep").unwrap();
    let res = [ResourceSpec {
        name: awcp_proto::ResourceName::new("ws").unwrap(),
        source_path: ws.clone(),
        mode: awcp_proto::AccessMode::Rw,
    }];
    let err = apply_snapshot(
        ApplyRequest {
            delegation_id: "d1",
            source: ArchiveSource::Bytes(&z),
            expected_checksum: Some(&"0".repeat(64)),
            resources: &res,
            access_mode: awcp_proto::AccessMode::Rw,
            baseline: None,
            layout: None,
            limits: None,
            keep_proof: false,
            built_here: false,
        },
        &ApplyOptions::default(),
        &CancelFlag::new(),
    )
    .unwrap_err();
    assert_eq!(err.to_error_info().code, ErrorCode::ChecksumMismatch);
    assert_eq!(tree(t.path()), vec!["ws/", "ws/keep"]);
}

#[test]
fn non_utf8_name() {
    let mut e = RawEntry::file("x", b"x");
    e.name = vec![b'a', 0xff, b'b'];
    let err = refuse(&raw_zip(&[e]), ExtractLimits::default());
    assert_eq!(err.to_error_info().code, ErrorCode::SetupFailed);
}

/// `entries` hidden among 150 good files before and 150 after, so that several threads write.
fn among_many(entries: Vec<RawEntry>) -> Vec<u8> {
    let mut all: Vec<RawEntry> = (0..150)
        .map(|i| RawEntry::file(&format!("d{}/before{i}.txt", i % 7), &[b'b'; 700]))
        .collect();
    all.extend(entries);
    all.extend((0..150).map(|i| RawEntry::file(&format!("after{i}.txt"), &[b'a'; 700])));
    raw_zip(&all)
}

/// [`refuse`] through the threaded extractor, reading the archive from memory and from a file.
fn refuse_in_parallel(zip: &[u8], limits: ExtractLimits) -> TransportError {
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("archive.zip");
    fs::write(&file, zip).unwrap();
    let mut errors = Vec::new();
    for from_file in [false, true] {
        let target = t.path().join(format!("target-{from_file}"));
        fs::create_dir(&target).unwrap();
        let err = if from_file {
            let f = fs::File::open(&file).unwrap();
            extract_parallel(
                FileAt::new(&f).unwrap(),
                &target,
                &limits,
                &CancelFlag::new(),
            )
        } else {
            extract_parallel(Cursor::new(zip), &target, &limits, &CancelFlag::new())
        }
        .expect_err("archive must be refused");
        errors.push(err);
    }
    let outside: Vec<_> = tree(t.path())
        .into_iter()
        .filter(|p| !p.starts_with("target-") && p != "archive.zip")
        .collect();
    assert!(
        outside.is_empty(),
        "something was written outside: {outside:?}"
    );
    assert_eq!(errors[0].to_string(), errors[1].to_string());
    errors.remove(0)
}

#[test]
fn many_files_extract_in_parallel_to_exactly_what_one_thread_writes() {
    let entries: Vec<RawEntry> = (0..400)
        .map(|i| {
            let mut e = RawEntry::file(
                &format!("dir{}/sub{}/f{i}.txt", i % 9, i % 4),
                format!("file {i} ").repeat(i % 50 + 1).as_bytes(),
            );
            e.deflate = i % 2 == 0;
            e.mode = if i % 5 == 0 { 0o100755 } else { 0o100644 };
            e
        })
        .collect();
    let z = raw_zip(&entries);
    let t = tempfile::tempdir().unwrap();
    let (one, many) = (t.path().join("one"), t.path().join("many"));
    fs::create_dir(&one).unwrap();
    fs::create_dir(&many).unwrap();
    let limits = ExtractLimits::default();
    let a = extract(Cursor::new(&z), &one, &limits, &CancelFlag::new()).unwrap();
    let b = extract_parallel(Cursor::new(&z[..]), &many, &limits, &CancelFlag::new()).unwrap();
    assert_eq!(a, b, "the same report, files in archive order");
    assert_eq!(a.files.len(), 400);
    assert_eq!(tree(&one), tree(&many));
    for f in &a.files {
        let (x, y) = (one.join(&f.name), many.join(&f.name));
        assert_eq!(fs::read(&x).unwrap(), fs::read(&y).unwrap(), "{}", f.name);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            fs::metadata(&x).unwrap().permissions().mode(),
            fs::metadata(&y).unwrap().permissions().mode()
        );
    }
}

#[test]
fn a_lie_among_many_files_is_refused_by_the_threaded_extractor() {
    let mut liar = RawEntry::file("liar", &[1u8; 5000]);
    liar.declared_size = Some(10);
    let err = refuse_in_parallel(&among_many(vec![liar]), ExtractLimits::default());
    rejected_entry(&err, "liar");
    assert!(err.to_string().contains("declared"), "{err}");
}

#[test]
fn hostile_entries_among_many_files_are_refused_before_any_thread_writes() {
    for (bad, name) in [
        (
            RawEntry::file("/tmp/awcp-evil-abs", b"x"),
            "/tmp/awcp-evil-abs",
        ),
        (RawEntry::file("a/../../evil", b"x"), "a/../../evil"),
        (RawEntry::file("d3/before3.txt/x", b"x"), "d3/before3.txt/x"),
    ] {
        let err = refuse_in_parallel(&among_many(vec![bad]), ExtractLimits::default());
        match &err {
            TransportError::EntryRejected { entry, .. } => assert_eq!(entry, name),
            other => panic!("{name}: {other:?}"),
        }
    }
    // The total limit: validated up front (declared sizes) for all threads at once.
    let limits = ExtractLimits {
        max_total_bytes: 100_000,
        ..Default::default()
    };
    let err = refuse_in_parallel(&among_many(vec![]), limits);
    assert!(err.to_string().contains("zip bomb"), "{err}");
}
