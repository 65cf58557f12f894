//! What the real binaries make durable, read from their system calls (`strace`): after a power
//! loss only what was synced is on disk. (The delegator's apply is checked in `apply_crash.rs`.)

use std::process::Stdio;

use awcp_tests::bins::{self, show};
use awcp_tests::strace::{self, first_quoted, is_rename, second_quoted, Traced};

/// The renames in `lines` into `state` of a file something is recovered from (a record, a
/// baseline, a snapshot: `.json`, `.zip`) that no later sync of its directory makes durable.
fn renames_left_undurable(lines: &[String], state: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if !is_rename(l) {
            continue;
        }
        let to = second_quoted(l);
        if !to.starts_with(state) || !(to.ends_with(".json") || to.ends_with(".zip")) {
            continue;
        }
        let dir = &to[..to.rfind('/').expect("a path")];
        if !lines[i..].iter().any(|l| strace::syncs(l, dir)) {
            out.push(l.clone());
        }
    }
    out
}

/// One tiny delegation, `awcp delegate` against `awcp-executor` (whose agent writes
/// `NOTE.md`), both under `strace` tracing `calls`: what each traced, and their state
/// directories.
struct TracedRun {
    _base: tempfile::TempDir,
    executor: Vec<String>,
    executor_state: String,
    delegator: Vec<String>,
    delegator_state: String,
}

fn traced_delegation(calls: &str) -> TracedRun {
    let base = tempfile::tempdir().unwrap();
    let ws = base.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("README.md"), "# tiny\n").unwrap();
    let exdir = base.path().join("executor");
    std::fs::create_dir_all(&exdir).unwrap();
    std::fs::write(exdir.join("agent.sh"), "echo 'seen' > NOTE.md\necho done\n").unwrap();
    let agent = format!("sh {}", exdir.join("agent.sh").display());
    let log = base.path().join("executor.strace");
    let mut cmd = strace::command_tracing(&bins::path("awcp-executor"), &log, calls);
    let plain = bins::executor_command(&exdir, &agent);
    cmd.args(plain.get_args()).stderr(Stdio::null());
    let (child, peer) = bins::spawn_announcing(&mut cmd, bins::EXECUTOR_ANNOUNCES);
    let traced = Traced(child);

    let state = base.path().join("delegator");
    let dlog = base.path().join("delegator.strace");
    let o = strace::command_tracing(&bins::path("awcp"), &dlog, calls)
        .args(["--quiet", "--json", "delegate"])
        .arg(&ws)
        .args(["--peer", &peer, "--prompt", "note", "--state-dir"])
        .arg(&state)
        .output()
        .expect("strace runs (.ci/run installs it)");
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(
        std::fs::read_to_string(ws.join("NOTE.md")).unwrap(),
        "seen\n"
    );
    drop(traced);
    TracedRun {
        executor: strace::lines(&log),
        executor_state: exdir.join("state").display().to_string(),
        delegator: strace::lines(&dlog),
        delegator_state: state.display().to_string(),
        _base: base,
    }
}

/// What a record names must be on disk under that name, on both sides of a delegation through
/// the real binaries (`awcp delegate` and `awcp-executor`, each under `strace`):
/// - An executor serving its result by URL keeps it across a restart: the record that names
///   the snapshot file is synced before the delegator hears of it, and the work directory it
///   was captured from is released. The file itself must be synced before it takes its served
///   name, else a power loss leaves a record pointing at an empty file and the task's work lost.
/// - Every file either side renames into place and later recovers from (journal records, the
///   delegator's baseline and stored snapshot, the executor's served snapshot) has its
///   directory synced after the rename: syncing the file does not make its new name durable on
///   every file system (ext4 without its journal writes directories back up to 30 s later).
#[test]
fn what_the_records_name_is_on_disk_under_that_name() {
    if !strace::available("what_the_records_name_is_on_disk_under_that_name") {
        return;
    }
    let run = traced_delegation("fsync,fdatasync,syncfs,rename,renameat,renameat2");
    let lines = &run.executor;

    let text = lines.join("\n");
    // The snapshot taking its served name, `<state>/snapshots/<delegation>/snap_….zip` (the
    // transport's own renames, of its packing file, come before).
    let put = lines
        .iter()
        .position(|l| {
            is_rename(l) && {
                let to = second_quoted(l);
                to.contains("/snapshots/dlg_") && to.contains("/snap_") && to.ends_with(".zip")
            }
        })
        .unwrap_or_else(|| panic!("no snapshot put in place:\n{text}"));
    let captured = first_quoted(&lines[put]).to_owned();
    assert!(
        lines[..put].iter().any(|l| strace::syncs(l, &captured)),
        "{captured} renamed into place unsynced:\n{text}"
    );

    let left = renames_left_undurable(lines, &run.executor_state);
    assert!(left.is_empty(), "executor: {left:#?}\n{text}");
    let dlines = &run.delegator;
    let renamed = dlines
        .iter()
        .filter(|l| is_rename(l) && second_quoted(l).starts_with(&run.delegator_state))
        .count();
    assert!(
        renamed >= 3,
        "record, baseline, stored snapshot:\n{}",
        dlines.join("\n")
    );
    let left = renames_left_undurable(dlines, &run.delegator_state);
    assert!(
        left.is_empty(),
        "delegator: {left:#?}\n{}",
        dlines.join("\n")
    );
}

/// The journal keeps the record file it last appended to open (`Written`): on both sides,
/// every write to a record goes to the file under the record's name (never to one replaced or
/// removed meanwhile, which `strace -y` shows as `(deleted)`), and each record's last write is
/// followed by a sync of that file.
#[test]
fn record_appends_go_to_the_named_file_and_are_synced() {
    if !strace::available("record_appends_go_to_the_named_file_and_are_synced") {
        return;
    }
    let run = traced_delegation("write,fsync,fdatasync");
    for (side, lines, records) in [
        (
            "executor",
            &run.executor,
            format!("{}/assignments/", run.executor_state),
        ),
        (
            "delegator",
            &run.delegator,
            format!("{}/delegations/", run.delegator_state),
        ),
    ] {
        let text = lines.join("\n");
        let on_record = |l: &str| l.contains(&format!("<{records}dlg_"));
        let stale: Vec<&String> = lines
            .iter()
            .filter(|l| on_record(l) && l.contains("(deleted)>"))
            .collect();
        assert!(stale.is_empty(), "{side}: {stale:#?}");
        let appends: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].contains("write(") && on_record(&lines[i]))
            .collect();
        assert!(appends.len() >= 2, "{side}: records appended to:\n{text}");
        let last = *appends.last().unwrap();
        let path = {
            let l = &lines[last];
            let from = l.find(&records).unwrap();
            &l[from..from + l[from..].find('>').unwrap()]
        };
        assert!(
            lines[last..].iter().any(|l| strace::syncs(l, path)),
            "{side}: the last write to {path} is never synced:\n{text}"
        );
    }
}
