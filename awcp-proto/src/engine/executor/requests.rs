//! Dispatch of inbound requests: every request is authorised first (one check, [`super::auth`]),
//! then handed to the mechanism it concerns.

use crate::engine::RequestId;
use crate::error::{ErrorCode, ErrorInfo};
use crate::id::DelegationId;
use crate::state::AssignmentTransition;
use crate::time::Timestamp;
use crate::wire::{Dialect, Message};

use super::auth::Credential;
use super::{Executor, Request, Response};

/// [`Request`] with the message unboxed, for matching (short-lived, on the stack).
#[allow(clippy::large_enum_variant)]
enum Req {
    Message(Message, Dialect),
    Cancel(DelegationId),
    Ack(DelegationId),
    Result(DelegationId),
}

impl Executor {
    pub(super) fn on_request(
        &mut self,
        now: Timestamp,
        request: RequestId,
        credential: Option<Credential>,
        body: Request,
    ) {
        let body = match body {
            Request::Message(msg, dialect) => Req::Message(*msg, dialect),
            Request::Cancel(id) => Req::Cancel(id),
            Request::Ack(id) => Req::Ack(id),
            Request::Result(id) => Req::Result(id),
        };
        // One check before dispatch: every request about a delegation (but INVITE, which
        // binds the credential, and messages an executor never takes) needs its credential.
        let bound = match &body {
            Req::Message(
                m @ (Message::Start(_)
                | Message::Error(_)
                | Message::Continue(_)
                | Message::Close(_)),
                dialect,
            ) => Some((m.delegation_id(), *dialect)),
            Req::Cancel(id) | Req::Ack(id) | Req::Result(id) => Some((id, Dialect::Reference)),
            Req::Message(Message::Invite(_) | Message::Accept(_) | Message::Done(_), _) => None,
        };
        if let Some((id, dialect)) = bound {
            if !self.authorized(id, credential.as_ref()) {
                let id = id.clone();
                return self.respond_error(request, &id, super::auth::auth_failed(), dialect, 401);
            }
        }
        match body {
            Req::Message(Message::Invite(invite), dialect) => {
                self.on_invite(now, request, invite, dialect, credential.as_ref())
            }
            Req::Message(Message::Start(start), dialect) => {
                self.on_start(now, request, start, dialect)
            }
            Req::Message(Message::Error(msg), dialect) => {
                let id = msg.delegation_id.clone();
                match self.assignments.get(&id).map(|a| a.state()) {
                    None => self.respond_unknown(request, &id, dialect),
                    Some(st) if st.is_terminal() => self.respond(request, Response::Ok),
                    Some(_) => {
                        self.respond(request, Response::Ok);
                        self.terminate(now, &id, AssignmentTransition::ReceiveError, msg.error);
                    }
                }
            }
            Req::Message(Message::Continue(c), dialect) => {
                self.on_continue(now, request, c, dialect)
            }
            Req::Message(Message::Close(c), dialect) => self.on_close(now, request, c, dialect),
            Req::Message(other, dialect) => {
                let id = other.delegation_id().clone();
                self.event(super::ExecutorEvent::PeerMisbehaved {
                    id: id.clone(),
                    reason: super::Misbehaviour::UnexpectedMessage(other.type_str()),
                });
                self.respond_error(
                    request,
                    &id,
                    ErrorInfo::new(
                        ErrorCode::Declined,
                        format!("an executor does not accept {} messages", other.type_str()),
                    ),
                    dialect,
                    400,
                );
            }
            Req::Cancel(id) => match self.assignments.get(&id).map(|a| a.state()) {
                None => self.respond_unknown(request, &id, Dialect::Reference),
                Some(st) if st.is_terminal() => self.respond_error(
                    request,
                    &id,
                    ErrorInfo::bare(
                        ErrorCode::Declined,
                        format!("delegation {id} is already {st}"),
                    ),
                    Dialect::Reference,
                    409,
                ),
                Some(_) => {
                    self.respond(request, Response::Cancelled);
                    self.terminate(
                        now,
                        &id,
                        AssignmentTransition::Cancel,
                        ErrorInfo::bare(ErrorCode::Cancelled, "cancelled by the delegator"),
                    );
                }
            },
            Req::Ack(id) => {
                self.respond(request, Response::Ok);
                if let Some(a) = self.assignments.get_mut(&id) {
                    if a.state().is_terminal() {
                        let lease_end = a.expires_at.unwrap_or(now.saturating_add(a.ttl));
                        let released = a.released();
                        if !released {
                            // Still releasing: forget as soon as that is done.
                            a.acked = true;
                        }
                        if lease_end > now {
                            self.tombstones.insert(id.clone(), lease_end);
                        }
                        if released {
                            self.forget(&id);
                        }
                    }
                }
            }
            Req::Result(id) => {
                let body = self.result_body(&id);
                self.respond(request, Response::Result(Box::new(body)));
            }
        }
    }
}
