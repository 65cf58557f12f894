//! Making directory entries durable: the one place both the apply (`snapshot::journal`) and
//! the drivers' journals and snapshot stores sync a directory after renaming into it.

use std::path::Path;

/// Makes the entries of `dir` durable: a file renamed into it keeps its new name after a power
/// loss. Syncing the file does not do that everywhere: ext4 without its journal (as on the
/// machine BENCHMARKS.md describes) writes a directory back on its own schedule, up to about
/// 30 s later.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Renames `from` to `to`, then syncs `to`'s directory so the new name survives a power loss
/// (see [`sync_dir`]).
pub fn rename_durably(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::rename(from, to)?;
    sync_dir(to.parent().unwrap_or_else(|| Path::new(".")))
}
