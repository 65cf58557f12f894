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
    /// `{type:"ssh", privateKey?, hostKey?}`: an SSH key for the remote.
    Ssh {
        /// The private key in OpenSSH format.
        private_key: Option<String>,
        /// The server's host public key in OpenSSH format (`<type> <base64>`), to pin it
        /// (our extension `hostKey`, as on the `sshfs` handle; a peer that does not know it
        /// ignores it). Without it, the executor checks the host against its own
        /// `known_hosts`.
        host_key: Option<String>,
    },
    /// `{type:"none"}`
    None,
}

impl core::fmt::Debug for GitAuth {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            GitAuth::Token(_) => f.write_str("Token(<redacted>)"),
            GitAuth::Ssh {
                private_key,
                host_key,
            } => f
                .debug_struct("Ssh")
                .field("private_key", &private_key.as_ref().map(|_| "<redacted>"))
                .field("host_key", host_key)
                .finish(),
            GitAuth::None => f.write_str("None"),
        }
    }
}

/// `git` handle. `Debug` shows the repository URL's scheme and host only (a delegator's
/// served repository URL carries a capability token in its path).
#[derive(Clone, PartialEq, Eq)]
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

/// A repository URL as messages and logs may show it: its scheme and host, the rest (a
/// capability token in the path, a user name) left out.
pub fn repo_url_for_messages(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let host = rest.split('/').next().unwrap_or("");
            format!("{scheme}://{}/…", host.rsplit('@').next().unwrap_or(host))
        }
        None => "(a repository)".to_owned(),
    }
}

impl core::fmt::Debug for GitHandle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GitHandle")
            .field("repo_url", &repo_url_for_messages(&self.repo_url))
            .field("base_branch", &self.base_branch)
            .field("base_commit", &self.base_commit)
            .field("auth", &self.auth)
            .finish()
    }
}

/// A `git` delegation's result as the executor reports it (WIRE.md §11.3): it pushes its
/// work to `branch`, and the snapshot's `snapshotBase64` holds, instead of base64, the JSON
/// text `{"branch", "commitHash", "baseCommit", "changedFiles"}` ([`git_result_text`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GitResult {
    /// The branch the executor pushed.
    pub branch: String,
    /// Its tip.
    pub commit_hash: String,
    /// The commit the delegation started from.
    pub base_commit: String,
    /// Paths that differ between the two (informational: the delegator reads the commits).
    #[serde(default)]
    pub changed_files: Vec<String>,
}

impl GitResult {
    /// Whether the fields can be handed to git as they are: the branch a branch name
    /// ([`is_branch_name`]), the commits full object ids ([`is_object_id`]).
    pub fn is_well_formed(&self) -> bool {
        is_branch_name(&self.branch)
            && is_object_id(&self.commit_hash)
            && is_object_id(&self.base_commit)
    }
}

/// Whether `s` is a full git object id (40 or 64 lowercase hex digits).
pub fn is_object_id(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `name` is a branch name that may be handed to git: what `git check-ref-format
/// --branch` accepts (checked without git), never starting with `-` (it would read as an
/// option), at most 200 bytes.
pub fn is_branch_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && !name.starts_with(['-', '/', '.'])
        && !name.ends_with(['/', '.'])
        && !name.ends_with(".lock")
        && !name.contains("..")
        && !name.contains("//")
        && !name.contains("@{")
        && !name.contains("/.")
        && name != "@"
        && name
            .bytes()
            .all(|b| b > 0x20 && b != 0x7f && !b" ~^:?*[\\".contains(&b))
}

/// The snapshot text of a git result.
pub fn git_result_text(r: &GitResult) -> String {
    serde_json::json!({
        "branch": r.branch,
        "commitHash": r.commit_hash,
        "baseCommit": r.base_commit,
        "changedFiles": r.changed_files,
    })
    .to_string()
}

/// The git result a snapshot text names (`None`: not one; e.g. real base64, which never
/// starts with `{`).
pub fn git_result(text: &str) -> Option<GitResult> {
    if !text.trim_start().starts_with('{') {
        return None;
    }
    serde_json::from_str(text).ok()
}

#[cfg(test)]
mod storage_tests {
    use super::*;

    #[test]
    fn a_git_handles_debug_shows_no_capability_token() {
        let h = GitHandle {
            repo_url: "http://127.0.0.1:9/git/SECRET/repo.git".into(),
            base_branch: "awcp/x-base".into(),
            base_commit: "b".repeat(40),
            auth: Some(GitAuth::Token("TOKEN".into())),
        };
        let d = format!("{h:?}");
        assert!(!d.contains("SECRET") && !d.contains("TOKEN"), "{d}");
        assert!(d.contains("127.0.0.1:9"), "{d}");
    }

    #[test]
    fn an_ssh_auth_reads_the_reference_s_form_and_our_host_key() {
        let text = r#"{"transport":"git","repoUrl":"ssh://git@h:2222/r.git","baseBranch":"b",
            "baseCommit":"c","auth":{"type":"ssh","privateKey":"KEY","hostKey":"ssh-ed25519 AAAA"}}"#;
        let TransportHandle::Git(h) = serde_json::from_str::<TransportHandle>(text).unwrap() else {
            panic!("not git")
        };
        let want = GitAuth::Ssh {
            private_key: Some("KEY".into()),
            host_key: Some("ssh-ed25519 AAAA".into()),
        };
        assert_eq!(h.auth.as_ref(), Some(&want));
        assert!(!format!("{h:?}").contains("KEY"));
        let back = serde_json::to_value(TransportHandle::Git(h)).unwrap();
        assert_eq!(back["auth"]["hostKey"], "ssh-ed25519 AAAA");
        // The reference's form: a key and no host key.
        let reference = text.replace(r#","hostKey":"ssh-ed25519 AAAA""#, "");
        let TransportHandle::Git(h) = serde_json::from_str::<TransportHandle>(&reference).unwrap()
        else {
            panic!("not git")
        };
        assert!(matches!(h.auth, Some(GitAuth::Ssh { host_key: None, .. })));
    }

    #[test]
    fn a_git_result_text_reads_back_and_only_well_formed_ones_are_usable() {
        let r = GitResult {
            branch: "awcp/dlg_1".into(),
            commit_hash: "c".repeat(40),
            base_commit: "b".repeat(40),
            changed_files: vec!["a.txt".into()],
        };
        let text = git_result_text(&r);
        assert!(text.contains("\"commitHash\""), "{text}");
        assert_eq!(git_result(&text), Some(r.clone()));
        assert!(r.is_well_formed());
        // The reference's text without changedFiles still reads.
        let bare = format!(
            r#"{{"branch":"awcp/x","commitHash":"{}","baseCommit":"{}"}}"#,
            "a".repeat(40),
            "b".repeat(40)
        );
        assert!(git_result(&bare).is_some());
        assert_eq!(git_result("UEsDBA=="), None);
        for bad in [
            GitResult {
                branch: "--upload-pack=sh".into(),
                ..r.clone()
            },
            GitResult {
                commit_hash: "HEAD".into(),
                ..r.clone()
            },
            GitResult {
                base_commit: "B".repeat(40),
                ..r.clone()
            },
        ] {
            assert!(!bad.is_well_formed(), "{bad:?}");
        }
    }

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
