//! The on-disk format of a record file: a log of JSON lines, appended and synced, compacted
//! past [`COMPACT_AT`], read back to its last whole record; files replaced atomically.

use std::io::Write;
use std::path::Path;

use serde_json::Value;

use awcp_transports::durable::sync_dir;

/// A record file past this size is rewritten with only its newest record.
pub const COMPACT_AT: u64 = 64 * 1024;

/// Makes `record` (one line of compact JSON) the record in `dir/name`: appended (and synced
/// if `sync`), or written atomically (always durable) when the file is new or due for
/// compaction. `kept` is the file already open for appending, with its length. Returns whether
/// the record is durable, and the file it was appended to with its new length (`None` when
/// the file was replaced).
pub(super) fn append_record(
    dir: &Path,
    name: &str,
    record: &str,
    sync: bool,
    kept: Option<(std::fs::File, u64)>,
) -> std::io::Result<(bool, Option<(std::fs::File, u64)>)> {
    let (mut file, len) = match kept {
        Some(k) => k,
        None => match std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join(name))
        {
            Ok(f) => {
                let len = f.metadata()?.len();
                (f, len)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                write_atomic(dir, name, format!("{record}\n").as_bytes())?;
                return Ok((true, None));
            }
            Err(e) => return Err(e),
        },
    };
    if len > COMPACT_AT {
        drop(file);
        write_atomic(dir, name, format!("{record}\n").as_bytes())?;
        return Ok((true, None));
    }
    let mut line = Vec::with_capacity(record.len() + 2);
    line.push(b'\n');
    line.extend_from_slice(record.as_bytes());
    line.push(b'\n');
    file.write_all(&line)?;
    if sync {
        file.sync_data()?;
    }
    Ok((sync, Some((file, len + line.len() as u64))))
}

/// The record a journal file holds: the whole file if it is one JSON document, else its last
/// line that is a complete JSON object (a crash may have torn the line after it). `None` when
/// there is none.
pub fn read_record(bytes: &[u8]) -> Option<Value> {
    if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
        return v.is_object().then_some(v);
    }
    bytes.split(|b| *b == b'\n').rev().find_map(|line| {
        serde_json::from_slice::<Value>(line)
            .ok()
            .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()))
    })
}

/// [`read_record`] of the file at `path` (`None` if it cannot be read).
pub fn read_record_file(path: &Path) -> Option<Value> {
    read_record(&std::fs::read(path).ok()?)
}

/// Writes `name` in `dir` atomically and durably: temp file (`.tmp…`, see [`super::Journal::load`]),
/// fsync, rename, fsync of `dir` (see [`sync_dir`]).
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new().prefix(".tmp").tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(dir.join(name)).map_err(|e| e.error)?;
    sync_dir(dir)
}
