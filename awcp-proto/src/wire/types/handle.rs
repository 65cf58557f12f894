//! START's transport handles (WIRE.md §3): which data plane a workspace travels on and what
//! the executor needs to reach it.

use std::collections::BTreeMap;

use crate::time::Timestamp;

use super::TransportKind;

/// START's transport handle, discriminated by `transport`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransportHandle {
    /// `archive`
    Archive(ArchiveHandle),
    /// `sshfs`
    Sshfs(SshfsHandle),
    /// `storage`
    Storage(StorageHandle),
    /// `git`
    Git(GitHandle),
}

impl TransportHandle {
    /// The transport this handle belongs to.
    pub fn kind(&self) -> TransportKind {
        match self {
            TransportHandle::Archive(_) => TransportKind::Archive,
            TransportHandle::Sshfs(_) => TransportKind::Sshfs,
            TransportHandle::Storage(_) => TransportKind::Storage,
            TransportHandle::Git(_) => TransportKind::Git,
        }
    }
}

/// How an archive's root is laid out, by the dialect of the executor it is for (WIRE.md §3):
/// what the delegator packs and the executor (or a snapshot's apply) expects. Both the engine
/// (which names it in `DelegatorOutput::PrepareTransport`) and the transports (which pack and
/// unpack by it) see it here, with the wire format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchiveLayout {
    /// \[S\] executors: the single resource's files at the root.
    Flat,
    /// \[R\] executors: one top-level directory per resource.
    PerResource,
}

impl ArchiveLayout {
    /// The layout an executor speaking `dialect` expects.
    pub fn for_dialect(dialect: super::Dialect) -> Self {
        match dialect {
            super::Dialect::Seed => ArchiveLayout::Flat,
            super::Dialect::Reference => ArchiveLayout::PerResource,
        }
    }
}

/// Where archive bytes are: inline base64 (\[S\]/\[R\]) or a URL to fetch (our extension,
/// seed 003 `archiveUrl`). At least one is present after decoding.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct ArchiveData {
    /// Standard base64 with padding, no line breaks.
    pub base64: Option<String>,
    /// A one-time URL the peer GETs the ZIP from.
    pub url: Option<String>,
    /// Never on the wire itself: the raw ZIP in a file on this machine, standing in for
    /// `base64` so that a large inline archive is never held in memory. A driver sending a
    /// START with it writes the file as `workspaceBase64` piece by piece
    /// ([`crate::wire::encode_message_split`]); a driver receiving a large START may decode
    /// `workspaceBase64` into a file and set this instead of `base64`. The plain encoders
    /// ignore it (they write `workspaceBase64` only from `base64`).
    pub local_file: Option<String>,
    /// Never on the wire either: the SHA-256 (lowercase hex) of [`ArchiveData::local_file`],
    /// computed by the driver as it wrote the file, so that checking it against the handle's
    /// `checksum` needs no second read of the file. `None` when not known (then whoever opens
    /// the file hashes it). Like `local_file`, not kept across a restart.
    pub local_file_sha256: Option<String>,
}

impl core::fmt::Debug for ArchiveData {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ArchiveData")
            .field("base64_len", &self.base64.as_ref().map(String::len))
            .field("url", &self.url)
            .field("local_file", &self.local_file)
            .field("local_file_sha256", &self.local_file_sha256)
            .finish()
    }
}

/// `archive` handle: `workspaceBase64` (or `archiveUrl`) and `checksum`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveHandle {
    /// The ZIP.
    pub data: ArchiveData,
    /// SHA-256 of the raw ZIP bytes, lowercase hex.
    pub checksum: String,
    /// Size of the raw ZIP in bytes (our extension `sizeBytes`).
    pub size_bytes: Option<u64>,
}

/// SSH endpoint of an `sshfs` handle.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SshEndpoint {
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Login user.
    pub user: String,
}

/// `sshfs` credential. `Debug` never prints the private key.
#[derive(Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SshCredential {
    /// OpenSSH private key text.
    pub private_key: String,
    /// One-line OpenSSH user certificate (\[L\] handles have none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate: Option<String>,
}

impl core::fmt::Debug for SshCredential {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SshCredential")
            .field("private_key", &"<redacted>")
            .field("certificate", &self.certificate.as_ref().map(|_| "<cert>"))
            .finish()
    }
}

/// `sshfs` handle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshfsHandle {
    /// SSH server on the delegator side.
    pub endpoint: SshEndpoint,
    /// Directory to mount on that host.
    pub export_locator: String,
    /// Key and certificate.
    pub credential: SshCredential,
    /// Extra `-o key=value` options (`options`, \[L\] `mountOptions`).
    pub options: BTreeMap<String, String>,
    /// The server's host public key in OpenSSH format, for pinning (our extension `hostKey`).
    pub host_key: Option<String>,
}

/// `storage` handle. `Debug` shows the URLs without their query (a presigned URL's
/// signature is a bearer capability) and the headers' names only.
#[derive(Clone, PartialEq, Eq)]
pub struct StorageHandle {
    /// The executor GETs the workspace ZIP here.
    pub download_url: String,
    /// The executor PUTs the result ZIP here.
    pub upload_url: String,
    /// SHA-256 hex of the ZIP at `download_url`.
    pub checksum: String,
    /// URL validity.
    pub expires_at: Timestamp,
    /// Extra request headers.
    pub headers: BTreeMap<String, String>,
}

impl core::fmt::Debug for StorageHandle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        fn bare(url: &str) -> &str {
            url.split_once('?').map_or(url, |(base, _)| base)
        }
        f.debug_struct("StorageHandle")
            .field("download_url", &bare(&self.download_url))
            .field("upload_url", &bare(&self.upload_url))
            .field("checksum", &self.checksum)
            .field("expires_at", &self.expires_at)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A `storage` delegation's result as the executor reports it (\[R\]): it PUTs the result
/// ZIP to the handle's `uploadUrl`, and the snapshot's `snapshotBase64` holds, instead of
/// base64, the JSON text `{"resultUrl": <uploadUrl>}` (WIRE.md §11.4). This is that text.
pub fn storage_result_text(result_url: &str) -> String {
    serde_json::json!({ "resultUrl": result_url }).to_string()
}

/// The `resultUrl` of a storage result text ([`storage_result_text`]); `None` when `text` is
/// not one (e.g. real base64: a reference executor without an upload URL sends its result
/// inline). Base64 never starts with `{`, so the two cannot be confused.
pub fn storage_result_url(text: &str) -> Option<String> {
    if !text.trim_start().starts_with('{') {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    v.get("resultUrl")?.as_str().map(str::to_owned)
}

/// `git` handle auth.
#[derive(Clone, PartialEq, Eq)]
pub enum GitAuth {
    /// `{type:"token", token}`
    Token(String),
    /// `{type:"ssh", privateKey?}`
    Ssh(Option<String>),
    /// `{type:"none"}`
    None,
}

impl core::fmt::Debug for GitAuth {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            GitAuth::Token(_) => f.write_str("Token(<redacted>)"),
            GitAuth::Ssh(k) => write!(f, "Ssh({})", if k.is_some() { "<key>" } else { "-" }),
            GitAuth::None => f.write_str("None"),
        }
    }
}

/// `git` handle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitHandle {
    /// Remote to clone and push to.
    pub repo_url: String,
    /// Branch to clone.
    pub base_branch: String,
    /// Commit the delegator pushed.
    pub base_commit: String,
    /// Credential.
    pub auth: Option<GitAuth>,
}

#[cfg(test)]
mod storage_tests {
    use super::*;

    #[test]
    fn a_storage_handles_debug_shows_no_signature_or_header_value() {
        let h = StorageHandle {
            download_url: "https://s3.example/b/k.zip?X-Amz-Signature=abc".into(),
            upload_url: "https://s3.example/b/r.zip?X-Amz-Signature=def".into(),
            checksum: "00".into(),
            expires_at: Timestamp::from_unix_millis(0),
            headers: [("authorization".to_owned(), "Bearer s3cr3t".to_owned())].into(),
        };
        let text = format!("{h:?}");
        assert!(text.contains("https://s3.example/b/k.zip"), "{text}");
        for secret in ["X-Amz-Signature", "abc", "def", "s3cr3t"] {
            assert!(!text.contains(secret), "{text}");
        }
    }
}
