//! What the real binaries make durable, read from their system calls (`strace`): after a power
//! loss only what was synced is on disk. (The delegator's apply is checked in `apply_crash.rs`.)

use std::process::Stdio;

use awcp_tests::bins::{self, awcp, show};
use awcp_tests::strace::{self, first_quoted, is_rename, second_quoted, Traced};

/// An executor serving its result by URL keeps it across a restart: the record that names the
/// snapshot file is synced before the delegator hears of it, and the work directory it was
/// captured from is released. The file itself must be on disk before it takes its served
/// name, else a power loss leaves a record pointing at an empty file and the task's work lost.
#[test]
fn a_snapshot_served_by_url_is_synced_before_it_is_put_in_place() {
    let base = tempfile::tempdir().unwrap();
    let ws = base.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("README.md"), "# tiny\n").unwrap();
    let exdir = base.path().join("executor");
    std::fs::create_dir_all(&exdir).unwrap();
    std::fs::write(exdir.join("agent.sh"), "echo 'seen' > NOTE.md\necho done\n").unwrap();
    let agent = format!("sh {}", exdir.join("agent.sh").display());
    let log = base.path().join("strace.log");
    let mut cmd = strace::command(&bins::path("awcp-executor"), &log);
    let plain = bins::executor_command(&exdir, &agent);
    cmd.args(plain.get_args()).stderr(Stdio::null());
    let (child, peer) = bins::spawn_announcing(&mut cmd, bins::EXECUTOR_ANNOUNCES);
    let traced = Traced(child);

    let o = awcp(&[
        "--json",
        "delegate",
        ws.to_str().unwrap(),
        "--peer",
        &peer,
        "--prompt",
        "note",
        "--state-dir",
        base.path().join("delegator").to_str().unwrap(),
    ]);
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
}
