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
    let base = tempfile::tempdir().unwrap();
    let ws = base.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("README.md"), "# tiny\n").unwrap();
    let exdir = base.path().join("executor");
    std::fs::create_dir_all(&exdir).unwrap();
    std::fs::write(exdir.join("agent.sh"), "echo 'seen' > NOTE.md\necho done\n").unwrap();
    let agent = format!("sh {}", exdir.join("agent.sh").display());
    let log = base.path().join("executor.strace");
    let mut cmd = strace::command(&bins::path("awcp-executor"), &log);
    let plain = bins::executor_command(&exdir, &agent);
    cmd.args(plain.get_args()).stderr(Stdio::null());
    let (child, peer) = bins::spawn_announcing(&mut cmd, bins::EXECUTOR_ANNOUNCES);
    let traced = Traced(child);

    let state = base.path().join("delegator");
    let dlog = base.path().join("delegator.strace");
    let o = strace::command(&bins::path("awcp"), &dlog)
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

    let lines = strace::lines(&log);
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

    let exstate = exdir.join("state").display().to_string();
    let left = renames_left_undurable(&lines, &exstate);
    assert!(left.is_empty(), "executor: {left:#?}\n{text}");
    let dlines = strace::lines(&dlog);
    let renamed = dlines
        .iter()
        .filter(|l| is_rename(l) && second_quoted(l).starts_with(&*state.to_string_lossy()))
        .count();
    assert!(
        renamed >= 3,
        "record, baseline, stored snapshot:\n{}",
        dlines.join("\n")
    );
    let left = renames_left_undurable(&dlines, &state.display().to_string());
    assert!(
        left.is_empty(),
        "delegator: {left:#?}\n{}",
        dlines.join("\n")
    );
}
