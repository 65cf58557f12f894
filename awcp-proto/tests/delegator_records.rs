//! Delegator journal records: today's (version 0, unversioned) records, captured from the
//! engine before records became types (`tests/fixtures/delegator_records_v0/`), still load, keep
//! every field, and resume as they did.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)] // test code

use awcp_proto::engine::delegator::{
    DelegationRecord, RecordError, SnapshotStatus, SourceEntry, StatusEntry, RECORD_VERSION,
};
use awcp_proto::{
    DelegationId, DelegationState, Delegator, DelegatorConfig, DelegatorOutput, Timestamp,
};

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/delegator_records_v0"
);

fn fixture(name: &str) -> serde_json::Value {
    let path = format!("{FIXTURES}/{name}.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

fn all_fixtures() -> Vec<(String, serde_json::Value)> {
    let mut names: Vec<String> = std::fs::read_dir(FIXTURES)
        .unwrap()
        .map(|e| {
            e.unwrap()
                .path()
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    assert!(names.len() >= 8, "fixtures missing: {names:?}");
    names
        .into_iter()
        .map(|n| (n.clone(), fixture(&n)))
        .collect()
}

fn now() -> Timestamp {
    Timestamp::from_unix_millis(1_700_000_010_000)
}

fn id() -> DelegationId {
    DelegationId::new("dlg_engine_test").unwrap()
}

fn restored(name: &str) -> (Delegator, Vec<DelegatorOutput>) {
    let rec = DelegationRecord::from_json(&fixture(name)).unwrap();
    let mut d = Delegator::new(DelegatorConfig::default());
    assert_eq!(d.restore(now(), &[rec], &Default::default()), 1, "{name}");
    let out = std::iter::from_fn(|| d.poll_output()).collect();
    (d, out)
}

#[test]
fn version_0_records_load_and_keep_every_field() {
    for (name, v0) in all_fixtures() {
        let rec = DelegationRecord::from_json(&v0).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(rec.version, RECORD_VERSION);
        // Written back, the record is today's object plus `version`, the driver's `sources`
        // list included.
        let mut expected = v0.clone();
        let obj = expected.as_object_mut().unwrap();
        obj.insert("version".into(), RECORD_VERSION.into());
        assert_eq!(rec.to_json(), expected, "{name}");
    }
}

#[test]
fn records_written_now_read_back_equal() {
    for (name, v0) in all_fixtures() {
        let rec = DelegationRecord::from_json(&v0).unwrap();
        let mut d = Delegator::new(DelegatorConfig::default());
        d.restore(now(), std::slice::from_ref(&rec), &Default::default());
        let again = d.record(&id()).unwrap();
        let back = DelegationRecord::from_json(&again.to_json()).unwrap();
        assert_eq!(back, again, "{name}");
        // The line the journal writes is the same JSON, read back the same.
        let line: serde_json::Value =
            serde_json::from_str(&again.to_json_string().unwrap()).unwrap();
        assert_eq!(line, again.to_json(), "{name}");
        assert_eq!(DelegationRecord::from_json(&line).unwrap(), again, "{name}");
    }
}

#[test]
fn sources_are_read_from_every_record_even_one_that_is_refused() {
    let with_sources: Vec<_> = all_fixtures()
        .into_iter()
        .filter(|(_, v)| v.get("sources").is_some())
        .collect();
    assert!(!with_sources.is_empty(), "no fixture has sources");
    for (name, v0) in with_sources {
        let (rid, sources) = DelegationRecord::sources_of(&v0).unwrap();
        assert_eq!(rid, id(), "{name}");
        assert_eq!(
            DelegationRecord::from_json(&v0).unwrap().sources,
            sources,
            "{name}"
        );
        let want: Vec<SourceEntry> = serde_json::from_value(v0["sources"].clone()).unwrap();
        assert_eq!(sources, want, "{name}");
        assert!(!sources.is_empty(), "{name}");
        // A newer delegator's record is refused, but its sources still read.
        let mut newer = v0.clone();
        newer["version"] = (RECORD_VERSION + 1).into();
        newer["state"] = "flying".into();
        assert!(DelegationRecord::from_json(&newer).is_err());
        assert_eq!(
            DelegationRecord::sources_of(&newer).unwrap().1,
            sources,
            "{name}"
        );
        // An unreadable entry is skipped, the others kept.
        let mut damaged = v0.clone();
        damaged["sources"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"name": "x", "path": "/x", "mode": "sideways"}));
        assert_eq!(
            DelegationRecord::sources_of(&damaged).unwrap().1,
            sources,
            "{name}"
        );
        assert_eq!(
            DelegationRecord::from_json(&damaged).unwrap().sources,
            sources,
            "{name}"
        );
    }
}

#[test]
fn a_record_from_a_newer_delegator_is_refused() {
    let mut v = fixture("created");
    v["version"] = (RECORD_VERSION + 1).into();
    assert_eq!(
        DelegationRecord::from_json(&v),
        Err(RecordError::TooNew(RECORD_VERSION + 1))
    );
    let mut v = fixture("created");
    v["state"] = "flying".into();
    assert!(matches!(
        DelegationRecord::from_json(&v),
        Err(RecordError::Malformed(_))
    ));
}

#[test]
fn version_0_records_resume_as_before() {
    // Created before the restart: abandoned (nothing was sent).
    let (d, _) = restored("created");
    assert_eq!(d.get(&id()).unwrap().state, DelegationState::Error);

    // Running with a snapshot being stored: the store is forgotten (its leftover bytes
    // deleted) and the event stream reopened to receive it again.
    let (d, out) = restored("running_storing");
    let v = d.get(&id()).unwrap();
    assert_eq!(v.state, DelegationState::Running);
    assert!(v.snapshots.is_empty());
    assert!(out
        .iter()
        .any(|o| matches!(o, DelegatorOutput::DeleteStoredSnapshot { .. })));
    assert!(out
        .iter()
        .any(|o| matches!(o, DelegatorOutput::OpenEventStream { .. })));

    // Completed with an apply in flight (bytes stored): pending again, with the reason.
    let (d, _) = restored("completed_applying");
    let snap = &d.get(&id()).unwrap().snapshots[0];
    assert_eq!(snap.status, SnapshotStatus::Pending);
    assert!(snap
        .error
        .as_ref()
        .unwrap()
        .message
        .contains("stopped while applying"));

    // A failed store stays failed; the executor is not acknowledged.
    let (d, out) = restored("completed_store_failed");
    assert!(matches!(
        d.get(&id()).unwrap().snapshots[0].status,
        SnapshotStatus::Failed(_)
    ));
    assert!(!out
        .iter()
        .any(|o| matches!(o, DelegatorOutput::SendAck { .. })));

    // Ended: kept for listing; nothing to do but delete bytes the applied snapshot may have
    // left if the process stopped between journalling the apply and deleting them.
    let (d, out) = restored("completed_ended");
    let v = d.get(&id()).unwrap();
    assert!(v.ended);
    assert_eq!(v.warnings, vec!["w1".to_string()]);
    assert!(
        out.iter()
            .all(|o| matches!(o, DelegatorOutput::DeleteStoredSnapshot { .. })),
        "{out:?}"
    );
}

#[test]
fn snapshot_statuses_keep_their_record_shape() {
    let v = fixture("completed_store_failed");
    let rec = DelegationRecord::from_json(&v).unwrap();
    assert!(matches!(
        rec.snapshots[0].status,
        StatusEntry::Failed { error: Some(_) }
    ));
    assert_eq!(rec.to_json()["snapshots"][0]["status"]["status"], "failed");
}
