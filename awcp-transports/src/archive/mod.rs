//! The archive transport: ZIP with DEFLATE, SHA-256 lowercase hex checksum, base64 inline or a
//! file served by URL (WIRE.md §3.2, §11.1).

pub mod extract;
pub mod pack;
pub mod transport;

use std::fs;
use std::io::{self, Cursor, Read, Seek, Write};
use std::path::{Path, PathBuf};

use awcp_proto::{ArchiveData, ArchiveHandle};
use sha2::{Digest, Sha256};

use crate::cancel::CancelFlag;
use crate::error::TransportError;
use crate::manifest::hex;

pub use extract::{
    extract, extract_parallel, validate_name, DeltaInfo, ExtractLimits, ExtractReport,
    ExtractedFile, DELTA_ENTRY,
};
pub use pack::{pack, PackItem, PackReport};
pub use transport::{ArchiveDelegator, ArchiveExecutor};

/// Standard base64 with padding, no line breaks (SIMD where the CPU has it: an archive's
/// megabytes of text are encoded as a START or a result goes out).
pub fn encode_base64(data: &[u8]) -> String {
    base64_simd::STANDARD.encode_to_string(data)
}

/// Decodes whitespace-free standard base64 whose padding may be missing, appending to `out`
/// (SIMD where the CPU has it). Text whose length is a multiple of four is read as padded
/// (padding, if any, only at its end), other text as unpadded, after a partial padding
/// (`QUJDRA=`) is dropped: what the `base64` crate's padding-indifferent engine accepts.
fn decode_lenient(mut text: &[u8], out: &mut Vec<u8>) -> Result<(), TransportError> {
    let engine = if text.len() % 4 == 0 {
        base64_simd::STANDARD
    } else {
        if let [rest @ .., b'='] = text {
            if matches!(rest.len() % 4, 2 | 3) {
                text = rest;
            }
        }
        base64_simd::STANDARD_NO_PAD
    };
    let bad = |e: base64_simd::Error| TransportError::BadBase64(e.to_string());
    let n = engine.decoded_length(text).map_err(bad)?;
    let at = out.len();
    out.resize(at + n, 0);
    let got = engine
        .decode(text, base64_simd::Out::from_slice(&mut out[at..]))
        .map_err(bad)?
        .len();
    out.truncate(at + got);
    Ok(())
}

/// Decodes standard base64, tolerating missing padding and embedded whitespace.
pub fn decode_base64(text: &str) -> Result<Vec<u8>, TransportError> {
    let cleaned: String;
    let t = if text.bytes().any(|b| b.is_ascii_whitespace()) {
        cleaned = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        cleaned.as_str()
    } else {
        text
    };
    let mut out = Vec::with_capacity(t.len() / 4 * 3 + 3);
    decode_lenient(t.as_bytes(), &mut out)?;
    Ok(out)
}

/// Decodes base64 text that arrives in pieces of any size (as [`decode_base64`] would decode
/// it whole, without whitespace): whole groups of four characters are decoded as they come,
/// the rest waits for the next piece or [`Base64Pieces::finish`].
#[derive(Debug, Default)]
pub struct Base64Pieces {
    /// The start of a group of four split between pieces (under four bytes).
    carry: Vec<u8>,
    /// Padding was seen: the text has ended.
    padded: bool,
}

impl Base64Pieces {
    /// Decodes what it can of `text` (after what was left over), appending to `out`. The
    /// text is decoded where it is, not copied first: only a group of four split between
    /// pieces is.
    pub fn push(&mut self, mut text: &[u8], out: &mut Vec<u8>) -> Result<(), TransportError> {
        if !self.carry.is_empty() {
            let take = (4 - self.carry.len()).min(text.len());
            self.carry.extend_from_slice(&text[..take]);
            text = &text[take..];
            if self.carry.len() < 4 {
                return Ok(());
            }
            let group = std::mem::take(&mut self.carry);
            self.decode(&group, out)?;
        }
        let whole = text.len() / 4 * 4;
        self.decode(&text[..whole], out)?;
        self.carry.extend_from_slice(&text[whole..]);
        Ok(())
    }

    /// Decodes what is left (missing padding accepted).
    pub fn finish(mut self, out: &mut Vec<u8>) -> Result<(), TransportError> {
        let rest = std::mem::take(&mut self.carry);
        self.decode(&rest, out)
    }

    fn decode(&mut self, text: &[u8], out: &mut Vec<u8>) -> Result<(), TransportError> {
        if text.is_empty() {
            return Ok(());
        }
        if self.padded {
            return Err(TransportError::BadBase64("text after padding".into()));
        }
        decode_lenient(text, out)?;
        self.padded = text.ends_with(b"=");
        Ok(())
    }
}

/// Standard base64 that accepts missing padding.
fn lenient_base64() -> base64::engine::GeneralPurpose {
    base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    )
}

/// Compares checksums case-insensitively.
pub fn verify_checksum(expected: &str, actual: &str) -> Result<(), TransportError> {
    if expected.eq_ignore_ascii_case(actual) {
        Ok(())
    } else {
        Err(TransportError::ChecksumMismatch {
            expected: expected.to_owned(),
            actual: actual.to_owned(),
        })
    }
}

/// An archive written to disk, for URL mode (the driver serves the file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveFile {
    /// The ZIP on disk (private to this machine).
    pub path: PathBuf,
    /// SHA-256 of the file, lowercase hex.
    pub checksum: String,
    /// Size in bytes.
    pub size_bytes: u64,
}

impl ArchiveFile {
    /// The START handle for this archive once the driver knows the URL it serves it at.
    pub fn handle_for_url(&self, url: impl Into<String>) -> ArchiveHandle {
        ArchiveHandle {
            data: ArchiveData {
                base64: None,
                url: Some(url.into()),
                local_file: None,
                local_file_sha256: None,
            },
            checksum: self.checksum.clone(),
            size_bytes: Some(self.size_bytes),
        }
    }

    /// Reads the file and builds an inline handle (for peers without URL support). The file
    /// is encoded as it is read: only the base64 text is held, never the archive's bytes too.
    pub fn to_inline_handle(&self) -> Result<ArchiveHandle, TransportError> {
        let mut file =
            fs::File::open(&self.path).map_err(|e| TransportError::io("reading archive", e))?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(self.size_bytes);
        let cap = usize::try_from(len.div_ceil(3).saturating_mul(4)).unwrap_or(0);
        let mut enc = base64::write::EncoderStringWriter::from_consumer(
            String::with_capacity(cap),
            &base64::engine::general_purpose::STANDARD,
        );
        std::io::copy(&mut file, &mut enc).map_err(|e| TransportError::io("reading archive", e))?;
        Ok(ArchiveHandle {
            data: ArchiveData {
                base64: Some(enc.into_inner()),
                url: None,
                local_file: None,
                local_file_sha256: None,
            },
            checksum: self.checksum.clone(),
            size_bytes: Some(self.size_bytes),
        })
    }
}

/// How an archive is produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// In memory, base64 inline (what the wire needs for reference peers).
    Inline,
    /// As a file in this directory, for the driver to serve by URL.
    File(PathBuf),
    /// Inline, but an archive over 1 MiB is left as a file in this directory
    /// ([`ArchiveData::local_file`](awcp_proto::wire::ArchiveData::local_file)) for the driver
    /// to stream as base64 while it sends START: memory stays flat in the workspace's size.
    /// The driver deletes the file once the delegation has ended.
    InlineOrFile(PathBuf),
}

/// A produced archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArchiveOutput {
    /// Inline handle (`workspaceBase64` + checksum).
    Inline(ArchiveHandle),
    /// A file plus checksum; build the handle with [`ArchiveFile::handle_for_url`].
    File(ArchiveFile),
}

impl ArchiveOutput {
    /// The checksum.
    pub fn checksum(&self) -> &str {
        match self {
            ArchiveOutput::Inline(h) => &h.checksum,
            ArchiveOutput::File(f) => &f.checksum,
        }
    }

    /// Raw ZIP size in bytes.
    pub fn size_bytes(&self) -> u64 {
        match self {
            ArchiveOutput::Inline(h) => h.size_bytes.unwrap_or(0),
            ArchiveOutput::File(f) => f.size_bytes,
        }
    }
}

/// Where archive bytes come from.
pub enum ArchiveSource<'a> {
    /// Inline base64 text.
    Base64(&'a str),
    /// Raw ZIP bytes.
    Bytes(&'a [u8]),
    /// A ZIP file on disk.
    File(&'a Path),
    /// A ZIP file on disk whose SHA-256 (hex) the caller computed as it wrote the file
    /// ([`crate::manifest::Sha256Hex`]); it is checked instead of reading the file again.
    HashedFile {
        /// The file.
        path: &'a Path,
        /// Its SHA-256.
        sha256: &'a str,
    },
    /// A byte stream (e.g. an HTTP body); spooled to a temp file while hashing.
    Reader(&'a mut dyn Read),
}

impl core::fmt::Debug for ArchiveSource<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ArchiveSource::Base64(s) => write!(f, "Base64(len {})", s.len()),
            ArchiveSource::Bytes(b) => write!(f, "Bytes(len {})", b.len()),
            ArchiveSource::File(_) => f.write_str("File(..)"),
            ArchiveSource::HashedFile { sha256, .. } => write!(f, "HashedFile(sha256 {sha256})"),
            ArchiveSource::Reader(_) => f.write_str("Reader(..)"),
        }
    }
}

/// A seekable, checksummed archive ready for extraction.
pub(crate) enum Opened {
    Mem(Cursor<Vec<u8>>),
    File(fs::File),
    Spooled(tempfile::NamedTempFile),
}

impl Read for Opened {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Opened::Mem(c) => c.read(buf),
            Opened::File(f) => f.read(buf),
            Opened::Spooled(t) => t.as_file_mut().read(buf),
        }
    }
}

impl Seek for Opened {
    fn seek(&mut self, pos: io::SeekFrom) -> io::Result<u64> {
        match self {
            Opened::Mem(c) => c.seek(pos),
            Opened::File(f) => f.seek(pos),
            Opened::Spooled(t) => t.as_file_mut().seek(pos),
        }
    }
}

impl Opened {
    /// Extracts it into `target` as [`extract::extract`] does, with the files written by
    /// several threads when there are many (each reading through its own position).
    pub(crate) fn extract(
        self,
        target: &Path,
        limits: &ExtractLimits,
        cancel: &CancelFlag,
    ) -> Result<ExtractReport, TransportError> {
        match &self {
            Opened::Mem(c) => extract::extract_parallel(
                Cursor::new(c.get_ref().as_slice()),
                target,
                limits,
                cancel,
            ),
            Opened::File(f) => extract::extract_parallel(FileAt::new(f)?, target, limits, cancel),
            Opened::Spooled(t) => {
                extract::extract_parallel(FileAt::new(t.as_file())?, target, limits, cancel)
            }
        }
    }
}

/// A reader of a shared file at a position of its own (`pread`), so that several threads
/// read one file independently: what [`extract_parallel`] needs to read an archive file
/// (each copy reads on its own). A small read (a ZIP's headers are read a few bytes at a time)
/// reads [`FileAt::READ_AHEAD`] bytes and is served from them, as the reads that follow it
/// are: parsing the central directory of 1,000 entries took 3,000 system calls.
#[derive(Clone, Debug)]
pub struct FileAt<'a> {
    file: &'a fs::File,
    pos: u64,
    len: u64,
    /// Bytes of the file from `ahead_at`, read ahead.
    ahead: Vec<u8>,
    ahead_at: u64,
}

impl<'a> FileAt<'a> {
    /// How much a small read reads ahead.
    pub const READ_AHEAD: usize = 4096;
    /// Reads under this size read ahead; larger ones go to the file (after what was read
    /// ahead), so that file data is not copied twice.
    pub const SMALL_READ: usize = 512;

    /// A reader of `file` from its start (its length read once, now).
    pub fn new(file: &'a fs::File) -> Result<Self, TransportError> {
        let len = file
            .metadata()
            .map_err(|e| TransportError::io("reading archive", e))?
            .len();
        Ok(FileAt {
            file,
            pos: 0,
            len,
            ahead: Vec::new(),
            ahead_at: 0,
        })
    }
}

impl Read for FileAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let held = self
            .pos
            .checked_sub(self.ahead_at)
            .and_then(|off| usize::try_from(off).ok())
            .filter(|&off| off < self.ahead.len());
        let n = match held {
            Some(off) => {
                let n = buf.len().min(self.ahead.len() - off);
                buf[..n].copy_from_slice(&self.ahead[off..off + n]);
                n
            }
            None if buf.len() >= Self::SMALL_READ => self.file.read_at(buf, self.pos)?,
            None => {
                self.ahead.resize(Self::READ_AHEAD, 0);
                let got = self.file.read_at(&mut self.ahead, self.pos)?;
                self.ahead.truncate(got);
                self.ahead_at = self.pos;
                let n = buf.len().min(got);
                buf[..n].copy_from_slice(&self.ahead[..n]);
                n
            }
        };
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for FileAt<'_> {
    fn seek(&mut self, pos: io::SeekFrom) -> io::Result<u64> {
        let to = match pos {
            io::SeekFrom::Start(n) => Some(n),
            io::SeekFrom::End(d) => self.len.checked_add_signed(d),
            io::SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        match to {
            Some(to) => {
                self.pos = to;
                Ok(to)
            }
            None => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek before the start of the archive",
            )),
        }
    }
}

/// Opens a source, computes its SHA-256 and checks it against `expected` (if any).
/// `spool_dir` is where a [`ArchiveSource::Reader`] is spooled (same filesystem as the target
/// is best).
pub(crate) fn open_verified(
    src: ArchiveSource<'_>,
    expected: Option<&str>,
    spool_dir: &Path,
    max_bytes: u64,
    cancel: &CancelFlag,
) -> Result<Opened, TransportError> {
    let (opened, actual) = match src {
        // A large inline archive is decoded piece by piece into a spool file: never held
        // decoded in memory beside its text. (Text with whitespace in it, which no encoder we
        // know writes, is cleaned and decoded whole.)
        ArchiveSource::Base64(t)
            if t.len() > SPOOL_IN_MEMORY && !t.bytes().any(|b| b.is_ascii_whitespace()) =>
        {
            let engine = lenient_base64();
            let mut r = base64::read::DecoderReader::new(t.as_bytes(), &engine);
            // Its size was bounded when the text was received (as the in-memory path's is);
            // extraction applies the content limits.
            spool(&mut r, spool_dir, u64::MAX, cancel, |e| {
                if e.kind() == io::ErrorKind::InvalidData {
                    TransportError::BadBase64(e.to_string())
                } else {
                    TransportError::io("decoding archive", e)
                }
            })?
        }
        ArchiveSource::Base64(t) => {
            let data = decode_base64(t)?;
            let sum = hex(&Sha256::digest(&data));
            (Opened::Mem(Cursor::new(data)), sum)
        }
        ArchiveSource::Bytes(b) => (
            Opened::Mem(Cursor::new(b.to_vec())),
            hex(&Sha256::digest(b)),
        ),
        ArchiveSource::File(p) => {
            let mut f = fs::File::open(p).map_err(|e| TransportError::io("opening archive", e))?;
            let sum = crate::manifest::hash_reader(&mut f)
                .map_err(|e| TransportError::io("hashing archive", e))?;
            f.rewind()
                .map_err(|e| TransportError::io("rewinding archive", e))?;
            (Opened::File(f), sum)
        }
        ArchiveSource::HashedFile { path, sha256 } => {
            let f = fs::File::open(path).map_err(|e| TransportError::io("opening archive", e))?;
            (Opened::File(f), sha256.to_owned())
        }
        ArchiveSource::Reader(r) => spool(r, spool_dir, max_bytes, cancel, |e| {
            TransportError::io("receiving archive", e)
        })?,
    };
    if let Some(exp) = expected {
        verify_checksum(exp, &actual)?;
    }
    Ok(opened)
}

/// Copies `r` into a spool file in `spool_dir` while hashing it (at most `max_bytes`);
/// `read_error` says what a failed read means.
fn spool(
    r: &mut dyn Read,
    spool_dir: &Path,
    max_bytes: u64,
    cancel: &CancelFlag,
    read_error: impl Fn(io::Error) -> TransportError,
) -> Result<(Opened, String), TransportError> {
    let mut t = tempfile::Builder::new()
        .prefix(".awcp-spool-")
        .tempfile_in(spool_dir)
        .map_err(|e| TransportError::io("creating spool file", e))?;
    let mut h = Sha256::new();
    let mut buf = crate::buf::for_len(0);
    let mut total = 0u64;
    loop {
        cancel.check()?;
        let n = match r.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(read_error(e)),
        };
        if n == 0 {
            break;
        }
        total += n as u64;
        if total > max_bytes {
            return Err(TransportError::BadArchive(format!(
                "archive larger than {max_bytes} bytes"
            )));
        }
        h.update(&buf[..n]);
        t.write_all(&buf[..n])
            .map_err(|e| TransportError::io("spooling archive", e))?;
        crate::buf::grow_if_filled(&mut buf, n);
    }
    t.rewind()
        .map_err(|e| TransportError::io("rewinding spool", e))?;
    Ok((Opened::Spooled(t), hex(&h.finalize())))
}

/// Inline archives up to this size are built in memory; larger ones in a temporary file.
const SPOOL_IN_MEMORY: usize = 1 << 20;

/// SHA-256 (lowercase hex) and base64 of everything `r` yields (`len` bytes expected, to size
/// the text once), read in 64 KiB pieces.
fn hash_and_encode(r: &mut impl Read, len: u64) -> io::Result<(String, String)> {
    let cap = usize::try_from(len.div_ceil(3).saturating_mul(4)).unwrap_or(0);
    let mut enc = base64::write::EncoderStringWriter::from_consumer(
        String::with_capacity(cap),
        &base64::engine::general_purpose::STANDARD,
    );
    let mut hasher = Sha256::new();
    let mut buf = crate::buf::for_len(len);
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        enc.write_all(&buf[..n])?;
    }
    Ok((hex(&hasher.finalize()), enc.into_inner()))
}

/// Produces an archive per `delivery` by running `write` on a seekable sink; `write` returns
/// the archive's SHA-256 (lowercase hex) if it followed it while writing
/// ([`pack::PackReport::archive_sha256`]), else the written archive is hashed.
pub(crate) fn produce(
    delivery: &Delivery,
    file_stem: &str,
    write: impl FnOnce(&mut dyn WriteSeek) -> Result<Option<String>, TransportError>,
) -> Result<ArchiveOutput, TransportError> {
    match delivery {
        Delivery::Inline => {
            // Small archives stay in memory; a large one goes to an unnamed temporary file, so
            // that only its base64 text is ever held, not the archive's bytes as well. (Its
            // hash is taken as it is encoded.)
            let mut spool = tempfile::SpooledTempFile::new(SPOOL_IN_MEMORY);
            let _ = write(&mut spool)?;
            let io_err = |e| TransportError::io("encoding archive", e);
            let len = spool.seek(io::SeekFrom::End(0)).map_err(io_err)?;
            spool.seek(io::SeekFrom::Start(0)).map_err(io_err)?;
            let (checksum, base64) = hash_and_encode(&mut spool, len).map_err(io_err)?;
            Ok(ArchiveOutput::Inline(ArchiveHandle {
                checksum,
                size_bytes: Some(len),
                data: ArchiveData {
                    base64: Some(base64),
                    url: None,
                    local_file: None,
                    local_file_sha256: None,
                },
            }))
        }
        Delivery::File(dir) => {
            let mut t = pack_file(dir)?;
            let known = write(t.as_file_mut())?;
            Ok(ArchiveOutput::File(persist_pack(t, dir, file_stem, known)?))
        }
        Delivery::InlineOrFile(dir) => {
            let mut sink = Spill::Mem(Cursor::new(Vec::new()), dir.clone());
            let known = write(&mut sink)?;
            match sink {
                Spill::Mem(c, _) => {
                    let data = c.into_inner();
                    Ok(ArchiveOutput::Inline(ArchiveHandle {
                        checksum: known.unwrap_or_else(|| hex(&Sha256::digest(&data))),
                        size_bytes: Some(data.len() as u64),
                        data: ArchiveData {
                            base64: Some(encode_base64(&data)),
                            url: None,
                            local_file: None,
                            local_file_sha256: None,
                        },
                    }))
                }
                Spill::File(t) => {
                    let f = persist_pack(t, dir, file_stem, known)?;
                    Ok(ArchiveOutput::Inline(ArchiveHandle {
                        checksum: f.checksum,
                        size_bytes: Some(f.size_bytes),
                        data: ArchiveData {
                            base64: None,
                            url: None,
                            local_file: Some(f.path.to_string_lossy().into_owned()),
                            local_file_sha256: None,
                        },
                    }))
                }
            }
        }
    }
}

/// A new hidden temporary file for an archive in `dir` (created if missing).
fn pack_file(dir: &Path) -> Result<tempfile::NamedTempFile, TransportError> {
    fs::create_dir_all(dir).map_err(|e| TransportError::io("creating archive dir", e))?;
    tempfile::Builder::new()
        .prefix(".awcp-pack-")
        .tempfile_in(dir)
        .map_err(|e| TransportError::io("creating archive file", e))
}

/// Gives a written archive its name, `{file_stem}-{random}.zip` in `dir`, hashing it unless
/// its SHA-256 is `known`.
fn persist_pack(
    mut t: tempfile::NamedTempFile,
    dir: &Path,
    file_stem: &str,
    known: Option<String>,
) -> Result<ArchiveFile, TransportError> {
    let f = t.as_file_mut();
    let checksum = match known {
        Some(sum) => sum,
        None => {
            f.rewind()
                .map_err(|e| TransportError::io("rewinding archive", e))?;
            crate::manifest::hash_reader(f).map_err(|e| TransportError::io("hashing archive", e))?
        }
    };
    let size_bytes = f
        .metadata()
        .map_err(|e| TransportError::io("sizing archive", e))?
        .len();
    let suffix = t
        .path()
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix(".awcp-pack-"))
        .unwrap_or("x")
        .to_owned();
    let path = dir.join(format!("{file_stem}-{suffix}.zip"));
    t.persist(&path)
        .map_err(|e| TransportError::io("saving archive", e.error))?;
    Ok(ArchiveFile {
        path,
        checksum,
        size_bytes,
    })
}

/// An archive being written: in memory up to [`SPOOL_IN_MEMORY`], then in a file in the
/// directory it holds.
enum Spill {
    Mem(Cursor<Vec<u8>>, PathBuf),
    File(tempfile::NamedTempFile),
}

impl Write for Spill {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Spill::Mem(c, dir) = self {
            let end = usize::try_from(c.position())
                .unwrap_or(usize::MAX)
                .saturating_add(buf.len());
            if end > SPOOL_IN_MEMORY {
                let mut t = pack_file(dir).map_err(io::Error::other)?;
                t.write_all(c.get_ref())?;
                t.seek(io::SeekFrom::Start(c.position()))?;
                *self = Spill::File(t);
            }
        }
        match self {
            Spill::Mem(c, _) => c.write(buf),
            Spill::File(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Spill::Mem(c, _) => c.flush(),
            Spill::File(t) => t.flush(),
        }
    }
}

impl Seek for Spill {
    fn seek(&mut self, pos: io::SeekFrom) -> io::Result<u64> {
        match self {
            Spill::Mem(c, _) => c.seek(pos),
            Spill::File(t) => t.seek(pos),
        }
    }
}

/// `Write + Seek` as one object-safe trait.
pub trait WriteSeek: Write + Seek {}
impl<T: Write + Seek> WriteSeek for T {}

/// ZIP root layout: the wire format's [`ArchiveLayout`](awcp_proto::wire::ArchiveLayout)
/// (`Flat` for \[S\] executors, `PerResource` for \[R\]), which
/// [`DelegatorOutput::PrepareTransport`](awcp_proto::DelegatorOutput::PrepareTransport) names.
pub use awcp_proto::wire::ArchiveLayout as Layout;

/// Detects the layout: top-level entries exactly matching resource names → per-resource,
/// otherwise flat.
pub fn detect_layout<S: AsRef<str>>(
    top_level: &std::collections::BTreeSet<String>,
    resource_names: &[S],
) -> Layout {
    if !top_level.is_empty()
        && top_level
            .iter()
            .all(|t| resource_names.iter().any(|r| r.as_ref() == t))
    {
        Layout::PerResource
    } else {
        Layout::Flat
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    /// Inline archives below and above the in-memory limit: the handle's base64 decodes to
    /// exactly what was written, and its checksum and size are that data's.
    #[test]
    fn inline_archives_of_any_size_carry_their_bytes_checksum_and_size() {
        for len in [
            0usize,
            5,
            SPOOL_IN_MEMORY - 1,
            SPOOL_IN_MEMORY + 7,
            3 * SPOOL_IN_MEMORY,
        ] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let out = produce(&Delivery::Inline, "t", |w| {
                w.write_all(&data)
                    .map(|()| None)
                    .map_err(|e| TransportError::io("writing", e))
            })
            .unwrap();
            let ArchiveOutput::Inline(h) = out else {
                panic!("inline delivery gives an inline handle");
            };
            let text = h.data.base64.as_deref().unwrap();
            assert_eq!(decode_base64(text).unwrap(), data, "len {len}");
            assert_eq!(h.checksum, hex(&Sha256::digest(&data)), "len {len}");
            assert_eq!(h.size_bytes, Some(len as u64));
            assert_eq!(
                text.len(),
                len.div_ceil(3) * 4,
                "sized once, no slack: len {len}"
            );
        }
    }

    /// `InlineOrFile`: up to the in-memory limit the archive is inline text; above it, a file
    /// in the directory (with seeks back into what was already written honoured), holding
    /// exactly the bytes written, with their checksum and size.
    #[test]
    fn inline_or_file_keeps_small_archives_inline_and_large_ones_in_a_file() {
        let dir = tempfile::tempdir().unwrap();
        for len in [
            0usize,
            5,
            SPOOL_IN_MEMORY,
            SPOOL_IN_MEMORY + 1,
            3 * SPOOL_IN_MEMORY,
        ] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let out = produce(&Delivery::InlineOrFile(dir.path().into()), "t", |w| {
                let e = |e| TransportError::io("writing", e);
                // Write a placeholder first and patch it after, as ZIP writers do.
                w.write_all(&[0u8; 4][..len.min(4)]).map_err(e)?;
                w.write_all(data.get(4..).unwrap_or(&[])).map_err(e)?;
                w.seek(io::SeekFrom::Start(0)).map_err(e)?;
                w.write_all(&data[..len.min(4)]).map_err(e)?;
                w.seek(io::SeekFrom::End(0)).map(|_| None).map_err(e)
            })
            .unwrap();
            let ArchiveOutput::Inline(h) = out else {
                panic!("inline delivery gives an inline handle");
            };
            let bytes = match (&h.data.base64, &h.data.local_file) {
                (Some(t), None) => {
                    assert!(len <= SPOOL_IN_MEMORY, "len {len} inline");
                    decode_base64(t).unwrap()
                }
                (None, Some(f)) => {
                    assert!(len > SPOOL_IN_MEMORY, "len {len} in a file");
                    assert!(Path::new(f).starts_with(dir.path()));
                    fs::read(f).unwrap()
                }
                other => panic!("len {len}: {other:?}"),
            };
            assert_eq!(bytes, data, "len {len}");
            assert_eq!(h.checksum, hex(&Sha256::digest(&data)), "len {len}");
            assert_eq!(h.size_bytes, Some(len as u64));
        }
        let left: Vec<_> = fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(left.len(), 2, "the two large archives, no temporary file");
    }

    /// Base64 in pieces of any size decodes as the whole text does; text after padding and
    /// bad characters are refused.
    #[test]
    fn base64_in_pieces_decodes_as_a_whole() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 256) as u8).collect();
        for len in [0usize, 1, 2, 3, 4, 5, 998, 1000] {
            let text = encode_base64(&data[..len]);
            for t in [text.as_str(), text.trim_end_matches('=')] {
                for piece in [1, 2, 3, 5, 7, 64] {
                    let mut d = Base64Pieces::default();
                    let mut out = Vec::new();
                    for c in t.as_bytes().chunks(piece) {
                        d.push(c, &mut out).unwrap();
                    }
                    d.finish(&mut out).unwrap();
                    assert_eq!(out, &data[..len], "len {len} piece {piece}");
                }
            }
        }
        for bad in ["QQ==QUJD", "QUJ!", "QQ==Q", "QUJDQQ==QUJD", "QU!DQUJD"] {
            for piece in [1, 3, 4, 6, 64] {
                let mut d = Base64Pieces::default();
                let mut out = Vec::new();
                let r = bad
                    .as_bytes()
                    .chunks(piece)
                    .try_for_each(|c| d.push(c, &mut out))
                    .and_then(|()| d.finish(&mut out));
                assert!(
                    matches!(r, Err(TransportError::BadBase64(_))),
                    "{bad} in pieces of {piece}: {r:?}"
                );
            }
        }
    }

    proptest::proptest! {
        /// Whatever reads (small ones served from what was read ahead, large ones from the
        /// file) and seeks are made, through copies too, each reads what the file holds
        /// where it is.
        #[test]
        fn file_at_reads_what_the_file_holds(ops in proptest::collection::vec((0u64..25_000, 0usize..9000, proptest::bool::ANY), 1..60)) {
            use std::io::Write as _;
            let data: Vec<u8> = (0..20_000u32).map(|i| (i * 31 % 251) as u8).collect();
            let mut f = tempfile::tempfile().unwrap();
            f.write_all(&data).unwrap();
            let mut r = FileAt::new(&f).unwrap();
            let mut pos = 0u64;
            for (to, len, seek) in ops {
                if seek {
                    pos = r.seek(io::SeekFrom::Start(to)).unwrap();
                }
                // A copy reads on its own, from the same place.
                let mut copy = r.clone();
                let mut buf = vec![0u8; len];
                let n = r.read(&mut buf).unwrap();
                let start = (pos as usize).min(data.len());
                let want = &data[start..(start + len).min(data.len())];
                proptest::prop_assert!(n <= want.len() && buf[..n] == want[..n]);
                proptest::prop_assert!(n > 0 || want.is_empty() || len == 0);
                pos += n as u64;
                let mut whole = vec![0u8; want.len()];
                copy.read_exact(&mut whole).unwrap();
                proptest::prop_assert!(whole == want);
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// The SIMD decoder accepts and refuses what the `base64` crate's padding-indifferent
        /// engine (the decoder before it) does, with the same bytes: text from real encoders
        /// (padded, unpadded, partly padded) and near-base64 noise (`=` anywhere, a stray
        /// character, non-canonical last characters), whole and in pieces.
        #[test]
        fn simd_decoding_agrees_with_the_base64_crate(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            strip in 0usize..3,
            noise in proptest::collection::vec(
                proptest::sample::select(b"ABQRSgh+/=!".to_vec()), 0..12),
            piece in 1usize..9,
        ) {
            let padded = encode_base64(&data);
            let keep = padded.len() - strip.min(padded.len() - padded.trim_end_matches('=').len());
            let real = &padded[..keep];
            let noisy = String::from_utf8(noise).unwrap();
            for t in [real, noisy.as_str(), &format!("{real}{noisy}")] {
                let ours = decode_base64(t).ok();
                let theirs = lenient_base64().decode(t).ok();
                proptest::prop_assert_eq!(&ours, &theirs, "text {:?}", t);
                if t == real {
                    proptest::prop_assert_eq!(ours.as_deref(), Some(&data[..]));
                }
                // In pieces: the same bytes wherever the whole text decodes.
                let mut d = Base64Pieces::default();
                let mut out = Vec::new();
                let r = t
                    .as_bytes()
                    .chunks(piece)
                    .try_for_each(|c| d.push(c, &mut out))
                    .and_then(|()| d.finish(&mut out));
                if let Some(whole) = theirs {
                    proptest::prop_assert!(r.is_ok(), "{:?} in pieces of {}: {:?}", t, piece, r);
                    proptest::prop_assert_eq!(out, whole);
                }
            }
        }
    }

    /// Large inline text is decoded piece by piece into a spool file: same bytes and checksum
    /// as decoding it whole, missing padding accepted, a bad character refused as bad base64.
    #[test]
    fn large_inline_text_is_decoded_into_a_spool_with_the_same_result() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..3 * SPOOL_IN_MEMORY + 1)
            .map(|i| (i * 7 % 253) as u8)
            .collect();
        let text = encode_base64(&data);
        let sum = hex(&Sha256::digest(&data));
        for t in [text.as_str(), text.trim_end_matches('=')] {
            let mut opened = open_verified(
                ArchiveSource::Base64(t),
                Some(&sum),
                dir.path(),
                0,
                &CancelFlag::new(),
            )
            .unwrap();
            assert!(matches!(opened, Opened::Spooled(_)));
            let mut back = Vec::new();
            opened.read_to_end(&mut back).unwrap();
            assert_eq!(back, data);
        }
        let mut bad = text.clone();
        bad.replace_range(1000..1001, "*");
        let e = open_verified(
            ArchiveSource::Base64(&bad),
            None,
            dir.path(),
            u64::MAX,
            &CancelFlag::new(),
        )
        .err()
        .unwrap();
        assert!(matches!(e, TransportError::BadBase64(_)), "{e:?}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "spool files are removed: {left:?}");
    }
}
