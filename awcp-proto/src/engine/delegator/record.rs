//! Durable records: what the driver journals, and how a restarted delegator resumes.

use super::*;

// ---------------------------------------------------------------------------------------------
// Durable records

fn status_to_json(s: &SnapshotStatus) -> serde_json::Value {
    match s {
        SnapshotStatus::Failed(e) => serde_json::json!({"status": "failed", "error": e}),
        other => serde_json::json!({"status": other.as_str()}),
    }
}

fn status_from_json(v: &serde_json::Value) -> SnapshotStatus {
    match v.get("status").and_then(|s| s.as_str()) {
        Some("pending") => SnapshotStatus::Pending,
        Some("applied") => SnapshotStatus::Applied,
        Some("discarded") => SnapshotStatus::Discarded,
        Some("failed") => SnapshotStatus::Failed(
            v.get("error")
                .and_then(|e| serde_json::from_value(e.clone()).ok())
                .unwrap_or_else(|| ErrorInfo::new(ErrorCode::TransportError, "failed")),
        ),
        // An operation in flight when the process stopped: see `restore_one`.
        _ => SnapshotStatus::InFlight,
    }
}

/// Why a snapshot whose apply was interrupted by a restart is pending again.
pub(super) fn interrupted_apply() -> ErrorInfo {
    ErrorInfo {
        code: ErrorCode::TransportError,
        message: "the delegator stopped while applying this snapshot; at start-up the \
                  interrupted apply was rolled back or finished, so the workspace is entirely \
                  old or entirely new"
            .into(),
        hint: Some(
            "Apply the snapshot again (a no-op if it had been finished) or discard it.".into(),
        ),
    }
}

impl Delegator {
    /// A JSON record of one delegation for a journal (the driver writes it atomically on every
    /// event and removes it on [`DelegatorEvent::Forgotten`]). It holds the INVITE (with the
    /// credential, so the state directory must be private), the state, the lease and the
    /// snapshots. `None` for unknown ids.
    pub fn record(&self, id: &DelegationId) -> Option<serde_json::Value> {
        use serde_json::json;
        let d = self.delegations.get(id)?;
        let invite = Invite {
            delegation_id: id.clone(),
            task: d.req.task.clone(),
            lease: LeaseRequest {
                ttl_seconds: d.req.ttl_seconds,
                access_mode: d.req.access_mode,
            },
            resources: d.req.resources.clone(),
            export_name: None,
            retention_ms: None,
            transport: Some(d.req.transport.clone()),
            auth: d.req.auth.clone(),
            features: Vec::new(),
        };
        Some(json!({
            "id": id.as_str(),
            "peer": d.req.peer,
            "dialect": if d.req.dialect == Dialect::Seed { "seed" } else { "reference" },
            "invite": crate::wire::message_to_value(&Message::Invite(invite), Dialect::Reference),
            "snapshotMode": d.req.snapshot_mode.as_str(),
            "state": d.machine.state().as_str(),
            "createdAt": d.created_at.as_unix_millis(),
            "updatedAt": d.updated_at.as_unix_millis(),
            "expiresAt": d.expires_at.map(Timestamp::as_unix_millis),
            "accessMode": d.access.as_str(),
            "features": d.features,
            "executorWorkDir": d.accept.as_ref().map(|a| a.work_dir.clone()),
            "startSent": d.start_sent,
            "heardTerminal": d.heard_terminal,
            "ended": d.ended,
            "stored": d.stored.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            "snapshots": d.snapshot_order.iter().filter_map(|sid| d.snapshots.get(sid)).map(|r| json!({
                "id": r.id.as_str(),
                "summary": r.summary,
                "highlights": r.highlights,
                "recommended": r.recommended,
                "metadata": r.metadata,
                "status": status_to_json(&r.status),
                "receivedAt": r.received_at.as_unix_millis(),
                "appliedAt": r.applied_at.map(Timestamp::as_unix_millis),
                "error": r.error,
            })).collect::<Vec<_>>(),
            "result": d.result.as_ref().map(|o| json!({"summary": o.summary, "highlights": o.highlights})),
            "error": d.error,
            "allowSensitive": d.req.allow_sensitive,
            "notShipped": d.not_shipped.iter().map(|n| json!({"path": n.path, "reason": n.reason.as_str()})).collect::<Vec<_>>(),
            "notShippedCount": d.not_shipped_count,
            "resultError": d.result_error,
            "warnings": d.warnings,
        }))
    }

    /// Restores delegations from journal records after a restart, and decides what happens to
    /// each: ended ones are kept for listing until their retention; ones that had sent START
    /// reconnect to the executor's event stream (it replays the result of a finished task, or
    /// the delegation expires with its lease); ones that had not are abandoned (`ERROR` to the
    /// executor) because their transport credentials died with the process. Every restored
    /// delegation that was not ended releases its transport (the driver's release is
    /// idempotent and removes leftovers). Returns how many records were restored.
    pub fn restore(&mut self, now: Timestamp, records: &[serde_json::Value]) -> usize {
        self.tick(now);
        let mut ids = Vec::new();
        for r in records {
            if let Some(id) = self.restore_one(now, r) {
                ids.push(id);
            }
        }
        let n = ids.len();
        for id in ids {
            self.resume(now, &id);
        }
        n
    }

    pub(super) fn restore_one(
        &mut self,
        now: Timestamp,
        r: &serde_json::Value,
    ) -> Option<DelegationId> {
        let id = DelegationId::new(r.get("id")?.as_str()?).ok()?;
        if self.delegations.contains_key(&id) {
            return None;
        }
        let bytes = serde_json::to_vec(r.get("invite")?).ok()?;
        let (Message::Invite(inv), _) = crate::wire::decode_message(&bytes).ok()? else {
            return None;
        };
        let ms = |k: &str| {
            r.get(k)
                .and_then(serde_json::Value::as_u64)
                .map(Timestamp::from_unix_millis)
        };
        let state = DelegationState::parse(r.get("state")?.as_str()?)?;
        let ended = r.get("ended").and_then(|v| v.as_bool()).unwrap_or(false);
        let mut snapshots = BTreeMap::new();
        let mut order = Vec::new();
        for s in r
            .get("snapshots")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
        {
            let Some(sid) = s
                .get("id")
                .and_then(|v| v.as_str())
                .and_then(|v| SnapshotId::new(v).ok())
            else {
                continue;
            };
            order.push(sid.clone());
            snapshots.insert(
                sid.clone(),
                SnapshotRecord {
                    id: sid,
                    summary: s
                        .get("summary")
                        .and_then(|v| v.as_str())
                        .unwrap_or("")
                        .to_owned(),
                    highlights: crate::engine::record_strings(s, "highlights"),
                    recommended: s
                        .get("recommended")
                        .and_then(|v| v.as_bool())
                        .unwrap_or(false),
                    metadata: s
                        .get("metadata")
                        .and_then(|v| v.as_object())
                        .map(|m| m.clone().into_iter().collect())
                        .unwrap_or_default(),
                    status: status_from_json(s.get("status").unwrap_or(&serde_json::Value::Null)),
                    received_at: s
                        .get("receivedAt")
                        .and_then(|v| v.as_u64())
                        .map(Timestamp::from_unix_millis)
                        .unwrap_or(now),
                    applied_at: s
                        .get("appliedAt")
                        .and_then(|v| v.as_u64())
                        .map(Timestamp::from_unix_millis),
                    error: s
                        .get("error")
                        .filter(|e| !e.is_null())
                        .and_then(|e| serde_json::from_value(e.clone()).ok()),
                },
            );
        }
        let stored: Vec<SnapshotId> = r
            .get("stored")
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().and_then(|s| SnapshotId::new(s).ok()))
                    .collect()
            })
            .unwrap_or_default();
        // Snapshots in flight when the process stopped: one whose bytes are stored was being
        // applied (the driver recovered that apply before restoring: the workspace is all old
        // or all new), so it is pending again; one that was being stored is forgotten and
        // received again (the executor was not acknowledged): replayed on the reconnected
        // event stream, or fetched if `done` had been heard.
        let mut awaiting_snapshot = None;
        for sid in order.clone() {
            let Some(rec) = snapshots.get_mut(&sid) else {
                continue;
            };
            if rec.status != SnapshotStatus::InFlight {
                continue;
            }
            if stored.contains(&sid) {
                rec.status = SnapshotStatus::Pending;
                rec.error = Some(interrupted_apply());
            } else {
                snapshots.remove(&sid);
                order.retain(|s| s != &sid);
                if state == DelegationState::Completed {
                    awaiting_snapshot = Some(sid);
                }
            }
        }
        let result = crate::engine::record_outcome(r, "result");
        let error = r
            .get("error")
            .filter(|v| !v.is_null())
            .and_then(|e| serde_json::from_value(e.clone()).ok());
        let result_error = r
            .get("resultError")
            .filter(|v| !v.is_null())
            .and_then(|e| serde_json::from_value(e.clone()).ok());
        let snapshot_mode = r
            .get("snapshotMode")
            .and_then(|v| v.as_str())
            .and_then(SnapshotMode::parse)
            .unwrap_or_default();
        // A store interrupted by the restart may have left bytes the record does not list:
        // delete them (deleting is idempotent; the snapshot is received again, or lost anyway).
        let interrupted_stores: Vec<SnapshotId> = if snapshot_mode != SnapshotMode::Discard {
            r.get("snapshots")
                .and_then(|v| v.as_array())
                .into_iter()
                .flatten()
                .filter(|x| {
                    x.pointer("/status/status").and_then(|v| v.as_str()) == Some("in_flight")
                })
                .filter_map(|x| {
                    x.get("id")
                        .and_then(|v| v.as_str())
                        .and_then(|v| SnapshotId::new(v).ok())
                })
                .filter(|sid| !stored.contains(sid))
                .collect()
        } else {
            Vec::new()
        };
        let dialect = if r.get("dialect").and_then(|v| v.as_str()) == Some("seed") {
            Dialect::Seed
        } else {
            Dialect::Reference
        };
        let start_sent = r
            .get("startSent")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        // Anything past ACCEPT (or terminal but not wound down) may hold an export view.
        let prepared = !ended
            && (state.is_terminal()
                || matches!(
                    state,
                    DelegationState::Accepted | DelegationState::Started | DelegationState::Running
                ));
        let req = DelegateRequest {
            id: id.clone(),
            peer: r.get("peer")?.as_str()?.to_owned(),
            dialect,
            task: inv.task,
            ttl_seconds: inv.lease.ttl_seconds,
            access_mode: inv.lease.access_mode,
            resources: inv.resources,
            transport: inv.transport.unwrap_or(TransportKind::Archive),
            snapshot_mode,
            auth: inv.auth,
            allow_sensitive: r
                .get("allowSensitive")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
        };
        let not_shipped = r
            .get("notShipped")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
            .filter_map(|n| {
                Some(NotShipped {
                    path: n.get("path")?.as_str()?.to_owned(),
                    reason: NotShippedReason::parse(n.get("reason")?.as_str()?)?,
                })
            })
            .collect::<Vec<_>>();
        let not_shipped_count = r
            .get("notShippedCount")
            .and_then(|v| v.as_u64())
            .unwrap_or(not_shipped.len() as u64);
        let access = r
            .get("accessMode")
            .and_then(|v| v.as_str())
            .and_then(AccessMode::parse)
            .unwrap_or(req.access_mode);
        self.delegations.insert(
            id.clone(),
            Delegation {
                req,
                machine: DelegationMachine::restore(state),
                created_at: ms("createdAt").unwrap_or(now),
                updated_at: ms("updatedAt").unwrap_or(now),
                expires_at: ms("expiresAt"),
                invited_at: None,
                access,
                features: crate::engine::record_strings(r, "features"),
                accept: None,
                transport: if prepared {
                    TransportPhase::Prepared { handle: None }
                } else {
                    TransportPhase::None
                },
                stream: Stream::Closed,
                stream_failures: 0,
                start_sent,
                snapshots,
                snapshot_order: order,
                stored,
                ops_in_flight: 0,
                awaiting_snapshot,
                applies: Applies::Idle,
                result_error,
                heard_terminal: r
                    .get("heardTerminal")
                    .and_then(|v| v.as_bool())
                    .unwrap_or(false),
                ack_sent: false,
                result,
                error,
                ended,
                warnings: crate::engine::record_strings(r, "warnings"),
                not_shipped,
                not_shipped_count,
            },
        );
        for snapshot_id in interrupted_stores {
            self.core
                .outputs
                .push_back(DelegatorOutput::DeleteStoredSnapshot {
                    id: id.clone(),
                    snapshot_id,
                });
        }
        Some(id)
    }

    /// Decides how a restored delegation continues (see [`Delegator::restore`]).
    pub(super) fn resume(&mut self, now: Timestamp, id: &DelegationId) {
        let Some(d) = self.delegations.get(id) else {
            return;
        };
        let state = d.machine.state();
        if d.ended {
            let at = d.updated_at.saturating_add(self.config.retention).max(now);
            self.core.timers.set(id, Timer::Purge, at);
            return;
        }
        let restarted = |what: &str| {
            ErrorInfo::new(
                ErrorCode::SetupFailed,
                format!("the delegator restarted {what}; the delegation was abandoned"),
            )
        };
        match state {
            DelegationState::Created => {
                self.transition(
                    now,
                    id,
                    DelegationEvent::SendError,
                    Some(restarted("before the invitation")),
                );
                self.wind_down(now, id);
            }
            DelegationState::Invited | DelegationState::Accepted => {
                self.abandon(now, id, restarted("before START"));
            }
            DelegationState::Started | DelegationState::Running => {
                let exp = d.expires_at;
                let peer = d.req.peer.clone();
                match exp {
                    Some(e) if now >= e && state == DelegationState::Running => {
                        self.expire(now, id);
                        return;
                    }
                    Some(e) if now >= e => {
                        self.core.timers.set(
                            id,
                            Timer::SetupGrace,
                            now.saturating_add(self.config.setup_grace),
                        );
                    }
                    Some(e) => self.core.timers.set(id, Timer::Lease, e),
                    None => {}
                }
                let d = self.delegations.get_mut(id).expect("exists");
                d.stream = Stream::Opening;
                self.core
                    .outputs
                    .push_back(DelegatorOutput::OpenEventStream {
                        id: id.clone(),
                        peer,
                    });
            }
            // Terminal but not ended: fetch a result whose storing was interrupted, then
            // finish winding down (ack, release).
            _ => {
                if d.awaiting_snapshot.is_some() {
                    let peer = d.req.peer.clone();
                    self.core.outputs.push_back(DelegatorOutput::FetchResult {
                        id: id.clone(),
                        peer,
                    });
                }
                self.wind_down(now, id)
            }
        }
    }
}
