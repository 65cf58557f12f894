//! Executing the engine's transport outputs on the blocking pool: the admission scan, the
//! workspace's prepare (a live transport, or an archive inline or by URL) and its release.

use super::*;

impl<R: Runtime> Loop<R> {
    /// [`DelegatorOutput::ScanWorkspace`].
    pub(super) fn scan(&mut self, id: DelegationId) {
        let specs = self.specs.get(&id).cloned().unwrap_or_default();
        let feed = self.feed();
        let rt = self.rt.clone();
        self.spawn_in(crate::delegation_span(&id), async move {
            let result = blocking(&rt, move || scan(&specs)).await;
            feed(DelegatorInput::ScanCompleted { id, result });
        });
    }

    /// [`DelegatorOutput::PrepareTransport`] of a live transport (SSHFS).
    pub(super) fn prepare_live(
        &mut self,
        id: DelegationId,
        transport: TransportKind,
        access_mode: AccessMode,
        expires_at: Timestamp,
        layout: Layout,
    ) {
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

    /// [`DelegatorOutput::PrepareTransport`] of the archive transport (inline or by URL).
    pub(super) fn prepare_archive(
        &mut self,
        id: DelegationId,
        access_mode: AccessMode,
        layout: Layout,
        delivery: ArchiveDelivery,
    ) {
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
                    crate::executor::journal::write_atomic(dir, &format!("{did}.json"), &json)
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
                            let _ = note.unbounded_send(Cmd::ArchiveFile(did.clone(), f.into()));
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
                        let url = format!("{}/archives/{token}", base.trim_end_matches('/'));
                        // Known to the loop before the engine grants the URL.
                        let _ = note.unbounded_send(Cmd::ArchiveFile(did.clone(), f.path.clone()));
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

    /// [`DelegatorOutput::ReleaseTransport`]: every transport forgets what it holds for `id`.
    pub(super) fn release(&mut self, id: DelegationId) {
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
}
