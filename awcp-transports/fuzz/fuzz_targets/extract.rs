//! Fuzzes the hardened extractor: arbitrary bytes as a ZIP must never panic, and nothing may
//! appear outside the target directory.
#![no_main]

use std::io::Cursor;

use awcp_transports::archive::{extract, ExtractLimits};
use awcp_transports::CancelFlag;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let tmp = tempfile::tempdir().expect("tempdir");
    let target = tmp.path().join("target");
    std::fs::create_dir(&target).expect("target");
    let limits = ExtractLimits {
        max_total_bytes: 1 << 20,
        max_file_bytes: 1 << 20,
        ..Default::default()
    };
    let _ = extract(Cursor::new(data.to_vec()), &target, &limits, &CancelFlag::new());
    for e in std::fs::read_dir(tmp.path()).expect("list") {
        let e = e.expect("entry");
        assert_eq!(e.file_name(), "target", "wrote outside the target directory");
    }
});
