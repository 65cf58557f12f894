//! Property test of the extractor against adversarial archives (the CI-sized counterpart of the
//! cargo-fuzz target in `fuzz/`): it never panics and never writes outside the target.

mod common;

use std::fs;
use std::io::Cursor;

use awcp_transports::archive::{extract, ExtractLimits};
use awcp_transports::CancelFlag;
use common::{raw_zip, tree, RawEntry};
use proptest::prelude::*;

fn component() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("..".to_owned()),
        Just(".".to_owned()),
        Just(String::new()),
        Just(".awcp".to_owned()),
        Just("a".to_owned()),
        Just("b".to_owned()),
        Just("C:".to_owned()),
        Just("x\\..".to_owned()),
        "[a-z]{1,3}",
    ]
}

fn name() -> impl Strategy<Value = String> {
    (
        prop::bool::ANY,
        prop::collection::vec(component(), 1..4),
        prop::bool::ANY,
    )
        .prop_map(|(abs, parts, dir)| {
            let mut s = parts.join("/");
            if abs {
                s.insert(0, '/');
            }
            if dir {
                s.push('/');
            }
            s
        })
}

fn entry() -> impl Strategy<Value = RawEntry> {
    (
        name(),
        prop::collection::vec(any::<u8>(), 0..64),
        prop::sample::select(vec![
            0u32, 0o100644, 0o100755, 0o040755, 0o120777, 0o010644, 0o020644,
        ]),
        any::<bool>(),
        prop::option::of(0u32..200),
    )
        .prop_map(|(n, data, mode, deflate, lie)| RawEntry {
            name: n.into_bytes(),
            data,
            mode,
            deflate,
            declared_size: lie,
        })
}

fn check(zip: Vec<u8>) {
    let t = tempfile::tempdir().unwrap();
    let target = t.path().join("target");
    fs::create_dir(&target).unwrap();
    let limits = ExtractLimits {
        max_total_bytes: 4096,
        max_file_bytes: 1024,
        ..Default::default()
    };
    let _ = extract(Cursor::new(zip), &target, &limits, &CancelFlag::new());
    let outside: Vec<_> = tree(t.path())
        .into_iter()
        .filter(|p| p != "target/" && !p.starts_with("target/"))
        .collect();
    assert!(outside.is_empty(), "{outside:?}");
    // Nothing inside is a symlink, device or FIFO.
    for p in tree(&target) {
        let md = fs::symlink_metadata(target.join(p.trim_end_matches('/'))).unwrap();
        assert!(md.is_file() || md.is_dir(), "{p}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn adversarial_entries(entries in prop::collection::vec(entry(), 0..6)) {
        check(raw_zip(&entries));
    }

    #[test]
    fn mutated_archives(flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut z = raw_zip(&[
            RawEntry::file("a/b.txt", b"hello hello hello"),
            RawEntry::file("c", b"world"),
        ]);
        for (i, b) in flips {
            let at = i.index(z.len());
            z[at] = b;
        }
        check(z);
    }
}
