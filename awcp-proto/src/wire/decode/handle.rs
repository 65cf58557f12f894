//! START's transport handle (WIRE.md §3), in every dialect's spelling.

use serde_json::Value;

use super::fields::{truncate, FieldPath, Obj};
use super::DecodeError;
use crate::wire::types::*;

/// Decodes a transport handle object; `path` prefixes field names in errors.
pub fn decode_handle(value: &Value, path: &str) -> Result<TransportHandle, DecodeError> {
    decode_handle_json(value, FieldPath::root(path))
}

/// [`decode_handle`] with its path as segments.
pub(super) fn decode_handle_json(
    value: &Value,
    path: FieldPath,
) -> Result<TransportHandle, DecodeError> {
    let obj = Obj::new(value, path)?;
    let transport = obj.req_str("transport")?;
    match transport {
        "archive" => Ok(TransportHandle::Archive(ArchiveHandle {
            data: obj.archive_data("workspaceBase64", "archiveUrl")?,
            checksum: obj.req_str("checksum")?.to_owned(),
            size_bytes: obj.opt_u64("sizeBytes")?,
        })),
        "sshfs" => {
            let ep = obj.req_obj("endpoint")?;
            let port = ep.req_u64("port")?;
            let port = u16::try_from(port)
                .map_err(|_| ep.invalid("port", format!("port {port} is out of range")))?;
            let endpoint = SshEndpoint {
                host: ep.req_str("host")?.to_owned(),
                port,
                user: ep.req_str("user")?.to_owned(),
            };
            let credential = match obj.get("credential") {
                None => return Err(obj.missing("credential")),
                Some(v) if v.as_str().is_some() => SshCredential {
                    private_key: v.as_str().unwrap_or_default().to_owned(),
                    certificate: None,
                },
                Some(v) if v.as_object().is_some() => {
                    let c = obj.req_obj("credential")?;
                    SshCredential {
                        private_key: c.req_str("privateKey")?.to_owned(),
                        certificate: c.opt_string("certificate")?,
                    }
                }
                Some(_) => return Err(obj.wrong_type("credential", "object")),
            };
            let options = if obj.get("options").is_some() {
                obj.str_map("options")?
            } else {
                obj.str_map("mountOptions")?
            };
            Ok(TransportHandle::Sshfs(SshfsHandle {
                endpoint,
                export_locator: obj.req_str("exportLocator")?.to_owned(),
                credential,
                options,
                host_key: obj.opt_string("hostKey")?,
            }))
        }
        "storage" => Ok(TransportHandle::Storage(StorageHandle {
            download_url: obj.req_str("downloadUrl")?.to_owned(),
            upload_url: obj.req_str("uploadUrl")?.to_owned(),
            checksum: obj.req_str("checksum")?.to_owned(),
            expires_at: obj.req_timestamp("expiresAt")?,
            headers: obj.str_map("headers")?,
        })),
        "git" => {
            let auth = match obj.opt_obj("auth")? {
                None => None,
                Some(a) => Some(match a.req_str("type")? {
                    "token" => GitAuth::Token(a.req_str("token")?.to_owned()),
                    "ssh" => GitAuth::Ssh {
                        private_key: a.opt_string("privateKey")?,
                        host_key: a.opt_string("hostKey")?,
                    },
                    "none" => GitAuth::None,
                    other => {
                        return Err(a.invalid(
                            "type",
                            format!("unknown git auth type {:?}", truncate(other)),
                        ))
                    }
                }),
            };
            Ok(TransportHandle::Git(GitHandle {
                repo_url: obj.req_str("repoUrl")?.to_owned(),
                base_branch: obj.req_str("baseBranch")?.to_owned(),
                base_commit: obj.req_str("baseCommit")?.to_owned(),
                auth,
            }))
        }
        other => Err(obj.invalid(
            "transport",
            format!("unknown transport {:?}", truncate(other)),
        )),
    }
}
