//! Runtime-neutral HTTP shapes of AWCP (WIRE.md §1, §5): URL layout, response bodies and the
//! mapping of engine responses to status codes. Pure functions over strings and JSON values, so
//! every driver (tokio, smol, a test) answers byte-for-byte the same way. What an HTTP layer
//! answers to a request it refuses before the engine sees it is decided in `refusals.rs`.

use serde_json::{json, Value};

use crate::engine::auth::{Credential, Presented};
use crate::engine::delegator::FetchedResult;
use crate::engine::executor::{ExecutorStatus, Response, ResultBody, ResultStatus};
use crate::engine::TaskOutcome;
use crate::error::{ErrorCode, ErrorInfo};
use crate::id::DelegationId;
use crate::id::SnapshotId;
use crate::time::Timestamp;
use crate::wire::encode::{encode_message_ref, to_text, to_value, MessageRef};
use crate::wire::{ArchiveData, ErrorMessage, Message, SnapshotEvent};

mod refusals;
pub use refusals::*;

/// Where the executor router is mounted.
pub const AWCP_PATH: &str = "/awcp";

/// Strips one trailing `/` and then a trailing `/awcp` (the reference's normalisation).
pub fn base_url(peer: &str) -> &str {
    let p = peer.strip_suffix('/').unwrap_or(peer);
    p.strip_suffix(AWCP_PATH).unwrap_or(p)
}

/// The AWCP URL of a peer: `<base>/awcp`.
pub fn awcp_url(peer: &str) -> String {
    format!("{}{AWCP_PATH}", base_url(peer))
}

/// `GET <base>/awcp/tasks/<id>/events`.
pub fn events_url(peer: &str, id: &DelegationId) -> String {
    format!("{}{AWCP_PATH}/tasks/{id}/events", base_url(peer))
}

/// `GET <base>/awcp/tasks/<id>/result`.
pub fn result_url(peer: &str, id: &DelegationId) -> String {
    format!("{}{AWCP_PATH}/tasks/{id}/result", base_url(peer))
}

/// `POST <base>/awcp/tasks/<id>/ack`.
pub fn ack_url(peer: &str, id: &DelegationId) -> String {
    format!("{}{AWCP_PATH}/tasks/{id}/ack", base_url(peer))
}

/// Where an executor serves URL-mode snapshots (`{id}`, `{sid}`: the delegation and the
/// snapshot).
pub const SNAPSHOT_ROUTE: &str = "/awcp/tasks/{id}/snapshots/{sid}";

/// `GET <base>/awcp/tasks/<id>/snapshots/<sid>`: the URL a snapshot named by URL carries
/// (`base`: the executor's public URL, or the origin the delegator reached it at).
pub fn snapshot_url(base: &str, id: &DelegationId, sid: &crate::id::SnapshotId) -> String {
    format!("{}{AWCP_PATH}/tasks/{id}/snapshots/{sid}", base_url(base))
}

/// `POST <base>/awcp/cancel/<id>`.
pub fn cancel_url(peer: &str, id: &DelegationId) -> String {
    format!("{}{AWCP_PATH}/cancel/{id}", base_url(peer))
}

/// The header a delegator presents `auth` in: `Authorization: Bearer <t>`, or `X-API-Key: <k>`
/// for an API key.
pub fn credential_header(auth: &crate::wire::Auth) -> (&'static str, String) {
    match auth.auth_type {
        crate::wire::AuthType::ApiKey => ("x-api-key", auth.credential.clone()),
        crate::wire::AuthType::Bearer
        | crate::wire::AuthType::OAuth2
        | crate::wire::AuthType::Custom
        | crate::wire::AuthType::Other(_) => {
            ("authorization", format!("Bearer {}", auth.credential))
        }
    }
}

pub use crate::origin::{origin, same_origin};

/// The credential a request's headers present: `Authorization: Bearer <t>` (type `bearer`) or
/// `X-API-Key: <k>` (type `api_key`). An `Authorization` header with another scheme is
/// [`Presented::Unsupported`] (an executor with auth refuses it rather than ignoring it).
pub fn presented_credential(authorization: Option<&str>, api_key: Option<&str>) -> Presented {
    if let Some(a) = authorization {
        let a = a.trim();
        // A header without a scheme may be a bare secret: never echo it.
        let (scheme, rest) = a.split_once(' ').unwrap_or(("(no scheme)", a));
        return if scheme.eq_ignore_ascii_case("bearer") && !rest.trim().is_empty() {
            Presented::Credential(Credential::bearer(rest.trim()))
        } else {
            Presented::Unsupported(scheme.chars().take(32).collect())
        };
    }
    match api_key.map(str::trim) {
        Some(k) if !k.is_empty() => Presented::Credential(Credential::api_key(k)),
        _ => Presented::Nothing,
    }
}

/// An engine [`Response`] as `(status, JSON body)`.
pub fn encode_response(resp: &Response) -> (u16, String) {
    let status = resp.http_status();
    let body = match resp {
        Response::Accept(a, d) => encode_message_ref(MessageRef::Accept(a), *d),
        Response::Error {
            message, dialect, ..
        } => encode_message_ref(MessageRef::Error(message), *dialect),
        Response::Ok => r#"{"ok":true}"#.to_owned(),
        Response::Cancelled => r#"{"ok":true,"cancelled":true}"#.to_owned(),
        Response::Result(r) => to_text(&ResultShape::of(r)),
    };
    (status, body)
}

/// [`encode_response`] for a `GET …/result` answer whose inline snapshot is a local file
/// ([`ArchiveData::local_file`]): the status and the JSON before and after the
/// `snapshotBase64` text, which the caller writes from the file. `None` for any other answer.
pub fn encode_response_split(resp: &Response) -> Option<(u16, crate::wire::SplitMessage)> {
    let Response::Result(r) = resp else {
        return None;
    };
    let s = r.snapshot.as_ref()?;
    if s.data.base64.is_some() {
        return None;
    }
    let file = s.data.local_file.clone()?;
    let mut r = r.clone();
    if let Some(s) = &mut r.snapshot {
        s.data.base64 = Some(String::new());
        s.data.local_file = None;
    }
    let around = to_text(&ResultShape::of(&r));
    let split = crate::wire::encode::split_at_field(&around, r#""snapshotBase64":"""#, file)?;
    Some((resp.http_status(), split))
}

/// `GET …/result` body (WIRE.md §5).
pub fn result_to_value(r: &ResultBody) -> Value {
    to_value(&ResultShape::of(r))
}

/// The JSON shape of a `GET …/result` body, borrowing from a [`ResultBody`].
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ResultShape<'a> {
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    completed_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    highlights: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshot_base64: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshot_url: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshot_id: Option<&'a SnapshotId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    checksum: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a std::collections::BTreeMap<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ErrorInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
}

impl<'a> ResultShape<'a> {
    fn of(r: &'a ResultBody) -> Self {
        let snapshot = r.snapshot.as_ref();
        ResultShape {
            status: r.status.as_str(),
            completed_at: r.completed_at,
            summary: r.outcome.as_ref().map(|o| o.summary.as_str()),
            highlights: r.outcome.as_ref().map_or(&[], |o| &o.highlights),
            snapshot_base64: snapshot.and_then(|s| s.data.base64.as_deref()),
            snapshot_url: snapshot.and_then(|s| s.data.url.as_deref()),
            snapshot_id: snapshot.map(|s| &s.snapshot_id),
            checksum: snapshot.and_then(|s| s.checksum.as_deref()),
            metadata: snapshot.map(|s| &s.metadata).filter(|m| !m.is_empty()),
            error: r.error.as_ref(),
            reason: (r.status == ResultStatus::NotFound).then_some("unknown delegation"),
        }
    }
}

/// Decodes a `GET …/result` body (ours or the reference's) for the delegator engine.
pub fn decode_result(id: &DelegationId, v: &Value) -> Result<FetchedResult, String> {
    let status = v
        .get("status")
        .and_then(Value::as_str)
        .ok_or("result body has no status")?;
    let str_field = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    match status {
        "running" => Ok(FetchedResult::Running),
        "not_found" => Ok(FetchedResult::NotFound),
        "not_applicable" => Ok(FetchedResult::NotApplicable),
        "error" => {
            let e = v.get("error");
            let code = e
                .and_then(|e| e.get("code"))
                .and_then(Value::as_str)
                .map(ErrorCode::parse)
                .unwrap_or(ErrorCode::TaskFailed);
            let message = e
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .unwrap_or("the task failed")
                .to_owned();
            let hint = e
                .and_then(|e| e.get("hint"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            Ok(FetchedResult::Error(ErrorInfo {
                code,
                message,
                hint,
            }))
        }
        "completed" => {
            let outcome = TaskOutcome {
                summary: str_field("summary").unwrap_or_default(),
                highlights: v
                    .get("highlights")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default(),
            };
            let data = ArchiveData {
                base64: str_field("snapshotBase64"),
                url: str_field("snapshotUrl"),
                local_file: None,
                local_file_sha256: None,
            };
            let snapshot = if data.base64.is_some() || data.url.is_some() {
                let sid = str_field("snapshotId")
                    .and_then(|s| crate::id::SnapshotId::new(s).ok())
                    .unwrap_or_else(|| {
                        // `snap_result` is a valid snapshot id (a letters-and-underscore
                        // constant well under the length limit).
                        #[allow(clippy::expect_used)]
                        crate::id::SnapshotId::new("snap_result").expect("valid constant")
                    });
                Some(Box::new(SnapshotEvent {
                    snapshot_id: sid,
                    summary: outcome.summary.clone(),
                    highlights: outcome.highlights.clone(),
                    data,
                    checksum: str_field("checksum"),
                    recommended: Some(true),
                    metadata: v
                        .get("metadata")
                        .and_then(Value::as_object)
                        .map(|m| m.clone().into_iter().collect())
                        .unwrap_or_default(),
                }))
            } else {
                None
            };
            let _ = id;
            Ok(FetchedResult::Completed { outcome, snapshot })
        }
        other => Err(format!("unknown result status {other:?}")),
    }
}

/// Puts the file a diverted `snapshotBase64` of a `GET …/result` body was decoded into (see
/// [`crate::wire::divert::ArchiveTextDiverter::for_results`]) in place of the result's (now
/// empty) inline text, as [`ArchiveData::local_file`]. `false` when `result` carries no inline
/// snapshot: nothing was diverted from it, and the caller deletes the file.
pub fn attach_diverted_result_body(result: &mut FetchedResult, file: &str) -> bool {
    match result {
        FetchedResult::Completed {
            snapshot: Some(s), ..
        } if s.data.base64.is_some() => {
            s.data.base64 = None;
            s.data.local_file = Some(file.to_owned());
            true
        }
        FetchedResult::Completed { .. }
        | FetchedResult::Running
        | FetchedResult::Error(_)
        | FetchedResult::NotFound
        | FetchedResult::NotApplicable => false,
    }
}

/// `GET /awcp/status` body.
pub fn status_to_value(s: &ExecutorStatus) -> Value {
    json!({
        "pendingInvitations": s.pending,
        "activeDelegations": s.active,
        "completedDelegations": s.completed,
        "delegations": s.delegations.iter().map(|(id, work, started)| json!({
            "id": id.as_str(),
            "workPath": work,
            "startedAt": started.to_rfc3339(),
        })).collect::<Vec<_>>(),
    })
}

/// A short description of a body that is not JSON ([`engine_basics::body`], shared with
/// AIP): its size and the start of its first line, never the whole of a web page.
pub use engine_basics::body::describe_foreign_body;

/// Decodes the body an executor answered a POST with, for the delegator engine: ACCEPT, ERROR,
/// `{"ok":true}`, or the reference's `{"error": "..."}` (HTTP 500).
pub fn decode_reply(status: u16, body: &[u8]) -> crate::engine::delegator::Reply {
    use crate::engine::delegator::{Reply, RequestFailure::Unusable};
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        if let Some(f) = gateway_failure(status, body) {
            return Reply::Failed(f);
        }
        return Reply::Failed(Unusable(format!(
            "HTTP {status} with {}",
            describe_foreign_body(body)
        )));
    };
    let text = |k: &str| v.get(k).and_then(Value::as_str);
    match text("type") {
        Some("ACCEPT") | Some("ERROR") => match crate::wire::decode::decode_message_json(&v) {
            Ok((Message::Accept(a), _)) => Reply::Accept(Box::new(a)),
            Ok((Message::Error(ErrorMessage { error, .. }), _)) => Reply::Error(error),
            Ok((m, _)) => Reply::Failed(Unusable(format!("unexpected {} reply", m.type_str()))),
            Err(e) => {
                // An ERROR without a valid delegationId (e.g. a pre-engine refusal).
                if let (Some(code), Some(message)) = (text("code"), text("message")) {
                    Reply::Error(ErrorInfo {
                        code: ErrorCode::parse(code),
                        message: message.to_owned(),
                        hint: text("hint").map(str::to_owned),
                    })
                } else {
                    Reply::Failed(Unusable(format!("undecodable reply: {e}")))
                }
            }
        },
        _ if (200..300).contains(&status) && v.get("ok").and_then(Value::as_bool) == Some(true) => {
            Reply::Ok
        }
        _ => match gateway_failure(status, body) {
            Some(f) => Reply::Failed(f),
            None => Reply::Failed(Unusable(format!(
                "HTTP {status}: {}",
                text("error")
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string())
            ))),
        },
    }
}

/// A 502, 503 or 504 answer to any request to an executor is a gateway's (a relay's, a
/// proxy's) word that the executor behind it cannot be reached, unless the body is an AWCP
/// message: [`RequestFailure::Unreachable`] (nobody's fault), with the gateway's
/// `{"error": …}` or a one-line description of its page. `None` for any other answer. The
/// delegator's driver asks this of every answer it reads (replies to POSTs, `GET …/result`).
///
/// [`RequestFailure::Unreachable`]: crate::engine::delegator::RequestFailure::Unreachable
pub fn gateway_failure(
    status: u16,
    body: &[u8],
) -> Option<crate::engine::delegator::RequestFailure> {
    if !matches!(status, 502..=504) {
        return None;
    }
    let detail = match serde_json::from_slice::<Value>(body) {
        Ok(v) if v.get("type").is_some() => return None,
        Ok(v) => v
            .get("error")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| "the executor behind it is not reachable".into()),
        Err(_) => "the executor behind it is not reachable".into(),
    };
    Some(crate::engine::delegator::RequestFailure::Unreachable(
        format!("HTTP {status} from a gateway: {detail}"),
    ))
}

#[cfg(test)]
#[allow(clippy::wildcard_enum_match_arm)]
mod tests {
    use super::*;

    #[test]
    fn urls_follow_the_reference_normalisation() {
        let id = DelegationId::new("dlg_1").unwrap();
        for peer in [
            "http://h:1/awcp",
            "http://h:1/awcp/",
            "http://h:1",
            "http://h:1/",
        ] {
            assert_eq!(events_url(peer, &id), "http://h:1/awcp/tasks/dlg_1/events");
            assert_eq!(cancel_url(peer, &id), "http://h:1/awcp/cancel/dlg_1");
        }
        assert_eq!(awcp_url("http://h:1/"), "http://h:1/awcp");
    }

    #[test]
    fn credentials_from_either_header() {
        assert_eq!(
            presented_credential(Some("Bearer abc"), None),
            Presented::Credential(Credential::bearer("abc"))
        );
        assert_eq!(
            presented_credential(Some("bearer  abc "), None),
            Presented::Credential(Credential::bearer("abc"))
        );
        assert_eq!(
            presented_credential(None, Some("k")),
            Presented::Credential(Credential::api_key("k"))
        );
        assert_eq!(
            presented_credential(Some("Basic x"), None),
            Presented::Unsupported("Basic".into())
        );
        assert_eq!(
            presented_credential(Some("abc"), None),
            Presented::Unsupported("(no scheme)".into())
        );
        assert_eq!(presented_credential(None, None), Presented::Nothing);
    }

    #[test]
    fn foreign_host_names_are_refused() {
        let ok = |h: &str, public: Option<&str>, allowed: &[&str]| {
            let allowed: Vec<String> = allowed.iter().map(|a| a.to_string()).collect();
            refuse_foreign_host(Some(h), public, &allowed, false).is_none()
        };
        for h in [
            "127.0.0.1:10200",
            "10.1.2.3",
            "[::1]:10200",
            "localhost:10200",
            "LOCALHOST",
            "x.localhost:1",
        ] {
            assert!(ok(h, None, &[]), "{h}");
        }
        for h in [
            "evil.example",
            "evil.example:10200",
            "localhost.evil.example",
            "[evil]:1",
            "",
        ] {
            assert!(!ok(h, None, &[]), "{h}");
        }
        assert!(ok("exec.example:443", Some("https://Exec.Example"), &[]));
        assert!(!ok("evil.example:443", Some("https://exec.example"), &[]));
        assert!(ok("exec.lan:10200", None, &["exec.lan"]));
        assert!(ok("exec.lan:10200", None, &["exec.lan:10200"]));
        assert!(!ok("exec.lan:10201", None, &["exec.lan:10200"]));
        // No Host header (HTTP/1.0), and the public card: not refused.
        assert!(refuse_foreign_host(None, None, &[], false).is_none());
        assert!(refuse_foreign_host(Some("evil.example"), None, &[], true).is_none());
        assert_eq!(
            refuse_foreign_host(Some("evil.example"), None, &[], false).map(|(s, _)| s),
            Some(421)
        );
    }

    #[test]
    fn browser_requests_are_refused() {
        let r = |o, t, b, p| refuse_browser_request(o, t, b, p).map(|(s, _)| s);
        assert_eq!(
            r(
                Some("http://evil.example"),
                Some("application/json"),
                true,
                false
            ),
            Some(403)
        );
        assert_eq!(
            r(None, Some("text/plain;charset=UTF-8"), true, false),
            Some(415)
        );
        assert_eq!(r(None, None, true, false), Some(415));
        assert_eq!(
            r(None, Some("Application/JSON; charset=utf-8"), true, false),
            None
        );
        assert_eq!(r(None, None, false, false), None);
        assert_eq!(r(Some("null"), None, false, true), None);
    }

    #[test]
    fn snapshot_urls_follow_the_route_under_any_base() {
        let id = DelegationId::new("d1").unwrap();
        let sid = crate::id::SnapshotId::new("s1").unwrap();
        let want = "http://127.0.0.1:8080/awcp/tasks/d1/snapshots/s1";
        for base in [
            "http://127.0.0.1:8080",
            "http://127.0.0.1:8080/",
            "http://127.0.0.1:8080/awcp",
        ] {
            assert_eq!(snapshot_url(base, &id, &sid), want);
        }
        assert_eq!(
            SNAPSHOT_ROUTE.replace("{id}", "d1").replace("{sid}", "s1"),
            want.trim_start_matches("http://127.0.0.1:8080")
        );
    }

    #[test]
    fn origins() {
        assert!(same_origin(
            "http://127.0.0.1:8080/awcp",
            "http://127.0.0.1:8080/awcp/tasks/x/snapshots/y"
        ));
        assert!(same_origin("HTTP://Host/a", "http://host:80/b"));
        assert!(same_origin("https://[::1]/a", "https://[::1]:443/b"));
        assert!(!same_origin("http://h:1/a", "http://h:2/a"));
        assert!(!same_origin("http://h/a", "https://h/a"));
        assert!(!same_origin("http://h/a", "http://evil/a?http://h/"));
        assert!(!same_origin("http://h/a", "http://h@evil/a"));
        assert!(!same_origin("nonsense", "nonsense"));
        assert!(!same_origin("http://h:99999/a", "http://h:99999/a"));
    }

    #[test]
    fn ok_and_error_replies_decode() {
        use crate::engine::delegator::Reply;
        assert_eq!(decode_reply(200, br#"{"ok":true}"#), Reply::Ok);
        assert!(
            matches!(decode_reply(500, br#"{"error":"boom"}"#), Reply::Failed(m) if m.to_string().contains("boom"))
        );
        assert!(matches!(decode_reply(502, b"<html>"), Reply::Failed(_)));
        let (_, body) = reject(400, None, ErrorInfo::new(ErrorCode::Declined, "bad"));
        assert!(
            matches!(decode_reply(400, body.as_bytes()), Reply::Error(e) if e.code == ErrorCode::Declined)
        );
    }

    #[test]
    fn result_bodies_round_trip() {
        let id = DelegationId::new("dlg_1").unwrap();
        let body = ResultBody {
            status: ResultStatus::Completed,
            completed_at: None,
            outcome: Some(TaskOutcome {
                summary: "s".into(),
                highlights: vec!["a".into()],
            }),
            snapshot: None,
            error: None,
        };
        let v = result_to_value(&body);
        match decode_result(&id, &v).unwrap() {
            FetchedResult::Completed { outcome, snapshot } => {
                assert_eq!(outcome.summary, "s");
                assert!(snapshot.is_none());
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            decode_result(&id, &json!({"status": "not_found"})).unwrap(),
            FetchedResult::NotFound
        );
    }

    /// Issue 48.8: a web page is described in one line, never echoed; a gateway's 502-504
    /// says the executor behind it is unreachable.
    #[test]
    fn answers_that_are_not_json_are_described_not_echoed() {
        use crate::engine::delegator::{Reply, RequestFailure};
        let page = b"\n  <!DOCTYPE HTML>\n<html><body><h1>Error response</h1></body></html>\n";
        match decode_reply(501, page) {
            Reply::Failed(RequestFailure::Unusable(d)) => {
                assert!(
                    d.starts_with("HTTP 501 with a body that is not JSON"),
                    "{d}"
                );
                assert!(d.contains("starting `<!DOCTYPE HTML>`"), "{d}");
                assert!(!d.contains("<body>"), "{d}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decode_reply(502, b"<html>Bad Gateway</html>"),
            Reply::Failed(RequestFailure::Unreachable(_))
        ));
        // A relay's JSON 502 (its executor's tunnel broke) is not the executor's fault either;
        // a 500 without an AWCP error still is.
        match decode_reply(502, br#"{"error":"executor disconnected"}"#) {
            Reply::Failed(RequestFailure::Unreachable(d)) => {
                assert_eq!(d, "HTTP 502 from a gateway: executor disconnected")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decode_reply(500, br#"{"error":"boom"}"#),
            Reply::Failed(RequestFailure::Unusable(_))
        ));
        assert_eq!(describe_foreign_body(b""), "an empty body");
        let long = "x".repeat(100);
        assert!(describe_foreign_body(long.as_bytes()).ends_with("…`)"));
    }
}
