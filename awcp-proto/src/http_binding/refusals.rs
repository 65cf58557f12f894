//! The refusals of requests an engine never sees: what a browser sends, an unknown route, a
//! malformed body or id, a body over the limit, a server shutting down, a snapshot or archive
//! that is not there. Each is decided here (status, code, message, hint) so every driver
//! answers the same way and no driver picks an error code.

use serde_json::{json, Value};

use engine_basics::guard::{self, Refusal};

use crate::error::{ErrorCode, ErrorInfo};
use crate::id::DelegationId;
use crate::wire::decode::DecodeError;

/// Refuses what only a web browser sends to an executor: a request with an `Origin` header
/// (browsers add one to every cross-site request; delegators are programs and send none) or a
/// body that is not `application/json` (a page can POST `text/plain` without a CORS preflight;
/// both AWCP dialects send JSON, and the reference executor ignores other bodies). This keeps
/// web pages from driving an executor that listens on a loopback address without a credential.
/// The public agent card (`public`) is exempt. Returns `(status, error)` to answer with. The
/// rule is `engine_basics::guard`'s, shared with the AIP partner.
pub fn refuse_browser_request(
    origin: Option<&str>,
    content_type: Option<&str>,
    has_body: bool,
    public: bool,
) -> Option<(u16, ErrorInfo)> {
    if public {
        return None;
    }
    guard::refuse_browser_request(origin, content_type, has_body).map(refusal)
}

/// Refuses a request whose `Host` names a host this executor was not told it is reached by:
/// the defence against DNS rebinding, where a web page's own domain name is made to resolve to
/// an executor on a loopback or private address (the page's requests then carry that name, and
/// no `Origin` header on a simple `GET`). Applies only to an executor without a credential
/// (with one, such a page cannot authenticate). Accepted: an IP address literal, `localhost`
/// (and names under `.localhost`), the host of the executor's `public_url`, and the names in
/// `allowed` (`name` or `name:port`). A request without `Host` (HTTP/1.0) is accepted. The
/// public agent card (`public`) is exempt. Returns `(status, error)` to answer with.
pub fn refuse_foreign_host(
    host: Option<&str>,
    public_url: Option<&str>,
    allowed: &[String],
    public: bool,
) -> Option<(u16, ErrorInfo)> {
    if public {
        return None;
    }
    guard::refuse_foreign_host(host, public_url, allowed).map(refusal)
}

/// A shared rule's refusal as the executor answers it.
fn refusal(r: Refusal) -> (u16, ErrorInfo) {
    let hint = match &r {
        Refusal::WebOrigin(_) => "AWCP endpoints are for delegators, not web pages.",
        Refusal::NotJson => "Send `Content-Type: application/json`.",
        Refusal::ForeignHost(_) => {
            "Address the executor by IP address or localhost, set its public URL, or allow \
             the name with --allow-host."
        }
    };
    (
        r.status(),
        ErrorInfo {
            code: ErrorCode::Declined,
            message: r.message(),
            hint: Some(hint.into()),
        },
    )
}

/// An ERROR message body for a request the executor refuses before the engine sees it
/// (malformed JSON, bad id, wrong version, body too large). `id` is used when known.
pub fn reject(status: u16, id: Option<&DelegationId>, error: ErrorInfo) -> (u16, String) {
    let mut v = json!({
        "version": "1",
        "type": "ERROR",
        "code": error.code.as_str(),
        "message": error.message,
    });
    if let Some(id) = id {
        v["delegationId"] = Value::String(id.to_string());
    }
    if let Some(h) = error.hint {
        v["hint"] = Value::String(h);
    }
    (status, crate::wire::encode::to_json(&v))
}

/// The refusal for an undecodable `POST /awcp` body: HTTP 400, code `DECLINED`, the decoder's
/// field-naming message and a hint.
pub fn reject_malformed(err: &DecodeError, id: Option<&DelegationId>) -> (u16, String) {
    reject(
        400,
        id,
        ErrorInfo {
            code: ErrorCode::Declined,
            message: format!("malformed AWCP message: {err}"),
            hint: Some(
                "Send a JSON AWCP v1 message (version \"1\", type INVITE/START/ERROR) as WIRE.md describes.".into(),
            ),
        },
    )
}

/// The refusal for a body over the limit: HTTP 413, code `WORKSPACE_TOO_LARGE`.
pub fn reject_too_large(limit: u64) -> (u16, String) {
    reject(
        413,
        None,
        ErrorInfo {
            code: ErrorCode::WorkspaceTooLarge,
            message: format!("request body exceeds the executor's limit of {limit} bytes"),
            hint: Some(
                "Delegate a smaller workspace, or use the archive URL mode so the archive is fetched instead of inlined.".into(),
            ),
        },
    )
}

/// The refusal for an unknown path or method: HTTP 404/405 with a hint.
pub fn reject_route(status: u16, method: &str, path: &str) -> (u16, String) {
    reject(
        status,
        None,
        ErrorInfo {
            code: ErrorCode::NotFound,
            message: format!("no AWCP endpoint for {method} {path}"),
            hint: Some("Endpoints: POST /awcp, GET /awcp/tasks/{id}/events, GET /awcp/tasks/{id}/result, POST /awcp/tasks/{id}/ack, POST /awcp/cancel/{id}, GET /awcp/status.".into()),
        },
    )
}

/// The refusal for an undecodable `POST /awcp` body ([`reject_malformed`]), naming the
/// delegation when the body carries a valid `delegationId` despite being malformed.
pub fn reject_malformed_body(body: &[u8], err: &DecodeError) -> (u16, String) {
    let id = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("delegationId")?.as_str().map(str::to_owned))
        .and_then(|s| DelegationId::new(s).ok());
    reject_malformed(err, id.as_ref())
}

/// The refusal for a delegation id in a path that is not one (`why`: the id's own error):
/// HTTP 400, code `DECLINED`, with the id syntax as the hint.
pub fn reject_invalid_id(why: impl std::fmt::Display) -> (u16, String) {
    reject(
        400,
        None,
        ErrorInfo {
            code: ErrorCode::Declined,
            message: format!("invalid delegation id: {why}"),
            hint: Some(
                "Delegation ids are 1-128 characters of A-Z a-z 0-9 _ - . (e.g. dlg_<32 hex>)."
                    .into(),
            ),
        },
    )
}

/// The refusal for a request body that broke off or could not be read: HTTP 400, `DECLINED`.
pub fn reject_unreadable_body() -> (u16, String) {
    reject(
        400,
        None,
        ErrorInfo::new(ErrorCode::Declined, "could not read the request body"),
    )
}

/// The refusal of a START whose inline archive is not base64 (found while it was received,
/// before anything was set up): HTTP 400, `TRANSPORT_ERROR`.
pub fn reject_bad_inline_archive(why: &str) -> (u16, String) {
    reject(
        400,
        None,
        ErrorInfo {
            code: ErrorCode::TransportError,
            message: format!("the inline archive (workspaceBase64) is unusable: {why}"),
            hint: Some("Send the workspace archive as standard base64, or by URL.".into()),
        },
    )
}

/// The answer of an executor that could not store a START's inline archive on its own disk
/// while receiving it (`why`: the local error): HTTP 503, `TRANSPORT_ERROR`, so a delegator
/// may retry later or elsewhere.
pub fn reject_archive_not_stored(why: &str) -> (u16, String) {
    reject(
        503,
        None,
        ErrorInfo {
            code: ErrorCode::TransportError,
            message: format!("the executor could not store the inline archive: {why}"),
            hint: Some(
                "Retry later or on another executor; its operator should check its disk space."
                    .into(),
            ),
        },
    )
}

/// The answer of an executor whose engine has stopped (it is shutting down): HTTP 503,
/// `DECLINED`, so a delegator retries elsewhere or later.
pub fn reject_shutting_down() -> (u16, String) {
    reject(
        503,
        None,
        ErrorInfo::new(ErrorCode::Declined, "the executor is shutting down"),
    )
}

/// The refusal for a URL-mode snapshot the executor does not hold (any more): HTTP 404,
/// `NOT_FOUND`.
pub fn reject_no_snapshot(id: &DelegationId, sid: &str) -> (u16, String) {
    reject(
        404,
        Some(id),
        ErrorInfo::new(ErrorCode::NotFound, format!("no snapshot {sid}")),
    )
}

/// The refusal for a file that was granted but is gone from the disk: HTTP 404, `NOT_FOUND`.
pub fn reject_file_gone() -> (u16, String) {
    reject(
        404,
        None,
        ErrorInfo::new(ErrorCode::NotFound, "the file is gone"),
    )
}

/// Why a delegator's archive listener refuses a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveUrlRefusal {
    /// Not `…/archives/{token}`: the listener serves one-time archive URLs and nothing else.
    NotAnArchiveUrl,
    /// A token the delegator does not honour: unknown, used, expired, or not a GET.
    Refused,
}

/// The archive listener's refusal: HTTP 404, `NOT_FOUND` (the same for every refused token,
/// so the answer tells a prober nothing about which tokens exist).
pub fn reject_archive_url(why: ArchiveUrlRefusal) -> (u16, String) {
    let what = match why {
        ArchiveUrlRefusal::NotAnArchiveUrl => "this listener serves one-time archive URLs only",
        ArchiveUrlRefusal::Refused => "unknown, used or expired archive URL",
    };
    reject(404, None, ErrorInfo::new(ErrorCode::NotFound, what))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed((status, body): (u16, String)) -> (u16, Value) {
        (status, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    #[test]
    fn every_refusal_is_an_error_message_with_its_status_and_code() {
        let id = DelegationId::new("dlg_1").unwrap_or_else(|_| unreachable!());
        let err = match crate::wire::decode_message(
            b"{\"version\":\"1\",\"type\":\"INVITE\",\"delegationId\":\"dlg_1\"}",
        ) {
            Err(e) => e,
            Ok(_) => unreachable!("an INVITE without a task is malformed"),
        };
        let cases = [
            (reject_invalid_id("too long"), 400, "DECLINED"),
            (reject_unreadable_body(), 400, "DECLINED"),
            (reject_shutting_down(), 503, "DECLINED"),
            (reject_no_snapshot(&id, "snap_1"), 404, "NOT_FOUND"),
            (reject_file_gone(), 404, "NOT_FOUND"),
            (
                reject_archive_url(ArchiveUrlRefusal::NotAnArchiveUrl),
                404,
                "NOT_FOUND",
            ),
            (
                reject_archive_url(ArchiveUrlRefusal::Refused),
                404,
                "NOT_FOUND",
            ),
            (
                reject_malformed_body(b"{\"delegationId\":\"dlg_1\"}", &err),
                400,
                "DECLINED",
            ),
        ];
        for (got, status, code) in cases {
            let (s, v) = parsed(got);
            assert_eq!(s, status, "{v}");
            assert_eq!(v["type"], "ERROR", "{v}");
            assert_eq!(v["code"], code, "{v}");
            assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
        }
        // A malformed body names its delegation when its id is valid, and only then.
        let (_, v) = parsed(reject_malformed_body(b"{\"delegationId\":\"dlg_1\"}", &err));
        assert_eq!(v["delegationId"], "dlg_1");
        let (_, v) = parsed(reject_malformed_body(b"{\"delegationId\":\"../x\"}", &err));
        assert!(v.get("delegationId").is_none(), "{v}");
        let (_, v) = parsed(reject_malformed_body(b"not json", &err));
        assert!(v.get("delegationId").is_none(), "{v}");
        // The id syntax is the hint of a bad id; a snapshot refusal names its delegation.
        let (_, v) = parsed(reject_invalid_id("x"));
        assert!(v["hint"].as_str().is_some_and(|h| h.contains("1-128")));
        let (_, v) = parsed(reject_no_snapshot(&id, "snap_1"));
        assert_eq!(v["delegationId"], "dlg_1");
    }
}
