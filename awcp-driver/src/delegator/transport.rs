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

    /// [`DelegatorOutput::PrepareTransport`] of the archive transport (inline or by URL), of
    /// the storage transport (the archive is uploaded to the object store and the handle
    /// names presigned URLs), or of the git transport (the archive becomes the base commit).
    pub(super) fn prepare_archive(
        &mut self,
        id: DelegationId,
        access_mode: AccessMode,
        layout: Layout,
        delivery: ArchiveDelivery,
        via: Via,
    ) {
        let storage = match via {
            Via::Storage(t) => Some(t),
            Via::Archive | Via::Git => None,
        };
        let for_git = via == Via::Git;
        let specs = self.specs.get(&id).cloned().unwrap_or_default();
        let (admission, allow_sensitive) = self.admission_of(&id);
        let t = self.opts.transport.clone();
        let feed = self.feed();
        let rt = self.rt.clone();
        let by_url = delivery == ArchiveDelivery::ByUrl || storage.is_some() || for_git;
        let store = self.opts.object_store.clone();
        let state_dir = self.opts.state_dir.clone();
        let http = self.http.clone();
        let peer = self.engine.get(&id).map(|v| v.request.peer);
        // Where the executor reaches this delegator's archive listener (archive URLs, the
        // storage transport's local objects).
        let base = match (self.opts.archive_base_url.as_deref(), peer.as_deref()) {
            (Some(b), Some(p)) => Some(agent_rt::origin::concrete_base_for(b, p)),
            (b, _) => b.map(str::to_owned),
        };
        let local_base = base.clone();
        let dir = self.opts.state_dir.join("archives");
        let dir2 = dir.clone();
        let baselines = self.baselines.clone();
        let baseline_file = self.baseline_file(&id);
        let note = self.tx.clone();
        let note2 = self.tx.clone();
        let git = self.git.clone();
        let workspace_root = match (&specs[..], layout) {
            ([one], Layout::Flat) => Some(one.source_path.clone()),
            _ => None,
        };
        self.spawn_in(crate::delegation_span(&id), async move {
            let did = id.clone();
            let for_storage = storage.is_some() || for_git;
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
                        (Packed::Handle(TransportHandle::Archive(h)), None)
                    }
                    ArchiveOutput::File(f) if for_storage => (Packed::ToUpload(f), None),
                    ArchiveOutput::File(f) => {
                        let token = crate::security::random_token().map_err(|e| {
                            PrepareFailure::Local(format!("archive URL token: {e}"))
                        })?;
                        let base = base.unwrap_or_default();
                        let url = format!("{}/archives/{token}", base.trim_end_matches('/'));
                        // Known to the loop before the engine grants the URL.
                        let _ = note.unbounded_send(Cmd::ArchiveFile(did.clone(), f.path.clone()));
                        (
                            Packed::Handle(TransportHandle::Archive(f.handle_for_url(url))),
                            Some(SecretDigest::of(&token)),
                        )
                    }
                })
            })
            .await;
            let result = match (result, storage) {
                (Ok((Packed::ToUpload(f), _)), None) if for_git => {
                    let (rt, id2) = (rt.clone(), id.clone());
                    blocking(&rt, move || {
                        super::git::prepare(&git, local_base.as_deref(), &id2, f, workspace_root)
                    })
                    .await
                }
                (Ok((Packed::ToUpload(f), _)), Some(expires_at)) if store.is_some() => {
                    upload_workspace(&http, store, &state_dir, &id, f, expires_at)
                        .await
                        .map(|h| (h, None))
                }
                (Ok((Packed::ToUpload(f), _)), Some(expires_at)) => {
                    local_objects_handle(&note2, local_base.as_deref(), &id, f, expires_at)
                }
                (Ok((Packed::Handle(h), token)), _) => Ok((h, token)),
                (Ok((Packed::ToUpload(_), _)), None) => Err(PrepareFailure::Local(
                    "an archive file without a storage transport".into(),
                )),
                (Err(e), _) => Err(e),
            };
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
        // The engine revoked the archive's URL with this output; its file goes too, and a
        // result the local object store received.
        if let Some(path) = self.archive_files.remove(&id) {
            let _ = std::fs::remove_file(path);
        }
        super::local_objects::remove_local_result(&self.opts.state_dir, &id);
        let store = self.opts.object_store.clone();
        let state_dir = self.opts.state_dir.clone();
        let http = self.http.clone();
        let git = self.release_git(&id);
        self.spawn_in(crate::delegation_span(&id), async move {
            let did = id.clone();
            let mut warnings = blocking(&rt, move || {
                let mut warnings: Vec<String> = git().into_iter().collect();
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
            // Storage: both objects go before the release is reported.
            if let Some(store) = store {
                if let Err(e) =
                    crate::objects::delete_journalled(&http, &store, &state_dir, &id).await
                {
                    tracing::warn!(delegation = %id, "deleting the storage objects: {e}");
                    warnings.push(format!("deleting the storage objects failed: {e}"));
                }
            }
            feed(DelegatorInput::TransportReleased { id, warnings });
        });
    }
}

impl<R: Runtime> Loop<R> {
    /// At start-up: deletes the storage objects of delegations a previous process journalled
    /// and that are over (settled, or unknown): what a crash left between upload and release.
    /// Those of delegations that go on are deleted at their release.
    pub(super) fn sweep_objects(&mut self) {
        let Some(store) = self.opts.object_store.clone() else {
            return;
        };
        let orphans = self
            .engine
            .leftovers_to_release(crate::objects::journalled(&self.opts.state_dir));
        if orphans.is_empty() {
            return;
        }
        let (http, state_dir) = (self.http.clone(), self.opts.state_dir.clone());
        self.spawn_in(tracing::info_span!("storage sweep"), async move {
            for id in orphans {
                match crate::objects::delete_journalled(&http, &store, &state_dir, &id).await {
                    Ok(()) => tracing::info!(delegation = %id, "storage objects a crash left deleted"),
                    Err(e) => tracing::warn!(delegation = %id, "deleting storage objects a crash left: {e}"),
                }
            }
        });
    }
}

/// What packing produced: a handle to send, or (storage) a file to upload first.
enum Packed {
    Handle(TransportHandle),
    ToUpload(awcp_transports::archive::ArchiveFile),
}

/// Storage without a bucket: the local provider (see `local_objects`). The workspace ZIP
/// stays where it was packed (deleted at release); the handle names this delegator's object
/// URLs under one fresh token, whose digest the engine grants.
fn local_objects_handle(
    note: &mpsc::UnboundedSender<Cmd>,
    base: Option<&str>,
    id: &DelegationId,
    f: awcp_transports::archive::ArchiveFile,
    expires_at: Timestamp,
) -> Result<(TransportHandle, Option<SecretDigest>), PrepareFailure> {
    let Some(base) = base else {
        let _ = std::fs::remove_file(&f.path);
        return Err(PrepareFailure::NotConfigured(TransportKind::Storage));
    };
    let token = crate::security::random_token().map_err(|e| {
        let _ = std::fs::remove_file(&f.path);
        PrepareFailure::Local(format!("storage object token: {e}"))
    })?;
    use awcp_proto::engine::delegator::ObjectUse;
    let url = |u| {
        format!(
            "{}{}",
            base.trim_end_matches('/'),
            super::local_objects::object_path(&token, u)
        )
    };
    // Known to the loop before the engine grants the token.
    let _ = note.unbounded_send(Cmd::ArchiveFile(id.clone(), f.path.clone()));
    let handle = TransportHandle::Storage(awcp_proto::StorageHandle {
        download_url: url(ObjectUse::GetWorkspace),
        upload_url: url(ObjectUse::PutResult),
        checksum: f.checksum.clone(),
        expires_at,
        headers: Default::default(),
    });
    Ok((handle, Some(SecretDigest::of(&token))))
}

/// Storage: journals `id`'s objects (so a crash cannot leave them unnamed), uploads the
/// workspace ZIP (streamed), and builds the handle: a GET of it and a PUT of the result, both
/// presigned until the lease ends (capped at the store's limit). The local file goes.
async fn upload_workspace<R: Runtime>(
    http: &agent_rt::HttpClient<R>,
    store: Option<Arc<awcp_transports::storage::S3Store>>,
    state_dir: &std::path::Path,
    id: &DelegationId,
    f: awcp_transports::archive::ArchiveFile,
    expires_at: Timestamp,
) -> Result<TransportHandle, PrepareFailure> {
    let result = async {
        let store = store.ok_or(PrepareFailure::NotConfigured(TransportKind::Storage))?;
        let (sd, s2, i2) = (state_dir.to_path_buf(), store.clone(), id.clone());
        blocking(http.runtime(), move || {
            crate::objects::journal(&sd, &s2, &i2)
        })
        .await
        .map_err(|e| PrepareFailure::Local(format!("journalling the objects: {e}")))?;
        let key = store.workspace_key(id);
        let timeout = std::time::Duration::from_secs(3600);
        crate::objects::upload(http, &store, &key, f.path.clone(), timeout)
            .await
            .map_err(|why| {
                PrepareFailure::Transport(awcp_proto::ErrorInfo::new(
                    awcp_proto::ErrorCode::TransportError,
                    format!("uploading the workspace to storage: {why}"),
                ))
            })?;
        // Valid until the lease ends, or as long as the store allows (SigV4: 7 days); the
        // handle says which.
        let now = crate::dashboard::now();
        let left = crate::dashboard::secs_between(now, expires_at);
        let ttl = std::time::Duration::from_secs(u64::try_from(left).unwrap_or(0).max(1))
            .min(awcp_transports::storage::MAX_PRESIGN);
        Ok(TransportHandle::Storage(awcp_proto::StorageHandle {
            download_url: store.get(&key, ttl).url,
            upload_url: store.put(&store.result_key(id), ttl).url,
            checksum: f.checksum.clone(),
            expires_at: expires_at.min(now.saturating_add(ttl)),
            headers: Default::default(),
        }))
    }
    .await;
    let path = f.path.clone();
    let _ = blocking(http.runtime(), move || std::fs::remove_file(path)).await;
    result
}
