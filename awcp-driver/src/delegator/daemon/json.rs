//! The daemon API's error answers, and the `POST /delegate` body read into parameters (the
//! JSON shapes themselves are [`super::api`]).

use super::*;

pub(super) fn err(status: u16, e: &ErrorInfo) -> http::Response<ResponseBody> {
    json_response(
        status,
        json!({"error": e.message, "code": e.code.as_str(), "hint": e.hint}).to_string(),
    )
}

pub(super) fn bad(msg: impl Into<String>) -> http::Response<ResponseBody> {
    json_response(400, json!({"error": msg.into()}).to_string())
}

pub(super) fn usage(e: DelegatorError) -> http::Response<ResponseBody> {
    use awcp_proto::engine::UsageError;
    match e {
        DelegatorError::Protocol(info) => err(400, &info),
        DelegatorError::Usage(UsageError::UnknownDelegation(id)) => super::not_found(&id),
        DelegatorError::Usage(UsageError::UnknownSnapshot {
            delegation,
            snapshot,
        }) => json_response(
            404,
            json!({"error": format!("unknown snapshot {snapshot} in delegation {delegation}"),
                   "hint": format!("List its snapshots with `awcp snapshots {delegation}`.")})
            .to_string(),
        ),
        other => bad(other.to_string()),
    }
}

/// `body` as a value of the daemon API's JSON.
pub(super) fn ok_json<T: serde::Serialize>(body: &T) -> http::Response<ResponseBody> {
    match serde_json::to_string(body) {
        Ok(text) => json_response(200, text),
        Err(e) => json_response(
            500,
            json!({"error": format!("encoding the answer: {e}")}).to_string(),
        ),
    }
}

/// The parameters a `POST /delegate` body asks for, or what is wrong with it.
pub(super) fn parse_delegate(body: &[u8]) -> Result<DelegateParams, String> {
    serde_json::from_slice::<api::DelegateBody>(body)
        .map_err(|e| match e.is_data() {
            true => format!("malformed request: {e}"),
            false => format!("malformed JSON: {e}"),
        })?
        .into_params()
}
