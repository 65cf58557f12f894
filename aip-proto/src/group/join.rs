//! Joining a group, the partner's side: what to answer a JSON-RPC `group` request (the
//! invitation by RPC) and what to do with an inbox invitation are decided here; the driver
//! only connects to the broker and sends what these functions give it.
//!
//! JSON-RPC answers to `group` (SDK 2.1.0 leader): a join is answered with [`join_reply`];
//! a body that is not JSON with -32700, another method with -32601, unreadable params with
//! -32602, a group the partner's policy refuses with [`INVITATION_REJECTED`] (-32020), and a
//! broker it could not reach with [`CONNECTION_FAILED`] (-32021).

use serde::Serialize;
use serde_json::{json, Value};

use super::wire::{
    GroupInfo, InvitationErrorBody, JoinParams, CONNECTION_FAILED, INVITATION_REJECTED,
};
use super::{check_invitation, join_reply, InboxInvitation};
use crate::time::Timestamp;

/// What a partner does with one JSON-RPC `group` request body.
#[derive(Clone, Debug, PartialEq)]
pub enum JoinRpc {
    /// Answer with `body` now, without joining.
    Answer {
        /// The JSON-RPC error response.
        body: Vec<u8>,
        /// The group the partner's policy refused, if that is why (for the application).
        refused_group: Option<String>,
    },
    /// The policy takes the group: connect to the broker `params.server` names and join, then
    /// answer with [`join_rpc_joined`] or [`join_rpc_failed`].
    Join {
        /// The request's id, to answer with.
        id: Value,
        /// What the invitation says.
        params: Box<JoinParams>,
    },
}

#[derive(Serialize)]
struct ErrorObject<'a> {
    code: i64,
    message: &'a str,
    data: &'a Value,
}

#[derive(Serialize)]
struct Envelope<'a, R: Serialize> {
    jsonrpc: &'static str,
    id: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<R>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorObject<'a>>,
}

fn error_body(id: &Value, code: i64, message: &str, data: &Value) -> Vec<u8> {
    let e: Envelope<'_, ()> = Envelope {
        jsonrpc: "2.0",
        id,
        result: None,
        error: Some(ErrorObject {
            code,
            message,
            data,
        }),
    };
    // Serialising these types cannot fail (string keys, no floats but a caller's valid Value).
    serde_json::to_vec(&e).unwrap_or_default()
}

/// Reads a `group` request body and decides, with the partner's policy `take`, whether to
/// join (see [`JoinRpc`]).
pub fn read_join_rpc(body: &[u8], take: impl FnOnce(&GroupInfo) -> bool) -> JoinRpc {
    #[derive(serde::Deserialize)]
    struct Request {
        #[serde(default)]
        id: Value,
        #[serde(default)]
        method: Value,
        params: Option<Value>,
    }
    let answer = |body| JoinRpc::Answer {
        body,
        refused_group: None,
    };
    let Ok(req) = serde_json::from_slice::<Request>(body) else {
        return answer(error_body(
            &Value::Null,
            -32700,
            "Parse error",
            &Value::Null,
        ));
    };
    let id = req.id;
    if req.method.as_str() != Some("group") {
        return answer(error_body(
            &id,
            -32601,
            "Method not found (expected group)",
            &Value::Null,
        ));
    }
    let params: JoinParams = match req.params.map(serde_json::from_value) {
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            return answer(error_body(
                &id,
                -32602,
                &format!("Invalid params: {e}"),
                &Value::Null,
            ))
        }
        None => {
            return answer(error_body(
                &id,
                -32602,
                "Invalid params: missing",
                &Value::Null,
            ))
        }
    };
    if !take(&params.group) {
        let r = rejected_by_policy();
        return JoinRpc::Answer {
            body: error_body(
                &id,
                r.code,
                &r.message,
                r.data.as_ref().unwrap_or(&Value::Null),
            ),
            refused_group: Some(params.group.group_id),
        };
    }
    JoinRpc::Join {
        id,
        params: Box::new(params),
    }
}

/// The answer to a `group` request once `partner` joined (process id `process_id`).
pub fn join_rpc_joined(
    id: &Value,
    partner: &str,
    params: &JoinParams,
    process_id: &str,
) -> Vec<u8> {
    let e = Envelope {
        jsonrpc: "2.0",
        id,
        result: Some(join_reply(partner, params, process_id)),
        error: None,
    };
    serde_json::to_vec(&e).unwrap_or_default()
}

/// The answer to a `group` request whose broker could not be reached; `details` says why
/// (the text of a bad `server`, or `{host, port, reason}` of a failed connection).
pub fn join_rpc_failed(id: &Value, details: Value) -> Vec<u8> {
    let r = connection_failed(details);
    error_body(
        id,
        r.code,
        &r.message,
        r.data.as_ref().unwrap_or(&Value::Null),
    )
}

/// The refusal of a group the partner's policy does not take.
pub fn rejected_by_policy() -> InvitationErrorBody {
    InvitationErrorBody {
        code: INVITATION_REJECTED,
        message: "Invitation rejected by partner policy".into(),
        data: Some(json!({"errorType": "INVITATION_REJECTED"})),
    }
}

/// The refusal of an invitation whose broker could not be reached.
pub fn connection_failed(details: Value) -> InvitationErrorBody {
    InvitationErrorBody {
        code: CONNECTION_FAILED,
        message: "Connection failed".into(),
        data: Some(json!({"errorType": "CONNECTION_FAILED", "details": details})),
    }
}

/// Why an inbox invitation is not taken: a reason for the application and the error the
/// leader is sent ([`super::invitation_error`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// `"policy"`, or what is wrong with the invitation.
    pub reason: String,
    /// The error object for the leader's inbox.
    pub error: InvitationErrorBody,
}

/// Whether to join the group an inbox invitation names at `now`: a valid, unexpired
/// invitation ([`check_invitation`]) that the partner's policy `take`s.
pub fn judge_inbox_invitation(
    now: Timestamp,
    inv: &InboxInvitation,
    take: impl FnOnce(&GroupInfo) -> bool,
) -> Result<(), Refusal> {
    if let Err(error) = check_invitation(now, inv) {
        return Err(Refusal {
            reason: error.message.clone(),
            error,
        });
    }
    if !take(&inv.group) {
        return Err(Refusal {
            reason: "policy".into(),
            error: rejected_by_policy(),
        });
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn answer(j: JoinRpc) -> (Value, Option<String>) {
        match j {
            JoinRpc::Answer {
                body,
                refused_group,
            } => (serde_json::from_slice(&body).unwrap(), refused_group),
            JoinRpc::Join { .. } => panic!("expected an answer"),
        }
    }

    const PARAMS: &str = r#"{"protocol":"rabbitmq:4.0",
        "group":{"groupId":"g1","leader":{"aic":"L"},"partners":[{"aic":"P"}]},
        "server":{"host":"127.0.0.1","port":5672,"vhost":"/","accessToken":"u:p"},
        "amqp":{"exchange":"group_L_g1","exchangeType":"fanout","routingKey":""}}"#;

    fn request(method: &str) -> Vec<u8> {
        format!(r#"{{"jsonrpc":"2.0","id":7,"method":"{method}","params":{PARAMS}}}"#).into_bytes()
    }

    #[test]
    fn a_group_request_the_policy_takes_is_joined_and_answered_as_the_sdk_expects() {
        let JoinRpc::Join { id, params } = read_join_rpc(&request("group"), |_| true) else {
            panic!("expected a join")
        };
        assert_eq!(id, json!(7));
        let v: Value =
            serde_json::from_slice(&join_rpc_joined(&id, "P", &params, "pid-1")).unwrap();
        assert_eq!(v["jsonrpc"], "2.0");
        assert_eq!(v["id"], 7);
        assert_eq!(v["result"]["queueName"], "group_L_g1_P");
        assert_eq!(v["result"]["status"], "joining");
        assert!(v.get("error").is_none());
    }

    #[test]
    fn every_refusal_has_its_json_rpc_code() {
        let (v, refused) = answer(read_join_rpc(b"{not json", |_| true));
        assert_eq!(
            (v["error"]["code"].as_i64(), &v["id"]),
            (Some(-32700), &Value::Null)
        );
        assert_eq!(refused, None);
        let (v, _) = answer(read_join_rpc(&request("rpc"), |_| true));
        assert_eq!(
            (v["error"]["code"].as_i64(), &v["id"]),
            (Some(-32601), &json!(7))
        );
        let (v, _) = answer(read_join_rpc(
            br#"{"id":"a","method":"group","params":{}}"#,
            |_| true,
        ));
        assert_eq!(
            (v["error"]["code"].as_i64(), &v["id"]),
            (Some(-32602), &json!("a"))
        );
        let (v, _) = answer(read_join_rpc(br#"{"id":"a","method":"group"}"#, |_| true));
        assert_eq!(v["error"]["message"], "Invalid params: missing");
        let (v, refused) = answer(read_join_rpc(&request("group"), |g| g.group_id != "g1"));
        assert_eq!(v["error"]["code"].as_i64(), Some(INVITATION_REJECTED));
        assert_eq!(v["error"]["data"]["errorType"], "INVITATION_REJECTED");
        assert_eq!(refused.as_deref(), Some("g1"));
        let v: Value =
            serde_json::from_slice(&join_rpc_failed(&json!(7), json!({"reason": "refused"})))
                .unwrap();
        assert_eq!(v["error"]["code"].as_i64(), Some(CONNECTION_FAILED));
        assert_eq!(v["error"]["data"]["details"]["reason"], "refused");
    }
}
