//! Object-storage requests of the `storage` transport (WIRE.md §11.4), on the runtime-neutral
//! HTTP client: a file PUT to a presigned URL streamed from disk (flat memory), a presigned
//! DELETE, and the delegator's journal of the objects it created (written before the upload,
//! so a restarted delegator deletes what a crash left).

use std::path::{Path, PathBuf};
use std::time::Duration;

use awcp_proto::DelegationId;
use awcp_transports::storage::{redact_url, S3Store};
use bytes::Bytes;
use futures::channel::mpsc;
use futures::SinkExt;
use http::Method;

use crate::runtime::{blocking, Runtime};

/// How long the delegator's own requests to the store (upload, delete, result download) are
/// signed for.
pub(crate) const OWN_REQUEST_TTL: Duration = Duration::from_secs(3600);

/// Size of one chunk read from disk for an upload.
const CHUNK: usize = 256 * 1024;

/// PUTs the file at `path` to `url` with `headers`, streamed from disk (a few chunks in
/// memory at most), within `timeout`. Errors never name the URL's query (a presigned URL is
/// a capability).
pub(crate) async fn put_file<R: Runtime>(
    http: &agent_rt::HttpClient<R>,
    url: &str,
    headers: &[(&str, String)],
    path: PathBuf,
    timeout: Duration,
) -> Result<(), String> {
    put_range(http, url, headers, path, None, timeout)
        .await
        .map(|_| ())
}

/// PUTs `range` (offset, length; `None`: the whole file) of the file at `path` to `url`,
/// streamed; returns the answer's `ETag` (what a multipart upload's completion names).
async fn put_range<R: Runtime>(
    http: &agent_rt::HttpClient<R>,
    url: &str,
    headers: &[(&str, String)],
    path: PathBuf,
    range: Option<(u64, u64)>,
    timeout: Duration,
) -> Result<Option<String>, String> {
    let rt = http.runtime();
    let what = format!("PUT {}", redact_url(url));
    let p = path.clone();
    let (file, len) = blocking(rt, move || {
        use std::io::Seek;
        let mut f = std::fs::File::open(&p)?;
        let len = match range {
            Some((offset, len)) => {
                f.seek(std::io::SeekFrom::Start(offset))?;
                len
            }
            None => f.metadata()?.len(),
        };
        Ok::<_, std::io::Error>((f, len))
    })
    .await
    .map_err(|e| format!("reading {}: {e}", path.display()))?;
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(4);
    let body = agent_rt::ClientBody::streamed(len, rx);
    rt.spawn(Box::pin(blocking(rt, move || stream_file(file, len, tx))));
    let fut = async {
        let resp = http
            .send_body(Method::PUT, url, headers, body)
            .await
            .map_err(|e| format!("{what}: {e}"))?;
        let status = resp.status();
        let etag = resp
            .headers()
            .get(http::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // The answer is small (an ETag, or an error document): read for the connection's sake.
        let _ = crate::net::read_body(resp.into_body(), 64 * 1024).await;
        if status.is_success() {
            Ok(etag)
        } else {
            Err(format!("{what}: HTTP {status}"))
        }
    };
    crate::net::with_timeout(rt, timeout, async { Ok(fut.await) })
        .await
        .map_err(|e| format!("{what}: {e}"))?
}

/// The most parts S3 takes in one upload.
const MAX_PARTS: u64 = 10_000;

/// Uploads the file at `path` as `key` of `store`: one streamed PUT, or above the store's
/// part size ([`S3Store::part_size`]) a multipart upload whose parts are streamed in turn (aborted if a part
/// fails, so no invisible parts stay billed). Memory stays flat in the file's size.
pub(crate) async fn upload<R: Runtime>(
    http: &agent_rt::HttpClient<R>,
    store: &S3Store,
    key: &str,
    path: PathBuf,
    timeout: Duration,
) -> Result<(), String> {
    let headers = [("content-type", "application/zip".to_owned())];
    let p = path.clone();
    let size = blocking(http.runtime(), move || {
        std::fs::metadata(p).map(|m| m.len())
    })
    .await
    .map_err(|e| format!("reading {}: {e}", path.display()))?;
    if size <= store.part_size() {
        let put = store.put(key, OWN_REQUEST_TTL);
        return put_file(http, &put.url, &headers, path, timeout).await;
    }
    let part_size = store.part_size().max(size.div_ceil(MAX_PARTS));
    let created = send(
        http,
        Method::POST,
        &store.create_multipart(key, OWN_REQUEST_TTL).url,
        None,
        timeout,
    )
    .await?;
    let upload_id = S3Store::upload_id(&String::from_utf8_lossy(&created))
        .ok_or("the store's answer to CreateMultipartUpload has no upload id")?;
    let parts = async {
        let mut etags = Vec::new();
        let mut offset = 0u64;
        let mut number = 1u16;
        while offset < size {
            let len = part_size.min(size - offset);
            let url = store
                .upload_part(key, number, &upload_id, OWN_REQUEST_TTL)
                .url;
            let etag = put_range(http, &url, &[], path.clone(), Some((offset, len)), timeout)
                .await?
                .ok_or_else(|| format!("part {number}: the store answered without an ETag"))?;
            etags.push(etag);
            offset += len;
            number = number.saturating_add(1);
        }
        let (done, body) = store.complete_multipart(key, &upload_id, &etags, OWN_REQUEST_TTL);
        send(
            http,
            Method::POST,
            &done.url,
            Some(Bytes::from(body)),
            timeout,
        )
        .await
    }
    .await;
    match parts {
        Ok(_) => Ok(()),
        Err(e) => {
            let abort = store.abort_multipart(key, &upload_id, OWN_REQUEST_TTL);
            let _ = send(
                http,
                Method::DELETE,
                &abort.url,
                None,
                Duration::from_secs(60),
            )
            .await;
            Err(e)
        }
    }
}

/// Sends `len` bytes of `file` (from where it is) through `tx` in chunks (on a blocking
/// thread), then ends.
fn stream_file(
    mut file: std::fs::File,
    mut len: u64,
    mut tx: mpsc::Sender<std::io::Result<Bytes>>,
) {
    use std::io::Read;
    while len > 0 {
        let want = usize::try_from(len).unwrap_or(CHUNK).min(CHUNK);
        let mut buf = vec![0u8; want];
        let n = match file.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = futures::executor::block_on(tx.send(Err(e)));
                return;
            }
        };
        buf.truncate(n);
        len -= n as u64;
        if futures::executor::block_on(tx.send(Ok(Bytes::from(buf)))).is_err() {
            return;
        }
    }
}

/// Sends `method` to a presigned `url` (a DELETE, a multipart request) with `body`, within
/// `timeout`; the answer's body if it is a success (at most 1 MiB).
pub(crate) async fn send<R: Runtime>(
    http: &agent_rt::HttpClient<R>,
    method: Method,
    url: &str,
    body: Option<Bytes>,
    timeout: Duration,
) -> Result<Bytes, String> {
    let what = format!("{method} {}", redact_url(url));
    let fut = async {
        let hdrs: Vec<(&str, String)> = if body.is_some() {
            vec![("content-type", "application/xml".into())]
        } else {
            Vec::new()
        };
        let resp = http
            .send(method.clone(), url, &hdrs, body)
            .await
            .map_err(|e| format!("{what}: {e}"))?;
        let status = resp.status();
        let bytes = crate::net::read_body(resp.into_body(), 1 << 20)
            .await
            .map_err(|e| format!("{what}: {e}"))?;
        if status.is_success() {
            Ok(bytes)
        } else {
            Err(format!("{what}: HTTP {status}"))
        }
    };
    crate::net::with_timeout(http.runtime(), timeout, async { Ok(fut.await) })
        .await
        .map_err(|e| format!("{what}: {e}"))?
}

/// The objects of one delegation, as journalled before they are created.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ObjectRecord {
    /// The store's bucket when they were created (a record of another bucket is left).
    pub bucket: String,
    /// The keys.
    pub keys: Vec<String>,
}

/// The directory of the object journal under a delegator's state directory.
pub(crate) fn journal_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("objects")
}

/// Journals (durably) the objects `store` holds or will hold for `id`.
pub(crate) fn journal(state_dir: &Path, store: &S3Store, id: &DelegationId) -> std::io::Result<()> {
    let rec = ObjectRecord {
        bucket: store.bucket().to_owned(),
        keys: vec![store.workspace_key(id), store.result_key(id)],
    };
    let dir = journal_dir(state_dir);
    std::fs::create_dir_all(&dir)?;
    let json = serde_json::to_vec(&rec).map_err(std::io::Error::other)?;
    crate::executor::journal::write_atomic(&dir, &format!("{id}.json"), &json)
}

/// Deletes every object `id`'s journal names, then the journal entry (kept if a delete
/// failed, so the next start-up tries again). Deleting an absent object succeeds.
pub(crate) async fn delete_journalled<R: Runtime>(
    http: &agent_rt::HttpClient<R>,
    store: &S3Store,
    state_dir: &Path,
    id: &DelegationId,
) -> Result<(), String> {
    let file = journal_dir(state_dir).join(format!("{id}.json"));
    let f2 = file.clone();
    let rec = blocking(http.runtime(), move || std::fs::read(&f2)).await;
    let keys = match rec {
        Ok(bytes) => match serde_json::from_slice::<ObjectRecord>(&bytes) {
            Ok(r) if r.bucket == store.bucket() => r.keys,
            Ok(r) => {
                return Err(format!(
                    "objects of {id} are in bucket {}, not the configured {}: left",
                    r.bucket,
                    store.bucket()
                ))
            }
            Err(e) => return Err(format!("object journal of {id}: {e}")),
        },
        // Nothing journalled: nothing was created.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("object journal of {id}: {e}")),
    };
    let mut failed = Vec::new();
    for key in keys {
        let url = store.delete(&key, OWN_REQUEST_TTL).url;
        if let Err(e) = send(http, Method::DELETE, &url, None, Duration::from_secs(60)).await {
            failed.push(e);
        }
    }
    if !failed.is_empty() {
        return Err(failed.join("; "));
    }
    let _ = blocking(http.runtime(), move || std::fs::remove_file(file)).await;
    Ok(())
}

/// The delegations with objects journalled under `state_dir`.
pub(crate) fn journalled(state_dir: &Path) -> Vec<DelegationId> {
    let Ok(rd) = std::fs::read_dir(journal_dir(state_dir)) else {
        return Vec::new();
    };
    rd.filter_map(|e| {
        let name = e.ok()?.file_name();
        let id = name.to_str()?.strip_suffix(".json")?;
        DelegationId::new(id).ok()
    })
    .collect()
}
