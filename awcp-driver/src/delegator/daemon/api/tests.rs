//! The daemon API's JSON, both ways.

use awcp_proto::engine::SnapshotMode;
use awcp_proto::{
    AccessMode, Auth, AuthType, DelegationId, DelegationState, Dialect, TransportKind,
};

use super::*;
use crate::delegator::DelegateParams;
use serde_json::json;

/// What the CLI and MCP send is what the daemon reads back, field for field.
#[test]
fn a_delegate_body_carries_every_parameter_to_the_daemon() {
    let mut p =
        DelegateParams::new("http://127.0.0.1:1/awcp", "/tmp/ws", "do it").description("one line");
    p.ttl_seconds = 77;
    p.access_mode = AccessMode::Ro;
    p.resources[0].mode = AccessMode::Ro;
    p.snapshot_mode = SnapshotMode::Staged;
    p.transport = TransportKind::Sshfs;
    p.dialect = Dialect::Seed;
    p.allow_sensitive = true;
    p.id = Some(DelegationId::new("dlg_fixed").unwrap());
    p.auth = Some(Auth {
        auth_type: AuthType::ApiKey,
        credential: "k".into(),
        metadata: Default::default(),
    });
    let text = serde_json::to_string(&DelegateBody::from_params(&p).unwrap()).unwrap();
    let back = serde_json::from_str::<DelegateBody>(&text)
        .unwrap()
        .into_params()
        .unwrap();
    assert_eq!(format!("{back:?}"), format!("{p:?}"));
}

/// The reference daemon's body (its `peerUrl`, no optional fields) is read with the
/// defaults; what is missing or wrong is named.
#[test]
fn a_reference_body_gets_the_defaults_and_bad_fields_are_named() {
    let v = json!({"peerUrl": "http://e/awcp", "task": {"description": "d", "prompt": "p"},
        "environment": {"resources": [{"name": "w", "type": "fs", "source": "/w"}]},
        "unknownField": 1, "auth": null});
    let p = serde_json::from_value::<DelegateBody>(v.clone())
        .unwrap()
        .into_params()
        .unwrap();
    assert_eq!(
        (
            p.peer.as_str(),
            p.ttl_seconds,
            p.access_mode,
            p.snapshot_mode
        ),
        ("http://e/awcp", 3600, AccessMode::Rw, SnapshotMode::Auto)
    );
    assert!(p.auth.is_none() && !p.allow_sensitive);
    let err = |patch: serde_json::Value| {
        let mut b = v.clone();
        for (k, x) in patch.as_object().unwrap() {
            b[k] = x.clone();
        }
        serde_json::from_value::<DelegateBody>(b)
            .map_err(|e| e.to_string())
            .and_then(DelegateBody::into_params)
            .unwrap_err()
    };
    assert_eq!(
        err(json!({"ttlSeconds": 0})),
        "ttlSeconds must be a positive integer"
    );
    assert_eq!(
        err(json!({"accessMode": "x"})),
        "accessMode must be ro or rw"
    );
    assert_eq!(
        err(json!({"environment": {"resources": []}})),
        "environment.resources must not be empty"
    );
    assert_eq!(
        err(json!({"auth": {"type": "bearer"}})),
        "auth.credential is required"
    );
    assert!(err(json!({"ttlSeconds": "soon"})).contains("invalid type"));
}

/// A record, list or event from another version of the daemon still reads: missing fields
/// take their defaults, unknown ones and unknown event types are skipped.
#[test]
fn answers_of_another_daemon_version_still_read() {
    let r: Record = serde_json::from_value(json!({"id": "dlg_1", "state": "running",
        "outcome": {"status": "running"}, "somethingNew": [1, 2]}))
    .unwrap();
    assert_eq!(r.delegation_state(), Some(DelegationState::Running));
    assert!(!r.outcome.is_success() && r.snapshots.is_empty());
    // null reads as absent, in every field of every answer.
    let r: Record = serde_json::from_value(json!({"id": "dlg_1", "state": null, "warnings": null,
        "task": {"description": null, "prompt": "p"}, "snapshots": [{"id": "snap_1",
        "metadata": null, "highlights": null, "recommended": null}], "outcome": null}))
    .unwrap();
    assert_eq!(
        (
            r.state.as_str(),
            r.task.prompt.as_str(),
            r.snapshots[0].id.as_str()
        ),
        ("", "p", "snap_1")
    );
    let l: Delegations =
        serde_json::from_value(json!({"activeDelegations": null, "delegations": null})).unwrap();
    assert!(l.delegations.is_empty());
    let e: LiveEvent = serde_json::from_value(json!({"type": "teleported", "x": 1})).unwrap();
    assert_eq!(e, LiveEvent::Unknown);
    let e: LiveEvent =
        serde_json::from_value(json!({"type": "connection_lost", "retryInMs": 1500})).unwrap();
    assert_eq!(
        e,
        LiveEvent::ConnectionLost {
            reason: None,
            retry_in_ms: 1500
        }
    );
}

/// The events keep the wire names `awcp` and older clients read.
#[test]
fn live_events_keep_their_wire_names() {
    let v = serde_json::to_value(LiveEvent::Snapshot {
        snapshot_id: "snap_1".into(),
        status: "pending".into(),
    })
    .unwrap();
    assert_eq!(
        v,
        json!({"type": "snapshot", "snapshotId": "snap_1", "status": "pending"})
    );
    let v = serde_json::to_value(LiveEvent::ConnectionLost {
        reason: Some("reset".into()),
        retry_in_ms: 2000,
    })
    .unwrap();
    assert_eq!(
        v,
        json!({"type": "connection_lost", "reason": "reset", "retryInMs": 2000})
    );
}
