//! SSHFS transport figures on loopback, against a private sshd (needs root, sshd, sshfs and
//! /dev/fuse, like the tests):
//!
//! ```text
//! cargo bench -p awcp-tests --bench sshfs
//! ```
//!
//! Prints: delegator prepare (key, certificate, bind mount, principal), executor mount until
//! the first file is readable (what happens between START and the task seeing its files), and
//! 4 KiB small-file write and read rates through the mount (reads after a remount, so they
//! are not served from the page cache). Each figure is the median of `RUNS` runs.

#[path = "../tests/sshfs_support/mod.rs"]
mod sshfs_support;

use std::time::{Duration, Instant};

use awcp_proto::{AccessMode, DelegationId, ResourceName, Timestamp, TransportHandle};
use awcp_transports::{
    CancelFlag, DelegatorTransport, Delivery, ExecutorTransport, ExportViewKind, Layout,
    PrepareRequest, ResourceSpec,
};

const RUNS: usize = 5;
const FILES: usize = 500;
const SIZE: usize = 4096;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if let Some(why) = sshfs_support::missing_prerequisite() {
        eprintln!("SKIPPED: the sshfs benchmark needs a real sshd and FUSE: {why}");
        return;
    }
    let fx = sshfs_support::Sshd::start();
    let x = fx.executor();
    let data = vec![b'x'; SIZE];
    let (mut prep, mut mount, mut write, mut read) = (vec![], vec![], vec![], vec![]);
    for run in 0..RUNS {
        let id = DelegationId::new(format!("bench-{run}")).unwrap();
        let res = [ResourceSpec {
            name: ResourceName::new("workspace").unwrap(),
            source_path: fx.workspace.clone(),
            mode: AccessMode::Rw,
        }];
        let req = PrepareRequest {
            delegation_id: &id,
            resources: &res,
            access_mode: AccessMode::Rw,
            export: ExportViewKind::default(),
            delivery: Delivery::Inline,
            layout: Layout::PerResource,
            admission: None,
            allow_sensitive: false,
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let expires = Timestamp::from_unix_millis(now.as_millis() as u64 + 600_000);
        let t0 = Instant::now();
        let h: TransportHandle = fx
            .delegator
            .prepare_live(&req, expires, &CancelFlag::new())
            .unwrap();
        prep.push(t0.elapsed());

        let work = fx.work_root.join(id.as_str());
        let t1 = Instant::now();
        x.setup_live(&work, &h, AccessMode::Rw, &CancelFlag::new())
            .unwrap();
        let first = std::fs::read(work.join("workspace/a.txt")).unwrap();
        mount.push(t1.elapsed());
        assert!(!first.is_empty());

        let dir = work.join("workspace").join(format!("bench-{run}"));
        std::fs::create_dir(&dir).unwrap();
        let t2 = Instant::now();
        for i in 0..FILES {
            std::fs::write(dir.join(format!("f{i}")), &data).unwrap();
        }
        write.push(t2.elapsed());

        x.release(&work).unwrap();
        x.setup_live(&work, &h, AccessMode::Rw, &CancelFlag::new())
            .unwrap();
        let t3 = Instant::now();
        for i in 0..FILES {
            let b = std::fs::read(dir.join(format!("f{i}"))).unwrap();
            assert_eq!(b.len(), SIZE);
        }
        read.push(t3.elapsed());
        std::fs::remove_dir_all(&dir).unwrap();
        x.release(&work).unwrap();
        fx.delegator.release(&id).unwrap();
    }
    let rate = |d: Duration| FILES as f64 / d.as_secs_f64();
    let (p, m, w, r) = (median(prep), median(mount), median(write), median(read));
    println!("sshfs on loopback, median of {RUNS} runs, {FILES} files of {SIZE} B:");
    println!("  delegator prepare (key, cert, bind mount, principal): {p:?}");
    println!("  START → first file readable in the mount:            {m:?}");
    println!(
        "  small-file write: {:.0} files/s ({:.2} MiB/s)",
        rate(w),
        rate(w) * SIZE as f64 / 1048576.0
    );
    println!(
        "  small-file read:  {:.0} files/s ({:.2} MiB/s)",
        rate(r),
        rate(r) * SIZE as f64 / 1048576.0
    );
}
