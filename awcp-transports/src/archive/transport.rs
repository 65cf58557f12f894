//! [`ArchiveDelegator`] and [`ArchiveExecutor`]: the archive transport behind the traits.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use awcp_proto::{DelegationId, TransportKind};

use super::{
    detect_layout, open_verified, produce, ArchiveOutput, Delivery, ExtractLimits, Layout, PackItem,
};
use crate::cancel::CancelFlag;
use crate::error::TransportError;
use crate::export::ExportView;
use crate::manifest::{record, Baseline, Manifest};
use crate::scan::add_walk;
use crate::snapshot::{
    apply_snapshot, baseline_path, capture, full_walk_options, save_baseline, ApplyOptions,
    ApplyReport, ApplyRequest, CapturedSnapshot, SnapshotKind,
};
use crate::traits::{
    DelegatorTransport, DependencyMissing, ExecutorTransport, PrepareRequest, Prepared,
    ReleaseReport, SetupReport, SetupRequest,
};
use crate::walk::{walk, WalkOptions, WalkResult};

/// Delegator-side configuration.
#[derive(Clone, Debug)]
pub struct ArchiveDelegatorConfig {
    /// Where export views live (`<export_base>/<delegation>/<resource>`).
    pub export_base: PathBuf,
    /// Walker options (shared by admission and packing).
    pub walk: WalkOptions,
    /// Apply options.
    pub apply: ApplyOptions,
}

impl ArchiveDelegatorConfig {
    /// Defaults with export views under `export_base`.
    pub fn new(export_base: impl Into<PathBuf>) -> Self {
        ArchiveDelegatorConfig {
            export_base: export_base.into(),
            walk: WalkOptions::default(),
            apply: ApplyOptions::default(),
        }
    }
}

struct DelegationState {
    view: ExportView,
    archive_file: Option<PathBuf>,
}

/// The archive transport, delegator side.
pub struct ArchiveDelegator {
    config: ArchiveDelegatorConfig,
    state: Mutex<BTreeMap<String, DelegationState>>,
}

impl ArchiveDelegator {
    /// A delegator transport with this configuration.
    pub fn new(config: ArchiveDelegatorConfig) -> Self {
        ArchiveDelegator {
            config,
            state: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, DelegationState>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn stats_of(walks: &[(String, PathBuf, WalkResult)]) -> awcp_proto::WorkspaceStats {
    let mut s = awcp_proto::WorkspaceStats::default();
    for (name, root, w) in walks {
        add_walk(&mut s, name, root, w);
    }
    s
}

impl DelegatorTransport for ArchiveDelegator {
    fn kind(&self) -> TransportKind {
        TransportKind::Archive
    }

    fn prepare(
        &self,
        req: &PrepareRequest<'_>,
        cancel: &CancelFlag,
    ) -> Result<Prepared, TransportError> {
        let id = req.delegation_id.as_str();
        if req.layout == Layout::Flat && req.resources.len() != 1 {
            return Err(TransportError::Unsupported(
                "the flat archive layout carries exactly one resource".into(),
            ));
        }
        // Release a previous attempt of the same delegation first.
        self.release(req.delegation_id)?;
        let view = ExportView::create(
            &self.config.export_base,
            id,
            req.resources,
            req.export,
            &self.config.walk,
            cancel,
        )?;
        let result = (|| {
            let mut walks = Vec::new();
            for r in req.resources {
                let root = view.resource_path(r.name.as_str());
                let w = walk(&root, &self.config.walk, cancel)?;
                walks.push((r.name.to_string(), root.to_path_buf(), w));
            }
            let stats = stats_of(&walks);
            if let Some(l) = &req.admission {
                awcp_proto::admission_verdict(&stats, l, req.allow_sensitive)
                    .map_err(TransportError::Refused)?;
            }
            let names: Vec<String> = walks
                .iter()
                .flat_map(|(res, _, w)| {
                    w.files.iter().map(move |f| match req.layout {
                        Layout::Flat => f.rel.clone(),
                        Layout::PerResource => format!("{res}/{}", f.rel),
                    })
                })
                .collect();
            let entries: Vec<_> = walks.iter().flat_map(|(_, _, w)| w.files.iter()).collect();
            let items: Vec<PackItem<'_>> = names
                .iter()
                .zip(&entries)
                .map(|(n, e)| PackItem { name: n, entry: e })
                .collect();
            let mut hashes = Vec::new();
            let archive = produce(&req.delivery, id, |w| {
                let (_, rep) = super::pack(w, &items, &[], cancel)?;
                hashes = rep.hashes;
                Ok(rep.archive_sha256)
            })?;
            let mut baseline = Baseline::default();
            let mut it = hashes.into_iter();
            for (res, _, w) in &walks {
                let m = baseline
                    .resources
                    .entry(res.clone())
                    .or_insert_with(Manifest::default);
                for f in &w.files {
                    if let Some((_, h)) = it.next() {
                        m.files.insert(f.rel.clone(), record(f, h));
                    }
                }
            }
            Ok::<_, TransportError>(Prepared {
                archive,
                baseline,
                stats,
            })
        })();
        match result {
            Ok(p) => {
                let archive_file = match &p.archive {
                    ArchiveOutput::File(f) => Some(f.path.clone()),
                    ArchiveOutput::Inline(_) => None,
                };
                self.lock()
                    .insert(id.to_owned(), DelegationState { view, archive_file });
                tracing::debug!(
                    delegation_id = id,
                    files = p.stats.file_count,
                    "archive prepared"
                );
                Ok(p)
            }
            Err(e) => {
                view.remove();
                Err(e)
            }
        }
    }

    fn apply_snapshot(
        &self,
        req: ApplyRequest<'_>,
        cancel: &CancelFlag,
    ) -> Result<ApplyReport, TransportError> {
        apply_snapshot(req, &self.config.apply, cancel)
    }

    fn preview_snapshot(
        &self,
        req: ApplyRequest<'_>,
        limits: crate::snapshot::PreviewLimits,
        cancel: &CancelFlag,
    ) -> Result<crate::snapshot::Preview, TransportError> {
        crate::snapshot::preview_snapshot(req, &self.config.apply, limits, cancel)
    }

    fn release(&self, delegation_id: &DelegationId) -> Result<ReleaseReport, TransportError> {
        let st = self.lock().remove(delegation_id.as_str());
        if let Some(st) = st {
            st.view.remove();
            if let Some(f) = st.archive_file {
                let _ = fs::remove_file(f);
            }
        } else {
            // Unknown here (e.g. after a restart): remove a leftover view directory if any.
            // remove_dir_all never follows the symlinks of a symlink view.
            let _ = fs::remove_dir_all(self.config.export_base.join(delegation_id.as_str()));
        }
        Ok(ReleaseReport::default())
    }
}

/// Executor-side configuration.
#[derive(Clone, Debug, Default)]
pub struct ArchiveExecutorConfig {
    /// Extraction limits (also caps a spooled URL download).
    pub limits: ExtractLimits,
}

/// The archive transport, executor side.
#[derive(Default)]
pub struct ArchiveExecutor {
    config: ArchiveExecutorConfig,
    captured: Mutex<BTreeMap<PathBuf, Vec<PathBuf>>>,
}

impl ArchiveExecutor {
    /// An executor transport with this configuration.
    pub fn new(config: ArchiveExecutorConfig) -> Self {
        ArchiveExecutor {
            config,
            captured: Mutex::new(BTreeMap::new()),
        }
    }
}

fn is_empty_dir(p: &Path) -> Result<bool, TransportError> {
    match fs::read_dir(p) {
        Ok(mut r) => Ok(r.next().is_none()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(TransportError::io("inspecting work directory", e)),
    }
}

impl ExecutorTransport for ArchiveExecutor {
    fn kind(&self) -> TransportKind {
        TransportKind::Archive
    }

    fn check_dependency(&self) -> Result<(), DependencyMissing> {
        Ok(())
    }

    fn setup(
        &self,
        req: SetupRequest<'_>,
        cancel: &CancelFlag,
    ) -> Result<SetupReport, TransportError> {
        let wd = req.work_dir;
        if fs::symlink_metadata(wd).is_ok_and(|m| !m.is_dir()) || !is_empty_dir(wd)? {
            return Err(TransportError::WorkDirNotEmpty);
        }
        fs::create_dir_all(wd).map_err(|e| TransportError::io("creating work directory", e))?;
        let spool = wd.parent().unwrap_or(wd);
        let res = (|| {
            let opened = open_verified(
                req.source,
                req.expected_checksum,
                spool,
                self.config.limits.max_total_bytes,
                cancel,
            )?;
            let ex = opened.extract(wd, &self.config.limits, cancel)?;
            let layout = detect_layout(&ex.top_level, req.resources);
            let hashes: BTreeMap<&str, &str> = ex
                .files
                .iter()
                .map(|f| (f.name.as_str(), f.sha256.as_str()))
                .collect();
            let w = walk(wd, &WalkOptions::default(), cancel)?;
            let mut m = Manifest::default();
            for f in &w.files {
                let h = match hashes.get(f.rel.as_str()) {
                    Some(h) => (*h).to_owned(),
                    None => crate::manifest::hash_file(&f.path)
                        .map_err(|e| TransportError::io(format!("hashing `{}`", f.rel), e))?,
                };
                m.files.insert(f.rel.clone(), record(f, h));
            }
            save_baseline(wd, &m)?;
            Ok(SetupReport {
                layout,
                file_count: ex.files.len() as u64,
                total_bytes: ex.files.iter().map(|f| f.size).sum(),
            })
        })();
        if res.is_err() {
            // Leave nothing half-extracted behind.
            let _ = fs::remove_dir_all(wd);
            let _ = fs::remove_file(baseline_path(wd));
        }
        res
    }

    fn capture(
        &self,
        work_dir: &Path,
        kind: SnapshotKind,
        delivery: &Delivery,
        cancel: &CancelFlag,
    ) -> Result<CapturedSnapshot, TransportError> {
        let opts = match kind {
            SnapshotKind::Full => full_walk_options(),
            SnapshotKind::Delta => WalkOptions::default(),
        };
        let snap = capture(work_dir, kind, delivery, &opts, cancel)?;
        if let ArchiveOutput::File(f) = &snap.archive {
            self.captured
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(work_dir.to_path_buf())
                .or_default()
                .push(f.path.clone());
        }
        Ok(snap)
    }

    fn release(&self, work_dir: &Path) -> Result<(), TransportError> {
        let files = self
            .captured
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(work_dir)
            .unwrap_or_default();
        for f in files {
            let _ = fs::remove_file(f);
        }
        let _ = fs::remove_file(baseline_path(work_dir));
        match fs::remove_dir_all(work_dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(TransportError::io("removing work directory", e)),
        }
    }
}
