//! Executing the engine's snapshot outputs: storing a result (received into a file, inline,
//! or downloaded), applying or previewing a stored one, and removing what is done with.

use super::*;

impl<R: Runtime> Loop<R> {
    /// [`DelegatorOutput::StoreSnapshot`].
    pub(super) fn store(
        &mut self,
        id: DelegationId,
        mut snapshot: Box<SnapshotEvent>,
        source: ResultSource,
    ) {
        let from_storage = match source {
            ResultSource::GitBranch(r) => return self.store_git(id, snapshot, r),
            ResultSource::StorageObject => true,
            ResultSource::Event => false,
        };
        if from_storage {
            // Our own result object, read with our own presigned GET: never the URL the
            // executor named.
            match &self.opts.object_store {
                Some(s) => {
                    let key = s.result_key(&id);
                    snapshot.data.url = Some(s.get(&key, crate::objects::OWN_REQUEST_TTL).url);
                }
                // The local provider: the result this delegator received itself (the store
                // takes the file over).
                None => {
                    let f = super::local_objects::local_result_file(&self.opts.state_dir, &id);
                    snapshot.data.local_file = Some(f.to_string_lossy().into_owned());
                }
            }
        }
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
            .filter(|_| !from_storage)
            .map(|u| self.credential_headers(&id, u))
            .unwrap_or_default();
        let note = self.tx.clone();
        self.spawn_in(crate::delegation_span(&id), async move {
            let sid = snapshot.snapshot_id.clone();
            let result = store_snapshot(&http, &dir, &snapshot, &headers, limit, download_timeout)
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

    /// [`DelegatorOutput::CloseApply`].
    pub(super) fn close_apply(&mut self, id: DelegationId) {
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

    /// [`DelegatorOutput::DeleteStoredSnapshot`].
    pub(super) fn delete_stored(&mut self, id: DelegationId, snapshot_id: SnapshotId) {
        let dir = self.snapshot_dir(&id);
        let _ = std::fs::remove_file(dir.join(format!("{snapshot_id}.zip")));
        let _ = std::fs::remove_file(dir.join(format!("{snapshot_id}.zip.part")));
        let _ = std::fs::remove_file(dir.join(format!("{snapshot_id}.json")));
        let _ = std::fs::remove_dir(&dir);
    }

    /// What applying or previewing a stored snapshot of `id` reads.
    fn stored_snapshot(&self, id: &DelegationId) -> StoredSnapshot {
        StoredSnapshot {
            specs: self.specs.get(id).cloned().unwrap_or_default(),
            // A git result's delta ZIP is this delegator's own (built when it was stored);
            // any other snapshot is the executor's archive.
            built_here: self
                .engine
                .get(id)
                .is_some_and(|v| v.request.transport == TransportKind::Git),
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
        rebaseline: bool,
    ) {
        let rt = self.rt.clone();
        let feed = self.feed();
        let t = self.opts.transport.clone();
        let stored = self.stored_snapshot(&id);
        let advance = rebaseline.then(|| stored.advance());
        self.spawn_in(crate::delegation_span(&id), async move {
            let did = id.clone();
            let s = sid.clone();
            let result = blocking(&rt, move || {
                stored.with_request(&did, &s, layout, access, checksum, |req| {
                    t.apply_snapshot(req, &CancelFlag::new())
                        .map(|report| {
                            tracing::info!(delegation = %did, snapshot = %s, written = report.written.len(), deleted = report.deleted.len(), merged = report.merged.len(), "snapshot applied");
                            if let Some(advance) = advance {
                                advance.past(&did, &report);
                            }
                            (report.left_out(), report.changed())
                        })
                        .map_err(|e| e.apply_error_info())
                })
            })
            .await;
            let (result, (left_out, changed)) = match result {
                Ok(lists) => (Ok(()), lists),
                Err(e) => (Err(e), Default::default()),
            };
            feed(DelegatorInput::SnapshotApplied {
                id,
                snapshot_id: sid,
                result,
                left_out,
                changed,
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
    /// Whether its snapshots are delta ZIPs this delegator built (a git delegation's).
    built_here: bool,
    baselines: Arc<Mutex<BTreeMap<DelegationId, Baseline>>>,
    baseline_file: PathBuf,
    dir: PathBuf,
    limits: awcp_proto::AdmissionLimits,
}

/// Moves a delegation's baseline past an applied snapshot (multi-round delegations, see
/// [`DelegatorOutput::ApplySnapshot`]'s `rebaseline`), in memory and where it is persisted.
struct AdvanceBaseline {
    roots: BTreeMap<String, PathBuf>,
    baselines: Arc<Mutex<BTreeMap<DelegationId, Baseline>>>,
    baseline_file: PathBuf,
}

impl AdvanceBaseline {
    fn past(&self, id: &DelegationId, report: &awcp_transports::ApplyReport) {
        let mut map = self.baselines.lock().unwrap_or_else(|p| p.into_inner());
        let Some(mut baseline) = map
            .get(id)
            .cloned()
            .or_else(|| load_baseline(&self.baseline_file))
        else {
            return;
        };
        baseline.advance(&report.written, &report.deleted, &self.roots);
        if let (Some(dir), Ok(json)) = (self.baseline_file.parent(), serde_json::to_vec(&baseline))
        {
            if let Err(e) =
                crate::executor::journal::write_atomic(dir, &format!("{id}.json"), &json)
            {
                tracing::warn!(delegation = %id, "persisting the next round's baseline: {e}");
            }
        }
        map.insert(id.clone(), baseline);
    }
}

impl StoredSnapshot {
    /// What moves the baseline past an apply of this delegation.
    fn advance(&self) -> AdvanceBaseline {
        AdvanceBaseline {
            roots: self
                .specs
                .iter()
                .map(|s| (s.name.as_str().to_owned(), s.source_path.clone()))
                .collect(),
            baselines: self.baselines.clone(),
            baseline_file: self.baseline_file.clone(),
        }
    }

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
            built_here: self.built_here,
        })
    }
}
