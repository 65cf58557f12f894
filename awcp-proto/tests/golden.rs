//! Golden fixtures: every JSON example of seed 000 appendix A and the [R] examples of WIRE.md
//! §2.7, §3 and §4.3 decode with the expected dialect and re-encode to equivalent JSON.
//!
//! Values concretised where WIRE.md abbreviates with `…`:
//! * `dlg_0a1b…` / `dlg_…` / `"…"` delegation ids → `dlg_0a1b2c3d4e5f60718293a4b5c6d7e8f9`;
//! * `UEsDBBQAAAAIA…` / `UEsDB…` base64 → `UEsDBBQAAAAIAM1YAAAA`;
//! * `3b1f0c…64 lowercase hex…` → `3b1f0c9d…11223344` (64 hex); the storage `"…"` checksum →
//!   the SHA-256 of `test`; the git `4e1d…(40 hex)` → a 40-hex string;
//! * sshfs `privateKey` `-----BEGIN OPENSSH PRIVATE KEY-----\n…` and certificate `AAAA…` →
//!   short plausible texts;
//! * the [S] `done` (`seed_event_done.json`): `…` timestamp/summary/highlights → the values of
//!   the [R] `done` example.
//!
//! Seed 000's own abbreviations (`UEsDBBQAAAAIAM1Y...`, `a1b2c3d4e5f6...`) are kept verbatim:
//! the decoder treats base64 and checksums as opaque strings.
//!
//! No normalisation is needed: every fixture re-encodes to exactly the same JSON value (the
//! encoder omits exactly the fields the fixtures omit, and the seed INVITE keeps its
//! `workspace.exportName`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)] // test code

use std::path::PathBuf;

use awcp_proto::*;
use serde_json::Value;

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

/// Decodes a message fixture, checks the dialect and the re-encoding.
fn message(name: &str, dialect: Dialect) -> Message {
    let bytes = fixture(name);
    let (msg, got) = decode_message(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(got, dialect, "{name}: dialect");
    assert_eq!(
        message_to_value(&msg, dialect),
        json(&bytes),
        "{name}: re-encoding"
    );
    // The compact string form decodes to the same value again.
    let again = decode_message(encode_message(&msg, dialect).as_bytes()).unwrap();
    assert_eq!(again, (msg.clone(), dialect), "{name}: string round trip");
    msg
}

fn event(name: &str, dialect: Dialect) -> TaskEvent {
    let bytes = fixture(name);
    let (ev, got) = decode_event(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(got, dialect, "{name}: dialect");
    assert_eq!(
        event_to_value(&ev, dialect),
        json(&bytes),
        "{name}: re-encoding"
    );
    let again = decode_event(encode_event(&ev, dialect).as_bytes()).unwrap();
    assert_eq!(again, (ev.clone(), dialect), "{name}: string round trip");
    ev
}

fn handle(name: &str) -> TransportHandle {
    let v = json(&fixture(name));
    let h = decode_handle(&v, "transportHandle").unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(encode_handle(&h), v, "{name}: re-encoding");
    h
}

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

const RID: &str = "dlg_0a1b2c3d4e5f60718293a4b5c6d7e8f9";

#[test]
fn seed_invite() {
    let Message::Invite(inv) = message("seed_a1_invite.json", Dialect::Seed) else {
        panic!("not an INVITE")
    };
    assert_eq!(inv.delegation_id.as_str(), "dlg_a1b2c3d4");
    assert_eq!(inv.task.description, "Add unit tests for utils module");
    assert_eq!(inv.lease.ttl_seconds, 3600);
    assert_eq!(inv.lease.access_mode, AccessMode::Rw);
    assert_eq!(inv.export_name.as_deref(), Some("awcp/dlg_a1b2c3d4"));
    assert_eq!(
        inv.resources,
        vec![Resource {
            name: ResourceName::new("workspace").unwrap(),
            kind: "fs".into(),
            mode: AccessMode::Rw
        }]
    );
    assert_eq!(inv.transport, Some(TransportKind::Archive));
    assert_eq!(inv.retention_ms, None);
    assert!(inv.auth.is_none() && inv.features.is_empty());
}

#[test]
fn seed_accept() {
    let Message::Accept(acc) = message("seed_a1_accept.json", Dialect::Seed) else {
        panic!("not an ACCEPT")
    };
    assert_eq!(acc.work_dir, "/awcp/workspaces/dlg_a1b2c3d4");
    assert_eq!(acc.retention_ms, None);
    let c = acc.constraints.unwrap();
    assert_eq!(c.accepted_access_mode, Some(AccessMode::Rw));
    assert_eq!(c.max_ttl_seconds, Some(3600));
    assert_eq!(
        c.sandbox_profile,
        Some(SandboxProfile {
            cwd_only: Some(true),
            allow_network: Some(true),
            allow_exec: Some(true)
        })
    );
}

#[test]
fn seed_start() {
    let Message::Start(st) = message("seed_a1_start.json", Dialect::Seed) else {
        panic!("not a START")
    };
    assert_eq!(st.lease.expires_at, ts("2026-02-01T13:00:00.000Z"));
    assert_eq!(st.lease.access_mode, AccessMode::Rw);
    let TransportHandle::Archive(a) = st.handle else {
        panic!("not an archive handle")
    };
    assert_eq!(a.data.base64.as_deref(), Some("UEsDBBQAAAAIAM1Y..."));
    assert_eq!(a.data.url, None);
    assert_eq!(a.checksum, "a1b2c3d4e5f6...");
    assert_eq!(a.size_bytes, None);
}

#[test]
fn seed_events() {
    // A status event has no dialect marker: it reads as [R].
    let ev = event("seed_a1_event_status.json", Dialect::Reference);
    assert_eq!(ev.timestamp, ts("2026-02-01T12:00:01.000Z"));
    assert_eq!(
        ev.kind,
        TaskEventKind::Status(StatusEvent {
            status: TaskStatus::Running,
            message: None,
            progress: None
        })
    );
    let ev = event("seed_a1_event_done.json", Dialect::Seed);
    let TaskEventKind::Done(d) = ev.kind else {
        panic!("not done")
    };
    assert_eq!(d.highlights, vec!["src/utils.test.ts".to_owned()]);
    assert_eq!(d.result_base64.as_deref(), Some("UEsDBBQAAAAIAM1Y..."));
    assert!(d.snapshot_ids.is_empty() && d.recommended_snapshot_id.is_none());

    let ev = event("seed_event_done.json", Dialect::Seed);
    assert_eq!(ev.delegation_id.as_str(), RID);
}

#[test]
fn seed_errors() {
    let Message::Error(e) = message("seed_a2_error_declined.json", Dialect::Reference) else {
        panic!("not an ERROR")
    };
    assert_eq!(e.error.code, ErrorCode::Declined);
    assert_eq!(
        e.error.hint.as_deref(),
        Some("Try again later when current tasks complete")
    );
    let Message::Error(e) = message("seed_a2_error_too_large.json", Dialect::Reference) else {
        panic!("not an ERROR")
    };
    assert_eq!(e.error.code, ErrorCode::WorkspaceTooLarge);
}

#[test]
fn reference_exchange() {
    let Message::Invite(inv) = message("ref_invite.json", Dialect::Reference) else {
        panic!("not an INVITE")
    };
    assert_eq!(inv.delegation_id.as_str(), RID);
    assert_eq!(inv.lease.ttl_seconds, 1800);
    assert_eq!(inv.retention_ms, Some(604_800_000));
    assert_eq!(inv.export_name, None);
    assert_eq!(inv.resources.len(), 1);
    assert_eq!(inv.resources[0].name.as_str(), "workspace");

    let Message::Accept(acc) = message("ref_accept.json", Dialect::Reference) else {
        panic!("not an ACCEPT")
    };
    assert_eq!(acc.retention_ms, Some(604_800_000));

    let Message::Start(st) = message("ref_start.json", Dialect::Reference) else {
        panic!("not a START")
    };
    assert_eq!(st.lease.expires_at, ts("2026-03-04T05:36:07.089Z"));
    assert_eq!(st.handle.kind(), TransportKind::Archive);
    let TransportHandle::Archive(a) = st.handle else {
        panic!()
    };
    assert_eq!(
        a.checksum,
        "3b1f0c9d2e4a5b6c7d8e9f00112233445566778899aabbccddeeff0011223344"
    );

    let Message::Error(e) = message("ref_error_declined.json", Dialect::Reference) else {
        panic!("not an ERROR")
    };
    assert_eq!(e.error.code, ErrorCode::Declined);
    assert_eq!(e.error.message, "requested ttl above executor limit");
}

#[test]
fn reference_handles() {
    let TransportHandle::Sshfs(s) = handle("handle_sshfs.json") else {
        panic!("not sshfs")
    };
    assert_eq!(s.endpoint.host, "dev-box.lan");
    assert_eq!(s.endpoint.port, 22);
    assert_eq!(s.endpoint.user, "alice");
    assert!(s.export_locator.ends_with('/'));
    assert!(s.credential.certificate.is_some());
    assert!(s.options.is_empty() && s.host_key.is_none());

    let TransportHandle::Storage(s) = handle("handle_storage.json") else {
        panic!("not storage")
    };
    assert_eq!(s.expires_at, ts("2026-03-04T06:06:07.089Z"));
    assert!(s.headers.is_empty());

    let TransportHandle::Git(g) = handle("handle_git.json") else {
        panic!("not git")
    };
    assert_eq!(g.base_branch, "main");
    assert_eq!(g.base_commit.len(), 40);
    assert_eq!(g.auth, Some(GitAuth::None));

    // The same handles inside a START envelope, under each accepted key.
    for key in ["transportHandle", "transport", "workDir", "mount"] {
        let h = json(&fixture("handle_git.json"));
        let start = serde_json::json!({
            "version": "1", "type": "START", "delegationId": RID,
            "lease": {"expiresAt": "2026-03-04T05:36:07.089Z", "accessMode": "ro"},
            key: h,
        });
        let (msg, dialect) = decode_message(start.to_string().as_bytes()).unwrap();
        let want = if matches!(key, "workDir" | "mount") {
            Dialect::Seed
        } else {
            Dialect::Reference
        };
        assert_eq!(dialect, want, "{key}");
        let Message::Start(st) = msg else { panic!() };
        assert_eq!(st.handle.kind(), TransportKind::Git);
        assert_eq!(st.lease.access_mode, AccessMode::Ro);
    }
}

#[test]
fn reference_events() {
    let ev = event("ref_event_status.json", Dialect::Reference);
    let TaskEventKind::Status(s) = ev.kind else {
        panic!()
    };
    assert_eq!(s.message.as_deref(), Some("started"));

    let ev = event("ref_event_snapshot.json", Dialect::Reference);
    let TaskEventKind::Snapshot(s) = ev.kind else {
        panic!()
    };
    assert_eq!(s.snapshot_id.as_str(), "snap_9c2e41d07a3b");
    assert_eq!(s.recommended, Some(true));
    assert_eq!(s.highlights.len(), 2);
    assert!(s.metadata.is_empty() && s.checksum.is_none());

    let ev = event("ref_event_done.json", Dialect::Reference);
    assert_eq!(ev.timestamp, ts("2026-03-04T05:09:41.010Z"));
    let TaskEventKind::Done(d) = ev.kind else {
        panic!()
    };
    assert_eq!(
        d.snapshot_ids,
        vec![SnapshotId::new("snap_9c2e41d07a3b").unwrap()]
    );
    assert_eq!(d.recommended_snapshot_id, d.snapshot_ids.first().cloned());
    assert_eq!(d.result_base64, None);
}

#[test]
fn example_stream_through_sse_decoder() {
    let mut stream = String::new();
    for name in [
        "ref_event_status.json",
        "ref_event_snapshot.json",
        "ref_event_done.json",
    ] {
        let (ev, d) = decode_event(&fixture(name)).unwrap();
        stream.push_str(&sse::encode_data(&encode_event(&ev, d)));
        stream.push_str(sse::KEEPALIVE);
    }
    let mut dec = sse::SseDecoder::default();
    dec.push(stream.as_bytes());
    let mut kinds = Vec::new();
    while let Some(ev) = dec.next_event() {
        let (ev, _) = decode_event(ev.unwrap().data.as_bytes()).unwrap();
        kinds.push(ev.kind.type_str());
    }
    assert_eq!(kinds, ["status", "snapshot", "done"]);
}

// ---------------------------------------------------------------------------------------------
// Decode errors

fn invite_value() -> Value {
    json(&fixture("ref_invite.json"))
}

fn decode_err(v: &Value) -> DecodeError {
    decode_message(v.to_string().as_bytes()).unwrap_err()
}

#[test]
fn missing_prompt_is_named() {
    let mut v = invite_value();
    v["task"].as_object_mut().unwrap().remove("prompt");
    let e = decode_err(&v);
    assert_eq!(e.field, "task.prompt");
    assert_eq!(e.kind, DecodeErrorKind::Missing);
    assert!(e.to_string().contains("task.prompt"), "{e}");
}

#[test]
fn wrong_type_ttl() {
    let mut v = invite_value();
    v["lease"]["ttlSeconds"] = "1800".into();
    let e = decode_err(&v);
    assert_eq!(e.field, "lease.ttlSeconds");
    assert!(matches!(e.kind, DecodeErrorKind::WrongType { .. }), "{e:?}");
    v["lease"]["ttlSeconds"] = (-5).into();
    let e = decode_err(&v);
    assert_eq!(e.field, "lease.ttlSeconds");
    assert!(matches!(e.kind, DecodeErrorKind::Invalid(_)), "{e:?}");
    v["lease"]["ttlSeconds"] = serde_json::json!(1.5);
    assert_eq!(decode_err(&v).field, "lease.ttlSeconds");
    // a number far beyond u64 parses as a float and is refused, naming the field
    v["lease"]["ttlSeconds"] = 0.into();
    let text = v.to_string().replace(
        "\"ttlSeconds\":0",
        "\"ttlSeconds\":123456789012345678901234567890",
    );
    let e = decode_message(text.as_bytes()).unwrap_err();
    assert_eq!(e.field, "lease.ttlSeconds");
}

#[test]
fn bad_delegation_id() {
    let mut v = invite_value();
    v["delegationId"] = "../etc".into();
    let e = decode_err(&v);
    assert_eq!(e.field, "delegationId");
    assert!(matches!(e.kind, DecodeErrorKind::Invalid(_)), "{e:?}");
}

#[test]
fn bad_resource_name_is_indexed() {
    let mut v = invite_value();
    v["environment"]["resources"][0]["name"] = "a/b".into();
    let e = decode_err(&v);
    assert_eq!(e.field, "environment.resources[0].name");
}

#[test]
fn null_optional_accepted_null_required_missing() {
    let mut v = invite_value();
    v["auth"] = Value::Null;
    v["requirements"] = Value::Null;
    v["retentionMs"] = Value::Null;
    let (msg, d) = decode_message(v.to_string().as_bytes()).unwrap();
    assert_eq!(d, Dialect::Reference);
    let Message::Invite(inv) = msg else { panic!() };
    assert_eq!(inv.retention_ms, None);
    assert_eq!(inv.transport, None);

    v["task"]["description"] = Value::Null;
    let e = decode_err(&v);
    assert_eq!(e.field, "task.description");
    assert_eq!(e.kind, DecodeErrorKind::Missing);
}

#[test]
fn accept_with_null_retention_is_reference() {
    // [R] answers a [S] INVITE with `"retentionMs": null` (WIRE.md §2.3).
    let mut v = json(&fixture("seed_a1_accept.json"));
    v["retentionMs"] = Value::Null;
    let (msg, d) = decode_message(v.to_string().as_bytes()).unwrap();
    assert_eq!(d, Dialect::Reference);
    let Message::Accept(acc) = msg else { panic!() };
    assert_eq!(acc.retention_ms, None);
}

#[test]
fn unknown_fields_ignored() {
    let mut v = invite_value();
    v["futureField"] = serde_json::json!({"deep": [1, 2, 3]});
    v["task"]["color"] = "blue".into();
    v["environment"]["resources"][0]["source"] = "/home/alice/project".into();
    let (msg, _) = decode_message(v.to_string().as_bytes()).unwrap();
    let (orig, _) = decode_message(&fixture("ref_invite.json")).unwrap();
    assert_eq!(msg, orig);
}

#[test]
fn version_checks() {
    let mut v = invite_value();
    v["version"] = "2".into();
    let e = decode_err(&v);
    assert_eq!(e.field, "version");
    assert!(matches!(e.kind, DecodeErrorKind::Invalid(_)), "{e:?}");
    v["version"] = 1.into();
    assert_eq!(decode_err(&v).field, "version");
    v.as_object_mut().unwrap().remove("version");
    assert!(decode_message(v.to_string().as_bytes()).is_ok());
}

#[test]
fn invite_without_environment_or_workspace() {
    let mut v = invite_value();
    v.as_object_mut().unwrap().remove("environment");
    let e = decode_err(&v);
    assert_eq!(e.field, "environment");
    assert_eq!(e.kind, DecodeErrorKind::Missing);
}

#[test]
fn handle_errors_name_the_field() {
    let mut v = json(&fixture("ref_start.json"));
    v["transportHandle"]
        .as_object_mut()
        .unwrap()
        .remove("checksum");
    assert_eq!(decode_err(&v).field, "transportHandle.checksum");

    let mut v = json(&fixture("ref_start.json"));
    v["transportHandle"]
        .as_object_mut()
        .unwrap()
        .remove("workspaceBase64");
    assert_eq!(decode_err(&v).field, "transportHandle.workspaceBase64");
    // ... unless `archiveUrl` stands in for it
    v["transportHandle"]["archiveUrl"] = "http://delegator.lan/a.zip".into();
    assert!(decode_message(v.to_string().as_bytes()).is_ok());

    let mut v = json(&fixture("ref_start.json"));
    v["transportHandle"]["transport"] = "carrier-pigeon".into();
    let e = decode_err(&v);
    assert_eq!(e.field, "transportHandle.transport");
    assert!(matches!(e.kind, DecodeErrorKind::Invalid(_)));

    let mut v = json(&fixture("handle_sshfs.json"));
    v["endpoint"]["port"] = 70000.into();
    let e = decode_handle(&v, "workDir").unwrap_err();
    assert_eq!(e.field, "workDir.endpoint.port");

    let mut v = json(&fixture("ref_start.json"));
    v["lease"]["expiresAt"] = "tomorrow".into();
    assert_eq!(decode_err(&v).field, "lease.expiresAt");
}

#[test]
fn legacy_sshfs_handle() {
    let v = serde_json::json!({
        "transport": "sshfs",
        "endpoint": {"host": "h", "port": 2222, "user": "u"},
        "exportLocator": "/x/",
        "credential": "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n",
        "mountOptions": {"reconnect": "yes"},
    });
    let TransportHandle::Sshfs(s) = decode_handle(&v, "mount").unwrap() else {
        panic!()
    };
    assert_eq!(s.credential.certificate, None);
    assert_eq!(s.options.get("reconnect").map(String::as_str), Some("yes"));
}

#[test]
fn event_errors() {
    let mut v = json(&fixture("ref_event_done.json"));
    v["snapshotIds"][0] = "../x".into();
    let e = decode_event(v.to_string().as_bytes()).unwrap_err();
    assert_eq!(e.field, "snapshotIds[0]");

    let mut v = json(&fixture("ref_event_snapshot.json"));
    v.as_object_mut().unwrap().remove("snapshotBase64");
    let e = decode_event(v.to_string().as_bytes()).unwrap_err();
    assert_eq!(e.field, "snapshotBase64");

    // a missing timestamp is tolerated ([C] examples have none)
    let mut v = json(&fixture("ref_event_status.json"));
    v.as_object_mut().unwrap().remove("timestamp");
    let (ev, _) = decode_event(v.to_string().as_bytes()).unwrap();
    assert_eq!(ev.timestamp, Timestamp::EPOCH);

    let mut v = json(&fixture("ref_event_status.json"));
    v["progress"] = "half".into();
    let e = decode_event(v.to_string().as_bytes()).unwrap_err();
    assert_eq!(e.field, "progress");
}

#[test]
fn garbage_never_panics() {
    for input in [
        &b""[..],
        b"null",
        b"[]",
        b"42",
        b"\xff\xfe",
        b"{",
        b"{\"type\":\"INVITE\"}",
        b"{\"type\":\"START\",\"delegationId\":\"d\",\"lease\":{}}",
    ] {
        assert!(decode_message(input).is_err());
        assert!(decode_event(input).is_err());
    }
    let deep = "[".repeat(10_000);
    assert!(decode_message(deep.as_bytes()).is_err());
    let deep = format!("{}1{}", "[".repeat(120), "]".repeat(120));
    assert!(decode_message(deep.as_bytes()).is_err());
}
