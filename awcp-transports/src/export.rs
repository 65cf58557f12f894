//! Export views: the directory the delegator's transport reads a delegation's resources from,
//! `<base>/<delegation>/<resource>`. The view's location and the real source paths stay on this
//! machine: archives name entries relative to the resource, never by real path.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cancel::CancelFlag;
use crate::error::TransportError;
use crate::scan::ResourceSpec;
use crate::walk::{walk, WalkOptions};

/// How a view exposes a resource.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExportViewKind {
    /// A symlink to the source directory (cheap; reads see live files).
    #[default]
    Symlink,
    /// A copy of exactly the files the walker ships (a frozen point-in-time view).
    Copy,
    /// `git worktree add --detach` of the source repository's `HEAD` (committed content only;
    /// needs `git` and a source that is a git work tree).
    GitWorktree,
}

/// A created export view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportView {
    /// `<base>/<delegation>`; private to this machine.
    pub root: PathBuf,
    /// The kind.
    pub kind: ExportViewKind,
    /// `(resource name, source path)` for worktree removal.
    sources: Vec<(String, PathBuf)>,
}

impl ExportView {
    /// Path of a resource inside the view.
    pub fn resource_path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Creates `<base>/<delegation_id>/<name>` for each resource.
    pub fn create(
        base: &Path,
        delegation_id: &str,
        resources: &[ResourceSpec],
        kind: ExportViewKind,
        walk_opts: &WalkOptions,
        cancel: &CancelFlag,
    ) -> Result<ExportView, TransportError> {
        if crate::id_is_unsafe(delegation_id) {
            return Err(TransportError::Unsupported("invalid delegation id".into()));
        }
        let root = base.join(delegation_id);
        if root.exists() {
            fs::remove_dir_all(&root).map_err(|e| TransportError::io("clearing export view", e))?;
        }
        fs::create_dir_all(&root).map_err(|e| TransportError::io("creating export view", e))?;
        let mut view = ExportView {
            root: root.clone(),
            kind,
            sources: Vec::new(),
        };
        let res = (|| {
            for r in resources {
                let src = fs::canonicalize(&r.source_path)
                    .map_err(|_| TransportError::WorkspaceNotFound(r.name.to_string()))?;
                if !src.is_dir() {
                    return Err(TransportError::WorkspaceInvalid(format!(
                        "resource `{}` is not a directory",
                        r.name
                    )));
                }
                let dst = root.join(r.name.as_str());
                match kind {
                    ExportViewKind::Symlink => std::os::unix::fs::symlink(&src, &dst)
                        .map_err(|e| TransportError::io("creating export symlink", e))?,
                    ExportViewKind::Copy => {
                        let w = walk(&src, walk_opts, cancel)?;
                        for f in &w.files {
                            cancel.check()?;
                            let to = dst.join(&f.rel);
                            if let Some(p) = to.parent() {
                                fs::create_dir_all(p)
                                    .map_err(|e| TransportError::io("copying export view", e))?;
                            }
                            fs::copy(&f.path, &to).map_err(|e| {
                                TransportError::io(format!("copying `{}`", f.rel), e)
                            })?;
                        }
                        fs::create_dir_all(&dst)
                            .map_err(|e| TransportError::io("copying export view", e))?;
                    }
                    ExportViewKind::GitWorktree => {
                        let out = Command::new("git")
                            .arg("-C")
                            .arg(&src)
                            .args(["worktree", "add", "--detach", "--"])
                            .arg(&dst)
                            .arg("HEAD")
                            .output()
                            .map_err(|e| TransportError::io("running git", e))?;
                        if !out.status.success() {
                            return Err(TransportError::WorkspaceInvalid(format!(
                                "resource `{}`: git worktree add failed: {}",
                                r.name,
                                String::from_utf8_lossy(&out.stderr).trim()
                            )));
                        }
                    }
                }
                view.sources.push((r.name.to_string(), src));
            }
            Ok(())
        })();
        if let Err(e) = res {
            view.remove();
            return Err(e);
        }
        Ok(view)
    }

    /// Removes the view (never the sources). Idempotent.
    pub fn remove(&self) {
        if self.kind == ExportViewKind::GitWorktree {
            for (name, src) in &self.sources {
                let _ = Command::new("git")
                    .arg("-C")
                    .arg(src)
                    .args(["worktree", "remove", "--force", "--"])
                    .arg(self.root.join(name))
                    .output();
            }
        }
        // remove_dir_all does not follow symlinks: symlink views remove only the links.
        let _ = fs::remove_dir_all(&self.root);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awcp_proto::{AccessMode, ResourceName};

    fn spec(p: &Path) -> Vec<ResourceSpec> {
        vec![ResourceSpec {
            name: ResourceName::new("ws").unwrap(),
            source_path: p.to_path_buf(),
            mode: AccessMode::Rw,
        }]
    }

    #[test]
    fn symlink_and_copy_views() {
        let src = tempfile::tempdir().unwrap();
        fs::write(src.path().join("a.txt"), b"a").unwrap();
        fs::create_dir(src.path().join(".git")).unwrap();
        fs::write(src.path().join(".git/HEAD"), b"x").unwrap();
        let base = tempfile::tempdir().unwrap();
        let c = CancelFlag::new();
        for kind in [ExportViewKind::Symlink, ExportViewKind::Copy] {
            let v = ExportView::create(
                base.path(),
                "d1",
                &spec(src.path()),
                kind,
                &WalkOptions::default(),
                &c,
            )
            .unwrap();
            assert_eq!(fs::read(v.resource_path("ws").join("a.txt")).unwrap(), b"a");
            assert_eq!(
                v.resource_path("ws").join(".git/HEAD").exists(),
                kind == ExportViewKind::Symlink
            );
            v.remove();
            v.remove();
            assert!(!v.root.exists());
            assert!(src.path().join("a.txt").exists());
        }
    }

    #[test]
    fn git_worktree_view() {
        if Command::new("git").arg("--version").output().is_err() {
            return;
        }
        let src = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            Command::new("git")
                .arg("-C")
                .arg(src.path())
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .output()
                .unwrap()
        };
        git(&["init", "-q"]);
        fs::write(src.path().join("f.txt"), b"committed").unwrap();
        git(&["add", "."]);
        assert!(git(&["commit", "-qm", "x"]).status.success());
        let base = tempfile::tempdir().unwrap();
        let v = ExportView::create(
            base.path(),
            "d2",
            &spec(src.path()),
            ExportViewKind::GitWorktree,
            &WalkOptions::default(),
            &CancelFlag::new(),
        )
        .unwrap();
        assert_eq!(
            fs::read(v.resource_path("ws").join("f.txt")).unwrap(),
            b"committed"
        );
        v.remove();
        assert!(!v.root.exists());
    }
}
