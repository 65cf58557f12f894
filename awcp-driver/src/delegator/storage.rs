//! Local storage: the admission scan, the snapshot store, apply baselines, delegation ids.

use super::*;

pub(super) fn scan(specs: &[ResourceSpec]) -> Result<WorkspaceStats, ScanFailure> {
    for s in specs {
        let path = || s.source_path.display().to_string();
        match std::fs::metadata(&s.source_path) {
            Err(_) => return Err(ScanFailure::NotFound(path())),
            Ok(m) if !m.is_dir() => return Err(ScanFailure::NotADirectory(path())),
            Ok(_) => {}
        }
    }
    awcp_transports::scan(specs, &Default::default(), &CancelFlag::new())
        .map_err(|e| ScanFailure::Scan(e.to_error_info()))
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
) -> Result<u64, StoreFailure> {
    let rt = http.runtime();
    let fail = StoreFailure::Local;
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
            let bytes = awcp_transports::archive::decode_base64(b)
                .map_err(|e| StoreFailure::Archive(e.to_error_info()))?;
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
            .map_err(|e| StoreFailure::Fetch(e.to_string()))?,
        (None, None) => match &snap.data.local_file {
            // Received into a file as it arrived (under the state directory, as the store):
            // moved, then synced.
            Some(f) => {
                let (from, p) = (PathBuf::from(f), part.clone());
                blocking(rt, move || {
                    std::fs::rename(&from, &p)?;
                    let f = std::fs::File::open(&p)?;
                    f.sync_all()?;
                    Ok::<_, std::io::Error>(f.metadata()?.len())
                })
                .await
                .map_err(|e| fail(format!("storing the received snapshot: {e}")))?
            }
            None => return Err(StoreFailure::NoData),
        },
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
