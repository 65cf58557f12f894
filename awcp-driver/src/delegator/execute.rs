//! Executing the engine's outputs: HTTP to the executor, transports on the
//! blocking pool, snapshot store and apply (results are received in `receive.rs`).

use super::*;

impl<R: Runtime> Loop<R> {
    pub(super) fn execute(&mut self, out: DelegatorOutput) {
        self.journal_for(&out);
        match out {
            DelegatorOutput::ScanWorkspace { id } => {
                let specs = self.specs.get(&id).cloned().unwrap_or_default();
                let feed = self.feed();
                let rt = self.rt.clone();
                self.spawn_in(crate::delegation_span(&id), async move {
                    let result = blocking(&rt, move || scan(&specs)).await;
                    feed(DelegatorInput::ScanCompleted { id, result });
                });
            }
            DelegatorOutput::SendMessage {
                id,
                to,
                peer,
                message,
                dialect,
            } => {
                // A large archive is streamed from its file; otherwise START's inline
                // archive becomes the body's buffer: never held twice.
                let body = match encode_message_split(&message, dialect) {
                    Some(split) => OutBody::Split(split),
                    None => OutBody::Text(encode_message_owned(*message, dialect)),
                };
                self.post(id, to, peer.to_string(), body);
            }
            DelegatorOutput::SendCancel { id, peer } => {
                let url = wire_http::cancel_url(&peer, &id);
                self.post(id, Outbound::Cancel, url, OutBody::None);
            }
            DelegatorOutput::SendAck { id, peer } => {
                let url = wire_http::ack_url(&peer, &id);
                self.post(id, Outbound::Ack, url, OutBody::None);
            }
            DelegatorOutput::PrepareTransport {
                id,
                transport,
                access_mode,
                expires_at,
                layout,
                delivery: _,
            } if transport.is_live() => {
                let specs = self.specs.get(&id).cloned().unwrap_or_default();
                let (admission, allow_sensitive) = self.admission_of(&id);
                let t = self
                    .opts
                    .extra_transports
                    .iter()
                    .find(|t| t.kind() == transport)
                    .cloned();
                let feed = self.feed();
                let rt = self.rt.clone();
                self.spawn_in(crate::delegation_span(&id), async move {
                    let did = id.clone();
                    let result = blocking(&rt, move || {
                        let t = t.ok_or(PrepareFailure::NotConfigured(transport))?;
                        let req = PrepareRequest {
                            delegation_id: &did,
                            resources: &specs,
                            access_mode,
                            export: ExportViewKind::default(),
                            delivery: Delivery::Inline,
                            layout,
                            admission: Some(admission),
                            allow_sensitive,
                        };
                        t.prepare_live(&req, expires_at, &CancelFlag::new())
                            .map_err(|e| PrepareFailure::Transport(e.to_error_info()))
                    })
                    .await;
                    feed(DelegatorInput::TransportPrepared {
                        id,
                        result: result.map(Box::new),
                        archive_token: None,
                    });
                });
            }
            DelegatorOutput::PrepareTransport {
                id,
                transport: _,
                access_mode,
                expires_at: _,
                layout,
                delivery,
            } => {
                let specs = self.specs.get(&id).cloned().unwrap_or_default();
                let (admission, allow_sensitive) = self.admission_of(&id);
                let t = self.opts.transport.clone();
                let feed = self.feed();
                let rt = self.rt.clone();
                let by_url = delivery == ArchiveDelivery::ByUrl;
                let base = self.opts.archive_base_url.clone();
                let peer = self.engine.get(&id).map(|v| v.request.peer);
                let dir = self.opts.state_dir.join("archives");
                let dir2 = dir.clone();
                let baselines = self.baselines.clone();
                let baseline_file = self.baseline_file(&id);
                let note = self.tx.clone();
                self.spawn_in(crate::delegation_span(&id), async move {
                    let did = id.clone();
                    let result = blocking(&rt, move || {
                        let delivery = if by_url {
                            std::fs::create_dir_all(&dir)
                                .map_err(|e| PrepareFailure::Local(format!("archive dir: {e}")))?;
                            Delivery::File(dir)
                        } else {
                            Delivery::InlineOrFile(dir2)
                        };
                        let req = PrepareRequest {
                            delegation_id: &did,
                            resources: &specs,
                            access_mode,
                            export: ExportViewKind::default(),
                            delivery,
                            layout,
                            admission: Some(admission),
                            allow_sensitive,
                        };
                        let prepared = t
                            .prepare(&req, &CancelFlag::new())
                            .map_err(|e| PrepareFailure::Transport(e.to_error_info()))?;
                        let _ = note.unbounded_send(Cmd::Transferred(Transfer {
                            id: did.clone(),
                            what: "workspace archive",
                            bytes: prepared.archive.size_bytes(),
                        }));
                        // Persisted before START: an apply after a restart still compares
                        // against what was sent.
                        if let (Some(dir), Ok(json)) = (
                            baseline_file.parent(),
                            serde_json::to_vec(&prepared.baseline),
                        ) {
                            crate::executor::journal::write_atomic(
                                dir,
                                &format!("{did}.json"),
                                &json,
                            )
                            .map_err(|e| {
                                // Nothing prepared may outlive a failed prepare.
                                let _ = t.release(&did);
                                PrepareFailure::Local(format!("persisting the baseline: {e}"))
                            })?;
                        }
                        baselines
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(did.clone(), prepared.baseline.clone());
                        Ok::<_, PrepareFailure>(match prepared.archive {
                            ArchiveOutput::Inline(h) => {
                                if let Some(f) = &h.data.local_file {
                                    // Deleted when the transport is released.
                                    let _ = note
                                        .unbounded_send(Cmd::ArchiveFile(did.clone(), f.into()));
                                }
                                (TransportHandle::Archive(h), None)
                            }
                            ArchiveOutput::File(f) => {
                                let token = crate::security::random_token().map_err(|e| {
                                    PrepareFailure::Local(format!("archive URL token: {e}"))
                                })?;
                                let base = match (base.as_deref(), peer.as_deref()) {
                                    (Some(b), Some(p)) => agent_rt::origin::concrete_base_for(b, p),
                                    (b, _) => b.unwrap_or("").to_owned(),
                                };
                                let url =
                                    format!("{}/archives/{token}", base.trim_end_matches('/'));
                                // Known to the loop before the engine grants the URL.
                                let _ = note
                                    .unbounded_send(Cmd::ArchiveFile(did.clone(), f.path.clone()));
                                (
                                    TransportHandle::Archive(f.handle_for_url(url)),
                                    Some(SecretDigest::of(&token)),
                                )
                            }
                        })
                    })
                    .await;
                    let (result, archive_token) = match result {
                        Ok((handle, token)) => (Ok(Box::new(handle)), token),
                        Err(e) => (Err(e), None),
                    };
                    feed(DelegatorInput::TransportPrepared {
                        id,
                        result,
                        archive_token,
                    });
                });
            }
            DelegatorOutput::OpenEventStream { id, peer } => self.open_stream(id, peer),
            DelegatorOutput::CloseEventStream { id } => {
                if let Some(h) = self.streams.remove(&id) {
                    h.abort();
                }
            }
            DelegatorOutput::FetchResult { id, peer } => self.fetch_result(id, peer),
            DelegatorOutput::ApplySnapshot {
                id,
                snapshot_id,
                layout,
                access_mode,
                checksum,
            } => self.apply(id, snapshot_id, layout, access_mode, checksum),
            DelegatorOutput::StoreSnapshot { id, snapshot } => {
                // A result received into a file is the store's now.
                if let Some(f) = &snapshot.data.local_file {
                    self.unclaimed_results.retain(|u| u != f);
                }
                let http = self.http.clone();
                let feed = self.feed();
                let dir = self.snapshot_dir(&id);
                let limit = self.engine.config().max_snapshot_bytes;
                let download_timeout = self.engine.config().snapshot_download_timeout;
                let headers = snapshot
                    .data
                    .url
                    .as_deref()
                    .map(|u| self.credential_headers(&id, u))
                    .unwrap_or_default();
                let note = self.tx.clone();
                self.spawn_in(crate::delegation_span(&id), async move {
                    let sid = snapshot.snapshot_id.clone();
                    let result =
                        store_snapshot(&http, &dir, &snapshot, &headers, limit, download_timeout)
                            .await
                            .map(|bytes| {
                                let _ = note.unbounded_send(Cmd::Transferred(Transfer {
                                    id: id.clone(),
                                    what: "snapshot",
                                    bytes,
                                }));
                            });
                    if let (Err(_), Some(f)) = (&result, &snapshot.data.local_file) {
                        // Not stored: the received file goes (the event is received again).
                        let _ = std::fs::remove_file(f);
                    }
                    feed(DelegatorInput::SnapshotStored {
                        id,
                        snapshot_id: sid,
                        result,
                    });
                });
            }
            DelegatorOutput::CloseApply { id } => {
                let roots: Vec<PathBuf> = self
                    .specs
                    .get(&id)
                    .map(|specs| specs.iter().map(|r| r.source_path.clone()).collect())
                    .unwrap_or_default();
                if let Err(e) = awcp_transports::snapshot::close_apply(&roots, id.as_str()) {
                    // Harmless: the next start-up finds the apply finished and closes it.
                    tracing::warn!(delegation = %id, "removing a finished apply's directory: {e}");
                }
            }
            DelegatorOutput::DeleteStoredSnapshot { id, snapshot_id } => {
                let dir = self.snapshot_dir(&id);
                let _ = std::fs::remove_file(dir.join(format!("{snapshot_id}.zip")));
                let _ = std::fs::remove_file(dir.join(format!("{snapshot_id}.zip.part")));
                let _ = std::fs::remove_file(dir.join(format!("{snapshot_id}.json")));
                let _ = std::fs::remove_dir(&dir);
            }
            DelegatorOutput::ReleaseTransport { id } => {
                // Release is idempotent: every transport forgets what it holds for `id`.
                let mut ts = vec![self.opts.transport.clone()];
                ts.extend(self.opts.extra_transports.iter().cloned());
                let feed = self.feed();
                let rt = self.rt.clone();
                // The engine revoked the archive's URL with this output; its file goes too.
                if let Some(path) = self.archive_files.remove(&id) {
                    let _ = std::fs::remove_file(path);
                }
                self.spawn_in(crate::delegation_span(&id), async move {
                    let did = id.clone();
                    let warnings = blocking(&rt, move || {
                        let mut warnings = Vec::new();
                        for t in ts {
                            match t.release(&did) {
                                Ok(report) => warnings.extend(report.warnings),
                                Err(e) => {
                                    tracing::warn!(delegation = %did, "release failed: {e}");
                                    warnings.push(format!("releasing the workspace failed: {e}"));
                                }
                            }
                        }
                        for w in &warnings {
                            tracing::warn!(delegation = %did, "{w}");
                        }
                        warnings
                    })
                    .await;
                    feed(DelegatorInput::TransportReleased { id, warnings });
                });
            }
            DelegatorOutput::Event(ev) => self.on_event(ev),
        }
    }

    /// What applying or previewing a stored snapshot of `id` reads.
    fn stored_snapshot(&self, id: &DelegationId) -> StoredSnapshot {
        StoredSnapshot {
            specs: self.specs.get(id).cloned().unwrap_or_default(),
            baselines: self.baselines.clone(),
            baseline_file: self.baseline_file(id),
            dir: self.snapshot_dir(id),
            limits: self.opts.engine.admission,
        }
    }

    /// Applies the stored snapshot `sid` (see [`DelegatorOutput::ApplySnapshot`]).
    pub(super) fn apply(
        &mut self,
        id: DelegationId,
        sid: SnapshotId,
        layout: Layout,
        access: AccessMode,
        checksum: Option<String>,
    ) {
        let rt = self.rt.clone();
        let feed = self.feed();
        let t = self.opts.transport.clone();
        let stored = self.stored_snapshot(&id);
        self.spawn_in(crate::delegation_span(&id), async move {
            let did = id.clone();
            let s = sid.clone();
            let result = blocking(&rt, move || {
                stored.with_request(&did, &s, layout, access, checksum, |req| {
                    t.apply_snapshot(req, &CancelFlag::new())
                        .map(|report| {
                            tracing::info!(delegation = %did, snapshot = %s, written = report.written.len(), deleted = report.deleted.len(), "snapshot applied");
                        })
                        .map_err(|e| e.apply_error_info())
                })
            })
            .await;
            feed(DelegatorInput::SnapshotApplied {
                id,
                snapshot_id: sid,
                result,
            });
        });
    }

    /// Previews the stored snapshot `sid` as `plan` says (the engine's
    /// [`Delegator::preview_snapshot`]): what applying it would do, the workspace untouched.
    pub(super) fn preview(
        &mut self,
        id: DelegationId,
        sid: SnapshotId,
        plan: awcp_proto::engine::delegator::ApplyPlan,
        limits: PreviewLimits,
        reply: Reply<Preview>,
    ) {
        let rt = self.rt.clone();
        let t = self.opts.transport.clone();
        let stored = self.stored_snapshot(&id);
        self.spawn_in(crate::delegation_span(&id), async move {
            let result = blocking(&rt, move || {
                let (layout, access) = (plan.layout, plan.access_mode);
                stored.with_request(&id, &sid, layout, access, plan.checksum, |req| {
                    t.preview_snapshot(req, limits, &CancelFlag::new())
                        .map_err(|e| DelegatorError::Protocol(e.apply_error_info()))
                })
            })
            .await;
            let _ = reply.send(result);
        });
    }
}

/// A stored snapshot's surroundings: the delegation's resources, the baseline it was sent
/// with, the store directory, the admission limits.
struct StoredSnapshot {
    specs: Vec<ResourceSpec>,
    baselines: Arc<Mutex<BTreeMap<DelegationId, Baseline>>>,
    baseline_file: PathBuf,
    dir: PathBuf,
    limits: awcp_proto::AdmissionLimits,
}

impl StoredSnapshot {
    /// Runs `go` (on the blocking pool) with the apply request of snapshot `sid`.
    fn with_request<T>(
        &self,
        id: &DelegationId,
        sid: &SnapshotId,
        layout: Layout,
        access: AccessMode,
        checksum: Option<String>,
        go: impl FnOnce(ApplyRequest<'_>) -> T,
    ) -> T {
        // The base the delegator sent: in memory, or persisted at prepare.
        let baseline = self
            .baselines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
            .or_else(|| load_baseline(&self.baseline_file));
        let file = self.dir.join(format!("{sid}.zip"));
        // From the engine's record; a snapshot stored by an older release has it beside its
        // bytes instead.
        let checksum = checksum.or_else(|| {
            std::fs::read(self.dir.join(format!("{sid}.json")))
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .and_then(|m| m.get("checksum")?.as_str().map(str::to_owned))
        });
        go(ApplyRequest {
            delegation_id: id.as_str(),
            source: ArchiveSource::File(&file),
            expected_checksum: checksum.as_deref(),
            resources: &self.specs,
            access_mode: access,
            baseline: baseline.as_ref(),
            layout: Some(layout),
            limits: Some(self.limits),
            // The engine journals the apply after it returns; the proof of a finished swap
            // stays until then (`DelegatorOutput::CloseApply`), so a crash in between is
            // recovered as applied.
            keep_proof: true,
        })
    }
}
