//! The walker's errors said for people: paths relative to the workspace root (never the
//! delegator's real paths), and the cause without the path repeated.
//!
//! `ignore`'s own messages name absolute paths, often twice (`/w/x: IO error for operation
//! on /w/x: Permission denied`). Replacing the root's text in them mangles the message when
//! the root is a prefix of something else (every `/` when the root is `/`), so the error is
//! rendered from its parts instead.

use std::path::Path;

/// `e`, met while walking `root`, as one line naming paths relative to `root`.
pub(crate) fn describe(e: &ignore::Error, root: &Path) -> String {
    match e {
        ignore::Error::Partial(errs) => errs
            .iter()
            .map(|e| describe(e, root))
            .collect::<Vec<_>>()
            .join("; "),
        ignore::Error::WithLineNumber { line, err } => {
            format!("line {line}: {}", describe(err, root))
        }
        ignore::Error::WithPath { path, err } => {
            format!("`{}`: {}", relative(root, path), describe(err, root))
        }
        ignore::Error::WithDepth { err, .. } => describe(err, root),
        ignore::Error::Loop { ancestor, child } => format!(
            "file system loop: `{}` points to its ancestor `{}`",
            relative(root, child),
            relative(root, ancestor)
        ),
        ignore::Error::Io(io) => io_cause(io, root),
        ignore::Error::Glob { .. }
        | ignore::Error::UnrecognizedFileType(_)
        | ignore::Error::InvalidDefinition => without_root(&e.to_string(), root),
    }
}

/// The cause of an I/O error without the path a wrapped error names (`Permission denied (os
/// error 13)`): the innermost error of its chain.
fn io_cause(io: &std::io::Error, root: &Path) -> String {
    if let Some(code) = io.raw_os_error() {
        return std::io::Error::from_raw_os_error(code).to_string();
    }
    let mut cause: &dyn std::error::Error = io;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    without_root(&cause.to_string(), root)
}

/// `path` relative to `root` (`/`-separated; `.` for the root itself), or only its file name
/// if it is not under `root`.
pub(crate) fn relative(root: &Path, path: &Path) -> String {
    match path.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
        Ok(rel) => rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/"),
        Err(_) => crate::walk::display_name(path),
    }
}

/// `msg` with every path under `root` made relative (`root` itself: `<workspace>`), only where
/// `root` is a whole path (not a prefix of a longer name). A root of `/` is left as it is:
/// it hides nothing, and every `/` would match.
pub(crate) fn without_root(msg: &str, root: &Path) -> String {
    let r = root.to_string_lossy();
    let r = r.trim_end_matches('/');
    if r.is_empty() {
        return msg.to_owned();
    }
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(at) = rest.find(r) {
        out.push_str(&rest[..at]);
        let after = &rest[at + r.len()..];
        match after.chars().next() {
            Some('/') => rest = &after[1..],
            Some(c) if c.is_alphanumeric() || "._-~+@".contains(c) => {
                out.push_str(r);
                rest = after;
            }
            Some(_) | None => {
                out.push_str("<workspace>");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn with_path(path: &str, err: ignore::Error) -> ignore::Error {
        ignore::Error::WithPath {
            path: PathBuf::from(path),
            err: Box::new(err),
        }
    }

    /// An I/O error the way the walker wraps one (its text names the path again).
    fn wrapped_io(path: &str) -> ignore::Error {
        #[derive(Debug)]
        struct Walkdir(std::io::Error, String);
        impl std::fmt::Display for Walkdir {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "IO error for operation on {}: {}", self.1, self.0)
            }
        }
        impl std::error::Error for Walkdir {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let os = std::io::Error::from_raw_os_error(13);
        let inner = std::io::Error::new(os.kind(), Walkdir(os, path.into()));
        ignore::Error::WithDepth {
            depth: 2,
            err: Box::new(ignore::Error::Io(inner)),
        }
    }

    /// Issue 47, item 9: a workspace of `/` made every `/` of the message `<workspace>`.
    #[test]
    fn a_root_of_slash_names_paths_plainly() {
        let e = with_path("/etc/polkit-1/rules.d", wrapped_io("/etc/polkit-1/rules.d"));
        let m = describe(&e, Path::new("/"));
        assert_eq!(
            m, "`etc/polkit-1/rules.d`: Permission denied (os error 13)",
            "{m}"
        );
    }

    #[test]
    fn paths_are_relative_to_the_root_and_never_real() {
        let root = Path::new("/home/u/proj");
        let e = with_path("/home/u/proj/sub/dir", wrapped_io("/home/u/proj/sub/dir"));
        assert_eq!(
            describe(&e, root),
            "`sub/dir`: Permission denied (os error 13)"
        );
        let e = ignore::Error::Loop {
            ancestor: PathBuf::from("/home/u/proj/a"),
            child: PathBuf::from("/home/u/proj/a/b/link"),
        };
        assert_eq!(
            describe(&e, root),
            "file system loop: `a/b/link` points to its ancestor `a`"
        );
        // Outside the root: the file name only.
        assert_eq!(relative(root, Path::new("/etc/shadow")), "shadow");
        assert_eq!(relative(root, root), ".");
    }

    #[test]
    fn the_root_is_removed_only_where_it_is_a_whole_path() {
        let root = Path::new("/home/u/proj");
        assert_eq!(
            without_root(
                "at /home/u/proj/a.txt and /home/u/proj2/b and /home/u/proj: x",
                root
            ),
            "at a.txt and /home/u/proj2/b and <workspace>: x"
        );
        assert_eq!(
            without_root("/etc/x: denied", Path::new("/")),
            "/etc/x: denied"
        );
    }
}
