//! Two-dialect decoder (WIRE.md §0–§4, §15).
//!
//! The input is parsed into a [`serde_json::Value`] first; small helpers then pull fields out
//! and report failures with a dotted path (`task.prompt`, `environment.resources[0].name`,
//! `transportHandle.checksum`).
//!
//! Leniency rules:
//! * `null` counts as absent; unknown fields are ignored.
//! * `version`, when present, must be the string `"1"`; a missing `version` is accepted.
//! * An event without `timestamp` (the non-normative \[C\] examples) decodes with
//!   [`Timestamp::EPOCH`](crate::Timestamp::EPOCH).
//! * START takes its handle from `transportHandle` \[R\], else `transport` (02-11 intermediate
//!   name), else `workDir` \[S\], else `mount` \[L\]; an \[L\] `sshfs` credential may be a bare
//!   private-key string and `mountOptions` stands in for `options`.
//!
//! Dialect detection: INVITE with `environment` is \[R\], with only `workspace` is \[S\] (it then
//! carries one `fs` resource named `workspace` with the lease's access mode). START is \[S\] iff
//! the handle came from `workDir`/`mount`. ACCEPT is \[R\] iff the `retentionMs` key is present
//! (even as `null`). ERROR and DONE messages are reported as \[R\]. A `done` event is \[S\] iff it
//! carries `resultBase64`; every other event is \[R\].

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::types::*;
use crate::error::{ErrorCode, ErrorInfo};
use crate::id::{DelegationId, ResourceName, SnapshotId};
use crate::time::Timestamp;

/// What is wrong with a field.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// The input is not a JSON object.
    Json(String),
    /// A required field is absent or `null`.
    Missing,
    /// A field has the wrong JSON type.
    WrongType {
        /// The JSON type that was expected.
        expected: &'static str,
    },
    /// A field has the right type but an unacceptable value.
    Invalid(String),
}

/// A message or event could not be decoded; `field` is a dotted path such as `task.prompt`
/// (empty for the whole document).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(field, kind))]
pub struct DecodeError {
    /// Dotted path of the offending field.
    pub field: String,
    /// What is wrong with it.
    pub kind: DecodeErrorKind,
}

fn render(field: &str, kind: &DecodeErrorKind) -> String {
    let what = match kind {
        DecodeErrorKind::Json(e) => format!("malformed JSON: {e}"),
        DecodeErrorKind::Missing => "missing required field".to_owned(),
        DecodeErrorKind::WrongType { expected } => format!("expected {expected}"),
        DecodeErrorKind::Invalid(why) => why.clone(),
    };
    if field.is_empty() {
        what
    } else {
        format!("field `{field}`: {what}")
    }
}

/// Decodes a control-plane message from JSON bytes; returns the dialect it was written in.
pub fn decode_message(json: &[u8]) -> Result<(Message, Dialect), DecodeError> {
    let value = parse(json)?;
    let obj = Obj::root(&value)?;
    if let Some(v) = obj.get("version") {
        match v.as_str() {
            Some(PROTOCOL_VERSION) => {}
            Some(other) => {
                return Err(obj.invalid(
                    "version",
                    format!(
                        "unsupported protocol version {:?}; expected \"{PROTOCOL_VERSION}\"",
                        truncate(other)
                    ),
                ))
            }
            None => return Err(obj.wrong_type("version", "string")),
        }
    }
    let ty = obj.req_str("type")?;
    let delegation_id = obj.delegation_id()?;
    match ty {
        "INVITE" => decode_invite(&obj, delegation_id),
        "ACCEPT" => decode_accept(&obj, delegation_id),
        "START" => decode_start(&obj, delegation_id),
        "ERROR" => Ok((
            Message::Error(ErrorMessage {
                delegation_id,
                error: decode_error_info(&obj)?,
            }),
            Dialect::Reference,
        )),
        "DONE" => Ok((
            Message::Done(Done {
                delegation_id,
                final_summary: obj.req_str("finalSummary")?.to_owned(),
                highlights: obj.str_array("highlights")?,
                notes: obj.opt_string("notes")?,
            }),
            Dialect::Reference,
        )),
        other => Err(obj.invalid(
            "type",
            format!("unknown message type {:?}", truncate(other)),
        )),
    }
}

/// Decodes an SSE task event (the JSON of one `data:` payload); returns its dialect.
pub fn decode_event(json: &[u8]) -> Result<(TaskEvent, Dialect), DecodeError> {
    let value = parse(json)?;
    let obj = Obj::root(&value)?;
    let ty = obj.req_str("type")?;
    let delegation_id = obj.delegation_id()?;
    let timestamp = obj.opt_timestamp("timestamp")?.unwrap_or(Timestamp::EPOCH);
    let mut dialect = Dialect::Reference;
    let kind = match ty {
        "status" => TaskEventKind::Status(StatusEvent {
            status: TaskStatus::parse(obj.req_str("status")?),
            message: obj.opt_string("message")?,
            progress: obj.opt_f64("progress")?,
        }),
        "snapshot" => TaskEventKind::Snapshot(SnapshotEvent {
            snapshot_id: obj.snapshot_id("snapshotId")?,
            summary: obj.req_str("summary")?.to_owned(),
            highlights: obj.str_array("highlights")?,
            data: obj.archive_data("snapshotBase64", "snapshotUrl")?,
            checksum: obj.opt_string("checksum")?,
            recommended: obj.opt_bool("recommended")?,
            metadata: match obj.opt_obj("metadata")? {
                Some(m) => m.map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                None => BTreeMap::new(),
            },
        }),
        "done" => {
            let result_base64 = obj.opt_string("resultBase64")?;
            if result_base64.is_some() {
                dialect = Dialect::Seed;
            }
            let snapshot_ids = match obj.opt_array("snapshotIds")? {
                Some(items) => items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let field = format!("{}[{i}]", obj.field("snapshotIds"));
                        let s = v.as_str().ok_or_else(|| wrong_type(&field, "string"))?;
                        SnapshotId::new(s).map_err(|e| invalid(&field, e.to_string()))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                None => Vec::new(),
            };
            let recommended_snapshot_id = match obj.get("recommendedSnapshotId") {
                Some(_) => Some(obj.snapshot_id("recommendedSnapshotId")?),
                None => None,
            };
            TaskEventKind::Done(DoneEvent {
                summary: obj.req_str("summary")?.to_owned(),
                highlights: obj.str_array("highlights")?,
                snapshot_ids,
                recommended_snapshot_id,
                result_base64,
            })
        }
        "error" => TaskEventKind::Error(decode_error_info(&obj)?),
        other => {
            return Err(obj.invalid("type", format!("unknown event type {:?}", truncate(other))))
        }
    };
    Ok((
        TaskEvent {
            delegation_id,
            timestamp,
            kind,
        },
        dialect,
    ))
}

/// Decodes a transport handle object; `path` prefixes field names in errors.
pub fn decode_handle(value: &Value, path: &str) -> Result<TransportHandle, DecodeError> {
    let obj = Obj::new(value, path.to_owned())?;
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
                Some(Value::String(key)) => SshCredential {
                    private_key: key.clone(),
                    certificate: None,
                },
                Some(Value::Object(_)) => {
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
                    "ssh" => GitAuth::Ssh(a.opt_string("privateKey")?),
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

// ---------------------------------------------------------------------------------------------
// Messages

fn decode_invite(
    obj: &Obj<'_>,
    delegation_id: DelegationId,
) -> Result<(Message, Dialect), DecodeError> {
    let t = obj.req_obj("task")?;
    let task = TaskSpec {
        description: t.req_str("description")?.to_owned(),
        prompt: t.req_str("prompt")?.to_owned(),
    };
    let l = obj.req_obj("lease")?;
    let lease = LeaseRequest {
        ttl_seconds: l.req_u64("ttlSeconds")?,
        access_mode: l.access_mode("accessMode")?,
    };
    let workspace = obj.opt_obj("workspace")?;
    let export_name = match &workspace {
        Some(w) => w.opt_string("exportName")?,
        None => None,
    };
    let (resources, dialect) = if let Some(env) = obj.opt_obj("environment")? {
        let items = env.req_array("resources")?;
        let mut resources = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let r = Obj::new(item, format!("{}[{i}]", env.field("resources")))?;
            let name = r.req_str("name")?;
            resources.push(Resource {
                name: ResourceName::new(name).map_err(|e| r.invalid("name", e.to_string()))?,
                kind: r.req_str("type")?.to_owned(),
                mode: r.access_mode("mode")?,
            });
        }
        (resources, Dialect::Reference)
    } else if workspace.is_some() {
        let name =
            ResourceName::new("workspace").map_err(|e| obj.invalid("workspace", e.to_string()))?;
        (
            vec![Resource {
                name,
                kind: "fs".to_owned(),
                mode: lease.access_mode,
            }],
            Dialect::Seed,
        )
    } else {
        return Err(obj.missing("environment"));
    };
    let transport = match obj.opt_obj("requirements")? {
        Some(r) => r.opt_string("transport")?.map(|s| TransportKind::parse(&s)),
        None => None,
    };
    let auth = match obj.opt_obj("auth")? {
        Some(a) => Some(Auth {
            auth_type: AuthType::parse(a.req_str("type")?),
            credential: a.req_str("credential")?.to_owned(),
            metadata: a.str_map("metadata")?,
        }),
        None => None,
    };
    Ok((
        Message::Invite(Invite {
            delegation_id,
            task,
            lease,
            resources,
            export_name,
            retention_ms: obj.opt_u64("retentionMs")?,
            transport,
            auth,
            features: obj.str_array("features")?,
        }),
        dialect,
    ))
}

fn decode_accept(
    obj: &Obj<'_>,
    delegation_id: DelegationId,
) -> Result<(Message, Dialect), DecodeError> {
    let dialect = if obj.map.contains_key("retentionMs") {
        Dialect::Reference
    } else {
        Dialect::Seed
    };
    let work_dir = obj.req_obj("executorWorkDir")?.req_str("path")?.to_owned();
    let constraints = match obj.opt_obj("executorConstraints")? {
        Some(c) => Some(ExecutorConstraints {
            accepted_access_mode: match c.get("acceptedAccessMode") {
                Some(_) => Some(c.access_mode("acceptedAccessMode")?),
                None => None,
            },
            max_ttl_seconds: c.opt_u64("maxTtlSeconds")?,
            sandbox_profile: match c.opt_obj("sandboxProfile")? {
                Some(s) => Some(SandboxProfile {
                    cwd_only: s.opt_bool("cwdOnly")?,
                    allow_network: s.opt_bool("allowNetwork")?,
                    allow_exec: s.opt_bool("allowExec")?,
                }),
                None => None,
            },
        }),
        None => None,
    };
    Ok((
        Message::Accept(Accept {
            delegation_id,
            work_dir,
            constraints,
            retention_ms: obj.opt_u64("retentionMs")?,
            features: obj.str_array("features")?,
        }),
        dialect,
    ))
}

fn decode_start(
    obj: &Obj<'_>,
    delegation_id: DelegationId,
) -> Result<(Message, Dialect), DecodeError> {
    let l = obj.req_obj("lease")?;
    let lease = ActiveLease {
        expires_at: l.req_timestamp("expiresAt")?,
        access_mode: l.access_mode("accessMode")?,
    };
    let (key, dialect) = [
        ("transportHandle", Dialect::Reference),
        ("transport", Dialect::Reference),
        ("workDir", Dialect::Seed),
        ("mount", Dialect::Seed),
    ]
    .into_iter()
    .find(|(k, _)| obj.get(k).is_some())
    .ok_or_else(|| obj.missing("transportHandle"))?;
    let handle_value = obj.get(key).unwrap_or(&Value::Null);
    let handle = decode_handle(handle_value, &obj.field(key))?;
    Ok((
        Message::Start(Start {
            delegation_id,
            lease,
            handle,
        }),
        dialect,
    ))
}

fn decode_error_info(obj: &Obj<'_>) -> Result<ErrorInfo, DecodeError> {
    Ok(ErrorInfo {
        code: ErrorCode::parse(obj.req_str("code")?),
        message: obj.req_str("message")?.to_owned(),
        hint: obj.opt_string("hint")?,
    })
}

// ---------------------------------------------------------------------------------------------
// Field helpers

fn parse(json: &[u8]) -> Result<Value, DecodeError> {
    serde_json::from_slice(json).map_err(|e| DecodeError {
        field: String::new(),
        kind: DecodeErrorKind::Json(e.to_string()),
    })
}

fn invalid(field: &str, why: impl Into<String>) -> DecodeError {
    DecodeError {
        field: field.to_owned(),
        kind: DecodeErrorKind::Invalid(why.into()),
    }
}

fn wrong_type(field: &str, expected: &'static str) -> DecodeError {
    DecodeError {
        field: field.to_owned(),
        kind: DecodeErrorKind::WrongType { expected },
    }
}

/// Shortens peer-supplied text quoted in error messages.
fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

/// A JSON object together with its dotted path, for error reporting.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

// A JSON value of any other type than the one a field needs is the wrong type: the wildcard
// arms below mean exactly that, for serde_json's `Value` (not ours to extend).
#[allow(clippy::wildcard_enum_match_arm)]
impl<'a> Obj<'a> {
    fn root(value: &'a Value) -> Result<Self, DecodeError> {
        match value {
            Value::Object(map) => Ok(Obj {
                map,
                path: String::new(),
            }),
            _ => Err(DecodeError {
                field: String::new(),
                kind: DecodeErrorKind::Json("expected a JSON object".to_owned()),
            }),
        }
    }

    fn new(value: &'a Value, path: String) -> Result<Self, DecodeError> {
        match value {
            Value::Object(map) => Ok(Obj { map, path }),
            Value::Null => Err(DecodeError {
                field: path,
                kind: DecodeErrorKind::Missing,
            }),
            _ => Err(wrong_type(&path, "object")),
        }
    }

    fn field(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn missing(&self, key: &str) -> DecodeError {
        DecodeError {
            field: self.field(key),
            kind: DecodeErrorKind::Missing,
        }
    }

    fn wrong_type(&self, key: &str, expected: &'static str) -> DecodeError {
        wrong_type(&self.field(key), expected)
    }

    fn invalid(&self, key: &str, why: impl Into<String>) -> DecodeError {
        invalid(&self.field(key), why)
    }

    /// The value under `key`; `null` counts as absent.
    fn get(&self, key: &str) -> Option<&'a Value> {
        match self.map.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        }
    }

    fn req(&self, key: &str) -> Result<&'a Value, DecodeError> {
        self.get(key).ok_or_else(|| self.missing(key))
    }

    fn req_str(&self, key: &str) -> Result<&'a str, DecodeError> {
        self.req(key)?
            .as_str()
            .ok_or_else(|| self.wrong_type(key, "string"))
    }

    fn opt_string(&self, key: &str) -> Result<Option<String>, DecodeError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.wrong_type(key, "string")),
        }
    }

    fn req_obj(&self, key: &str) -> Result<Obj<'a>, DecodeError> {
        Obj::new(self.req(key)?, self.field(key))
    }

    fn opt_obj(&self, key: &str) -> Result<Option<Obj<'a>>, DecodeError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => Obj::new(v, self.field(key)).map(Some),
        }
    }

    fn req_array(&self, key: &str) -> Result<&'a Vec<Value>, DecodeError> {
        self.req(key)?
            .as_array()
            .ok_or_else(|| self.wrong_type(key, "array"))
    }

    fn opt_array(&self, key: &str) -> Result<Option<&'a Vec<Value>>, DecodeError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(_) => Err(self.wrong_type(key, "array")),
        }
    }

    fn u64_of(&self, key: &str, v: &Value) -> Result<u64, DecodeError> {
        match v {
            Value::Number(n) => n.as_u64().ok_or_else(|| {
                self.invalid(key, format!("expected a non-negative integer, got {n}"))
            }),
            _ => Err(self.wrong_type(key, "non-negative integer")),
        }
    }

    fn req_u64(&self, key: &str) -> Result<u64, DecodeError> {
        let v = self.req(key)?;
        self.u64_of(key, v)
    }

    fn opt_u64(&self, key: &str) -> Result<Option<u64>, DecodeError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => self.u64_of(key, v).map(Some),
        }
    }

    fn opt_f64(&self, key: &str) -> Result<Option<f64>, DecodeError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_f64()
                .filter(|f| f.is_finite())
                .map(Some)
                .ok_or_else(|| self.invalid(key, "expected a finite number")),
            Some(_) => Err(self.wrong_type(key, "number")),
        }
    }

    fn opt_bool(&self, key: &str) -> Result<Option<bool>, DecodeError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(self.wrong_type(key, "boolean")),
        }
    }

    /// An optional array of strings; absent means empty.
    fn str_array(&self, key: &str) -> Result<Vec<String>, DecodeError> {
        match self.opt_array(key)? {
            None => Ok(Vec::new()),
            Some(items) => items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| wrong_type(&format!("{}[{i}]", self.field(key)), "string"))
                })
                .collect(),
        }
    }

    /// An optional map string → string; absent means empty.
    fn str_map(&self, key: &str) -> Result<BTreeMap<String, String>, DecodeError> {
        match self.opt_obj(key)? {
            None => Ok(BTreeMap::new()),
            Some(m) => m
                .map
                .iter()
                .map(|(k, v)| {
                    v.as_str()
                        .map(|s| (k.clone(), s.to_owned()))
                        .ok_or_else(|| m.wrong_type(k, "string"))
                })
                .collect(),
        }
    }

    fn access_mode(&self, key: &str) -> Result<AccessMode, DecodeError> {
        let s = self.req_str(key)?;
        AccessMode::parse(s).ok_or_else(|| {
            self.invalid(
                key,
                format!(
                    "access mode must be \"ro\" or \"rw\", got {:?}",
                    truncate(s)
                ),
            )
        })
    }

    fn req_timestamp(&self, key: &str) -> Result<Timestamp, DecodeError> {
        let s = self.req_str(key)?;
        Timestamp::parse_rfc3339(s).map_err(|e| self.invalid(key, e.to_string()))
    }

    fn opt_timestamp(&self, key: &str) -> Result<Option<Timestamp>, DecodeError> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.req_timestamp(key).map(Some),
        }
    }

    fn delegation_id(&self) -> Result<DelegationId, DecodeError> {
        let s = self.req_str("delegationId")?;
        DelegationId::new(s).map_err(|e| self.invalid("delegationId", e.to_string()))
    }

    fn snapshot_id(&self, key: &str) -> Result<SnapshotId, DecodeError> {
        let s = self.req_str(key)?;
        SnapshotId::new(s).map_err(|e| self.invalid(key, e.to_string()))
    }

    /// Inline base64 under `b64_key` and/or a URL under `url_key`; at least one is required
    /// (the error names `b64_key`).
    fn archive_data(&self, b64_key: &str, url_key: &str) -> Result<ArchiveData, DecodeError> {
        let data = ArchiveData {
            base64: self.opt_string(b64_key)?,
            url: self.opt_string(url_key)?,
        };
        if data.base64.is_none() && data.url.is_none() {
            return Err(self.missing(b64_key));
        }
        Ok(data)
    }
}
