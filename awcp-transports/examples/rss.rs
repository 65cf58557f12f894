//! Peak RSS of URL-mode pack + extract: the delegator packs a workspace to a file, the
//! executor consumes it as a byte stream (spooled to disk while hashing) and extracts it.
//! Each size runs in a fresh child process so VmHWM is per size.
//!
//!     cargo run --release -p awcp-transports --example rss

use std::fs;
use std::path::Path;
use std::process::Command;

use awcp_proto::{AccessMode, DelegationId, ResourceName};
use awcp_transports::archive::transport::{ArchiveDelegatorConfig, ArchiveExecutorConfig};
use awcp_transports::*;

fn vm_hwm_kb() -> u64 {
    let s = fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn generate(root: &Path, mb: usize) {
    // Half text, half incompressible, in 256 KiB files, written one file at a time.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut buf = vec![0u8; 256 * 1024];
    for i in 0..mb * 4 {
        if i % 2 == 0 {
            for (j, b) in buf.iter_mut().enumerate() {
                *b = b"lease snapshot archive delegation\n"[j % 34];
            }
        } else {
            for b in buf.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
        }
        let dir = root.join(format!("d{}", i % 8));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(format!("f{i}")), &buf).unwrap();
    }
}

fn child(mb: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    generate(&root, mb);
    let base = vm_hwm_kb();
    let d = ArchiveDelegator::new(ArchiveDelegatorConfig::new(tmp.path().join("exports")));
    let res = [ResourceSpec {
        name: ResourceName::new("ws").unwrap(),
        source_path: root,
        mode: AccessMode::Rw,
    }];
    let p = d
        .prepare(
            &PrepareRequest {
                delegation_id: &DelegationId::new("rss").unwrap(),
                resources: &res,
                access_mode: AccessMode::Rw,
                export: ExportViewKind::Symlink,
                delivery: Delivery::File(tmp.path().join("out")),
                layout: Layout::PerResource,
                admission: None,
                allow_sensitive: false,
            },
            &CancelFlag::new(),
        )
        .unwrap();
    let ArchiveOutput::File(file) = p.archive else {
        unreachable!()
    };
    let after_pack = vm_hwm_kb();
    let e = ArchiveExecutor::new(ArchiveExecutorConfig::default());
    let mut stream = fs::File::open(&file.path).unwrap();
    let names = [ResourceName::new("ws").unwrap()];
    e.setup(
        SetupRequest {
            work_dir: &tmp.path().join("work"),
            source: ArchiveSource::Reader(&mut stream),
            expected_checksum: Some(&file.checksum),
            access_mode: AccessMode::Rw,
            resources: &names,
        },
        &CancelFlag::new(),
    )
    .unwrap();
    println!(
        "{mb} MB workspace: archive {} bytes; peak RSS KiB: before {base}, after pack {after_pack}, after extract {}",
        file.size_bytes,
        vm_hwm_kb()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(mb) = args.get(1).and_then(|a| a.parse().ok()) {
        child(mb);
        return;
    }
    let exe = std::env::current_exe().unwrap();
    for mb in [1usize, 10, 50] {
        let st = Command::new(&exe).arg(mb.to_string()).status().unwrap();
        assert!(st.success());
    }
}
