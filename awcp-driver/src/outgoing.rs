//! Inline archives sent from files, never held in memory: START's `workspaceBase64` from
//! the delegator, a result's `snapshotBase64`/`resultBase64` from the executor (an SSE event,
//! a `GET …/result` body). The JSON around the archive comes from the split encoders
//! ([`awcp_proto::wire::SplitMessage`]); the file is read and encoded a few pieces at a time
//! while the body is sent.

use bytes::Bytes;
use futures::channel::mpsc;
use futures::{Stream, StreamExt};

/// Feeds `head`, the file as base64 (64 KiB of text per piece) and `tail` into `tx`, waiting
/// while the channel is full; stops when the request is gone.
pub(crate) fn stream_split(
    split: awcp_proto::SplitMessage,
    mut file: std::fs::File,
    mut tx: mpsc::Sender<std::io::Result<Bytes>>,
) {
    use futures::SinkExt;
    use std::io::Read;
    let mut send = |b: std::io::Result<Bytes>| futures::executor::block_on(tx.send(b)).is_ok();
    if !send(Ok(Bytes::from(split.head))) {
        return;
    }
    let mut buf = vec![0u8; 48 * 1024];
    loop {
        // Whole multiples of 3 bytes, so the pieces' base64 joins without padding.
        let mut n = 0;
        while n < buf.len() {
            match file.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    send(Err(e));
                    return;
                }
            }
        }
        if n == 0 {
            break;
        }
        let text = awcp_transports::archive::encode_base64(&buf[..n]);
        if !send(Ok(Bytes::from(text))) {
            return;
        }
        if n < buf.len() {
            break;
        }
    }
    send(Ok(Bytes::from(split.tail)));
}

/// The text of `split` (head, the file as base64, tail) between `before` and `after`, read by
/// a thread of its own as the stream is polled (a bounded channel: a few pieces in memory).
/// `None` if the file cannot be opened; the stream ends early if it cannot be read.
pub(crate) fn split_stream(
    mut split: awcp_proto::SplitMessage,
    before: &str,
    after: &str,
) -> Option<impl Stream<Item = Bytes> + Send + 'static> {
    let file = std::fs::File::open(&split.file).ok()?;
    split.head.insert_str(0, before);
    split.tail.push_str(after);
    let (tx, rx) = mpsc::channel(4);
    std::thread::spawn(move || stream_split(split, file, tx));
    Some(
        rx.take_while(|r| std::future::ready(r.is_ok()))
            .filter_map(|r| std::future::ready(r.ok())),
    )
}
