//! What went wrong in the driver's work for a delegation, as facts the driver found (a scan,
//! a transport preparation, a snapshot store); the protocol error each becomes is the
//! engine's choice, made here.

use super::*;

/// What went wrong scanning a delegation's resources for admission: a fact the driver found.
/// The protocol error is the engine's choice ([`ScanFailure::to_error_info`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScanFailure {
    /// A resource's source path does not exist (the path, for the message).
    NotFound(String),
    /// A resource's source path is not a directory.
    NotADirectory(String),
    /// The scan itself failed and said with which protocol error.
    Scan(ErrorInfo),
}

impl ScanFailure {
    /// `WORKSPACE_NOT_FOUND`, `WORKSPACE_INVALID`, or the scan's own code.
    pub fn to_error_info(&self) -> ErrorInfo {
        match self {
            ScanFailure::NotFound(path) => ErrorInfo::new(
                ErrorCode::WorkspaceNotFound,
                format!("workspace {path} does not exist"),
            ),
            ScanFailure::NotADirectory(path) => ErrorInfo::new(
                ErrorCode::WorkspaceInvalid,
                format!("workspace {path} is not a directory"),
            ),
            ScanFailure::Scan(e) => e.clone(),
        }
    }
}

/// What went wrong preparing a delegation's transport: a fact the driver found. The protocol
/// error is the engine's choice ([`PrepareFailure::to_error_info`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrepareFailure {
    /// The delegation asks for a transport this delegator has not configured.
    NotConfigured(TransportKind),
    /// A local step around the transport failed: the archive directory, persisting the apply
    /// baseline, a token for the archive URL (what failed, for the message).
    Local(String),
    /// The transport itself failed and said with which protocol error.
    Transport(ErrorInfo),
}

impl PrepareFailure {
    /// `TRANSPORT_ERROR` for what failed here, the transport's own code otherwise.
    pub fn to_error_info(&self) -> ErrorInfo {
        match self {
            PrepareFailure::NotConfigured(kind) => {
                let mut e = ErrorInfo::new(
                    ErrorCode::TransportError,
                    format!("transport {} is not configured", kind.as_str()),
                );
                e.hint = match kind {
                    TransportKind::Git => Some(
                        "Give the delegator a git remote (--git-remote), or let it serve the \
                         repositories itself (--serve-archives)."
                            .into(),
                    ),
                    TransportKind::Storage => Some(
                        "Name a bucket (--s3-bucket or AWCP_S3_BUCKET), or let the delegator \
                         serve the objects itself (--serve-archives)."
                            .into(),
                    ),
                    TransportKind::Sshfs => Some(
                        "Start the delegator with --sshfs-config (see `awcp sshfs setup`).".into(),
                    ),
                    TransportKind::Archive | TransportKind::Other(_) => None,
                };
                e
            }
            PrepareFailure::Local(why) => ErrorInfo::new(ErrorCode::TransportError, why.clone()),
            PrepareFailure::Transport(e) => e.clone(),
        }
    }
}

/// What went wrong storing a snapshot locally: a fact the driver found. The protocol error is
/// the engine's choice ([`StoreFailure::to_error_info`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreFailure {
    /// Writing to the snapshot store failed (directory, write, fsync, rename).
    Local(String),
    /// Downloading the snapshot from the URL the executor named failed.
    Fetch(String),
    /// The snapshot event carries neither inline data nor a URL.
    NoData,
    /// The inline data is unusable and said with which protocol error (bad base64, …).
    Archive(ErrorInfo),
}

impl StoreFailure {
    /// `TRANSPORT_ERROR` with what to check (the result is kept by the executor meanwhile),
    /// or the archive's own code.
    pub fn to_error_info(&self) -> ErrorInfo {
        let message = match self {
            StoreFailure::Local(why) => why.clone(),
            StoreFailure::Fetch(why) => format!("fetching the snapshot: {why}"),
            StoreFailure::NoData => "snapshot carries no data".to_owned(),
            StoreFailure::Archive(e) => return e.clone(),
        };
        ErrorInfo {
            code: ErrorCode::TransportError,
            message,
            hint: Some(
                "The result could not be stored locally, so it was not applied and the \
                 executor was not acknowledged (it keeps the result until its retention ends): \
                 check the delegator's state directory (disk space, permissions) and its \
                 connection to the executor."
                    .into(),
            ),
        }
    }
}

#[cfg(test)]
mod failure_tests {
    use super::*;

    #[test]
    fn scan_failures_are_the_workspaces_and_scan_codes_are_kept() {
        let code = |f: ScanFailure| f.to_error_info().code;
        assert_eq!(
            code(ScanFailure::NotFound("/x".into())),
            ErrorCode::WorkspaceNotFound
        );
        assert_eq!(
            code(ScanFailure::NotADirectory("/x".into())),
            ErrorCode::WorkspaceInvalid
        );
        let own = ErrorInfo::new(ErrorCode::SensitiveFiles, "k");
        assert_eq!(ScanFailure::Scan(own.clone()).to_error_info(), own);
        assert!(ScanFailure::NotFound("/p/q".into())
            .to_error_info()
            .message
            .contains("/p/q"));
    }

    #[test]
    fn store_failures_are_transport_errors_that_say_what_to_check() {
        for f in [
            StoreFailure::Local("disk full".into()),
            StoreFailure::Fetch("503".into()),
            StoreFailure::NoData,
        ] {
            let e = f.to_error_info();
            assert_eq!(e.code, ErrorCode::TransportError);
            assert!(e.hint.is_some_and(|h| h.contains("state directory")));
        }
        let own = ErrorInfo::new(ErrorCode::ChecksumMismatch, "bad base64");
        assert_eq!(StoreFailure::Archive(own.clone()).to_error_info(), own);
    }

    #[test]
    fn local_prepare_failures_are_transport_errors_and_transport_codes_are_kept() {
        let code = |f: PrepareFailure| f.to_error_info().code;
        assert_eq!(
            code(PrepareFailure::NotConfigured(TransportKind::Sshfs)),
            ErrorCode::TransportError
        );
        assert_eq!(
            code(PrepareFailure::Local("archive dir: EACCES".into())),
            ErrorCode::TransportError
        );
        let own = ErrorInfo::new(ErrorCode::SensitiveFiles, "k");
        assert_eq!(PrepareFailure::Transport(own.clone()).to_error_info(), own);
    }
}
