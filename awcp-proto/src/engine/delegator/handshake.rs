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
            .insert(id.clone(), Box::new(Delegation::new(now, req)));
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
            export_name: (d.req.dialect == Dialect::Seed).then(|| export_name(id)),
            retention_ms: Some(
                u64::try_from(self.config.retention.as_millis()).unwrap_or(u64::MAX),
            ),
            features: offered_features(
                &self.config.features,
                d.req.keep_open && d.req.dialect == Dialect::Reference,
            ),
            ..invite_of(id, &d.req)
        };
        let peer = d.peer.clone();
        let dialect = d.req.dialect;
        self.transition(now, id, DelegationTransition::SendInvite, None);
        self.core.timers.set((id.clone(), Timer::Lease), expires_at);
        self.core.outputs.push_back(DelegatorOutput::SendMessage {
            id: id.clone(),
            to: Outbound::Invite,
            peer,
            message: Box::new(Message::Invite(invite)),
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
                self.on_accept(now, id, *accept);
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
            (Outbound::Continue, reply) => self.on_continue_reply(now, id, reply),
            (Outbound::Close, reply) => self.on_close_reply(now, id, reply),
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
        let what = to.to_string();
        // Said as it happened: a timeout is TIMEOUT, not reaching the executor is UNREACHABLE.
        let code = match &reply {
            Reply::Failed(RequestFailure::TimedOut(_)) => ErrorCode::Timeout,
            Reply::Failed(RequestFailure::Unreachable(_) | RequestFailure::Network(_)) => {
                ErrorCode::Unreachable
            }
            Reply::Failed(RequestFailure::Local(_)) => ErrorCode::TransportError,
            // An answer that is not AWCP at all (a web page, a 501): most likely not an
            // executor's URL. Said so, rather than as a timeout.
            Reply::Failed(RequestFailure::Unusable(_)) => ErrorCode::ProtocolError,
            Reply::Accept(_) | Reply::Error(_) | Reply::Ok => ErrorCode::Timeout,
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
                format!("the answer is not AWCP: {detail}")
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
        // Agreed: what ACCEPT names of what INVITE offered.
        let offered = offered_features(
            &self.config.features,
            d.req.keep_open && d.req.dialect == Dialect::Reference,
        );
        d.features = Feature::agreed(&accept.features, &offered);
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
            layout: d.layout(),
            delivery: if self.config.serve_archives && d.features.contains(&Feature::ArchiveUrl) {
                ArchiveDelivery::ByUrl
            } else {
                ArchiveDelivery::Inline
            },
        };
        let out_stream = DelegatorOutput::OpenEventStream {
            id: id.clone(),
            peer: d.peer.clone(),
            last_event_id: d.last_event_id,
        };
        self.transition(now, id, DelegationTransition::ReceiveAccept, None);
        self.core.timers.set((id.clone(), Timer::Lease), expires_at);
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
        if let (Ok(handle), Some(token), Some(expires_at)) = (&result, archive_token, expires_at) {
            // Revoked when the transport is released (also right away, below, if the
            // delegation already finished). A storage handle's token opens its two objects
            // (the local provider: objects this delegator serves itself).
            if matches!(handle, TransportHandle::Storage(_)) {
                self.archive_grants.grant_objects(&token, id, expires_at);
            } else if matches!(handle, TransportHandle::Git(_)) {
                // The repository this delegator serves: pushes only to a read-write one.
                let push = self.get_mut(id).is_ok_and(|d| d.access == AccessMode::Rw);
                self.archive_grants
                    .grant_repository(&token, id, expires_at, push);
            } else {
                self.archive_grants.grant(&token, id, expires_at);
            }
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
            peer: d.peer.clone(),
            message: Box::new(Message::Start(Start {
                delegation_id: id.clone(),
                lease: ActiveLease {
                    expires_at,
                    access_mode: d.access,
                },
                handle,
            })),
            dialect: d.req.dialect,
        };
        self.transition(now, id, DelegationTransition::SendStart, None);
        self.core.outputs.push_back(out);
    }
}

/// The seed dialect's export name of `id` (`awcp/<id>`), built without `format!` (one
/// allocation).
fn export_name(id: &DelegationId) -> String {
    let mut name = String::with_capacity(5 + id.as_str().len());
    name.push_str("awcp/");
    name.push_str(id.as_str());
    name
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
mod tests;

/// What INVITE offers: the configured extensions, with `multi-round` exactly when the
/// delegation asks to be kept open (an executor that agrees ends rounds with `round_done`)
/// and the executor speaks the reference's dialect (a seed result rides on `done`, which a
/// round does not send).
pub(super) fn offered_features(configured: &[Feature], keep_open: bool) -> Vec<Feature> {
    let mut features: Vec<Feature> = configured
        .iter()
        .filter(|f| **f != Feature::MultiRound)
        .cloned()
        .collect();
    if keep_open {
        features.push(Feature::MultiRound);
    }
    features
}
