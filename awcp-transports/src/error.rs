//! Transport errors and their mapping to wire error codes.

use awcp_proto::{ErrorCode, ErrorInfo};

/// Everything a transport operation can fail with.
///
/// Messages never contain the delegator's real filesystem paths: entries are named relative to
/// the workspace root.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The SHA-256 of the archive bytes differs from the announced checksum.
    #[error("archive checksum mismatch: expected {expected}, got {actual}")]
    ChecksumMismatch {
        /// The announced checksum.
        expected: String,
        /// The checksum of the bytes received.
        actual: String,
    },
    /// An archive entry was refused by the extractor (path traversal, link, device, limits…).
    #[error("archive entry `{entry}` refused: {reason}")]
    EntryRejected {
        /// The entry's name as it appears in the archive (lossy UTF-8).
        entry: String,
        /// Why.
        reason: String,
    },
    /// The archive as a whole is unusable (not a ZIP, too many entries, a zip bomb…).
    #[error("archive refused: {0}")]
    BadArchive(String),
    /// The base64 text of an inline archive is malformed.
    #[error("archive base64 is malformed: {0}")]
    BadBase64(String),
    /// A workspace path does not exist.
    #[error("workspace resource `{0}` does not exist")]
    WorkspaceNotFound(String),
    /// A workspace path is not a directory, or contains something that cannot be shipped.
    #[error("workspace resource is invalid: {0}")]
    WorkspaceInvalid(String),
    /// A protocol check refused the operation: admission (limits, secret-looking files) or a
    /// result over the limits. Carries the verdict of awcp-proto, hint included.
    #[error("{}", .0.message)]
    Refused(ErrorInfo),
    /// The executor's work directory exists and is not empty.
    #[error("work directory is not empty")]
    WorkDirNotEmpty,
    /// Files changed locally during the delegation (edited, added or removed) would be
    /// overwritten or deleted by the snapshot, also where it changes a file into a directory
    /// or back; nothing was written.
    #[error("the result conflicts with local changes made since the delegation started: {}", .paths.join(", "))]
    Conflict {
        /// Resource-qualified paths (`resource/path`) that changed locally.
        paths: Vec<String>,
    },
    /// A snapshot apply or setup target contains a symlink where a directory is needed.
    #[error("refusing to write through symlink at `{0}`")]
    SymlinkInPath(String),
    /// A live transport could not set up the workspace (mount refused, host key mismatch…).
    #[error("setup failed: {0}")]
    Setup(String),
    /// A `git` command of the git transport failed, on either side (the message names the
    /// command and ends with what git said, credentials and capability URLs left out).
    #[error("{0}")]
    Git(String),
    /// Releasing a live transport found the workspace's connection lost or could not detach
    /// it cleanly (what was written since may be missing); everything was removed anyway.
    #[error("release failed: {0}")]
    Release(String),
    /// The operation was cancelled through its [`crate::CancelFlag`].
    #[error("cancelled")]
    Cancelled,
    /// The operation is not supported by this transport or configuration.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A crash injected by a test hook (see [`crate::snapshot::CrashPoint`]).
    #[error("injected crash at {0}")]
    InjectedCrash(&'static str),
    /// An I/O error, with what was being done (relative names only).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl TransportError {
    /// An [`TransportError::Io`] with a context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        TransportError::Io {
            context: context.into(),
            source,
        }
    }

    /// An [`TransportError::EntryRejected`].
    pub fn rejected(entry: impl Into<String>, reason: impl Into<String>) -> Self {
        TransportError::EntryRejected {
            entry: entry.into(),
            reason: reason.into(),
        }
    }

    /// The wire error code this error is reported with.
    pub fn code(&self) -> ErrorCode {
        match self {
            TransportError::ChecksumMismatch { .. } => ErrorCode::ChecksumMismatch,
            TransportError::EntryRejected { .. }
            | TransportError::BadArchive(_)
            | TransportError::BadBase64(_)
            | TransportError::SymlinkInPath(_)
            | TransportError::Setup(_) => ErrorCode::SetupFailed,
            TransportError::WorkspaceNotFound(_) => ErrorCode::WorkspaceNotFound,
            TransportError::WorkspaceInvalid(_) => ErrorCode::WorkspaceInvalid,
            TransportError::Refused(info) => info.code.clone(),
            TransportError::WorkDirNotEmpty => ErrorCode::WorkdirDenied,
            TransportError::Cancelled => ErrorCode::Cancelled,
            TransportError::Conflict { .. }
            | TransportError::Unsupported(_)
            | TransportError::Release(_)
            | TransportError::InjectedCrash(_)
            | TransportError::Git(_)
            | TransportError::Io { .. } => ErrorCode::TransportError,
        }
    }

    /// The error as the protocol reports it: code, message, and a hint that names the cause
    /// (the code's generic hint where there is nothing more specific); a
    /// [`TransportError::Refused`] verdict as it is.
    pub fn to_error_info(&self) -> ErrorInfo {
        if let TransportError::Refused(info) = self {
            return info.clone();
        }
        let mut info = ErrorInfo::new(self.code(), self.to_string());
        if let Some(h) = self.hint() {
            info.hint = Some(h.to_owned());
        }
        info
    }

    /// The error of applying a result to the delegator's workspace: as
    /// [`Self::to_error_info`], with hints that speak of the result rather than of the
    /// executor's setup. Nothing was written (or a crash recovery finished it).
    pub fn apply_error_info(&self) -> ErrorInfo {
        let mut info = self.to_error_info();
        if matches!(
            self,
            TransportError::EntryRejected { .. }
                | TransportError::BadArchive(_)
                | TransportError::BadBase64(_)
        ) {
            info.hint = Some(
                "The executor's result archive was refused (see the message); nothing was \
                 written. Discard the snapshot, or delegate again."
                    .into(),
            );
        }
        info
    }

    fn hint(&self) -> Option<&'static str> {
        Some(match self {
            TransportError::Conflict { .. } => {
                "These paths changed locally since the delegation started (edited, added or \
                 removed) where the result writes, deletes or changes a file into a directory \
                 or back; nothing was written. Keep or move your local changes, then apply the \
                 snapshot again, or discard it."
            }
            TransportError::SymlinkInPath(_) => {
                "The local workspace has a symlink where the result writes; nothing is written \
                 through symlinks. Replace it by a real directory, then apply the snapshot \
                 again, or discard it."
            }
            TransportError::Git(_) => {
                "A git command failed (see the message): check the repository's URL, that \
                 this side may fetch and push there, and that git 2.31 or later runs."
            }
            TransportError::Io { .. } => {
                "A local file operation failed (see the message): check permissions and free \
                 disk space, then retry."
            }
            TransportError::WorkspaceInvalid(_) => {
                "The message says what cannot be lent: fix it, list the entry in .awcpignore \
                 (it is then not shipped), or lend another directory."
            }
            TransportError::WorkDirNotEmpty => {
                "The executor's work directory for this delegation already exists and is not \
                 empty: check the executor's work root."
            }
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        let e = TransportError::ChecksumMismatch {
            expected: "a".into(),
            actual: "b".into(),
        };
        assert_eq!(e.to_error_info().code, ErrorCode::ChecksumMismatch);
        let e = TransportError::rejected("../x", "escapes the target directory");
        let info = e.to_error_info();
        assert_eq!(info.code, ErrorCode::SetupFailed);
        assert!(info.message.contains("../x"));
        let verdict = ErrorInfo {
            code: ErrorCode::WorkspaceTooLarge,
            message: "too big".into(),
            hint: Some("raise it".into()),
        };
        let e = TransportError::Refused(verdict.clone());
        assert_eq!(e.code(), ErrorCode::WorkspaceTooLarge);
        assert_eq!(e.to_error_info(), verdict);
    }
}
