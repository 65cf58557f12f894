//! The multi-round wire (WIRE.md §17, notes `multiround-wire.md` §1): CONTINUE, CLOSE and
//! `round_done` exactly as the reference's `dev` branch writes them, decoded, written back
//! byte for byte, and refused (never a panic) when a required field is missing or ill-typed.

use super::*;
use crate::id::{DelegationId, SnapshotId};
use crate::time::Timestamp;

const DLG: &str = "dlg_7018a28c28a246e7bbb6807f9dfb8c20";

/// The reference delegator's CONTINUE, as it writes it (no lease, its key order).
const REF_CONTINUE: &str = r#"{"version":"1","type":"CONTINUE","delegationId":"dlg_7018a28c28a246e7bbb6807f9dfb8c20","task":{"description":"r2","prompt":"round two"},"round":2}"#;

/// The reference delegator's CLOSE: only the envelope.
const REF_CLOSE: &str =
    r#"{"version":"1","type":"CLOSE","delegationId":"dlg_7018a28c28a246e7bbb6807f9dfb8c20"}"#;

/// A reference executor's `round_done` after a round that sent a snapshot (§1.5, with a full
/// delegation id in place of the notes' elided one).
const REF_ROUND_DONE: &str = r#"{"delegationId":"dlg_525d0a1b2c3d4e5f60718293a4b5c6d7","type":"round_done","timestamp":"2026-11-29T04:22:59.959Z","round":1,"summary":"did: round1","highlights":["a.txt","log.txt"],"snapshotIds":["snap_77ccd8813c08"],"recommendedSnapshotId":"snap_77ccd8813c08"}"#;

/// The same round on a transport without snapshots (sshfs): both snapshot fields absent.
const REF_ROUND_DONE_LIVE: &str = r#"{"delegationId":"dlg_525d0a1b2c3d4e5f60718293a4b5c6d7","type":"round_done","timestamp":"2026-11-29T04:22:59.959Z","round":3,"summary":"did: round3"}"#;

fn dlg() -> DelegationId {
    DelegationId::new(DLG).unwrap()
}

fn sid(s: &str) -> SnapshotId {
    SnapshotId::new(s).unwrap()
}

/// `REF_CONTINUE` with `round` replaced by `round` (raw JSON), or removed if `None`.
fn continue_with_round(round: Option<&str>) -> String {
    let mut v: serde_json::Value = serde_json::from_str(REF_CONTINUE).unwrap();
    let o = v.as_object_mut().unwrap();
    match round {
        Some(raw) => {
            o.insert("round".into(), serde_json::from_str(raw).unwrap());
        }
        None => {
            o.remove("round");
        }
    }
    serde_json::to_string(&v).unwrap()
}

#[test]
fn the_reference_continue_decodes_without_a_lease_and_is_written_back_byte_for_byte() {
    let (msg, dialect) = decode_message(REF_CONTINUE.as_bytes()).unwrap();
    assert_eq!(dialect, Dialect::Reference);
    assert_eq!(
        msg,
        Message::Continue(Continue {
            delegation_id: dlg(),
            task: TaskSpec {
                description: "r2".into(),
                prompt: "round two".into(),
            },
            round: 2,
            lease: None,
        })
    );
    assert_eq!(msg.type_str(), "CONTINUE");
    assert_eq!(msg.delegation_id(), &dlg());
    // Our encoder writes what the reference writes, in its key order, in both dialects.
    assert_eq!(encode_message(&msg, Dialect::Reference), REF_CONTINUE);
    assert_eq!(encode_message(&msg, Dialect::Seed), REF_CONTINUE);
    // The serde and owned-body entry points read it the same way.
    assert_eq!(serde_json::from_str::<Message>(REF_CONTINUE).unwrap(), msg);
    let (owned, _) = decode_message_owned(REF_CONTINUE.as_bytes().to_vec()).unwrap();
    assert_eq!(owned, msg);
}

#[test]
fn a_continue_with_a_lease_survives_encode_and_decode() {
    let msg = Message::Continue(Continue {
        delegation_id: dlg(),
        task: TaskSpec {
            description: "r3".into(),
            prompt: "round \"three\"\nwith ünïcode".into(),
        },
        round: 3,
        lease: Some(ActiveLease {
            expires_at: Timestamp::from_unix_millis(1_764_390_000_123),
            access_mode: AccessMode::Ro,
        }),
    });
    let text = encode_message(&msg, Dialect::Reference);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["lease"]["accessMode"], "ro");
    assert_eq!(v["lease"]["expiresAt"], "2025-11-29T04:20:00.123Z");
    assert_eq!(v["round"], 3);
    let (back, dialect) = decode_message(text.as_bytes()).unwrap();
    assert_eq!(dialect, Dialect::Reference);
    assert_eq!(back, msg);
    assert_eq!(message_to_value(&msg, Dialect::Reference), v);
}

#[test]
fn the_reference_close_decodes_and_is_written_back_byte_for_byte() {
    let (msg, dialect) = decode_message(REF_CLOSE.as_bytes()).unwrap();
    assert_eq!(dialect, Dialect::Reference);
    assert_eq!(
        msg,
        Message::Close(Close {
            delegation_id: dlg()
        })
    );
    assert_eq!(msg.type_str(), "CLOSE");
    assert_eq!(encode_message(&msg, Dialect::Reference), REF_CLOSE);
    assert_eq!(serde_json::from_str::<Message>(REF_CLOSE).unwrap(), msg);
    // Neither message carries an archive.
    assert!(msg.start_archive().is_none());
    // Extra keys are ignored, as for every message.
    let extra = r#"{"version":"1","type":"CLOSE","delegationId":"dlg_7018a28c28a246e7bbb6807f9dfb8c20","reason":"x"}"#;
    assert_eq!(decode_message(extra.as_bytes()).unwrap().0, msg);
}

#[test]
fn the_reference_round_done_decodes_with_its_snapshot_and_is_written_back_byte_for_byte() {
    let (ev, dialect) = decode_event(REF_ROUND_DONE.as_bytes()).unwrap();
    assert_eq!(dialect, Dialect::Reference);
    assert_eq!(
        ev.delegation_id,
        DelegationId::new("dlg_525d0a1b2c3d4e5f60718293a4b5c6d7").unwrap()
    );
    assert_eq!(
        ev.timestamp,
        Timestamp::parse_rfc3339("2026-11-29T04:22:59.959Z").unwrap()
    );
    assert_eq!(
        ev.kind,
        TaskEventKind::RoundDone(RoundDoneEvent {
            round: 1,
            summary: "did: round1".into(),
            highlights: vec!["a.txt".into(), "log.txt".into()],
            snapshot_ids: vec![sid("snap_77ccd8813c08")],
            recommended_snapshot_id: Some(sid("snap_77ccd8813c08")),
        })
    );
    assert_eq!(ev.kind.type_str(), "round_done");
    assert!(
        !ev.kind.is_terminal(),
        "the stream goes on after round_done"
    );
    assert_eq!(ev.local_file(), None);
    assert_eq!(encode_event(&ev, Dialect::Reference), REF_ROUND_DONE);
    assert_eq!(
        serde_json::from_str::<TaskEvent>(REF_ROUND_DONE).unwrap(),
        ev
    );
    // Nothing in it is a result archive to split around.
    assert!(encode_event_split(&ev, Dialect::Reference).is_none());
}

#[test]
fn a_round_done_without_snapshot_fields_decodes_and_none_are_written() {
    let (ev, _) = decode_event(REF_ROUND_DONE_LIVE.as_bytes()).unwrap();
    let TaskEventKind::RoundDone(r) = &ev.kind else {
        panic!("not a round_done: {ev:?}");
    };
    assert_eq!(r.round, 3);
    assert_eq!(r.summary, "did: round3");
    assert!(r.highlights.is_empty());
    assert!(r.snapshot_ids.is_empty());
    assert_eq!(r.recommended_snapshot_id, None);
    let text = encode_event(&ev, Dialect::Reference);
    assert_eq!(text, REF_ROUND_DONE_LIVE);
    for absent in ["snapshotIds", "recommendedSnapshotId", "highlights", "null"] {
        assert!(!text.contains(absent), "{absent} in {text}");
    }
    // `null` counts as absent.
    let nulls = r#"{"delegationId":"dlg_525d0a1b2c3d4e5f60718293a4b5c6d7","type":"round_done","timestamp":"2026-11-29T04:22:59.959Z","round":3,"summary":"did: round3","snapshotIds":null,"recommendedSnapshotId":null,"highlights":null}"#;
    assert_eq!(decode_event(nulls.as_bytes()).unwrap().0, ev);
}

#[test]
fn round_done_encode_decode_round_trips_in_both_dialects() {
    let ev = TaskEvent {
        delegation_id: dlg(),
        timestamp: Timestamp::from_unix_millis(1_764_390_000_000),
        kind: TaskEventKind::RoundDone(RoundDoneEvent {
            round: u64::MAX,
            summary: "did \"it\"".into(),
            highlights: vec!["a b.txt".into()],
            snapshot_ids: vec![sid("snap_000000000001"), sid("snap_000000000002")],
            recommended_snapshot_id: Some(sid("snap_000000000002")),
        }),
    };
    for dialect in [Dialect::Reference, Dialect::Seed] {
        let text = encode_event(&ev, dialect);
        assert_eq!(decode_event(text.as_bytes()).unwrap().0, ev, "{dialect:?}");
        assert_eq!(
            serde_json::from_value::<TaskEvent>(event_to_value(&ev, dialect)).unwrap(),
            ev
        );
    }
}

#[test]
fn a_continue_without_a_usable_round_is_a_decode_error_naming_round() {
    type Expect = fn(&DecodeErrorKind) -> bool;
    let cases: [(Option<&str>, Expect); 8] = [
        (None, |k| *k == DecodeErrorKind::Missing),
        (Some("null"), |k| *k == DecodeErrorKind::Missing),
        (Some("-1"), |k| matches!(k, DecodeErrorKind::Invalid(_))),
        (Some("2.5"), |k| matches!(k, DecodeErrorKind::Invalid(_))),
        (Some("2.0"), |k| matches!(k, DecodeErrorKind::Invalid(_))),
        (Some("18446744073709551616"), |k| {
            matches!(k, DecodeErrorKind::Invalid(_))
        }),
        (Some(r#""2""#), |k| {
            matches!(k, DecodeErrorKind::WrongType { .. })
        }),
        (Some("[2]"), |k| {
            matches!(k, DecodeErrorKind::WrongType { .. })
        }),
    ];
    for (round, want) in cases {
        let text = continue_with_round(round);
        let e = decode_message(text.as_bytes()).unwrap_err();
        assert_eq!(e.field, "round", "{round:?}: {e}");
        assert!(want(&e.kind), "{round:?}: {e:?}");
        // The serde path refuses it too, saying which field.
        let serde_err = serde_json::from_str::<Message>(&text).unwrap_err();
        assert!(serde_err.to_string().contains("round"), "{serde_err}");
    }
    // The largest round there is still reads.
    let text = continue_with_round(Some("18446744073709551615"));
    let Message::Continue(c) = decode_message(text.as_bytes()).unwrap().0 else {
        panic!("not a CONTINUE");
    };
    assert_eq!(c.round, u64::MAX);
}

#[test]
fn a_continue_or_round_done_with_other_broken_fields_is_a_decode_error() {
    let broken_continues = [
        (
            r#"{"version":"1","type":"CONTINUE","delegationId":"dlg_7018a28c28a246e7bbb6807f9dfb8c20","round":2}"#,
            "task",
        ),
        (
            r#"{"version":"1","type":"CONTINUE","delegationId":"dlg_7018a28c28a246e7bbb6807f9dfb8c20","task":{"description":"r2"},"round":2}"#,
            "task.prompt",
        ),
        (
            r#"{"version":"1","type":"CONTINUE","delegationId":"dlg_7018a28c28a246e7bbb6807f9dfb8c20","task":"round two","round":2}"#,
            "task",
        ),
        (
            r#"{"version":"1","type":"CONTINUE","delegationId":"dlg_7018a28c28a246e7bbb6807f9dfb8c20","task":{"description":"r2","prompt":"p"},"round":2,"lease":{"expiresAt":"soon","accessMode":"rw"}}"#,
            "lease.expiresAt",
        ),
        (
            r#"{"version":"1","type":"CONTINUE","delegationId":"dlg_7018a28c28a246e7bbb6807f9dfb8c20","task":{"description":"r2","prompt":"p"},"round":2,"lease":{"expiresAt":"2026-11-29T04:22:59.959Z","accessMode":"rwx"}}"#,
            "lease.accessMode",
        ),
        (
            r#"{"version":"1","type":"CONTINUE","task":{"description":"r2","prompt":"p"},"round":2}"#,
            "delegationId",
        ),
        (
            r#"{"version":"2","type":"CLOSE","delegationId":"dlg_7018a28c28a246e7bbb6807f9dfb8c20"}"#,
            "version",
        ),
        (r#"{"version":"1","type":"CLOSE"}"#, "delegationId"),
    ];
    for (text, field) in broken_continues {
        let e = decode_message(text.as_bytes()).unwrap_err();
        assert_eq!(e.field, field, "{text}: {e}");
    }
    let broken_round_dones = [
        (
            r#"{"delegationId":"dlg_525d0a1b2c3d4e5f60718293a4b5c6d7","type":"round_done","summary":"s"}"#,
            "round",
        ),
        (
            r#"{"delegationId":"dlg_525d0a1b2c3d4e5f60718293a4b5c6d7","type":"round_done","round":-3,"summary":"s"}"#,
            "round",
        ),
        (
            r#"{"delegationId":"dlg_525d0a1b2c3d4e5f60718293a4b5c6d7","type":"round_done","round":"1","summary":"s"}"#,
            "round",
        ),
        (
            r#"{"delegationId":"dlg_525d0a1b2c3d4e5f60718293a4b5c6d7","type":"round_done","round":1}"#,
            "summary",
        ),
        (
            r#"{"delegationId":"dlg_525d0a1b2c3d4e5f60718293a4b5c6d7","type":"round_done","round":1,"summary":"s","snapshotIds":[7]}"#,
            "snapshotIds[0]",
        ),
        (
            r#"{"delegationId":"dlg_525d0a1b2c3d4e5f60718293a4b5c6d7","type":"round_done","round":1,"summary":"s","snapshotIds":"snap_77ccd8813c08"}"#,
            "snapshotIds",
        ),
        (
            r#"{"delegationId":"dlg_525d0a1b2c3d4e5f60718293a4b5c6d7","type":"round_done","round":1,"summary":"s","recommendedSnapshotId":"../etc"}"#,
            "recommendedSnapshotId",
        ),
    ];
    for (text, field) in broken_round_dones {
        let e = decode_event(text.as_bytes()).unwrap_err();
        assert_eq!(e.field, field, "{text}: {e}");
    }
    // A `round-done` (or any other spelling) is still an unknown event type.
    let dashed = REF_ROUND_DONE.replace("round_done", "round-done");
    assert_eq!(decode_event(dashed.as_bytes()).unwrap_err().field, "type");
}
