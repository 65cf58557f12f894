//! Unit tests of the coordinator and of restart recovery (mechanism tests sit beside their
//! files; two-engine scenarios in `crate::engine::pair`).

#![allow(clippy::wildcard_enum_match_arm)]

use super::*;
use crate::engine::TaskHandle;
use crate::error::ErrorCode;
use crate::id::ResourceName;
use crate::wire::{
    AccessMode, Feature, Invite, LeaseRequest, Message, Resource, TaskSpec, TransportKind,
};

/// A plain archive INVITE for `id` (rw, 600 s, one resource `workspace`).
pub(crate) fn invite(id: &DelegationId) -> Invite {
    Invite {
        delegation_id: id.clone(),
        task: TaskSpec {
            description: "d".into(),
            prompt: "p".into(),
        },
        lease: LeaseRequest {
            ttl_seconds: 600,
            access_mode: AccessMode::Rw,
        },
        resources: vec![Resource {
            name: ResourceName::new("workspace").unwrap(),
            kind: "fs".into(),
            mode: AccessMode::Rw,
        }],
        export_name: None,
        retention_ms: None,
        transport: Some(TransportKind::Archive),
        auth: None,
        features: Vec::new(),
    }
}

/// A journal record of an assignment that was running when the executor crashed.
fn running_record(ex: &Executor, id: &DelegationId, task: Option<&str>) -> serde_json::Value {
    serde_json::json!({
        "id": id.as_str(),
        "invite": crate::wire::message_to_value(&Message::Invite(invite(id)), Dialect::Reference),
        "dialect": "reference",
        "state": "active",
        "workDir": ex.work_dir_for(id),
        "allocated": true,
        "released": false,
        "transport": "archive",
        "task": task,
        "retentionMs": 60_000,
    })
}

fn drain(ex: &mut Executor) -> Vec<ExecutorOutput> {
    std::iter::from_fn(|| ex.poll_output()).collect()
}

const T0: Timestamp = Timestamp::from_unix_millis(1_750_000_000_000);

#[test]
fn a_restart_ends_the_recorded_task_then_releases_the_recorded_work_dir() {
    let mut ex = Executor::new(ExecutorConfig {
        work_root: "/w".into(),
        ..ExecutorConfig::default()
    });
    let id = DelegationId::new("dlg_a").unwrap();
    let rec = running_record(&ex, &id, Some("123:456:boot"));
    assert_eq!(ex.restore(T0, &[rec]), 1);
    let out = drain(&mut ex);
    assert_eq!(
        out,
        vec![ExecutorOutput::EndTask {
            id: id.clone(),
            handle: TaskHandle("123:456:boot".into())
        }]
    );
    assert_eq!(ex.live_count(), 1, "held until cleaned up");
    ex.handle(
        T0,
        ExecutorInput::TaskFinished {
            id: id.clone(),
            result: Err(TaskFailure::Stopped),
        },
    )
    .unwrap();
    let out = drain(&mut ex);
    assert!(
        matches!(&out[..], [ExecutorOutput::Release { id: i, work_dir, transport }]
                if *i == id && work_dir == "/w/dlg_a" && *transport == TransportKind::Archive),
        "{out:?}"
    );
    ex.handle(
        T0,
        ExecutorInput::Released {
            id: id.clone(),
            result: Ok(()),
        },
    )
    .unwrap();
    let out = drain(&mut ex);
    assert!(out.iter().any(|o| matches!(o,
            ExecutorOutput::Event(ExecutorEvent::Ended { state: AssignmentState::Error, error: Some(e), .. })
                if e.code == ErrorCode::TaskFailed)));
    assert_eq!(ex.live_count(), 0);
    let rec = ex.record(&id).unwrap();
    assert_eq!(rec["released"], true);
    assert!(rec["task"].is_null());
}

/// A completed assignment whose result was to be sent inline (not kept across a restart) is
/// restored as failed, saying why; one whose result is kept (by URL) or that had none stays
/// completed.
#[test]
fn a_restart_reports_an_inline_result_lost_instead_of_a_completed_task_without_it() {
    let mut ex = Executor::new(ExecutorConfig {
        work_root: "/w".into(),
        ..ExecutorConfig::default()
    });
    let completed = |ex: &Executor, name: &str, inline: Option<&str>| {
        let id = DelegationId::new(name).unwrap();
        let mut rec = running_record(ex, &id, None);
        rec["state"] = "completed".into();
        rec["released"] = true.into();
        rec["outcome"] = serde_json::json!({"summary": "wrote notes", "highlights": []});
        if let Some(sid) = inline {
            rec["inlineSnapshotId"] = sid.into();
        }
        (id, rec)
    };
    let (lost, a) = completed(&ex, "dlg_lost", Some("snap_0123456789ab"));
    let (plain, b) = completed(&ex, "dlg_plain", None);
    assert_eq!(ex.restore(T0, &[a, b]), 2);
    let terminal = |ex: &Executor, id: &DelegationId| {
        let a = ex.assignments.get(id).unwrap();
        (a.state(), a.terminal_event.as_ref().map(|e| e.kind.clone()))
    };
    match terminal(&ex, &lost) {
        (AssignmentState::Error, Some(crate::wire::TaskEventKind::Error(e))) => {
            assert_eq!(e.code, ErrorCode::TaskFailed);
            assert!(
                e.message.contains("restarted") && e.message.contains("lost"),
                "{e:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        terminal(&ex, &plain),
        (
            AssignmentState::Completed,
            Some(crate::wire::TaskEventKind::Done(_))
        )
    ));
    // Journaled back as what it now is.
    assert_eq!(ex.record(&lost).unwrap()["state"], "error");
}

#[test]
fn a_restored_assignment_uses_only_the_extensions_this_executor_supports() {
    // The INVITE offered both; this executor (restarted with a narrower configuration) takes
    // part in delta snapshots only, as admission would have agreed.
    let mut ex = Executor::new(ExecutorConfig {
        work_root: "/w".into(),
        features: vec![Feature::DeltaSnapshots],
        ..ExecutorConfig::default()
    });
    let id = DelegationId::new("dlg_f").unwrap();
    let mut offered = invite(&id);
    offered.features = vec![Feature::ArchiveUrl, Feature::DeltaSnapshots];
    let mut rec = running_record(&ex, &id, None);
    rec["invite"] = crate::wire::message_to_value(&Message::Invite(offered), Dialect::Reference);
    assert_eq!(ex.restore(T0, &[rec]), 1);
    assert_eq!(
        ex.assignments.get(&id).map(|a| a.features.clone()),
        Some(vec![Feature::DeltaSnapshots])
    );
}

#[test]
fn a_restart_never_releases_a_work_dir_outside_its_work_root() {
    let mut ex = Executor::new(ExecutorConfig {
        work_root: "/w".into(),
        ..ExecutorConfig::default()
    });
    let id = DelegationId::new("dlg_b").unwrap();
    let mut rec = running_record(&ex, &id, None);
    rec["workDir"] = "/home/someone".into();
    assert_eq!(ex.restore(T0, &[rec]), 1);
    assert!(
        drain(&mut ex).is_empty(),
        "nothing of /home/someone is touched"
    );
    assert_eq!(ex.live_count(), 0);
    // Not allocated: nothing to release either.
    let mut ex = Executor::new(ExecutorConfig {
        work_root: "/w".into(),
        ..ExecutorConfig::default()
    });
    let mut rec = running_record(&ex, &id, None);
    rec["allocated"] = false.into();
    ex.restore(T0, &[rec]);
    // An interrupted allocation: at most an empty directory is removed.
    assert_eq!(
        drain(&mut ex),
        vec![ExecutorOutput::RemoveEmptyWorkDir {
            id: id.clone(),
            work_dir: "/w/dlg_b".into()
        }]
    );
    ex.handle(T0, ExecutorInput::Released { id, result: Ok(()) })
        .unwrap();
    assert_eq!(ex.live_count(), 0);
}

#[test]
fn a_task_handle_for_an_unknown_assignment_is_refused() {
    let mut ex = Executor::new(ExecutorConfig {
        work_root: "/w".into(),
        ..ExecutorConfig::default()
    });
    let id = DelegationId::new("dlg_c").unwrap();
    // Not running: the handle is ignored.
    assert!(ex
        .handle(
            T0,
            ExecutorInput::TaskSpawned {
                id: id.clone(),
                handle: TaskHandle("1".into())
            }
        )
        .is_err());
}

#[test]
fn system_and_home_directories_are_refused_as_work_roots() {
    for bad in ["/", "/home", "/etc/", "/usr", "/var"] {
        assert!(work_root_refusal(bad, None).is_some(), "{bad}");
    }
    assert!(work_root_refusal("/home/ann", Some("/home/ann/")).is_some());
    assert!(work_root_refusal("/home/ann/.awcp/executor/work", Some("/home/ann")).is_none());
    assert!(work_root_refusal("/tmp/x", Some("/home/ann")).is_none());
}

/// The records today's code wrote before records were types (version 0), captured as fixtures
/// (embedded at compile time: the engine crate's tests touch no filesystem either).
fn v0_fixture(name: &str) -> serde_json::Value {
    macro_rules! fixtures {
        ($($n:literal),*) => {
            [$(($n, include_str!(concat!("../../../tests/fixtures/executor_records/v0/", $n, ".json")))),*]
        };
    }
    let all = fixtures!(
        "pending_allocating",
        "pending_accepted",
        "active_with_task",
        "completed_releasing",
        "completed_released",
        "error_seed_releasing"
    );
    let (_, text) = all
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no fixture {name}"));
    serde_json::from_str(text).unwrap()
}

#[test]
fn version_0_records_migrate_and_are_written_back_unchanged_but_for_the_version() {
    for name in [
        "pending_allocating",
        "pending_accepted",
        "active_with_task",
        "completed_releasing",
        "completed_released",
        "error_seed_releasing",
    ] {
        let v0 = v0_fixture(name);
        assert!(v0.get("version").is_none(), "{name}: a version 0 record");
        let rec = AssignmentRecord::from_value(&v0).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(rec.version, RECORD_VERSION);
        // Written back, a migrated record is the old one plus its version.
        let mut back = serde_json::to_value(&rec).unwrap();
        back.as_object_mut().unwrap().remove("version");
        assert_eq!(back, v0, "{name}");
        let mut ex = Executor::new(ExecutorConfig {
            work_root: "/w".into(),
            ..ExecutorConfig::default()
        });
        assert_eq!(ex.restore(T0, std::slice::from_ref(&v0)), 1, "{name}");
        let id = DelegationId::new("dlg_fixture").unwrap();
        let again = ex.record(&id).unwrap();
        assert_eq!(again["version"], RECORD_VERSION);
        assert_eq!(again["invite"], v0["invite"], "{name}");
        assert_eq!(again["auth"], v0["auth"], "{name}");
        if name == "completed_released" {
            let mut again = again.clone();
            again.as_object_mut().unwrap().remove("version");
            assert_eq!(again, v0, "a finished record survives a restart as it was");
        }
    }
}

#[test]
fn a_version_0_clear_text_credential_becomes_a_digest_and_newer_versions_are_skipped() {
    let mut v0 = v0_fixture("completed_released");
    let o = v0.as_object_mut().unwrap();
    o.remove("auth");
    o.insert("credential".into(), "s3cret".into());
    let rec = AssignmentRecord::from_value(&v0).unwrap();
    let written = serde_json::to_value(&rec).unwrap();
    assert!(
        written.get("credential").is_none(),
        "the secret is never written"
    );
    assert_eq!(written["auth"]["binding"], "header");
    assert_eq!(
        written["auth"]["sha256"],
        v0_fixture("completed_released")["auth"]["sha256"]
    );
    let mut future = v0_fixture("completed_released");
    future["version"] = (RECORD_VERSION + 1).into();
    assert!(AssignmentRecord::from_value(&future).is_none());
    let mut ex = Executor::new(ExecutorConfig::default());
    assert_eq!(ex.restore(T0, &[future]), 0);
}

#[test]
fn restore_says_which_records_were_not_restored_and_why() {
    let mut ex = Executor::new(ExecutorConfig {
        work_root: "/w".into(),
        ..ExecutorConfig::default()
    });
    let ok_id = DelegationId::new("dlg_ok").unwrap();
    let ok = running_record(&ex, &ok_id, None);
    let mut newer = running_record(&ex, &DelegationId::new("dlg_newer").unwrap(), None);
    newer["version"] = (RECORD_VERSION + 1).into();
    // A newer release may have changed anything, even the fields this one needs.
    newer.as_object_mut().unwrap().remove("invite");
    let mut bad_state = running_record(&ex, &DelegationId::new("dlg_state").unwrap(), None);
    bad_state["state"] = "paused".into();
    let not_a_record = serde_json::json!({"hello": "world"});
    let got = ex.restore_records(T0, &[ok, newer, bad_state, not_a_record]);
    assert_eq!(got.len(), 4);
    assert_eq!(got[0], Ok(ok_id.clone()));
    assert_eq!(
        got[1],
        Err(AssignmentRecordError::TooNew(RECORD_VERSION + 1))
    );
    assert!(
        matches!(&got[2], Err(AssignmentRecordError::Malformed(m)) if m.contains("paused")),
        "{:?}",
        got[2]
    );
    assert!(matches!(&got[3], Err(AssignmentRecordError::Malformed(_))));
    assert!(ex.assignment(&ok_id).is_some());
    assert!(ex
        .assignment(&DelegationId::new("dlg_newer").unwrap())
        .is_none());
    assert!(
        got[1].as_ref().unwrap_err().to_string().contains("newer"),
        "the error says why"
    );
}
