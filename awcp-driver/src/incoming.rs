//! Inline archives received into files as they arrive, never held in memory: START's
//! `workspaceBase64` on the executor, a result's `snapshotBase64`/`resultBase64` on the
//! delegator. The text comes out of a diverter ([`awcp_proto::wire::divert`],
//! [`awcp_proto::sse::DivertingSseDecoder`]) piece by piece; [`InlineArchive`] decodes it and a
//! writer thread puts it in a new file (a bounded channel between them: memory stays a few
//! pieces, whatever the archive's size).

use std::path::PathBuf;

use awcp_proto::wire::divert::ArchiveTextDiverter;
use awcp_transports::archive::Base64Pieces;
use awcp_transports::manifest::Sha256Pieces;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http_body_util::BodyExt;

/// Why a diverted body could not be received.
pub(crate) enum ReceiveError {
    /// Reading the body failed (or went over a limit of the body's own).
    Body(Box<dyn std::error::Error + Send + Sync>),
    /// The archive text is not base64 or over its limit, or the JSON around it is malformed
    /// or over the diverter's limit.
    Archive(String),
    /// The archive file could not be written.
    Local(String),
}

impl From<InlineError> for ReceiveError {
    fn from(e: InlineError) -> Self {
        match e {
            InlineError::Text(why) => ReceiveError::Archive(why),
            InlineError::Local(why) => ReceiveError::Local(why),
        }
    }
}

/// An archive received into a file.
#[derive(Debug)]
pub(crate) struct Received {
    /// The file (the caller's to keep or delete).
    pub path: PathBuf,
    /// The SHA-256 of what was written to it (lowercase hex), computed as it was written.
    pub sha256: String,
}

/// Reads a body through `div`, decoding the archive text it diverts into a new file in `dir`
/// (named `<prefix>…zip`) as it arrives, at most `max_text` bytes of text: memory stays
/// bounded by a few pieces, whatever the archive's size. Returns the rest of the JSON (the
/// archive field `""`) and the file if a field was diverted. Nothing is left on disk when it
/// fails, or when the future is dropped.
pub(crate) async fn receive_diverted<B>(
    body: B,
    mut div: ArchiveTextDiverter,
    max_text: u64,
    dir: PathBuf,
    prefix: &'static str,
) -> Result<(Vec<u8>, Option<Received>), ReceiveError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut body = std::pin::pin!(body);
    let mut archive = InlineArchive::new(dir, prefix);
    let mut text = Vec::new();
    let mut text_len = 0u64;
    let result = async {
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.map_err(|e| ReceiveError::Body(e.into()))?.into_data() else {
                continue;
            };
            div.push(&data, &mut text)
                .map_err(|e| ReceiveError::Archive(e.to_string()))?;
            if !text.is_empty() {
                text_len += text.len() as u64;
                if text_len > max_text {
                    return Err(ReceiveError::Archive(format!(
                        "inline archive larger than {max_text} bytes of text"
                    )));
                }
                archive.text(&text).await?;
                text.clear();
            }
        }
        Ok::<_, ReceiveError>(())
    }
    .await;
    if let Err(e) = result {
        archive.abandon().await;
        return Err(e);
    }
    if !div.diverted() {
        archive.abandon().await;
        return Ok((div.finish(), None));
    }
    let file = archive.finish().await?;
    Ok((div.finish(), Some(file)))
}

/// One inline archive being received into a new file in a directory.
pub(crate) struct InlineArchive {
    dir: PathBuf,
    prefix: &'static str,
    pieces: Base64Pieces,
    writer: Option<ArchiveWriter>,
}

impl InlineArchive {
    /// An archive to be written into `dir` (created if missing), in a file named
    /// `<prefix>…zip`.
    pub(crate) fn new(dir: PathBuf, prefix: &'static str) -> Self {
        InlineArchive {
            dir,
            prefix,
            pieces: Base64Pieces::default(),
            writer: None,
        }
    }

    /// Decodes the next piece of base64 text and writes it. An error is the text's (not
    /// base64) or the file's; the archive is then to be abandoned.
    pub(crate) async fn text(&mut self, text: &[u8]) -> Result<(), InlineError> {
        let mut decoded = Vec::with_capacity(text.len() / 4 * 3 + 3);
        self.pieces
            .push(text, &mut decoded)
            .map_err(|e| InlineError::Text(e.to_string()))?;
        self.write(decoded).await
    }

    async fn write(&mut self, bytes: Vec<u8>) -> Result<(), InlineError> {
        let (dir, prefix) = (&self.dir, self.prefix);
        let w = self
            .writer
            .get_or_insert_with(|| ArchiveWriter::start(dir.clone(), prefix));
        if w.tx.send(Piece::Bytes(bytes)).await.is_ok() {
            return Ok(());
        }
        // The writer stopped: it says why.
        match self.writer.take() {
            Some(w) => Err(w
                .end()
                .await
                .err()
                .unwrap_or_else(|| InlineError::Local("the archive writer stopped".into()))),
            None => Err(InlineError::Local("the archive writer stopped".into())),
        }
    }

    /// The text is complete: decodes what is left and returns the file (made even for empty
    /// text), which the caller now owns.
    pub(crate) async fn finish(mut self) -> Result<Received, InlineError> {
        let mut rest = Vec::new();
        let pieces = std::mem::take(&mut self.pieces);
        if let Err(e) = pieces.finish(&mut rest) {
            self.abandon().await;
            return Err(InlineError::Text(e.to_string()));
        }
        self.write(rest).await?;
        match self.writer.take() {
            Some(mut w) => {
                // Refused only if the writer stopped; `end` then says why.
                let _ = w.tx.send(Piece::End).await;
                w.end().await
            }
            None => Err(InlineError::Local("no archive writer".into())),
        }
    }

    /// Gives the archive up: its file, if one was started, is deleted before this returns.
    pub(crate) async fn abandon(mut self) {
        if let Some(w) = self.writer.take() {
            let _ = w.end().await;
        }
    }
}

/// Why an inline archive could not be received.
#[derive(Debug)]
pub(crate) enum InlineError {
    /// The text is not base64.
    Text(String),
    /// The file could not be written.
    Local(String),
}

impl std::fmt::Display for InlineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InlineError::Text(e) | InlineError::Local(e) => f.write_str(e),
        }
    }
}

enum Piece {
    Bytes(Vec<u8>),
    /// The archive is complete: keep the file.
    End,
}

/// A thread writing decoded pieces to a new file, hashing them as it goes (the hash comes
/// with the file, so no one reads it again to check its checksum); the file is kept only after
/// [`Piece::End`] (a writer dropped or ended without it deletes its file).
struct ArchiveWriter {
    tx: futures::channel::mpsc::Sender<Piece>,
    done: futures::channel::oneshot::Receiver<Result<Received, String>>,
}

impl ArchiveWriter {
    fn start(dir: PathBuf, prefix: &'static str) -> Self {
        use std::io::Write;
        let (tx, mut rx) = futures::channel::mpsc::channel::<Piece>(4);
        let (done_tx, done) = futures::channel::oneshot::channel();
        std::thread::spawn(move || {
            let r = (|| {
                std::fs::create_dir_all(&dir)?;
                let mut t = tempfile::Builder::new()
                    .prefix(prefix)
                    .suffix(".zip")
                    .tempfile_in(&dir)?;
                let mut hash = Sha256Pieces::default();
                loop {
                    match futures::executor::block_on(rx.next()) {
                        Some(Piece::Bytes(b)) => {
                            t.write_all(&b)?;
                            hash.update_owned(b);
                            if hash.len() >= Self::HASH_ON_A_THREAD_FROM {
                                hash.to_a_thread();
                            }
                            // Pieces come back emptied; not reused here (freed now, not held
                            // until the end).
                            drop(hash.emptied());
                        }
                        // Not synced: whoever keeps the file syncs it when it must be durable.
                        Some(Piece::End) => {
                            let path = t.into_temp_path().keep().map_err(|e| e.error)?;
                            return Ok(Received {
                                path,
                                sha256: hash.finish(),
                            });
                        }
                        // Given up: the temporary file is deleted as `t` drops.
                        None => return Err(std::io::Error::other("abandoned")),
                    }
                }
            })();
            let _ = done_tx.send(r.map_err(|e: std::io::Error| e.to_string()));
        });
        ArchiveWriter { tx, done }
    }

    /// The hash is taken on a thread of its own from this many bytes on: writing and hashing
    /// a large archive on one thread made it the one the receiving waited for (on a 10 MiB
    /// START, 16 ms of the 18 ms it took to receive; `BENCHMARKS.md`, 2026-11-27, late night).
    const HASH_ON_A_THREAD_FROM: u64 = 1 << 20;

    /// Closes the channel and waits for the thread: the kept file, or why there is none (then
    /// nothing is left on disk).
    async fn end(self) -> Result<Received, InlineError> {
        drop(self.tx);
        match self.done.await {
            Ok(Ok(received)) => Ok(received),
            Ok(Err(e)) => Err(InlineError::Local(e)),
            Err(_) => Err(InlineError::Local("the archive writer stopped".into())),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn files(dir: &std::path::Path) -> usize {
        std::fs::read_dir(dir).map(|r| r.count()).unwrap_or(0)
    }

    #[test]
    fn text_in_pieces_becomes_one_file_and_an_abandoned_one_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        futures::executor::block_on(async {
            let mut a = InlineArchive::new(dir.path().into(), ".t-");
            for piece in [&b"QU"[..], b"JDRE", b"VG", b"SA="] {
                a.text(piece).await.unwrap();
            }
            let f = a.finish().await.unwrap();
            assert_eq!(std::fs::read(&f.path).unwrap(), b"ABCDEFH");
            // Hashed as written: the same as hashing the file.
            assert_eq!(
                Some(f.sha256),
                awcp_transports::manifest::hash_file(&f.path).ok()
            );
            std::fs::remove_file(f.path).unwrap();

            // A large one, whose hash moves to a thread of its own on the way: still the
            // file's.
            let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 13 % 253) as u8).collect();
            let text = awcp_transports::archive::encode_base64(&big);
            let mut a = InlineArchive::new(dir.path().into(), ".t-");
            for piece in text.as_bytes().chunks(100_003) {
                a.text(piece).await.unwrap();
            }
            let f = a.finish().await.unwrap();
            assert!(std::fs::read(&f.path).unwrap() == big);
            assert_eq!(
                Some(f.sha256),
                awcp_transports::manifest::hash_file(&f.path).ok()
            );
            std::fs::remove_file(f.path).unwrap();

            let mut a = InlineArchive::new(dir.path().into(), ".t-");
            a.text(b"QUJD").await.unwrap();
            // The writer thread makes the file on its own time.
            while files(dir.path()) == 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            a.abandon().await;
            assert_eq!(files(dir.path()), 0);

            let mut a = InlineArchive::new(dir.path().into(), ".t-");
            a.text(b"QUJD").await.unwrap();
            assert!(matches!(a.text(b"!!!!").await, Err(InlineError::Text(_))));
            a.abandon().await;
            assert_eq!(files(dir.path()), 0);
        });
    }

    #[test]
    fn a_result_body_in_pieces_keeps_its_json_small_and_its_archive_in_a_file() {
        use http_body::Frame;
        let dir = tempfile::tempdir().unwrap();
        let archive: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
        let text = awcp_transports::archive::encode_base64(&archive);
        let body = format!(
            r#"{{"status":"completed","summary":"s","snapshotBase64":"{text}","checksum":"00"}}"#
        );
        let frames = |body: &str| {
            let pieces: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = body
                .as_bytes()
                .chunks(7_001)
                .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
                .collect();
            http_body_util::StreamBody::new(futures::stream::iter(pieces))
        };
        futures::executor::block_on(async {
            let div = ArchiveTextDiverter::for_results(1024);
            let (json, file) =
                receive_diverted(frames(&body), div, 1 << 20, dir.path().into(), ".r-")
                    .await
                    .map_err(|_| "receive")
                    .unwrap();
            assert_eq!(
                json,
                br#"{"status":"completed","summary":"s","snapshotBase64":"","checksum":"00"}"#
            );
            let file = file.unwrap();
            assert_eq!(std::fs::read(&file.path).unwrap(), archive);
            std::fs::remove_file(file.path).unwrap();
            // Over the text limit: refused, nothing left.
            let div = ArchiveTextDiverter::for_results(1024);
            let r = receive_diverted(frames(&body), div, 1000, dir.path().into(), ".r-").await;
            assert!(matches!(r, Err(ReceiveError::Archive(_))));
            assert_eq!(files(dir.path()), 0);
        });
    }

    #[test]
    fn a_dropped_archive_deletes_its_file() {
        let dir = tempfile::tempdir().unwrap();
        futures::executor::block_on(async {
            let mut a = InlineArchive::new(dir.path().into(), ".t-");
            a.text(b"QUJD").await.unwrap();
            drop(a);
        });
        for _ in 0..2000 {
            if files(dir.path()) == 0 {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        panic!("the file of a dropped archive stayed");
    }
}
