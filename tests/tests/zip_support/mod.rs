//! ZIP archives built by hand for tests that send them to an executor as they are: entries
//! the archive transport's packer would never write (symlinks, escaping names), or archives
//! of a chosen size and content. Stored (not deflated), every entry mode 0644.

// Shared by several test binaries; not each uses every piece.
#![allow(dead_code)]

use std::io::Write;

/// One entry of [`zip_of`].
pub enum Entry<'a> {
    /// A regular file with this content.
    File(&'a [u8]),
    /// A symlink to this target.
    Symlink(&'a str),
}

/// A ZIP of `entries`, in order.
pub fn zip_of(entries: &[(&str, Entry)]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .unix_permissions(0o644);
    for (name, entry) in entries {
        match entry {
            Entry::File(data) => {
                w.start_file(*name, opts).unwrap();
                w.write_all(data).unwrap();
            }
            Entry::Symlink(target) => w.add_symlink(*name, *target, opts).unwrap(),
        }
    }
    w.finish().unwrap().into_inner()
}

/// A ZIP of one file, `name`, of `len` pseudo-random (incompressible) bytes drawn from `seed`.
pub fn random_file_zip(name: &str, len: usize, seed: u64) -> Vec<u8> {
    let mut rng = awcp_tests::rng::Rng(seed);
    let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
    zip_of(&[(name, Entry::File(&data))])
}
