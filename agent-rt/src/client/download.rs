//! Downloads: a GET streamed into a file, written in batches on the blocking pool.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use http_body_util::BodyExt;

use super::{with_timeout, HttpClient, NetError};
use crate::runtime::{blocking, Runtime};

/// A download is written to its file in batches of at least this many bytes (one hand-off to
/// the blocking pool each; memory stays bounded by a batch and one chunk).
pub const WRITE_BATCH: usize = 256 * 1024;

impl<R: Runtime> HttpClient<R> {
    /// Streams a GET into `dest` with flat memory and makes it durable; returns the byte
    /// count. `dest` is created (or truncated) with the first batch of
    /// [`WRITE_BATCH`] bytes or at the end of a smaller body; a failure before that leaves
    /// it untouched.
    pub async fn download(
        &self,
        url: &str,
        headers: &[(&str, String)],
        dest: PathBuf,
        limit: u64,
        timeout: Duration,
    ) -> Result<u64, NetError> {
        fn nothing(_: &mut (), _: &[u8]) {}
        let (n, ()) = self
            .download_folding(url, headers, dest, limit, timeout, (), nothing)
            .await?;
        Ok(n)
    }

    /// [`HttpClient::download`] that also folds every byte written into `state` with `fold`,
    /// on the thread that writes them (e.g. a hash of the file, computed as it is written, so
    /// that no one reads it again to check it); returns the byte count and the state.
    #[allow(clippy::too_many_arguments)]
    pub async fn download_folding<S: Send + 'static>(
        &self,
        url: &str,
        headers: &[(&str, String)],
        dest: PathBuf,
        limit: u64,
        timeout: Duration,
        state: S,
        fold: fn(&mut S, &[u8]),
    ) -> Result<(u64, S), NetError> {
        let rt = &self.rt;
        let mut state = Some(state);
        with_timeout(rt, timeout, async {
            let resp = self.send(Method::GET, url, headers, None).await?;
            if !resp.status().is_success() {
                return Err(NetError::Io(format!("GET {url}: HTTP {}", resp.status())));
            }
            // Written in batches of at least WRITE_BATCH bytes, each one hand-off to the
            // blocking pool (a small body: one for create, write and sync together).
            let mut file: Option<std::fs::File> = None;
            let mut batch: Vec<Bytes> = Vec::new();
            let mut batched = 0usize;
            let mut body = resp.into_body();
            let mut total = 0u64;
            loop {
                let frame = body.frame().await;
                let last = frame.is_none();
                if let Some(frame) = frame {
                    let frame = frame.map_err(|e| NetError::Io(e.to_string()))?;
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    total += data.len() as u64;
                    if total > limit {
                        return Err(NetError::TooLarge(limit));
                    }
                    batched += data.len();
                    batch.push(data);
                    if batched < WRITE_BATCH {
                        continue;
                    }
                }
                let (chunks, open, d2) = (std::mem::take(&mut batch), file.take(), dest.clone());
                let mut folded = state.take();
                batched = 0;
                let (written, folded) = blocking(rt, move || {
                    let mut f = match open {
                        Some(f) => f,
                        None => std::fs::File::create(&d2)
                            .map_err(|e| format!("create {}: {e}", d2.display()))?,
                    };
                    for c in &chunks {
                        f.write_all(c).map_err(|e| format!("write: {e}"))?;
                        if let Some(s) = &mut folded {
                            fold(s, c);
                        }
                    }
                    if last {
                        f.sync_all().map_err(|e| format!("sync: {e}"))?;
                    }
                    Ok::<_, String>((f, folded))
                })
                .await
                .map_err(NetError::Io)?;
                state = folded;
                if last {
                    break;
                }
                file = Some(written);
            }
            let state = state.ok_or_else(|| NetError::Io("download state lost".into()))?;
            Ok((total, state))
        })
        .await
    }
}
