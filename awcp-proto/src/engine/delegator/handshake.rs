//! From `delegate` to START: admission, INVITE, ACCEPT, transport preparation, the event
//! stream opening, and START once both are ready.

use super::*;

impl Delegator {
    /// Creates a delegation in `created` and asks for the admission scan.
    pub fn delegate(&mut self, now: Timestamp, req: DelegateRequest) -> Result<(), UsageError> {
        self.tick(now);
        if self.delegations.contains_key(&req.id) {
            return Err(UsageError::AlreadyExists(req.id));
        }
        if req.ttl_seconds == 0 {
            return Err(UsageError::InvalidRequest(
                "ttl_seconds must be positive".into(),
            ));
        }
        if req.resources.is_empty() {
            return Err(UsageError::InvalidRequest(
                "at least one resource is required".into(),
            ));
        }
        let mut names: Vec<_> = req.resources.iter().map(|r| &r.name).collect();
        names.sort();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err(UsageError::InvalidRequest(
                "resource names must be unique".into(),
            ));
        }
        let mut req = req;
        // No resource is lent with more access than the delegation asks for.
        for r in &mut req.resources {
            r.mode = r.mode.min(req.access_mode);
        }
        let id = req.id.clone();
        tracing::debug!(delegation = %id, "delegation created");
        self.delegations
            .insert(id.clone(), Delegation::new(now, req));
        self.core
            .outputs
            .push_back(DelegatorOutput::ScanWorkspace { id });
        Ok(())
    }

    pub(super) fn on_scan(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        result: Result<WorkspaceStats, ScanFailure>,
    ) -> Result<(), UsageError> {
        let result = result.map_err(|f| f.to_error_info());
        let d = self.get_mut(id)?;
        if d.state() != DelegationState::Created {
            return Ok(());
        }
        let allow_sensitive = d.req.allow_sensitive;
        if let Ok(stats) = &result {
            d.not_shipped = stats.not_shipped.clone();
            d.not_shipped_count = stats.not_shipped_count;
        }
        let verdict = result
            .and_then(|stats| admission_verdict(&stats, &self.config.admission, allow_sensitive));
        if let Err(e) = verdict {
            tracing::info!(delegation = %id, code = %e.code, "admission refused: {}", e.message);
            self.transition(now, id, DelegationTransition::SendError, Some(e));
            self.wind_down(now, id);
            return Ok(());
        }
        let Some(d) = self.delegations.get_mut(id) else {
            return Ok(());
        };
        let expires_at = now.saturating_add(Duration::from_secs(d.req.ttl_seconds));
        d.expires_at = Some(expires_at);
        d.phase = Phase::Inviting {
            invited_at: Some(now),
        };
        let invite = Invite {
            export_name: (d.req.dialect == Dialect::Seed).then(|| format!("awcp/{id}")),
            retention_ms: Some(
                u64::try_from(self.config.retention.as_millis()).unwrap_or(u64::MAX),
            ),
            features: self.config.features.clone(),
            ..invite_of(id, &d.req)
        };
        let peer = d.req.peer.clone();
        let dialect = d.req.dialect;
        self.transition(now, id, DelegationTransition::SendInvite, None);
        self.core.timers.set(id, Timer::Lease, expires_at);
        self.core.outputs.push_back(DelegatorOutput::SendMessage {
            id: id.clone(),
            to: Outbound::Invite,
            peer,
            message: Message::Invite(invite),
            dialect,
        });
        Ok(())
    }

    pub(super) fn on_reply(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        to: Outbound,
        reply: Reply,
    ) -> Result<(), UsageError> {
        let d = self.get_mut(id)?;
        let state = d.state();
        match (to, reply) {
            (Outbound::Invite, Reply::Accept(accept)) => {
                if state != DelegationState::Invited {
                    // We gave up meanwhile (cancel, expiry): free the executor's assignment.
                    if state.is_terminal() {
                        self.send_error(
                            id,
                            ErrorInfo::bare(
                                ErrorCode::Cancelled,
                                format!("delegation already {state}"),
                            ),
                        );
                    }
                    return Ok(());
                }
                self.on_accept(now, id, accept);
            }
            (Outbound::Invite, Reply::Error(e)) => {
                if state == DelegationState::Invited {
                    self.transition(now, id, DelegationTransition::ReceiveError, Some(e));
                    self.wind_down(now, id);
                }
            }
            (Outbound::Invite, other) => {
                if state == DelegationState::Invited {
                    self.request_failed(now, id, Outbound::Invite, other);
                }
            }
            (Outbound::Start, Reply::Ok) => {}
            (Outbound::Start, Reply::Error(e)) => {
                if matches!(state, DelegationState::Started | DelegationState::Running) {
                    self.transition(now, id, DelegationTransition::ReceiveError, Some(e));
                    self.wind_down(now, id);
                }
            }
            (Outbound::Start, other) => {
                if state == DelegationState::Started {
                    self.request_failed(now, id, Outbound::Start, other);
                }
            }
            (Outbound::Error | Outbound::Cancel | Outbound::Ack, _) => {}
        }
        Ok(())
    }

    /// INVITE or START got no usable answer (network failure or an unexpected body): the
    /// executor may have it, so abandon with ERROR.
    pub(super) fn request_failed(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        to: Outbound,
        reply: Reply,
    ) {
        let what = match to {
            Outbound::Invite => "INVITE",
            Outbound::Start => "START",
            Outbound::Error => "ERROR",
            Outbound::Cancel => "cancel",
            Outbound::Ack => "ack",
        };
        // Said as it happened: a timeout is TIMEOUT, not reaching the executor is UNREACHABLE.
        let code = match &reply {
            Reply::Failed(RequestFailure::TimedOut(_)) => ErrorCode::Timeout,
            Reply::Failed(RequestFailure::Unreachable(_) | RequestFailure::Network(_)) => {
                ErrorCode::Unreachable
            }
            Reply::Failed(RequestFailure::Unusable(_))
            | Reply::Accept(_)
            | Reply::Error(_)
            | Reply::Ok => ErrorCode::Timeout,
        };
        let why = match reply {
            Reply::Failed(RequestFailure::Unusable(detail)) => {
                self.peer_misbehaved(
                    id,
                    PeerMisbehavior::UnusableReply {
                        to,
                        detail: detail.clone(),
                    },
                );
                detail
            }
            Reply::Failed(failure) => failure.to_string(),
            Reply::Accept(_) | Reply::Error(_) | Reply::Ok => {
                self.peer_misbehaved(id, PeerMisbehavior::UnexpectedReply { to });
                format!("unexpected answer to {what}")
            }
        };
        self.abandon(
            now,
            id,
            ErrorInfo::new(code, format!("{what} failed: {why}")),
        );
    }

    pub(super) fn on_accept(&mut self, now: Timestamp, id: &DelegationId, accept: Accept) {
        let Some(d) = self.delegations.get_mut(id) else {
            return;
        };
        let invited_at = match d.phase {
            Phase::Inviting { invited_at } => invited_at,
            Phase::Accepted { .. }
            | Phase::Started { .. }
            | Phase::Finishing(_)
            | Phase::Ended { .. } => None,
        };
        if let Some(c) = accept.constraints {
            if let Some(mode) = c.accepted_access_mode {
                d.access = d.req.access_mode.min(mode);
            }
            if let (Some(max), Some(invited)) = (c.max_ttl_seconds, invited_at) {
                let capped = invited.saturating_add(Duration::from_secs(max));
                if d.expires_at.is_none_or(|e| capped < e) {
                    d.expires_at = Some(capped);
                }
            }
        }
        d.features = accept
            .features
            .iter()
            .filter(|f| self.config.features.contains(f))
            .cloned()
            .collect();
        let expires_at = d.expires_at.unwrap_or(now);
        d.accept = Some(accept);
        d.phase = Phase::Accepted {
            transport: Preparation::Preparing,
            stream: Stream::Opening,
            stream_failures: 0,
        };
        let out_prepare = DelegatorOutput::PrepareTransport {
            id: id.clone(),
            transport: d.req.transport.clone(),
            access_mode: d.access,
            expires_at,
            layout: ArchiveLayout::for_dialect(d.req.dialect),
            delivery: if self.config.serve_archives
                && d.features.iter().any(|f| f == feature::ARCHIVE_URL)
            {
                ArchiveDelivery::ByUrl
            } else {
                ArchiveDelivery::Inline
            },
        };
        let out_stream = DelegatorOutput::OpenEventStream {
            id: id.clone(),
            peer: d.req.peer.clone(),
        };
        self.transition(now, id, DelegationTransition::ReceiveAccept, None);
        self.core.timers.set(id, Timer::Lease, expires_at);
        self.core.outputs.push_back(out_prepare);
        self.core.outputs.push_back(out_stream);
    }

    pub(super) fn on_prepared(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        result: Result<TransportHandle, PrepareFailure>,
        archive_token: Option<crate::engine::auth::SecretDigest>,
    ) -> Result<(), UsageError> {
        let expires_at = self.get_mut(id)?.expires_at;
        if let (Ok(_), Some(token), Some(expires_at)) = (&result, archive_token, expires_at) {
            // Revoked when the transport is released (also right away, below, if the
            // delegation already finished).
            self.archive_grants.grant(&token, id, expires_at);
        }
        let result = result.map_err(|f| f.to_error_info());
        let d = self.get_mut(id)?;
        match (&mut d.phase, result) {
            (
                Phase::Accepted {
                    transport: transport @ Preparation::Preparing,
                    ..
                },
                Ok(handle),
            ) => {
                *transport = Preparation::Prepared(handle);
                self.maybe_send_start(now, id);
            }
            (
                Phase::Accepted {
                    transport: Preparation::Preparing,
                    ..
                },
                Err(e),
            ) => {
                // Nothing is held: once abandoned, the delegation ends without a release.
                self.abandon(now, id, e);
                if let Some(Phase::Finishing(f)) =
                    self.delegations.get_mut(id).map(|d| &mut d.phase)
                {
                    f.transport = Release::Free;
                }
                self.maybe_end(now, id);
            }
            (Phase::Finishing(f), result) if f.transport == Release::Preparing => {
                // Finished meanwhile: release what was prepared (the handle is never used).
                if result.is_ok() {
                    f.transport = Release::Held;
                    self.wind_down(now, id);
                } else {
                    f.transport = Release::Free;
                    self.maybe_end(now, id);
                }
            }
            // Not preparing (a duplicate or stale answer): nothing changes.
            (
                Phase::Inviting { .. }
                | Phase::Accepted { .. }
                | Phase::Started { .. }
                | Phase::Finishing(_)
                | Phase::Ended { .. },
                _,
            ) => {}
        }
        Ok(())
    }

    /// Sends START once the delegation is accepted, its transport prepared and its event stream
    /// open; START takes the handle.
    pub(super) fn maybe_send_start(&mut self, now: Timestamp, id: &DelegationId) {
        let Some(d) = self.delegations.get_mut(id) else {
            return;
        };
        let Phase::Accepted {
            transport: Preparation::Prepared(_),
            stream: Stream::Open,
            stream_failures,
        } = d.phase
        else {
            return;
        };
        let Phase::Accepted {
            transport: Preparation::Prepared(handle),
            ..
        } = std::mem::replace(
            &mut d.phase,
            Phase::Started {
                stream: Stream::Open,
                stream_failures,
                heard_terminal: false,
            },
        )
        else {
            return;
        };
        let expires_at = d.expires_at.unwrap_or(now);
        let out = DelegatorOutput::SendMessage {
            id: id.clone(),
            to: Outbound::Start,
            peer: d.req.peer.clone(),
            message: Message::Start(Start {
                delegation_id: id.clone(),
                lease: ActiveLease {
                    expires_at,
                    access_mode: d.access,
                },
                handle,
            }),
            dialect: d.req.dialect,
        };
        self.transition(now, id, DelegationTransition::SendStart, None);
        self.core.outputs.push_back(out);
    }
}

/// The INVITE of a delegation as its request defines it (what the journal keeps); the wire
/// INVITE adds the export name, retention and features of this delegator.
pub(super) fn invite_of(id: &DelegationId, req: &DelegateRequest) -> Invite {
    Invite {
        delegation_id: id.clone(),
        task: req.task.clone(),
        lease: LeaseRequest {
            ttl_seconds: req.ttl_seconds,
            access_mode: req.access_mode,
        },
        resources: req.resources.clone(),
        export_name: None,
        retention_ms: None,
        transport: Some(req.transport.clone()),
        auth: req.auth.clone(),
        features: Vec::new(),
    }
}

#[cfg(test)]
#[allow(clippy::wildcard_enum_match_arm)] // tests pick the outputs they look at
mod tests {
    use super::*;
    use crate::engine::delegator::tests::{accept, drain, events, id, invited, running, t};
    use crate::wire::ArchiveHandle;

    fn answer(d: &mut Delegator, to: Outbound, reply: Reply) -> Vec<DelegatorOutput> {
        d.handle(
            t(2),
            DelegatorInput::Reply {
                id: id(),
                to,
                reply,
            },
        )
        .unwrap();
        drain(d)
    }

    fn misbehaviours(out: &[DelegatorOutput]) -> Vec<PeerMisbehavior> {
        events(out)
            .into_iter()
            .filter_map(|e| match e {
                DelegatorEvent::PeerMisbehaved { reason, .. } => Some(reason.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn an_invite_answered_with_a_bare_ok_is_the_executors_fault_and_abandons() {
        let mut d = invited();
        let out = answer(&mut d, Outbound::Invite, Reply::Ok);
        assert_eq!(
            misbehaviours(&out),
            vec![PeerMisbehavior::UnexpectedReply {
                to: Outbound::Invite
            }]
        );
        assert_eq!(d.get(&id()).unwrap().state, DelegationState::Error);
        assert!(out.iter().any(|o| matches!(
            o,
            DelegatorOutput::SendMessage {
                message: Message::Error(_),
                ..
            }
        )));
    }

    #[test]
    fn an_unusable_answer_is_the_executors_fault() {
        let mut d = invited();
        let failure = RequestFailure::Unusable("HTTP 502: <html>".into());
        let out = answer(&mut d, Outbound::Invite, Reply::Failed(failure));
        assert!(matches!(
            misbehaviours(&out).as_slice(),
            [PeerMisbehavior::UnusableReply { to: Outbound::Invite, detail }] if detail.contains("502")
        ));
        let err = d.get(&id()).unwrap().error.unwrap();
        assert_eq!(err.code, ErrorCode::Timeout);
        assert_eq!(err.message, "INVITE failed: HTTP 502: <html>");
    }

    #[test]
    fn a_network_failure_is_nobodys_fault() {
        let mut d = invited();
        let failure = RequestFailure::Network("connection refused".into());
        let out = answer(&mut d, Outbound::Invite, Reply::Failed(failure));
        assert!(misbehaviours(&out).is_empty());
        assert_eq!(d.get(&id()).unwrap().state, DelegationState::Error);
    }

    #[test]
    fn failures_are_named_as_they_happened() {
        for (failure, code) in [
            (
                RequestFailure::Unreachable("connect 127.0.0.1:1: refused".into()),
                ErrorCode::Unreachable,
            ),
            (
                RequestFailure::TimedOut("timed out after 30s".into()),
                ErrorCode::Timeout,
            ),
            (
                RequestFailure::Network("reset".into()),
                ErrorCode::Unreachable,
            ),
        ] {
            let mut d = invited();
            answer(&mut d, Outbound::Invite, Reply::Failed(failure));
            let err = d.get(&id()).unwrap().error.unwrap();
            assert_eq!(err.code, code, "{err:?}");
            assert!(
                !err.hint.unwrap_or_default().contains("timed out") || code == ErrorCode::Timeout
            );
        }
    }

    #[test]
    fn start_waits_for_both_the_transport_and_the_event_stream() {
        let mut d = invited();
        let out = answer(&mut d, Outbound::Invite, Reply::Accept(accept()));
        assert!(out
            .iter()
            .any(|o| matches!(o, DelegatorOutput::PrepareTransport { .. })));
        assert!(out
            .iter()
            .any(|o| matches!(o, DelegatorOutput::OpenEventStream { .. })));
        let handle = TransportHandle::Archive(ArchiveHandle {
            data: ArchiveData {
                base64: Some(String::new()),
                url: None,
            },
            checksum: "00".into(),
            size_bytes: None,
        });
        d.handle(
            t(3),
            DelegatorInput::TransportPrepared {
                id: id(),
                result: Ok(handle.clone()),
                archive_token: None,
            },
        )
        .unwrap();
        assert!(
            drain(&mut d).is_empty(),
            "no START before the stream is open"
        );
        d.handle(t(4), DelegatorInput::EventStreamOpened { id: id() })
            .unwrap();
        let out = drain(&mut d);
        let starts: Vec<_> = out
            .iter()
            .filter_map(|o| match o {
                DelegatorOutput::SendMessage {
                    message: Message::Start(s),
                    ..
                } => Some(s),
                _ => None,
            })
            .collect();
        assert_eq!(starts.len(), 1);
        assert_eq!(starts[0].handle, handle);
        // START took the handle: a second "opened" sends nothing.
        d.handle(t(5), DelegatorInput::EventStreamOpened { id: id() })
            .unwrap();
        assert!(drain(&mut d).is_empty());
    }

    #[test]
    fn an_accept_after_a_cancel_frees_the_executors_assignment() {
        let mut d = invited();
        d.cancel(t(2), &id()).unwrap();
        drain(&mut d);
        let out = answer(&mut d, Outbound::Invite, Reply::Accept(accept()));
        assert!(out.iter().any(|o| matches!(
            o,
            DelegatorOutput::SendMessage {
                message: Message::Error(_),
                ..
            }
        )));
        assert!(!out
            .iter()
            .any(|o| matches!(o, DelegatorOutput::PrepareTransport { .. })));
        assert!(misbehaviours(&out).is_empty(), "a race, not misbehaviour");
    }

    #[test]
    fn a_late_odd_answer_to_start_changes_nothing() {
        let mut d = running(SnapshotMode::Auto);
        // Running already: a late odd answer to START changes nothing.
        let out = answer(&mut d, Outbound::Start, Reply::Accept(accept()));
        assert!(out.is_empty());
        assert_eq!(d.get(&id()).unwrap().state, DelegationState::Running);
    }

    #[test]
    fn resources_are_never_lent_with_more_access_than_the_delegation_asks() {
        let mut d = Delegator::new(DelegatorConfig::default());
        let mut req = crate::engine::delegator::tests::request(SnapshotMode::Auto);
        req.access_mode = AccessMode::Ro;
        d.delegate(t(0), req).unwrap();
        let v = d.get(&id()).unwrap();
        assert!(v.request.resources.iter().all(|r| r.mode == AccessMode::Ro));
    }

    #[test]
    fn every_message_names_the_request_its_answer_belongs_to() {
        let mut d = Delegator::new(DelegatorConfig::default());
        d.delegate(
            t(0),
            crate::engine::delegator::tests::request(SnapshotMode::Auto),
        )
        .unwrap();
        d.handle(
            t(1),
            DelegatorInput::ScanCompleted {
                id: id(),
                result: Ok(WorkspaceStats::default()),
            },
        )
        .unwrap();
        d.cancel(t(2), &id()).unwrap();
        let out = drain(&mut d);
        let sent: Vec<(Outbound, &str)> = out
            .iter()
            .filter_map(|o| match o {
                DelegatorOutput::SendMessage { to, message, .. } => Some((*to, message.type_str())),
                _ => None,
            })
            .collect();
        assert_eq!(sent, vec![(Outbound::Invite, "INVITE")]);
        assert!(out
            .iter()
            .any(|o| matches!(o, DelegatorOutput::SendCancel { .. })));
        assert!(Outbound::Cancel.is_farewell() && Outbound::Ack.is_farewell());
        assert!(Outbound::Error.is_farewell());
        assert!(!Outbound::Invite.is_farewell() && !Outbound::Start.is_farewell());
    }

    #[test]
    fn started_means_start_went_out_or_the_delegation_ended_without_error() {
        let other = DelegationId::new("dlg_other").unwrap();
        let changed = |to| DelegatorEvent::StateChanged {
            id: id(),
            from: DelegationState::Accepted,
            to,
        };
        assert_eq!(
            changed(DelegationState::Started).start_outcome(&id()),
            Some(Ok(()))
        );
        assert_eq!(changed(DelegationState::Invited).start_outcome(&id()), None);
        assert_eq!(
            changed(DelegationState::Started).start_outcome(&other),
            None
        );
        let ended = |error| DelegatorEvent::Ended {
            id: id(),
            state: DelegationState::Error,
            result: None,
            error,
        };
        let declined = ErrorInfo::bare(ErrorCode::Declined, "no");
        assert_eq!(
            ended(Some(declined.clone())).start_outcome(&id()),
            Some(Err(declined))
        );
        let cancelled = ErrorInfo::bare(ErrorCode::Cancelled, "by you");
        assert_eq!(ended(Some(cancelled)).start_outcome(&id()), Some(Ok(())));
    }
}
