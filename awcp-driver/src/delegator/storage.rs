//! Local storage: the admission scan, the snapshot store, apply baselines, delegation ids.

use super::*;

pub(super) fn scan(specs: &[ResourceSpec]) -> Result<WorkspaceStats, ErrorInfo> {
    for s in specs {
        match std::fs::metadata(&s.source_path) {
            Err(_) => {
                return Err(ErrorInfo::new(
                    ErrorCode::WorkspaceNotFound,
                    format!("workspace {} does not exist", s.source_path.display()),
                ))
            }
            Ok(m) if !m.is_dir() => {
                return Err(ErrorInfo::new(
                    ErrorCode::WorkspaceInvalid,
                    format!("workspace {} is not a directory", s.source_path.display()),
                ))
            }
            Ok(_) => {}
        }
    }
    awcp_transports::scan(specs, &Default::default(), &CancelFlag::new())
        .map_err(|e| e.to_error_info())
}

/// Stores a snapshot durably under `dir`: `<sid>.zip` (written to a temporary name, fsynced,
/// renamed) and `<sid>.json` (its summary and checksum). Returns the size of the ZIP.
pub(super) async fn store_snapshot<R: Runtime>(
    http: &agent_rt::HttpClient<R>,
    dir: &Path,
    snap: &SnapshotEvent,
    headers: &[(&'static str, String)],
    limit: u64,
    download_timeout: Duration,
) -> Result<u64, ErrorInfo> {
    let rt = http.runtime();
    let fail = |m: String| ErrorInfo {
        code: ErrorCode::TransportError,
        message: m,
        hint: Some(
            "The result could not be stored locally, so it was not applied and the executor was \
             not acknowledged (it keeps the result until its retention ends): check the \
             delegator's state directory (disk space, permissions) and its connection to the \
             executor."
                .into(),
        ),
    };
    let d = dir.to_path_buf();
    blocking(rt, move || std::fs::create_dir_all(d))
        .await
        .map_err(|e| {
            fail(format!(
                "creating the snapshot store {}: {e}",
                dir.display()
            ))
        })?;
    let zip = dir.join(format!("{}.zip", snap.snapshot_id));
    let part = dir.join(format!("{}.zip.part", snap.snapshot_id));
    let size = match (&snap.data.base64, &snap.data.url) {
        (Some(b), _) => {
            let bytes =
                awcp_transports::archive::decode_base64(b).map_err(|e| e.to_error_info())?;
            let n = bytes.len() as u64;
            let p = part.clone();
            blocking(rt, move || {
                use std::io::Write;
                let mut f = std::fs::File::create(&p)?;
                f.write_all(&bytes)?;
                f.sync_all()
            })
            .await
            .map_err(|e| fail(format!("writing the snapshot: {e}")))?;
            n
        }
        (None, Some(url)) => http
            .download(url, headers, part.clone(), limit, download_timeout)
            .await
            .map_err(|e| fail(format!("fetching the snapshot: {e}")))?,
        (None, None) => return Err(fail("snapshot carries no data".into())),
    };
    let meta = serde_json::json!({
        "snapshotId": snap.snapshot_id.as_str(),
        "summary": snap.summary,
        "highlights": snap.highlights,
        "checksum": snap.checksum,
        "metadata": snap.metadata,
    });
    let (d, name) = (dir.to_path_buf(), format!("{}.json", snap.snapshot_id));
    blocking(rt, move || {
        std::fs::rename(&part, &zip)?;
        crate::executor::journal::write_atomic(&d, &name, meta.to_string().as_bytes())
    })
    .await
    .map_err(|e| fail(format!("storing the snapshot: {e}")))?;
    Ok(size)
}

/// `<state>/baselines/<id>.json`.
pub(super) fn baseline_file(state_dir: &Path, id: &DelegationId) -> PathBuf {
    state_dir.join("baselines").join(format!("{id}.json"))
}

/// The baseline persisted at `path`, if readable.
pub(super) fn load_baseline(path: &Path) -> Option<Baseline> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// A fresh delegation id from the OS random source (no fallback: it stands for a credential
/// with executors that bind INVITE's credential to the id).
pub(super) fn random_id() -> Result<DelegationId, crate::security::RandomUnavailable> {
    Ok(DelegationId::from_random(crate::security::random_bytes()?))
}

#[allow(dead_code)]
fn _types(_: ResponseBody) {}
