//! # Group mode: one leader, several partners, one RabbitMQ fanout exchange
//!
//! Sans-IO like the rest of the crate: [`GroupLeader`] and [`GroupMember`] take deliveries
//! (bodies read from a queue) and application calls, and say what to publish on which
//! exchange with which routing key ([`Publish`]); the AMQP driver (`aip-driver`, feature
//! `amqp`) declares, publishes, consumes and acks.
//!
//! Broker layout (acps-sdk 2.1.0, spec v02.01), names from [`wire`]:
//!
//! | object | name | declared |
//! |---|---|---|
//! | group exchange | `group_{leader}_{gid}` | fanout, durable, auto-delete (by the leader) |
//! | member queue | `group_{leader}_{gid}_{member}` | durable, non-exclusive, auto-delete, bound with `""` |
//! | inbox exchange | `inbox.topic` | topic, durable |
//! | inbox queue | `inbox_{AIC}` | durable, `x-expires` 60 d, `x-message-ttl` 7 d, bound with its name |
//!
//! Messages are published with `content_type application/json`, `delivery_mode 2` and a
//! `message_id`, no headers, routing key `""` on the group exchange.
//!
//! Joining: the leader either POSTs the JSON-RPC `group` method ([`GroupLeader::invite_rpc`],
//! the partner answers with [`join_reply`]) or publishes an [`wire::InboxInvitation`] to
//! the partner's inbox ([`GroupLeader::invite_inbox`]); the partner checks it with
//! [`check_invitation`] and either joins or sends [`invitation_error`] to the leader's inbox.

mod join;
mod leader;
pub mod link;
mod member;
#[cfg(test)]
mod tests;
pub mod wire;

use std::collections::{BTreeSet, VecDeque};

pub use join::{
    connection_failed, join_rpc_failed, join_rpc_joined, judge_inbox_invitation, read_join_rpc,
    rejected_by_policy, JoinRpc, Refusal,
};
pub use leader::{
    Connection, GroupCommand, GroupLeader, GroupPhase, LeaderConfig, LeaderEvent, LeaderOutput,
    MemberView,
};
pub use link::{BrokerLink, LinkInput};
pub use member::{
    GroupMember, LeaveReason, MemberConfig, MemberEvent, MemberOutput, MemberPhase, Mention,
};
pub use wire::{
    decode_group_message, decode_inbox_message, encode_group_message, exchange_name,
    inbox_queue_name, queue_name, GroupMessage, InboxInvitation, InboxMessage, JoinParams,
    JoinReply, MemberStatus, MgmtKind,
};

use crate::time::Timestamp;
use wire::{InvitationError, InvitationErrorBody, INBOX_EXCHANGE, INVITATION_CLOCK_SKEW_MS};

/// One message to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Publish {
    /// The exchange (`group_…` or `inbox.topic`).
    pub exchange: String,
    /// The routing key (`""` on a group exchange, `inbox_{AIC}` on `inbox.topic`).
    pub routing_key: String,
    /// The AMQP `message_id` property (the body's `id`).
    pub message_id: String,
    /// The JSON body (`content_type application/json`, persistent).
    pub body: Vec<u8>,
}

/// A bounded set of recently seen message ids (duplicate deliveries are dropped).
#[derive(Debug)]
pub(crate) struct SeenIds {
    set: BTreeSet<String>,
    order: VecDeque<String>,
    cap: usize,
}

impl SeenIds {
    pub(crate) fn new(cap: usize) -> Self {
        SeenIds {
            set: BTreeSet::new(),
            order: VecDeque::new(),
            cap,
        }
    }

    /// `false` if `sender`'s message `id` was seen already.
    pub(crate) fn insert(&mut self, sender: &str, id: &str) -> bool {
        if id.is_empty() {
            return true;
        }
        let key = format!("{sender}\u{0}{id}");
        if !self.set.insert(key.clone()) {
            return false;
        }
        self.order.push_back(key);
        if self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }
}

/// Reads one delivery for the agent `me` in `group`: decodes it and drops what the agent
/// must not act on (not a group message, its own echo, another group's, no sender, or a
/// duplicate: ids are unique per sender, so duplicates are recognised per sender and id).
pub(crate) fn admit(
    body: &[u8],
    me: &str,
    group: &str,
    seen: &mut SeenIds,
) -> Option<(String, GroupMessage)> {
    admit_addressed(body, me, group, seen, |_| true)
}

/// [`admit`] for an agent that acts only on what `addressed` says is meant for it: a message
/// meant for others is dropped without being remembered, so a copy of the same message that
/// is meant for this agent (a command published again to one member) is still taken.
pub(crate) fn admit_addressed(
    body: &[u8],
    me: &str,
    group: &str,
    seen: &mut SeenIds,
    addressed: impl FnOnce(&GroupMessage) -> bool,
) -> Option<(String, GroupMessage)> {
    let (msg, _) = decode_group_message(body).ok()?;
    let sender = msg.sender_id()?.to_owned();
    if sender == me || msg.group_id().is_some_and(|g| g != group) || !addressed(&msg) {
        return None;
    }
    if let Some(id) = msg.message_id() {
        if !seen.insert(&sender, id) {
            return None;
        }
    }
    Some((sender, msg))
}

/// Whether an inbox invitation may be taken at `now`: not expired (with the SDK's 30 s of
/// clock skew), a valid group id, a fanout exchange.
pub fn check_invitation(now: Timestamp, inv: &InboxInvitation) -> Result<(), InvitationErrorBody> {
    let bad = |m: String| InvitationErrorBody {
        code: wire::INVITATION_REJECTED,
        message: m,
        data: Some(serde_json::json!({"errorType": "INVALID_INVITATION"})),
    };
    let expires = Timestamp::parse_rfc3339(&inv.expires_at)
        .map_err(|e| bad(format!("bad expiresAt: {e}")))?;
    let limit = expires.saturating_add(std::time::Duration::from_millis(INVITATION_CLOCK_SKEW_MS));
    if now > limit {
        return Err(InvitationErrorBody {
            code: wire::INVITATION_REJECTED,
            message: "Invitation expired".into(),
            data: Some(serde_json::json!({"errorType": "INVITATION_EXPIRED"})),
        });
    }
    if !wire::is_valid_group_id(&inv.group.group_id) {
        return Err(bad(format!("invalid group id {:?}", inv.group.group_id)));
    }
    if !inv.amqp.exchange_type.eq_ignore_ascii_case("fanout") {
        return Err(bad(format!(
            "exchange type {} is not fanout",
            inv.amqp.exchange_type
        )));
    }
    Ok(())
}

/// The rejection a partner publishes to the leader's inbox.
pub fn invitation_error(
    partner: &str,
    inv: &InboxInvitation,
    error: InvitationErrorBody,
) -> Publish {
    let e = InvitationError {
        ty: "group-invitation-error".into(),
        group_id: inv.group.group_id.clone(),
        partner_aic: partner.to_owned(),
        invitation_token: inv.invitation_token.clone(),
        error,
    };
    Publish {
        exchange: INBOX_EXCHANGE.into(),
        routing_key: inbox_queue_name(&inv.group.leader.aic),
        message_id: format!("inv-error-{}", inv.invitation_token),
        body: serde_json::to_vec(&e).unwrap_or_default(),
    }
}

/// The reply body to a JSON-RPC `group` request once the partner joined: the v02.00 shape
/// the SDK 2.1.0 leader validates, plus v02.01's `status:"joining"` and `groupId`.
pub fn join_reply(partner: &str, params: &JoinParams, process_id: &str) -> JoinReply {
    JoinReply {
        connection_name: format!("agent-{partner}"),
        vhost: params.server.vhost.clone(),
        node_name: "unknown".into(),
        queue_name: queue_name(&params.group.leader.aic, &params.group.group_id, partner),
        process_id: Some(process_id.to_owned()),
        status: Some("joining".into()),
        group_id: Some(params.group.group_id.clone()),
    }
}
