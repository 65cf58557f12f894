//! The handshake: INVITE (authenticated, de-duplicated, admitted by [`super::policy`]) →
//! work directory allocated → ACCEPT (or the application's decision) → START.

use std::collections::BTreeSet;

use crate::engine::timers::DelegationTimers as _;
use crate::engine::{RequestId, UsageError};
use crate::error::{ErrorCode, ErrorInfo};
use crate::id::DelegationId;
use crate::state::{AssignmentMachine, AssignmentState, AssignmentTransition};
use crate::time::Timestamp;
use crate::wire::{Accept, Dialect, ExecutorConstraints, Invite};

use super::assignment::{Assignment, ExecutorTimer as Timer, Phase};
use super::auth::{self, Credential};
use super::{AllocationFailure, Executor, ExecutorEvent, ExecutorOutput, Misbehaviour, Response};

impl Executor {
    // ----------------------------------------------------------------------------------------
    // Application calls

    /// Accepts an INVITE that waits for a decision (`auto_accept` off).
    pub fn accept_invite(&mut self, now: Timestamp, id: &DelegationId) -> Result<(), UsageError> {
        self.tick(now);
        if self
            .finish(id, |p| matches!(p, Phase::AwaitingDecision))?
            .is_none()
        {
            return Err(UsageError::InvalidState(format!(
                "{id} is not waiting for a decision"
            )));
        }
        self.send_accept(now, id);
        Ok(())
    }

    /// Declines an INVITE that waits for a decision (`auto_accept` off).
    pub fn decline_invite(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        reason: ErrorInfo,
    ) -> Result<(), UsageError> {
        self.tick(now);
        let Some((a, _)) = self.finish(id, |p| matches!(p, Phase::AwaitingDecision))? else {
            return Err(UsageError::InvalidState(format!(
                "{id} is not waiting for a decision"
            )));
        };
        let requests = std::mem::take(&mut a.invite_requests);
        let dialect = a.dialect;
        for r in requests {
            self.respond_error(r, id, reason.clone(), dialect, 200);
        }
        self.terminate(now, id, AssignmentTransition::ReceiveError, reason);
        Ok(())
    }

    // ----------------------------------------------------------------------------------------
    // INVITE

    pub(super) fn on_invite(
        &mut self,
        now: Timestamp,
        request: RequestId,
        mut invite: Invite,
        dialect: Dialect,
        header: Option<&Credential>,
    ) {
        let id = invite.delegation_id.clone();
        let declined = |msg: String| ErrorInfo::new(ErrorCode::Declined, msg);
        // Authentication first: nothing else is revealed to an unauthenticated caller.
        let bound = match auth::authenticate_invite(
            self.config.auth.as_ref(),
            &id,
            header,
            invite.auth.as_ref(),
        ) {
            Ok(b) => b,
            Err(e) => return self.respond_error(request, &id, e, dialect, 200),
        };
        // The secret is not kept (nor journalled, nor handed to the application): only its
        // digest, in `bound`.
        invite.auth = None;
        // A duplicate INVITE arriving after the assignment was acknowledged and forgotten
        // must not start the task again while its lease (and a duplicate START) is valid.
        self.tombstones.retain(|_, until| *until > now);
        if self.tombstones.contains_key(&id) {
            return self.respond_error(
                request,
                &id,
                declined(format!("delegation {id} is already finished")),
                dialect,
                200,
            );
        }
        // A repeated INVITE (retry, duplicate delivery) is answered idempotently.
        if let Some(a) = self.assignments.get_mut(&id) {
            if *a.invite != invite {
                self.event(ExecutorEvent::PeerMisbehaved {
                    id: id.clone(),
                    reason: Misbehaviour::ConflictingInvite,
                });
                return self.respond_error(
                    request,
                    &id,
                    declined(format!(
                        "delegation {id} exists with a different invitation"
                    )),
                    dialect,
                    200,
                );
            }
            match (a.state(), &a.phase, a.accept.clone()) {
                (AssignmentState::Pending, _, Some(accept)) => {
                    return self.respond(request, Response::Accept(accept, dialect));
                }
                (AssignmentState::Pending, Phase::Allocating | Phase::AwaitingDecision, None) => {
                    a.invite_requests.push(request);
                    return;
                }
                (st, _, _) => {
                    return self.respond_error(
                        request,
                        &id,
                        declined(format!("delegation {id} is already {st}")),
                        dialect,
                        200,
                    );
                }
            }
        }
        if self.shutting_down {
            return self.respond_error(request, &id, super::policy::shutting_down(), dialect, 200);
        }
        let admitted = match super::policy::admit(&invite, &self.config, self.live_count()) {
            Ok(a) => a,
            Err(e) => return self.respond_error(request, &id, e, dialect, 200),
        };
        let work_dir = self.work_dir_for(&id);
        tracing::debug!(delegation = %id, "invitation passed policy");
        let mut admitted = admitted;
        if dialect == Dialect::Seed {
            // A seed delegator's result rides on `done`, which a round does not send.
            admitted
                .features
                .retain(|f| *f != crate::wire::Feature::MultiRound);
        }
        let transport = admitted.transport.clone();
        let rounds = admitted
            .features
            .contains(&crate::wire::Feature::MultiRound)
            || (self.config.reference_rounds
                && invite.features.is_empty()
                && dialect == Dialect::Reference
                && !transport.is_live());
        self.assignments.insert(
            id.clone(),
            Box::new(Assignment {
                invite: std::sync::Arc::new(invite),
                invite_record: Default::default(),
                dialect,
                machine: AssignmentMachine::new(),
                phase: Phase::Allocating,
                work_dir: work_dir.clone(),
                auth: bound,
                transport: admitted.transport,
                access: admitted.access,
                ttl: admitted.ttl,
                features: admitted.features,
                retention: admitted.retention,
                invite_requests: vec![request],
                accept: None,
                started_at: None,
                expires_at: None,
                release_error: None,
                subscribers: BTreeSet::new(),
                outcome: None,
                error: None,
                snapshot: None,
                acked: false,
                terminal_event: None,
                completed_at: None,
                origin: None,
                rounds,
                round: 1,
                round_done: None,
                task_dir: None,
                round_task: None,
                upload_url: None,
                pushes_result: false,
                earlier: Default::default(),
                events: Default::default(),
            }),
        );
        // Journalled before the directory exists: after a crash mid-allocation the restarted
        // executor knows the directory may be its own.
        self.event(ExecutorEvent::RecordChanged { id: id.clone() });
        self.push(ExecutorOutput::AllocateWorkDir {
            id,
            work_dir,
            transport,
        });
    }

    pub(super) fn on_allocated(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        result: Result<(), AllocationFailure>,
    ) -> Result<(), UsageError> {
        let result = result.map_err(|f| f.to_error_info());
        let Some((a, _)) = self.finish(id, |p| matches!(p, Phase::Allocating))? else {
            return Ok(());
        };
        if a.state().is_terminal() {
            // Ended (ERROR, cancel, shutdown) while the work directory was being allocated:
            // release what was allocated instead of accepting.
            match result {
                Ok(()) => {
                    self.release(id);
                }
                Err(_) => {
                    a.phase = Phase::Released { unstopped: None };
                    let (state, error, retention) = (a.state(), a.error.clone(), a.retention);
                    self.core
                        .outputs
                        .push_back(ExecutorOutput::Event(ExecutorEvent::Ended {
                            id: id.clone(),
                            state,
                            error,
                        }));
                    self.core.timers.set(
                        (id.clone(), Timer::Retention),
                        now.saturating_add(retention),
                    );
                }
            }
            return Ok(());
        }
        match result {
            Err(e) => {
                let requests = std::mem::take(&mut a.invite_requests);
                let dialect = a.dialect;
                for r in requests {
                    self.respond_error(r, id, e.clone(), dialect, 200);
                }
                // Nothing was left behind: forget the record.
                self.assignments.remove(id);
                self.core.timers.cancel_all(id);
                self.core
                    .outputs
                    .push_back(ExecutorOutput::Event(ExecutorEvent::Forgotten {
                        id: id.clone(),
                    }));
            }
            Ok(()) => {
                let invite = std::sync::Arc::clone(&a.invite);
                if self.config.auto_accept {
                    self.core.outputs.push_back(ExecutorOutput::Event(
                        ExecutorEvent::InviteReceived {
                            id: id.clone(),
                            invite,
                            needs_decision: false,
                        },
                    ));
                    self.send_accept(now, id);
                } else {
                    let Some(a) = self.assignments.get_mut(id) else {
                        return Ok(());
                    };
                    a.phase = Phase::AwaitingDecision;
                    self.core.outputs.push_back(ExecutorOutput::Event(
                        ExecutorEvent::InviteReceived {
                            id: id.clone(),
                            invite,
                            needs_decision: true,
                        },
                    ));
                    let at = now.saturating_add(a.ttl);
                    self.core.timers.set((id.clone(), Timer::StartDeadline), at);
                }
            }
        }
        Ok(())
    }

    fn send_accept(&mut self, now: Timestamp, id: &DelegationId) {
        let Some(a) = self.assignments.get_mut(id) else {
            return;
        };
        let accept = Accept {
            delegation_id: id.clone(),
            work_dir: a.work_dir.clone(),
            constraints: Some(ExecutorConstraints {
                accepted_access_mode: Some(a.access),
                max_ttl_seconds: Some(a.ttl.as_secs()),
                sandbox_profile: Some(self.config.sandbox),
            }),
            retention_ms: (a.dialect == Dialect::Reference)
                .then(|| u64::try_from(a.retention.as_millis()).unwrap_or(u64::MAX)),
            features: a.features.clone(),
        };
        let requests = std::mem::take(&mut a.invite_requests);
        let dialect = a.dialect;
        // START must come soon: a pending assignment holds a slot (and a work directory).
        let at = now.saturating_add(a.ttl.min(self.config.start_timeout));
        let replies: Vec<_> = requests
            .into_iter()
            .map(|r| (r, Response::Accept(accept.clone(), dialect)))
            .collect();
        a.accept = Some(accept);
        for (r, reply) in replies {
            self.respond(r, reply);
        }
        self.core.timers.set((id.clone(), Timer::StartDeadline), at);
    }

    pub(super) fn on_start(
        &mut self,
        now: Timestamp,
        request: RequestId,
        start: crate::wire::Start,
        dialect: Dialect,
    ) {
        let id = start.delegation_id.clone();
        let Some(a) = self.assignments.get_mut(&id) else {
            return self.respond_unknown(request, &id, dialect);
        };
        match a.state() {
            AssignmentState::Active | AssignmentState::Idle => {
                return self.respond(request, Response::Ok)
            }
            st if st.is_terminal() => {
                let e = a.error.clone().unwrap_or_else(|| {
                    ErrorInfo::bare(
                        ErrorCode::Declined,
                        format!("delegation {id} is already {st}"),
                    )
                });
                return self.respond_error(request, &id, e, dialect, 409);
            }
            AssignmentState::Pending | AssignmentState::Completed | AssignmentState::Error => {}
        }
        if a.accept.is_none() {
            self.event(ExecutorEvent::PeerMisbehaved {
                id: id.clone(),
                reason: Misbehaviour::StartBeforeAccept,
            });
            return self.respond_error(
                request,
                &id,
                ErrorInfo::new(ErrorCode::Declined, "the invitation has not been accepted"),
                dialect,
                409,
            );
        }
        if start.handle.kind() != a.transport {
            let misbehaviour = Misbehaviour::StartWithOtherTransport {
                agreed: a.transport.clone(),
                got: start.handle.kind(),
            };
            self.event(ExecutorEvent::PeerMisbehaved {
                id: id.clone(),
                reason: misbehaviour,
            });
            let Some(a) = self.assignments.get(&id) else {
                return;
            };
            let e = ErrorInfo::new(
                ErrorCode::SetupFailed,
                format!(
                    "START carries a {} handle but {} was agreed",
                    start.handle.kind().as_str(),
                    a.transport.as_str()
                ),
            );
            self.respond_error(request, &id, e.clone(), dialect, 400);
            self.terminate(now, &id, AssignmentTransition::ReceiveError, e);
            return;
        }
        if start.lease.expires_at <= now {
            let e = ErrorInfo::new(
                ErrorCode::StartExpired,
                "the lease had expired when START arrived",
            );
            self.respond_error(request, &id, e.clone(), dialect, 200);
            self.terminate(now, &id, AssignmentTransition::Cancel, e);
            return;
        }
        if let crate::wire::TransportHandle::Storage(h) = &start.handle {
            // URLs that are dead already would only fail the download later, less clearly.
            if h.expires_at <= now {
                let e = ErrorInfo::new(
                    ErrorCode::StartExpired,
                    format!(
                        "the storage URLs had expired when START arrived (expiresAt {})",
                        h.expires_at
                    ),
                );
                self.respond_error(request, &id, e.clone(), dialect, 200);
                self.terminate(now, &id, AssignmentTransition::Cancel, e);
                return;
            }
        }
        let Some(a) = self.assignments.get_mut(&id) else {
            return;
        };
        match &start.handle {
            crate::wire::TransportHandle::Storage(h) => a.upload_url = Some(h.upload_url.clone()),
            crate::wire::TransportHandle::Git(_) => a.pushes_result = true,
            crate::wire::TransportHandle::Archive(_) | crate::wire::TransportHandle::Sshfs(_) => {}
        }
        let expires_at = start.lease.expires_at.min(now.saturating_add(a.ttl));
        a.access = a.access.min(start.lease.access_mode);
        a.started_at = Some(now);
        a.expires_at = Some(expires_at);
        a.phase = Phase::SettingUp;
        let out = ExecutorOutput::SetupTransport {
            id: id.clone(),
            work_dir: a.work_dir.clone(),
            handle: Box::new(start.handle),
            access_mode: a.access,
            resources: a.invite.resources.clone(),
        };
        self.transition(now, &id, AssignmentTransition::ReceiveStart);
        self.core.timers.cancel(&(id.clone(), Timer::StartDeadline));
        self.core.timers.set((id.clone(), Timer::Lease), expires_at);
        self.respond(request, Response::Ok);
        self.core.outputs.push_back(out);
    }
}

#[cfg(test)]
mod allocation_failure_tests {
    #![allow(clippy::wildcard_enum_match_arm)]

    use super::*;
    use crate::engine::executor::tests::invite;
    use crate::engine::executor::{
        AllocationFailure, ExecutorConfig, ExecutorInput, ExecutorOutput, Request, Response,
    };
    use crate::engine::RequestId;
    use crate::error::ErrorCode;
    use crate::wire::Message;

    const T0: Timestamp = Timestamp::from_unix_millis(1_750_000_000_000);

    /// The code the INVITE is answered with when allocating its work directory fails so.
    fn answered_with(failure: AllocationFailure) -> (ErrorCode, Option<String>) {
        let mut ex = Executor::new(ExecutorConfig::default());
        let id = DelegationId::new("alloc-fail").unwrap();
        ex.handle(
            T0,
            ExecutorInput::Request {
                request: RequestId(1),
                credential: None,
                origin: None,
                body: Request::Message(Box::new(Message::Invite(invite(&id))), Dialect::Reference),
            },
        )
        .unwrap();
        ex.handle(
            T0,
            ExecutorInput::WorkDirAllocated {
                id: id.clone(),
                result: Err(failure),
            },
        )
        .unwrap();
        let answer = std::iter::from_fn(|| ex.poll_output()).find_map(|o| match o {
            ExecutorOutput::Respond {
                request: RequestId(1),
                response: Response::Error { message, .. },
            } => Some((message.error.code, message.error.hint)),
            _ => None,
        });
        assert!(ex.assignment(&id).is_none(), "nothing is kept");
        answer.unwrap()
    }

    #[test]
    fn a_work_directory_that_cannot_be_had_declines_the_invite_with_the_spec_code() {
        assert_eq!(
            answered_with(AllocationFailure::DependencyMissing {
                message: "sshfs is not installed".into(),
                hint: "apt install sshfs".into(),
            }),
            (ErrorCode::DepMissing, Some("apt install sshfs".into()))
        );
        assert_eq!(
            answered_with(AllocationFailure::NotEmpty).0,
            ErrorCode::WorkdirDenied
        );
        assert_eq!(
            answered_with(AllocationFailure::CannotCreate("read-only".into())).0,
            ErrorCode::WorkdirDenied
        );
    }
}
