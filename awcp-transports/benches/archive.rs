//! Criterion benchmarks: pack+checksum (prepare, URL mode) and verify+extract (setup) on 1, 10
//! and 50 MB workspaces of text and of incompressible data, and delta capture on a 50 MB tree
//! with 2 changed files. See BENCHMARKS.md for figures and the command.

use std::fs;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use awcp_proto::{AccessMode, DelegationId, ResourceName};
use awcp_transports::archive::transport::{ArchiveDelegatorConfig, ArchiveExecutorConfig};
use awcp_transports::*;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const FILE: usize = 256 * 1024;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const WORDS: &[&str] = &[
    "fn",
    "let",
    "mut",
    "self",
    "return",
    "match",
    "impl",
    "struct",
    "delegation",
    "lease",
    "snapshot",
    "archive",
    "workspace",
    "executor",
    "(",
    ")",
    "{",
    "}",
    ";",
    "=",
    "if",
    "else",
];

/// Writes `mb` megabytes in 256 KiB files of text or random bytes.
fn generate(root: &Path, mb: usize, text: bool) {
    generate_files(root, mb * 1024 * 1024 / FILE, FILE, text);
}

/// `files` files of `size` bytes in 16 directories.
fn generate_files(root: &Path, files: usize, size: usize, text: bool) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (files * size) as u64);
    let mut buf = Vec::with_capacity(size);
    for i in 0..files {
        buf.clear();
        if text {
            while buf.len() < size {
                let w = WORDS[(rng.next() % WORDS.len() as u64) as usize];
                buf.extend_from_slice(w.as_bytes());
                buf.push(if rng.next() % 12 == 0 { b'\n' } else { b' ' });
            }
            buf.truncate(size);
        } else {
            while buf.len() < size {
                buf.extend_from_slice(&rng.next().to_le_bytes());
            }
        }
        let dir = root.join(format!("d{}", i % 16));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(format!("f{i}.dat")), &buf).unwrap();
    }
}

fn spec(root: &Path) -> Vec<ResourceSpec> {
    vec![ResourceSpec {
        name: ResourceName::new("ws").unwrap(),
        source_path: root.to_path_buf(),
        mode: AccessMode::Rw,
    }]
}

fn prepare(d: &ArchiveDelegator, res: &[ResourceSpec], out: &Path) -> Prepared {
    d.prepare(
        &PrepareRequest {
            delegation_id: &DelegationId::new("bench").unwrap(),
            resources: res,
            access_mode: AccessMode::Rw,
            export: ExportViewKind::Symlink,
            delivery: Delivery::File(out.to_path_buf()),
            layout: Layout::PerResource,
            admission: None,
            allow_sensitive: false,
        },
        &CancelFlag::new(),
    )
    .unwrap()
}

fn setup(e: &ArchiveExecutor, file: &ArchiveFile, work: &Path) {
    let names = [ResourceName::new("ws").unwrap()];
    e.setup(
        SetupRequest {
            work_dir: work,
            source: ArchiveSource::File(&file.path),
            expected_checksum: Some(&file.checksum),
            access_mode: AccessMode::Rw,
            resources: &names,
        },
        &CancelFlag::new(),
    )
    .unwrap();
}

/// The time of `iters` setups from `file` into `work` (each released after, untimed).
fn time_setups(iters: u64, e: &ArchiveExecutor, file: &ArchiveFile, work: &Path) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let t = Instant::now();
        setup(e, file, work);
        total += t.elapsed();
        e.release(work).unwrap();
    }
    total
}

fn benches(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let d = ArchiveDelegator::new(ArchiveDelegatorConfig::new(tmp.path().join("exports")));
    let e = ArchiveExecutor::new(ArchiveExecutorConfig::default());
    let out = tmp.path().join("out");

    for (kind, text) in [("text", true), ("random", false)] {
        let mut pack = c.benchmark_group(format!("pack_checksum/{kind}"));
        pack.sample_size(10);
        for mb in [1usize, 10, 50] {
            let root = tmp.path().join(format!("{kind}{mb}"));
            generate(&root, mb, text);
            let res = spec(&root);
            pack.throughput(Throughput::Bytes((mb * 1024 * 1024) as u64));
            pack.bench_with_input(
                BenchmarkId::from_parameter(format!("{mb}MB")),
                &mb,
                |b, _| b.iter(|| black_box(prepare(&d, &res, &out))),
            );
        }
        pack.finish();

        let mut ex = c.benchmark_group(format!("verify_extract/{kind}"));
        ex.sample_size(10);
        for mb in [1usize, 10, 50] {
            let root = tmp.path().join(format!("{kind}{mb}"));
            let p = prepare(&d, &spec(&root), &out);
            let ArchiveOutput::File(file) = p.archive else {
                unreachable!()
            };
            let work = tmp.path().join("work");
            ex.throughput(Throughput::Bytes((mb * 1024 * 1024) as u64));
            ex.bench_with_input(
                BenchmarkId::from_parameter(format!("{mb}MB")),
                &mb,
                |b, _| b.iter_custom(|iters| time_setups(iters, &e, &file, &work)),
            );
        }
        ex.finish();
    }

    // Many small files (the performance issue's 10 MiB row): 1,000 text files of 10 KiB.
    let root = tmp.path().join("small1000");
    generate_files(&root, 1000, 10 * 1024, true);
    let p = prepare(&d, &spec(&root), &out);
    let ArchiveOutput::File(file) = p.archive else {
        unreachable!()
    };
    let work = tmp.path().join("small-work");
    let mut g = c.benchmark_group("verify_extract_small");
    g.sample_size(20);
    g.throughput(Throughput::Elements(1000));
    g.bench_function("1000_files_10KiB", |b| {
        b.iter_custom(|iters| time_setups(iters, &e, &file, &work))
    });
    g.finish();

    // Delta capture: 50 MB text tree, 2 files changed.
    let root = tmp.path().join("text50");
    let p = prepare(&d, &spec(&root), &out);
    let ArchiveOutput::File(file) = p.archive else {
        unreachable!()
    };
    let work = tmp.path().join("delta-work");
    setup(&e, &file, &work);
    fs::write(work.join("ws/d0/f0.dat"), b"changed one").unwrap();
    fs::write(work.join("ws/d1/f1.dat"), b"changed two").unwrap();
    let mut g = c.benchmark_group("delta_capture");
    g.sample_size(20);
    g.bench_function("50MB_2_changed", |b| {
        b.iter(|| {
            let s = e
                .capture(
                    &work,
                    SnapshotKind::Delta,
                    &Delivery::Inline,
                    &CancelFlag::new(),
                )
                .unwrap();
            assert_eq!(s.changed.len(), 2);
            black_box(s)
        })
    });
    g.finish();
}

criterion_group!(archive, benches);
criterion_main!(archive);
