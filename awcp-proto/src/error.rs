//! Wire error codes (WIRE.md §7): the union of the seed spec and the reference.

use core::fmt;

/// An AWCP error code as it travels in ERROR messages and SSE `error` events.
///
/// Codes this crate does not know are kept verbatim in [`ErrorCode::Other`] so they survive a
/// round trip.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The executor declined the invitation (policy, concurrency, TTL, access mode).
    Declined,
    /// The executor lacks a dependency of the transport (e.g. `sshfs`).
    DepMissing,
    /// Delegator-local admission: the workspace exceeds a size limit.
    WorkspaceTooLarge,
    /// Delegator-local: the workspace path does not exist.
    WorkspaceNotFound,
    /// Delegator-local: the workspace path is not a directory.
    WorkspaceInvalid,
    /// Delegator-local admission: secret-looking files were found (\[R\]).
    SensitiveFiles,
    /// The executor's work directory policy refused the allocation (\[S\]).
    WorkdirDenied,
    /// The lease ran out between ACCEPT and START.
    StartExpired,
    /// The lease ran out while the task was running.
    Expired,
    /// Credentials were missing or rejected.
    AuthFailed,
    /// Mount or extraction failed on the executor.
    SetupFailed,
    /// The task failed on the executor.
    TaskFailed,
    /// The delegation was cancelled.
    Cancelled,
    /// A transport download/upload/provider error (\[R\] storage).
    TransportError,
    /// An archive's SHA-256 did not match its checksum (\[R\]).
    ChecksumMismatch,
    /// The executor does not know the delegation (\[R\], ad hoc).
    NotFound,
    /// The delegator's event stream broke (\[R\], delegator-local).
    SseFailed,
    /// An operation timed out (\[C\] only; never produced by the reference).
    Timeout,
    /// Delegator-local (this implementation; never sent to an executor in an ERROR it can
    /// read): the executor could not be reached at all (connection refused, unknown host, no
    /// route, TLS refused).
    Unreachable,
    /// Delegator-local (this implementation, like [`ErrorCode::Unreachable`]): the peer
    /// answered, but not in AWCP (a web page, a body that is not JSON or not an AWCP
    /// message): most likely the URL is not an AWCP executor's endpoint.
    ProtocolError,
    /// A code this crate does not know, kept verbatim.
    Other(String),
}

impl ErrorCode {
    /// Every code this crate knows, in table order.
    pub const KNOWN: [ErrorCode; 20] = [
        ErrorCode::Declined,
        ErrorCode::DepMissing,
        ErrorCode::WorkspaceTooLarge,
        ErrorCode::WorkspaceNotFound,
        ErrorCode::WorkspaceInvalid,
        ErrorCode::SensitiveFiles,
        ErrorCode::WorkdirDenied,
        ErrorCode::StartExpired,
        ErrorCode::Expired,
        ErrorCode::AuthFailed,
        ErrorCode::SetupFailed,
        ErrorCode::TaskFailed,
        ErrorCode::Cancelled,
        ErrorCode::TransportError,
        ErrorCode::ChecksumMismatch,
        ErrorCode::NotFound,
        ErrorCode::SseFailed,
        ErrorCode::Timeout,
        ErrorCode::Unreachable,
        ErrorCode::ProtocolError,
    ];

    /// The wire string, e.g. `"WORKSPACE_TOO_LARGE"`.
    pub fn as_str(&self) -> &str {
        match self {
            ErrorCode::Declined => "DECLINED",
            ErrorCode::DepMissing => "DEP_MISSING",
            ErrorCode::WorkspaceTooLarge => "WORKSPACE_TOO_LARGE",
            ErrorCode::WorkspaceNotFound => "WORKSPACE_NOT_FOUND",
            ErrorCode::WorkspaceInvalid => "WORKSPACE_INVALID",
            ErrorCode::SensitiveFiles => "SENSITIVE_FILES",
            ErrorCode::WorkdirDenied => "WORKDIR_DENIED",
            ErrorCode::StartExpired => "START_EXPIRED",
            ErrorCode::Expired => "EXPIRED",
            ErrorCode::AuthFailed => "AUTH_FAILED",
            ErrorCode::SetupFailed => "SETUP_FAILED",
            ErrorCode::TaskFailed => "TASK_FAILED",
            ErrorCode::Cancelled => "CANCELLED",
            ErrorCode::TransportError => "TRANSPORT_ERROR",
            ErrorCode::ChecksumMismatch => "CHECKSUM_MISMATCH",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::SseFailed => "SSE_FAILED",
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::Unreachable => "UNREACHABLE",
            ErrorCode::ProtocolError => "PROTOCOL_ERROR",
            ErrorCode::Other(s) => s,
        }
    }

    /// Parses a wire string; unknown codes become [`ErrorCode::Other`].
    pub fn parse(s: &str) -> ErrorCode {
        ErrorCode::KNOWN
            .iter()
            .find(|c| c.as_str() == s)
            .cloned()
            .unwrap_or_else(|| ErrorCode::Other(s.to_owned()))
    }

    /// A short, user-facing suggestion for what to do about this error.
    pub fn hint(&self) -> &'static str {
        match self {
            ErrorCode::Declined => {
                "The executor refused the delegation: try later, a shorter ttl, another access mode or another executor."
            }
            ErrorCode::DepMissing => {
                "The executor lacks a tool its transport needs: install it there (e.g. `apt-get install sshfs`) or choose another transport."
            }
            ErrorCode::WorkspaceTooLarge => {
                "Select a smaller subdirectory, exclude large binaries and build output (node_modules, target/) via .awcpignore, or raise the admission limits."
            }
            ErrorCode::WorkspaceNotFound => "Check the workspace path: it does not exist.",
            ErrorCode::WorkspaceInvalid => "The workspace path must be a directory.",
            ErrorCode::SensitiveFiles => {
                "Remove or ignore the secret-looking files (.env, keys, credentials) or disable the sensitive-file check deliberately."
            }
            ErrorCode::WorkdirDenied => {
                "The executor's work directory is not usable (outside its root or not empty): check the executor's work root."
            }
            ErrorCode::StartExpired => {
                "The lease ran out before START arrived: delegate again, with a longer ttl if preparing the workspace is slow."
            }
            ErrorCode::Expired => {
                "The lease ran out while the task was running: delegate again with a longer ttl or a smaller task."
            }
            ErrorCode::AuthFailed => {
                "Supply the credential the executor expects (bearer token or API key)."
            }
            ErrorCode::SetupFailed => {
                "The executor could not set up the workspace (mount or extraction failed): see the message, check the transport."
            }
            ErrorCode::TaskFailed => {
                "The task failed on the executor: read the message and the executor's logs, then retry or rephrase the task."
            }
            ErrorCode::Cancelled => "The delegation was cancelled; delegate again if the work is still needed.",
            ErrorCode::TransportError => {
                "Moving the workspace failed: check connectivity to the storage or file server and retry."
            }
            ErrorCode::ChecksumMismatch => {
                "The workspace archive was corrupted in transit: retry the delegation."
            }
            ErrorCode::NotFound => {
                "The executor does not know this delegation (never seen, acknowledged or purged)."
            }
            ErrorCode::SseFailed => {
                "The event stream to the executor broke: check the executor is reachable; the result can be fetched later."
            }
            ErrorCode::Timeout => {
                "The executor did not answer in time: retry; if it keeps happening, check the executor's load and the network between you."
            }
            ErrorCode::Unreachable => {
                "The executor could not be reached: check the --peer URL (awcp-executor prints it when it starts, ending in /awcp) and that the executor is running."
            }
            ErrorCode::ProtocolError => {
                "The peer answered, but not in AWCP: check that --peer is an AWCP executor's URL (awcp-executor prints it when it starts, ending in /awcp), not a web page or another service."
            }
            ErrorCode::Other(_) => "See the message for details.",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for ErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(ErrorCode::parse(&String::deserialize(d)?))
    }
}

/// An error as the protocol reports it: a code, a message and an optional hint.
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub struct ErrorInfo {
    /// The error code.
    pub code: ErrorCode,
    /// Human-readable description.
    pub message: String,
    /// Suggested remedy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl ErrorInfo {
    /// An error with the code's default hint.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        let hint = Some(code.hint().to_owned());
        ErrorInfo {
            code,
            message: message.into(),
            hint,
        }
    }

    /// An error without a hint.
    pub fn bare(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorInfo {
            code,
            message: message.into(),
            hint: None,
        }
    }
}

impl fmt::Display for ErrorInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)?;
        if let Some(h) = &self.hint {
            write!(f, " (hint: {h})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ErrorInfo {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_codes_round_trip_through_their_strings() {
        for c in ErrorCode::KNOWN {
            assert_eq!(ErrorCode::parse(c.as_str()), c);
            assert!(!c.hint().is_empty());
        }
    }

    #[test]
    fn unknown_codes_are_kept() {
        assert_eq!(
            ErrorCode::parse("QUOTA_EXCEEDED"),
            ErrorCode::Other("QUOTA_EXCEEDED".into())
        );
        assert_eq!(
            ErrorCode::parse("QUOTA_EXCEEDED").as_str(),
            "QUOTA_EXCEEDED"
        );
    }
}
