//! The journal's tests, on real files.

use super::*;
use serde_json::json;
use std::time::Duration;

fn id() -> DelegationId {
    DelegationId::new("dlg_journal").unwrap()
}

fn state(n: usize) -> Value {
    json!({"id": "dlg_journal", "version": 1, "state": format!("s{n}"), "pad": "x".repeat(n)})
}

#[test]
fn a_first_record_is_durable_later_ones_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::at(dir.path().to_path_buf());
    let text = |n| state(n).to_string();
    let write = |n, durable| j.write_record(&id(), &text(n), durable).unwrap();
    assert!(write(0, false), "a new file is written atomically");
    assert!(!write(1, false), "an append without a sync");
    assert!(write(2, true));
    assert!(!write(3, false));
    j.sync(&id());
    assert_eq!(j.load(), vec![state(3)]);
}

#[test]
fn the_last_record_written_is_the_one_loaded_and_one_file_holds_them() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::at(dir.path().to_path_buf());
    for n in 0..5 {
        j.write(&id(), &state(n));
    }
    assert_eq!(j.load(), vec![state(4)]);
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    assert_eq!(names.len(), 1, "no temp files left: {names:?}");
    j.remove(&id());
    assert!(j.load().is_empty());
}

/// A crash may cut the last append anywhere (or leave zeros where its data should be):
/// the reader then sees the record before it, and the next write after the restart is the
/// one read back.
#[test]
fn a_torn_append_at_any_byte_falls_back_to_the_previous_record() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::at(dir.path().to_path_buf());
    j.write(&id(), &state(1));
    j.write(&id(), &state(2));
    let file = dir.path().join("dlg_journal.json");
    let whole = std::fs::read(&file).unwrap();
    j.write(&id(), &state(3));
    let with_third = std::fs::read(&file).unwrap();
    for cut in whole.len()..with_third.len() {
        let torn = &with_third[..cut];
        let expect = if cut + 1 >= with_third.len() {
            state(3) // only the final newline is missing: the record is whole
        } else {
            state(2)
        };
        assert_eq!(read_record(torn), Some(expect.clone()), "cut at {cut}");
        let mut zeroed = torn.to_vec();
        zeroed.resize(with_third.len(), 0);
        if cut + 1 < with_third.len() {
            assert_eq!(read_record(&zeroed), Some(state(2)), "zeros from {cut}");
        }
        // Restart after the crash: the next record is appended after the torn tail.
        std::fs::write(&file, torn).unwrap();
        j.write(&id(), &state(4));
        assert_eq!(j.load(), vec![state(4)], "write after a cut at {cut}");
    }
}

#[test]
fn a_single_document_of_an_older_release_reads_and_takes_appends() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::at(dir.path().to_path_buf());
    let file = dir.path().join("dlg_journal.json");
    // Older releases wrote one compact document without a newline; operators may pretty-print.
    std::fs::write(&file, state(1).to_string()).unwrap();
    assert_eq!(j.load(), vec![state(1)]);
    std::fs::write(&file, serde_json::to_vec_pretty(&state(2)).unwrap()).unwrap();
    assert_eq!(j.load(), vec![state(2)]);
    j.write(&id(), &state(3));
    assert_eq!(j.load(), vec![state(3)]);
    assert_eq!(read_record_file(&file), Some(state(3)));
}

#[test]
fn a_long_log_is_compacted_to_its_newest_record() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::at(dir.path().to_path_buf());
    let file = dir.path().join("dlg_journal.json");
    for n in 0..200 {
        j.write(&id(), &state(1000 + n));
        assert!(
            std::fs::metadata(&file).unwrap().len() <= COMPACT_AT + 4096,
            "bounded at write {n}"
        );
    }
    assert_eq!(j.load(), vec![state(1199)]);
}

/// `Written` appends a record only when it differs from the one it last wrote for that
/// delegation (compared by digest): the same text twice is one line; a different one, the
/// same one after another delegation's, and the same one after a removal are written.
#[test]
fn an_unchanged_record_is_not_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::at(dir.path().to_path_buf());
    let other = DelegationId::new("dlg_other").unwrap();
    let mut w = Written::default();
    let len = || std::fs::metadata(dir.path().join("dlg_journal.json")).map(|m| m.len());
    w.write(&j, &id(), state(1).to_string(), false);
    let one = len().unwrap();
    w.write(&j, &id(), state(1).to_string(), true);
    assert_eq!(len().unwrap(), one, "the same record is not appended again");
    assert!(w.unsynced.is_empty(), "but the durable ask synced it");
    w.write(&j, &other, state(1).to_string(), false);
    w.write(&j, &id(), state(1).to_string(), false);
    assert_eq!(
        len().unwrap(),
        one,
        "another delegation's record changes nothing here"
    );
    w.write(&j, &id(), state(2).to_string(), false);
    assert!(len().unwrap() > one, "a changed record is appended");
    w.remove(&j, &id());
    assert!(len().is_err());
    w.write(&j, &id(), state(2).to_string(), false);
    assert_eq!(
        read_record_file(&dir.path().join("dlg_journal.json")),
        Some(state(2))
    );
}

/// `Written` keeps the file it last appended to open: appends and syncs through it land in
/// the file on disk under the record's name, also across compactions (which replace the
/// file), removals, and records of other delegations written in between.
#[test]
fn written_records_reach_the_named_file_through_compaction_removal_and_interleaving() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::at(dir.path().to_path_buf());
    let other = DelegationId::new("dlg_other").unwrap();
    let mut w = Written::default();
    let on_disk = |d: &DelegationId| read_record_file(&dir.path().join(format!("{d}.json")));
    for n in 0..300 {
        // Large enough that the log is compacted (the file replaced) several times.
        w.write(&j, &id(), state(1000 + n).to_string(), n % 3 == 0);
        assert_eq!(on_disk(&id()), Some(state(1000 + n)), "write {n}");
        if n % 7 == 0 {
            w.write(&j, &other, state(n).to_string(), false);
            assert_eq!(on_disk(&other), Some(state(n)), "other at {n}");
        }
        if n % 5 == 0 {
            w.sync(&j, &id());
        }
    }
    assert!(
        std::fs::metadata(dir.path().join("dlg_journal.json"))
            .unwrap()
            .len()
            <= COMPACT_AT + 4096,
        "still compacted"
    );
    w.sync_all(&j);
    assert!(w.unsynced.is_empty());
    w.remove(&j, &id());
    assert_eq!(on_disk(&id()), None);
    // A new record after the removal is a new file, not an append to the removed one.
    w.write(&j, &id(), state(1).to_string(), false);
    assert_eq!(on_disk(&id()), Some(state(1)));
    w.write(&j, &id(), state(2).to_string(), false);
    assert_eq!(on_disk(&id()), Some(state(2)));
    assert_eq!(j.load().len(), 2);
}

#[test]
fn a_file_with_no_whole_record_is_moved_aside() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::at(dir.path().to_path_buf());
    std::fs::write(dir.path().join("dlg_torn.json"), b"{\"id\": \"dlg_t").unwrap();
    assert!(j.load().is_empty());
    assert!(dir.path().join("dlg_torn.json.unreadable").exists());
}

/// A retired record leaves what `load` reads for the history, is read back by
/// `load_history`, can be written again (and retired again, replacing the history's copy)
/// and is removed from both places.
#[test]
fn a_retired_record_moves_to_the_history_and_back_out_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("ended");
    let j = Journal::at(dir.path().join("live")).with_history(history.clone());
    let mut w = Written::default();
    w.write(&j, &id(), state(0).to_string(), false);
    w.write(&j, &id(), state(1).to_string(), false);
    assert!(!w.unsynced.is_empty(), "an append, not synced");
    w.retire(&j, &id());
    assert!(w.unsynced.is_empty(), "synced before it moved");
    assert!(j.load().is_empty(), "start-up does not read it");
    assert_eq!(j.load_history(), vec![state(1)]);
    // A later change (never expected of a settled delegation) is live again, then
    // retired over the history's copy.
    w.write(&j, &id(), state(2).to_string(), false);
    assert_eq!(j.load(), vec![state(2)]);
    w.retire(&j, &id());
    assert!(j.load().is_empty());
    assert_eq!(j.load_history(), vec![state(2)]);
    w.remove(&j, &id());
    assert!(j.load_history().is_empty());
    assert_eq!(std::fs::read_dir(&history).unwrap().count(), 0);
}

/// The sweep removes history records older than the retention, at most once per
/// `SWEEP_EVERY`, and nothing else.
#[test]
fn the_sweep_removes_only_what_outlived_its_retention_and_runs_daily() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("ended");
    let j = Journal::at(dir.path().join("live")).with_history(history.clone());
    assert!(
        j.sweep_history(Duration::from_secs(60)).is_empty(),
        "no history yet"
    );
    std::fs::create_dir_all(&history).unwrap();
    let old = DelegationId::new("dlg_old").unwrap();
    let new = DelegationId::new("dlg_new").unwrap();
    for d in [&old, &new] {
        std::fs::write(history.join(format!("{d}.json")), state(1).to_string()).unwrap();
    }
    std::fs::write(history.join("notes.txt"), "kept").unwrap();
    let long_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    let age = |name: &str| {
        std::fs::File::options()
            .write(true)
            .open(history.join(name))
            .unwrap()
            .set_modified(long_ago)
            .unwrap()
    };
    age("dlg_old.json");
    age("notes.txt");
    assert_eq!(j.sweep_history(Duration::from_secs(60)), vec![old.clone()]);
    assert!(history.join("dlg_new.json").exists());
    assert!(history.join("notes.txt").exists());
    // Not again within a day, even with more to remove.
    age("dlg_new.json");
    assert!(j.sweep_history(Duration::from_secs(60)).is_empty());
    assert!(history.join("dlg_new.json").exists());
    age(".swept");
    let long_ago = std::time::SystemTime::now() - SWEEP_EVERY - Duration::from_secs(60);
    std::fs::File::options()
        .write(true)
        .open(history.join(".swept"))
        .unwrap()
        .set_modified(long_ago)
        .unwrap();
    assert_eq!(j.sweep_history(Duration::from_secs(60)), vec![new]);
}
