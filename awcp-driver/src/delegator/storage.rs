//! Local storage: the admission scan, the snapshot store, apply baselines, delegation ids.

use super::*;
use awcp_transports::durable::rename_durably;

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

/// Stores a snapshot durably under `dir` as `<sid>.zip` (written to a temporary name, synced,
/// renamed, the directory synced); its checksum and summary are the engine's record's. Returns the size of the ZIP.
/// One hand-off to the blocking pool (two when the bytes are downloaded).
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
    let zip = dir.join(format!("{}.zip", snap.snapshot_id));
    let part = dir.join(format!("{}.zip.part", snap.snapshot_id));
    let store = |e: std::io::Error| fail(format!("storing the snapshot in {}: {e}", dir.display()));
    match (&snap.data.base64, &snap.data.url) {
        (Some(b), _) => {
            let bytes = awcp_transports::archive::decode_base64(b)
                .map_err(|e| StoreFailure::Archive(e.to_error_info()))?;
            let (d, n) = (dir.to_path_buf(), bytes.len() as u64);
            blocking(rt, move || {
                use std::io::Write;
                std::fs::create_dir_all(&d)?;
                let mut f = std::fs::File::create(&part)?;
                f.write_all(&bytes)?;
                f.sync_all()?;
                rename_durably(&part, &zip)
            })
            .await
            .map_err(store)?;
            Ok(n)
        }
        (None, Some(url)) => {
            let d = dir.to_path_buf();
            blocking(rt, move || std::fs::create_dir_all(d))
                .await
                .map_err(store)?;
            // The download syncs the file it wrote.
            let n = http
                .download(url, headers, part.clone(), limit, download_timeout)
                .await
                // Never a presigned URL's signature in a message.
                .map_err(|e| {
                    StoreFailure::Fetch(awcp_transports::storage::redact_in(&e.to_string(), url))
                })?;
            blocking(rt, move || rename_durably(&part, &zip))
                .await
                .map_err(store)?;
            Ok(n)
        }
        (None, None) => match &snap.data.local_file {
            // Received into a file as it arrived (under the state directory, as the store):
            // moved, then synced.
            Some(f) => {
                let (from, d) = (PathBuf::from(f), dir.to_path_buf());
                blocking(rt, move || {
                    std::fs::create_dir_all(&d)?;
                    std::fs::rename(&from, &part)?;
                    let f = std::fs::File::open(&part)?;
                    f.sync_all()?;
                    let n = f.metadata()?.len();
                    rename_durably(&part, &zip)?;
                    Ok::<_, std::io::Error>(n)
                })
                .await
                .map_err(store)
            }
            None => Err(StoreFailure::NoData),
        },
    }
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
