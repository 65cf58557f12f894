//! The data plane on the executor's blocking pool: allocating, setting up, capturing and
//! releasing work directories. Each function reports facts; the engine decides.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use awcp_proto::engine::CapturedSnapshot;
use awcp_proto::{
    AllocationFailure, DelegationId, ErrorInfo, SetupFailure, TransportHandle, TransportKind,
    WorkspaceLayout,
};
use awcp_transports::archive::{ArchiveOutput, ArchiveSource};
use awcp_transports::manifest::Sha256Hex;
use awcp_transports::{CancelFlag, ExecutorTransport, SetupRequest};

use crate::runtime::{blocking, Runtime};

#[allow(unused_imports)]
use super::recovery::*;
#[allow(unused_imports)]
use super::*;

/// Detaches the transport from `work_dir` and removes it, never recursing into a mount.
pub(super) fn release_work_dir(
    t: &dyn ExecutorTransport,
    kind: &TransportKind,
    work_dir: &str,
) -> Result<(), ErrorInfo> {
    let p = Path::new(work_dir);
    if !kind.is_live() && is_mount_point(p) {
        tracing::warn!(path = %p.display(), "work directory is a mount point; left in place");
        return Ok(());
    }
    match t.release(p) {
        // Never recurse into a work directory that may still be a mount.
        Err(e) => {
            tracing::warn!("release of {work_dir} failed: {e}");
            Err(e.to_error_info())
        }
        Ok(()) => {
            if !is_mount_point(p) {
                let _ = std::fs::remove_dir_all(p);
            }
            Ok(())
        }
    }
}

/// The transport serving `kind` (the first one if none does: it refuses the handle).
pub(super) fn transport_for(
    transports: &[Arc<dyn ExecutorTransport>],
    kind: &TransportKind,
) -> Arc<dyn ExecutorTransport> {
    // Storage moves an archive: the archive transport checks and extracts it.
    let kind = match kind {
        TransportKind::Storage => &TransportKind::Archive,
        k => k,
    };
    transports
        .iter()
        .find(|t| t.kind() == *kind)
        .unwrap_or(&transports[0])
        .clone()
}

/// Whether `p` is a mount point (its device differs from its parent's).
pub(super) fn is_mount_point(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (
        std::fs::symlink_metadata(p),
        p.parent().map(std::fs::metadata),
    ) {
        (Ok(m), Some(Ok(pm))) => m.dev() != pm.dev(),
        _ => false,
    }
}

/// Checks the transport's dependency and creates the (empty) work directory; reports what it
/// found, the engine decides the error code.
pub(super) fn allocate(
    t: &dyn ExecutorTransport,
    work_dir: &Path,
) -> Result<(), AllocationFailure> {
    t.check_dependency()
        .map_err(|e| AllocationFailure::DependencyMissing {
            message: e.to_string(),
            hint: e.hint.clone(),
        })?;
    if let Ok(mut rd) = std::fs::read_dir(work_dir) {
        if rd.next().is_some() {
            return Err(AllocationFailure::NotEmpty);
        }
    }
    std::fs::create_dir_all(work_dir).map_err(|e| AllocationFailure::CannotCreate(e.to_string()))
}

/// The engine's name for the layout a transport found.
pub(super) fn layout_of(l: awcp_transports::archive::Layout) -> WorkspaceLayout {
    match l {
        awcp_transports::archive::Layout::PerResource => WorkspaceLayout::PerResource,
        awcp_transports::archive::Layout::Flat => WorkspaceLayout::Flat,
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn setup<R: Runtime>(
    http: &agent_rt::HttpClient<R>,
    t: Arc<dyn ExecutorTransport>,
    id: &DelegationId,
    work_dir: String,
    handle: TransportHandle,
    access: awcp_proto::AccessMode,
    resources: Vec<awcp_proto::Resource>,
    downloads: PathBuf,
    timeout: Duration,
    cancel: CancelFlag,
) -> Result<WorkspaceLayout, SetupFailure> {
    let rt = http.runtime();
    let transport_failed =
        |e: awcp_transports::TransportError| SetupFailure::Transport(e.to_error_info());
    if handle.kind().is_live() {
        return blocking(rt, move || {
            t.setup_live(Path::new(&work_dir), &handle, access, &cancel)
                // A live mount shows the delegator's export view: one directory per resource.
                .map(|()| WorkspaceLayout::PerResource)
                .map_err(transport_failed)
        })
        .await;
    }
    let names: Vec<_> = resources.into_iter().map(|r| r.name).collect();
    // Set up from an archive file that is ours to delete afterwards (received or downloaded),
    // of which the SHA-256 may be known already (computed as it was received).
    let from_file = |t: Arc<dyn ExecutorTransport>,
                     cancel: CancelFlag,
                     file: PathBuf,
                     sha256: Option<String>,
                     work_dir: String,
                     checksum: String,
                     names: Vec<_>| {
        blocking(rt, move || {
            let source = match sha256.as_deref() {
                Some(sha256) => ArchiveSource::HashedFile {
                    path: &file,
                    sha256,
                },
                None => ArchiveSource::File(&file),
            };
            let req = SetupRequest {
                work_dir: Path::new(&work_dir),
                source,
                expected_checksum: Some(&checksum),
                access_mode: access,
                resources: &names,
            };
            let r = t
                .setup(req, &cancel)
                .map(|r| layout_of(r.layout))
                .map_err(transport_failed);
            let _ = std::fs::remove_file(&file);
            r
        })
    };
    let h = match handle {
        TransportHandle::Archive(h) => h,
        // Storage: the workspace ZIP is an object to GET (with the handle's headers), checked
        // and extracted as an archive fetched by URL is.
        TransportHandle::Storage(s) => {
            let headers: Vec<(&str, String)> = s
                .headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.clone()))
                .collect();
            let file = download_to(
                http,
                &downloads,
                id,
                &s.download_url,
                &headers,
                u64::MAX / 2,
                timeout,
            )
            .await
            .map_err(|e| {
                SetupFailure::Fetch(format!("downloading the workspace from storage: {e}"))
            })?;
            let (file, sha256) = file;
            return from_file(t, cancel, file, Some(sha256), work_dir, s.checksum, names).await;
        }
        other => return Err(SetupFailure::UnsupportedTransport(other.kind())),
    };
    if let Some(file) = h.data.local_file.clone() {
        // Received inline and written to this file as it arrived.
        let file = PathBuf::from(file);
        let sha256 = h.data.local_file_sha256.clone();
        return from_file(t, cancel, file, sha256, work_dir, h.checksum, names).await;
    }
    if h.data.base64.is_some() {
        return blocking(rt, move || {
            let req = SetupRequest::from_inline_handle(Path::new(&work_dir), &h, access, &names)
                .expect("inline data checked");
            t.setup(req, &cancel)
                .map(|r| layout_of(r.layout))
                .map_err(transport_failed)
        })
        .await;
    }
    let Some(url) = h.data.url.clone() else {
        return Err(SetupFailure::NoArchiveData);
    };
    let limit = h.size_bytes.unwrap_or(u64::MAX / 2).saturating_add(1);
    let (file, sha256) = download_to(http, &downloads, id, &url, &[], limit, timeout)
        .await
        .map_err(SetupFailure::Fetch)?;
    from_file(t, cancel, file, Some(sha256), work_dir, h.checksum, names).await
}

/// GETs `url` into `<downloads>/<id>.zip`, hashed as it is written (the setup checks that
/// hash instead of reading the file again): the file and its SHA-256. Errors never show the
/// URL's query (a presigned URL is a capability).
async fn download_to<R: Runtime>(
    http: &agent_rt::HttpClient<R>,
    downloads: &Path,
    id: &DelegationId,
    url: &str,
    headers: &[(&str, String)],
    limit: u64,
    timeout: Duration,
) -> Result<(PathBuf, String), String> {
    let d2 = downloads.to_path_buf();
    blocking(http.runtime(), move || std::fs::create_dir_all(d2))
        .await
        .map_err(|e| format!("download directory: {e}"))?;
    let file = downloads.join(format!("{id}.zip"));
    let (_, sha256) = http
        .download_folding(
            url,
            headers,
            file.clone(),
            limit,
            timeout,
            Sha256Hex::default(),
            Sha256Hex::update,
        )
        .await
        // The client's message names the URL; a presigned one's signature stays out.
        .map_err(|e| awcp_transports::storage::redact_in(&e.to_string(), url))?;
    Ok((file, sha256.finish()))
}

pub(super) fn to_captured(
    snap: awcp_transports::CapturedSnapshot,
    id: &DelegationId,
    sid: &awcp_proto::SnapshotId,
    url_base: Option<&str>,
    files: &SnapshotFiles,
) -> CapturedSnapshot {
    use serde_json::json;
    let mut metadata = BTreeMap::new();
    metadata.insert("fileCount".to_owned(), json!(snap.file_count));
    metadata.insert("totalBytes".to_owned(), json!(snap.total_bytes));
    metadata.insert("changedFiles".to_owned(), json!(snap.changed));
    if snap.kind == awcp_transports::SnapshotKind::Delta {
        metadata.insert("delta".to_owned(), json!(true));
        metadata.insert("deletedFiles".to_owned(), json!(snap.deleted));
    }
    match snap.archive {
        ArchiveOutput::Inline(h) => CapturedSnapshot {
            data: h.data,
            checksum: Some(h.checksum),
            metadata,
        },
        ArchiveOutput::File(mut f) => {
            // Served by URL, the snapshot is kept across a restart: its record, synced before
            // the delegator hears of it, names this file, which must then be on disk too (the
            // work directory it was captured from is released). A failed sync is logged: the
            // file serves this run, and the delegator checks its checksum.
            if url_base.is_some() {
                if let Err(e) = std::fs::File::open(&f.path).and_then(|file| file.sync_data()) {
                    tracing::warn!(delegation = %id, "syncing the captured snapshot: {e}");
                }
            }
            // Take the file over from the transport (its release removes what it captured):
            // the engine keeps snapshots until ack or retention (DropSnapshot).
            let owned = f.path.with_file_name(format!("{sid}.zip"));
            if std::fs::rename(&f.path, &owned).is_ok() {
                f.path = owned;
                // And under that name (see `awcp_transports::durable::sync_dir`).
                if let Some(dir) = f.path.parent().filter(|_| url_base.is_some()) {
                    if let Err(e) = awcp_transports::durable::sync_dir(dir) {
                        tracing::warn!(delegation = %id, "syncing the snapshot's directory: {e}");
                    }
                }
            }
            files
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert((id.to_string(), sid.to_string()), f.path.clone());
            // By URL, or inline from the file (see `ArchiveData::local_file`).
            let (url, local_file) = match url_base {
                Some(base) => (
                    Some(awcp_proto::http_binding::snapshot_url(base, id, sid)),
                    None,
                ),
                None => (None, Some(f.path.to_string_lossy().into_owned())),
            };
            CapturedSnapshot {
                data: awcp_proto::ArchiveData {
                    base64: None,
                    url,
                    local_file,
                    local_file_sha256: None,
                },
                checksum: Some(f.checksum),
                metadata,
            }
        }
    }
}
