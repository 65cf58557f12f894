//! The daemon API's JSON: delegation records, outcomes, snapshots, errors, and the
//! `POST /delegate` body.

use super::*;

pub(super) fn err(status: u16, e: &ErrorInfo) -> http::Response<ResponseBody> {
    json_response(
        status,
        json!({"error": e.message, "code": e.code.as_str(), "hint": e.hint}).to_string(),
    )
}

pub(super) fn bad(msg: impl Into<String>) -> http::Response<ResponseBody> {
    json_response(400, json!({"error": msg.into()}).to_string())
}

pub(super) fn usage(e: DelegatorError) -> http::Response<ResponseBody> {
    match e {
        DelegatorError::Protocol(info) => err(400, &info),
        other => bad(other.to_string()),
    }
}

/// The JSON record of a delegation.
pub fn view_to_json(v: &DelegationView) -> Value {
    json!({
        "id": v.request.id.as_str(),
        "state": v.state.as_str(),
        "peerUrl": v.request.peer,
        "executorUrl": v.request.peer,
        "environment": {"resources": v.request.resources.iter().map(|r| json!({
            "name": r.name.as_str(), "type": r.kind, "mode": r.mode.as_str()
        })).collect::<Vec<_>>()},
        "task": {"description": v.request.task.description, "prompt": v.request.task.prompt},
        "leaseConfig": {"ttlSeconds": v.request.ttl_seconds, "accessMode": v.request.access_mode.as_str()},
        "activeLease": v.expires_at.map(|e| json!({"expiresAt": e.to_rfc3339(), "accessMode": v.access_mode.as_str()})),
        "executorWorkDir": v.executor_work_dir.as_ref().map(|p| json!({"path": p})),
        "executorConstraints": v.executor_constraints.as_ref().map(|c| json!({
            "maxTtlSeconds": c.max_ttl_seconds,
            "acceptedAccessMode": c.accepted_access_mode.map(|m| m.as_str()),
        })),
        "snapshotPolicy": {"mode": v.request.snapshot_mode.as_str()},
        "snapshots": v.snapshots.iter().map(|s| snapshot_json(v, s)).collect::<Vec<_>>(),
        "appliedSnapshotId": v.snapshots.iter().rev().find(|s| s.status == SnapshotStatus::Applied).map(|s| s.id.as_str()),
        "result": v.result.as_ref().map(|r| json!({"summary": r.summary, "highlights": r.highlights})),
        "error": v.error.as_ref().map(error_json),
        "outcome": outcome_json(&v.outcome()),
        "ended": v.ended,
        "warnings": v.warnings,
        "notShipped": v.not_shipped.iter().map(|n| json!({"path": n.path, "reason": n.reason.as_str()})).collect::<Vec<_>>(),
        "notShippedCount": v.not_shipped_count,
        "createdAt": v.created_at.to_rfc3339(),
        "updatedAt": v.updated_at.to_rfc3339(),
    })
}

pub(super) fn error_json(e: &ErrorInfo) -> Value {
    json!({"code": e.code.as_str(), "message": e.message, "hint": e.hint})
}

/// `{"status": "completed" | "staged" | "not_applied" | "unreachable" | "failed" | "running",
/// "snapshotId"?, "error"?, "message"}`: how the delegation turned out, in one place.
pub fn outcome_json(o: &Outcome) -> Value {
    let (message, snapshot, error) = match o {
        Outcome::Running => ("still running".to_owned(), None, None),
        Outcome::Completed => ("completed".to_owned(), None, None),
        Outcome::Staged => (
            "completed; the result is staged: apply or discard it".to_owned(),
            None,
            None,
        ),
        Outcome::NotApplied { snapshot, reason } => (
            match snapshot {
                Some(s) => format!(
                    "the result was NOT applied ({}); snapshot {s} is kept: fix the cause, then apply it again or discard it",
                    reason.message
                ),
                None => format!(
                    "the result was NOT applied ({}); the executor was not acknowledged and keeps it",
                    reason.message
                ),
            },
            snapshot.as_ref(),
            Some(reason),
        ),
        Outcome::Unreachable(e) => ("the executor could not be reached".to_owned(), None, Some(e)),
        Outcome::Failed { state, error } => (
            match state {
                DelegationState::Cancelled => "the delegation was cancelled".to_owned(),
                DelegationState::Expired => "the lease expired".to_owned(),
                _ => "the delegation failed".to_owned(),
            },
            None,
            error.as_ref(),
        ),
    };
    json!({
        "status": o.as_str(),
        "message": message,
        "snapshotId": snapshot.map(|s| s.as_str()),
        "error": error.map(error_json),
    })
}

pub(super) fn snapshot_json(
    v: &DelegationView,
    s: &awcp_proto::engine::delegator::SnapshotRecord,
) -> Value {
    json!({
        "id": s.id.as_str(),
        "delegationId": v.request.id.as_str(),
        "summary": s.summary,
        "highlights": s.highlights,
        "status": s.status.as_str(),
        "error": match &s.status { SnapshotStatus::Failed(e) => error_json(e), _ => s.error.as_ref().map(error_json).unwrap_or(Value::Null) },
        "recommended": s.recommended,
        "metadata": s.metadata,
        "createdAt": s.received_at.to_rfc3339(),
        "appliedAt": s.applied_at.map(|t| t.to_rfc3339()),
    })
}

pub(super) fn parse_delegate(v: &Value) -> Result<DelegateParams, String> {
    let peer = v
        .get("executorUrl")
        .or_else(|| v.get("peerUrl"))
        .and_then(Value::as_str)
        .ok_or("executorUrl is required")?;
    let task = v.get("task").ok_or("task is required")?;
    let description = task
        .get("description")
        .and_then(Value::as_str)
        .ok_or("task.description is required")?;
    let prompt = task
        .get("prompt")
        .and_then(Value::as_str)
        .ok_or("task.prompt is required")?;
    let access_mode = match v.get("accessMode").and_then(Value::as_str) {
        None => AccessMode::Rw,
        Some(s) => AccessMode::parse(s).ok_or("accessMode must be ro or rw")?,
    };
    let mut resources = Vec::new();
    let list = v
        .pointer("/environment/resources")
        .and_then(Value::as_array)
        .ok_or("environment.resources is required")?;
    for (i, r) in list.iter().enumerate() {
        let name = r
            .get("name")
            .and_then(Value::as_str)
            .ok_or(format!("environment.resources[{i}].name is required"))?;
        let name =
            ResourceName::new(name).map_err(|e| format!("environment.resources[{i}].name: {e}"))?;
        let source = r
            .get("source")
            .and_then(Value::as_str)
            .ok_or(format!("environment.resources[{i}].source is required"))?;
        let mode = match r.get("mode").and_then(Value::as_str) {
            None => access_mode,
            Some(s) => AccessMode::parse(s)
                .ok_or(format!("environment.resources[{i}].mode must be ro or rw"))?,
        };
        resources.push(ResourceSpec {
            name,
            source_path: PathBuf::from(source),
            mode,
        });
    }
    if resources.is_empty() {
        return Err("environment.resources must not be empty".into());
    }
    let snapshot_mode = match v.get("snapshotMode").and_then(Value::as_str) {
        None => SnapshotMode::Auto,
        Some(s) => SnapshotMode::parse(s).ok_or("snapshotMode must be auto, staged or discard")?,
    };
    let ttl_seconds = match v.get("ttlSeconds") {
        None | Some(Value::Null) => 3600,
        Some(t) => t
            .as_u64()
            .filter(|t| *t > 0)
            .ok_or("ttlSeconds must be a positive integer")?,
    };
    let auth = match v.get("auth") {
        Some(a) if a.is_object() => Some(Auth {
            auth_type: AuthType::parse(a.get("type").and_then(Value::as_str).unwrap_or("bearer")),
            credential: a
                .get("credential")
                .and_then(Value::as_str)
                .ok_or("auth.credential is required")?
                .to_owned(),
            metadata: Default::default(),
        }),
        _ => None,
    };
    let dialect = match v.get("dialect").and_then(Value::as_str) {
        Some("seed") => Dialect::Seed,
        _ => Dialect::Reference,
    };
    let transport = v
        .get("transport")
        .and_then(Value::as_str)
        .map(TransportKind::parse)
        .unwrap_or(TransportKind::Archive);
    let allow_sensitive = match v.get("allowSensitive") {
        None | Some(Value::Null) => false,
        Some(b) => b.as_bool().ok_or("allowSensitive must be a boolean")?,
    };
    let id = match v.get("delegationId").and_then(Value::as_str) {
        Some(s) => Some(DelegationId::new(s).map_err(|e| format!("delegationId: {e}"))?),
        None => None,
    };
    Ok(DelegateParams {
        peer: peer.to_owned(),
        task: TaskSpec {
            description: description.to_owned(),
            prompt: prompt.to_owned(),
        },
        resources,
        ttl_seconds,
        access_mode,
        snapshot_mode,
        auth,
        dialect,
        transport,
        id,
        allow_sensitive,
    })
}

/// One live event of a delegation as the daemon streams it (`GET /delegation/{id}/events`,
/// one `data:` JSON object per event) and as `awcp` shows it, with the delegation it is about:
/// `{"type": "state", "state"}`, `{"type": "progress", "message", "progress"}`,
/// `{"type": "snapshot", "snapshotId", "status"}`, `{"type": "connection_lost", "reason",
/// "retryInMs"}` (the executor's stream broke; the delegator reconnects),
/// `{"type": "peer_misbehaved", "reason"}`, `{"type": "ended", "state", "error"}`. `None` for
/// what is not news to a person (a forgotten record).
pub fn event_json(ev: &DelegatorEvent) -> Option<(&DelegationId, Value)> {
    Some(match ev {
        DelegatorEvent::StateChanged { id, to, .. } => {
            (id, json!({"type": "state", "state": to.as_str()}))
        }
        DelegatorEvent::Progress {
            id,
            message,
            progress,
        } => (
            id,
            json!({"type": "progress", "message": message, "progress": progress}),
        ),
        DelegatorEvent::Snapshot {
            id,
            snapshot_id,
            status,
        } => (
            id,
            json!({"type": "snapshot", "snapshotId": snapshot_id.as_str(), "status": status.as_str()}),
        ),
        DelegatorEvent::ConnectionLost {
            id,
            reason,
            retry_in,
        } => (
            id,
            json!({"type": "connection_lost", "reason": reason, "retryInMs": u64::try_from(retry_in.as_millis()).unwrap_or(u64::MAX)}),
        ),
        DelegatorEvent::PeerMisbehaved { id, reason } => (
            id,
            json!({"type": "peer_misbehaved", "reason": format!("{reason:?}")}),
        ),
        DelegatorEvent::Ended {
            id, state, error, ..
        } => (
            id,
            json!({"type": "ended", "state": state.as_str(), "error": error.as_ref().map(|e| json!({"code": e.code.as_str(), "message": e.message}))}),
        ),
        DelegatorEvent::Forgotten { .. } => return None,
    })
}

/// A transfer as a live event: `{"type": "transfer", "what", "bytes"}`.
pub fn transfer_json(t: &crate::delegator::Transfer) -> Value {
    json!({"type": "transfer", "what": t.what, "bytes": t.bytes})
}
