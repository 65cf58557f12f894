//! Two-dialect decoder (WIRE.md §0–§4, §15).
//!
//! `serde_json` parses the input into a [`Value`]; this module is the one adapter from that
//! JSON to the canonical types: small helpers pull fields out, apply the dialect rules below,
//! and report failures with a dotted path (`task.prompt`, `environment.resources[0].name`,
//! `transportHandle.checksum`). The same adapter is behind the types' `Deserialize`
//! implementations, so `serde_json::from_slice::<Message>` accepts and refuses exactly what
//! [`decode_message`] does.
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

use serde_json::Value;

use super::types::*;
use crate::error::{ErrorCode, ErrorInfo};
use crate::id::{DelegationId, ResourceName, SnapshotId};
use crate::time::Timestamp;

mod fields;
mod handle;

use self::fields::{invalid, parse, truncate, wrong_type, Obj};
pub use self::handle::decode_handle;

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
    decode_message_json(&parse(json)?)
}

/// [`decode_message`] of a body the caller gives up. A START's inline archive is moved out of
/// the parsed JSON into the message rather than copied, and the body is freed as soon as it
/// is parsed, so a large archive is held twice only while it is parsed. (Drivers divert large
/// archives to a file as they arrive, with [`super::divert::ArchiveTextDiverter`], before a
/// body gets here.) The result is the same as [`decode_message`]'s; on error the body is
/// handed back (to quote it in the refusal).
#[allow(clippy::result_large_err)]
pub fn decode_message_owned(body: Vec<u8>) -> Result<(Message, Dialect), (DecodeError, Vec<u8>)> {
    let mut value = match parse(&body) {
        Ok(v) => v,
        Err(e) => return Err((e, body)),
    };
    let archive = take_inline_archive(&mut value);
    let (mut msg, dialect) = match decode_message_json(&value) {
        Ok(d) => d,
        Err(e) => return Err((e, body)),
    };
    drop(body);
    if let (Some(text), Some(a)) = (archive, msg.start_archive_mut()) {
        a.base64 = Some(text);
    }
    Ok((msg, dialect))
}

/// In a START, the inline archive text of the handle START's decoder will read (the first
/// present of its keys, as [`decode_start`] picks it): moved out of the JSON (left as `""`,
/// which decodes the same way) to be put back into the decoded message.
fn take_inline_archive(value: &mut Value) -> Option<String> {
    let root = value.as_object_mut()?;
    if root.get("type").and_then(Value::as_str) != Some("START") {
        return None;
    }
    let key = ["transportHandle", "transport", "workDir", "mount"]
        .into_iter()
        .find(|key| root.get(*key).is_some_and(|v| !v.is_null()))?;
    match root.get_mut(key)?.get_mut("workspaceBase64")? {
        Value::String(text) => Some(std::mem::take(text)),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::Array(_) | Value::Object(_) => {
            None
        }
    }
}

/// [`decode_message`] of JSON already parsed into a [`Value`].
pub fn decode_message_value(value: &Value) -> Result<(Message, Dialect), DecodeError> {
    decode_message_json(value)
}

/// [`decode_message`] of JSON already parsed (a caller that looked at the body first need not
/// parse it twice).
pub(crate) fn decode_message_json(value: &Value) -> Result<(Message, Dialect), DecodeError> {
    let obj = Obj::root(value)?;
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
        "CONTINUE" => {
            let t = obj.req_obj("task")?;
            let lease = match obj.opt_obj("lease")? {
                Some(l) => Some(ActiveLease {
                    expires_at: l.req_timestamp("expiresAt")?,
                    access_mode: l.access_mode("accessMode")?,
                }),
                None => None,
            };
            Ok((
                Message::Continue(Continue {
                    delegation_id,
                    task: TaskSpec {
                        description: t.req_str("description")?.to_owned(),
                        prompt: t.req_str("prompt")?.to_owned(),
                    },
                    round: obj.req_u64("round")?,
                    lease,
                }),
                Dialect::Reference,
            ))
        }
        "CLOSE" => Ok((Message::Close(Close { delegation_id }), Dialect::Reference)),
        other => Err(obj.invalid(
            "type",
            format!("unknown message type {:?}", truncate(other)),
        )),
    }
}

/// Read in either dialect, as [`decode_message`] reads it (the dialect is not kept).
impl<'de> serde::Deserialize<'de> for Message {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        decode_message_json(&value)
            .map(|(msg, _)| msg)
            .map_err(serde::de::Error::custom)
    }
}

/// Read in either dialect, as [`decode_event`] reads it (the dialect is not kept).
impl<'de> serde::Deserialize<'de> for TaskEvent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        decode_event_json(&value)
            .map(|(ev, _)| ev)
            .map_err(serde::de::Error::custom)
    }
}

/// Read in every spelling [`decode_handle`] reads.
impl<'de> serde::Deserialize<'de> for TransportHandle {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        decode_handle(&value, "").map_err(serde::de::Error::custom)
    }
}

/// Decodes an SSE task event (the JSON of one `data:` payload); returns its dialect.
pub fn decode_event(json: &[u8]) -> Result<(TaskEvent, Dialect), DecodeError> {
    decode_event_json(&parse(json)?)
}

/// [`decode_event`] of JSON already parsed.
fn decode_event_json(value: &Value) -> Result<(TaskEvent, Dialect), DecodeError> {
    let obj = Obj::root(value)?;
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
                Some(m) => m.members().map(|(k, v)| (k.clone(), v.clone())).collect(),
                None => BTreeMap::new(),
            },
        }),
        "done" => {
            let result_base64 = obj.opt_string("resultBase64")?;
            if result_base64.is_some() {
                dialect = Dialect::Seed;
            }
            let (snapshot_ids, recommended_snapshot_id) = snapshot_refs(&obj)?;
            TaskEventKind::Done(DoneEvent {
                summary: obj.req_str("summary")?.to_owned(),
                highlights: obj.str_array("highlights")?,
                snapshot_ids,
                recommended_snapshot_id,
                result_base64,
                result_local_file: None,
            })
        }
        "round_done" => {
            let (snapshot_ids, recommended_snapshot_id) = snapshot_refs(&obj)?;
            TaskEventKind::RoundDone(RoundDoneEvent {
                round: obj.req_u64("round")?,
                summary: obj.req_str("summary")?.to_owned(),
                highlights: obj.str_array("highlights")?,
                snapshot_ids,
                recommended_snapshot_id,
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

/// `snapshotIds` and `recommendedSnapshotId` of a `done` or `round_done` event.
fn snapshot_refs(obj: &Obj<'_>) -> Result<(Vec<SnapshotId>, Option<SnapshotId>), DecodeError> {
    let snapshot_ids = match obj.opt_array("snapshotIds")? {
        Some(items) => items
            .enumerate()
            .map(|(i, v)| {
                // The field's name is only built for an error.
                let field = || format!("{}[{i}]", obj.field("snapshotIds"));
                let s = v.as_str().ok_or_else(|| wrong_type(&field(), "string"))?;
                SnapshotId::new(s).map_err(|e| invalid(&field(), e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    let recommended_snapshot_id = match obj.get("recommendedSnapshotId") {
        Some(_) => Some(obj.snapshot_id("recommendedSnapshotId")?),
        None => None,
    };
    Ok((snapshot_ids, recommended_snapshot_id))
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
        for (i, item) in items.enumerate() {
            let r = Obj::new(item, env.child_path("resources").index(i))?;
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
            features: obj.str_array_of("features", Feature::new)?,
        }),
        dialect,
    ))
}

fn decode_accept(
    obj: &Obj<'_>,
    delegation_id: DelegationId,
) -> Result<(Message, Dialect), DecodeError> {
    let dialect = if obj.has_key("retentionMs") {
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
            features: obj.str_array_of("features", Feature::new)?,
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
    let handle = handle::decode_handle_json(handle_value, obj.child_path(key))?;
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
