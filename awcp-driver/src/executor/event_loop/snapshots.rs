//! Executing the engine's snapshot outputs: capture the work directory's result, drop a
//! snapshot file that is done with.

use super::*;

impl<R: Runtime> Loop<R> {
    /// [`ExecutorOutput::CaptureSnapshot`].
    pub(super) fn capture(
        &mut self,
        id: DelegationId,
        work_dir: String,
        snapshot_id: awcp_proto::SnapshotId,
        kind: awcp_proto::engine::SnapshotKind,
        delivery: SnapshotDelivery,
    ) {
        if delivery == SnapshotDelivery::Push {
            return self.push_result(id, work_dir);
        }
        let t = self.transport_of(&id);
        let feed = self.feed();
        let rt = self.rt.clone();
        let url_base = match &delivery {
            SnapshotDelivery::Inline | SnapshotDelivery::Upload { .. } | SnapshotDelivery::Push => {
                None
            }
            SnapshotDelivery::ByUrl { base } => Some(base.clone()),
        };
        // Served by URL: kept (and journaled) across a restart. Sent inline or uploaded: not
        // journaled, so what a restart leaves there is removed at start.
        let dir = match &delivery {
            SnapshotDelivery::Inline | SnapshotDelivery::Upload { .. } | SnapshotDelivery::Push => {
                self.scratch.join(INLINE_RESULTS)
            }
            SnapshotDelivery::ByUrl { .. } => self.scratch.join("snapshots"),
        };
        let upload = match delivery {
            SnapshotDelivery::Upload { url } => Some(url),
            SnapshotDelivery::Inline | SnapshotDelivery::ByUrl { .. } | SnapshotDelivery::Push => {
                None
            }
        };
        let files = self.snapshots.clone();
        let kind = match kind {
            awcp_proto::engine::SnapshotKind::Full => awcp_transports::SnapshotKind::Full,
            awcp_proto::engine::SnapshotKind::Delta => awcp_transports::SnapshotKind::Delta,
        };
        let http = self.http.clone();
        let upload_timeout = self.engine.config().archive_download_timeout;
        self.spawn_in(crate::delegation_span(&id), async move {
            let sid = snapshot_id.clone();
            let did = id.clone();
            let files2 = files.clone();
            let result = blocking(&rt, move || {
                // A file in both deliveries: by URL it is served, inline its text is
                // written from it as the event or result body is sent.
                let d = dir.join(did.as_str());
                std::fs::create_dir_all(&d)
                    .map_err(|e| CaptureFailure::Local(format!("snapshot dir: {e}")))?;
                let delivery = Delivery::File(d);
                let snap = t
                    .capture(Path::new(&work_dir), kind, &delivery, &CancelFlag::new())
                    .map_err(|e| CaptureFailure::Transport(e.to_error_info()))?;
                Ok::<_, CaptureFailure>(to_captured(snap, &did, &sid, url_base.as_deref(), &files2))
            })
            .await;
            let result = match (result, upload) {
                (Ok(c), Some(url)) => {
                    upload_result(&http, c, &url, &id, &snapshot_id, &files, upload_timeout).await
                }
                (r, _) => r,
            };
            feed(ExecutorInput::SnapshotCaptured {
                id,
                result: result.map(Box::new),
            });
        });
    }

    /// [`SnapshotDelivery::Push`]: the git transport commits the work directory and pushes
    /// it; the snapshot names the branch ([`awcp_proto::wire::git_result_text`]).
    fn push_result(&mut self, id: DelegationId, work_dir: String) {
        let feed = self.feed();
        let rt = self.rt.clone();
        let git = self.git.clone();
        self.spawn_in(crate::delegation_span(&id), async move {
            let message = format!("AWCP {id}: the executor's work");
            let result = blocking(&rt, move || {
                let git = git.ok_or_else(|| {
                    CaptureFailure::Local("the git transport is not served here".into())
                })?;
                let r = git
                    .push(Path::new(&work_dir), &message)
                    .map_err(|e| CaptureFailure::Transport(e.to_error_info()))?;
                let mut metadata = std::collections::BTreeMap::new();
                metadata.insert(
                    "changedFiles".to_owned(),
                    serde_json::json!(r.changed_files),
                );
                metadata.insert("commitHash".to_owned(), serde_json::json!(r.commit_hash));
                Ok(awcp_proto::engine::CapturedSnapshot {
                    data: awcp_proto::ArchiveData {
                        base64: Some(awcp_proto::wire::git_result_text(&r)),
                        ..awcp_proto::ArchiveData::default()
                    },
                    checksum: None,
                    metadata,
                })
            })
            .await;
            feed(ExecutorInput::SnapshotCaptured {
                id,
                result: result.map(Box::new),
            });
        });
    }

    /// [`ExecutorOutput::DropSnapshot`].
    pub(super) fn drop_snapshot(&mut self, id: DelegationId, snapshot_id: awcp_proto::SnapshotId) {
        let key = (id.to_string(), snapshot_id.to_string());
        let path = self
            .snapshots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key)
            // Captured before a restart: where capture puts it.
            .or_else(|| {
                let p = self
                    .scratch
                    .join("snapshots")
                    .join(id.as_str())
                    .join(format!("{snapshot_id}.zip"));
                p.exists().then_some(p)
            });
        if let Some(p) = path {
            let _ = std::fs::remove_file(&p);
            if let Some(parent) = p.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
}

/// A `storage` result: PUTs the captured file to the handle's `uploadUrl` (streamed), then
/// the snapshot names it ([`awcp_proto::wire::storage_result_text`]) instead of carrying it.
/// The file goes either way.
async fn upload_result<R: Runtime>(
    http: &agent_rt::HttpClient<R>,
    mut captured: awcp_proto::engine::CapturedSnapshot,
    url: &str,
    id: &DelegationId,
    sid: &awcp_proto::SnapshotId,
    files: &crate::executor::SnapshotFiles,
    timeout: std::time::Duration,
) -> Result<awcp_proto::engine::CapturedSnapshot, CaptureFailure> {
    files
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&(id.to_string(), sid.to_string()));
    let Some(file) = captured
        .data
        .local_file
        .take()
        .map(std::path::PathBuf::from)
    else {
        return Err(CaptureFailure::Local(
            "the captured result has no file".into(),
        ));
    };
    let headers = [("content-type", "application/zip".to_owned())];
    let put = crate::objects::put_file(http, url, &headers, file.clone(), timeout).await;
    let _ = std::fs::remove_file(&file);
    if let Some(dir) = file.parent() {
        let _ = std::fs::remove_dir(dir);
    }
    put.map_err(|why| {
        CaptureFailure::Transport(awcp_proto::ErrorInfo::new(
            awcp_proto::ErrorCode::TransportError,
            format!("uploading the result: {why}"),
        ))
    })?;
    captured.data = awcp_proto::ArchiveData {
        base64: Some(awcp_proto::wire::storage_result_text(url)),
        ..awcp_proto::ArchiveData::default()
    };
    Ok(captured)
}
